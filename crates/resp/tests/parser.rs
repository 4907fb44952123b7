//! The parser against the `redis` crate's encoder: any pipeline of
//! commands it packs parses back into the same arguments, however the
//! bytes are split between reads (every byte boundary).

use bytes::BytesMut;
use proptest::prelude::*;
use seqsvr_resp::{Limits, Parsed, Parser};

fn packed(cmds: &[Vec<Vec<u8>>]) -> Vec<u8> {
    let mut out = Vec::new();
    for c in cmds {
        let mut cmd = redis::cmd(std::str::from_utf8(&c[0]).unwrap());
        for a in &c[1..] {
            cmd.arg(&a[..]);
        }
        out.extend(cmd.get_packed_command());
    }
    out
}

/// Parses `bytes` fed in the pieces `cuts` makes; every request found.
fn parse_in_pieces(bytes: &[u8], cuts: &[usize]) -> Vec<Vec<Vec<u8>>> {
    let limits = Limits::default();
    let mut p = Parser::new();
    let mut buf = BytesMut::new();
    let mut got = Vec::new();
    let mut from = 0;
    for &cut in cuts.iter().chain(std::iter::once(&bytes.len())) {
        buf.extend_from_slice(&bytes[from..cut]);
        from = cut;
        loop {
            match p.next(&mut buf, &limits, true).expect("valid input") {
                Parsed::Request(r) => got.push(r.args.iter().map(|a| a.to_vec()).collect()),
                Parsed::Nothing => {}
                Parsed::Incomplete => break,
            }
        }
    }
    assert!(buf.is_empty() && !p.in_request(), "bytes left over");
    got
}

fn command() -> impl Strategy<Value = Vec<Vec<u8>>> {
    (
        "[A-Z]{1,8}",
        proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..40), 0..6),
    )
        .prop_map(|(name, args)| {
            let mut c = vec![name.into_bytes()];
            c.extend(args);
            c
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn the_encoders_pipelines_parse_back_whatever_the_reads(
        cmds in proptest::collection::vec(command(), 1..6),
        cuts in proptest::collection::vec(any::<prop::sample::Index>(), 0..8),
    ) {
        let bytes = packed(&cmds);
        let mut cuts: Vec<usize> = cuts.iter().map(|i| i.index(bytes.len())).collect();
        cuts.sort();
        prop_assert_eq!(parse_in_pieces(&bytes, &cuts), cmds);
    }
}

#[test]
fn every_split_point_of_a_pipeline() {
    let cmds: Vec<Vec<Vec<u8>>> = vec![
        vec![b"INCR".to_vec(), b"seq:42".to_vec()],
        vec![b"INCRBY".to_vec(), b"7".to_vec(), b"100".to_vec()],
        vec![b"ECHO".to_vec(), b"a\r\nb$*".to_vec()],
        vec![b"MGET".to_vec(), b"1".to_vec(), b"".to_vec(), b"3".to_vec()],
    ];
    let bytes = packed(&cmds);
    for i in 0..=bytes.len() {
        for j in i..=bytes.len() {
            assert_eq!(parse_in_pieces(&bytes, &[i, j]), cmds, "cut at {i}, {j}");
        }
    }
}

#[test]
fn one_byte_at_a_time_costs_linear_time() {
    // 60 KB of one argument fed a byte at a time: with a parser that
    // rescans from the start, 1.8 billion byte visits.
    let arg = vec![b'x'; 60_000];
    let bytes = packed(&[vec![b"ECHO".to_vec(), arg.clone()]]);
    let cuts: Vec<usize> = (1..bytes.len()).collect();
    let t = std::time::Instant::now();
    let got = parse_in_pieces(&bytes, &cuts);
    assert_eq!(got[0][1], arg);
    assert!(
        t.elapsed() < std::time::Duration::from_secs(5),
        "{:?}",
        t.elapsed()
    );
}

/// Everything `bytes` parses into, fed in the pieces `cuts` makes, under
/// `limits` (authenticated or not): each request's arguments, and the
/// protocol error that ended it, if any.
type Outcome = (Vec<Vec<Vec<u8>>>, Option<String>, usize);

fn outcome(bytes: &[u8], cuts: &[usize], limits: &Limits, authenticated: bool) -> Outcome {
    let mut p = Parser::new();
    let mut buf = BytesMut::new();
    let mut got = Vec::new();
    let mut from = 0;
    for &cut in cuts.iter().chain(std::iter::once(&bytes.len())) {
        buf.extend_from_slice(&bytes[from..cut]);
        from = cut;
        loop {
            match p.next(&mut buf, limits, authenticated) {
                Ok(Parsed::Request(r)) => got.push(r.args.iter().map(|a| a.to_vec()).collect()),
                Ok(Parsed::Nothing) => {}
                Ok(Parsed::Incomplete) => break,
                // Where it stopped: the bytes not taken, read or not.
                Err(e) => return (got, Some(e.0), buf.len() + bytes.len() - from),
            }
        }
    }
    (got, None, buf.len())
}

/// Bytes near valid requests: valid multibulks cut, joined and mutated
/// with the characters the grammar turns on.
fn near_requests() -> impl Strategy<Value = Vec<u8>> {
    (
        proptest::collection::vec(command(), 1..4),
        proptest::collection::vec(
            (
                any::<prop::sample::Index>(),
                prop::sample::select(b"*$\r\n0123456789-+ x".to_vec()),
            ),
            0..4,
        ),
    )
        .prop_map(|(cmds, edits)| {
            let mut b = packed(&cmds);
            for (at, c) in edits {
                let i = at.index(b.len());
                b[i] = c;
            }
            b
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]

    /// A whole request in the buffer takes a one-pass path; a request
    /// that arrives in pieces, the resumable one. Whatever the bytes —
    /// valid, cut short, or broken — and whatever the limits, both give
    /// the same requests, the same error at the same place, and leave
    /// the same bytes.
    #[test]
    fn whole_and_in_pieces_agree_on_any_bytes(
        bytes in near_requests(),
        authenticated in any::<bool>(),
        max_bulk in prop::sample::select(vec![0usize, 1, 5, 16, 64 * 1024]),
        max_args in prop::sample::select(vec![1usize, 2, 3, 1024 * 1024]),
    ) {
        // The inline limit stays Redis's: an inline line over it is
        // refused only once that many bytes are buffered without a
        // newline (as in Redis), which depends on the reads by design.
        let limits = Limits { max_args, max_bulk, ..Limits::default() };
        let whole = outcome(&bytes, &[], &limits, authenticated);
        let cuts: Vec<usize> = (1..bytes.len()).collect();
        let bytewise = outcome(&bytes, &cuts, &limits, authenticated);
        prop_assert_eq!(whole, bytewise);
    }
}
