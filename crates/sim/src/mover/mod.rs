//! The range mover: `seqctl set move` run in the simulation. The steps
//! and every decision between them are the shipped state machine
//! ([`seqsvr_core::mover::Mover`]), the very code `seqctl` runs; this
//! module is its second executor. It makes the calls the machine asks for
//! over the simulated network, one *run* per invocation, with the shipped
//! clients' timings, and hands back the answers on virtual time:
//!
//! - store calls (directory read, begin, copies, freeze, the declared
//!   counters' read and copy, install, claim reads, finish) go through the store client model (`link`): the sets
//!   client's timing (`SetsClient`: 10 s, 3 s per replica, not hedged) or
//!   the reader's (`ReadClient`: 10 s, 300 ms, hedged), applied by the real
//!   `SetState::apply`;
//! - a freeze's reply names the AllocSvrs that may hold the sections, as
//!   the shipped leader does (`Arbiter::holders` of the replica that
//!   applied it);
//! - a leader's status (for the claim's nudges) asks the replicas in
//!   order, 2 s each, the first that says it leads answers
//!   (`leader_status`);
//! - `Release` and `Refresh` go to an AllocSvr's admin plane, 2 s each
//!   (`CALL_TIMEOUT`); the AllocSvr runs its shipped release
//!   (`ownership::release_moved`) and answers with its id and
//!   incarnation;
//! - the machine's waits (the lease wait, the claim loop's poll) are
//!   timers.
//!
//! A run may be stopped after a step (`--stop-after`), killed anywhere (its
//! calls may still land) or suspended (what reaches it waits until it
//! resumes); running the same command again resumes the move, every step
//! being idempotent in the stores. A run that fails (a store call out of
//! time, a copy not taken, the claim timing out) is run again by the
//! operator a little later.
//!
//! The knobs perturb the effects, not the decisions:
//! `install_before_release` drops the release (the freeze's reply is
//! taken to name no AllocSvr, so none is told), `release_skips_fenced`
//! drops the fenced holders from it, `release_unanswered_confirms` turns a
//! release nobody confirmed into the holder's confirmation, and
//! `install_below_final` lowers the floors of the install call.

use std::collections::BTreeMap;

use seqsvr_core::directory::{SetId, HOME_SET};
use seqsvr_core::mover::{Answer, MoveCmd, Mover, StatusFor};
use seqsvr_core::Uid;

use crate::env::{trace, Env};
use crate::faults::MoveStep;
use crate::link::{Caller, StoreClient, Timing};
use crate::model::{AdminMsg, Ev, LinkTimer, MTimer, Msg, StoreMsg, StoreOk};
use crate::net::{Node, Time, MS, SEC};

mod exec;

/// `ReadClient`'s timing (routes and section reads).
const READ: Timing = Timing {
    deadline: 10 * SEC,
    attempt: 300 * MS,
    hedge: true,
};
/// `CALL_TIMEOUT`: one status, release or refresh call.
const CALL: Time = 2 * SEC;
/// Times the operator runs a failed move again on its own.
const RETRIES: u32 = 3;

/// A move command: `seqctl set move --range begin..end --to to`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Cmd {
    /// First uid.
    pub begin: Uid,
    /// One past the last uid.
    pub end: Uid,
    /// The destination set.
    pub to: SetId,
}

/// What a store call of a run is (one at a time): how its answer reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    ReadDir,
    Change,
    Copy,
    Freeze,
    Install,
    Sections,
    ReadCounters,
    CopyCounters,
}

/// What a run waits for.
#[derive(Debug)]
enum Wait {
    /// Nothing (between two effects).
    Idle,
    /// An operator's retry, not started yet.
    Delayed,
    /// A store call (through the run's store client).
    Store,
    /// A replica's `Status` (`leader_status`).
    Status {
        set: usize,
        replica: usize,
        call: u64,
        purpose: StatusFor,
    },
    /// An AllocSvr's answer to `Release` (naming the holder told: its id
    /// and incarnation) or `Refresh` (`None`).
    Admin {
        call: u64,
        release: Option<(String, u64)>,
    },
    /// The end of a wait the machine asked for.
    Until,
}

/// One invocation of the mover.
#[derive(Debug)]
struct Run {
    /// The shipped mover.
    mover: Mover,
    /// Its store clients, one per set.
    links: Vec<StoreClient<Kind>>,
    /// What it waits for.
    wait: Wait,
    /// Guards wake-ups: only the latest counts.
    gen: u64,
    /// The machine waits for the source's leases (counted when it ends).
    lease_wait: bool,
    /// The confirmed release was counted.
    release_counted: bool,
    retries: u32,
    /// Stopped (SIGSTOP): inputs wait in `inbox`.
    paused: bool,
    inbox: Vec<Queued>,
}

/// What reached a paused run.
#[derive(Debug)]
enum Queued {
    Msg(Node, Box<Msg>),
    Timer(MTimer),
}

/// How a run ended.
#[derive(Debug)]
enum End {
    Done,
    /// `--stop-after`.
    Stopped(MoveStep),
    /// Refused by the plan or the home group: nothing changed.
    Refused(String),
    /// A call failed; the operator runs the command again.
    Failed(String),
}

/// Every running mover, and the last command (for `ResumeMove`).
#[derive(Debug, Default)]
pub(crate) struct Movers {
    runs: BTreeMap<u32, Run>,
    next: u32,
    /// The last command given.
    pub last: Option<Cmd>,
}

/// The home set's group.
const HOME: usize = HOME_SET as usize;

/// How the mover's calls to `set` wrap their timers.
fn wrap(id: u32, set: usize) -> impl Fn(LinkTimer) -> Ev {
    move |t| Ev::Mover {
        run: id,
        t: MTimer::Link(set, t),
    }
}

fn caller<'a>(env: &Env, id: u32, set: usize, wrap: &'a dyn Fn(LinkTimer) -> Ev) -> Caller<'a> {
    Caller {
        node: Node::Mover,
        first: env.cfg.layout().replica(set, 0),
        life: id,
        rate: 1.0,
        wrap,
    }
}

/// The machine's step for `--stop-after`.
fn step_of(s: MoveStep) -> seqsvr_core::mover::Step {
    use seqsvr_core::mover::Step;
    match s {
        MoveStep::Begin => Step::Begin,
        MoveStep::Freeze => Step::Freeze,
        MoveStep::Release => Step::Release,
        MoveStep::Install => Step::Install,
        MoveStep::Claim => Step::Claim,
    }
}

impl Movers {
    /// Runs `cmd` (a new `seqctl set move`).
    pub(crate) fn start(&mut self, env: &mut Env, cmd: Cmd, stop_after: Option<MoveStep>) {
        self.last = Some(cmd);
        let (id, mut run) = self.fresh(env, cmd, stop_after, 0);
        let effect = run.mover.start();
        self.perform(env, id, run, effect);
    }

    fn fresh(
        &mut self,
        env: &mut Env,
        cmd: Cmd,
        stop_after: Option<MoveStep>,
        retries: u32,
    ) -> (u32, Run) {
        self.next += 1;
        let id = self.next;
        trace!(
            env,
            "mover #{id}: move [{}, {}) to set {}{}",
            cmd.begin,
            cmd.end,
            cmd.to,
            stop_after.map_or(String::new(), |s| format!(", stopping after {s:?}"))
        );
        let mover = Mover::new(MoveCmd {
            begin: cmd.begin,
            end: cmd.end,
            to: cmd.to,
            stop_after: stop_after.map(step_of),
        });
        let run = Run {
            mover,
            links: (0..env.cfg.sets.len())
                .map(|_| StoreClient::default())
                .collect(),
            wait: Wait::Idle,
            gen: 0,
            lease_wait: false,
            release_counted: false,
            retries,
            paused: false,
            inbox: Vec::new(),
        };
        (id, run)
    }

    /// Whether a mover runs (or waits to run again).
    pub(crate) fn running(&self) -> bool {
        !self.runs.is_empty()
    }

    /// SIGSTOP of every running mover for `d`.
    pub(crate) fn pause(&mut self, env: &mut Env, d: Time) {
        for (&id, run) in self.runs.iter_mut().filter(|(_, r)| !r.paused) {
            run.paused = true;
            trace!(env, "mover #{id} paused for {} ms", d / MS);
            env.after(
                d,
                Ev::Mover {
                    run: id,
                    t: MTimer::Resume,
                },
            );
        }
    }

    /// kill -9 of every running mover.
    pub(crate) fn crash(&mut self, env: &mut Env) {
        let n = std::mem::take(&mut self.runs).len();
        env.stats.movers_killed += n as u64;
        if n > 0 {
            trace!(env, "mover: {n} run(s) killed");
        }
    }

    /// The run an answer is for: a store answer names it; an AllocSvr's
    /// names the call.
    fn run_of(&self, m: &Msg) -> Option<u32> {
        match m {
            Msg::Store(StoreMsg::Resp { call, .. }) => Some(call.life),
            Msg::Admin(AdminMsg::Answer { id: call, .. }) => {
                self.runs.iter().find_map(|(id, r)| match r.wait {
                    Wait::Admin { call: c, .. } if c == *call => Some(*id),
                    _ => None,
                })
            }
            _ => None,
        }
    }

    /// A message for the mover: a store answer (through its client, or a
    /// status), or an AllocSvr's answer.
    pub(crate) fn msg(&mut self, env: &mut Env, from: Node, m: Msg) {
        let id = self.run_of(&m);
        let Some(mut run) = id.and_then(|id| self.runs.remove(&id)) else {
            return trace!(env, "mover got {m:?} from {from} (no run waits for it)");
        };
        let id = id.expect("found");
        if run.paused {
            run.inbox.push(Queued::Msg(from, Box::new(m)));
            self.runs.insert(id, run);
            return;
        }
        match (from, m) {
            (Node::Replica(r), Msg::Store(StoreMsg::Resp { call, resp, .. })) => {
                if let Wait::Status { call: c, .. } = run.wait {
                    if c == call.call {
                        let ok = match resp {
                            Ok(StoreOk::Status {
                                leading: true,
                                allocs,
                            }) => Some(allocs),
                            _ => None,
                        };
                        return self.status_answer(env, id, run, ok);
                    }
                }
                let set = env.cfg.layout().set_of_replica(r);
                let w = wrap(id, set);
                let who = caller(env, id, set, &w);
                let done = run.links[set].on_resp(env, &who, call, resp);
                self.finished_call(env, id, run, done);
            }
            (Node::Alloc(_), Msg::Admin(AdminMsg::Answer { result, .. })) => {
                let answer = match &run.wait {
                    Wait::Admin {
                        release: Some(holder),
                        ..
                    } => exec::released(env, holder, result),
                    _ => Answer::Refreshed,
                };
                self.answer(env, id, run, answer);
            }
            (from, m) => {
                trace!(env, "mover got {m:?} from {from}");
                self.runs.insert(id, run);
            }
        }
    }

    /// A timer of run `id`.
    pub(crate) fn timer(&mut self, env: &mut Env, id: u32, t: MTimer) {
        let Some(mut run) = self.runs.remove(&id) else {
            return;
        };
        if let MTimer::Resume = t {
            // SIGCONT: what queued up is handled now, in order.
            run.paused = false;
            let inbox = std::mem::take(&mut run.inbox);
            self.runs.insert(id, run);
            trace!(env, "mover #{id} resumes");
            for q in inbox {
                match q {
                    Queued::Msg(from, m) => self.msg(env, from, *m),
                    Queued::Timer(t) => self.timer(env, id, t),
                }
            }
            return;
        }
        if run.paused {
            run.inbox.push(Queued::Timer(t));
            self.runs.insert(id, run);
            return;
        }
        match t {
            MTimer::Resume => unreachable!("handled above"),
            MTimer::Link(set, lt) => {
                let w = wrap(id, set);
                let who = caller(env, id, set, &w);
                let done = run.links[set].on_timer(env, &who, lt);
                self.finished_call(env, id, run, done);
            }
            MTimer::Wake(gen) if gen == run.gen => self.woke(env, id, run),
            MTimer::Wake(_) => {
                self.runs.insert(id, run);
            }
        }
    }

    fn end(&mut self, env: &mut Env, id: u32, run: Run, end: End) {
        match &end {
            End::Done => trace!(env, "mover #{id}: done"),
            End::Stopped(step) => trace!(env, "mover #{id}: stopped after {step:?}"),
            End::Refused(why) => trace!(env, "mover #{id}: refused: {why}"),
            End::Failed(why) => trace!(env, "mover #{id}: failed: {why}"),
        }
        match end {
            End::Done => {}
            End::Stopped(_) => env.stats.movers_killed += 1,
            End::Refused(_) => env.stats.moves_refused += 1,
            End::Failed(_) if run.retries < RETRIES => {
                // The operator sees the error and runs the command again.
                let cmd = run.mover.cmd();
                let cmd = Cmd {
                    begin: cmd.begin,
                    end: cmd.end,
                    to: cmd.to,
                };
                let (again, mut r) = self.fresh(env, cmd, None, run.retries + 1);
                r.wait = Wait::Delayed;
                let d = env.rng.range(SEC, 3 * SEC);
                Self::wake(env, again, &mut r, d);
                self.runs.insert(again, r);
            }
            End::Failed(_) => env.stats.moves_refused += 1,
        }
    }

    /// Sets the run's wake-up `d` from now (earlier ones no longer count).
    fn wake(env: &mut Env, id: u32, run: &mut Run, d: Time) {
        run.gen += 1;
        let t = MTimer::Wake(run.gen);
        env.after(d, Ev::Mover { run: id, t });
    }
}
