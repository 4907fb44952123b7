//! Every call at every listener as every wrong caller: part of the adversary suite (`tests/adversary.rs`).

use super::*;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Svc {
    StoreRead,
    StorePeer,
    StoreAdmin,
    StoreSets,
    Raft,
    Alloc,
    AllocPeer,
    AllocAdmin,
}

/// Every method of every service.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum M {
    ReadRoutes,
    ReadSections,
    ReadStatus,
    PeerRegister,
    PeerRenew,
    PeerTakeOver,
    PeerRaise,
    PeerHandoff,
    PeerSections,
    PeerRoutes,
    PeerStatus,
    AdminAssign,
    AdminDraining,
    AdminLease,
    AdminFence,
    AdminStatus,
    AdminSnapshot,
    RaftAppend,
    RaftVote,
    RaftSnapshot,
    Next,
    NextBatch,
    Current,
    Routes,
    Status,
    Adopt,
    AHandoff,
    AStatus,
    SetsFreeze,
    SetsInstall,
    SetsChange,
    SetsCopy,
    ARelease,
    ARefresh,
}

const METHODS: [M; 34] = [
    M::ReadRoutes,
    M::ReadSections,
    M::ReadStatus,
    M::PeerRegister,
    M::PeerRenew,
    M::PeerTakeOver,
    M::PeerRaise,
    M::PeerHandoff,
    M::PeerSections,
    M::PeerRoutes,
    M::PeerStatus,
    M::AdminAssign,
    M::AdminDraining,
    M::AdminLease,
    M::AdminFence,
    M::AdminStatus,
    M::AdminSnapshot,
    M::RaftAppend,
    M::RaftVote,
    M::RaftSnapshot,
    M::Next,
    M::NextBatch,
    M::Current,
    M::Routes,
    M::Status,
    M::Adopt,
    M::AHandoff,
    M::AStatus,
    M::SetsFreeze,
    M::SetsInstall,
    M::SetsChange,
    M::SetsCopy,
    M::ARelease,
    M::ARefresh,
];

impl M {
    fn svc(self) -> Svc {
        use M::*;
        match self {
            ReadRoutes | ReadSections | ReadStatus => Svc::StoreRead,
            PeerRegister | PeerRenew | PeerTakeOver | PeerRaise | PeerHandoff | PeerSections
            | PeerRoutes | PeerStatus => Svc::StorePeer,
            AdminAssign | AdminDraining | AdminLease | AdminFence | AdminStatus | AdminSnapshot => {
                Svc::StoreAdmin
            }
            RaftAppend | RaftVote | RaftSnapshot => Svc::Raft,
            Next | NextBatch | Current | Routes | Status => Svc::Alloc,
            Adopt => Svc::AllocPeer,
            AHandoff | AStatus | ARelease | ARefresh => Svc::AllocAdmin,
            SetsFreeze | SetsInstall | SetsChange | SetsCopy => Svc::StoreSets,
        }
    }

    /// A StorePeer call made in an AllocSvr's name (it names alloc-1).
    fn as_alloc(self) -> bool {
        use M::*;
        matches!(
            self,
            PeerRegister | PeerRenew | PeerTakeOver | PeerRaise | PeerHandoff
        )
    }
}

/// Who calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Caller {
    /// h2c to a TLS listener.
    Plaintext,
    /// TLS, no client certificate.
    NoCert,
    /// A certificate of another CA, claiming alloc-1.
    OtherCa,
    /// The operator certificate (a wrong role on peer planes; the right
    /// one on admin planes, where it is not tried: it may do anything).
    Operator,
    /// alloc-2's certificate sending alloc-1's genuine messages (a replay
    /// under another AllocSvr's name).
    Alloc2,
    /// The same, marked as forwarded by a store replica.
    Alloc2Forwarded,
    /// A store certificate of a node id that is not a member.
    Store9,
}

const CALLERS: [Caller; 7] = [
    Caller::Plaintext,
    Caller::NoCert,
    Caller::OtherCa,
    Caller::Operator,
    Caller::Alloc2,
    Caller::Alloc2Forwarded,
    Caller::Store9,
];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Plane {
    Client,
    Peer,
    Admin,
}

struct Listener {
    name: String,
    store: bool,
    plane: Plane,
    addr: String,
}

/// What a call must come to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Expect {
    /// The TLS handshake (or the connection) fails: no answer.
    NoHandshake,
    /// This status.
    Code(Code),
    /// Served as designed (the client plane takes anyone): OK or a typed
    /// seqsvr error such as NOT_OWNER.
    Allowed,
}

fn served_on(store: bool, plane: Plane) -> &'static [Svc] {
    match (store, plane) {
        (true, Plane::Client) => &[Svc::StoreRead],
        (true, Plane::Peer) => &[Svc::StorePeer, Svc::Raft],
        (true, Plane::Admin) => &[Svc::StoreAdmin, Svc::StoreSets],
        (false, Plane::Client) => &[Svc::Alloc],
        (false, Plane::Peer) => &[Svc::AllocPeer],
        (false, Plane::Admin) => &[Svc::AllocAdmin],
    }
}

/// The threat model's verdict for `m` at `l` from `who` (`None`: a
/// legitimate call, not made).
fn expect(l: &Listener, m: M, who: Caller) -> Option<Expect> {
    use Caller::*;
    let mutual = l.plane != Plane::Client;
    if who == Plaintext || (mutual && matches!(who, NoCert | OtherCa)) {
        return Some(Expect::NoHandshake);
    }
    if !served_on(l.store, l.plane).contains(&m.svc()) {
        return Some(Expect::Code(Code::Unimplemented));
    }
    let denied = Some(Expect::Code(Code::PermissionDenied));
    match m.svc() {
        Svc::StoreRead | Svc::Alloc => Some(Expect::Allowed),
        Svc::StorePeer if m.as_alloc() => denied,
        // Reads: any AllocSvr or store replica; a forwarded mark only
        // keeps a follower from forwarding it again.
        Svc::StorePeer => match who {
            Operator => denied,
            _ => Some(Expect::Allowed),
        },
        // The role is checked, not the node id: a store certificate of a
        // non-member passes, and the (empty) payload is refused.
        Svc::Raft => match who {
            Store9 => Some(Expect::Code(Code::InvalidArgument)),
            _ => denied,
        },
        // A store replica of the AllocSvr's own set may ask it for planned
        // handoffs (the arbiter's rebalance, docs/operations.md): the role
        // and set are checked, not the node id (as for Raft), and every
        // move is checked with the store, so what it asks for is a planned
        // handoff like an operator's — legitimate, so not tried here (it
        // would move section 0, which this test checks nothing did).
        Svc::AllocAdmin if m == M::AHandoff && who == Store9 => None,
        Svc::StoreAdmin | Svc::StoreSets | Svc::AllocAdmin => match who {
            Operator => None,
            _ => denied,
        },
        // Any AllocSvr may send an adopt; the store decides (a forged one).
        Svc::AllocPeer => match who {
            Alloc2 | Alloc2Forwarded => Some(Expect::Code(Code::FailedPrecondition)),
            _ => denied,
        },
    }
}

/// alloc-1's live values: what a recording of its messages would hold.
struct Genuine {
    a1: pb::AllocLease,
    sections: Vec<SectionInfo>,
}

fn req<T>(msg: T, forwarded: bool) -> tonic::Request<T> {
    let mut r = tonic::Request::new(msg);
    if forwarded {
        r.metadata_mut()
            .insert(seqsvr_store::auth::FORWARDED, "1".parse().unwrap());
    }
    r
}

/// Makes one call; returns its outcome and the number it handed out, if
/// any.
async fn call(ch: Channel, m: M, g: &Genuine, fwd: bool) -> (Outcome, Option<Observation>) {
    let a1 = &g.a1;
    let s0 = &g.sections[0];
    let epochs: Vec<u64> = g.sections[0..4].iter().map(|s| s.epoch).collect();
    let start = Instant::now();
    let fut = async {
        let outcome = match m {
            M::ReadRoutes => Outcome::of(
                &StoreReadClient::new(ch)
                    .get_routes(req(pb::GetRoutesRequest {}, fwd))
                    .await,
            ),
            M::ReadSections => Outcome::of(
                &StoreReadClient::new(ch)
                    .read_sections(req(
                        pb::ReadSectionsRequest {
                            first_section: 0,
                            count: SECTIONS,
                        },
                        fwd,
                    ))
                    .await,
            ),
            M::ReadStatus => Outcome::of(
                &StoreReadClient::new(ch)
                    .status(req(pb::StatusRequest {}, fwd))
                    .await,
            ),
            M::PeerRegister => Outcome::of(
                &StorePeerClient::new(ch)
                    .register_alloc(req(
                        pb::RegisterAllocRequest {
                            alloc_id: "alloc-1".into(),
                            addr: a1.addr.clone(),
                            peer_addr: a1.peer_addr.clone(),
                            incarnation: a1.incarnation,
                            admin_addr: a1.admin_addr.clone(),
                        },
                        fwd,
                    ))
                    .await,
            ),
            M::PeerRenew => Outcome::of(
                &StorePeerClient::new(ch)
                    .renew(req(
                        pb::RenewRequest {
                            alloc_id: "alloc-1".into(),
                            incarnation: a1.incarnation,
                            known_sections_version: 0,
                        },
                        fwd,
                    ))
                    .await,
            ),
            M::PeerTakeOver => Outcome::of(
                &StorePeerClient::new(ch)
                    .take_over(req(
                        pb::TakeOverRequest {
                            alloc_id: "alloc-1".into(),
                            incarnation: a1.incarnation,
                            first_section: 0,
                            count: 4,
                            known_epochs: epochs,
                        },
                        fwd,
                    ))
                    .await,
            ),
            M::PeerRaise => Outcome::of(
                &StorePeerClient::new(ch)
                    .raise(req(
                        pb::RaiseRequest {
                            alloc_id: "alloc-1".into(),
                            incarnation: a1.incarnation,
                            section: 0,
                            epoch: s0.epoch,
                            to: s0.max_seq + 1,
                        },
                        fwd,
                    ))
                    .await,
            ),
            M::PeerHandoff => Outcome::of(
                &StorePeerClient::new(ch)
                    .handoff(req(
                        pb::HandoffRequest {
                            from_alloc: "alloc-1".into(),
                            incarnation: a1.incarnation,
                            to_alloc: "alloc-2".into(),
                            section: 0,
                            epoch: s0.epoch,
                        },
                        fwd,
                    ))
                    .await,
            ),
            M::PeerSections => Outcome::of(
                &StorePeerClient::new(ch)
                    .read_sections(req(
                        pb::ReadSectionsRequest {
                            first_section: 0,
                            count: SECTIONS,
                        },
                        fwd,
                    ))
                    .await,
            ),
            M::PeerRoutes => Outcome::of(
                &StorePeerClient::new(ch)
                    .get_routes(req(pb::GetRoutesRequest {}, fwd))
                    .await,
            ),
            M::PeerStatus => Outcome::of(
                &StorePeerClient::new(ch)
                    .status(req(pb::StatusRequest {}, fwd))
                    .await,
            ),
            M::AdminAssign => Outcome::of(
                &StoreAdminClient::new(ch)
                    .assign(req(
                        pb::AssignRequest {
                            alloc_id: "alloc-2".into(),
                            first_section: 0,
                            count: 1,
                            expected_epochs: vec![s0.epoch],
                        },
                        fwd,
                    ))
                    .await,
            ),
            M::AdminDraining => Outcome::of(
                &StoreAdminClient::new(ch)
                    .set_draining(req(
                        pb::SetDrainingRequest {
                            alloc_id: "alloc-1".into(),
                            draining: true,
                        },
                        fwd,
                    ))
                    .await,
            ),
            M::AdminLease => Outcome::of(
                &StoreAdminClient::new(ch)
                    .set_lease(req(
                        pb::SetLeaseRequest {
                            lease_ms: 1000,
                            margin_ms: 250,
                        },
                        fwd,
                    ))
                    .await,
            ),
            M::AdminFence => Outcome::of(
                &StoreAdminClient::new(ch)
                    .fence_alloc(req(
                        pb::FenceAllocRequest {
                            alloc_id: "alloc-1".into(),
                            incarnation: a1.incarnation,
                        },
                        fwd,
                    ))
                    .await,
            ),
            M::AdminStatus => Outcome::of(
                &StoreAdminClient::new(ch)
                    .status(req(pb::StatusRequest {}, fwd))
                    .await,
            ),
            M::AdminSnapshot => Outcome::of(
                &StoreAdminClient::new(ch)
                    .snapshot(req(pb::SnapshotRequest {}, fwd))
                    .await,
            ),
            M::RaftAppend => Outcome::of(
                &RaftClient::new(ch)
                    .append_entries(req(pb::RaftPayload { data: vec![] }, fwd))
                    .await,
            ),
            M::RaftVote => Outcome::of(
                &RaftClient::new(ch)
                    .vote(req(pb::RaftPayload { data: vec![] }, fwd))
                    .await,
            ),
            M::RaftSnapshot => Outcome::of(
                &RaftClient::new(ch)
                    .install_snapshot(req(pb::RaftPayload { data: vec![] }, fwd))
                    .await,
            ),
            M::Next => {
                let r = AllocClient::new(ch)
                    .next(req(
                        pb::NextRequest {
                            uid: 1,
                            count: 0,
                            ..Default::default()
                        },
                        fwd,
                    ))
                    .await;
                return (
                    Outcome::of(&r),
                    r.ok()
                        .map(|r| Observation::next(1, r.into_inner().seq, start, Instant::now())),
                );
            }
            M::NextBatch => {
                let r = AllocClient::new(ch)
                    .next_batch(req(pb::NextBatchRequest { uids: vec![2] }, fwd))
                    .await;
                return (
                    Outcome::of(&r),
                    r.ok()
                        .and_then(|r| r.into_inner().seqs.first().copied())
                        .map(|seq| Observation::next(2, seq, start, Instant::now())),
                );
            }
            M::Current => Outcome::of(
                &AllocClient::new(ch)
                    .current(req(
                        pb::CurrentRequest {
                            uid: 1,
                            ..Default::default()
                        },
                        fwd,
                    ))
                    .await,
            ),
            M::Routes => Outcome::of(
                &AllocClient::new(ch)
                    .routes(req(pb::GetRoutesRequest {}, fwd))
                    .await,
            ),
            M::Status => Outcome::of(
                &AllocClient::new(ch)
                    .status(req(pb::AllocStatusRequest {}, fwd))
                    .await,
            ),
            M::Adopt => Outcome::of(
                &AllocPeerClient::new(ch)
                    .adopt(req(
                        pb::AdoptRequest {
                            sections: vec![pb::Adopted {
                                section: 0,
                                epoch: 1 << 63,
                            }],
                        },
                        fwd,
                    ))
                    .await,
            ),
            M::AHandoff => Outcome::of(
                &AllocAdminClient::new(ch)
                    .handoff(req(
                        pb::AllocHandoffRequest {
                            moves: vec![pb::Move {
                                section: 0,
                                to_alloc: "alloc-2".into(),
                            }],
                        },
                        fwd,
                    ))
                    .await,
            ),
            M::AStatus => Outcome::of(
                &AllocAdminClient::new(ch)
                    .status(req(pb::AllocStatusRequest {}, fwd))
                    .await,
            ),
            // A stranger freezing every section for a move to a set of its
            // own, installing sections at 0, rewriting the directory, or
            // telling an AllocSvr to drop its sections.
            M::SetsFreeze => Outcome::of(
                &StoreSetsClient::new(ch)
                    .freeze(req(
                        pb::FreezeRequest {
                            first_section: 0,
                            count: SECTIONS,
                            to_set: 9,
                            move_id: u64::MAX,
                            ..Default::default()
                        },
                        fwd,
                    ))
                    .await,
            ),
            M::SetsInstall => Outcome::of(
                &StoreSetsClient::new(ch)
                    .install(req(
                        pb::InstallRequest {
                            first_section: 0,
                            floors: vec![0],
                            move_id: u64::MAX,
                            ..Default::default()
                        },
                        fwd,
                    ))
                    .await,
            ),
            M::SetsChange => Outcome::of(
                &StoreSetsClient::new(ch)
                    .change_directory(req(
                        pb::DirectoryChange {
                            change: Some(pb::directory_change::Change::BeginMove(
                                pb::PendingMove {
                                    begin: 0,
                                    end: 1000,
                                    from_set: 0,
                                    to_set: 9,
                                },
                            )),
                        },
                        fwd,
                    ))
                    .await,
            ),
            M::SetsCopy => Outcome::of(
                &StoreSetsClient::new(ch)
                    .copy_directory(req(
                        pb::Directory {
                            version: u64::MAX,
                            ..Default::default()
                        },
                        fwd,
                    ))
                    .await,
            ),
            M::ARelease => Outcome::of(
                &AllocAdminClient::new(ch)
                    .release(req(
                        pb::ReleaseRequest {
                            sections: vec![pb::SectionEpoch {
                                section: 0,
                                epoch: u64::MAX,
                            }],
                        },
                        fwd,
                    ))
                    .await,
            ),
            M::ARefresh => Outcome::of(
                &AllocAdminClient::new(ch)
                    .refresh(req(pb::RefreshRequest {}, fwd))
                    .await,
            ),
        };
        (outcome, None)
    };
    match tokio::time::timeout(Duration::from_secs(10), fut).await {
        Ok(out) => out,
        Err(_) => (Outcome::Transport("no answer in 10 s".into()), None),
    }
}

fn matches(e: Expect, o: &Outcome) -> bool {
    match (e, o) {
        (Expect::NoHandshake, Outcome::Transport(_)) => true,
        (Expect::Code(c), Outcome::Status(got, _)) => *got == c,
        (Expect::Allowed, Outcome::Ok) => true,
        (Expect::Allowed, Outcome::Status(_, Some(_))) => true,
        _ => false,
    }
}

/// Promises 3 and 5 at the edge: a stranger reaches only the client
/// planes; a caller with a certificate may do only what its role allows,
/// as its own id; a genuine message replayed under another identity, or
/// sent to the wrong listener, changes nothing.
///
/// Shown to fail: with `Auth::require_alloc` passing any AllocSvr role,
/// 15 of alloc-1's genuine calls replayed under alloc-2's certificate
/// were served at the three replicas (RegisterAlloc, Renew and TakeOver
/// OK; Raise and Handoff then STALE_EPOCH, the replayed TakeOver having
/// begun new epochs), and the test fails on them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_listener_refuses_every_call_it_must_refuse() {
    let _one = ONE_AT_A_TIME.lock().await;
    let cluster = Cluster::start(BINS, Options {
        tls: true,
        ..Default::default()
    })
    .await;
    let c = cluster.client().await;
    cluster.wait_serving(&c).await;
    let read = cluster.read();
    let a1 = alloc_lease(&read, "alloc-1").await;
    let a2 = alloc_lease(&read, "alloc-2").await;
    let w = start_load(&c, 4);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = read.read_sections(0, SECTIONS).await.unwrap();
    let version = read.routes().await.unwrap().version;
    let g = std::sync::Arc::new(Genuine {
        a1: a1.clone(),
        sections: before.clone(),
    });

    let mut listeners = Vec::new();
    for n in &cluster.stores {
        for (plane, addr) in [
            (Plane::Client, &n.client),
            (Plane::Peer, &n.peer),
            (Plane::Admin, &n.admin),
        ] {
            listeners.push(Listener {
                name: format!("{} {plane:?}", n.name),
                store: true,
                plane,
                addr: addr.clone(),
            });
        }
    }
    for n in &cluster.allocs {
        for (plane, addr) in [
            (Plane::Client, &n.client),
            (Plane::Peer, &n.peer),
            (Plane::Admin, &n.admin),
        ] {
            listeners.push(Listener {
                name: format!("{} {plane:?}", n.name),
                store: false,
                plane,
                addr: addr.clone(),
            });
        }
    }
    let tls_of = |who: Caller| match who {
        Caller::Plaintext => None,
        Caller::NoCert => cluster.server_only(),
        Caller::OtherCa => Some(cluster.foreign("alloc-1")),
        Caller::Operator => Some(cluster.identity("ops")),
        Caller::Alloc2 | Caller::Alloc2Forwarded => Some(cluster.identity("alloc-2")),
        Caller::Store9 => Some(cluster.identity("store-9")),
    };
    let started = Instant::now();
    let listeners = std::sync::Arc::new(listeners);
    let mut tasks = Vec::new();
    for li in 0..listeners.len() {
        for who in CALLERS {
            let ch = channel(
                &listeners[li].addr,
                tls_of(who).as_ref(),
                Duration::from_secs(5),
            );
            let (g, listeners) = (g.clone(), listeners.clone());
            tasks.push(tokio::spawn(async move {
                let l = &listeners[li];
                let mut out = Vec::new();
                for m in METHODS {
                    let Some(e) = expect(l, m, who) else { continue };
                    let fwd = who == Caller::Alloc2Forwarded;
                    let (o, n) = call(ch.clone(), m, &g, fwd).await;
                    out.push((li, who, m, e, o, n));
                }
                out
            }));
        }
    }
    let mut results = Vec::new();
    for t in tasks {
        results.extend(t.await.unwrap());
    }
    let took = started.elapsed();

    // The table: per listener, how the calls ended.
    let mut table: BTreeMap<usize, BTreeMap<String, usize>> = BTreeMap::new();
    let mut wrong = Vec::new();
    let mut numbers = Vec::new();
    for (li, who, m, e, o, n) in &results {
        *table.entry(*li).or_default().entry(o.short()).or_default() += 1;
        if !matches(*e, o) {
            wrong.push(format!(
                "{} {m:?} as {who:?}: expected {e:?}, got {o:?}",
                listeners[*li].name
            ));
        }
        numbers.extend(*n);
    }
    println!(
        "{} calls at {} listeners in {took:?}:",
        results.len(),
        listeners.len()
    );
    for (li, counts) in &table {
        println!("  {:<16} {counts:?}", listeners[*li].name);
    }
    let transport: BTreeMap<String, usize> = results
        .iter()
        .filter_map(|r| match &r.4 {
            Outcome::Transport(m) => Some(m.clone()),
            _ => None,
        })
        .fold(BTreeMap::new(), |mut acc, m| {
            *acc.entry(m.chars().take(160).collect()).or_default() += 1;
            acc
        });
    println!("failed handshakes and connections, by message: {transport:#?}");

    // The group is alive, and nothing changed.
    let statuses = read.status_all().await;
    let alive = statuses
        .iter()
        .filter(|(_, s)| s.as_ref().is_ok_and(|s| s.has_leader))
        .count();
    let leader = read.leader_status().await.expect("a leader");
    let after = read.read_sections(0, SECTIONS).await.unwrap();
    let (b, _) = burst(&c, 3).await;
    let (mut obs, _) = w.finish().await;
    obs.extend(b);
    obs.extend(numbers);
    assert_monotonic(&obs, || cluster.logs());
    assert!(
        wrong.is_empty(),
        "{} calls not refused as the threat model says:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
    assert_eq!(
        alive, 3,
        "replicas not all alive with a leader: {statuses:?}"
    );
    assert_eq!(
        (leader.lease_ms, leader.margin_ms),
        (2000, 500),
        "lease terms changed"
    );
    for a in &leader.allocs {
        let inc = if a.alloc_id == "alloc-1" {
            a1.incarnation
        } else {
            a2.incarnation
        };
        assert_eq!(a.incarnation, inc, "{} replaced", a.alloc_id);
        assert!(!a.draining && !a.fenced, "{a:?}");
    }
    assert_eq!(leader.allocs.len(), 2, "{:?}", leader.allocs);
    for (b, a) in before.iter().zip(&after) {
        assert_eq!(
            (&b.owner, b.epoch, b.incarnation),
            (&a.owner, a.epoch, a.incarnation),
            "section {}",
            b.section
        );
    }
    assert_eq!(read.routes().await.unwrap().version, version);
}
