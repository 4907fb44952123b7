//! How seqsvr servers listen and how clients dial, per plane.
//!
//! # Layout
//!
//! - [`plane`]: the three planes a seqsvr process serves, and what each
//!   demands of its callers.
//! - [`role`]: who a caller is ([`Role`]), as carried in its certificate.
//! - [`auth`]: the per-call check that a peer- or admin-plane caller holds
//!   the role a call needs ([`Auth`]).
//! - [`tls`]: loading PEM files into server and client TLS settings
//!   ([`TlsConfig`], [`ServerTls`], [`ClientTls`]).
//! - [`verify`]: the role a client requires of the server it dials
//!   ([`ServerRole`]).
//! - [`limits`]: what one plane's listener allows ([`Limits`],
//!   [`PlaneLimits`]).
//! - [`server`]: a listener that applies a plane's TLS and limits to a tonic
//!   server ([`server::listener`], [`Listener`]).
//! - [`client`]: dialing a seqsvr server ([`client::channel`]).
//! - [`certs`]: a development PKI ([`DevPki`]).
//! - [`calls`]: per-call gRPC metrics (method, code, latency).
//! - [`metrics`]: the Prometheus scrape listener (plain HTTP/1.1).
//! - [`exposition`]: build info and process metrics for every process, and
//!   rendering a scrape with its `set` label.
//! - [`error`]: this crate's [`Error`].
//!
//! # Why one crate
//!
//! Every seqsvr process serves some of three planes: the **client** plane
//! (what IM backends and anyone else may call: next, batch, current,
//! routes, read-only status), the **peer** plane (Raft between store
//! replicas, AllocSvr ↔ store, AllocSvr ↔ AllocSvr) and the **admin** plane
//! (operator calls and metrics). The planes differ in who may call, how big
//! a message may be and how many connections a listener takes, and those
//! rules must be the same in every process. Keeping them here means a store
//! replica and an AllocSvr cannot drift apart on, say, whether the peer
//! plane needs a client certificate.

pub mod auth;
pub mod calls;
pub mod certs;
pub mod client;
pub mod error;
pub mod exposition;
pub mod limits;
pub mod metrics;
pub mod plane;
pub mod role;
pub mod server;
pub mod tls;
pub mod verify;

pub use auth::Auth;
pub use certs::{DevPki, Leaf};
pub use error::{Error, Result};
pub use limits::{Limits, PlaneLimits};
pub use plane::Plane;
pub use role::{Role, StoreId};
pub use server::Listener;
pub use tls::{ClientTls, ServerTls, TlsConfig};
pub use verify::ServerRole;
