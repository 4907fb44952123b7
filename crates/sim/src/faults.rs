//! The fault schedule: drawn from the seed before the run, applied at its
//! times (by the world loop), printed with every failure.
//!
//! Faults: partitions between AllocSvrs and store replicas and between
//! replicas (with heals), the store leader cut off from the other replicas
//! while AllocSvrs still reach it (the "deposed leader"), store leader and
//! replica crashes with restarts, store leaders and followers paused (not
//! dead) and resumed, AllocSvr crashes with restarts, AllocSvr pauses
//! (SIGSTOP, some longer than lease + margin, some starting right after a
//! request passed its lease check), stretches of slow network, planned
//! handoffs (with their adopt lost, delayed or duplicated), forged adopts,
//! operator assigns with expected epochs, twin processes (a second process
//! with a live AllocSvr's id), and lease-terms changes (a longer lease,
//! then back to a shorter one, an AllocSvr cut off and the leader changed
//! right after). Each of these hits one set. Range moves between the sets
//! are scheduled too (`seqctl set move`), the mover sometimes stopping
//! after a step or crashing during one, then run again with the same
//! command; then fences, repeated additions and forged forwards (`trust`).
//! Clock drift is per AllocSvr for the whole run (drawn with the
//! configuration). No fault starts in the final quiet stretch, whose start
//! heals everything (and finishes a half-done move).

use seqsvr_core::LeaseTerms;

use crate::layout::Layout;
pub use crate::model::AdoptFate;
use crate::net::{fmt_time, Time, MS, SEC};
use crate::rng::Rng;

/// What a forged adopt names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Forgery {
    /// A section of the target's, at epoch 2^63, its ceiling a step above
    /// the store's.
    HugeEpoch,
    /// A section routed to another AllocSvr, with that owner's grant.
    OtherOwners,
    /// A section with the start, ceiling and next epoch of another section.
    WrongSection,
    /// A section of the target's, at the epoch before the current one,
    /// starting a step below (a replayed old adopt).
    Replay,
}

/// A step of a range move (`seqctl set move --stop-after`): the mover
/// stops right after it, as if killed between two steps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum MoveStep {
    /// The home group recorded the move (and the copies were sent).
    Begin,
    /// The source froze the sections.
    Freeze,
    /// The source's AllocSvrs released them (or the leases ran out).
    Release,
    /// The destination installed them.
    Install,
    /// The destination's AllocSvrs claimed them.
    Claim,
}

impl MoveStep {
    /// Every step that may be stopped after, in order.
    pub const ALL: [MoveStep; 5] = [
        MoveStep::Begin,
        MoveStep::Freeze,
        MoveStep::Release,
        MoveStep::Install,
        MoveStep::Claim,
    ];
}

/// One scheduled fault. `a` is an AllocSvr process slot and `r` a store
/// replica, both numbered across sets ([`Layout`]); a fault that names
/// neither names its set.
#[derive(Debug, Clone, PartialEq)]
pub enum Fault {
    /// Cut a replica from the other replicas (and from every AllocSvr).
    IsolateReplica {
        /// The replica.
        r: usize,
        /// Also from the AllocSvrs.
        allocs_too: bool,
    },
    /// Cut whichever replica of `set` leads from the other replicas,
    /// leaving it reachable by AllocSvrs; `alloc` (if any) can then reach
    /// only it.
    DeposeLeader {
        /// The set.
        set: usize,
        /// An AllocSvr process of the set cut from every other replica.
        alloc: Option<usize>,
    },
    /// Cut an AllocSvr from some replicas (of its set).
    CutAlloc {
        /// The AllocSvr.
        a: usize,
        /// The replicas.
        replicas: Vec<usize>,
        /// Only the answers are lost (replica → AllocSvr); its requests
        /// still arrive and take effect.
        answers_only: bool,
    },
    /// Undo the cuts of the fault with this index.
    Heal {
        /// The fault's index in the schedule.
        of: usize,
    },
    /// kill -9 an AllocSvr process.
    CrashAlloc {
        /// The process slot.
        a: usize,
    },
    /// Restart it (a new incarnation).
    RestartAlloc {
        /// The process slot.
        a: usize,
    },
    /// SIGSTOP an AllocSvr for a while.
    PauseAlloc {
        /// The process slot.
        a: usize,
        /// For how long.
        dur: Time,
    },
    /// SIGSTOP an AllocSvr right after it next admits a request (so the
    /// request's number is taken after the pause).
    PauseAfterAdmit {
        /// The process slot.
        a: usize,
        /// For how long.
        dur: Time,
    },
    /// SIGSTOP an AllocSvr right after its lease is next extended, before
    /// it takes over the sections the renewal newly lists.
    PauseInRenewal {
        /// The process slot.
        a: usize,
        /// For how long.
        dur: Time,
    },
    /// kill -9 whichever replica of `set` leads.
    CrashLeader {
        /// The set.
        set: usize,
    },
    /// kill -9 a replica.
    CrashReplica {
        /// The replica.
        r: usize,
    },
    /// Restart what the fault with this index crashed.
    RestartReplica {
        /// The fault's index in the schedule.
        of: usize,
    },
    /// SIGSTOP a store replica of `set` for a while: the leader if
    /// `leader`, else the `r`-th of the others. What reaches it meanwhile
    /// is handled when it resumes.
    PauseReplica {
        /// The set.
        set: usize,
        /// Pause whichever replica leads.
        leader: bool,
        /// Otherwise the `r`-th replica that does not lead.
        r: usize,
        /// For how long.
        dur: Time,
    },
    /// Every message is slow for a while.
    SlowNetwork {
        /// For how long.
        dur: Time,
    },
    /// The operator asks AllocSvr `from`'s process to hand `count` of the
    /// sections it serves to AllocSvr `to` (`seqctl alloc handoff`).
    Handoff {
        /// The releasing process slot.
        from: usize,
        /// The new owner (AllocSvr index).
        to: usize,
        /// How many sections.
        count: usize,
        /// What happens to the adopts.
        adopt: AdoptFate,
    },
    /// The operator asks AllocSvr process `from` to hand `section` to
    /// AllocSvr `to` of its set (`seqctl alloc handoff`). Scripted only.
    HandoffOf {
        /// The releasing process slot.
        from: usize,
        /// The new owner (AllocSvr index).
        to: usize,
        /// The section.
        section: u32,
    },
    /// A planned handoff and its way back, with requests delayed by a
    /// lossy link: process `from` hands one of its sections to AllocSvr
    /// `to`; every store request `from` sends in the next `window` reaches
    /// the store `stall` late (TCP retransmissions; drawn with a 300 ms
    /// window, so the hedged copy to the next replica gets through); `to`'s
    /// process hands the section back a second later (`Fault::HandBack`),
    /// before the stalled copy of the first `Handoff` lands.
    HandoffRoundTrip {
        /// The releasing process slot.
        from: usize,
        /// The new owner (AllocSvr index).
        to: usize,
        /// How late the stalled requests arrive.
        stall: Time,
        /// For how long the requests sent are stalled.
        window: Time,
    },
    /// The second half of the `HandoffRoundTrip` with this index.
    HandBack {
        /// The fault's index in the schedule.
        of: usize,
    },
    /// Someone sends AllocSvr process `to` an adopt the store never made.
    ForgeAdopt {
        /// The process slot.
        to: usize,
        /// What it names.
        kind: Forgery,
    },
    /// The operator routes sections `first..first+count` of `set` to its
    /// AllocSvr `to` with the epochs it read (`stale`: one of them off by
    /// one).
    OperatorAssign {
        /// The set.
        set: usize,
        /// The new owner (AllocSvr index in the set).
        to: usize,
        /// First section.
        first: u32,
        /// How many.
        count: u32,
        /// Expect an epoch one below the one read.
        stale: bool,
    },
    /// Start a second process with AllocSvr `a`'s id (a twin) of `set`,
    /// at its own address; it runs until a `CrashAlloc` of its slot.
    StartTwin {
        /// The set.
        set: usize,
        /// The AllocSvr index in the set.
        a: usize,
    },
    /// The operator sets the lease terms of `set` (`seqctl lease set`).
    SetLease {
        /// The set.
        set: usize,
        /// The terms.
        terms: LeaseTerms,
    },
    /// The operator moves sections `first..first+count` (cut short to the
    /// run served by the set serving `first`, as the directory reads then)
    /// to the other set (`seqctl set move`), stopping after `stop_after`;
    /// not while a mover still runs.
    MoveRange {
        /// First section.
        first: u32,
        /// How many.
        count: u32,
        /// Stop the mover after this step (`--stop-after`).
        stop_after: Option<MoveStep>,
    },
    /// kill -9 of every running mover, wherever it is (what it sent may
    /// still land).
    CrashMover,
    /// SIGSTOP of every running mover for `dur` (a `seqctl` suspended by
    /// mistake, a paused VM): what reaches it meanwhile, its timers
    /// included, is handled when it resumes.
    PauseMover {
        /// For how long.
        dur: Time,
    },
    /// The operator runs the move under way (or the last) again from
    /// another terminal, leaving any mover still running alone.
    MoveAgain,
    /// The operator moves sections `first..first+count` (as `MoveRange`
    /// does) from another terminal, leaving any mover still running alone:
    /// two movers side by side (hazard 6). Scripted only.
    MoveBeside {
        /// First section.
        first: u32,
        /// How many.
        count: u32,
    },
    /// SIGSTOP an AllocSvr right after it next sends a take-over (its
    /// answer is handled after the pause, in any order with what else
    /// arrived). Scripted only.
    PauseAfterClaim {
        /// The process slot.
        a: usize,
        /// For how long.
        dur: Time,
    },
    /// The operator stops any mover still running, then runs the command
    /// of the move under way again (a stopped or crashed move resumes), or
    /// else the last move command (a finished one reports it done).
    ResumeMove,
    /// Heal every link, restart every process.
    HealEverything,
    /// The operator fences process `a`'s incarnation (`seqctl alloc
    /// fence`); the process learns it from a refused renewal or raise.
    Fence {
        /// The process slot.
        a: usize,
    },
    /// The operator moves a movable section process `a` owns to the other
    /// set (not while a mover runs): "fence, then move".
    MoveAway {
        /// The process slot.
        a: usize,
    },
    /// The operator runs `set`'s addition `Install` (floor 0) again, over
    /// the range of a move into or out of it if one is under way, else over
    /// the range it was added with.
    AddSetAgain {
        /// The set (not the home set).
        set: usize,
    },
    /// Replica `by` of another set sends `a`'s set's leader a `Handoff`
    /// marked forwarded, in `a`'s name, of a section `a` owns to `to`.
    ForgeForwarded {
        /// The forging replica (global index).
        by: usize,
        /// The process slot whose AllocSvr the call names.
        a: usize,
        /// The new owner (AllocSvr index in the set).
        to: usize,
    },
}

impl std::fmt::Display for Fault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Fault::IsolateReplica { .. }
            | Fault::DeposeLeader { .. }
            | Fault::CutAlloc { .. }
            | Fault::Heal { .. }
            | Fault::CrashAlloc { .. }
            | Fault::RestartAlloc { .. }
            | Fault::PauseAlloc { .. }
            | Fault::PauseAfterAdmit { .. }
            | Fault::PauseInRenewal { .. }
            | Fault::PauseAfterClaim { .. }
            | Fault::CrashLeader { .. }
            | Fault::CrashReplica { .. }
            | Fault::RestartReplica { .. }
            | Fault::PauseReplica { .. }
            | Fault::SlowNetwork { .. }
            | Fault::StartTwin { .. } => self.fmt_machine(f),
            Fault::MoveRange { .. }
            | Fault::CrashMover
            | Fault::PauseMover { .. }
            | Fault::MoveAgain
            | Fault::MoveBeside { .. }
            | Fault::ResumeMove
            | Fault::MoveAway { .. }
            | Fault::HealEverything => self.fmt_move(f),
            _ => self.fmt_operator(f),
        }
    }
}

impl Fault {
    /// The network's, a replica's and an AllocSvr process's faults.
    fn fmt_machine(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Fault::IsolateReplica { r, allocs_too } => {
                let to = if *allocs_too { " and every alloc" } else { "" };
                write!(f, "isolate r{r} from the other replicas{to}")
            }
            Fault::DeposeLeader { set, alloc } => {
                write!(f, "cut set {set}'s leader off from the other replicas")?;
                match alloc {
                    Some(a) => write!(f, "; p{a} reaches only the old leader"),
                    None => Ok(()),
                }
            }
            Fault::CutAlloc {
                a,
                replicas,
                answers_only: false,
            } => write!(f, "cut p{a} from replicas {replicas:?}"),
            Fault::CutAlloc { a, replicas, .. } => {
                write!(f, "lose every answer from replicas {replicas:?} to p{a}")
            }
            Fault::Heal { of } => write!(f, "heal the cuts of fault #{of}"),
            Fault::CrashAlloc { a } => write!(f, "crash p{a}"),
            Fault::RestartAlloc { a } => write!(f, "restart p{a}"),
            Fault::PauseAlloc { a, dur } => write!(f, "pause p{a} for {}", fmt_time(*dur)),
            Fault::PauseAfterAdmit { a, dur } => write!(
                f,
                "pause p{a} for {} right after it admits a request",
                fmt_time(*dur)
            ),
            Fault::PauseInRenewal { a, dur } => write!(
                f,
                "pause p{a} for {} right after its lease is next extended",
                fmt_time(*dur)
            ),
            Fault::PauseAfterClaim { a, dur } => write!(
                f,
                "pause p{a} for {} right after it next sends a take-over",
                fmt_time(*dur)
            ),
            Fault::CrashLeader { set } => write!(f, "crash set {set}'s store leader"),
            Fault::CrashReplica { r } => write!(f, "crash r{r}"),
            Fault::RestartReplica { of } => write!(f, "restart what fault #{of} crashed"),
            Fault::PauseReplica {
                set,
                leader: true,
                dur,
                ..
            } => {
                write!(f, "pause set {set}'s store leader for {}", fmt_time(*dur))
            }
            Fault::PauseReplica { set, r, dur, .. } => {
                write!(f, "pause set {set}'s follower #{r} for {}", fmt_time(*dur))
            }
            Fault::SlowNetwork { dur } => write!(f, "slow network for {}", fmt_time(*dur)),
            Fault::StartTwin { set, a } => {
                write!(f, "start a twin of {}", crate::model::alloc_name(*set, *a))
            }
            other => unreachable!("{other:?} is not the network's, a replica's or a process's"),
        }
    }

    /// An operator's range moves and the mover's faults, and the final
    /// heal.
    fn fmt_move(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Fault::MoveRange {
                first,
                count,
                stop_after,
            } => {
                write!(
                    f,
                    "operator: move sections {first}..{} to the other set",
                    first + count
                )?;
                match stop_after {
                    Some(s) => write!(f, ", stopping after {s:?}"),
                    None => Ok(()),
                }
            }
            Fault::CrashMover => write!(f, "crash the mover"),
            Fault::PauseMover { dur } => write!(f, "pause the mover for {}", fmt_time(*dur)),
            Fault::MoveAgain => write!(
                f,
                "operator: run the move under way (or the last) again beside the running one"
            ),
            Fault::MoveBeside { first, count } => write!(
                f,
                "operator: move sections {first}..{} to the other set beside the running mover",
                first + count
            ),
            Fault::ResumeMove => write!(f, "operator: run the move under way (or the last) again"),
            Fault::MoveAway { a } => {
                write!(f, "operator: move a section p{a} serves to the other set")
            }
            Fault::HealEverything => write!(f, "heal everything, restart everything"),
            other => unreachable!("{other:?} is not a range move's"),
        }
    }

    /// An operator's handoffs and store calls, and a stranger's forgeries.
    fn fmt_operator(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Fault::Handoff {
                from,
                to,
                count,
                adopt,
            } => write!(
                f,
                "operator: p{from} hands {count} section(s) to its set's AllocSvr #{to} (adopt {adopt:?})"
            ),
            Fault::HandoffOf { from, to, section } => write!(
                f,
                "operator: p{from} hands section {section} to its set's AllocSvr #{to}"
            ),
            Fault::HandoffRoundTrip {
                from,
                to,
                stall,
                window,
            } => write!(
                f,
                "operator: p{from} hands a section to its set's AllocSvr #{to} (its requests {} late for {})",
                fmt_time(*stall),
                fmt_time(*window)
            ),
            Fault::HandBack { of } => write!(f, "operator: the section of fault #{of} handed back"),
            Fault::ForgeAdopt { to, kind } => write!(f, "forged adopt ({kind:?}) to p{to}"),
            Fault::OperatorAssign {
                set,
                to,
                first,
                count,
                stale,
            } => write!(
                f,
                "operator: assign sections {first}..{} of set {set} to {}{}",
                first + count,
                crate::model::alloc_name(*set, *to),
                if *stale { " (a stale epoch)" } else { "" }
            ),
            Fault::SetLease { set, terms } => write!(
                f,
                "operator: set {set}'s lease terms {} ms + {} ms",
                terms.lease_ms, terms.margin_ms
            ),
            Fault::Fence { a } => write!(f, "operator: fence p{a}'s incarnation"),
            Fault::AddSetAgain { set } => write!(f, "operator: run set {set}'s addition again"),
            Fault::ForgeForwarded { by, a, to } => write!(
                f,
                "r{by} (another set's replica) forwards a handoff in p{a}'s name to its set's AllocSvr #{to}"
            ),
            other => unreachable!("{other:?} is not an operator's"),
        }
    }
}

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
