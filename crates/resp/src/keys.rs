//! Keys to uids: the one documented mapping (`docs/clients.md`, Keys).
//!
//! By default a key is a bare decimal uid (`42`) or `seq:<uid>`
//! (`seq:42`); leading zeros are allowed (`seq:000000000042`, as
//! `redis-benchmark`'s `__rand_int__` writes it). The prefixes are
//! configurable; every prefix listed names the same uid space, so a
//! family shares a counter with another only where the configuration
//! says so: `user:42` and `order:42` are not uids unless both prefixes
//! are configured.
//!
//! Any other key of 1..=256 bytes is a *name* (a named counter,
//! `docs/counters.md`): [`KeyMap::key`] maps it to its position in the
//! range reserved for names (`seqsvr_core::names`), which is served like
//! any uid. So `user:42` and `order:42` are two names, two counters.

use std::fmt;

use bytes::Bytes;

/// A counter a key names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Key {
    /// A uid (the uid mapping claims the key).
    Uid(u64),
    /// A named counter: the key itself, 1..=256 bytes.
    Name(Bytes),
}

/// How keys map to uids.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyMap {
    /// Prefixes before a decimal uid (`seq:`).
    pub prefixes: Vec<String>,
    /// Whether a bare decimal uid is a key.
    pub bare: bool,
}

impl Default for KeyMap {
    fn default() -> Self {
        KeyMap {
            prefixes: vec!["seq:".to_string()],
            bare: true,
        }
    }
}

/// A key that names no uid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadKey {
    /// The key, as received (lossy UTF-8, cut short).
    pub key: String,
    /// The rule, as configured.
    pub rule: String,
}

impl fmt::Display for BadKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "key '{}' names no counter: keys are {}",
            self.key, self.rule
        )
    }
}

impl KeyMap {
    /// The uid `key` names.
    pub fn uid(&self, key: &[u8]) -> Result<u64, BadKey> {
        self.claims(key).ok_or_else(|| BadKey {
            key: shorten(key),
            rule: self.rule(),
        })
    }

    /// The uid `key` names, if the uid mapping claims it. No error is
    /// built: a key it does not claim is a name, on the hot path of every
    /// named counter.
    fn claims(&self, key: &[u8]) -> Option<u64> {
        if self.bare {
            if let Some(u) = decimal(key) {
                return Some(u);
            }
        }
        self.prefixes
            .iter()
            .find_map(|p| key.strip_prefix(p.as_bytes()).and_then(decimal))
    }

    /// The key `key` is served at: the uid it names if the uid mapping
    /// claims it, else its position as a name (`docs/counters.md`). Only
    /// an empty key or one longer than a name may be is refused.
    pub fn key(&self, key: &[u8]) -> Result<u64, BadKey> {
        self.claims(key).map(Ok).unwrap_or_else(|| {
            seqsvr_core::name_key(key).map_err(|e| BadKey {
                key: shorten(key),
                rule: format!("{}, or a name: {e}", self.rule()),
            })
        })
    }

    /// The counter `key` names: the uid the uid mapping claims it for,
    /// else the name it is (checked: 1..=256 bytes), which has a counter
    /// of its own (`docs/counters.md`).
    pub fn counter(&self, key: &Bytes) -> Result<Key, BadKey> {
        if let Some(u) = self.claims(key) {
            return Ok(Key::Uid(u));
        }
        seqsvr_core::check_name(key).map_err(|e| BadKey {
            key: shorten(key),
            rule: format!("{}, or a name: {e}", self.rule()),
        })?;
        Ok(Key::Name(key.clone()))
    }

    /// The rule in words: `a decimal uid (42) or seq:<uid> (seq:42)`.
    pub fn rule(&self) -> String {
        let mut forms = Vec::new();
        if self.bare {
            forms.push("a decimal uid (42)".to_string());
        }
        for p in &self.prefixes {
            forms.push(format!("{p}<uid> ({p}42)"));
        }
        match forms.len() {
            0 => "none (no key form is configured)".into(),
            1 => forms.remove(0),
            _ => {
                let last = forms.pop().unwrap_or_default();
                format!("{} or {last}", forms.join(", "))
            }
        }
    }
}

/// Decimal digits only (leading zeros allowed), within `u64`.
fn decimal(s: &[u8]) -> Option<u64> {
    if s.is_empty() {
        return None;
    }
    // Leading zeros first (redis-benchmark writes a dozen); then at most
    // 19 digits cannot overflow, and only a 20th needs checking.
    let zeros = s.iter().take_while(|&&b| b == b'0').count();
    let digits = &s[zeros..];
    let (head, last) = match digits.len() {
        0..=19 => (digits, None),
        20 => (&digits[..19], Some(digits[19])),
        _ => return None,
    };
    let mut v: u64 = 0;
    for &b in head {
        let d = b.wrapping_sub(b'0');
        if d > 9 {
            return None;
        }
        v = v * 10 + u64::from(d);
    }
    match last {
        None => Some(v),
        Some(b) => {
            let d = b.wrapping_sub(b'0');
            if d > 9 {
                return None;
            }
            v.checked_mul(10)?.checked_add(u64::from(d))
        }
    }
}

fn shorten(key: &[u8]) -> String {
    let s = String::from_utf8_lossy(&key[..key.len().min(64)]);
    let s: String = s
        .chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .collect();
    if key.len() > 64 {
        format!("{s}…")
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_forms() {
        let k = KeyMap::default();
        for (key, uid) in [
            ("42", 42),
            ("seq:42", 42),
            ("seq:000000000042", 42),
            ("0", 0),
            ("000", 0),
            ("18446744073709551615", u64::MAX),
            ("0000000000000000000018446744073709551615", u64::MAX),
        ] {
            assert_eq!(k.uid(key.as_bytes()), Ok(uid), "{key}");
        }
        for key in [
            "user:42",
            "order:42",
            "seq:",
            "seq:-1",
            "42 ",
            "18446744073709551616",
            "99999999999999999999",
            "000184467440737095516150",
            "4a",
            "",
            "SEQ:1",
        ] {
            let e = k.uid(key.as_bytes()).unwrap_err();
            assert!(
                e.to_string()
                    .contains("a decimal uid (42) or seq:<uid> (seq:42)"),
                "{e}"
            );
        }
    }

    #[test]
    fn keys_the_uid_mapping_does_not_claim_are_names() {
        let k = KeyMap::default();
        assert_eq!(k.key(b"seq:42"), Ok(42));
        assert_eq!(k.key(b"42"), Ok(42));
        for name in ["user:42", "order:20261126", "SEQ:1", "seq:", "42 "] {
            let want = seqsvr_core::name_key(name.as_bytes()).unwrap();
            assert_eq!(k.key(name.as_bytes()), Ok(want), "{name}");
            assert!(seqsvr_core::is_name_key(want));
        }
        assert_ne!(k.key(b"user:42"), k.key(b"order:42"));
        let e = k.key(b"").unwrap_err().to_string();
        assert!(e.contains("a name is 1..=256 bytes, not empty"), "{e}");
        let e = k.key(&[b'k'; 257]).unwrap_err().to_string();
        assert!(e.contains("not 257"), "{e}");
    }

    #[test]
    fn families_share_a_counter_only_when_configured() {
        let k = KeyMap {
            prefixes: vec!["user:".into(), "seq:".into()],
            bare: false,
        };
        assert_eq!(k.uid(b"user:7"), k.uid(b"seq:7"));
        assert!(k.uid(b"7").is_err() && k.uid(b"order:7").is_err());
    }
}
