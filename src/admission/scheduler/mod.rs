//! The continuous-batching scheduler step (SGLang's `get_next_batch_to_run`): prefill
//! first — the in-flight chunked requests, then waiting requests through a
//! [`PrefillAdder`] — and otherwise a decode step, with the decode memory check,
//! retraction and the new-token-ratio updates.
//!
//! The scheduler owns request descriptors, not KV: each [`StepPlan`] says what to prefill
//! or decode and which requests' KV the engine must free (retracted, aborted, preempted).
//! Issuing a plan commits it: the next `step` assumes the engine ran it.

mod digest;
mod policy;
mod request;
#[cfg(test)]
mod tests;

pub use policy::{Policy, PriorityConfig};
pub use request::{Phase, RequestSpec};

use super::budget::{AddResult, AdderConfig, PrefillBudget, RunningRequest};
use super::ratio::{NewTokenRatio, RatioConfig};
use super::tokens::{bad_lengths, check_positive_tokens, invalid, room, sum_f64, MAX_TOKENS};
use super::{ceil_paged, ChunkSizePredictor, PrefillAdder};
use super::{Candidate, ChunkedCandidate, CLIP_MAX_NEW_TOKENS};
use crate::pool::{ErrorKind, PoolError};
use request::{Registry, Request};

/// Which running requests a decode-memory shortage retracts first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum RetractionPolicy {
    /// Fewest generated tokens first, then longest prompt (SGLang's default).
    #[default]
    Length,
    /// Lowest priority first, then as `Length`.
    Priority,
}

/// How a scheduler behaves. `SchedulerConfig::new` gives SGLang's defaults.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SchedulerConfig {
    /// Tokens per KV page.
    pub page_size: u64,
    /// Token slots of the pool (plus nothing else): a request that cannot fit in it even
    /// alone is reported unfittable instead of waiting forever.
    pub capacity: u64,
    /// Input-token budget of one prefill step (16384).
    pub max_prefill_tokens: u64,
    /// Chunk size, or `None` to disable chunked prefill.
    pub chunked_prefill_size: Option<u64>,
    /// Mix the running requests' decode rows into prefill steps (needs chunked prefill).
    pub enable_mixed_chunk: bool,
    /// Cap on expected output when reserving (4096).
    pub clip_max_new_tokens: u64,
    /// Chunks end on multiples of this.
    pub truncation_align_size: Option<u64>,
    /// At most this many requests per prefill step.
    pub prefill_max_requests: Option<usize>,
    /// At most this many running requests (request slots).
    pub max_running_requests: Option<usize>,
    /// Chunked requests in flight at once (1 = SGLang).
    pub max_chunked_requests: usize,
    /// No prefix cache: `ignore_eos` requests go through the future simulation.
    pub prefix_cache_disabled: bool,
    /// Waiting-queue order.
    pub policy: Policy,
    /// Priority scheduling and preemption, or `None`.
    pub priority: Option<PriorityConfig>,
    /// Retraction order.
    pub retraction: RetractionPolicy,
    /// New-token-ratio tunables.
    pub ratio: RatioConfig,
    /// Dynamic chunk sizing: while a chunked request is in flight, the pass's chunk size is
    /// predicted from its prefilled length (SGLang, pipeline parallelism). `None`: fixed.
    pub dynamic_chunking: Option<ChunkSizePredictor>,
}

impl SchedulerConfig {
    /// SGLang's defaults for a pool of `capacity` tokens with `page_size`-token pages
    /// (chunked prefill 8192, as on an H100/H200).
    pub fn new(capacity: u64, page_size: u64) -> Self {
        Self {
            page_size,
            capacity,
            max_prefill_tokens: 16384,
            chunked_prefill_size: Some(8192),
            enable_mixed_chunk: false,
            clip_max_new_tokens: CLIP_MAX_NEW_TOKENS,
            truncation_align_size: None,
            prefill_max_requests: None,
            max_running_requests: None,
            max_chunked_requests: 1,
            prefix_cache_disabled: false,
            policy: Policy::Fcfs,
            priority: None,
            retraction: RetractionPolicy::Length,
            ratio: RatioConfig::default(),
            dynamic_chunking: None,
        }
    }
}

/// What a step does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum StepKind {
    /// Nothing to run.
    #[default]
    Idle,
    /// A prefill batch (maybe with decode rows mixed in).
    Prefill,
    /// A decode batch.
    Decode,
}

/// One request of a prefill batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PrefillEntry {
    /// Request id.
    pub id: u64,
    /// Tokens already in the KV cache (`prefix_lens[i]` for `alloc_extend`).
    pub prefix_len: u64,
    /// Tokens this step computes (`seq_lens[i] - prefix_lens[i]`).
    pub extend_len: u64,
    /// More chunks follow in later steps.
    pub chunked: bool,
}

/// A request whose KV the engine must free (retracted or preempted, then re-queued).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Evicted {
    /// Request id.
    pub id: u64,
    /// Tokens of KV in its row.
    pub kv_len: u64,
    /// Of those, the leading tokens that belong to the prefix cache (its matched prefix at
    /// admission): the engine frees only `prefix_len..kv_len` and unlocks the prefix.
    pub prefix_len: u64,
}

impl Evicted {
    fn of(r: &Request) -> Self {
        Self {
            id: r.spec.id,
            kv_len: r.kv_len,
            prefix_len: r.spec.prefix_len.min(r.kv_len),
        }
    }

    /// Tokens of free room the eviction gives back: the request's own pages. A cached
    /// prefix only becomes evictable, and then only if no other request locks it.
    fn freed(&self, page_size: u64) -> u64 {
        ceil_paged(self.kv_len, page_size) - ceil_paged(self.prefix_len, page_size)
    }
}

/// What a request leaving the scheduler ([`Scheduler::finish_released`],
/// [`Scheduler::abort_released`]) held in its slot row, split the way the engine must
/// release it: `row[prefix_len .. kv_len)` is the request's own KV (free it, or insert it
/// into the prefix cache as SGLang's `cache_finished_req` does), `row[0 .. prefix_len)` is
/// the cached prefix it reused, which admission locked in the engine's prefix cache (unlock
/// it; do not free it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Released {
    /// Request id.
    pub id: u64,
    /// Tokens of KV in its row (what `finish` / `abort` return).
    pub kv_len: u64,
    /// Leading tokens of the row that belong to the prefix cache: the `prefix_len` the
    /// engine gave (at submit or `update_prefix`) when the request was last admitted, capped
    /// at `kv_len`. 0 for a request that holds no KV (waiting: never admitted, or retracted
    /// or preempted since).
    pub prefix_len: u64,
    /// Of `prefix_len`, the tokens the engine declared evictable (`prefix_evictable`) before
    /// that admission: the part of the prefix no other request locked then. A record from
    /// admission time, not the lock state now: the scheduler does not track other requests'
    /// locks on the same prefix (the engine's prefix cache does).
    pub prefix_evictable: u64,
}

impl Released {
    fn of(r: &Request) -> Self {
        let prefix_len = r.spec.prefix_len.min(r.kv_len);
        Self {
            id: r.spec.id,
            kv_len: r.kv_len,
            prefix_len,
            prefix_evictable: r.spec.prefix_evictable.min(prefix_len),
        }
    }
}

/// The scheduler's decision for one step.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StepPlan {
    /// What the step runs.
    pub kind: StepKind,
    /// Prefill entries (chunk continuations first), for `alloc_extend`.
    pub prefill: Vec<PrefillEntry>,
    /// Requests decoding this step (with a prefill: mixed-in decode rows), for `alloc_decode`;
    /// each one's sequence grows by one token.
    pub decode: Vec<u64>,
    /// Retracted for lack of decode memory: free their KV, they wait again.
    pub retracted: Vec<Evicted>,
    /// Preempted by higher-priority requests: free their KV, they wait again.
    pub preempted: Vec<Evicted>,
    /// Gone for lack of memory: a request that could not decode even alone, or an evicted
    /// one whose output has grown past what the pool could ever re-admit. Free their KV.
    pub aborted: Vec<Evicted>,
    /// Memory is exhausted for new requests (SGLang's `batch_is_full`).
    pub batch_is_full: bool,
    /// The new-token ratio after this step.
    pub new_token_ratio: f64,
}

/// Result of [`Scheduler::submit`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SubmitOutcome {
    /// Waiting for admission.
    Queued,
    /// Can never be admitted: `needed` tokens (fill + clipped output + a page) do not fit
    /// the pool's `capacity`. Not queued.
    Unfittable {
        /// Tokens the request would need at admission.
        needed: u64,
        /// The pool's capacity.
        capacity: u64,
    },
}

/// Counters of a scheduler.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SchedulerStats {
    /// `step` calls.
    pub steps: u64,
    /// Prefill steps.
    pub prefill_steps: u64,
    /// Decode steps.
    pub decode_steps: u64,
    /// Requests admitted (first chunk or whole).
    pub admitted: u64,
    /// Prefill chunks issued, continuations included.
    pub chunks: u64,
    /// Retractions.
    pub retractions: u64,
    /// Preemptions.
    pub preemptions: u64,
    /// Aborted for lack of memory.
    pub aborts: u64,
    /// Submissions refused as unfittable.
    pub unfittable: u64,
    /// Requests finished.
    pub finished: u64,
}

/// SGLang's scheduler step over engine-supplied request descriptors.
#[derive(Debug)]
pub struct Scheduler {
    config: SchedulerConfig,
    ratio: NewTokenRatio,
    requests: Registry,
    /// Slots of waiting requests (policy orders them each pass).
    waiting: Vec<u32>,
    /// Slots of chunked requests in flight, oldest first.
    chunking: Vec<u32>,
    /// Slots of running requests in admission order.
    running: Vec<u32>,
    batch_is_full: bool,
    next_arrival: u64,
    stats: SchedulerStats,
}

fn bad(kind: ErrorKind, message: impl Into<String>) -> PoolError {
    PoolError::new(kind, message)
}

impl Scheduler {
    /// A scheduler with nothing queued. Refuses (naming the field) a configuration whose
    /// arithmetic cannot be represented or that could never admit anything: a zero or
    /// beyond-`INT64_MAX` capacity, `max_prefill_tokens` or chunk size, a page larger than
    /// the capacity, `clip_max_new_tokens` 0, non-positive or non-finite ratios, a
    /// dynamic-chunking predictor whose `max_prefill_tokens` is beyond `INT64_MAX`.
    pub fn new(config: SchedulerConfig) -> Result<Self, PoolError> {
        if config.page_size == 0 || config.capacity == 0 {
            return Err(bad(
                ErrorKind::InvalidArgument,
                "page_size and capacity must be positive",
            ));
        }
        check_positive_tokens("capacity", config.capacity)?;
        if config.page_size > config.capacity {
            return Err(invalid(format!(
                "page_size {} exceeds capacity {}: no request could ever fit",
                config.page_size, config.capacity
            )));
        }
        check_positive_tokens("max_prefill_tokens", config.max_prefill_tokens)?;
        if let Some(chunk) = config.chunked_prefill_size.filter(|&c| c > MAX_TOKENS) {
            return Err(invalid(format!(
                "chunked_prefill_size {chunk} exceeds INT64_MAX"
            )));
        }
        // A predicted chunk is at most the predictor's `max_prefill_tokens`: past INT64_MAX
        // it would be a chunk size the pass's budgets cannot count.
        if let Some(p) = config
            .dynamic_chunking
            .filter(|p| p.max_prefill_tokens > MAX_TOKENS)
        {
            return Err(invalid(format!(
                "dynamic_chunking.max_prefill_tokens {} exceeds INT64_MAX",
                p.max_prefill_tokens
            )));
        }
        if config.clip_max_new_tokens == 0 {
            return Err(invalid(
                "clip_max_new_tokens must be positive (0 reserves no room for any output)",
            ));
        }
        config.ratio.check()?;
        if config.chunked_prefill_size == Some(0) || config.truncation_align_size == Some(0) {
            return Err(bad(
                ErrorKind::InvalidArgument,
                "chunked_prefill_size and truncation_align_size must be positive when set",
            ));
        }
        if let (Some(chunk), Some(align)) =
            (config.chunked_prefill_size, config.truncation_align_size)
        {
            if chunk < align {
                return Err(bad(
                    ErrorKind::InvalidArgument,
                    format!("chunked_prefill_size {chunk} is smaller than truncation_align_size {align}"),
                ));
            }
        }
        if config.max_chunked_requests == 0 {
            return Err(bad(
                ErrorKind::InvalidArgument,
                "max_chunked_requests must be at least 1",
            ));
        }
        Ok(Self {
            ratio: NewTokenRatio::new(config.ratio),
            config,
            requests: Registry::default(),
            waiting: Vec::new(),
            chunking: Vec::new(),
            running: Vec::new(),
            batch_is_full: false,
            next_arrival: 0,
            stats: SchedulerStats::default(),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &SchedulerConfig {
        &self.config
    }

    /// Counters.
    pub fn stats(&self) -> SchedulerStats {
        self.stats
    }

    /// The current new-token ratio.
    pub fn new_token_ratio(&self) -> f64 {
        self.ratio.current()
    }

    /// Waiting, chunking and running request counts.
    pub fn counts(&self) -> (usize, usize, usize) {
        (self.waiting.len(), self.chunking.len(), self.running.len())
    }

    /// A request's phase, KV length and output length, or `None` if unknown.
    pub fn request(&self, id: u64) -> Option<(Phase, u64, u64)> {
        let r = &self.requests[self.requests.slot(id)?];
        Some((r.phase, r.kv_len, r.spec.output_len))
    }

    /// Tokens a request needs at admission: fill + clipped remaining output + a page (with
    /// the prefix cache disabled, an `ignore_eos` request goes through the future
    /// simulation instead, which needs its page-ceiled fill + all its remaining output + 1).
    /// A request needing the pool's whole capacity or more can never be admitted. The sum
    /// saturates at `u64::MAX` (a need beyond 64 bits is still "more than any pool").
    pub fn admission_need(&self, spec: &RequestSpec) -> u64 {
        let ps = self.config.page_size;
        let fill = spec.input_len.saturating_add(spec.output_len);
        let left = spec.max_new_tokens.saturating_sub(spec.output_len);
        if spec.ignore_eos && self.config.prefix_cache_disabled {
            return fill
                .div_ceil(ps)
                .saturating_mul(ps)
                .saturating_add(left)
                .saturating_add(1);
        }
        fill.saturating_add(left.min(self.config.clip_max_new_tokens))
            .saturating_add(ps)
    }

    /// Queues a request. Ids must be unique among live requests; `input_len` must be
    /// positive and `prefix_len` smaller than it (at least one token is always computed).
    pub fn submit(&mut self, spec: RequestSpec) -> Result<SubmitOutcome, PoolError> {
        if self.requests.slot(spec.id).is_some() {
            return Err(bad(
                ErrorKind::InvalidState,
                format!("request {} is already queued or running", spec.id),
            ));
        }
        check_prefix(&spec)?;
        let needed = self.admission_need(&spec);
        if needed >= self.config.capacity {
            self.stats.unfittable += 1;
            return Ok(SubmitOutcome::Unfittable {
                needed,
                capacity: self.config.capacity,
            });
        }
        let slot = self.requests.insert(Request::new(spec, self.next_arrival));
        self.next_arrival += 1;
        self.waiting.push(slot);
        Ok(SubmitOutcome::Queued)
    }

    /// Refreshes a waiting request's cached-prefix information (after the engine's prefix
    /// cache changed, or after a retraction).
    pub fn update_prefix(
        &mut self,
        id: u64,
        prefix_len: u64,
        prefix_evictable: u64,
        prefix_path: Option<&[u64]>,
    ) -> Result<(), PoolError> {
        let Some(slot) = self.requests.slot(id) else {
            return Err(bad(
                ErrorKind::InvalidArgument,
                format!("unknown request {id}"),
            ));
        };
        let req = &mut self.requests[slot];
        if req.phase != Phase::Waiting {
            return Err(bad(
                ErrorKind::InvalidState,
                format!("request {id} is not waiting; its prefix is fixed"),
            ));
        }
        check_prefix(&RequestSpec {
            id,
            input_len: req.spec.input_len,
            output_len: req.fill_len - req.spec.input_len,
            prefix_len,
            prefix_evictable,
            ..RequestSpec::default()
        })?;
        req.spec.prefix_len = prefix_len;
        req.spec.prefix_evictable = prefix_evictable;
        if let Some(path) = prefix_path {
            req.spec.prefix_path = path.to_vec();
        }
        Ok(())
    }

    /// The engine finished a running request (EOS or length): it frees the request's KV.
    /// Returns the KV length it held.
    pub fn finish(&mut self, id: u64) -> Result<u64, PoolError> {
        self.finish_released(id).map(|r| r.kv_len)
    }

    /// [`finish`](Self::finish), reporting what the request held: its KV length and the
    /// leading prefix-cache tokens of its row (see [`Released`]). Same checks and effect.
    pub fn finish_released(&mut self, id: u64) -> Result<Released, PoolError> {
        let slot = self.requests.slot(id);
        match slot.map(|s| self.requests[s].phase) {
            Some(Phase::Running) => {}
            Some(_) => {
                return Err(bad(
                    ErrorKind::InvalidState,
                    format!("request {id} is not running; use abort"),
                ))
            }
            None => {
                return Err(bad(
                    ErrorKind::InvalidArgument,
                    format!("unknown request {id}"),
                ))
            }
        }
        self.stats.finished += 1;
        Ok(self.remove(slot.expect("running")))
    }

    /// Drops a request in any phase. Returns the KV length it held (to free).
    pub fn abort(&mut self, id: u64) -> Result<u64, PoolError> {
        self.abort_released(id).map(|r| r.kv_len)
    }

    /// [`abort`](Self::abort), reporting what the request held (see [`Released`]).
    pub fn abort_released(&mut self, id: u64) -> Result<Released, PoolError> {
        let Some(slot) = self.requests.slot(id) else {
            return Err(bad(
                ErrorKind::InvalidArgument,
                format!("unknown request {id}"),
            ));
        };
        Ok(self.remove(slot))
    }

    fn remove(&mut self, slot: u32) -> Released {
        let req = self.requests.remove(slot);
        let list = match req.phase {
            Phase::Waiting => &mut self.waiting,
            Phase::Chunking => &mut self.chunking,
            Phase::Running => &mut self.running,
        };
        list.retain(|&x| x != slot);
        if req.phase == Phase::Running {
            // The running batch shrank: room for new requests again (SGLang clears
            // `batch_is_full` whenever the running batch gets smaller).
            self.batch_is_full = false;
        }
        Released::of(&req)
    }

    fn running_view(&self, slot: u32) -> RunningRequest {
        let r = &self.requests[slot];
        RunningRequest {
            input_len: r.spec.input_len,
            output_len: r.spec.output_len,
            max_new_tokens: r.spec.max_new_tokens,
            ignore_eos: r.spec.ignore_eos,
        }
    }

    fn adder_config(&self, mixed: u64) -> AdderConfig {
        AdderConfig {
            page_size: self.config.page_size,
            max_prefill_tokens: self.config.max_prefill_tokens,
            chunked_prefill_size: self.pass_chunk_size(),
            num_mixed_decode_tokens: mixed,
            clip_max_new_tokens: self.config.clip_max_new_tokens,
            new_token_ratio: self.ratio.current(),
            truncation_align_size: self.config.truncation_align_size,
            prefill_max_requests: self.config.prefill_max_requests,
            prefix_cache_disabled: self.config.prefix_cache_disabled,
            max_chunked_requests: self.config.max_chunked_requests,
        }
    }

    /// This pass's chunk size: predicted from the oldest in-flight chunked request's
    /// progress with dynamic chunking, else the configured one.
    fn pass_chunk_size(&self) -> Option<u64> {
        let fixed = self.config.chunked_prefill_size;
        match (self.config.dynamic_chunking, self.chunking.first()) {
            (Some(predictor), Some(&slot)) if fixed.is_some() => {
                predictor.predict(self.requests[slot].kv_len).or(fixed)
            }
            _ => fixed,
        }
    }

    /// Plans the next step from the pool's free tokens and the prefix cache's evictable
    /// tokens. `allow_prefill = false` skips prefill this step (e.g. a PrefillDelayer
    /// verdict negotiated across ranks). Refuses, changing nothing, `available + evictable`
    /// beyond `INT64_MAX` tokens (no pool holds that many).
    pub fn try_step(
        &mut self,
        available: u64,
        evictable: u64,
        allow_prefill: bool,
    ) -> Result<StepPlan, PoolError> {
        let room = room(available, evictable)?;
        Ok(self.step_within(available, evictable, room, allow_prefill))
    }

    /// [`try_step`](Self::try_step) for a room known to be within `INT64_MAX` tokens.
    ///
    /// # Panics
    /// If `try_step` refuses it.
    pub fn step(&mut self, available: u64, evictable: u64, allow_prefill: bool) -> StepPlan {
        self.try_step(available, evictable, allow_prefill)
            .unwrap_or_else(|e| panic!("Scheduler::step: {}", e.message()))
    }

    fn step_within(
        &mut self,
        available: u64,
        evictable: u64,
        room: u64,
        allow_prefill: bool,
    ) -> StepPlan {
        self.stats.steps += 1;
        let mut plan = StepPlan::default();
        if self.requests.is_empty() {
            self.ratio.reset();
            self.batch_is_full = false;
        } else if allow_prefill && self.prefill(available, evictable, &mut plan) {
            plan.kind = StepKind::Prefill;
            self.stats.prefill_steps += 1;
        } else if !self.running.is_empty() {
            self.decode(room, &mut plan);
            plan.kind = StepKind::Decode;
            self.stats.decode_steps += 1;
        } else if allow_prefill && !self.chunking.is_empty() {
            self.break_chunking_stall(&mut plan);
        }
        plan.batch_is_full = self.batch_is_full;
        plan.new_token_ratio = self.ratio.current();
        plan
    }

    // ---- prefill ----------------------------------------------------------------------

    fn prefill(&mut self, available: u64, evictable: u64, plan: &mut StepPlan) -> bool {
        let preemption = self
            .config
            .priority
            .and_then(|p| p.preemption_threshold)
            .is_some();
        if preemption || self.running.is_empty() {
            self.batch_is_full = false;
        }
        if (self.batch_is_full || self.waiting.is_empty()) && self.chunking.is_empty() {
            return false;
        }
        let allocatable = self.config.max_running_requests.map_or(usize::MAX, |max| {
            max.saturating_sub(self.running.len() + self.chunking.len())
        });
        let mixed = self.config.enable_mixed_chunk
            && self.config.chunked_prefill_size.is_some()
            && !self.running.is_empty();
        let num_mixed = if mixed { self.running.len() as u64 } else { 0 };
        let running: Vec<RunningRequest> = self
            .running
            .iter()
            .map(|&slot| self.running_view(slot))
            .collect();
        let mut adder = PrefillAdder::new(
            self.adder_config(num_mixed),
            available,
            evictable,
            &running,
            self.chunking.len(),
        );

        let mut finished_chunking = Vec::new();
        for &slot in &self.chunking {
            let req = &mut self.requests[slot];
            let out = adder.add_chunked_req(ChunkedCandidate {
                prefix_len: req.kv_len,
                remaining: req.fill_len - req.kv_len,
                max_new_tokens: req.spec.max_new_tokens,
                output_len: req.spec.output_len,
                ignore_eos: req.spec.ignore_eos,
            });
            if out.extend_len == 0 {
                continue;
            }
            plan.prefill.push(PrefillEntry {
                id: req.spec.id,
                prefix_len: req.kv_len,
                extend_len: out.extend_len,
                chunked: out.truncated,
            });
            req.kv_len += out.extend_len;
            if !out.truncated {
                finished_chunking.push(slot);
            }
        }

        let mut queue = if adder.budget_state() == AddResult::Other {
            Vec::new() // the input or chunk budget is spent: nobody else can join
        } else {
            self.waiting.clone()
        };
        policy::order(
            self.config.policy,
            self.config.priority,
            &mut queue,
            &self.requests,
            self.stats.steps,
        );

        let mut admitted = Vec::new();
        for &slot in &queue {
            if self.requests[slot].phase != Phase::Waiting {
                continue; // preempted requests re-queued this pass wait for the next one
            }
            if adder.budget_state() == AddResult::Other {
                break;
            }
            if admitted.len() >= allocatable {
                self.batch_is_full = true;
            }
            if self.batch_is_full && !self.preempt_for(slot, &mut adder, plan) {
                break;
            }
            let req = &mut self.requests[slot];
            let admission = adder.add_one_req(&Candidate {
                input_len: req.fill_len,
                prefix_len: req.spec.prefix_len,
                prefix_evictable: req.spec.prefix_evictable,
                max_new_tokens: req.spec.max_new_tokens,
                output_len: req.spec.output_len,
                ignore_eos: req.spec.ignore_eos,
            });
            if let Some(extend_len) = admission.extend_len {
                admitted.push(slot);
                plan.prefill.push(PrefillEntry {
                    id: req.spec.id,
                    prefix_len: req.spec.prefix_len,
                    extend_len,
                    chunked: admission.chunked,
                });
                req.kv_len = req.spec.prefix_len + extend_len;
                req.phase = if admission.chunked {
                    Phase::Chunking
                } else {
                    Phase::Running
                };
                self.stats.admitted += 1;
            }
            match admission.next {
                AddResult::Continue => {}
                AddResult::NoToken => {
                    self.batch_is_full = !admitted.is_empty() || !self.running.is_empty();
                    break;
                }
                AddResult::Other => break,
            }
        }

        if plan.prefill.is_empty() {
            return false;
        }
        self.stats.chunks += plan.prefill.len() as u64;
        // Mixed chunk: the running requests decode in the same step if their next
        // tokens fit what the prefill leaves (their rows were pre-charged).
        if mixed {
            let room = adder
                .budget()
                .cur_rem_tokens()
                .saturating_add(num_mixed as i64);
            if room >= 0 && self.decode_need(&self.running) <= room as u64 {
                self.advance_decode(plan);
            }
        }
        // Commit: admitted requests leave the queue; finished prefills start running.
        let requests = &self.requests;
        self.waiting
            .retain(|&slot| requests[slot].phase == Phase::Waiting);
        for slot in admitted {
            let req = &mut self.requests[slot];
            if req.phase == Phase::Chunking {
                self.chunking.push(slot);
            } else {
                req.spec.output_len += 1;
                self.running.push(slot);
            }
        }
        for slot in finished_chunking {
            self.chunking.retain(|&x| x != slot);
            let req = &mut self.requests[slot];
            req.phase = Phase::Running;
            req.spec.output_len += 1;
            self.running.push(slot);
        }
        true
    }

    /// Moves a running (or chunking) request back to the queue: its KV is to be freed. A
    /// request whose output has grown so much that it can no longer be re-admitted even
    /// alone is dropped instead (`false`), rather than blocking the queue forever. The
    /// caller drops the slot from the running or chunking list ([`Self::compact`]).
    fn requeue(&mut self, slot: u32) -> (Evicted, bool) {
        let r = &mut self.requests[slot];
        let evicted = Evicted::of(r);
        r.retract();
        if self.admission_need(&self.requests[slot].spec) >= self.config.capacity {
            self.requests.remove(slot);
            self.stats.aborts += 1;
            return (evicted, false);
        }
        self.waiting.push(slot);
        (evicted, true)
    }

    /// Drops requests that left the running or chunking phase from those lists, keeping
    /// their order (one pass, however many were evicted).
    fn compact(&mut self) {
        let requests = &self.requests;
        let phase = |slot: u32| requests.get(slot).map(|r| r.phase);
        self.running.retain(|&s| phase(s) == Some(Phase::Running));
        self.chunking.retain(|&s| phase(s) == Some(Phase::Chunking));
    }

    /// Requeues (or, if it can never fit again, aborts) the request in `slot`, reporting it
    /// in `requeued` or `plan.aborted`; returns the room its eviction frees.
    fn evict(
        &mut self,
        slot: u32,
        requeued: fn(&mut StepPlan) -> &mut Vec<Evicted>,
        plan: &mut StepPlan,
    ) -> u64 {
        let (evicted, queued) = self.requeue(slot);
        let freed = evicted.freed(self.config.page_size);
        if queued {
            requeued(plan).push(evicted);
        } else {
            plan.aborted.push(evicted);
        }
        freed
    }

    /// SGLang's `preempt_to_schedule`: frees room for the request in `slot` by preempting
    /// running requests whose priority is worse by more than the threshold (lowest
    /// priority, newest first), all or nothing.
    fn preempt_for(&mut self, slot: u32, adder: &mut PrefillAdder, plan: &mut StepPlan) -> bool {
        let Some(prio) = self.config.priority else {
            return false;
        };
        let Some(threshold) = prio.preemption_threshold else {
            return false;
        };
        let req = &self.requests[slot];
        let cfg = self.adder_config(0);
        let mut need = sum_f64([
            req.fill_len - req.spec.prefix_len,
            req.spec.max_new_tokens.min(cfg.clip_max_new_tokens),
        ]) - adder.budget().rem_total_tokens();
        let rank = prio.rank(req.spec.priority);
        let mut order = self.running.clone();
        let requests = &self.requests;
        order.sort_by_cached_key(|&cand| {
            let c = &requests[cand];
            (
                std::cmp::Reverse(prio.rank(c.spec.priority)),
                std::cmp::Reverse(c.arrival),
            )
        });
        let mut victims = Vec::new();
        for cand in order {
            if prio.rank(self.requests[cand].spec.priority) - rank <= i128::from(threshold) {
                break;
            }
            let offset = PrefillBudget::running_offset(&cfg, &self.running_view(cand));
            need -= offset;
            victims.push((cand, offset));
            if need <= 0.0 {
                break;
            }
        }
        if victims.is_empty() || need > 0.0 {
            return false;
        }
        for (victim, offset) in victims {
            let freed = self.evict(victim, |p| &mut p.preempted, plan);
            adder
                .budget_mut()
                .release_running(offset, freed)
                .expect("running_offset is finite and non-negative");
            self.stats.preemptions += 1;
        }
        self.compact();
        self.batch_is_full = false;
        true
    }

    /// Chunked requests that cannot continue while nothing runs would wait forever (only
    /// their own KV and unreclaimable memory are left): retract the newest, or abort the
    /// last one. SGLang, with one chunked request, fails the allocation instead.
    fn break_chunking_stall(&mut self, plan: &mut StepPlan) {
        let Some(&slot) = self.chunking.last() else {
            return;
        };
        if self.chunking.len() > 1 {
            self.evict(slot, |p| &mut p.retracted, plan);
            self.compact();
            self.stats.retractions += 1;
        } else {
            plan.aborted.push(Evicted::of(&self.requests[slot]));
            self.remove(slot);
            self.stats.aborts += 1;
        }
    }

    // ---- decode -----------------------------------------------------------------------

    /// Tokens the next decode step of `slots` needs: a page for each request whose KV ends
    /// on a page boundary. It saturates: it is only compared with the room, which it then
    /// exceeds either way.
    fn decode_need(&self, slots: &[u32]) -> u64 {
        let ps = self.config.page_size;
        ps.saturating_mul(
            slots
                .iter()
                .filter(|&&slot| self.requests[slot].kv_len.is_multiple_of(ps))
                .count() as u64,
        )
    }

    fn decode(&mut self, room: u64, plan: &mut StepPlan) {
        if self.decode_need(&self.running) <= room {
            self.ratio.decay_step();
        } else {
            self.retract_for_decode(room, plan);
        }
        self.advance_decode(plan);
    }

    /// SGLang's `retract_decode`: retract in the policy's order until the rest can decode,
    /// keeping at least one request; abort that one if even it cannot; then set the ratio
    /// to the estimate over the requests that stay.
    fn retract_for_decode(&mut self, room: u64, plan: &mut StepPlan) {
        let prio = self.config.priority;
        let by_priority = self.config.retraction == RetractionPolicy::Priority;
        let ps = self.config.page_size;
        // (key, slot, needs a page), sorted descending by the retraction key so the next
        // request to retract is at the end. Ties keep admission order.
        let mut order: Vec<_> = self
            .running
            .iter()
            .map(|&slot| {
                let r = &self.requests[slot];
                let p = match (by_priority, prio) {
                    (true, Some(p)) => -p.rank(r.spec.priority),
                    _ => 0,
                };
                let key = (p, r.spec.output_len, std::cmp::Reverse(r.spec.input_len));
                (key, slot, r.kv_len.is_multiple_of(ps))
            })
            .collect();
        order.sort_by_key(|o| std::cmp::Reverse(o.0));
        // Exact (128-bit) need and room: the need shrinks as requests are retracted.
        let (ps, mut room) = (u128::from(ps), u128::from(room));
        let mut need = ps * order.iter().filter(|o| o.2).count() as u128;
        // The running batch shrinks: new requests may fit again (SGLang clears the flag).
        self.batch_is_full = false;
        while order.len() > 1 && need > room {
            let (_, slot, needs_page) = order.pop().expect("non-empty");
            need -= if needs_page { ps } else { 0 };
            room += u128::from(self.evict(slot, |p| &mut p.retracted, plan));
            self.stats.retractions += 1;
        }
        self.compact();
        if need > room {
            let (_, slot, _) = order.pop().expect("one left");
            plan.aborted.push(Evicted::of(&self.requests[slot]));
            self.remove(slot);
            self.stats.aborts += 1;
        }
        let requests = &self.requests;
        let estimate = NewTokenRatio::retraction_estimate(order.iter().map(|o| {
            let r = &requests[o.1];
            (r.spec.output_len, r.spec.max_new_tokens)
        }));
        self.ratio.set_after_retraction(estimate);
    }

    /// Every running request decodes one token.
    fn advance_decode(&mut self, plan: &mut StepPlan) {
        for &slot in &self.running {
            let r = &mut self.requests[slot];
            r.kv_len += 1;
            r.spec.output_len += 1;
            plan.decode.push(r.spec.id);
        }
    }
}

fn check_prefix(spec: &RequestSpec) -> Result<(), PoolError> {
    let Some(fill) = spec.input_len.checked_add(spec.output_len) else {
        return Err(bad_lengths(format!(
            "request {}: input_len {} + output_len {} overflows 64 bits",
            spec.id, spec.input_len, spec.output_len
        )));
    };
    if spec.input_len == 0 {
        return Err(bad(
            ErrorKind::InvalidLengths,
            format!("request {}: input_len is 0", spec.id),
        ));
    }
    if spec.prefix_len >= fill {
        return Err(bad(
            ErrorKind::InvalidLengths,
            format!(
                "request {}: prefix_len {} must be less than the {} tokens to fill (one token is always computed)",
                spec.id, spec.prefix_len, fill
            ),
        ));
    }
    if spec.prefix_evictable > spec.prefix_len {
        return Err(bad(
            ErrorKind::InvalidLengths,
            format!(
                "request {}: prefix_evictable {} exceeds prefix_len {}",
                spec.id, spec.prefix_evictable, spec.prefix_len
            ),
        ));
    }
    Ok(())
}
