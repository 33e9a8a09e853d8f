//! The deterministic random numbers of latmesh's tests and benchmarks: SplitMix64, small,
//! with no dependency, the same sequence on every machine for a seed, so generated traffic
//! (latencies, token counts, outcomes) is reproducible from run to run. Not for the product's
//! schedules (they use ChaCha8, see [`crate::plan`]) and not for anything secret.

/// SplitMix64 with the draws the tests and benchmarks need (uniform, normal, log-normal).
#[derive(Debug, Clone)]
pub struct SeededRng(u64);

impl SeededRng {
    /// A generator whose sequence is fixed by `seed`.
    pub fn new(seed: u64) -> SeededRng {
        SeededRng(seed)
    }

    /// The next 64 uniform bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1), 53 bits.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in (0, 1), 53 bits, never 0 (for a logarithm).
    pub fn open_unit(&mut self) -> f64 {
        ((self.next_u64() >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    }

    /// Uniform in [`lo`, `hi`] (both included; `lo <= hi`).
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next_u64() % (hi - lo + 1)
    }

    /// Standard normal (Box–Muller from two [`SeededRng::unit`] draws, the first kept above
    /// 1e-12).
    pub fn normal(&mut self) -> f64 {
        let u1 = self.unit().max(1e-12);
        let u2 = self.unit();
        (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
    }

    /// Log-normal with median `median` (in the caller's unit) and log-space standard deviation
    /// `sigma`.
    pub fn lognormal(&mut self, median: f64, sigma: f64) -> f64 {
        median * (sigma * self.normal()).exp()
    }
}

#[cfg(test)]
mod tests {
    use super::SeededRng;

    #[test]
    fn same_seed_same_sequence_and_draws_in_range() {
        let (mut a, mut b) = (SeededRng::new(7), SeededRng::new(7));
        for _ in 0..1000 {
            assert_eq!(a.next_u64(), b.next_u64());
            let u = a.unit();
            assert!((0.0..1.0).contains(&u));
            let o = a.open_unit();
            assert!(o > 0.0 && o < 1.0);
            let r = a.range(3, 5);
            assert!((3..=5).contains(&r));
            assert!(a.lognormal(10.0, 0.5) > 0.0);
            b.unit();
            b.open_unit();
            b.range(3, 5);
            b.lognormal(10.0, 0.5);
        }
    }

    #[test]
    fn splitmix64_reference_values() {
        // SplitMix64's published first outputs for seed 0.
        let mut r = SeededRng::new(0);
        assert_eq!(r.next_u64(), 0xe220_a839_7b1d_cdaf);
        assert_eq!(r.next_u64(), 0x6e78_9e6a_a1b9_65f4);
    }
}
