//! The allocator state machine: SGLang's token and paged pools, with validation.
//!
//! [`Pool`] decides everything from host-side data (lengths, counts, its configuration):
//! which arguments are valid, when staged frees are merged, whether a batch fits, what a
//! free group holds. The free list, page states and index math live in the backend's
//! storage ([`crate::host::HostStorage`] today). Every public operation is all-or-nothing:
//! on error the pool, its outputs and its free list are exactly as before, but for one
//! thing: an allocation that runs short merges the staged (`need_sort`) frees before it
//! reports the shortage, as SGLang does (the next allocations then get SGLang's pages).

pub(crate) mod config;
pub(crate) mod error;
mod group;
pub mod plan;
pub mod reservation;
pub mod rows;
mod slot;
mod snapshot;
mod stats;

pub use config::{BackendKind, IndexType, PoolConfig};
pub use error::{ErrorKind, PoolError};
pub use reservation::{DecodeReservation, ReservationPlan, MAX_RESERVED_STEPS};
pub use rows::{ReqTable, TableShape};
pub use slot::SlotIndex;
pub use snapshot::Snapshot;
pub use stats::{PoolOp, PoolStats};

use std::sync::atomic::{AtomicU64, Ordering};

use crate::host::HostStorage;
use config::Layout;
use error::fail;
use group::FreeGroup;

/// Static facts about a pool (plus whether a free group is open).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PoolInfo {
    /// Usable token slots.
    pub size: u64,
    /// Tokens per page.
    pub page_size: u32,
    /// `size / page_size`.
    pub num_pages: u32,
    /// Rows the engine's KV buffers need: `size + page_size` (page 0 is the padding page).
    pub kv_rows: u64,
    /// The padding slot (always 0): write padded rows' KV here; it is never allocated.
    pub padding_slot: u64,
    /// Whether frees are staged and merged sorted.
    pub need_sort: bool,
    /// Index width at the C ABI.
    pub index_type: IndexType,
    /// Where the pool lives.
    pub backend: BackendKind,
    /// Whether a free group is open.
    pub in_free_group: bool,
}

static NEXT_POOL_ID: AtomicU64 = AtomicU64::new(1);

/// A KV-cache slot allocator: a token pool (`page_size == 1`) or a paged pool.
#[derive(Debug)]
pub struct Pool {
    id: u64,
    config: PoolConfig,
    layout: Layout,
    storage: HostStorage,
    group: Option<FreeGroup>,
    stats: PoolStats,
    /// Pages collected by the free call in progress (reused across calls).
    freed: Vec<u32>,
    /// Bumped by `clear` and `restore_state`: decode reservations made before hold nothing.
    epoch: u64,
}

impl Pool {
    /// Creates a pool with every page free.
    pub fn new(config: PoolConfig) -> Result<Self, PoolError> {
        let layout = Layout::new(&config)?;
        if let BackendKind::Cuda { .. } = config.backend {
            return fail(
                ErrorKind::Unsupported,
                "Pool is the host backend; a CUDA pool is kvpool::cuda::DevicePool (or kvp_pool_new from C)",
            );
        }
        Ok(Self {
            id: NEXT_POOL_ID.fetch_add(1, Ordering::Relaxed),
            config,
            layout,
            storage: HostStorage::new(layout, config.need_sort)?,
            group: None,
            stats: PoolStats::default(),
            freed: Vec::new(),
            epoch: 0,
        })
    }

    /// The configuration the pool was created with.
    pub fn config(&self) -> &PoolConfig {
        &self.config
    }

    /// Static facts about the pool.
    pub fn info(&self) -> PoolInfo {
        PoolInfo {
            size: self.layout.size,
            page_size: self.layout.page_size,
            num_pages: self.layout.num_pages,
            kv_rows: self.layout.kv_rows(),
            padding_slot: 0,
            need_sort: self.config.need_sort,
            index_type: self.config.index_type,
            backend: self.config.backend,
            in_free_group: self.group.is_some(),
        }
    }

    /// Usable token slots.
    pub fn size(&self) -> u64 {
        self.layout.size
    }

    /// Tokens per page.
    pub fn page_size(&self) -> u32 {
        self.layout.page_size
    }

    /// Pages (excluding the padding page).
    pub fn num_pages(&self) -> u32 {
        self.layout.num_pages
    }

    /// Free token slots, counting staged (not yet merged) pages, as SGLang does. Exact.
    pub fn available_size(&self) -> u64 {
        (self.storage.free_len() + self.storage.staged_len()) as u64
            * u64::from(self.layout.page_size)
    }

    /// The counters, with `pages_in_use` current.
    pub fn stats(&self) -> PoolStats {
        PoolStats {
            pages_in_use: self.pages_in_use(),
            ..self.stats
        }
    }

    /// Free pages in the order they will be handed out, then staged pages (a census for
    /// tests and debugging, like SGLang's `get_all_free_pages`).
    pub fn free_page_census(&self) -> Vec<u32> {
        self.storage.census()
    }

    /// The state digest (definition: [`crate::digest`]): equal for two pools of the same
    /// configuration, of either backend, after the same operations. O(num_pages).
    pub fn digest(&self) -> u64 {
        self.storage
            .digest(self.config.need_sort, self.group.is_some())
    }

    /// The host storage (tests and diagnostics).
    pub fn storage(&self) -> &HostStorage {
        &self.storage
    }

    fn pages_in_use(&self) -> u64 {
        u64::from(self.layout.num_pages)
            - (self.storage.free_len() + self.storage.staged_len()) as u64
    }

    /// Counts a call refused before it reached the pool (e.g. a NULL buffer at the C ABI),
    /// so the call and rejection counters cover every call.
    pub fn record_refused(&mut self, op: PoolOp) {
        self.stats.record_refused(op);
    }

    /// Records the outcome of a call in the counters.
    fn record<T>(&mut self, result: Result<T, PoolError>) -> Result<T, PoolError> {
        match &result {
            Ok(_) => {
                let in_use = self.pages_in_use();
                self.stats.pages_in_use_peak = self.stats.pages_in_use_peak.max(in_use);
            }
            Err(err) if err.kind() == ErrorKind::OutOfSlots => self.stats.failed_allocations += 1,
            Err(_) => self.stats.rejected_calls += 1,
        }
        result
    }

    fn check_index_type<I: SlotIndex>(&self) -> Result<(), PoolError> {
        if self.layout.max_slot() > I::MAX {
            return fail(
                ErrorKind::InvalidArgument,
                format!(
                    "the pool's largest slot {} does not fit the index type of the buffers",
                    self.layout.max_slot()
                ),
            );
        }
        Ok(())
    }

    fn check_output<I>(out: &[I], needed: u64) -> Result<(), PoolError> {
        if (out.len() as u64) < needed {
            return fail(
                ErrorKind::BufferTooSmall,
                format!(
                    "the output buffer holds {} indices but {needed} are needed",
                    out.len()
                ),
            );
        }
        Ok(())
    }

    /// Merges staged frees when `trigger` pages exceed the free list (SGLang's per-call rule),
    /// then reports a shortage if `needed` pages still do not fit. Nothing is produced before.
    fn ensure_pages(&mut self, trigger: u64, needed: u64, what: &str) -> Result<(), PoolError> {
        if trigger > self.storage.free_len() as u64 {
            self.merge_and_sort_free();
        }
        let free = self.storage.free_len() as u64;
        if needed > free {
            return fail(
                ErrorKind::OutOfSlots,
                format!("{what} needs {needed} free pages but only {free} are available"),
            );
        }
        Ok(())
    }

    // ---- allocation -------------------------------------------------------------------

    /// Allocates `n` slots into `out[..n]`. A paged pool needs `n % page_size == 0` and
    /// returns whole pages, each page's slots contiguous (SGLang silently floors `n`).
    /// Shortage: [`ErrorKind::OutOfSlots`].
    pub fn alloc<I: SlotIndex>(&mut self, n: usize, out: &mut [I]) -> Result<(), PoolError> {
        self.stats.alloc_calls += 1;
        let result = self.alloc_inner(n, out);
        self.record(result)
    }

    fn alloc_inner<I: SlotIndex>(&mut self, n: usize, out: &mut [I]) -> Result<(), PoolError> {
        self.check_index_type::<I>()?;
        let ps = self.layout.page_size as usize;
        if !n.is_multiple_of(ps) {
            return fail(
                ErrorKind::Unaligned,
                format!("alloc of {n} tokens is not a multiple of page_size {ps}"),
            );
        }
        Self::check_output(out, n as u64)?;
        let pages = (n / ps) as u64;
        self.ensure_pages(pages, pages, "alloc")?;
        self.storage.alloc_pages(pages as usize, out);
        self.count_allocation(n as u64, pages);
        Ok(())
    }

    fn count_allocation(&mut self, tokens: u64, pages: u64) {
        self.stats.tokens_allocated += tokens;
        self.stats.pages_allocated += pages;
    }

    /// Allocates the slots of a prefill/extend batch into `out[..extend_num_tokens]`.
    ///
    /// Request `i` has `prefix_lens[i]` cached tokens ending at slot `last_loc[i]` (`-1` for
    /// an empty prefix) and grows to `seq_lens[i]` tokens. Its new tokens first fill the
    /// prefix's partial page (`last_loc + 1 + k`), then whole new pages, then a new partial
    /// page; requests take new pages from the free list in batch order. A token pool gives
    /// the same result as `alloc(extend_num_tokens)`.
    pub fn alloc_extend<I: SlotIndex>(
        &mut self,
        prefix_lens: &[i64],
        seq_lens: &[i64],
        last_loc: &[I],
        extend_num_tokens: u64,
        out: &mut [I],
    ) -> Result<(), PoolError> {
        self.stats.alloc_extend_calls += 1;
        let result =
            self.alloc_extend_inner(prefix_lens, seq_lens, last_loc, extend_num_tokens, out);
        self.record(result)
    }

    fn alloc_extend_inner<I: SlotIndex>(
        &mut self,
        prefix_lens: &[i64],
        seq_lens: &[i64],
        last_loc: &[I],
        extend_num_tokens: u64,
        out: &mut [I],
    ) -> Result<(), PoolError> {
        self.check_index_type::<I>()?;
        check_batch(last_loc.len(), seq_lens.len())?;
        let plan = plan::plan_extend(&self.layout, prefix_lens, seq_lens, extend_num_tokens)?;
        Self::check_output(out, plan.tokens)?;
        self.storage.check_extend(prefix_lens, seq_lens, last_loc)?;
        let ps = u64::from(self.layout.page_size);
        let trigger = if self.layout.is_paged() {
            // SGLang's over-estimate: every request might start a new page, plus one.
            extend_num_tokens / ps + seq_lens.len() as u64 + 1
        } else {
            // A token pool serves an extend as `alloc(extend_num_tokens)`.
            plan.new_pages
        };
        self.ensure_pages(trigger, plan.new_pages, "alloc_extend")?;
        self.storage
            .fill_extend(prefix_lens, seq_lens, last_loc, out);
        self.count_allocation(plan.tokens, plan.new_pages);
        Ok(())
    }

    /// Allocates one slot per request for a decode step into `out[..seq_lens.len()]`.
    ///
    /// `seq_lens[i]` counts the new token; `last_loc[i]` is the slot of the request's last
    /// token so far (`-1` when `seq_lens[i] == 1`). A request whose new token starts a page
    /// gets that page's first slot, the others `last_loc + 1`.
    pub fn alloc_decode<I: SlotIndex>(
        &mut self,
        seq_lens: &[i64],
        last_loc: &[I],
        out: &mut [I],
    ) -> Result<(), PoolError> {
        self.stats.alloc_decode_calls += 1;
        let result = self.alloc_decode_inner(seq_lens, last_loc, out);
        self.record(result)
    }

    fn alloc_decode_inner<I: SlotIndex>(
        &mut self,
        seq_lens: &[i64],
        last_loc: &[I],
        out: &mut [I],
    ) -> Result<(), PoolError> {
        self.check_index_type::<I>()?;
        check_batch(last_loc.len(), seq_lens.len())?;
        let new_pages = plan::plan_decode(&self.layout, seq_lens)?;
        Self::check_output(out, seq_lens.len() as u64)?;
        self.storage.check_decode(seq_lens, last_loc)?;
        // Paged: SGLang merges when the batch size exceeds the free list; a token pool
        // serves a decode step as `alloc(batch_size)`, and there the two are equal.
        let trigger = seq_lens.len() as u64;
        self.ensure_pages(trigger, new_pages, "alloc_decode")?;
        self.storage.fill_decode(seq_lens, last_loc, out);
        self.count_allocation(seq_lens.len() as u64, new_pages);
        Ok(())
    }

    /// Moves pages' fill points back (speculative decoding): after it, page `p` of
    /// `last_kept[i]` has handed out only its slots up to `last_kept[i]`, and the next
    /// `alloc_extend` / `alloc_decode` continuing from `last_kept[i]` gets the slots after it
    /// again. Each element must be an allocated slot at or before its page's fill point, and
    /// no page may be named twice. Pages holding only rejected tokens are freed as usual
    /// (`free_pages`, `free_segment`); a token pool has nothing to rewind (its pages are one
    /// slot), so there every valid slot is a no-op.
    pub fn rewind<I: SlotIndex>(&mut self, last_kept: &[I]) -> Result<(), PoolError> {
        let result = self.rewind_inner(last_kept);
        self.record(result)
    }

    fn rewind_inner<I: SlotIndex>(&mut self, last_kept: &[I]) -> Result<(), PoolError> {
        self.check_index_type::<I>()?;
        self.storage.check_rewind(last_kept)?;
        self.storage.rewind(last_kept);
        Ok(())
    }

    // ---- dry runs ---------------------------------------------------------------------

    /// What [`alloc_extend`](Self::alloc_extend) of these lengths would take from the pool,
    /// changing nothing (not even the counters): the exact pages it takes from the free
    /// list (`new_pages`) and the slots it writes (`tokens`, its `extend_num_tokens`).
    /// Runs the same host planning, so bad lengths fail with the same kind and message.
    ///
    /// Shortage rule (both backends): `alloc_extend` of these lengths fails with
    /// [`ErrorKind::OutOfSlots`] iff `new_pages * page_size > available_size()`. Staged
    /// (`need_sort`) pages count: SGLang's merge trigger (`extend_num_tokens / page_size +
    /// batch + 1` pages, a token pool `new_pages`) is never below `new_pages`, so a batch
    /// that needs the staged pages always merges them first.
    pub fn extend_need(
        &self,
        prefix_lens: &[i64],
        seq_lens: &[i64],
    ) -> Result<plan::ExtendPlan, PoolError> {
        plan::plan_extend_lengths(&self.layout, prefix_lens, seq_lens)
    }

    /// The pages [`alloc_decode`](Self::alloc_decode) of these lengths would take (requests
    /// whose `(seq_len - 1) % page_size == 0`), changing nothing; same validation. The
    /// shortage rule is [`extend_need`](Self::extend_need)'s (the trigger is the batch
    /// size, never below the page count).
    pub fn decode_need(&self, seq_lens: &[i64]) -> Result<u64, PoolError> {
        plan::plan_decode(&self.layout, seq_lens)
    }

    /// Runs every check of [`alloc_extend`](Self::alloc_extend) except the shortage check,
    /// changing nothing: for engine-side assertions, and to measure what validation costs.
    pub fn check_extend<I: SlotIndex>(
        &mut self,
        prefix_lens: &[i64],
        seq_lens: &[i64],
        last_loc: &[I],
        extend_num_tokens: u64,
    ) -> Result<(), PoolError> {
        self.check_index_type::<I>()?;
        check_batch(last_loc.len(), seq_lens.len())?;
        plan::plan_extend(&self.layout, prefix_lens, seq_lens, extend_num_tokens)?;
        self.storage.check_extend(prefix_lens, seq_lens, last_loc)
    }

    /// Runs every check of [`alloc_decode`](Self::alloc_decode) except the shortage check,
    /// changing nothing.
    pub fn check_decode<I: SlotIndex>(
        &mut self,
        seq_lens: &[i64],
        last_loc: &[I],
    ) -> Result<(), PoolError> {
        self.check_index_type::<I>()?;
        check_batch(last_loc.len(), seq_lens.len())?;
        plan::plan_decode(&self.layout, seq_lens)?;
        self.storage.check_decode(seq_lens, last_loc)
    }

    /// Runs every check of [`free`](Self::free), changing nothing.
    pub fn check_free<I: SlotIndex>(&mut self, indices: &[I]) -> Result<(), PoolError> {
        let mut pages = std::mem::take(&mut self.freed);
        pages.clear();
        let result = self.storage.collect_index_frees(indices, &mut pages);
        self.freed = pages;
        result
    }

    // ---- frees ------------------------------------------------------------------------

    /// Frees slots by index. Token pool: each index is one slot, returned to the tail in
    /// the given order. Paged pool: each index frees its whole page; the distinct pages
    /// return to the front in ascending order. Every index must be allocated and appear
    /// once; inside a free group, a page may be freed by only one call.
    pub fn free<I: SlotIndex>(&mut self, indices: &[I]) -> Result<(), PoolError> {
        self.free_with(
            |storage, pages| storage.collect_index_frees(indices, pages),
            true,
        )
    }

    /// Frees exactly these pages (token pool: slots), in the given order.
    pub fn free_pages<I: SlotIndex>(&mut self, page_ids: &[I]) -> Result<(), PoolError> {
        self.free_with(
            |storage, pages| storage.collect_page_frees(page_ids, pages),
            false,
        )
    }

    /// Frees the pages of `row[start_pos .. start_pos + len]`, one request's slot row (SGLang
    /// 0.5.23's sync-free `free_segment`). Paged pools need `start_pos % page_size == 0` and
    /// each page's slots contiguous in the row; a segment ending mid-page frees that page.
    pub fn free_segment<I: SlotIndex>(
        &mut self,
        row: &[I],
        start_pos: usize,
        len: usize,
    ) -> Result<(), PoolError> {
        self.free_with(
            |storage, pages| storage.collect_segment_frees(row, start_pos, len, pages),
            false,
        )
    }

    fn free_with(
        &mut self,
        collect: impl FnOnce(&mut HostStorage, &mut Vec<u32>) -> Result<(), PoolError>,
        by_index: bool,
    ) -> Result<(), PoolError> {
        self.stats.free_calls += 1;
        let mut pages = std::mem::take(&mut self.freed);
        pages.clear();
        let result = collect(&mut self.storage, &mut pages);
        if result.is_ok() {
            match &mut self.group {
                Some(group) => {
                    self.storage.mark_pending(&pages);
                    let queue = if by_index && self.layout.is_paged() {
                        &mut group.by_index
                    } else {
                        &mut group.in_order
                    };
                    queue.extend_from_slice(&pages);
                }
                None => self.release(&pages),
            }
        }
        self.freed = pages;
        self.record(result)
    }

    fn release(&mut self, pages: &[u32]) {
        self.storage.release(pages, self.config.need_sort);
        let count = pages.len() as u64;
        self.stats.pages_freed += count;
        self.stats.slots_freed += count * u64::from(self.layout.page_size);
    }

    /// Opens a free group: later frees are validated immediately but return to the pool
    /// together at [`free_group_end`](Self::free_group_end). Groups do not nest.
    pub fn free_group_begin(&mut self) -> Result<(), PoolError> {
        let result = if self.group.is_some() {
            fail(
                ErrorKind::InvalidState,
                "a free group is already open; free groups do not nest",
            )
        } else {
            self.group = Some(FreeGroup::default());
            Ok(())
        };
        self.record(result)
    }

    /// Closes the free group and returns its pages: first those freed by index (one
    /// ascending block on a paged pool), then those freed by page id or segment, in order.
    pub fn free_group_end(&mut self) -> Result<(), PoolError> {
        let Some(mut group) = self.group.take() else {
            return self.record(fail(
                ErrorKind::InvalidState,
                "free_group_end without an open free group",
            ));
        };
        if !group.by_index.is_empty() {
            group.by_index.sort_unstable();
            self.release(&group.by_index);
        }
        if !group.in_order.is_empty() {
            self.release(&group.in_order);
        }
        self.record(Ok(()))
    }

    /// Merges staged frees into the free list, sorted ascending. A no-op when nothing is
    /// staged. Allocations call it themselves when they run short.
    pub fn merge_and_sort_free(&mut self) {
        if self.storage.merge_and_sort() {
            self.stats.merges += 1;
        }
    }

    /// Frees everything: the free list becomes `1..=num_pages`, staged frees and any open
    /// free group are dropped. Counters keep counting.
    pub fn clear(&mut self) {
        self.storage.reset();
        self.group = None;
        self.epoch += 1;
    }

    // ---- snapshots ----------------------------------------------------------------------

    /// Copies the allocator state (free list, staged frees, page states). O(num_pages).
    /// Not allowed while a free group is open.
    pub fn backup_state(&self) -> Result<Snapshot, PoolError> {
        if self.group.is_some() {
            return fail(
                ErrorKind::InvalidState,
                "cannot back up the state while a free group is open",
            );
        }
        Ok(Snapshot {
            pool_id: self.id,
            state: self.storage.save()?,
        })
    }

    /// Returns the allocator to a snapshot of this pool: slots allocated since are free
    /// again, slots freed since are allocated again. The snapshot stays usable.
    pub fn restore_state(&mut self, snapshot: &Snapshot) -> Result<(), PoolError> {
        let result = if snapshot.pool_id != self.id {
            fail(
                ErrorKind::ForeignSnapshot,
                "the snapshot was taken from a different pool",
            )
        } else if self.group.is_some() {
            fail(
                ErrorKind::InvalidState,
                "cannot restore a snapshot while a free group is open",
            )
        } else {
            self.storage.load(&snapshot.state);
            self.stats.restores += 1;
            self.epoch += 1;
            Ok(())
        };
        self.record(result)
    }
}

/// `last_loc` must have one entry per request.
fn check_batch(last_loc: usize, batch: usize) -> Result<(), PoolError> {
    if last_loc != batch {
        return fail(
            ErrorKind::InvalidLengths,
            format!("last_loc has {last_loc} entries but seq_lens has {batch}"),
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests;
