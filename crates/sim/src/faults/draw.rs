//! Drawing the fault schedule from the seed ([`generate`]): faults at
//! random times, each in one set, with what undoes them; range moves; the
//! operator's and strangers' faults (`trust`); the final heal.

use seqsvr_core::LeaseTerms;

use super::{AdoptFate, Fault, Forgery, MoveStep};
use crate::layout::Layout;
use crate::net::{Time, MS, SEC};
use crate::rng::Rng;

/// What the schedule is drawn for.
#[derive(Debug, Clone)]
pub struct Shape {
    /// Sets, replicas and AllocSvrs.
    pub layout: Layout,
    /// Sections of each set's span.
    pub sections: Vec<u32>,
    /// Ranges move within sections `0..movable` (set 0's span).
    pub movable: u32,
    /// When the quiet tail starts (everything healed).
    pub quiet: Time,
    /// The lease terms the store starts with.
    pub terms: LeaseTerms,
    /// Whether `Fault::PauseInRenewal` is drawn too.
    pub pause_in_renewal: bool,
}

/// A duration: mostly short, sometimes longer than lease + margin.
fn duration(rng: &mut Rng, long: Time) -> Time {
    if rng.chance(0.4) {
        rng.range(long, long + 6 * SEC)
    } else {
        rng.range(200 * MS, 4 * SEC)
    }
}

/// Draws a fault schedule for `shape`: faults, each in one set, and range
/// moves between the sets.
pub fn generate(rng: &mut Rng, shape: &Shape) -> Vec<(Time, Fault)> {
    let long = shape.terms.expiry_ms() * MS;
    let quiet = shape.quiet;
    let l = shape.layout;
    let n = l.allocs;
    let mut out: Vec<(Time, Fault)> = Vec::new();
    let mut t = rng.range(2 * SEC, 4 * SEC);
    while t < quiet {
        let set = rng.pick(l.sets);
        let i = rng.pick(n);
        let spot = Spot {
            t,
            set,
            i,
            a: l.first_slot(set, i),
            r: l.replica(set, rng.pick(l.replicas)),
            other: (i + 1 + rng.pick(n - 1)) % n,
            at: out.len(),
            dur: duration(rng, long),
        };
        let kinds = if shape.pause_in_renewal { 21 } else { 20 };
        let kind = rng.below(kinds);
        let drawn = match kind {
            0..=12 | 20 => Some(machine_fault(rng, l, &spot, kind)),
            _ => operator_fault(rng, shape, &spot, kind),
        };
        let Some((fault, undo)) = drawn else {
            lease_change(rng, shape, t, set, spot.a, &mut out);
            t += 25 * SEC;
            continue;
        };
        out.push((t, fault));
        if let Some(u) = undo {
            out.push(u);
        }
        t += rng.range(SEC, 5 * SEC);
    }
    moves(rng, shape, &mut out);
    trust(rng, shape, &mut out);
    out.push((quiet, Fault::HealEverything));
    sort_schedule(out)
}

/// Where and when one fault of the schedule falls, drawn before its kind.
struct Spot {
    /// When.
    t: Time,
    /// The set.
    set: usize,
    /// An AllocSvr of the set (its index in the set).
    i: usize,
    /// That AllocSvr's first process slot.
    a: usize,
    /// A replica of the set (global index).
    r: usize,
    /// Another AllocSvr of the set (its index in the set).
    other: usize,
    /// The fault's index in the schedule (what its undoing names).
    at: usize,
    /// How long it lasts, if it lasts.
    dur: Time,
}

/// A fault drawn, and the fault that undoes it later, if any.
type Drawn = (Fault, Option<(Time, Fault)>);

/// A fault of kind `kind` (0 to 12, or 20) at `s`: the network, a
/// replica or an AllocSvr process.
fn machine_fault(rng: &mut Rng, l: Layout, s: &Spot, kind: u64) -> Drawn {
    let Spot {
        t,
        set,
        a,
        r,
        at,
        dur,
        ..
    } = *s;
    let heal = Some((t + dur, Fault::Heal { of: at }));
    let restart = Some((t + dur, Fault::RestartReplica { of: at }));
    match kind {
        20 => (Fault::PauseInRenewal { a, dur }, None),
        0 => {
            let allocs_too = rng.chance(0.5);
            (Fault::IsolateReplica { r, allocs_too }, heal)
        }
        1 | 2 => {
            let alloc = rng.chance(0.8).then_some(a);
            (Fault::DeposeLeader { set, alloc }, heal)
        }
        3 => {
            let replicas = l.replicas_of(set).filter(|_| rng.chance(0.6)).collect();
            let answers_only = rng.chance(0.3);
            let cut = Fault::CutAlloc {
                a,
                replicas,
                answers_only,
            };
            (cut, heal)
        }
        4 | 5 => (
            Fault::CrashAlloc { a },
            Some((t + dur, Fault::RestartAlloc { a })),
        ),
        6 => (Fault::PauseAlloc { a, dur }, None),
        7 | 8 => (Fault::PauseAfterAdmit { a, dur }, None),
        9 => (Fault::CrashLeader { set }, restart),
        10 => (Fault::CrashReplica { r }, restart),
        11 => (slow_network(rng), None),
        12 => {
            let pause = Fault::PauseReplica {
                set,
                leader: rng.chance(0.5),
                r: rng.pick(l.replicas - 1),
                dur: if rng.chance(0.3) {
                    rng.range(SEC, 6 * SEC)
                } else {
                    rng.range(50 * MS, SEC)
                },
            };
            (pause, None)
        }
        other => unreachable!("kind {other} is an operator's"),
    }
}

/// A fault of kind `kind` (13 to 19) at `s`: an operator's handoffs,
/// assigns and twins, a forged adopt; `None`: a change of the lease terms
/// (kind 18 with room for it before the quiet tail).
fn operator_fault(rng: &mut Rng, shape: &Shape, s: &Spot, kind: u64) -> Option<Drawn> {
    let l = shape.layout;
    let Spot {
        t,
        set,
        i,
        a,
        other,
        at,
        dur,
        ..
    } = *s;
    let drawn = match kind {
        19 => {
            let trip = Fault::HandoffRoundTrip {
                from: a,
                to: other,
                stall: rng.range(1500 * MS, 4 * SEC),
                window: 300 * MS,
            };
            (trip, Some((t + SEC, Fault::HandBack { of: at })))
        }
        13 | 14 => (handoff(rng, a, other), None),
        15 => (forge_adopt(rng, a), None),
        16 => {
            let sections = shape.sections[set];
            let first = rng.below(sections as u64) as u32;
            let count = 1 + rng.below(2.min((sections - first) as u64)) as u32;
            let assign = Fault::OperatorAssign {
                set,
                to: i,
                first,
                count,
                stale: rng.chance(0.3),
            };
            (assign, None)
        }
        17 => {
            let twin = l.twin_slot(set, i);
            let stop = (t + dur.max(2 * SEC)).min(shape.quiet);
            (
                Fault::StartTwin { set, a: i },
                Some((stop, Fault::CrashAlloc { a: twin })),
            )
        }
        _ if t + 25 * SEC < shape.quiet => return None,
        _ => (slow_network(rng), None),
    };
    Some(drawn)
}

/// A slow network for 0.2 to 3 s.
fn slow_network(rng: &mut Rng) -> Fault {
    Fault::SlowNetwork {
        dur: rng.range(200 * MS, 3 * SEC),
    }
}

/// Process slot `a` hands one or two sections to AllocSvr `to` of its
/// set, their adopts lost, late, repeated or delivered.
fn handoff(rng: &mut Rng, a: usize, to: usize) -> Fault {
    Fault::Handoff {
        from: a,
        to,
        count: 1 + rng.pick(2),
        adopt: match rng.below(5) {
            0 => AdoptFate::Lost,
            1 => AdoptFate::Delayed(rng.range(100 * MS, 3 * SEC)),
            2 => AdoptFate::Duplicated(rng.range(MS, 3 * SEC)),
            _ => AdoptFate::Normal,
        },
    }
}

/// A forged adopt sent to process slot `a`.
fn forge_adopt(rng: &mut Rng, a: usize) -> Fault {
    Fault::ForgeAdopt {
        to: a,
        kind: match rng.below(4) {
            0 => Forgery::HugeEpoch,
            1 => Forgery::OtherOwners,
            2 => Forgery::WrongSection,
            _ => Forgery::Replay,
        },
    }
}

/// Range moves every few seconds, each of one to three sections of the
/// movable ones; some stopped after a step or crashed during one, then run
/// again (`seqctl set move` is resumable: every step is idempotent).
fn moves(rng: &mut Rng, shape: &Shape, out: &mut Vec<(Time, Fault)>) {
    let quiet = shape.quiet;
    let mut t = rng.range(3 * SEC, 6 * SEC);
    while t + 2 * SEC < quiet {
        let first = rng.below(shape.movable as u64) as u32;
        let count = 1 + rng.below(3.min((shape.movable - first) as u64)) as u32;
        let stop_after = rng
            .chance(0.25)
            .then(|| MoveStep::ALL[rng.pick(MoveStep::ALL.len())]);
        out.push((
            t,
            Fault::MoveRange {
                first,
                count,
                stop_after,
            },
        ));
        let mut resume = stop_after.is_some();
        if !resume && rng.chance(0.2) {
            // Killed wherever it is: between steps or with a call in flight.
            out.push((t + rng.range(MS, 600 * MS), Fault::CrashMover));
            resume = true;
        }
        if resume {
            let again = (t + rng.range(300 * MS, 8 * SEC)).min(quiet);
            out.push((again, Fault::ResumeMove));
        }
        t += rng.range(3 * SEC, 9 * SEC);
    }
}

/// The operator's and a stranger's faults, drawn after the rest (so the
/// schedule before them is unchanged): "fence, then move" (a pause longer
/// than a release call waits, shorter than the lease, often a fence, a
/// section of the paused process moved away at once); `set add` run again
/// around a third of the moves, at any point of them; forwarded calls
/// from a replica of the other set (`docs/architecture/simulation.md`).
fn trust(rng: &mut Rng, shape: &Shape, out: &mut Vec<(Time, Fault)>) {
    let quiet = shape.quiet;
    let l = shape.layout;
    let moves: Vec<Time> = (out.iter())
        .filter(|(_, f)| matches!(f, Fault::MoveRange { .. }))
        .map(|(t, _)| *t)
        .collect();
    for t in moves {
        if rng.chance(0.35) && l.sets > 1 {
            let at = t + rng.range(0, 4 * SEC);
            let set = 1 + rng.pick(l.sets - 1);
            if at < quiet {
                out.push((at, Fault::AddSetAgain { set }));
            }
        }
    }
    let mut t = rng.range(6 * SEC, 12 * SEC);
    while t + 8 * SEC < quiet {
        let set = rng.pick(l.sets);
        let a = l.first_slot(set, rng.pick(l.allocs));
        let dur = rng.range(2500 * MS, 4500 * MS);
        out.push((t, Fault::PauseAlloc { a, dur }));
        if rng.chance(0.6) {
            out.push((t + 10 * MS, Fault::Fence { a }));
        }
        out.push((t + 100 * MS, Fault::MoveAway { a }));
        t += rng.range(10 * SEC, 16 * SEC);
    }
    if l.sets > 1 {
        for _ in 0..1 + rng.pick(3) {
            let at = rng.range(3 * SEC, quiet);
            let set = rng.pick(l.sets);
            let i = rng.pick(l.allocs);
            let other = (set + 1 + rng.pick(l.sets - 1)) % l.sets;
            let fault = Fault::ForgeForwarded {
                by: l.replica(other, rng.pick(l.replicas)),
                a: l.first_slot(set, i),
                to: (i + 1 + rng.pick(l.allocs - 1)) % l.allocs,
            };
            out.push((at, fault));
        }
    }
}

/// A longer lease in `set`, then back to the usual terms once the store
/// allows (`Arbiter::lease_change_allowed`: a full wait after the first
/// change), then AllocSvr process `a` (of `set`) cut off from every replica
/// (its longer lease still running) and, sometimes, the leader changed.
fn lease_change(
    rng: &mut Rng,
    shape: &Shape,
    t: Time,
    set: usize,
    a: usize,
    out: &mut Vec<(Time, Fault)>,
) {
    let lease_ms = rng.range(8000, 12_001);
    let long = LeaseTerms {
        lease_ms,
        margin_ms: lease_ms / 5,
    };
    let back = t + long.expiry_ms().max(shape.terms.expiry_ms()) * MS + rng.range(SEC, 2 * SEC);
    out.push((t, Fault::SetLease { set, terms: long }));
    out.push((
        back,
        Fault::SetLease {
            set,
            terms: shape.terms,
        },
    ));
    let cut_at = back + rng.range(50 * MS, 1500 * MS);
    let i = out.len();
    out.push((
        cut_at,
        Fault::CutAlloc {
            a,
            replicas: shape.layout.replicas_of(set).collect(),
            answers_only: false,
        },
    ));
    out.push((cut_at + rng.range(8 * SEC, 11 * SEC), Fault::Heal { of: i }));
    if rng.chance(0.5) {
        let at = cut_at + rng.range(100 * MS, 3 * SEC);
        let i = out.len();
        out.push((at, Fault::CrashLeader { set }));
        out.push((
            at + rng.range(SEC, 4 * SEC),
            Fault::RestartReplica { of: i },
        ));
    }
}

/// Sorts by time (stably) and points every `Heal`/`RestartReplica` at its
/// fault's new index.
fn sort_schedule(out: Vec<(Time, Fault)>) -> Vec<(Time, Fault)> {
    let mut tagged: Vec<(usize, (Time, Fault))> = out.into_iter().enumerate().collect();
    tagged.sort_by_key(|(i, (t, _))| (*t, *i));
    let mut new_index = vec![0; tagged.len()];
    for (new, (old, _)) in tagged.iter().enumerate() {
        new_index[*old] = new;
    }
    tagged
        .into_iter()
        .map(|(_, (t, f))| {
            let f = match f {
                Fault::Heal { of } => Fault::Heal { of: new_index[of] },
                Fault::RestartReplica { of } => Fault::RestartReplica { of: new_index[of] },
                Fault::HandBack { of } => Fault::HandBack { of: new_index[of] },
                f => f,
            };
            (t, f)
        })
        .collect()
}
