//! Multi-step decode reservations (issue 11): the pages `K` successive `alloc_decode`
//! calls of a fixed batch will take, taken at once, so that the steps themselves can run
//! without the host (on a device pool: as one small kernel each, inside a captured CUDA
//! graph).
//!
//! Why: a CUDA graph replays fixed kernel arguments and cannot call back to the host, so an
//! allocator whose shortage check and page counting live on the host cannot run inside
//! one. Reserving moves every decision (validation, shortage, which pages) to one host call
//! before the graph; each step only reads the next row of a slot table computed then.
//!
//! Exactness: the pages are taken in the order `K` plain decodes would take them
//! (step-major: step 1's new pages in request order, then step 2's, ...), and the slot
//! table holds exactly the slots those decodes would return; fill points advance as if all
//! `K` steps ran; with `need_sort`, staged frees are merged before the step at which the
//! decodes would merge them. `finish` with `steps_used = U` puts the pages no used step
//! touched back at the *front* of the free list in the order they were taken and rewinds the
//! partly used last page of each request, so the pool is then exactly as after `U` plain
//! decodes (when nothing else ran in between, and no merge was made for a step after `U`:
//! a merge cannot be undone). This module holds the planning both backends share and the
//! host backend's implementation.
//!
//! Holds: from the reserve to the finish, every page the reservation hands slots out of (its
//! new pages and each request's partly filled last page) is *held*: a free, rewind or
//! continuation (`last_loc`) of it is refused with [`ErrorKind::InvalidState`] (a device
//! pool faults). Without the hold, a request freed before the finish would release a page
//! whose remaining slots later steps still hand out, and another request could be given the
//! same slots. The finish, [`Pool::abandon_reservation`], a clear and a restore end holds.

use super::config::Layout;
use super::error::{fail, ErrorKind, PoolError};
use super::plan::decode_needs_page;
use super::rows::{check_rows, check_table_type, ReqTable};
use super::{check_batch, Pool, SlotIndex};

/// The most steps one reservation may cover (`steps` of `kvp_pool_reserve_decode[_async]`;
/// bounds the device kernels' shared memory).
pub const MAX_RESERVED_STEPS: u32 = 1024;

/// What a reservation of `steps` decode steps of a batch takes, from host lengths.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReservationPlan {
    /// Steps reserved (`K`).
    pub steps: u32,
    /// Requests of the batch.
    pub batch: usize,
    /// Pages taken in all: `sum_i ceil((L_i + K) / P) - ceil(L_i / P)`.
    pub total_pages: u64,
    /// `taken_by[s]`: pages taken by steps `1..=s` (`taken_by[0] = 0`, `taken_by[K]` the
    /// total). Pages are taken step-major, so the pages of steps after `s` are exactly the
    /// ones from position `taken_by[s]` on.
    pub taken_by: Vec<u64>,
}

impl ReservationPlan {
    /// Pages a finish with `steps_used` steps returns to the free list (0 from `steps` on).
    pub fn unused_pages(&self, steps_used: u32) -> u64 {
        let taken = self.taken_by.get(steps_used as usize);
        self.total_pages
            .saturating_sub(taken.copied().unwrap_or(self.total_pages))
    }

    /// The step (1-based) at which `steps` plain decodes of the batch, starting with `free`
    /// pages in the free list, would merge staged frees: SGLang's per-call rule merges when
    /// the batch size exceeds the free list, and step `s` starts with
    /// `free - taken_by[s - 1]` pages there. `None` when no step would.
    pub fn merge_step(&self, free: u64) -> Option<u32> {
        let batch = self.batch as u64;
        // (`taken_by[s - 1]` for each step `s`; a hand-built plan may list fewer.)
        (1..=self.steps)
            .zip(&self.taken_by)
            .find(|&(_, &taken)| batch > free.saturating_sub(taken))
            .map(|(s, _)| s)
    }
}

/// Where a reservation merges staged frees and how many pages it can count on: K plain
/// decodes merge at most once (nothing is freed between them), at [`merge_step`] when
/// anything is staged, and run short exactly when the total exceeds the free list plus, if
/// they merge, the staged pages.
///
/// [`merge_step`]: ReservationPlan::merge_step
pub(crate) fn plan_merge(
    plan: &ReservationPlan,
    free: u64,
    may_have_staged: bool,
    staged: u64,
) -> (Option<u32>, u64) {
    let merge_at = if may_have_staged {
        plan.merge_step(free)
    } else {
        None
    };
    let available = free + if merge_at.is_some() { staged } else { 0 };
    (merge_at, available)
}

/// The first step (1-based) at which a request holding `len` tokens starts a new page.
#[inline]
pub(crate) fn first_page_step(len: u64, ps: u64) -> u64 {
    (ps - len % ps) % ps + 1
}

/// Validates the lengths (`0 <= L_i`, `L_i + steps <= size`) and `steps`
/// (`1..=MAX_RESERVED_STEPS`) and counts the pages each step takes. O(batch + steps): a
/// request first needs a page at step `first = (P - L % P) % P + 1`, then every `P` steps,
/// so step `s` takes one page for each request whose `first` is `(s - 1) % P + 1`.
pub(crate) fn plan_reservation(
    layout: &Layout,
    lens: &[i64],
    steps: u32,
) -> Result<ReservationPlan, PoolError> {
    if steps == 0 || steps > MAX_RESERVED_STEPS {
        return fail(
            ErrorKind::InvalidArgument,
            format!("steps = {steps}; a reservation covers 1..={MAX_RESERVED_STEPS} decode steps"),
        );
    }
    let ps = u64::from(layout.page_size);
    let k = u64::from(steps);
    let groups = ps.min(k) as usize;
    let mut by_first = vec![0u64; groups];
    for (i, &len) in lens.iter().enumerate() {
        if len < 0 {
            return fail(
                ErrorKind::InvalidLengths,
                format!("lens[{i}] = {len} is negative"),
            );
        }
        if len as u64 + k > layout.size {
            return fail(
                ErrorKind::InvalidLengths,
                format!(
                    "lens[{i}] = {len} plus {steps} steps exceeds the pool size {}",
                    layout.size
                ),
            );
        }
        let first = first_page_step(len as u64, ps);
        if first <= k {
            by_first[first as usize - 1] += 1;
        }
    }
    let mut taken_by = Vec::with_capacity(steps as usize + 1);
    taken_by.push(0u64);
    let mut total = 0u64;
    for s in 1..=k {
        total += by_first[((s - 1) % ps) as usize];
        taken_by.push(total);
    }
    Ok(ReservationPlan {
        steps,
        batch: lens.len(),
        total_pages: total,
        taken_by,
    })
}

/// A host pool's live decode reservation (see the module doc): made by
/// [`Pool::reserve_decode`], stepped by [`Pool::reservation_step`] (or
/// [`Pool::reservation_step_rows`]), ended by [`Pool::finish_reservation`] or
/// [`Pool::abandon_reservation`]. Dropped without either, its pages stay held (unfreeable)
/// until the pool is cleared or restored.
#[derive(Debug)]
pub struct DecodeReservation {
    pool_id: u64,
    epoch: u64,
    plan: ReservationPlan,
    lens: Vec<i64>,
    /// `steps * batch` slots, step-major.
    slots: Vec<i64>,
    /// The new pages in the order they were taken.
    pages: Vec<u32>,
    /// The partly filled pages the first steps continue (one per request whose length is
    /// not a multiple of the page size), held with `pages`.
    continued: Vec<u32>,
    next: u32,
    finished: bool,
}

impl DecodeReservation {
    /// Steps reserved.
    pub fn steps(&self) -> u32 {
        self.plan.steps
    }

    /// Requests of the batch.
    pub fn batch(&self) -> usize {
        self.plan.batch
    }

    /// Steps taken so far.
    pub fn steps_taken(&self) -> u32 {
        self.next
    }

    /// Whether `finish_reservation` has run.
    pub fn is_finished(&self) -> bool {
        self.finished
    }

    /// The planning (pages per step).
    pub fn plan(&self) -> &ReservationPlan {
        &self.plan
    }

    /// The slots of step `step` (0-based), one per request (tests and diagnostics); empty
    /// from `steps()` on.
    pub fn step_slots(&self, step: u32) -> &[i64] {
        let b = self.plan.batch;
        let range = (step as usize)
            .checked_mul(b)
            .and_then(|start| Some(start..start.checked_add(b)?));
        range
            .and_then(|range| self.slots.get(range))
            .unwrap_or_default()
    }
}

impl Pool {
    /// Reserves `steps` decode steps of a batch (see the module doc). `lens[i]` is the
    /// number of tokens request `i` holds now (the first reserved step makes it
    /// `lens[i] + 1`: `alloc_decode`'s `seq_lens - 1`); `last_loc[i]` is the slot of its
    /// last token (`-1` when `lens[i] == 0`), checked exactly as `alloc_decode` checks it
    /// (allocated, consistent with the length, its page's fill point, no page continued
    /// twice). Staged (`need_sort`) frees are merged where the plain decodes would merge
    /// them: before the first step whose batch size exceeds the free list left by the steps
    /// before it. A shortage (of those decodes at any step) fails with
    /// [`ErrorKind::OutOfSlots`]. Nothing changes on failure (not even a merge).
    pub fn reserve_decode<I: SlotIndex>(
        &mut self,
        lens: &[i64],
        last_loc: &[I],
        steps: u32,
    ) -> Result<DecodeReservation, PoolError> {
        let result = self.reserve_decode_inner(lens, last_loc, steps);
        self.record(result)
    }

    fn reserve_decode_inner<I: SlotIndex>(
        &mut self,
        lens: &[i64],
        last_loc: &[I],
        steps: u32,
    ) -> Result<DecodeReservation, PoolError> {
        self.check_index_type::<I>()?;
        check_batch(last_loc.len(), lens.len())?;
        let plan = plan_reservation(&self.layout, lens, steps)?;
        let first: Vec<i64> = lens.iter().map(|&l| l + 1).collect();
        self.storage.check_decode(&first, last_loc)?;
        let staged = self.storage.staged_len() as u64;
        let (merge_at, available) =
            plan_merge(&plan, self.storage.free_len() as u64, staged > 0, staged);
        if plan.total_pages > available {
            return fail(
                ErrorKind::OutOfSlots,
                format!(
                    "reserve_decode needs {} free pages but only {available} are available",
                    plan.total_pages
                ),
            );
        }
        // K plain decodes, one after the other: exact by construction.
        let batch = lens.len();
        let ps = u64::from(self.layout.page_size);
        let mut prev: Vec<i64> = last_loc.iter().map(|l| l.get()).collect();
        let mut slots = Vec::with_capacity(batch * steps as usize);
        let mut pages = Vec::with_capacity(plan.total_pages as usize);
        let mut seq = vec![0i64; batch];
        let mut row = vec![0i64; batch];
        for s in 1..=i64::from(steps) {
            if merge_at == Some(s as u32) {
                self.merge_and_sort_free();
            }
            for (q, &l) in seq.iter_mut().zip(lens) {
                *q = l + s;
            }
            self.storage.fill_decode(&seq, &prev, &mut row);
            for (&q, &slot) in seq.iter().zip(&row) {
                if decode_needs_page(q as u64, ps) {
                    pages.push((slot as u64 / ps) as u32);
                }
            }
            slots.extend_from_slice(&row);
            std::mem::swap(&mut prev, &mut row);
        }
        debug_assert_eq!(pages.len() as u64, plan.total_pages);
        let continued: Vec<u32> = lens
            .iter()
            .zip(last_loc)
            .filter(|(&len, _)| self.layout.is_paged() && !(len as u64).is_multiple_of(ps))
            .map(|(_, last)| (last.get() as u64 / ps) as u32)
            .collect();
        self.storage.hold(&pages);
        self.storage.hold(&continued);
        self.count_allocation(batch as u64 * u64::from(steps), plan.total_pages);
        Ok(DecodeReservation {
            pool_id: self.id,
            epoch: self.epoch,
            plan,
            lens: lens.to_vec(),
            slots,
            pages,
            continued,
            next: 0,
            finished: false,
        })
    }

    /// Refuses a reservation of another pool, a finished one, or one made before the last
    /// `clear` / `restore_state`.
    fn check_reservation(&self, res: &DecodeReservation) -> Result<(), PoolError> {
        if res.pool_id != self.id {
            return fail(
                ErrorKind::InvalidArgument,
                "the reservation was made on a different pool",
            );
        }
        if res.finished {
            return fail(
                ErrorKind::InvalidState,
                "the reservation is finished; its unused pages are back in the pool",
            );
        }
        if res.epoch != self.epoch {
            return fail(
                ErrorKind::InvalidState,
                "the pool was cleared or restored since the reservation was made: it holds nothing any more",
            );
        }
        Ok(())
    }

    /// The slots of the next step, checked: the reservation is live and not overrun.
    fn next_step(&self, res: &DecodeReservation) -> Result<u32, PoolError> {
        self.check_reservation(res)?;
        if res.next >= res.plan.steps {
            return fail(
                ErrorKind::InvalidState,
                format!(
                    "reservation overrun: all {} reserved steps were taken; nothing was allocated",
                    res.plan.steps
                ),
            );
        }
        Ok(res.next)
    }

    /// The next reserved decode step: writes its slots to `out[..batch]` (exactly what the
    /// corresponding plain `alloc_decode` would have returned) and advances the step
    /// counter. Past the reservation: [`ErrorKind::InvalidState`], nothing written.
    pub fn reservation_step<I: SlotIndex>(
        &mut self,
        res: &mut DecodeReservation,
        out: &mut [I],
    ) -> Result<(), PoolError> {
        let result = (|| {
            let s = self.next_step(res)?;
            self.check_index_type::<I>()?;
            Self::check_output(out, res.plan.batch as u64)?;
            for (d, &slot) in out.iter_mut().zip(res.step_slots(s)) {
                *d = I::from_slot(slot as u64);
            }
            res.next += 1;
            Ok(())
        })();
        self.record(result)
    }

    /// [`reservation_step`](Self::reservation_step) that also writes each slot into the
    /// request-to-token table: `table[rows[i]][lens[i] + s] = slot` for step `s` (0-based).
    /// Rows must be in the table and distinct, `lens[i] + s < row_len`; `out` is optional.
    pub fn reservation_step_rows<I: SlotIndex, T: SlotIndex>(
        &mut self,
        res: &mut DecodeReservation,
        table: &mut ReqTable<'_, T>,
        rows: &[i64],
        out: Option<&mut [I]>,
    ) -> Result<(), PoolError> {
        let result = (|| {
            let s = self.next_step(res)?;
            check_table_type::<T>(self.layout.max_slot())?;
            if let Some(out) = &out {
                self.check_index_type::<I>()?;
                Self::check_output(out, res.plan.batch as u64)?;
            }
            if rows.len() != res.plan.batch {
                return fail(
                    ErrorKind::InvalidLengths,
                    format!(
                        "rows has {} entries but the reservation's batch has {}",
                        rows.len(),
                        res.plan.batch
                    ),
                );
            }
            let shape = table.shape();
            check_rows(&shape, rows, true)?;
            for (i, &len) in res.lens.iter().enumerate() {
                let pos = len as u64 + u64::from(s);
                if pos >= shape.row_len {
                    return fail(
                        ErrorKind::BufferTooSmall,
                        format!(
                            "step {s} of request {i} writes table position {pos}, past the table's row_len {}",
                            shape.row_len
                        ),
                    );
                }
            }
            let slots = res.step_slots(s);
            for ((&row, &len), &slot) in rows.iter().zip(&res.lens).zip(slots) {
                table.row_mut(row as usize)[(len + i64::from(s)) as usize] =
                    T::from_slot(slot as u64);
            }
            if let Some(out) = out {
                for (d, &slot) in out.iter_mut().zip(slots) {
                    *d = I::from_slot(slot as u64);
                }
            }
            res.next += 1;
            Ok(())
        })();
        self.record(result)
    }

    /// Ends a reservation after `steps_used` steps (which must be the number taken): the
    /// pages no used step touched go back to the front of the free list in the order they
    /// were taken (never staged), and each request's partly used last page is rewound to
    /// its last used slot (as [`rewind`](Self::rewind) would), and the holds end. Afterwards
    /// the pool is as `steps_used` plain decodes would have left it (but for a merge made for
    /// a later step, which stays made). Refused (nothing
    /// changed) when `steps_used` differs from the steps taken.
    pub fn finish_reservation(
        &mut self,
        res: &mut DecodeReservation,
        steps_used: u32,
    ) -> Result<(), PoolError> {
        let result = self.finish_inner(res, steps_used);
        self.record(result)
    }

    fn finish_inner(&mut self, res: &mut DecodeReservation, used: u32) -> Result<(), PoolError> {
        self.check_reservation(res)?;
        if used != res.next {
            return fail(
                ErrorKind::InvalidArgument,
                format!(
                    "steps_used = {used} but {} steps of the reservation were taken",
                    res.next
                ),
            );
        }
        let ps = u64::from(self.layout.page_size);
        let unused = &res.pages[res.plan.taken_by[used as usize] as usize..];
        // Held pages cannot have been freed or rewound: what the finish returns and rewinds
        // is exactly what the reserve took and advanced.
        let rewinds = self.reservation_rewinds(res, used);
        for &(_, kept) in &rewinds {
            self.storage
                .set_page_fill((kept / ps) as u32, (kept % ps + 1) as u32);
        }
        let count = unused.len() as u64;
        self.storage
            .unhold(&res.pages[..res.plan.taken_by[used as usize] as usize]);
        self.storage.unhold(&res.continued);
        self.storage.untake(unused);
        self.stats.pages_freed += count;
        self.stats.slots_freed += count * ps;
        res.finished = true;
        Ok(())
    }

    /// Ends a reservation without returning anything: its pages stay allocated, with their
    /// fill points as if every reserved step had run, but are no longer held (they can be
    /// freed). What `kvp_decode_reservation_free` does with an unfinished reservation. A
    /// no-op for a finished one, one of another pool, or one from before a clear or restore.
    pub fn abandon_reservation(&mut self, res: &mut DecodeReservation) {
        if self.check_reservation(res).is_ok() {
            self.storage.unhold(&res.pages);
            self.storage.unhold(&res.continued);
            res.finished = true;
        }
    }

    /// `(request, last used slot)` of each request whose page continues past `used` steps:
    /// the slot of step `used + 1` minus one, where that step does not start a page.
    fn reservation_rewinds(&self, res: &DecodeReservation, used: u32) -> Vec<(usize, u64)> {
        if used >= res.plan.steps || !self.layout.is_paged() {
            return Vec::new();
        }
        let ps = u64::from(self.layout.page_size);
        let next = res.step_slots(used);
        res.lens
            .iter()
            .zip(next)
            .enumerate()
            .filter(|(_, (&len, _))| !decode_needs_page(len as u64 + u64::from(used) + 1, ps))
            .map(|(i, (_, &slot))| (i, slot as u64 - 1))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_per_step_match_a_request_by_request_count() {
        for ps in [1u32, 2, 3, 4, 16] {
            let layout = Layout {
                size: 1 << 20,
                page_size: ps,
                num_pages: (1 << 20) / ps,
            };
            let lens: Vec<i64> = (0..40).map(|i| (i * 7 + i * i) % 53).collect();
            for k in [1u32, 2, 5, 16, 33] {
                let plan = plan_reservation(&layout, &lens, k).unwrap();
                let p = u64::from(ps);
                for s in 1..=u64::from(k) {
                    let step: u64 = lens
                        .iter()
                        .filter(|&&l| decode_needs_page(l as u64 + s, p))
                        .count() as u64;
                    assert_eq!(
                        plan.taken_by[s as usize] - plan.taken_by[s as usize - 1],
                        step,
                        "ps {ps} k {k} s {s}"
                    );
                }
                let total: u64 = lens
                    .iter()
                    .map(|&l| (l as u64 + u64::from(k)).div_ceil(p) - (l as u64).div_ceil(p))
                    .sum();
                assert_eq!(plan.total_pages, total);
            }
        }
    }

    #[test]
    fn steps_and_lengths_are_validated() {
        let layout = Layout {
            size: 64,
            page_size: 4,
            num_pages: 16,
        };
        assert_eq!(
            plan_reservation(&layout, &[1], 0).unwrap_err().kind(),
            ErrorKind::InvalidArgument
        );
        assert_eq!(
            plan_reservation(&layout, &[1], MAX_RESERVED_STEPS + 1)
                .unwrap_err()
                .kind(),
            ErrorKind::InvalidArgument
        );
        let err = plan_reservation(&layout, &[3, -1], 2).unwrap_err();
        assert!(err.message().contains("lens[1] = -1"), "{err}");
        let err = plan_reservation(&layout, &[60], 5).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidLengths);
        assert!(plan_reservation(&layout, &[60], 4).is_ok());
    }
}
