//! The steps from the freeze on: freeze, release (or the lease wait),
//! the copy of the declared counters, install, claim (reads, nudges),
//! finish.

use std::collections::{BTreeSet, VecDeque};
use std::time::Duration;

use super::{Mover, Phase};
use crate::directory::DirChange;
use crate::mover::{
    Answer, Call, Claimed, Confirmed, Declared, Effect, Holder, MoveError, StatusFor, Step,
    CLAIM_TIMEOUT, NUDGE, POLL,
};
use crate::section::SectionId;
use crate::MAX_SECTIONS_PER_CALL;

impl Mover {
    /// Freezes the next piece of the source's sections.
    pub(super) fn freeze_next(&mut self, mut left: VecDeque<(SectionId, u32)>) -> Effect {
        let (first, count) = left.pop_front().expect("a move has sections");
        let call = self.set_call(self.the_move().from);
        self.phase = Phase::Freeze { left };
        Effect::Call(Call::Freeze { first, count, call })
    }

    /// A freeze piece answered; once all did, the release begins.
    pub(super) fn frozen(
        &mut self,
        now: Duration,
        left: VecDeque<(SectionId, u32)>,
        answer: Answer,
    ) -> Result<Effect, MoveError> {
        let Answer::Frozen {
            finals,
            epochs,
            newly,
            lease_expiry,
            holders,
        } = answer
        else {
            unreachable!("matched by the caller");
        };
        self.report.newly_frozen += newly;
        // Each piece's leader names who may hold its sections; the release
        // goes to all of them (a piece answered by another leader, or after
        // a re-registration, may name others).
        match (self.holders.as_mut(), holders) {
            (Some(all), Some(named)) => {
                for h in named {
                    all.insert((h.id.clone(), h.incarnation), h);
                }
            }
            _ => self.holders = None,
        }
        self.expiry = self.expiry.max(lease_expiry);
        self.finals.extend(finals);
        self.epochs.extend(epochs);
        if !left.is_empty() {
            return Ok(self.freeze_next(left));
        }
        self.frozen_at = now;
        self.report.max_final = self.finals.iter().copied().max().unwrap_or(0);
        self.stop(Step::Freeze)?;
        match &self.holders {
            Some(all) => {
                let left = all.values().cloned().collect();
                self.release_next(left, 0)
            }
            None => {
                self.report.release_unconfirmed =
                    Some("the source's freeze reply named no AllocSvrs (an older store)".into());
                Ok(self.wait_leases())
            }
        }
    }

    /// A release piece answered: it counts only if the AllocSvr the
    /// freeze named confirmed it, as that id and incarnation (another
    /// process at its admin address — a replacement, a twin, an older
    /// version that does not say — confirms nothing for it). Otherwise
    /// wait the leases.
    pub(super) fn released(
        &mut self,
        left: VecDeque<Holder>,
        chunk: usize,
        r: Result<Confirmed, String>,
    ) -> Result<Effect, MoveError> {
        let h = left.front().expect("a release is sent to the head");
        let why = match r {
            Ok(c) if c.alloc == h.id && c.incarnation == h.incarnation => {
                return self.release_next(left, chunk + 1)
            }
            Ok(c) => format!(
                "{} incarnation {:x} was named by the freeze, but {} incarnation {:x} answered",
                h.id, h.incarnation, c.alloc, c.incarnation
            ),
            Err(e) => format!("{} incarnation {:x}: {e}", h.id, h.incarnation),
        };
        self.report.release_unconfirmed = Some(why);
        Ok(self.wait_leases())
    }

    /// Piece `chunk` of the release on the head of `left`, or the next
    /// AllocSvr's first, or (all confirmed) the copy of the declared
    /// counters.
    pub(super) fn release_next(
        &mut self,
        mut left: VecDeque<Holder>,
        mut chunk: usize,
    ) -> Result<Effect, MoveError> {
        let per = MAX_SECTIONS_PER_CALL as usize;
        let chunks = self.epochs.len().div_ceil(per);
        while let Some(a) = left.front() {
            if chunk < chunks {
                let call = Call::Release {
                    alloc: a.id.clone(),
                    incarnation: a.incarnation,
                    admin_addr: a.admin_addr.clone(),
                    first: self.src.start + (chunk * per) as SectionId,
                    epochs: self.epochs[chunk * per..((chunk + 1) * per).min(self.epochs.len())]
                        .to_vec(),
                };
                self.phase = Phase::Release { left, chunk };
                return Ok(Effect::Call(call));
            }
            let a = left.pop_front().expect("the head");
            self.report.released_by.push(a.id);
            chunk = 0;
        }
        self.report.release_confirmed = true;
        self.stop(Step::Release)?;
        Ok(self.read_counters(Vec::new()))
    }

    /// Reads the next page of the source's declared counters. The freeze
    /// fenced every write of them there (a counter write is fenced by the
    /// owner's epoch, which the freeze ended), so what is read is final,
    /// as the final ceilings are (docs/counters.md, Moves).
    pub(super) fn read_counters(&mut self, after: Vec<u8>) -> Effect {
        let call = Call::ReadCounters {
            set: self.the_move().from,
            first: self.src.start,
            count: self.src.len() as u32,
            after: after.clone(),
        };
        self.phase = Phase::ReadCounters { after };
        Effect::Call(call)
    }

    /// Copies a page read to the destination: the names after `after`
    /// and up to the page's last (or to the end, on the last page) take
    /// exactly the source's declarations there. Once the last page is
    /// copied, the install begins: the destination has every declaration
    /// before it serves a section.
    pub(super) fn copy_counters(
        &mut self,
        after: Vec<u8>,
        counters: Vec<Declared>,
        more: bool,
    ) -> Effect {
        self.report.counters += counters.len() as u32;
        let through = more.then(|| counters.last().map(|(n, _)| n.clone()));
        let through = through.flatten();
        let call = self.set_call(self.the_move().to);
        self.phase = Phase::CopyCounters {
            through: through.clone(),
        };
        Effect::Call(Call::CopyCounters {
            call,
            after,
            through,
            counters,
        })
    }

    /// Not every AllocSvr confirmed: wait the source's lease + margin from
    /// the freeze reply, after which none serves the sections anyway.
    pub(super) fn wait_leases(&mut self) -> Effect {
        self.phase = Phase::WaitLeases;
        Effect::WaitUntil(self.frozen_at + self.expiry)
    }

    /// Installs the next piece at the final ceilings (the store adds the
    /// step); once all are, the claim begins.
    pub(super) fn install_next(
        &mut self,
        now: Duration,
        mut left: VecDeque<(SectionId, u32)>,
        at: usize,
    ) -> Result<Effect, MoveError> {
        let Some((first, count)) = left.pop_front() else {
            self.stop(Step::Install)?;
            self.claim_deadline = now + CLAIM_TIMEOUT;
            let left = self.pieces(&self.dst);
            return self.claim_read(now, left, Vec::new());
        };
        let to = at + count as usize;
        let floors = (self.finals.get(at..to).map(<[u64]>::to_vec)).ok_or_else(|| {
            MoveError::Refused(format!(
                "the destination spans {} sections of the move, the source froze {}",
                self.dst.len(),
                self.finals.len()
            ))
        })?;
        let call = self.set_call(self.the_move().to);
        self.phase = Phase::Install { left, at: to };
        Ok(Effect::Call(Call::Install {
            first,
            floors,
            call,
        }))
    }

    /// Reads the next piece of the destination's sections back; once all
    /// are read, judges them.
    pub(super) fn claim_read(
        &mut self,
        now: Duration,
        mut left: VecDeque<(SectionId, u32)>,
        seen: Vec<Claimed>,
    ) -> Result<Effect, MoveError> {
        let Some((first, count)) = left.pop_front() else {
            return self.claimed(now, seen);
        };
        self.phase = Phase::ClaimRead { left, seen };
        Ok(Effect::Call(Call::ReadSections {
            set: self.the_move().to,
            first,
            count,
        }))
    }

    /// Every section owned and claimed: flip the directory. Else give up
    /// after the deadline, or nudge the owners still to claim (learning
    /// their admin addresses first), or read again a little later.
    fn claimed(&mut self, now: Duration, seen: Vec<Claimed>) -> Result<Effect, MoveError> {
        let unowned = seen.iter().filter(|s| s.owner.is_none()).count();
        let waiting: BTreeSet<String> = (seen.into_iter())
            .filter(|s| s.incarnation == 0)
            .filter_map(|s| s.owner)
            .collect();
        if unowned == 0 && waiting.is_empty() {
            self.report.unavailable = Some(now.saturating_sub(self.frozen_at));
            self.stop(Step::Claim)?;
            self.phase = Phase::Finish;
            let change = DirChange::FinishMove(self.the_move());
            return Ok(Effect::Call(Call::ChangeDirectory(change)));
        }
        if now > self.claim_deadline {
            let sections = unowned + waiting.len();
            return Err(MoveError::Unclaimed { sections });
        }
        let due = (self.last_nudge).is_none_or(|t| now >= t + NUDGE);
        if waiting.is_empty() || !due {
            return Ok(self.sleep(now));
        }
        let unknown = waiting.iter().any(|o| !self.admin_of.contains_key(o));
        self.waiting = waiting;
        if unknown {
            self.phase = Phase::ClaimStatus;
            return Ok(Effect::Call(Call::LeaderStatus {
                set: self.the_move().to,
                purpose: StatusFor::Nudge,
            }));
        }
        Ok(self.nudge_all(now))
    }

    /// Asks every owner still to claim whose admin address is known to
    /// renew now rather than at its next renewal, one after the other.
    pub(super) fn nudge_all(&mut self, now: Duration) -> Effect {
        let left = (self.waiting.iter())
            .filter_map(|o| self.admin_of.get(o).map(|a| (o.clone(), a.clone())))
            .collect();
        self.nudge_next(now, left)
    }

    pub(super) fn nudge_next(
        &mut self,
        now: Duration,
        mut left: VecDeque<(String, String)>,
    ) -> Effect {
        match left.pop_front() {
            Some((alloc, admin_addr)) => {
                self.phase = Phase::Nudge { left };
                Effect::Call(Call::Refresh { alloc, admin_addr })
            }
            None => {
                self.last_nudge = Some(now);
                self.sleep(now)
            }
        }
    }

    fn sleep(&mut self, now: Duration) -> Effect {
        self.phase = Phase::ClaimSleep;
        Effect::WaitUntil(now + POLL)
    }
}
