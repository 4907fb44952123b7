//! Store group membership changed online, with real processes on loopback:
//! adding a replica under load (over TLS, through `seqctl`), replacing
//! every replica of the group one at a time under load, removing the
//! leader, and every bad input refused with a typed error that changes
//! nothing (promise 5). Under load, the per-uid checker finds no repeat and
//! no regression (promise 1), and every number handed out is at or below
//! a ceiling the store still holds (promise 2).

use std::path::Path;
use std::time::{Duration, Instant};

use seqsvr_core::checker::Observation;
use seqsvr_core::SetSpec;
use seqsvr_net::TlsConfig;
use seqsvr_proto::store_admin_client::StoreAdminClient;
use seqsvr_proto::{self as pb};
use seqsvr_store::node::{InitialAlloc, Member};
use seqsvr_store::StoreConfig;
use seqsvr_store_api::client::{connector, plaintext};
use seqsvr_store_api::{AdminClient, Error, MemberRefusalKind as Kind, ReadClient};
use seqsvr_testkit::{self as kit, attack, Bins};
use seqsvr_testkit::{assert_monotonic, free_port, Proc, SetCluster, StoreCluster};

/// The binaries under test.
const BINS: Bins = seqsvr_testkit::bins!();

fn addr() -> String {
    format!("127.0.0.1:{}", free_port())
}

/// A store replica started on its own (to be added to a group).
struct Replica {
    peer: String,
    client: String,
    admin: String,
    data_dir: std::path::PathBuf,
    proc: Proc,
}

/// Starts replica `id` with its peer plane at `peer`, its data in `dir`,
/// configured to `join` a running group (its `members` name only itself:
/// the group's membership reaches it through the log).
fn start_replica(
    dir: &Path,
    id: u64,
    peer: &str,
    set: &SetSpec,
    tls: Option<TlsConfig>,
    join: bool,
) -> Replica {
    // Free ports are only free when drawn: `peer` was drawn earlier and
    // released, so a later draw may return it again.
    let mut fresh = vec![peer.to_string()];
    while fresh.len() < 3 {
        let a = addr();
        if !fresh.contains(&a) {
            fresh.push(a);
        }
    }
    let (client, admin) = (fresh[1].clone(), fresh[2].clone());
    let name = format!("store-{id}");
    let data_dir = dir.join(&name);
    let mut t = toml::Table::new();
    t.insert("id".into(), (id as i64).into());
    t.insert("data_dir".into(), data_dir.display().to_string().into());
    t.insert("client_addr".into(), client.clone().into());
    t.insert("admin_addr".into(), admin.clone().into());
    let me = [Member {
        id,
        addr: peer.into(),
    }];
    t.insert("members".into(), toml::Value::try_from(me).unwrap());
    t.insert("join".into(), join.into());
    t.insert("set".into(), toml::Value::try_from(set).unwrap());
    let lease = toml::Value::try_from(kit::test_lease()).unwrap();
    t.insert("lease".into(), lease);
    if let Some(tls) = tls {
        t.insert("tls".into(), toml::Value::try_from(tls).unwrap());
    }
    let text = toml::to_string(&t).unwrap();
    let cfg = StoreConfig::from_toml(&text).unwrap_or_else(|e| panic!("{name}: {e}\n{text}"));
    assert_eq!(cfg.join, join);
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(&path, text).unwrap();
    let args = vec![
        "store".into(),
        "--config".into(),
        path.display().to_string(),
    ];
    let proc = Proc::start(BINS, &name, args, dir.join(format!("{name}.log")));
    Replica {
        peer: peer.into(),
        client,
        admin,
        data_dir,
        proc,
    }
}

/// Waits until the replica whose client plane is at `client` answers.
async fn wait_up(client: &str, tls: Option<seqsvr_net::ClientTls>) {
    let read = ReadClient::new(&[client.to_string()], &connector(tls)).unwrap();
    attack::eventually(Duration::from_secs(10), "the replica answers", || {
        let r = read.clone();
        async move { r.status_all().await[0].1.is_ok() }
    })
    .await;
}

/// Waits until a leader among `client_addrs`, one of `voters`, reports
/// voters `voters` and no learners, with no change under way; returns its
/// status. (A leader that removed itself still reports the new membership
/// while it hands over.)
async fn wait_voters(
    client_addrs: &[String],
    voters: &[u64],
    logs: impl Fn() -> String,
) -> pb::StoreStatus {
    let read = ReadClient::new(client_addrs, &plaintext()).unwrap();
    let start = Instant::now();
    loop {
        let all = read.status_all().await;
        let leader = all.into_iter().filter_map(|(_, s)| s.ok()).find(|s| {
            s.leads()
                && voters.contains(&s.node_id)
                && s.voter_ids == voters
                && s.learner_ids.is_empty()
                && !s.joint
                && s.set.is_some()
        });
        if let Some(s) = leader {
            return s;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "no leader with voters {voters:?}\n{}",
            logs()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Every number handed out is at or below the ceiling the store holds for
/// its section now (promise 2: nothing is served above a durable ceiling).
async fn assert_ceilings_hold(read: &ReadClient, set: &SetSpec, obs: &[Observation]) {
    let now = read.read_sections(0, set.section_count()).await.unwrap();
    let mut top = vec![0u64; now.len()];
    for o in obs {
        let s = set.section_of(o.uid).unwrap() as usize;
        top[s] = top[s].max(o.seq);
    }
    for (s, t) in now.iter().zip(top) {
        assert!(
            s.record.max_seq >= t,
            "section {}: store holds ceiling {} but {t} was handed out",
            s.section,
            s.record.max_seq
        );
    }
}

/// Cuts the replica whose data is in `data_dir` off from its peers, and
/// waits until it acknowledges: it writes `ISOLATE_ACK` into the partition
/// file only once its switch is on (`seqsvr_store::fault`), so from then
/// on no Raft RPC reaches it. Writing the file and sleeping is not enough:
/// a step that depends on the cut could run before the replica looked.
fn refusal<T: std::fmt::Debug>(r: Result<T, tonic::Status>) -> Error {
    Error::from_status(&r.expect_err("refused"))
}

fn kind_of(e: &Error) -> Option<Kind> {
    match e {
        Error::Member(m) => Some(m.kind),
        _ => None,
    }
}

/// (1) A fourth replica added under load over TLS with `seqctl` (its
/// certificate from `seqsvr certs`, by the group's CA), caught up and
/// promoted; then one of the originals removed. Only an operator may do it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn add_a_replica_under_load_then_remove_an_original() {
    let mut c = attack::Cluster::start(
        BINS,
        attack::Options {
            tls: true,
            ..Default::default()
        },
    )
    .await;
    let client = c.client().await;
    c.wait_serving(&client).await;
    let load = attack::start_load(&client, 4);
    tokio::time::sleep(Duration::from_millis(500)).await;

    let pki = c.pki.as_ref().unwrap();
    let pki_dir = pki.dir().display().to_string();
    let (status, err) = attack::run_seqsvr(
        BINS,
        &["certs", "--dir", &pki_dir, "--store", "4"],
        Duration::from_secs(20),
    );
    assert!(status.is_some_and(|s| s.success()), "seqsvr certs: {err}");
    let peer4 = addr();
    let mut r4 = start_replica(
        c.dir.path(),
        4,
        &peer4,
        &c.set,
        Some(pki.tls_config("store-4")),
        true,
    );
    wait_up(&r4.client, c.server_only()).await;

    // Only an operator's certificate may change membership.
    let admins: Vec<String> = c.stores.iter().map(|n| n.admin.clone()).collect();
    for who in ["alloc-1", "store-1"] {
        let as_other = AdminClient::new(&admins, &connector(Some(c.identity(who)))).unwrap();
        let r = as_other.add_member(4, &peer4, Duration::from_secs(5)).await;
        assert!(matches!(r, Err(Error::Denied(_))), "{who}: {r:?}");
        assert!(matches!(
            as_other.remove_member(1).await,
            Err(Error::Denied(_))
        ));
    }

    let ops = pki.tls_config("ops");
    let seqctl = |args: &[&str]| {
        let clients: Vec<String> = c.stores.iter().map(|n| n.client.clone()).collect();
        let out = std::process::Command::new(BINS.seqctl)
            .args([
                "--store",
                &clients.join(","),
                "--store-admin",
                &admins.join(","),
            ])
            .args(["--ca", &ops.ca.display().to_string()])
            .args(["--cert", &ops.cert.display().to_string()])
            .args(["--key", &ops.key.display().to_string()])
            .args(args)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).to_string()
            + &String::from_utf8_lossy(&out.stderr);
        println!("seqctl {}:\n{text}", args.join(" "));
        assert!(
            out.status.success(),
            "seqctl {args:?}: {text}\n{}",
            c.logs()
        );
        text
    };
    let started = Instant::now();
    let out = seqctl(&["store", "add", "--id", "4", "--addr", &peer4]);
    println!("added in {:?}", started.elapsed());
    assert!(out.contains("promoted to voter"), "{out}");
    assert!(out.contains("voters {1,2,3} -> voters {1,2,3,4}"), "{out}");
    let clients: Vec<String> = c.stores.iter().map(|n| n.client.clone()).collect();
    let server_only = c.server_only();
    let read = |addrs: &[String]| ReadClient::new(addrs, &connector(server_only.clone())).unwrap();
    let s = read(&clients).leader_status().await.unwrap();
    assert_eq!(s.voter_ids, [1, 2, 3, 4]);
    let lag4 = s.replication.iter().find(|r| r.id == 4).unwrap();
    assert!(lag4.matched, "{s:?}");
    let out = seqctl(&["status"]);
    assert!(out.contains("membership at log index"), "{out}");
    assert!(
        out.contains("replication (leader") && out.contains("lag"),
        "{out}"
    );

    // Remove an original follower; the group keeps serving through it.
    let leader_id = s.node_id;
    let gone = (1..=3).find(|&i| i != leader_id).unwrap();
    let out = seqctl(&["store", "remove", "--id", &gone.to_string()]);
    let expect: Vec<String> = [1, 2, 3, 4]
        .iter()
        .filter(|&&i| i != gone)
        .map(|i| i.to_string())
        .collect();
    assert!(
        out.contains(&format!("-> voters {{{}}}", expect.join(","))),
        "{out}"
    );
    tokio::time::sleep(Duration::from_millis(1000)).await;
    c.stores[gone as usize - 1].proc.kill9();
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let (obs, _) = load.finish().await;
    assert_monotonic(&obs, || c.logs());

    // The new replica holds what the others hold.
    let mut all = clients.clone();
    all.push(r4.client.clone());
    let s = read(&all).leader_status().await.unwrap();
    let voters: Vec<u64> = expect.iter().map(|i| i.parse().unwrap()).collect();
    assert_eq!(s.voter_ids, voters);
    let target = s.last_applied;
    attack::eventually(Duration::from_secs(10), "replica 4 applies the log", || {
        let r = read(&[r4.client.clone()]);
        async move {
            let st = r.status_all().await;
            st[0].1.as_ref().is_ok_and(|s| s.last_applied >= target)
        }
    })
    .await;
    assert_ceilings_hold(&read(&all), &c.set, &obs).await;
    r4.proc.kill9();
}

/// (2) Every replica replaced, one at a time, under load (3 → 3 with new
/// ids and data directories); each old process is killed and its data
/// deleted once removed. Then the new group survives kill -9 of all its
/// replicas at once: each recovers from its own disk.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replace_every_replica_under_load() {
    // A small step: raises (log entries) all the time, so each new replica
    // has a log to catch up on, growing while it does.
    let set = SetSpec {
        step: 4,
        ..attack::set()
    };
    let initial: Vec<InitialAlloc> = (0..2)
        .map(|i| InitialAlloc {
            id: format!("alloc-{}", i + 1),
            first: i * 4,
            count: 4,
        })
        .collect();
    let store = StoreCluster::start_with(BINS, 3, set.clone(), initial);
    store.wait_ready(Duration::from_secs(30)).await;
    let new_peers: Vec<String> = (0..3).map(|_| addr()).collect();
    let every_peer: Vec<String> = store.peer_addrs.iter().chain(&new_peers).cloned().collect();
    let alloc_addrs: Vec<String> = (0..2).map(|_| addr()).collect();
    let allocs = alloc_addrs
        .iter()
        .enumerate()
        .map(|(i, a)| kit::start_alloc_on(&store, &format!("alloc-{}", i + 1), a, &every_peer))
        .collect();
    let mut cluster = SetCluster {
        store,
        alloc_addrs,
        allocs,
        resp_addrs: vec![],
        http_addrs: vec![],
        forward: true,
        tune: |_| {},
    };
    let client = cluster.client().await;
    cluster.wait_serving(&client).await;
    let load = attack::start_load(&client, 4);
    tokio::time::sleep(Duration::from_millis(500)).await;

    let dir = cluster.store.dir.path().to_path_buf();
    let mut replicas = Vec::new();
    for (i, peer) in new_peers.iter().enumerate() {
        let (old, id) = (i as u64 + 1, i as u64 + 4);
        let r = start_replica(&dir, id, peer, &set, None, true);
        wait_up(&r.client, None).await;
        let s = &mut cluster.store;
        s.client_addrs.push(r.client.clone());
        s.admin_addrs.push(r.admin.clone());
        s.peer_addrs.push(r.peer.clone());
        let ctl = s.ctl();
        let started = Instant::now();
        let (added, removed) =
            seqsvr::ctl::members::replace(&ctl, old, id, peer, Duration::from_secs(20))
                .await
                .unwrap_or_else(|e| panic!("replace {old} by {id}: {e:#}\n{}", s.logs()));
        println!(
            "replaced {old} by {id} in {:?} (caught up in {:?})",
            started.elapsed(),
            added.catch_up
        );
        assert!(removed.after.iter().all(|m| m.id != old && m.voter));
        assert!(removed.after.iter().any(|m| m.id == id));
        s.procs[i].kill9();
        std::fs::remove_dir_all(dir.join(format!("store-{old}"))).unwrap();
        replicas.push(r);
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let new_clients: Vec<String> = replicas.iter().map(|r| r.client.clone()).collect();
    wait_voters(&new_clients, &[4, 5, 6], || cluster.store.logs()).await;
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let (mut obs, errors) = load.finish().await;
    let s = wait_voters(&new_clients, &[4, 5, 6], || cluster.store.logs()).await;
    println!(
        "{} numbers, {errors} failed calls during the replacements; last log index {}",
        obs.len(),
        s.last_log_index
    );
    let read = ReadClient::new(&new_clients, &plaintext()).unwrap();
    assert_ceilings_hold(&read, &set, &obs).await;

    // kill -9 of the whole new group at once; each replica restarts from
    // its own disk (its config names only itself: membership is the log's).
    for r in &replicas {
        kit::signal(r.proc.pid().unwrap(), libc::SIGKILL);
    }
    for r in &mut replicas {
        r.proc.kill9();
        assert!(r.data_dir.exists());
    }
    for r in &mut replicas {
        r.proc.restart();
    }
    wait_voters(&new_clients, &[4, 5, 6], || cluster.store.logs()).await;
    assert_ceilings_hold(&read, &set, &obs).await;
    let (after, _) = attack::burst(&client, 2).await;
    assert!(
        !after.is_empty(),
        "the new group serves nothing\n{}",
        cluster.store.logs()
    );
    obs.extend(after);
    assert_monotonic(&obs, || cluster.store.logs());
    for a in &mut cluster.allocs {
        a.kill9();
    }
}

/// (3) Bad input over a plain gRPC admin client: a typed error each time,
/// and membership unchanged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_membership_changes_are_refused_and_change_nothing() {
    let mut cluster = StoreCluster::start(BINS, 3, attack::set());
    let leader = cluster.wait_ready(Duration::from_secs(30)).await;
    let before = wait_voters(&cluster.client_addrs, &[1, 2, 3], || cluster.logs()).await;
    let ch = |a: &str| seqsvr_net::client::channel(a, None, Duration::from_secs(1)).unwrap();
    let mut admin = StoreAdminClient::new(ch(&cluster.admin_addrs[leader]));
    let add = |id: u64, addr: &str, ms: u64| pb::AddMemberRequest {
        id,
        addr: addr.into(),
        catch_up_timeout_ms: ms,
    };
    let remove = |id: u64| pb::RemoveMemberRequest { id };
    let nobody = addr();

    for (req, what) in [
        (add(0, &nobody, 0), "id 0"),
        (add(9, "no-port", 0), "no port"),
        (add(9, "host:99999", 0), "bad port"),
        (add(9, ":7101", 0), "no host"),
        (add(9, &nobody, 3_600_000), "catch-up time of an hour"),
    ] {
        let e = refusal(admin.add_member(req).await);
        assert!(matches!(e, Error::Invalid(_)), "{what}: {e:?}");
    }
    let e = refusal(admin.remove_member(remove(0)).await);
    assert!(matches!(e, Error::Invalid(_)), "{e:?}");
    let cases = [
        (add(2, &nobody, 0), Kind::IdInUse),
        (add(9, &cluster.peer_addrs[1], 0), Kind::AddrInUse),
        (add(9, &nobody, 0), Kind::NotJoinable),
    ];
    for (req, kind) in cases {
        let e = refusal(admin.add_member(req.clone()).await);
        assert_eq!(kind_of(&e), Some(kind), "{req:?}: {e:?}");
    }
    let e = refusal(admin.remove_member(remove(9)).await);
    assert_eq!(kind_of(&e), Some(Kind::UnknownMember), "{e:?}");

    // A follower names the leader.
    let follower = (leader + 1) % 3;
    let mut at_follower = StoreAdminClient::new(ch(&cluster.admin_addrs[follower]));
    let e = refusal(at_follower.remove_member(remove(3)).await);
    let leader_peer = cluster.peer_addrs[leader].clone();
    assert_eq!(
        e,
        Error::NotLeader {
            leader: Some((leader as u64 + 1, leader_peer))
        }
    );

    // The replica at the address is another node.
    let dir = cluster.dir.path().to_path_buf();
    let peer5 = addr();
    let mut r5 = start_replica(&dir, 5, &peer5, &cluster.set, None, true);
    wait_up(&r5.client, None).await;
    let e = refusal(admin.add_member(add(6, &peer5, 0)).await);
    assert_eq!(kind_of(&e), Some(Kind::NotJoinable), "{e:?}");
    assert!(e.to_string().contains("store node 5"), "{e}");

    // A replica that cannot catch up (cut off from its peers) is removed
    // again after the catch-up time. The cut must be in force before the
    // add: the replica says so (a learner can catch up in milliseconds).
    kit::isolate(&r5.data_dir).await;
    // A caller that goes away during the catch-up changes nothing either:
    // the change runs to its end, and the learner is removed again.
    let mut gone = tonic::Request::new(add(5, &peer5, 1500));
    gone.set_timeout(Duration::from_millis(300));
    let e = refusal(admin.add_member(gone).await);
    assert!(matches!(e, Error::NoLeader(_)), "{e:?}");
    let read = ReadClient::new(&cluster.client_addrs, &plaintext()).unwrap();
    let mid = read.leader_status().await.unwrap();
    assert_eq!(mid.learner_ids, [5], "{mid:?}");
    wait_voters(&cluster.client_addrs, &[1, 2, 3], || cluster.logs()).await;
    let started = Instant::now();
    let e = refusal(admin.add_member(add(5, &peer5, 1500)).await);
    assert_eq!(kind_of(&e), Some(Kind::CatchUpTimeout), "{e:?}");
    assert!(e.to_string().contains("removed again"), "{e}");
    assert!(started.elapsed() >= Duration::from_millis(1500));
    wait_voters(&cluster.client_addrs, &[1, 2, 3], || cluster.logs()).await;
    // Healed, the same replica joins (and leaves again). The replica sees
    // the file gone within its 50 ms look; the add waits up to 10 s for it
    // to catch up, so nothing needs to wait for the heal.
    std::fs::remove_file(r5.data_dir.join(seqsvr_store::fault::ISOLATE_FILE)).unwrap();
    admin.add_member(add(5, &peer5, 10_000)).await.unwrap();
    let e = refusal(admin.add_member(add(5, &peer5, 0)).await);
    assert_eq!(kind_of(&e), Some(Kind::IdInUse), "{e:?}");
    admin.remove_member(remove(5)).await.unwrap();
    r5.proc.kill9();

    // A replica with a history of its own (configured without `join`, it
    // initialised a group of one) is refused.
    let peer7 = addr();
    let r7 = start_replica(&dir, 7, &peer7, &cluster.set, None, false);
    let r7_read = ReadClient::new(std::slice::from_ref(&r7.client), &plaintext()).unwrap();
    attack::eventually(
        Duration::from_secs(10),
        "replica 7 initialises itself",
        || {
            let r = r7_read.clone();
            async move { r.status_all().await[0].1.as_ref().is_ok_and(|s| s.term > 0) }
        },
    )
    .await;
    let e = refusal(admin.add_member(add(7, &peer7, 0)).await);
    assert_eq!(kind_of(&e), Some(Kind::NotJoinable), "{e:?}");
    assert!(e.to_string().contains("history"), "{e}");

    // With one follower down, removing the other would leave one healthy
    // voter of two: refused. Removing the one that is down is allowed.
    let (down, other) = ((leader + 1) % 3, (leader + 2) % 3);
    cluster.procs[down].kill9();
    let e = refusal(admin.remove_member(remove(other as u64 + 1)).await);
    assert_eq!(kind_of(&e), Some(Kind::QuorumAtRisk), "{e:?}");
    println!("{e}");

    // None of it changed anything.
    cluster.procs[down].restart();
    let after = wait_voters(&cluster.client_addrs, &[1, 2, 3], || cluster.logs()).await;
    assert_eq!(after.members, before.members);

    // The last voter of a group of one stays.
    let single = StoreCluster::start(BINS, 1, attack::set());
    single.wait_ready(Duration::from_secs(30)).await;
    let mut admin1 = StoreAdminClient::new(ch(&single.admin_addrs[0]));
    let e = refusal(admin1.remove_member(remove(1)).await);
    assert_eq!(kind_of(&e), Some(Kind::LastVoter), "{e:?}");
    wait_voters(&single.client_addrs, &[1], || single.logs()).await;
}

/// (4) The leader removes itself under load: it steps down once the
/// change is committed, the others elect a leader, and the load goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn removing_the_leader_hands_over_leadership() {
    let mut cluster = SetCluster::start(BINS, attack::set(), 2);
    let client = cluster.client().await;
    cluster.wait_serving(&client).await;
    let load = attack::start_load(&client, 4);
    tokio::time::sleep(Duration::from_millis(500)).await;

    let leader = cluster.store.wait_ready(Duration::from_secs(10)).await;
    let leader_id = leader as u64 + 1;
    let change = cluster
        .store
        .admin()
        .remove_member(leader_id)
        .await
        .unwrap();
    assert_eq!(change.leader_id, leader_id);
    assert!(change.after.iter().all(|m| m.id != leader_id));
    let rest: Vec<u64> = (1..=3).filter(|&i| i != leader_id).collect();
    let removed_at = Instant::now();
    let s = wait_voters(&cluster.store.client_addrs, &rest, || cluster.store.logs()).await;
    println!(
        "store {} leads {:?} after {leader_id} removed itself",
        s.node_id,
        removed_at.elapsed()
    );
    let old = ReadClient::new(&[cluster.store.client_addrs[leader].clone()], &plaintext()).unwrap();
    let old = old.status_all().await.remove(0).1.unwrap();
    println!(
        "the removed leader now: {} (voters {:?})",
        old.state, old.voter_ids
    );
    cluster.store.procs[leader].kill9();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let (obs, _) = load.finish().await;
    assert_monotonic(&obs, || cluster.store.logs());
    let read = cluster.store.read();
    assert_ceilings_hold(&read, &cluster.store.set, &obs).await;
}
