//! `--instructions`: what a call costs each server, in instructions
//! counted by callgrind.
//!
//! Rates on a shared 2-core VM move by ±15 % from one round to the next,
//! more than the few per cent the AllocSvr's serving path may add over a
//! bare tonic server. An instruction count does not move with the
//! machine's load: callgrind counts every instruction a process runs in
//! user space, the same for the same work. So both servers run under
//! `valgrind --tool=callgrind`, and for each shape and client the bench
//! makes a fixed number of calls after a warm-up, zeroing each server's
//! counts before them (`callgrind_control -z`) and dumping them after
//! (`callgrind_control -d`).
//!
//! What the figures leave out: kernel time (system calls, the loopback
//! TCP stack), which is the same per call for both servers when they make
//! the same system calls (the default run prints writes per call), and
//! cache and branch behaviour. What they include that is not per call:
//! the servers' background work during the window (the AllocSvr renews
//! its lease and polls routes; under callgrind a call is some 50 times
//! slower, so that work weighs far more per call than it does natively).
//! It is measured first, with each server idle, and subtracted.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::load::{calls, Caller};

/// Calls made before counting starts.
const WARM_UP_CALLS: u64 = 2_000;
/// Calls counted per shape, client and server.
pub const COUNTED_CALLS: u64 = 20_000;
/// How long each server's idle background work is counted.
const IDLE: Duration = Duration::from_secs(10);

/// Whether valgrind and callgrind_control can be run.
pub fn available() -> bool {
    ["valgrind", "callgrind_control"].iter().all(|p| {
        Command::new(p)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    })
}

/// The command that runs a server under callgrind, its counts dumped into
/// `dir`.
pub fn under(dir: &Path) -> Vec<String> {
    vec![
        "valgrind".into(),
        "--tool=callgrind".into(),
        format!("--callgrind-out-file={}/%p.out", dir.display()),
        // valgrind's own messages, away from the bench's output.
        format!("--log-file={}/%p.log", dir.display()),
    ]
}

/// One server under callgrind.
pub struct Counted {
    pid: u32,
    dir: PathBuf,
    /// Instructions a second the server runs while idle.
    idle_per_s: f64,
}

impl Counted {
    /// Measures `pid`'s idle background work.
    pub async fn new(pid: u32, dir: &Path) -> Counted {
        let mut c = Counted {
            pid,
            dir: dir.to_path_buf(),
            idle_per_s: 0.0,
        };
        c.control("-z");
        let t = Instant::now();
        tokio::time::sleep(IDLE).await;
        c.control("-d");
        c.idle_per_s = c.last_dump() as f64 / t.elapsed().as_secs_f64();
        c
    }

    /// Instructions per call over [`COUNTED_CALLS`] calls of `batch` uids
    /// by `callers` tasks (after a warm-up), less the idle work of the
    /// same span; and the figure before that subtraction.
    pub async fn per_call(&self, caller: &Caller, batch: usize, callers: usize) -> (f64, f64) {
        let failed = calls(caller, batch, callers, WARM_UP_CALLS).await;
        assert_eq!(failed, 0, "calls failed during the warm-up");
        self.control("-z");
        let t = Instant::now();
        let failed = calls(caller, batch, callers, COUNTED_CALLS).await;
        self.control("-d");
        let secs = t.elapsed().as_secs_f64();
        assert_eq!(failed, 0, "calls failed while counting");
        let total = self.last_dump() as f64;
        let n = COUNTED_CALLS as f64;
        ((total - self.idle_per_s * secs) / n, total / n)
    }

    fn control(&self, what: &str) {
        let out = Command::new("callgrind_control")
            .args([what, &self.pid.to_string()])
            .output()
            .expect("callgrind_control runs");
        assert!(out.status.success(), "callgrind_control {what} failed");
    }

    /// The instruction total of the server's newest dump.
    fn last_dump(&self) -> u64 {
        let prefix = format!("{}.out.", self.pid);
        let newest = std::fs::read_dir(&self.dir)
            .expect("the dump directory")
            .flatten()
            .filter_map(|e| {
                let name = e.file_name().into_string().ok()?;
                let n: u64 = name.strip_prefix(&prefix)?.parse().ok()?;
                Some((n, e.path()))
            })
            .max()
            .expect("a dump")
            .1;
        let text = std::fs::read_to_string(&newest).expect("the dump");
        text.lines()
            .find_map(|l| l.strip_prefix("summary:").or(l.strip_prefix("totals:")))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .expect("an instruction total in the dump")
    }
}
