//! A small seeded PRNG and the few distributions the synthetic workload needs.
//!
//! Written here rather than pulled from a crate so the demo adds no dependency and its
//! stream of numbers (hence every scheduling decision) is fixed by the seed alone.

/// splitmix64: tiny, fast, and good enough for a workload generator.
#[derive(Clone, Debug)]
pub struct Rng {
    state: u64,
}

impl Rng {
    /// A generator whose whole output is determined by `seed`.
    pub fn new(seed: u64) -> Self {
        Self { state: seed }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)`, from the top 53 bits (the precision of an `f64`).
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// A standard normal sample (Box–Muller; one of the pair is discarded for simplicity).
    pub fn standard_normal(&mut self) -> f64 {
        // `1 - u` lies in (0, 1], so the logarithm is finite.
        let u1 = 1.0 - self.next_f64();
        let u2 = self.next_f64();
        (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
    }

    /// A log-normal sample with the given median and log-space spread: the usual shape of
    /// chat prompt and completion lengths (most short, a long tail).
    pub fn log_normal(&mut self, median: f64, sigma: f64) -> f64 {
        median * (sigma * self.standard_normal()).exp()
    }

    /// A Poisson sample (Knuth's method; fine for the small means used per step).
    pub fn poisson(&mut self, mean: f64) -> u32 {
        let limit = (-mean).exp();
        let mut k = 0;
        let mut p = self.next_f64();
        while p > limit {
            k += 1;
            p *= self.next_f64();
        }
        k
    }
}
