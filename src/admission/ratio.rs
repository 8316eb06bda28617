//! The new-token ratio: how much of running requests' remaining `max_new_tokens` admission
//! reserves. It starts conservative, decays with every successful decode step, jumps to an
//! estimate after a retraction and resets when the server goes idle.

/// Decode steps of headroom a retraction estimate (and eviction) plans for
/// (`SGLANG_RETRACT_DECODE_STEPS`).
pub const RETRACT_DECODE_STEPS: u64 = 20;

/// Tunables of [`NewTokenRatio`] (SGLang's environment defaults in `Default`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RatioConfig {
    /// `SGLANG_INIT_NEW_TOKEN_RATIO` (0.7).
    pub init: f64,
    /// `SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR` (0.14): the floor is `init * min_factor`.
    pub min_factor: f64,
    /// `SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS` (600): steps from `init` to the floor.
    pub decay_steps: u32,
    /// `schedule_conservativeness` (1.0): scales `init`.
    pub conservativeness: f64,
}

impl Default for RatioConfig {
    fn default() -> Self {
        Self {
            init: 0.7,
            min_factor: 0.14,
            decay_steps: 600,
            conservativeness: 1.0,
        }
    }
}

/// SGLang's `NewTokenRatioTracker`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct NewTokenRatio {
    init: f64,
    min: f64,
    decay: f64,
    current: f64,
}

impl NewTokenRatio {
    /// `init = min(init × conservativeness, 1)`, `min = min(init × min_factor, 1)`,
    /// `decay = (init − min) / decay_steps`.
    pub fn new(config: RatioConfig) -> Self {
        let init = (config.init * config.conservativeness).min(1.0);
        let min = (init * config.min_factor).min(1.0);
        let decay = (init - min) / f64::from(config.decay_steps.max(1));
        Self {
            init,
            min,
            decay,
            current: init,
        }
    }

    /// The ratio admission uses now.
    pub fn current(&self) -> f64 {
        self.current
    }

    /// The starting (and idle) ratio.
    pub fn init(&self) -> f64 {
        self.init
    }

    /// The floor.
    pub fn min(&self) -> f64 {
        self.min
    }

    /// After a decode step that needed no retraction: `max(current − decay, min)`.
    pub fn decay_step(&mut self) {
        self.current = (self.current - self.decay).max(self.min);
    }

    /// After a retraction: the estimate computed over the requests that stay.
    pub fn set_after_retraction(&mut self, estimate: f64) {
        self.current = estimate;
    }

    /// When the server goes idle.
    pub fn reset(&mut self) {
        self.current = self.init;
    }

    /// SGLang's retraction estimate over the remaining requests:
    /// `min(1, (Σ output_len + RETRACT_DECODE_STEPS × n) / (Σ max_new_tokens + 1))`.
    pub fn retraction_estimate(remaining: impl IntoIterator<Item = (u64, u64)>) -> f64 {
        let (mut outputs, mut max_new, mut n) = (0u64, 0u64, 0u64);
        for (output_len, max_new_tokens) in remaining {
            outputs += output_len;
            max_new += max_new_tokens;
            n += 1;
        }
        let estimate = (outputs + RETRACT_DECODE_STEPS * n) as f64 / (max_new + 1) as f64;
        estimate.min(1.0)
    }
}

impl Default for NewTokenRatio {
    fn default() -> Self {
        Self::new(RatioConfig::default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-12
    }

    #[test]
    fn defaults_match_sglang() {
        let r = NewTokenRatio::default();
        assert!(close(r.init(), 0.7));
        assert!(close(r.min(), 0.098));
        let mut r2 = r;
        r2.decay_step();
        assert!(close(r2.current(), 0.7 - (0.7 - 0.098) / 600.0));
    }

    #[test]
    fn conservativeness_scales_and_clamps() {
        let r = NewTokenRatio::new(RatioConfig {
            conservativeness: 2.0,
            ..RatioConfig::default()
        });
        assert!(close(r.init(), 1.0));
        assert!(close(r.min(), 0.14));
        let r = NewTokenRatio::new(RatioConfig {
            conservativeness: 0.5,
            ..RatioConfig::default()
        });
        assert!(close(r.init(), 0.35));
    }

    #[test]
    fn decay_floors_at_min_and_reset_restores() {
        let mut r = NewTokenRatio::default();
        for _ in 0..700 {
            r.decay_step();
        }
        assert!(close(r.current(), r.min()));
        // Below the floor (after a small retraction estimate) decay snaps back up to it.
        r.set_after_retraction(0.01);
        r.decay_step();
        assert!(close(r.current(), r.min()));
        r.reset();
        assert!(close(r.current(), 0.7));
    }

    #[test]
    fn retraction_estimate_matches_sglang_example() {
        // outputs 5 and 3, maxima 100 and 50, two requests: (5 + 3 + 20×2) / (150 + 1).
        let e = NewTokenRatio::retraction_estimate([(5, 100), (3, 50)]);
        assert!(close(e, 48.0 / 151.0));
        assert!(close(NewTokenRatio::retraction_estimate([(500, 10)]), 1.0));
        assert!(close(NewTokenRatio::retraction_estimate([]), 0.0));
    }
}
