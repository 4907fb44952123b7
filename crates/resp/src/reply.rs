//! Replies and their encoding in RESP2 and RESP3.
//!
//! One [`Reply`] value, two encodings: a connection that said `HELLO 3`
//! gets maps, nulls and the rest in RESP3's own types; any other gets
//! their RESP2 forms (a map as a flat array of key, value, …; a null as
//! `$-1`).

use bytes::{BufMut, Bytes, BytesMut};

/// The protocol a connection speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Proto {
    /// RESP2, every connection's until `HELLO 3`.
    Resp2,
    /// RESP3.
    Resp3,
}

/// One reply.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// `+OK` and the like.
    Simple(&'static str),
    /// An error line: its first word is its code (`ERR`, `NOAUTH` …).
    Error(String),
    /// An integer.
    Int(i64),
    /// A bulk string.
    Bulk(Bytes),
    /// Nothing (`$-1` in RESP2, `_` in RESP3).
    Null,
    /// An array.
    Array(Vec<Reply>),
    /// A map (a flat array in RESP2).
    Map(Vec<(Reply, Reply)>),
}

impl Reply {
    /// `+OK`.
    pub const OK: Reply = Reply::Simple("OK");

    /// A bulk string of `s`.
    pub fn bulk(s: impl Into<Bytes>) -> Reply {
        Reply::Bulk(s.into())
    }

    /// An error with Redis's generic code: `ERR <msg>`.
    pub fn err(msg: impl std::fmt::Display) -> Reply {
        Reply::Error(format!("ERR {msg}"))
    }

    /// Whether this is an error.
    pub fn is_error(&self) -> bool {
        matches!(self, Reply::Error(_))
    }

    /// Appends the encoding of this reply in `proto` to `out`.
    pub fn encode(&self, proto: Proto, out: &mut BytesMut) {
        match self {
            Reply::Simple(s) => line(out, b'+', s.as_bytes()),
            Reply::Error(e) => {
                // An error is one line: a newline in a message would end
                // it early and desynchronise the client.
                let clean: Vec<u8> = e
                    .bytes()
                    .map(|b| if b == b'\r' || b == b'\n' { b' ' } else { b })
                    .collect();
                line(out, b'-', &clean)
            }
            Reply::Int(i) => header(out, b':', *i),
            Reply::Bulk(b) => {
                header(out, b'$', b.len() as i64);
                out.put_slice(b);
                out.put_slice(b"\r\n");
            }
            Reply::Null => match proto {
                Proto::Resp2 => out.put_slice(b"$-1\r\n"),
                Proto::Resp3 => out.put_slice(b"_\r\n"),
            },
            Reply::Array(items) => {
                header(out, b'*', items.len() as i64);
                for r in items {
                    r.encode(proto, out);
                }
            }
            Reply::Map(pairs) => {
                match proto {
                    Proto::Resp2 => header(out, b'*', 2 * pairs.len() as i64),
                    Proto::Resp3 => header(out, b'%', pairs.len() as i64),
                }
                for (k, v) in pairs {
                    k.encode(proto, out);
                    v.encode(proto, out);
                }
            }
        }
    }
}

fn line(out: &mut BytesMut, kind: u8, body: &[u8]) {
    out.reserve(body.len() + 3);
    out.put_u8(kind);
    out.put_slice(body);
    out.put_slice(b"\r\n");
}

/// `<kind><n>\r\n`, the decimal digits written by hand and the whole
/// line put in one copy: most replies are one integer, and `fmt` (or a
/// put per part) costs more than the rest of the encoding.
fn header(out: &mut BytesMut, kind: u8, n: i64) {
    // kind, sign, 19 digits, CRLF.
    let mut line = [0u8; 23];
    let mut at = line.len() - 2;
    line[at..].copy_from_slice(b"\r\n");
    let mut v = n.unsigned_abs();
    loop {
        at -= 1;
        line[at] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    if n < 0 {
        at -= 1;
        line[at] = b'-';
    }
    at -= 1;
    line[at] = kind;
    out.extend_from_slice(&line[at..]);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn enc(r: &Reply, p: Proto) -> String {
        let mut b = BytesMut::new();
        r.encode(p, &mut b);
        String::from_utf8(b.to_vec()).unwrap()
    }

    #[test]
    fn both_protocols() {
        let m = Reply::Map(vec![(Reply::bulk("proto"), Reply::Int(3))]);
        assert_eq!(enc(&m, Proto::Resp2), "*2\r\n$5\r\nproto\r\n:3\r\n");
        assert_eq!(enc(&m, Proto::Resp3), "%1\r\n$5\r\nproto\r\n:3\r\n");
        assert_eq!(enc(&Reply::Null, Proto::Resp2), "$-1\r\n");
        assert_eq!(enc(&Reply::Null, Proto::Resp3), "_\r\n");
        assert_eq!(enc(&Reply::err("a\r\nb"), Proto::Resp2), "-ERR a  b\r\n");
        assert_eq!(enc(&Reply::Int(-7), Proto::Resp3), ":-7\r\n");
        for i in [0, 9, 10, -10, 1 << 40, i64::MAX, i64::MIN] {
            assert_eq!(enc(&Reply::Int(i), Proto::Resp2), format!(":{i}\r\n"));
        }
    }
}
