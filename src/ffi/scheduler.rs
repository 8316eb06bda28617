//! `kvp_scheduler`: SGLang's continuous-batching scheduler step behind the C ABI.

use std::sync::Arc;

use super::boundary::{fail, ffi_boundary, status_of};
use super::buffers::input;
use super::handle::{into_raw, release, share, with_raw, Guarded};
use super::pool::{kvp_pool, PoolHandle, PoolObject};
use super::status::kvp_status;
use crate::admission::{
    ChunkSizePredictor, Phase, Policy, PriorityConfig, RatioConfig, Released, RequestSpec,
    RetractionPolicy, Scheduler, SchedulerConfig, StepKind, StepPlan, SubmitOutcome,
};
use crate::pool::{ErrorKind, PoolError};

/// The continuous-batching scheduler: owns the waiting queue, the in-flight chunked
/// requests and the running set of request descriptors the engine submits, and plans each
/// step (SGLang's `get_next_batch_to_run`: prefill first, else decode with retraction).
/// It never allocates KV: the engine allocates and frees what each plan says.
///
/// Created by `kvp_scheduler_new`, released by `kvp_scheduler_free`. Workflow per step:
/// `kvp_scheduler_submit` new requests → `kvp_scheduler_step` → free the KV of retracted,
/// preempted and aborted requests → allocate the prefill (`kvp_pool_alloc_extend`) and/or
/// decode (`kvp_pool_alloc_decode`) the plan lists → run the model →
/// `kvp_scheduler_finish` finished requests (and free their KV; `kvp_scheduler_finish_ex`
/// also says which leading tokens are the cached prefix to unlock rather than free).
///
/// Thread safety: calls are serialized by an internal lock, but a scheduler belongs to one
/// scheduling loop: the arrays of a plan are overwritten by the next `kvp_scheduler_step`.
pub struct kvp_scheduler {
    _private: [u8; 0],
}

/// Waiting-queue order (`kvp_scheduler_config.policy`).
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum kvp_policy {
    /// First come, first served.
    Fcfs = 0,
    /// Longest output (`max_new_tokens`) first.
    Lof = 1,
    /// Random, from `policy_seed` (reproducible).
    Random = 2,
    /// Longest cached prefix first (arrival order above 128 waiting requests). Priorities do
    /// not order it, as in SGLang.
    Lpm = 3,
    /// DFS over the prefix tree, heavier subtrees first (needs prefix paths at submit).
    DfsWeight = 4,
}

/// Which running requests a decode-memory shortage retracts first.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum kvp_retraction {
    /// Fewest generated tokens first, then longest prompt (SGLang's default).
    Length = 0,
    /// Lowest priority first, then as `KVP_RETRACTION_LENGTH`.
    Priority = 1,
}

/// Configuration of a scheduler. Start from `kvp_scheduler_config_default()` (SGLang's
/// defaults) and change what you need. Sizes are in tokens; 0 means "none" where noted.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct kvp_scheduler_config {
    /// Token slots of the pool; taken from the pool when the scheduler is attached to one.
    pub capacity: u64,
    /// Tokens per page; taken from the pool when attached.
    pub page_size: u64,
    /// `max_prefill_tokens`: input-token budget of one prefill step (16384); 1 to
    /// `INT64_MAX`.
    pub max_prefill_tokens: u64,
    /// `chunked_prefill_size` (8192); 0 disables chunked prefill.
    pub chunked_prefill_size: u64,
    /// SGLang's `CLIP_MAX_NEW_TOKENS` (`KVP_CLIP_MAX_NEW_TOKENS`, 4096): cap on expected
    /// output when reserving; must be positive.
    pub clip_max_new_tokens: u64,
    /// Chunks end on multiples of this; 0: none.
    pub truncation_align_size: u64,
    /// At most this many requests per prefill step; 0: no cap.
    pub prefill_max_requests: u64,
    /// At most this many running requests (request slots); 0: no cap.
    pub max_running_requests: u64,
    /// Chunked requests in flight at once (1 = SGLang).
    pub max_chunked_requests: u64,
    /// One of `kvp_policy`.
    pub policy: u32,
    /// One of `kvp_retraction`.
    pub retraction: u32,
    /// Seed of `KVP_POLICY_RANDOM`.
    pub policy_seed: u64,
    /// Priority scheduling: priorities order the queue under FCFS and LOF (not LPM,
    /// DFS-weight or random, as in SGLang) and allow preemption.
    pub enable_priority: bool,
    /// With priority scheduling: lower values run first.
    pub low_priority_values_first: bool,
    /// Preempt running requests worse by more than this (SGLang: 10); negative disables.
    pub preemption_threshold: i64,
    /// Mix running requests' decode rows into prefill steps (needs chunked prefill).
    pub enable_mixed_chunk: bool,
    /// No prefix cache: `ignore_eos` requests go through SGLang's future simulation.
    pub prefix_cache_disabled: bool,
    /// `SGLANG_INIT_NEW_TOKEN_RATIO` (0.7).
    pub init_new_token_ratio: f64,
    /// `SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR` (0.14).
    pub min_new_token_ratio_factor: f64,
    /// `SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS` (600).
    pub new_token_ratio_decay_steps: u32,
    /// `schedule_conservativeness` (1.0).
    pub schedule_conservativeness: f64,
    /// Dynamic chunk sizing: quadratic coefficient `a` of the latency model
    /// `a·l² + b·l + c`; 0 disables.
    pub dynamic_chunk_a: f64,
    /// Dynamic chunk sizing: linear coefficient `b`.
    pub dynamic_chunk_b: f64,
    /// Dynamic chunk sizing: the model's context length.
    pub dynamic_chunk_context_len: u64,
}

/// A request as the engine submits it.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct kvp_request {
    /// The engine's id, unique among live requests.
    pub id: u64,
    /// Prompt tokens.
    pub input_len: u64,
    /// Prompt tokens already in the engine's prefix cache (page-aligned on a paged cache).
    pub prefix_len: u64,
    /// Of those, tokens that are evictable now (admission locks them: they stop being room).
    pub prefix_evictable: u64,
    /// `max_new_tokens`.
    pub max_new_tokens: u64,
    /// Tokens generated so far (0 for a new request).
    pub output_len: u64,
    /// Priority (with `enable_priority`); any value, `INT64_MIN` and `INT64_MAX` included.
    pub priority: i64,
    /// Generates all `max_new_tokens` regardless of EOS.
    pub ignore_eos: bool,
}

/// Result of `kvp_scheduler_submit`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct kvp_submit_result {
    /// `true`: queued. `false`: the request can never fit the pool (admission needs more
    /// room than `needed` tokens, so `false` exactly when `needed >= capacity`) and was not
    /// queued — fail it instead of letting it wait forever.
    pub queued: bool,
    /// Tokens the request needs at admission: prompt + output so far + clipped remaining
    /// output + one page (an `ignore_eos` request with `prefix_cache_disabled`: prompt +
    /// output so far rounded up to a page + its whole remaining output + 1, the room
    /// SGLang's future simulation needs); `UINT64_MAX` when that sum does not fit in 64 bits.
    pub needed: u64,
    /// The pool's capacity.
    pub capacity: u64,
}

/// What a step runs (`kvp_step_plan.kind`).
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum kvp_step_kind {
    /// Nothing to run.
    Idle = 0,
    /// A prefill batch, maybe with decode rows mixed in.
    Prefill = 1,
    /// A decode batch.
    Decode = 2,
}

/// One request of a prefill batch: pass `prefix_len` and `prefix_len + extend_len` as its
/// `prefix_lens[i]` and `seq_lens[i]` to `kvp_pool_alloc_extend`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct kvp_prefill_entry {
    /// Request id.
    pub id: u64,
    /// Tokens already in the KV cache.
    pub prefix_len: u64,
    /// Tokens this step computes.
    pub extend_len: u64,
    /// More chunks follow in later steps.
    pub chunked: bool,
}

/// A request whose KV the engine must free now: `row[prefix_len .. kv_len)` of its slot
/// row; the leading `prefix_len` tokens belong to the prefix cache (unlock them instead).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct kvp_evicted {
    /// Request id.
    pub id: u64,
    /// Tokens of KV in its row.
    pub kv_len: u64,
    /// Leading tokens of the row that belong to the prefix cache (its cached prefix at
    /// admission).
    pub prefix_len: u64,
}

/// What a request leaving the scheduler held, filled by `kvp_scheduler_finish_ex` and
/// `kvp_scheduler_abort_ex`: its slot row `row[0 .. kv_len)` splits into the cached prefix
/// it reused, `row[0 .. prefix_len)`, which its admission locked in the engine's prefix
/// cache (unlock it, do not free it), and its own KV, `row[prefix_len .. kv_len)` (free it,
/// or insert it into the prefix cache as SGLang's `cache_finished_req` does). The same split
/// as `kvp_evicted`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct kvp_finished {
    /// Request id.
    pub id: u64,
    /// Tokens of KV in its row (what `kvp_scheduler_finish` / `_abort` report).
    pub kv_len: u64,
    /// Leading tokens of the row that belong to the prefix cache: the `prefix_len` the
    /// engine gave (`kvp_scheduler_submit` or `kvp_scheduler_update_prefix`) when the
    /// request was last admitted, at most `kv_len`; 0 for a request holding no KV (waiting:
    /// never admitted, or retracted or preempted since — those reset it).
    pub prefix_len: u64,
    /// Of `prefix_len`, the tokens the engine declared evictable (`prefix_evictable`)
    /// before that admission: the part of the prefix no other request had locked then. A
    /// record from admission time, not the lock state now — the scheduler does not track
    /// other requests' locks on the same prefix; the engine's prefix cache does.
    pub prefix_evictable: u64,
}

/// The plan of one step. The arrays belong to the scheduler and stay valid until the next
/// `kvp_scheduler_step` or `kvp_scheduler_free` on it.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct kvp_step_plan {
    /// One of `kvp_step_kind`.
    pub kind: u32,
    /// Memory is exhausted for new requests (SGLang's `batch_is_full`).
    pub batch_is_full: bool,
    /// The new-token ratio after this step.
    pub new_token_ratio: f64,
    /// Prefill entries, chunk continuations first.
    pub prefill: *const kvp_prefill_entry,
    /// Entries in `prefill`.
    pub num_prefill: usize,
    /// Ids decoding this step (each sequence grows by one token): `kvp_pool_alloc_decode`.
    pub decode: *const u64,
    /// Entries in `decode`.
    pub num_decode: usize,
    /// Retracted for lack of decode memory: free their KV; they wait again.
    pub retracted: *const kvp_evicted,
    /// Entries in `retracted`.
    pub num_retracted: usize,
    /// Preempted by higher-priority requests: free their KV; they wait again.
    pub preempted: *const kvp_evicted,
    /// Entries in `preempted`.
    pub num_preempted: usize,
    /// Gone for lack of memory (could not decode even alone, or evicted and grown past
    /// what the pool could ever re-admit): free their KV; fail the requests.
    pub aborted: *const kvp_evicted,
    /// Entries in `aborted`.
    pub num_aborted: usize,
}

/// Where a request is (`kvp_request_state.phase`).
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum kvp_phase {
    /// Waiting for admission (new, retracted or preempted).
    Waiting = 0,
    /// Being prefilled chunk by chunk.
    Chunking = 1,
    /// Decoding.
    Running = 2,
}

/// A live request's state, filled by `kvp_scheduler_get_request`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct kvp_request_state {
    /// One of `kvp_phase`.
    pub phase: u32,
    /// Tokens in its KV (its slot row's length).
    pub kv_len: u64,
    /// Tokens generated (the scheduler counts one at the end of the prefill and one per
    /// decode step).
    pub output_len: u64,
}

/// Counters and queue sizes, filled by `kvp_scheduler_get_stats`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct kvp_scheduler_stats {
    /// `kvp_scheduler_step` calls.
    pub steps: u64,
    /// Prefill steps.
    pub prefill_steps: u64,
    /// Decode steps.
    pub decode_steps: u64,
    /// Requests admitted (whole or first chunk).
    pub admitted: u64,
    /// Prefill entries issued (chunk continuations included).
    pub chunks: u64,
    /// Retractions.
    pub retractions: u64,
    /// Preemptions.
    pub preemptions: u64,
    /// Requests aborted for lack of memory.
    pub aborts: u64,
    /// Submissions refused as unfittable.
    pub unfittable: u64,
    /// Requests finished.
    pub finished: u64,
    /// Waiting requests now.
    pub waiting: u64,
    /// Chunked requests in flight now.
    pub chunking: u64,
    /// Running requests now.
    pub running: u64,
    /// The new-token ratio now.
    pub new_token_ratio: f64,
}

/// What a `kvp_scheduler *` points to: the scheduler, its pool, and the last plan.
pub(crate) struct SchedulerState {
    pub(crate) scheduler: Scheduler,
    pool: Option<Arc<PoolHandle>>,
    prefill: Vec<kvp_prefill_entry>,
    decode: Vec<u64>,
    retracted: Vec<kvp_evicted>,
    preempted: Vec<kvp_evicted>,
    aborted: Vec<kvp_evicted>,
}

pub(crate) fn with_scheduler(
    scheduler: *const kvp_scheduler,
    body: impl FnOnce(&mut SchedulerState) -> kvp_status,
) -> kvp_status {
    with_raw::<SchedulerState, kvp_scheduler>(scheduler, "scheduler", body)
}

fn err(error: PoolError) -> kvp_status {
    status_of(Err(error))
}

/// Returns SGLang's defaults: capacity 0 and page size 1 (set them, or attach a pool),
/// `max_prefill_tokens` 16384, chunked prefill 8192, clip 4096, FCFS, one chunked request,
/// length retraction, ratio 0.7 / 0.14 / 600 / 1.0, preemption threshold 10 (used only with
/// `enable_priority`), no mixed chunk, no dynamic chunking.
#[no_mangle]
pub extern "C" fn kvp_scheduler_config_default() -> kvp_scheduler_config {
    let ratio = RatioConfig::default();
    kvp_scheduler_config {
        capacity: 0,
        page_size: 1,
        max_prefill_tokens: 16384,
        chunked_prefill_size: 8192,
        clip_max_new_tokens: crate::admission::CLIP_MAX_NEW_TOKENS,
        truncation_align_size: 0,
        prefill_max_requests: 0,
        max_running_requests: 0,
        max_chunked_requests: 1,
        policy: kvp_policy::Fcfs as u32,
        retraction: kvp_retraction::Length as u32,
        policy_seed: 0,
        enable_priority: false,
        low_priority_values_first: false,
        preemption_threshold: 10,
        enable_mixed_chunk: false,
        prefix_cache_disabled: false,
        init_new_token_ratio: ratio.init,
        min_new_token_ratio_factor: ratio.min_factor,
        new_token_ratio_decay_steps: ratio.decay_steps,
        schedule_conservativeness: ratio.conservativeness,
        dynamic_chunk_a: 0.0,
        dynamic_chunk_b: 0.0,
        dynamic_chunk_context_len: 0,
    }
}

fn nonzero(x: u64) -> Option<u64> {
    (x != 0).then_some(x)
}

fn scheduler_config(
    c: &kvp_scheduler_config,
    pool: Option<&PoolObject>,
) -> Result<SchedulerConfig, PoolError> {
    let invalid = |m: String| PoolError::new(ErrorKind::InvalidArgument, m);
    let (capacity, page_size) = match pool {
        Some(pool) => (pool.size(), u64::from(pool.page_size())),
        None => (c.capacity, c.page_size),
    };
    let policy = match c.policy {
        0 => Policy::Fcfs,
        1 => Policy::Lof,
        2 => Policy::Random {
            seed: c.policy_seed,
        },
        3 => Policy::Lpm,
        4 => Policy::DfsWeight,
        other => return Err(invalid(format!("policy {other} is not a kvp_policy"))),
    };
    let retraction = match c.retraction {
        0 => RetractionPolicy::Length,
        1 => RetractionPolicy::Priority,
        other => {
            return Err(invalid(format!(
                "retraction {other} is not a kvp_retraction"
            )))
        }
    };
    let ratio = RatioConfig {
        init: c.init_new_token_ratio,
        min_factor: c.min_new_token_ratio_factor,
        decay_steps: c.new_token_ratio_decay_steps,
        conservativeness: c.schedule_conservativeness,
    };
    for (field, x) in [
        ("dynamic_chunk_a", c.dynamic_chunk_a),
        ("dynamic_chunk_b", c.dynamic_chunk_b),
    ] {
        if !(x.is_finite() && x >= 0.0) {
            return Err(invalid(format!(
                "{field} {x} must be finite and non-negative"
            )));
        }
    }
    let chunked_prefill_size = nonzero(c.chunked_prefill_size);
    let dynamic_chunking = (c.dynamic_chunk_a > 0.0).then_some(ChunkSizePredictor {
        a: c.dynamic_chunk_a,
        b: c.dynamic_chunk_b,
        base_chunk: c.chunked_prefill_size,
        page_size,
        context_len: c.dynamic_chunk_context_len,
        max_prefill_tokens: c.max_prefill_tokens,
        smooth: 0.75,
    });
    Ok(SchedulerConfig {
        page_size,
        capacity,
        max_prefill_tokens: c.max_prefill_tokens,
        chunked_prefill_size,
        enable_mixed_chunk: c.enable_mixed_chunk,
        clip_max_new_tokens: c.clip_max_new_tokens,
        truncation_align_size: nonzero(c.truncation_align_size),
        prefill_max_requests: nonzero(c.prefill_max_requests).map(|x| x as usize),
        max_running_requests: nonzero(c.max_running_requests).map(|x| x as usize),
        max_chunked_requests: c.max_chunked_requests as usize,
        prefix_cache_disabled: c.prefix_cache_disabled,
        policy,
        priority: c.enable_priority.then_some(PriorityConfig {
            low_values_first: c.low_priority_values_first,
            preemption_threshold: (c.preemption_threshold >= 0).then_some(c.preemption_threshold),
        }),
        retraction,
        ratio,
        dynamic_chunking,
    })
}

/// Creates a scheduler. With `pool` non-NULL it is attached: capacity and page size come
/// from the pool, each step reads the pool's available size itself, and the scheduler
/// holds a reference that keeps the pool alive until the scheduler is freed. With `pool`
/// NULL, `config->capacity` and `config->page_size` must be set and each step takes the
/// available size from the caller.
///
/// Ownership: `config` is read during the call; `*out_scheduler` is owned by the caller
/// (`kvp_scheduler_free`). Fails with `KVP_STATUS_NULL_ARGUMENT` or
/// `KVP_STATUS_INVALID_ARGUMENT`, the message naming the field: zero capacity or page
/// size, a page size above the capacity, a capacity, `max_prefill_tokens` or
/// `chunked_prefill_size` above `INT64_MAX`, `max_prefill_tokens` or
/// `clip_max_new_tokens` 0 (nothing could ever be admitted), an unknown enum value, a chunk
/// smaller than `truncation_align_size`, `max_chunked_requests` 0, a ratio parameter
/// (`init_new_token_ratio`, `min_new_token_ratio_factor`, `schedule_conservativeness`)
/// that is not finite and positive, zero decay steps, negative or non-finite dynamic-chunk
/// coefficients; `*out_scheduler` is unmodified on failure.
///
/// # Safety
/// `config` and `out_scheduler` must be NULL or valid; `pool` NULL or a live pool.
#[no_mangle]
#[must_use]
pub unsafe extern "C" fn kvp_scheduler_new(
    config: *const kvp_scheduler_config,
    pool: *const kvp_pool,
    out_scheduler: *mut *mut kvp_scheduler,
) -> kvp_status {
    ffi_boundary(|| {
        // SAFETY: caller contract: NULL or a valid config.
        let Some(config) = (unsafe { config.as_ref() }) else {
            return fail(kvp_status::NullArgument, "config is NULL");
        };
        if out_scheduler.is_null() {
            return fail(kvp_status::NullArgument, "out_scheduler is NULL");
        }
        // SAFETY: caller contract: NULL or a live pool.
        let pool = (!pool.is_null())
            .then(|| unsafe { share::<PoolObject, kvp_pool>(pool, "pool") })
            .transpose();
        let pool = tri!(pool);
        let mut built = None;
        let status = match &pool {
            Some(handle) => handle.with(|p| {
                built = Some(scheduler_config(config, Some(p)));
                kvp_status::Ok
            }),
            None => {
                built = Some(scheduler_config(config, None));
                kvp_status::Ok
            }
        };
        if status != kvp_status::Ok {
            return status;
        }
        let scheduler = match built.expect("set above").and_then(Scheduler::new) {
            Ok(scheduler) => scheduler,
            Err(error) => return err(error),
        };
        let state = SchedulerState {
            scheduler,
            pool,
            prefill: Vec::new(),
            decode: Vec::new(),
            retracted: Vec::new(),
            preempted: Vec::new(),
            aborted: Vec::new(),
        };
        // SAFETY: non-NULL and writable (caller contract).
        unsafe { *out_scheduler = into_raw(Guarded::new(state)) };
        kvp_status::Ok
    })
}

/// Releases a scheduler (and its reference to an attached pool). NULL is a no-op.
///
/// # Safety
/// `scheduler` must be NULL or a live scheduler, not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn kvp_scheduler_free(scheduler: *mut kvp_scheduler) {
    // SAFETY: forwarded caller contract.
    unsafe { release::<SchedulerState, kvp_scheduler>(scheduler) }
}

/// Queues a request. `prefix_path` (`path_len` node ids from the prefix-cache root to the
/// request's last matched node) feeds the DFS-weight policy; pass NULL and 0 otherwise.
///
/// `*out_result` says whether it was queued or can never fit the pool (then it is not
/// queued: fail it); the need is computed without wrapping, so a huge `input_len` or
/// `max_new_tokens` is reported unfittable (`needed` up to `UINT64_MAX`), never queued.
/// Fails with `KVP_STATUS_INVALID_STATE` (id already live), `KVP_STATUS_INVALID_LENGTHS`
/// (`input_len` 0, `input_len + output_len` beyond 64 bits, `prefix_len` not less than the
/// tokens to fill, `prefix_evictable > prefix_len`) or `KVP_STATUS_NULL_ARGUMENT`; nothing
/// is queued and `*out_result` is unmodified on failure.
///
/// # Safety
/// `request` and `out_result` valid or NULL; `prefix_path` valid for `path_len` elements.
#[no_mangle]
#[must_use]
pub unsafe extern "C" fn kvp_scheduler_submit(
    scheduler: *mut kvp_scheduler,
    request: *const kvp_request,
    prefix_path: *const u64,
    path_len: usize,
    out_result: *mut kvp_submit_result,
) -> kvp_status {
    with_scheduler(scheduler, |state| {
        // SAFETY: caller contract.
        let Some(r) = (unsafe { request.as_ref() }) else {
            return fail(kvp_status::NullArgument, "request is NULL");
        };
        if out_result.is_null() {
            return fail(kvp_status::NullArgument, "out_result is NULL");
        }
        // SAFETY: caller contract.
        let path = match unsafe { input(prefix_path, path_len, "prefix_path") } {
            Ok(path) => path,
            Err(status) => return status,
        };
        let spec = RequestSpec {
            id: r.id,
            input_len: r.input_len,
            prefix_len: r.prefix_len,
            prefix_evictable: r.prefix_evictable,
            max_new_tokens: r.max_new_tokens,
            output_len: r.output_len,
            ignore_eos: r.ignore_eos,
            priority: r.priority,
            prefix_path: path.to_vec(),
        };
        let needed = state.scheduler.admission_need(&spec);
        let result = match state.scheduler.submit(spec) {
            Ok(SubmitOutcome::Queued) => kvp_submit_result {
                queued: true,
                needed,
                capacity: state.scheduler.config().capacity,
            },
            Ok(SubmitOutcome::Unfittable { needed, capacity }) => kvp_submit_result {
                queued: false,
                needed,
                capacity,
            },
            Err(error) => return err(error),
        };
        // SAFETY: non-NULL and writable (caller contract).
        unsafe { *out_result = result };
        kvp_status::Ok
    })
}

/// Refreshes a waiting request's cached-prefix information (after the prefix cache
/// changed, or after a retraction reset it to 0). `prefix_path` NULL with `path_len` 0
/// keeps the previous path. Fails with `KVP_STATUS_INVALID_ARGUMENT` (unknown id),
/// `KVP_STATUS_INVALID_STATE` (not waiting) or `KVP_STATUS_INVALID_LENGTHS`.
///
/// # Safety
/// `prefix_path` valid for `path_len` elements or NULL.
#[no_mangle]
#[must_use]
pub unsafe extern "C" fn kvp_scheduler_update_prefix(
    scheduler: *mut kvp_scheduler,
    id: u64,
    prefix_len: u64,
    prefix_evictable: u64,
    prefix_path: *const u64,
    path_len: usize,
) -> kvp_status {
    with_scheduler(scheduler, |state| {
        // SAFETY: caller contract.
        let path = match unsafe { input(prefix_path, path_len, "prefix_path") } {
            Ok(path) => path,
            Err(status) => return status,
        };
        let path = (!prefix_path.is_null()).then_some(path);
        status_of(
            state
                .scheduler
                .update_prefix(id, prefix_len, prefix_evictable, path),
        )
    })
}

fn evicted(list: &[crate::admission::Evicted], out: &mut Vec<kvp_evicted>) {
    out.clear();
    out.extend(list.iter().map(|e| kvp_evicted {
        id: e.id,
        kv_len: e.kv_len,
        prefix_len: e.prefix_len,
    }));
}

fn publish(state: &mut SchedulerState, plan: &StepPlan) -> kvp_step_plan {
    state.prefill.clear();
    state
        .prefill
        .extend(plan.prefill.iter().map(|e| kvp_prefill_entry {
            id: e.id,
            prefix_len: e.prefix_len,
            extend_len: e.extend_len,
            chunked: e.chunked,
        }));
    state.decode.clear();
    state.decode.extend_from_slice(&plan.decode);
    evicted(&plan.retracted, &mut state.retracted);
    evicted(&plan.preempted, &mut state.preempted);
    evicted(&plan.aborted, &mut state.aborted);
    kvp_step_plan {
        kind: match plan.kind {
            StepKind::Idle => kvp_step_kind::Idle,
            StepKind::Prefill => kvp_step_kind::Prefill,
            StepKind::Decode => kvp_step_kind::Decode,
        } as u32,
        batch_is_full: plan.batch_is_full,
        new_token_ratio: plan.new_token_ratio,
        prefill: state.prefill.as_ptr(),
        num_prefill: state.prefill.len(),
        decode: state.decode.as_ptr(),
        num_decode: state.decode.len(),
        retracted: state.retracted.as_ptr(),
        num_retracted: state.retracted.len(),
        preempted: state.preempted.as_ptr(),
        num_preempted: state.preempted.len(),
        aborted: state.aborted.as_ptr(),
        num_aborted: state.aborted.len(),
    }
}

/// Plans the next step and writes it to `*out_plan`: prefill (chunk continuations first,
/// then waiting requests the budget admits) if there is any, else a decode step with the
/// memory check, retraction and new-token-ratio update.
///
/// `available` is the pool's free tokens (ignored when attached to a pool: it is read from
/// the pool), `evictable` the engine's prefix-cache evictable tokens, `allow_prefill`
/// false to skip prefill this step (e.g. a `kvp_delayer` verdict). Issuing a plan commits
/// it: the next step assumes the engine ran it. Every admitted prefill fits: the engine's
/// `kvp_pool_alloc_extend` for it cannot run short (given the evictable tokens really are
/// evictable). The plan's arrays stay valid until the next step or `kvp_scheduler_free`.
///
/// Fails with `KVP_STATUS_NULL_ARGUMENT`, or `KVP_STATUS_INVALID_ARGUMENT` when
/// `available + evictable` exceeds `INT64_MAX` tokens (no pool holds that many); then
/// nothing changes: no step is counted and the previous plan's arrays stay as they were.
///
/// # Safety
/// `out_plan` writable or NULL.
#[no_mangle]
#[must_use]
pub unsafe extern "C" fn kvp_scheduler_step(
    scheduler: *mut kvp_scheduler,
    available: u64,
    evictable: u64,
    allow_prefill: bool,
    out_plan: *mut kvp_step_plan,
) -> kvp_status {
    with_scheduler(scheduler, |state| {
        if out_plan.is_null() {
            return fail(kvp_status::NullArgument, "out_plan is NULL");
        }
        let mut available = available;
        if let Some(pool) = &state.pool {
            let status = pool.with(|p| {
                available = p.available_size();
                kvp_status::Ok
            });
            if status != kvp_status::Ok {
                return status;
            }
        }
        let plan = match state
            .scheduler
            .try_step(available, evictable, allow_prefill)
        {
            Ok(plan) => plan,
            Err(error) => return err(error),
        };
        let out = publish(state, &plan);
        // SAFETY: non-NULL and writable (caller contract).
        unsafe { *out_plan = out };
        kvp_status::Ok
    })
}

/// The engine finished a running request (EOS, stop string or length): it leaves the
/// scheduler; `*out_kv_len` (may be NULL) receives the KV tokens it held, for the engine to
/// free (`kvp_scheduler_finish_ex` also says which leading tokens are its locked cached
/// prefix). Fails with `KVP_STATUS_INVALID_ARGUMENT` (unknown id) or
/// `KVP_STATUS_INVALID_STATE` (not running: use `kvp_scheduler_abort`).
///
/// # Safety
/// `out_kv_len` writable or NULL.
#[no_mangle]
#[must_use]
pub unsafe extern "C" fn kvp_scheduler_finish(
    scheduler: *mut kvp_scheduler,
    id: u64,
    out_kv_len: *mut u64,
) -> kvp_status {
    with_scheduler(scheduler, |state| {
        match state.scheduler.finish(id) {
            Ok(kv_len) => {
                if !out_kv_len.is_null() {
                    // SAFETY: non-NULL and writable (caller contract).
                    unsafe { *out_kv_len = kv_len };
                }
                kvp_status::Ok
            }
            Err(error) => err(error),
        }
    })
}

fn released(r: Released) -> kvp_finished {
    kvp_finished {
        id: r.id,
        kv_len: r.kv_len,
        prefix_len: r.prefix_len,
        prefix_evictable: r.prefix_evictable,
    }
}

/// `kvp_scheduler_finish` that also reports what the request held: `*out_finished`
/// receives its id, KV length, and the leading `prefix_len` tokens of its row that belong to
/// the prefix cache (locked since its admission: unlock them) — see `kvp_finished`. The
/// engine frees (or caches) `row[prefix_len .. kv_len)`.
///
/// Same checks and effect as `kvp_scheduler_finish`: fails with
/// `KVP_STATUS_INVALID_ARGUMENT` (unknown id), `KVP_STATUS_INVALID_STATE` (not running:
/// use `kvp_scheduler_abort_ex`), or `KVP_STATUS_NULL_ARGUMENT` when `out_finished` is NULL
/// (checked first: the request is then not finished). `*out_finished` is unmodified and the
/// scheduler unchanged on failure.
///
/// # Safety
/// `scheduler` a live scheduler or NULL; `out_finished` writable or NULL.
#[no_mangle]
#[must_use]
pub unsafe extern "C" fn kvp_scheduler_finish_ex(
    scheduler: *mut kvp_scheduler,
    id: u64,
    out_finished: *mut kvp_finished,
) -> kvp_status {
    // SAFETY: forwarded contract.
    unsafe { release_into(scheduler, out_finished, |s| s.finish_released(id)) }
}

/// `kvp_scheduler_abort` that also reports what the request held, as
/// `kvp_scheduler_finish_ex` does (a waiting request reports `kv_len` and `prefix_len` 0:
/// it holds and locks nothing). Fails with `KVP_STATUS_INVALID_ARGUMENT` (unknown id) or
/// `KVP_STATUS_NULL_ARGUMENT` (`out_finished` NULL, checked first: nothing is dropped);
/// `*out_finished` is unmodified and the scheduler unchanged on failure.
///
/// # Safety
/// `scheduler` a live scheduler or NULL; `out_finished` writable or NULL.
#[no_mangle]
#[must_use]
pub unsafe extern "C" fn kvp_scheduler_abort_ex(
    scheduler: *mut kvp_scheduler,
    id: u64,
    out_finished: *mut kvp_finished,
) -> kvp_status {
    // SAFETY: forwarded contract.
    unsafe { release_into(scheduler, out_finished, |s| s.abort_released(id)) }
}

/// The body of `kvp_scheduler_finish_ex` / `kvp_scheduler_abort_ex`: refuses a NULL
/// `out_finished` before anything changes, then writes what `take` reports.
///
/// # Safety
/// `scheduler` a live scheduler or NULL; `out_finished` writable or NULL.
unsafe fn release_into(
    scheduler: *mut kvp_scheduler,
    out_finished: *mut kvp_finished,
    take: impl FnOnce(&mut Scheduler) -> Result<Released, PoolError>,
) -> kvp_status {
    with_scheduler(scheduler, |state| {
        if out_finished.is_null() {
            return fail(kvp_status::NullArgument, "out_finished is NULL");
        }
        match take(&mut state.scheduler) {
            Ok(r) => {
                // SAFETY: non-NULL and writable (caller contract).
                unsafe { *out_finished = released(r) };
                kvp_status::Ok
            }
            Err(error) => err(error),
        }
    })
}

/// Drops a request in any phase (client disconnect, stop). `*out_kv_len` (may be NULL)
/// receives the KV tokens it held, for the engine to free. Fails with
/// `KVP_STATUS_INVALID_ARGUMENT` for an unknown id.
///
/// # Safety
/// `out_kv_len` writable or NULL.
#[no_mangle]
#[must_use]
pub unsafe extern "C" fn kvp_scheduler_abort(
    scheduler: *mut kvp_scheduler,
    id: u64,
    out_kv_len: *mut u64,
) -> kvp_status {
    with_scheduler(scheduler, |state| match state.scheduler.abort(id) {
        Ok(kv_len) => {
            if !out_kv_len.is_null() {
                // SAFETY: non-NULL and writable (caller contract).
                unsafe { *out_kv_len = kv_len };
            }
            kvp_status::Ok
        }
        Err(error) => err(error),
    })
}

/// Writes a live request's phase, KV length and output length to `*out_state`. Fails with
/// `KVP_STATUS_INVALID_ARGUMENT` for an unknown id; `*out_state` is unmodified on failure.
///
/// # Safety
/// `out_state` writable or NULL.
#[no_mangle]
#[must_use]
pub unsafe extern "C" fn kvp_scheduler_get_request(
    scheduler: *const kvp_scheduler,
    id: u64,
    out_state: *mut kvp_request_state,
) -> kvp_status {
    with_scheduler(scheduler, |state| {
        if out_state.is_null() {
            return fail(kvp_status::NullArgument, "out_state is NULL");
        }
        let Some((phase, kv_len, output_len)) = state.scheduler.request(id) else {
            return fail(kvp_status::InvalidArgument, format!("unknown request {id}"));
        };
        let phase = match phase {
            Phase::Waiting => kvp_phase::Waiting,
            Phase::Chunking => kvp_phase::Chunking,
            Phase::Running => kvp_phase::Running,
        } as u32;
        // SAFETY: non-NULL and writable (caller contract).
        unsafe {
            *out_state = kvp_request_state {
                phase,
                kv_len,
                output_len,
            }
        };
        kvp_status::Ok
    })
}

/// Writes the scheduler's counters and queue sizes to `*out_stats`.
///
/// # Safety
/// `out_stats` writable or NULL.
#[no_mangle]
#[must_use]
pub unsafe extern "C" fn kvp_scheduler_get_stats(
    scheduler: *const kvp_scheduler,
    out_stats: *mut kvp_scheduler_stats,
) -> kvp_status {
    with_scheduler(scheduler, |state| {
        if out_stats.is_null() {
            return fail(kvp_status::NullArgument, "out_stats is NULL");
        }
        let s = state.scheduler.stats();
        let (waiting, chunking, running) = state.scheduler.counts();
        // SAFETY: non-NULL and writable (caller contract).
        unsafe {
            *out_stats = kvp_scheduler_stats {
                steps: s.steps,
                prefill_steps: s.prefill_steps,
                decode_steps: s.decode_steps,
                admitted: s.admitted,
                chunks: s.chunks,
                retractions: s.retractions,
                preemptions: s.preemptions,
                aborts: s.aborts,
                unfittable: s.unfittable,
                finished: s.finished,
                waiting: waiting as u64,
                chunking: chunking as u64,
                running: running as u64,
                new_token_ratio: state.scheduler.new_token_ratio(),
            }
        };
        kvp_status::Ok
    })
}
