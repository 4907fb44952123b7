//! The single encoding used for everything seqsvr writes to disk or sends
//! between its own processes outside protobuf (Raft log entries, votes,
//! state-machine records, snapshots, Raft RPC payloads).
//!
//! Layout: one format-version byte, then the bincode 2 (standard config)
//! serde encoding of the value. bincode 2.x is unmaintained
//! (RUSTSEC-2025-0141); keeping every call behind [`encode`]/[`decode`] means
//! a replacement is one module and one new version byte, and old data stays
//! readable by dispatching on the byte.
//!
//! Keys are *not* encoded here: sled keys are fixed-width big-endian integers
//! (see [`key_u64`]) so that ordered scans follow numeric order.

use serde::{de::DeserializeOwned, Serialize};

use crate::error::{Error, Result};

/// Version byte written in front of every encoded value.
pub const FORMAT_V1: u8 = 1;

fn config() -> bincode::config::Configuration {
    bincode::config::standard()
}

/// Encodes `value` as `[FORMAT_V1, bincode…]`.
pub fn encode<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>> {
    let mut out = vec![FORMAT_V1];
    bincode::serde::encode_into_std_write(value, &mut out, config())
        .map_err(|e| Error::Encode(e.to_string()))?;
    Ok(out)
}

/// Decodes bytes written by [`encode`]. `what` names the value in errors.
///
/// Trailing bytes are an error: a value either decodes exactly or not at all.
pub fn decode<T: DeserializeOwned>(what: &str, bytes: &[u8]) -> Result<T> {
    let err = |reason: String| Error::Decode {
        what: what.to_string(),
        reason,
    };
    match bytes.split_first() {
        None => Err(err("empty input".into())),
        Some((&FORMAT_V1, body)) => {
            let (value, used) = bincode::serde::decode_from_slice(body, config())
                .map_err(|e| err(e.to_string()))?;
            if used != body.len() {
                return Err(err(format!("{} trailing bytes", body.len() - used)));
            }
            Ok(value)
        }
        Some((v, _)) => Err(err(format!("unknown format version {v}"))),
    }
}

/// A fixed-width big-endian key, so byte order equals numeric order.
pub fn key_u64(n: u64) -> [u8; 8] {
    n.to_be_bytes()
}

/// Inverse of [`key_u64`]; `None` if the key is not 8 bytes.
pub fn u64_of_key(key: &[u8]) -> Option<u64> {
    Some(u64::from_be_bytes(key.try_into().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[derive(serde::Serialize, serde::Deserialize, Debug, PartialEq)]
    struct Sample {
        a: u64,
        b: Option<String>,
        c: Vec<u32>,
    }

    #[test]
    fn golden_bytes_are_stable() {
        // A change here changes the on-disk format: bump the version byte.
        let v = Sample {
            a: 300,
            b: Some("x".into()),
            c: vec![1, 2],
        };
        let bytes = encode(&v).unwrap();
        assert_eq!(bytes, vec![1, 251, 44, 1, 1, 1, b'x', 2, 1, 2]);
        assert_eq!(decode::<Sample>("sample", &bytes).unwrap(), v);
    }

    #[test]
    fn rejects_bad_input() {
        assert!(matches!(decode::<u64>("x", &[]), Err(Error::Decode { .. })));
        assert!(matches!(
            decode::<u64>("x", &[9, 1]),
            Err(Error::Decode { .. })
        ));
        assert!(matches!(
            decode::<u64>("x", &[1]),
            Err(Error::Decode { .. })
        ));
        assert!(matches!(
            decode::<u64>("x", &[1, 1, 7]),
            Err(Error::Decode { .. })
        ));
    }

    proptest! {
        #[test]
        fn roundtrip(a: u64, b: Option<String>, c: Vec<u32>) {
            let v = Sample { a, b, c };
            prop_assert_eq!(decode::<Sample>("s", &encode(&v).unwrap()).unwrap(), v);
        }

        #[test]
        fn keys_sort_numerically(x: u64, y: u64) {
            prop_assert_eq!(x.cmp(&y), key_u64(x).cmp(&key_u64(y)));
            prop_assert_eq!(u64_of_key(&key_u64(x)), Some(x));
        }
    }
}
