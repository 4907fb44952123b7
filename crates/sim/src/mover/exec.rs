//! The executor: performs the shipped mover's effects in the simulated
//! world and hands back the answers.

use std::time::Duration;

use seqsvr_core::mover::{
    AllocRef, Answer, Call, CallError, Claimed, Confirmed, Effect, MoveError, StatusFor,
};
use seqsvr_store_core::command::Reply;

use super::{caller, wrap, End, Kind, Movers, Run, Wait, CALL, HOME, READ};
use crate::counter_calls::CounterReq;
use crate::env::{trace, Env};
use crate::faults::MoveStep;
use crate::link::Timing;
use crate::model::{
    slot_of_addr, AdminMsg, AllocEntry, CallRef, Msg, Pending, StoreFail, StoreMsg, StoreOk,
    StoreReq, StoreResp,
};
use crate::net::Node;
use crate::operator::ADMIN;

/// The machine's clock: virtual time.
fn now(env: &Env) -> Duration {
    Duration::from_nanos(env.now)
}

impl Movers {
    /// Hands `answer` to run `id`'s machine and performs what it asks.
    pub(super) fn answer(&mut self, env: &mut Env, id: u32, mut run: Run, answer: Answer) {
        // Whatever the run waited for came: earlier wake-ups no longer
        // count (the next wait sets its own).
        run.gen += 1;
        run.wait = Wait::Idle;
        let effect = run.mover.on(now(env), answer);
        self.perform(env, id, run, effect);
    }

    /// Performs `effect` (and, for calls answered at once, the effects
    /// that follow); the run is kept unless it ended.
    pub(super) fn perform(&mut self, env: &mut Env, id: u32, mut run: Run, mut effect: Effect) {
        loop {
            count_release(env, &mut run);
            match effect {
                Effect::Call(c) => {
                    trace!(env, "mover #{id}: {}", describe(&c));
                    match self.call(env, id, &mut run, c) {
                        Some(answer) => effect = run.mover.on(now(env), answer),
                        None => break,
                    }
                }
                Effect::WaitUntil(t) => {
                    run.lease_wait = run.mover.waiting_for_leases();
                    run.wait = Wait::Until;
                    let d = t.as_nanos() as u64;
                    Self::wake(env, id, &mut run, d.saturating_sub(env.now));
                    break;
                }
                Effect::Done(_) => return self.end(env, id, run, End::Done),
                Effect::Failed(e) => return self.end(env, id, run, end_of(e)),
            }
        }
        self.runs.insert(id, run);
    }

    /// Starts call `c`; its answer if it is known at once (a call the
    /// knobs drop, an address that leads nowhere).
    fn call(&mut self, env: &mut Env, id: u32, run: &mut Run, c: Call) -> Option<Answer> {
        let (set, kind, req, timing) = match c {
            Call::ReadDirectory => (HOME, Kind::ReadDir, StoreReq::Routes, READ),
            Call::ChangeDirectory(ch) => (HOME, Kind::Change, StoreReq::ChangeDirectory(ch), ADMIN),
            Call::CopyDirectory { set, dir } => (
                set as usize,
                Kind::Copy,
                StoreReq::CopyDirectory(dir),
                ADMIN,
            ),
            Call::Freeze { first, count, call } => {
                let req = StoreReq::Freeze { first, count, call };
                (call.set as usize, Kind::Freeze, req, ADMIN)
            }
            Call::Install {
                first,
                floors,
                call,
            } => {
                let floors = perturb_floors(env, call.set as usize, floors);
                let req = StoreReq::Install {
                    first,
                    floors,
                    call,
                };
                (call.set as usize, Kind::Install, req, ADMIN)
            }
            Call::ReadSections { set, first, count } => {
                let req = StoreReq::Sections { first, count };
                (set as usize, Kind::Sections, req, READ)
            }
            Call::ReadCounters {
                set,
                first,
                count,
                after,
            } => {
                let req = StoreReq::Counters(CounterReq::Read {
                    first,
                    count,
                    after,
                });
                (set as usize, Kind::ReadCounters, req, ADMIN)
            }
            Call::CopyCounters {
                call,
                after,
                through,
                counters,
            } => {
                let req = StoreReq::Counters(CounterReq::Copy {
                    call,
                    after,
                    through,
                    counters,
                });
                (call.set as usize, Kind::CopyCounters, req, ADMIN)
            }
            Call::LeaderStatus { set, purpose } => {
                self.status(env, id, run, set as usize, 0, purpose);
                return None;
            }
            Call::Release {
                alloc,
                incarnation,
                admin_addr,
                first,
                epochs,
            } => {
                let holder = (alloc, incarnation);
                let Some(slot) = slot_of_addr(&admin_addr) else {
                    let e = format!("{} has no admin address", holder.0);
                    return Some(released(env, &holder, Err(e)));
                };
                let call = env.fresh_id();
                let msg = AdminMsg::Release {
                    id: call,
                    first,
                    epochs,
                };
                return self.admin(env, id, run, slot, msg, call, Some(holder));
            }
            Call::Refresh { admin_addr, .. } => {
                let slot = slot_of_addr(&admin_addr)?;
                let call = env.fresh_id();
                let msg = AdminMsg::Refresh { id: call };
                return self.admin(env, id, run, slot, msg, call, None);
            }
        };
        self.store(env, id, run, set, kind, req, timing);
        None
    }

    /// Starts a store call to `set`'s group.
    #[allow(clippy::too_many_arguments)]
    fn store(
        &mut self,
        env: &mut Env,
        id: u32,
        run: &mut Run,
        set: usize,
        kind: Kind,
        req: StoreReq,
        timing: Timing,
    ) {
        run.wait = Wait::Store;
        let w = wrap(id, set);
        let who = caller(env, id, set, &w);
        let done = run.links[set].start(env, &who, req, kind, timing);
        debug_assert!(done.is_none(), "a call ends only on an answer or a timer");
    }

    /// Sends an admin-plane call to the AllocSvr in `slot`, 2 s at most.
    #[allow(clippy::too_many_arguments)]
    fn admin(
        &mut self,
        env: &mut Env,
        id: u32,
        run: &mut Run,
        slot: usize,
        msg: AdminMsg,
        call: u64,
        release: Option<(String, u64)>,
    ) -> Option<Answer> {
        env.send(Node::Mover, Node::Alloc(slot), Msg::Admin(msg));
        run.wait = Wait::Admin { call, release };
        Self::wake(env, id, run, CALL);
        None
    }

    /// `leader_status`: asks replica `replica` of `set`, 2 s at most.
    fn status(
        &mut self,
        env: &mut Env,
        id: u32,
        run: &mut Run,
        set: usize,
        replica: usize,
        purpose: StatusFor,
    ) {
        let call = env.fresh_id();
        let p = Pending {
            call: CallRef {
                node: Node::Mover,
                life: id,
                call,
                attempt: 0,
            },
            req: StoreReq::Status,
            forwarded: false,
            via: None,
        };
        let r = env.cfg.layout().replica(set, replica);
        env.send(Node::Mover, Node::Replica(r), Msg::Store(StoreMsg::Req(p)));
        run.wait = Wait::Status {
            set,
            replica,
            call,
            purpose,
        };
        Self::wake(env, id, run, CALL);
    }

    /// A replica answered the status (its AllocSvrs if it leads), or did
    /// not in time: the next replica is asked, or no leader answered.
    pub(super) fn status_answer(
        &mut self,
        env: &mut Env,
        id: u32,
        mut run: Run,
        leading: Option<Vec<AllocEntry>>,
    ) {
        let Wait::Status {
            set,
            replica,
            purpose,
            ..
        } = run.wait
        else {
            unreachable!("a status answer only while one is awaited");
        };
        let answer = match leading {
            Some(allocs) => Some(allocs.into_iter().map(alloc_ref).collect()),
            None if replica + 1 < env.cfg.replicas => {
                self.status(env, id, &mut run, set, replica + 1, purpose);
                self.runs.insert(id, run);
                return;
            }
            None => None,
        };
        self.answer(env, id, run, Answer::Leader(answer));
    }

    /// A store call of run `id` ended (or not yet: `None`).
    pub(super) fn finished_call(
        &mut self,
        env: &mut Env,
        id: u32,
        run: Run,
        done: Option<(Kind, StoreResp)>,
    ) {
        if let Some((
            Kind::Change,
            Ok(StoreOk::Directory {
                version, changed, ..
            }),
        )) = &done
        {
            trace!(
                env,
                "mover #{id}: directory version {version}, changed: {changed}"
            );
        }
        match done {
            Some((kind, resp)) => {
                let answer = perturb_frozen(env, store_answer(kind, resp));
                self.answer(env, id, run, answer)
            }
            None => {
                self.runs.insert(id, run);
            }
        }
    }

    /// Run `id`'s wake-up: a retry starts, a call ran out of time, or a
    /// wait the machine asked for ended.
    pub(super) fn woke(&mut self, env: &mut Env, id: u32, mut run: Run) {
        match run.wait {
            Wait::Delayed => {
                run.wait = Wait::Idle;
                let effect = run.mover.start();
                self.perform(env, id, run, effect);
            }
            Wait::Status { .. } => self.status_answer(env, id, run, None),
            Wait::Admin {
                release: Some(ref holder),
                ..
            } => {
                let holder = holder.clone();
                let answer = released(env, &holder, Err("no answer in time".into()));
                self.answer(env, id, run, answer);
            }
            Wait::Admin { release: None, .. } => self.answer(env, id, run, Answer::Refreshed),
            Wait::Until => {
                if std::mem::take(&mut run.lease_wait) {
                    env.stats.lease_waits += 1;
                }
                self.answer(env, id, run, Answer::Woke);
            }
            Wait::Idle | Wait::Store => {
                self.runs.insert(id, run);
            }
        }
    }
}

/// Counts a release every AllocSvr confirmed, once per run (the knob that
/// drops the release confirms nothing).
fn count_release(env: &mut Env, run: &mut Run) {
    if !run.release_counted && run.mover.report().release_confirmed {
        run.release_counted = true;
        if !env.cfg.knobs.install_before_release {
            env.stats.releases_confirmed += 1;
        }
    }
}

/// A release's outcome as the mover reads it: what `holder` answered, or
/// with `release_unanswered_confirms`, a release nobody confirmed taken
/// as the holder's confirmation.
pub(super) fn released(
    env: &Env,
    holder: &(String, u64),
    result: Result<Confirmed, String>,
) -> Answer {
    match result {
        Err(why) if env.cfg.knobs.release_unanswered_confirms => {
            trace!(
                env,
                "mover: release on {} not confirmed ({why}); taken as confirmed",
                holder.0
            );
            Answer::Released(Ok(Confirmed {
                alloc: holder.0.clone(),
                incarnation: holder.1,
            }))
        }
        r => Answer::Released(r),
    }
}

/// A freeze's answer as the knobs leave it: `install_before_release`
/// drops the release (the freeze names nobody, so no AllocSvr is told);
/// `release_skips_fenced` leaves the fenced holders out of it.
fn perturb_frozen(env: &Env, answer: Answer) -> Answer {
    match answer {
        Answer::Frozen {
            finals,
            epochs,
            newly,
            lease_expiry,
            holders: Some(holders),
        } if env.cfg.knobs.release_skips_fenced => Answer::Frozen {
            finals,
            epochs,
            newly,
            lease_expiry,
            holders: Some(holders.into_iter().filter(|h| !h.fenced).collect()),
        },
        Answer::Frozen {
            finals,
            epochs,
            newly,
            lease_expiry,
            ..
        } if env.cfg.knobs.install_before_release => Answer::Frozen {
            finals,
            epochs,
            newly,
            lease_expiry,
            holders: Some(Vec::new()),
        },
        a => a,
    }
}

/// The install's floors: the final ceilings, or where the
/// `install_below_final` knob puts them.
fn perturb_floors(env: &Env, set: usize, floors: Vec<u64>) -> Vec<u64> {
    let Some(at) = env.cfg.knobs.install_below_final else {
        return floors;
    };
    let step = env.cfg.spec(set).step;
    floors.into_iter().map(|fin| at.floor(fin, step)).collect()
}

fn alloc_ref(a: AllocEntry) -> AllocRef {
    AllocRef {
        id: a.id,
        admin_addr: a.admin_addr,
        fenced: a.fenced,
    }
}

/// A store answer as the machine reads it.
fn store_answer(kind: Kind, resp: StoreResp) -> Answer {
    let failed = |rejected, message| Answer::Failed(CallError { rejected, message });
    match (kind, resp) {
        (Kind::Copy, r) => Answer::Copied(r.map(|_| ()).map_err(|e| format!("{e:?}"))),
        (Kind::ReadDir, Ok(StoreOk::Routes(v))) => match v.directory {
            Some(d) => Answer::Directory(d),
            None => failed(false, "no directory".into()),
        },
        (
            Kind::Change,
            Ok(StoreOk::Directory {
                directory: Some(d), ..
            }),
        ) => Answer::Changed(d),
        (
            Kind::Freeze,
            Ok(StoreOk::Frozen {
                finals,
                epochs,
                newly,
                lease_expiry_ms,
                holders,
            }),
        ) => Answer::Frozen {
            finals,
            epochs,
            newly,
            lease_expiry: Duration::from_millis(lease_expiry_ms),
            holders: Some(holders),
        },
        (Kind::Install, Ok(StoreOk::Written(Reply::Installed { newly, .. }))) => {
            Answer::Installed(newly)
        }
        (Kind::ReadCounters, Ok(StoreOk::Counters(counters, more))) => {
            Answer::Counters { counters, more }
        }
        (Kind::CopyCounters, Ok(StoreOk::Written(Reply::CountersCopied { newly }))) => {
            Answer::CountersCopied(newly)
        }
        (Kind::Sections, Ok(StoreOk::Sections(infos))) => Answer::Sections(
            (infos.into_iter())
                .map(|s| Claimed {
                    owner: s.record.owner,
                    incarnation: s.record.incarnation,
                })
                .collect(),
        ),
        (_, Err(StoreFail::Rejected(r))) => failed(true, r.to_string()),
        (kind, other) => failed(false, format!("{kind:?}: {other:?}")),
    }
}

/// How a run that the machine ended ends.
fn end_of(e: MoveError) -> End {
    use seqsvr_core::mover::Step;
    match e {
        MoveError::Stopped(s) => End::Stopped(match s {
            Step::Begin => MoveStep::Begin,
            Step::Freeze => MoveStep::Freeze,
            Step::Release => MoveStep::Release,
            Step::Install => MoveStep::Install,
            // Never stopped after (the simulation does not ask).
            Step::Claim | Step::Finish => MoveStep::Claim,
        }),
        MoveError::Refused(why) => End::Refused(why),
        e => End::Failed(e.to_string()),
    }
}

/// A call, in a trace line.
fn describe(c: &Call) -> String {
    match c {
        Call::ReadDirectory => "read the directory".into(),
        Call::ChangeDirectory(ch) => format!("{ch:?}"),
        Call::CopyDirectory { set, dir } => format!("copy directory v{} to set {set}", dir.version),
        Call::Freeze { first, count, call } => {
            format!("freeze {first}+{count} in set {}", call.set)
        }
        Call::LeaderStatus { set, purpose } => format!("status of set {set} ({purpose:?})"),
        Call::Release {
            alloc,
            first,
            epochs,
            ..
        } => {
            format!("release {first}.. at {epochs:?} on {alloc}")
        }
        Call::Install {
            first,
            floors,
            call,
        } => {
            format!("install {first}.. at {floors:?} in set {}", call.set)
        }
        Call::ReadSections { set, first, count } => format!("read {first}+{count} of set {set}"),
        Call::ReadCounters {
            set, first, count, ..
        } => format!("read counters of {first}+{count} in set {set}"),
        Call::CopyCounters { call, counters, .. } => {
            format!("copy {} counters to set {}", counters.len(), call.set)
        }
        Call::Refresh { alloc, .. } => format!("refresh {alloc}"),
    }
}
