//! `kvp_adder`: SGLang's `PrefillAdder` for engines that keep their own scheduling loop.

use super::boundary::{fail, ffi_boundary, status_of};
use super::buffers::input;
use super::handle::{into_raw, release, with_raw, Guarded};
use super::status::kvp_status;
use crate::admission::{
    AddResult, AdderConfig, Candidate, ChunkedCandidate, PrefillAdder, RunningRequest,
};
use crate::pool::{ErrorKind, PoolError};

/// One prefill pass's admission budget (SGLang's `PrefillAdder`): offer the in-flight
/// chunked request first (`kvp_adder_add_chunked_req`), then waiting requests in policy
/// order (`kvp_adder_add_one_req`) until the verdict is not `KVP_ADD_RESULT_CONTINUE`.
/// A refused request leaves no trace (select, then commit).
///
/// Created by `kvp_adder_new` for one pass, released by `kvp_adder_free`. Calls are
/// serialized by an internal lock.
pub struct kvp_adder {
    _private: [u8; 0],
}

/// Verdict for the next candidate (SGLang's `AddReqResult`).
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum kvp_add_result {
    /// Keep adding.
    Continue = 0,
    /// KV memory exhausted: stop and mark the batch full.
    NoToken = 1,
    /// Another budget is spent (input, chunk, request cap): stop.
    Other = 2,
}

/// Per-pass constants of an adder. Sizes in tokens; 0 means "none" where noted. Start from
/// `kvp_adder_config_default()`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct kvp_adder_config {
    /// Tokens per page.
    pub page_size: u64,
    /// `max_prefill_tokens` (16384).
    pub max_prefill_tokens: u64,
    /// `chunked_prefill_size`; 0 disables chunking.
    pub chunked_prefill_size: u64,
    /// Decode rows mixed into this prefill (mixed chunk), charged to every budget.
    pub num_mixed_decode_tokens: u64,
    /// SGLang's `CLIP_MAX_NEW_TOKENS` (`KVP_CLIP_MAX_NEW_TOKENS`, 4096); must be positive.
    pub clip_max_new_tokens: u64,
    /// Chunks end on multiples of this; 0: none.
    pub truncation_align_size: u64,
    /// At most this many requests in the batch; 0: no cap.
    pub prefill_max_requests: u64,
    /// Chunked requests in flight at once (1 = SGLang).
    pub max_chunked_requests: u64,
    /// The current new-token ratio; finite and positive.
    pub new_token_ratio: f64,
    /// No prefix cache (`ignore_eos` requests use SGLang's future simulation).
    pub prefix_cache_disabled: bool,
}

/// A running request, as the budget sees it.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct kvp_running_request {
    /// Prompt tokens.
    pub input_len: u64,
    /// Tokens generated so far.
    pub output_len: u64,
    /// `max_new_tokens`.
    pub max_new_tokens: u64,
    /// Reserved at ratio 1.
    pub ignore_eos: bool,
}

/// A waiting request offered to `kvp_adder_add_one_req`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct kvp_candidate {
    /// Tokens it will have in the KV cache once prefilled (prompt, plus output so far if it
    /// was retracted).
    pub input_len: u64,
    /// Of those, tokens already cached.
    pub prefix_len: u64,
    /// Of those, tokens evictable now (locked on admission).
    pub prefix_evictable: u64,
    /// `max_new_tokens`.
    pub max_new_tokens: u64,
    /// Tokens generated so far.
    pub output_len: u64,
    /// Generates all `max_new_tokens`.
    pub ignore_eos: bool,
}

/// What `kvp_adder_add_one_req` / `kvp_adder_add_chunked_req` decided.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct kvp_admission {
    /// Whether the request joins the batch.
    pub admitted: bool,
    /// Joined as a chunk (or, for a continuation: tokens remain after this chunk).
    pub chunked: bool,
    /// Tokens it prefills this step (0 when not admitted).
    pub extend_len: u64,
    /// One of `kvp_add_result`: the verdict for the next candidate (or why this one was
    /// refused).
    pub next: u32,
}

/// The budgets as they stand, filled by `kvp_adder_get_budget`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct kvp_budget {
    /// `A + E − total_offset`: room once everything admitted has grown.
    pub rem_total_tokens: f64,
    /// `A + E − current_offset`: room for this step's allocation.
    pub cur_rem_tokens: i64,
    /// Input tokens left in this pass.
    pub rem_input_tokens: i64,
    /// Chunk tokens left (`INT64_MAX` when chunking is disabled).
    pub rem_chunk_tokens: i64,
    /// One of `kvp_add_result`: SGLang's `budget_state()`.
    pub state: u32,
}

/// Returns SGLang's defaults for one pass: `page_size` 1, `max_prefill_tokens` 16384,
/// chunked prefill 8192, no mixed decode rows, clip 4096, no truncation alignment, no
/// request cap, one chunked request in flight, ratio 0.7, prefix cache enabled.
#[no_mangle]
pub extern "C" fn kvp_adder_config_default() -> kvp_adder_config {
    let d = AdderConfig::sglang_defaults(1);
    kvp_adder_config {
        page_size: d.page_size,
        max_prefill_tokens: d.max_prefill_tokens,
        chunked_prefill_size: d.chunked_prefill_size.unwrap_or(0),
        num_mixed_decode_tokens: d.num_mixed_decode_tokens,
        clip_max_new_tokens: d.clip_max_new_tokens,
        truncation_align_size: 0,
        prefill_max_requests: 0,
        max_chunked_requests: d.max_chunked_requests as u64,
        new_token_ratio: d.new_token_ratio,
        prefix_cache_disabled: d.prefix_cache_disabled,
    }
}

fn result_code(r: AddResult) -> u32 {
    (match r {
        AddResult::Continue => kvp_add_result::Continue,
        AddResult::NoToken => kvp_add_result::NoToken,
        AddResult::Other => kvp_add_result::Other,
    }) as u32
}

/// The domain config, checked by `PrefillAdder::try_new`; a caller's ratio must also be
/// positive (0 would reserve nothing for the running requests' outputs).
fn adder_config(c: &kvp_adder_config) -> Result<AdderConfig, PoolError> {
    if !(c.new_token_ratio.is_finite() && c.new_token_ratio > 0.0) {
        return Err(PoolError::new(
            ErrorKind::InvalidArgument,
            format!(
                "new_token_ratio {} must be finite and positive",
                c.new_token_ratio
            ),
        ));
    }
    Ok(AdderConfig {
        page_size: c.page_size,
        max_prefill_tokens: c.max_prefill_tokens,
        chunked_prefill_size: (c.chunked_prefill_size != 0).then_some(c.chunked_prefill_size),
        num_mixed_decode_tokens: c.num_mixed_decode_tokens,
        clip_max_new_tokens: c.clip_max_new_tokens,
        new_token_ratio: c.new_token_ratio,
        truncation_align_size: (c.truncation_align_size != 0).then_some(c.truncation_align_size),
        prefill_max_requests: (c.prefill_max_requests != 0)
            .then_some(c.prefill_max_requests as usize),
        prefix_cache_disabled: c.prefix_cache_disabled,
        max_chunked_requests: c.max_chunked_requests as usize,
    })
}

/// Starts a prefill pass: `available` free pool tokens, `evictable` prefix-cache tokens,
/// the running requests (`num_running` entries; NULL when 0) and the number of chunked
/// requests in flight. Ownership: inputs are read during the call; `*out_adder` is owned
/// by the caller (`kvp_adder_free`). Fails with `KVP_STATUS_NULL_ARGUMENT` or
/// `KVP_STATUS_INVALID_ARGUMENT`, the message naming the field: `page_size`,
/// `max_prefill_tokens` or `chunked_prefill_size` beyond `INT64_MAX`, `page_size`,
/// `max_prefill_tokens`, `clip_max_new_tokens` or `max_chunked_requests` 0,
/// `num_mixed_decode_tokens` beyond `INT64_MAX`, a `new_token_ratio` that is not finite
/// and positive, or `available + evictable` beyond `INT64_MAX` tokens (it would wrap into
/// a tiny budget); `*out_adder` is unmodified on failure.
///
/// # Safety
/// Pointers valid for their stated lengths, or NULL.
#[no_mangle]
#[must_use]
pub unsafe extern "C" fn kvp_adder_new(
    config: *const kvp_adder_config,
    available: u64,
    evictable: u64,
    running: *const kvp_running_request,
    num_running: usize,
    chunked_in_flight: u64,
    out_adder: *mut *mut kvp_adder,
) -> kvp_status {
    ffi_boundary(|| {
        // SAFETY: caller contract.
        let Some(config) = (unsafe { config.as_ref() }) else {
            return fail(kvp_status::NullArgument, "config is NULL");
        };
        if out_adder.is_null() {
            return fail(kvp_status::NullArgument, "out_adder is NULL");
        }
        // SAFETY: caller contract.
        let running = match unsafe { input(running, num_running, "running") } {
            Ok(running) => running,
            Err(status) => return status,
        };
        let config = match adder_config(config) {
            Ok(config) => config,
            Err(error) => return status_of(Err(error)),
        };
        let running: Vec<RunningRequest> = running
            .iter()
            .map(|r| RunningRequest {
                input_len: r.input_len,
                output_len: r.output_len,
                max_new_tokens: r.max_new_tokens,
                ignore_eos: r.ignore_eos,
            })
            .collect();
        let adder = match PrefillAdder::try_new(
            config,
            available,
            evictable,
            &running,
            chunked_in_flight as usize,
        ) {
            Ok(adder) => adder,
            Err(error) => return status_of(Err(error)),
        };
        // SAFETY: non-NULL and writable (caller contract).
        unsafe { *out_adder = into_raw(Guarded::new(adder)) };
        kvp_status::Ok
    })
}

/// Releases an adder. NULL is a no-op.
///
/// # Safety
/// `adder` NULL or live, not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn kvp_adder_free(adder: *mut kvp_adder) {
    // SAFETY: forwarded caller contract.
    unsafe { release::<PrefillAdder, kvp_adder>(adder) }
}

/// Offers a waiting request (SGLang's `add_one_req`): checks the total, input and chunk
/// budgets (locking the request's own cached prefix), admits it whole or as a page- and
/// tile-aligned first chunk, and writes the decision to `*out_admission`. A refused
/// request changes nothing. Fails, changing nothing, with `KVP_STATUS_NULL_ARGUMENT` or
/// `KVP_STATUS_INVALID_LENGTHS`: `prefix_len > input_len`, `prefix_evictable >
/// prefix_len`, or an `input_len` that, rounded up to a page, exceeds `INT64_MAX` tokens
/// (any `max_new_tokens` is fine: the budgets sum it exactly). `prefix_len == input_len`
/// is not refused: when the budgets admit it, it is admitted with `extend_len` 0, nothing
/// to compute. Pass at most `input_len - 1` cached tokens, as SGLang's prefix match does,
/// so that the last token is computed (`kvp_scheduler_submit` refuses a request without
/// one).
///
/// # Safety
/// `candidate` and `out_admission` valid or NULL.
#[no_mangle]
#[must_use]
pub unsafe extern "C" fn kvp_adder_add_one_req(
    adder: *mut kvp_adder,
    candidate: *const kvp_candidate,
    out_admission: *mut kvp_admission,
) -> kvp_status {
    with_raw::<PrefillAdder, kvp_adder>(adder, "adder", |adder| {
        // SAFETY: caller contract.
        let Some(c) = (unsafe { candidate.as_ref() }) else {
            return fail(kvp_status::NullArgument, "candidate is NULL");
        };
        if out_admission.is_null() {
            return fail(kvp_status::NullArgument, "out_admission is NULL");
        }
        let a = match adder.try_add_one_req(&Candidate {
            input_len: c.input_len,
            prefix_len: c.prefix_len,
            prefix_evictable: c.prefix_evictable,
            max_new_tokens: c.max_new_tokens,
            output_len: c.output_len,
            ignore_eos: c.ignore_eos,
        }) {
            Ok(a) => a,
            Err(error) => return status_of(Err(error)),
        };
        // SAFETY: non-NULL and writable (caller contract).
        unsafe {
            *out_admission = kvp_admission {
                admitted: a.extend_len.is_some(),
                chunked: a.chunked,
                extend_len: a.extend_len.unwrap_or(0),
                next: result_code(a.next),
            }
        };
        kvp_status::Ok
    })
}

/// Continues the in-flight chunked request, `prefix_len` tokens prefilled and `remaining`
/// still to go (SGLang's `add_chunked_req`; call it first in a pass). It progresses even
/// when the budget is spent, but never beyond what the free room holds (the rest of its
/// partial page plus whole free pages); `admitted` is false when that is nothing (it then
/// waits). `chunked` says tokens remain after this chunk. Fails, changing nothing, with
/// `KVP_STATUS_NULL_ARGUMENT` or `KVP_STATUS_INVALID_LENGTHS` when `prefix_len +
/// remaining`, rounded up to a page, exceeds `INT64_MAX` tokens. With the prefix cache
/// disabled, the `ignore_eos` simulation of later candidates counts it as a request that
/// stops at EOS and has generated nothing yet (`kvp_scheduler` passes both).
///
/// # Safety
/// `out_admission` writable or NULL.
#[no_mangle]
#[must_use]
pub unsafe extern "C" fn kvp_adder_add_chunked_req(
    adder: *mut kvp_adder,
    prefix_len: u64,
    remaining: u64,
    max_new_tokens: u64,
    out_admission: *mut kvp_admission,
) -> kvp_status {
    with_raw::<PrefillAdder, kvp_adder>(adder, "adder", |adder| {
        if out_admission.is_null() {
            return fail(kvp_status::NullArgument, "out_admission is NULL");
        }
        let out = match adder.try_add_chunked_req(ChunkedCandidate {
            prefix_len,
            remaining,
            max_new_tokens,
            ..ChunkedCandidate::default()
        }) {
            Ok(out) => out,
            Err(error) => return status_of(Err(error)),
        };
        let next = result_code(adder.budget_state());
        // SAFETY: non-NULL and writable (caller contract).
        unsafe {
            *out_admission = kvp_admission {
                admitted: out.extend_len > 0,
                chunked: out.truncated,
                extend_len: out.extend_len,
                next,
            }
        };
        kvp_status::Ok
    })
}

/// Writes the budgets and SGLang's `budget_state()` to `*out_budget`.
///
/// # Safety
/// `out_budget` writable or NULL.
#[no_mangle]
#[must_use]
pub unsafe extern "C" fn kvp_adder_get_budget(
    adder: *const kvp_adder,
    out_budget: *mut kvp_budget,
) -> kvp_status {
    with_raw::<PrefillAdder, kvp_adder>(adder, "adder", |adder| {
        if out_budget.is_null() {
            return fail(kvp_status::NullArgument, "out_budget is NULL");
        }
        let b = adder.budget();
        // SAFETY: non-NULL and writable (caller contract).
        unsafe {
            *out_budget = kvp_budget {
                rem_total_tokens: b.rem_total_tokens(),
                cur_rem_tokens: b.cur_rem_tokens(),
                rem_input_tokens: b.rem_input_tokens(),
                rem_chunk_tokens: b.rem_chunk_tokens().unwrap_or(i64::MAX),
                state: result_code(b.state()),
            }
        };
        kvp_status::Ok
    })
}
