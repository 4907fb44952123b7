//! The fault schedule: drawn from the seed before the run, applied at its
//! times, printed with every failure.
//!
//! Faults: partitions between AllocSvrs and store replicas and between
//! replicas (with heals), the store leader cut off from the other replicas
//! while AllocSvrs still reach it (the "deposed leader"), store leader and
//! replica crashes with restarts, AllocSvr crashes with restarts, AllocSvr
//! pauses (SIGSTOP, some longer than lease + margin, some starting right
//! after a request passed its lease check), and stretches of slow network.
//! Clock drift is per AllocSvr for the whole run (see [`crate::config`]).
//! No fault starts in the final `quiet_tail`, whose start heals everything.

use std::collections::BTreeMap;

use crate::config::SimConfig;
use crate::net::{fmt_time, Node, Time, MS, SEC};
use crate::rng::Rng;
use crate::world::{trace, World};

/// One scheduled fault.
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
    /// kill -9 an AllocSvr.
    CrashAlloc {
        /// The AllocSvr.
        a: usize,
    },
    /// Restart it.
    RestartAlloc {
        /// The AllocSvr.
        a: usize,
    },
    /// SIGSTOP an AllocSvr for a while.
    PauseAlloc {
        /// The AllocSvr.
        a: usize,
        /// For how long.
        dur: Time,
    },
    /// SIGSTOP an AllocSvr right after it next admits a request (so the
    /// request's number is taken after the pause).
    PauseAfterAdmit {
        /// The AllocSvr.
        a: usize,
        /// For how long.
        dur: Time,
    },
    /// SIGSTOP an AllocSvr right after its lease is next extended, before
    /// it takes over the sections the renewal newly lists.
    PauseInRenewal {
        /// The AllocSvr.
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
    /// Every message is slow for a while.
    SlowNetwork {
        /// For how long.
        dur: Time,
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
                    Some(a) => write!(f, "; a{a} reaches only the old leader"),
                    None => Ok(()),
                }
            }
            Fault::CutAlloc {
                a,
                replicas,
                answers_only: false,
            } => write!(f, "cut a{a} from replicas {replicas:?}"),
            Fault::CutAlloc { a, replicas, .. } => {
                write!(f, "lose every answer from replicas {replicas:?} to a{a}")
            }
            Fault::Heal { of } => write!(f, "heal the cuts of fault #{of}"),
            Fault::CrashAlloc { a } => write!(f, "crash a{a}"),
            Fault::RestartAlloc { a } => write!(f, "restart a{a}"),
            Fault::PauseAlloc { a, dur } => write!(f, "pause a{a} for {}", fmt_time(*dur)),
            Fault::PauseAfterAdmit { a, dur } => {
                write!(
                    f,
                    "pause a{a} for {} right after it admits a request",
                    fmt_time(*dur)
                )
            }
            Fault::PauseInRenewal { a, dur } => write!(
                f,
                "pause a{a} for {} right after its lease is next extended",
                fmt_time(*dur)
            ),
            Fault::CrashLeader => write!(f, "crash the store leader"),
            Fault::CrashReplica { r } => write!(f, "crash r{r}"),
            Fault::RestartReplica { of } => write!(f, "restart what fault #{of} crashed"),
            Fault::SlowNetwork { dur } => write!(f, "slow network for {}", fmt_time(*dur)),
            Fault::HealEverything => write!(f, "heal everything, restart everything"),
        }
    }
}

/// What applied faults did, so they can be undone.
#[derive(Debug, Default)]
pub(crate) struct FaultState {
    /// Links cut, by fault index.
    cuts: BTreeMap<usize, Vec<(Node, Node)>>,
    /// Replica crashed, by fault index.
    crashed: BTreeMap<usize, usize>,
}

/// A duration: mostly short, sometimes longer than lease + margin.
fn duration(rng: &mut Rng, long: Time) -> Time {
    if rng.chance(0.4) {
        rng.range(long, long + 6 * SEC)
    } else {
        rng.range(200 * MS, 4 * SEC)
    }
}

/// Draws a fault schedule for `cfg`.
pub(crate) fn generate(rng: &mut Rng, cfg: &SimConfig) -> Vec<(Time, Fault)> {
    let long = cfg.lease.expiry().as_nanos() as Time;
    let quiet = cfg.duration - cfg.quiet_tail;
    let mut out: Vec<(Time, Fault)> = Vec::new();
    let mut t = rng.range(2 * SEC, 4 * SEC);
    while t < quiet {
        let a = rng.pick(cfg.allocs);
        let r = rng.pick(cfg.replicas);
        let i = out.len();
        let dur = duration(rng, long);
        let kinds = if cfg.knobs.pause_in_renewal { 13 } else { 12 };
        let (fault, undo) = match rng.below(kinds) {
            12 => (Fault::PauseInRenewal { a, dur }, None),
            0 => (
                Fault::IsolateReplica {
                    r,
                    allocs_too: rng.chance(0.5),
                },
                Some(Fault::Heal { of: i }),
            ),
            1 | 2 => (
                Fault::DeposeLeader {
                    alloc: rng.chance(0.8).then_some(a),
                },
                Some(Fault::Heal { of: i }),
            ),
            3 => {
                let replicas = (0..cfg.replicas).filter(|_| rng.chance(0.6)).collect();
                let answers_only = rng.chance(0.3);
                let f = Fault::CutAlloc {
                    a,
                    replicas,
                    answers_only,
                };
                (f, Some(Fault::Heal { of: i }))
            }
            4 | 5 => (Fault::CrashAlloc { a }, Some(Fault::RestartAlloc { a })),
            6 => (Fault::PauseAlloc { a, dur }, None),
            7 | 8 => (Fault::PauseAfterAdmit { a, dur }, None),
            9 => (Fault::CrashLeader, Some(Fault::RestartReplica { of: i })),
            10 => (
                Fault::CrashReplica { r },
                Some(Fault::RestartReplica { of: i }),
            ),
            _ => (
                Fault::SlowNetwork {
                    dur: rng.range(200 * MS, 3 * SEC),
                },
                None,
            ),
        };
        out.push((t, fault));
        if let Some(u) = undo {
            out.push((t + dur, u));
        }
        t += rng.range(SEC, 6 * SEC);
    }
    out.push((quiet, Fault::HealEverything));
    sort_schedule(out)
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
                f => f,
            };
            (t, f)
        })
        .collect()
}

impl World {
    /// Applies the `i`-th fault of the schedule.
    pub(crate) fn apply_fault(&mut self, i: usize) {
        let fault = self.cfg.faults[i].1.clone();
        trace!(self, "FAULT #{i}: {fault}");
        let replicas: Vec<usize> = (0..self.replicas.len()).collect();
        let allocs: Vec<usize> = (0..self.allocs.len()).collect();
        match fault {
            Fault::IsolateReplica { r, allocs_too } => {
                let mut cuts: Vec<(Node, Node)> = (replicas.iter())
                    .filter(|&&o| o != r)
                    .map(|&o| (Node::Replica(r), Node::Replica(o)))
                    .collect();
                if allocs_too {
                    cuts.extend(allocs.iter().map(|&a| (Node::Replica(r), Node::Alloc(a))));
                }
                self.cut(i, cuts);
            }
            Fault::DeposeLeader { alloc } => {
                let Some(l) = self.effective_leader() else {
                    return;
                };
                let mut cuts: Vec<(Node, Node)> = (replicas.iter())
                    .filter(|&&o| o != l)
                    .map(|&o| (Node::Replica(l), Node::Replica(o)))
                    .collect();
                if let Some(a) = alloc {
                    cuts.extend(
                        (replicas.iter())
                            .filter(|&&o| o != l)
                            .map(|&o| (Node::Alloc(a), Node::Replica(o))),
                    );
                }
                self.cut(i, cuts);
            }
            Fault::CutAlloc {
                a,
                replicas,
                answers_only,
            } => {
                let links = replicas.iter().map(|&r| (Node::Replica(r), Node::Alloc(a)));
                if answers_only {
                    self.cut_directions(i, links.collect());
                } else {
                    self.cut(i, links.collect());
                }
            }
            Fault::Heal { of } => {
                for (x, y) in self.faults.cuts.remove(&of).unwrap_or_default() {
                    self.net.heal_one_way(x, y);
                }
            }
            Fault::CrashAlloc { a } => self.crash_alloc(a),
            Fault::RestartAlloc { a } => self.restart_alloc(a),
            Fault::PauseAlloc { a, dur } => self.pause_alloc(a, dur),
            Fault::PauseAfterAdmit { a, dur } => {
                if self.allocs[a].up && !self.allocs[a].paused {
                    self.allocs[a].pause_on_admit = Some(dur);
                }
            }
            Fault::PauseInRenewal { a, dur } => {
                if self.allocs[a].up && !self.allocs[a].paused {
                    self.allocs[a].pause_on_renewal = Some(dur);
                }
            }
            Fault::CrashLeader => {
                if let Some(l) = (0..self.replicas.len())
                    .find(|&r| self.replicas[r].up && self.replicas[r].leading)
                {
                    self.crash_replica(l);
                    self.faults.crashed.insert(i, l);
                }
            }
            Fault::CrashReplica { r } => {
                self.crash_replica(r);
                self.faults.crashed.insert(i, r);
            }
            Fault::RestartReplica { of } => {
                if let Some(r) = self.faults.crashed.remove(&of) {
                    self.restart_replica(r);
                }
            }
            Fault::SlowNetwork { dur } => self.net.slow_until = self.now + dur,
            Fault::HealEverything => {
                self.net.heal_all();
                self.faults.cuts.clear();
                for r in replicas {
                    self.restart_replica(r);
                }
                for a in allocs {
                    self.restart_alloc(a);
                    self.allocs[a].pause_on_admit = None;
                    self.allocs[a].pause_on_renewal = None;
                }
            }
        }
    }

    /// Cuts `links` both ways, remembering them under fault `i`.
    fn cut(&mut self, i: usize, links: Vec<(Node, Node)>) {
        let both = links.iter().flat_map(|&(x, y)| [(x, y), (y, x)]).collect();
        self.cut_directions(i, both);
    }

    fn cut_directions(&mut self, i: usize, cuts: Vec<(Node, Node)>) {
        for &(x, y) in &cuts {
            self.net.cut_one_way(x, y);
        }
        self.faults.cuts.entry(i).or_default().extend(cuts);
    }
}
