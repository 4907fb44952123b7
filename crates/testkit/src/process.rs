//! Processes of the binaries under test: which binaries ([`Bins`]), free
//! loopback ports, one server process that can be killed, paused and
//! started again ([`Proc`]), signals, and what `/proc` says of a process.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The binaries under test, as Cargo built them for the test binary that
/// names them: made by [`bins!`](crate::bins), which reads
/// `CARGO_BIN_EXE_*` where the test is compiled. The kit never looks for a
/// binary itself: a path guessed from the target directory may be a stale
/// build (or one without the store's fault hooks).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bins {
    /// `seqsvr` (store, alloc, dev, certs).
    pub seqsvr: &'static str,
    /// `seqctl`.
    pub seqctl: &'static str,
}

/// The [`Bins`] of the package whose test or bench this is expanded in
/// (only the `seqsvr` package's own tests and benches have them).
#[macro_export]
macro_rules! bins {
    () => {
        $crate::Bins {
            seqsvr: env!("CARGO_BIN_EXE_seqsvr"),
            seqctl: env!("CARGO_BIN_EXE_seqctl"),
        }
    };
}

/// Ports [`free_port`] hands out: below the kernel's ephemeral range
/// (Linux: 32768–60999), so that no outgoing connection of this machine
/// takes a port between its release here and a child binding it.
const PORTS: std::ops::Range<u16> = 20_000..32_000;

/// A free loopback port for a child process to bind: one that binds now,
/// drawn from [`PORTS`] and never handed out twice by this process.
///
/// A port bound to `127.0.0.1:0` and released comes from the ephemeral
/// range, where the many client connections of a running test also take
/// their local ports: one of them sometimes took a port in the moment
/// before the child bound it ("Address already in use"). Test binaries run
/// one at a time, and within one the counter keeps parallel tests apart.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(u32::MAX);
    let span = u32::from(PORTS.end - PORTS.start);
    if NEXT.load(Ordering::Relaxed) == u32::MAX {
        // A different start per process, so that a port a previous test
        // binary's child may still hold (in TIME_WAIT) is not first in line.
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let seed = (nanos ^ std::process::id().wrapping_mul(2_654_435_761)) % span;
        let _ = NEXT.compare_exchange(u32::MAX, seed, Ordering::Relaxed, Ordering::Relaxed);
    }
    for _ in 0..span {
        let k = NEXT.fetch_add(1, Ordering::Relaxed) % span;
        let port = PORTS.start + k as u16;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free loopback port in {PORTS:?}")
}

/// Sends `sig` to `pid`.
pub fn signal(pid: u32, sig: i32) {
    // SAFETY: kill(2) on a child's pid has no memory effects here.
    unsafe { libc::kill(pid as i32, sig) };
}

/// "N CPUs, load average a b c at start": the first line of a bench's
/// report, so figures are read against how busy the machine was.
pub fn machine_banner() -> String {
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let load: Vec<&str> = load.split_whitespace().take(3).collect();
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    format!("{cpus} CPUs, load average {} at start", load.join(" "))
}

/// CPU seconds (user + system) process `pid` has used, from /proc (0 if
/// it is gone).
pub fn cpu_of(pid: u32) -> f64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0.0;
    };
    // Fields after the command name (which may hold spaces): state is 3rd,
    // utime 14th, stime 15th.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = f.get(11).and_then(|v| v.parse().ok()).unwrap_or(0)
        + f.get(12).and_then(|v| v.parse().ok()).unwrap_or(0);
    // SAFETY: sysconf has no memory effects.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    ticks as f64 / hz
}

/// Resident memory of process `pid` in bytes, from /proc (0 if it is gone).
pub fn rss_of(pid: u32) -> u64 {
    let Ok(statm) = std::fs::read_to_string(format!("/proc/{pid}/statm")) else {
        return 0;
    };
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    // SAFETY: sysconf has no memory effects.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(1) as u64;
    pages * page
}

/// A command that runs `program` under `under` (a profiler and its
/// arguments), or `program` itself if `under` is empty.
pub fn command_under(under: &[String], program: impl AsRef<std::ffi::OsStr>) -> Command {
    match under.split_first() {
        Some((runner, args)) => {
            let mut c = Command::new(runner);
            c.args(args).arg(program);
            c
        }
        None => Command::new(program),
    }
}

/// One server process that can be killed and started again.
pub struct Proc {
    /// Its name (for logs).
    pub name: String,
    /// The arguments it is started with.
    args: Vec<String>,
    /// Its log file.
    log: PathBuf,
    /// The `seqsvr` binary it runs.
    program: &'static str,
    /// A program (and its arguments) that runs `seqsvr` (empty: none).
    under: Vec<String>,
    /// The running child, if any.
    child: Option<Child>,
}

impl Proc {
    /// Starts `seqsvr args…`, logging to `log`.
    pub fn start(bins: Bins, name: &str, args: Vec<String>, log: PathBuf) -> Proc {
        Proc::start_under(bins, Vec::new(), name, args, log)
    }

    /// Starts `under… seqsvr args…` (e.g. under a profiler), logging to
    /// `log`.
    pub fn start_under(
        bins: Bins,
        under: Vec<String>,
        name: &str,
        args: Vec<String>,
        log: PathBuf,
    ) -> Proc {
        let mut p = Proc {
            name: name.into(),
            program: bins.seqsvr,
            args,
            log,
            under,
            child: None,
        };
        p.restart();
        p
    }

    /// Starts the process again (after a kill).
    pub fn restart(&mut self) {
        assert!(self.child.is_none(), "{} is running", self.name);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .unwrap();
        let child = command_under(&self.under, self.program)
            .args(&self.args)
            .env("RUST_LOG", "info,openraft=warn")
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        self.child = Some(child);
    }

    /// kill -9, and reap.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            signal(c.id(), libc::SIGKILL);
            let _ = c.wait();
        }
    }

    /// SIGTERM (a planned stop), then waits up to `within` for the
    /// process to exit and reaps it; returns how it exited and how long it
    /// took (`None`: still running, killed with SIGKILL).
    pub fn terminate(&mut self, within: Duration) -> Option<(std::process::ExitStatus, Duration)> {
        let mut c = self.child.take()?;
        let start = Instant::now();
        signal(c.id(), libc::SIGTERM);
        while start.elapsed() < within {
            if let Ok(Some(status)) = c.try_wait() {
                return Some((status, start.elapsed()));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        signal(c.id(), libc::SIGKILL);
        let _ = c.wait();
        None
    }

    /// Runs it under `under` (a program and its arguments, e.g. `faketime
    /// -f -2s`; empty: none) from its next [`Proc::restart`] on.
    pub fn set_under(&mut self, under: Vec<String>) {
        self.under = under;
    }

    /// The pid, if running.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    /// Whether it is running.
    pub fn running(&self) -> bool {
        self.child.is_some()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Some(pid) = self.pid() {
            signal(pid, libc::SIGCONT);
        }
        self.kill9();
    }
}

/// Every `*.log` file under `dir`, concatenated (tail of each).
pub fn logs_in(dir: &Path) -> String {
    let mut out = String::new();
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    files.sort();
    for p in files
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
    {
        let text = std::fs::read_to_string(&p).unwrap_or_default();
        let tail: Vec<&str> = text.lines().rev().take(30).collect();
        out += &format!("== {}\n", p.display());
        for l in tail.into_iter().rev() {
            out += l;
            out.push('\n');
        }
    }
    out
}
