//! Declared counters (`docs/counters.md`, Declared counters): a name with
//! a start floor that only moves forward, an optional maximum, and an
//! increment/offset pair, like a database sequence's `MINVALUE`,
//! `MAXVALUE` (without `CYCLE`) and `INCREMENT`.
//!
//! This module is the arithmetic alone: which numbers a call hands out
//! under a declaration, and which declarations are acceptable. The store
//! keeps the declarations (`seqsvr-store-core`), the name's owner applies
//! them in memory (`seqsvr-alloc`); both call this.

use serde::{Deserialize, Serialize};

/// Largest increment a declaration may have: a batch of `n` numbers spans
/// `n × increment`, and that span is taken from one section's step.
pub const MAX_INCREMENT: u64 = 65_536;

/// What a declared counter hands out besides "above every number before".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CounterRules {
    /// The highest number it may hand out (`None`: no maximum). Past it,
    /// a call is refused (a sequence without `CYCLE`).
    pub max: Option<u64>,
    /// Every number handed out is `≡ offset (mod increment)`.
    pub increment: u64,
    /// See `increment`; below it.
    pub offset: u64,
}

impl Default for CounterRules {
    /// The rules of an undeclared name: every number, no maximum.
    fn default() -> Self {
        Self {
            max: None,
            increment: 1,
            offset: 0,
        }
    }
}

/// A name's declaration as the store keeps it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CounterDecl {
    /// Every number handed out from now on is above it. Only grows.
    pub floor: u64,
    /// The rules, while declared; `None` for a deleted counter (a
    /// tombstone: the floor stays, the defaults apply) or a name that only
    /// had its floor set.
    pub rules: Option<CounterRules>,
}

impl CounterDecl {
    /// The rules in force: the declared ones, or the defaults.
    pub fn rules_or_default(&self) -> CounterRules {
        self.rules.unwrap_or_default()
    }
}

/// Why a declaration is not acceptable. Nothing changes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CounterError {
    /// Increment 0 or above [`MAX_INCREMENT`].
    #[error("the increment must be within 1..={MAX_INCREMENT}, not {0}")]
    Increment(u64),
    /// Offset not below the increment.
    #[error("the offset must be below the increment {increment}, not {offset}")]
    Offset {
        /// The increment.
        increment: u64,
        /// The offset given.
        offset: u64,
    },
    /// A maximum at or below the floor: nothing could ever be handed out.
    #[error("the maximum {max} must be above the floor {floor}")]
    MaxNotAboveFloor {
        /// The maximum.
        max: u64,
        /// The floor it would have to be above.
        floor: u64,
    },
}

/// Why a call hands out nothing under a declaration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    /// The batch would end above the maximum (refused whole).
    MaxReached {
        /// The maximum.
        max: u64,
    },
    /// `n × increment` is more than one call may span.
    SpanTooLarge,
}

impl CounterRules {
    /// Checks the rules against `floor`, the floor they would be in force
    /// with.
    pub fn validate(&self, floor: u64) -> Result<(), CounterError> {
        if self.increment == 0 || self.increment > MAX_INCREMENT {
            return Err(CounterError::Increment(self.increment));
        }
        if self.offset >= self.increment {
            return Err(CounterError::Offset {
                increment: self.increment,
                offset: self.offset,
            });
        }
        match self.max {
            Some(max) if max <= floor => Err(CounterError::MaxNotAboveFloor { max, floor }),
            _ => Ok(()),
        }
    }

    /// The smallest number above `cur` that is `≡ offset (mod increment)`.
    pub fn first_above(&self, cur: u64) -> Option<u64> {
        let inc = self.increment.max(1);
        let next = cur.checked_add(1)?;
        let r = next % inc;
        let add = (self.offset + inc - r) % inc;
        next.checked_add(add)
    }

    /// The last of `n` numbers handed out above `cur`, at most `span`
    /// above it: `first_above(cur) + (n − 1) × increment`. The caller owns
    /// the `n` numbers `last − k × increment`, `k < n`. Refused whole if
    /// it would pass the maximum.
    pub fn last_of(&self, cur: u64, n: u64, span: u64) -> Result<u64, Limit> {
        let inc = self.increment.max(1);
        let last = n
            .checked_sub(1)
            .and_then(|k| k.checked_mul(inc))
            .and_then(|k| self.first_above(cur)?.checked_add(k));
        let max = self.max.unwrap_or(u64::MAX);
        match last {
            Some(last) if last <= max => {
                if last - cur > span {
                    Err(Limit::SpanTooLarge)
                } else {
                    Ok(last)
                }
            }
            _ => Err(Limit::MaxReached { max }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn rules(max: Option<u64>, increment: u64, offset: u64) -> CounterRules {
        CounterRules {
            max,
            increment,
            offset,
        }
    }

    #[test]
    fn validation_table() {
        let cases = [
            (rules(None, 1, 0), 0, Ok(())),
            (rules(None, 0, 0), 0, Err(CounterError::Increment(0))),
            (
                rules(None, 65_537, 0),
                0,
                Err(CounterError::Increment(65_537)),
            ),
            (
                rules(None, 2, 2),
                0,
                Err(CounterError::Offset {
                    increment: 2,
                    offset: 2,
                }),
            ),
            (
                rules(Some(10), 1, 0),
                10,
                Err(CounterError::MaxNotAboveFloor { max: 10, floor: 10 }),
            ),
            (rules(Some(11), 2, 1), 10, Ok(())),
        ];
        for (r, floor, want) in cases {
            assert_eq!(r.validate(floor), want, "{r:?} floor {floor}");
        }
    }

    #[test]
    fn numbers_table() {
        let odd = rules(Some(9), 2, 1);
        // (cur, n) → last
        let cases = [
            (0, 1, Ok(1)),
            (1, 1, Ok(3)),
            (2, 1, Ok(3)),
            (2, 3, Ok(7)),
            (6, 2, Ok(9)),
            (7, 2, Err(Limit::MaxReached { max: 9 })),
            (9, 1, Err(Limit::MaxReached { max: 9 })),
        ];
        for (cur, n, want) in cases {
            assert_eq!(odd.last_of(cur, n, 1000), want, "cur {cur} n {n}");
        }
        let even = rules(None, 2, 0);
        assert_eq!(even.last_of(0, 1, 1000), Ok(2));
        assert_eq!(even.last_of(3, 2, 1000), Ok(6));
        assert_eq!(even.last_of(3, 600, 1000), Err(Limit::SpanTooLarge));
        assert_eq!(
            CounterRules::default().last_of(u64::MAX - 1, 2, 10),
            Err(Limit::MaxReached { max: u64::MAX })
        );
    }

    proptest! {
        #[test]
        fn every_number_is_above_and_in_its_class(
            cur in 0u64..1_000_000, n in 1u64..50, inc in 1u64..100, off in 0u64..100,
        ) {
            let r = rules(None, inc, off % inc);
            let last = r.last_of(cur, n, u64::MAX).unwrap();
            let first = last - (n - 1) * inc;
            prop_assert!(first > cur);
            prop_assert!(first - cur <= inc);
            prop_assert_eq!(last % inc, off % inc);
        }
    }
}
