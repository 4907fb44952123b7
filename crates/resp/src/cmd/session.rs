//! Handshake and connection state: `PING`, `ECHO`, `QUIT`, `RESET`,
//! `SELECT`, `HELLO`, `AUTH`, `CLIENT`. Replies and errors as Redis words
//! them, because clients match on them (`NOPROTO`, `NOAUTH`, `WRONGPASS`).

use bytes::Bytes;

use super::{not_integer, printable, syntax, wrong_args, Fail};
use crate::parse::{parse_int, Request};
use crate::reply::{Proto, Reply};
use crate::state::{Ctx, Session};

/// `PING [message]`.
pub fn ping(req: &Request, _: &mut Session, _: &Ctx) -> Result<Reply, Fail> {
    match req.args.len() {
        1 => Ok(Reply::Simple("PONG")),
        2 => Ok(Reply::Bulk(req.args[1].clone())),
        _ => Err(wrong_args("ping")),
    }
}

/// `ECHO message`.
pub fn echo(req: &Request, _: &mut Session, _: &Ctx) -> Result<Reply, Fail> {
    Ok(Reply::Bulk(req.args[1].clone()))
}

/// `QUIT`: `+OK`, then the connection closes.
pub fn quit(_: &Request, s: &mut Session, _: &Ctx) -> Result<Reply, Fail> {
    s.close = true;
    Ok(Reply::OK)
}

/// `RESET`: RESP2, no name, no transaction, and not authenticated when
/// the door requires `AUTH`.
pub fn reset(_: &Request, s: &mut Session, ctx: &Ctx) -> Result<Reply, Fail> {
    s.proto = Proto::Resp2;
    s.name = None;
    s.authed = ctx.cfg.auth.is_none();
    Ok(Reply::Simple("RESET"))
}

/// `SELECT 0`: the only database.
pub fn select(req: &Request, _: &mut Session, _: &Ctx) -> Result<Reply, Fail> {
    match parse_int(&req.args[1]) {
        Some(0) => Ok(Reply::OK),
        Some(_) => Err(Fail::err("db_range", "DB index is out of range")),
        None => Err(not_integer()),
    }
}

/// `AUTH [user] password`.
pub fn auth(req: &Request, s: &mut Session, ctx: &Ctx) -> Result<Reply, Fail> {
    let (user, pass) = match &req.args[1..] {
        [pass] => (None, pass),
        [user, pass] => (Some(user), pass),
        _ => return Err(syntax()),
    };
    authenticate(s, ctx, user, pass)?;
    Ok(Reply::OK)
}

fn authenticate(
    s: &mut Session,
    ctx: &Ctx,
    user: Option<&Bytes>,
    pass: &Bytes,
) -> Result<(), Fail> {
    let ok = match &ctx.cfg.auth {
        Some(c) => c.check(user.map(|u| &u[..]), pass),
        // No password: the default user takes any password (Redis's
        // `nopass`), but `AUTH <password>` alone is a mistake Redis names.
        None if user.is_none() => {
            return Err(Fail::err(
                "wrongpass",
                "AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?",
            ))
        }
        None => user.is_some_and(|u| &u[..] == b"default"),
    };
    if !ok {
        return Err(Fail::coded(
            "wrongpass",
            "WRONGPASS invalid username-password pair or user is disabled.",
        ));
    }
    s.authed = true;
    Ok(())
}

/// `HELLO [protover [AUTH user pass] [SETNAME name]]`: the map Redis
/// returns, in the protocol asked for.
pub fn hello(req: &Request, s: &mut Session, ctx: &Ctx) -> Result<Reply, Fail> {
    let mut proto = s.proto;
    let mut args = req.args[1..].iter();
    if let Some(v) = args.next() {
        proto = match parse_int(v) {
            Some(2) => Proto::Resp2,
            Some(3) => Proto::Resp3,
            Some(_) => {
                return Err(Fail::coded(
                    "noproto",
                    "NOPROTO unsupported protocol version",
                ))
            }
            None => {
                return Err(Fail::err(
                    "not_integer",
                    "Protocol version is not an integer or out of range",
                ))
            }
        };
    }
    let (mut creds, mut name) = (None, None);
    while let Some(opt) = args.next() {
        let bad = || {
            Fail::err(
                "syntax",
                format!("Syntax error in HELLO option '{}'", printable(opt)),
            )
        };
        if opt.eq_ignore_ascii_case(b"auth") {
            let (Some(u), Some(p)) = (args.next(), args.next()) else {
                return Err(bad());
            };
            creds = Some((u, p));
        } else if opt.eq_ignore_ascii_case(b"setname") {
            name = Some(args.next().ok_or_else(bad)?);
        } else {
            return Err(bad());
        }
    }
    match creds {
        Some((u, p)) => authenticate(s, ctx, Some(u), p)?,
        None if !s.authed => {
            return Err(Fail::coded(
                "noauth",
                "NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time",
            ))
        }
        None => {}
    }
    if let Some(n) = name {
        s.name = Some(check_name(n)?);
    }
    s.proto = proto;
    let p = match proto {
        Proto::Resp2 => 2,
        Proto::Resp3 => 3,
    };
    Ok(Reply::Map(vec![
        (Reply::bulk("server"), Reply::bulk("redis")),
        (Reply::bulk("version"), Reply::bulk(ctx.cfg.version.clone())),
        (Reply::bulk("proto"), Reply::Int(p)),
        (Reply::bulk("id"), Reply::Int(s.id as i64)),
        (Reply::bulk("mode"), Reply::bulk("standalone")),
        (Reply::bulk("role"), Reply::bulk("master")),
        (Reply::bulk("modules"), Reply::Array(vec![])),
    ]))
}

/// A client name: Redis allows no spaces, newlines or special
/// characters.
fn check_name(n: &Bytes) -> Result<Bytes, Fail> {
    if n.iter().any(|&b| !(b'!'..=b'~').contains(&b)) {
        return Err(Fail::err(
            "syntax",
            "Client names cannot contain spaces, newlines or special characters.",
        ));
    }
    Ok(n.clone())
}

/// `CLIENT SETNAME|GETNAME|ID|SETINFO`.
pub fn client(req: &Request, s: &mut Session, _: &Ctx) -> Result<Reply, Fail> {
    let sub = String::from_utf8_lossy(&req.args[1]).to_lowercase();
    let n = req.args.len();
    let arity = |want: usize| {
        if n == want {
            Ok(())
        } else {
            Err(Fail::err(
                "wrong_args",
                format!("wrong number of arguments for 'client|{sub}' command"),
            ))
        }
    };
    match sub.as_str() {
        "setname" => {
            arity(3)?;
            let name = check_name(&req.args[2])?;
            // An empty name clears it, as in Redis.
            s.name = (!name.is_empty()).then_some(name);
            Ok(Reply::OK)
        }
        "getname" => {
            arity(2)?;
            Ok(s.name.clone().map_or(Reply::Null, Reply::Bulk))
        }
        "id" => {
            arity(2)?;
            Ok(Reply::Int(s.id as i64))
        }
        "setinfo" => {
            arity(4)?;
            let attr = &req.args[2];
            if attr.eq_ignore_ascii_case(b"lib-name") || attr.eq_ignore_ascii_case(b"lib-ver") {
                Ok(Reply::OK)
            } else {
                Err(Fail::err(
                    "syntax",
                    format!("Unrecognized option '{}'", printable(attr)),
                ))
            }
        }
        _ => Err(Fail::err(
            "unknown_command",
            format!(
                "unknown subcommand '{}'. Try CLIENT HELP.",
                printable(&req.args[1])
            ),
        )),
    }
}
