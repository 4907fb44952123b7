//! Sets and sections: the uid arithmetic every component agrees on.
//!
//! A *set* serves the half-open uid range `[uid_begin, uid_end)`. It is split
//! into *sections* of `section_size` consecutive uids (the last one may be
//! shorter); a section is numbered from 0 within its set. Each section has one
//! ceiling (`max_seq`) in the store and one owner among the set's AllocSvrs.

use std::ops::Range;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// A user id.
pub type Uid = u64;

/// A section's number within its set (0-based).
pub type SectionId = u32;

/// Default uids per section (WeChat's choice: 100,000).
pub const DEFAULT_SECTION_SIZE: u64 = 100_000;
/// Default ceiling raise (WeChat's choice: 10,000).
pub const DEFAULT_STEP: u64 = 10_000;
/// Largest section allowed: its dense array is 8 bytes a uid, so 10 M uids
/// is 80 MB of memory in the AllocSvr that owns it.
pub const MAX_SECTION_SIZE: u64 = 10_000_000;
/// Largest number of sections in one set (keeps the store's state and its
/// snapshots small; add sets to grow instead).
pub const MAX_SECTIONS: u64 = 1 << 20;
/// Largest step: a gap bigger than this per failover is never useful.
pub const MAX_STEP: u64 = 1 << 32;
/// A single ceiling raise may move the ceiling at most this many steps: an
/// AllocSvr raises to one step above the highest number it handed out,
/// which is never above the ceiling, so one step is all it ever needs.
/// Anything more is a caller bug (promise 4: bounded gaps) and is rejected.
pub const MAX_STEPS_PER_RAISE: u64 = 1;

/// What a set serves: its uid range, how it is cut into sections, its step.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SetSpec {
    /// The set's name in routes, metrics and logs.
    pub set_id: u32,
    /// First uid served (inclusive).
    pub uid_begin: Uid,
    /// One past the last uid served.
    pub uid_end: Uid,
    /// Uids per section.
    pub section_size: u64,
    /// How far a take-over raises the ceiling, and the usual size of a raise.
    pub step: u64,
}

impl SetSpec {
    /// A set with the default section size and step.
    pub fn new(set_id: u32, uids: Range<Uid>) -> Self {
        Self {
            set_id,
            uid_begin: uids.start,
            uid_end: uids.end,
            section_size: DEFAULT_SECTION_SIZE,
            step: DEFAULT_STEP,
        }
    }

    /// Checks that the spec is usable; every constructor path calls this.
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(Error::InvalidSet(m));
        if self.uid_end <= self.uid_begin {
            return bad(format!(
                "empty uid range [{}, {})",
                self.uid_begin, self.uid_end
            ));
        }
        if self.section_size == 0 || self.section_size > MAX_SECTION_SIZE {
            return bad(format!(
                "section_size {} not in 1..={MAX_SECTION_SIZE}",
                self.section_size
            ));
        }
        if self.step == 0 || self.step > MAX_STEP {
            return bad(format!("step {} not in 1..={MAX_STEP}", self.step));
        }
        let n = (self.uid_end - self.uid_begin).div_ceil(self.section_size);
        if n > MAX_SECTIONS {
            return bad(format!("{n} sections is more than {MAX_SECTIONS}"));
        }
        Ok(())
    }

    /// Number of sections in the set.
    pub fn section_count(&self) -> u32 {
        (self.uid_end - self.uid_begin).div_ceil(self.section_size) as u32
    }

    /// Whether `uid` belongs to this set.
    pub fn contains(&self, uid: Uid) -> bool {
        (self.uid_begin..self.uid_end).contains(&uid)
    }

    /// The section holding `uid`, or `None` if the uid is outside the set.
    pub fn section_of(&self, uid: Uid) -> Option<SectionId> {
        self.contains(uid)
            .then(|| ((uid - self.uid_begin) / self.section_size) as SectionId)
    }

    /// The uids of section `s` (shorter for the last section; empty, at
    /// `uid_end`, for a section the set does not have). Checked: near
    /// `u64::MAX` the last section's `start + section_size` overflows.
    pub fn uids_of(&self, s: SectionId) -> Range<Uid> {
        let start = (s as u64)
            .checked_mul(self.section_size)
            .and_then(|offset| self.uid_begin.checked_add(offset))
            .filter(|&start| start < self.uid_end);
        match start {
            Some(start) => start..start.saturating_add(self.section_size).min(self.uid_end),
            None => self.uid_end..self.uid_end,
        }
    }

    /// Whether `s` names a section of this set.
    pub fn has_section(&self, s: SectionId) -> bool {
        s < self.section_count()
    }

    /// Checks a raise of a ceiling from `current` to `to` (promise 4: a raise
    /// that is zero, backwards or absurdly large is a bug, not a request).
    pub fn check_raise(&self, current: u64, to: u64) -> std::result::Result<(), RaiseCheck> {
        if to <= current {
            return Err(RaiseCheck::NotAbove);
        }
        if to - current > self.step.saturating_mul(MAX_STEPS_PER_RAISE) {
            return Err(RaiseCheck::TooLarge);
        }
        Ok(())
    }
}

/// Why [`SetSpec::check_raise`] refused a raise.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RaiseCheck {
    /// The target is not above the current ceiling (a ceiling never decreases).
    NotAbove,
    /// The target is more than [`MAX_STEPS_PER_RAISE`] steps above.
    TooLarge,
}

/// Consecutive runs `(first, count)` of sorted section ids: what one
/// store call covers (a take-over, a read of sections, the list of an
/// AllocSvr's sections) and one range of a log line ([`Runs`]).
pub fn runs(sections: &[SectionId]) -> Vec<(SectionId, u32)> {
    runs_by(sections, |&s| s, |_, _| true)
        .into_iter()
        .map(|r| (r[0], r.len() as u32))
        .collect()
}

/// `items`, in order, cut into runs whose sections (`section`) are
/// consecutive and whose neighbours go `together` (the same target, say):
/// one command or call per run.
pub fn runs_by<T>(
    items: &[T],
    section: impl Fn(&T) -> SectionId,
    together: impl Fn(&T, &T) -> bool,
) -> Vec<&[T]> {
    let mut out = Vec::new();
    let mut start = 0;
    for i in 1..=items.len() {
        let (a, b) = (&items[i - 1], items.get(i));
        let split =
            b.is_none_or(|b| section(a).checked_add(1) != Some(section(b)) || !together(a, b));
        if split {
            out.push(&items[start..i]);
            start = i;
        }
    }
    out
}

/// Sections, in order, as runs for a log line: `0-33,40,42-45` (`none`
/// when empty): one line per batch of section events, not one a section.
pub struct Runs<'a>(pub &'a [SectionId]);

impl std::fmt::Display for Runs<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let runs = runs(self.0);
        if runs.is_empty() {
            return f.write_str("none");
        }
        for (i, &(first, count)) in runs.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            match count {
                1 => write!(f, "{first}")?,
                _ => write!(f, "{first}-{}", first + (count - 1))?,
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn spec(begin: u64, end: u64, size: u64) -> SetSpec {
        SetSpec {
            set_id: 0,
            uid_begin: begin,
            uid_end: end,
            section_size: size,
            step: 10,
        }
    }

    #[test]
    fn sections_near_the_top_of_the_uid_space() {
        let top = u64::MAX;
        let s = spec(top - 150, top, 100);
        s.validate().unwrap();
        assert_eq!(s.section_count(), 2);
        assert_eq!(s.uids_of(0), top - 150..top - 50);
        assert_eq!(s.uids_of(1), top - 50..top);
        assert_eq!(s.section_of(top - 1), Some(1));
        // A section the set does not have is empty, never a wrap.
        assert!(s.uids_of(2).is_empty());
        assert!(s.uids_of(SectionId::MAX).is_empty());
        assert!(spec(0, 1000, 100).uids_of(SectionId::MAX).is_empty());
    }

    #[test]
    fn section_table() {
        let s = spec(1000, 1250, 100);
        assert_eq!(s.section_count(), 3);
        for (uid, want) in [
            (999, None),
            (1000, Some(0)),
            (1099, Some(0)),
            (1100, Some(1)),
            (1249, Some(2)),
            (1250, None),
        ] {
            assert_eq!(s.section_of(uid), want, "uid {uid}");
        }
        assert_eq!(s.uids_of(2), 1200..1250);
        assert!(s.has_section(2) && !s.has_section(3));
    }

    #[test]
    fn invalid_specs() {
        for bad in [
            spec(5, 5, 1),
            spec(6, 5, 1),
            spec(0, 10, 0),
            spec(0, 10, MAX_SECTION_SIZE + 1),
            spec(0, u64::MAX, 1),
            SetSpec {
                step: 0,
                ..spec(0, 10, 1)
            },
        ] {
            assert!(
                matches!(bad.validate(), Err(Error::InvalidSet(_))),
                "{bad:?}"
            );
        }
        assert!(SetSpec::new(0, 0..10_000_000).validate().is_ok());
    }

    #[test]
    fn raise_checks() {
        let s = spec(0, 10, 1);
        assert_eq!(s.check_raise(100, 100), Err(RaiseCheck::NotAbove));
        assert_eq!(s.check_raise(100, 99), Err(RaiseCheck::NotAbove));
        assert_eq!(s.check_raise(100, 101), Ok(()));
        // At most one step (10 here) per raise (promise 4).
        assert_eq!(s.check_raise(100, 110), Ok(()));
        assert_eq!(s.check_raise(100, 111), Err(RaiseCheck::TooLarge));
    }

    proptest! {
        #[test]
        fn every_uid_in_exactly_its_section(begin in 0u64..1_000_000, len in 1u64..100_000, size in 1u64..5_000, off in 0u64..100_000) {
            let s = spec(begin, begin + len, size);
            prop_assume!(s.validate().is_ok());
            let uid = begin + off % len;
            let sec = s.section_of(uid).unwrap();
            prop_assert!(s.uids_of(sec).contains(&uid));
            prop_assert!(s.has_section(sec));
        }
    }
}

#[cfg(test)]
mod runs_tests {
    use super::{runs, runs_by, Runs};

    #[test]
    fn runs_group_consecutive_sections() {
        assert_eq!(runs(&[0, 1, 2, 5, 7, 8]), vec![(0, 3), (5, 1), (7, 2)]);
        assert_eq!(runs(&[u32::MAX - 1, u32::MAX]), vec![(u32::MAX - 1, 2)]);
        assert!(runs(&[]).is_empty());
    }

    #[test]
    fn runs_by_cut_where_neighbours_part() {
        let moves = [(1, 'a'), (2, 'a'), (3, 'b'), (4, 'b'), (6, 'b'), (6, 'b')];
        let cut: Vec<_> = runs_by(&moves, |m| m.0, |x, y| x.1 == y.1)
            .iter()
            .map(|r| r.to_vec())
            .collect();
        assert_eq!(
            cut,
            vec![
                vec![(1, 'a'), (2, 'a')],
                vec![(3, 'b'), (4, 'b')],
                vec![(6, 'b')],
                vec![(6, 'b')],
            ]
        );
        assert!(runs_by(&[] as &[(u32, char)], |m| m.0, |_, _| true).is_empty());
    }

    #[test]
    fn runs_read_as_ranges() {
        assert_eq!(Runs(&[0, 1, 2, 3, 7, 9, 10]).to_string(), "0-3,7,9-10");
        assert_eq!(Runs(&[5]).to_string(), "5");
        assert_eq!(Runs(&[]).to_string(), "none");
    }
}
