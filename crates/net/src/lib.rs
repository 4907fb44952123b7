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
//! # Features
//!
//! A client links only dialing, client TLS and roles ([`client`], [`tls`],
//! [`verify`], [`role`], [`plane`]). The rest is opt-in, on by default and
//! off for the client library (`default-features = false` in the
//! workspace): `server` (listeners, limits, per-call role checks, server
//! TLS, per-call metrics, the Prometheus scrape and exposition) and
//! `certs` (the development PKI).
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

#[cfg(feature = "server")]
pub mod auth;
#[cfg(feature = "server")]
pub mod calls;
#[cfg(feature = "certs")]
pub mod certs;
pub mod client;
pub mod error;
#[cfg(feature = "server")]
pub mod exposition;
#[cfg(feature = "server")]
pub mod limits;
#[cfg(feature = "server")]
pub mod metrics;
pub mod plane;
pub mod role;
#[cfg(feature = "server")]
pub mod server;
pub mod tls;
pub mod verify;

#[cfg(feature = "server")]
pub use auth::Auth;
#[cfg(feature = "certs")]
pub use certs::{DevPki, Leaf};
pub use error::{Error, Result};
#[cfg(feature = "server")]
pub use limits::{Limits, PlaneLimits};
pub use plane::Plane;
pub use role::{Role, StoreId};
#[cfg(feature = "server")]
pub use server::Listener;
#[cfg(feature = "server")]
pub use tls::ServerTls;
pub use tls::{ClientTls, TlsConfig};
pub use verify::ServerRole;
