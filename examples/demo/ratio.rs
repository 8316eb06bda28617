//! SGLang's new-token ratio: how much of the running requests' remaining output to reserve.
//!
//! Reserving every running request's full remaining output would leave the pool mostly
//! idle; reserving nothing would retract constantly. SGLang starts at 0.7, decays towards
//! 0.098 over 600 decode steps while decoding succeeds, and jumps back to an estimate of
//! the real need after a retraction (reference §3.4). The demo copies that policy so its
//! retractions are as rare, and as real, as an engine's.

/// `SGLANG_INIT_NEW_TOKEN_RATIO` x `schedule_conservativeness` (1.0).
const INIT: f64 = 0.7;
/// `INIT` x `SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR` (0.14).
const MIN: f64 = INIT * 0.14;
/// `SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS`.
const DECAY_STEPS: f64 = 600.0;
/// `SGLANG_RETRACT_DECODE_STEPS`: decode steps of headroom assumed after a retraction.
const RETRACT_DECODE_STEPS: u64 = 20;

/// The current ratio and its update rules.
#[derive(Clone, Copy, Debug)]
pub struct NewTokenRatio {
    current: f64,
}

impl NewTokenRatio {
    /// Starts at the initial ratio.
    pub fn new() -> Self {
        Self { current: INIT }
    }

    /// The fraction of remaining output tokens to reserve.
    pub fn get(&self) -> f64 {
        self.current
    }

    /// A decode step succeeded without retraction: trust the estimate a little less.
    pub fn decay(&mut self) {
        self.current = (self.current - (INIT - MIN) / DECAY_STEPS).max(MIN);
    }

    /// A retraction happened: reserve what the remaining requests plausibly still need,
    /// `(generated + RETRACT_DECODE_STEPS * n) / (max_new_tokens + 1)`, capped at 1.
    pub fn after_retraction(&mut self, generated: u64, max_new_tokens: u64, remaining: u64) {
        let estimate =
            (generated + RETRACT_DECODE_STEPS * remaining) as f64 / (max_new_tokens + 1) as f64;
        self.current = estimate.min(1.0);
    }

    /// The scheduler went idle: start over.
    pub fn reset(&mut self) {
        self.current = INIT;
    }
}
