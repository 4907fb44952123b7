//! `seqctl status` and `seqctl sections`: read-only views over the store's
//! client plane (and, for the leases, the leader's admin plane when the
//! operator's credentials reach it).

use seqsvr_proto::{self as pb};

use super::Ctl;
use crate::error::{Error, Result};
use crate::outln;

/// Prints the store group, the set, routes and AllocSvr leases.
pub async fn status(ctl: &Ctl) -> Result<()> {
    outln!("store replicas:")?;
    let replicas = ctl.read.status_all().await;
    for (addr, st) in &replicas {
        match st {
            Ok(s) => outln!(
                "  {:<3} {addr:<22} {:<10} term {:<4} leader {:<3} applied {:<8} fsyncs {:<6} \
                 version {}",
                s.node_id,
                s.state,
                s.term,
                if s.has_leader {
                    s.leader_id.to_string()
                } else {
                    "-".into()
                },
                s.last_applied,
                s.fsyncs,
                version(&s.version)
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
            let versions = alloc_versions(ctl, &l.allocs).await;
            for (a, v) in l.allocs.iter().zip(versions) {
                print_lease(a, &v)?;
            }
        }
        None => outln!("allocs: (no leader to ask)")?,
    }
    outln!("  (unowned)    {} sections", s.section_count() - owned)?;
    Ok(())
}

/// A server's version as `status` prints it: `?` when it did not say (a
/// build before versions were reported, or no answer).
pub fn version(v: &str) -> &str {
    if v.is_empty() {
        "?"
    } else {
        v
    }
}

/// Each AllocSvr's version, from its own status on its client plane (empty
/// where it does not answer within a second).
async fn alloc_versions(ctl: &Ctl, allocs: &[pb::AllocLease]) -> Vec<String> {
    let asks = allocs.iter().map(|a| async move {
        let Ok(mut c) = ctl.alloc_client(&a.addr) else {
            return String::new();
        };
        let call = c.status(pb::AllocStatusRequest {});
        match tokio::time::timeout(std::time::Duration::from_secs(1), call).await {
            Ok(Ok(s)) => s.into_inner().version,
            _ => String::new(),
        }
    });
    futures::future::join_all(asks).await
}

/// One AllocSvr's line in `status`.
fn print_lease(a: &pb::AllocLease, v: &str) -> Result<()> {
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
        "  {:<12} incarnation {:x}  version {}  peer {}  admin {}",
        "",
        a.incarnation,
        version(v),
        a.peer_addr,
        a.admin_addr
    )
}

/// The sections `seqctl sections FIRST [COUNT]` shows, `(first, count)`,
/// in a set of `total`: every one from `first` to the last without a
/// count; an error naming the sections asked for when they are not all in
/// the set.
pub fn window(total: u32, first: u32, count: Option<u32>) -> Result<(u32, u32)> {
    let last = total.checked_sub(1);
    let range = |last| format!("the set has {total} sections, 0 to {last}");
    let Some(last) = last else {
        return Err(Error::Failed("the set has no sections".into()));
    };
    if first > last {
        return Err(Error::Usage(format!(
            "section {first} is not in the set: {}",
            range(last)
        )));
    }
    let count = count.unwrap_or(total - first);
    if count == 0 {
        return Err(Error::Usage("a count of 0 shows nothing".into()));
    }
    let end = first as u64 + count as u64 - 1;
    if end > last as u64 {
        return Err(Error::Usage(format!(
            "sections {first} to {end} run past the set's end: {}; give a count of at most {}",
            range(last),
            total - first
        )));
    }
    Ok((first, count))
}

/// One section as `sections --json` prints it.
#[derive(Debug, serde::Serialize)]
struct SectionRow<'a> {
    section: u32,
    max_seq: u64,
    epoch: u64,
    owner: Option<&'a str>,
    incarnation: String,
}

/// Prints sections' ceilings, epochs and owners (see [`window`]).
pub async fn sections(ctl: &Ctl, first: u32, count: Option<u32>, json: bool) -> Result<()> {
    let total = ctl.read.routes().await?.set.section_count();
    let (first, count) = window(total, first, count)?;
    let all = ctl.read.read_sections(first, count).await?;
    if json {
        let rows: Vec<SectionRow> = all
            .iter()
            .map(|s| SectionRow {
                section: s.section,
                max_seq: s.record.max_seq,
                epoch: s.record.epoch,
                owner: s.record.owner.as_deref(),
                incarnation: format!("{:x}", s.record.incarnation),
            })
            .collect();
        return super::print::json(&rows);
    }
    outln!(
        "{:>8} {:>20} {:>8}  {:<12} incarnation",
        "section",
        "max_seq",
        "epoch",
        "owner"
    )?;
    for s in all {
        let r = &s.record;
        let owner = r.owner.as_deref().unwrap_or("-");
        outln!(
            "{:>8} {:>20} {:>8}  {owner:<12} {:x}",
            s.section,
            r.max_seq,
            r.epoch,
            r.incarnation
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sections_asked_for_are_the_ones_named() {
        assert_eq!(window(100, 0, None).unwrap(), (0, 100));
        assert_eq!(window(100, 98, None).unwrap(), (98, 2));
        assert_eq!(window(100, 98, Some(2)).unwrap(), (98, 2));
        // `sections 500 2` on 100 sections names 500, not 501.
        let e = window(100, 500, Some(2)).unwrap_err().to_string();
        assert_eq!(
            e,
            "section 500 is not in the set: the set has 100 sections, 0 to 99"
        );
        let e = window(100, 99, Some(2)).unwrap_err().to_string();
        assert_eq!(
            e,
            "sections 99 to 100 run past the set's end: the set has 100 sections, 0 to 99; \
             give a count of at most 1"
        );
        assert!(window(100, 0, Some(0)).is_err());
        assert!(window(0, 0, None).is_err());
        assert_eq!(
            window(100, 5, Some(u32::MAX))
                .unwrap_err()
                .to_string()
                .split(':')
                .next(),
            Some("sections 5 to 4294967299 run past the set's end")
        );
    }
}
