//! PrefillDelayer (SGLang, DP attention): ranks agree whether to prefill this pass, so one
//! rank's prefill does not stall the others' decode. Each rank computes its
//! [`RankInfo`]; the engine all-gathers them (the collective is the engine's) and every
//! rank calls [`PrefillDelayer::negotiate`] on the same list, reaching the same verdict.

use std::collections::VecDeque;

/// Tunables (SGLang defaults in `Default`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DelayerConfig {
    /// The N-th consecutive pass that would be delayed times out instead: at most N − 1
    /// passes in a row are delayed (SGLang's `max_delay_passes`, 30).
    pub max_delay_passes: u32,
    /// A rank whose KV usage is below this fraction forces prefill (off by default).
    pub token_usage_low_watermark: Option<f64>,
    /// Slot condition: delay while `max_running_requests − max(running) < max(max_prefill_bs)`.
    pub max_running_requests: Option<u64>,
    /// Queue condition (opt-in): delay while
    /// `max(waiting) < min(⌊max(running) × ratio⌋, prefill_max_requests or max_prefill_bs)`.
    pub queue_min_ratio: Option<f64>,
    /// Cap used by the queue condition.
    pub prefill_max_requests: Option<u64>,
}

impl Default for DelayerConfig {
    fn default() -> Self {
        Self {
            max_delay_passes: 30,
            token_usage_low_watermark: None,
            max_running_requests: None,
            queue_min_ratio: None,
            prefill_max_requests: None,
        }
    }
}

/// What one rank contributes to the negotiation.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct RankInfo {
    /// The rank has requests it could prefill now.
    pub prefillable: bool,
    /// Its KV usage is below the low watermark.
    pub force_allow: bool,
    /// Its running batch size.
    pub running_bs: u64,
    /// The largest prefill batch of its last 16 non-empty prefills.
    pub max_prefill_bs: u64,
    /// Its waiting-queue length.
    pub waiting_len: u64,
    /// The caller's clock says this rank has waited its delay budget (SGLang's
    /// `prefill_delayer_max_delay_ms`, 5000 ms). Once every rank says so the queue condition
    /// stops holding prefill back; the slot condition and a mixed pass are bounded by
    /// passes alone, as in SGLang.
    pub timed_out: bool,
}

/// The verdict of one pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Prefill now; no rank had to wait.
    NoWait,
    /// Prefill now, after waiting for the other ranks.
    WaitSuccess,
    /// No rank can prefill (allowing is harmless).
    NoneReady,
    /// A rank's KV usage is low: prefill now.
    TokenWatermark,
    /// Waited the maximum number of passes (or time): prefill now.
    WaitTimeout,
    /// Skip prefill this pass.
    Delay,
}

impl Verdict {
    /// Whether the pass may prefill.
    pub fn allows(self) -> bool {
        self != Verdict::Delay
    }
}

/// A rank's delayer state: consecutive delayed passes and its recent prefill sizes.
#[derive(Clone, Debug, Default)]
pub struct PrefillDelayer {
    config: DelayerConfig,
    delayed: Option<u32>,
    recent_prefill_bs: VecDeque<u64>,
    /// The first pass the slot or queue condition would delay has prefilled (SGLang's
    /// `skip_first_delayer`, once in a delayer's life: that first merge would otherwise keep
    /// the decode batch short of its maximum).
    first_hold_skipped: bool,
}

/// Non-empty prefill batch sizes remembered for `max_prefill_bs`.
const PREFILL_BS_WINDOW: usize = 16;

impl PrefillDelayer {
    /// A delayer with no history.
    pub fn new(config: DelayerConfig) -> Self {
        Self {
            config,
            ..Self::default()
        }
    }

    /// This rank's contribution. `token_usage` is the pool's used fraction (0..1).
    pub fn local_info(
        &self,
        prefillable: bool,
        token_usage: f64,
        running_bs: u64,
        waiting_len: u64,
        timed_out: bool,
    ) -> RankInfo {
        let force_allow = prefillable
            && self
                .config
                .token_usage_low_watermark
                .is_some_and(|w| token_usage < w);
        RankInfo {
            prefillable,
            force_allow,
            running_bs,
            max_prefill_bs: self.recent_prefill_bs.iter().copied().max().unwrap_or(0),
            waiting_len,
            timed_out,
        }
    }

    /// Records the size of a prefill batch this rank ran (0 is ignored).
    pub fn record_prefill(&mut self, batch_size: u64) {
        if batch_size == 0 {
            return;
        }
        if self.recent_prefill_bs.len() == PREFILL_BS_WINDOW {
            self.recent_prefill_bs.pop_front();
        }
        self.recent_prefill_bs.push_back(batch_size);
    }

    /// Decides this pass from every rank's info (identical on every rank).
    pub fn negotiate(&mut self, ranks: &[RankInfo]) -> Verdict {
        let ready = ranks.iter().filter(|r| r.prefillable).count();
        let waited = self.delayed.is_some();
        if ready == 0 {
            self.delayed = None;
            return Verdict::NoneReady;
        }
        if ranks.iter().any(|r| r.force_allow) {
            self.delayed = None;
            return Verdict::TokenWatermark;
        }
        // Every rank ready: only the slot and queue conditions hold prefill back, and the
        // first time they would, they do not. Some ranks ready: wait for the others.
        let mut hold = ready < ranks.len();
        if !hold && self.capacity_hold(ranks) {
            hold = self.first_hold_skipped;
            self.first_hold_skipped = true;
        }
        if !hold {
            self.delayed = None;
            return if waited {
                Verdict::WaitSuccess
            } else {
                Verdict::NoWait
            };
        }
        let delayed = self.delayed.unwrap_or(0);
        if delayed + 1 >= self.config.max_delay_passes {
            self.delayed = None;
            return Verdict::WaitTimeout;
        }
        self.delayed = Some(delayed + 1);
        Verdict::Delay
    }

    /// The slot and queue conditions, evaluated when every rank could prefill. The queue
    /// condition lapses once every rank has waited its time budget (SGLang compares the
    /// shortest of the ranks' waits with it).
    fn capacity_hold(&self, ranks: &[RankInfo]) -> bool {
        let max_running = ranks.iter().map(|r| r.running_bs).max().unwrap_or(0);
        let max_prefill = ranks.iter().map(|r| r.max_prefill_bs).max().unwrap_or(0);
        let slots = self
            .config
            .max_running_requests
            .is_some_and(|max| max.saturating_sub(max_running) < max_prefill);
        let waited_out = ranks.iter().all(|r| r.timed_out);
        let queue = !waited_out
            && self.config.queue_min_ratio.is_some_and(|ratio| {
                let max_waiting = ranks.iter().map(|r| r.waiting_len).max().unwrap_or(0);
                let cap = self.config.prefill_max_requests.unwrap_or(max_prefill);
                max_waiting < ((max_running as f64 * ratio) as u64).min(cap)
            });
        slots || queue
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rank(prefillable: bool) -> RankInfo {
        RankInfo {
            prefillable,
            ..RankInfo::default()
        }
    }

    #[test]
    fn all_none_and_mixed() {
        let mut d = PrefillDelayer::new(DelayerConfig::default());
        assert_eq!(d.negotiate(&[rank(true), rank(true)]), Verdict::NoWait);
        assert_eq!(d.negotiate(&[rank(false), rank(false)]), Verdict::NoneReady);
        assert_eq!(d.negotiate(&[rank(true), rank(false)]), Verdict::Delay);
        assert_eq!(d.negotiate(&[rank(true), rank(true)]), Verdict::WaitSuccess);
    }

    #[test]
    fn mixed_waits_at_most_max_passes() {
        let mut d = PrefillDelayer::new(DelayerConfig {
            max_delay_passes: 3,
            ..DelayerConfig::default()
        });
        let mixed = [rank(true), rank(false)];
        let verdicts: Vec<Verdict> = (0..4).map(|_| d.negotiate(&mixed)).collect();
        assert_eq!(
            verdicts,
            [
                Verdict::Delay,
                Verdict::Delay,
                Verdict::WaitTimeout,
                Verdict::Delay
            ]
        );
        let timed_out = [
            rank(true),
            RankInfo {
                timed_out: true,
                ..rank(false)
            },
        ];
        // A mixed pass is bounded by passes alone: a rank's clock does not end it.
        assert_eq!(d.negotiate(&timed_out), Verdict::Delay);
    }

    #[test]
    fn low_watermark_forces_prefill() {
        let d = PrefillDelayer::new(DelayerConfig {
            token_usage_low_watermark: Some(0.3),
            ..DelayerConfig::default()
        });
        let low = d.local_info(true, 0.1, 4, 10, false);
        assert!(low.force_allow);
        assert!(!d.local_info(true, 0.5, 4, 10, false).force_allow);
        let mut d = d;
        assert_eq!(d.negotiate(&[low, rank(false)]), Verdict::TokenWatermark);
    }

    #[test]
    fn slot_and_queue_conditions_delay_a_ready_pass() {
        let mut d = PrefillDelayer::new(DelayerConfig {
            max_running_requests: Some(64),
            ..DelayerConfig::default()
        });
        for bs in [3, 9, 5] {
            d.record_prefill(bs);
        }
        d.record_prefill(0);
        let info = d.local_info(true, 0.9, 60, 100, false);
        assert_eq!(info.max_prefill_bs, 9);
        // 64 − 60 = 4 free slots < 9: wait for slots, but not the first time.
        assert_eq!(d.negotiate(&[info, info]), Verdict::NoWait);
        assert_eq!(d.negotiate(&[info, info]), Verdict::Delay);
        let roomy = RankInfo {
            running_bs: 40,
            ..info
        };
        assert_eq!(d.negotiate(&[roomy, roomy]), Verdict::WaitSuccess);
        let mut q = PrefillDelayer::new(DelayerConfig {
            queue_min_ratio: Some(0.5),
            prefill_max_requests: Some(8),
            ..DelayerConfig::default()
        });
        let short_queue = RankInfo {
            prefillable: true,
            running_bs: 40,
            waiting_len: 3,
            ..RankInfo::default()
        };
        // 3 waiting < min(40 × 0.5, 8): let the queue build up (after the first time).
        assert_eq!(q.negotiate(&[short_queue]), Verdict::NoWait);
        assert_eq!(q.negotiate(&[short_queue]), Verdict::Delay);
        let full_queue = RankInfo {
            waiting_len: 8,
            ..short_queue
        };
        assert_eq!(q.negotiate(&[full_queue]), Verdict::WaitSuccess);
    }

    #[test]
    fn only_the_first_hold_in_a_delayers_life_is_skipped() {
        let mut d = PrefillDelayer::new(DelayerConfig {
            max_running_requests: Some(8),
            ..DelayerConfig::default()
        });
        d.record_prefill(4);
        let full = d.local_info(true, 0.9, 6, 1, false);
        let roomy = d.local_info(true, 0.9, 0, 1, false);
        // A mixed pass and a pass with room do not use up the skip.
        assert_eq!(d.negotiate(&[roomy, rank(false)]), Verdict::Delay);
        assert_eq!(d.negotiate(&[roomy, roomy]), Verdict::WaitSuccess);
        assert_eq!(d.negotiate(&[full, roomy]), Verdict::NoWait);
        assert_eq!(d.negotiate(&[full, roomy]), Verdict::Delay);
        assert_eq!(d.negotiate(&[roomy, roomy]), Verdict::WaitSuccess);
        // Later holds delay from their first pass.
        assert_eq!(d.negotiate(&[full, roomy]), Verdict::Delay);
    }

    #[test]
    fn the_queue_condition_lapses_when_every_rank_waited_its_time() {
        let mut d = PrefillDelayer::new(DelayerConfig {
            queue_min_ratio: Some(1.0),
            ..DelayerConfig::default()
        });
        d.record_prefill(16);
        let short = d.local_info(true, 0.9, 32, 2, false);
        let waited = d.local_info(true, 0.9, 32, 2, true);
        assert_eq!(d.negotiate(&[short, short]), Verdict::NoWait); // the skipped first hold
        assert_eq!(d.negotiate(&[short, short]), Verdict::Delay);
        assert_eq!(d.negotiate(&[waited, short]), Verdict::Delay);
        assert_eq!(d.negotiate(&[waited, waited]), Verdict::WaitSuccess);
        // The slot condition is not bounded by time.
        let mut s = PrefillDelayer::new(DelayerConfig {
            max_running_requests: Some(33),
            ..DelayerConfig::default()
        });
        s.record_prefill(16);
        let full = s.local_info(true, 0.9, 32, 2, true);
        assert_eq!(s.negotiate(&[full]), Verdict::NoWait);
        assert_eq!(s.negotiate(&[full]), Verdict::Delay);
    }

    #[test]
    fn prefill_history_keeps_the_last_sixteen() {
        let mut d = PrefillDelayer::default();
        d.record_prefill(100);
        for _ in 0..16 {
            d.record_prefill(2);
        }
        assert_eq!(d.local_info(true, 0.0, 0, 0, false).max_prefill_bs, 2);
    }
}
