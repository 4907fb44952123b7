//! Pure building blocks of seqsvr, shared by every component.
//!
//! Nothing here touches a socket, a disk or a clock: it is plain data and
//! arithmetic, tested with table and property tests.
//!
//! # Layout
//! - [`section`]: a *set*'s uid range and its split into *sections*
//!   (uid → section arithmetic).
//! - [`route`]: the *route table*: which AllocSvr serves which sections, with
//!   a version number and per-section *epoch* (fencing token).
//! - [`directory`]: the set *directory* (which set serves which uid
//!   range, a move under way) and a store group's [`Placement`] of its span.
//! - [`checker`]: the per-uid monotonicity checker over what clients
//!   received — numbers (a batch's copies of a uid in request order) and
//!   `current` answers — (promise 1), for tests, simulations and drills.
//! - [`codec`]: the one place that turns values into bytes for disk and wire
//!   (a format-version byte, then bincode), so the encoding can be swapped in
//!   one place.
//! - [`grant`]: a section's durable [`SectionRecord`] and the [`Grant`]
//!   (epoch, start, ceiling) it gives, the AllocSvr [`Incarnation`] and the
//!   replicated [`LeaseTerms`].
//! - [`ids`]: time-ordered 64-bit ids: layouts, encode/decode and one
//!   worker id's generator with its clock policy.
//! - [`mover`]: the range mover (`seqctl set move`) as a state machine:
//!   answers in, the next call (or wait, or end) out; `seqctl` and the
//!   simulation execute its effects.
//! - [`counter`]: declared counters: a floor, a maximum, an
//!   increment/offset, and the numbers a call hands out under them.
//! - [`rng`]: the one seeded pseudo-random generator (SplitMix64), for
//!   the simulation, workloads, benchmarks and retry jitter.
//! - [`error`]: the crate's error type.

pub mod checker;
pub mod codec;
pub mod counter;
pub mod directory;
pub mod error;
pub mod golden;
pub mod grant;
pub mod ids;
pub mod mover;
pub mod names;
pub mod rng;
pub mod route;
pub mod section;

pub use counter::{CounterDecl, CounterError, CounterRules};
pub use directory::{
    DirChange, DirError, DirSet, Directory, PendingMove, Place, Placement, SetCall, SetId, SetKind,
};
pub use error::{Error, Result};
pub use grant::{Grant, Incarnation, LeaseTerms, SectionRecord};
pub use names::{check_name, is_name_key, name_key, NameError, MAX_NAME_LEN, NAME_KEYS};
pub use route::{AllocId, Epoch, RouteEntry, RouteTable};
pub use section::{SectionId, SetSpec, Uid};

/// Most sections one store command may name (a take-over, an assign): keeps
/// every log entry below what the store's log accepts as one value. Callers
/// with more split them (the store group-commits the pieces together).
pub const MAX_SECTIONS_PER_CALL: u32 = 1024;

/// Most uids in one batch request; larger batches are refused with a typed
/// error (clients split them).
pub const MAX_BATCH: usize = 4096;
