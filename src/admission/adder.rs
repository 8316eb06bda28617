//! `PrefillAdder`: decides, request by request, what joins this step's prefill batch.
//!
//! Each candidate is first *selected* (a pure decision over the current budgets) and only
//! then *committed* (budgets charged, prefix locked), so a rejected candidate leaves no
//! trace — SGLang 0.5.23's split, with 0.5.12's arithmetic.

use super::budget::{AddResult, AdderConfig, PrefillBudget, RunningRequest};
use super::tokens::{bad_lengths, ceil_paged, checked_ceil_paged, checked_sum, sum_f64};
use crate::pool::PoolError;

/// A waiting request offered to [`PrefillAdder::add_one_req`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Candidate {
    /// Tokens the request will have in the KV cache once prefilled: its prompt, plus the
    /// output so far for a retracted request.
    pub input_len: u64,
    /// Tokens of it already cached (page-aligned on a paged prefix cache).
    pub prefix_len: u64,
    /// Tokens of that cached prefix that are evictable right now and become protected when
    /// the request is admitted (its own prefix is not room for it). Requests sharing one
    /// prefix: pass it for the first only.
    pub prefix_evictable: u64,
    /// The request's `max_new_tokens`.
    pub max_new_tokens: u64,
    /// Tokens generated so far (non-zero for a retracted request).
    pub output_len: u64,
    /// Generates all `max_new_tokens` regardless of EOS.
    pub ignore_eos: bool,
}

impl Candidate {
    /// Tokens this prefill computes if admitted whole.
    pub fn extend_len(&self) -> u64 {
        self.input_len.saturating_sub(self.prefix_len)
    }

    /// Refuses impossible lengths: a prefix longer than the request, an evictable part
    /// longer than the prefix, or an `input_len` that, page-rounded, is beyond `INT64_MAX`
    /// tokens (the budgets could not count it).
    pub fn check(&self, page_size: u64) -> Result<(), PoolError> {
        if self.prefix_len > self.input_len || self.prefix_evictable > self.prefix_len {
            return Err(bad_lengths(format!(
                "candidate prefix_len {} / prefix_evictable {} exceed input_len {}",
                self.prefix_len, self.prefix_evictable, self.input_len
            )));
        }
        if checked_ceil_paged(self.input_len, page_size).is_none() {
            return Err(bad_lengths(format!(
                "candidate input_len {} rounded up to a {page_size}-token page exceeds INT64_MAX tokens",
                self.input_len
            )));
        }
        Ok(())
    }
}

/// The in-flight chunked request offered to [`PrefillAdder::add_chunked_req`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct ChunkedCandidate {
    /// Tokens already prefilled (its KV length; chunks need not end on a page boundary).
    pub prefix_len: u64,
    /// Prompt tokens not yet prefilled.
    pub remaining: u64,
    /// The request's `max_new_tokens`.
    pub max_new_tokens: u64,
    /// Tokens generated so far (non-zero for a retracted request; counted in `prefix_len +
    /// remaining`). Only the `ignore_eos` simulation reads it.
    pub output_len: u64,
    /// Generates all `max_new_tokens`. Only the `ignore_eos` simulation reads it.
    pub ignore_eos: bool,
}

impl ChunkedCandidate {
    /// Refuses a request whose length, `prefix_len + remaining` (also page-rounded), is
    /// beyond `INT64_MAX` tokens.
    pub fn check(&self, page_size: u64) -> Result<(), PoolError> {
        let fits = checked_sum(self.prefix_len, self.remaining)
            .and_then(|len| checked_ceil_paged(len, page_size));
        if fits.is_none() {
            return Err(bad_lengths(format!(
                "chunked request prefix_len {} + remaining {} exceeds INT64_MAX tokens",
                self.prefix_len, self.remaining
            )));
        }
        Ok(())
    }
}

/// What [`PrefillAdder::add_chunked_req`] decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkedOutcome {
    /// Tokens prefilled this step (0: no budget this step; the request stays in flight).
    pub extend_len: u64,
    /// Whether tokens remain for a later step.
    pub truncated: bool,
}

/// What [`PrefillAdder::add_one_req`] decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Admission {
    /// `Some(extend_len)` if the request joined the batch with that many tokens.
    pub extend_len: Option<u64>,
    /// Whether it joined as a chunk (more tokens follow in later steps).
    pub chunked: bool,
    /// Verdict for the next candidate (or why this one was refused).
    pub next: AddResult,
}

/// A decision made by `select`, applied by `commit`.
#[derive(Clone, Copy, Debug)]
struct Selected {
    extend_len: u64,
    reserve_max_new: u64,
    lock: u64,
    chunked: bool,
    /// Selected by the `ignore_eos` simulation, with this request's state in it (if any).
    ignore_eos: Option<Option<(f64, f64)>>,
}

/// One prefill pass's admission state.
#[derive(Clone, Debug)]
pub struct PrefillAdder {
    config: AdderConfig,
    budget: PrefillBudget,
    running: Vec<RunningRequest>,
    admitted: usize,
    chunked_in_flight: usize,
    /// `(tokens_left, tokens_occupied)` of running + admitted requests, sorted by tokens
    /// left, for the `ignore_eos` future simulation; built on first use.
    ignore_eos_states: Option<Vec<(f64, f64)>>,
    /// The states of the requests `add_one_req` admitted, and of the chunk continuations,
    /// before that first use: SGLang builds the simulation from its `can_run_list` too, so
    /// they grow in it.
    admitted_states: Vec<(f64, f64)>,
}

impl PrefillAdder {
    /// Starts a pass. `available` is the pool's free tokens, `evictable` the prefix cache's
    /// evictable tokens, `carried_chunked` the chunked requests still in flight. Refuses a
    /// config that fails [`AdderConfig::check`] and `available + evictable` beyond
    /// `INT64_MAX` tokens.
    pub fn try_new(
        config: AdderConfig,
        available: u64,
        evictable: u64,
        running: &[RunningRequest],
        carried_chunked: usize,
    ) -> Result<Self, PoolError> {
        Ok(Self {
            budget: PrefillBudget::try_new(&config, available, evictable, running)?,
            config,
            running: running.to_vec(),
            admitted: 0,
            chunked_in_flight: carried_chunked,
            ignore_eos_states: None,
            admitted_states: Vec::new(),
        })
    }

    /// [`try_new`](Self::try_new) for values known to be valid.
    ///
    /// # Panics
    /// If `try_new` refuses them.
    pub fn new(
        config: AdderConfig,
        available: u64,
        evictable: u64,
        running: &[RunningRequest],
        carried_chunked: usize,
    ) -> Self {
        Self::try_new(config, available, evictable, running, carried_chunked)
            .unwrap_or_else(|e| panic!("PrefillAdder::new: {}", e.message()))
    }

    /// The budgets as they stand.
    pub fn budget(&self) -> &PrefillBudget {
        &self.budget
    }

    /// Mutable budgets (the scheduler releases preempted requests' reservations).
    pub fn budget_mut(&mut self) -> &mut PrefillBudget {
        &mut self.budget
    }

    /// Requests admitted so far in this pass (chunk continuations included).
    pub fn admitted(&self) -> usize {
        self.admitted
    }

    /// SGLang's `budget_state`.
    pub fn budget_state(&self) -> AddResult {
        self.budget.state()
    }

    fn clip(&self, tokens: u64) -> u64 {
        tokens.min(self.config.clip_max_new_tokens)
    }

    /// Continues an in-flight chunked request (called first in a pass). It makes progress
    /// even when the memory budget is spent — with no room left SGLang still takes a full
    /// chunk, since stalling would hold the request's KV forever — but, unlike SGLang,
    /// never more than the free memory can hold now (SGLang would fail the allocation with
    /// "Prefill out of memory"). With not even a page free it waits (`extend_len == 0`).
    /// Refuses (changing nothing) a request [`ChunkedCandidate::check`] refuses.
    pub fn try_add_chunked_req(
        &mut self,
        req: ChunkedCandidate,
    ) -> Result<ChunkedOutcome, PoolError> {
        req.check(self.config.page_size)?;
        Ok(self.continue_chunk(req))
    }

    /// [`try_add_chunked_req`](Self::try_add_chunked_req) for a request known to be valid
    /// (the scheduler's are within its capacity).
    ///
    /// # Panics
    /// If [`ChunkedCandidate::check`] refuses it.
    pub fn add_chunked_req(&mut self, req: ChunkedCandidate) -> ChunkedOutcome {
        self.try_add_chunked_req(req)
            .unwrap_or_else(|e| panic!("PrefillAdder::add_chunked_req: {}", e.message()))
    }

    fn continue_chunk(&mut self, req: ChunkedCandidate) -> ChunkedOutcome {
        if self.config.prefix_cache_disabled && self.ignore_eos_states.is_none() {
            // SGLang's continuation joins `can_run_list` whatever it prefills, so the
            // `ignore_eos` simulation grows it too: its KV once prefilled, its output.
            let occupied = sum_f64([req.prefix_len, req.remaining]);
            self.admitted_states.extend(ignore_eos_state(
                req.max_new_tokens,
                req.output_len,
                occupied,
                req.ignore_eos,
                self.config.new_token_ratio,
            ));
        }
        let rem_total = self.budget.rem_total_tokens().trunc() as i64;
        let chunk = self.budget.rem_chunk_tokens().unwrap_or(rem_total);
        let mut rem = chunk.min(rem_total);
        if rem <= 0 {
            rem = chunk;
        }
        let fits = i64::try_from(self.fits_after(req.prefix_len)).unwrap_or(i64::MAX);
        let rem = rem.min(fits);
        if rem <= 0 || req.remaining == 0 {
            return ChunkedOutcome {
                extend_len: 0,
                truncated: req.remaining > 0,
            };
        }
        let rem = rem as u64;
        let truncated = req.remaining > rem;
        let extend_len = req.remaining.min(rem);
        let max_new = if truncated {
            0
        } else {
            self.clip(req.max_new_tokens)
        };
        self.budget.reserve(extend_len, max_new);
        self.admitted += 1;
        if !truncated {
            self.chunked_in_flight = self.chunked_in_flight.saturating_sub(1);
        }
        ChunkedOutcome {
            extend_len,
            truncated,
        }
    }

    /// The most tokens a sequence of `prefix` tokens can grow by with the free room: the
    /// rest of its partial page plus as many whole pages as the room holds.
    fn fits_after(&self, prefix: u64) -> u64 {
        let ps = self.config.page_size;
        let pages = self.budget.cur_rem_tokens().max(0) as u64 / ps;
        // Below `ps` plus at most the room: no overflow for a prefix within INT64_MAX.
        (ceil_paged(prefix, ps) - prefix) + pages * ps
    }

    /// Offers a waiting request. A refused request changes nothing; so does one
    /// [`Candidate::check`] refuses (the error).
    pub fn try_add_one_req(&mut self, req: &Candidate) -> Result<Admission, PoolError> {
        req.check(self.config.page_size)?;
        Ok(self.add_one_req_checked(req))
    }

    /// [`try_add_one_req`](Self::try_add_one_req) for a candidate known to be valid.
    ///
    /// # Panics
    /// If [`Candidate::check`] refuses it.
    pub fn add_one_req(&mut self, req: &Candidate) -> Admission {
        self.try_add_one_req(req)
            .unwrap_or_else(|e| panic!("PrefillAdder::add_one_req: {}", e.message()))
    }

    fn add_one_req_checked(&mut self, req: &Candidate) -> Admission {
        match self.select(req) {
            Ok(selected) => {
                if self.config.prefix_cache_disabled
                    && selected.ignore_eos.is_none()
                    && self.ignore_eos_states.is_none()
                {
                    self.admitted_states.extend(self.candidate_state(req));
                }
                self.commit(selected);
                Admission {
                    extend_len: Some(selected.extend_len),
                    chunked: selected.chunked,
                    next: self.budget.state(),
                }
            }
            Err(verdict) => Admission {
                extend_len: None,
                chunked: false,
                next: verdict,
            },
        }
    }

    fn select(&self, req: &Candidate) -> Result<Selected, AddResult> {
        if self
            .config
            .prefill_max_requests
            .is_some_and(|max| self.admitted >= max)
        {
            return Err(AddResult::Other);
        }
        if req.ignore_eos && self.config.prefix_cache_disabled {
            return self.select_ignore_eos(req);
        }
        let ps = self.config.page_size;
        let extend = req.extend_len();
        let max_new = self.clip(req.max_new_tokens.saturating_sub(req.output_len));
        let total = sum_f64([extend, max_new, ps]);
        if total >= self.budget.rem_total_tokens() {
            return Err(AddResult::NoToken);
        }
        let paged_extend = ceil_paged(extend, ps) as i64;
        if paged_extend >= self.budget.rem_input_tokens() && self.admitted > 0 {
            return Err(AddResult::Other);
        }
        // Lock the request's own prefix, then re-check: it is no longer evictable room.
        if total >= self.budget.rem_total_tokens() - req.prefix_evictable as f64 {
            return Err(AddResult::NoToken);
        }
        let whole = self
            .budget
            .rem_chunk_tokens()
            .is_none_or(|chunk| paged_extend <= chunk);
        if whole {
            return Ok(Selected {
                extend_len: extend,
                reserve_max_new: self.clip(req.max_new_tokens),
                lock: req.prefix_evictable,
                chunked: false,
                ignore_eos: None,
            });
        }
        let extend_len = self.chunk_len(req.prefix_len)?;
        Ok(Selected {
            extend_len,
            reserve_max_new: 0,
            lock: req.prefix_evictable,
            chunked: true,
            ignore_eos: None,
        })
    }

    /// The first chunk of a request that does not fit the chunk budget: the budget rounded
    /// down to a page and to `truncation_align_size`, ending on a page boundary.
    fn chunk_len(&self, prefix_len: u64) -> Result<u64, AddResult> {
        if self.chunked_in_flight >= self.config.max_chunked_requests.max(1) {
            return Err(AddResult::Other);
        }
        let ps = self.config.page_size;
        let rem_chunk = self.budget.rem_chunk_tokens().unwrap_or(0).max(0) as u64;
        let mut trunc = rem_chunk / ps * ps;
        if let Some(align) = self.config.truncation_align_size.filter(|&a| a > 0) {
            if trunc < align {
                return Err(AddResult::Other);
            }
            trunc = trunc / align * align;
        }
        let end = (prefix_len + trunc) / ps * ps;
        let trunc = end.saturating_sub(prefix_len);
        if trunc == 0 {
            return Err(AddResult::Other);
        }
        Ok(trunc)
    }

    /// SGLang's `add_one_req_ignore_eos`: simulate running and admitted requests finishing
    /// in order of remaining output, and refuse if memory would run out on the way.
    fn select_ignore_eos(&self, req: &Candidate) -> Result<Selected, AddResult> {
        let ps = self.config.page_size;
        let extend = req.extend_len();
        let paged_input = ceil_paged(extend, ps) as f64;
        let cur_rem = self.budget.cur_rem_tokens() as f64;
        if paged_input > cur_rem.min(self.budget.rem_total_tokens()) {
            return Err(AddResult::NoToken);
        }
        let state = self.candidate_state(req);
        let first_use = self.ignore_eos_states.is_none();
        let mut states = self.ignore_eos_states();
        if let Some(state) = state {
            insert_as_sglang(&mut states, state, first_use);
        }
        let mut freed = 0f64;
        let avail = cur_rem - paged_input;
        let n = states.len();
        for (i, &(left, occupied)) in states.iter().enumerate() {
            let bs = (n - i) as f64;
            let min_free = avail + freed - left * bs;
            if min_free <= bs {
                return Err(AddResult::NoToken);
            }
            freed += occupied;
        }
        let whole = self
            .budget
            .rem_chunk_tokens()
            .is_none_or(|chunk| extend as i64 <= chunk);
        // The simulation above judged the whole output; the reservation is clipped like
        // every other request's (SGLang reserves `min(max_new_tokens, CLIP)` here too).
        let (extend_len, chunked, reserve_max_new) = if whole {
            (extend, false, self.clip(req.max_new_tokens))
        } else {
            if self.chunked_in_flight >= self.config.max_chunked_requests.max(1) {
                return Err(AddResult::Other);
            }
            let trunc = self.budget.rem_chunk_tokens().unwrap_or(0).max(0) as u64;
            if trunc == 0 {
                return Err(AddResult::Other);
            }
            (trunc, true, 0)
        };
        Ok(Selected {
            extend_len,
            reserve_max_new,
            lock: 0,
            chunked,
            ignore_eos: Some(state),
        })
    }

    /// A candidate's simulation state. Its `input_len` is the KV it holds once
    /// prefilled, outputs so far included.
    fn candidate_state(&self, req: &Candidate) -> Option<(f64, f64)> {
        ignore_eos_state(
            req.max_new_tokens,
            req.output_len,
            req.input_len as f64,
            req.ignore_eos,
            self.config.new_token_ratio,
        )
    }

    fn ignore_eos_states(&self) -> Vec<(f64, f64)> {
        if let Some(states) = &self.ignore_eos_states {
            return states.clone();
        }
        let mut states: Vec<(f64, f64)> = self
            .running
            .iter()
            .filter_map(|r| {
                ignore_eos_state(
                    r.max_new_tokens,
                    r.output_len,
                    sum_f64([r.input_len, r.output_len]),
                    r.ignore_eos,
                    self.config.new_token_ratio,
                )
            })
            .chain(self.admitted_states.iter().copied())
            .collect();
        states.sort_by(|a, b| a.0.total_cmp(&b.0));
        states
    }

    fn commit(&mut self, s: Selected) {
        if let Some(state) = s.ignore_eos {
            let first_use = self.ignore_eos_states.is_none();
            let mut states = self.ignore_eos_states();
            if let Some(state) = state {
                insert_as_sglang(&mut states, state, first_use);
            }
            self.ignore_eos_states = Some(states);
        }
        self.budget.lock_prefix(s.lock);
        self.budget.reserve(s.extend_len, s.reserve_max_new);
        self.admitted += 1;
        if s.chunked {
            self.chunked_in_flight += 1;
        }
    }
}

/// `(tokens_left, tokens_occupied)` of a request for the `ignore_eos` simulation, or `None`
/// when it has nothing left to generate. `occupied` is the KV it holds once prefilled
/// (SGLang's `len(origin_input_ids) + len(output_ids)`), summed exactly by the caller. Both
/// are floats, as the simulation sums them.
fn ignore_eos_state(
    max_new: u64,
    output_len: u64,
    occupied: f64,
    ignore_eos: bool,
    ratio: f64,
) -> Option<(f64, f64)> {
    let ratio = if ignore_eos { 1.0 } else { ratio };
    let left = max_new as f64 * ratio - output_len as f64;
    (left > 0.0).then_some((left, occupied))
}

/// Puts a candidate's state where SGLang's `add_req_state` does. On the simulation's first
/// use, before every state with as many tokens left (it appends the candidate first, then
/// sorts stably). On later uses, before the first state with as many or more tokens left —
/// or, when every state has fewer, before the last one: its insertion loop's index stops on
/// the last element. That misplacement only ever refuses a candidate a sorted list would
/// admit (the next-to-last step then charges the larger remainder to two requests), never
/// the other way round; it is kept, so that verdicts are SGLang's.
fn insert_as_sglang(states: &mut Vec<(f64, f64)>, state: (f64, f64), first_use: bool) {
    let past_all = if first_use {
        states.len()
    } else {
        states.len().saturating_sub(1)
    };
    let at = states
        .iter()
        .position(|s| state.0 <= s.0)
        .unwrap_or(past_all);
    states.insert(at, state);
}

#[cfg(test)]
mod tests;
