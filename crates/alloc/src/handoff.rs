//! Planned moves (`docs/architecture/failover.md`, Planned moves): hand a
//! section to another AllocSvr with an explicit release, so nobody waits
//! for a lease to expire; and the receiving side, adopt.
//!
//! Releasing side, per move, in order:
//! 1. check the move (section served here, a target that is not us and
//!    that the store's leader lists as registered, neither fenced nor
//!    draining — asked once per request, [`move_sections`];
//!    [`release_section`]); an invalid move changes nothing, and the
//!    section is served on at its epoch;
//! 2. mark the section *releasing* (renewals neither claim nor drop it),
//!    remember its epoch and ceiling, and stop serving it — before the
//!    store hands it over, so no number is handed out here after the new
//!    owner starts (promise 3, hence promise 1 across owners);
//! 3. the store's conditional `Handoff` (only if this incarnation still
//!    holds the section at that epoch): new owner, new epoch, ceiling +
//!    step, in one write;
//! 4. on success, tell the new owner (`AllocPeer.Adopt`), best effort: if
//!    that fails, its next renewal claims the prepared grant, no step
//!    skipped (promise 4);
//! 5. on failure or an unknown outcome, read the section back from the
//!    store ([`decide_after_handoff`]), leave it dropped either way, unmark
//!    it, and, if it is still ours at the released epoch, ask for an early
//!    renewal: its take-over claims the section at a *new* epoch, which
//!    fences every late copy of the handoff. Serving it again from memory
//!    at the released epoch is unsafe: a late copy of the `Handoff`
//!    (hedged to another replica, parked at a paused one, delayed on a
//!    lossy link) is conditional only on that epoch and could still land,
//!    moving the section while this process serves it (two owners, promise
//!    3; the seeded simulation's bug 5). A failed handoff therefore costs
//!    one step (promise 4's allowance for a take-over) and keeps the
//!    section unavailable until the renewal, at most one renewal interval.
//!
//! Receiving side ([`adopt`]): the message names sections and epochs only;
//! the control loop checks it, then each section is checked with the store
//! ([`decide_adopt`](crate::ownership::decide_adopt)) and only what the
//! store confirms is installed, so a forged or replayed adopt cannot make
//! this process serve what it does not hold (promise 3).

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use seqsvr_core::section::Runs;
use seqsvr_core::{Epoch, SectionId};
use seqsvr_proto::alloc_peer_client::AllocPeerClient;
use seqsvr_proto::{self as pb};
use seqsvr_store_api::SectionInfo;
use tonic::transport::Channel;

use crate::control::{AdoptCheck, Effect, Event};
use crate::error::{CallError, MoveError};
use crate::ownership::{runs, AdoptNamed, AfterHandoff};
pub use crate::ownership::{Released, Target, MAX_ADOPT};
pub use crate::shared::PeerChannels;
use crate::shared::Shared;

/// How long the store's handoff write may take, retries included.
pub const HANDOFF_DEADLINE: Duration = Duration::from_secs(2);
/// How long one store replica gets before the next is asked too.
pub const STORE_ATTEMPT: Duration = Duration::from_millis(500);
/// How long the read-back after a failed handoff may take.
pub const CHECK_DEADLINE: Duration = Duration::from_secs(2);
/// How long connecting to the new owner may take.
pub const ADOPT_CONNECT: Duration = Duration::from_millis(500);
/// How long the new owner's `Adopt` may take once connected.
pub const ADOPT_TIMEOUT: Duration = Duration::from_secs(1);
/// How long an adopt's store read may take: less than the sender's
/// [`ADOPT_TIMEOUT`], so the sender hears a typed answer.
pub const ADOPT_READ_DEADLINE: Duration = Duration::from_millis(800);
/// Peer channels kept for adopts (one per other AllocSvr; a handful).
const MAX_PEER_CHANNELS: usize = 64;

/// The releasing mark of one move: if the move panics, dropping it
/// removes the mark — a section must never stay marked (renewals would
/// never claim it again). A move that ends normally ends it through the
/// control loop ([`Event::HandoffAnswered`], [`Event::HandoffChecked`]).
struct Mark<'a> {
    shared: &'a Shared,
    section: SectionId,
    /// The control loop took the mark off.
    done: bool,
}

impl Mark<'_> {
    /// Steps the control loop on `event` under the ownership lock; the
    /// move is then over as far as the mark is concerned if the loop
    /// removed it. Performs an early renewal request; returns the rest.
    fn step(&mut self, event: Event) -> Vec<Effect> {
        let mut own = self.shared.ownership();
        let effects = own.on(Instant::now(), event);
        self.done = !own.releasing().contains_key(&self.section);
        let mut rest = Vec::new();
        for e in effects {
            match e {
                Effect::WakeRenewal => self.shared.renew_now.notify_one(),
                e => rest.push(e),
            }
        }
        rest
    }
}

impl Drop for Mark<'_> {
    fn drop(&mut self) {
        if !self.done {
            self.shared.ownership().unmark(self.section);
        }
    }
}

/// Step 1 and 2: checks the move (`target`: what the store's leader said
/// of its target), then marks the section releasing and stops serving it
/// ([`Control::release`](crate::control::Control::release)), under the
/// ownership lock so that a renewal sees it either served or marked.
fn release<'a>(
    shared: &'a Shared,
    m: &pb::Move,
    target: &Target,
) -> Result<(Mark<'a>, Released), MoveError> {
    let mut own = shared.ownership();
    let (released, _handoff) = own.release(&shared.alloc, m.section, &m.to_alloc, target)?;
    let mark = Mark {
        shared,
        section: m.section,
        done: false,
    };
    Ok((mark, released))
}

/// Moves each section in turn (`AllocAdmin.Handoff`), after asking the
/// store's leader once which of the targets named may take a section
/// ([`targets`]): a move to one it does not list is refused before the
/// section is released, and the section is served on at its epoch.
pub async fn move_sections(shared: &Shared, moves: &[pb::Move]) -> Vec<pb::MoveResult> {
    let targets = targets(shared, moves.iter().map(|m| m.to_alloc.as_str())).await;
    let mut results = Vec::with_capacity(moves.len());
    for m in moves {
        let target = targets.get(m.to_alloc.as_str()).unwrap_or(&Target::Ready);
        results.push(move_section(shared, m, target).await);
    }
    log_handed_off(&results);
    results
}

/// One line for a batch of handoffs: per target, the sections that moved
/// (failures have lines of their own).
pub fn log_handed_off(results: &[pb::MoveResult]) {
    let mut by: BTreeMap<&str, Vec<SectionId>> = BTreeMap::new();
    for r in results.iter().filter(|r| r.ok) {
        by.entry(r.to_alloc.as_str()).or_default().push(r.section);
    }
    let worst = results.iter().map(|r| r.unavailable_us).max().unwrap_or(0);
    for (to, mut sections) in by {
        sections.sort_unstable();
        tracing::info!(
            to,
            count = sections.len(),
            sections = %Runs(&sections),
            max_unavailable_us = worst,
            "handed off {} sections ({}) to {to}",
            sections.len(),
            Runs(&sections)
        );
    }
}

/// What the store's leader says of each AllocSvr named (other than this
/// one, and empty names, which the move's own checks refuse): the same
/// checks its `Handoff` makes of a target. Not a linearizable read: a
/// target listed here may still be refused by the handoff (then the
/// section is reclaimed at a new epoch, step 5), and one registered just
/// now may be missed (the move is refused and can be asked again). What
/// it spares is releasing a section for a move the store is known to
/// refuse; when no leader answers, every target is left to the store.
async fn targets<'a>(
    shared: &Shared,
    named: impl Iterator<Item = &'a str>,
) -> BTreeMap<&'a str, Target> {
    let named: BTreeSet<&str> = named
        .filter(|to| !to.is_empty() && *to != shared.id)
        .collect();
    if named.is_empty() {
        return BTreeMap::new();
    }
    let Some(status) = shared.store.leader_status().await else {
        // No list to be had (a leader change, say): the store's handoff
        // checks the target itself, and a refusal there is safe (step 5);
        // refusing here would turn a passing election into a failed drain.
        tracing::info!(
            "handoff: no store leader answered with its list; the store checks the targets"
        );
        return BTreeMap::new();
    };
    named
        .into_iter()
        .map(|to| {
            let target = match status.allocs.iter().find(|a| a.alloc_id == to) {
                None => Target::NotRegistered,
                Some(a) if a.fenced => Target::Fenced,
                Some(a) if a.draining => Target::Draining,
                Some(_) => Target::Ready,
            };
            (to, target)
        })
        .collect()
}

/// Moves one section to a target the store's leader said `target` of;
/// reports how long it was unavailable.
pub async fn move_section(shared: &Shared, m: &pb::Move, target: &Target) -> pb::MoveResult {
    let section = m.section;
    let mut result = pb::MoveResult {
        section,
        to_alloc: m.to_alloc.clone(),
        ..Default::default()
    };
    let (mut mark, released) = match release(shared, m, target) {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!(section, to = %m.to_alloc, "handoff refused: {e}");
            result.error = e.to_string();
            return result;
        }
    };
    let start = Instant::now();
    let store = shared
        .store
        .clone()
        .with_deadline(HANDOFF_DEADLINE, STORE_ATTEMPT);
    let answer = store
        .handoff(
            &shared.id,
            shared.incarnation(),
            &m.to_alloc,
            section,
            released.epoch,
        )
        .await;
    let answered = Event::HandoffAnswered {
        section,
        answer: (answer.as_ref())
            .map(|(grant, to_peer)| (grant.epoch, to_peer.clone()))
            .map_err(ToString::to_string),
    };
    let next = mark.step(answered);
    match answer {
        Ok((grant, to_peer)) => {
            let told = match next.first() {
                Some(Effect::Adopt {
                    section,
                    epoch,
                    addr,
                }) => tell_new_owner(shared, addr, *section, *epoch).await,
                _ => Err("the move ended meanwhile".to_string()),
            };
            result.unavailable_us = start.elapsed().as_micros() as u64;
            handed_off(&mut result, grant.epoch, &to_peer, told);
        }
        Err(error) => {
            let after = settle(mark, section, released).await;
            result.unavailable_us = start.elapsed().as_micros() as u64;
            let e = MoveError::Store {
                section,
                epoch: released.epoch,
                error,
                after,
            };
            tracing::warn!(section, to = %result.to_alloc, "handoff failed: {e}");
            result.error = e.to_string();
        }
    }
    result
}

/// Reports a move the store made (`ok`), and how telling the new owner at
/// `to_peer` went: an adopt that did not get through is reported beside
/// it — the new owner serves the section after its next renewal instead
/// of at once.
fn handed_off(result: &mut pb::MoveResult, epoch: Epoch, to_peer: &str, told: Result<u32, String>) {
    result.ok = true;
    let (section, to) = (result.section, result.to_alloc.clone());
    match told {
        // The callers log one line a batch.
        Ok(_) => tracing::debug!(
            section,
            to,
            epoch,
            unavailable_us = result.unavailable_us,
            "section handed off"
        ),
        Err(why) => {
            result.error = format!(
                "handed off, but telling {to} at {to_peer:?} failed ({why}); it serves \
                 the section after its next renewal"
            );
            tracing::warn!(section, to, "{}", result.error);
        }
    }
}

/// Step 5: the handoff failed or its outcome is unknown. Reads the section
/// back (linearizable) to say what happened; the control loop never serves
/// it again at the released epoch (see the module docs: a late copy of the
/// handoff could still move it): it stays dropped, the mark goes, and if
/// it is still ours an early renewal's take-over claims it at a new epoch.
/// Says what was done.
async fn settle(mut mark: Mark<'_>, section: SectionId, released: Released) -> String {
    let store = (mark.shared.store.clone()).with_deadline(CHECK_DEADLINE, STORE_ATTEMPT);
    let read = store.read_sections(section, 1).await;
    let (info, failed) = match read {
        Ok(v) => (v.into_iter().find(|i| i.section == section), None),
        Err(e) => (None, Some(e)),
    };
    let effects = mark.step(Event::HandoffChecked {
        section,
        read: info,
    });
    let after = effects.into_iter().find_map(|e| match e {
        Effect::LeftDropped { after, .. } => Some(after),
        _ => None,
    });
    match (after.flatten(), failed) {
        (Some(AfterHandoff::Reclaim), _) => format!(
            "still ours at the released epoch {}: left dropped; the next renewal \
             takes it over at a new epoch, fencing any late copy of the handoff",
            released.epoch
        ),
        (Some(AfterHandoff::LeaveDropped { owner, epoch }), _) => {
            format!("the store has it at epoch {epoch} for {owner:?}: left dropped")
        }
        (None, Some(e)) => format!(
            "could not check it in the store ({e}): left dropped (a renewal claims it again \
             if it is still ours)"
        ),
        (None, None) => "the store's read did not return it: left dropped (a renewal claims it \
                         again if it is still ours)"
            .to_string(),
    }
}

/// Step 4: tells the new owner at its peer address `addr` to adopt.
async fn tell_new_owner(
    shared: &Shared,
    addr: &str,
    section: SectionId,
    epoch: Epoch,
) -> Result<u32, String> {
    if addr.is_empty() {
        return Err("the store knows no peer address for it".into());
    }
    let channel = peer_channel(shared, addr)?;
    let req = pb::AdoptRequest {
        sections: vec![pb::Adopted { section, epoch }],
    };
    let mut client = AllocPeerClient::new(channel);
    let call = client.adopt(req);
    match tokio::time::timeout(ADOPT_CONNECT + ADOPT_TIMEOUT, call).await {
        Ok(Ok(r)) => Ok(r.into_inner().installed),
        Ok(Err(st)) => Err(format!("{:?}: {}", st.code(), st.message())),
        Err(_) => Err("no answer in time".into()),
    }
}

/// A lazily connecting channel to another AllocSvr's peer plane, kept for
/// the next move (a drain hands many sections to a few AllocSvrs).
pub(crate) fn peer_channel(shared: &Shared, addr: &str) -> Result<Channel, String> {
    let mut peers = shared.peers.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(ch) = peers.get(addr) {
        return Ok(ch.clone());
    }
    let tls = (shared.client_tls.clone()).map(|t| t.expecting(seqsvr_net::ServerRole::Alloc));
    let ch = seqsvr_net::client::endpoint(addr, tls.as_ref(), ADOPT_CONNECT)
        .map_err(|e| e.to_string())?
        .timeout(ADOPT_TIMEOUT)
        .connect_lazy();
    if peers.len() >= MAX_PEER_CHANNELS {
        peers.clear();
    }
    peers.insert(addr.to_string(), ch.clone());
    Ok(ch)
}

/// Handles `AllocPeer.Adopt` as the control loop decides it
/// ([`Event::AdoptAsked`], then [`Event::AdoptRead`]): installs each named
/// section the store confirms is this process's at the named epoch;
/// refuses the whole request, installing nothing, if any is not. Returns
/// how many grants were installed (0 for a repeat).
pub async fn adopt(shared: &Shared, sections: &[pb::Adopted]) -> Result<u32, CallError> {
    let alloc = &shared.alloc;
    let named: Vec<AdoptNamed> = (sections.iter())
        .map(|a| AdoptNamed::of(alloc, a.section, a.epoch))
        .collect();
    let asked = shared
        .ownership()
        .on(Instant::now(), Event::AdoptAsked { named });
    let (pending, lapses_before) = match asked.into_iter().next() {
        Some(Effect::ReadAdopt {
            sections,
            lapses_before,
        }) => (sections, lapses_before),
        Some(Effect::AdoptDenied(e)) => return Err(e),
        // An empty install: everything named is installed already.
        _ => return Ok(0),
    };
    let checks = read_adopt(shared, &pending).await?;
    // Decided and installed under the ownership lock: no renewal can drop
    // the sections between the check and the install (promise 3).
    let mut own = shared.ownership();
    let read = Event::AdoptRead {
        checks,
        lapses_before,
    };
    let grants = match own.on(Instant::now(), read).pop() {
        Some(Effect::Install { grants }) => grants,
        Some(Effect::AdoptRefused(e)) => return Err(e.into()),
        // The store's answer may be stale by now: the section may have
        // moved while the lease was gone (promise 3). The sender's adopt
        // fails; our next renewal claims whatever is still ours.
        _ => return Err(shared.not_admitted()),
    };
    let installed = alloc.install(&grants)?;
    drop(own);
    shared.metrics.sections_started("adopted", installed);
    tracing::info!(
        sections = ?grants.iter().map(|g| (g.section, g.epoch)).collect::<Vec<_>>(),
        installed,
        "adopted sections"
    );
    Ok(installed as u32)
}

/// [`Effect::ReadAdopt`]: the store records of the `pending` sections, and
/// before the control loop decides, the declarations of their names
/// (`raiser::load_counters`), so they are in place when the grants are
/// installed under the ownership lock. If either read fails nothing is
/// installed and the sender's adopt fails; a section then refused keeps
/// what was read until its next install reads them again (it is not
/// served here).
async fn read_adopt(
    shared: &Shared,
    pending: &[(SectionId, Epoch)],
) -> Result<Vec<AdoptCheck>, CallError> {
    let alloc = &shared.alloc;
    let infos = read_sections(shared, pending.iter().map(|&(s, _)| s)).await?;
    let mut checks = Vec::with_capacity(pending.len());
    for &(section, named) in pending {
        let info = infos.get(&section).ok_or_else(|| {
            CallError::Internal(format!("the store's read did not return section {section}"))
        })?;
        checks.push(AdoptCheck {
            info: info.clone(),
            named,
            installed: alloc.known_epoch(section),
        });
    }
    let store = crate::store_link::StoreCeilings {
        store: shared.store.clone(),
        alloc: shared.id.clone(),
        metrics: shared.metrics.clone(),
    };
    crate::raiser::load_section_counters(alloc, &store, pending.iter().map(|&(s, _)| s))
        .await
        .map_err(CallError::Alloc)?;
    Ok(checks)
}

/// Reads `sections` from the store (linearizable), one call per run of
/// consecutive sections.
async fn read_sections(
    shared: &Shared,
    sections: impl Iterator<Item = SectionId>,
) -> Result<BTreeMap<SectionId, SectionInfo>, CallError> {
    let mut wanted: Vec<SectionId> = sections.collect();
    wanted.sort_unstable();
    wanted.dedup();
    let store = shared
        .store
        .clone()
        .with_deadline(ADOPT_READ_DEADLINE, ADOPT_READ_DEADLINE / 3);
    let mut infos = BTreeMap::new();
    for (first, count) in runs(&wanted) {
        for info in store.read_sections(first, count).await? {
            infos.insert(info.section, info);
        }
    }
    Ok(infos)
}
