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

/// Which of worker and sequence sit in the low bits. Time is always on top,
/// so ids sort by time first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Order {
    /// time | worker | sequence (Twitter's Snowflake, Leaf-snowflake).
    TimeWorkerSeq,
    /// time | sequence | worker (Sonyflake).
    TimeSeqWorker,
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

    /// Checks the layout: every field at least one bit, the sum within 63
    /// bits (53 if JavaScript-safe), a tick of 1 ms to one day, and time
    /// that does not run out before it starts.
    pub fn validate(&self) -> Result<(), IdError> {
        let bad = |why: String| Err(IdError::InvalidLayout(why));
        if self.time_bits == 0 || self.worker_bits == 0 || self.seq_bits == 0 {
            return bad("time, worker and sequence bits must each be at least 1".into());
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
        if self.unit_ms == 0 || self.unit_ms > MAX_UNIT_MS {
            return bad(format!("unit must be within 1..={MAX_UNIT_MS} ms"));
        }
        if self.end_ms().is_none() {
            return bad("the time bits run past the year 584 million".into());
        }
        Ok(())
    }

    /// Bits used in all.
    pub fn total_bits(&self) -> u32 {
        self.time_bits
            .saturating_add(self.worker_bits)
            .saturating_add(self.seq_bits)
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
        match self.order {
            Order::TimeWorkerSeq => (tick << low) | (worker << self.seq_bits) | seq,
            Order::TimeSeqWorker => (tick << low) | (seq << self.worker_bits) | worker,
        }
    }

    /// Takes an id apart; an id with bits above the layout's is refused.
    pub fn decode(&self, id: u64) -> Result<Decoded, IdError> {
        let total = self.total_bits();
        if total < 64 && id >> total != 0 {
            return Err(IdError::NotInLayout { id, bits: total });
        }
        let low = self.worker_bits + self.seq_bits;
        let tick = id >> low;
        let (worker, seq) = match self.order {
            Order::TimeWorkerSeq => (
                (id >> self.seq_bits) & self.max_worker(),
                id & self.max_seq(),
            ),
            Order::TimeSeqWorker => (
                id & self.max_worker(),
                (id >> self.worker_bits) & self.max_seq(),
            ),
        };
        Ok(Decoded {
            tick,
            unix_ms: self.epoch_ms + tick * self.unit_ms,
            worker,
            seq,
        })
    }
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
