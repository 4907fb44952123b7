//! `seqctl status` and `seqctl sections`: read-only views over the store's
//! client plane (and, for the leases, the leader's admin plane when the
//! operator's credentials reach it).

use seqsvr_proto::{self as pb};

use super::Ctl;
use crate::error::Result;
use crate::outln;

/// Prints the store group, the set, routes and AllocSvr leases.
pub async fn status(ctl: &Ctl) -> Result<()> {
    outln!("store replicas:")?;
    let replicas = ctl.read.status_all().await;
    for (addr, st) in &replicas {
        match st {
            Ok(s) => outln!(
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
            )?,
            Err(e) => outln!("  ?   {addr:<22} unreachable: {e}")?,
        }
    }
    super::members::print_membership(&replicas)?;
    let routes = ctl.read.routes().await?;
    let s = &routes.set;
    outln!(
        "set {}: uids [{}, {}), {} sections of {}, step {}",
        s.set_id,
        s.uid_begin,
        s.uid_end,
        s.section_count(),
        s.section_size,
        s.step
    )?;
    outln!("route version {}", routes.version)?;
    let owned: u32 = routes.entries.iter().map(|e| e.count).sum();
    match ctl.leader_status().await {
        Some(l) => {
            outln!(
                "allocs (lease {} ms + margin {} ms, as the leader sees them):",
                l.lease_ms,
                l.margin_ms
            )?;
            for a in &l.allocs {
                print_lease(a)?;
            }
        }
        None => outln!("allocs: (no leader to ask)")?,
    }
    outln!("  (unowned)    {} sections", s.section_count() - owned)?;
    Ok(())
}

/// One AllocSvr's line in `status`.
fn print_lease(a: &pb::AllocLease) -> Result<()> {
    let lease = match (a.since_grant_ms, a.expired) {
        (_, true) => "EXPIRED".to_string(),
        (-1, false) => "no renewal yet (new leader)".to_string(),
        (ms, false) => format!("renewed {ms} ms ago"),
    };
    let drain = if a.draining { " draining" } else { "" };
    let fenced = if a.fenced { " FENCED" } else { "" };
    outln!(
        "  {:<12} {:<22} {:>4} sections  {lease}{drain}{fenced}",
        a.alloc_id,
        a.addr,
        a.sections
    )?;
    outln!(
        "  {:<12} incarnation {:x}  peer {}  admin {}",
        "",
        a.incarnation,
        a.peer_addr,
        a.admin_addr
    )
}

/// Prints sections' ceilings, epochs and owners.
pub async fn sections(ctl: &Ctl, first: u32, count: Option<u32>) -> Result<()> {
    let total = ctl.read.routes().await?.set.section_count();
    let count = count.unwrap_or(total.saturating_sub(first));
    outln!(
        "{:>8} {:>20} {:>8}  {:<12} incarnation",
        "section",
        "max_seq",
        "epoch",
        "owner"
    )?;
    for s in ctl.read.read_sections(first, count).await? {
        let owner = s.owner.as_deref().unwrap_or("-");
        outln!(
            "{:>8} {:>20} {:>8}  {owner:<12} {:x}",
            s.section,
            s.max_seq,
            s.epoch,
            s.incarnation
        )?;
    }
    Ok(())
}
