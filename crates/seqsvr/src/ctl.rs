//! `seqctl`'s operator commands: status, sections, and planned moves
//! (drain, undrain, rebalance).
//!
//! Planned moves never route a section away from a live AllocSvr behind its
//! back: the current owner is asked to hand each section off (it stops
//! serving, the store hands the section over in one write, the new owner
//! starts at once), so no lease has to expire and no two AllocSvrs ever
//! serve a section at the same time (promise 3).

use anyhow::{bail, Context};
use seqsvr_proto::alloc_client::AllocClient;
use seqsvr_proto::{self as pb};
use seqsvr_store::client::StoreClient;

/// Prints the store group, the set, routes and AllocSvr leases.
pub async fn status(store: &StoreClient) -> anyhow::Result<()> {
    println!("store replicas:");
    let all = store.status_all().await;
    for (addr, st) in &all {
        match st {
            Ok(s) => println!(
                "  {:<3} {addr:<22} {:<10} term {:<4} leader {:<3} applied {:<8} fsyncs {}",
                s.node_id,
                s.state,
                s.term,
                if s.has_leader {
                    s.leader_id.to_string()
                } else {
                    "-".into()
                },
                s.last_applied,
                s.fsyncs
            ),
            Err(e) => println!("  ?   {addr:<22} unreachable: {e}"),
        }
    }
    let routes = store.routes().await?;
    let s = &routes.set;
    println!(
        "set {}: uids [{}, {}), {} sections of {}, step {}",
        s.set_id,
        s.uid_begin,
        s.uid_end,
        s.section_count(),
        s.section_size,
        s.step
    );
    println!("route version {}", routes.version);
    let leader = all
        .iter()
        .filter_map(|(_, s)| s.as_ref().ok())
        .find(|s| s.state == "Leader");
    let owned: u32 = routes.entries.iter().map(|e| e.count).sum();
    match leader {
        Some(l) => {
            println!(
                "allocs (lease {} ms + margin {} ms, as the leader sees them):",
                l.lease_ms, l.margin_ms
            );
            for a in &l.allocs {
                let lease = match (a.since_grant_ms, a.expired) {
                    (_, true) => "EXPIRED".to_string(),
                    (-1, false) => "no renewal yet (new leader)".to_string(),
                    (ms, false) => format!("renewed {ms} ms ago"),
                };
                let drain = if a.draining { " draining" } else { "" };
                println!(
                    "  {:<12} {:<22} {:>4} sections  {lease}{drain}",
                    a.alloc_id, a.addr, a.sections
                );
            }
        }
        None => println!("allocs: (no leader to ask)"),
    }
    println!("  (unowned)    {} sections", s.section_count() - owned);
    Ok(())
}

/// Prints sections' ceilings, epochs and owners.
pub async fn sections(store: &StoreClient, first: u32, count: Option<u32>) -> anyhow::Result<()> {
    let total = store.routes().await?.set.section_count();
    let count = count.unwrap_or(total.saturating_sub(first));
    println!("{:>8} {:>20} {:>8}  owner", "section", "max_seq", "epoch");
    for s in store.read_sections(first, count).await? {
        let owner = s.owner.as_deref().unwrap_or("-");
        println!("{:>8} {:>20} {:>8}  {owner}", s.section, s.max_seq, s.epoch);
    }
    Ok(())
}

/// A live AllocSvr that may receive sections.
#[derive(Debug, Clone)]
struct Target {
    id: String,
    addr: String,
    sections: u32,
}

/// Live, non-draining AllocSvrs (per the leader's lease view).
async fn live_targets(store: &StoreClient) -> anyhow::Result<Vec<Target>> {
    let l = store
        .leader_status()
        .await
        .context("no store leader answered")?;
    Ok(l.allocs
        .iter()
        .filter(|a| {
            !a.draining
                && !a.expired
                && a.since_grant_ms >= 0
                && (a.since_grant_ms as u64) < l.lease_ms
        })
        .map(|a| Target {
            id: a.alloc_id.clone(),
            addr: a.addr.clone(),
            sections: a.sections,
        })
        .collect())
}

/// Asks `from` (at `addr`) to hand `moves` off; prints and returns results.
async fn hand_off(
    from: &str,
    addr: &str,
    moves: Vec<pb::Move>,
) -> anyhow::Result<Vec<pb::MoveResult>> {
    if moves.is_empty() {
        return Ok(Vec::new());
    }
    let mut c = AllocClient::connect(format!("http://{addr}"))
        .await
        .with_context(|| {
            format!("{from} at {addr} is unreachable; its sections move when its lease expires")
        })?;
    let results = c
        .handoff(pb::AllocHandoffRequest { moves })
        .await?
        .into_inner()
        .results;
    let mut us: Vec<u64> = results
        .iter()
        .filter(|r| r.ok)
        .map(|r| r.unavailable_us)
        .collect();
    us.sort_unstable();
    for r in results.iter().filter(|r| !r.ok) {
        println!(
            "  section {:>5} -> {:<12} FAILED: {}",
            r.section, r.to_alloc, r.error
        );
    }
    if let (Some(max), Some(p50)) = (us.last(), us.get(us.len() / 2)) {
        println!(
            "{from}: moved {} sections; unavailable per section: p50 {:.1} ms, max {:.1} ms",
            us.len(),
            *p50 as f64 / 1000.0,
            *max as f64 / 1000.0
        );
    }
    Ok(results)
}

/// Plans moves of `sections` onto `targets`, least loaded first.
fn plan(sections: &[u32], targets: &mut [Target]) -> Vec<pb::Move> {
    sections
        .iter()
        .map(|&s| {
            let t = targets
                .iter_mut()
                .min_by_key(|t| (t.sections, t.id.clone()))
                .expect("targets");
            t.sections += 1;
            pb::Move {
                section: s,
                to_alloc: t.id.clone(),
                to_addr: t.addr.clone(),
            }
        })
        .collect()
}

fn sections_of(routes: &seqsvr_core::RouteTable, alloc: &str) -> (Vec<u32>, Option<String>) {
    let mut out = Vec::new();
    let mut addr = None;
    for e in routes.entries.iter().filter(|e| e.alloc == alloc) {
        out.extend(e.first..e.first + e.count);
        addr = Some(e.addr.clone());
    }
    (out, addr)
}

/// Drains `alloc`: marks it draining and hands every section it serves to
/// the live AllocSvrs.
pub async fn drain(store: &StoreClient, alloc: &str) -> anyhow::Result<Vec<pb::MoveResult>> {
    store.set_draining(alloc, true).await?;
    let routes = store.routes().await?;
    let (sections, addr) = sections_of(&routes, alloc);
    let Some(addr) = addr else {
        println!("{alloc} is draining and serves no sections");
        return Ok(Vec::new());
    };
    let mut targets = live_targets(store).await?;
    targets.retain(|t| t.id != alloc);
    if targets.is_empty() {
        bail!("no live AllocSvr to take {alloc}'s sections");
    }
    let results = hand_off(alloc, &addr, plan(&sections, &mut targets)).await?;
    if results.iter().any(|r| !r.ok) {
        bail!("some sections did not move; run the drain again");
    }
    Ok(results)
}

/// Clears `alloc`'s draining mark (it then gets sections again from
/// `rebalance` or from the arbiter).
pub async fn undrain(store: &StoreClient, alloc: &str) -> anyhow::Result<()> {
    store.set_draining(alloc, false).await?;
    println!("{alloc} takes sections again; run `seqctl alloc rebalance` to give it its share");
    Ok(())
}

/// Evens out sections over the live AllocSvrs by planned handoffs (how a
/// new AllocSvr gets its share).
pub async fn rebalance(store: &StoreClient) -> anyhow::Result<()> {
    let mut targets = live_targets(store).await?;
    if targets.is_empty() {
        bail!("no live AllocSvr");
    }
    targets.sort_by(|a, b| a.id.cmp(&b.id));
    let routes = store.routes().await?;
    let total: u32 = targets.iter().map(|t| t.sections).sum();
    let n = targets.len() as u32;
    let share = |i: usize| total / n + u32::from((i as u32) < total % n);
    // Who gives which sections, and who needs how many.
    let mut donors: Vec<(Target, Vec<u32>)> = Vec::new();
    let mut needs: Vec<(Target, u32)> = Vec::new();
    for (i, t) in targets.iter().enumerate() {
        let want = share(i);
        if t.sections > want {
            let (secs, _) = sections_of(&routes, &t.id);
            let k = (t.sections - want) as usize;
            donors.push((t.clone(), secs[secs.len().saturating_sub(k)..].to_vec()));
        } else if t.sections < want {
            needs.push((t.clone(), want - t.sections));
        }
    }
    let mut moved = 0;
    for (from, secs) in donors {
        let mut moves = Vec::new();
        for s in secs {
            let Some((to, left)) = needs.iter_mut().find(|(_, left)| *left > 0) else {
                break;
            };
            *left -= 1;
            moves.push(pb::Move {
                section: s,
                to_alloc: to.id.clone(),
                to_addr: to.addr.clone(),
            });
        }
        moved += moves.len();
        hand_off(&from.id, &from.addr, moves).await?;
    }
    println!("rebalanced: moved {moved} of {total} sections over {n} allocs");
    Ok(())
}
