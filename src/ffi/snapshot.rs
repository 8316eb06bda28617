//! `kvp_snapshot`: backup and rollback of a pool's allocator state.

use super::boundary::{fail, status_of};
use super::handle::{boxed_into_raw, boxed_ref, boxed_release};
use super::pool::{kvp_pool, with_pool};
use super::status::kvp_status;
use crate::cuda::DeviceSnapshot;
use crate::pool::Snapshot;

/// What a `kvp_snapshot *` points to.
#[derive(Debug)]
pub(crate) enum SnapshotObject {
    /// From `kvp_pool_backup_state`.
    Host(Snapshot),
    /// From `kvp_pool_backup_state_async`.
    Device(DeviceSnapshot),
}

/// A copy of a pool's allocator state (free list, staged frees, page states), made by
/// `kvp_pool_backup_state` (`_async` for a device pool, whose snapshot lives in device
/// memory) and applied by `kvp_pool_restore_state` (`_async`) (SGLang 0.5.12's
/// `backup_state`/`restore_state`, e.g. to roll back speculative-decoding draft slots).
///
/// Owned by the caller; release with `kvp_snapshot_free`. Immutable once made, so it may be
/// read from several threads; `kvp_snapshot_free` must not race with its use.
pub struct kvp_snapshot {
    _private: [u8; 0],
}

/// Copies the pool's allocator state into a new snapshot written to `*out_snapshot`.
/// Costs O(num_pages) time and memory (5 bytes a page plus 4 per free or staged page: 9 for
/// an empty pool; about 8 µs for 131,072 pages, 180 µs for a 2M-slot token pool;
/// BENCHMARKS.md); restoring costs the same. Fails with `KVP_STATUS_INVALID_STATE` while a
/// free group is open, or `KVP_STATUS_OUT_OF_MEMORY` when the copy cannot be allocated;
/// `*out_snapshot` is unmodified on failure.
///
/// # Safety
/// `pool` must be a live pool or NULL; `out_snapshot` writable or NULL.
#[no_mangle]
#[must_use]
pub unsafe extern "C" fn kvp_pool_backup_state(
    pool: *const kvp_pool,
    out_snapshot: *mut *mut kvp_snapshot,
) -> kvp_status {
    with_pool(pool, |pool| {
        if out_snapshot.is_null() {
            return fail(kvp_status::NullArgument, "out_snapshot is NULL");
        }
        match pool.backup_state() {
            Ok(snapshot) => {
                // SAFETY: non-NULL and writable (caller contract).
                unsafe { *out_snapshot = boxed_into_raw(SnapshotObject::Host(snapshot)) };
                kvp_status::Ok
            }
            Err(err) => status_of(Err(err)),
        }
    })
}

/// Returns the pool to the state saved in `snapshot`: slots allocated since the backup are
/// free again and slots freed since are allocated again. The snapshot is not consumed and
/// can be restored again. Fails with `KVP_STATUS_FOREIGN_SNAPSHOT` (snapshot of another
/// pool) or `KVP_STATUS_INVALID_STATE` (free group open), changing nothing.
///
/// # Safety
/// `pool` must be a live pool or NULL; `snapshot` a live snapshot or NULL.
#[no_mangle]
#[must_use]
pub unsafe extern "C" fn kvp_pool_restore_state(
    pool: *mut kvp_pool,
    snapshot: *const kvp_snapshot,
) -> kvp_status {
    with_pool(pool, |pool| {
        // SAFETY: NULL or a live handle (caller contract).
        let snapshot = tri!(unsafe { boxed_ref::<SnapshotObject, _>(snapshot, "snapshot") });
        let SnapshotObject::Host(snapshot) = snapshot else {
            return fail(
                kvp_status::ForeignSnapshot,
                "the snapshot was taken from a device pool",
            );
        };
        status_of(pool.restore_state(snapshot))
    })
}

/// Releases a snapshot. `snapshot` may be NULL (no-op). A device snapshot's buffer goes
/// back to its pool for reuse; when the pool is gone too, the buffers are freed once the
/// pool's last kernel (e.g. a restore from this snapshot still queued) has run — the same
/// stream-ordered release as `kvp_pool_free`. This never waits and never synchronizes.
///
/// # Safety
/// `snapshot` must be NULL or a snapshot not yet freed, not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn kvp_snapshot_free(snapshot: *mut kvp_snapshot) {
    // SAFETY: forwarded caller contract.
    unsafe { boxed_release::<SnapshotObject, kvp_snapshot>(snapshot) }
}
