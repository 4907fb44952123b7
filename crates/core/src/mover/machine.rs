//! [`Mover`]: the steps of a move, one answer at a time.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::ops::Range;
use std::time::Duration;

use super::{
    Answer, Call, CallError, Claimed, Effect, Holder, MoveCmd, MoveError, MoveReport, Step,
};
use crate::directory::{
    sections_of, DirChange, Directory, MovePlan, PendingMove, SetCall, SetId, SetKind, HOME_SET,
};
use crate::section::SectionId;
use crate::MAX_SECTIONS_PER_CALL;

mod steps;

/// What the copies lead to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Then {
    /// The move began: check the copies, then freeze.
    Freeze,
    /// The move finished (or already had): done.
    Done,
}

/// What the run waits for.
#[derive(Debug)]
enum Phase {
    /// Not started.
    New,
    /// The directory.
    ReadDir,
    /// `BeginMove`'s directory.
    Begin,
    /// The directory copy to `set`; `left` still to go.
    Copies {
        set: SetId,
        left: VecDeque<SetId>,
        then: Then,
    },
    /// One freeze piece; `left` still to go.
    Freeze { left: VecDeque<(SectionId, u32)> },
    /// Piece `chunk` of the release on `left`'s head.
    Release {
        left: VecDeque<Holder>,
        chunk: usize,
    },
    /// The source's leases, after a release that was not confirmed.
    WaitLeases,
    /// A page of the source's declared counters, after `after`.
    ReadCounters { after: Vec<u8> },
    /// The copy of a page to the destination; `through`: its last name,
    /// if more follow.
    CopyCounters { through: Option<Vec<u8>> },
    /// One install piece; `left` still to go, `at` the first final ceiling
    /// not yet installed.
    Install {
        left: VecDeque<(SectionId, u32)>,
        at: usize,
    },
    /// One piece of the claim read; `left` still to go.
    ClaimRead {
        left: VecDeque<(SectionId, u32)>,
        seen: Vec<Claimed>,
    },
    /// The destination leader's AllocSvrs (their admin addresses).
    ClaimStatus,
    /// One nudge; `left` still to go.
    Nudge { left: VecDeque<(String, String)> },
    /// Between two claim reads.
    ClaimSleep,
    /// `FinishMove`'s directory.
    Finish,
    /// The run ended.
    Ended,
}

/// The mover of one `seqctl set move` run: see the module docs.
#[derive(Debug)]
pub struct Mover {
    /// The command.
    cmd: MoveCmd,
    /// What the run waits for.
    phase: Phase,
    /// What it did so far.
    report: MoveReport,
    /// The move (from the plan).
    m: Option<PendingMove>,
    /// The directory last read or changed.
    dir: Directory,
    /// The move's sections in the source's and the destination's spans.
    src: Range<SectionId>,
    dst: Range<SectionId>,
    /// Per section, the final ceiling and the epoch the freeze left.
    finals: Vec<u64>,
    epochs: Vec<u64>,
    /// The source's lease + margin (the longest a freeze piece named).
    expiry: Duration,
    /// The AllocSvr incarnations the freeze pieces named, by id and
    /// incarnation; `None` once a piece named none (an older store).
    holders: Option<BTreeMap<(String, u64), Holder>>,
    /// When the last freeze piece answered.
    frozen_at: Duration,
    /// When the claim step gives up.
    claim_deadline: Duration,
    /// When owners were last nudged.
    last_nudge: Option<Duration>,
    /// Routed owners that have not claimed yet (the last claim read).
    waiting: BTreeSet<String>,
    /// The destination's AllocSvrs' admin addresses, by id.
    admin_of: BTreeMap<String, String>,
}

impl Mover {
    /// A run of `cmd`; [`Mover::start`] gives its first effect.
    pub fn new(cmd: MoveCmd) -> Self {
        Self {
            cmd,
            phase: Phase::New,
            report: MoveReport {
                begin: cmd.begin,
                end: cmd.end,
                to: cmd.to,
                ..Default::default()
            },
            m: None,
            dir: Directory::default(),
            src: 0..0,
            dst: 0..0,
            finals: Vec::new(),
            epochs: Vec::new(),
            expiry: Duration::ZERO,
            holders: Some(BTreeMap::new()),
            frozen_at: Duration::ZERO,
            claim_deadline: Duration::ZERO,
            last_nudge: None,
            waiting: BTreeSet::new(),
            admin_of: BTreeMap::new(),
        }
    }

    /// The first effect: read the directory.
    pub fn start(&mut self) -> Effect {
        self.phase = Phase::ReadDir;
        Effect::Call(Call::ReadDirectory)
    }

    /// What the run did so far.
    pub fn report(&self) -> &MoveReport {
        &self.report
    }

    /// The command this run carries out.
    pub fn cmd(&self) -> MoveCmd {
        self.cmd
    }

    /// Whether the run waits for the source's leases (a release was not
    /// confirmed).
    pub fn waiting_for_leases(&self) -> bool {
        matches!(self.phase, Phase::WaitLeases)
    }

    /// The next effect, given `answer` to the last one at time `now`.
    pub fn on(&mut self, now: Duration, answer: Answer) -> Effect {
        let phase = std::mem::replace(&mut self.phase, Phase::Ended);
        let effect = match self.step(now, phase, answer) {
            Ok(e) => e,
            Err(e) => Effect::Failed(e),
        };
        if matches!(effect, Effect::Done(_) | Effect::Failed(_)) {
            self.phase = Phase::Ended;
        }
        effect
    }

    /// One transition; the new phase is set by the step it leads to.
    fn step(&mut self, now: Duration, phase: Phase, answer: Answer) -> Result<Effect, MoveError> {
        let answer = match (answer, &phase) {
            (Answer::Failed(e), Phase::Copies { .. }) => Answer::Copied(Err(e.message)),
            (Answer::Failed(error), _) => return Err(call_failed(&phase, error)),
            (a, _) => a,
        };
        match (phase, answer) {
            (Phase::ReadDir, Answer::Directory(d)) => self.plan(d),
            (Phase::Begin, Answer::Changed(d)) => {
                self.dir = d;
                self.copies(Then::Freeze)
            }
            (Phase::Copies { set, left, then }, Answer::Copied(r)) => {
                if let Err(why) = r {
                    self.report.copy_failed.push((set, why));
                }
                self.next_copy(left, then)
            }
            (Phase::Freeze { left }, f @ Answer::Frozen { .. }) => self.frozen(now, left, f),
            (Phase::Release { left, chunk }, Answer::Released(r)) => self.released(left, chunk, r),
            (Phase::WaitLeases, Answer::Woke) => {
                self.report.waited_for_leases = Some(self.expiry);
                self.stop(Step::Release)?;
                Ok(self.read_counters(Vec::new()))
            }
            (Phase::ReadCounters { after }, Answer::Counters { counters, more }) => {
                Ok(self.copy_counters(after, counters, more))
            }
            (Phase::CopyCounters { through }, Answer::CountersCopied(n)) => {
                self.report.newly_copied += n;
                match through {
                    Some(last) => Ok(self.read_counters(last)),
                    None => self.install_next(now, self.pieces(&self.dst), 0),
                }
            }
            (Phase::Install { left, at }, Answer::Installed(n)) => {
                self.report.newly_installed += n;
                self.install_next(now, left, at)
            }
            (Phase::ClaimRead { left, mut seen }, Answer::Sections(s)) => {
                seen.extend(s);
                self.claim_read(now, left, seen)
            }
            (Phase::ClaimStatus, Answer::Leader(allocs)) => {
                if let Some(allocs) = allocs {
                    self.admin_of = (allocs.into_iter()).map(|a| (a.id, a.admin_addr)).collect();
                }
                Ok(self.nudge_all(now))
            }
            (Phase::Nudge { left }, Answer::Refreshed) => Ok(self.nudge_next(now, left)),
            (Phase::ClaimSleep, Answer::Woke) => {
                self.claim_read(now, self.pieces(&self.dst), vec![])
            }
            (Phase::Finish, Answer::Changed(d)) => {
                self.report.directory_version = d.version;
                self.dir = d;
                self.copies(Then::Done)
            }
            (phase, answer) => Err(MoveError::Refused(format!(
                "the mover got {answer:?} while waiting for {phase:?}"
            ))),
        }
    }

    /// `--stop-after`: ends the run after `step`.
    fn stop(&self, step: Step) -> Result<(), MoveError> {
        match self.cmd.stop_after {
            Some(s) if s == step => Err(MoveError::Stopped(step)),
            _ => Ok(()),
        }
    }

    fn the_move(&self) -> PendingMove {
        self.m.expect("a move was planned")
    }

    /// Resume, begin, report done, or refuse.
    fn plan(&mut self, dir: Directory) -> Result<Effect, MoveError> {
        let plan = dir
            .plan_move(self.cmd.begin, self.cmd.end, self.cmd.to)
            .map_err(MoveError::Refused)?;
        self.dir = dir;
        match plan {
            MovePlan::Done => {
                self.report.already_done = true;
                self.report.directory_version = self.dir.version;
                self.copies(Then::Done)
            }
            MovePlan::Move(m) => {
                self.m = Some(m);
                self.report.from = m.from;
                self.phase = Phase::Begin;
                Ok(Effect::Call(Call::ChangeDirectory(DirChange::BeginMove(m))))
            }
        }
    }

    /// Copies the directory to every set but the home one, one after the
    /// other. Copies only help clients find sets; a failed one is
    /// reported, and fatal only for the move's own sets (below).
    fn copies(&mut self, then: Then) -> Result<Effect, MoveError> {
        self.report.copy_failed.clear();
        let left = (self.dir.sets.keys())
            .filter(|&&s| s != HOME_SET)
            .copied()
            .collect();
        self.next_copy(left, then)
    }

    fn next_copy(&mut self, mut left: VecDeque<SetId>, then: Then) -> Result<Effect, MoveError> {
        match left.pop_front() {
            Some(set) => {
                self.phase = Phase::Copies { set, left, then };
                let dir = self.dir.clone();
                Ok(Effect::Call(Call::CopyDirectory { set, dir }))
            }
            None if then == Then::Done => Ok(Effect::Done(self.report.clone())),
            None => self.begun(),
        }
    }

    /// The move began and the copies went out: the source and the
    /// destination judge the freeze and the install by their own copy, so
    /// each must have taken it. Then freeze.
    fn begun(&mut self) -> Result<Effect, MoveError> {
        let m = self.the_move();
        if let Some((set, why)) =
            (self.report.copy_failed.iter()).find(|(id, _)| *id == m.from || *id == m.to)
        {
            let (set, why) = (*set, why.clone());
            return Err(MoveError::CopyMissing { set, why });
        }
        self.stop(Step::Begin)?;
        self.src = self.sections_of(m.from)?;
        self.dst = self.sections_of(m.to)?;
        self.report.sections = self.src.len() as u32;
        self.finals.clear();
        self.epochs.clear();
        self.report.counters = 0;
        self.report.newly_copied = 0;
        self.holders = Some(BTreeMap::new());
        let left = self.pieces(&self.src);
        Ok(self.freeze_next(left))
    }

    /// The move's sections in `set`'s span.
    fn sections_of(&self, set: SetId) -> Result<Range<SectionId>, MoveError> {
        let s = (self.dir.sets.get(&set))
            .ok_or_else(|| MoveError::Refused(format!("no set {set} in the directory")))?;
        sections_of(&s.spec, self.cmd.begin, self.cmd.end)
            .map_err(|e| MoveError::Refused(e.to_string()))
    }

    /// `range` in pieces one store command accepts.
    fn pieces(&self, range: &Range<SectionId>) -> VecDeque<(SectionId, u32)> {
        (range.start..range.end)
            .step_by(MAX_SECTIONS_PER_CALL as usize)
            .map(|f| (f, (range.end - f).min(MAX_SECTIONS_PER_CALL)))
            .collect()
    }

    /// What the freeze or install asks of `set`.
    fn set_call(&self, set: SetId) -> SetCall {
        let m = self.the_move();
        SetCall {
            set,
            move_id: self.dir.move_id,
            begin: self.cmd.begin,
            end: self.cmd.end,
            kind: SetKind::Move {
                from: m.from,
                to: m.to,
            },
        }
    }
}

/// A failed store call ends the run; the operator runs it again. A begin
/// the home group refuses is a refusal: nothing changed.
fn call_failed(phase: &Phase, error: CallError) -> MoveError {
    let what = match phase {
        Phase::ReadDir => "directory",
        Phase::Begin if error.rejected => return MoveError::Refused(error.message),
        Phase::Begin => "begin",
        Phase::Freeze { .. } => "freeze",
        Phase::ReadCounters { .. } => "read declared counters",
        Phase::CopyCounters { .. } => "copy declared counters",
        Phase::Install { .. } => "install",
        Phase::ClaimRead { .. } => "claim read",
        Phase::Finish => "finish",
        _ => "call",
    };
    MoveError::Call { what, error }
}
