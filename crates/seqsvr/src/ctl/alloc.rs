//! `seqctl alloc …`: planned moves (drain, undrain, rebalance), fencing
//! an AllocSvr incarnation, and retiring an AllocSvr that is gone.
//!
//! Planned moves never route a section away from a live AllocSvr behind its
//! back: the current owner is asked to hand each section off (it stops
//! serving, the store hands the section over in one write, the new owner
//! starts at once), so no lease has to expire and no two AllocSvrs ever
//! serve a section at the same time (promise 3, see
//! `docs/architecture/failover.md`). Only sections with no owner, or whose
//! owner's lease has certainly expired, are routed with `Assign` — and the
//! store refuses anything else.

use clap::Subcommand;
use seqsvr_core::section::runs_by;
use seqsvr_core::{Incarnation, RouteTable, SectionId};
use seqsvr_proto::{self as pb};

use super::Ctl;
use crate::error::{Context, Error, Result};
use crate::outln;

/// `seqctl alloc …`.
#[derive(Subcommand, Debug, Clone)]
pub enum AllocOp {
    /// Hands every section of an AllocSvr to the others and keeps it empty.
    Drain {
        /// The AllocSvr's id.
        id: String,
    },
    /// Lets a drained AllocSvr take sections again.
    Undrain {
        /// The AllocSvr's id.
        id: String,
    },
    /// Evens out sections over the live AllocSvrs (after one joins).
    Rebalance,
    /// Refuses one incarnation of an AllocSvr from now on (as `seqctl
    /// status` shows it, in hex): its renewals fail, its sections move once
    /// its lease has certainly expired, and then the store retires it by
    /// itself (unless a new process of the id registered first).
    Fence {
        /// The AllocSvr's id.
        id: String,
        /// The incarnation to refuse (hexadecimal).
        #[arg(value_parser = parse_incarnation)]
        incarnation: u64,
    },
    /// Removes an AllocSvr that is gone from the store's list, so moves
    /// stop waiting for it. Refused while it owns sections or while its
    /// lease may still run (fence it or stop it, then wait out the lease).
    /// Running it again after it went says it is not registered. A fenced
    /// one needs none: the store retires it once its lease is over and its
    /// sections moved.
    Retire {
        /// The AllocSvr's id.
        id: String,
    },
}

/// Runs `seqctl alloc <op>`.
pub async fn run(ctl: &Ctl, op: AllocOp) -> Result<()> {
    match op {
        AllocOp::Drain { id } => drain(ctl, &id).await.map(drop),
        AllocOp::Undrain { id } => undrain(ctl, &id).await,
        AllocOp::Rebalance => rebalance(ctl).await,
        AllocOp::Fence { id, incarnation } => fence(ctl, &id, incarnation).await,
        AllocOp::Retire { id } => retire(ctl, &id).await,
    }
}

/// A live AllocSvr that may receive sections.
#[derive(Debug, Clone)]
struct Target {
    id: String,
    sections: u32,
}

/// The leader's lease view: every AllocSvr it knows, and the lease length.
async fn leases(ctl: &Ctl) -> Result<(Vec<pb::AllocLease>, u64)> {
    let l = ctl
        .leader_status()
        .await
        .context("no store leader answered")?;
    Ok((l.allocs, l.lease_ms))
}

/// Live, non-draining AllocSvrs among `allocs` (renewed within `lease_ms`).
fn live_targets(allocs: &[pb::AllocLease], lease_ms: u64) -> Vec<Target> {
    allocs
        .iter()
        .filter(|a| {
            !a.draining
                && !a.expired
                && !a.fenced
                && a.since_grant_ms >= 0
                && (a.since_grant_ms as u64) < lease_ms
        })
        .map(|a| Target {
            id: a.alloc_id.clone(),
            sections: a.sections,
        })
        .collect()
}

/// Asks `from` (admin plane at `admin_addr`) to hand `moves` off; prints
/// and returns the results.
async fn hand_off(
    ctl: &Ctl,
    from: &str,
    admin_addr: &str,
    moves: Vec<pb::Move>,
) -> Result<Vec<pb::MoveResult>> {
    if moves.is_empty() {
        return Ok(Vec::new());
    }
    let unreachable = || {
        format!("{from} at {admin_addr} is unreachable; its sections move when its lease expires")
    };
    let mut c = ctl.alloc_admin(admin_addr).with_context(unreachable)?;
    let results = c
        .handoff(pb::AllocHandoffRequest { moves })
        .await
        .with_context(unreachable)?
        .into_inner()
        .results;
    let mut us: Vec<u64> = results
        .iter()
        .filter(|r| r.ok)
        .map(|r| r.unavailable_us)
        .collect();
    us.sort_unstable();
    for r in results.iter().filter(|r| !r.ok) {
        outln!(
            "  section {:>5} -> {:<12} FAILED: {}",
            r.section,
            r.to_alloc,
            r.error
        )?;
    }
    if let (Some(max), Some(p50)) = (us.last(), us.get(us.len() / 2)) {
        outln!(
            "{from}: moved {} sections; unavailable per section: p50 {:.1} ms, max {:.1} ms",
            us.len(),
            *p50 as f64 / 1000.0,
            *max as f64 / 1000.0
        )?;
    }
    Ok(results)
}

/// Routes each of `moves` with `Assign`, conditional on the epoch each
/// section has now: for sections with no owner, or whose owner's lease has
/// certainly expired (the store refuses any other). Consecutive sections
/// bound for one AllocSvr go in one call.
async fn assign(ctl: &Ctl, moves: &[pb::Move]) -> Result<Vec<pb::MoveResult>> {
    let mut results = Vec::with_capacity(moves.len());
    for run in runs(moves) {
        let (first, to) = (run[0].section, &run[0].to_alloc);
        let epochs = ctl
            .read
            .read_sections(first, run.len() as u32)
            .await?
            .iter()
            .map(|s| s.record.epoch)
            .collect();
        let outcome = ctl.admin.assign(to, first, epochs).await;
        if let Err(e) = &outcome {
            outln!(
                "  sections {first}..{} -> {to:<12} FAILED: {e}",
                first + run.len() as u32
            )?;
        }
        results.extend(run.iter().map(|m| {
            pb::MoveResult {
                section: m.section,
                to_alloc: m.to_alloc.clone(),
                ok: outcome.is_ok(),
                error: outcome
                    .as_ref()
                    .err()
                    .map(ToString::to_string)
                    .unwrap_or_default(),
                unavailable_us: 0,
            }
        }));
    }
    let ok = results.iter().filter(|r| r.ok).count();
    if ok > 0 {
        outln!("assigned {ok} sections")?;
    }
    Ok(results)
}

/// `moves` cut into runs of consecutive sections bound for one AllocSvr.
fn runs(moves: &[pb::Move]) -> Vec<&[pb::Move]> {
    runs_by(moves, |m| m.section, |a, b| a.to_alloc == b.to_alloc)
}

/// Plans moves of `sections` onto `targets`, least loaded first.
fn plan(sections: &[SectionId], targets: &mut [Target]) -> Vec<pb::Move> {
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
            }
        })
        .collect()
}

/// The sections routed to `alloc`.
fn sections_of(routes: &RouteTable, alloc: &str) -> Vec<SectionId> {
    routes
        .entries
        .iter()
        .filter(|e| e.alloc == alloc)
        .flat_map(|e| e.first..e.first + e.count)
        .collect()
}

/// The sections routed to nobody.
fn unowned(routes: &RouteTable) -> Vec<SectionId> {
    (0..routes.set.section_count())
        .filter(|&s| routes.entry_for_section(s).is_none())
        .collect()
}

/// Drains `alloc`: marks it draining and moves every section it serves to
/// the live AllocSvrs — handed off by `alloc` itself while it holds a
/// lease, assigned by the store once its lease has certainly expired.
pub async fn drain(ctl: &Ctl, alloc: &str) -> Result<Vec<pb::MoveResult>> {
    ctl.admin.set_draining(alloc, true).await?;
    let routes = ctl.read.routes().await?;
    let sections = sections_of(&routes, alloc);
    if sections.is_empty() {
        outln!("{alloc} is draining and serves no sections")?;
        return Ok(Vec::new());
    }
    let (allocs, lease_ms) = leases(ctl).await?;
    let mut targets = live_targets(&allocs, lease_ms);
    targets.retain(|t| t.id != alloc);
    if targets.is_empty() {
        return Err(Error::Failed(format!(
            "no live AllocSvr to take {alloc}'s sections"
        )));
    }
    let moves = plan(&sections, &mut targets);
    let results = match allocs.iter().find(|a| a.alloc_id == alloc) {
        Some(a) if !a.expired => hand_off(ctl, alloc, &a.admin_addr, moves).await?,
        _ => assign(ctl, &moves).await?,
    };
    if results.iter().any(|r| !r.ok) {
        return Err(Error::Failed(
            "some sections did not move; run the drain again".into(),
        ));
    }
    Ok(results)
}

/// Clears `alloc`'s draining mark (it then gets sections again from
/// `rebalance` or from the arbiter).
pub async fn undrain(ctl: &Ctl, alloc: &str) -> Result<()> {
    ctl.admin.set_draining(alloc, false).await?;
    outln!("{alloc} takes sections again; run `seqctl alloc rebalance` to give it its share")?;
    Ok(())
}

/// Evens out sections over the live AllocSvrs (how a new AllocSvr gets its
/// share): sections with no owner are assigned, then the most loaded hand
/// sections off to the least loaded.
pub async fn rebalance(ctl: &Ctl) -> Result<()> {
    let (allocs, lease_ms) = leases(ctl).await?;
    let mut targets = live_targets(&allocs, lease_ms);
    if targets.is_empty() {
        return Err(Error::Failed("no live AllocSvr".into()));
    }
    targets.sort_by(|a, b| a.id.cmp(&b.id));
    let routes = ctl.read.routes().await?;
    let free = unowned(&routes);
    if !free.is_empty() {
        let results = assign(ctl, &plan(&free, &mut targets)).await?;
        if results.iter().any(|r| !r.ok) {
            return Err(Error::Failed(
                "some unowned sections could not be assigned; run the rebalance again".into(),
            ));
        }
    }
    let total: u32 = targets.iter().map(|t| t.sections).sum();
    let n = targets.len() as u32;
    let share = |i: usize| total / n + u32::from((i as u32) < total % n);
    // Who gives which sections, and who needs how many.
    let mut donors: Vec<(Target, Vec<SectionId>)> = Vec::new();
    let mut needs: Vec<(Target, u32)> = Vec::new();
    for (i, t) in targets.iter().enumerate() {
        let want = share(i);
        if t.sections > want {
            let secs = sections_of(&routes, &t.id);
            let k = (t.sections - want) as usize;
            donors.push((t.clone(), secs[secs.len().saturating_sub(k)..].to_vec()));
        } else if t.sections < want {
            needs.push((t.clone(), want - t.sections));
        }
    }
    let mut moved = free.len();
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
            });
        }
        let admin_addr = allocs
            .iter()
            .find(|a| a.alloc_id == from.id)
            .map(|a| a.admin_addr.clone())
            .unwrap_or_default();
        moved += moves.len();
        hand_off(ctl, &from.id, &admin_addr, moves).await?;
    }
    outln!("rebalanced: moved {moved} of {total} sections over {n} allocs")?;
    Ok(())
}

/// Refuses `alloc`'s `incarnation` from now on: its renewals fail, and its
/// sections move once its lease has certainly expired (or a new process
/// with the same id registers then); after that the store retires it.
pub async fn fence(ctl: &Ctl, alloc: &str, incarnation: Incarnation) -> Result<()> {
    ctl.admin.fence_alloc(alloc, incarnation).await?;
    outln!(
        "{alloc} incarnation {incarnation:x} is fenced: its sections move once its lease has \
         certainly expired, then the store retires it (unless a new process of {alloc} \
         registers first)"
    )?;
    Ok(())
}

/// Retires `alloc` (see [`AllocOp::Retire`]).
pub async fn retire(ctl: &Ctl, alloc: &str) -> Result<()> {
    ctl.admin.retire_alloc(alloc).await?;
    outln!("{alloc} is retired: the store no longer knows it")?;
    Ok(())
}

/// Parses an incarnation as seqsvr prints it: hexadecimal, `0x` optional.
pub fn parse_incarnation(s: &str) -> Result<Incarnation, String> {
    let digits = s.strip_prefix("0x").unwrap_or(s);
    match u64::from_str_radix(digits, 16) {
        Ok(0) => Err("incarnation 0 is never registered".into()),
        Ok(v) => Ok(v),
        Err(e) => Err(format!("{s:?} is not a hexadecimal incarnation: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mv(section: u32, to: &str) -> pb::Move {
        pb::Move {
            section,
            to_alloc: to.into(),
        }
    }

    #[test]
    fn plans_onto_the_least_loaded_and_cuts_runs() {
        let mut targets = vec![
            Target {
                id: "a".into(),
                sections: 2,
            },
            Target {
                id: "b".into(),
                sections: 0,
            },
        ];
        let moves = plan(&[4, 5, 6, 9], &mut targets);
        let to: Vec<&str> = moves.iter().map(|m| m.to_alloc.as_str()).collect();
        assert_eq!(to, ["b", "b", "a", "b"]);
        let runs: Vec<Vec<u32>> = runs(&moves)
            .iter()
            .map(|r| r.iter().map(|m| m.section).collect())
            .collect();
        assert_eq!(runs, [vec![4, 5], vec![6], vec![9]]);
        let split_by_target = [mv(1, "a"), mv(2, "a"), mv(3, "b")];
        assert_eq!(super::runs(&split_by_target).len(), 2);
        assert!(super::runs(&[]).is_empty());
    }

    #[test]
    fn incarnations_are_hex_as_printed() {
        assert_eq!(parse_incarnation("ff"), Ok(255));
        assert_eq!(parse_incarnation("0xFF"), Ok(255));
        assert!(parse_incarnation("0").is_err());
        assert!(parse_incarnation("xyz").is_err());
    }
}
