//! Scrambled zipfian key choice (Gray et al., "Quickly generating billion-record synthetic
//! databases", as in YCSB): rank r has probability ∝ 1/r^theta, and ranks are spread over the key
//! space by a multiplicative hash so that the hot keys are not neighbours (and not all in one
//! write block or index partition).

use rand::Rng;

/// The skew of YCSB's default zipfian, and of the brief's larger-than-DRAM workload.
pub const ZIPFIAN_THETA_DEFAULT: f64 = 0.99;
/// Odd 64-bit constant (2^64 / golden ratio): multiplying by it permutes ranks.
const RANK_SCRAMBLE_MULTIPLIER: u64 = 0x9E37_79B9_7F4A_7C15;
const RANK_SCRAMBLE_ROTATION_BITS: u32 = 17;

/// Cheap to copy: the O(keys) sum is computed once in `new`.
#[derive(Clone, Copy, Debug)]
pub struct Zipfian {
    keys: u64,
    theta: f64,
    zeta_n: f64,
    alpha: f64,
    eta: f64,
}

impl Zipfian {
    pub fn new(keys: u64, theta: f64) -> Zipfian {
        assert!(keys >= 2, "a zipfian needs at least 2 keys");
        assert!(theta > 0.0 && theta < 1.0, "this generator needs 0 < theta < 1");
        let zeta = |n: u64| (1..=n).map(|i| 1.0 / (i as f64).powf(theta)).sum::<f64>();
        let zeta_n = zeta(keys);
        let eta = (1.0 - (2.0 / keys as f64).powf(1.0 - theta)) / (1.0 - zeta(2) / zeta_n);
        Zipfian { keys, theta, zeta_n, alpha: 1.0 / (1.0 - theta), eta }
    }

    /// A key number in 0..keys.
    pub fn sample(&self, rng: &mut impl Rng) -> u64 {
        let u: f64 = rng.gen();
        let uz = u * self.zeta_n;
        let rank = if uz < 1.0 {
            0
        } else if uz < 1.0 + 0.5f64.powf(self.theta) {
            1
        } else {
            ((self.keys as f64) * (self.eta * u - self.eta + 1.0).powf(self.alpha)) as u64
        };
        rank.wrapping_mul(RANK_SCRAMBLE_MULTIPLIER).rotate_left(RANK_SCRAMBLE_ROTATION_BITS) % self.keys
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn samples_stay_in_range_and_a_few_keys_take_most_of_them() {
        const KEYS: u64 = 100_000;
        const SAMPLES: usize = 200_000;
        let zipfian = Zipfian::new(KEYS, ZIPFIAN_THETA_DEFAULT);
        let mut rng = rand::rngs::StdRng::seed_from_u64(1);
        let mut counts = std::collections::HashMap::new();
        for _ in 0..SAMPLES {
            let key = zipfian.sample(&mut rng);
            assert!(key < KEYS);
            *counts.entry(key).or_insert(0usize) += 1;
        }
        let mut sorted: Vec<usize> = counts.into_values().collect();
        sorted.sort_unstable_by(|a, b| b.cmp(a));
        let hottest_percent: usize = sorted.iter().take(KEYS as usize / 100).sum();
        // Under theta 0.99 the hottest 1% of 100,000 keys draw about 60% of the choices; a
        // uniform choice would give them about 1%.
        assert!(hottest_percent * 5 > SAMPLES * 2, "hottest 1% drew {hottest_percent} of {SAMPLES}");
        assert!(sorted[0] > SAMPLES / 100, "the hottest key drew only {}", sorted[0]);
    }
}
