//! The Redis-protocol door (RESP2 and RESP3): what lets an IM backend
//! written in any language swap Redis's `INCR` for sequence numbers that
//! never repeat (`docs/architecture/resp.md`, `docs/clients.md`).
//!
//! The door is thin: it parses requests, maps keys to uids, and encodes
//! replies; every number comes from a [`Backend`] (the AllocSvr's
//! allocator), which answers exactly as the gRPC client plane does. This
//! crate depends on no allocator.
//!
//! # Layout
//! - [`parse`]: the request parser (multibulk and inline), flat and
//!   resumable, with Redis's limits and error words; [`split`] splits
//!   inline lines as Redis does.
//! - [`reply`]: [`Reply`] and its RESP2/RESP3 encodings.
//! - [`cmd`]: the command table and one file per group: `session`
//!   (`HELLO`, `AUTH`, `CLIENT` …), `intro` (`INFO`, `CONFIG GET`,
//!   `COMMAND`), `counter` (`INCR`, `INCRBY`, `GET`, `MGET`,
//!   `SEQ.BATCH`).
//! - [`conn`]: a connection's state and the running of its requests in
//!   order (auth gate, `MULTI`/`EXEC`, consecutive `INCR`s as one batch).
//! - [`server`]: the listener and the connections' read/answer/write
//!   rounds.
//! - [`state`]: the door's shared state and a connection's session.
//! - [`spin`]: busy-polling between rounds, when configured.
//! - [`keys`]: keys to uids. [`backend`]: what the door serves from.
//!   [`config`]: limits, credentials. [`metrics`]: Prometheus counters.

pub mod backend;
pub mod cmd;
pub mod config;
pub mod conn;
pub mod keys;
pub mod metrics;
pub mod parse;
pub mod reply;
pub mod server;
pub mod spin;
pub mod split;
pub mod state;

pub use backend::{Backend, BackendError, IdParts};
pub use config::{Credentials, DoorConfig};
pub use keys::{Key, KeyMap};
pub use metrics::DoorMetrics;
pub use parse::{Limits, Parsed, Parser, ProtoError, Request};
pub use reply::{Proto, Reply};
pub use server::serve;
pub use state::Ctx;
