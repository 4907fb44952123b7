//! The `set` table of a store's TOML config. TOML integers are signed 64
//! bits, so a span reaching past `2^63 − 1` — the range reserved for named
//! counters starts at `2^63` (`docs/counters.md`) — cannot be written as
//! integers. Such a bound is written as a decimal string
//! (`uid_begin = "9223372036854700000"`); either form is read. The
//! [`SetSpec`] itself keeps its one encoding everywhere else.

use seqsvr_core::SetSpec;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A uid as TOML can hold it.
#[derive(Serialize, Deserialize)]
#[serde(untagged)]
enum BigUid {
    /// Up to `i64::MAX`: a plain integer.
    Int(u64),
    /// Above: decimal digits.
    Text(String),
}

impl BigUid {
    fn of(u: u64) -> Self {
        if u > i64::MAX as u64 {
            BigUid::Text(u.to_string())
        } else {
            BigUid::Int(u)
        }
    }

    fn get<E: serde::de::Error>(self) -> Result<u64, E> {
        match self {
            BigUid::Int(u) => Ok(u),
            BigUid::Text(s) => s
                .parse()
                .map_err(|_| E::custom(format!("{s:?} is not a uid (decimal digits below 2^64)"))),
        }
    }
}

/// [`SetSpec`]'s fields, the uid bounds as [`BigUid`].
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct SpecToml {
    set_id: u32,
    uid_begin: BigUid,
    uid_end: BigUid,
    section_size: u64,
    step: u64,
}

pub(crate) fn serialize<S: Serializer>(spec: &SetSpec, s: S) -> Result<S::Ok, S::Error> {
    SpecToml {
        set_id: spec.set_id,
        uid_begin: BigUid::of(spec.uid_begin),
        uid_end: BigUid::of(spec.uid_end),
        section_size: spec.section_size,
        step: spec.step,
    }
    .serialize(s)
}

pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<SetSpec, D::Error> {
    let t = SpecToml::deserialize(d)?;
    Ok(SetSpec {
        set_id: t.set_id,
        uid_begin: t.uid_begin.get()?,
        uid_end: t.uid_end.get()?,
        section_size: t.section_size,
        step: t.step,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Serialize, Deserialize, PartialEq, Debug)]
    struct Wrap {
        #[serde(with = "super")]
        set: SetSpec,
    }

    #[test]
    fn a_span_above_2_pow_63_round_trips_through_toml() {
        for begin in [0, 1 << 62, (1 << 63) - 75_808] {
            let w = Wrap {
                set: SetSpec::new(2, begin..(1 << 63) + 1_100_000),
            };
            let text = toml::to_string(&w).unwrap();
            assert_eq!(toml::from_str::<Wrap>(&text).unwrap(), w, "{text}");
        }
        let plain =
            "[set]\nset_id = 0\nuid_begin = 0\nuid_end = 100\nsection_size = 10\nstep = 5\n";
        assert_eq!(toml::from_str::<Wrap>(plain).unwrap().set.uid_end, 100);
        let bad = plain.replace("uid_end = 100", "uid_end = \"1e3\"");
        let e = toml::from_str::<Wrap>(&bad).unwrap_err().to_string();
        assert!(e.contains("uid"), "{e}");
    }
}
