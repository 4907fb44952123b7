//! The counters: `INCR`, `INCRBY`, `GET`, `MGET`, `SEQ.BATCH`, planned
//! from a request and run against the [`Backend`] (with `SEQ.ID` and
//! `SEQ.DECODE`, planned in `ids`). Every number comes
//! from the backend: the door adds none and keeps none.

use bytes::Bytes;

use super::{not_integer, Fail};
use crate::backend::{Backend, BackendError};
use crate::keys::Key;
use crate::parse::{parse_int, Request};
use crate::reply::Reply;
use crate::state::Ctx;

/// Most ids one `SEQ.ID` hands out, and one run of pipelined `SEQ.ID`s
/// asks for at once.
pub const MAX_IDS: u64 = 100_000;

/// A counter operation, its keys already mapped to uids or names (a name
/// has a counter of its own, `docs/counters.md`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// One number of a uid (`INCR`, `INCRBY k 1`): coalesced with its
    /// neighbours into one batch call.
    Incr(u64),
    /// `n` numbers in one step; the last is the reply.
    IncrBy(Key, u64),
    /// The current value, as an integer (`INCRBY k 0`).
    Current(Key),
    /// The current value, as a bulk string (`GET`).
    Get(Key),
    /// Current values, as bulk strings (`MGET`).
    MGet(Vec<Key>),
    /// One number per key, in order (`SEQ.BATCH`).
    Batch(Vec<Key>),
    /// `n` time-ordered ids of a namespace (`SEQ.ID ns [n]`).
    Ids(String, u64),
    /// An id of a namespace taken apart (`SEQ.DECODE id [ns]`).
    Decode(u64, String),
}

fn key(ctx: &Ctx, key: &Bytes) -> Result<Key, Fail> {
    ctx.cfg
        .keys
        .counter(key)
        .map_err(|e| Fail::err("bad_key", e))
}

fn keys(ctx: &Ctx, ks: &[Bytes], what: &str, max: usize) -> Result<Vec<Key>, Fail> {
    if ks.len() > max {
        return Err(Fail::err(
            "too_large",
            format!("{what} takes at most {max} keys, not {}", ks.len()),
        ));
    }
    ks.iter().map(|k| key(ctx, k)).collect()
}

/// `INCR key`.
pub fn incr(req: &Request, ctx: &Ctx) -> Result<Op, Fail> {
    Ok(match key(ctx, &req.args[1])? {
        Key::Uid(u) => Op::Incr(u),
        name => Op::IncrBy(name, 1),
    })
}

/// `INCRBY key n`: `n` numbers reserved, the last returned (the caller
/// owns `(v − n, v]`); `n = 0` answers the current value; a negative `n`
/// is refused (numbers never go down).
pub fn incrby(req: &Request, ctx: &Ctx) -> Result<Op, Fail> {
    let k = key(ctx, &req.args[1])?;
    let n = parse_int(&req.args[2]).ok_or_else(not_integer)?;
    let max = ctx.max_count;
    match n {
        0 => Ok(Op::Current(k)),
        1 => match k {
            Key::Uid(u) => Ok(Op::Incr(u)),
            name => Ok(Op::IncrBy(name, 1)),
        },
        n if n < 0 => Err(Fail::err(
            "refused",
            "INCRBY with a negative increment is refused: sequence numbers never go down",
        )),
        n if n as u64 > max => Err(Fail::err(
            "too_large",
            format!("INCRBY reserves at most {max} numbers at once, not {n}"),
        )),
        n => Ok(Op::IncrBy(k, n as u64)),
    }
}

/// `GET key`: the current value, never a mutation.
pub fn get(req: &Request, ctx: &Ctx) -> Result<Op, Fail> {
    Ok(Op::Get(key(ctx, &req.args[1])?))
}

/// `MGET key …`.
pub fn mget(req: &Request, ctx: &Ctx) -> Result<Op, Fail> {
    Ok(Op::MGet(keys(ctx, &req.args[1..], "MGET", ctx.max_batch)?))
}

/// `SEQ.BATCH key …`: the numbers `NextBatch` would return.
pub fn batch(req: &Request, ctx: &Ctx) -> Result<Op, Fail> {
    Ok(Op::Batch(keys(
        ctx,
        &req.args[1..],
        "SEQ.BATCH",
        ctx.max_batch,
    )?))
}

/// A number as a Redis integer: above `i64::MAX` it is an error, never
/// a wrong integer (promise 5).
pub fn int(v: u64) -> Result<Reply, Fail> {
    i64::try_from(v)
        .map(Reply::Int)
        .map_err(|_| Fail::err("overflow", "increment or decrement would overflow"))
}

/// A backend error as a reply: retryable ones as `TRYAGAIN` (clients
/// such as go-redis retry those themselves), the rest as `ERR`; both name
/// the kind every door uses.
pub fn backend_fail(e: &BackendError) -> Fail {
    let kind = e.kind.as_str_name();
    let after = e
        .retry_after
        .map(|d| format!(" (retry in {} ms)", d.as_millis()))
        .unwrap_or_default();
    let line = if e.retryable {
        format!("TRYAGAIN {kind} {}{after}", e.message)
    } else {
        format!("ERR {kind} {}", e.message)
    };
    Fail::coded(kind_label(e), line)
}

/// The errors metric's label for a backend error: its kind in lower case.
fn kind_label(e: &BackendError) -> &'static str {
    use seqsvr_proto::ErrorKind as K;
    match e.kind {
        K::NotOwner => "not_owner",
        K::OutOfRange => "out_of_range",
        K::CeilingExhausted => "ceiling_exhausted",
        K::LeaseExpired => "lease_expired",
        K::NotServingYet => "not_serving_yet",
        K::NotServed => "not_served",
        K::Moved => "moved",
        K::StaleIncarnation => "stale_incarnation",
        K::NoLeader => "no_leader",
        K::InvalidRequest => "invalid_request",
        K::TooLarge => "too_large",
        K::ClockBehind => "clock_behind",
        K::IdCeilingReached => "id_ceiling_reached",
        K::IdWorkerUnavailable => "id_worker_unavailable",
        K::IdRefused => "id_refused",
        _ => "internal",
    }
}

/// Runs one operation other than [`Op::Incr`] (those are batched by the
/// connection).
pub async fn run<B: Backend>(b: &B, op: Op) -> Result<Reply, Fail> {
    let fail = |e: BackendError| backend_fail(&e);
    match op {
        Op::Incr(u) => int(b.next_n(u, 1).await.map_err(fail)?),
        Op::IncrBy(k, n) => int(next_n(b, &k, n).await.map_err(fail)?),
        Op::Current(k) => int(current(b, &k).await.map_err(fail)?),
        Op::Get(k) => Ok(decimal(current(b, &k).await.map_err(fail)?)),
        Op::MGet(ks) => {
            let mut out = Vec::with_capacity(ks.len());
            for k in ks {
                out.push(decimal(current(b, &k).await.map_err(fail)?));
            }
            Ok(Reply::Array(out))
        }
        Op::Batch(ks) => {
            let mut seqs = Vec::with_capacity(ks.len());
            batch_keys(b, &ks, &mut seqs).await.map_err(fail)?;
            Ok(Reply::Array(
                seqs.into_iter().map(int).collect::<Result<_, _>>()?,
            ))
        }
        Op::Ids(ns, n) => run_ids(b, &ns, n).await,
        Op::Decode(id, ns) => run_decode(b, id, &ns).await,
    }
}

/// `n` numbers of a uid or a name.
async fn next_n<B: Backend>(b: &B, k: &Key, n: u64) -> Result<u64, BackendError> {
    match k {
        Key::Uid(u) => b.next_n(*u, n).await,
        Key::Name(name) => b.next_name_n(name, n).await,
    }
}

/// The current value of a uid or a name.
async fn current<B: Backend>(b: &B, k: &Key) -> Result<u64, BackendError> {
    match k {
        Key::Uid(u) => b.current(*u).await,
        Key::Name(name) => b.current_name(name).await,
    }
}

/// One number per key, in order, stopping at the first refusal: uids
/// alone go as one batch call; with names among them, one call a key.
async fn batch_keys<B: Backend>(b: &B, ks: &[Key], out: &mut Vec<u64>) -> Result<(), BackendError> {
    let uids: Option<Vec<u64>> = (ks.iter())
        .map(|k| match k {
            Key::Uid(u) => Some(*u),
            Key::Name(_) => None,
        })
        .collect();
    if let Some(uids) = uids {
        return b.next_batch(&uids, out).await;
    }
    for k in ks {
        out.push(next_n(b, k, 1).await?);
    }
    Ok(())
}

fn decimal(v: u64) -> Reply {
    Reply::bulk(v.to_string())
}

/// Runs consecutive `INCR`s as one batch call; `out` gets one result per
/// uid, in order. A uid refused gets its error and the batch goes on
/// with the next (each `INCR` is a command of its own).
pub async fn incr_all<B: Backend>(b: &B, uids: &[u64], out: &mut Vec<Result<Reply, Fail>>) {
    if let [uid] = uids {
        // One INCR alone (a client that waits for each answer): the
        // backend's single-number path, without a batch's vector.
        out.push(
            b.next_n(*uid, 1)
                .await
                .map_err(|e| backend_fail(&e))
                .and_then(int),
        );
        return;
    }
    let mut seqs = Vec::with_capacity(uids.len());
    let mut done = 0;
    let max = b.max_batch().max(1);
    while done < uids.len() {
        let chunk = &uids[done..uids.len().min(done + max)];
        seqs.clear();
        let r = b.next_batch(chunk, &mut seqs).await;
        out.extend(seqs.iter().map(|&v| int(v)));
        done += seqs.len();
        match r {
            Err(e) => {
                out.push(Err(backend_fail(&e)));
                done += 1;
            }
            // A backend that answered fewer numbers than asked without
            // an error broke its contract: the rest get an error, never
            // a guess.
            Ok(()) if seqs.len() < chunk.len() => {
                for _ in seqs.len()..chunk.len() {
                    out.push(Err(Fail::err(
                        "internal",
                        "the backend answered too few numbers",
                    )));
                }
                done += chunk.len() - seqs.len();
            }
            Ok(()) => {}
        }
    }
}

/// Commands waiting to run together, in request order: a run of uids'
/// `INCR`s (one batch call), a run of one name's `INCR`s (one
/// reservation), or a run of `SEQ.ID`s of one namespace (one call for
/// all their ids). At most one of the three is non-empty: a command that
/// joins none first runs the run.
#[derive(Debug, Default)]
pub struct Incrs {
    /// A run of uids' `INCR`s.
    uids: Vec<u64>,
    /// A run of `INCR`s of this one name, and how many.
    name: Option<(Bytes, u64)>,
    /// A run of `SEQ.ID`s of this one namespace: each command's count,
    /// and their sum (at most [`MAX_IDS`]).
    ids: Option<(String, Vec<u64>, u64)>,
}

impl Incrs {
    /// Whether `op` is a command that waits in a run.
    pub fn joinable(op: &Op) -> bool {
        matches!(op, Op::Incr(_) | Op::IncrBy(Key::Name(_), 1) | Op::Ids(..))
    }

    /// Whether `op` joins the run as it is now (else the run goes first).
    pub fn fits(&self, op: &Op) -> bool {
        match op {
            Op::Incr(_) => self.name.is_none() && self.ids.is_none(),
            Op::IncrBy(Key::Name(n), 1) => {
                self.uids.is_empty()
                    && self.ids.is_none()
                    && self.name.as_ref().is_none_or(|(m, _)| m == n)
            }
            Op::Ids(ns, n) => {
                self.uids.is_empty()
                    && self.name.is_none()
                    && self
                        .ids
                        .as_ref()
                        .is_none_or(|(m, _, total)| m == ns && total + n <= MAX_IDS)
            }
            _ => false,
        }
    }

    /// Adds a joinable `op` that [`fits`](Self::fits).
    pub fn push(&mut self, op: Op) {
        match op {
            Op::Incr(u) => self.uids.push(u),
            Op::IncrBy(Key::Name(n), 1) => match &mut self.name {
                Some((_, k)) => *k += 1,
                None => self.name = Some((n, 1)),
            },
            Op::Ids(ns, n) => match &mut self.ids {
                Some((_, counts, total)) => {
                    counts.push(n);
                    *total += n;
                }
                None => self.ids = Some((ns, vec![n], n)),
            },
            _ => debug_assert!(false, "not a command that waits in a run"),
        }
    }

    /// Runs the run: one result per command, in order, into `out`.
    pub async fn flush<B: Backend>(&mut self, b: &B, out: &mut Vec<Result<Reply, Fail>>) {
        if !self.uids.is_empty() {
            incr_all(b, &self.uids, out).await;
            self.uids.clear();
        }
        if let Some((name, k)) = self.name.take() {
            incr_name(b, &name, k, out).await;
        }
        if let Some((ns, counts, total)) = self.ids.take() {
            ids_run(b, &ns, &counts, total, out).await;
        }
    }
}

/// Consecutive `SEQ.ID`s of one namespace (a pipeline's, or a
/// transaction's): all their ids in one call, handed out in request
/// order — each command gets the next `n` of them, so every command's
/// ids are above the ones before, as if each had run alone. A call
/// refused (or answering a wrong number of ids) is asked again one
/// command at a time, so that each error is exactly what that command
/// alone would get.
async fn ids_run<B: Backend>(
    b: &B,
    ns: &str,
    counts: &[u64],
    total: u64,
    out: &mut Vec<Result<Reply, Fail>>,
) {
    if let [n] = counts {
        out.push(run_ids(b, ns, *n).await);
        return;
    }
    match b.next_ids(ns, total).await {
        Ok(ids) if ids.len() as u64 == total => {
            let mut rest = &ids[..];
            for &n in counts {
                let (mine, after) = rest.split_at(n as usize);
                rest = after;
                out.push(ids_reply(mine));
            }
        }
        _ => {
            for &n in counts {
                out.push(run_ids(b, ns, n).await);
            }
        }
    }
}

/// `k` consecutive `INCR`s of one name (a pipeline's, or a transaction's):
/// `k` numbers reserved in one step (at most `max_count` a step), the
/// i-th `INCR` answered the i-th of them — in request order, each the
/// owner's, none shared (promise 1, `docs/architecture/resp.md`). A
/// reservation refused is asked again one `INCR` at a time, so that each
/// error is exactly what that `INCR` alone would get.
async fn incr_name<B: Backend>(b: &B, name: &[u8], k: u64, out: &mut Vec<Result<Reply, Fail>>) {
    let one = |r: Result<u64, BackendError>| r.map_err(|e| backend_fail(&e)).and_then(int);
    let max = b.max_count().max(1);
    let mut left = k;
    while left > 0 {
        let n = left.min(max);
        left -= n;
        match b.next_name_n(name, n).await {
            // The caller owns (v − n, v]: v − n + 1 first.
            Ok(v) if v >= n => out.extend((0..n).rev().map(|i| int(v - i))),
            r if n == 1 => out.push(one(r)),
            _ => {
                for _ in 0..n {
                    out.push(one(b.next_name_n(name, 1).await));
                }
            }
        }
    }
}

/// Runs `SEQ.ID`: one id as an integer, several as an array.
pub async fn run_ids<B: Backend>(b: &B, ns: &str, n: u64) -> Result<Reply, Fail> {
    let ids = b.next_ids(ns, n).await.map_err(|e| backend_fail(&e))?;
    if ids.len() as u64 != n {
        return Err(Fail::err(
            "internal",
            format!("the backend answered {} ids, not {n}", ids.len()),
        ));
    }
    ids_reply(&ids)
}

/// The reply to a `SEQ.ID` that got `ids`: one id as an integer, several
/// as an array.
fn ids_reply(ids: &[u64]) -> Result<Reply, Fail> {
    match ids {
        [] => Err(Fail::err("internal", "the backend answered no id")),
        [id] => int(*id),
        _ => Ok(Reply::Array(
            ids.iter().map(|&v| int(v)).collect::<Result<_, _>>()?,
        )),
    }
}

/// Runs `SEQ.DECODE`.
pub async fn run_decode<B: Backend>(b: &B, id: u64, ns: &str) -> Result<Reply, Fail> {
    let p = b.decode_id(ns, id).await.map_err(|e| backend_fail(&e))?;
    let pair = |k: &'static str, v: Reply| (Reply::bulk(k), v);
    Ok(Reply::Map(vec![
        pair("namespace", Reply::bulk(p.namespace)),
        pair("time_ms", int(p.unix_ms)?),
        pair(
            "time",
            Reply::bulk(seqsvr_core::ids::format_unix_ms(p.unix_ms)),
        ),
        pair("worker", int(p.worker)?),
        pair("sequence", int(p.sequence)?),
    ]))
}
