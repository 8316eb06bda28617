//! The new-token ratio: how much of running requests' remaining `max_new_tokens` admission
//! reserves. It starts conservative, decays with every successful decode step, jumps to an
//! estimate after a retraction and resets when the server goes idle.

use super::tokens::{check_positive_ratio, invalid};
use crate::pool::PoolError;

/// Decode steps of headroom a retraction estimate (and eviction) plans for
/// (`SGLANG_RETRACT_DECODE_STEPS`).
// In C: KVP_RETRACT_DECODE_STEPS (cbindgen.toml renames it).
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

impl RatioConfig {
    /// Refuses non-positive or non-finite ratios and zero decay steps (the error names the
    /// field): a ratio of 0, negative or NaN would reserve nothing, or garbage, for running
    /// requests' outputs.
    pub fn check(&self) -> Result<(), PoolError> {
        check_positive_ratio("init_new_token_ratio", self.init)?;
        check_positive_ratio("min_new_token_ratio_factor", self.min_factor)?;
        if !(self.conservativeness.is_finite() && self.conservativeness > 0.0) {
            return Err(invalid(format!(
                "schedule_conservativeness {} must be finite and positive (it scales the new-token ratio)",
                self.conservativeness
            )));
        }
        if self.decay_steps == 0 {
            return Err(invalid("new_token_ratio_decay_steps must be positive"));
        }
        Ok(())
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
    /// `min(1, (Σ output_len + RETRACT_DECODE_STEPS × n) / (Σ max_new_tokens + 1))`, summed
    /// exactly (in 128 bits: `max_new_tokens` may be any `u64`).
    pub fn retraction_estimate(remaining: impl IntoIterator<Item = (u64, u64)>) -> f64 {
        let (mut outputs, mut max_new, mut n) = (0u128, 0u128, 0u128);
        for (output_len, max_new_tokens) in remaining {
            outputs += u128::from(output_len);
            max_new += u128::from(max_new_tokens);
            n += 1;
        }
        let steps = u128::from(RETRACT_DECODE_STEPS);
        let estimate = (outputs + steps * n) as f64 / (max_new + 1) as f64;
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

    #[test]
    fn retraction_estimate_does_not_wrap_on_huge_max_new_tokens() {
        // Two "unbounded" requests: in u64, Σ max_new_tokens + 1 wraps to 2^64 - 1 (half
        // the sum); summed exactly it is 2^65 - 1. With a third of 2, Σ wraps to 0 and the
        // estimate would be 60 / 1, clamped to 1.
        let e = NewTokenRatio::retraction_estimate([(5, u64::MAX), (3, u64::MAX)]);
        let want = 48.0 / 2f64.powi(65);
        assert!((e - want).abs() < want * 1e-9, "{e} != {want}");
        let e = NewTokenRatio::retraction_estimate([(0, u64::MAX), (0, u64::MAX), (0, 2)]);
        let want = 60.0 / 2f64.powi(65);
        assert!((e - want).abs() < want * 1e-9, "{e} != {want}");
    }

    #[test]
    fn check_refuses_non_positive_ratios_naming_the_field() {
        assert!(RatioConfig::default().check().is_ok());
        let cases = [
            (
                RatioConfig {
                    init: 0.0,
                    ..RatioConfig::default()
                },
                "init_new_token_ratio",
            ),
            (
                RatioConfig {
                    init: f64::NAN,
                    ..RatioConfig::default()
                },
                "init_new_token_ratio",
            ),
            (
                RatioConfig {
                    min_factor: -0.1,
                    ..RatioConfig::default()
                },
                "min_new_token_ratio_factor",
            ),
            (
                RatioConfig {
                    conservativeness: 0.0,
                    ..RatioConfig::default()
                },
                "schedule_conservativeness",
            ),
            (
                RatioConfig {
                    decay_steps: 0,
                    ..RatioConfig::default()
                },
                "new_token_ratio_decay_steps",
            ),
        ];
        for (config, field) in cases {
            let err = config.check().unwrap_err();
            assert!(
                err.message().starts_with(field),
                "{field}: {}",
                err.message()
            );
        }
    }
}
