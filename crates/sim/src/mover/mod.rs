//! The range mover: `seqctl set move` (`crates/seqsvr/src/sets/mover.rs`)
//! as a state machine on virtual time, one *run* per invocation. Its steps
//! are modelled here, call for call, over the shipped store commands
//! (`Command::Directory`, `Freeze`, `Install`, `CopyDirectory`, applied by
//! the real `SetState::apply`) and the AllocSvr's shipped release
//! (`ownership::release_moved`):
//!
//! 1. read the directory (the home group's route table) and `plan`: resume
//!    the move under way if it is this one, report it done, or refuse;
//! 2. **begin**: `BeginMove` in the home group, then the copies;
//! 3. **freeze** in the source: final ceilings, and its lease + margin;
//! 4. **release**: the source leader's `Status` (replicas asked in order,
//!    2 s each, the first that says it leads answers), then `Release` on
//!    every AllocSvr it lists, one after the other, 2 s each; if any does
//!    not confirm, wait the lease + margin from the freeze reply;
//! 5. **install** in the destination at the final ceilings (the store adds
//!    the step);
//! 6. **claim**: read the sections back every 10 ms until each has an
//!    owner that claimed it, nudging owners (`Refresh`) every 100 ms;
//!    30 s at most;
//! 7. **finish**: `FinishMove` in the home group, then the copies.
//!
//! Store calls go through the store client model (`link`) with the
//! clients' timings (`SetsClient`: 10 s, 3 s per replica, not hedged;
//! `ReadClient`: 10 s, 300 ms, hedged). A run may be stopped after a step
//! (`--stop-after`), killed anywhere (its calls may still land) or
//! suspended (what reaches it waits until it resumes); running the same
//! command again resumes the move, every step being idempotent in the
//! stores. A run that fails (a store call out of time) is run again by the
//! operator a little later.
//!
//! The steps are modelled, not shared: `mover.rs` is an async sequence in
//! the `seqsvr` binary crate, which this crate does not depend on.
//!
//! The knobs `install_below_final` and `install_before_release` change
//! step 5 (its floors) and skip step 4.

use std::collections::{BTreeMap, VecDeque};

use seqsvr_core::directory::{SetId, HOME_SET};
use seqsvr_core::{AllocId, Directory, PendingMove, Uid};

use crate::env::{trace, Env};
use crate::faults::MoveStep;
use crate::link::{Caller, StoreClient, Timing};
use crate::model::{
    AdminMsg, AllocEntry, Ev, LinkTimer, MTimer, Msg, StoreMsg, StoreOk, StoreResp,
};
use crate::net::{Node, Time, MS, SEC};

mod steps;

/// `ReadClient`'s timing (routes and section reads).
const READ: Timing = Timing {
    deadline: 10 * SEC,
    attempt: 300 * MS,
    hedge: true,
};
/// `CALL_TIMEOUT`: one status, release or refresh call.
const CALL: Time = 2 * SEC;
/// `CLAIM_TIMEOUT`.
const CLAIM: Time = 30 * SEC;
/// The claim loop's poll and nudge intervals.
const POLL: Time = 10 * MS;
const NUDGE: Time = 100 * MS;
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

/// What a store call of a run is for (one at a time).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Call {
    ReadDir,
    Begin,
    Copy,
    Freeze,
    Install,
    Claim,
    Finish,
}

/// Where a run is, waiting for the answer (or timer) the name says.
#[derive(Debug)]
enum Phase {
    /// Between two steps (never waited in).
    Idle,
    /// An operator's retry, not started yet.
    Delayed,
    /// A store call.
    Call(Call),
    /// A replica's `Status` (`leader_status`), before the release or a
    /// nudge.
    Status {
        set: usize,
        replica: usize,
        call: u64,
        for_release: bool,
    },
    /// A `Release` on the head of `left`.
    Release {
        left: VecDeque<AllocEntry>,
        call: u64,
    },
    /// The lease wait after a release that was not confirmed.
    WaitLeases,
    /// `Refresh` on each owner that has not claimed yet.
    Nudge { left: VecDeque<String>, call: u64 },
    /// Between two reads of the claim loop.
    ClaimSleep,
    /// A directory copy; then the rest, then the freeze (or the end).
    Copies {
        left: VecDeque<usize>,
        after_finish: bool,
    },
}

/// One invocation of the mover.
#[derive(Debug)]
struct Run {
    cmd: Cmd,
    stop_after: Option<MoveStep>,
    links: Vec<StoreClient<Call>>,
    phase: Phase,
    /// Guards wake-ups: only the latest counts.
    gen: u64,
    m: Option<PendingMove>,
    dir: Option<Directory>,
    /// Per section, the epoch the freeze left it at (named in releases).
    epochs: Vec<u64>,
    /// The move's id (the directory version it began at).
    move_id: u64,
    finals: Vec<u64>,
    expiry: Time,
    frozen_at: Time,
    claim_deadline: Time,
    last_nudge: Option<Time>,
    waiting: Vec<AllocId>,
    admin_of: BTreeMap<AllocId, String>,
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
    /// Refused by `plan` or the home group: nothing changed.
    Refused(String),
    /// A call failed; the operator runs the command again.
    Failed(String),
}

/// What advanced a run.
enum Input {
    Store(StoreResp),
    Status(Option<StoreOk>),
    Admin(Result<u32, String>),
    Wake,
}

/// What `plan` found.
enum Plan {
    Move(PendingMove),
    Done,
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

impl Movers {
    /// Runs `cmd` (a new `seqctl set move`).
    pub(crate) fn start(&mut self, env: &mut Env, cmd: Cmd, stop_after: Option<MoveStep>) {
        self.last = Some(cmd);
        let (id, mut run) = self.fresh(env, cmd, stop_after, 0);
        self.read_dir(env, id, &mut run);
        self.runs.insert(id, run);
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
        let run = Run {
            cmd,
            stop_after,
            links: (0..env.cfg.sets.len())
                .map(|_| StoreClient::default())
                .collect(),
            phase: Phase::Idle,
            gen: 0,
            m: None,
            dir: None,
            finals: Vec::new(),
            epochs: Vec::new(),
            move_id: 0,
            expiry: 0,
            frozen_at: 0,
            claim_deadline: 0,
            last_nudge: None,
            waiting: Vec::new(),
            admin_of: BTreeMap::new(),
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

    /// A message for the mover: a store answer (through its client, or a
    /// status), or an AllocSvr's answer.
    pub(crate) fn msg(&mut self, env: &mut Env, from: Node, m: Msg) {
        let id = match &m {
            Msg::Store(StoreMsg::Resp { call, .. }) => Some(call.life),
            Msg::Admin(AdminMsg::Answer { id: call, .. }) => {
                self.runs.iter().find_map(|(id, r)| match &r.phase {
                    Phase::Release { call: c, .. } | Phase::Nudge { call: c, .. } if c == call => {
                        Some(*id)
                    }
                    _ => None,
                })
            }
            _ => None,
        };
        if let Some(run) = id.and_then(|id| self.runs.get_mut(&id)) {
            if run.paused {
                return run.inbox.push(Queued::Msg(from, Box::new(m)));
            }
        }
        match (from, m) {
            (Node::Replica(r), Msg::Store(StoreMsg::Resp { call, resp, .. })) => {
                let id = call.life;
                let Some(mut run) = self.runs.remove(&id) else {
                    return;
                };
                if let Phase::Status { call: c, .. } = run.phase {
                    if c == call.call {
                        return self.advance(env, id, run, Input::Status(resp.ok()));
                    }
                }
                let set = env.cfg.layout().set_of_replica(r);
                let w = wrap(id, set);
                let who = caller(env, id, set, &w);
                let done = run.links[set].on_resp(env, &who, call, resp);
                self.finished_call(env, id, run, done);
            }
            (Node::Alloc(_), Msg::Admin(AdminMsg::Answer { result, .. })) => {
                if let Some(run) = id.and_then(|id| self.runs.remove(&id)) {
                    let id = id.expect("found");
                    self.advance(env, id, run, Input::Admin(result));
                }
            }
            (from, m) => trace!(env, "mover got {m:?} from {from}"),
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
            MTimer::Wake(gen) if gen == run.gen => {
                let input = match run.phase {
                    Phase::Status { .. } => Input::Status(None),
                    Phase::Release { .. } | Phase::Nudge { .. } => {
                        Input::Admin(Err("no answer in time".into()))
                    }
                    _ => Input::Wake,
                };
                self.advance(env, id, run, input);
            }
            MTimer::Wake(_) => {
                self.runs.insert(id, run);
            }
        }
    }

    fn finished_call(&mut self, env: &mut Env, id: u32, run: Run, done: Option<(Call, StoreResp)>) {
        match done {
            Some((_, resp)) => self.advance(env, id, run, Input::Store(resp)),
            None => {
                self.runs.insert(id, run);
            }
        }
    }

    /// The run's next step after `input`; the run is kept unless it ended.
    fn advance(&mut self, env: &mut Env, id: u32, mut run: Run, input: Input) {
        match self.step(env, id, &mut run, input) {
            Ok(()) => {
                self.runs.insert(id, run);
            }
            Err(end) => self.end(env, id, run, end),
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
                let (again, mut r) = self.fresh(env, run.cmd, None, run.retries + 1);
                r.phase = Phase::Delayed;
                let d = env.rng.range(SEC, 3 * SEC);
                Self::wake(env, again, &mut r, d);
                self.runs.insert(again, r);
            }
            End::Failed(_) => env.stats.moves_refused += 1,
        }
    }
}
