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
