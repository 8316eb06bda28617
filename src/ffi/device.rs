//! The `*_async` calls of device pools (`KVP_BACKEND_CUDA`): each validates what the host
//! can see, enqueues its kernel(s) on the caller's stream and returns without waiting.

use std::ffi::c_void;

use super::boundary::{fail, status_of};
use super::buffers::{disjoint, index_span, input, span};
use super::handle::{boxed_into_raw, boxed_ref};
use super::pool::{kvp_pool, with_device_pool};
use super::snapshot::{kvp_snapshot, SnapshotObject};
use super::status::kvp_status;
use crate::cuda::DevicePool;

/// A CUDA stream (`cudaStream_t` and `CUstream` are pointers to it, so either converts
/// without a cast). Declared, never defined, by kvpool.
pub struct CUstream_st {
    _private: [u8; 0],
}

pub(crate) fn stream_of(stream: *mut CUstream_st) -> cudarc::driver::sys::CUstream {
    stream.cast()
}

pub(crate) fn device_ptr<T>(ptr: *const T) -> u64 {
    ptr as usize as u64
}

/// Fails unless a device pointer is non-NULL (when `len > 0`) and aligned for the element.
pub(crate) fn check_device_ptr(
    ptr: *const c_void,
    len: usize,
    align: usize,
    name: &str,
) -> Result<(), kvp_status> {
    if len > 0 && ptr.is_null() {
        return Err(fail(kvp_status::NullArgument, format!("{name} is NULL")));
    }
    if !(ptr as usize).is_multiple_of(align) {
        return Err(fail(
            kvp_status::InvalidArgument,
            format!("{name} is not aligned for its element type"),
        ));
    }
    Ok(())
}

pub(crate) fn index_align(pool: &DevicePool) -> usize {
    match pool.config().index_type {
        crate::pool::IndexType::I64 => 8,
        crate::pool::IndexType::I32 => 4,
    }
}

/// Enqueues `alloc(num_tokens)` on `stream`: `num_tokens` slots into `out[0 .. num_tokens)`
/// (device). Semantics of `kvp_pool_alloc`: a paged pool needs `num_tokens % page_size == 0`
/// and returns whole pages.
///
/// Checked on the host, before anything is enqueued (failure enqueues nothing and changes
/// nothing, but for a shortage, which may first enqueue the merge of staged `need_sort`
/// frees, as SGLang does): alignment, `out_len`, shortage (`KVP_STATUS_OUT_OF_SLOTS`).
/// Enqueues one kernel (two when the shortage check merges staged frees). `out` must stay alive
/// until the stream passes the call.
///
/// # Safety
/// `pool` a live pool or NULL; `out` device memory of the pool's device for `out_len`
/// indices; `stream` a live stream of the pool's device's primary context, or NULL.
#[no_mangle]
#[must_use]
pub unsafe extern "C" fn kvp_pool_alloc_async(
    pool: *mut kvp_pool,
    num_tokens: usize,
    out: *mut c_void,
    out_len: usize,
    stream: *mut CUstream_st,
) -> kvp_status {
    with_device_pool(pool, |pool| {
        tri!(check_device_ptr(out, out_len, index_align(pool), "out"));
        // SAFETY: forwarded caller contract.
        status_of(unsafe { pool.alloc(num_tokens, device_ptr(out), out_len, stream_of(stream)) })
    })
}

/// Enqueues `alloc_extend` on `stream`: the KV slots of a prefill/extend batch into
/// `out[0 .. extend_num_tokens)` (device), with exactly the indices of
/// `kvp_pool_alloc_extend` (SGLang's three-part index math, new pages in batch order).
///
/// `prefix_lens_host` / `seq_lens_host` are host copies of the device arrays `prefix_lens`
/// / `seq_lens` (SGLang's `*_lens_cpu`): the host validates the lengths and counts the new
/// pages from them, so no device value is ever read back; the two must agree. The kernel
/// reads `prefix_lens`, `seq_lens` and `last_loc` (device) and writes `out` (device).
///
/// Checked on the host before anything is enqueued: lengths (`KVP_STATUS_INVALID_LENGTHS`),
/// `out_len` (`KVP_STATUS_BUFFER_TOO_SMALL`), shortage (`KVP_STATUS_OUT_OF_SLOTS`; the merge
/// of staged frees the shortage check may make first stays enqueued, as for
/// `kvp_pool_alloc_async`), NULLs, alignment, the stream (`KVP_STATUS_WRONG_STREAM`). Checked by the kernel: each
/// `last_loc` (allocated, consistent with its prefix, its page's last handed-out slot — see
/// `kvp_pool_rewind` — no page extended twice), and that the device lengths add up to the
/// host plan (a stale device copy: the fault names the first request that runs past the
/// plan, or the last request when the device totals fall short of it). The kernel never
/// writes past `out[extend_num_tokens)` and never takes a page the host did not count,
/// whatever the device lengths say. A kernel that finds a bad element changes nothing,
/// writes the padding slot 0 to all of `out[0 .. extend_num_tokens)`, and faults the pool:
/// the next call (or `kvp_pool_check_device`) returns `KVP_STATUS_DEVICE_FAULT`.
///
/// Enqueues one kernel (plus a merge when `need_sort` frees must be merged first). All five
/// device buffers must stay alive until the stream passes the call; the host arrays are read
/// during the call only. O(batch) per block; any batch size without recompiling.
///
/// # Safety
/// Host arrays valid for `batch_size` elements; device arrays of the pool's device valid for
/// `batch_size` (`out`: `out_len`) elements; `stream` as for `kvp_pool_alloc_async`.
#[no_mangle]
#[must_use]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn kvp_pool_alloc_extend_async(
    pool: *mut kvp_pool,
    prefix_lens_host: *const i64,
    seq_lens_host: *const i64,
    prefix_lens: *const i64,
    seq_lens: *const i64,
    last_loc: *const c_void,
    batch_size: usize,
    extend_num_tokens: usize,
    out: *mut c_void,
    out_len: usize,
    stream: *mut CUstream_st,
) -> kvp_status {
    with_device_pool(pool, |pool| {
        // SAFETY: forwarded caller contract.
        let prefix_host = tri!(unsafe { input(prefix_lens_host, batch_size, "prefix_lens_host") });
        // SAFETY: as above.
        let seq_host = tri!(unsafe { input(seq_lens_host, batch_size, "seq_lens_host") });
        let align = index_align(pool);
        tri!(check_device_ptr(
            prefix_lens.cast(),
            batch_size,
            8,
            "prefix_lens"
        ));
        tri!(check_device_ptr(seq_lens.cast(), batch_size, 8, "seq_lens"));
        tri!(check_device_ptr(last_loc, batch_size, align, "last_loc"));
        tri!(check_device_ptr(out, out_len, align, "out"));
        // (The kernel reads last_loc and the lengths while it writes out.)
        tri!(disjoint(
            &[index_span(out.cast_const(), out_len, align, "out")],
            &[
                span(prefix_lens, batch_size, "prefix_lens"),
                span(seq_lens, batch_size, "seq_lens"),
                index_span(last_loc, batch_size, align, "last_loc"),
            ],
        ));
        // SAFETY: forwarded caller contract.
        status_of(unsafe {
            pool.alloc_extend(
                prefix_host,
                seq_host,
                device_ptr(prefix_lens),
                device_ptr(seq_lens),
                device_ptr(last_loc),
                extend_num_tokens as u64,
                device_ptr(out),
                out_len,
                stream_of(stream),
            )
        })
    })
}

/// Enqueues `alloc_decode` on `stream`: one slot per request into `out[0 .. batch_size)`
/// (device), the indices of `kvp_pool_alloc_decode`. `seq_lens_host` is the host copy of
/// `seq_lens` (device). Checks and faults as for `kvp_pool_alloc_extend_async`; enqueues one
/// kernel. `seq_lens`, `last_loc` and `out` must stay alive until the stream passes the call.
///
/// # Safety
/// As for `kvp_pool_alloc_extend_async`.
#[no_mangle]
#[must_use]
pub unsafe extern "C" fn kvp_pool_alloc_decode_async(
    pool: *mut kvp_pool,
    seq_lens_host: *const i64,
    seq_lens: *const i64,
    last_loc: *const c_void,
    batch_size: usize,
    out: *mut c_void,
    out_len: usize,
    stream: *mut CUstream_st,
) -> kvp_status {
    with_device_pool(pool, |pool| {
        // SAFETY: forwarded caller contract.
        let seq_host = tri!(unsafe { input(seq_lens_host, batch_size, "seq_lens_host") });
        let align = index_align(pool);
        tri!(check_device_ptr(seq_lens.cast(), batch_size, 8, "seq_lens"));
        tri!(check_device_ptr(last_loc, batch_size, align, "last_loc"));
        tri!(check_device_ptr(out, out_len, align, "out"));
        tri!(disjoint(
            &[index_span(out.cast_const(), out_len, align, "out")],
            &[
                span(seq_lens, batch_size, "seq_lens"),
                index_span(last_loc, batch_size, align, "last_loc"),
            ],
        ));
        // SAFETY: forwarded caller contract.
        status_of(unsafe {
            pool.alloc_decode(
                seq_host,
                device_ptr(seq_lens),
                device_ptr(last_loc),
                device_ptr(out),
                out_len,
                stream_of(stream),
            )
        })
    })
}

/// Enqueues a free by slot index (`kvp_pool_free_indices` semantics) of `indices[0 .. len)`
/// (device). Token pool: slots return to the tail in order. Paged pool: the distinct pages
/// are found and sorted on the device (no `torch.unique`, no sync) and return to the front.
///
/// Counting: on a paged pool the number of distinct pages is known only to the kernel;
/// until the stream has passed this call, `kvp_pool_available_size` does not count them (a
/// lower bound; `kvp_pool_available_size_bound` says so) — they count at the first call
/// after that, with no synchronization. Prefer `kvp_pool_free_segment_async` where a
/// request's row is at hand: its count is exact at once.
///
/// Checked by the kernel: each index allocated, in range, not slot/page 0, not twice.
/// A bad one: nothing is freed and the pool faults (`KVP_STATUS_DEVICE_FAULT` from the next
/// call). `indices` must stay alive until the stream passes the call. One kernel (paged
/// pool, more than 4,096 indices: two multi-block kernels — claim and count the claimed pages
/// per chunk of the page map, then release them in ascending order).
///
/// # Safety
/// `indices` device memory of the pool's device valid for `len` indices; `stream` as for
/// `kvp_pool_alloc_async`.
#[no_mangle]
#[must_use]
pub unsafe extern "C" fn kvp_pool_free_indices_async(
    pool: *mut kvp_pool,
    indices: *const c_void,
    len: usize,
    stream: *mut CUstream_st,
) -> kvp_status {
    with_device_pool(pool, |pool| {
        tri!(check_device_ptr(indices, len, index_align(pool), "indices"));
        // SAFETY: forwarded caller contract.
        status_of(unsafe { pool.free(device_ptr(indices), len, stream_of(stream)) })
    })
}

/// Enqueues a rewind on `stream` (`kvp_pool_rewind` semantics): each `last_kept[i]` (device)
/// becomes its page's last handed-out slot, so the next continuation from it gets the slots
/// after it again (speculative decoding that rejected draft tokens). The host checks
/// NULLs, alignment and the stream; the kernel checks each slot (allocated, at or before its
/// page's fill point, each page once); a bad one changes nothing and faults the pool. Counts
/// do not change. `last_kept` must stay alive until the stream passes the call. One kernel
/// (one block).
///
/// # Safety
/// As for `kvp_pool_free_indices_async`.
#[no_mangle]
#[must_use]
pub unsafe extern "C" fn kvp_pool_rewind_async(
    pool: *mut kvp_pool,
    last_kept: *const c_void,
    len: usize,
    stream: *mut CUstream_st,
) -> kvp_status {
    with_device_pool(pool, |pool| {
        tri!(check_device_ptr(
            last_kept,
            len,
            index_align(pool),
            "last_kept"
        ));
        // SAFETY: forwarded caller contract.
        status_of(unsafe { pool.rewind(device_ptr(last_kept), len, stream_of(stream)) })
    })
}

/// Enqueues a free of exactly the pages `page_ids[0 .. len)` (device), in order
/// (`kvp_pool_free_pages` semantics). The count is exact at once. The kernel checks each
/// page (allocated, in range, not page 0, listed once); a bad one frees nothing and faults
/// the pool. `page_ids` must stay alive until the stream passes the call. One kernel.
///
/// # Safety
/// As for `kvp_pool_free_indices_async`.
#[no_mangle]
#[must_use]
pub unsafe extern "C" fn kvp_pool_free_pages_async(
    pool: *mut kvp_pool,
    page_ids: *const c_void,
    len: usize,
    stream: *mut CUstream_st,
) -> kvp_status {
    with_device_pool(pool, |pool| {
        tri!(check_device_ptr(
            page_ids,
            len,
            index_align(pool),
            "page_ids"
        ));
        // SAFETY: forwarded caller contract.
        status_of(unsafe { pool.free_pages(device_ptr(page_ids), len, stream_of(stream)) })
    })
}

/// Enqueues a free of the pages of `row[start_pos .. start_pos + len)` (device: one
/// request's `req_to_token` row), `kvp_pool_free_segment` semantics. The page count is
/// known on the host, so `kvp_pool_available_size` is exact at once. Host checks:
/// `start_pos + len <= row_len` (`KVP_STATUS_BUFFER_TOO_SMALL`), paged `start_pos %
/// page_size == 0` (`KVP_STATUS_UNALIGNED`) unless `len == 0` (a no-op). Kernel checks: each page allocated, its slots
/// consecutive and page-aligned in the row; a bad one frees nothing and faults the pool.
/// `row` must stay alive until the stream passes the call. One kernel.
///
/// # Safety
/// `row` device memory valid for `row_len` indices; `stream` as for
/// `kvp_pool_alloc_async`.
#[no_mangle]
#[must_use]
pub unsafe extern "C" fn kvp_pool_free_segment_async(
    pool: *mut kvp_pool,
    row: *const c_void,
    row_len: usize,
    start_pos: usize,
    len: usize,
    stream: *mut CUstream_st,
) -> kvp_status {
    with_device_pool(pool, |pool| {
        tri!(check_device_ptr(row, row_len, index_align(pool), "row"));
        // SAFETY: forwarded caller contract.
        status_of(unsafe {
            pool.free_segment(device_ptr(row), row_len, start_pos, len, stream_of(stream))
        })
    })
}

/// Enqueues the end of a free group opened by `kvp_pool_free_group_begin`: its pages return
/// to the pool (paged: those freed by index as one ascending block, then those freed by
/// page id or segment in call order). `KVP_STATUS_INVALID_STATE` without an open group.
/// One kernel.
///
/// # Safety
/// `pool` a live pool or NULL; `stream` as for `kvp_pool_alloc_async`.
#[no_mangle]
#[must_use]
pub unsafe extern "C" fn kvp_pool_free_group_end_async(
    pool: *mut kvp_pool,
    stream: *mut CUstream_st,
) -> kvp_status {
    with_device_pool(pool, |pool| {
        // SAFETY: forwarded caller contract (a live stream or NULL).
        status_of(unsafe { pool.free_group_end(stream_of(stream)) })
    })
}

/// Enqueues SGLang's `merge_and_sort_free`: staged frees join the free list, which becomes
/// ascending. Enqueues nothing when nothing can be staged. One kernel.
///
/// # Safety
/// As for `kvp_pool_free_group_end_async`.
#[no_mangle]
#[must_use]
pub unsafe extern "C" fn kvp_pool_merge_and_sort_free_async(
    pool: *mut kvp_pool,
    stream: *mut CUstream_st,
) -> kvp_status {
    with_device_pool(pool, |pool| {
        // SAFETY: forwarded caller contract.
        status_of(unsafe { pool.merge_and_sort_free(stream_of(stream)) })
    })
}

/// Enqueues a reset: every slot free (pages `1 .. num_pages` in order), staged frees and an
/// open free group dropped, and a device fault cleared (the way out of
/// `KVP_STATUS_DEVICE_FAULT`). One kernel.
///
/// # Safety
/// As for `kvp_pool_free_group_end_async`.
#[no_mangle]
#[must_use]
pub unsafe extern "C" fn kvp_pool_clear_async(
    pool: *mut kvp_pool,
    stream: *mut CUstream_st,
) -> kvp_status {
    with_device_pool(pool, |pool| {
        // SAFETY: forwarded caller contract.
        status_of(unsafe { pool.clear(stream_of(stream)) })
    })
}

/// Enqueues a copy of the allocator state (free ring, staged frees, page map: 12 bytes a
/// page, device to device) into a new snapshot written to `*out_snapshot`. The snapshot's
/// device buffer comes from the pool's spares (buffers of freed snapshots) when there is
/// one, else from `cuMemAlloc` (refused while `stream` is being captured:
/// `KVP_STATUS_INVALID_STATE`, the capture intact; take and free a snapshot before
/// capturing). Fails with `KVP_STATUS_INVALID_STATE` while a free group is open. Release
/// with `kvp_snapshot_free` (its buffer goes back to the pool's spares; no
/// synchronization). One kernel.
///
/// # Safety
/// `pool` a live pool or NULL; `out_snapshot` writable or NULL; `stream` as for
/// `kvp_pool_alloc_async`.
#[no_mangle]
#[must_use]
pub unsafe extern "C" fn kvp_pool_backup_state_async(
    pool: *mut kvp_pool,
    out_snapshot: *mut *mut kvp_snapshot,
    stream: *mut CUstream_st,
) -> kvp_status {
    with_device_pool(pool, |pool| {
        if out_snapshot.is_null() {
            return fail(kvp_status::NullArgument, "out_snapshot is NULL");
        }
        // SAFETY: forwarded caller contract.
        match unsafe { pool.backup_state(stream_of(stream)) } {
            Ok(snapshot) => {
                // SAFETY: non-NULL and writable (caller contract).
                unsafe { *out_snapshot = boxed_into_raw(SnapshotObject::Device(snapshot)) };
                kvp_status::Ok
            }
            Err(err) => status_of(Err(err)),
        }
    })
}

/// Enqueues a restore of `snapshot` (taken from this pool by `kvp_pool_backup_state_async`):
/// slots allocated since are free again, slots freed since allocated again; also clears a
/// device fault. The snapshot stays usable, and may be freed right after this call (its
/// buffer goes to the pool's spares and is reused only in stream order, after the restore
/// has read it). Fails with `KVP_STATUS_FOREIGN_SNAPSHOT` or
/// `KVP_STATUS_INVALID_STATE` (free group open — unless the pool is faulted: its group end
/// is refused like any work, so the restore abandons the group). One kernel. A snapshot
/// whose backup ran while the pool was faulted (enqueued after a call the device refused,
/// before the host saw the fault) is not restored: the kernel changes nothing and faults
/// the pool again, its message saying so; restore one taken before the faulting call.
///
/// # Safety
/// `pool` a live pool or NULL; `snapshot` a live snapshot or NULL; `stream` as for
/// `kvp_pool_alloc_async`.
#[no_mangle]
#[must_use]
pub unsafe extern "C" fn kvp_pool_restore_state_async(
    pool: *mut kvp_pool,
    snapshot: *const kvp_snapshot,
    stream: *mut CUstream_st,
) -> kvp_status {
    with_device_pool(pool, |pool| {
        // SAFETY: NULL or a live handle (caller contract).
        let snapshot = tri!(unsafe { boxed_ref::<SnapshotObject, _>(snapshot, "snapshot") });
        let SnapshotObject::Device(snapshot) = snapshot else {
            return fail(
                kvp_status::ForeignSnapshot,
                "the snapshot was taken from a host pool",
            );
        };
        // SAFETY: forwarded caller contract.
        status_of(unsafe { pool.restore_state(snapshot, stream_of(stream)) })
    })
}

/// Reports what the device found, without synchronizing: `KVP_STATUS_OK`, or
/// `KVP_STATUS_DEVICE_FAULT` with a message naming the call, the element and its value —
/// while the pool is faulted, and once more for a fault from before the last clear/restore;
/// `KVP_STATUS_CUDA_ERROR` while it refuses work after a call only partly enqueued (see
/// `KVP_STATUS_CUDA_ERROR`). A fault in a call the stream has not reached yet is not visible yet: synchronize the
/// stream first to check everything enqueued so far. Device pools only: a host pool (whose
/// calls report their errors themselves) fails with `KVP_STATUS_WRONG_BACKEND`.
///
/// # Safety
/// `pool` a live pool or NULL.
#[no_mangle]
#[must_use]
pub unsafe extern "C" fn kvp_pool_check_device(pool: *mut kvp_pool) -> kvp_status {
    with_device_pool(pool, |pool| status_of(pool.check_device()))
}

/// Writes the free token slots to `*out_tokens` and whether that number is exact to
/// `*out_exact` (false while a paged `kvp_pool_free_indices_async` is in flight: then it is
/// a lower bound, exact again once the stream has passed that free). Never synchronizes.
/// Device pools only: a host pool fails with `KVP_STATUS_WRONG_BACKEND` (its
/// `kvp_pool_available_size` is always exact). Both out-pointers are required
/// (`KVP_STATUS_NULL_ARGUMENT`).
///
/// # Safety
/// `pool` a live pool or NULL; the out-pointers writable or NULL.
#[no_mangle]
#[must_use]
pub unsafe extern "C" fn kvp_pool_available_size_bound(
    pool: *mut kvp_pool,
    out_tokens: *mut u64,
    out_exact: *mut bool,
) -> kvp_status {
    with_device_pool(pool, |pool| {
        if out_tokens.is_null() || out_exact.is_null() {
            return fail(kvp_status::NullArgument, "out_tokens or out_exact is NULL");
        }
        let (tokens, exact) = pool.available_size_bound();
        // SAFETY: non-NULL and writable (caller contract).
        unsafe {
            *out_tokens = tokens;
            *out_exact = exact;
        }
        kvp_status::Ok
    })
}
