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
//! right after). Clock drift is per AllocSvr for the whole run (drawn with
//! the configuration). No fault starts in the final quiet stretch, whose
//! start heals everything.

use seqsvr_core::LeaseTerms;

use crate::net::{fmt_time, Time, MS, SEC};
use crate::rng::Rng;

/// What happens to the adopt of a planned handoff.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AdoptFate {
    /// Delivered as the network delivers it.
    Normal,
    /// Lost: the new owner claims the section at its next renewal.
    Lost,
    /// Held back this long (arrives after the new owner claimed, or after
    /// the section moved on).
    Delayed(Time),
    /// Delivered, and once more this much later.
    Duplicated(Time),
}

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

/// One scheduled fault. `a` is an AllocSvr process slot (slot `i <
/// allocs` is AllocSvr `ai`'s first process; slot `allocs + i` its twin).
#[derive(Debug, Clone, PartialEq)]
pub enum Fault {
    /// Cut a replica from the other replicas (and from every AllocSvr).
    IsolateReplica {
        /// The replica.
        r: usize,
        /// Also from the AllocSvrs.
        allocs_too: bool,
    },
    /// Cut whichever replica leads from the other replicas, leaving it
    /// reachable by AllocSvrs; `alloc` (if any) can then reach only it.
    DeposeLeader {
        /// An AllocSvr cut from every other replica.
        alloc: Option<usize>,
    },
    /// Cut an AllocSvr from some replicas.
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
    /// kill -9 whichever replica leads.
    CrashLeader,
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
    /// SIGSTOP a store replica for a while: the leader if `leader`, else
    /// the `r`-th of the others. What reaches it meanwhile is handled when
    /// it resumes.
    PauseReplica {
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
    /// The operator routes sections `first..first+count` to AllocSvr `to`
    /// with the epochs it read (`stale`: one of them off by one).
    OperatorAssign {
        /// The new owner (AllocSvr index).
        to: usize,
        /// First section.
        first: u32,
        /// How many.
        count: u32,
        /// Expect an epoch one below the one read.
        stale: bool,
    },
    /// Start a second process with AllocSvr `a`'s id (a twin), at its own
    /// address; it runs until a `CrashAlloc` of its slot.
    StartTwin {
        /// The AllocSvr index.
        a: usize,
    },
    /// The operator sets the lease terms (`seqctl lease set`).
    SetLease {
        /// The terms.
        terms: LeaseTerms,
    },
    /// Heal every link, restart every process.
    HealEverything,
}

impl std::fmt::Display for Fault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Fault::IsolateReplica { r, allocs_too } => {
                let to = if *allocs_too { " and every alloc" } else { "" };
                write!(f, "isolate r{r} from the other replicas{to}")
            }
            Fault::DeposeLeader { alloc } => {
                write!(f, "cut the leader off from the other replicas")?;
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
            Fault::CrashLeader => write!(f, "crash the store leader"),
            Fault::CrashReplica { r } => write!(f, "crash r{r}"),
            Fault::RestartReplica { of } => write!(f, "restart what fault #{of} crashed"),
            Fault::PauseReplica {
                leader: true, dur, ..
            } => {
                write!(f, "pause the store leader for {}", fmt_time(*dur))
            }
            Fault::PauseReplica { r, dur, .. } => {
                write!(f, "pause follower #{r} for {}", fmt_time(*dur))
            }
            Fault::SlowNetwork { dur } => write!(f, "slow network for {}", fmt_time(*dur)),
            Fault::Handoff {
                from,
                to,
                count,
                adopt,
            } => write!(
                f,
                "operator: p{from} hands {count} section(s) to a{to} (adopt {adopt:?})"
            ),
            Fault::HandoffRoundTrip {
                from,
                to,
                stall,
                window,
            } => write!(
                f,
                "operator: p{from} hands a section to a{to} (its requests {} late for {})",
                fmt_time(*stall),
                fmt_time(*window)
            ),
            Fault::HandBack { of } => write!(f, "operator: the section of fault #{of} handed back"),
            Fault::ForgeAdopt { to, kind } => write!(f, "forged adopt ({kind:?}) to p{to}"),
            Fault::OperatorAssign {
                to,
                first,
                count,
                stale,
            } => write!(
                f,
                "operator: assign sections {first}..{} to a{to}{}",
                first + count,
                if *stale { " (a stale epoch)" } else { "" }
            ),
            Fault::StartTwin { a } => write!(f, "start a twin of a{a}"),
            Fault::SetLease { terms } => write!(
                f,
                "operator: lease terms {} ms + {} ms",
                terms.lease_ms, terms.margin_ms
            ),
            Fault::HealEverything => write!(f, "heal everything, restart everything"),
        }
    }
}

/// What the schedule is drawn for.
#[derive(Debug, Clone)]
pub struct Shape {
    /// AllocSvr ids (each has a first process and a twin slot).
    pub allocs: usize,
    /// Store replicas.
    pub replicas: usize,
    /// Sections of the set.
    pub sections: u32,
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

/// Draws a fault schedule for `shape`.
pub fn generate(rng: &mut Rng, shape: &Shape) -> Vec<(Time, Fault)> {
    let long = shape.terms.expiry_ms() * MS;
    let quiet = shape.quiet;
    let n = shape.allocs;
    let mut out: Vec<(Time, Fault)> = Vec::new();
    let mut t = rng.range(2 * SEC, 4 * SEC);
    while t < quiet {
        let a = rng.pick(n);
        let r = rng.pick(shape.replicas);
        let i = out.len();
        let dur = duration(rng, long);
        let kinds = if shape.pause_in_renewal { 21 } else { 20 };
        let mut undo = None;
        let fault = match rng.below(kinds) {
            20 => Fault::PauseInRenewal { a, dur },
            19 => {
                undo = Some((t + SEC, Fault::HandBack { of: i }));
                Fault::HandoffRoundTrip {
                    from: a,
                    to: (a + 1 + rng.pick(n - 1)) % n,
                    stall: rng.range(1500 * MS, 4 * SEC),
                    window: 300 * MS,
                }
            }
            0 => {
                undo = Some((t + dur, Fault::Heal { of: i }));
                Fault::IsolateReplica {
                    r,
                    allocs_too: rng.chance(0.5),
                }
            }
            1 | 2 => {
                undo = Some((t + dur, Fault::Heal { of: i }));
                Fault::DeposeLeader {
                    alloc: rng.chance(0.8).then_some(a),
                }
            }
            3 => {
                let replicas = (0..shape.replicas).filter(|_| rng.chance(0.6)).collect();
                undo = Some((t + dur, Fault::Heal { of: i }));
                Fault::CutAlloc {
                    a,
                    replicas,
                    answers_only: rng.chance(0.3),
                }
            }
            4 | 5 => {
                undo = Some((t + dur, Fault::RestartAlloc { a }));
                Fault::CrashAlloc { a }
            }
            6 => Fault::PauseAlloc { a, dur },
            7 | 8 => Fault::PauseAfterAdmit { a, dur },
            9 => {
                undo = Some((t + dur, Fault::RestartReplica { of: i }));
                Fault::CrashLeader
            }
            10 => {
                undo = Some((t + dur, Fault::RestartReplica { of: i }));
                Fault::CrashReplica { r }
            }
            11 => Fault::SlowNetwork {
                dur: rng.range(200 * MS, 3 * SEC),
            },
            12 => Fault::PauseReplica {
                leader: rng.chance(0.5),
                r: rng.pick(shape.replicas - 1),
                dur: if rng.chance(0.3) {
                    rng.range(SEC, 6 * SEC)
                } else {
                    rng.range(50 * MS, SEC)
                },
            },
            13 | 14 => Fault::Handoff {
                from: a,
                to: (a + 1 + rng.pick(n - 1)) % n,
                count: 1 + rng.pick(2),
                adopt: match rng.below(5) {
                    0 => AdoptFate::Lost,
                    1 => AdoptFate::Delayed(rng.range(100 * MS, 3 * SEC)),
                    2 => AdoptFate::Duplicated(rng.range(MS, 3 * SEC)),
                    _ => AdoptFate::Normal,
                },
            },
            15 => Fault::ForgeAdopt {
                to: a,
                kind: match rng.below(4) {
                    0 => Forgery::HugeEpoch,
                    1 => Forgery::OtherOwners,
                    2 => Forgery::WrongSection,
                    _ => Forgery::Replay,
                },
            },
            16 => {
                let first = rng.below(shape.sections as u64) as u32;
                let count = 1 + rng.below(2.min((shape.sections - first) as u64)) as u32;
                Fault::OperatorAssign {
                    to: a,
                    first,
                    count,
                    stale: rng.chance(0.3),
                }
            }
            17 => {
                undo = Some((
                    (t + dur.max(2 * SEC)).min(quiet),
                    Fault::CrashAlloc { a: n + a },
                ));
                Fault::StartTwin { a }
            }
            _ if t + 25 * SEC < quiet => {
                lease_change(rng, shape, t, a, &mut out);
                t += 25 * SEC;
                continue;
            }
            _ => Fault::SlowNetwork {
                dur: rng.range(200 * MS, 3 * SEC),
            },
        };
        out.push((t, fault));
        if let Some(u) = undo {
            out.push(u);
        }
        t += rng.range(SEC, 6 * SEC);
    }
    out.push((quiet, Fault::HealEverything));
    sort_schedule(out)
}

/// A longer lease, then back to the usual terms once the store allows
/// (`Arbiter::lease_change_allowed`: a full wait after the first change),
/// then AllocSvr `a` cut off from every replica (its longer lease still
/// running) and, sometimes, the leader changed.
fn lease_change(rng: &mut Rng, shape: &Shape, t: Time, a: usize, out: &mut Vec<(Time, Fault)>) {
    let lease_ms = rng.range(8000, 12_001);
    let long = LeaseTerms {
        lease_ms,
        margin_ms: lease_ms / 5,
    };
    let back = t + long.expiry_ms().max(shape.terms.expiry_ms()) * MS + rng.range(SEC, 2 * SEC);
    out.push((t, Fault::SetLease { terms: long }));
    out.push((back, Fault::SetLease { terms: shape.terms }));
    let cut_at = back + rng.range(50 * MS, 1500 * MS);
    let i = out.len();
    out.push((
        cut_at,
        Fault::CutAlloc {
            a,
            replicas: (0..shape.replicas).collect(),
            answers_only: false,
        },
    ));
    out.push((cut_at + rng.range(8 * SEC, 11 * SEC), Fault::Heal { of: i }));
    if rng.chance(0.5) {
        let at = cut_at + rng.range(100 * MS, 3 * SEC);
        let i = out.len();
        out.push((at, Fault::CrashLeader));
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
