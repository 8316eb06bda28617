//! Fuzzes kvpool's C ABI against the reference model of `tests/model/` (issue 10).
//!
//! The input bytes are decoded into a host pool's configuration (page size 1 or more,
//! int64 or int32 indices, `need_sort` on or off) and a sequence of C calls: allocations
//! that continue tracked requests (valid) or corrupt them (stale, foreign or out-of-range
//! `last_loc`, wrong lengths, NULL or misaligned buffers, short outputs), frees of every
//! kind (valid, double, page 0, repeats), rewinds, free groups, snapshots, clears and the
//! read-only queries, some through a NULL or wrong-kind handle. Every call goes through
//! `kvpool::ffi`'s `extern "C"` functions, so the boundary itself is what is fuzzed.
//!
//! The oracle runs the model in lockstep: the status must be the model's error kind (or
//! the buffer/handle status the ABI documents), every successful allocation must return
//! exactly the model's indices and no slot that a live allocation holds, and after every
//! call the available size and every counter of `kvp_pool_get_stats` must be what the
//! model says; a failing call must leave its output buffer untouched. A census of the free
//! list (read through the ABI: backup, allocate everything, compare, restore) runs when the
//! input asks for it and at the end of every input. A panic anywhere, including a
//! `KVP_STATUS_PANIC`, aborts the process and libFuzzer saves the input.
//!
//! Each extend/decode allocation is preceded by `kvp_pool_extend_need` /
//! `kvp_pool_decode_need` of the same lengths, checked against the header's formula and
//! its promises about that allocation (same length errors; `OUT_OF_SLOTS` iff `pages *
//! page_size > available`; on success exactly `pages` pages and `tokens` slots).
//! `kvp_pool_digest` must be stable between calls, unchanged by refused calls (except
//! `OUT_OF_SLOTS`, which may merge), queries and censuses, restored with its snapshot,
//! a fresh pool's after `kvp_pool_clear`, unchanged by a second merge;
//! `kvp_pool_set_debug` / `_get_debug` on a host pool accept 0 and the known flag only.
#![no_main]

#[allow(dead_code)]
#[path = "../../tests/model/mod.rs"]
mod model;

use std::collections::HashSet;
use std::ffi::c_void;
use std::ptr;

use kvpool::ffi::*;
use libfuzzer_sys::fuzz_target;
use model::Model;

fuzz_target!(|data: &[u8]| {
    let mut input = Input { data, pos: 0 };
    let mut run = Run::new(&mut input);
    let mut steps = 0;
    while !input.done() && steps < 400 {
        run.step(&mut input);
        steps += 1;
    }
    run.finish();
});

/// Reads the fuzzer's bytes; past the end it yields zeros, so every input decodes.
struct Input<'a> {
    data: &'a [u8],
    pos: usize,
}

impl Input<'_> {
    fn done(&self) -> bool {
        self.pos >= self.data.len()
    }
    fn byte(&mut self) -> u8 {
        let b = self.data.get(self.pos).copied().unwrap_or(0);
        self.pos += 1;
        b
    }
    fn below(&mut self, n: usize) -> usize {
        self.byte() as usize % n.max(1)
    }
    fn chance(&mut self, in_256: u8) -> bool {
        self.byte() < in_256
    }
}

/// How a buffer is passed: as it is, NULL with its nonzero length, or misaligned.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Pass {
    Valid,
    Null,
    Misaligned,
}

/// The status the ABI documents for a buffer passed this way (`None`: accepted).
fn buffer_status(pass: Pass, len: usize) -> Option<kvp_status> {
    match pass {
        Pass::Null if len > 0 => Some(kvp_status::NullArgument),
        Pass::Misaligned => Some(kvp_status::InvalidArgument),
        _ => None,
    }
}

/// An index buffer of the pool's index type (int64 or int32), with a sentinel tail so a
/// write past what the call may write is caught.
struct IndexBuf {
    i64s: Vec<i64>,
    i32s: Vec<i32>,
    wide: bool,
    pass: Pass,
}

const SENTINEL: i64 = -0x5A5A_5A5A;

impl IndexBuf {
    fn new(values: &[i64], wide: bool, pass: Pass) -> Self {
        // One spare element: room for the misaligned pointer and a sentinel after the end.
        let mut i64s = values.to_vec();
        i64s.push(SENTINEL);
        let i32s = i64s.iter().map(|&v| v as i32).collect();
        Self {
            i64s,
            i32s,
            wide,
            pass,
        }
    }
    fn output(len: usize, wide: bool, pass: Pass) -> Self {
        Self::new(&vec![SENTINEL; len], wide, pass)
    }
    fn ptr(&mut self) -> *mut c_void {
        let base: *mut u8 = if self.wide {
            self.i64s.as_mut_ptr().cast()
        } else {
            self.i32s.as_mut_ptr().cast()
        };
        match self.pass {
            Pass::Valid => base.cast(),
            Pass::Null => ptr::null_mut(),
            // SAFETY: one byte into a buffer of at least one element.
            Pass::Misaligned => unsafe { base.add(1) }.cast(),
        }
    }
    fn values(&self) -> Vec<i64> {
        if self.wide {
            self.i64s.clone()
        } else {
            self.i32s.iter().map(|&v| i64::from(v)).collect()
        }
    }
    /// True when no element was written (every element still holds what was put there).
    fn untouched(&self, original: &[i64]) -> bool {
        let mut want = original.to_vec();
        want.push(SENTINEL);
        let want32: Vec<i64> = want.iter().map(|&v| i64::from(v as i32)).collect();
        self.values() == if self.wide { want } else { want32 }
    }
}

/// A length array (always int64) passed some way.
struct LenBuf {
    values: Vec<i64>,
    pass: Pass,
}

impl LenBuf {
    fn ptr(&self) -> *const i64 {
        match self.pass {
            Pass::Valid => self.values.as_ptr(),
            Pass::Null => ptr::null(),
            // SAFETY: one byte into a buffer of at least one element (see `len_buf`).
            Pass::Misaligned => unsafe { self.values.as_ptr().cast::<u8>().add(1) }.cast(),
        }
    }
}

fn len_buf(mut values: Vec<i64>, pass: Pass) -> LenBuf {
    if pass == Pass::Misaligned {
        values.push(0);
    }
    LenBuf { values, pass }
}

/// What the "engine" holds: each request's slot row, and raw `alloc` blocks.
#[derive(Clone, Default)]
struct Held {
    rows: Vec<Vec<i64>>,
    blocks: Vec<Vec<i64>>,
}

impl Held {
    fn slots(&self) -> HashSet<i64> {
        self.rows
            .iter()
            .chain(&self.blocks)
            .flatten()
            .copied()
            .collect()
    }
    /// Drops every held slot that `gone` says no longer belongs to its holder; a row is cut
    /// at its first such slot and the rest of it kept as a block.
    fn drop_slots(&mut self, gone: impl Fn(i64) -> bool) {
        let mut tails = Vec::new();
        for row in &mut self.rows {
            if let Some(cut) = row.iter().position(|&s| gone(s)) {
                tails.push(row.split_off(cut));
            }
        }
        for block in self.blocks.iter_mut().chain(&mut tails) {
            block.retain(|&s| !gone(s));
        }
        self.blocks
            .extend(tails.into_iter().filter(|t| !t.is_empty()));
        self.blocks.retain(|b| !b.is_empty());
    }
}

struct Saved {
    snapshot: *mut kvp_snapshot,
    /// `kvp_pool_digest` when the snapshot was taken: a restore must bring it back.
    digest: u64,
    model: Model,
    held: Held,
}

struct Run {
    pool: *mut kvp_pool,
    /// A second pool, for foreign snapshots; created on first use.
    other: *mut kvp_pool,
    wide: bool,
    ps: u64,
    size: u64,
    num_pages: u64,
    model: Model,
    held: Held,
    saved: Vec<Saved>,
    /// The counters `kvp_pool_get_stats` must report.
    stats: kvp_pool_stats,
    step: usize,
    /// The free list's length before the current free call.
    census_before: u64,
    /// Snapshots of `other`, freed at the end.
    saved_foreign: Vec<*mut kvp_snapshot>,
    /// Calls made, for failure messages.
    trace: Vec<String>,
    /// Set by the current step when its call must have changed nothing (refused for any
    /// reason but `KVP_STATUS_OUT_OF_SLOTS`, which may merge staged pages; a read-only
    /// query; a census, which restores what it drained): the digest must then be as before.
    unchanged: bool,
    /// The digest of a fresh pool of this configuration (what `kvp_pool_clear` returns to).
    fresh_digest: u64,
}

/// `kvp_pool_digest` of a live host pool.
fn pool_digest(pool: *const kvp_pool) -> u64 {
    let mut d = 0;
    // SAFETY: live pool, writable out-parameter.
    let s = unsafe { kvp_pool_digest(pool, &mut d) };
    assert_eq!(s, kvp_status::Ok, "kvp_pool_digest");
    d
}

fn new_pool(size: u64, ps: u32, wide: bool, need_sort: bool) -> *mut kvp_pool {
    let mut config = kvp_pool_config_default();
    config.size = size;
    config.page_size = ps;
    config.index_type = if wide { 0 } else { 1 };
    config.need_sort = need_sort;
    let mut pool = ptr::null_mut();
    // SAFETY: valid config and out-pointer.
    let status = unsafe { kvp_pool_new(&config, &mut pool) };
    assert_eq!(status, kvp_status::Ok, "kvp_pool_new({config:?})");
    pool
}

impl Run {
    fn new(input: &mut Input) -> Self {
        let ps = [1u64, 1, 2, 4, 8, 3][input.below(6)];
        let num_pages = 1 + input.below(40) as u64;
        let wide = input.chance(160);
        let need_sort = input.chance(100);
        let size = num_pages * ps;
        let pool = new_pool(size, ps as u32, wide, need_sort);
        // The index type is not part of the digest: a pool of the other one, same
        // configuration, starts with the same digest.
        let twin = new_pool(size, ps as u32, !wide, need_sort);
        let (d, d_twin) = (pool_digest(pool), pool_digest(twin));
        assert_eq!(
            d, d_twin,
            "fresh pools differing only in index type: digests differ"
        );
        // SAFETY: our own pool, not used afterwards.
        unsafe { kvp_pool_free(twin) };
        Self {
            pool,
            other: ptr::null_mut(),
            wide,
            ps,
            size,
            num_pages,
            model: Model::new(size, ps, need_sort),
            held: Held::default(),
            saved: Vec::new(),
            stats: kvp_pool_stats::default(),
            step: 0,
            census_before: 0,
            saved_foreign: Vec::new(),
            trace: vec![format!(
                "pool size {size} page_size {ps} {} need_sort {need_sort}",
                if wide { "int64" } else { "int32" }
            )],
            unchanged: false,
            fresh_digest: d,
        }
    }

    fn fail(&self, what: String) -> ! {
        let tail: Vec<&String> = self.trace.iter().rev().take(12).collect();
        panic!(
            "step {}: {what}\nlast calls (newest first):\n  {}",
            self.step,
            tail.iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join("\n  ")
        );
    }

    fn check(&self, ok: bool, what: impl FnOnce() -> String) {
        if !ok {
            self.fail(what());
        }
    }

    fn want_status(&self, call: &str, got: kvp_status, want: kvp_status) {
        self.check(got != kvp_status::Panic, || {
            format!("{call}: KVP_STATUS_PANIC")
        });
        self.check(got == want, || {
            format!("{call}: status {got:?}, the model says {want:?}")
        });
    }

    fn census_len(&self) -> u64 {
        self.model.census().len() as u64
    }

    fn in_use(&self) -> u64 {
        self.num_pages - self.census_len()
    }

    /// A value near the pool's edges: page 0's slots, one past the last row, negatives.
    fn bad_slot(&self, input: &mut Input) -> i64 {
        let kv_rows = (self.size + self.ps) as i64;
        [
            0,
            -1,
            -2,
            kv_rows,
            kv_rows + 3,
            i64::from(i32::MAX),
            i64::from(i32::MIN),
            (self.ps as i64 - 1).max(0),
        ][input.below(8)]
    }

    /// A slot of a page on the free list (freeing or continuing it must be refused).
    fn free_page_slot(&self, input: &mut Input) -> Option<i64> {
        let census = self.model.census();
        (!census.is_empty()).then(|| {
            let page = i64::from(census[input.below(census.len())]);
            page * self.ps as i64 + input.below(self.ps as usize) as i64
        })
    }

    fn pass(&self, input: &mut Input) -> Pass {
        match input.byte() {
            0..=7 => Pass::Null,
            8..=11 => Pass::Misaligned,
            _ => Pass::Valid,
        }
    }

    fn step(&mut self, input: &mut Input) {
        self.step += 1;
        self.unchanged = false;
        let digest_before = self.digest();
        match input.below(16) {
            0 => self.alloc(input),
            1..=3 => self.extend(input),
            4..=5 => self.decode(input),
            6 => self.free_indices(input),
            7 => self.free_pages(input),
            8 => self.free_segment(input),
            9 => self.rewind(input),
            10 => self.group(input),
            11 => self.snapshot(input),
            12 => self.queries(input),
            13 => {
                self.trace.push("clear / merge_and_sort_free".into());
                if input.chance(64) {
                    // SAFETY: live pool.
                    let s = unsafe { kvp_pool_clear(self.pool) };
                    self.want_status("clear", s, kvp_status::Ok);
                    // The header: the free list becomes pages 1 ..= num_pages in order,
                    // staged frees and an open group dropped: a fresh pool's state.
                    let now = self.digest();
                    self.check(now == self.fresh_digest, || {
                        format!(
                            "digest {now:#x} after clear, a fresh pool's is {:#x}",
                            self.fresh_digest
                        )
                    });
                    self.model.clear();
                    self.held = Held::default();
                } else {
                    // SAFETY: live pool.
                    let s = unsafe { kvp_pool_merge_and_sort_free(self.pool) };
                    self.want_status("merge_and_sort_free", s, kvp_status::Ok);
                    // Nothing is staged now, so a second merge is a no-op.
                    let merged = self.digest();
                    // SAFETY: live pool.
                    let s = unsafe { kvp_pool_merge_and_sort_free(self.pool) };
                    self.want_status("second merge_and_sort_free", s, kvp_status::Ok);
                    let now = self.digest();
                    self.check(now == merged, || {
                        format!("a second merge_and_sort_free changed the digest {merged:#x} to {now:#x}")
                    });
                    self.model.merge_and_sort_free();
                }
            }
            14 => self.census(),
            _ => self.bad_new(input),
        }
        if self.unchanged {
            let now = self.digest();
            self.check(now == digest_before, || {
                format!(
                    "digest {now:#x} after a call that changed nothing, {digest_before:#x} before"
                )
            });
        }
        self.check_state();
    }

    /// `kvp_pool_digest`, read twice: with no call between, the two must be equal.
    fn digest(&self) -> u64 {
        let d = pool_digest(self.pool);
        let again = pool_digest(self.pool);
        self.check(d == again, || {
            format!("two digests with no call between: {d:#x}, {again:#x}")
        });
        d
    }

    fn available(&self) -> u64 {
        let mut available = u64::MAX;
        // SAFETY: live pool, writable out-parameter.
        let s = unsafe { kvp_pool_available_size(self.pool, &mut available) };
        self.want_status("available_size", s, kvp_status::Ok);
        available
    }

    // ---- oracle ----------------------------------------------------------------------

    fn read_stats(&self) -> kvp_pool_stats {
        let mut stats = kvp_pool_stats::default();
        // SAFETY: live pool, writable out-parameter.
        let s = unsafe { kvp_pool_get_stats(self.pool, &mut stats) };
        self.want_status("get_stats", s, kvp_status::Ok);
        stats
    }

    /// Available size, counters and the free-group flag against the model.
    fn check_state(&mut self) {
        let mut available = u64::MAX;
        // SAFETY: live pool, writable out-parameter.
        let s = unsafe { kvp_pool_available_size(self.pool, &mut available) };
        self.want_status("available_size", s, kvp_status::Ok);
        self.check(available == self.model.available_size(), || {
            format!(
                "available_size {available}, the model says {}",
                self.model.available_size()
            )
        });
        let mut info = kvp_pool_info::default();
        // SAFETY: live pool, writable out-parameter.
        let s = unsafe { kvp_pool_get_info(self.pool, &mut info) };
        self.want_status("get_info", s, kvp_status::Ok);
        self.check(
            info.in_free_group == self.model.in_group()
                && info.size == self.size
                && u64::from(info.page_size) == self.ps
                && u64::from(info.num_pages) == self.num_pages
                && info.kv_rows == self.size + self.ps
                && info.padding_slot == 0,
            || format!("get_info {info:?} disagrees with the model"),
        );
        let got = self.read_stats();
        self.stats.pages_in_use = self.in_use();
        self.stats.pages_in_use_peak = self.stats.pages_in_use_peak.max(self.in_use());
        // Merges depend on when staged frees run short, which the model does not count:
        // they may only grow.
        self.check(got.merges >= self.stats.merges, || {
            format!("merges went down: {got:?}")
        });
        self.stats.merges = got.merges;
        self.check(format!("{got:?}") == format!("{:?}", self.stats), || {
            format!("stats {got:?}\n  expected {:?}", self.stats)
        });
    }

    /// Counts a call in the expected counters: `calls` is its call counter, if any.
    fn count(&mut self, calls: Option<fn(&mut kvp_pool_stats) -> &mut u64>, status: kvp_status) {
        if let Some(counter) = calls {
            *counter(&mut self.stats) += 1;
        }
        match status {
            kvp_status::Ok => {}
            kvp_status::OutOfSlots => self.stats.failed_allocations += 1,
            _ => {
                self.stats.rejected_calls += 1;
                self.unchanged = true;
            }
        }
    }

    fn freed_pages(&mut self, census_before: u64) {
        let freed = self.census_len() - census_before;
        self.stats.pages_freed += freed;
        self.stats.slots_freed += freed * self.ps;
    }

    /// Checks a successful allocation's slots: none held already, none twice, none in page
    /// 0 or past the pool, and counts them.
    fn allocated(&mut self, slots: &[i64], census_before: u64) {
        let held = self.held.slots();
        let mut seen = HashSet::new();
        for &slot in slots {
            self.check(
                slot >= self.ps as i64 && (slot as u64) < self.size + self.ps,
                || format!("slot {slot} outside the pool's usable slots"),
            );
            self.check(!held.contains(&slot), || {
                format!("slot {slot} handed out while a live allocation holds it")
            });
            self.check(seen.insert(slot), || {
                format!("slot {slot} handed out twice in one call")
            });
        }
        self.stats.tokens_allocated += slots.len() as u64;
        self.stats.pages_allocated += census_before - self.census_len();
    }

    // ---- allocations -----------------------------------------------------------------

    fn alloc(&mut self, input: &mut Input) {
        let ps = self.ps as usize;
        let mut n = input.below(self.size as usize / ps + 2) * ps;
        if input.chance(24) {
            n += input.below(ps + 1);
        }
        let out_len = if input.chance(24) {
            n.saturating_sub(1 + input.below(2))
        } else {
            n + input.below(2)
        };
        let pass = self.pass(input);
        let mut out = IndexBuf::output(out_len, self.wide, pass);
        self.trace
            .push(format!("alloc({n}, out_len {out_len}, {pass:?})"));
        let census = self.census_len();
        // SAFETY: `out` holds `out_len` elements (or is NULL / misaligned, refused).
        let got = unsafe { kvp_pool_alloc(self.pool, n, out.ptr(), out_len) };
        let want = match buffer_status(pass, out_len) {
            Some(status) => Err(status),
            None if n % ps == 0 && out_len < n => Err(kvp_status::BufferTooSmall),
            None => self.model.alloc(n as u64).map_err(kvp_status::from),
        };
        self.finish_alloc("alloc", got, want, &out, out_len, census, |run, slots| {
            run.held.blocks.push(slots.to_vec());
        });
        self.count(Some(|s| &mut s.alloc_calls), got);
    }

    /// Checks an allocation's status and output against the model's, then records the
    /// slots with `keep`.
    #[allow(clippy::too_many_arguments)]
    fn finish_alloc(
        &mut self,
        call: &str,
        got: kvp_status,
        want: Result<Vec<i64>, kvp_status>,
        out: &IndexBuf,
        out_len: usize,
        census_before: u64,
        keep: impl FnOnce(&mut Self, &[i64]),
    ) {
        let want_status = match &want {
            Ok(_) => kvp_status::Ok,
            Err(s) => *s,
        };
        self.want_status(call, got, want_status);
        match want {
            Ok(slots) => {
                let values = out.values();
                self.check(values[..slots.len()] == slots[..], || {
                    format!(
                        "{call} returned {:?}, the model says {slots:?}",
                        &values[..slots.len()]
                    )
                });
                let mut rest = vec![SENTINEL; out_len - slots.len()];
                rest.push(SENTINEL);
                let rest32: Vec<i64> = rest.iter().map(|&v| i64::from(v as i32)).collect();
                self.check(
                    values[slots.len()..] == if self.wide { rest } else { rest32 }[..],
                    || format!("{call} wrote past its {} slots", slots.len()),
                );
                self.allocated(&slots, census_before);
                keep(self, &slots);
            }
            Err(_) => {
                self.check(out.untouched(&vec![SENTINEL; out_len]), || {
                    format!("failed {call} wrote to its output")
                });
            }
        }
    }

    /// Picks distinct tracked rows for a batch.
    fn pick_rows(&self, input: &mut Input, max: usize) -> Vec<usize> {
        let mut rows = Vec::new();
        if self.held.rows.is_empty() {
            return rows;
        }
        for _ in 0..input.below(max + 1) {
            let r = input.below(self.held.rows.len());
            if !rows.contains(&r) {
                rows.push(r);
            }
        }
        rows
    }

    fn extend(&mut self, input: &mut Input) {
        // Each request: continues a tracked row, or is new (None).
        let mut targets: Vec<Option<usize>> =
            self.pick_rows(input, 3).into_iter().map(Some).collect();
        for _ in 0..input.below(3) {
            targets.push(None);
        }
        let mut prefix = Vec::new();
        let mut seq = Vec::new();
        let mut last = Vec::new();
        for t in &targets {
            let (len, tail) = match t {
                Some(r) => {
                    let row = &self.held.rows[*r];
                    (row.len() as i64, row.last().copied().unwrap_or(-1))
                }
                None => (0, -1),
            };
            prefix.push(len);
            seq.push(len + input.below(2 * self.ps as usize + 3) as i64);
            last.push(tail);
        }
        let mut total: i64 = seq.iter().zip(&prefix).map(|(s, p)| s - p).sum();
        let corrupt = self.corrupt_batch(input, &mut prefix, &mut seq, &mut last, &mut total);
        let total = total.max(0) as usize;
        let out_len = if input.chance(16) {
            total.saturating_sub(1)
        } else {
            total + input.below(2)
        };
        let passes = [(); 4].map(|_| self.pass(input));
        let pb = len_buf(prefix.clone(), passes[0]);
        let sb = len_buf(seq.clone(), passes[1]);
        let mut lb = IndexBuf::new(&last, self.wide, passes[2]);
        let mut out = IndexBuf::output(out_len, self.wide, passes[3]);
        let n = prefix.len();
        self.trace.push(format!(
            "alloc_extend(prefix {prefix:?}, seq {seq:?}, last_loc {last:?}, total {total}, \
             out_len {out_len}, {passes:?}) {corrupt}"
        ));
        let census = self.census_len();
        let need = self.extend_need(&prefix, &seq);
        let available = self.available();
        // SAFETY: every buffer holds its stated length (or is NULL / misaligned, refused).
        let got = unsafe {
            kvp_pool_alloc_extend(
                self.pool,
                pb.ptr(),
                sb.ptr(),
                lb.ptr(),
                n,
                total,
                out.ptr(),
                out_len,
            )
        };
        let want = match (0..4).find_map(|i| buffer_status(passes[i], [n, n, n, out_len][i])) {
            Some(status) => Err(status),
            None => self
                .model
                .alloc_extend(&prefix, &seq, &last, total as u64, out_len)
                .map_err(kvp_status::from),
        };
        self.finish_alloc(
            "alloc_extend",
            got,
            want,
            &out,
            out_len,
            census,
            |run, slots| {
                let mut pos = 0;
                for (i, t) in targets.iter().enumerate() {
                    let k = (seq[i] - prefix[i]) as usize;
                    let new = &slots[pos..pos + k];
                    pos += k;
                    match t {
                        // Only an uncorrupted continuation extends the row it came from.
                        Some(r) if corrupt.is_empty() => run.held.rows[*r].extend_from_slice(new),
                        _ if corrupt.is_empty() => run.held.rows.push(new.to_vec()),
                        _ => run.held.blocks.push(new.to_vec()),
                    }
                }
            },
        );
        if passes.iter().all(|&p| p == Pass::Valid) {
            let tokens = need.map(|(_, t)| t);
            self.check_need(
                "alloc_extend",
                need,
                got,
                tokens == Ok(total as u64),
                available,
                &out,
            );
        }
        self.count(Some(|s| &mut s.alloc_extend_calls), got);
    }

    /// `kvp_pool_extend_need` of a batch, checked against the header's formula (request
    /// `i` takes `ceil(seq / page_size) - ceil(prefix / page_size)` pages and writes `seq -
    /// prefix` slots; lengths valid iff `0 <= prefix <= seq <= size`, else
    /// `KVP_STATUS_INVALID_LENGTHS` with nothing written). Changes nothing (the digest
    /// and, through `check_state`, every counter). Returns its `(pages, tokens)` or status.
    fn extend_need(&mut self, prefix: &[i64], seq: &[i64]) -> Result<(u64, u64), kvp_status> {
        let size = self.size as i64;
        let ps = self.ps as i64;
        let valid = prefix
            .iter()
            .zip(seq)
            .all(|(&p, &s)| 0 <= p && p <= s && s <= size);
        let want = valid.then(|| {
            prefix
                .iter()
                .zip(seq)
                .fold((0u64, 0u64), |(pages, tokens), (&p, &s)| {
                    let new = (s + ps - 1) / ps - (p + ps - 1) / ps;
                    (pages + new as u64, tokens + (s - p) as u64)
                })
        });
        let before = self.digest();
        let (mut pages, mut tokens) = (u64::MAX - 1, u64::MAX - 2);
        // SAFETY: both arrays hold `prefix.len()` elements; out-parameters writable.
        let got = unsafe {
            kvp_pool_extend_need(
                self.pool,
                prefix.as_ptr(),
                seq.as_ptr(),
                prefix.len(),
                &mut pages,
                &mut tokens,
            )
        };
        let call = format!("extend_need(prefix {prefix:?}, seq {seq:?})");
        self.want_status(
            &call,
            got,
            if valid {
                kvp_status::Ok
            } else {
                kvp_status::InvalidLengths
            },
        );
        match want {
            Some(w) => self.check((pages, tokens) == w, || {
                format!("{call}: ({pages}, {tokens}), the header's formula says {w:?}")
            }),
            None => self.check(pages == u64::MAX - 1 && tokens == u64::MAX - 2, || {
                format!("failed {call} wrote ({pages}, {tokens})")
            }),
        }
        let after = self.digest();
        self.check(before == after, || format!("{call} changed the digest"));
        want.ok_or(got)
    }

    /// `kvp_pool_decode_need`, as [`extend_need`](Self::extend_need): a request takes a
    /// page iff `(seq - 1) % page_size == 0`; lengths valid iff `1 <= seq <= size`.
    fn decode_need(&mut self, seq: &[i64]) -> Result<(u64, u64), kvp_status> {
        let size = self.size as i64;
        let ps = self.ps as i64;
        let valid = seq.iter().all(|&s| 1 <= s && s <= size);
        let want = valid.then(|| seq.iter().filter(|&&s| (s - 1) % ps == 0).count() as u64);
        let before = self.digest();
        let mut pages = u64::MAX - 1;
        // SAFETY: `seq` holds `seq.len()` elements; out-parameter writable.
        let got = unsafe { kvp_pool_decode_need(self.pool, seq.as_ptr(), seq.len(), &mut pages) };
        let call = format!("decode_need(seq {seq:?})");
        self.want_status(
            &call,
            got,
            if valid {
                kvp_status::Ok
            } else {
                kvp_status::InvalidLengths
            },
        );
        match want {
            Some(w) => self.check(pages == w, || {
                format!("{call}: {pages}, the header's formula says {w}")
            }),
            None => self.check(pages == u64::MAX - 1, || {
                format!("failed {call} wrote {pages}")
            }),
        }
        let after = self.digest();
        self.check(before == after, || format!("{call} changed the digest"));
        want.map(|p| (p, seq.len() as u64)).ok_or(got)
    }

    /// The need query's promises about the allocation of the same lengths that followed it
    /// (every buffer valid): a length error of the query is the allocation's; with valid
    /// lengths (and `tokens_match`: the `extend_num_tokens` passed is the query's tokens)
    /// the allocation, when it got past its other checks (`OK` or `OUT_OF_SLOTS`), ran
    /// short exactly when `pages * page_size > available` (`kvp_pool_available_size` just
    /// before it), and on success took exactly `pages` pages and wrote `tokens` slots.
    fn check_need(
        &mut self,
        call: &str,
        need: Result<(u64, u64), kvp_status>,
        got: kvp_status,
        tokens_match: bool,
        available: u64,
        out: &IndexBuf,
    ) {
        let (pages, tokens) = match need {
            Err(status) => {
                self.check(got == status, || {
                    format!("{call}: status {got:?}, its need query said {status:?}")
                });
                return;
            }
            Ok(need) => need,
        };
        if !tokens_match {
            self.check(got == kvp_status::InvalidLengths, || {
                format!("{call}: status {got:?} with extend_num_tokens != the query's {tokens}")
            });
            return;
        }
        if got != kvp_status::Ok && got != kvp_status::OutOfSlots {
            return;
        }
        let short = pages * self.ps > available;
        self.check((got == kvp_status::OutOfSlots) == short, || {
            format!(
                "{call}: status {got:?}, but its need query says {pages} pages of {} with {available} \
                 available",
                self.ps
            )
        });
        if got == kvp_status::Ok {
            let now = self.available();
            self.check(available - now == pages * self.ps, || {
                format!(
                    "{call} took {} slots' pages, its need query said {pages} pages",
                    available - now
                )
            });
            let values = out.values();
            let sentinel = if self.wide {
                SENTINEL
            } else {
                i64::from(SENTINEL as i32)
            };
            let written = values.iter().take_while(|&&v| v != sentinel).count();
            self.check(
                written as u64 == tokens && values[written..].iter().all(|&v| v == sentinel),
                || format!("{call} wrote {written} slots, its need query said {tokens}"),
            );
        }
    }

    /// Corrupts one request of an extend/decode batch (or nothing); says what it did.
    fn corrupt_batch(
        &self,
        input: &mut Input,
        prefix: &mut [i64],
        seq: &mut [i64],
        last: &mut [i64],
        total: &mut i64,
    ) -> String {
        let n = prefix.len();
        if n == 0 || input.chance(150) {
            if n == 0 && input.chance(40) {
                *total += 1;
                return "(total off by one)".into();
            }
            return String::new();
        }
        let i = input.below(n);
        let what = input.below(10);
        match what {
            0 => {
                // Stale: an earlier slot of the same request.
                let delta = 1 + input.below(self.ps as usize + 1) as i64;
                last[i] -= delta;
                format!("(stale last_loc -{delta} at {i})")
            }
            1 => {
                // Foreign: another request's last slot, or a slot of a free page.
                let other = self.held.rows.get(input.below(self.held.rows.len().max(1)));
                match other.and_then(|r| r.last()) {
                    Some(&s) if input.chance(128) => last[i] = s,
                    _ => last[i] = self.free_page_slot(input).unwrap_or(-1),
                }
                format!("(foreign last_loc at {i})")
            }
            2 => {
                last[i] = self.bad_slot(input);
                format!("(out-of-range last_loc at {i})")
            }
            3 => {
                prefix[i] += [1, -1, 2][input.below(3)];
                *total = seq.iter().zip(prefix.iter()).map(|(s, p)| s - p).sum();
                format!("(prefix_len off at {i})")
            }
            4 => {
                seq[i] = prefix[i] - 1 - input.below(2) as i64;
                format!("(seq_len < prefix_len at {i})")
            }
            5 => {
                *total += [1, -1][input.below(2)];
                "(total off by one)".into()
            }
            6 => {
                seq[i] = self.size as i64 + 1 + input.below(3) as i64;
                *total = seq.iter().zip(prefix.iter()).map(|(s, p)| s - p).sum();
                format!("(seq_len past the pool at {i})")
            }
            7 => {
                // The same continuation twice in one batch.
                let j = input.below(n);
                prefix[j] = prefix[i];
                seq[j] = seq[i];
                last[j] = last[i];
                *total = seq.iter().zip(prefix.iter()).map(|(s, p)| s - p).sum();
                format!("(request {j} repeats {i})")
            }
            8 => {
                last[i] = if last[i] == -1 { self.ps as i64 } else { -1 };
                format!("(last_loc -1 swapped at {i})")
            }
            _ => {
                prefix[i] = -1 - input.below(2) as i64;
                format!("(negative prefix_len at {i})")
            }
        }
    }

    fn decode(&mut self, input: &mut Input) {
        let targets = self.pick_rows(input, 4);
        let mut seq: Vec<i64> = targets
            .iter()
            .map(|&r| self.held.rows[r].len() as i64 + 1)
            .collect();
        let mut last: Vec<i64> = targets
            .iter()
            .map(|&r| self.held.rows[r].last().copied().unwrap_or(-1))
            .collect();
        let mut prefix: Vec<i64> = seq.iter().map(|s| s - 1).collect();
        let mut total = seq.len() as i64;
        let corrupt = self.corrupt_batch(input, &mut prefix, &mut seq, &mut last, &mut total);
        if !corrupt.is_empty() && input.chance(128) {
            // Decode's lengths are `seq_lens` alone: carry a prefix change over.
            for (s, p) in seq.iter_mut().zip(&prefix) {
                *s = (*s).min(p + 1);
            }
        }
        let n = seq.len();
        let out_len = if input.chance(24) {
            n.saturating_sub(1)
        } else {
            n + input.below(2)
        };
        let passes = [(); 3].map(|_| self.pass(input));
        let sb = len_buf(seq.clone(), passes[0]);
        let mut lb = IndexBuf::new(&last, self.wide, passes[1]);
        let mut out = IndexBuf::output(out_len, self.wide, passes[2]);
        self.trace.push(format!(
            "alloc_decode(seq {seq:?}, last_loc {last:?}, out_len {out_len}, {passes:?}) {corrupt}"
        ));
        let census = self.census_len();
        let need = self.decode_need(&seq);
        let available = self.available();
        // SAFETY: every buffer holds its stated length (or is NULL / misaligned, refused).
        let got =
            unsafe { kvp_pool_alloc_decode(self.pool, sb.ptr(), lb.ptr(), n, out.ptr(), out_len) };
        let want = match (0..3).find_map(|i| buffer_status(passes[i], [n, n, out_len][i])) {
            Some(status) => Err(status),
            None => self
                .model
                .alloc_decode(&seq, &last, out_len)
                .map_err(kvp_status::from),
        };
        let clean = corrupt.is_empty();
        self.finish_alloc(
            "alloc_decode",
            got,
            want,
            &out,
            out_len,
            census,
            |run, slots| {
                for (&r, &slot) in targets.iter().zip(slots) {
                    if clean {
                        run.held.rows[r].push(slot);
                    } else {
                        run.held.blocks.push(vec![slot]);
                    }
                }
            },
        );
        if passes.iter().all(|&p| p == Pass::Valid) {
            self.check_need("alloc_decode", need, got, true, available, &out);
        }
        self.count(Some(|s| &mut s.alloc_decode_calls), got);
    }

    // ---- frees -----------------------------------------------------------------------

    /// Takes a tracked row or block (or an empty one) for a free; says which.
    fn pick_holding(&self, input: &mut Input) -> Vec<i64> {
        let all: Vec<&Vec<i64>> = self.held.rows.iter().chain(&self.held.blocks).collect();
        if all.is_empty() {
            return Vec::new();
        }
        all[input.below(all.len())].clone()
    }

    /// Mixes bad elements into a list of indices or page ids.
    fn corrupt_list(&self, input: &mut Input, list: &mut Vec<i64>, page_ids: bool) -> String {
        if input.chance(140) {
            return String::new();
        }
        let pos = input.below(list.len() + 1);
        let bad = match input.below(5) {
            0 if !list.is_empty() => list[input.below(list.len())], // a repeat
            1 => self
                .free_page_slot(input)
                .map(|s| if page_ids { s / self.ps as i64 } else { s })
                .unwrap_or(0),
            2 => 0,
            3 if page_ids => [-1, self.num_pages as i64 + 1, i64::from(i32::MAX)][input.below(3)],
            _ => self.bad_slot(input),
        };
        list.insert(pos, bad);
        format!("(inserted {bad} at {pos})")
    }

    /// Runs one free call on the pool and the model and checks it; `pages` are the pages
    /// it frees when it succeeds.
    fn free_call(
        &mut self,
        call: String,
        got: kvp_status,
        want: Result<(), kvp_status>,
        pages: HashSet<i64>,
    ) {
        let census = self.census_before;
        self.trace.push(call.clone());
        let want_status = want.err().unwrap_or(kvp_status::Ok);
        self.want_status(&call, got, want_status);
        if got == kvp_status::Ok {
            let ps = self.ps as i64;
            self.held.drop_slots(|s| pages.contains(&(s / ps)));
            self.freed_pages(census);
        }
        self.count(Some(|s| &mut s.free_calls), got);
    }

    fn free_indices(&mut self, input: &mut Input) {
        let mut indices = self.pick_holding(input);
        let corrupt = self.corrupt_list(input, &mut indices, false);
        let pass = self.pass(input);
        let mut buf = IndexBuf::new(&indices, self.wide, pass);
        self.census_before = self.census_len();
        // SAFETY: `buf` holds `indices.len()` elements (or is NULL / misaligned, refused).
        let got = unsafe { kvp_pool_free_indices(self.pool, buf.ptr(), indices.len()) };
        let want = match buffer_status(pass, indices.len()) {
            Some(s) => Err(s),
            None => self.model.free(&indices).map_err(kvp_status::from),
        };
        let pages = indices.iter().map(|&s| s / self.ps as i64).collect();
        self.free_call(
            format!("free_indices({indices:?}, {pass:?}) {corrupt}"),
            got,
            want,
            pages,
        );
    }

    fn free_pages(&mut self, input: &mut Input) {
        let ps = self.ps as i64;
        let mut ids: Vec<i64> = self.pick_holding(input).iter().map(|s| s / ps).collect();
        ids.dedup();
        let corrupt = self.corrupt_list(input, &mut ids, true);
        let pass = self.pass(input);
        let mut buf = IndexBuf::new(&ids, self.wide, pass);
        self.census_before = self.census_len();
        // SAFETY: `buf` holds `ids.len()` elements (or is NULL / misaligned, refused).
        let got = unsafe { kvp_pool_free_pages(self.pool, buf.ptr(), ids.len()) };
        let want = match buffer_status(pass, ids.len()) {
            Some(s) => Err(s),
            None => self.model.free_pages(&ids).map_err(kvp_status::from),
        };
        let pages = ids.iter().copied().collect();
        self.free_call(
            format!("free_pages({ids:?}, {pass:?}) {corrupt}"),
            got,
            want,
            pages,
        );
    }

    fn free_segment(&mut self, input: &mut Input) {
        let mut row = self.pick_holding(input);
        let ps = self.ps as usize;
        // Mostly a tail from a page boundary (over-allocation release), else anything.
        let mut start = if row.is_empty() {
            0
        } else {
            input.below(row.len()) / ps * ps
        };
        let mut len = row.len() - start;
        let mut corrupt = String::new();
        if input.chance(80) {
            match input.below(4) {
                0 => start += 1,
                1 => len += 1 + input.below(2),
                2 if row.len() >= 2 => {
                    let i = input.below(row.len() - 1);
                    row.swap(i, i + 1);
                }
                _ => corrupt = self.corrupt_list(input, &mut row, false),
            }
            corrupt = format!("(corrupted) {corrupt}");
        }
        let pass = self.pass(input);
        let mut buf = IndexBuf::new(&row, self.wide, pass);
        self.census_before = self.census_len();
        // SAFETY: `buf` holds `row.len()` elements (or is NULL / misaligned, refused).
        let got = unsafe { kvp_pool_free_segment(self.pool, buf.ptr(), row.len(), start, len) };
        let want = match buffer_status(pass, row.len()) {
            Some(s) => Err(s),
            None => self
                .model
                .free_segment(&row, start, len)
                .map_err(kvp_status::from),
        };
        let end = (start + len).min(row.len());
        let pages = row[start.min(end)..end]
            .iter()
            .map(|&s| s / ps as i64)
            .collect();
        self.free_call(
            format!("free_segment({row:?}, start {start}, len {len}, {pass:?}) {corrupt}"),
            got,
            want,
            pages,
        );
    }

    // ---- rewind, groups, snapshots -----------------------------------------------------

    fn rewind(&mut self, input: &mut Input) {
        let mut kept: Vec<i64> = Vec::new();
        for r in self.pick_rows(input, 2) {
            let row = &self.held.rows[r];
            if let Some(&s) = row.get(input.below(row.len())) {
                kept.push(s);
            }
        }
        let corrupt = self.corrupt_list(input, &mut kept, false);
        let pass = self.pass(input);
        let mut buf = IndexBuf::new(&kept, self.wide, pass);
        self.trace
            .push(format!("rewind({kept:?}, {pass:?}) {corrupt}"));
        // SAFETY: `buf` holds `kept.len()` elements (or is NULL / misaligned, refused).
        let got = unsafe { kvp_pool_rewind(self.pool, buf.ptr(), kept.len()) };
        let want = match buffer_status(pass, kept.len()) {
            Some(s) => s,
            None => self
                .model
                .rewind(&kept)
                .err()
                .map_or(kvp_status::Ok, Into::into),
        };
        self.want_status("rewind", got, want);
        if got == kvp_status::Ok {
            // Slots after a kept one in its page are no longer handed out.
            let ps = self.ps as i64;
            self.held
                .drop_slots(|s| kept.iter().any(|&k| k / ps == s / ps && s > k));
        }
        self.count(None, got);
    }

    fn group(&mut self, input: &mut Input) {
        let begin = input.chance(128);
        self.census_before = self.census_len();
        let (got, want) = if begin {
            self.trace.push("free_group_begin".into());
            // SAFETY: live pool.
            let got = unsafe { kvp_pool_free_group_begin(self.pool) };
            (got, self.model.free_group_begin())
        } else {
            self.trace.push("free_group_end".into());
            // SAFETY: live pool.
            let got = unsafe { kvp_pool_free_group_end(self.pool) };
            (got, self.model.free_group_end())
        };
        let want = want.err().map_or(kvp_status::Ok, Into::into);
        self.want_status("free_group", got, want);
        if got == kvp_status::Ok {
            self.freed_pages(self.census_before);
        }
        self.count(None, got);
    }

    fn snapshot(&mut self, input: &mut Input) {
        match input.below(4) {
            0 | 1 => {
                let null_out = input.chance(16);
                self.trace
                    .push(format!("backup_state(null out {null_out})"));
                let mut snap = ptr::null_mut();
                let out = if null_out { ptr::null_mut() } else { &mut snap };
                // SAFETY: live pool; out NULL or writable.
                let got = unsafe { kvp_pool_backup_state(self.pool, out) };
                let want = if null_out {
                    kvp_status::NullArgument
                } else if self.model.in_group() {
                    kvp_status::InvalidState
                } else {
                    kvp_status::Ok
                };
                self.want_status("backup_state", got, want);
                self.check(got == kvp_status::Ok || snap.is_null(), || {
                    "failed backup_state wrote its out-parameter".into()
                });
                if got == kvp_status::Ok {
                    let digest = self.digest();
                    self.saved.push(Saved {
                        snapshot: snap,
                        digest,
                        model: self.model.clone(),
                        held: self.held.clone(),
                    });
                    if self.saved.len() > 3 {
                        // SAFETY: a live snapshot, forgotten after this.
                        unsafe { kvp_snapshot_free(self.saved.remove(0).snapshot) };
                    }
                }
            }
            2 => {
                // A snapshot of ours, of another pool, NULL, or a pool passed as one.
                let which = input.below(self.saved.len() + 3);
                let (snap, want_model) = if which < self.saved.len() {
                    let s = &self.saved[which];
                    (s.snapshot.cast_const(), Some(which))
                } else if which == self.saved.len() {
                    (self.foreign_snapshot(), None)
                } else if which == self.saved.len() + 1 {
                    (ptr::null(), None)
                } else {
                    (self.pool.cast_const().cast::<kvp_snapshot>(), None)
                };
                self.trace.push(format!("restore_state(choice {which})"));
                // SAFETY: live pool; `snap` NULL or a live handle (of some kind).
                let got = unsafe { kvp_pool_restore_state(self.pool, snap) };
                let (want, counted) = if which == self.saved.len() + 1 {
                    (kvp_status::NullArgument, false)
                } else if which == self.saved.len() + 2 {
                    (kvp_status::InvalidArgument, false)
                } else if which == self.saved.len() {
                    (kvp_status::ForeignSnapshot, true)
                } else if self.model.in_group() {
                    (kvp_status::InvalidState, true)
                } else {
                    (kvp_status::Ok, true)
                };
                self.want_status("restore_state", got, want);
                if got == kvp_status::Ok {
                    let saved = self.saved[want_model.unwrap()].digest;
                    let now = self.digest();
                    self.check(now == saved, || {
                        format!("digest {now:#x} after restore_state, {saved:#x} at its backup")
                    });
                    let s = &self.saved[want_model.unwrap()];
                    self.model = s.model.clone();
                    self.held = s.held.clone();
                    self.stats.restores += 1;
                }
                if counted {
                    self.count(None, got);
                }
            }
            _ => {
                if !self.saved.is_empty() {
                    let i = input.below(self.saved.len());
                    self.trace.push(format!("snapshot_free({i})"));
                    // SAFETY: a live snapshot, forgotten after this.
                    unsafe { kvp_snapshot_free(self.saved.remove(i).snapshot) };
                }
                // SAFETY: NULL is a no-op.
                unsafe { kvp_snapshot_free(ptr::null_mut()) };
            }
        }
    }

    /// A snapshot of the second pool (same configuration, another identity).
    fn foreign_snapshot(&mut self) -> *const kvp_snapshot {
        if self.other.is_null() {
            self.other = new_pool(self.size, self.ps as u32, self.wide, false);
        }
        let mut snap = ptr::null_mut();
        // SAFETY: live pool, writable out-parameter.
        let s = unsafe { kvp_pool_backup_state(self.other, &mut snap) };
        self.want_status("backup_state (other pool)", s, kvp_status::Ok);
        self.saved_foreign.push(snap);
        snap
    }

    // ---- queries and bad handles --------------------------------------------------------

    fn queries(&mut self, input: &mut Input) {
        let which = input.below(10);
        self.trace.push(format!("query {which}"));
        self.unchanged = true;
        if which >= 6 {
            let (call, got, want) = self.new_queries(input, which);
            self.want_status(&call, got, want);
            return;
        }
        // SAFETY: each call passes a live pool, NULL, or a live handle of another kind
        // (refused by its tag); out-parameters are NULL or writable.
        let (got, want) = unsafe {
            match which {
                0 => (
                    kvp_pool_available_size(self.pool, ptr::null_mut()),
                    kvp_status::NullArgument,
                ),
                1 => (
                    kvp_pool_get_stats(self.pool, ptr::null_mut()),
                    kvp_status::NullArgument,
                ),
                2 => (
                    kvp_pool_get_info(self.pool, ptr::null_mut()),
                    kvp_status::NullArgument,
                ),
                3 => {
                    let mut n = 7u64;
                    let s = kvp_pool_available_size(ptr::null(), &mut n);
                    self.check(n == 7, || "failed available_size wrote".into());
                    (s, kvp_status::NullArgument)
                }
                4 => {
                    // A snapshot handle where a pool belongs.
                    let Some(saved) = self.saved.first() else {
                        return;
                    };
                    let as_pool = saved.snapshot.cast::<kvp_pool>();
                    let mut out = [SENTINEL; 2];
                    let s = kvp_pool_alloc(as_pool, 0, out.as_mut_ptr().cast(), 2);
                    (s, kvp_status::InvalidArgument)
                }
                _ => (
                    kvp_pool_free_group_begin(ptr::null_mut()),
                    kvp_status::NullArgument,
                ),
            }
        };
        self.want_status("query", got, want);
    }

    /// The need queries with a bad argument, the digest with NULL / wrong-kind arguments,
    /// and the debug flags of a host pool. Each must leave every out-parameter it refuses
    /// as it was; `step` checks that the digest and `check_state` that the counters did not
    /// move.
    fn new_queries(&mut self, input: &mut Input, which: usize) -> (String, kvp_status, kvp_status) {
        let snapshot_as_pool = self.saved.first().map(|s| s.snapshot.cast::<kvp_pool>());
        let ps = self.ps as i64;
        match which {
            6 | 7 => {
                // A batch whose lengths are valid, so only the corrupted argument is wrong.
                let n = 1 + input.below(3);
                let prefix: Vec<i64> = (0..n)
                    .map(|_| input.below(ps as usize + 1) as i64)
                    .collect();
                let seq: Vec<i64> = prefix
                    .iter()
                    .map(|&p| (p + 1).min(self.size as i64))
                    .collect();
                let arr = [prefix.clone(), seq.clone()].map(|v| {
                    let mut v = v;
                    v.push(0);
                    v
                });
                let (mut pages, mut tokens) = (777u64, 888u64);
                let what = input.below(7);
                let mis = |v: &Vec<i64>| -> *const i64 {
                    // SAFETY: one byte into a buffer of at least two elements.
                    unsafe { v.as_ptr().cast::<u8>().add(1) }.cast()
                };
                let mut pool = self.pool.cast_const();
                let mut pp = arr[0].as_ptr();
                let mut sp = arr[1].as_ptr();
                let mut outp: *mut u64 = &mut pages;
                let decode = which == 7;
                let want = match what {
                    0 => {
                        outp = ptr::null_mut();
                        kvp_status::NullArgument
                    }
                    1 => {
                        pp = ptr::null();
                        kvp_status::NullArgument
                    }
                    2 => {
                        sp = ptr::null();
                        kvp_status::NullArgument
                    }
                    3 => {
                        if !decode && input.chance(128) {
                            pp = mis(&arr[0]);
                        } else {
                            sp = mis(&arr[1]);
                        }
                        kvp_status::InvalidArgument
                    }
                    4 => {
                        pool = ptr::null();
                        kvp_status::NullArgument
                    }
                    5 if snapshot_as_pool.is_some() => {
                        pool = snapshot_as_pool.unwrap().cast_const();
                        kvp_status::InvalidArgument
                    }
                    _ => kvp_status::Ok, // out_tokens NULL (extend) / valid (decode)
                };
                if decode && what == 1 {
                    return (
                        "decode_need (skipped)".into(),
                        kvp_status::Ok,
                        kvp_status::Ok,
                    );
                }
                // SAFETY: pointers NULL, misaligned (refused) or valid for `n` elements;
                // handles live or NULL; out-parameters NULL or writable.
                let got = unsafe {
                    if decode {
                        kvp_pool_decode_need(pool, sp, n, outp)
                    } else {
                        let tp: *mut u64 = if what >= 5 {
                            ptr::null_mut()
                        } else {
                            &mut tokens
                        };
                        kvp_pool_extend_need(pool, pp, sp, n, outp, tp)
                    }
                };
                let call = format!(
                    "{}_need(prefix {prefix:?}, seq {seq:?}, corruption {what})",
                    if decode { "decode" } else { "extend" }
                );
                if got == kvp_status::Ok {
                    let want_pages = if decode {
                        seq.iter().filter(|&&s| (s - 1) % ps == 0).count() as u64
                    } else {
                        prefix
                            .iter()
                            .zip(&seq)
                            .map(|(&p, &s)| ((s + ps - 1) / ps - (p + ps - 1) / ps) as u64)
                            .sum()
                    };
                    self.check(pages == want_pages && tokens == 888, || {
                        format!("{call}: pages {pages} (want {want_pages}), out_tokens {tokens}")
                    });
                } else {
                    self.check(pages == 777 && tokens == 888, || {
                        format!("failed {call} wrote ({pages}, {tokens})")
                    });
                }
                (call, got, want)
            }
            8 => {
                let mut d = 999u64;
                let what = input.below(3);
                // SAFETY: live pool / NULL / a live handle of another kind; out NULL or
                // writable.
                let (got, want) = unsafe {
                    match what {
                        0 => (
                            kvp_pool_digest(self.pool, ptr::null_mut()),
                            kvp_status::NullArgument,
                        ),
                        1 => (
                            kvp_pool_digest(ptr::null(), &mut d),
                            kvp_status::NullArgument,
                        ),
                        _ => match snapshot_as_pool {
                            Some(h) => (kvp_pool_digest(h, &mut d), kvp_status::InvalidArgument),
                            None => (
                                kvp_pool_digest(ptr::null(), &mut d),
                                kvp_status::NullArgument,
                            ),
                        },
                    }
                };
                self.check(d == 999, || format!("failed digest({what}) wrote"));
                (format!("digest(bad {what})"), got, want)
            }
            _ => {
                let flags = match input.below(5) {
                    0 => 0,
                    1 => kvp_debug::StreamOrder as u32,
                    2 => 1u32 << (1 + input.below(31)),
                    3 => u32::MAX,
                    _ => u32::from(input.byte()),
                };
                let null = input.chance(32);
                let target = if null { ptr::null_mut() } else { self.pool };
                // SAFETY: live pool or NULL.
                let got = unsafe { kvp_pool_set_debug(target, flags) };
                let want = if null {
                    kvp_status::NullArgument
                } else if flags & !(kvp_debug::StreamOrder as u32) != 0 {
                    kvp_status::InvalidArgument
                } else {
                    kvp_status::Ok
                };
                let call = format!("set_debug({flags:#x}, null {null})");
                self.want_status(&call, got, want);
                let mut read = 0xABCDu32;
                // SAFETY: live pool, writable out-parameter.
                let s = unsafe { kvp_pool_get_debug(self.pool, &mut read) };
                self.want_status("get_debug", s, kvp_status::Ok);
                self.check(read == 0, || format!("get_debug of a host pool: {read:#x}"));
                let mut read = 0xABCDu32;
                // SAFETY: NULL pool / NULL out-parameter are refused.
                let (s1, s2) = unsafe {
                    (
                        kvp_pool_get_debug(ptr::null_mut(), &mut read),
                        kvp_pool_get_debug(self.pool, ptr::null_mut()),
                    )
                };
                self.check(read == 0xABCD, || "failed get_debug wrote".into());
                self.want_status("get_debug(NULL pool)", s1, kvp_status::NullArgument);
                (
                    format!("{call}; get_debug(NULL out)"),
                    s2,
                    kvp_status::NullArgument,
                )
            }
        }
    }

    /// `kvp_pool_new` with one bad setting at a time.
    fn bad_new(&mut self, input: &mut Input) {
        let mut config = kvp_pool_config_default();
        config.size = self.size;
        config.page_size = self.ps as u32;
        let want = match input.below(6) {
            0 => {
                config.page_size = 0;
                kvp_status::InvalidArgument
            }
            1 => {
                config.size = 0;
                kvp_status::InvalidArgument
            }
            2 if self.ps > 1 => {
                config.size += 1;
                kvp_status::Unaligned
            }
            3 => {
                config.index_type = 2 + input.byte() as u32;
                kvp_status::InvalidArgument
            }
            4 => {
                config.backend = 2 + input.byte() as u32;
                kvp_status::InvalidArgument
            }
            _ => {
                self.trace.push("pool_new(NULL config)".into());
                let mut out = ptr::null_mut();
                // SAFETY: NULL config is refused; out writable.
                let got = unsafe { kvp_pool_new(ptr::null(), &mut out) };
                self.want_status("pool_new(NULL)", got, kvp_status::NullArgument);
                self.check(out.is_null(), || "failed pool_new wrote".into());
                return;
            }
        };
        self.trace.push(format!("pool_new({config:?})"));
        let mut out = ptr::null_mut();
        // SAFETY: valid config and out-pointer.
        let got = unsafe { kvp_pool_new(&config, &mut out) };
        self.want_status("pool_new", got, want);
        self.check(out.is_null(), || "failed pool_new wrote".into());
    }

    // ---- census ------------------------------------------------------------------------

    /// Reads the whole free list through the ABI: backs up, allocates everything (which
    /// hands the free pages out in free-list order, after merging staged ones), compares
    /// with the model doing the same, and restores. Skipped inside a free group, where
    /// snapshots are refused.
    fn census(&mut self) {
        if self.model.in_group() {
            return;
        }
        self.trace.push("census".into());
        self.unchanged = true;
        let mut snap = ptr::null_mut();
        // SAFETY: live pool, writable out-parameter.
        let s = unsafe { kvp_pool_backup_state(self.pool, &mut snap) };
        self.want_status("census backup", s, kvp_status::Ok);
        let n = self.model.available_size() as usize;
        let mut out = IndexBuf::output(n, self.wide, Pass::Valid);
        // SAFETY: `out` holds `n` elements.
        let s = unsafe { kvp_pool_alloc(self.pool, n, out.ptr(), n) };
        self.want_status("census alloc", s, kvp_status::Ok);
        let want = self.model.clone().alloc(n as u64).unwrap();
        let got = out.values();
        self.check(got[..n] == want[..], || {
            format!("free list {:?}, the model's {want:?}", &got[..n])
        });
        // SAFETY: live pool and snapshot; the snapshot is not used afterwards.
        let s = unsafe { kvp_pool_restore_state(self.pool, snap) };
        self.want_status("census restore", s, kvp_status::Ok);
        // SAFETY: our own snapshot, not used afterwards.
        unsafe { kvp_snapshot_free(snap) };
        // The drain counts as an allocation, its peak and a restore (which also undid any
        // merge the drain did: staged pages are part of the snapshot).
        self.stats.alloc_calls += 1;
        self.stats.tokens_allocated += n as u64;
        self.stats.pages_allocated += n as u64 / self.ps;
        self.stats.restores += 1;
        self.stats.pages_in_use_peak = self.num_pages;
    }

    /// End of an input: closes an open free group, takes the census, checks the state, and
    /// releases every handle.
    fn finish(mut self) {
        if self.model.in_group() {
            self.census_before = self.census_len();
            // SAFETY: live pool.
            let s = unsafe { kvp_pool_free_group_end(self.pool) };
            self.model.free_group_end().unwrap();
            self.want_status("final free_group_end", s, kvp_status::Ok);
            self.freed_pages(self.census_before);
            self.count(None, s);
        }
        self.census();
        self.check_state();
        // SAFETY: every handle made here is live and not used afterwards.
        unsafe {
            for s in self.saved.drain(..) {
                kvp_snapshot_free(s.snapshot);
            }
            for s in self.saved_foreign.drain(..) {
                kvp_snapshot_free(s);
            }
            kvp_pool_free(self.pool);
            kvp_pool_free(self.other);
        }
    }
}
