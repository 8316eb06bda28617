//! Debug options of device pools (`kvp_pool_set_debug`) and the stream-ordered release
//! diagnostics (`kvp_device_pending_releases`). Off by default; a host pool accepts the
//! options and ignores them, so an engine can set them whatever the backend.

use super::boundary::{fail, ffi_boundary, status_of};
use super::pool::{kvp_pool, with_any_pool, PoolObject};
use super::status::kvp_status;
use crate::cuda;

/// Debug checks of a device pool (`kvp_pool_set_debug` flags, or-ed together).
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum kvp_debug {
    /// Check on the device that every call of the pool starts after the previous one has
    /// finished, i.e. that calls from different streams are ordered (one stream, or an event
    /// recorded on the first and waited for by the second). A call that starts too early
    /// faults the pool: the next call and `kvp_pool_check_device` return
    /// `KVP_STATUS_UNORDERED_STREAMS`, naming both calls and their streams. Costs two
    /// one-thread kernels per kernel of the pool; off, it costs nothing. Also switched on for
    /// every device pool by the environment variable `KVPOOL_DEBUG=stream_order` at creation.
    StreamOrder = 1,
    /// Let a call recorded by stream capture run again when its graph is replayed at once,
    /// repeating the call on the state before it (the same slots again): for timing a call
    /// by replaying its graph, as bench-gpu does. Without it the turn check faults a
    /// captured call that runs a second time (`KVP_STATUS_DEVICE_FAULT`). Not for serving:
    /// the repeated slots are handed out twice. Costs nothing.
    ReplayCalls = 2,
}

/// Switches a pool's debug checks on (`flags`, an or of `kvp_debug` values) or off (0).
///
/// Device pool: takes effect for the next call. Switching `KVP_DEBUG_STREAM_ORDER` on the
/// first time allocates a 4-byte device word (and may synchronize, like `kvp_pool_new`: do
/// it at start-up); the first call after switching it on is not checked against the calls
/// made before. Host pool: accepted and ignored (a host pool has no streams); returns
/// `KVP_STATUS_OK`.
///
/// Fails with `KVP_STATUS_INVALID_ARGUMENT` for an unknown flag, changing nothing.
///
/// # Safety
/// `pool` a live pool or NULL.
#[no_mangle]
#[must_use]
pub unsafe extern "C" fn kvp_pool_set_debug(pool: *mut kvp_pool, flags: u32) -> kvp_status {
    with_any_pool(pool, |object| {
        if flags & !cuda::DEBUG_ALL != 0 {
            return fail(
                kvp_status::InvalidArgument,
                format!("unknown kvp_debug flags {:#x}", flags & !cuda::DEBUG_ALL),
            );
        }
        match object {
            PoolObject::Host(_) => kvp_status::Ok,
            PoolObject::Device(pool) => status_of(pool.set_debug(flags)),
        }
    })
}

/// Writes the pool's debug flags to `*out_flags` (always 0 for a host pool).
///
/// # Safety
/// `pool` a live pool or NULL; `out_flags` writable or NULL.
#[no_mangle]
#[must_use]
pub unsafe extern "C" fn kvp_pool_get_debug(
    pool: *mut kvp_pool,
    out_flags: *mut u32,
) -> kvp_status {
    with_any_pool(pool, |object| {
        if out_flags.is_null() {
            return fail(kvp_status::NullArgument, "out_flags is NULL");
        }
        let flags = match object {
            PoolObject::Host(_) => 0,
            PoolObject::Device(pool) => pool.debug_flags(),
        };
        // SAFETY: non-NULL and writable (caller contract).
        unsafe { *out_flags = flags };
        kvp_status::Ok
    })
}

/// Writes to `*out_count` how many released device pools (or snapshot-buffer sets of
/// released pools) of this process still wait for kernels that were queued when they were
/// released: their memory is freed by a library thread shortly after the streams pass
/// that work (see `kvp_pool_free`). For tests and leak diagnostics; never synchronizes and
/// never loads the driver.
///
/// # Safety
/// `out_count` writable or NULL.
#[no_mangle]
#[must_use]
pub unsafe extern "C" fn kvp_device_pending_releases(out_count: *mut usize) -> kvp_status {
    ffi_boundary(|| {
        if out_count.is_null() {
            return fail(kvp_status::NullArgument, "out_count is NULL");
        }
        // SAFETY: non-NULL and writable (caller contract).
        unsafe { *out_count = cuda::pending_releases() };
        kvp_status::Ok
    })
}
