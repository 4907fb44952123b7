//! The set phases: 10^9 uids, 10^4 sections, 3 store replicas and 3
//! AllocSvrs (`alloc-1`–`alloc-3`, each first routed a third).

use std::time::{Duration, Instant};

use seqsvr_alloc::ownership::claim_pieces;
use seqsvr_core::SetSpec;
use seqsvr_proto::alloc_client::AllocClient;
use seqsvr_proto::{self as pb};
use seqsvr_store_api::client::plaintext;
use seqsvr_store_api::ReadClient;

use crate::probe::{mib, ms, owners, sections_of, until, Allocs, Marks};
use seqsvr_store::node::LeaseSection;

use crate::{Args, SECTIONS, SECTION_SIZE};
use seqsvr_testkit::{cpu_of, rss_of, SetCluster, StoreOptions};

/// How long any one wait of this bench may take before it says "never".
const PATIENCE: Duration = Duration::from_secs(120);
/// Most resident memory the AllocSvrs may hold together.
const MAX_RSS: u64 = 16 << 30;

struct Set {
    cluster: SetCluster,
    allocs: Allocs,
    /// The store leader's index (nothing here disturbs the store group).
    leader: usize,
}

impl Set {
    async fn marks(&self) -> Marks {
        Marks::read(&self.cluster.store, self.leader).await
    }

    async fn routes(&self) -> seqsvr_core::RouteTable {
        self.cluster.store.read().routes().await.expect("routes")
    }

    fn rss(&self, i: usize) -> u64 {
        self.cluster.allocs[i].pid().map(rss_of).unwrap_or(0)
    }

    fn rss_all(&self) -> String {
        (0..self.cluster.allocs.len())
            .map(|i| format!("alloc-{} {}", i + 1, mib(self.rss(i))))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Stops the bench (its processes are killed as it unwinds) before the
    /// AllocSvrs together hold more than [`MAX_RSS`]: sections that churn
    /// between owners keep their memory in every process that held them.
    fn guard(&self) {
        let total: u64 = (0..self.cluster.allocs.len()).map(|i| self.rss(i)).sum();
        assert!(
            total < MAX_RSS,
            "the AllocSvrs hold {} together: stopping ({})",
            mib(total),
            self.rss_all()
        );
    }

    /// Whether the store's leader sees AllocSvr `id`'s lease as expired.
    async fn expired(&self, id: &str) -> bool {
        let c = ReadClient::new(
            &[self.cluster.store.client_addrs[self.leader].clone()],
            &plaintext(),
        )
        .unwrap();
        c.leader_status()
            .await
            .is_some_and(|s| s.allocs.iter().any(|a| a.alloc_id == id && a.expired))
    }
}

/// Runs the selected set phases.
pub async fn run(args: &Args) {
    println!(
        "\n== the set: {} uids, {SECTIONS} sections of {SECTION_SIZE} uids, 3 store replicas, 3 AllocSvrs (lease {} ms + margin {} ms, renewals every {} ms)",
        SECTIONS as u64 * SECTION_SIZE,
        LeaseSection::default().lease_ms,
        LeaseSection::default().margin_ms,
        seqsvr_testkit::TEST_RENEW_MS
    );
    let set = SetSpec::new(0, 0..SECTIONS as u64 * SECTION_SIZE);
    // The default lease terms (5 s + 1 s), not the tests' short ones: with
    // every cell of a section written when it is taken (`section.rs`),
    // installing thousands of sections outlasts a 2 s lease (see
    // docs/benchmarks.md, Scale).
    let opts = StoreOptions {
        metrics: true,
        lease: LeaseSection::default(),
        ..Default::default()
    };
    let t0 = Instant::now();
    let cluster = SetCluster::start_opts(crate::BINS, set, 3, opts);
    let leader = cluster.store.wait_ready(Duration::from_secs(60)).await;
    let allocs = Allocs::new(&cluster.alloc_addrs);
    let mut s = Set {
        cluster,
        allocs,
        leader,
    };
    let all = until(t0, PATIENCE, || async {
        s.guard();
        s.allocs.serving_all(&[0, 1, 2]).await == SECTIONS
    })
    .await;
    println!(
        "  start: every section served {} after process start; {}; RSS {}",
        ms(all),
        Marks::default().since(&s.marks().await),
        s.rss_all()
    );
    idle(&s).await;
    if args.has("rss") {
        rss(&s).await;
    }
    if args.has("kill") {
        kill(&mut s).await;
    }
    if args.has("restart") {
        restart(&mut s).await;
    }
}

/// CPU the processes use with no load: renewals, route reads, the
/// arbiter's tick.
async fn idle(s: &Set) {
    let cpu = || -> Vec<f64> {
        let c = &s.cluster;
        c.allocs
            .iter()
            .chain(&c.store.procs)
            .map(|p| p.pid().map(cpu_of).unwrap_or(0.0))
            .collect()
    };
    let (c0, t0) = (cpu(), Instant::now());
    tokio::time::sleep(Duration::from_secs(3)).await;
    let wall = t0.elapsed().as_secs_f64();
    let pct: Vec<String> = cpu()
        .iter()
        .zip(&c0)
        .map(|(b, a)| format!("{:.1}", 100.0 * (b - a) / wall))
        .collect();
    println!(
        "  idle CPU, % of a core: allocs {}; store replicas {} (leader {})",
        pct[..3].join(" / "),
        pct[3..].join(" / "),
        s.leader + 1
    );
}

/// Resident memory per uid served, and its growth per uid touched, on
/// the AllocSvr serving the most sections.
async fn rss(s: &Set) {
    let mut best: Option<(usize, pb::AllocStatus)> = None;
    for i in 0..3 {
        if let Some(st) = s.allocs.status(i).await {
            if best
                .as_ref()
                .is_none_or(|b| st.sections.len() > b.1.sections.len())
            {
                best = Some((i, st));
            }
        }
    }
    let Some((i, st)) = best.filter(|b| b.1.sections.len() >= 1010) else {
        println!("  rss: no AllocSvr serves 1010 sections");
        return;
    };
    let owned = st.sections.len() as u64;
    let base = s.rss(i);
    println!(
        "  rss: alloc-{} serves {owned} sections ({} uids): RSS {} = {:.2} B a uid served",
        i + 1,
        owned * SECTION_SIZE,
        mib(base),
        base as f64 / (owned * SECTION_SIZE) as f64
    );
    let set = &s.cluster.store.set;
    let ch = seqsvr_net::client::endpoint(&s.cluster.alloc_addrs[i], None, Duration::from_secs(1))
        .unwrap()
        .connect()
        .await
        .expect("connect to the AllocSvr");
    let mut c = AllocClient::new(ch);
    let dense: Vec<u64> = st.sections[..10]
        .iter()
        .flat_map(|&sec| set.uids_of(sec))
        .collect();
    let sparse: Vec<u64> = st.sections[10..1010]
        .iter()
        .flat_map(|&sec| set.uids_of(sec).step_by(1000))
        .collect();
    for (what, uids) in [
        ("all uids of 10 sections", dense),
        ("100 uids in each of 1000 sections", sparse),
    ] {
        let before = s.rss(i);
        for chunk in uids.chunks(seqsvr_core::MAX_BATCH) {
            c.next_batch(pb::NextBatchRequest {
                uids: chunk.to_vec(),
            })
            .await
            .expect("next_batch");
        }
        let grown = s.rss(i).saturating_sub(before);
        println!(
            "    touched {} uids ({what}): RSS grew {} = {:.2} B a touched uid",
            uids.len(),
            mib(grown),
            grown as f64 / uids.len() as f64
        );
    }
}

/// kill -9 of alloc-3; until alloc-1 and alloc-2 serve every section.
async fn kill(s: &mut Set) {
    let t = s.routes().await;
    let victim = owners(&t).get("alloc-3").map_or(0, |o| o.0);
    let before = s.marks().await;
    let t0 = Instant::now();
    s.cluster.allocs[2].kill9();
    let s = &*s;
    let (mut moved, mut all) = (None, None);
    while all.is_none() && t0.elapsed() < PATIENCE {
        if moved.is_none() {
            let t = s.cluster.store.read().routes().await;
            if t.is_ok_and(|t| !owners(&t).contains_key("alloc-3")) {
                moved = Some(t0.elapsed());
            }
        }
        s.guard();
        if moved.is_some() && s.allocs.serving_all(&[0, 1]).await == SECTIONS {
            all = Some(t0.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let t = s.routes().await;
    println!(
        "  kill: alloc-3 ({victim} sections) killed (-9); routed away {}, every section served again {} after the kill; {}",
        ms(moved),
        ms(all),
        before.since(&s.marks().await)
    );
    for (id, (n, runs)) in owners(&t) {
        let pieces = claim_pieces(&sections_of(&t, &id)).len();
        println!("    {id}: {n} sections in {runs} runs ({pieces} take-over pieces)");
    }
    println!("    RSS after: {}", s.rss_all());
}

/// The running AllocSvr with the most sections is killed, the others
/// draining (so nothing moves to them); once its lease has expired it is
/// started again: until it serves every section routed to it.
async fn restart(s: &mut Set) {
    let t = s.routes().await;
    let o = owners(&t);
    let running: Vec<usize> = (0..3).filter(|&i| s.cluster.allocs[i].running()).collect();
    let Some(&r) = running
        .iter()
        .max_by_key(|&&i| o.get(&format!("alloc-{}", i + 1)).map_or(0, |x| x.0))
    else {
        println!("  restart: no AllocSvr running");
        return;
    };
    let id = format!("alloc-{}", r + 1);
    let admin = s.cluster.store.admin();
    let others: Vec<String> = running
        .iter()
        .filter(|&&i| i != r)
        .map(|i| format!("alloc-{}", i + 1))
        .collect();
    for other in &others {
        admin.set_draining(other, true).await.expect("drain");
    }
    s.cluster.allocs[r].kill9();
    let lapsed = until(Instant::now(), PATIENCE, || s.expired(&id)).await;
    let t = s.routes().await;
    let mine = sections_of(&t, &id);
    let n = mine.len() as u32;
    let before = s.marks().await;
    let t0 = Instant::now();
    s.cluster.allocs[r].restart();
    let s = &*s;
    let (mut first, mut all) = (None, None);
    while all.is_none() && t0.elapsed() < PATIENCE {
        s.guard();
        let serving = s.allocs.serving(r).await;
        if serving > 0 && first.is_none() {
            first = Some(t0.elapsed());
        }
        if serving == n {
            all = Some(t0.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    println!(
        "  restart: {id} killed (others draining), its lease expired {} later; started again with {n} sections routed to it ({} runs, {} take-over pieces): all served {} after process start (first ones by {}); {}; RSS {}",
        ms(lapsed),
        owners(&t).get(&id).map_or(0, |o| o.1),
        claim_pieces(&mine).len(),
        ms(all),
        ms(first),
        before.since(&s.marks().await),
        mib(s.rss(r))
    );
    for other in &others {
        admin.set_draining(other, false).await.ok();
    }
}
