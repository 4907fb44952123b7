//! Time-ordered 64-bit ids: the pure part (docs/ids.md).
//!
//! A namespace's ids follow a [`Layout`] (time, worker and sequence bits,
//! epoch, tick). Each AllocSvr holding a *worker id* of the namespace runs
//! a [`Generator`] for it: the clock is passed in, the time ceiling comes
//! from the store, and nothing here sleeps, spins or reads a clock.
//!
//! # Layout
//! - [`layout`]: layouts, their presets and validation, encode and decode,
//!   the date a layout runs out.
//! - [`generator`]: one worker id's generator and its clock policy.

pub mod generator;
pub mod layout;

pub use generator::{GenStats, Generator};
pub use layout::{format_unix_ms, parse_unix_ms, Decoded, Layout, Order};

use serde::{Deserialize, Serialize};

use crate::Epoch;

/// Why an id was not issued, built or decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
pub enum IdError {
    /// A layout that cannot hold ids (too many bits, a zero field, a bad
    /// tick).
    #[error("invalid id layout: {0}")]
    InvalidLayout(String),
    /// The clock is behind the last tick issued by more than the generator
    /// may borrow: retry after `behind_ms` (the clock went back, or ids
    /// were asked faster than the layout holds for longer than the borrow
    /// allows).
    #[error("clock behind: retry in {behind_ms} ms")]
    ClockBehind {
        /// How far the clock must still move forward, in ms.
        behind_ms: u64,
    },
    /// The worker id's time ceiling has not been raised in time; retry
    /// once it is.
    #[error("time ceiling {ceiling} reached; waiting for it to be raised")]
    CeilingReached {
        /// The ceiling, in ticks.
        ceiling: u64,
    },
    /// The layout's time bits ran out.
    #[error("the layout's time ran out at {}", format_unix_ms(*end_ms))]
    TimeExhausted {
        /// The first Unix millisecond the time bits cannot hold.
        end_ms: u64,
    },
    /// A worker id above what the layout's worker bits hold.
    #[error("worker id {worker} above the layout's {max}")]
    WorkerOutOfRange {
        /// The worker id given.
        worker: u64,
        /// The largest the layout holds.
        max: u64,
    },
    /// An id with bits above the layout's.
    #[error("{id} is not an id of this layout ({bits} bits)")]
    NotInLayout {
        /// The id.
        id: u64,
        /// The layout's bits.
        bits: u32,
    },
    /// Any other malformed value.
    #[error("invalid: {0}")]
    Invalid(String),
}

/// What a claim hands its holder.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerGrant {
    /// The worker id.
    pub worker: u64,
    /// The holding's fencing token: every raise and release carries it.
    pub epoch: Epoch,
    /// The first tick it may issue (whatever its clock says).
    pub floor: u64,
    /// The durable ceiling.
    pub ceiling: u64,
}

#[cfg(test)]
mod tests;
