//! Snapshots of allocator state for rollback (SGLang 0.5.12 `backup_state`/`restore_state`,
//! used to undo speculative-decoding draft allocations in one step).

use crate::host::HostState;

/// A copy of a pool's free list, staged frees, page states and fill points. Restoring it makes every
/// slot free or allocated exactly as it was at the backup; counters are not rolled back.
#[derive(Debug)]
pub struct Snapshot {
    pub(crate) pool_id: u64,
    pub(crate) state: HostState,
}
