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

mod draw;

use seqsvr_core::LeaseTerms;

pub use crate::model::AdoptFate;
use crate::net::{fmt_time, Time};
pub use draw::{generate, Shape};

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
