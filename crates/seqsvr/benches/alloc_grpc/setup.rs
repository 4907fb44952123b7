//! The seqsvr side's processes: starting the cluster, and the CPU time of
//! the bench and its servers.

use seqsvr_alloc::node::AllocNodeConfig;
use seqsvr_core::SetSpec;
use seqsvr_store::node::InitialAlloc;

use crate::{SECTION_SIZE, UIDS};
pub use seqsvr_testkit::cpu_of;
use seqsvr_testkit::{free_port, Proc, SetCluster, StoreCluster};

/// Starts 3 store replicas and one AllocSvr with `threads` workers owning
/// every section, which take ceilings `step` at a time.
///
/// Returns the cluster and the AllocSvr's metrics address.
pub fn start_cluster(threads: usize, step: u64) -> (SetCluster, String) {
    start_cluster_under(threads, step, Vec::new())
}

/// [`start_cluster`], with the AllocSvr run under `under` (a profiler and
/// its arguments; empty: none).
pub fn start_cluster_under(threads: usize, step: u64, under: Vec<String>) -> (SetCluster, String) {
    let set = SetSpec {
        section_size: SECTION_SIZE,
        step,
        ..SetSpec::new(0, 0..UIDS)
    };
    let id = "alloc-1".to_string();
    let [addr, peer_addr, admin_addr, metrics_addr] =
        [(); 4].map(|()| format!("127.0.0.1:{}", free_port()));
    let initial = vec![InitialAlloc {
        id: id.clone(),
        first: 0,
        count: set.section_count(),
    }];
    let store = StoreCluster::start_with(crate::BINS, 3, set, initial);
    // Only the required fields and the metrics address: everything else
    // takes `AllocNodeConfig`'s defaults, as an operator's minimal file
    // would.
    let store_list: Vec<String> = store.peer_addrs.iter().map(|a| format!("{a:?}")).collect();
    let text = format!(
        "id = {id:?}\naddr = {addr:?}\npeer_addr = {peer_addr:?}\nadmin_addr = {admin_addr:?}\nmetrics_addr = {metrics_addr:?}\nstore = [{}]\n",
        store_list.join(", ")
    );
    AllocNodeConfig::from_toml(&text).expect("a valid AllocSvr config");
    let path = store.dir.path().join(format!("{id}.toml"));
    std::fs::write(&path, text).unwrap();
    let args = vec![
        "alloc".into(),
        "--config".into(),
        path.display().to_string(),
        "--threads".into(),
        threads.to_string(),
    ];
    let log = store.dir.path().join(format!("{id}.log"));
    let alloc = Proc::start_under(crate::BINS, under, &id, args, log);
    let cluster = SetCluster {
        store,
        alloc_addrs: vec![addr],
        allocs: vec![alloc],
        resp_addrs: vec![],
        http_addrs: vec![],
        forward: true,
        tune: |_| {},
    };
    (cluster, metrics_addr)
}

/// The value of counter `name` with first label `event="{event}"` in the
/// Prometheus text served on `addr` (0 if absent).
pub fn scrape(addr: &str, name: &str) -> u64 {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect(addr) else {
        return 0;
    };
    let _ = s.write_all(b"GET /metrics HTTP/1.0\r\nHost: bench\r\n\r\n");
    let mut text = String::new();
    let _ = s.read_to_string(&mut text);
    // `name{alloc="…",set="…"} value`: match the name, take the value.
    let key = format!("{name}{{");
    text.lines()
        .filter(|l| l.starts_with(&key))
        .find_map(|l| l.rsplit(' ').next())
        .and_then(|v| v.trim().parse::<f64>().ok())
        .map_or(0, |v| v as u64)
}

/// CPU seconds of this process (`RUSAGE_SELF`) or of its reaped children
/// (`RUSAGE_CHILDREN`).
pub fn rusage(who: i32) -> f64 {
    // SAFETY: getrusage writes into the zeroed struct we own.
    let mut r: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(who, &mut r) };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(r.ru_utime) + tv(r.ru_stime)
}

/// The server a phase drives: its name in the figures and the processes
/// whose CPU it reports.
pub struct Target {
    /// `seqsvr` or `bare`.
    pub name: &'static str,
    /// The process serving the calls.
    pub server: Option<u32>,
    /// The store replicas behind it (none for the bare server).
    pub stores: Vec<u32>,
}

impl Target {
    /// The seqsvr cluster's AllocSvr and stores.
    pub fn seqsvr(cluster: &SetCluster) -> Target {
        Target {
            name: "seqsvr",
            server: cluster.allocs[0].pid(),
            stores: cluster.store.procs.iter().filter_map(|p| p.pid()).collect(),
        }
    }
}

/// CPU seconds of the bench process, the server and the stores (summed),
/// and the server's own counters.
#[derive(Clone, Copy)]
pub struct Cpu {
    pub bench: f64,
    pub server: f64,
    pub stores: f64,
    pub counters: Counters,
}

impl Cpu {
    pub fn now(target: &Target) -> Cpu {
        Cpu {
            bench: rusage(libc::RUSAGE_SELF),
            server: target.server.map(cpu_of).unwrap_or(0.0),
            stores: target.stores.iter().copied().map(cpu_of).sum(),
            counters: target.server.map(Counters::of).unwrap_or_default(),
        }
    }
}

/// Where a server process's time goes, from /proc: user and kernel CPU
/// seconds, write system calls (`write`, `writev`: on a gRPC server, one
/// per flush of a connection's send buffer, so fewer per call means
/// answers went out in larger batches) and context switches over all its
/// threads.
#[derive(Clone, Copy, Default)]
pub struct Counters {
    pub user: f64,
    pub kernel: f64,
    pub writes: u64,
    pub switches: u64,
}

impl Counters {
    pub fn of(pid: u32) -> Counters {
        let read = |path: String| std::fs::read_to_string(path).unwrap_or_default();
        let field = |text: &str, key: &str| -> u64 {
            text.lines()
                .find_map(|l| l.strip_prefix(key))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0)
        };
        let stat = read(format!("/proc/{pid}/stat"));
        let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
        let f: Vec<&str> = rest.split_whitespace().collect();
        // SAFETY: sysconf has no memory effects.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
        let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0) as f64;
        let switches = std::fs::read_dir(format!("/proc/{pid}/task"))
            .into_iter()
            .flatten()
            .flatten()
            .map(|t| {
                let s = read(format!("{}/status", t.path().display()));
                field(&s, "voluntary_ctxt_switches:") + field(&s, "nonvoluntary_ctxt_switches:")
            })
            .sum();
        Counters {
            user: ticks(11) / hz,
            kernel: ticks(12) / hz,
            writes: field(&read(format!("/proc/{pid}/io")), "syscw:"),
            switches,
        }
    }

    /// `self - before`, per call, as printed under a phase's figures.
    pub fn per_call(&self, before: &Counters, calls: f64) -> String {
        let calls = calls.max(1.0);
        format!(
            "server per call: user {:.1} µs, kernel {:.1} µs, {:.3} writes, {:.3} context switches",
            (self.user - before.user) * 1e6 / calls,
            (self.kernel - before.kernel) * 1e6 / calls,
            self.writes.saturating_sub(before.writes) as f64 / calls,
            self.switches.saturating_sub(before.switches) as f64 / calls,
        )
    }
}

/// `x` CPU seconds over `wall` seconds, in % of one core.
pub fn pct(x: f64, wall: f64) -> f64 {
    100.0 * x / wall
}
