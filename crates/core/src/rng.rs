//! The seeded pseudo-random source the core draws its jitter from.
//!
//! The core owns no entropy: the shell passes a seed, so a simulation replays exactly.

/// SplitMix64: tiny, fast, and good enough for timer jitter and fault injection.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// The whole stream follows from `seed`, so a simulated run replays exactly.
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    /// 64 uniform bits; every other draw is derived from it.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, n)`; 0 when `n` is 0.
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            ((self.next_u64() as u128 * n as u128) >> 64) as u64
        }
    }

    /// Uniform in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// True with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        self.unit() < p
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_stream() {
        let mut a = Rng::new(42);
        let mut b = Rng::new(42);
        for _ in 0..100 {
            assert_eq!(a.next_u64(), b.next_u64());
        }
        let mut c = Rng::new(43);
        assert_ne!(Rng::new(42).next_u64(), c.next_u64());
    }

    #[test]
    fn below_stays_in_range() {
        let mut r = Rng::new(1);
        for n in [1u64, 2, 3, 10, 1000] {
            for _ in 0..1000 {
                assert!(r.below(n) < n);
            }
        }
        assert_eq!(r.below(0), 0);
    }

    /// The first draws of SplitMix64 for seeds 0 and 42, as Vigna's reference `splitmix64.c`
    /// (prng.di.unimi.it) gives them and other implementations publish them as test vectors: a
    /// simulation replays only if the stream is exactly this one.
    #[test]
    fn the_stream_is_the_splitmix64_reference() {
        for (seed, want) in [
            (
                0,
                [
                    16294208416658607535u64,
                    7960286522194355700,
                    487617019471545679,
                    17909611376780542444,
                ],
            ),
            (
                42,
                [
                    13679457532755275413,
                    2949826092126892291,
                    5139283748462763858,
                    6349198060258255764,
                ],
            ),
        ] {
            let mut r = Rng::new(seed);
            let got: Vec<u64> = (0..4).map(|_| r.next_u64()).collect();
            assert_eq!(got, want, "seed {seed}");
        }
    }

    #[test]
    fn different_seeds_give_different_streams() {
        let firsts: std::collections::BTreeSet<[u64; 2]> = (0..1000u64)
            .map(|seed| {
                let mut r = Rng::new(seed);
                [r.next_u64(), r.next_u64()]
            })
            .collect();
        assert_eq!(firsts.len(), 1000);
    }

    /// The seed whose first state is 0, which SplitMix64's mixer maps to 0: its first draw is
    /// the smallest there is, so `unit()` is exactly 0.0.
    const SEED_OF_THE_ZERO_DRAW: u64 = 0x9E37_79B9_7F4A_7C15u64.wrapping_neg();

    #[test]
    fn below_covers_its_range_evenly() {
        let mut r = Rng::new(7);
        for n in [2u64, 3, 10] {
            let draws = 60_000;
            let mut counts = vec![0u32; n as usize];
            for _ in 0..draws {
                let x = r.below(n);
                assert!(x < n);
                counts[x as usize] += 1;
            }
            let expected = draws as f64 / n as f64;
            for (value, &c) in counts.iter().enumerate() {
                assert!(
                    (f64::from(c) - expected).abs() < expected * 0.1,
                    "below({n}) gave {value} {c} times in {draws}, expected about {expected}"
                );
            }
        }
        // The whole width of a large range is reached, its top half included.
        let mut r = Rng::new(8);
        let big: Vec<u64> = (0..1000).map(|_| r.below(u64::MAX)).collect();
        assert!(big.iter().any(|&x| x > u64::MAX / 2));
        assert!(big.iter().any(|&x| x < u64::MAX / 2));
        // The smallest draw gives the bottom of the range.
        assert_eq!(Rng::new(SEED_OF_THE_ZERO_DRAW).below(10), 0);
    }

    #[test]
    fn unit_lies_in_zero_to_one_and_averages_a_half() {
        let mut r = Rng::new(3);
        let draws = 100_000;
        let mut sum = 0.0;
        for _ in 0..draws {
            let u = r.unit();
            assert!((0.0..1.0).contains(&u), "{u}");
            sum += u;
        }
        let mean = sum / f64::from(draws);
        assert!((mean - 0.5).abs() < 0.01, "mean {mean}");
        assert_eq!(Rng::new(SEED_OF_THE_ZERO_DRAW).unit(), 0.0);
    }

    #[test]
    fn chance_is_true_about_as_often_as_asked() {
        let mut r = Rng::new(5);
        let draws = 100_000;
        for p in [0.01, 0.25, 0.5, 0.9] {
            let hits = (0..draws).filter(|_| r.chance(p)).count();
            let freq = hits as f64 / f64::from(draws);
            assert!(
                (freq - p).abs() < 0.01,
                "chance({p}) was true {freq} of the time"
            );
        }
        assert!((0..1000).all(|_| r.chance(1.0)));
        assert!((0..1000).all(|_| !r.chance(0.0)));
        // Probability 0 is never, even on the draw whose unit() is exactly 0.0.
        assert!(!Rng::new(SEED_OF_THE_ZERO_DRAW).chance(0.0));
        assert!(Rng::new(SEED_OF_THE_ZERO_DRAW).chance(f64::MIN_POSITIVE));
    }
}
