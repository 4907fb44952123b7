//! Time-ordered ids (docs/ids.md): `SEQ.ID ns [n]` hands out one id (an
//! integer) or `n` ids (an array, strictly increasing); `SEQ.DECODE id
//! [ns]` takes an id apart (a map: namespace, time in Unix ms and as a
//! date, worker, sequence). A namespace left out is `default`. Planned
//! here, run by `counter::run`; every id comes from the backend, the door
//! keeps none.

use super::counter::Op;
use super::{not_integer, Fail};
use crate::parse::{parse_int, Request};
use crate::state::Ctx;

/// The namespace a command that names none uses.
pub const DEFAULT_NAMESPACE: &str = "default";

pub use super::counter::MAX_IDS;

fn namespace(arg: Option<&bytes::Bytes>) -> Result<String, Fail> {
    let Some(a) = arg else {
        return Ok(DEFAULT_NAMESPACE.into());
    };
    match std::str::from_utf8(a) {
        Ok(s) if !s.is_empty() && s.len() <= 128 && !s.chars().any(char::is_control) => {
            Ok(s.to_string())
        }
        _ => Err(Fail::err(
            "bad_key",
            "an id namespace is 1..=128 printable UTF-8 characters",
        )),
    }
}

/// `SEQ.ID ns [n]`.
pub fn seq_id(req: &Request, _ctx: &Ctx) -> Result<Op, Fail> {
    if req.args.len() > 3 {
        return Err(super::wrong_args("seq.id"));
    }
    let ns = namespace(req.args.get(1))?;
    let n = match req.args.get(2) {
        None => 1,
        Some(a) => parse_int(a).ok_or_else(not_integer)?,
    };
    if !(1..=MAX_IDS as i64).contains(&n) {
        return Err(Fail::err(
            "too_large",
            format!("SEQ.ID hands out 1..={MAX_IDS} ids at once, not {n}"),
        ));
    }
    Ok(Op::Ids(ns, n as u64))
}

/// `SEQ.DECODE id [ns]`.
pub fn seq_decode(req: &Request, _ctx: &Ctx) -> Result<Op, Fail> {
    if req.args.len() > 3 {
        return Err(super::wrong_args("seq.decode"));
    }
    let id = parse_int(&req.args[1])
        .filter(|&v| v >= 0)
        .ok_or_else(not_integer)?;
    Ok(Op::Decode(id as u64, namespace(req.args.get(2))?))
}
