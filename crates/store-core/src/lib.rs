//! StoreSvr's pure logic: how one set's replicated state changes, and
//! what its leader decides before it writes. No Raft, no disk, no clock,
//! no socket: the store (`seqsvr-store`, openraft + sled) and the seeded
//! simulation (`seqsvr-sim`) drive the same code, the one with real
//! replicas and time, the other in its simulated world
//! (docs/architecture/store.md, docs/architecture/simulation.md).
//!
//! # Layout
//! - [`command`]: what travels in the log — commands, the batches they are
//!   proposed in, their replies.
//! - [`state`]: the state of one set (sections, AllocSvrs, route version,
//!   lease terms, placement, directory) and how each command changes it;
//!   a section's raise rule ([`RaiseRule`]) on its [`SectionRecord`].
//! - [`ids`]: id namespaces, their worker ids' holders and time
//!   ceilings, and how the id commands change them.
//! - [`counters`]: declared counters (floor, maximum, increment/offset,
//!   tombstones), written by the owner of a name's section, copied by a
//!   range move and landed by a restore before their sections are served.
//! - [`owned`]: the per-AllocSvr section counts derived from the state.
//! - [`arbiter`]: leases as the leader granted them, and the section moves
//!   and retirements they allow.
//! - [`decision`]: the leader's checks before a registration, an
//!   operator's assign and a renewal's grant.
//! - [`backup`]: backup files (the state and its declared counters), and
//!   the restore plan that raises every ceiling by a safety margin.

pub mod arbiter;
pub mod backup;
pub mod command;
pub mod counters;
pub mod decision;
pub mod ids;
pub mod owned;
pub mod state;

pub use command::{Command, Outcome, Rejection, Reply, Request, Response};
pub use state::{AllocRecord, Dirty, LeaseState, RaiseRule, SectionRecord, SetState};
