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
/// (`old-<id>`, `store:<id>`), two AllocSvrs and an operator.
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn strangers_wrong_roles_and_forgers_are_refused_and_change_nothing() {
    let c = cluster().await;
    c.wait_configured().await;
    let before = c.alive("a", 1, 0).await;

    // A stranger without a certificate cannot even finish the handshake on
    // the peer plane.
    let mut raft = RaftClient::new(c.raw(0, None));
    let e = raft
        .vote(pb::RaftPayload { data: vec![1] })
        .await
        .unwrap_err();
    assert!(
        matches!(
            e.code(),
            Code::Unavailable | Code::Unknown | Code::Cancelled
        ),
        "{e:?}"
    );

    // An AllocSvr certificate may not speak Raft.
    let mut raft = RaftClient::new(c.raw(0, Some("alloc-a")));
    let e = raft
        .vote(pb::RaftPayload { data: vec![1] })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");

    // alloc a may not renew, raise or hand off in b's name.
    let as_a = c.peer_as("alloc-a");
    for r in [
        as_a.renew("b", 2).await.map(|_| ()),
        as_a.raise("b", 2, 5, 1, 150).await.map(|_| ()),
        as_a.handoff("b", 2, "a", 5, 1).await.map(|_| ()),
        as_a.stopped("b", 2).await.map(|_| ()),
    ] {
        assert!(matches!(r, Err(Error::Denied(_))), "{r:?}");
    }
    // a itself may record only its own incarnation's stop.
    let r = as_a.stopped("a", 99).await;
    assert!(
        matches!(r, Err(Error::Rejected(Rejection::StaleIncarnation { .. }))),
        "{r:?}"
    );
    // An operator may not act on the peer plane as an AllocSvr either.
    let r = c.peer_as("ops").renew("a", 1).await;
    assert!(matches!(r, Err(Error::Denied(_))), "{r:?}");

    // Oversized ids are refused at the edge, before anything is proposed.
    let huge = "a".repeat(40_000);
    let mut peer = StorePeerClient::new(c.raw(1, Some("alloc-a")));
    let e = peer
        .renew(pb::RenewRequest {
            alloc_id: huge,
            incarnation: 1,
            known_sections_version: 0,
        })
        .await
        .unwrap_err();
    assert!(
        matches!(e.code(), Code::PermissionDenied | Code::InvalidArgument),
        "{e:?}"
    );

    // A forged vote with an absurd term, sent with a genuine replica
    // certificate (the worst case: a compromised or buggy peer), is refused
    // before openraft sees it — every replica keeps running.
    for i in 0..3 {
        let mut raft = RaftClient::new(c.raw(i, Some("store-1")));
        for term in [u64::MAX, 1 << 40] {
            let vote = VoteRequest::<u64>::new(openraft::Vote::new(term, 1), None);
            let data = seqsvr_core::codec::encode(&vote).unwrap();
            let e = raft.vote(pb::RaftPayload { data }).await.unwrap_err();
            assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
        }
    }

    // The group is alive and nothing above changed anything: b's sections
    // are b's to take, and a's ceiling moved only by a's own take-over.
    let b = c.alive("b", 2, 0).await;
    assert_eq!((b.epoch, b.prev_ceiling, b.max_seq), (1, 0, 100));
    let after = c.alive("a", 1, before.epoch).await;
    assert_eq!(after.epoch, before.epoch + 1);
    assert_eq!(after.prev_ceiling, before.max_seq);
    for n in &c.nodes {
        assert!(n.raft.metrics().borrow().current_term < 1 << 32);
    }
}

/// The group's own elections carry its term past 2^32 (the absolute cap
/// the wire once had, which left a group with no possible leader there)
/// and it keeps electing and writing; a jump of more than 2^24 over a
/// replica's term is still refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn elections_carry_the_term_past_2_pow_32() {
    let mut c = cluster().await;
    c.wait_configured().await;
    c.alive("a", 1, 0).await;
    c.restart_at_term((1 << 32) - 3).await;
    c.wait_configured().await;
    let term = |i: usize| c.nodes[i].raft.metrics().borrow().current_term;
    let leader = || {
        c.nodes.iter().position(|n| {
            let m = n.raft.metrics().borrow().clone();
            m.current_leader == Some(m.id)
        })
    };
    // Force elections on followers until the term is past 2^32.
    let mut elections = 0;
    while term(0) <= (1 << 32) + 1 {
        let Some(l) = leader() else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let before = term(l);
        c.nodes[(l + 1) % 3].raft.trigger().elect().await.unwrap();
        elections += 1;
        assert!(elections < 50, "the term stopped at {}", term(0));
        for _ in 0..100 {
            if leader().is_some_and(|l| term(l) > before) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    println!("term {} after {elections} forced elections", term(0));
    // Still electing and writing.
    let g = c.alive("b", 2, 0).await;
    assert_eq!(g.epoch, 1);

    // A genuine member's vote that jumps too far is refused.
    let own = term(0);
    let mut raft = RaftClient::new(c.raw(0, Some("store-2")));
    let vote = VoteRequest::<u64>::new(openraft::Vote::new(own + (1 << 25), 2), None);
    let data = seqsvr_core::codec::encode(&vote).unwrap();
    let e = raft.vote(pb::RaftPayload { data }).await.unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
    assert!(e.message().contains("jumps more than 2^24"), "{e:?}");
}

/// A store certificate speaks only for its own replica, and only while
/// that replica is a member of the group: a vote or an append in another
/// replica's name, or from a store no membership names (another set's
/// replica, a removed one), is refused before openraft sees it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raft_and_forwarded_calls_only_from_members() {
    let c = cluster().await;
    c.wait_configured().await;
    let terms_before: Vec<u64> = c
        .nodes
        .iter()
        .map(|n| n.raft.metrics().borrow().current_term)
        .collect();
    for (i, &own) in terms_before.iter().enumerate() {
        // store-1 in store-2's name.
        let mut raft = RaftClient::new(c.raw(i, Some("store-1")));
        let vote = VoteRequest::<u64>::new(openraft::Vote::new(own + 1, 2), None);
        let data = seqsvr_core::codec::encode(&vote).unwrap();
        let e = raft.vote(pb::RaftPayload { data }).await.unwrap_err();
        assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
        assert!(e.message().contains("may not speak for store 2"), "{e:?}");
        // store-9, a member of no group here, in its own name: an append
        // as a leader of a higher term would make the replica follow it.
        let mut raft = RaftClient::new(c.raw(i, Some("store-9")));
        let append = openraft::raft::AppendEntriesRequest::<seqsvr_store::types::TypeConfig> {
            vote: openraft::Vote::new_committed(own + 1, 9),
            prev_log_id: None,
            entries: vec![],
            leader_commit: None,
        };
        let data = seqsvr_core::codec::encode(&append).unwrap();
        let e = raft
            .append_entries(pb::RaftPayload { data })
            .await
            .unwrap_err();
        assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
        assert!(e.message().contains("not a member"), "{e:?}");
    }
    // A forwarded AllocSvr call is taken only from a member: store-9's
    // forged hand-off of a's sections, registration of a made-up AllocSvr
    // and record of a's stop (which would free a's sections) are refused
    // on every replica.
    let a = c.alive("a", 1, 0).await;
    for i in 0..3 {
        for r in forwarded_as(&c, i, "store-9", a.epoch).await {
            let e = r.unwrap_err();
            assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
            assert!(e.message().contains("not a member"), "{e:?}");
        }
    }
    // A member's forwarded call gets past the check (and is then served
    // or refused as the leader decides).
    forwarding_is_heard(&c, 0, "store-2").await;

    // Nothing moved: the term is the one before, and the group writes.
    for (n, before) in c.nodes.iter().zip(&terms_before) {
        assert_eq!(n.raft.metrics().borrow().current_term, *before);
    }
    let after = c.alive("a", 1, a.epoch).await;
    assert_eq!(after.prev_ceiling, a.max_seq, "the section stayed a's");
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

/// A forwarded renewal in a's name, sent as `cert` to replica `i`, gets
/// past the forwarding check (and is then served or refused as the
/// leader decides).
async fn forwarding_is_heard(c: &Cluster, i: usize, cert: &str) {
    let mut peer = StorePeerClient::new(c.raw(i, Some(cert)));
    let req = forwarded(pb::RenewRequest {
        alloc_id: "a".into(),
        incarnation: 1,
        known_sections_version: 0,
    });
    if let Err(e) = peer.renew(req).await {
        assert_ne!(e.code(), Code::PermissionDenied, "{e:?}");
    }
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

/// Node ids are numbered per group, so set 1's replica 2 carries the id of
/// set 0's replica 2: its certificate names its set, and set 0's replicas
/// refuse it on Raft and forwarded calls alike, naming both sets, and
/// nothing changes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_sets_replica_is_refused_even_with_a_members_id() {
    let c = cluster().await;
    c.wait_configured().await;
    let a = c.alive("a", 1, 0).await;
    // b is registered, so a forged hand-off of a's section to b would
    // take effect if it got past the check.
    c.alive("b", 2, 0).await;
    let before = terms(&c);
    for i in 0..3 {
        for e in raft_as(&c, i, "set1-2", 2).await {
            assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
            assert!(
                e.message().contains("a replica of set 1")
                    && e.message().contains("this replica serves set 0"),
                "{e:?}"
            );
        }
        for r in forwarded_as(&c, i, "set1-2", a.epoch).await {
            let e = r.unwrap_err();
            assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
            assert!(
                e.message().contains("set 1") && e.message().contains("set 0"),
                "{e:?}"
            );
        }
    }
    // The same replica id of this set is heard (the check is the set).
    forwarding_is_heard(&c, 0, "store-2").await;
    // Nothing moved: no election, a's section is a's, no ghost.
    assert_eq!(terms(&c), before);
    let after = c.alive("a", 1, a.epoch).await;
    assert_eq!(after.prev_ceiling, a.max_seq, "the section stayed a's");
    assert!(!registered(&c).await.contains(&"ghost".to_string()));
}

/// A store certificate of the old form (`store:<id>`, no set) is refused
/// by default, saying how to re-issue it; with
/// `legacy_store_certificates = true` a group whose replicas all run
/// with such certificates elects, writes, and hears their forwarded
/// calls — while another set's certificate stays refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn old_form_store_certificates_only_with_the_allowance() {
    let mut c = cluster().await;
    c.wait_configured().await;
    let a = c.alive("a", 1, 0).await;
    let before = terms(&c);
    for i in 0..3 {
        for e in raft_as(&c, i, "old-2", 2).await {
            assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
            assert!(
                e.message().contains("legacy_store_certificates = true")
                    && e.message().contains("store:0:2"),
                "{e:?}"
            );
        }
        for r in forwarded_as(&c, i, "old-2", a.epoch).await {
            let e = r.unwrap_err();
            assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
            assert!(e.message().contains("old form"), "{e:?}");
        }
    }
    assert_eq!(terms(&c), before);
    let after = c.alive("a", 1, a.epoch).await;
    assert_eq!(after.prev_ceiling, a.max_seq, "the section stayed a's");
    assert!(!registered(&c).await.contains(&"ghost".to_string()));
    for n in std::mem::take(&mut c.nodes) {
        n.shutdown().await;
    }

    // Replicas still on old-form certificates, allowed: the group works.
    let c = cluster_with(true, "old").await;
    c.wait_configured().await;
    let a = c.alive("a", 1, 0).await;
    forwarding_is_heard(&c, 0, "old-2").await;
    // Replicas with certificates naming the set are heard as well (the
    // state of a cluster half way through re-issuing them).
    forwarding_is_heard(&c, 1, "store-3").await;
    // The allowance is for the old form, not for other sets.
    let before = terms(&c);
    for i in 0..3 {
        for e in raft_as(&c, i, "set1-2", 2).await {
            assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
        }
        for r in forwarded_as(&c, i, "set1-2", a.epoch).await {
            assert_eq!(r.unwrap_err().code(), Code::PermissionDenied);
        }
    }
    assert_eq!(terms(&c), before);
    let after = c.alive("a", 1, a.epoch).await;
    assert_eq!(after.prev_ceiling, a.max_seq, "the section stayed a's");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twins_are_refused_with_the_live_address() {
    let c = cluster().await;
    c.wait_configured().await;
    c.alive("a", 1, 0).await;
    let twin = c.peer_as("alloc-a");
    let addrs = AllocAddrs {
        client: "127.0.0.1:9999".into(),
        peer: "127.0.0.1:9998".into(),
        admin: "127.0.0.1:9997".into(),
    };
    let r = twin.register_alloc("a", 77, &addrs).await;
    match r {
        Err(Error::Rejected(seqsvr_store_api::Rejection::Twin { alloc, live, addr })) => {
            assert_eq!(
                (alloc.as_str(), live, addr.as_str()),
                ("a", 1, "127.0.0.1:9001")
            );
        }
        other => panic!("expected TWIN, got {other:?}"),
    }
    // Its renewals are refused too.
    let r = twin.renew("a", 77).await;
    assert!(
        matches!(
            r,
            Err(Error::Rejected(
                seqsvr_store_api::Rejection::StaleIncarnation { .. }
            ))
        ),
        "{r:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_are_scraped_and_move() {
    let c = cluster().await;
    c.wait_configured().await;
    c.alive("a", 1, 0).await;
    let mut texts = Vec::new();
    for n in &c.nodes {
        let a = n.addrs.metrics.expect("metrics served");
        texts.push(scrape(a).await);
    }
    let all = texts.concat();
    for name in [
        "seqsvr_store_commands_total",
        "seqsvr_store_command_seconds",
        "seqsvr_store_fsyncs_total",
        "seqsvr_raft{",
        "seqsvr_store_state{",
        "seqsvr_calls_total",
    ] {
        assert!(all.contains(name), "{name} missing");
    }
    assert!(all.contains(r#"command="take_over",outcome="ok""#), "{all}");
}

async fn scrape(addr: std::net::SocketAddr) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    out
}

/// A replica refuses to start with a certificate that names another
/// replica (it would speak for that one in every Raft request): another
/// node id, the same node id of another set, or the old form naming no
/// set unless its config allows it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_refuses_another_replicas_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let pki = DevPki::generate(&dir.path().join("pki"), &leaves(), false).unwrap();
    for (cert, legacy, refusal) in [
        (
            "store-2",
            false,
            "names store:0:2, not this replica (store:0:1)",
        ),
        (
            "set1-1",
            false,
            "names store:1:1, a replica of set 1; this replica is store:0:1, of set 0",
        ),
        (
            "set1-1",
            true,
            "names store:1:1, a replica of set 1; this replica is store:0:1, of set 0",
        ),
        (
            "old-1",
            false,
            "names store:1, the old form without a set; this replica is store:0:1",
        ),
        ("old-2", true, "names store:2, not this replica (store:0:1)"),
    ] {
        let l = StoreListeners {
            peer: bind().await,
            client: bind().await,
            admin: bind().await,
            metrics: None,
        };
        let mut text = config_text(1, &dir.path().join("store-1"), &l, &pki, cert);
        if legacy {
            text = format!("legacy_store_certificates = true\n{text}");
        }
        let mut cfg: StoreConfig = toml::from_str(&text).unwrap();
        cfg.members = vec![Member {
            id: 1,
            addr: addr(&l.peer),
        }];
        cfg.validate().unwrap();
        let e = StoreNode::start(cfg, l).await.err().expect("refused");
        let msg = e.to_string();
        assert!(msg.contains(refusal), "{cert}: {msg}");
        assert!(
            !dir.path().join("store-1").exists(),
            "nothing written: {msg}"
        );
    }
}

/// `RetireAlloc`: refused while the AllocSvr may still serve (a live
/// lease), typed and changing nothing; an AllocSvr that never renewed
/// goes once the leader's first `lease + margin` is over, and its
/// process is refused from then on. Running it again says it is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retire_waits_for_the_lease_and_runs_again_safely() {
    let c = cluster().await;
    c.wait_configured().await;
    let a = c.alive("a", 1, 0).await;
    let admin_addrs: Vec<String> = c.nodes.iter().map(|n| n.addrs.admin.to_string()).collect();
    let admin =
        seqsvr_store_api::AdminClient::new(&admin_addrs, &connector(Some(tls(&c.pki, "ops"))))
            .unwrap();
    // a holds a live lease (and sections): refused.
    c.peer_as("alloc-a").renew("a", 1).await.unwrap();
    match admin.retire_alloc("a").await {
        Err(Error::Rejected(seqsvr_store_api::Rejection::AllocInUse { alloc, reason })) => {
            assert_eq!(alloc, "a");
            assert!(reason.contains("lease may still run"), "{reason}");
        }
        other => panic!("expected ALLOC_IN_USE, got {other:?}"),
    }
    let r = admin.retire_alloc("ghost").await;
    assert!(
        matches!(
            r,
            Err(Error::Rejected(
                seqsvr_store_api::Rejection::NotRegistered { .. }
            ))
        ),
        "{r:?}"
    );
    // b registers and never renews: once the office's first lease +
    // margin is over, its lease has certainly expired.
    let b = c.peer_as("alloc-b");
    let addrs = AllocAddrs {
        client: "127.0.0.1:9301".into(),
        peer: "127.0.0.1:9302".into(),
        admin: "127.0.0.1:9303".into(),
    };
    b.register_alloc("b", 7, &addrs).await.unwrap();
    let mut waited = 0;
    loop {
        match admin.retire_alloc("b").await {
            Ok(()) => break,
            Err(Error::Rejected(seqsvr_store_api::Rejection::AllocInUse { .. }))
                if waited < 100 =>
            {
                waited += 1;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            other => panic!("retire b: {other:?}"),
        }
    }
    println!("b retired after {} ms of waiting", waited * 100);
    let r = b.renew("b", 7).await;
    assert!(
        matches!(
            r,
            Err(Error::Rejected(
                seqsvr_store_api::Rejection::NotRegistered { .. }
            ))
        ),
        "{r:?}"
    );
    let r = admin.retire_alloc("b").await;
    assert!(
        matches!(
            r,
            Err(Error::Rejected(
                seqsvr_store_api::Rejection::NotRegistered { .. }
            ))
        ),
        "{r:?}"
    );
    // a was untouched.
    let after = c.alive("a", 1, a.epoch).await;
    assert_eq!(after.prev_ceiling, a.max_seq);
}

/// The arbiter retires a fenced AllocSvr by itself once its lease is
/// certainly over: it first moves the AllocSvr's sections to a live one,
/// then takes it off the list; its process is refused from then on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fenced_alloc_leaves_the_list_by_itself_once_its_sections_moved() {
    let c = cluster().await;
    c.wait_configured().await;
    let admin_addrs: Vec<String> = c.nodes.iter().map(|n| n.addrs.admin.to_string()).collect();
    let admin =
        seqsvr_store_api::AdminClient::new(&admin_addrs, &connector(Some(tls(&c.pki, "ops"))))
            .unwrap();
    // a takes section 0 over, b section 5; neither has renewed yet, so
    // the arbiter has routed nothing to either.
    c.alive("a", 1, 0).await;
    let b_grant = c.alive("b", 7, 0).await;
    assert_eq!(b_grant.section, 5);
    admin.fence_alloc("b", 7).await.unwrap();
    let (a, b) = (c.peer_as("alloc-a"), c.peer_as("alloc-b"));
    let r = b.renew("b", 7).await;
    assert!(
        matches!(r, Err(Error::Rejected(Rejection::StaleIncarnation { .. }))),
        "{r:?}"
    );
    // a renews on; nobody retires b by hand.
    let started = std::time::Instant::now();
    loop {
        a.renew("a", 1).await.unwrap();
        // No leader's answer counts as still listed.
        let listed = a
            .leader_status()
            .await
            .is_none_or(|s| s.allocs.iter().any(|l| l.alloc_id == "b"));
        if !listed {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the fenced b is still listed after {:?}",
            started.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    println!(
        "b left the list {:?} after it was fenced",
        started.elapsed()
    );
    // Its section moved to the live a before it left.
    let s5 = a.read_sections(5, 1).await.unwrap();
    assert_eq!(s5[0].owner.as_deref(), Some("a"), "{s5:?}");
    assert!(s5[0].epoch > b_grant.epoch);
    let r = b.renew("b", 7).await;
    assert!(
        matches!(r, Err(Error::Rejected(Rejection::NotRegistered { .. }))),
        "{r:?}"
    );
    let status = a.leader_status().await.expect("a leader");
    assert!(status.allocs.iter().any(|l| l.alloc_id == "a"), "a stays");
}
