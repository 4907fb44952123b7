//! Named counters: any string key is a counter (`docs/counters.md`).
//!
//! A name is routed like a uid: it hashes to a *position*, one key of a
//! range of the key space reserved for names ([`NAME_KEYS`]). That range
//! is served by a set like any uids, so the position has a section, an
//! owner, a lease, an epoch and a ceiling: sets, moves, leases, fencing,
//! skip ahead after a take-over and forwarding apply to names unchanged,
//! and so do promises 1-5 (`docs/architecture/promises.md`). The name
//! travels with the call, and the owner keeps a counter per name under
//! the position's section (its ceiling covers every name in it).
//!
//! What a caller may observe (`docs/counters.md`): gaps (after a take-over,
//! or when a name the owner forgot is recreated above its section's
//! forgotten names); two names at one position never share a counter.
//!
//! The mapping is part of the wire contract: every door and every client
//! computes it alike, and a name must keep its position for ever (a new
//! position would start at 0). [`name_key`] is therefore pinned by a golden
//! test and must never change.

use std::ops::Range;

use crate::section::Uid;

/// Longest name, in bytes.
pub const MAX_NAME_LEN: usize = 256;

/// First key of the range reserved for names: `2^63`, far above any uid
/// a backend assigns, so no uid is ever read as a name's position.
pub const NAME_KEY_BEGIN: Uid = 1 << 63;

/// How many positions names hash to: `2^20`. A set serving the whole
/// range holds 8 bytes a position (8 MiB) besides the names it holds.
pub const NAME_KEY_COUNT: u64 = 1 << 20;

/// The keys reserved for names: `[2^63, 2^63 + 2^20)`.
pub const NAME_KEYS: Range<Uid> = NAME_KEY_BEGIN..NAME_KEY_BEGIN + NAME_KEY_COUNT;

/// Why a string is not a name. Nothing is handed out for it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    /// The empty string.
    #[error("a name is 1..={MAX_NAME_LEN} bytes, not empty")]
    Empty,
    /// Longer than [`MAX_NAME_LEN`].
    #[error("a name is 1..={MAX_NAME_LEN} bytes, not {len}")]
    TooLong {
        /// Its length in bytes.
        len: usize,
    },
}

/// Checks that `name` is a name (1..=[`MAX_NAME_LEN`] bytes, any bytes).
pub fn check_name(name: &[u8]) -> Result<(), NameError> {
    match name.len() {
        0 => Err(NameError::Empty),
        len if len > MAX_NAME_LEN => Err(NameError::TooLong { len }),
        _ => Ok(()),
    }
}

/// The key (position) `name` is served at: in [`NAME_KEYS`], the same in
/// every process and every version (module docs).
pub fn name_key(name: &[u8]) -> Result<Uid, NameError> {
    check_name(name)?;
    Ok(NAME_KEY_BEGIN + mix(fnv1a(name)) % NAME_KEY_COUNT)
}

/// Whether `key` is a name's position.
pub fn is_name_key(key: Uid) -> bool {
    NAME_KEYS.contains(&key)
}

/// FNV-1a, 64 bits: fixed, with no per-process seed (a seeded hash would
/// send one name to two positions in two processes).
fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// SplitMix64's finalizer: spreads FNV's low bits, which are weak for
/// short names differing in their last byte.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The mapping must never change (module docs): these positions are
    /// what every deployed client and door computes.
    #[test]
    fn golden_positions() {
        let got: Vec<(&str, u64)> = ["a", "b", "order:20261126", "group:42:msg", "x"]
            .iter()
            .map(|n| (*n, name_key(n.as_bytes()).unwrap() - NAME_KEY_BEGIN))
            .collect();
        assert_eq!(
            got,
            vec![
                ("a", 270_584),
                ("b", 746_501),
                ("order:20261126", 1_020_270),
                ("group:42:msg", 341_244),
                ("x", 71_822),
            ]
        );
    }

    #[test]
    fn bad_names_are_refused() {
        assert_eq!(name_key(b""), Err(NameError::Empty));
        let long = vec![b'n'; MAX_NAME_LEN + 1];
        assert_eq!(name_key(&long), Err(NameError::TooLong { len: 257 }));
        assert!(name_key(&long[..MAX_NAME_LEN]).is_ok());
        assert_eq!(
            NameError::TooLong { len: 300 }.to_string(),
            "a name is 1..=256 bytes, not 300"
        );
    }

    #[test]
    fn positions_spread() {
        // 100,000 names over 2^20 positions: about 4.6 % share one
        // (birthday); far more would mean a weak hash.
        let mut seen = std::collections::HashSet::new();
        let shared = (0..100_000)
            .filter(|i| !seen.insert(name_key(format!("order:{i}").as_bytes()).unwrap()))
            .count();
        assert!(shared < 6_000, "{shared} names share a position");
    }

    proptest! {
        #[test]
        fn every_name_has_one_position_in_the_range(name in proptest::collection::vec(any::<u8>(), 1..=MAX_NAME_LEN)) {
            let k = name_key(&name).unwrap();
            prop_assert!(is_name_key(k));
            prop_assert_eq!(name_key(&name.clone()).unwrap(), k);
        }
    }
}
