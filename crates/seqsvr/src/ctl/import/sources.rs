//! What each source could ever have handed out, per counter: the floor a
//! name must start above (`docs/counters.md`, Moving over).
//!
//! - **Leaf segment** (`leaf_alloc`): a segment is loaded by `UPDATE
//!   leaf_alloc SET max_id = max_id + step` and then covers `[max_id −
//!   step, max_id)`: Leaf hands out only numbers *below* the `max_id` of
//!   the latest segment any instance loaded (its adaptive step changes how
//!   far `max_id` moves, never that). So `max_id` is at or above every
//!   number Leaf gave out, and the floor is `max_id`.
//! - **Tinyid** (`tiny_id_info`): a segment is taken by moving `max_id`
//!   forward by `step` (optimistic `version` check) and covers
//!   `(old max_id, max_id]`, server or client side; `delta`/`remainder`
//!   only pick which numbers of it are used. So the floor is `max_id`.
//! - **Redis** (`INCR`): the value of the key is the last number handed
//!   out, so the floor is the value.
//!
//! A dump is a snapshot: a source still running may hand out more after
//! it was taken (a Leaf instance loading its next segment). Stop the
//! source's writers first, or import again after they stopped: floors only
//! move forward, so a second import is safe.

use seqsvr_resp::keys::KeyMap;

use super::dump::{Cell, Row};
use super::Plan;

/// The sources a dump can come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// Meituan Leaf's `leaf_alloc`.
    Leaf,
    /// Didi Tinyid's `tiny_id_info`.
    Tinyid,
}

impl Source {
    /// The source's table.
    pub fn table(self) -> &'static str {
        match self {
            Source::Leaf => "leaf_alloc",
            Source::Tinyid => "tiny_id_info",
        }
    }

    /// The table's columns in order, as the project's own schema creates
    /// them (for an `INSERT` without a column list and no `CREATE TABLE`).
    pub fn columns(self) -> &'static [&'static str] {
        match self {
            Source::Leaf => &["biz_tag", "max_id", "step", "description", "update_time"],
            Source::Tinyid => &[
                "id",
                "biz_type",
                "begin_id",
                "max_id",
                "step",
                "delta",
                "remainder",
                "create_time",
                "update_time",
                "version",
            ],
        }
    }

    /// The column naming the counter.
    fn name_column(self) -> &'static str {
        match self {
            Source::Leaf => "biz_tag",
            Source::Tinyid => "biz_type",
        }
    }
}

/// The plan of `rows` of `source`'s table: a floor per counter (the
/// highest of its rows if it has several), or why a row is refused. Fails
/// only when the rows lack the columns needed at all.
pub fn plan_rows(source: Source, rows: &[Row]) -> Result<Plan, String> {
    let name_col = source.name_column();
    let mut plan = Plan::default();
    if let Some(r) = rows.first() {
        for col in [name_col, "max_id"] {
            if !r.cells.contains_key(col) {
                let mut have: Vec<&str> = r.cells.keys().map(String::as_str).collect();
                have.sort_unstable();
                return Err(format!(
                    "the rows of {} have no {col} column (they have: {})",
                    source.table(),
                    have.join(", ")
                ));
            }
        }
    }
    for r in rows {
        let name = r
            .cells
            .get(name_col)
            .and_then(Cell::bytes)
            .map(<[u8]>::to_vec);
        let at = format!("{} {}", source.table(), r.at);
        let Some(name) = name else {
            plan.refuse(b"", at, format!("{name_col} is NULL"));
            continue;
        };
        match floor_of(&r.cells["max_id"]) {
            Ok(floor) => plan.add(name, floor, at),
            Err(why) => plan.refuse(&name, at, format!("max_id {why}")),
        }
    }
    Ok(plan)
}

/// A `max_id` cell as a floor: a whole number, not negative.
fn floor_of(c: &Cell) -> Result<u64, String> {
    if *c == Cell::Null {
        return Err("is NULL".into());
    }
    let text = String::from_utf8_lossy(c.bytes().unwrap_or_default())
        .trim()
        .to_string();
    integer(&text).map_err(|why| format!("{} {why}", c.shown()))
}

/// A decimal integer that may be a floor, or why not.
pub fn integer(s: &str) -> Result<u64, &'static str> {
    let digits = s.strip_prefix('+').unwrap_or(s);
    if let Some(neg) = digits.strip_prefix('-') {
        if !neg.is_empty() && neg.bytes().all(|b| b.is_ascii_digit()) {
            return Err("is negative");
        }
    }
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err("is not an integer");
    }
    digits.parse().map_err(|_| "is above 2^64 - 1")
}

/// The plan of one Redis key and its value (`None`: the key holds no
/// string: a hash, a list, or it expired between `SCAN` and `GET`), as
/// `GET` answered it. A key the Redis-protocol door reads as a uid
/// (`keys`: its mapping, `docs/clients.md`, Keys) is refused: a name's
/// floor would not reach callers who send that key.
pub fn plan_redis(plan: &mut Plan, keys: &KeyMap, key: &[u8], value: Option<&[u8]>) {
    let at = format!("redis key {:?}", String::from_utf8_lossy(key));
    if let Ok(uid) = keys.uid(key) {
        let why = format!("the Redis door reads this key as uid {uid}, not a name");
        return plan.refuse(key, at, why);
    }
    let Some(value) = value else {
        return plan.refuse(
            key,
            at,
            "holds no string value (a hash, list, set, or expired)".into(),
        );
    };
    match std::str::from_utf8(value)
        .map_err(|_| "is not an integer")
        .and_then(integer)
    {
        Ok(floor) => plan.add(key.to_vec(), floor, at),
        Err(why) => {
            let shown: String = String::from_utf8_lossy(value).chars().take(40).collect();
            plan.refuse(key, at, format!("value {shown:?} {why}"));
        }
    }
}

#[cfg(test)]
mod tests;
