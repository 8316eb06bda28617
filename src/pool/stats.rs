//! Counters a serving engine exports to its metrics.

/// Which counter of calls a call refused before it reached the pool belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PoolOp {
    /// `alloc`.
    Alloc,
    /// `alloc_extend`.
    AllocExtend,
    /// `alloc_decode`.
    AllocDecode,
    /// `free`, `free_pages`, `free_segment`.
    Free,
    /// `rewind` (no call counter of its own; a refusal counts as a rejected call).
    Rewind,
    /// A decode reservation's reserve or step (no call counter of their own either).
    Reservation,
}

/// A pool's counters. Call and token counters only grow (also across `clear` and
/// `restore_state`); `pages_in_use` is the current value.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolStats {
    /// `alloc` calls, including failed ones.
    pub alloc_calls: u64,
    /// `alloc_extend` calls, including failed ones.
    pub alloc_extend_calls: u64,
    /// `alloc_decode` calls, including failed ones.
    pub alloc_decode_calls: u64,
    /// `free`, `free_pages` and `free_segment` calls, including failed ones.
    pub free_calls: u64,
    /// Slot indices handed out, one per token (a slot handed out again after a rewind
    /// counts again).
    pub tokens_allocated: u64,
    /// Slot capacity returned to the pool: `pages_freed * page_size`, since a free returns
    /// whole pages. It exceeds `tokens_allocated` when pages were freed partly used, so
    /// compare pages (`pages_allocated`, `pages_freed`, `pages_in_use`) to find a leak; both
    /// backends count it from page counts alone (a device pool cannot see its pages' fill
    /// points without a synchronization).
    pub slots_freed: u64,
    /// Pages taken from the free list.
    pub pages_allocated: u64,
    /// Pages returned to the pool (when a free group ends, for frees inside one).
    pub pages_freed: u64,
    /// Pages neither free nor staged right now (pages freed in an open group count as in use).
    pub pages_in_use: u64,
    /// The largest `pages_in_use` seen since the pool was created.
    pub pages_in_use_peak: u64,
    /// Allocations refused for lack of free slots.
    pub failed_allocations: u64,
    /// Calls refused for bad input or state (nothing changed).
    pub rejected_calls: u64,
    /// `merge_and_sort_free` runs that had staged pages to merge.
    pub merges: u64,
    /// Successful `restore_state` calls.
    pub restores: u64,
}

impl PoolStats {
    /// Counts a call refused before it reached the pool: its call counter and a rejection.
    pub(crate) fn record_refused(&mut self, op: PoolOp) {
        let calls = match op {
            PoolOp::Alloc => Some(&mut self.alloc_calls),
            PoolOp::AllocExtend => Some(&mut self.alloc_extend_calls),
            PoolOp::AllocDecode => Some(&mut self.alloc_decode_calls),
            PoolOp::Free => Some(&mut self.free_calls),
            PoolOp::Rewind | PoolOp::Reservation => None,
        };
        if let Some(calls) = calls {
            *calls += 1;
        }
        self.rejected_calls += 1;
    }
}
