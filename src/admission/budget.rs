//! The token budgets of one prefill pass (SGLang 0.5.12 `PrefillAdder` arithmetic).
//!
//! With `A` the pool's available tokens and `E` the prefix cache's evictable tokens:
//! - `rem_total = A + E − total_offset`, where `total_offset` reserves the expected decode
//!   growth of every running and admitted request (future-aware);
//! - `cur_rem = A + E − current_offset`, what this step's allocation needs;
//! - `rem_input` and `rem_chunk` cap the prefill tokens of this pass.

use super::tokens::{check_positive_tokens, invalid, room, sum_f64, MAX_TOKENS};
use super::CLIP_MAX_NEW_TOKENS;
use crate::pool::PoolError;

/// Verdict for the next candidate (SGLang's `AddReqResult`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AddResult {
    /// Keep adding.
    Continue,
    /// KV memory is exhausted: the caller sets `batch_is_full`.
    NoToken,
    /// Any other stop (input or chunk budget spent, request cap, ...).
    Other,
}

/// How one prefill pass budgets (per-pass constants of `PrefillAdder`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AdderConfig {
    /// Tokens per KV page.
    pub page_size: u64,
    /// `max_prefill_tokens` (16384): the input-token budget of one pass; the first
    /// request may exceed it.
    pub max_prefill_tokens: u64,
    /// `chunked_prefill_size`, or `None` to disable chunking.
    pub chunked_prefill_size: Option<u64>,
    /// Decode rows mixed into this prefill batch (mixed chunk), pre-charged to every budget.
    pub num_mixed_decode_tokens: u64,
    /// Cap on a request's expected output when reserving for it (4096).
    pub clip_max_new_tokens: u64,
    /// The current new-token ratio.
    pub new_token_ratio: f64,
    /// Chunks end on multiples of this (deterministic inference / kernel tiles).
    pub truncation_align_size: Option<u64>,
    /// At most this many requests per prefill batch.
    pub prefill_max_requests: Option<usize>,
    /// Whether the prefix cache is disabled; only then are `ignore_eos` requests admitted
    /// by SGLang's future simulation.
    pub prefix_cache_disabled: bool,
    /// How many chunked requests may be in flight at once (1 = SGLang).
    pub max_chunked_requests: usize,
}

impl AdderConfig {
    /// SGLang's defaults for `page_size` (`max_prefill_tokens` 16384, chunked prefill 8192,
    /// clip 4096, ratio 0.7, one chunked request).
    pub fn sglang_defaults(page_size: u64) -> Self {
        Self {
            page_size,
            max_prefill_tokens: 16384,
            chunked_prefill_size: Some(8192),
            num_mixed_decode_tokens: 0,
            clip_max_new_tokens: CLIP_MAX_NEW_TOKENS,
            new_token_ratio: 0.7,
            truncation_align_size: None,
            prefill_max_requests: None,
            prefix_cache_disabled: false,
            max_chunked_requests: 1,
        }
    }

    /// Refuses a configuration the budget arithmetic cannot represent or that could never
    /// admit anything; the error names the field. A `new_token_ratio` of 0 is accepted: the
    /// scheduler's ratio is 0 after a retraction left nobody running (the C ABI's adder
    /// refuses it from callers).
    pub fn check(&self) -> Result<(), PoolError> {
        check_positive_tokens("page_size", self.page_size)?;
        check_positive_tokens("max_prefill_tokens", self.max_prefill_tokens)?;
        if let Some(chunk) = self.chunked_prefill_size {
            check_positive_tokens("chunked_prefill_size", chunk)?;
        }
        if self.num_mixed_decode_tokens > MAX_TOKENS {
            return Err(invalid(format!(
                "num_mixed_decode_tokens {} exceeds INT64_MAX",
                self.num_mixed_decode_tokens
            )));
        }
        if self.clip_max_new_tokens == 0 {
            return Err(invalid(
                "clip_max_new_tokens must be positive (0 reserves no room for any output)",
            ));
        }
        if !(self.new_token_ratio.is_finite() && self.new_token_ratio >= 0.0) {
            return Err(invalid(format!(
                "new_token_ratio {} must be finite and non-negative",
                self.new_token_ratio
            )));
        }
        if self.max_chunked_requests == 0 {
            return Err(invalid("max_chunked_requests must be at least 1"));
        }
        Ok(())
    }
}

/// A request already decoding, as admission sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct RunningRequest {
    /// Prompt tokens.
    pub input_len: u64,
    /// Tokens generated so far.
    pub output_len: u64,
    /// The request's `max_new_tokens`.
    pub max_new_tokens: u64,
    /// `ignore_eos`: it will generate all `max_new_tokens`, so it is reserved at ratio 1.
    pub ignore_eos: bool,
}

/// The budgets of one prefill pass, updated as requests are admitted.
#[derive(Clone, Debug, PartialEq)]
pub struct PrefillBudget {
    pub(crate) page_size: u64,
    /// `A + E` at the start of the pass, minus prefixes locked by admitted requests.
    pub(crate) room: i64,
    pub(crate) total_offset: f64,
    pub(crate) current_offset: i64,
    pub(crate) rem_input: i64,
    pub(crate) rem_chunk: Option<i64>,
}

impl PrefillBudget {
    /// Budgets for a pass given the pool's available tokens, the cache's evictable tokens
    /// and the running requests. Refuses a config that fails [`AdderConfig::check`] and a
    /// room `available + evictable` beyond `INT64_MAX` tokens.
    pub fn try_new(
        config: &AdderConfig,
        available: u64,
        evictable: u64,
        running: &[RunningRequest],
    ) -> Result<Self, PoolError> {
        config.check()?;
        let room = room(available, evictable)? as i64;
        // All three are at most INT64_MAX (checked): the differences fit.
        let mixed = config.num_mixed_decode_tokens as i64;
        let mut total_offset = mixed as f64;
        for r in running {
            total_offset += Self::running_offset(config, r);
        }
        Ok(Self {
            page_size: config.page_size,
            room,
            total_offset,
            current_offset: mixed,
            rem_input: config.max_prefill_tokens as i64 - mixed,
            rem_chunk: config.chunked_prefill_size.map(|c| c as i64 - mixed),
        })
    }

    /// [`try_new`](Self::try_new) for values known to be valid.
    ///
    /// # Panics
    /// If `try_new` refuses them.
    pub fn new(
        config: &AdderConfig,
        available: u64,
        evictable: u64,
        running: &[RunningRequest],
    ) -> Self {
        Self::try_new(config, available, evictable, running)
            .unwrap_or_else(|e| panic!("PrefillBudget::new: {}", e.message()))
    }

    /// What a running request reserves: `min(max_new − output, clip) × ratio` (ratio 1 for
    /// `ignore_eos`, as in 0.5.23).
    pub fn running_offset(config: &AdderConfig, r: &RunningRequest) -> f64 {
        let left = r.max_new_tokens.saturating_sub(r.output_len);
        let ratio = if r.ignore_eos {
            1.0
        } else {
            config.new_token_ratio
        };
        left.min(config.clip_max_new_tokens) as f64 * ratio
    }

    /// `A + E − total_offset`: room left once everything admitted has grown.
    pub fn rem_total_tokens(&self) -> f64 {
        self.room as f64 - self.total_offset
    }

    /// `A + E − current_offset`: room left for this step's allocation. Saturates at
    /// `INT64_MIN` (both terms saturate, so their difference may not fit).
    pub fn cur_rem_tokens(&self) -> i64 {
        self.room.saturating_sub(self.current_offset)
    }

    /// Input tokens left in this pass.
    pub fn rem_input_tokens(&self) -> i64 {
        self.rem_input
    }

    /// Chunk tokens left in this pass (`None`: chunking disabled).
    pub fn rem_chunk_tokens(&self) -> Option<i64> {
        self.rem_chunk
    }

    /// SGLang's `budget_state`: `NoToken` when either memory budget is spent, `Other` when
    /// the input or chunk budget is, else `Continue`.
    pub fn state(&self) -> AddResult {
        if self.rem_total_tokens() <= 0.0 || self.cur_rem_tokens() <= 0 {
            AddResult::NoToken
        } else if self.rem_input <= 0 || self.rem_chunk.is_some_and(|c| c <= 0) {
            AddResult::Other
        } else {
            AddResult::Continue
        }
    }

    /// SGLang's `_update_prefill_budget`: the extend is page-ceiled and one extra page is
    /// reserved for the request's partial page.
    ///
    /// `max_new_tokens` may be any value (the caller clips it; a direct caller may not):
    /// the total offset is an exact float sum. The integer budgets saturate, which decides
    /// the same: an offset past `INT64_MAX` already exceeds any room, a remaining budget
    /// at `INT64_MIN` is as spent as below it.
    pub fn reserve(&mut self, extend_len: u64, max_new_tokens: u64) {
        let ps = self.page_size;
        let ext = extend_len.div_ceil(ps).saturating_mul(ps);
        self.total_offset += sum_f64([ext, max_new_tokens, ps]);
        let ext = tokens_i64(ext);
        self.current_offset = self
            .current_offset
            .saturating_add(ext.saturating_add(tokens_i64(ps)));
        self.rem_input = self.rem_input.saturating_sub(ext);
        if let Some(chunk) = &mut self.rem_chunk {
            *chunk = chunk.saturating_sub(ext);
        }
    }

    /// Locks `tokens` of a cached prefix: they stop counting as evictable room.
    pub fn lock_prefix(&mut self, tokens: u64) {
        self.room = self.room.saturating_sub(tokens_i64(tokens));
    }

    /// Undoes [`lock_prefix`](Self::lock_prefix) (a rejected candidate).
    pub fn unlock_prefix(&mut self, tokens: u64) {
        self.room = self.room.saturating_add(tokens_i64(tokens));
    }

    /// Releases a preempted running request: its reservation (`offset`, what
    /// [`running_offset`](Self::running_offset) gave for it), and its KV (`freed` tokens),
    /// which the engine frees before allocating this step's prefill. The room saturates at
    /// `INT64_MAX` (it can only undercount room no pool has). Refuses, changing nothing, an
    /// offset that is not finite and non-negative (a NaN would make every later budget
    /// comparison admit).
    pub fn release_running(&mut self, offset: f64, freed: u64) -> Result<(), PoolError> {
        if !(offset.is_finite() && offset >= 0.0) {
            return Err(invalid(format!(
                "released offset {offset} must be finite and non-negative"
            )));
        }
        self.total_offset -= offset;
        self.room = self.room.saturating_add(tokens_i64(freed));
        Ok(())
    }
}

/// A token count as the signed budgets hold it, saturating at `INT64_MAX`.
fn tokens_i64(tokens: u64) -> i64 {
    i64::try_from(tokens).unwrap_or(i64::MAX)
}

/// SGLang's mixed-chunk test setup: 8 decode rows mixed in, each running request with 50
/// tokens left at ratio 1, `max_prefill_tokens` 200, chunk 64, page size 1.
#[cfg(test)]
pub(crate) fn mixed_chunk_scenario() -> (AdderConfig, [RunningRequest; 8]) {
    let config = AdderConfig {
        max_prefill_tokens: 200,
        chunked_prefill_size: Some(64),
        num_mixed_decode_tokens: 8,
        new_token_ratio: 1.0,
        ..AdderConfig::sglang_defaults(1)
    };
    let running = [RunningRequest {
        input_len: 10,
        output_len: 0,
        max_new_tokens: 50,
        ignore_eos: false,
    }; 8];
    (config, running)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mixed_chunk_budgets_match_sglang_test() {
        // 8 decode rows mixed in, each with 50 tokens left at ratio 1:
        // rem_input 200 -> 192, rem_chunk 64 -> 56, total offset 8 + 8×50 = 408, current 8.
        let (config, running) = mixed_chunk_scenario();
        let b = PrefillBudget::new(&config, 10_000, 0, &running);
        assert_eq!(b.rem_input_tokens(), 192);
        assert_eq!(b.rem_chunk_tokens(), Some(56));
        assert_eq!(b.total_offset, 408.0);
        assert_eq!(b.current_offset, 8);
        assert_eq!(b.state(), AddResult::Continue);
    }

    #[test]
    fn reserve_page_ceils_and_adds_a_page() {
        let config = AdderConfig::sglang_defaults(16);
        let mut b = PrefillBudget::new(&config, 1000, 24, &[]);
        b.reserve(20, 100);
        assert_eq!(b.total_offset, (32 + 100 + 16) as f64);
        assert_eq!(b.cur_rem_tokens(), 1024 - 48);
        assert_eq!(b.rem_input_tokens(), 16384 - 32);
        assert_eq!(b.rem_chunk_tokens(), Some(8192 - 32));
    }

    #[test]
    fn state_reports_memory_before_input_budget() {
        let config = AdderConfig {
            max_prefill_tokens: 10,
            ..AdderConfig::sglang_defaults(1)
        };
        let mut b = PrefillBudget::new(&config, 100, 0, &[]);
        b.reserve(10, 0);
        assert_eq!(b.state(), AddResult::Other);
        b.reserve(200, 0);
        assert_eq!(b.state(), AddResult::NoToken);
    }

    #[test]
    fn ignore_eos_running_requests_reserve_at_ratio_one() {
        let config = AdderConfig::sglang_defaults(1);
        let r = RunningRequest {
            input_len: 5,
            output_len: 10,
            max_new_tokens: 5000,
            ignore_eos: true,
        };
        assert_eq!(PrefillBudget::running_offset(&config, &r), 4096.0);
        let r = RunningRequest {
            ignore_eos: false,
            ..r
        };
        assert!((PrefillBudget::running_offset(&config, &r) - 4096.0 * 0.7).abs() < 1e-9);
    }
}
