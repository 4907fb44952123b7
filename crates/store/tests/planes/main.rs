//! A three-replica store group in process, with mTLS on every plane, tried
//! as strangers, wrong roles and forgers would try it with plain gRPC
//! clients. Every refusal is typed, nothing changes, and the group stays
//! alive and writable afterwards (docs/architecture/security.md).

use std::time::Duration;

use openraft::raft::VoteRequest;
use seqsvr_net::{DevPki, Leaf, Role, StoreId};
use seqsvr_proto::raft_client::RaftClient;
use seqsvr_proto::store_peer_client::StorePeerClient;
use seqsvr_proto::{self as pb};
use seqsvr_store::node::{Member, StoreConfig, StoreListeners};
use seqsvr_store::StoreNode;
use seqsvr_store_api::client::connector;
use seqsvr_store_api::{AllocAddrs, Error, PeerClient, ReadClient, Rejection};
use tokio::net::TcpListener;
use tonic::Code;

mod allocs;
mod identity;
mod ids;

struct Cluster {
    nodes: Vec<StoreNode>,
    cfgs: Vec<StoreConfig>,
    pki: DevPki,
    peer: Vec<String>,
    client: Vec<String>,
    _dir: tempfile::TempDir,
}

async fn bind() -> TcpListener {
    TcpListener::bind("127.0.0.1:0").await.unwrap()
}

fn addr(l: &TcpListener) -> String {
    l.local_addr().unwrap().to_string()
}

/// Replica `id`'s config (members left empty), serving on `l` from
/// `data` with the certificate `cert` of `pki`.
fn config_text(
    id: u64,
    data: &std::path::Path,
    l: &StoreListeners,
    pki: &DevPki,
    cert: &str,
) -> String {
    let metrics = l.metrics.as_ref().map_or(String::new(), |m| {
        format!("metrics_addr = \"{}\"\n", addr(m))
    });
    format!(
        r#"
id = {id}
data_dir = "{data}"
client_addr = "{client}"
admin_addr = "{admin}"
{metrics}members = []
[tls]
ca = "{ca}"
cert = "{cert}"
key = "{key}"
[set]
set_id = 0
uid_begin = 0
uid_end = 1000
section_size = 100
step = 100
[raft]
heartbeat_ms = 50
election_min_ms = 200
election_max_ms = 400
"#,
        data = data.display(),
        client = addr(&l.client),
        admin = addr(&l.admin),
        ca = pki.ca_path().display(),
        cert = pki.cert_path(cert).display(),
        key = pki.key_path(cert).display(),
    )
}

/// A group of set 0, its replicas running with `store-<id>` (`store:0:<id>`).
async fn cluster() -> Cluster {
    cluster_with(false, "store").await
}

/// The certificates of every test: set 0's replicas `store-<id>`, a store
/// id no group has (`store-9`), set 1's replicas with the same node ids as
/// set 0's (`set1-<id>`, `store:1:<id>`), the old form naming no set
/// (`old-<id>`, `store:<id>`), three AllocSvrs and an operator.
fn leaves() -> Vec<Leaf> {
    let mut leaves = Vec::new();
    for id in 1..=3 {
        leaves.push(Leaf::new(
            format!("store-{id}"),
            Role::Store(StoreId::new(0, id)),
        ));
        leaves.push(Leaf::new(
            format!("set1-{id}"),
            Role::Store(StoreId::new(1, id)),
        ));
        leaves.push(Leaf::new(format!("old-{id}"), Role::LegacyStore(id)));
    }
    leaves.extend([
        Leaf::new("store-9", Role::Store(StoreId::new(0, 9))),
        Leaf::new("alloc-a", Role::Alloc("a".into())),
        Leaf::new("alloc-b", Role::Alloc("b".into())),
        Leaf::new("alloc-c", Role::Alloc("c".into())),
        Leaf::new("ops", Role::Operator("ops".into())),
    ]);
    leaves
}

/// A group of set 0 whose replicas run with the certificates
/// `<certs>-<id>`, taking old-form store certificates if `legacy`.
async fn cluster_with(legacy: bool, certs: &str) -> Cluster {
    let dir = tempfile::tempdir().unwrap();
    let leaves = leaves();
    let pki = DevPki::generate(&dir.path().join("pki"), &leaves, false).unwrap();
    let mut listeners = Vec::new();
    for _ in 0..3 {
        listeners.push(StoreListeners {
            peer: bind().await,
            client: bind().await,
            admin: bind().await,
            metrics: Some(bind().await),
        });
    }
    let members: Vec<Member> = listeners
        .iter()
        .enumerate()
        .map(|(i, l)| Member {
            id: i as u64 + 1,
            addr: addr(&l.peer),
        })
        .collect();
    let peer = members.iter().map(|m| m.addr.clone()).collect();
    let client = listeners.iter().map(|l| addr(&l.client)).collect();
    let mut nodes = Vec::new();
    let mut cfgs = Vec::new();
    for (i, l) in listeners.into_iter().enumerate() {
        let id = i as u64 + 1;
        let data = dir.path().join(format!("store-{id}"));
        let mut text = config_text(id, &data, &l, &pki, &format!("{certs}-{id}"));
        if legacy {
            text = format!("legacy_store_certificates = true\n{text}");
        }
        let mut cfg: StoreConfig = toml::from_str(&text).unwrap();
        cfg.members = members.clone();
        cfg.validate().unwrap();
        cfgs.push(cfg.clone());
        nodes.push(StoreNode::start(cfg, l).await.unwrap());
    }
    Cluster {
        nodes,
        cfgs,
        pki,
        peer,
        client,
        _dir: dir,
    }
}

fn tls(pki: &DevPki, name: &str) -> seqsvr_net::ClientTls {
    pki.tls_config(name).client().unwrap()
}

impl Cluster {
    /// Stops every replica, stores a vote of `term` on each (as if that
    /// many elections had happened), and starts them again on the same
    /// addresses with their logs and state as they were.
    async fn restart_at_term(&mut self, term: u64) {
        use openraft::storage::RaftLogStorage;
        let addrs: Vec<_> = self.nodes.iter().map(|n| n.addrs).collect();
        for n in std::mem::take(&mut self.nodes) {
            n.shutdown().await;
        }
        for (cfg, a) in self.cfgs.clone().into_iter().zip(addrs) {
            let mut tries = 0;
            let disk = loop {
                // The replica's last handles go away with its connections.
                match seqsvr_store::disk::Disk::open(&cfg.data_dir) {
                    Ok(d) => break d,
                    Err(e) if tries < 100 => {
                        tries += 1;
                        let _ = e;
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                    Err(e) => panic!("reopening {}: {e}", cfg.data_dir.display()),
                }
            };
            {
                let mut log = seqsvr_store::log_store::LogStore::open(&disk).unwrap();
                log.save_vote(&openraft::Vote::new(term, cfg.id))
                    .await
                    .unwrap();
            }
            drop(disk);
            let bind_at = |addr: std::net::SocketAddr| async move {
                for _ in 0..100 {
                    if let Ok(l) = TcpListener::bind(addr).await {
                        return l;
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                panic!("{addr} stayed taken");
            };
            let l = StoreListeners {
                peer: bind_at(a.peer).await,
                client: bind_at(a.client).await,
                admin: bind_at(a.admin).await,
                metrics: Some(bind_at(a.metrics.unwrap()).await),
            };
            self.nodes.push(StoreNode::start(cfg, l).await.unwrap());
        }
    }

    fn peer_as(&self, name: &str) -> PeerClient {
        PeerClient::new(&self.peer, &connector(Some(tls(&self.pki, name))))
            .unwrap()
            .with_deadline(Duration::from_secs(3), Duration::from_millis(500))
    }

    /// A raw peer-plane gRPC client to replica `i`, as `name` (or with no
    /// certificate at all).
    fn raw(&self, i: usize, name: Option<&str>) -> tonic::transport::Channel {
        let t = match name {
            Some(n) => tls(&self.pki, n),
            None => seqsvr_net::ClientTls::server_only(&self.pki.ca_path()).unwrap(),
        };
        seqsvr_net::client::channel(&self.peer[i], Some(&t), Duration::from_secs(1)).unwrap()
    }

    async fn wait_configured(&self) {
        let read = ReadClient::new(
            &self.client,
            &connector(Some(
                seqsvr_net::ClientTls::server_only(&self.pki.ca_path()).unwrap(),
            )),
        )
        .unwrap();
        // A group that cannot elect fails here, not after every call's
        // own retries.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        while tokio::time::Instant::now() < deadline {
            let call = tokio::time::timeout(Duration::from_secs(2), read.routes());
            if let Ok(Ok(_)) = call.await {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("the group never served routes");
    }

    /// The group still elects, writes and reads: register + take over,
    /// naming `known` as the newest epoch installed.
    async fn alive(&self, alloc: &str, inc: u64, known: u64) -> seqsvr_core::Grant {
        let c = self.peer_as(&format!("alloc-{alloc}"));
        let addrs = AllocAddrs {
            client: format!("127.0.0.1:{}", 9000 + inc),
            peer: format!("127.0.0.1:{}", 9100 + inc),
            admin: format!("127.0.0.1:{}", 9200 + inc),
        };
        c.register_alloc(alloc, inc, &addrs).await.unwrap();
        let first = if alloc == "a" { 0 } else { 5 };
        let (grants, _) = c.take_over(alloc, inc, first, vec![known]).await.unwrap();
        grants[0]
    }
}

/// Sends, as `cert`, to replica `i`: a vote for `claimed` and an append
/// as leader `claimed`, each one term above the receiver's; returns both
/// refusals (or panics if one got through).
async fn raft_as(c: &Cluster, i: usize, cert: &str, claimed: u64) -> [tonic::Status; 2] {
    let own = c.nodes[i].raft.metrics().borrow().current_term;
    let mut raft = RaftClient::new(c.raw(i, Some(cert)));
    let vote = VoteRequest::<u64>::new(openraft::Vote::new(own + 1, claimed), None);
    let data = seqsvr_core::codec::encode(&vote).unwrap();
    let vote = raft.vote(pb::RaftPayload { data }).await;
    let append = openraft::raft::AppendEntriesRequest::<seqsvr_store::types::TypeConfig> {
        vote: openraft::Vote::new_committed(own + 1, claimed),
        prev_log_id: None,
        entries: vec![],
        leader_commit: None,
    };
    let data = seqsvr_core::codec::encode(&append).unwrap();
    let append = raft.append_entries(pb::RaftPayload { data }).await;
    match (vote, append) {
        (Err(v), Err(a)) => [v, a],
        (v, a) => panic!("{cert} to replica {i}: vote {v:?}, append {a:?}"),
    }
}

/// A forwarded renewal in a's name, sent as member `cert` to replica `i`,
/// is refused: AllocSvr calls are never forwarded. The refusal is the one
/// [`assert_call_the_leader`] expects (a member forwarding is an older
/// replica during a rolling upgrade).
async fn forwarding_is_refused(c: &Cluster, i: usize, cert: &str) {
    let mut peer = StorePeerClient::new(c.raw(i, Some(cert)));
    let req = forwarded(pb::RenewRequest {
        alloc_id: "a".into(),
        incarnation: 1,
        known_sections_version: 0,
    });
    let e = peer.renew(req).await.unwrap_err();
    assert_call_the_leader(c, &e);
}

/// The index of the replica that leads.
fn leader_of(c: &Cluster) -> usize {
    (c.nodes.iter())
        .position(|n| {
            let m = n.raft.metrics().borrow().clone();
            m.current_leader == Some(m.id)
        })
        .expect("the group has a leader")
}

/// `e` refuses an AllocSvr's call that a member forwarded: a retryable
/// NOT_LEADER naming the leader's peer address (which every version of
/// the AllocSvr's client reads as "call the leader"), saying why.
fn assert_call_the_leader(c: &Cluster, e: &tonic::Status) {
    assert_eq!(e.code(), Code::Unavailable, "{e:?}");
    assert!(
        e.message().contains("never forwarded") && e.message().contains("came forwarded by store"),
        "{e:?}"
    );
    let err = Error::from_status(e);
    assert!(err.is_retryable(), "{err:?}");
    let Error::NotLeader {
        leader: Some((_, addr)),
    } = err
    else {
        panic!("a member's forward is refused naming the leader: {e:?}");
    };
    assert_eq!(addr, c.peer[leader_of(c)], "{e:?}");
}

/// `msg` marked as forwarded by a store replica.
fn forwarded<T>(msg: T) -> tonic::Request<T> {
    let mut req = tonic::Request::new(msg);
    req.metadata_mut()
        .insert(seqsvr_store::auth::FORWARDED, "1".parse().unwrap());
    req
}

/// Sends, as `cert`, forwarded calls to replica `i` in a's name (hand
/// off a's section 0 to b; record a's stop) and a registration of a
/// made-up AllocSvr; returns the three answers.
async fn forwarded_as(
    c: &Cluster,
    i: usize,
    cert: &str,
    epoch: u64,
) -> Vec<Result<(), tonic::Status>> {
    let mut peer = StorePeerClient::new(c.raw(i, Some(cert)));
    let handoff = peer
        .handoff(forwarded(pb::HandoffRequest {
            from_alloc: "a".into(),
            incarnation: 1,
            to_alloc: "b".into(),
            section: 0,
            epoch,
        }))
        .await
        .map(|_| ());
    let register = peer
        .register_alloc(forwarded(pb::RegisterAllocRequest {
            alloc_id: "ghost".into(),
            addr: "127.0.0.1:9".into(),
            peer_addr: "127.0.0.1:9".into(),
            incarnation: 1,
            admin_addr: "127.0.0.1:9".into(),
        }))
        .await
        .map(|_| ());
    let stopped = peer
        .stopped(forwarded(pb::StoppedRequest {
            alloc_id: "a".into(),
            incarnation: 1,
        }))
        .await
        .map(|_| ());
    vec![handoff, register, stopped]
}

/// The AllocSvrs the leader lists.
async fn registered(c: &Cluster) -> Vec<String> {
    let read = ReadClient::new(
        &c.client,
        &connector(Some(
            seqsvr_net::ClientTls::server_only(&c.pki.ca_path()).unwrap(),
        )),
    )
    .unwrap();
    let mut ids = Vec::new();
    for (addr, status) in read.status_all().await {
        let status = status.unwrap_or_else(|e| panic!("status of {addr}: {e}"));
        ids.extend(status.allocs.into_iter().map(|l| l.alloc_id));
    }
    assert!(
        ids.contains(&"a".to_string()),
        "no leader listed a: {ids:?}"
    );
    ids
}

fn terms(c: &Cluster) -> Vec<u64> {
    c.nodes
        .iter()
        .map(|n| n.raft.metrics().borrow().current_term)
        .collect()
}
