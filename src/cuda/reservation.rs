//! Decode reservations on a device pool (`kernels/reservation.cuh`): reserve `K` decode
//! steps of a batch with one kernel, then run each step as one small kernel with fixed
//! arguments that a captured CUDA graph can replay, then finish. The host backend
//! (`src/pool/reservation.rs`) is the oracle; `tests/cuda_reservation.rs` compares them.
//!
//! What makes the step capturable: it is not a call of the pool's sequence. It reads and
//! writes no cursor (so the host's cursor parity, call number and counts do not move), its
//! arguments are fixed at the reservation (the step number lives in the reservation's
//! device memory), it allocates nothing, and it records the pool's release event only
//! outside a capture (`LastUse::mark` checks `cuStreamIsCapturing`). The stream-order debug
//! check does not cover steps.
//!
//! A child module of `pool.rs` (it uses the pool's private launch machinery).

use cudarc::driver::sys::{CUdeviceptr, CUstream};

use super::{arg, DevicePool, DeviceTable};
use crate::cuda::counts::{Dest, Step};
use crate::cuda::layout::{Call, DeviceOp, NO_HEAD_HINT};
use crate::cuda::memory::DeviceMemory;
use crate::cuda::release::may_be_capturing;
use crate::pool::error::fail;
use crate::pool::reservation::{plan_merge, plan_reservation, ReservationPlan};
use crate::pool::{ErrorKind, PoolError};

/// Threads of the reserve and finish kernels (`kvp::RES_BLOCK`); a step uses up to this many.
pub(super) const RES_BLOCK: u32 = 1024;

/// Byte offsets in a reservation's device memory: `kvp::ResHeader` (step counter, state),
/// the lengths, the `K x batch` slot table, the pages in the order taken, a rank per request.
#[derive(Clone, Copy, Debug)]
struct Offsets {
    lens: usize,
    slots: usize,
    taken: usize,
    rank: usize,
    bytes: usize,
}

impl Offsets {
    fn new(batch: usize, steps: u32, pages: u64, index_bytes: usize) -> Self {
        let up = |x: usize| x.next_multiple_of(256);
        let lens = 256;
        let slots = up(lens + 8 * batch);
        let taken = up(slots + index_bytes * batch * steps as usize);
        let rank = up(taken + 4 * pages as usize);
        Self {
            lens,
            slots,
            taken,
            rank,
            bytes: rank + 4 * batch.max(1),
        }
    }
}

/// Which part of a reservation a reserve kernel does (`kvp::ResPhase`).
#[derive(Clone, Copy, Debug)]
enum Phase {
    /// Everything, in one call.
    All = 0,
    /// The checks and the pages of the steps before a merge.
    First = 1,
    /// After the merge: the other pages, the slot table, the fill points.
    Rest = 2,
}

/// One call of a reservation: a reserve kernel or the merge before a step.
#[derive(Clone, Copy, Debug)]
enum Part {
    Reserve(Phase),
    Merge,
}

/// Device addresses a reserve kernel works on.
struct ReserveBuffers {
    lens: CUdeviceptr,
    last_loc: CUdeviceptr,
    header: CUdeviceptr,
    lens_out: CUdeviceptr,
    slots: CUdeviceptr,
    taken: CUdeviceptr,
    rank: CUdeviceptr,
}

/// A device pool's decode reservation (see `kvp_pool_reserve_decode_async`). Return it with
/// [`DevicePool::release_reservation`] so its device memory is reused; dropped otherwise,
/// its memory is freed at once (its context must be current, and no queued kernel or graph
/// may still use it).
#[derive(Debug)]
pub struct DeviceReservation {
    pool_id: u64,
    /// The pool's `recovered_at` when reserved: a later clear or restore ends it.
    recovered_at: u64,
    /// The reserve call's number: faults of its steps are reported as of that call.
    seq: u32,
    tag: u32,
    plan: ReservationPlan,
    /// Longest length of the batch (tables need `max_len + K <= row_len`).
    max_len: u64,
    memory: Option<DeviceMemory>,
    offsets: Offsets,
    finished: bool,
}

impl DeviceReservation {
    /// Steps reserved.
    pub fn steps(&self) -> u32 {
        self.plan.steps
    }

    /// Requests of the batch.
    pub fn batch(&self) -> usize {
        self.plan.batch
    }

    /// The planning (pages per step).
    pub fn plan(&self) -> &ReservationPlan {
        &self.plan
    }

    /// Whether the finish was enqueued.
    pub fn is_finished(&self) -> bool {
        self.finished
    }

    /// Device address of the `K x batch` slot table (step-major, the pool's index type),
    /// filled when the stream passes the reserve (tests and diagnostics).
    pub fn slots_device(&self) -> CUdeviceptr {
        self.at(self.offsets.slots)
    }

    /// Device address of the step counter (a `u32`; tests and diagnostics).
    pub fn counter_device(&self) -> CUdeviceptr {
        self.at(0)
    }

    /// Its device memory (`None` once given back).
    pub(super) fn into_memory(mut self) -> Option<DeviceMemory> {
        self.memory.take()
    }

    fn at(&self, offset: usize) -> CUdeviceptr {
        self.memory.as_ref().map_or(0, |m| m.at(offset))
    }

    /// The device addresses the step, finish and unhold kernels read.
    fn parts(&self) -> ReservationParts {
        ReservationParts {
            header: self.at(0),
            lens: self.at(self.offsets.lens),
            slots: self.at(self.offsets.slots),
            taken: self.at(self.offsets.taken),
        }
    }
}

/// A reservation's header (`kvp::ResHeader`), lengths at reserve time, `K x batch` slot
/// table and pages taken per step, in its device memory.
struct ReservationParts {
    header: CUdeviceptr,
    lens: CUdeviceptr,
    slots: CUdeviceptr,
    taken: CUdeviceptr,
}

impl DevicePool {
    /// Enqueues a reservation of `steps` decode steps of a batch (see
    /// [`crate::Pool::reserve_decode`] for the semantics): `lens_host` are host copies of the
    /// device lengths `lens` (tokens each request holds now), `last_loc` the device array of
    /// each request's last slot (`-1` for an empty request). The host validates the lengths,
    /// plans the pages and checks the shortage (exact counts, or the lower bound while a
    /// paged free by index is in flight); one kernel checks every `last_loc` as
    /// `alloc_decode`'s kernel does, takes the pages and computes the slot table into the
    /// reservation's device memory. A bad `last_loc` faults the pool (nothing taken; the
    /// reservation's steps then write the padding slot 0).
    ///
    /// # Safety
    /// `lens` (`int64`) and `last_loc` (the pool's index type) must be device memory of the
    /// pool's device holding `batch` elements, alive until the stream passes the call.
    pub unsafe fn reserve_decode(
        &mut self,
        lens_host: &[i64],
        lens: CUdeviceptr,
        last_loc: CUdeviceptr,
        steps: u32,
        stream: CUstream,
    ) -> Result<DeviceReservation, PoolError> {
        let result = (|| {
            self.enter(stream, false)?;
            let plan = plan_reservation(&self.layout, lens_host, steps)?;
            let batch = u32::try_from(plan.batch).map_err(|_| {
                PoolError::new(ErrorKind::InvalidLengths, "batch_size exceeds 2^32 - 1")
            })?;
            // Where K plain decodes would merge staged frees (SGLang's per-call rule against
            // the host's counts; lower bounds while a paged free by index is in flight, as for
            // a plain decode), and the shortage those decodes would meet. Nothing is enqueued
            // on a shortage.
            let c = self.counts.counts();
            let may_have_staged =
                c.staged > 0 || (self.config.need_sort && !self.counts.is_exact());
            let (merge_at, available) = plan_merge(&plan, c.free, may_have_staged, c.staged);
            let total = plan.total_pages;
            if total > available {
                let note = if self.counts.is_exact() {
                    ""
                } else {
                    " (a lower bound: a paged free by index is still in flight on the stream)"
                };
                return fail(
                    ErrorKind::OutOfSlots,
                    format!("reserve_decode needs {total} free pages but only {available} are available{note}"),
                );
            }
            let offsets = Offsets::new(plan.batch, steps, total, self.index_bytes());
            let memory = self.reservation_memory(offsets.bytes, stream)?;
            let buffers = ReserveBuffers {
                lens,
                last_loc,
                header: memory.at(0),
                lens_out: memory.at(offsets.lens),
                slots: memory.at(offsets.slots),
                taken: memory.at(offsets.taken),
                rank: memory.at(offsets.rank),
            };
            // A merge at step 1 runs before the reservation; one at a later step between the
            // pages of the steps before it and the others (two reserve calls).
            let (parts, first): (&[Part], u64) = match merge_at {
                Some(s) if s > 1 => (
                    &[
                        Part::Reserve(Phase::First),
                        Part::Merge,
                        Part::Reserve(Phase::Rest),
                    ],
                    plan.taken_by[s as usize - 1],
                ),
                Some(_) => (&[Part::Merge, Part::Reserve(Phase::All)], 0),
                None => (&[Part::Reserve(Phase::All)], 0),
            };
            for (i, part) in parts.iter().enumerate() {
                let launched = match *part {
                    Part::Merge => self.enqueue_merge(stream),
                    Part::Reserve(phase) => {
                        self.launch_reserve(&buffers, batch, steps, total, first, phase, stream)
                    }
                };
                if let Err(err) = launched {
                    // Queued kernels may still use the memory: it is reused only by later
                    // calls, which the stream orders after them.
                    self.reservation_spares.push(memory);
                    if i > 0 && matches!(parts[0], Part::Reserve(Phase::First)) {
                        return Err(self.break_reservation(i, parts.len(), &err));
                    }
                    // Nothing enqueued, or a merge alone (a call of its own, recorded).
                    return Err(err);
                }
            }
            self.count_allocation(u64::from(batch) * u64::from(steps), total);
            Ok(DeviceReservation {
                pool_id: self.id,
                recovered_at: self.recovered_at,
                seq: self.seq,
                tag: self.tag,
                max_len: lens_host.iter().copied().max().unwrap_or(0) as u64,
                plan,
                memory: Some(memory),
                offsets,
                finished: false,
            })
        })();
        self.record_outcome(result.as_ref().map(|_| ()).map_err(Clone::clone))?;
        result
    }

    /// A reservation whose first reserve call (the pages of the steps before a merge) was
    /// enqueued but whose call `failed` of `total` was not: that call's pages stay held by
    /// a reservation no handle names, so the pool refuses work until a clear or restore,
    /// like a call only partly enqueued.
    #[cold]
    fn break_reservation(&mut self, failed: usize, total: usize, err: &PoolError) -> PoolError {
        let why = format!(
            "kvp_pool_reserve_decode_async enqueued {failed} of its {total} calls before one \
             failed ({}); the first took pages that no reservation returns",
            err.message()
        );
        self.refuse_until_recovered(why)
    }

    /// Enqueues one reserve kernel (one call of the pool): `phase` says which part, `first`
    /// the pages of the steps before a merge (see `kernels/reservation.cuh`).
    #[allow(clippy::too_many_arguments)]
    fn launch_reserve(
        &mut self,
        b: &ReserveBuffers,
        batch: u32,
        steps: u32,
        total: u64,
        first: u64,
        phase: Phase,
        stream: CUstream,
    ) -> Result<(), PoolError> {
        let taken = match phase {
            Phase::All => total,
            Phase::First => first,
            Phase::Rest => total - first,
        };
        let phase = phase as u32;
        // SAFETY: `kvp_reserve_decode_*(View, Call, const i64 *lens_in, const Index
        // *last_loc, u32 batch, u32 steps, u64 total_pages, u64 first_pages, u32 phase,
        // ResHeader *res, i64 *lens, Index *slots, u32 *taken, u32 *rank)`; the reservation's
        // memory holds the offsets' bytes; `lens` and `last_loc` the caller's contract.
        unsafe {
            self.run(
                self.kernels.typed.reserve_decode,
                1,
                RES_BLOCK,
                DeviceOp::ReserveDecode as u32,
                Step::Take(taken),
                stream,
                &[
                    arg(&b.lens),
                    arg(&b.last_loc),
                    arg(&batch),
                    arg(&steps),
                    arg(&total),
                    arg(&first),
                    arg(&phase),
                    arg(&b.header),
                    arg(&b.lens_out),
                    arg(&b.slots),
                    arg(&b.taken),
                    arg(&b.rank),
                ],
            )
        }
    }

    /// A spare reservation buffer of at least `bytes`, or a new one (zeroed on `stream`).
    fn reservation_memory(
        &mut self,
        bytes: usize,
        stream: CUstream,
    ) -> Result<DeviceMemory, PoolError> {
        if let Some(k) = self
            .reservation_spares
            .iter()
            .position(|m| m.bytes() >= bytes)
        {
            return Ok(self.reservation_spares.swap_remove(k));
        }
        DeviceMemory::zeroed_on(
            bytes.max(4096),
            stream,
            "the reservation's device memory (no spare buffer of the pool is that large: \
             before capturing, make a reservation of at least this batch and these steps and \
             finish and free it; its memory is then reused)",
        )
    }

    /// Refuses a reservation of another pool, a finished one, or one from before the last
    /// clear or restore.
    fn check_reservation(&self, res: &DeviceReservation) -> Result<(), PoolError> {
        if res.pool_id != self.id || res.memory.is_none() {
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
        if res.recovered_at != self.recovered_at {
            return fail(
                ErrorKind::InvalidState,
                "the pool was cleared or restored since the reservation was made: it holds nothing any more",
            );
        }
        Ok(())
    }

    /// Enqueues one step of a reservation: one kernel (up to 1,024 threads, one block) that
    /// reads the reservation's step counter `s`, writes slot row `s` to `out` (the pool's
    /// index type, `batch` entries; 0 for none) and, with a table, each slot to
    /// `table[rows[i]][lens[i] + s]`, then increments the counter. Host state does not
    /// change, so the launch can be captured into a CUDA graph and replayed. Past the `K`
    /// reserved steps (or after the finish) the kernel writes the padding slot 0 to `out`,
    /// nothing to the table, leaves the counter and faults the pool; a faulted pool's step
    /// writes 0 too. Host checks: the reservation is this pool's, live, and the table's rows
    /// hold `max(lens) + K` entries.
    ///
    /// # Safety
    /// `out` (unless 0) device memory for `batch` indices; `table` (if given) describes device
    /// memory spanning its shape and `rows` holds `batch` `int64` of device memory; all alive
    /// until the stream passes the step (for a captured step: every replay).
    pub unsafe fn reservation_step(
        &mut self,
        res: &DeviceReservation,
        out: CUdeviceptr,
        table: Option<(DeviceTable, CUdeviceptr)>,
        stream: CUstream,
    ) -> Result<(), PoolError> {
        self.context.bind()?;
        self.context.check_stream(stream)?;
        if let Some(err) = self.refusal() {
            return Err(err);
        }
        self.check_reservation(res)?;
        if out == 0 && table.is_none() {
            return fail(
                ErrorKind::InvalidArgument,
                "a step needs somewhere to write: out, a table, or both",
            );
        }
        let (data, wide, table_rows, stride, row_len, rows) = match table {
            Some((t, rows)) => {
                t.check(self.layout.max_slot())?;
                let need = res.max_len + u64::from(res.plan.steps);
                if need > t.shape.row_len {
                    return fail(
                        ErrorKind::BufferTooSmall,
                        format!(
                            "the reservation writes table positions up to {} but the table's row_len is {}",
                            need - 1,
                            t.shape.row_len
                        ),
                    );
                }
                if rows == 0 && res.plan.batch > 0 {
                    return fail(
                        ErrorKind::InvalidArgument,
                        "rows is NULL but a table is given",
                    );
                }
                (
                    t.data,
                    t.wide(),
                    t.shape.rows,
                    t.shape.row_stride,
                    t.shape.row_len,
                    rows,
                )
            }
            None => (0, 0, 0, 0, 0, 0),
        };
        let call = Call {
            tag: res.tag,
            input: self.parity,
            flags: 0,
            op: DeviceOp::ReservationStep as u32,
            seq: res.seq,
            runs: self.runs,
            head_hint: NO_HEAD_HINT,
        };
        let view = self.view;
        let parts = res.parts();
        let batch = res.plan.batch as u32;
        let steps = res.plan.steps;
        let block = batch.next_multiple_of(32).clamp(32, RES_BLOCK);
        // SAFETY: `kvp_reservation_step_*(View, Call, ResHeader *res, const i64 *lens, const
        // Index *slots, u32 batch, u32 steps, Index *out, void *table, u32 wide, u64
        // table_rows, u64 stride, u64 row_len, const i64 *rows)`; caller contract for the
        // buffers.
        unsafe {
            self.kernels.launch(
                self.kernels.typed.reservation_step,
                1,
                block,
                stream,
                &mut [
                    arg(&view),
                    arg(&call),
                    arg(&parts.header),
                    arg(&parts.lens),
                    arg(&parts.slots),
                    arg(&batch),
                    arg(&steps),
                    arg(&out),
                    arg(&data),
                    arg(&wide),
                    arg(&table_rows),
                    arg(&stride),
                    arg(&row_len),
                    arg(&rows),
                ],
            )
        }?;
        // Skipped inside a capture; released pools wait for eager steps like for any kernel.
        let _ = self.last_use.mark(stream);
        Ok(())
    }

    /// Enqueues the finish of a reservation after `steps_used` steps (the number of steps
    /// the engine ran, replays included): one kernel that checks the device's step counter
    /// equals `steps_used` (else it faults the pool naming both and returns nothing) and that
    /// the device's lengths give the used steps the pages the host planned (the reserve
    /// checked only their total; else it faults the pool and returns nothing), then
    /// puts the pages of the unused steps back at the front of the free list in the order
    /// they were taken and rewinds each request's partly used last page (see
    /// [`crate::Pool::finish_reservation`]). The host's counts are exact afterwards (planned
    /// from `steps_used`).
    ///
    /// # Safety
    /// `stream` a live stream of the pool's device (or NULL).
    pub unsafe fn finish_reservation(
        &mut self,
        res: &mut DeviceReservation,
        steps_used: u32,
        stream: CUstream,
    ) -> Result<(), PoolError> {
        let result = (|| {
            self.enter(stream, false)?;
            self.check_reservation(res)?;
            if steps_used > res.plan.steps {
                return fail(
                    ErrorKind::InvalidArgument,
                    format!(
                        "steps_used = {steps_used} but the reservation covers {} steps",
                        res.plan.steps
                    ),
                );
            }
            let first_unused = res.plan.taken_by[steps_used as usize];
            let unused = res.plan.unused_pages(steps_used);
            let parts = res.parts();
            let batch = res.plan.batch as u32;
            let steps = res.plan.steps;
            // SAFETY: `kvp_reservation_finish_*(View, Call, ResHeader *res, const i64 *lens,
            // const Index *slots, const u32 *taken, u32 batch, u32 steps, u32 used, u64
            // first_unused, u64 unused)`.
            unsafe {
                self.run(
                    self.kernels.typed.reservation_finish,
                    1,
                    RES_BLOCK,
                    DeviceOp::ReservationFinish as u32,
                    Step::Release {
                        dest: Dest::FreeFront,
                        pages: Some(unused),
                    },
                    stream,
                    &[
                        arg(&parts.header),
                        arg(&parts.lens),
                        arg(&parts.slots),
                        arg(&parts.taken),
                        arg(&batch),
                        arg(&steps),
                        arg(&steps_used),
                        arg(&first_unused),
                        arg(&unused),
                    ],
                )
            }?;
            res.finished = true;
            self.stats.pages_freed += unused;
            self.stats.slots_freed += unused * u64::from(self.layout.page_size);
            Ok(())
        })();
        self.record_outcome(result)
    }

    /// Takes back a reservation's device memory for later reservations. An unfinished one
    /// returns nothing to the pool (its pages stay allocated as if every step ran); its holds
    /// end in a kernel launched ahead of the pool's next call (`Self::end_abandoned_holds`),
    /// its memory is reused after that. A captured graph holding its step must not be
    /// replayed afterwards: its step then writes the padding slot and faults the pool (the
    /// reservation finished, or its memory taken by a later one: `ResHeader::owner`).
    pub fn release_reservation(&mut self, mut res: DeviceReservation) {
        if res.pool_id != self.id {
            return;
        }
        if !res.finished && res.recovered_at == self.recovered_at && res.memory.is_some() {
            self.abandoned.push(res);
        } else if let Some(memory) = res.memory.take() {
            self.reservation_spares.push(memory);
        }
    }

    /// Enqueues on `stream`, ahead of a call, the end of the holds of reservations released
    /// unfinished (`kvp::reservation_unhold`: one small kernel each, not a call) and reuses
    /// their memory. Skipped while `stream` is captured: a graph must not carry them (it
    /// could run after the memory is reused); the next uncaptured call launches them. Those
    /// of before a clear or restore only give their memory back.
    pub(super) fn end_abandoned_holds(&mut self, stream: CUstream) -> Result<(), PoolError> {
        let recovered_at = self.recovered_at;
        let (live, stale): (Vec<_>, Vec<_>) = std::mem::take(&mut self.abandoned)
            .into_iter()
            .partition(|res| res.recovered_at == recovered_at);
        self.reservation_spares
            .extend(stale.into_iter().filter_map(DeviceReservation::into_memory));
        self.abandoned = live;
        if self.abandoned.is_empty() || may_be_capturing(stream) {
            return Ok(());
        }
        let view = self.view;
        while let Some(mut res) = self.abandoned.pop() {
            let parts = res.parts();
            let batch = res.plan.batch as u32;
            let total = res.plan.total_pages;
            // SAFETY: `kvp_reservation_unhold_*(View, ResHeader *res, const i64 *lens, const
            // Index *slots, const u32 *taken, u32 batch, u64 total_pages)`.
            let launched = unsafe {
                self.kernels.launch(
                    self.kernels.typed.reservation_unhold,
                    1,
                    RES_BLOCK,
                    stream,
                    &mut [
                        arg(&view),
                        arg(&parts.header),
                        arg(&parts.lens),
                        arg(&parts.slots),
                        arg(&parts.taken),
                        arg(&batch),
                        arg(&total),
                    ],
                )
            };
            if let Err(err) = launched {
                self.abandoned.push(res);
                return Err(err);
            }
            let _ = self.last_use.mark(stream);
            if let Some(memory) = res.memory.take() {
                self.reservation_spares.push(memory);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_are_aligned_and_do_not_overlap() {
        let o = Offsets::new(1000, 7, 300, 8);
        assert!(o.lens >= 16 && o.slots >= o.lens + 8000 && o.taken >= o.slots + 8 * 7000);
        assert!(o.rank >= o.taken + 1200 && o.bytes == o.rank + 4000);
        for at in [o.lens, o.slots, o.taken, o.rank] {
            assert_eq!(at % 256, 0);
        }
    }
}
