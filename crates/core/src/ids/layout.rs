//! An id *layout*: how a 64-bit time-ordered id splits into time, worker
//! and sequence bits, where its time starts (the epoch) and how long one
//! time *tick* is (the unit). Validated once, when a namespace is created;
//! encode and decode never produce a value outside the layout's bits
//! (docs/ids.md, Layouts).

use serde::{Deserialize, Serialize};

use super::IdError;

/// Most bits an id may use: the sign bit stays clear, so an id is a
/// positive `i64` in every database and language that has one.
pub const MAX_BITS: u32 = 63;
/// Most bits of a JavaScript-safe id: every integer up to 2^53 is exact in
/// an IEEE double.
pub const JS_SAFE_BITS: u32 = 53;
/// Longest tick accepted (one day): a coarser clock orders nothing.
pub const MAX_UNIT_MS: u64 = 86_400_000;
/// The ticks a layout may use, in ms, with their names: a fixed list, so
/// that a typo (`--unit 3`) is refused rather than kept for a namespace's
/// whole life.
pub const UNITS: [(&str, u64); 7] = [
    ("1ms", 1),
    ("10ms", 10),
    ("100ms", 100),
    ("1s", 1_000),
    ("1m", 60_000),
    ("1h", 3_600_000),
    ("1d", MAX_UNIT_MS),
];
/// Most shard bits of a scattered layout (32,768 shards, TiDB's
/// AUTO_RANDOM limit is 15 as well).
pub const MAX_SHARD_BITS: u32 = 15;

/// Which of worker and sequence sit in the low bits, and whether the id
/// is *scattered*. Time is on top of the unscattered id, so unscattered
/// ids sort by time first.
///
/// Scattering lives here, in the last field of [`Layout`], as a variant
/// appended after the two orders: layouts encoded before it existed (in
/// Raft log entries, records and snapshots) decode unchanged
/// (docs/architecture/encoding.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Order {
    /// time | worker | sequence (Twitter's Snowflake, Leaf-snowflake).
    TimeWorkerSeq,
    /// time | sequence | worker (Sonyflake).
    TimeSeqWorker,
    /// shard | (one of the two orders above): `shard_bits` on top of the
    /// id, below the sign bit, computed from the rest of the id, so that
    /// consecutive ids of one worker spread over `2^shard_bits` shards
    /// (docs/ids.md, Scattering).
    Scattered {
        /// time | sequence | worker below the shard bits (else time |
        /// worker | sequence).
        seq_before_worker: bool,
        /// Bits of shard, 1..=[`MAX_SHARD_BITS`].
        shard_bits: u32,
    },
}

/// How ids of one namespace are built.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Layout {
    /// Bits of time, in ticks since `epoch_ms`.
    pub time_bits: u32,
    /// Bits of worker id: `2^worker_bits` workers may hold the namespace.
    pub worker_bits: u32,
    /// Bits of sequence: `2^seq_bits` ids per tick per worker.
    pub seq_bits: u32,
    /// Where time 0 is, in Unix milliseconds.
    pub epoch_ms: u64,
    /// Milliseconds in one tick.
    pub unit_ms: u64,
    /// Whether the id must stay within 53 bits (exact in JavaScript).
    pub js_safe: bool,
    /// Field order below the time bits.
    pub order: Order,
}

/// An id taken apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Decoded {
    /// Ticks since the layout's epoch.
    pub tick: u64,
    /// The tick's start in Unix milliseconds.
    pub unix_ms: u64,
    /// The worker id that issued it.
    pub worker: u64,
    /// Its sequence within the tick.
    pub seq: u64,
}

/// 2010-11-04T01:42:54.657Z, Twitter's Snowflake epoch.
pub const TWITTER_EPOCH_MS: u64 = 1_288_834_974_657;
/// 2014-09-01T00:00:00Z, Sonyflake's default start time.
pub const SONYFLAKE_EPOCH_MS: u64 = 1_409_529_600_000;
/// 2024-01-01T00:00:00Z, the epoch of this project's own presets.
pub const SEQSVR_EPOCH_MS: u64 = 1_704_067_200_000;

impl Layout {
    /// Twitter's Snowflake: 41 bits of milliseconds, 10 of worker, 12 of
    /// sequence (4,096 ids per ms per worker, 1,024 workers, until 2080).
    pub const fn twitter() -> Self {
        Self {
            time_bits: 41,
            worker_bits: 10,
            seq_bits: 12,
            epoch_ms: TWITTER_EPOCH_MS,
            unit_ms: 1,
            js_safe: false,
            order: Order::TimeWorkerSeq,
        }
    }

    /// Sonyflake: 39 bits of 10 ms ticks, 8 of sequence, 16 of machine,
    /// in Sonyflake's order (time | sequence | machine): 25,600 ids/s per
    /// worker, 65,536 workers, 174 years.
    pub const fn sonyflake() -> Self {
        Self {
            time_bits: 39,
            worker_bits: 16,
            seq_bits: 8,
            epoch_ms: SONYFLAKE_EPOCH_MS,
            unit_ms: 10,
            js_safe: false,
            order: Order::TimeSeqWorker,
        }
    }

    /// A JavaScript-safe layout of 53 bits: 39 bits of 10 ms ticks (174
    /// years), 6 of worker (64 workers), 8 of sequence (25,600 ids/s per
    /// worker).
    pub const fn js53() -> Self {
        Self {
            time_bits: 39,
            worker_bits: 6,
            seq_bits: 8,
            epoch_ms: SEQSVR_EPOCH_MS,
            unit_ms: 10,
            js_safe: true,
            order: Order::TimeWorkerSeq,
        }
    }

    /// A preset by name (`twitter`, `sonyflake`, `js53`).
    pub fn preset(name: &str) -> Option<Self> {
        match name {
            "twitter" => Some(Self::twitter()),
            "sonyflake" => Some(Self::sonyflake()),
            "js53" => Some(Self::js53()),
            _ => None,
        }
    }

    /// This layout with its ids scattered over `2^shard_bits` shards (0:
    /// not scattered), keeping the order of worker and sequence.
    pub fn with_shards(mut self, shard_bits: u32) -> Self {
        let seq_before_worker = self.seq_before_worker();
        self.order = match (shard_bits, seq_before_worker) {
            (0, false) => Order::TimeWorkerSeq,
            (0, true) => Order::TimeSeqWorker,
            (s, b) => Order::Scattered {
                seq_before_worker: b,
                shard_bits: s,
            },
        };
        self
    }

    /// Bits of shard on top of the id (0: not scattered).
    pub fn shard_bits(&self) -> u32 {
        match self.order {
            Order::Scattered { shard_bits, .. } => shard_bits,
            _ => 0,
        }
    }

    /// Whether the sequence sits above the worker id (Sonyflake's order).
    pub fn seq_before_worker(&self) -> bool {
        matches!(
            self.order,
            Order::TimeSeqWorker
                | Order::Scattered {
                    seq_before_worker: true,
                    ..
                }
        )
    }

    /// A unit by name (`1ms`, `10ms`, `100ms`, `1s`, `1m`, `1h`, `1d`).
    pub fn unit_named(name: &str) -> Option<u64> {
        UNITS.iter().find(|(n, _)| *n == name).map(|&(_, ms)| ms)
    }

    /// Refuses an epoch later than `now_ms` (its ids would carry tick 0
    /// until then, and the run-out date would be a promise about a clock
    /// nobody has read yet) and time bits that have run out by then.
    pub fn check_epoch(&self, now_ms: u64) -> Result<(), IdError> {
        if self.epoch_ms > now_ms {
            return Err(IdError::InvalidLayout(format!(
                "epoch {} is in the future (now {})",
                format_unix_ms(self.epoch_ms),
                format_unix_ms(now_ms)
            )));
        }
        if let Some(end) = self.end_ms().filter(|&end| end <= now_ms) {
            return Err(IdError::InvalidLayout(format!(
                "its time bits ran out at {}",
                format_unix_ms(end)
            )));
        }
        Ok(())
    }

    /// Checks the layout: every field at least one bit, the sum (shard
    /// bits included) within 63 bits (53 if JavaScript-safe), a unit from
    /// [`UNITS`], at most [`MAX_SHARD_BITS`] of shard, and time that does
    /// not run out before the year 584 million.
    pub fn validate(&self) -> Result<(), IdError> {
        let bad = |why: String| Err(IdError::InvalidLayout(why));
        if self.time_bits == 0 || self.worker_bits == 0 || self.seq_bits == 0 {
            return bad("time, worker and sequence bits must each be at least 1".into());
        }
        if let Order::Scattered { shard_bits, .. } = self.order {
            if shard_bits == 0 || shard_bits > MAX_SHARD_BITS {
                return bad(format!("shard bits must be within 1..={MAX_SHARD_BITS}"));
            }
        }
        let total = self.total_bits();
        let max = if self.js_safe { JS_SAFE_BITS } else { MAX_BITS };
        if total > max {
            return bad(format!(
                "{total} bits in all; at most {max}{}",
                if self.js_safe {
                    " for a JavaScript-safe layout"
                } else {
                    ""
                }
            ));
        }
        if !UNITS.iter().any(|&(_, ms)| ms == self.unit_ms) {
            let names: Vec<&str> = UNITS.iter().map(|(n, _)| *n).collect();
            return bad(format!(
                "a unit of {} ms; it must be one of {}",
                self.unit_ms,
                names.join(", ")
            ));
        }
        if self.end_ms().is_none() {
            return bad("the time bits run past the year 584 million".into());
        }
        Ok(())
    }

    /// Bits used in all, shard bits included.
    pub fn total_bits(&self) -> u32 {
        self.base_bits().saturating_add(self.shard_bits())
    }

    /// Bits of time, worker and sequence: the id below the shard bits.
    pub fn base_bits(&self) -> u32 {
        self.time_bits
            .saturating_add(self.worker_bits)
            .saturating_add(self.seq_bits)
    }

    /// How many shards a scattered layout spreads ids over (1 if not).
    pub fn shards(&self) -> u64 {
        1 << self.shard_bits()
    }

    /// Largest tick the time bits hold.
    pub fn max_tick(&self) -> u64 {
        mask(self.time_bits)
    }

    /// Largest worker id.
    pub fn max_worker(&self) -> u64 {
        mask(self.worker_bits)
    }

    /// Largest sequence within a tick.
    pub fn max_seq(&self) -> u64 {
        mask(self.seq_bits)
    }

    /// How many workers the layout allows.
    pub fn workers(&self) -> u64 {
        self.max_worker() + 1
    }

    /// The first Unix millisecond the time bits cannot hold: the layout
    /// runs out then (`None` if that is past `u64`).
    pub fn end_ms(&self) -> Option<u64> {
        (self.max_tick().checked_add(1)?)
            .checked_mul(self.unit_ms)?
            .checked_add(self.epoch_ms)
    }

    /// The tick a Unix millisecond falls in; 0 before the epoch (the
    /// generator treats that as a clock far behind).
    pub fn tick_of(&self, unix_ms: u64) -> u64 {
        unix_ms.saturating_sub(self.epoch_ms) / self.unit_ms
    }

    /// Ticks in `ms` milliseconds, rounded up.
    pub fn ticks_in(&self, ms: u64) -> u64 {
        ms.div_ceil(self.unit_ms)
    }

    /// Builds an id. Every field is checked against its bits, so an
    /// out-of-range worker can never spill into the time bits.
    pub fn encode(&self, tick: u64, worker: u64, seq: u64) -> Result<u64, IdError> {
        if tick > self.max_tick() {
            return Err(IdError::TimeExhausted {
                end_ms: self.end_ms().unwrap_or(u64::MAX),
            });
        }
        if worker > self.max_worker() {
            return Err(IdError::WorkerOutOfRange {
                worker,
                max: self.max_worker(),
            });
        }
        if seq > self.max_seq() {
            return Err(IdError::Invalid(format!(
                "sequence {seq} above {}",
                self.max_seq()
            )));
        }
        Ok(self.encode_unchecked(tick, worker, seq))
    }

    /// [`encode`](Self::encode) for fields already known in range (the
    /// generator's hot path).
    #[inline]
    pub(crate) fn encode_unchecked(&self, tick: u64, worker: u64, seq: u64) -> u64 {
        let low = self.worker_bits + self.seq_bits;
        let base = if self.seq_before_worker() {
            (tick << low) | (seq << self.worker_bits) | worker
        } else {
            (tick << low) | (worker << self.seq_bits) | seq
        };
        match self.order {
            Order::Scattered { shard_bits, .. } => {
                (shard_of(base, shard_bits) << self.base_bits()) | base
            }
            _ => base,
        }
    }

    /// The id without its shard bits: unique like the id, and ordered like
    /// the unscattered layout's ids (the id itself if not scattered).
    pub fn unscatter(&self, id: u64) -> Result<u64, IdError> {
        let total = self.total_bits();
        if total < 64 && id >> total != 0 {
            return Err(IdError::NotInLayout { id, bits: total });
        }
        let shard_bits = self.shard_bits();
        if shard_bits == 0 {
            return Ok(id);
        }
        let base = id & mask(self.base_bits());
        // The shard is a function of the rest: an id whose shard bits do
        // not match was not issued by this layout (a typo, another
        // namespace), and decoding it would print a plausible lie.
        if id >> self.base_bits() != shard_of(base, shard_bits) {
            return Err(IdError::NotInLayout { id, bits: total });
        }
        Ok(base)
    }

    /// Takes an id apart (undoing the scattering); an id with bits above
    /// the layout's, or shard bits that do not match the rest, is refused.
    pub fn decode(&self, id: u64) -> Result<Decoded, IdError> {
        let id = self.unscatter(id)?;
        let low = self.worker_bits + self.seq_bits;
        let tick = id >> low;
        let (worker, seq) = if self.seq_before_worker() {
            (
                id & self.max_worker(),
                (id >> self.worker_bits) & self.max_seq(),
            )
        } else {
            (
                (id >> self.seq_bits) & self.max_worker(),
                id & self.max_seq(),
            )
        };
        Ok(Decoded {
            tick,
            unix_ms: self.epoch_ms + tick * self.unit_ms,
            worker,
            seq,
        })
    }
}

/// The shard of an unscattered id: the top `bits` of a 64-bit mix of it
/// (SplitMix64's finalizer), so that consecutive ids — one tick's
/// sequence, or one id per tick at a low rate — land on shards evenly,
/// as TiDB's AUTO_RANDOM hashes its start timestamp. A bijective mix of
/// the whole id, not its low bits: at a low rate every id has sequence 0.
#[inline]
fn shard_of(base: u64, bits: u32) -> u64 {
    let mut z = base.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    z >> (64 - bits)
}

fn mask(bits: u32) -> u64 {
    if bits >= 64 {
        u64::MAX
    } else {
        (1u64 << bits) - 1
    }
}

/// A Unix millisecond as an RFC 3339 UTC date (`2080-07-10T17:30:30.208Z`),
/// for the date a layout runs out and for decoded ids.
pub fn format_unix_ms(ms: u64) -> String {
    let secs = ms / 1000;
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60,
        ms % 1000
    )
}

/// The inverse of [`format_unix_ms`]: a UTC date `YYYY-MM-DD`, optionally
/// with `THH:MM:SS`, `.mmm` and a final `Z`, as Unix ms; or a plain
/// number of Unix ms. `None` for anything else (a layout's epoch is given
/// this way on the command line).
pub fn parse_unix_ms(s: &str) -> Option<u64> {
    if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) {
        return s.parse().ok();
    }
    let s = s.strip_suffix('Z').unwrap_or(s);
    let (date, time) = s.split_once('T').unwrap_or((s, "00:00:00"));
    let num = |t: &str, len: usize| -> Option<u64> {
        (t.len() == len && t.bytes().all(|b| b.is_ascii_digit())).then(|| t.parse().ok())?
    };
    let d: Vec<&str> = date.split('-').collect();
    let [y, m, dd] = d[..] else { return None };
    let (y, m, dd) = (num(y, 4)?, num(m, 2)?, num(dd, 2)?);
    let (hms, ms) = time.split_once('.').unwrap_or((time, "000"));
    let t: Vec<&str> = hms.split(':').collect();
    let [h, mi, sec] = t[..] else { return None };
    let (h, mi, sec, ms) = (num(h, 2)?, num(mi, 2)?, num(sec, 2)?, num(ms, 3)?);
    if !(1..=12).contains(&m) || !(1..=31).contains(&dd) || h > 23 || mi > 59 || sec > 59 {
        return None;
    }
    let days = days_from_civil(y as i64, m as u32, dd as u32);
    // 2023-02-30 comes back as March: not a date.
    if days < 0 || civil_from_days(days) != (y as i64, m as u32, dd as u32) {
        return None;
    }
    Some(((days as u64 * 86_400 + h * 3600 + mi * 60 + sec) * 1000) + ms)
}

/// Howard Hinnant's civil-to-days algorithm (proleptic Gregorian).
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = if m > 2 { m - 3 } else { m + 9 } as i64;
    let doy = (153 * mp + 2) / 5 + d as i64 - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Howard Hinnant's days-to-civil algorithm (proleptic Gregorian).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}
