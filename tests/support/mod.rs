//! Shared harness for the end-to-end tests: starts the real `seqsvr`
//! binary as separate processes on free loopback ports, and kills, pauses
//! and restarts them.

#![allow(dead_code)]

mod check;
pub mod door;
pub mod ids;
mod partition;
pub mod sets;
#[allow(unused_imports)] // not every suite scrapes or checks
pub use check::*;
#[allow(unused_imports)] // not every suite cuts a replica off
pub use partition::isolate;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use seqsvr_alloc::node::AllocNodeConfig;
use seqsvr_core::SetSpec;
use seqsvr_net::PlaneLimits;
use seqsvr_store::node::{InitialAlloc, LeaseSection, Member, RaftTiming};
use seqsvr_store::StoreConfig;
use seqsvr_store_api::client::plaintext;
use seqsvr_store_api::{AdminClient, PeerClient, ReadClient};

/// A call that AllocSvr answers from its own memory or refuses, never
/// forwarding it to the owner (it carries the mark a forwarded call
/// carries; `docs/architecture/forwarding.md`): for tests asking what one
/// process itself would hand out, as a paused, fenced or replaced
/// AllocSvr.
pub fn from_memory<T>(msg: T) -> tonic::Request<T> {
    let mut r = tonic::Request::new(msg);
    r.metadata_mut()
        .insert(seqsvr_client::FORWARDED_BY, "test".parse().unwrap());
    r
}

/// Short leases so that failover tests run quickly: 2 s lease, 0.5 s margin.
pub fn test_lease() -> LeaseSection {
    LeaseSection {
        lease_ms: 2000,
        margin_ms: 500,
        tick_ms: 50,
    }
}

/// How often test AllocSvrs renew their lease, in ms.
pub const TEST_RENEW_MS: u64 = 300;

/// The `seqsvr` binary under test.
pub fn seqsvr_bin() -> &'static str {
    env!("CARGO_BIN_EXE_seqsvr")
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
    /// A program (and its arguments) that runs `seqsvr` (empty: none).
    under: Vec<String>,
    /// The running child, if any.
    child: Option<Child>,
}

impl Proc {
    /// Starts `seqsvr args…`, logging to `log`.
    pub fn start(name: &str, args: Vec<String>, log: PathBuf) -> Proc {
        Proc::start_under(Vec::new(), name, args, log)
    }

    /// Starts `under… seqsvr args…` (e.g. under a profiler), logging to
    /// `log`.
    pub fn start_under(under: Vec<String>, name: &str, args: Vec<String>, log: PathBuf) -> Proc {
        let mut p = Proc {
            name: name.into(),
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
        let child = command_under(&self.under, seqsvr_bin())
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

/// A store group of real processes, each serving three planes on its own
/// loopback ports.
pub struct StoreCluster {
    /// The working directory (data, configs, logs).
    pub dir: tempfile::TempDir,
    /// Replicas' peer-plane addresses (Raft, AllocSvrs), by index
    /// (id = index + 1).
    pub peer_addrs: Vec<String>,
    /// Replicas' client-plane addresses (routes, sections, status).
    pub client_addrs: Vec<String>,
    /// Replicas' admin-plane addresses (operator commands).
    pub admin_addrs: Vec<String>,
    /// The replica processes, by index.
    pub procs: Vec<Proc>,
    /// The set served.
    pub set: SetSpec,
    /// Replicas' metrics listeners (`GET /metrics`), by index; empty unless
    /// started with [`StoreOptions::metrics`].
    pub metrics_addrs: Vec<String>,
}

/// How a store group is started, beyond its set and initial routes.
#[derive(Debug, Clone)]
pub struct StoreOptions {
    /// Raft timing (default: the store's defaults).
    pub raft: RaftTiming,
    /// Lease terms and arbiter tick (default: [`test_lease`]).
    pub lease: LeaseSection,
    /// Serve Prometheus metrics on a free loopback port per replica.
    pub metrics: bool,
    /// The arbiter's rebalance (default: the store's, on).
    pub rebalance: seqsvr_store::arbiter::RebalanceConfig,
}

impl Default for StoreOptions {
    fn default() -> Self {
        Self {
            raft: RaftTiming::default(),
            lease: test_lease(),
            metrics: false,
            rebalance: Default::default(),
        }
    }
}

/// `n` free loopback `host:port`s.
fn free_addrs(n: u64) -> Vec<String> {
    (0..n)
        .map(|_| format!("127.0.0.1:{}", free_port()))
        .collect()
}

impl StoreCluster {
    /// Starts `n` replicas serving `set`.
    pub fn start(n: u64, set: SetSpec) -> StoreCluster {
        Self::start_with(n, set, Vec::new())
    }

    /// Starts `n` replicas serving `set`, with initial routes to `allocs`.
    pub fn start_with(n: u64, set: SetSpec, allocs: Vec<InitialAlloc>) -> StoreCluster {
        Self::start_opts(n, set, allocs, StoreOptions::default())
    }

    /// [`StoreCluster::start_with`], with `opts`.
    pub fn start_opts(
        n: u64,
        set: SetSpec,
        allocs: Vec<InitialAlloc>,
        opts: StoreOptions,
    ) -> StoreCluster {
        let dir = tempfile::tempdir().unwrap();
        let (peer_addrs, client_addrs, admin_addrs) = (free_addrs(n), free_addrs(n), free_addrs(n));
        let metrics_addrs = if opts.metrics {
            free_addrs(n)
        } else {
            Vec::new()
        };
        let members: Vec<Member> = peer_addrs
            .iter()
            .enumerate()
            .map(|(i, a)| Member {
                id: i as u64 + 1,
                addr: a.clone(),
            })
            .collect();
        let procs = (1..=n)
            .map(|id| {
                let i = id as usize - 1;
                let cfg = StoreConfig {
                    id,
                    data_dir: dir.path().join(format!("store-{id}")),
                    listen: None,
                    client_addr: client_addrs[i].clone(),
                    admin_addr: admin_addrs[i].clone(),
                    client_listen: None,
                    admin_listen: None,
                    tls: None,
                    insecure: false,
                    legacy_store_certificates: false,
                    limits: PlaneLimits::default(),
                    metrics_addr: metrics_addrs.get(i).cloned(),
                    members: members.clone(),
                    join: false,
                    added_set: set.set_id != 0,
                    set: set.clone(),
                    raft: opts.raft.clone(),
                    lease: opts.lease.clone(),
                    rebalance: opts.rebalance.clone(),
                    allocs: allocs.clone(),
                    max_concurrent_reads: seqsvr_store::node::DEFAULT_MAX_CONCURRENT_READS,
                };
                let path = dir.path().join(format!("store-{id}.toml"));
                std::fs::write(&path, toml::to_string(&cfg).unwrap()).unwrap();
                let args = vec![
                    "store".into(),
                    "--config".into(),
                    path.display().to_string(),
                ];
                Proc::start(
                    &format!("store-{id}"),
                    args,
                    dir.path().join(format!("store-{id}.log")),
                )
            })
            .collect();
        StoreCluster {
            dir,
            peer_addrs,
            client_addrs,
            admin_addrs,
            procs,
            set,
            metrics_addrs,
        }
    }

    /// Starts replica `id` with fresh addresses, configured to join this
    /// running group (`join = true`: it never initialises; its membership
    /// comes through the log once it is added). Its addresses are appended
    /// to the cluster's lists; returns its peer-plane address.
    pub fn start_joining(&mut self, id: u64) -> String {
        let fresh = |taken: &[String]| loop {
            let a = format!("127.0.0.1:{}", free_port());
            if !taken.contains(&a) {
                return a;
            }
        };
        let peer = fresh(&self.peer_addrs);
        let client = fresh(std::slice::from_ref(&peer));
        let admin = fresh(&[peer.clone(), client.clone()]);
        let cfg = StoreConfig {
            id,
            data_dir: self.dir.path().join(format!("store-{id}")),
            listen: None,
            client_addr: client.clone(),
            admin_addr: admin.clone(),
            client_listen: None,
            admin_listen: None,
            tls: None,
            insecure: false,
            legacy_store_certificates: false,
            limits: PlaneLimits::default(),
            metrics_addr: None,
            members: vec![Member {
                id,
                addr: peer.clone(),
            }],
            join: true,
            added_set: self.set.set_id != 0,
            set: self.set.clone(),
            raft: RaftTiming::default(),
            lease: test_lease(),
            rebalance: Default::default(),
            allocs: Vec::new(),
            max_concurrent_reads: seqsvr_store::node::DEFAULT_MAX_CONCURRENT_READS,
        };
        let path = self.dir.path().join(format!("store-{id}.toml"));
        std::fs::write(&path, toml::to_string(&cfg).unwrap()).unwrap();
        let args = vec![
            "store".into(),
            "--config".into(),
            path.display().to_string(),
        ];
        let log = self.dir.path().join(format!("store-{id}.log"));
        self.procs
            .push(Proc::start(&format!("store-{id}"), args, log));
        self.peer_addrs.push(peer.clone());
        self.client_addrs.push(client);
        self.admin_addrs.push(admin);
        peer
    }

    /// A client-plane client over all replicas.
    pub fn read(&self) -> ReadClient {
        ReadClient::new(&self.client_addrs, &plaintext()).unwrap()
    }

    /// A peer-plane client over all replicas, as an AllocSvr uses it
    /// (plaintext on loopback: the store trusts every caller's name).
    pub fn peer(&self) -> PeerClient {
        PeerClient::new(&self.peer_addrs, &plaintext()).unwrap()
    }

    /// An admin-plane client over all replicas.
    pub fn admin(&self) -> AdminClient {
        AdminClient::new(&self.admin_addrs, &plaintext()).unwrap()
    }

    /// What `seqctl` uses: the client and admin planes of all replicas.
    pub fn ctl(&self) -> seqsvr::ctl::Ctl {
        seqsvr::ctl::Ctl::new(&self.client_addrs, &self.admin_addrs, None).unwrap()
    }

    /// Waits until some replica reports a leader and the set is configured;
    /// returns the leader's index.
    pub async fn wait_ready(&self, within: Duration) -> usize {
        let c = self.read();
        let start = Instant::now();
        loop {
            for (addr, st) in c.status_all().await {
                if let Ok(s) = st {
                    if s.has_leader && s.set.is_some() && s.leads() {
                        return self.client_addrs.iter().position(|a| *a == addr).unwrap();
                    }
                }
            }
            assert!(
                start.elapsed() < within,
                "no ready leader within {within:?}\n{}",
                self.logs()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// All replicas' logs, for failure messages.
    pub fn logs(&self) -> String {
        logs_in(self.dir.path())
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

/// Starts AllocSvr `id` with its client plane at `addr` (peer and admin
/// planes on free ports), its Redis-protocol door on `resp` and its HTTP
/// API on `http`, against `store`, with test timing; forwarding on or
/// off as `forward` says.
fn start_alloc(
    store: &StoreCluster,
    id: &str,
    (addr, resp, http): (&str, &str, &str),
    forward: bool,
) -> Proc {
    start_alloc_with(store, id, addr, &store.peer_addrs, |cfg| {
        cfg.resp = Some(seqsvr_alloc::node::RespSection::on(resp));
        cfg.http_addr = Some(http.to_string());
        cfg.forward.enabled = forward;
    })
}

/// [`start_alloc`] dialing the store replicas at `store_addrs`, which may
/// name replicas not started yet (a group whose membership will change).
pub fn start_alloc_on(store: &StoreCluster, id: &str, addr: &str, store_addrs: &[String]) -> Proc {
    start_alloc_door(store, id, addr, store_addrs, None)
}

/// [`start_alloc_on`], with the Redis-protocol door on `resp` if given.
pub fn start_alloc_door(
    store: &StoreCluster,
    id: &str,
    addr: &str,
    store_addrs: &[String],
    resp: Option<&str>,
) -> Proc {
    start_alloc_with(store, id, addr, store_addrs, |cfg| {
        cfg.resp = resp.map(seqsvr_alloc::node::RespSection::on);
    })
}

/// [`start_alloc_on`], its config first changed by `edit`.
pub fn start_alloc_with(
    store: &StoreCluster,
    id: &str,
    addr: &str,
    store_addrs: &[String],
    edit: impl FnOnce(&mut AllocNodeConfig),
) -> Proc {
    let mut cfg = AllocNodeConfig {
        id: id.to_string(),
        addr: addr.to_string(),
        peer_addr: format!("127.0.0.1:{}", free_port()),
        admin_addr: format!("127.0.0.1:{}", free_port()),
        listen: None,
        peer_listen: None,
        admin_listen: None,
        store: store_addrs.to_vec(),
        tls: None,
        insecure: false,
        limits: None,
        metrics_addr: None,
        route_poll_ms: 200,
        renew_ms: TEST_RENEW_MS,
        wait_ms: 500,
        raise_ahead_fraction: 0.25,
        resp: None,
        forward: Default::default(),
        http_addr: None,
        max_names: seqsvr_alloc::names::DEFAULT_MAX_NAMES,
        adaptive_steps: None,
    };
    edit(&mut cfg);
    let path = store.dir.path().join(format!("{id}.toml"));
    std::fs::write(&path, toml::to_string(&cfg).unwrap()).unwrap();
    let args = vec![
        "alloc".into(),
        "--config".into(),
        path.display().to_string(),
    ];
    Proc::start(id, args, store.dir.path().join(format!("{id}.log")))
}

/// A whole set: a store group plus AllocSvr processes, each first routed an
/// equal share of the sections.
pub struct SetCluster {
    /// The store group (its `dir` also holds the allocs' files).
    pub store: StoreCluster,
    /// AllocSvr client-plane addresses, by index.
    pub alloc_addrs: Vec<String>,
    /// AllocSvr processes, by index (`alloc-1` is index 0).
    pub allocs: Vec<Proc>,
    /// AllocSvr Redis-protocol doors, by index.
    pub resp_addrs: Vec<String>,
    /// AllocSvr HTTP APIs, by index.
    pub http_addrs: Vec<String>,
    /// Whether its AllocSvrs forward calls for uids owned elsewhere.
    pub forward: bool,
}

impl SetCluster {
    /// Starts 3 store replicas and `n_allocs` AllocSvrs for `set`.
    pub fn start(set: SetSpec, n_allocs: usize) -> SetCluster {
        Self::start_opts(set, n_allocs, StoreOptions::default())
    }

    /// [`SetCluster::start`], the store group started with `opts`.
    pub fn start_opts(set: SetSpec, n_allocs: usize, opts: StoreOptions) -> SetCluster {
        Self::launch(set, n_allocs, opts, true)
    }

    /// [`SetCluster::start`], its AllocSvrs forwarding or not
    /// (`[forward] enabled`).
    pub fn start_forwarding(set: SetSpec, n_allocs: usize, forward: bool) -> SetCluster {
        Self::launch(set, n_allocs, StoreOptions::default(), forward)
    }

    /// [`SetCluster::start`] with both: the store group started with
    /// `opts`, its AllocSvrs forwarding or not.
    pub fn start_opts_forwarding(
        set: SetSpec,
        n_allocs: usize,
        opts: StoreOptions,
        forward: bool,
    ) -> SetCluster {
        Self::launch(set, n_allocs, opts, forward)
    }

    fn launch(set: SetSpec, n_allocs: usize, opts: StoreOptions, forward: bool) -> SetCluster {
        let initial = InitialAlloc::even_split(
            (0..n_allocs).map(|i| format!("alloc-{}", i + 1)),
            set.section_count(),
        );
        let store = StoreCluster::start_opts(3, set, initial, opts);
        let mut c = SetCluster {
            store,
            alloc_addrs: Vec::new(),
            allocs: Vec::new(),
            resp_addrs: Vec::new(),
            http_addrs: Vec::new(),
            forward,
        };
        for _ in 0..n_allocs {
            c.add_alloc();
        }
        c
    }

    /// Starts one more AllocSvr (routed nothing at first, unless the
    /// store's initial routes name it); returns its index.
    pub fn add_alloc(&mut self) -> usize {
        let i = self.allocs.len();
        let [addr, resp, http] = [(); 3].map(|_| format!("127.0.0.1:{}", free_port()));
        self.allocs.push(start_alloc(
            &self.store,
            &format!("alloc-{}", i + 1),
            (&addr, &resp, &http),
            self.forward,
        ));
        self.alloc_addrs.push(addr);
        self.resp_addrs.push(resp);
        self.http_addrs.push(http);
        i
    }

    /// A client seeded with every AllocSvr.
    pub async fn client(&self) -> seqsvr_client::SeqClient {
        Self::client_over(&[self]).await
    }

    /// A client seeded with every AllocSvr of `sets`.
    pub async fn client_over(sets: &[&SetCluster]) -> seqsvr_client::SeqClient {
        let seeds: Vec<String> = sets.iter().flat_map(|s| s.alloc_addrs.clone()).collect();
        let logs = || sets.iter().map(|s| s.store.logs()).collect::<String>();
        let opts = seqsvr_client::ClientOptions {
            deadline: Duration::from_secs(5),
            ..Default::default()
        };
        let start = Instant::now();
        loop {
            match seqsvr_client::SeqClient::connect(&seeds, opts.clone()).await {
                Ok(c) => return c,
                Err(e) => assert!(
                    start.elapsed() < Duration::from_secs(30),
                    "no alloc answered: {e}\n{}",
                    logs()
                ),
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Waits until every section is served: a `next` on the first uid of
    /// each section succeeds.
    pub async fn wait_serving(&self, c: &seqsvr_client::SeqClient) {
        let set = &self.store.set;
        for s in 0..set.section_count() {
            let uid = set.uids_of(s).start;
            let start = Instant::now();
            while let Err(e) = c.next(uid).await {
                assert!(
                    start.elapsed() < Duration::from_secs(30),
                    "section {s} not served: {e}\n{}",
                    self.store.logs()
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}
