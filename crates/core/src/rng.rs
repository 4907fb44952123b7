//! A small seeded PRNG (SplitMix64), the one every part of seqsvr that
//! wants a repeatable pseudo-random stream uses: the simulation (its only
//! source of randomness, so a seed replays exactly), the drill's and the
//! tests' workloads, the benchmarks' uid picks, and the client's retry
//! jitter ([`splitmix64`]).
//!
//! SplitMix64 passes BigCrush, needs one `u64` of state and no crate, and
//! costs a few cycles a number; nothing here needs anything stronger (and
//! nothing secret may use it).

/// The golden-ratio increment SplitMix64 advances its state by.
const GOLDEN: u64 = 0x9E37_79B9_7F4A_7C15;

/// One round of SplitMix64: a fast, well-mixing 64-bit hash (what [`Rng`]
/// outputs for each state, and a seed mixer on its own).
pub fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(GOLDEN);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A seeded pseudo-random generator.
#[derive(Debug, Clone)]
pub struct Rng {
    /// The state; every output advances it by the golden-ratio increment.
    state: u64,
}

impl Rng {
    /// A generator for `seed` (any value, 0 included).
    pub fn new(seed: u64) -> Self {
        Self {
            state: seed ^ 0x5851_F42D_4C95_7F2D,
        }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let z = self.state;
        self.state = self.state.wrapping_add(GOLDEN);
        splitmix64(z)
    }

    /// Uniform in `0..n` (`0` when `n == 0`), without modulo bias worth
    /// mentioning (multiply-high).
    pub fn below(&mut self, n: u64) -> u64 {
        ((self.next_u64() as u128 * n as u128) >> 64) as u64
    }

    /// Uniform in `lo..hi` (`lo` when the range is empty).
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi.saturating_sub(lo))
    }

    /// Uniform in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// True with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        self.unit() < p
    }

    /// A uniformly chosen index into a slice of length `n` (`n > 0`).
    pub fn pick(&mut self, n: usize) -> usize {
        self.below(n as u64) as usize
    }

    /// An independent generator derived from this one (so adding draws to
    /// one part of the simulation does not shift another's).
    pub fn fork(&mut self) -> Rng {
        Rng::new(self.next_u64())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_stream_and_ranges_hold() {
        let (mut a, mut b) = (Rng::new(7), Rng::new(7));
        for _ in 0..1000 {
            assert_eq!(a.next_u64(), b.next_u64());
            let x = a.range(10, 20);
            assert!((10..20).contains(&x));
            b.range(10, 20);
            let u = a.unit();
            assert!((0.0..1.0).contains(&u));
            b.unit();
        }
        assert_ne!(Rng::new(1).next_u64(), Rng::new(2).next_u64());
        assert_eq!(Rng::new(3).below(0), 0);
    }

    #[test]
    fn the_stream_is_splitmix64() {
        // Golden: the simulation's seeds replay only while these hold.
        let mut r = Rng::new(0);
        let s = 0x5851_F42D_4C95_7F2D;
        assert_eq!(r.next_u64(), splitmix64(s));
        assert_eq!(r.next_u64(), splitmix64(s.wrapping_add(GOLDEN)));
        assert_eq!(splitmix64(0), 0xE220_A839_7B1D_CDAF);
    }
}
