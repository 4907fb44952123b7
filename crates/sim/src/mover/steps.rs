//! The mover's steps (`move_range`): what each answer leads to, and the
//! calls each step makes.

use std::collections::VecDeque;

use seqsvr_core::directory::MovePlan;
use seqsvr_core::directory::{sections_of, SetId, HOME_SET};
use seqsvr_core::{AllocId, DirChange, Directory, SectionId};

use super::{
    caller, wrap, Call, Cmd, End, Input, Movers, Phase, Plan, Run, CALL, CLAIM, HOME, NUDGE, POLL,
    READ,
};
use crate::env::{trace, Env};
use crate::faults::MoveStep;
use crate::model::{
    slot_of_addr, AdminMsg, AllocEntry, CallRef, Ev, MTimer, Msg, Pending, StoreFail, StoreMsg,
    StoreOk, StoreReq,
};
use crate::net::{Node, Time, MS};
use crate::operator::ADMIN;

impl Movers {
    /// One step of the protocol (`move_range`).
    pub(super) fn step(
        &mut self,
        env: &mut Env,
        id: u32,
        run: &mut Run,
        input: Input,
    ) -> Result<(), End> {
        let phase = std::mem::replace(&mut run.phase, Phase::Idle);
        // Whatever the run waited for came: earlier wake-ups no longer
        // count (the next wait sets its own).
        run.gen += 1;
        match (phase, input) {
            (Phase::Delayed, Input::Wake) => {
                self.read_dir(env, id, run);
                Ok(())
            }
            (Phase::Call(Call::ReadDir), Input::Store(resp)) => {
                let dir = match resp {
                    Ok(StoreOk::Routes(v)) => v.directory,
                    other => return Err(End::Failed(format!("directory: {other:?}"))),
                };
                let dir = dir.ok_or(End::Failed("no directory".into()))?;
                let plan = plan(&dir, run.cmd)?;
                run.dir = Some(dir);
                match plan {
                    Plan::Done => self.copies(env, id, run, true),
                    Plan::Move(m) => {
                        run.m = Some(m);
                        let req = StoreReq::ChangeDirectory(DirChange::BeginMove(m));
                        self.store(env, id, run, HOME, Call::Begin, req);
                        Ok(())
                    }
                }
            }
            (Phase::Call(Call::Begin), Input::Store(resp)) => match resp {
                Ok(StoreOk::Directory {
                    version,
                    changed,
                    directory: Some(d),
                }) => {
                    trace!(
                        env,
                        "mover #{id}: begun (directory version {version}, changed: {changed})"
                    );
                    run.move_id = d.move_id;
                    run.dir = Some(d);
                    self.copies(env, id, run, false)
                }
                Err(StoreFail::Rejected(r)) => Err(End::Refused(r.to_string())),
                other => Err(End::Failed(format!("begin: {other:?}"))),
            },
            (Phase::Copies { left, after_finish }, Input::Store(resp)) => {
                if let Err(e) = resp {
                    trace!(env, "mover #{id}: a directory copy failed: {e:?}");
                }
                self.next_copy(env, id, run, left, after_finish)
            }
            (Phase::Call(Call::Freeze), Input::Store(resp)) => match resp {
                Ok(StoreOk::Frozen {
                    finals,
                    epochs,
                    newly,
                    lease_expiry_ms,
                }) => {
                    run.epochs = epochs;
                    trace!(
                        env,
                        "mover #{id}: froze {newly} section(s), finals {finals:?}, lease + margin {lease_expiry_ms} ms"
                    );
                    run.finals = finals;
                    run.expiry = lease_expiry_ms * MS;
                    run.frozen_at = env.now;
                    stop(run, MoveStep::Freeze)?;
                    if env.cfg.knobs.install_before_release {
                        return self.install(env, id, run);
                    }
                    let src = run.m.expect("a move").from as usize;
                    self.status(env, id, run, src, 0, true);
                    Ok(())
                }
                other => Err(End::Failed(format!("freeze: {other:?}"))),
            },
            (
                Phase::Status {
                    set,
                    replica,
                    for_release,
                    ..
                },
                Input::Status(ans),
            ) => match ans {
                Some(StoreOk::Status {
                    leading: true,
                    allocs,
                }) if for_release => {
                    let left = allocs.into_iter().filter(|a| !a.fenced).collect();
                    self.release_next(env, id, run, left)
                }
                Some(StoreOk::Status {
                    leading: true,
                    allocs,
                }) => {
                    run.admin_of = (allocs.into_iter()).map(|a| (a.id, a.admin_addr)).collect();
                    self.nudge(env, id, run)
                }
                _ if replica + 1 < env.cfg.replicas => {
                    self.status(env, id, run, set, replica + 1, for_release);
                    Ok(())
                }
                _ if for_release => {
                    trace!(env, "mover #{id}: no leader of the source answered");
                    self.wait_leases(env, id, run)
                }
                _ => self.nudge(env, id, run),
            },
            (Phase::Release { mut left, .. }, Input::Admin(result)) => match result {
                Ok(_) => {
                    left.pop_front();
                    self.release_next(env, id, run, left)
                }
                Err(e) => {
                    trace!(env, "mover #{id}: release not confirmed: {e}");
                    self.wait_leases(env, id, run)
                }
            },
            (Phase::WaitLeases, Input::Wake) => {
                env.stats.lease_waits += 1;
                stop(run, MoveStep::Release)?;
                self.install(env, id, run)
            }
            (Phase::Call(Call::Install), Input::Store(resp)) => match resp {
                Ok(StoreOk::Written(seqsvr_store_core::command::Reply::Installed { .. })) => {
                    stop(run, MoveStep::Install)?;
                    run.claim_deadline = env.now + CLAIM;
                    self.claim_read(env, id, run);
                    Ok(())
                }
                other => Err(End::Failed(format!("install: {other:?}"))),
            },
            (Phase::Call(Call::Claim), Input::Store(resp)) => {
                let infos = match resp {
                    Ok(StoreOk::Sections(infos)) => infos,
                    other => return Err(End::Failed(format!("claim read: {other:?}"))),
                };
                let unowned = infos.iter().filter(|s| s.owner.is_none()).count();
                let mut waiting: Vec<AllocId> = (infos.iter())
                    .filter(|s| s.incarnation == 0)
                    .filter_map(|s| s.owner.clone())
                    .collect();
                waiting.sort();
                waiting.dedup();
                if unowned == 0 && waiting.is_empty() {
                    stop(run, MoveStep::Claim)?;
                    let m = run.m.expect("a move");
                    let req = StoreReq::ChangeDirectory(DirChange::FinishMove(m));
                    self.store(env, id, run, HOME, Call::Finish, req);
                    return Ok(());
                }
                if env.now > run.claim_deadline {
                    let n = unowned + waiting.len();
                    return Err(End::Failed(format!("{n} sections unclaimed")));
                }
                let due = (run.last_nudge).is_none_or(|t| env.now >= t + NUDGE);
                if waiting.is_empty() || !due {
                    return self.sleep(env, id, run);
                }
                let unknown = waiting.iter().any(|o| !run.admin_of.contains_key(o));
                run.waiting = waiting;
                if unknown {
                    let dst = run.m.expect("a move").to as usize;
                    self.status(env, id, run, dst, 0, false);
                    return Ok(());
                }
                self.nudge(env, id, run)
            }
            (Phase::Nudge { mut left, .. }, Input::Admin(_)) => {
                left.pop_front();
                self.nudge_next(env, id, run, left)
            }
            (Phase::ClaimSleep, Input::Wake) => {
                self.claim_read(env, id, run);
                Ok(())
            }
            (Phase::Call(Call::Finish), Input::Store(resp)) => match resp {
                Ok(StoreOk::Directory {
                    directory: Some(d), ..
                }) => {
                    run.dir = Some(d);
                    self.copies(env, id, run, true)
                }
                other => Err(End::Failed(format!("finish: {other:?}"))),
            },
            (phase, _) => panic!("model bug: mover #{id} in {phase:?} got an unexpected input"),
        }
    }

    pub(super) fn read_dir(&mut self, env: &mut Env, id: u32, run: &mut Run) {
        self.store(env, id, run, HOME, Call::ReadDir, StoreReq::Routes);
    }

    /// Starts a store call to `set`'s group.
    fn store(&mut self, env: &mut Env, id: u32, run: &mut Run, set: usize, c: Call, req: StoreReq) {
        let timing = match c {
            Call::ReadDir | Call::Claim => READ,
            _ => ADMIN,
        };
        if c != Call::Copy {
            run.phase = Phase::Call(c);
        }
        let w = wrap(id, set);
        let who = caller(env, id, set, &w);
        let done = run.links[set].start(env, &who, req, c, timing);
        debug_assert!(done.is_none(), "a call ends only on an answer or a timer");
    }

    /// Sets the run's wake-up `d` from now (earlier ones no longer count).
    pub(super) fn wake(env: &mut Env, id: u32, run: &mut Run, d: Time) {
        run.gen += 1;
        let t = MTimer::Wake(run.gen);
        env.after(d, Ev::Mover { run: id, t });
    }

    /// `copy_everywhere`: the directory to every set but the home one, one
    /// after the other; failures are reported, not fatal.
    fn copies(
        &mut self,
        env: &mut Env,
        id: u32,
        run: &mut Run,
        after_finish: bool,
    ) -> Result<(), End> {
        let dir = run.dir.as_ref().expect("a directory");
        let left = (dir.sets.keys())
            .filter(|&&s| s != HOME_SET)
            .map(|&s| s as usize)
            .collect();
        self.next_copy(env, id, run, left, after_finish)
    }

    fn next_copy(
        &mut self,
        env: &mut Env,
        id: u32,
        run: &mut Run,
        mut left: VecDeque<usize>,
        after_finish: bool,
    ) -> Result<(), End> {
        let Some(set) = left.pop_front() else {
            if after_finish {
                return Err(End::Done);
            }
            stop(run, MoveStep::Begin)?;
            return self.freeze(env, id, run);
        };
        let req = StoreReq::CopyDirectory(run.dir.clone().expect("a directory"));
        self.store(env, id, run, set, Call::Copy, req);
        run.phase = Phase::Copies { left, after_finish };
        Ok(())
    }

    /// What the freeze or install asks of `set` (`seqctl`'s `SetCall`).
    fn call(run: &Run, set: SetId) -> seqsvr_core::SetCall {
        let m = run.m.expect("a move");
        seqsvr_core::SetCall {
            set,
            move_id: run.move_id,
            begin: m.begin,
            end: m.end,
            kind: seqsvr_core::SetKind::Move {
                from: m.from,
                to: m.to,
            },
        }
    }

    /// The sections of the move in `set`'s span (`sections_of`).
    fn sections(run: &Run, set: SetId) -> Result<std::ops::Range<SectionId>, End> {
        let dir = run.dir.as_ref().expect("a directory");
        let spec = &dir
            .sets
            .get(&set)
            .ok_or(End::Refused(format!("no set {set}")))?
            .spec;
        sections_of(spec, run.cmd.begin, run.cmd.end).map_err(|e| End::Refused(e.to_string()))
    }

    fn freeze(&mut self, env: &mut Env, id: u32, run: &mut Run) -> Result<(), End> {
        let m = run.m.expect("a move");
        let r = Self::sections(run, m.from)?;
        let req = StoreReq::Freeze {
            first: r.start,
            count: r.end - r.start,
            call: Self::call(run, m.from),
        };
        self.store(env, id, run, m.from as usize, Call::Freeze, req);
        Ok(())
    }

    /// `leader_status`: asks replica `replica` of `set`, 2 s at most.
    fn status(
        &mut self,
        env: &mut Env,
        id: u32,
        run: &mut Run,
        set: usize,
        replica: usize,
        for_release: bool,
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
        run.phase = Phase::Status {
            set,
            replica,
            call,
            for_release,
        };
        Self::wake(env, id, run, CALL);
    }

    /// `Release` on the next AllocSvr the source's leader lists; once all
    /// confirmed, the release is done.
    fn release_next(
        &mut self,
        env: &mut Env,
        id: u32,
        run: &mut Run,
        left: VecDeque<AllocEntry>,
    ) -> Result<(), End> {
        let Some(a) = left.front() else {
            env.stats.releases_confirmed += 1;
            stop(run, MoveStep::Release)?;
            return self.install(env, id, run);
        };
        let Some(slot) = slot_of_addr(&a.admin_addr) else {
            trace!(env, "mover #{id}: {} has no admin address", a.id);
            return self.wait_leases(env, id, run);
        };
        let m = run.m.expect("a move");
        let r = Self::sections(run, m.from)?;
        let call = env.fresh_id();
        let msg = AdminMsg::Release {
            id: call,
            first: r.start,
            epochs: run.epochs.clone(),
        };
        env.send(Node::Mover, Node::Alloc(slot), Msg::Admin(msg));
        run.phase = Phase::Release { left, call };
        Self::wake(env, id, run, CALL);
        Ok(())
    }

    /// Not every AllocSvr confirmed: wait the source's lease + margin from
    /// the freeze reply, after which none serves the sections anyway.
    fn wait_leases(&mut self, env: &mut Env, id: u32, run: &mut Run) -> Result<(), End> {
        run.phase = Phase::WaitLeases;
        let until = run.frozen_at + run.expiry;
        Self::wake(env, id, run, until.saturating_sub(env.now));
        Ok(())
    }

    /// Installs the destination at the final ceilings (the store adds the
    /// step), or where the `install_below_final` knob says.
    fn install(&mut self, env: &mut Env, id: u32, run: &mut Run) -> Result<(), End> {
        let m = run.m.expect("a move");
        let r = Self::sections(run, m.to)?;
        let step = env.cfg.spec(m.to as usize).step;
        let floors = (run.finals.iter())
            .map(|&fin| match env.cfg.knobs.install_below_final {
                Some(at) => at.floor(fin, step),
                None => fin,
            })
            .collect();
        let req = StoreReq::Install {
            first: r.start,
            floors,
            call: Self::call(run, m.to),
        };
        self.store(env, id, run, m.to as usize, Call::Install, req);
        Ok(())
    }

    fn claim_read(&mut self, env: &mut Env, id: u32, run: &mut Run) {
        let m = run.m.expect("a move");
        let Ok(r) = Self::sections(run, m.to) else {
            unreachable!("checked at the install");
        };
        let req = StoreReq::Sections {
            first: r.start,
            count: r.end - r.start,
        };
        self.store(env, id, run, m.to as usize, Call::Claim, req);
    }

    fn sleep(&mut self, env: &mut Env, id: u32, run: &mut Run) -> Result<(), End> {
        run.phase = Phase::ClaimSleep;
        Self::wake(env, id, run, POLL);
        Ok(())
    }

    /// `Refresh` on every owner still to claim whose admin address is
    /// known, one after the other.
    fn nudge(&mut self, env: &mut Env, id: u32, run: &mut Run) -> Result<(), End> {
        let left = (run.waiting.iter())
            .filter_map(|o| run.admin_of.get(o).cloned())
            .collect();
        self.nudge_next(env, id, run, left)
    }

    fn nudge_next(
        &mut self,
        env: &mut Env,
        id: u32,
        run: &mut Run,
        left: VecDeque<String>,
    ) -> Result<(), End> {
        let Some(slot) = left.front().and_then(|a| slot_of_addr(a)) else {
            run.last_nudge = Some(env.now);
            return self.sleep(env, id, run);
        };
        let call = env.fresh_id();
        let msg = AdminMsg::Refresh { id: call };
        env.send(Node::Mover, Node::Alloc(slot), Msg::Admin(msg));
        run.phase = Phase::Nudge { left, call };
        Self::wake(env, id, run, CALL);
        Ok(())
    }
}

/// `--stop-after`: ends the run after `step`.
fn stop(run: &Run, step: MoveStep) -> Result<(), End> {
    match run.stop_after {
        Some(s) if s == step => Err(End::Stopped(step)),
        _ => Ok(()),
    }
}

/// How to run `cmd`: the shipped planning of `seqctl set move`.
fn plan(dir: &Directory, cmd: Cmd) -> Result<Plan, End> {
    match dir
        .plan_move(cmd.begin, cmd.end, cmd.to)
        .map_err(End::Refused)?
    {
        MovePlan::Move(m) => Ok(Plan::Move(m)),
        MovePlan::Done => Ok(Plan::Done),
    }
}
