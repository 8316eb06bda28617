//! `kvp_delayer`: SGLang's PrefillDelayer negotiation for DP-attention engines.

use super::boundary::{fail, ffi_boundary};
use super::buffers::input;
use super::handle::{into_raw, release, with_raw, Guarded};
use super::status::kvp_status;
use crate::admission::{DelayerConfig, PrefillDelayer, RankInfo, Verdict};

/// Decides, identically on every data-parallel rank, whether this pass prefills (SGLang's
/// PrefillDelayer), so one rank's prefill does not stall the others' decode. Per pass: each
/// rank calls `kvp_delayer_local_info`, the engine all-gathers the `kvp_rank_info`s (the
/// collective is the engine's), and every rank calls `kvp_delayer_negotiate` on the same
/// array; pass the verdict to `kvp_scheduler_step(..., allow_prefill, ...)` and report the
/// prefill batch size with `kvp_delayer_record_prefill`. Time comes from the caller
/// (`timed_out`), so decisions stay deterministic. As in SGLang, the first pass in a
/// delayer's life that the slot or queue condition would delay prefills instead.
///
/// Created by `kvp_delayer_new`, released by `kvp_delayer_free`; calls are serialized.
pub struct kvp_delayer {
    _private: [u8; 0],
}

/// The verdict of `kvp_delayer_negotiate`.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum kvp_delay_verdict {
    /// Prefill; no rank had to wait.
    NoWait = 0,
    /// Prefill, after waiting for the other ranks.
    WaitSuccess = 1,
    /// No rank can prefill.
    NoneReady = 2,
    /// A rank's KV usage is below the low watermark: prefill.
    TokenWatermark = 3,
    /// Waited the maximum passes: prefill.
    WaitTimeout = 4,
    /// Skip prefill this pass.
    Delay = 5,
}

/// Delayer tunables; 0 (or a negative fraction) disables an optional condition. Start from
/// `kvp_delayer_config_default()`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct kvp_delayer_config {
    /// The N-th consecutive pass that would be delayed times out and prefills instead, so at
    /// most N − 1 passes in a row are delayed (SGLang: 30).
    pub max_delay_passes: u32,
    /// KV usage fraction below which a rank forces prefill; negative: off.
    pub token_usage_low_watermark: f64,
    /// Slot condition: request slots per rank; 0: off.
    pub max_running_requests: u64,
    /// Queue condition ratio; negative: off.
    pub queue_min_ratio: f64,
    /// Queue condition cap; 0: the ranks' recent prefill batch size.
    pub prefill_max_requests: u64,
}

/// What one rank contributes to a negotiation.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct kvp_rank_info {
    /// The rank could prefill now.
    pub prefillable: bool,
    /// Its KV usage is below the low watermark.
    pub force_allow: bool,
    /// The caller's clock says this rank has waited its delay budget (SGLang:
    /// `prefill_delayer_max_delay_ms`, 5000). Once every rank says so, the queue condition
    /// no longer delays; the slot condition and a mixed pass are bounded by passes alone.
    pub timed_out: bool,
    /// Running batch size.
    pub running_bs: u64,
    /// Largest of its last 16 non-empty prefill batches.
    pub max_prefill_bs: u64,
    /// Waiting-queue length.
    pub waiting_len: u64,
}

/// Returns SGLang's defaults: 30 passes, no low watermark, no slot or queue condition.
#[no_mangle]
pub extern "C" fn kvp_delayer_config_default() -> kvp_delayer_config {
    kvp_delayer_config {
        max_delay_passes: DelayerConfig::default().max_delay_passes,
        token_usage_low_watermark: -1.0,
        max_running_requests: 0,
        queue_min_ratio: -1.0,
        prefill_max_requests: 0,
    }
}

/// An optional fraction: negative is off; NaN and infinities are refused (a NaN would
/// silently switch the condition off).
fn optional_fraction(field: &str, x: f64) -> Result<Option<f64>, String> {
    if !x.is_finite() {
        return Err(format!("{field} {x} must be finite (negative: off)"));
    }
    Ok((x >= 0.0).then_some(x))
}

/// Creates a delayer. Fails with `KVP_STATUS_NULL_ARGUMENT` or
/// `KVP_STATUS_INVALID_ARGUMENT`, the message naming the field (`max_delay_passes` 0, a
/// NaN or infinite `token_usage_low_watermark` or `queue_min_ratio`).
///
/// # Safety
/// `config`, `out_delayer` valid or NULL.
#[no_mangle]
#[must_use]
pub unsafe extern "C" fn kvp_delayer_new(
    config: *const kvp_delayer_config,
    out_delayer: *mut *mut kvp_delayer,
) -> kvp_status {
    ffi_boundary(|| {
        // SAFETY: caller contract.
        let Some(c) = (unsafe { config.as_ref() }) else {
            return fail(kvp_status::NullArgument, "config is NULL");
        };
        if out_delayer.is_null() {
            return fail(kvp_status::NullArgument, "out_delayer is NULL");
        }
        if c.max_delay_passes == 0 {
            return fail(
                kvp_status::InvalidArgument,
                "max_delay_passes must be positive",
            );
        }
        let watermark = optional_fraction("token_usage_low_watermark", c.token_usage_low_watermark);
        let queue_min_ratio = optional_fraction("queue_min_ratio", c.queue_min_ratio);
        let (watermark, queue_min_ratio) = match (watermark, queue_min_ratio) {
            (Ok(w), Ok(q)) => (w, q),
            (Err(message), _) | (_, Err(message)) => {
                return fail(kvp_status::InvalidArgument, message)
            }
        };
        let delayer = PrefillDelayer::new(DelayerConfig {
            max_delay_passes: c.max_delay_passes,
            token_usage_low_watermark: watermark,
            max_running_requests: (c.max_running_requests != 0).then_some(c.max_running_requests),
            queue_min_ratio,
            prefill_max_requests: (c.prefill_max_requests != 0).then_some(c.prefill_max_requests),
        });
        // SAFETY: non-NULL and writable (caller contract).
        unsafe { *out_delayer = into_raw(Guarded::new(delayer)) };
        kvp_status::Ok
    })
}

/// Releases a delayer. NULL is a no-op.
///
/// # Safety
/// `delayer` NULL or live, not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn kvp_delayer_free(delayer: *mut kvp_delayer) {
    // SAFETY: forwarded caller contract.
    unsafe { release::<PrefillDelayer, kvp_delayer>(delayer) }
}

/// Computes this rank's contribution: `token_usage` is the pool's used fraction (0..1).
/// Fails with `KVP_STATUS_NULL_ARGUMENT`, or `KVP_STATUS_INVALID_ARGUMENT` for a NaN or
/// infinite `token_usage`.
///
/// # Safety
/// `out_info` writable or NULL.
#[no_mangle]
#[must_use]
pub unsafe extern "C" fn kvp_delayer_local_info(
    delayer: *const kvp_delayer,
    prefillable: bool,
    token_usage: f64,
    running_bs: u64,
    waiting_len: u64,
    timed_out: bool,
    out_info: *mut kvp_rank_info,
) -> kvp_status {
    with_raw::<PrefillDelayer, kvp_delayer>(delayer, "delayer", |d| {
        if out_info.is_null() {
            return fail(kvp_status::NullArgument, "out_info is NULL");
        }
        if !token_usage.is_finite() {
            return fail(
                kvp_status::InvalidArgument,
                format!("token_usage {token_usage} must be finite"),
            );
        }
        let i = d.local_info(prefillable, token_usage, running_bs, waiting_len, timed_out);
        // SAFETY: non-NULL and writable (caller contract).
        unsafe {
            *out_info = kvp_rank_info {
                prefillable: i.prefillable,
                force_allow: i.force_allow,
                timed_out: i.timed_out,
                running_bs: i.running_bs,
                max_prefill_bs: i.max_prefill_bs,
                waiting_len: i.waiting_len,
            }
        };
        kvp_status::Ok
    })
}

/// Decides this pass from all ranks' infos (`num_ranks` ≥ 1) and writes a
/// `kvp_delay_verdict` to `*out_verdict`; prefill is allowed for every verdict except
/// `KVP_DELAY_VERDICT_DELAY`.
///
/// # Safety
/// `ranks` valid for `num_ranks` elements; `out_verdict` writable or NULL.
#[no_mangle]
#[must_use]
pub unsafe extern "C" fn kvp_delayer_negotiate(
    delayer: *mut kvp_delayer,
    ranks: *const kvp_rank_info,
    num_ranks: usize,
    out_verdict: *mut u32,
) -> kvp_status {
    with_raw::<PrefillDelayer, kvp_delayer>(delayer, "delayer", |d| {
        if out_verdict.is_null() {
            return fail(kvp_status::NullArgument, "out_verdict is NULL");
        }
        // SAFETY: caller contract.
        let ranks = match unsafe { input(ranks, num_ranks, "ranks") } {
            Ok(ranks) if !ranks.is_empty() => ranks,
            Ok(_) => return fail(kvp_status::InvalidArgument, "num_ranks is 0"),
            Err(status) => return status,
        };
        let infos: Vec<RankInfo> = ranks
            .iter()
            .map(|r| RankInfo {
                prefillable: r.prefillable,
                force_allow: r.force_allow,
                running_bs: r.running_bs,
                max_prefill_bs: r.max_prefill_bs,
                waiting_len: r.waiting_len,
                timed_out: r.timed_out,
            })
            .collect();
        let verdict = match d.negotiate(&infos) {
            Verdict::NoWait => kvp_delay_verdict::NoWait,
            Verdict::WaitSuccess => kvp_delay_verdict::WaitSuccess,
            Verdict::NoneReady => kvp_delay_verdict::NoneReady,
            Verdict::TokenWatermark => kvp_delay_verdict::TokenWatermark,
            Verdict::WaitTimeout => kvp_delay_verdict::WaitTimeout,
            Verdict::Delay => kvp_delay_verdict::Delay,
        };
        // SAFETY: non-NULL and writable (caller contract).
        unsafe { *out_verdict = verdict as u32 };
        kvp_status::Ok
    })
}

/// Records the size of the prefill batch this rank ran (0 is ignored).
///
/// # Safety
/// `delayer` live or NULL.
#[no_mangle]
#[must_use]
pub unsafe extern "C" fn kvp_delayer_record_prefill(
    delayer: *mut kvp_delayer,
    batch_size: u64,
) -> kvp_status {
    with_raw::<PrefillDelayer, kvp_delayer>(delayer, "delayer", |d| {
        d.record_prefill(batch_size);
        kvp_status::Ok
    })
}
