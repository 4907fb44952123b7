//! A cluster of real processes with TLS from a development PKI and
//! per-replica metrics ([`Cluster`]), for what the plaintext harness
//! cannot do. Part of `attack`, which re-exports it.

use super::*;

/// Which store replica the AllocSvrs dial first (they stay with the one
/// that last answered).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreOrder {
    /// Replica order, as configured.
    AsConfigured,
    /// The leader first.
    LeaderFirst,
    /// A follower first.
    FollowerFirst,
}

/// How to start a [`Cluster`].
#[derive(Debug, Clone)]
pub struct Options {
    /// TLS on every plane of every process, from a development PKI.
    pub tls: bool,
    /// The store's initial lease terms.
    pub lease: LeaseSection,
    /// How many AllocSvrs (sections split evenly, alloc-1 first).
    pub allocs: usize,
    /// Which replica the AllocSvrs dial first.
    pub order: StoreOrder,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            tls: false,
            lease: crate::cluster::test_lease(),
            allocs: 2,
            order: StoreOrder::AsConfigured,
        }
    }
}

/// One server process and its three planes' addresses.
pub struct Node {
    /// `store-1`, `alloc-2`…
    pub name: String,
    /// The process.
    pub proc: Proc,
    /// Client plane.
    pub client: String,
    /// Peer plane.
    pub peer: String,
    /// Admin plane.
    pub admin: String,
    /// Prometheus metrics.
    pub metrics: Option<String>,
    /// The HTTP API (AllocSvrs; TLS when the cluster runs TLS).
    pub http: Option<String>,
}

/// 3 store replicas and some AllocSvrs as real processes on loopback, with
/// TLS if asked, started store first (so the AllocSvrs' store order can
/// name the leader or a follower first).
pub struct Cluster {
    /// The binaries its processes run.
    pub bins: Bins,
    /// Data, configs, logs, PKI.
    pub dir: tempfile::TempDir,
    /// The PKI (with TLS): `store-<n>`, `alloc-<n>`, operator `ops`, and
    /// `store-9` (a store certificate of a node id that is not a member).
    pub pki: Option<DevPki>,
    /// Another CA's PKI with `alloc-1` and `ops` (with TLS).
    pub rogue: Option<DevPki>,
    /// The set.
    pub set: SetSpec,
    /// Store replicas (id = index + 1).
    pub stores: Vec<Node>,
    /// AllocSvrs (`alloc-1` is index 0).
    pub allocs: Vec<Node>,
}

fn addr() -> String {
    format!("127.0.0.1:{}", free_port())
}

impl Cluster {
    /// Starts the store group, waits for its leader, then starts the
    /// AllocSvrs and waits until every section is served.
    pub async fn start(bins: Bins, opts: Options) -> Cluster {
        let dir = tempfile::tempdir().unwrap();
        let set = set();
        let n_allocs = opts.allocs;
        let (pki, rogue) = if opts.tls {
            let mut leaves: Vec<Leaf> = (1..=3)
                .map(|i| Leaf::new(format!("store-{i}"), Role::Store(StoreId::new(0, i))))
                .collect();
            for i in 1..=n_allocs {
                let id = format!("alloc-{i}");
                leaves.push(Leaf::new(id.clone(), Role::Alloc(id)));
            }
            leaves.push(Leaf::new("ops", Role::Operator("ops".into())));
            leaves.push(Leaf::new("store-9", Role::Store(StoreId::new(0, 9))));
            let pki = DevPki::generate(&dir.path().join("pki"), &leaves, false).unwrap();
            let rogue = DevPki::generate(
                &dir.path().join("rogue"),
                &[
                    Leaf::new("alloc-1", Role::Alloc("alloc-1".into())),
                    Leaf::new("ops", Role::Operator("ops".into())),
                ],
                false,
            )
            .unwrap();
            (Some(pki), Some(rogue))
        } else {
            (None, None)
        };
        let initial = InitialAlloc::even_split(
            (0..n_allocs).map(|i| format!("alloc-{}", i + 1)),
            set.section_count(),
        );
        let peers: Vec<String> = (0..3).map(|_| addr()).collect();
        let members: Vec<Member> = peers
            .iter()
            .enumerate()
            .map(|(i, a)| Member {
                id: i as u64 + 1,
                addr: a.clone(),
            })
            .collect();
        let mut stores = Vec::new();
        for id in 1..=3u64 {
            let name = format!("store-{id}");
            let (client, admin, metrics) = (addr(), addr(), addr());
            // Built as TOML, naming only the keys set here: keys added to
            // the config later keep their defaults.
            let mut t = toml::Table::new();
            t.insert("id".into(), (id as i64).into());
            t.insert("data_dir".into(), toml_path(&dir.path().join(&name)).into());
            t.insert("client_addr".into(), client.clone().into());
            t.insert("admin_addr".into(), admin.clone().into());
            t.insert("metrics_addr".into(), metrics.clone().into());
            t.insert("members".into(), toml::Value::try_from(&members).unwrap());
            t.insert("set".into(), toml::Value::try_from(&set).unwrap());
            t.insert("lease".into(), toml::Value::try_from(&opts.lease).unwrap());
            t.insert("allocs".into(), toml::Value::try_from(&initial).unwrap());
            if let Some(p) = &pki {
                t.insert(
                    "tls".into(),
                    toml::Value::try_from(p.tls_config(&name)).unwrap(),
                );
            }
            let text = toml::to_string(&t).unwrap();
            StoreConfig::from_toml(&text).unwrap_or_else(|e| panic!("{name}: {e}\n{text}"));
            let path = dir.path().join(format!("{name}.toml"));
            std::fs::write(&path, text).unwrap();
            let proc = Proc::start(
                bins,
                &name,
                vec![
                    "store".into(),
                    "--config".into(),
                    path.display().to_string(),
                ],
                dir.path().join(format!("{name}.log")),
            );
            stores.push(Node {
                name,
                proc,
                client,
                peer: peers[id as usize - 1].clone(),
                admin,
                metrics: Some(metrics),
                http: None,
            });
        }
        let mut c = Cluster {
            bins,
            dir,
            pki,
            rogue,
            set,
            stores,
            allocs: Vec::new(),
        };
        let leader = c.wait_leader(Duration::from_secs(30)).await;
        let mut order: Vec<usize> = (0..3).collect();
        match opts.order {
            StoreOrder::AsConfigured => {}
            StoreOrder::LeaderFirst => order.sort_by_key(|&i| i != leader),
            StoreOrder::FollowerFirst => order.sort_by_key(|&i| i == leader),
        }
        let store_list: Vec<String> = order.iter().map(|&i| c.stores[i].peer.clone()).collect();
        for i in 1..=n_allocs {
            let node = c.start_alloc(&format!("alloc-{i}"), &store_list, "");
            c.allocs.push(node);
        }
        c
    }

    /// Starts an AllocSvr process named `id` (a second one with an
    /// existing id is a twin), dialing `store` in that order; `suffix`
    /// tells its files apart.
    pub fn start_alloc(&self, id: &str, store: &[String], suffix: &str) -> Node {
        let name = format!("{id}{suffix}");
        let (client, peer, admin, metrics, http) = (addr(), addr(), addr(), addr(), addr());
        let mut t = toml::Table::new();
        t.insert("id".into(), id.into());
        t.insert("http_addr".into(), http.clone().into());
        t.insert("addr".into(), client.clone().into());
        t.insert("peer_addr".into(), peer.clone().into());
        t.insert("admin_addr".into(), admin.clone().into());
        t.insert("metrics_addr".into(), metrics.clone().into());
        t.insert("store".into(), toml::Value::try_from(store).unwrap());
        t.insert("route_poll_ms".into(), 200.into());
        t.insert("renew_ms".into(), (TEST_RENEW_MS as i64).into());
        t.insert("wait_ms".into(), 500.into());
        if let Some(p) = &self.pki {
            t.insert(
                "tls".into(),
                toml::Value::try_from(p.tls_config(id)).unwrap(),
            );
        }
        let text = toml::to_string(&t).unwrap();
        AllocNodeConfig::from_toml(&text).unwrap_or_else(|e| panic!("{name}: {e}\n{text}"));
        let path = self.dir.path().join(format!("{name}.toml"));
        std::fs::write(&path, text).unwrap();
        let proc = Proc::start(
            self.bins,
            &name,
            vec![
                "alloc".into(),
                "--config".into(),
                path.display().to_string(),
            ],
            self.dir.path().join(format!("{name}.log")),
        );
        Node {
            name,
            proc,
            client,
            peer,
            admin,
            metrics: Some(metrics),
            http: Some(http),
        }
    }

    /// Server-only TLS (the client plane), if the cluster runs TLS.
    pub fn server_only(&self) -> Option<ClientTls> {
        self.pki
            .as_ref()
            .map(|p| ClientTls::server_only(&p.ca_path()).unwrap())
    }

    /// TLS presenting the certificate `name` of the cluster's PKI.
    pub fn identity(&self, name: &str) -> ClientTls {
        self.pki
            .as_ref()
            .expect("a TLS cluster")
            .tls_config(name)
            .client()
            .unwrap()
    }

    /// TLS presenting the rogue CA's certificate `name` (the server is
    /// still checked against the cluster's CA).
    pub fn foreign(&self, name: &str) -> ClientTls {
        let rogue = self.rogue.as_ref().expect("a TLS cluster");
        let mut cfg = rogue.tls_config(name);
        cfg.ca = self.pki.as_ref().unwrap().ca_path();
        cfg.client().unwrap()
    }

    fn addrs(nodes: &[Node], f: impl Fn(&Node) -> &String) -> Vec<String> {
        nodes.iter().map(|n| f(n).clone()).collect()
    }

    /// The store's client plane.
    pub fn read(&self) -> ReadClient {
        ReadClient::new(
            &Self::addrs(&self.stores, |n| &n.client),
            &connector(self.server_only()),
        )
        .unwrap()
    }

    /// The store's admin plane, as operator `ops` (with TLS).
    pub fn admin(&self) -> AdminClient {
        let tls = self.pki.as_ref().map(|_| self.identity("ops"));
        AdminClient::new(&Self::addrs(&self.stores, |n| &n.admin), &connector(tls)).unwrap()
    }

    /// The store's peer plane with the certificate `name` (with TLS).
    pub fn peer_as(&self, name: &str) -> PeerClient {
        let tls = self.pki.as_ref().map(|_| self.identity(name));
        PeerClient::new(&Self::addrs(&self.stores, |n| &n.peer), &connector(tls)).unwrap()
    }

    /// The client library, seeded with every AllocSvr.
    pub async fn client(&self) -> SeqClient {
        let opts = ClientOptions {
            deadline: Duration::from_secs(5),
            tls: self.server_only(),
            ..Default::default()
        };
        let seeds = Self::addrs(&self.allocs, |n| &n.client);
        let start = Instant::now();
        loop {
            match SeqClient::connect(&seeds, opts.clone()).await {
                Ok(c) => return c,
                Err(e) => assert!(
                    start.elapsed() < Duration::from_secs(30),
                    "no alloc answered: {e}\n{}",
                    self.logs()
                ),
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Waits until every section is served through `c`.
    pub async fn wait_serving(&self, c: &SeqClient) {
        for s in 0..self.set.section_count() {
            let uid = self.set.uids_of(s).start;
            let start = Instant::now();
            while let Err(e) = c.next(uid).await {
                assert!(
                    start.elapsed() < Duration::from_secs(30),
                    "section {s} not served: {e}\n{}",
                    self.logs()
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }

    /// Waits until a replica says it leads with the set configured;
    /// returns its index.
    pub async fn wait_leader(&self, within: Duration) -> usize {
        let read = self.read();
        let start = Instant::now();
        loop {
            for (a, st) in read.status_all().await {
                if let Ok(s) = st {
                    if s.has_leader && s.set.is_some() && s.leads() {
                        return self.stores.iter().position(|n| n.client == a).unwrap();
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

    /// How many `StorePeer.Renew` calls replica `i` has served (direct or
    /// forwarded to it), from its metrics.
    pub fn renewals_served(&self, i: usize) -> f64 {
        let text = scrape(self.stores[i].metrics.as_ref().unwrap());
        text.lines()
            .filter(|l| {
                l.starts_with("seqsvr_calls_total{")
                    && l.contains("method=\"Renew\"")
                    && l.contains("plane=\"peer\"")
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }

    /// Every log, tails only.
    pub fn logs(&self) -> String {
        logs_in(self.dir.path())
    }
}

/// `GET /metrics` of the listener at `addr`; panics if it does not
/// answer (a cluster's own listener must).
pub fn scrape(addr: &str) -> String {
    let text = crate::metrics::scrape(addr);
    assert!(!text.is_empty(), "metrics listener {addr} did not answer");
    text
}
