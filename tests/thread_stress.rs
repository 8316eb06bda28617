//! Thread stress through the C ABI: several threads share one pool handle and one scheduler
//! handle attached to it, calling the `extern "C"` functions the way a multi-threaded engine
//! would (the header promises every handle may be used from several threads at once).
//!
//! Each thread keeps its own requests' slot rows and raw `alloc` blocks and continues only
//! its own rows, from their last slot (the page's fill point), so every continuation it
//! makes is valid whatever the other threads do. Operations: `alloc`, `alloc_extend`
//! (new requests and continuations), `alloc_decode`, the three frees, tail truncation,
//! rewinds after rejected draft tokens, free groups (pool-wide: any thread's frees join an
//! open group, any thread may close it), snapshots, merges, invalid inputs that only name
//! the thread's own slots, read-only queries, and scheduler submit / step / get_request /
//! finish / abort / get_stats.
//!
//! Checked:
//! - every slot is live at most once across all threads: a shared atomic flag per slot is
//!   set when a call hands the slot out (it must have been clear) and cleared before the
//!   call that gives it back (it must have been set);
//! - every status is one the call may return in that situation; never `KVP_STATUS_PANIC`
//!   or `KVP_STATUS_POISONED`;
//! - at the end all slots are back (available size == size, `pages_in_use` == 0, pages
//!   allocated == pages freed, slots handed out == the threads' own count), no request is
//!   left in the scheduler;
//! - each configuration finishes within `LIMIT` (a deadlock fails the test instead of
//!   hanging it).
//!
//! Plans' arrays belong to the scheduler until its next step, which another thread may be
//! running, so the threads never dereference them (an engine stepping from several threads
//! must serialize step and plan reading itself); they learn their requests' phases from
//! `kvp_scheduler_get_request`.

mod rng;

use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use kvpool::ffi::*;
use kvpool::SlotIndex;
use rng::Rng;

const THREADS: u64 = 6;
/// Calls per thread and configuration: about 1-3 s each in release builds on two cores.
const ITERATIONS: u64 = if cfg!(debug_assertions) {
    25_000
} else {
    250_000
};
/// Wall-time limit of one configuration (typically a few seconds on two cores).
const LIMIT: Duration = Duration::from_secs(60);

/// What the threads share: the handles, the ownership flags and the violation count.
struct Shared {
    pool: *mut kvp_pool,
    scheduler: *mut kvp_scheduler,
    /// A snapshot of another pool, for the foreign-restore case.
    foreign: *mut kvp_snapshot,
    /// One flag per slot: live (handed out, not given back) in some thread.
    owned: Vec<AtomicBool>,
    ps: u64,
    size: u64,
    violations: AtomicU64,
    /// Slots handed out, summed over the threads.
    handed_out: AtomicU64,
}

// SAFETY: the handles are documented thread-safe (internally locked); they are freed only
// after every thread has been joined.
unsafe impl Send for Shared {}
unsafe impl Sync for Shared {}

fn last_error() -> String {
    let mut buf = [0u8; 512];
    // SAFETY: buf is writable for its length.
    let n = unsafe { kvp_last_error_message(buf.as_mut_ptr().cast(), buf.len()) };
    String::from_utf8_lossy(&buf[..n.min(buf.len() - 1)]).into_owned()
}

impl Shared {
    fn violation(&self, what: String) {
        if self.violations.fetch_add(1, Ordering::Relaxed) < 20 {
            eprintln!("VIOLATION: {what}");
        }
    }

    /// Checks a status against the ones the call may return.
    fn expect(&self, what: &str, status: kvp_status, allowed: &[kvp_status]) -> kvp_status {
        if !allowed.contains(&status) {
            self.violation(format!(
                "{what} returned {status:?} (allowed {allowed:?}): {}",
                last_error()
            ));
        }
        status
    }

    /// Records slots a call handed to this thread.
    fn own<I: SlotIndex>(&self, slots: &[I], what: &str) {
        for v in slots {
            let slot = v.get();
            if slot < self.ps as i64 || slot as u64 >= self.size + self.ps {
                self.violation(format!("{what} handed out slot {slot}, outside the pool"));
            } else if self.owned[slot as usize].swap(true, Ordering::AcqRel) {
                self.violation(format!("{what} handed out slot {slot}, live elsewhere"));
            }
        }
        self.handed_out
            .fetch_add(slots.len() as u64, Ordering::Relaxed);
    }

    /// Gives slots up before the call that frees or rewinds them: once that call returns,
    /// another thread may legitimately receive them.
    fn disown<I: SlotIndex>(&self, slots: &[I]) {
        for v in slots {
            let slot = v.get() as usize;
            if !self.owned[slot].swap(false, Ordering::AcqRel) {
                self.violation(format!("slot {slot} given back but not live"));
            }
        }
    }
}

const OK: kvp_status = kvp_status::Ok;
const SHORT: kvp_status = kvp_status::OutOfSlots;

fn ptr<I>(v: &[I]) -> *const c_void {
    v.as_ptr().cast()
}

fn mut_ptr<I>(v: &mut [I]) -> *mut c_void {
    v.as_mut_ptr().cast()
}

struct Worker<I> {
    sh: Arc<Shared>,
    rng: Rng,
    rows: Vec<Vec<I>>,
    blocks: Vec<Vec<I>>,
    max_extend: u64,
    /// Scheduler request ids this thread submitted and believes live.
    requests: Vec<u64>,
    next_id: u64,
}

impl<I: SlotIndex> Worker<I> {
    fn idx(v: i64) -> I {
        I::from_slot(v as u64)
    }

    fn last_loc(row: &[I]) -> I {
        Self::idx(row.last().map_or(-1, |v| v.get()))
    }

    fn pick_row(&mut self) -> Option<usize> {
        (!self.rows.is_empty()).then(|| self.rng.below(self.rows.len() as u64) as usize)
    }

    fn extend(&mut self) {
        let (mut prefix, mut seq, mut last_loc, mut targets) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for _ in 0..=self.rng.below(3) {
            let existing = self.pick_row().filter(|_| self.rng.chance(50));
            let len = match existing {
                Some(r) if targets.contains(&Some(r)) => continue,
                Some(r) => self.rows[r].len() as i64,
                None => 0,
            };
            prefix.push(len);
            seq.push(len + self.rng.below(self.max_extend + 1) as i64);
            last_loc.push(existing.map_or(Self::idx(-1), |r| Self::last_loc(&self.rows[r])));
            targets.push(existing);
        }
        let total: i64 = seq.iter().zip(&prefix).map(|(s, p)| s - p).sum();
        let mut out = vec![I::from_slot(0); total as usize];
        // SAFETY: every buffer is valid for its stated length.
        let status = unsafe {
            kvp_pool_alloc_extend(
                self.sh.pool,
                prefix.as_ptr(),
                seq.as_ptr(),
                ptr(&last_loc),
                seq.len(),
                total as usize,
                mut_ptr(&mut out),
                out.len(),
            )
        };
        if self.sh.expect("alloc_extend", status, &[OK, SHORT]) == OK {
            self.sh.own(&out, "alloc_extend");
            let mut pos = 0;
            for (i, target) in targets.into_iter().enumerate() {
                let slots = &out[pos..pos + (seq[i] - prefix[i]) as usize];
                pos += slots.len();
                match target {
                    Some(r) => self.rows[r].extend_from_slice(slots),
                    None => self.rows.push(slots.to_vec()),
                }
            }
        }
    }

    fn decode(&mut self) {
        let mut rows: Vec<usize> = (0..self.rows.len()).collect();
        rows.retain(|_| self.rng.chance(50));
        let seq: Vec<i64> = rows
            .iter()
            .map(|&r| self.rows[r].len() as i64 + 1)
            .collect();
        let last_loc: Vec<I> = rows
            .iter()
            .map(|&r| Self::last_loc(&self.rows[r]))
            .collect();
        let mut out = vec![I::from_slot(0); seq.len()];
        // SAFETY: every buffer is valid for its stated length.
        let status = unsafe {
            kvp_pool_alloc_decode(
                self.sh.pool,
                seq.as_ptr(),
                ptr(&last_loc),
                seq.len(),
                mut_ptr(&mut out),
                out.len(),
            )
        };
        if self.sh.expect("alloc_decode", status, &[OK, SHORT]) == OK {
            self.sh.own(&out, "alloc_decode");
            for (&r, &slot) in rows.iter().zip(&out) {
                self.rows[r].push(slot);
            }
        }
    }

    fn alloc_block(&mut self) {
        let n = (1 + self.rng.below(self.max_extend / self.sh.ps + 1)) * self.sh.ps;
        let mut out = vec![I::from_slot(0); n as usize];
        // SAFETY: out is valid for n elements.
        let status =
            unsafe { kvp_pool_alloc(self.sh.pool, n as usize, mut_ptr(&mut out), n as usize) };
        if self.sh.expect("alloc", status, &[OK, SHORT]) == OK {
            self.sh.own(&out, "alloc");
            self.blocks.push(out);
        }
    }

    /// Frees a whole row or block by index, page id or segment.
    fn finish_one(&mut self, slots: Vec<I>) {
        let ps = self.sh.ps as i64;
        self.sh.disown(&slots);
        // SAFETY: every buffer is valid for its stated length.
        let status = unsafe {
            match self.rng.below(3) {
                0 => kvp_pool_free_indices(self.sh.pool, ptr(&slots), slots.len()),
                1 => {
                    let mut pages: Vec<I> = slots.iter().map(|v| Self::idx(v.get() / ps)).collect();
                    pages.dedup_by_key(|v| v.get());
                    kvp_pool_free_pages(self.sh.pool, ptr(&pages), pages.len())
                }
                _ => kvp_pool_free_segment(self.sh.pool, ptr(&slots), slots.len(), 0, slots.len()),
            }
        };
        self.sh.expect("free", status, &[OK]);
    }

    fn finish(&mut self) {
        if !self.blocks.is_empty() && self.rng.chance(30) {
            let i = self.rng.below(self.blocks.len() as u64) as usize;
            let block = self.blocks.swap_remove(i);
            self.finish_one(block);
        } else if let Some(r) = self.pick_row() {
            let row = self.rows.swap_remove(r);
            self.finish_one(row);
        }
    }

    /// Frees `row[start..]` (`start` on a page boundary) with `free_segment`.
    fn free_tail(&mut self, r: usize, start: usize) {
        let row = &self.rows[r];
        self.sh.disown(&row[start..]);
        // SAFETY: row is valid for its length.
        let status = unsafe {
            kvp_pool_free_segment(self.sh.pool, ptr(row), row.len(), start, row.len() - start)
        };
        self.sh.expect("free_segment (tail)", status, &[OK]);
        self.rows[r].truncate(start);
    }

    fn truncate(&mut self) {
        let Some(r) = self.pick_row() else { return };
        let len = self.rows[r].len() as u64;
        if len > 0 {
            let start = self.rng.below(len) / self.sh.ps * self.sh.ps;
            self.free_tail(r, start as usize);
        }
    }

    /// Rejects a request's last tokens: frees the pages holding only rejected tokens and
    /// rewinds the page of the last kept one.
    fn rewind(&mut self) {
        let Some(r) = self.pick_row() else { return };
        let len = self.rows[r].len();
        if len == 0 {
            return;
        }
        let ps = self.sh.ps as usize;
        let kept = 1 + self.rng.below(len as u64) as usize;
        let cut = kept.div_ceil(ps) * ps;
        if cut < len {
            self.free_tail(r, cut);
        }
        let row = &self.rows[r];
        self.sh.disown(&row[kept..]);
        let last_kept = [row[kept - 1]];
        // SAFETY: last_kept holds one element.
        let status = unsafe { kvp_pool_rewind(self.sh.pool, ptr(&last_kept), 1) };
        self.sh.expect("rewind", status, &[OK]);
        self.rows[r].truncate(kept);
    }

    fn pool_misc(&mut self) {
        let sh = &self.sh;
        // SAFETY: the handles are live; out-parameters are valid.
        unsafe {
            match self.rng.below(6) {
                0 => {
                    let status = kvp_pool_free_group_begin(sh.pool);
                    sh.expect("free_group_begin", status, &[OK, kvp_status::InvalidState]);
                }
                1 => {
                    let status = kvp_pool_free_group_end(sh.pool);
                    sh.expect("free_group_end", status, &[OK, kvp_status::InvalidState]);
                }
                2 => {
                    let mut snapshot = std::ptr::null_mut();
                    let status = kvp_pool_backup_state(sh.pool, &mut snapshot);
                    sh.expect("backup_state", status, &[OK, kvp_status::InvalidState]);
                    kvp_snapshot_free(snapshot);
                }
                3 => {
                    let status = kvp_pool_restore_state(sh.pool, sh.foreign);
                    sh.expect(
                        "restore_state (foreign)",
                        status,
                        &[kvp_status::ForeignSnapshot],
                    );
                }
                4 => {
                    let status = kvp_pool_merge_and_sort_free(sh.pool);
                    sh.expect("merge_and_sort_free", status, &[OK]);
                }
                _ => {
                    let (mut available, mut stats, mut info) =
                        (0, kvp_pool_stats::default(), kvp_pool_info::default());
                    sh.expect(
                        "available_size",
                        kvp_pool_available_size(sh.pool, &mut available),
                        &[OK],
                    );
                    sh.expect("get_stats", kvp_pool_get_stats(sh.pool, &mut stats), &[OK]);
                    sh.expect("get_info", kvp_pool_get_info(sh.pool, &mut info), &[OK]);
                    if available > sh.size || stats.pages_in_use > u64::from(info.num_pages) {
                        sh.violation(format!(
                            "available {available}, {} pages in use of {}",
                            stats.pages_in_use, info.num_pages
                        ));
                    }
                }
            }
        }
    }

    /// Invalid calls naming only this thread's slots: each must fail and free nothing.
    fn bad_input(&mut self) {
        let Some(r) = self.pick_row() else { return };
        let row = &self.rows[r];
        let len = row.len();
        if len == 0 {
            return;
        }
        let sh = &self.sh;
        // SAFETY: every buffer is valid for its stated length.
        unsafe {
            match self.rng.below(3) {
                0 => {
                    let mut dup = row.clone();
                    dup.push(row[0]);
                    let status = kvp_pool_free_indices(sh.pool, ptr(&dup), dup.len());
                    sh.expect("free (duplicate)", status, &[kvp_status::DoubleFree]);
                }
                1 => {
                    let padding = [I::from_slot(0)];
                    let status = kvp_pool_free_indices(sh.pool, ptr(&padding), 1);
                    sh.expect("free (slot 0)", status, &[kvp_status::ReservedSlot]);
                }
                _ => {
                    // A stale last_loc: one slot before the row's last, in the same page.
                    if len < 2 || (len as u64 - 1).is_multiple_of(sh.ps) {
                        return;
                    }
                    let (prefix, seq, stale) = ([len as i64 - 1], [len as i64 + 1], [row[len - 2]]);
                    let mut out = [I::from_slot(0); 2];
                    let status = kvp_pool_alloc_extend(
                        sh.pool,
                        prefix.as_ptr(),
                        seq.as_ptr(),
                        ptr(&stale),
                        1,
                        2,
                        mut_ptr(&mut out),
                        2,
                    );
                    sh.expect(
                        "alloc_extend (stale last_loc)",
                        status,
                        &[kvp_status::LastLocMismatch],
                    );
                }
            }
        }
    }

    fn schedule(&mut self) {
        let sh = Arc::clone(&self.sh);
        let unknown = kvp_status::InvalidArgument;
        // SAFETY: the scheduler is live; out-parameters are valid.
        unsafe {
            match self.rng.below(4) {
                0 => {
                    let request = kvp_request {
                        id: self.next_id,
                        input_len: 1 + self.rng.below(self.max_extend * 2),
                        max_new_tokens: 1 + self.rng.below(64),
                        ignore_eos: self.rng.chance(20),
                        ..kvp_request::default()
                    };
                    let mut result = kvp_submit_result::default();
                    let status = kvp_scheduler_submit(
                        sh.scheduler,
                        &request,
                        std::ptr::null(),
                        0,
                        &mut result,
                    );
                    if sh.expect("submit", status, &[OK]) == OK && result.queued {
                        self.requests.push(self.next_id);
                    }
                    self.next_id += 1;
                }
                1 => {
                    let mut plan: kvp_step_plan = std::mem::zeroed();
                    let status =
                        kvp_scheduler_step(sh.scheduler, 0, 0, self.rng.chance(80), &mut plan);
                    sh.expect("step", status, &[OK]);
                    if plan.kind > 2 {
                        sh.violation(format!("step kind {}", plan.kind));
                    }
                }
                2 => {
                    let mut stats = kvp_scheduler_stats::default();
                    sh.expect(
                        "scheduler get_stats",
                        kvp_scheduler_get_stats(sh.scheduler, &mut stats),
                        &[OK],
                    );
                }
                _ => {
                    if self.requests.is_empty() {
                        return;
                    }
                    let i = self.rng.below(self.requests.len() as u64) as usize;
                    let id = self.requests[i];
                    let mut state = kvp_request_state::default();
                    let status = kvp_scheduler_get_request(sh.scheduler, id, &mut state);
                    // Unknown: a step aborted it for lack of memory.
                    if sh.expect("get_request", status, &[OK, unknown]) != OK {
                        self.requests.swap_remove(i);
                        return;
                    }
                    let mut kv_len = 0;
                    if state.phase == 2 && self.rng.chance(70) {
                        // Another thread's step may retract or abort it meanwhile.
                        let status = kvp_scheduler_finish(sh.scheduler, id, &mut kv_len);
                        let allowed = [OK, kvp_status::InvalidState, unknown];
                        if sh.expect("finish", status, &allowed) == kvp_status::InvalidState {
                            return;
                        }
                    } else {
                        let status = kvp_scheduler_abort(sh.scheduler, id, &mut kv_len);
                        sh.expect("abort", status, &[OK, unknown]);
                    }
                    self.requests.swap_remove(i);
                }
            }
        }
    }

    fn run(mut self, iterations: u64) {
        for _ in 0..iterations {
            match self.rng.below(100) {
                0..=19 => self.extend(),
                20..=34 => self.decode(),
                35..=54 => self.finish(),
                55..=59 => self.truncate(),
                60..=64 => self.rewind(),
                65..=71 => self.alloc_block(),
                72..=79 => self.pool_misc(),
                80..=84 => self.bad_input(),
                _ => self.schedule(),
            }
        }
        while let Some(row) = self.rows.pop() {
            self.finish_one(row);
        }
        while let Some(block) = self.blocks.pop() {
            self.finish_one(block);
        }
        for id in std::mem::take(&mut self.requests) {
            // SAFETY: the scheduler is live.
            let status =
                unsafe { kvp_scheduler_abort(self.sh.scheduler, id, std::ptr::null_mut()) };
            self.sh
                .expect("abort", status, &[OK, kvp_status::InvalidArgument]);
        }
    }
}

/// One configuration: `THREADS` threads on one pool and one scheduler attached to it.
fn stress<I: SlotIndex>(page_size: u32, num_pages: u64, need_sort: bool) {
    let index_type = if I::MAX == i32::MAX as u64 {
        kvp_index_type::I32
    } else {
        kvp_index_type::I64
    };
    let size = num_pages * u64::from(page_size);
    let config = kvp_pool_config {
        size,
        page_size,
        index_type: index_type as u32,
        need_sort,
        ..kvp_pool_config_default()
    };
    let label = format!("page_size {page_size}, {index_type:?}, need_sort {need_sort}");
    let (mut pool, mut other, mut foreign, mut scheduler) = (
        std::ptr::null_mut(),
        std::ptr::null_mut(),
        std::ptr::null_mut(),
        std::ptr::null_mut(),
    );
    let sched_config = kvp_scheduler_config {
        max_prefill_tokens: size / 4,
        chunked_prefill_size: size / 8,
        ..kvp_scheduler_config_default()
    };
    // SAFETY: valid config and out-parameters.
    unsafe {
        assert_eq!(kvp_pool_new(&config, &mut pool), kvp_status::Ok);
        let tiny = kvp_pool_config {
            size: u64::from(page_size),
            ..config
        };
        assert_eq!(kvp_pool_new(&tiny, &mut other), kvp_status::Ok);
        assert_eq!(kvp_pool_backup_state(other, &mut foreign), kvp_status::Ok);
        assert_eq!(
            kvp_scheduler_new(&sched_config, pool, &mut scheduler),
            kvp_status::Ok
        );
    }
    let shared = Arc::new(Shared {
        pool,
        scheduler,
        foreign,
        owned: (0..size + u64::from(page_size))
            .map(|_| AtomicBool::new(false))
            .collect(),
        ps: u64::from(page_size),
        size,
        violations: AtomicU64::new(0),
        handed_out: AtomicU64::new(0),
    });

    let start = Instant::now();
    let (done, finished) = mpsc::channel();
    for t in 0..THREADS {
        let worker = Worker::<I> {
            sh: Arc::clone(&shared),
            rng: Rng(t * 1_000_003 + u64::from(page_size)),
            rows: Vec::new(),
            blocks: Vec::new(),
            max_extend: (size / 64).max(2),
            requests: Vec::new(),
            next_id: (t + 1) << 40,
        };
        let done = done.clone();
        std::thread::spawn(move || {
            worker.run(ITERATIONS);
            done.send(()).unwrap();
        });
    }
    for _ in 0..THREADS {
        // A thread that panicked drops its sender without sending: recv fails at the end.
        match finished.recv_timeout(LIMIT.saturating_sub(start.elapsed())) {
            Ok(()) => {}
            Err(e) => panic!("{label}: threads did not finish within {LIMIT:?} ({e:?})"),
        }
    }
    let elapsed = start.elapsed();
    eprintln!(
        "thread stress ({label}): {THREADS} threads x {ITERATIONS} iterations in {:.2} s",
        elapsed.as_secs_f64()
    );
    assert!(elapsed < LIMIT);

    let sh = &shared;
    // SAFETY: every thread has finished; the handles are live until freed below.
    unsafe {
        // A group some thread left open holds freed pages until it ends.
        let status = kvp_pool_free_group_end(pool);
        assert!(matches!(status, kvp_status::Ok | kvp_status::InvalidState));
        let (mut available, mut stats, mut sched) =
            (0, kvp_pool_stats::default(), kvp_scheduler_stats::default());
        assert_eq!(
            kvp_pool_available_size(pool, &mut available),
            kvp_status::Ok
        );
        assert_eq!(kvp_pool_get_stats(pool, &mut stats), kvp_status::Ok);
        assert_eq!(
            kvp_scheduler_get_stats(scheduler, &mut sched),
            kvp_status::Ok
        );
        assert_eq!(
            sh.violations.load(Ordering::Relaxed),
            0,
            "{label}: violations (see stderr)"
        );
        assert_eq!(available, size, "{label}: slots not returned");
        assert_eq!(stats.pages_in_use, 0, "{label}");
        assert_eq!(stats.pages_allocated, stats.pages_freed, "{label}");
        assert_eq!(
            stats.tokens_allocated,
            sh.handed_out.load(Ordering::Relaxed),
            "{label}"
        );
        assert!(
            stats.failed_allocations > 0 && stats.rejected_calls > 0,
            "{label}: {stats:?}"
        );
        assert!(
            sh.owned.iter().all(|o| !o.load(Ordering::Relaxed)),
            "{label}"
        );
        assert_eq!(
            (sched.waiting, sched.running, sched.chunking),
            (0, 0, 0),
            "{label}"
        );
        assert!(sched.steps > 0 && sched.admitted > 0, "{label}: {sched:?}");
        eprintln!(
            "thread stress ({label}): {} slots handed out, {} shortages, {} refused calls, \
             {} steps, {} admitted, {} finished",
            stats.tokens_allocated,
            stats.failed_allocations,
            stats.rejected_calls,
            sched.steps,
            sched.admitted,
            sched.finished
        );
        kvp_scheduler_free(scheduler);
        kvp_snapshot_free(foreign);
        kvp_pool_free(other);
        kvp_pool_free(pool);
    }
}

#[test]
fn threads_share_a_token_pool_and_scheduler() {
    stress::<i64>(1, 4096, false);
}

#[test]
fn threads_share_a_paged_pool_and_scheduler() {
    stress::<i32>(16, 512, false);
}

#[test]
fn threads_share_a_sorted_paged_pool_and_scheduler() {
    stress::<i64>(4, 1024, true);
}

/// A failing call made while a thread exits, from a thread-local's destructor that runs
/// after the library's per-thread error message is gone, returns its status. Recording the
/// message panicked there, and the second panic on the way out of the C boundary aborted
/// the process (this test binary with it).
#[test]
fn a_failing_call_during_thread_exit_returns_a_status() {
    struct CallsOnExit(mpsc::Sender<kvp_status>);
    impl Drop for CallsOnExit {
        fn drop(&mut self) {
            let _ = self.0.send(alloc_on_no_pool());
        }
    }
    fn alloc_on_no_pool() -> kvp_status {
        let mut slot = 0i64;
        // SAFETY: a NULL pool is refused before anything is read or written.
        unsafe { kvp_pool_alloc(std::ptr::null_mut(), 1, (&mut slot as *mut i64).cast(), 1) }
    }
    thread_local! {
        static ON_EXIT: std::cell::RefCell<Option<CallsOnExit>> =
            const { std::cell::RefCell::new(None) };
    }
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        // Registered before the library's message slot (which the failing call below
        // creates), so destroyed after it: thread-locals go in reverse order.
        ON_EXIT.with(|slot| *slot.borrow_mut() = Some(CallsOnExit(tx)));
        assert_ne!(alloc_on_no_pool(), kvp_status::Ok);
    })
    .join()
    .unwrap();
    let status = rx.recv_timeout(Duration::from_secs(10)).unwrap();
    assert_ne!(status, kvp_status::Ok);
    assert_ne!(status, kvp_status::Panic);
}
