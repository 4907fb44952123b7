//! The command table and the planning of one request: which command it
//! is, whether its arguments are right, and what it needs to run (the
//! backend, or only the connection). One file per group of commands:
//! `session` (handshake and connection state), `intro` (`INFO`,
//! `CONFIG`, `COMMAND`), `counter` (`INCR`, `INCRBY`, `GET`, `MGET`,
//! `SEQ.BATCH`), `ids` (`SEQ.ID`, `SEQ.DECODE`: time-ordered ids).

pub mod counter;
pub mod ids;
pub mod intro;
pub mod session;

use bytes::Bytes;

use crate::parse::Request;
use crate::reply::Reply;
use crate::state::{Ctx, Session};

pub use counter::Op;

/// A command the door knows.
#[derive(Debug)]
pub struct Spec {
    /// Its name, lower case.
    pub name: &'static str,
    /// Redis's arity: `n` exactly `n` arguments (the name included),
    /// `-n` at least `n`.
    pub arity: i64,
    /// Redis's command flags, as `COMMAND` lists them.
    pub flags: &'static [&'static str],
    /// First key, last key, step (`COMMAND`'s key positions).
    pub keys: (i64, i64, i64),
    /// One line for `COMMAND DOCS`.
    pub summary: &'static str,
    /// What it does here.
    pub kind: Kind,
}

/// What a command does.
#[derive(Debug, Clone, Copy)]
pub enum Kind {
    /// Runs on the connection alone.
    Local(LocalFn),
    /// Needs the backend: planned into an [`Op`].
    Counter(fn(&Request, &Ctx) -> Result<Op, Fail>),
    /// `MULTI`, `EXEC`, `DISCARD`: handled by the connection.
    Multi,
    /// `EXEC`.
    Exec,
    /// `DISCARD`.
    Discard,
}

/// A command run on the connection alone.
pub type LocalFn = fn(&Request, &mut Session, &Ctx) -> Result<Reply, Fail>;

/// An error reply and its kind (for the errors metric).
#[derive(Debug, Clone, PartialEq)]
pub struct Fail {
    /// The kind: a short fixed word (`wrong_args`, `bad_key` …).
    pub kind: &'static str,
    /// The reply.
    pub reply: Reply,
}

impl Fail {
    /// `ERR <msg>` of `kind`.
    pub fn err(kind: &'static str, msg: impl std::fmt::Display) -> Fail {
        Fail {
            kind,
            reply: Reply::err(msg),
        }
    }

    /// An error whose first word is its own code (`NOAUTH …`).
    pub fn coded(kind: &'static str, line: impl Into<String>) -> Fail {
        Fail {
            kind,
            reply: Reply::Error(line.into()),
        }
    }
}

const NO_AUTH: &[&str] = &[
    "noscript",
    "loading",
    "stale",
    "fast",
    "no-auth",
    "allow-busy",
];
const CONN: &[&str] = &["noscript", "loading", "stale", "fast"];
const WRITE: &[&str] = &["write", "denyoom", "fast"];
const READ: &[&str] = &["readonly", "fast"];
const NO_KEYS: (i64, i64, i64) = (0, 0, 0);

/// Every command the door answers (others are refused with a reason, or
/// unknown, as Redis words it).
pub const COMMANDS: &[Spec] = &[
    spec(
        "ping",
        -1,
        CONN,
        NO_KEYS,
        "Returns the server's liveliness response.",
        Kind::Local(session::ping),
    ),
    spec(
        "echo",
        2,
        CONN,
        NO_KEYS,
        "Returns the given string.",
        Kind::Local(session::echo),
    ),
    spec(
        "quit",
        -1,
        NO_AUTH,
        NO_KEYS,
        "Closes the connection.",
        Kind::Local(session::quit),
    ),
    spec(
        "reset",
        1,
        NO_AUTH,
        NO_KEYS,
        "Resets the connection.",
        Kind::Local(session::reset),
    ),
    spec(
        "select",
        2,
        CONN,
        NO_KEYS,
        "Changes the selected database (only 0 exists).",
        Kind::Local(session::select),
    ),
    spec(
        "hello",
        -1,
        NO_AUTH,
        NO_KEYS,
        "Handshakes with the server.",
        Kind::Local(session::hello),
    ),
    spec(
        "auth",
        -2,
        NO_AUTH,
        NO_KEYS,
        "Authenticates the connection.",
        Kind::Local(session::auth),
    ),
    spec(
        "client",
        -2,
        CONN,
        NO_KEYS,
        "CLIENT SETNAME, GETNAME, ID, SETINFO.",
        Kind::Local(session::client),
    ),
    spec(
        "info",
        -1,
        CONN,
        NO_KEYS,
        "Returns information and statistics about the server.",
        Kind::Local(intro::info),
    ),
    spec(
        "config",
        -2,
        CONN,
        NO_KEYS,
        "CONFIG GET (save, appendonly).",
        Kind::Local(intro::config),
    ),
    spec(
        "command",
        -1,
        CONN,
        NO_KEYS,
        "Returns detailed information about all commands.",
        Kind::Local(intro::command),
    ),
    spec(
        "multi",
        1,
        CONN,
        NO_KEYS,
        "Starts a transaction.",
        Kind::Multi,
    ),
    spec(
        "exec",
        1,
        CONN,
        NO_KEYS,
        "Executes all commands in a transaction, in order.",
        Kind::Exec,
    ),
    spec(
        "discard",
        1,
        CONN,
        NO_KEYS,
        "Discards a transaction.",
        Kind::Discard,
    ),
    spec(
        "incr",
        2,
        WRITE,
        (1, 1, 1),
        "Hands out the uid's next sequence number.",
        Kind::Counter(counter::incr),
    ),
    spec(
        "incrby",
        3,
        WRITE,
        (1, 1, 1),
        "Reserves n sequence numbers of the uid; returns the last.",
        Kind::Counter(counter::incrby),
    ),
    spec(
        "get",
        2,
        READ,
        (1, 1, 1),
        "Returns the uid's current value (no mutation).",
        Kind::Counter(counter::get),
    ),
    spec(
        "mget",
        -2,
        READ,
        (1, -1, 1),
        "Returns the current values of many uids (no mutation).",
        Kind::Counter(counter::mget),
    ),
    spec(
        "seq.batch",
        -2,
        WRITE,
        (1, -1, 1),
        "Hands out one number to each uid, in order (a group's fan-out).",
        Kind::Counter(counter::batch),
    ),
    spec(
        "seq.id",
        -2,
        WRITE,
        NO_KEYS,
        "Hands out n time-ordered 64-bit ids of a namespace (one: an integer).",
        Kind::Counter(ids::seq_id),
    ),
    spec(
        "seq.decode",
        -2,
        READ,
        NO_KEYS,
        "Takes a time-ordered id apart: namespace, time, worker, sequence.",
        Kind::Counter(ids::seq_decode),
    ),
];

#[allow(clippy::too_many_arguments)]
const fn spec(
    name: &'static str,
    arity: i64,
    flags: &'static [&'static str],
    keys: (i64, i64, i64),
    summary: &'static str,
    kind: Kind,
) -> Spec {
    Spec {
        name,
        arity,
        flags,
        keys,
        summary,
        kind,
    }
}

/// Redis commands refused, and why: sequence numbers only go up (promise
/// 1), are never set by a caller and never expire.
pub const REFUSED: &[(&str, &str)] = &[
    ("decr", "numbers never go down"),
    ("decrby", "numbers never go down"),
    ("incrbyfloat", "numbers are whole"),
    ("set", "numbers are handed out, never set"),
    ("setnx", "numbers are handed out, never set"),
    ("setex", "numbers are handed out, never set"),
    ("psetex", "numbers are handed out, never set"),
    ("getset", "numbers are handed out, never set"),
    ("getex", "numbers never expire"),
    ("getdel", "numbers are never deleted"),
    ("mset", "numbers are handed out, never set"),
    ("msetnx", "numbers are handed out, never set"),
    ("append", "numbers are handed out, never set"),
    ("setrange", "numbers are handed out, never set"),
    ("del", "numbers are never deleted"),
    ("unlink", "numbers are never deleted"),
    ("rename", "numbers are never moved"),
    ("renamenx", "numbers are never moved"),
    ("copy", "numbers are never copied"),
    ("move", "numbers are never moved"),
    ("restore", "numbers are handed out, never set"),
    ("expire", "numbers never expire"),
    ("pexpire", "numbers never expire"),
    ("expireat", "numbers never expire"),
    ("pexpireat", "numbers never expire"),
    ("persist", "numbers never expire"),
    ("flushdb", "numbers are never deleted"),
    ("flushall", "numbers are never deleted"),
    ("swapdb", "only database 0 exists"),
];

/// The command `name` names (any case).
pub fn lookup(name: &[u8]) -> Option<&'static Spec> {
    position(name).map(|i| &COMMANDS[i])
}

/// Where `INCR` is in [`COMMANDS`]: most requests are one.
const INCR: usize = 14;

/// Where in [`COMMANDS`] the command `name` names (any case) is.
pub fn position(name: &[u8]) -> Option<usize> {
    if name.eq_ignore_ascii_case(b"incr") {
        return Some(INCR);
    }
    COMMANDS
        .iter()
        .position(|s| s.name.as_bytes().eq_ignore_ascii_case(name))
}

/// Checks the arity of `req` against `spec`.
pub fn check_arity(spec: &Spec, req: &Request) -> Result<(), Fail> {
    let n = req.args.len() as i64;
    let ok = if spec.arity >= 0 {
        n == spec.arity
    } else {
        n >= -spec.arity
    };
    if ok {
        Ok(())
    } else {
        Err(wrong_args(spec.name))
    }
}

/// Redis's wrong-arity error.
pub fn wrong_args(name: &str) -> Fail {
    Fail::err(
        "wrong_args",
        format!("wrong number of arguments for '{name}' command"),
    )
}

/// The error for a name not in [`COMMANDS`]: the reason for a refused
/// Redis command, Redis's own words for an unknown one.
pub fn not_served(req: &Request) -> Fail {
    let name = String::from_utf8_lossy(&req.args[0]).to_lowercase();
    if let Some((_, why)) = REFUSED.iter().find(|(n, _)| *n == name) {
        return Fail::err(
            "refused",
            format!(
                "{} is refused: sequence numbers only go up, one at a time or by INCRBY; {why} (see the seqsvr client docs)",
                name.to_uppercase()
            ),
        );
    }
    let mut msg = format!(
        "unknown command '{}', with args beginning with: ",
        printable(&req.args[0])
    );
    for a in req.args.iter().skip(1).take(10) {
        msg.push_str(&format!("'{}' ", printable(a)));
    }
    Fail::err("unknown_command", msg)
}

/// An argument as an error message may show it: at most 128 characters,
/// control characters replaced (Redis shows them escaped).
pub fn printable(a: &Bytes) -> String {
    String::from_utf8_lossy(&a[..a.len().min(128)])
        .chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .collect()
}

/// Redis's "value is not an integer or out of range".
pub fn not_integer() -> Fail {
    Fail::err("not_integer", "value is not an integer or out of range")
}

/// Redis's "syntax error".
pub fn syntax() -> Fail {
    Fail::err("syntax", "syntax error")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_is_found_at_its_place() {
        assert_eq!(COMMANDS[INCR].name, "incr");
        for (i, spec) in COMMANDS.iter().enumerate() {
            assert_eq!(position(spec.name.as_bytes()), Some(i));
            assert_eq!(position(spec.name.to_uppercase().as_bytes()), Some(i));
        }
        assert_eq!(position(b"incrx"), None);
        assert_eq!(position(b"inc"), None);
    }
}
