//! How the counter command changes a set's state (`crate::counters` holds
//! the records, docs/counters.md the rules). A part of [`crate::state`],
//! like the id commands.

use seqsvr_core::{name_key, AllocId, CounterDecl, Epoch, Incarnation, SectionId};

use super::{Dirty, SetState};
use crate::command::{CounterOp, Outcome, Rejection, Reply};
use crate::counters::{refuse, CounterRecord, CounterRefusal, MAX_COUNTERS};

/// The owner a counter write names: alloc, incarnation, section, epoch.
pub(crate) type Owner<'a> = (&'a AllocId, Incarnation, SectionId, Epoch);

impl SetState {
    /// Writes `name`'s declaration for the owner of its section
    /// (`Command::Counter`). A refusal changes nothing.
    pub(crate) fn counter(
        &mut self,
        owner: Owner<'_>,
        name: &[u8],
        op: &CounterOp,
        handed_out: u64,
        dirty: &mut Vec<Dirty>,
    ) -> Outcome {
        let section = self.check_counter_owner(owner, name)?;
        let have = self.counters.by_name.get(name).map(|r| r.decl);
        let next = next_decl(name, have, op, handed_out)?;
        let changed = Some(next) != have;
        if changed {
            if have.is_none() && self.counters.by_name.len() >= MAX_COUNTERS {
                return Err(Rejection::Invalid(format!(
                    "at most {MAX_COUNTERS} counters in a set"
                )));
            }
            let rec = CounterRecord {
                section,
                decl: next,
            };
            self.counters.by_name.insert(name.to_vec(), rec);
            dirty.push(Dirty::Counter(name.to_vec()));
        }
        self.lift_to_floor(section, next.floor, dirty);
        Ok(Reply::Counter {
            decl: next,
            changed,
        })
    }

    /// Lifts `section`'s ceiling to at least `floor`, in the command that
    /// put the floor in force. An operator's floor is an explicit jump, like
    /// `SetMaxSeq`: the owner's raises move a ceiling by at most a step
    /// (promise 4), so without it a floor more than a step above the
    /// ceiling could never be served; with it the owner's next raise, from
    /// the floor, is a single step again. A ceiling never goes down
    /// (promise 1), so a floor below it changes nothing.
    fn lift_to_floor(&mut self, section: SectionId, floor: u64, dirty: &mut Vec<Dirty>) {
        let r = &mut self.sections[section as usize];
        if floor > r.max_seq {
            r.max_seq = floor;
            dirty.push(Dirty::Section(section));
        }
    }

    /// Checks that `name` is a name whose position lies in `section`, and
    /// that the caller owns that section at its epoch (promise 3: only the
    /// process serving the name may change what it serves by). Returns
    /// the section.
    fn check_counter_owner(&self, owner: Owner<'_>, name: &[u8]) -> Result<SectionId, Rejection> {
        let (alloc, incarnation, section, epoch) = owner;
        let key = name_key(name).map_err(|e| Rejection::Invalid(e.to_string()))?;
        let spec = self.spec()?;
        if spec.section_of(key) != Some(section) {
            return Err(Rejection::Invalid(format!(
                "the name's position {key} is not in section {section}"
            )));
        }
        let range = self.check_sections(section, 1)?;
        self.check_serving(&range)?;
        self.check_incarnation(alloc, incarnation)?;
        let r = &self.sections[section as usize];
        if r.owner.as_ref() != Some(alloc) {
            return Err(Rejection::OwnedElsewhere {
                section,
                owner: r.owner.clone().unwrap_or_default(),
            });
        }
        if r.epoch != epoch || r.incarnation != incarnation {
            return Err(Rejection::StaleEpoch {
                section,
                given: epoch,
                current: r.epoch,
            });
        }
        Ok(section)
    }
}

/// The declaration after `op` over `have` (pure), or why not.
pub(crate) fn next_decl(
    name: &[u8],
    have: Option<CounterDecl>,
    op: &CounterOp,
    handed_out: u64,
) -> Result<CounterDecl, Rejection> {
    let floor_now = have.map_or(0, |d| d.floor);
    match *op {
        CounterOp::Create { floor, rules } => match have.and_then(|d| d.rules) {
            Some(r) if r == rules && floor <= floor_now => Ok(have.unwrap_or_default()),
            Some(r) => Err(refuse(
                name,
                CounterRefusal::Conflict,
                floor_now,
                format!("declared already with {}", describe(&r, floor_now)),
            )),
            None => {
                // Over a tombstone, or a name that had its floor set: the
                // floor never goes back.
                let floor = floor.max(floor_now);
                rules
                    .validate(floor)
                    .map_err(|e| Rejection::Invalid(e.to_string()))?;
                Ok(CounterDecl {
                    floor,
                    rules: Some(rules),
                })
            }
        },
        CounterOp::SetFloor { floor } => {
            if floor == floor_now && have.is_some() {
                return Ok(have.unwrap_or_default());
            }
            if floor < floor_now {
                return Err(refuse(
                    name,
                    CounterRefusal::FloorBackwards,
                    floor_now,
                    format!("the floor is {floor_now}; it only moves forward"),
                ));
            }
            if floor < handed_out {
                return Err(refuse(
                    name,
                    CounterRefusal::FloorBackwards,
                    handed_out,
                    format!("{handed_out} was handed out already"),
                ));
            }
            let rules = have.and_then(|d| d.rules);
            if let Some(r) = rules {
                r.validate(floor)
                    .map_err(|e| Rejection::Invalid(e.to_string()))?;
            }
            Ok(CounterDecl { floor, rules })
        }
        CounterOp::Delete => match have {
            None => Err(refuse(
                name,
                CounterRefusal::Unknown,
                0,
                "no counter by that name was declared",
            )),
            Some(d) if d.rules.is_none() => Ok(d),
            Some(d) => Ok(CounterDecl {
                floor: d.floor.max(handed_out),
                rules: None,
            }),
        },
    }
}

/// A declaration in words, for refusals.
fn describe(r: &seqsvr_core::CounterRules, floor: u64) -> String {
    let max = r
        .max
        .map_or("no maximum".into(), |m| format!("maximum {m}"));
    format!(
        "floor {floor}, {max}, increment {} offset {}",
        r.increment, r.offset
    )
}
