//! The host backend: free list, page-state map and the index math, in host memory.
//!
//! [`HostStorage`] does what the pool's state machine asks of a backend: take pages and
//! write output indices, check that indices handed back are allocated (once), and move
//! pages between states. It never decides *whether* an operation may run; that is the
//! pool's job, done from host-side lengths and counts so a device backend can share it.

mod digest;
mod free_list;
mod memory;
mod page_map;

// The free list, page map and marks are the backend's unchecked building blocks (their
// callers range-check first): crate-internal, so no public call can index past them.
pub(crate) use free_list::{FreeList, ReuseOrder};
pub use page_map::PageState;
pub(crate) use page_map::{Marks, PageMap};

use crate::pool::config::Layout;
use crate::pool::error::{fail, ErrorKind, PoolError};
use crate::pool::plan::{decode_needs_page, ExtendShape};
use crate::pool::SlotIndex;

/// A copy of everything that defines which slots are free (and how far each allocated page
/// is filled), for backup/restore.
#[derive(Debug)]
pub struct HostState {
    free: FreeList,
    map: PageMap,
}

impl HostState {
    fn try_clone(&self) -> Result<Self, PoolError> {
        Ok(Self {
            free: self.free.try_clone()?,
            map: self.map.try_clone()?,
        })
    }
}

/// Host-memory storage of one pool.
#[derive(Debug)]
pub struct HostStorage {
    layout: Layout,
    state: HostState,
    /// Pages seen by the call being validated.
    page_marks: Marks,
    /// Slots seen by the call being validated (paged pools: catches one index freed twice).
    slot_marks: Marks,
    /// Pages marked in `page_marks`, so they can be cleared.
    marked: Vec<u32>,
}

impl HostStorage {
    /// A storage with every page free, or [`ErrorKind::OutOfMemory`] when its bookkeeping
    /// cannot be allocated (never an abort).
    pub(crate) fn new(layout: Layout, need_sort: bool) -> Result<Self, PoolError> {
        let order = if layout.is_paged() {
            ReuseOrder::Lifo
        } else {
            ReuseOrder::Fifo
        };
        let slot_marks = if layout.is_paged() {
            let rows = usize::try_from(layout.kv_rows())
                .map_err(|_| memory::exhausted("scratch marks", usize::MAX, 1))?;
            Marks::new(rows)?
        } else {
            Marks::default()
        };
        Ok(Self {
            layout,
            state: HostState {
                free: FreeList::new(layout.num_pages, order, need_sort)?,
                map: PageMap::new(layout.num_pages)?,
            },
            page_marks: Marks::new(layout.num_pages as usize + 1)?,
            slot_marks,
            marked: Vec::new(),
        })
    }

    /// Every page free, nothing staged.
    pub fn reset(&mut self) {
        self.state.free.reset(self.layout.num_pages);
        self.state.map.reset(self.layout.num_pages);
    }

    /// Pages in the free list.
    pub fn free_len(&self) -> usize {
        self.state.free.len()
    }

    /// Pages staged under `need_sort`.
    pub fn staged_len(&self) -> usize {
        self.state.free.staged_len()
    }

    /// Merges staged pages into the free list, sorted; returns whether anything was staged.
    pub fn merge_and_sort(&mut self) -> bool {
        let HostState { free, map } = &mut self.state;
        for &page in free.staged() {
            map.set(page, PageState::Free);
        }
        free.merge_and_sort()
    }

    /// Free pages in allocation order, then staged pages.
    pub fn census(&self) -> Vec<u32> {
        self.state.free.iter().collect()
    }

    /// State of one page (tests and diagnostics); `None` for a page outside `0..=num_pages`.
    pub fn page_state(&self, page: u32) -> Option<PageState> {
        (page <= self.layout.num_pages).then(|| self.state.map.get(page))
    }

    /// A copy of the free list, page states and fill points, or an out-of-memory error.
    pub fn save(&self) -> Result<HostState, PoolError> {
        self.state.try_clone()
    }

    /// Restores a copy made by [`save`](Self::save) on this storage (without allocating).
    pub fn load(&mut self, saved: &HostState) {
        self.state.free.load(&saved.free);
        self.state.map.load(&saved.map);
    }

    /// Whether no scratch mark is left set (an invariant between calls).
    pub fn scratch_is_clear(&self) -> bool {
        self.page_marks.is_clear() && self.slot_marks.is_clear() && self.marked.is_empty()
    }

    #[inline]
    fn take_page(&mut self) -> u32 {
        let page = self.state.free.take();
        self.state.map.set(page, PageState::Allocated);
        page
    }

    // ---- allocation -------------------------------------------------------------------

    /// Takes `pages` pages and writes their slots, page by page, into `out`.
    pub fn alloc_pages<I: SlotIndex>(&mut self, pages: usize, out: &mut [I]) {
        let ps = self.layout.page_size as usize;
        for chunk in out[..pages * ps].chunks_exact_mut(ps) {
            let page = self.take_page();
            self.state.map.set_fill(page, ps as u32);
            let base = u64::from(page) * ps as u64;
            for (k, slot) in chunk.iter_mut().enumerate() {
                *slot = I::from_slot(base + k as u64);
            }
        }
    }

    /// Writes an extend batch's indices with the three-part index math; requests take their
    /// new pages from the front of the free list in batch order.
    pub fn fill_extend<I: SlotIndex>(
        &mut self,
        prefix_lens: &[i64],
        seq_lens: &[i64],
        last_loc: &[I],
        out: &mut [I],
    ) {
        let ps = u64::from(self.layout.page_size);
        let mut pos = 0usize;
        for i in 0..seq_lens.len() {
            let shape = ExtendShape {
                prefix: prefix_lens[i] as u64,
                seq: seq_lens[i] as u64,
            };
            let part1 = shape.part1(ps);
            if part1 > 0 {
                let next = (last_loc[i].get() + 1) as u64;
                self.state
                    .map
                    .set_fill((next / ps) as u32, (next % ps + part1) as u32);
            }
            for k in 0..part1 {
                out[pos] = I::from_slot((last_loc[i].get() + 1) as u64 + k);
                pos += 1;
            }
            for _ in 0..shape.part2(ps) / ps {
                let page = self.take_page();
                self.state.map.set_fill(page, ps as u32);
                let base = u64::from(page) * ps;
                for k in 0..ps {
                    out[pos] = I::from_slot(base + k);
                    pos += 1;
                }
            }
            let part3 = shape.part3(ps);
            if part3 > 0 {
                let page = self.take_page();
                self.state.map.set_fill(page, part3 as u32);
                let base = u64::from(page) * ps;
                for k in 0..part3 {
                    out[pos] = I::from_slot(base + k);
                    pos += 1;
                }
            }
        }
    }

    /// Writes a decode batch's indices: the first slot of a new page where the new token
    /// starts one, otherwise `last_loc + 1`.
    pub fn fill_decode<I: SlotIndex>(&mut self, seq_lens: &[i64], last_loc: &[I], out: &mut [I]) {
        let ps = u64::from(self.layout.page_size);
        for i in 0..seq_lens.len() {
            out[i] = if decode_needs_page(seq_lens[i] as u64, ps) {
                let page = self.take_page();
                self.state.map.set_fill(page, 1);
                I::from_slot(u64::from(page) * ps)
            } else {
                let slot = (last_loc[i].get() + 1) as u64;
                self.state
                    .map
                    .set_fill((slot / ps) as u32, (slot % ps + 1) as u32);
                I::from_slot(slot)
            };
        }
    }

    // ---- validation -------------------------------------------------------------------

    /// Checks that `value` (named by `what`) is a slot the pool could have handed out.
    #[inline]
    fn check_slot(&self, what: &dyn Fn() -> String, value: i64) -> Result<u64, PoolError> {
        let ps = i64::from(self.layout.page_size);
        if value >= ps && value as u64 <= self.layout.max_slot() {
            return Ok(value as u64);
        }
        Err(self.slot_error(what, value))
    }

    #[cold]
    #[inline(never)]
    fn slot_error(&self, what: &dyn Fn() -> String, value: i64) -> PoolError {
        let max = self.layout.max_slot();
        if value == 0 {
            PoolError::new(
                ErrorKind::ReservedSlot,
                format!(
                    "{} is slot 0, the padding slot, which is never allocated",
                    what()
                ),
            )
        } else if value < 0 || value as u64 > max {
            PoolError::new(
                ErrorKind::IndexOutOfRange,
                format!("{} = {value} is outside the pool's slots 1..={max}", what()),
            )
        } else {
            PoolError::new(
                ErrorKind::ReservedSlot,
                format!(
                    "{} = {value} lies in page 0, the padding page, which is never allocated",
                    what()
                ),
            )
        }
    }

    /// Checks that `page` (named by `what`) is allocated and can be handed back.
    #[inline]
    fn check_freeable(&self, what: &dyn Fn() -> String, page: u32) -> Result<(), PoolError> {
        if self.state.map.get(page) == PageState::Allocated {
            return Ok(());
        }
        Err(self.freeable_error(what, page))
    }

    #[cold]
    #[inline(never)]
    fn freeable_error(&self, what: &dyn Fn() -> String, page: u32) -> PoolError {
        match self.state.map.get(page) {
            PageState::Pending => PoolError::new(
                ErrorKind::DoubleFree,
                format!(
                    "{}: page {page} was already freed in the open free group",
                    what()
                ),
            ),
            PageState::Reserved => PoolError::new(
                ErrorKind::ReservedSlot,
                format!("{}: page 0 is the padding page", what()),
            ),
            PageState::Held => held_error(&what(), page),
            _ => PoolError::new(
                ErrorKind::DoubleFree,
                format!("{}: page {page} is already free", what()),
            ),
        }
    }

    /// Checks that `page` (of the slot `what` names) is allocated and not held by a live
    /// reservation, so a continuation or rewind may move its fill point.
    #[inline]
    fn check_continuable(&self, what: &dyn Fn() -> String, page: u32) -> Result<(), PoolError> {
        match self.state.map.get(page) {
            PageState::Allocated => Ok(()),
            PageState::Held => Err(held_error(&what(), page)),
            _ => fail(
                ErrorKind::NotAllocated,
                format!("{} lies in page {page}, which is not allocated", what()),
            ),
        }
    }

    /// Validates one request's `last_loc` against its prefix: `-1` for an empty prefix,
    /// otherwise an allocated slot with `(last_loc + 1) % ps == prefix % ps` that is the last
    /// slot its page has handed out (the page's fill point: a stale `last_loc`, or one into
    /// another request's page, would hand out a slot twice). When the request writes into
    /// that slot's page (`extends_page`), no other request of the batch may.
    fn check_last_loc(
        &mut self,
        i: usize,
        last_loc: i64,
        prefix: u64,
        extends_page: bool,
    ) -> Result<(), PoolError> {
        let what = || format!("last_loc[{i}]");
        if prefix == 0 {
            if last_loc != -1 {
                return fail(
                    ErrorKind::LastLocMismatch,
                    format!("last_loc[{i}] = {last_loc} but the prefix is empty, so it must be -1"),
                );
            }
            return Ok(());
        }
        let slot = self.check_slot(&what, last_loc)?;
        let ps = u64::from(self.layout.page_size);
        let page = (slot / ps) as u32;
        self.check_continuable(&|| format!("last_loc[{i}] = {last_loc}"), page)?;
        if (slot + 1) % ps != prefix % ps {
            return fail(
                ErrorKind::LastLocMismatch,
                format!(
                    "last_loc[{i}] = {last_loc} does not end a prefix of {prefix} tokens: \
                     (last_loc + 1) % {ps} must equal {prefix} % {ps}"
                ),
            );
        }
        let filled = u64::from(self.state.map.fill(page));
        if slot % ps + 1 != filled {
            return Err(self.fill_error(i, slot, page, filled));
        }
        if extends_page {
            if !self.page_marks.insert(u64::from(page)) {
                return fail(
                    ErrorKind::LastLocMismatch,
                    format!("request {i} extends page {page}, which an earlier request of the batch also extends"),
                );
            }
            self.marked.push(page);
        }
        Ok(())
    }

    #[cold]
    #[inline(never)]
    fn fill_error(&self, i: usize, slot: u64, page: u32, filled: u64) -> PoolError {
        let ps = u64::from(self.layout.page_size);
        PoolError::new(
            ErrorKind::LastLocMismatch,
            format!(
                "last_loc[{i}] = {slot} is not where page {page} was left: its last handed-out \
                 slot is {}, so a continuation must pass that slot (after rejecting tokens, \
                 rewind the page first)",
                u64::from(page) * ps + filled - 1
            ),
        )
    }

    /// Validates a rewind: each `last_kept[i]` an allocated slot at or before its page's fill
    /// point, no page named twice. Changes nothing.
    pub fn check_rewind<I: SlotIndex>(&mut self, last_kept: &[I]) -> Result<(), PoolError> {
        let ps = u64::from(self.layout.page_size);
        let result = last_kept.iter().enumerate().try_for_each(|(i, slot)| {
            let what = || format!("last_kept[{i}]");
            let slot = self.check_slot(&what, slot.get())?;
            let page = (slot / ps) as u32;
            self.check_continuable(&|| format!("last_kept[{i}] = {slot}"), page)?;
            let filled = u64::from(self.state.map.fill(page));
            if slot % ps >= filled {
                return fail(
                    ErrorKind::LastLocMismatch,
                    format!(
                        "last_kept[{i}] = {slot} was never handed out: page {page} has handed out \
                         its slots up to {} only; a rewind can only move back",
                        u64::from(page) * ps + filled - 1
                    ),
                );
            }
            if !self.page_marks.insert(u64::from(page)) {
                return fail(
                    ErrorKind::LastLocMismatch,
                    format!("last_kept[{i}] = {slot} rewinds page {page}, which an earlier element also rewinds"),
                );
            }
            self.marked.push(page);
            Ok(())
        });
        self.clear_page_marks();
        result
    }

    /// Applies a validated rewind: each page's fill point moves back to just after
    /// `last_kept[i]`. Returns the number of slots taken back.
    pub fn rewind<I: SlotIndex>(&mut self, last_kept: &[I]) -> u64 {
        let ps = u64::from(self.layout.page_size);
        let mut released = 0;
        for slot in last_kept {
            let slot = slot.get() as u64;
            let page = (slot / ps) as u32;
            let kept = slot % ps + 1;
            released += u64::from(self.state.map.fill(page)) - kept;
            self.state.map.set_fill(page, kept as u32);
        }
        released
    }

    /// The fill point of `page` (tests and diagnostics; meaningful while it is allocated);
    /// `None` for a page outside `0..=num_pages`.
    pub fn page_fill(&self, page: u32) -> Option<u32> {
        (page <= self.layout.num_pages).then(|| self.state.map.fill(page))
    }

    fn clear_page_marks(&mut self) {
        for &page in &self.marked {
            self.page_marks.remove(u64::from(page));
        }
        self.marked.clear();
    }

    /// Validates every `last_loc` of an extend batch whose lengths are already validated.
    pub fn check_extend<I: SlotIndex>(
        &mut self,
        prefix_lens: &[i64],
        seq_lens: &[i64],
        last_loc: &[I],
    ) -> Result<(), PoolError> {
        let ps = u64::from(self.layout.page_size);
        let result = (0..seq_lens.len()).try_for_each(|i| {
            let shape = ExtendShape {
                prefix: prefix_lens[i] as u64,
                seq: seq_lens[i] as u64,
            };
            self.check_last_loc(i, last_loc[i].get(), shape.prefix, shape.part1(ps) > 0)
        });
        self.clear_page_marks();
        result
    }

    /// Validates every `last_loc` of a decode batch whose lengths are already validated.
    pub fn check_decode<I: SlotIndex>(
        &mut self,
        seq_lens: &[i64],
        last_loc: &[I],
    ) -> Result<(), PoolError> {
        let ps = u64::from(self.layout.page_size);
        let result = (0..seq_lens.len()).try_for_each(|i| {
            let seq = seq_lens[i] as u64;
            self.check_last_loc(i, last_loc[i].get(), seq - 1, !decode_needs_page(seq, ps))
        });
        self.clear_page_marks();
        result
    }

    // ---- frees ------------------------------------------------------------------------

    /// Validates token indices to free and appends the pages they free to `pages`: in call
    /// order for a token pool, distinct and ascending for a paged pool (SGLang's
    /// `unique(indices // page_size)`). Changes nothing.
    pub fn collect_index_frees<I: SlotIndex>(
        &mut self,
        indices: &[I],
        pages: &mut Vec<u32>,
    ) -> Result<(), PoolError> {
        self.collect_named_frees(indices, ("indices", 0), pages)
    }

    /// [`collect_index_frees`](Self::collect_index_frees), naming element `k` of `indices`
    /// `name[offset + k]` in messages.
    fn collect_named_frees<I: SlotIndex>(
        &mut self,
        indices: &[I],
        (name, offset): (&str, usize),
        pages: &mut Vec<u32>,
    ) -> Result<(), PoolError> {
        let first = pages.len();
        let ps = u64::from(self.layout.page_size);
        let paged = self.layout.is_paged();
        let mut checked = 0;
        let result = indices.iter().try_for_each(|index| {
            let at = offset + checked;
            let what = || format!("{name}[{at}]");
            let slot = self.check_slot(&what, index.get())?;
            if paged && !self.slot_marks.insert(slot) {
                return fail(
                    ErrorKind::DoubleFree,
                    format!("{name}[{at}] = {slot} appears more than once in this call"),
                );
            }
            checked += 1;
            let page = (slot / ps) as u32;
            if self.page_marks.insert(u64::from(page)) {
                // First index of this page in the call: the page itself must be allocated.
                pages.push(page);
                let what = || format!("{name}[{at}] = {slot}");
                self.check_freeable(&what, page)?;
            } else if !paged {
                return fail(
                    ErrorKind::DoubleFree,
                    format!("{name}[{at}] = {slot} appears more than once in this call"),
                );
            }
            Ok(())
        });
        if paged {
            for index in &indices[..checked] {
                self.slot_marks.remove(index.get() as u64);
            }
        }
        for &page in &pages[first..] {
            self.page_marks.remove(u64::from(page));
        }
        match result {
            Ok(()) => {
                if paged {
                    pages[first..].sort_unstable();
                }
                Ok(())
            }
            Err(err) => {
                pages.truncate(first);
                Err(err)
            }
        }
    }

    /// Validates page ids to free (each allocated, none twice) and appends them to `pages`
    /// in call order. Changes nothing.
    pub fn collect_page_frees<I: SlotIndex>(
        &mut self,
        page_ids: &[I],
        pages: &mut Vec<u32>,
    ) -> Result<(), PoolError> {
        let first = pages.len();
        let result = page_ids.iter().enumerate().try_for_each(|(i, id)| {
            let page = self.check_page_id(i, id.get())?;
            self.push_distinct_page(&|| format!("page_ids[{i}] = {page}"), page, pages)
        });
        self.finish_page_collection(first, pages, result)
    }

    /// Validates a segment `row[start_pos .. start_pos + len]` of one request's slot row and
    /// appends the pages it frees. Paged pools need `start_pos % page_size == 0` (unless
    /// `len == 0`) and each page's tokens contiguous in the row; the whole last page is freed
    /// even if the segment ends inside it. Changes nothing.
    pub fn collect_segment_frees<I: SlotIndex>(
        &mut self,
        row: &[I],
        start_pos: usize,
        len: usize,
        pages: &mut Vec<u32>,
    ) -> Result<(), PoolError> {
        let end = start_pos.checked_add(len).filter(|&end| end <= row.len());
        let Some(end) = end else {
            return fail(
                ErrorKind::BufferTooSmall,
                format!(
                    "segment {start_pos}..{start_pos}+{len} lies outside the row of {} slots",
                    row.len()
                ),
            );
        };
        let segment = &row[start_pos..end];
        if !self.layout.is_paged() {
            return self.collect_named_frees(segment, ("row", start_pos), pages);
        }
        if len == 0 {
            // Nothing to free, wherever it starts (SGLang returns on an empty segment before
            // its alignment check).
            return Ok(());
        }
        let ps = self.layout.page_size as usize;
        if !start_pos.is_multiple_of(ps) {
            return fail(
                ErrorKind::Unaligned,
                format!("start_pos {start_pos} is not a multiple of page_size {ps}"),
            );
        }
        let first = pages.len();
        let result = segment.chunks(ps).enumerate().try_for_each(|(c, tokens)| {
            let pos = start_pos + c * ps;
            let what = || format!("row[{pos}]");
            let head = self.check_slot(&what, tokens[0].get())?;
            if head % ps as u64 != 0 {
                return fail(
                    ErrorKind::Unaligned,
                    format!("row[{pos}] = {head} is not the first slot of its page, but position {pos} starts a page"),
                );
            }
            for (j, token) in tokens.iter().enumerate().skip(1) {
                if token.get() != (head + j as u64) as i64 {
                    return fail(
                        ErrorKind::InvalidArgument,
                        format!(
                            "row[{}] = {} breaks page {}: a page's tokens must be contiguous (expected {})",
                            pos + j,
                            token.get(),
                            head / ps as u64,
                            head + j as u64
                        ),
                    );
                }
            }
            let page = (head / ps as u64) as u32;
            self.push_distinct_page(&|| format!("row[{pos}] = {head}"), page, pages)
        });
        self.finish_page_collection(first, pages, result)
    }

    fn check_page_id(&self, i: usize, id: i64) -> Result<u32, PoolError> {
        if id == 0 {
            return fail(
                ErrorKind::ReservedSlot,
                format!("page_ids[{i}] is page 0, the padding page, which is never allocated"),
            );
        }
        if id < 0 || id > i64::from(self.layout.num_pages) {
            return fail(
                ErrorKind::IndexOutOfRange,
                format!(
                    "page_ids[{i}] = {id} is outside the pool's pages 1..={}",
                    self.layout.num_pages
                ),
            );
        }
        Ok(id as u32)
    }

    fn push_distinct_page(
        &mut self,
        what: &dyn Fn() -> String,
        page: u32,
        pages: &mut Vec<u32>,
    ) -> Result<(), PoolError> {
        self.check_freeable(what, page)?;
        if !self.page_marks.insert(u64::from(page)) {
            return fail(
                ErrorKind::DoubleFree,
                format!(
                    "{}: page {page} is freed more than once in this call",
                    what()
                ),
            );
        }
        pages.push(page);
        Ok(())
    }

    fn finish_page_collection(
        &mut self,
        first: usize,
        pages: &mut Vec<u32>,
        result: Result<(), PoolError>,
    ) -> Result<(), PoolError> {
        for &page in &pages[first..] {
            self.page_marks.remove(u64::from(page));
        }
        if result.is_err() {
            pages.truncate(first);
        }
        result
    }

    // ---- state changes for validated frees --------------------------------------------

    /// Marks pages freed inside an open group.
    pub fn mark_pending(&mut self, pages: &[u32]) {
        for &page in pages {
            self.state.map.set(page, PageState::Pending);
        }
    }

    /// Puts pages taken in this order back at the front of the free list, free (the free
    /// list's `untake`). The caller has checked that each is allocated.
    pub fn untake(&mut self, pages: &[u32]) {
        for &page in pages {
            self.state.map.set(page, PageState::Free);
        }
        self.state.free.untake(pages);
    }

    /// Sets the fill point of allocated `page` (a reservation's finish rewinding its pages).
    pub fn set_page_fill(&mut self, page: u32, fill: u32) {
        self.state.map.set_fill(page, fill);
    }

    /// Marks allocated pages held by a live decode reservation ([`PageState::Held`]).
    pub fn hold(&mut self, pages: &[u32]) {
        for &page in pages {
            debug_assert_eq!(self.state.map.get(page), PageState::Allocated);
            self.state.map.set(page, PageState::Held);
        }
    }

    /// Ends the hold on pages a reservation held (those still held: a clear or restore
    /// since has ended it already).
    pub fn unhold(&mut self, pages: &[u32]) {
        for &page in pages {
            if self.state.map.get(page) == PageState::Held {
                self.state.map.set(page, PageState::Allocated);
            }
        }
    }

    /// Returns validated pages to the pool (staged under `need_sort`).
    pub fn release(&mut self, pages: &[u32], need_sort: bool) {
        let state = if need_sort {
            PageState::Staged
        } else {
            PageState::Free
        };
        for &page in pages {
            self.state.map.set(page, state);
        }
        self.state.free.release(pages);
    }
}

/// A free, rewind or continuation of a page a live decode reservation holds.
#[cold]
#[inline(never)]
fn held_error(what: &str, page: u32) -> PoolError {
    PoolError::new(
        ErrorKind::InvalidState,
        format!(
            "{what}: page {page} is held by a live decode reservation, whose later steps hand \
             out its slots; finish the reservation (kvp_decode_reservation_finish) before \
             freeing, rewinding or continuing its requests"
        ),
    )
}
