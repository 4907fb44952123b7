//! Planned moves: hand a section to another AllocSvr with an explicit
//! release, so nobody waits for a lease to expire.
//!
//! Order matters for promise 1: this AllocSvr first stops serving the
//! section, *then* the store hands it over (new owner, new epoch, ceiling +
//! step) and the new owner starts at the previous ceiling. The section is
//! unavailable only between those two points: one Raft write and one RPC.
//! If anything fails after the release, nothing is lost: the section is
//! either still ours (our next renewal lists it and we take it back) or the
//! new owner's (its next renewal lists it and it takes it over).

use std::time::Instant;

use seqsvr_proto::alloc_client::AllocClient;
use seqsvr_proto::{self as pb};

use crate::service::Shared;

/// Moves one section; reports how long it was unavailable.
pub async fn move_section(shared: &Shared, m: &pb::Move) -> pb::MoveResult {
    let mut result = pb::MoveResult {
        section: m.section,
        to_alloc: m.to_alloc.clone(),
        ..Default::default()
    };
    let start = Instant::now();
    shared.alloc.drop_section(m.section);
    let outcome = async {
        let grants = shared
            .store
            .handoff(&shared.id, &m.to_alloc, m.section, 1)
            .await
            .map_err(|e| format!("store handoff: {e}"))?;
        let mut to = AllocClient::connect(format!("http://{}", m.to_addr))
            .await
            .map_err(|e| format!("connect {}: {e}", m.to_addr))?;
        let grants = grants
            .iter()
            .map(|g| pb::SectionGrant {
                section: g.section,
                epoch: g.epoch,
                prev_ceiling: g.prev_ceiling,
                max_seq: g.max_seq,
            })
            .collect();
        to.adopt(pb::AdoptRequest { grants })
            .await
            .map_err(|e| format!("adopt at {}: {}", m.to_alloc, e.message()))?;
        Ok::<(), String>(())
    }
    .await;
    result.unavailable_us = start.elapsed().as_micros() as u64;
    match outcome {
        Ok(()) => result.ok = true,
        Err(e) => {
            tracing::warn!(section = m.section, to = %m.to_alloc, "handoff incomplete: {e}");
            result.error = e;
        }
    }
    result
}
