//! The seqsvr side's processes: starting the cluster, and the CPU time of
//! the bench and its servers.

use seqsvr_alloc::node::AllocNodeConfig;
use seqsvr_core::SetSpec;
use seqsvr_store::node::InitialAlloc;

use crate::support::{free_port, Proc, SetCluster, StoreCluster};
use crate::{SECTION_SIZE, STEP, UIDS};

/// Starts 3 store replicas and one AllocSvr with `threads` workers owning
/// every section.
pub fn start_cluster(threads: usize) -> SetCluster {
    let set = SetSpec {
        section_size: SECTION_SIZE,
        step: STEP,
        ..SetSpec::new(0, 0..UIDS)
    };
    let id = "alloc-1".to_string();
    let [addr, peer_addr, admin_addr] = [(); 3].map(|()| format!("127.0.0.1:{}", free_port()));
    let initial = vec![InitialAlloc {
        id: id.clone(),
        first: 0,
        count: set.section_count(),
    }];
    let store = StoreCluster::start_with(3, set, initial);
    // Only the required fields: everything else takes `AllocNodeConfig`'s
    // defaults, as an operator's minimal file would.
    let store_list: Vec<String> = store.peer_addrs.iter().map(|a| format!("{a:?}")).collect();
    let text = format!(
        "id = {id:?}\naddr = {addr:?}\npeer_addr = {peer_addr:?}\nadmin_addr = {admin_addr:?}\nstore = [{}]\n",
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
    let alloc = Proc::start(&id, args, store.dir.path().join(format!("{id}.log")));
    SetCluster {
        store,
        alloc_addrs: vec![addr],
        allocs: vec![alloc],
    }
}

/// CPU seconds (user + system) of process `pid`, from /proc.
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

/// CPU seconds of this process (`RUSAGE_SELF`) or of its reaped children
/// (`RUSAGE_CHILDREN`).
pub fn rusage(who: i32) -> f64 {
    // SAFETY: getrusage writes into the zeroed struct we own.
    let mut r: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(who, &mut r) };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(r.ru_utime) + tv(r.ru_stime)
}

/// CPU seconds of the bench process, the AllocSvr and the stores (summed).
#[derive(Clone, Copy)]
pub struct Cpu {
    pub bench: f64,
    pub alloc: f64,
    pub stores: f64,
}

impl Cpu {
    pub fn now(cluster: &SetCluster) -> Cpu {
        Cpu {
            bench: rusage(libc::RUSAGE_SELF),
            alloc: cluster.allocs[0].pid().map(cpu_of).unwrap_or(0.0),
            stores: cluster
                .store
                .procs
                .iter()
                .filter_map(|p| p.pid())
                .map(cpu_of)
                .sum(),
        }
    }
}

/// `x` CPU seconds over `wall` seconds, in % of one core.
pub fn pct(x: f64, wall: f64) -> f64 {
    100.0 * x / wall
}
