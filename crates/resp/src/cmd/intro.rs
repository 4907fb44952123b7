//! Introspection as real clients use it: `INFO` (ioredis and node-redis
//! wait while `loading:1`; go-redis reads `redis_version`), `CONFIG GET
//! save|appendonly` (redis-benchmark), `COMMAND [COUNT|DOCS|INFO|LIST]`
//! (redis-cli's hints).

use std::fmt::Write;
use std::sync::atomic::Ordering::Relaxed;

use super::{printable, Fail, Spec, COMMANDS};
use crate::parse::Request;
use crate::reply::Reply;
use crate::state::{Ctx, Session};

/// `INFO [section …]`: the sections named (`default`, `all` or none:
/// every section), as `# Section` blocks of `field:value` lines.
pub fn info(req: &Request, _: &mut Session, ctx: &Ctx) -> Result<Reply, Fail> {
    let wanted: Vec<String> = req.args[1..]
        .iter()
        .map(|a| String::from_utf8_lossy(a).to_lowercase())
        .collect();
    let all = wanted.is_empty()
        || wanted
            .iter()
            .any(|w| matches!(w.as_str(), "all" | "default" | "everything"));
    let s = &ctx.stats;
    let sections: [(&str, Vec<(&str, String)>); 6] = [
        (
            "Server",
            vec![
                ("redis_version", ctx.cfg.version.clone()),
                ("redis_mode", "standalone".into()),
                ("seqsvr_version", env!("CARGO_PKG_VERSION").into()),
                ("arch_bits", (usize::BITS).to_string()),
                ("process_id", std::process::id().to_string()),
                (
                    "uptime_in_seconds",
                    s.started.elapsed().as_secs().to_string(),
                ),
            ],
        ),
        (
            "Clients",
            vec![("connected_clients", s.open.load(Relaxed).to_string())],
        ),
        (
            "Persistence",
            vec![
                ("loading", "0".into()),
                ("async_loading", "0".into()),
                ("aof_enabled", "0".into()),
                ("rdb_bgsave_in_progress", "0".into()),
            ],
        ),
        (
            "Stats",
            vec![
                (
                    "total_connections_received",
                    s.accepted.load(Relaxed).to_string(),
                ),
                (
                    "total_commands_processed",
                    s.commands.load(Relaxed).to_string(),
                ),
            ],
        ),
        (
            "Replication",
            vec![("role", "master".into()), ("connected_slaves", "0".into())],
        ),
        ("Keyspace", vec![]),
    ];
    let mut text = String::new();
    for (name, fields) in sections {
        if !all && !wanted.iter().any(|w| w == &name.to_lowercase()) {
            continue;
        }
        if !text.is_empty() {
            text.push_str("\r\n");
        }
        let _ = write!(text, "# {name}\r\n");
        for (k, v) in fields {
            let _ = write!(text, "{k}:{v}\r\n");
        }
    }
    Ok(Reply::bulk(text))
}

/// `CONFIG GET parameter …`: `save` (none: nothing is snapshotted) and
/// `appendonly` (no: numbers are made durable by the store's ceilings,
/// not by an append-only file); any other parameter matches nothing, as an
/// unknown one does in Redis. Every other `CONFIG` subcommand is refused:
/// the door is configured by its server's config file.
pub fn config(req: &Request, _: &mut Session, _: &Ctx) -> Result<Reply, Fail> {
    if !req.args[1].eq_ignore_ascii_case(b"get") {
        return Err(Fail::err(
            "refused",
            format!(
                "CONFIG {} is refused: only CONFIG GET is served (the server is configured by its config file)",
                printable(&req.args[1]).to_uppercase()
            ),
        ));
    }
    if req.args.len() < 3 {
        return Err(Fail::err(
            "wrong_args",
            "wrong number of arguments for 'config|get' command",
        ));
    }
    const KNOWN: [(&str, &str); 2] = [("save", ""), ("appendonly", "no")];
    let mut pairs = Vec::new();
    for (k, v) in KNOWN {
        let asked = req.args[2..]
            .iter()
            .any(|p| &p[..] == b"*" || p.eq_ignore_ascii_case(k.as_bytes()));
        if asked {
            pairs.push((Reply::bulk(k), Reply::bulk(v)));
        }
    }
    Ok(Reply::Map(pairs))
}

/// `COMMAND`, `COMMAND COUNT`, `COMMAND DOCS [name …]`, `COMMAND INFO
/// [name …]`, `COMMAND LIST`.
pub fn command(req: &Request, _: &mut Session, _: &Ctx) -> Result<Reply, Fail> {
    let Some(sub) = req.args.get(1) else {
        return Ok(Reply::Array(COMMANDS.iter().map(info_of).collect()));
    };
    let named = |f: fn(&Spec) -> Reply| -> Vec<Option<Reply>> {
        req.args[2..]
            .iter()
            .map(|n| super::lookup(n).map(f))
            .collect()
    };
    match String::from_utf8_lossy(sub).to_lowercase().as_str() {
        "count" => Ok(Reply::Int(COMMANDS.len() as i64)),
        "list" => Ok(Reply::Array(
            COMMANDS.iter().map(|s| Reply::bulk(s.name)).collect(),
        )),
        "info" if req.args.len() == 2 => Ok(Reply::Array(COMMANDS.iter().map(info_of).collect())),
        "info" => Ok(Reply::Array(
            named(info_of)
                .into_iter()
                .map(|r| r.unwrap_or(Reply::Null))
                .collect(),
        )),
        "docs" => {
            let specs: Vec<&Spec> = if req.args.len() == 2 {
                COMMANDS.iter().collect()
            } else {
                req.args[2..]
                    .iter()
                    .filter_map(|n| super::lookup(n))
                    .collect()
            };
            Ok(Reply::Map(
                specs
                    .into_iter()
                    .map(|s| (Reply::bulk(s.name), docs_of(s)))
                    .collect(),
            ))
        }
        _ => Err(Fail::err(
            "unknown_command",
            format!("unknown subcommand '{}'. Try COMMAND HELP.", printable(sub)),
        )),
    }
}

/// A command's `COMMAND INFO` entry (Redis 7's ten fields).
fn info_of(s: &Spec) -> Reply {
    Reply::Array(vec![
        Reply::bulk(s.name),
        Reply::Int(s.arity),
        Reply::Array(s.flags.iter().map(|f| Reply::Simple(f)).collect()),
        Reply::Int(s.keys.0),
        Reply::Int(s.keys.1),
        Reply::Int(s.keys.2),
        Reply::Array(vec![]),
        Reply::Array(vec![]),
        Reply::Array(vec![]),
        Reply::Array(vec![]),
    ])
}

/// A command's `COMMAND DOCS` entry.
fn docs_of(s: &Spec) -> Reply {
    let group = if s.keys.0 == 0 {
        "connection"
    } else {
        "string"
    };
    Reply::Map(vec![
        (Reply::bulk("summary"), Reply::bulk(s.summary)),
        (Reply::bulk("since"), Reply::bulk("1.0.0")),
        (Reply::bulk("group"), Reply::bulk(group)),
    ])
}
