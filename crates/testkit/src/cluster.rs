//! Clusters of real processes on free loopback ports: a store group
//! ([`StoreCluster`]), AllocSvrs against it, and a whole set
//! ([`SetCluster`]).

use std::time::{Duration, Instant};

use seqsvr_alloc::node::AllocNodeConfig;
use seqsvr_core::SetSpec;
use seqsvr_net::PlaneLimits;
use seqsvr_store::node::{InitialAlloc, LeaseSection, Member, RaftTiming};
use seqsvr_store::StoreConfig;
use seqsvr_store_api::client::plaintext;
use seqsvr_store_api::{AdminClient, PeerClient, ReadClient};

use crate::process::{free_port, logs_in, signal, Bins, Proc};

pub use crate::node::from_memory;

/// The lease of [`test_lease`], in ms.
const TEST_LEASE_MS: u64 = 2000;
/// The margin of [`test_lease`], in ms.
const TEST_MARGIN_MS: u64 = 500;

/// Short leases so that failover tests run quickly: 2 s lease, 0.5 s margin.
pub fn test_lease() -> LeaseSection {
    LeaseSection {
        lease_ms: TEST_LEASE_MS,
        margin_ms: TEST_MARGIN_MS,
        tick_ms: 50,
    }
}

/// Lease + margin of [`test_lease`]: after this long without a renewal an
/// owner's sections may move.
pub const TEST_EXPIRY: Duration = Duration::from_millis(TEST_LEASE_MS + TEST_MARGIN_MS);

/// How often test AllocSvrs renew their lease, in ms.
pub const TEST_RENEW_MS: u64 = 300;

/// A store group of real processes, each serving three planes on its own
/// loopback ports.
pub struct StoreCluster {
    /// The binaries its processes run (and its AllocSvrs will).
    pub bins: Bins,
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
    pub fn start(bins: Bins, n: u64, set: SetSpec) -> StoreCluster {
        Self::start_with(bins, n, set, Vec::new())
    }

    /// Starts `n` replicas serving `set`, with initial routes to `allocs`.
    pub fn start_with(bins: Bins, n: u64, set: SetSpec, allocs: Vec<InitialAlloc>) -> StoreCluster {
        Self::start_opts(bins, n, set, allocs, StoreOptions::default())
    }

    /// [`StoreCluster::start_with`], with `opts`.
    pub fn start_opts(
        bins: Bins,
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
                    bins,
                    &format!("store-{id}"),
                    args,
                    dir.path().join(format!("store-{id}.log")),
                )
            })
            .collect();
        StoreCluster {
            bins,
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
            .push(Proc::start(self.bins, &format!("store-{id}"), args, log));
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

/// Starts AllocSvr `id` with its client plane at `addr` (peer and admin
/// planes on free ports), its Redis-protocol door on `resp` and its HTTP
/// API on `http`, against `store`, with test timing; forwarding on or
/// off as `forward` says; then `tune` changes the config.
fn start_alloc(
    store: &StoreCluster,
    id: &str,
    (addr, resp, http): (&str, &str, &str),
    (forward, tune): (bool, fn(&mut AllocNodeConfig)),
) -> Proc {
    start_alloc_with(store, id, addr, &store.peer_addrs, |cfg| {
        cfg.resp = Some(seqsvr_alloc::node::RespSection::on(resp));
        cfg.http_addr = Some(http.to_string());
        cfg.forward.enabled = forward;
        tune(cfg);
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
    let log = store.dir.path().join(format!("{id}.log"));
    Proc::start(store.bins, id, args, log)
}

/// How one `seqctl` run ended and what it printed.
#[derive(Debug, Clone)]
pub struct CtlRun {
    /// Its exit code (`None`: killed by a signal).
    pub code: Option<i32>,
    /// Its standard output.
    pub out: String,
    /// Its standard error.
    pub err: String,
}

impl CtlRun {
    /// Whether it exited 0.
    pub fn ok(&self) -> bool {
        self.code == Some(0)
    }
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
    /// Applied last to the config of every AllocSvr it starts (after the
    /// test timing, door, HTTP API and forwarding).
    pub tune: fn(&mut AllocNodeConfig),
}

impl SetCluster {
    /// Starts 3 store replicas and `n_allocs` AllocSvrs for `set`.
    pub fn start(bins: Bins, set: SetSpec, n_allocs: usize) -> SetCluster {
        Self::start_opts(bins, set, n_allocs, StoreOptions::default())
    }

    /// [`SetCluster::start`], the store group started with `opts`.
    pub fn start_opts(bins: Bins, set: SetSpec, n_allocs: usize, opts: StoreOptions) -> SetCluster {
        Self::launch(bins, set, n_allocs, opts, (true, |_| {}))
    }

    /// [`SetCluster::start`], its AllocSvrs forwarding or not
    /// (`[forward] enabled`).
    pub fn start_forwarding(
        bins: Bins,
        set: SetSpec,
        n_allocs: usize,
        forward: bool,
    ) -> SetCluster {
        Self::launch(
            bins,
            set,
            n_allocs,
            StoreOptions::default(),
            (forward, |_| {}),
        )
    }

    /// [`SetCluster::start`], every AllocSvr's config changed by `tune`
    /// (e.g. fewer names held).
    pub fn start_tuned(
        bins: Bins,
        set: SetSpec,
        n_allocs: usize,
        tune: fn(&mut AllocNodeConfig),
    ) -> SetCluster {
        Self::launch(bins, set, n_allocs, StoreOptions::default(), (true, tune))
    }

    /// [`SetCluster::start`] with both: the store group started with
    /// `opts`, its AllocSvrs forwarding or not.
    pub fn start_opts_forwarding(
        bins: Bins,
        set: SetSpec,
        n_allocs: usize,
        opts: StoreOptions,
        forward: bool,
    ) -> SetCluster {
        Self::launch(bins, set, n_allocs, opts, (forward, |_| {}))
    }

    fn launch(
        bins: Bins,
        set: SetSpec,
        n_allocs: usize,
        opts: StoreOptions,
        (forward, tune): (bool, fn(&mut AllocNodeConfig)),
    ) -> SetCluster {
        let initial = InitialAlloc::even_split(
            (0..n_allocs).map(|i| format!("alloc-{}", i + 1)),
            set.section_count(),
        );
        let store = StoreCluster::start_opts(bins, 3, set, initial, opts);
        let mut c = SetCluster {
            store,
            alloc_addrs: Vec::new(),
            allocs: Vec::new(),
            resp_addrs: Vec::new(),
            http_addrs: Vec::new(),
            forward,
            tune,
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
            (self.forward, self.tune),
        ));
        self.alloc_addrs.push(addr);
        self.resp_addrs.push(resp);
        self.http_addrs.push(http);
        i
    }

    /// The door drills' faults: alloc-1 (first routed the first half of
    /// the sections) paused (SIGSTOP) past its lease, so its sections
    /// move, and woken; then alloc-2, owning everything by then, killed
    /// (kill -9), so every section moves back. Returns when alloc-2 was
    /// killed, after waiting long enough for that (two expiries and 1 s).
    pub async fn pause_then_kill(&mut self) -> Instant {
        let pid = self.allocs[0].pid().unwrap();
        signal(pid, libc::SIGSTOP);
        tokio::time::sleep(TEST_EXPIRY * 2).await;
        signal(pid, libc::SIGCONT);
        tokio::time::sleep(Duration::from_millis(1000)).await;
        self.allocs[1].kill9();
        let killed = Instant::now();
        tokio::time::sleep(TEST_EXPIRY * 2 + Duration::from_secs(1)).await;
        killed
    }

    /// Runs `seqctl --store <client planes> --store-admin <admin planes>
    /// args…` against this set's store group, with `SEQCTL_DEV_DIR` in the
    /// cluster's directory (so no local `seqsvr dev` cluster's files are
    /// read), and prints what it said.
    pub fn seqctl(&self, args: &[&str]) -> CtlRun {
        let out = std::process::Command::new(self.store.bins.seqctl)
            .arg("--store")
            .arg(self.store.client_addrs.join(","))
            .arg("--store-admin")
            .arg(self.store.admin_addrs.join(","))
            .args(args)
            .env("SEQCTL_DEV_DIR", self.store.dir.path())
            .output()
            .unwrap();
        let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        let run = CtlRun {
            code: out.status.code(),
            out: text(&out.stdout),
            err: text(&out.stderr),
        };
        println!(
            "$ seqctl {}: {:?}\n{}{}",
            args.join(" "),
            run.code,
            run.out,
            run.err
        );
        run
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
