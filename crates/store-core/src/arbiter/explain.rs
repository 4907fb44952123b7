//! What an arbiter move does, in words an operator reads in the log: the
//! sections, the AllocSvr they go to, and, per previous owner, why they
//! leave it (its lease expired, it stopped, or they had no owner).

use std::collections::BTreeMap;
use std::fmt;
use std::time::{Duration, Instant};

pub use seqsvr_core::section::Runs;
use seqsvr_core::{AllocId, SectionId};

use super::Arbiter;
use crate::command::Command;
use crate::state::SetState;

/// Why sections leave their owner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Why {
    /// They had none.
    Unowned,
    /// Its process recorded a planned stop.
    Stopped,
    /// No renewal granted by this leader for `since` (lease + margin is
    /// `expiry`), or none at all since this replica took office.
    LeaseExpired {
        /// Time since the last renewal this leader granted, if any.
        since: Option<Duration>,
    },
}

/// One previous owner's part of a move.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct From {
    /// The owner (`None`: unowned sections).
    pub owner: Option<AllocId>,
    /// Why they leave it.
    pub why: Why,
    /// The sections, in order.
    pub sections: Vec<SectionId>,
}

/// An arbiter move, explained.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MoveNote {
    /// The new owner.
    pub to: AllocId,
    /// Every section moved, in order.
    pub sections: Vec<SectionId>,
    /// Per previous owner (unowned last).
    pub from: Vec<From>,
}

impl MoveNote {
    /// The AllocSvrs the sections leave, by name (`-` when none had one).
    pub fn owners(&self) -> String {
        let v: Vec<&str> = (self.from.iter())
            .filter_map(|f| f.owner.as_deref())
            .collect();
        if v.is_empty() {
            "-".into()
        } else {
            v.join(",")
        }
    }

    /// Whether any section had an owner (a failover, not a first routing).
    pub fn from_an_owner(&self) -> bool {
        self.from.iter().any(|f| f.owner.is_some())
    }
}

impl fmt::Display for Why {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Why::Unowned => f.write_str("no owner"),
            Why::Stopped => f.write_str("its process recorded a planned stop"),
            Why::LeaseExpired { since: Some(d) } => {
                write!(f, "lease expired: no renewal for {:.1} s", d.as_secs_f64())
            }
            Why::LeaseExpired { since: None } => {
                f.write_str("lease expired: no renewal since this leader took office")
            }
        }
    }
}

impl fmt::Display for MoveNote {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} sections ({}) to {}:",
            self.sections.len(),
            Runs(&self.sections),
            self.to
        )?;
        for (i, part) in self.from.iter().enumerate() {
            let sep = if i == 0 { " " } else { "; " };
            match &part.owner {
                Some(o) => write!(
                    f,
                    "{sep}{} from {o} ({}), {}",
                    part.sections.len(),
                    Runs(&part.sections),
                    part.why
                )?,
                None => write!(
                    f,
                    "{sep}{} unowned ({})",
                    part.sections.len(),
                    Runs(&part.sections)
                )?,
            }
        }
        Ok(())
    }
}

impl Arbiter {
    /// Explains `cmd` (an `Assign` from [`plan`](Self::plan)) against the
    /// state it was planned on, at `now`; `None` for any other command.
    pub fn explain(&self, state: &SetState, cmd: &Command, now: Instant) -> Option<MoveNote> {
        let Command::Assign {
            alloc,
            first,
            expected,
        } = cmd
        else {
            return None;
        };
        let g = self.lock();
        let sections: Vec<SectionId> = (0..expected.len() as SectionId)
            .map(|i| first + i)
            .collect();
        let mut by: BTreeMap<Option<&AllocId>, Vec<SectionId>> = BTreeMap::new();
        for &s in &sections {
            let owner = state
                .sections
                .get(s as usize)
                .and_then(|r| r.owner.as_ref());
            by.entry(owner).or_default().push(s);
        }
        let mut from: Vec<From> = Vec::new();
        let mut unowned = None;
        for (owner, sections) in by {
            let Some(o) = owner else {
                unowned = Some(From {
                    owner: None,
                    why: Why::Unowned,
                    sections,
                });
                continue;
            };
            let why = if state.allocs.get(o).is_some_and(|a| a.incarnation == 0) {
                Why::Stopped
            } else {
                let since = g.grants.get(o).map(|l| now.saturating_duration_since(l.at));
                Why::LeaseExpired { since }
            };
            from.push(From {
                owner: Some(o.clone()),
                why,
                sections,
            });
        }
        from.extend(unowned);
        Some(MoveNote {
            to: alloc.clone(),
            sections,
            from,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::{AllocRecord, SectionRecord};

    #[test]
    fn a_move_names_the_owner_it_leaves_and_why() {
        let t0 = Instant::now();
        let owners = [Some("alloc-1"), Some("alloc-1"), None, Some("alloc-3")];
        let st = SetState {
            sections: owners
                .iter()
                .map(|o| SectionRecord {
                    owner: o.map(String::from),
                    ..Default::default()
                })
                .collect(),
            allocs: [
                (
                    "alloc-1".to_string(),
                    AllocRecord {
                        incarnation: 7,
                        ..Default::default()
                    },
                ),
                (
                    "alloc-3".to_string(),
                    AllocRecord {
                        incarnation: 0,
                        ..Default::default()
                    },
                ),
            ]
            .into(),
            ..Default::default()
        };
        let a = Arbiter::new(Default::default());
        a.observe(Some(1), t0);
        let terms = seqsvr_core::LeaseTerms::default();
        assert!(a.granted("alloc-1", 1, t0, terms));
        let cmd = Command::Assign {
            alloc: "alloc-2".into(),
            first: 0,
            expected: vec![1, 1, 1, 1],
        };
        let note = a
            .explain(&st, &cmd, t0 + Duration::from_millis(6500))
            .unwrap();
        assert_eq!(
            note.to_string(),
            "4 sections (0-3) to alloc-2: 2 from alloc-1 (0-1), lease expired: no renewal for 6.5 s; \
             1 from alloc-3 (3), its process recorded a planned stop; 1 unowned (2)"
        );
        assert_eq!(note.owners(), "alloc-1,alloc-3");
        assert!(note.from_an_owner());
        let first_routing = Command::Assign {
            alloc: "alloc-2".into(),
            first: 2,
            expected: vec![1],
        };
        let n = a.explain(&st, &first_routing, t0).unwrap();
        assert!(!n.from_an_owner(), "{n}");
        assert_eq!(n.owners(), "-");
        assert!(a.explain(&st, &Command::SetLease(terms), t0).is_none());
    }
}
