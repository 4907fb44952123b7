//! Declared counters on the admin plane (`AllocAdmin.Counter`,
//! `docs/counters.md`): create, set-floor, delete, show, list.
//!
//! A name is served from memory by the owner of its position's section,
//! so a write is applied by that owner alone (promise 1): it records the
//! declaration in its set's store, fenced by its epoch like a raise
//! (promise 3), puts it in force in memory, and only then answers. A call
//! that starts after the answer is served by the new declaration here; a
//! new owner reads the declarations of a section before serving it
//! (`raiser::load_counters`). An AllocSvr that does not own the section
//! passes the call on to the owner's peer plane (`AllocPeer.Counter`),
//! once: a passed-on call is applied or refused, never passed on again.

use std::time::Duration;

use seqsvr_core::{check_name, CounterDecl, CounterRules, SectionId, MAX_NAME_LEN};
use seqsvr_proto::alloc_peer_client::AllocPeerClient;
use seqsvr_proto::{self as pb, CounterOp};
use seqsvr_store_api::counters::{CounterShown, CounterWrite};
use seqsvr_store_api::{Error as StoreError, Rejection};
use tonic::Status;

use crate::error::{AllocError, CallError};
use crate::shared::Shared;

/// Most declarations one list call returns.
const MAX_LIST: u32 = 1000;
/// How long a call passed on to the owner may take.
const PASS_ON_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a write waits for the raise above a far floor before it
/// answers anyway (the floor is in force either way).
const ROOM_WAIT: Duration = Duration::from_secs(2);

/// Handles a counter call; `passed_on`: it came from another AllocSvr.
pub async fn counter_call(
    shared: &Shared,
    req: pb::CounterRequest,
    passed_on: bool,
) -> Result<pb::CounterReply, Status> {
    let op = CounterOp::try_from(req.op)
        .ok()
        .filter(|&op| op != CounterOp::Unspecified)
        .ok_or_else(|| invalid(shared, format!("not a counter call: op {}", req.op)))?;
    if op == CounterOp::CounterList {
        return list(shared, &req).await.map_err(|e| shared.status(&e));
    }
    check_name(&req.name).map_err(|e| invalid(shared, e.to_string()))?;
    let write = write_of(op, &req).map_err(|e| shared.status(&e))?;
    let alloc = &shared.alloc;
    let section = alloc
        .name_section(&req.name)
        .map_err(|e| shared.status(&CallError::Alloc(e)))?;
    if !(alloc.is_serving(section) && shared.admitted()) {
        if passed_on {
            return Err(shared.status(&CallError::Alloc(AllocError::NotOwner { section })));
        }
        return pass_on(shared, req, section).await;
    }
    let out = match write {
        None => show(shared, &req.name, section),
        Some(w) => apply(shared, &req.name, section, w).await,
    };
    out.map_err(|e| shared.status(&e))
}

fn invalid(shared: &Shared, reason: String) -> Status {
    shared.status(&CallError::Invalid(reason))
}

/// The write a call asks (`None`: a show), checked before anything is
/// proposed (promise 5); the store checks it again.
fn write_of(op: CounterOp, req: &pb::CounterRequest) -> Result<Option<CounterWrite>, CallError> {
    Ok(match op {
        CounterOp::CounterCreate => {
            let rules = CounterRules {
                max: req.has_max.then_some(req.max),
                increment: req.increment,
                offset: req.offset,
            };
            rules
                .validate(req.floor)
                .map_err(|e| CallError::Invalid(e.to_string()))?;
            Some(CounterWrite::Create {
                floor: req.floor,
                rules,
            })
        }
        CounterOp::CounterSetFloor => Some(CounterWrite::SetFloor { floor: req.floor }),
        CounterOp::CounterDelete => Some(CounterWrite::Delete),
        _ => None,
    })
}

/// The state of `name` as its owner serves it.
fn state(shared: &Shared, name: &[u8], section: SectionId, decl: CounterDecl) -> pb::CounterState {
    let current = shared.alloc.current_name(name).ok();
    pb::CounterState {
        decl: Some(
            (&CounterShown {
                name: name.to_vec(),
                section,
                decl,
            })
                .into(),
        ),
        has_current: current.is_some(),
        current: current.unwrap_or(0),
    }
}

fn show(shared: &Shared, name: &[u8], section: SectionId) -> Result<pb::CounterReply, CallError> {
    let decl = shared.alloc.counter_decl(name, section).unwrap_or_default();
    Ok(pb::CounterReply {
        counters: vec![state(shared, name, section, decl)],
        changed: false,
        more: false,
    })
}

/// Applies a write as the owner: in the store (fenced by our epoch), then
/// in memory, then the answer.
async fn apply(
    shared: &Shared,
    name: &[u8],
    section: SectionId,
    write: CounterWrite,
) -> Result<pb::CounterReply, CallError> {
    let alloc = &shared.alloc;
    // One write at a time here: memory takes them in the store's order.
    let one = alloc.counter_write_lock().await;
    let epoch = alloc.known_epoch(section);
    let handed_out = alloc.name_held(name).unwrap_or(0);
    let (shown, changed) = shared
        .store
        .counter_write(
            &shared.id,
            shared.incarnation(),
            section,
            epoch,
            name,
            write,
            handed_out,
        )
        .await
        .map_err(|e| store_error(e, section))?;
    alloc.set_counter_decl(name, section, shown.decl);
    drop(one);
    if changed {
        tracing::info!(name = %String::from_utf8_lossy(name), section, decl = ?shown.decl, "counter declaration written");
    }
    // A floor at or above the ceiling here (an import's far floor): the
    // store lifted the ceiling to the floor in the same write, and the
    // raise of one step above it is asked now, so the name's next call is
    // served from memory instead of waiting for it (docs/counters.md, A
    // far floor is served at once).
    let deadline = tokio::time::Instant::now() + ROOM_WAIT;
    if !alloc.room_above(section, shown.decl.floor, deadline).await {
        tracing::debug!(
            section,
            floor = shown.decl.floor,
            "no room above the floor yet"
        );
    }
    Ok(pb::CounterReply {
        counters: vec![state(shared, name, section, shown.decl)],
        changed,
        more: false,
    })
}

/// A store refusal of a counter write, as the caller should see it: a
/// lost ownership is "not the owner" (retry: it reaches the new one).
fn store_error(e: StoreError, section: SectionId) -> CallError {
    match e {
        StoreError::Rejected(
            Rejection::StaleEpoch { .. }
            | Rejection::OwnedElsewhere { .. }
            | Rejection::NotServing { .. },
        ) => CallError::Alloc(AllocError::NotOwner { section }),
        StoreError::Rejected(Rejection::Invalid(m)) | StoreError::Invalid(m) => {
            CallError::Invalid(m)
        }
        e => CallError::Store(e),
    }
}

/// Every declaration of the set by name, after `req.name`, from the store.
async fn list(shared: &Shared, req: &pb::CounterRequest) -> Result<pb::CounterReply, CallError> {
    if req.name.len() > MAX_NAME_LEN {
        return Err(CallError::Invalid(format!(
            "a list starts after a name of 0..={MAX_NAME_LEN} bytes"
        )));
    }
    let limit = match req.limit {
        0 => MAX_LIST,
        n => n.min(MAX_LIST),
    };
    let (found, more) = shared
        .store
        .counters_after(&req.name, limit)
        .await
        .map_err(CallError::Store)?;
    let counters = found
        .iter()
        .map(|c| pb::CounterState {
            decl: Some(c.into()),
            has_current: false,
            current: 0,
        })
        .collect();
    Ok(pb::CounterReply {
        counters,
        changed: false,
        more,
    })
}

/// Passes a call on to the owner of `section`, as the route table and the
/// store's list of AllocSvrs name it.
async fn pass_on(
    shared: &Shared,
    req: pb::CounterRequest,
    section: SectionId,
) -> Result<pb::CounterReply, Status> {
    let not_owner = || shared.status(&CallError::Alloc(AllocError::NotOwner { section }));
    let owner = {
        let t = shared.routes();
        t.table.entry_for_section(section).map(|e| e.alloc.clone())
    };
    let Some(owner) = owner.filter(|o| !o.is_empty() && *o != shared.id) else {
        return Err(not_owner());
    };
    let status = shared.store.leader_status().await;
    let addr = (status.iter().flat_map(|s| &s.allocs))
        .find(|a| a.alloc_id == owner)
        .map(|a| a.peer_addr.clone())
        .filter(|a| !a.is_empty())
        .ok_or_else(not_owner)?;
    let channel = crate::handoff::peer_channel(shared, &addr)
        .map_err(|e| shared.status(&CallError::Internal(e)))?;
    let mut client = AllocPeerClient::new(channel);
    match tokio::time::timeout(PASS_ON_TIMEOUT, client.counter(req)).await {
        Ok(r) => r.map(|r| r.into_inner()),
        Err(_) => Err(shared.status(&CallError::Internal(format!(
            "the owner {owner} at {addr} did not answer in time"
        )))),
    }
}
