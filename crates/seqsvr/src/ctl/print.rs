//! Printing what commands return, as text or (`--json`) as JSON.

use serde::Serialize;

use crate::error::{Error, Result};
use crate::outln;

/// Prints `value` as pretty JSON.
pub fn json(value: &impl Serialize) -> Result<()> {
    let text = serde_json::to_string_pretty(value)
        .map_err(|e| Error::Failed(format!("output as JSON: {e}")))?;
    outln!("{text}")
}

/// One uid's number.
#[derive(Debug, Serialize)]
struct Number {
    uid: u64,
    seq: u64,
}

/// Prints `seqs[i]` for `uids[i]`: one number a line, or JSON (an object,
/// or with `array` an array of objects).
pub fn numbers(uids: &[u64], seqs: &[u64], as_json: bool, array: bool) -> Result<()> {
    let all: Vec<Number> = uids
        .iter()
        .zip(seqs)
        .map(|(&uid, &seq)| Number { uid, seq })
        .collect();
    match (as_json, array) {
        (true, true) => json(&all),
        (true, false) => all.first().map_or(Ok(()), json),
        (false, _) => seqs.iter().try_for_each(|n| outln!("{n}")),
    }
}
