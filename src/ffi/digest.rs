//! State digests behind the C ABI: `kvp_pool_digest` (host pools),
//! `kvp_pool_digest_async` (device pools) and `kvp_scheduler_digest`.

use super::boundary::{fail, status_of};
use super::device::CUstream_st;
use super::pool::{kvp_pool, with_device_pool, with_pool};
use super::scheduler::{kvp_scheduler, with_scheduler};
use super::status::kvp_status;

/// Version of the digest definition below (`kvp_pool_digest`, `kvp_scheduler_digest`).
pub const KVP_DIGEST_VERSION: u32 = 1;

/// Writes the pool's state digest to `*out_digest`: a 64-bit hash of everything that decides
/// the pool's next answers. Two pools of the same configuration (size, page size,
/// `need_sort`; the index type and backend do not matter) that went through the same
/// operations have equal digests, and a host pool and a device pool in the same state give
/// the same value — so tensor-parallel ranks (one pool each, driven by the same inputs)
/// check that they agree by comparing one integer, e.g. with an all-gather per step.
/// O(num_pages); changes nothing. Host pools only: a device pool fails with
/// `KVP_STATUS_WRONG_BACKEND` (use `kvp_pool_digest_async`).
///
/// Definition (version `KVP_DIGEST_VERSION` = 1; all arithmetic modulo 2^64):
///
/// - `mix(x)`: `z = x + 0x9E3779B97F4A7C15; z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9;
///   z = (z ^ (z >> 27)) * 0x94D049BB133111EB; mix(x) = z ^ (z >> 31)` (splitmix64's
///   output function). `chain(h, x1, x2, ...)`: `h = mix(h ^ x1); h = mix(h ^ x2); ...`.
/// - Free list, in order: `F = sum over k of mix(mix(0x465245454C495354 + k) ^ page_k)`, the
///   free pages from the one handed out next (`k = 0`), staged pages excluded.
/// - Staged pages (`need_sort` frees not yet merged), as a set (the backends keep them in
///   different orders, and a merge sorts them): `S = sum of mix(0x5354414745440000 ^ page)`.
/// - Page map, every page `p` in `0 ..= num_pages`: `P = sum of
///   mix(mix(0x504147454D415000 + p) ^ (state | fill << 8))`, state 0 reserved (page 0),
///   1 free, 2 staged, 3 allocated, 4 freed in an open free group; `fill` the page's fill
///   point (slots handed out so far) if it is allocated and `page_size > 1`, else 0.
/// - `digest = chain(0x4B5650504F4F4C01, 1, page_size, num_pages, need_sort, group_open,
///   faulted, free_len, staged_len, F, S, P)`, booleans as 0/1; `faulted` is a device
///   pool's sticky fault (always 0 on a host pool); `free_len` and `staged_len` count pages.
///
/// The three sums are order-independent over their terms, so a device computes them in
/// parallel; the free list stays ordered because each term mixes in its position.
/// Counters (`kvp_pool_get_stats`) are not part of it.
///
/// # Safety
/// `pool` a live pool or NULL; `out_digest` writable or NULL.
#[no_mangle]
#[must_use]
pub unsafe extern "C" fn kvp_pool_digest(
    pool: *const kvp_pool,
    out_digest: *mut u64,
) -> kvp_status {
    with_pool(pool, |pool| {
        if out_digest.is_null() {
            return fail(kvp_status::NullArgument, "out_digest is NULL");
        }
        let digest = pool.digest();
        // SAFETY: non-NULL and writable (caller contract).
        unsafe { *out_digest = digest };
        kvp_status::Ok
    })
}

/// Enqueues the state digest of a device pool (the value `kvp_pool_digest` defines, equal
/// to a host pool's in the same state) on `stream`: one kernel writes it to
/// `*out_device`, one `uint64_t` of device memory on the pool's device, 8-byte aligned. The
/// kernel sees the state as of its point in the stream (after every call enqueued before
/// it) and changes nothing; the call never synchronizes, so read the value once the stream
/// has passed it (e.g. all-gather it on the same stream). A faulted pool is digested too
/// (with `faulted` = 1). `out_device` must stay alive until the stream passes the call.
///
/// Fails with `KVP_STATUS_NULL_ARGUMENT`, `KVP_STATUS_INVALID_ARGUMENT` (misaligned),
/// `KVP_STATUS_WRONG_STREAM`, `KVP_STATUS_WRONG_BACKEND` (a host pool: use
/// `kvp_pool_digest`) or `KVP_STATUS_CUDA_ERROR`; nothing is enqueued on failure.
///
/// # Safety
/// `pool` a live pool or NULL; `out_device` device memory as above or NULL; `stream` a live
/// stream of the pool's device's primary context, or NULL.
#[no_mangle]
#[must_use]
pub unsafe extern "C" fn kvp_pool_digest_async(
    pool: *mut kvp_pool,
    out_device: *mut u64,
    stream: *mut CUstream_st,
) -> kvp_status {
    with_device_pool(pool, |pool| {
        if out_device.is_null() {
            return fail(kvp_status::NullArgument, "out_device is NULL");
        }
        // SAFETY: forwarded caller contract.
        status_of(unsafe { pool.digest_async(out_device as usize as u64, stream.cast()) })
    })
}

/// Writes the scheduler's state digest to `*out_digest`: `chain` (see `kvp_pool_digest`)
/// from `0x4B56505343484544` over 1 (the version), page_size, capacity, then for the
/// waiting queue (in queue order), the in-flight chunked requests (oldest first) and the
/// running requests (admission order) each: their count, then one hash per request; then
/// the bits of the new-token ratio (IEEE-754 double), batch_is_full, the number of
/// submissions so far, and the counters steps, prefill_steps, decode_steps, admitted,
/// chunks, retractions, preemptions, aborts, unfittable, finished. A request's hash is
/// `chain(0x5245515545535400, id, arrival (its submission number), phase (0 waiting,
/// 1 chunking, 2 running), kv_len, fill_len, input_len, prefix_len, prefix_evictable,
/// max_new_tokens, output_len, ignore_eos, priority (two's complement), retractions,
/// path_len, prefix_path[0], ...)`. Two schedulers of the same configuration given the
/// same calls have equal digests. O(live requests); changes nothing. An attached pool is
/// not included (digest it with `kvp_pool_digest` / `kvp_pool_digest_async`).
///
/// # Safety
/// `scheduler` a live scheduler or NULL; `out_digest` writable or NULL.
#[no_mangle]
#[must_use]
pub unsafe extern "C" fn kvp_scheduler_digest(
    scheduler: *const kvp_scheduler,
    out_digest: *mut u64,
) -> kvp_status {
    with_scheduler(scheduler, |state| {
        if out_digest.is_null() {
            return fail(kvp_status::NullArgument, "out_digest is NULL");
        }
        let digest = state.scheduler.digest();
        // SAFETY: non-NULL and writable (caller contract).
        unsafe { *out_digest = digest };
        kvp_status::Ok
    })
}
