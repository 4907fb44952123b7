//! The request parser: flat, resumable, with Redis's limits.
//!
//! A request is either a multibulk (`*<n>\r\n` then `n` times
//! `$<len>\r\n<bytes>\r\n`) or an inline line (`PING\r\n`, as
//! `redis-benchmark`'s `PING_INLINE` and a telnet user send). Requests are
//! flat, so the parser has no recursion and no stack to overflow: a
//! multibulk holding a `*` where a `$` belongs is a protocol error, as in
//! Redis.
//!
//! The parser keeps its place between reads (the line scanned so far, the
//! arguments of a multibulk found so far), so a request arriving one byte
//! at a time costs linear time, not quadratic. It never copies an
//! argument: a complete request is split off the read buffer and its
//! arguments are slices of it.
//!
//! Errors carry Redis's own words (`Protocol error: …`); after one the
//! server replies and closes the connection, exactly as Redis does
//! (`docs/architecture/resp.md`, Parser).

use bytes::{Bytes, BytesMut};
use smallvec::SmallVec;

/// Redis's inline-request limit (`PROTO_INLINE_MAX_SIZE`): also the
/// longest `*<n>` or `$<len>` line accepted.
pub const MAX_INLINE: usize = 64 * 1024;

/// Redis's limit on a multibulk's argument count.
pub const MAX_ARGS: usize = 1024 * 1024;

/// The default bulk cap: keys are short, and nothing here needs a long
/// argument (Redis accepts 512 MB).
pub const DEFAULT_MAX_BULK: usize = 64 * 1024;

/// Before `AUTH`, a multibulk may hold at most this many arguments, and
/// each at most [`UNAUTHENTICATED_BULK`] bytes (Redis's own limits).
pub const UNAUTHENTICATED_ARGS: usize = 10;

/// See [`UNAUTHENTICATED_ARGS`].
pub const UNAUTHENTICATED_BULK: usize = 16 * 1024;

/// The parser's limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Longest inline request (and `*`/`$` header line).
    pub max_inline: usize,
    /// Most arguments of one multibulk.
    pub max_args: usize,
    /// Longest bulk argument.
    pub max_bulk: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_inline: MAX_INLINE,
            max_args: MAX_ARGS,
            max_bulk: DEFAULT_MAX_BULK,
        }
    }
}

/// A protocol error: the reply Redis gives (without the `-ERR `), after
/// which the connection is closed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("Protocol error: {0}")]
pub struct ProtoError(pub String);

/// A request's arguments: up to three inline (`INCR key`, `INCRBY key
/// n`), so that the commonest requests cost no allocation of their own.
pub type Args = SmallVec<[Bytes; 3]>;

/// One request: its arguments, the command name first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// The arguments, each a slice of the read buffer.
    pub args: Args,
    /// Whether it came as an inline line.
    pub inline: bool,
}

/// Where a multibulk stands between reads.
#[derive(Debug, Default)]
struct Multibulk {
    /// Arguments announced by `*<n>`.
    count: usize,
    /// Arguments found so far, as ranges of the buffer.
    args: Vec<(usize, usize)>,
    /// The bulk length read from the current `$<len>` line, if any.
    bulk: Option<usize>,
    /// Where the next thing to read starts.
    pos: usize,
}

/// A resumable parser over one connection's read buffer.
#[derive(Debug, Default)]
pub struct Parser {
    /// The multibulk under way, if one is.
    pending: Option<Multibulk>,
    /// The last multibulk's argument list, emptied, for the next one
    /// (kept only while small: no allocation per request, and no memory
    /// held after a large one).
    spare: Vec<(usize, usize)>,
    /// Bytes already searched for the end of a line (from the position
    /// the line starts at): not searched again.
    scanned: usize,
}

/// What one call of [`Parser::next`] found.
#[derive(Debug, PartialEq, Eq)]
pub enum Parsed {
    /// A complete request, taken off the buffer.
    Request(Request),
    /// Bytes that make no request (`*0`, `*-1`, an empty line), taken off
    /// the buffer; Redis answers nothing.
    Nothing,
    /// More bytes are needed.
    Incomplete,
}

impl Parser {
    /// A parser at the start of a request.
    pub fn new() -> Parser {
        Parser::default()
    }

    /// Whether a request has started but not ended (part of it is in the
    /// buffer).
    pub fn in_request(&self) -> bool {
        self.pending.is_some()
    }

    /// Parses the next request at the front of `buf`, taking it off the
    /// buffer when complete. `authenticated` false applies Redis's
    /// stricter limits for callers that have not authenticated.
    pub fn next(
        &mut self,
        buf: &mut BytesMut,
        limits: &Limits,
        authenticated: bool,
    ) -> Result<Parsed, ProtoError> {
        if self.pending.is_none() {
            match buf.first() {
                None => return Ok(Parsed::Incomplete),
                Some(b'*') => {
                    if let Some(req) = whole_multibulk(buf, limits, authenticated) {
                        return Ok(Parsed::Request(req));
                    }
                    self.pending = Some(Multibulk {
                        args: std::mem::take(&mut self.spare),
                        ..Multibulk::default()
                    })
                }
                Some(_) => return self.inline(buf, limits),
            }
        }
        self.multibulk(buf, limits, authenticated)
    }

    /// An inline request: one line, arguments split as Redis splits them.
    fn inline(&mut self, buf: &mut BytesMut, limits: &Limits) -> Result<Parsed, ProtoError> {
        let Some(nl) = self.find(buf, 0, b'\n') else {
            if buf.len() > limits.max_inline {
                return Err(proto("too big inline request"));
            }
            return Ok(Parsed::Incomplete);
        };
        self.scanned = 0;
        let line = buf.split_to(nl + 1).freeze();
        let mut end = nl;
        if end > 0 && line[end - 1] == b'\r' {
            end -= 1;
        }
        let args = crate::split::split_args(&line.slice(..end))
            .ok_or_else(|| proto("unbalanced quotes in request"))?;
        if args.is_empty() {
            return Ok(Parsed::Nothing);
        }
        Ok(Parsed::Request(Request {
            args: args.into(),
            inline: true,
        }))
    }

    /// A multibulk, resumed where the last call stopped.
    fn multibulk(
        &mut self,
        buf: &mut BytesMut,
        limits: &Limits,
        authenticated: bool,
    ) -> Result<Parsed, ProtoError> {
        let mut m = self.pending.take().expect("a multibulk under way");
        let r = self.advance(&mut m, buf, limits, authenticated);
        match r {
            Ok(Step::Done) => {
                let frame = buf.split_to(m.pos).freeze();
                let args = m.args.iter().map(|&(s, e)| frame.slice(s..e)).collect();
                self.keep(m.args);
                Ok(Parsed::Request(Request {
                    args,
                    inline: false,
                }))
            }
            Ok(Step::Empty) => {
                let _ = buf.split_to(m.pos);
                self.keep(m.args);
                Ok(Parsed::Nothing)
            }
            Ok(Step::More) => {
                self.pending = Some(m);
                Ok(Parsed::Incomplete)
            }
            Err(e) => Err(e),
        }
    }

    /// Keeps a finished multibulk's argument list for the next one, if
    /// it is small.
    fn keep(&mut self, mut args: Vec<(usize, usize)>) {
        if args.capacity() <= SPARE_ARGS {
            args.clear();
            self.spare = args;
        }
    }

    fn advance(
        &mut self,
        m: &mut Multibulk,
        buf: &BytesMut,
        limits: &Limits,
        authenticated: bool,
    ) -> Result<Step, ProtoError> {
        if m.pos == 0 {
            let Some(line) = self.line(buf, 0, limits, "too big mbulk count string")? else {
                return Ok(Step::More);
            };
            let n = parse_int(&buf[1..line]);
            m.pos = line + 2;
            match n {
                Some(n) if n <= 0 => return Ok(Step::Empty),
                Some(n) if n as u64 > limits.max_args as u64 => {
                    return Err(proto("invalid multibulk length"))
                }
                Some(n) if !authenticated && n as usize > UNAUTHENTICATED_ARGS => {
                    return Err(proto("unauthenticated multibulk length"))
                }
                Some(n) => {
                    m.count = n as usize;
                    // Reserve for what the header announces only up to a
                    // bound: a stranger's `*1048576` costs no memory
                    // before its arguments arrive.
                    m.args.reserve(m.count.min(1024));
                }
                None => return Err(proto("invalid multibulk length")),
            }
        }
        while m.args.len() < m.count {
            let len = match m.bulk {
                Some(len) => len,
                None => {
                    let Some(&first) = buf.get(m.pos) else {
                        return Ok(Step::More);
                    };
                    if first != b'$' {
                        return Err(proto(&format!(
                            "expected '$', got '{}'",
                            char::from(first).escape_default()
                        )));
                    }
                    let Some(line) = self.line(buf, m.pos, limits, "too big bulk count string")?
                    else {
                        return Ok(Step::More);
                    };
                    let cap = if authenticated {
                        limits.max_bulk
                    } else {
                        limits.max_bulk.min(UNAUTHENTICATED_BULK)
                    };
                    let len = match parse_int(&buf[m.pos + 1..line]) {
                        Some(n) if n >= 0 && n as u64 <= cap as u64 => n as usize,
                        Some(n)
                            if n >= 0 && !authenticated && n as u64 <= limits.max_bulk as u64 =>
                        {
                            return Err(proto("unauthenticated bulk length"))
                        }
                        _ => return Err(proto("invalid bulk length")),
                    };
                    m.pos = line + 2;
                    m.bulk = Some(len);
                    len
                }
            };
            // The data and its CRLF (which Redis skips unread, as here).
            if buf.len() < m.pos + len + 2 {
                return Ok(Step::More);
            }
            m.args.push((m.pos, m.pos + len));
            m.pos += len + 2;
            m.bulk = None;
        }
        Ok(Step::Done)
    }

    /// The position of the `\r` ending the line that starts at `from`,
    /// if the line and the byte after its `\r` are in the buffer (Redis
    /// takes the byte after `\r` as the `\n` unread). A line longer than
    /// the inline limit is the error `what`.
    fn line(
        &mut self,
        buf: &[u8],
        from: usize,
        limits: &Limits,
        what: &str,
    ) -> Result<Option<usize>, ProtoError> {
        match self.find(buf, from, b'\r') {
            Some(cr) if cr + 1 < buf.len() => {
                self.scanned = 0;
                if cr - from > limits.max_inline {
                    return Err(proto(what));
                }
                Ok(Some(cr))
            }
            Some(_) => Ok(None),
            None if buf.len() - from > limits.max_inline => Err(proto(what)),
            None => Ok(None),
        }
    }

    /// The first `byte` at or after `from`, searching only bytes not
    /// searched by an earlier call for the same line.
    fn find(&mut self, buf: &[u8], from: usize, byte: u8) -> Option<usize> {
        let start = from + self.scanned;
        let hit = buf
            .get(start..)
            .and_then(|rest| rest.iter().position(|&b| b == byte))
            .map(|i| start + i);
        if hit.is_none() {
            self.scanned = buf.len().saturating_sub(from);
        }
        hit
    }
}

/// Most arguments of a multibulk [`whole_multibulk`] takes.
const WHOLE_ARGS: usize = 8;

/// Longest `*<n>` or `$<len>` number [`whole_multibulk`] reads: far
/// below every limit's.
const WHOLE_DIGITS: usize = 5;

/// The commonest request in one pass: a multibulk of at most
/// [`WHOLE_ARGS`] arguments, already whole in `buf`, its header lines
/// short and every number in it within the limits — taken off the buffer
/// exactly as the resumable parser would take it (the byte after each
/// `\r` skipped unread, as Redis does), or `None` with nothing taken.
/// Anything else (incomplete, long, over a limit, malformed) is left to
/// [`Parser::next`]'s resumable path, which gives every error: this path
/// decides nothing the other would decide differently.
fn whole_multibulk(buf: &mut BytesMut, limits: &Limits, authenticated: bool) -> Option<Request> {
    if limits.max_inline <= WHOLE_DIGITS {
        return None;
    }
    let b = &buf[..];
    let (count, mut pos) = header_number(b, 0)?;
    let max_args = if authenticated {
        limits.max_args
    } else {
        limits.max_args.min(UNAUTHENTICATED_ARGS)
    };
    if count == 0 || count > WHOLE_ARGS || count > max_args {
        return None;
    }
    let cap = if authenticated {
        limits.max_bulk
    } else {
        limits.max_bulk.min(UNAUTHENTICATED_BULK)
    };
    let mut ranges = [(0usize, 0usize); WHOLE_ARGS];
    for r in ranges.iter_mut().take(count) {
        if b.get(pos) != Some(&b'$') {
            return None;
        }
        let (len, at) = header_number(b, pos)?;
        if len > cap || b.len() < at + len + 2 {
            return None;
        }
        *r = (at, at + len);
        pos = at + len + 2;
    }
    let frame = buf.split_to(pos).freeze();
    let args = ranges[..count]
        .iter()
        .map(|&(s, e)| frame.slice(s..e))
        .collect();
    Some(Request {
        args,
        inline: false,
    })
}

/// The number of a `*<n>\r?` or `$<n>\r?` line starting at `at` (`?`:
/// any byte) and where the next line starts, if the line is whole and
/// its number is 0 or a positive decimal of at most [`WHOLE_DIGITS`]
/// digits without a leading zero (as [`parse_int`] reads it).
#[inline]
fn header_number(b: &[u8], at: usize) -> Option<(usize, usize)> {
    let mut i = at + 1;
    let mut n = 0usize;
    while let Some(&c) = b.get(i) {
        match c {
            b'0'..=b'9' => {
                if i - at > WHOLE_DIGITS
                    || (c == b'0' && i == at + 1 && b.get(i + 1) != Some(&b'\r'))
                {
                    return None;
                }
                n = n * 10 + usize::from(c - b'0');
                i += 1;
            }
            b'\r' if i > at + 1 && i + 1 < b.len() => return Some((n, i + 2)),
            _ => return None,
        }
    }
    None
}

/// The largest argument list a parser keeps between requests.
const SPARE_ARGS: usize = 64;

/// How far a multibulk got.
enum Step {
    Done,
    Empty,
    More,
}

fn proto(what: &str) -> ProtoError {
    ProtoError(what.to_string())
}

/// A strict decimal `i64`, as Redis's `string2ll` reads one: an optional
/// `-`, digits, no leading zero (except `0` itself), nothing else.
pub fn parse_int(s: &[u8]) -> Option<i64> {
    let (neg, digits) = match s.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, s),
    };
    if digits.is_empty() || digits.len() > 19 || (digits[0] == b'0' && (s.len() > 1)) {
        return None;
    }
    let mut v: i128 = 0;
    for &d in digits {
        if !d.is_ascii_digit() {
            return None;
        }
        v = v * 10 + i128::from(d - b'0');
    }
    let v = if neg { -v } else { v };
    i64::try_from(v).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(input: &[u8], authenticated: bool) -> Result<Vec<Vec<Vec<u8>>>, ProtoError> {
        let mut buf = BytesMut::from(input);
        let mut p = Parser::new();
        let mut out = Vec::new();
        loop {
            match p.next(&mut buf, &Limits::default(), authenticated)? {
                Parsed::Request(r) => out.push(r.args.iter().map(|a| a.to_vec()).collect()),
                Parsed::Nothing => {}
                Parsed::Incomplete => return Ok(out),
            }
        }
    }

    fn args(v: &[&str]) -> Vec<Vec<u8>> {
        v.iter().map(|s| s.as_bytes().to_vec()).collect()
    }

    #[test]
    fn multibulk_and_inline() {
        let got = all(
            b"*2\r\n$4\r\nINCR\r\n$6\r\nseq:42\r\nPING\r\n\r\n*0\r\nECHO \"a b\"\n",
            true,
        );
        assert_eq!(
            got.unwrap(),
            vec![
                args(&["INCR", "seq:42"]),
                args(&["PING"]),
                args(&["ECHO", "a b"])
            ]
        );
    }

    #[test]
    fn redis_words_for_bad_input() {
        let cases: &[(&[u8], &str)] = &[
            (b"*x\r\n", "invalid multibulk length"),
            (b"*01\r\n", "invalid multibulk length"),
            (b"*1048577\r\n", "invalid multibulk length"),
            (b"*1\r\n*1\r\n", "expected '*', got '*'"),
            (b"*1\r\n$-2\r\n", "invalid bulk length"),
            (b"*1\r\n$65537\r\n", "invalid bulk length"),
            (b"*1\r\nx\r\n", "expected '$', got 'x'"),
            (b"SET \"a\r\n", "unbalanced quotes in request"),
        ];
        for (input, want) in cases {
            let want = want.replace("'*', got", "'$', got");
            assert_eq!(
                all(input, true).unwrap_err(),
                ProtoError(want.to_string()),
                "{}",
                String::from_utf8_lossy(input)
            );
        }
        assert_eq!(
            all(b"*11\r\n", false).unwrap_err().0,
            "unauthenticated multibulk length"
        );
        assert_eq!(
            all(b"*1\r\n$20000\r\n", false).unwrap_err().0,
            "unauthenticated bulk length"
        );
    }

    #[test]
    fn long_lines_are_refused_at_the_limit() {
        let mut long = vec![b'a'; MAX_INLINE + 1];
        assert_eq!(all(&long, true).unwrap_err().0, "too big inline request");
        long.truncate(MAX_INLINE);
        assert_eq!(all(&long, true).unwrap(), Vec::<Vec<Vec<u8>>>::new());
        let mut star = b"*".to_vec();
        star.extend(vec![b'1'; MAX_INLINE + 1]);
        assert_eq!(
            all(&star, true).unwrap_err().0,
            "too big mbulk count string"
        );
    }

    #[test]
    fn a_short_inline_limit_holds_for_whole_requests_too() {
        let limits = Limits {
            max_inline: 2,
            ..Limits::default()
        };
        let mut buf = BytesMut::from(&b"*2\r\n$4\r\nINCR\r\n$16\r\nseq:000000000042\r\n"[..]);
        assert_eq!(
            Parser::new().next(&mut buf, &limits, true).unwrap_err().0,
            "too big bulk count string"
        );
    }

    #[test]
    fn ints_are_read_strictly() {
        for (s, v) in [
            ("0", Some(0)),
            ("-1", Some(-1)),
            ("12", Some(12)),
            ("9223372036854775807", Some(i64::MAX)),
        ] {
            assert_eq!(parse_int(s.as_bytes()), v, "{s}");
        }
        for s in ["", "-", "01", "+1", "1 ", "9223372036854775808", "-0x"] {
            assert_eq!(parse_int(s.as_bytes()), None, "{s}");
        }
    }
}
