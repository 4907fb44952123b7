//! The seqsvr client: what an IM backend links to get sequence numbers.
//!
//! A [`SeqClient`] is given a few addresses (*seeds*: AllocSvrs, or store
//! replicas' client plane), learns route tables and the *set directory*
//! from them, and then sends every call straight to the AllocSvr that owns
//! the uid's *section* in the *set* that serves it. The directory (which
//! set serves which uid range, and where each set's stores are) rides on
//! every route table; a set the client has no table of yet is learned from
//! its stores. It keeps the routes fresh on its own: every reply carries
//! the route version, an AllocSvr that no longer serves a uid says so with
//! its route version and the owner it knows (`NOT_OWNER`, or `MOVED` /
//! `NOT_SERVED` when the section left its set) and is asked for its table
//! only when that version is newer, and a dead AllocSvr sends the client
//! to its set's stores
//! and its seeds. Retryable failures are retried with jittered exponential
//! backoff inside one deadline per call; what is left after the deadline
//! comes back as a typed [`Error`].
//!
//! It calls the AllocSvrs' *client plane* (`Next`, `NextBatch`, `Current`,
//! `Routes`) and the stores' (`GetRoutes`), which ask callers for no
//! certificate; with [`ClientOptions::tls`] set the connections are TLS,
//! the servers' certificates checked against the cluster's CA.
//!
//! The client never makes a number up or reuses one: every number comes
//! from an AllocSvr, and retrying a call can only skip numbers (a lost
//! reply), never repeat them (promise 1 of
//! `docs/architecture/promises.md`).
//!
//! # Layout
//! - `client.rs`: [`SeqClient`] — connect, `next`, `current`, and the
//!   retry driver that turns a failed attempt into give-up, retry-now or
//!   refresh-and-back-off.
//! - `batch.rs`: `next_batch` — split by owner, parallel sends, chunking to
//!   [`MAX_BATCH`], order and duplicates.
//! - `refresh.rs`: the per-address channel cache and how route tables are
//!   learned from seeds and AllocSvrs (the `Routes` RPC, background
//!   refresh on a newer version).
//! - `sets.rs`: how a set's table is learned from its stores, and how the
//!   directory is refreshed.
//! - `flight.rs`: single-flight refreshes.
//! - `routes.rs`: the cache — one table per set, newest wins, the newest
//!   directory, uid → set → owner lookup.
//! - `retry.rs`: what each gRPC error means for retrying, and the per-call
//!   budget (deadline, attempt timeout, backoff); `client.rs` decides what
//!   to refresh before the next attempt.
//! - `backoff.rs`: exponential backoff with jitter from a cheap hash.
//! - `options.rs`: [`ClientOptions`] (deadlines, backoff, TLS).
//! - `error.rs`: [`Error`], the one error type, and [`Result`].
//!
//! The guide for users is `docs/client.md`.
//!
//! # Example
//! ```no_run
//! use std::time::Duration;
//! use seqsvr_client::{ClientOptions, Error, SeqClient};
//!
//! # async fn run() -> seqsvr_client::Result<()> {
//! let seeds = vec!["10.0.0.1:7201".to_string(), "10.0.1.1:7201".to_string()];
//! let options = ClientOptions {
//!     deadline: Duration::from_secs(1),
//!     ..Default::default()
//! };
//! let client = SeqClient::connect(&seeds, options).await?;
//!
//! // A message lands in uid 42's mailbox.
//! let seq = client.next(42).await?;
//!
//! // A group message fans out to every member.
//! let seqs = client.next_batch(&[42, 43, 1_000_007]).await?;
//! assert!(seqs[0] > seq);
//!
//! match client.next(u64::MAX).await {
//!     Err(Error::OutOfRange { uid }) => eprintln!("no set serves uid {uid}"),
//!     Err(e) if e.is_retryable() => eprintln!("try again later: {e}"),
//!     Err(e) => return Err(e),
//!     Ok(seq) => println!("{seq}"),
//! }
//! # Ok(())
//! # }
//! ```

mod backoff;
mod batch;
mod client;
mod error;
mod flight;
mod ids;
mod options;
mod refresh;
mod retry;
mod routes;
mod sets;

pub use client::{Owner, SeqClient};
pub use error::{Error, ErrorKind, Result};
pub use ids::DecodedId;
pub use options::{ClientOptions, ClientTls, FORWARDED_BY};
pub use seqsvr_core::{Directory, RouteTable, SetSpec, MAX_BATCH};
