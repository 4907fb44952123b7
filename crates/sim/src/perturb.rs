//! The store's knobs, as every replica applies them: a committed command
//! is rewritten before the real [`SetState::apply`], or its effect after
//! it, so that one check of the state machine is switched off without
//! re-implementing it. Every rewrite depends only on the state and the
//! command, so every replica applies it alike.

use seqsvr_core::Grant;
use seqsvr_store_core::command::{Command, Outcome, Reply};
use seqsvr_store_core::state::SetState;

use crate::knobs::Knobs;

/// Applies `cmd` to `state` with the real state machine, perturbed by the
/// store's `knobs`:
///
/// - `handoff_unconditional`: a `Handoff` names the section's current
///   epoch (its epoch check passes);
/// - `assign_unconditional`: an `Assign` expects the current epochs;
/// - `skip_move_id_check`: a `Freeze` or `Install` older than the newest
///   move applied is applied as the store applied it before its fixes:
///   by the legacy command (no check against the directory) naming that
///   move (`check_move_id` passes); a `CopyCounters` of such a move is
///   let through unchecked too, which changes nothing here (the simulated
///   AllocSvrs declare no counters, so every copy is empty);
/// - `addition_unchecked`: an addition's `Install` is applied as the
///   legacy command naming the newest move applied, as the store applied
///   it before set commands were checked against the directory: every
///   section not serving here (frozen and moved ones included) is
///   installed at its own ceiling;
/// - `claim_always_fresh`: a `TakeOver` names the current epochs, so no
///   grant prepared for the claimer is handed back unchanged;
/// - `raise_unbounded`: a `Raise` of more than a step is applied a step
///   up (as the shipped check allows), then the ceiling is set to what it
///   asked;
/// - `takeover_from_old_start`: a take-over or handoff that began a new
///   epoch starts it at the previous epoch's start, not the ceiling;
/// - `id_release_unfenced`: a `ReleaseWorker` names the worker id's
///   current holder and epoch (its fencing passes).
pub(crate) fn apply(state: &mut SetState, cmd: &Command, knobs: &Knobs) -> Outcome {
    if let Command::CopyCounters { call, counters, .. } = cmd {
        if knobs.skip_move_id_check && call.move_id < state.placement.last_move {
            debug_assert!(counters.is_empty(), "the simulation declares no counters");
            return Ok(Reply::CountersCopied { newly: 0 });
        }
    }
    let rewritten = rewrite(state, cmd, knobs);
    let cmd = rewritten.as_ref().unwrap_or(cmd);
    if knobs.raise_unbounded {
        if let Some(out) = raise_unbounded(state, cmd) {
            return out;
        }
    }
    let starts: Vec<(u64, u64)> = if knobs.takeover_from_old_start {
        state.sections.iter().map(|r| (r.epoch, r.start)).collect()
    } else {
        Vec::new()
    };
    let mut out = state.apply(cmd, &mut Vec::new());
    if knobs.takeover_from_old_start {
        let mut back = |g: &mut Grant| {
            let (epoch, start) = starts[g.section as usize];
            if g.epoch > epoch {
                g.prev_ceiling = start;
                state.sections[g.section as usize].start = start;
            }
        };
        match &mut out {
            Ok(Reply::TakenOver { grants, .. }) => grants.iter_mut().for_each(&mut back),
            Ok(Reply::HandedOff { grant, .. }) => back(grant),
            _ => {}
        }
    }
    out
}

/// The command as the knobs rewrite it, if they do (cloned only then).
fn rewrite(state: &SetState, cmd: &Command, knobs: &Knobs) -> Option<Command> {
    let applies = match cmd {
        Command::Handoff { .. } => knobs.handoff_unconditional,
        Command::Assign { .. } => knobs.assign_unconditional,
        Command::TakeOver { .. } => knobs.claim_always_fresh,
        Command::ReleaseWorker { .. } => knobs.id_release_unfenced,
        Command::Install { call, .. }
            if knobs.addition_unchecked && call.kind == seqsvr_core::SetKind::Addition =>
        {
            true
        }
        Command::Freeze { call, .. } | Command::Install { call, .. } => {
            knobs.skip_move_id_check && call.move_id < state.placement.last_move
        }
        _ => false,
    };
    if !applies {
        return None;
    }
    let mut cmd = cmd.clone();
    let changed = match &mut cmd {
        Command::Handoff { section, epoch, .. } => {
            match state.sections.get(*section as usize).map(|r| r.epoch) {
                Some(e) if e != *epoch => {
                    *epoch = e;
                    true
                }
                _ => false,
            }
        }
        Command::Assign {
            first, expected, ..
        } => current_epochs(state, *first, expected),
        Command::TakeOver { first, known, .. } => current_epochs(state, *first, known),
        Command::ReleaseWorker {
            ns,
            worker,
            alloc,
            incarnation,
            epoch,
        } => {
            let rec = state.ids.spaces.get(ns.as_str());
            match rec.and_then(|s| s.workers.get(worker)) {
                Some(r) if r.holder.is_some() => {
                    let (a, i) = r.holder.clone().expect("held");
                    let changed = (&a, i, r.epoch) != (&*alloc, *incarnation, *epoch);
                    (*alloc, *incarnation, *epoch) = (a, i, r.epoch);
                    changed
                }
                _ => false,
            }
        }
        Command::Freeze { first, count, call } => {
            let to = match call.kind {
                seqsvr_core::SetKind::Move { to, .. } => to,
                seqsvr_core::SetKind::Addition => call.set,
            };
            cmd = Command::LegacyFreeze {
                first: *first,
                count: *count,
                to,
                move_id: state.placement.last_move,
            };
            true
        }
        Command::Install { first, floors, .. } => {
            cmd = Command::LegacyInstall {
                first: *first,
                floors: std::mem::take(floors),
                move_id: state.placement.last_move,
            };
            true
        }
        _ => false,
    };
    changed.then_some(cmd)
}

/// Sets `epochs` (of the sections from `first` on) to the sections'
/// current ones; whether any changed.
fn current_epochs(state: &SetState, first: u32, epochs: &mut [u64]) -> bool {
    let mut changed = false;
    for (i, e) in epochs.iter_mut().enumerate() {
        if let Some(r) = state.sections.get(first as usize + i) {
            changed |= *e != r.epoch;
            *e = r.epoch;
        }
    }
    changed
}

/// A raise of more than a step, applied a step up by the real state
/// machine and then set to its target; `None` if `cmd` is no such raise.
fn raise_unbounded(state: &mut SetState, cmd: &Command) -> Option<Outcome> {
    let Command::Raise { section, to, .. } = cmd else {
        return None;
    };
    let step = state.set.as_ref()?.step;
    let current = state.sections.get(*section as usize)?.max_seq;
    if *to <= current.saturating_add(step) {
        return None;
    }
    let mut one_step = cmd.clone();
    if let Command::Raise { to, .. } = &mut one_step {
        *to = current + step;
    }
    let out = state.apply(&one_step, &mut Vec::new());
    if out.is_err() {
        return Some(out);
    }
    state.sections[*section as usize].max_seq = *to;
    Some(Ok(Reply::Raised { max_seq: *to }))
}
