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
//! `kvp_pool_set_debug` / `_get_debug` on a host pool accept 0 and the known flags only.
//!
//! Request-to-token tables: the target keeps an engine's `req_to_token` table (int64 or
//! int32 entries, 1 to 8 rows, a row stride `>= row_len`, chosen by the input) whose row `r`
//! mirrors tracked request `r`. `kvp_pool_alloc_extend_rows` / `_alloc_decode_rows` of
//! tracked and new requests must return the model's slots for the classic call with the
//! `last_loc` read from the table, write exactly those slots into the rows at `prefix ..
//! seq` (nothing else in the table, spare element included) and into `out` when given;
//! corrupted (row out of range or repeated, `seq_len > row_len`, lengths, a stale or
//! foreign table entry, a NULL / misaligned / empty / short-stride / wrong-type table,
//! NULL or misaligned arrays, a short `out`) they must return the documented status and
//! leave the table, `out` and the pool (model, digest, counters) unchanged.
//! `kvp_pool_free_rows` must equal the model's `free_segment` of each row's segment of the
//! table as one call (a free group around them), refuse bad segments and rows, and a page
//! named by two rows with `DOUBLE_FREE`; it never writes the table. `kvp_pool_page_table`
//! must equal FlashInfer's layout computed here from the table (`kv_indptr` the exclusive
//! sum of `ceil(seq / page_size)`, `kv_indices` `table[row][p * page_size] / page_size`,
//! `kv_last_page_len` in `1 ..= page_size`, 0 for an empty request), refuse a short
//! `indices_capacity` with `BUFFER_TOO_SMALL`, and write nothing on failure.
//!
//! Decode reservations: the oracle is the model's `reserve_decode` / `finish_reservation`
//! / `abandon_reservation` (`tests/model/`: the K steps' pages taken step-major at once,
//! each step with `alloc_decode`'s merge rule, fill points advanced as if every step ran;
//! the finish returns the unused pages to the front of the free list in taken order and
//! rewinds partly used pages). The model's reservation is itself checked against K plain
//! model decodes (same slots, step by step; with `need_sort` too, merging where they do),
//! and after a finish with nothing else in between (and without `need_sort`: a merge made
//! for a later step is not undone) its free list against a model twin that ran
//! `steps_used` plain decodes. Each `kvp_decode_reservation_step` must return the model's
//! next step (to `out` and / or the table at `lens[i] + s`) and change nothing in the pool
//! (digest); a step past K, of a finished reservation or one whose pool was cleared or
//! restored since (a census restores too), with bad buffers, rows or table, of NULL or of a
//! pool handle, is refused with its documented status, writing nothing.
//! `kvp_decode_reservation_finish` is refused with a wrong `steps_used`, another pool,
//! NULL, a finished or stale reservation.
//!
//! Holds: from the reservation to its end every page it hands slots out of (its new pages,
//! and each request's partly filled last page) is held, and the model refuses, at the
//! library's place in its check order, a free naming a held page (`free_indices`,
//! `_free_pages`, `_free_segment`, `_free_rows`, in a free group too), a rewind into one
//! and a continuation (`last_loc`: classic and `*_rows` allocations, another reservation)
//! from one with `INVALID_STATE`; a plain decode continuing a reserved request from a held
//! page must get that status whatever else ran (checked). The frees, rewinds and continuations are aimed at a live
//! reservation's slots (a request's row as if every step had run, one step's slots, one
//! slot) as well as at the tracked requests, whose rows get each step's slots. Since
//! nothing can free a held page, a step's slots are nobody's when it returns them (checked)
//! and become its requests'; a finish takes back no slot anyone holds (checked). Holds end
//! at the finish, at `kvp_decode_reservation_free` of a live reservation (the model's
//! `abandon_reservation`: its pages stay allocated as if every step had run, the steps not
//! taken go to its requests, the digest and counters stay as they were), at a clear and at
//! a restore (held pages in the snapshot come back plainly allocated). Every handle is
//! freed at the end of the input.
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

/// The engine's request-to-token table (`kvp_req_table`), int64 or int32 entries, `rows`
/// rows of `row_len` usable entries `stride` apart, plus one spare element (room for a
/// misaligned `data` pointer) after its span. Row `r` mirrors tracked request `r`
/// (`Held::rows[r]`); entries past a request's length hold whatever was there (`POISON`
/// at first, stale slots later), as in an engine.
struct Table {
    wide: bool,
    rows: usize,
    stride: usize,
    row_len: usize,
    i64s: Vec<i64>,
    i32s: Vec<i32>,
}

const POISON: i64 = -3;

impl Table {
    fn new(wide: bool, rows: usize, stride: usize, row_len: usize) -> Self {
        let span = (rows - 1) * stride + row_len + 1;
        Self {
            wide,
            rows,
            stride,
            row_len,
            i64s: vec![POISON; span],
            i32s: vec![POISON as i32; span],
        }
    }
    fn at(&self, r: usize, k: usize) -> usize {
        r * self.stride + k
    }
    fn get(&self, r: usize, k: usize) -> i64 {
        let i = self.at(r, k);
        if self.wide {
            self.i64s[i]
        } else {
            i64::from(self.i32s[i])
        }
    }
    fn set(&mut self, r: usize, k: usize, v: i64) {
        let i = self.at(r, k);
        if self.wide {
            self.i64s[i] = v;
        } else {
            self.i32s[i] = v as i32;
        }
    }
    /// Every element, spare included.
    fn values(&self) -> Vec<i64> {
        if self.wide {
            self.i64s.clone()
        } else {
            self.i32s.iter().map(|&v| i64::from(v)).collect()
        }
    }
    fn row(&self, r: usize) -> Vec<i64> {
        (0..self.row_len).map(|k| self.get(r, k)).collect()
    }
    fn data(&mut self) -> *mut c_void {
        if self.wide {
            self.i64s.as_mut_ptr().cast()
        } else {
            self.i32s.as_mut_ptr().cast()
        }
    }
}

/// How a table descriptor is passed: as it is, or with one thing wrong.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum TablePass {
    Valid,
    /// The descriptor pointer itself NULL.
    NullDesc,
    NullData,
    MisalignedData,
    /// `index_type` not a `kvp_index_type`.
    BadType(u32),
    /// `rows` or `row_len` 0.
    Empty(bool),
    /// `row_stride < row_len` (refused only with more than one row).
    ShortStride,
}

impl TablePass {
    /// The descriptor check's status (`None`: accepted), in the library's order: descriptor
    /// NULL, index type, shape, data.
    fn status(self, rows: usize) -> Option<kvp_status> {
        match self {
            TablePass::Valid => None,
            TablePass::NullDesc | TablePass::NullData => Some(kvp_status::NullArgument),
            TablePass::MisalignedData | TablePass::BadType(_) | TablePass::Empty(_) => {
                Some(kvp_status::InvalidArgument)
            }
            TablePass::ShortStride if rows > 1 => Some(kvp_status::InvalidArgument),
            TablePass::ShortStride => None,
        }
    }
}

/// A live (or finished, or stale) decode reservation and the model's view of it (which
/// also says whether it is live: `Model::is_live`; a clear or restore, the census's too,
/// makes it stale).
struct Resv {
    handle: *mut kvp_decode_reservation,
    model: model::Reserved,
    /// The tracked requests (`Held::rows` indices) of the batch.
    rows: Vec<usize>,
    /// Made from a corrupted batch that the pool accepted anyway: its slots are blocks.
    clean: bool,
    steps: u32,
    taken: u32,
    /// The `last_loc`s it was made with.
    last: Vec<i64>,
    /// The model before the reservation, for the plain-decode cross-check at the finish.
    before: Model,
    /// `Run::touched` right after the reservation was made.
    made_at: usize,
}

impl Resv {
    /// Credits step `s`'s slots to their requests: the row of a request whose tracked row
    /// still ends where step `s` continues it, else a block. While the reservation is live
    /// its pages are held (no free, rewind or continuation of them is accepted), so the
    /// slots of its steps belong to its requests and nobody else.
    fn credit(&self, held: &mut Held, s: usize) {
        for (i, &slot) in self.model.slots[s].iter().enumerate() {
            let prev = if s == 0 {
                self.last[i]
            } else {
                self.model.slots[s - 1][i]
            };
            let len = self.model.lens[i] as usize + s;
            match held.rows.get_mut(self.rows[i]) {
                Some(row)
                    if self.clean
                        && row.len() == len
                        && row.last().copied().unwrap_or(-1) == prev =>
                {
                    row.push(slot)
                }
                _ => held.blocks.push(vec![slot]),
            }
        }
    }
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
    /// The engine's `req_to_token` table; row `r` mirrors `held.rows[r]`.
    table: Table,
    /// Decode reservations of `pool` (live, finished or stale), freed at the end.
    resvs: Vec<Resv>,
    /// The last step that may have changed the pool (every step but a reservation's step
    /// or query).
    touched: usize,
    /// Set by a step that only stepped or queried a reservation.
    resv_only: bool,
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
        // The table: int64 or int32, 1 to 8 rows, rows mostly long enough for any request.
        let table_wide = input.chance(128);
        let table_rows = 1 + input.below(8);
        let row_len = if input.chance(200) {
            size as usize + input.below(3)
        } else {
            1 + input.below(size as usize)
        };
        let stride = row_len + input.below(3);
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
            table: Table::new(table_wide, table_rows, stride, row_len),
            resvs: Vec::new(),
            touched: 0,
            resv_only: false,
        }
    }

    fn fail(&self, what: String) -> ! {
        let tail: Vec<&String> = self.trace.iter().rev().take(30).collect();
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
        self.resv_only = false;
        let digest_before = self.digest();
        match input.below(22) {
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
                    // Every reservation made before is stale now (the model's clear).
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
            15 => self.bad_new(input),
            16 | 17 => self.alloc_rows(input),
            18 => {
                if input.chance(128) {
                    self.free_rows(input)
                } else {
                    self.page_table(input)
                }
            }
            _ => self.reservation(input),
        }
        if !self.resv_only {
            self.touched = self.step;
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
            None if n.is_multiple_of(ps) && out_len < n => Err(kvp_status::BufferTooSmall),
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
                // Foreign: another request's last slot, or a slot of a free page, or of a
                // page a live reservation holds.
                if self.any_held() && input.chance(80) {
                    last[i] = self.reserved_slot(input).unwrap_or(-1);
                    return format!("(held last_loc at {i})");
                }
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

    // ---- request-to-token tables ---------------------------------------------------------

    /// Writes every tracked request's slots into its table row, as the engine does after a
    /// classic call (the *_rows calls write the table themselves, and are checked for it).
    fn sync_table(&mut self) {
        let n = self.table.rows.min(self.held.rows.len());
        for r in 0..n {
            let len = self.held.rows[r].len().min(self.table.row_len);
            for k in 0..len {
                let v = self.held.rows[r][k];
                self.table.set(r, k, v);
            }
        }
    }

    fn table_pass(&self, input: &mut Input) -> TablePass {
        if input.chance(215) {
            return TablePass::Valid;
        }
        match input.below(6) {
            0 => TablePass::NullDesc,
            1 => TablePass::NullData,
            2 => TablePass::MisalignedData,
            3 => TablePass::BadType(2 + u32::from(input.byte())),
            4 => TablePass::Empty(input.chance(128)),
            _ => TablePass::ShortStride,
        }
    }

    /// The table's descriptor, passed `how` (`TablePass::NullDesc`: the caller passes NULL).
    fn table_desc(&mut self, how: TablePass) -> kvp_req_table {
        let mut d = kvp_req_table {
            data: self.table.data(),
            index_type: if self.table.wide { 0 } else { 1 },
            rows: self.table.rows as u64,
            row_stride: self.table.stride as u64,
            row_len: self.table.row_len as u64,
        };
        match how {
            TablePass::NullData => d.data = ptr::null_mut(),
            // SAFETY: one byte into the table, which has a spare element.
            TablePass::MisalignedData => d.data = unsafe { d.data.cast::<u8>().add(1) }.cast(),
            TablePass::BadType(t) => d.index_type = t,
            TablePass::Empty(true) => d.rows = 0,
            TablePass::Empty(false) => d.row_len = 0,
            TablePass::ShortStride => d.row_stride = d.row_len - 1,
            TablePass::Valid | TablePass::NullDesc => {}
        }
        d
    }

    /// The row checks of the *_rows calls: in range, then (when `distinct`) no row twice.
    fn rows_status(&self, rows: &[i64], distinct: bool) -> Option<kvp_status> {
        if rows.iter().any(|&r| r < 0 || r as usize >= self.table.rows) {
            return Some(kvp_status::IndexOutOfRange);
        }
        let set: HashSet<i64> = rows.iter().copied().collect();
        (distinct && set.len() < rows.len()).then_some(kvp_status::InvalidArgument)
    }

    /// `kvp_pool_alloc_extend_rows` / `kvp_pool_alloc_decode_rows` of tracked requests
    /// (their table rows) and new ones (the next unused rows), valid or with one corruption.
    /// Must give exactly the model's slots for the classic call with `last_loc` read from
    /// the table, write exactly them into the table and `out`, and on failure change nothing
    /// (table, out, pool).
    fn alloc_rows(&mut self, input: &mut Input) {
        self.sync_table();
        let decode = input.chance(110);
        let ps = self.ps as usize;
        let lim = self.table.rows.min(self.held.rows.len());
        let mut reqs: Vec<usize> = Vec::new();
        if lim > 0 {
            for _ in 0..input.below(4) {
                let r = input.below(lim);
                if !reqs.contains(&r) {
                    reqs.push(r);
                }
            }
        }
        for j in 0..input.below(3) {
            let r = self.held.rows.len() + j;
            if r < self.table.rows {
                reqs.push(r);
            }
        }
        let n = reqs.len();
        let mut rows: Vec<i64> = reqs.iter().map(|&r| r as i64).collect();
        let mut prefix: Vec<i64> = reqs
            .iter()
            .map(|&r| self.held.rows.get(r).map_or(0, |v| v.len() as i64))
            .collect();
        let mut seq: Vec<i64> = prefix
            .iter()
            .map(|&p| {
                if decode {
                    p + 1
                } else {
                    p + input.below(2 * ps + 3) as i64
                }
            })
            .collect();
        let mut total: i64 = seq.iter().zip(&prefix).map(|(s, p)| s - p).sum();
        let mut corrupt = String::new();
        if n > 0 && input.chance(100) {
            let i = input.below(n);
            match input.below(6) {
                0 => {
                    let t = self.table.rows as i64;
                    rows[i] = [-1, t, t + 2, i64::MAX][input.below(4)];
                    corrupt = format!("(rows[{i}] = {} out of range)", rows[i]);
                }
                1 => {
                    let j = input.below(n);
                    if j != i {
                        rows[j] = rows[i];
                        corrupt = format!("(rows[{j}] repeats rows[{i}])");
                    }
                }
                2 => {
                    seq[i] = self.table.row_len as i64 + 1 + input.below(2) as i64;
                    if decode {
                        prefix[i] = seq[i] - 1;
                    }
                    total = seq.iter().zip(&prefix).map(|(s, p)| s - p).sum();
                    corrupt = format!("(seq_lens[{i}] = {} past row_len)", seq[i]);
                }
                3 => {
                    // The table entry the call reads as last_loc: stale or foreign.
                    let pos = if decode { seq[i] - 2 } else { prefix[i] - 1 };
                    if pos >= 0 && (pos as usize) < self.table.row_len {
                        let (r, k) = (reqs[i], pos as usize);
                        let old = self.table.get(r, k);
                        let new = match input.below(3) {
                            _ if self.any_held() && input.chance(64) => {
                                self.reserved_slot(input).unwrap_or(old)
                            }
                            0 => old - 1 - input.below(ps + 1) as i64,
                            1 => {
                                let other = self.held.rows.get(input.below(self.held.rows.len()));
                                match other.and_then(|o| o.last()) {
                                    Some(&s) => s,
                                    None => self.free_page_slot(input).unwrap_or(-1),
                                }
                            }
                            _ => self.free_page_slot(input).unwrap_or(self.bad_slot(input)),
                        };
                        if new != old {
                            self.table.set(r, k, new);
                            corrupt = format!("(table[{r}][{k}] {old} -> {new})");
                        }
                    }
                }
                4 => {
                    if decode {
                        seq[i] = -(input.below(2) as i64);
                    } else {
                        total += [1, -1][input.below(2)];
                    }
                    corrupt = "(lengths)".into();
                }
                _ => {
                    seq[i] = self.size as i64 + 1;
                    if decode {
                        prefix[i] = seq[i] - 1;
                    }
                    total = seq.iter().zip(&prefix).map(|(s, p)| s - p).sum();
                    corrupt = format!("(seq_lens[{i}] past the pool)");
                }
            }
        }
        let total = total.max(0) as usize;
        let tp = self.table_pass(input);
        let passes = [(); 3].map(|_| self.pass(input));
        let out_pass = self.pass(input);
        let want_out = if decode { n } else { total };
        let out_len = if input.chance(20) {
            want_out.saturating_sub(1)
        } else {
            want_out + input.below(2)
        };
        let rb = len_buf(rows.clone(), passes[0]);
        let pb = len_buf(prefix.clone(), passes[1]);
        let sb = len_buf(seq.clone(), passes[2]);
        let mut out = IndexBuf::output(out_len, self.wide, out_pass);
        let call = format!(
            "alloc_{}_rows(rows {rows:?}, prefix {prefix:?}, seq {seq:?}, total {total}, \
             out_len {out_len}, table {tp:?}, {passes:?}, out {out_pass:?}) {corrupt}",
            if decode { "decode" } else { "extend" }
        );
        self.trace.push(call.clone());
        let before = self.table.values();
        let census = self.census_len();
        let desc = self.table_desc(tp);
        let dp: *const kvp_req_table = if tp == TablePass::NullDesc {
            ptr::null()
        } else {
            &desc
        };
        // SAFETY: every buffer holds its stated length (or is NULL / misaligned, refused);
        // the table spans its descriptor's shape (or the descriptor is refused).
        let got = unsafe {
            if decode {
                kvp_pool_alloc_decode_rows(self.pool, dp, rb.ptr(), sb.ptr(), n, out.ptr(), out_len)
            } else {
                kvp_pool_alloc_extend_rows(
                    self.pool,
                    dp,
                    rb.ptr(),
                    pb.ptr(),
                    sb.ptr(),
                    n,
                    total,
                    out.ptr(),
                    out_len,
                )
            }
        };
        let size = self.size as i64;
        let lengths_ok = if decode {
            seq.iter().all(|&s| 1 <= s && s <= size)
        } else {
            prefix
                .iter()
                .zip(&seq)
                .all(|(&p, &s)| 0 <= p && p <= s && s <= size)
                && seq.iter().zip(&prefix).map(|(s, p)| s - p).sum::<i64>() == total as i64
        };
        let want: Result<Vec<i64>, kvp_status> = 'want: {
            if let Some(s) = tp.status(self.table.rows) {
                break 'want Err(s);
            }
            let arrays = if decode { [0, 2] } else { [0, 1] };
            for a in arrays.into_iter().chain([2]) {
                if let Some(s) = buffer_status(passes[a], n) {
                    break 'want Err(s);
                }
            }
            if out_pass == Pass::Misaligned {
                break 'want Err(kvp_status::InvalidArgument);
            }
            if !lengths_ok {
                break 'want Err(kvp_status::InvalidLengths);
            }
            if out_pass == Pass::Valid && out_len < want_out {
                break 'want Err(kvp_status::BufferTooSmall);
            }
            if let Some(s) = self.rows_status(&rows, true) {
                break 'want Err(s);
            }
            if seq.iter().any(|&s| s as usize > self.table.row_len) {
                break 'want Err(kvp_status::BufferTooSmall);
            }
            let last: Vec<i64> = rows
                .iter()
                .zip(&prefix)
                .map(|(&r, &p)| {
                    if p == 0 {
                        -1
                    } else {
                        before[self.table.at(r as usize, p as usize - 1)]
                    }
                })
                .collect();
            let res = if decode {
                self.model.alloc_decode(&seq, &last, usize::MAX)
            } else {
                self.model
                    .alloc_extend(&prefix, &seq, &last, total as u64, usize::MAX)
            };
            res.map_err(kvp_status::from)
        };
        let want_status = want.as_ref().err().copied().unwrap_or(kvp_status::Ok);
        self.want_status(&call, got, want_status);
        let now = self.table.values();
        match want {
            Err(_) => {
                self.check(now == before, || {
                    format!("failed {call} wrote to the table")
                });
                self.check(out.untouched(&vec![SENTINEL; out_len]), || {
                    format!("failed {call} wrote to its output")
                });
            }
            Ok(slots) => {
                let mut expect = Table {
                    wide: self.table.wide,
                    rows: self.table.rows,
                    stride: self.table.stride,
                    row_len: self.table.row_len,
                    i64s: before.clone(),
                    i32s: before.iter().map(|&v| v as i32).collect(),
                };
                let mut at = 0;
                for i in 0..n {
                    for k in prefix[i]..seq[i] {
                        expect.set(rows[i] as usize, k as usize, slots[at]);
                        at += 1;
                    }
                }
                let expect = expect.values();
                self.check(now == expect, || {
                    let diff: Vec<(usize, i64, i64)> = (0..now.len())
                        .filter(|&j| now[j] != expect[j])
                        .map(|j| (j, now[j], expect[j]))
                        .collect();
                    format!("{call}: the table differs from the model's slots {slots:?} at (element, got, want) {diff:?}")
                });
                if out_pass == Pass::Valid {
                    let mut want_out = slots.clone();
                    want_out.resize(out_len + 1, SENTINEL);
                    let want32: Vec<i64> = want_out.iter().map(|&v| i64::from(v as i32)).collect();
                    let values = out.values();
                    self.check(values == if self.wide { want_out } else { want32 }, || {
                        format!("{call}: out {values:?}, the model's slots {slots:?}")
                    });
                } else {
                    self.check(out.untouched(&vec![SENTINEL; out_len]), || {
                        format!("{call} wrote to a NULL out")
                    });
                }
                self.allocated(&slots, census);
                let mut at = 0;
                for i in 0..n {
                    let k = (seq[i] - prefix[i]) as usize;
                    let new = slots[at..at + k].to_vec();
                    at += k;
                    let r = reqs[i];
                    if !corrupt.is_empty() {
                        self.held.blocks.push(new);
                    } else if r < self.held.rows.len() {
                        self.held.rows[r].extend(new);
                    } else {
                        self.held.rows.push(new);
                    }
                }
            }
        }
        let counter: fn(&mut kvp_pool_stats) -> &mut u64 = if decode {
            |s| &mut s.alloc_decode_calls
        } else {
            |s| &mut s.alloc_extend_calls
        };
        self.count(Some(counter), got);
    }

    /// `kvp_pool_free_rows` of tracked requests' table rows, or with one corruption: must
    /// equal the model's `free_segment` of each row's segment of the table, as one call
    /// (a free group around them), and never modify the table.
    fn free_rows(&mut self, input: &mut Input) {
        self.sync_table();
        let ps = self.ps as usize;
        let lim = self.table.rows.min(self.held.rows.len());
        let mut rows: Vec<i64> = Vec::new();
        if lim > 0 {
            for _ in 0..input.below(4) {
                let r = input.below(lim) as i64;
                if !rows.contains(&r) {
                    rows.push(r);
                }
            }
        }
        let mut starts = Vec::new();
        let mut ends = Vec::new();
        for &r in &rows {
            let len = self.held.rows[r as usize].len().min(self.table.row_len);
            let start = if input.chance(128) {
                0
            } else {
                input.below(len + 1) / ps * ps
            };
            starts.push(start as i64);
            ends.push(len as i64);
        }
        let mut corrupt = String::new();
        let n = rows.len();
        if n > 0 && input.chance(90) {
            let i = input.below(n);
            let row_len = self.table.row_len as i64;
            corrupt = match input.below(8) {
                0 => {
                    starts[i] += 1;
                    ends[i] = ends[i].max(starts[i]);
                    format!("(starts[{i}] unaligned)")
                }
                1 => {
                    ends[i] = row_len + 1;
                    format!("(ends[{i}] past row_len)")
                }
                2 => {
                    starts[i] = ends[i] + 1;
                    format!("(starts[{i}] > ends[{i}])")
                }
                3 => {
                    starts[i] = -1;
                    format!("(starts[{i}] negative)")
                }
                4 => {
                    let t = self.table.rows as i64;
                    rows[i] = [-1, t, t + 1][input.below(3)];
                    format!("(rows[{i}] out of range)")
                }
                5 => {
                    let j = input.below(n);
                    rows[j] = rows[i];
                    format!("(rows[{j}] repeats rows[{i}])")
                }
                6 if self.table.rows > 1 => {
                    // Another row whose segment names the same pages (a shared prefix).
                    let a = rows[i] as usize;
                    let b = (a + 1 + input.below(self.table.rows - 1)) % self.table.rows;
                    for k in starts[i]..ends[i] {
                        let v = self.table.get(a, k as usize);
                        self.table.set(b, k as usize, v);
                    }
                    rows = vec![a as i64, b as i64];
                    starts = vec![starts[i]; 2];
                    ends = vec![ends[i]; 2];
                    format!("(row {b} a copy of row {a}'s segment)")
                }
                _ => {
                    ends[i] = (ends[i] + 1 + input.below(ps) as i64).min(row_len);
                    format!("(ends[{i}] past the request)")
                }
            };
        }
        let n = rows.len();
        let tp = self.table_pass(input);
        let passes = [(); 3].map(|_| self.pass(input));
        let rb = len_buf(rows.clone(), passes[0]);
        let sb = len_buf(starts.clone(), passes[1]);
        let eb = len_buf(ends.clone(), passes[2]);
        let call = format!(
            "free_rows(rows {rows:?}, starts {starts:?}, ends {ends:?}, table {tp:?}, {passes:?}) \
             {corrupt}"
        );
        let before = self.table.values();
        let desc = self.table_desc(tp);
        let dp: *const kvp_req_table = if tp == TablePass::NullDesc {
            ptr::null()
        } else {
            &desc
        };
        let row_len = self.table.row_len as i64;
        let segs: Vec<Vec<i64>> = (0..n)
            .map(|i| {
                if 0 <= starts[i]
                    && starts[i] <= ends[i]
                    && ends[i] <= row_len
                    && (0..self.table.rows as i64).contains(&rows[i])
                {
                    return self.table.row(rows[i] as usize);
                }
                Vec::new()
            })
            .collect();
        self.census_before = self.census_len();
        // SAFETY: as in `alloc_rows`.
        let got = unsafe { kvp_pool_free_rows(self.pool, dp, rb.ptr(), sb.ptr(), eb.ptr(), n) };
        let mut pages = HashSet::new();
        let want: Result<(), kvp_status> = 'want: {
            if let Some(s) = tp.status(self.table.rows) {
                break 'want Err(s);
            }
            for p in passes {
                if let Some(s) = buffer_status(p, n) {
                    break 'want Err(s);
                }
            }
            if (0..n).any(|i| starts[i] < 0 || ends[i] < starts[i] || ends[i] > row_len) {
                break 'want Err(kvp_status::InvalidLengths);
            }
            if let Some(s) = self.rows_status(&rows, true) {
                break 'want Err(s);
            }
            let mut all = Vec::new();
            for i in 0..n {
                let (s, e) = (starts[i] as usize, ends[i] as usize);
                if let Err(k) = self.model.clone().free_segment(&segs[i], s, e - s) {
                    break 'want Err(k.into());
                }
                let mut mine: Vec<i64> = segs[i][s..e].iter().map(|&v| v / ps as i64).collect();
                mine.dedup();
                all.extend(mine);
            }
            pages = all.iter().copied().collect();
            if n >= 2 && pages.len() < all.len() {
                break 'want Err(kvp_status::DoubleFree);
            }
            let group = self.model.in_group();
            if !group {
                self.model.free_group_begin().unwrap();
            }
            for i in 0..n {
                let (s, e) = (starts[i] as usize, ends[i] as usize);
                self.model.free_segment(&segs[i], s, e - s).unwrap();
            }
            if !group {
                self.model.free_group_end().unwrap();
            }
            Ok(())
        };
        let now = self.table.values();
        self.trace.push(call.clone());
        self.check(now == before, || format!("{call} modified the table"));
        self.trace.pop();
        self.free_call(call, got, want, pages);
    }

    /// `kvp_pool_page_table` against FlashInfer's layout computed here from the table.
    /// Read-only: nothing written on failure, the pool unchanged, nothing counted.
    fn page_table(&mut self, input: &mut Input) {
        self.sync_table();
        self.unchanged = true;
        let ps = self.ps as i64;
        let n = input.below(5);
        let mut rows: Vec<i64> = (0..n)
            .map(|_| input.below(self.table.rows) as i64)
            .collect();
        let mut seq: Vec<i64> = rows
            .iter()
            .map(|&r| {
                let held = self.held.rows.get(r as usize).map_or(0, Vec::len);
                let cap = if input.chance(200) {
                    held.min(self.table.row_len)
                } else {
                    self.table.row_len
                };
                input.below(cap + 1) as i64
            })
            .collect();
        let mut corrupt = String::new();
        if n > 0 && input.chance(60) {
            let i = input.below(n);
            corrupt = match input.below(3) {
                0 => {
                    let t = self.table.rows as i64;
                    rows[i] = [-1, t, t + 5][input.below(3)];
                    format!("(rows[{i}] out of range)")
                }
                1 => {
                    seq[i] = self.table.row_len as i64 + 1 + input.below(2) as i64;
                    format!("(seq_lens[{i}] past row_len)")
                }
                _ => {
                    seq[i] = -1 - input.below(2) as i64;
                    format!("(seq_lens[{i}] negative)")
                }
            };
        }
        let total: i64 = seq.iter().map(|&s| (s.max(0) + ps - 1) / ps).sum();
        let cap = if total > 0 && input.chance(30) {
            corrupt += " (capacity short)";
            (total - 1 - input.below(2) as i64).max(0) as usize
        } else {
            total as usize + input.below(3)
        };
        let tp = self.table_pass(input);
        let passes = [(); 5].map(|_| self.pass(input));
        let rb = len_buf(rows.clone(), passes[0]);
        let sb = len_buf(seq.clone(), passes[1]);
        let mut indptr = IndexBuf::output(n + 1, false, passes[2]);
        let mut indices = IndexBuf::output(cap, false, passes[3]);
        let mut last = IndexBuf::output(n, false, passes[4]);
        let call = format!(
            "page_table(rows {rows:?}, seq {seq:?}, capacity {cap}, table {tp:?}, {passes:?}) \
             {corrupt}"
        );
        self.trace.push(call.clone());
        let before = self.table.values();
        let desc = self.table_desc(tp);
        let dp: *const kvp_req_table = if tp == TablePass::NullDesc {
            ptr::null()
        } else {
            &desc
        };
        // SAFETY: as in `alloc_rows`; the outputs hold n + 1, cap and n int32.
        let got = unsafe {
            kvp_pool_page_table(
                self.pool,
                dp,
                rb.ptr(),
                sb.ptr(),
                n,
                indptr.ptr().cast(),
                indices.ptr().cast(),
                cap,
                last.ptr().cast(),
            )
        };
        let row_len = self.table.row_len as i64;
        let want = 'want: {
            if let Some(s) = tp.status(self.table.rows) {
                break 'want Err(s);
            }
            for (p, len) in passes.into_iter().zip([n, n, n + 1, cap, n]) {
                if let Some(s) = buffer_status(p, len) {
                    break 'want Err(s);
                }
            }
            if seq.iter().any(|&s| s < 0) {
                break 'want Err(kvp_status::InvalidLengths);
            }
            if seq.iter().any(|&s| s > row_len) {
                break 'want Err(kvp_status::BufferTooSmall);
            }
            if let Some(s) = self.rows_status(&rows, false) {
                break 'want Err(s);
            }
            if (cap as i64) < total {
                break 'want Err(kvp_status::BufferTooSmall);
            }
            // FlashInfer's layout, from the table.
            let mut ptr_ref = vec![0i64];
            let mut idx_ref = Vec::new();
            let mut last_ref = Vec::new();
            for (&r, &s) in rows.iter().zip(&seq) {
                let pages = (s + ps - 1) / ps;
                for p in 0..pages {
                    let v = self.table.get(r as usize, (p * ps) as usize) / ps;
                    idx_ref.push(i64::from(v as i32));
                }
                ptr_ref.push(ptr_ref.last().unwrap() + pages);
                last_ref.push(if pages == 0 { 0 } else { s - (pages - 1) * ps });
            }
            Ok((ptr_ref, idx_ref, last_ref))
        };
        let want_status = want.as_ref().err().copied().unwrap_or(kvp_status::Ok);
        self.want_status(&call, got, want_status);
        let s32 = i64::from(SENTINEL as i32);
        let tail = |v: Vec<i64>, len: usize| {
            let mut v = v;
            v.resize(len + 1, s32);
            v
        };
        match want {
            Err(_) => {
                let ok = indptr.untouched(&vec![SENTINEL; n + 1])
                    && indices.untouched(&vec![SENTINEL; cap])
                    && last.untouched(&vec![SENTINEL; n]);
                self.check(ok, || format!("failed {call} wrote an output"));
            }
            Ok((p, i, l)) => {
                let got = (indptr.values(), indices.values(), last.values());
                let want = (tail(p, n + 1), tail(i, cap), tail(l, n));
                self.check(got == want, || {
                    format!("{call}: (kv_indptr, kv_indices, kv_last_page_len) {got:?}, the table says {want:?}")
                });
            }
        }
        let now = self.table.values();
        self.check(now == before, || format!("{call} modified the table"));
    }

    // ---- decode reservations -------------------------------------------------------------

    fn reservation(&mut self, input: &mut Input) {
        match input.below(10) {
            0 | 1 => self.reserve(input),
            2..=4 => self.resv_step(input),
            5 | 6 => self.resv_finish(input),
            7 => self.resv_info(input),
            8 => self.resv_plain_decode(input),
            _ => self.resv_misc(input),
        }
    }

    /// `kvp_pool_reserve_decode` of tracked requests, K steps (1..=8, at times 0 or past
    /// `KVP_MAX_RESERVED_STEPS`), valid or with one corruption; against
    /// `Model::reserve_decode`. The model's reservation is also checked against K plain
    /// decodes of the model.
    fn reserve(&mut self, input: &mut Input) {
        let targets = self.pick_rows(input, 4);
        let ps = self.ps as usize;
        let mut lens: Vec<i64> = targets
            .iter()
            .map(|&r| self.held.rows[r].len() as i64)
            .collect();
        let mut last: Vec<i64> = targets
            .iter()
            .map(|&r| self.held.rows[r].last().copied().unwrap_or(-1))
            .collect();
        let steps: u32 = match input.below(24) {
            0 => 0,
            1 => kvpool::MAX_RESERVED_STEPS + 1 + u32::from(input.byte()),
            2 => [kvpool::MAX_RESERVED_STEPS, u32::MAX][input.below(2)],
            _ => 1 + input.below(8) as u32,
        };
        let n = lens.len();
        let mut corrupt = String::new();
        if n > 0 && input.chance(60) {
            let i = input.below(n);
            corrupt = match input.below(5) {
                0 => {
                    last[i] -= 1 + input.below(ps + 1) as i64;
                    format!("(stale last_loc at {i})")
                }
                1 => {
                    let other = self.held.rows.get(input.below(self.held.rows.len()));
                    last[i] = match other.and_then(|o| o.last()) {
                        _ if self.any_held() && input.chance(80) => {
                            self.reserved_slot(input).unwrap_or(-1)
                        }
                        Some(&s) if input.chance(128) => s,
                        _ => self.free_page_slot(input).unwrap_or(-1),
                    };
                    format!("(foreign last_loc at {i})")
                }
                2 => {
                    lens[i] = -1 - input.below(2) as i64;
                    format!("(negative lens at {i})")
                }
                3 => {
                    lens[i] = self.size as i64 - i64::from(steps.min(1024)) + 1;
                    format!("(lens at {i} + steps past the pool)")
                }
                _ => {
                    lens[i] += [1, -1][input.below(2)];
                    format!("(lens off by one at {i})")
                }
            };
        }
        let handle_case = if input.chance(16) {
            1 + input.below(3)
        } else {
            0
        };
        let passes = [(); 2].map(|_| self.pass(input));
        let lb = len_buf(lens.clone(), passes[0]);
        let mut lastb = IndexBuf::new(&last, self.wide, passes[1]);
        let call = format!(
            "reserve_decode(lens {lens:?}, last_loc {last:?}, steps {steps}, {passes:?}, \
             handle case {handle_case}) {corrupt}"
        );
        self.trace.push(call.clone());
        let snapshot_as_pool = self.saved.first().map(|s| s.snapshot.cast::<kvp_pool>());
        let pool = match handle_case {
            2 => ptr::null_mut(),
            3 => snapshot_as_pool.unwrap_or(ptr::null_mut()),
            _ => self.pool,
        };
        let mut handle: *mut kvp_decode_reservation = ptr::null_mut();
        let out: *mut *mut kvp_decode_reservation = if handle_case == 1 {
            ptr::null_mut()
        } else {
            &mut handle
        };
        let census = self.census_len();
        let before = self.model.clone();
        // SAFETY: live pool / NULL / a live handle of another kind; buffers hold `n`
        // elements (or are NULL / misaligned, refused); out NULL or writable.
        let got = unsafe { kvp_pool_reserve_decode(pool, lb.ptr(), lastb.ptr(), n, steps, out) };
        let handle_status = match handle_case {
            1 | 2 => Some(kvp_status::NullArgument),
            3 if snapshot_as_pool.is_some() => Some(kvp_status::InvalidArgument),
            3 => Some(kvp_status::NullArgument),
            _ => None,
        };
        if let Some(want) = handle_status {
            self.want_status(&call, got, want);
            self.unchanged = true;
        } else if let Some(want) =
            buffer_status(passes[0], n).or_else(|| buffer_status(passes[1], n))
        {
            // A refused reserve counts as a rejected call, not as a decode call.
            self.want_status(&call, got, want);
            self.count(None, got);
        } else {
            let want = self.model.reserve_decode(&lens, &last, steps);
            let want_status = want.as_ref().err().map_or(kvp_status::Ok, |&k| k.into());
            self.want_status(&call, got, want_status);
            self.count(None, got);
            if let Ok(res) = want {
                let flat: Vec<i64> = res.slots.iter().flatten().copied().collect();
                self.allocated(&flat, census);
                // The model's reservation is K plain decodes of the model.
                let mut twin = before.clone();
                let mut prev = last.clone();
                for (s, row) in res.slots.iter().enumerate() {
                    let seq: Vec<i64> = lens.iter().map(|&l| l + s as i64 + 1).collect();
                    let plain = twin.alloc_decode(&seq, &prev, n);
                    self.check(plain.as_ref() == Ok(row), || {
                        format!("model: reservation step {s} {row:?}, plain decode {plain:?}")
                    });
                    prev.clone_from(row);
                }
                self.resvs.push(Resv {
                    handle,
                    model: res,
                    rows: targets,
                    last,
                    clean: corrupt.is_empty(),
                    steps,
                    taken: 0,
                    before,
                    made_at: self.step,
                });
                if self.resvs.len() > 4 {
                    self.free_resv(0);
                }
            }
        }
        self.check(got == kvp_status::Ok || handle.is_null(), || {
            format!("failed {call} wrote its out-parameter")
        });
    }

    /// `kvp_decode_reservation_step`: exactly the model's next plain decode of the batch, to
    /// `out` and/or the table rows of the batch at `lens[i] + s`; past K, finished, stale,
    /// NULL, a pool handle as the reservation, bad buffers or table: the documented status,
    /// nothing written. A step changes nothing in the pool (digest).
    fn resv_step(&mut self, input: &mut Input) {
        self.resv_only = true;
        self.unchanged = true;
        let which = input.below(self.resvs.len() + 2);
        if which >= self.resvs.len() {
            let null = which == self.resvs.len();
            let mut out = [SENTINEL; 4];
            let h = if null {
                ptr::null_mut()
            } else {
                self.pool.cast::<kvp_decode_reservation>()
            };
            self.trace.push(format!("reservation_step(null {null})"));
            // SAFETY: NULL or a live handle of another kind (refused by its tag).
            let got = unsafe {
                kvp_decode_reservation_step(h, out.as_mut_ptr().cast(), 4, ptr::null(), ptr::null())
            };
            let want = if null {
                kvp_status::NullArgument
            } else {
                kvp_status::InvalidArgument
            };
            self.want_status("reservation_step (bad handle)", got, want);
            self.check(out == [SENTINEL; 4], || "refused step wrote".into());
            return;
        }
        self.sync_table();
        let r = &self.resvs[which];
        let batch = r.rows.len();
        let s = r.taken as usize;
        let with_table = input.chance(110);
        let out_pass = if with_table && input.chance(100) {
            Pass::Null
        } else {
            self.pass(input)
        };
        let out_len = if input.chance(24) {
            batch.saturating_sub(1)
        } else {
            batch + input.below(2)
        };
        let mut rows: Vec<i64> = r.rows.iter().map(|&x| x as i64).collect();
        let mut corrupt = String::new();
        if with_table && batch > 0 && input.chance(40) {
            let i = input.below(batch);
            if input.chance(128) {
                let j = input.below(batch);
                if j != i {
                    rows[j] = rows[i];
                    corrupt = format!("(rows[{j}] repeats rows[{i}])");
                }
            } else {
                rows[i] = [-1, self.table.rows as i64][input.below(2)];
                corrupt = format!("(rows[{i}] out of range)");
            }
        }
        let tp = if with_table {
            self.table_pass(input)
        } else {
            TablePass::NullDesc
        };
        let rows_pass = self.pass(input);
        let rb = len_buf(rows.clone(), rows_pass);
        let mut out = IndexBuf::output(out_len, self.wide, out_pass);
        let r = &self.resvs[which];
        let call = format!(
            "reservation_step({which}: taken {} of {}, live {}, out {out_pass:?} \
             len {out_len}, table {with_table} {tp:?}, rows {rows:?} {rows_pass:?}) {corrupt}",
            r.taken,
            r.steps,
            self.model.is_live(&r.model)
        );
        self.trace.push(call.clone());
        let handle = r.handle;
        let before = self.table.values();
        let desc = self.table_desc(tp);
        let dp: *const kvp_req_table = if with_table && tp != TablePass::NullDesc {
            &desc
        } else {
            ptr::null()
        };
        // SAFETY: a live reservation; buffers as stated (or NULL / misaligned, refused).
        let got = unsafe { kvp_decode_reservation_step(handle, out.ptr(), out_len, dp, rb.ptr()) };
        let r = &self.resvs[which];
        let out_given = out_pass != Pass::Null || dp.is_null();
        // Every refusal counts as a rejected call, those of the buffers too.
        let want = 'want: {
            if with_table && tp != TablePass::NullDesc {
                if let Some(st) = tp.status(self.table.rows) {
                    break 'want Err(st);
                }
            }
            if out_given {
                if let Some(st) = buffer_status(out_pass, out_len) {
                    break 'want Err(st);
                }
            }
            if !dp.is_null() {
                if let Some(st) = buffer_status(rows_pass, batch) {
                    break 'want Err(st);
                }
            }
            if !self.model.is_live(&r.model) || r.taken >= r.steps {
                break 'want Err(kvp_status::InvalidState);
            }
            if out_given && out_len < batch {
                break 'want Err(kvp_status::BufferTooSmall);
            }
            if !dp.is_null() {
                if let Some(st) = self.rows_status(&rows, true) {
                    break 'want Err(st);
                }
                if r.model
                    .lens
                    .iter()
                    .any(|&l| l as usize + s >= self.table.row_len)
                {
                    break 'want Err(kvp_status::BufferTooSmall);
                }
            }
            Ok(r.model.slots[s].clone())
        };
        let want_status = want.as_ref().err().copied().unwrap_or(kvp_status::Ok);
        self.want_status(&call, got, want_status);
        self.count(None, got);
        let r = &self.resvs[which];
        let now = self.table.values();
        match want {
            Err(_) => {
                self.check(now == before, || {
                    format!("failed {call} wrote to the table")
                });
                self.check(out.untouched(&vec![SENTINEL; out_len]), || {
                    format!("failed {call} wrote to its output")
                });
            }
            Ok(slots) => {
                let mut expect = before.clone();
                if !dp.is_null() {
                    for (i, &slot) in slots.iter().enumerate() {
                        let at = self
                            .table
                            .at(rows[i] as usize, r.model.lens[i] as usize + s);
                        expect[at] = if self.table.wide {
                            slot
                        } else {
                            i64::from(slot as i32)
                        };
                    }
                }
                self.check(now == expect, || {
                    format!("{call}: the table differs from the model's step {s} slots {slots:?}")
                });
                if out_pass == Pass::Valid {
                    let mut w = slots.clone();
                    w.resize(out_len + 1, SENTINEL);
                    let w: Vec<i64> = if self.wide {
                        w
                    } else {
                        w.iter().map(|&v| i64::from(v as i32)).collect()
                    };
                    let values = out.values();
                    self.check(values == w, || {
                        format!("{call}: out {values:?}, the model's step {s} is {slots:?}")
                    });
                }
                // The stepped slots lie in pages the live reservation holds (none of them
                // could be freed and handed to another request since the reservation), so
                // nobody holds them yet; now their requests do.
                let ps = self.ps as i64;
                let held = self.held.slots();
                for &slot in &slots {
                    self.check(self.model.is_held((slot / ps) as u64), || {
                        format!("{call}: model: slot {slot}'s page is not held")
                    });
                    self.check(!held.contains(&slot), || {
                        format!("{call}: slot {slot} stepped while a live allocation holds it")
                    });
                }
                r.credit(&mut self.held, s);
                self.resvs[which].taken += 1;
            }
        }
    }

    /// `kvp_decode_reservation_finish`: only with `steps_used` = the steps taken, the
    /// reservation's own pool, live and not stale; then the model's finish (unused pages to
    /// the front of the free list in taken order, partly used pages rewound). When nothing
    /// else touched the pool since the reservation (and without `need_sort`), the model must
    /// then be where `steps_used` plain decodes leave it.
    fn resv_finish(&mut self, input: &mut Input) {
        let which = input.below(self.resvs.len() + 2);
        if which >= self.resvs.len() {
            let null = which == self.resvs.len();
            let h = if null {
                ptr::null_mut()
            } else {
                self.pool.cast::<kvp_decode_reservation>()
            };
            self.trace
                .push(format!("reservation_finish(bad handle, null {null})"));
            // SAFETY: NULL or a live handle of another kind (refused by its tag).
            let got = unsafe { kvp_decode_reservation_finish(self.pool, h, 0) };
            let want = if null {
                kvp_status::NullArgument
            } else {
                kvp_status::InvalidArgument
            };
            self.want_status("reservation_finish (bad handle)", got, want);
            self.unchanged = true;
            return;
        }
        let pool_case = if input.chance(24) {
            1 + input.below(2)
        } else {
            0
        };
        let r = &self.resvs[which];
        let used = match input.below(8) {
            0 => r.taken + 1,
            1 => r.taken.wrapping_sub(1),
            2 => r.steps,
            _ => r.taken,
        };
        let live = self.model.is_live(&r.model);
        let call = format!(
            "reservation_finish({which}: taken {} of {}, live {live}, used {used}, \
             pool case {pool_case})",
            r.taken, r.steps
        );
        self.trace.push(call.clone());
        if pool_case == 2 && self.other.is_null() {
            self.other = new_pool(self.size, self.ps as u32, self.wide, false);
        }
        let pool = match pool_case {
            1 => ptr::null_mut(),
            2 => self.other,
            _ => self.pool,
        };
        let (handle, taken) = (r.handle, r.taken);
        self.census_before = self.census_len();
        // SAFETY: live handles or NULL.
        let got = unsafe { kvp_decode_reservation_finish(pool, handle, used) };
        let want = match pool_case {
            1 => Err(kvp_status::NullArgument),
            2 => Err(kvp_status::InvalidArgument),
            _ if !live => Err(kvp_status::InvalidState),
            _ if used != taken => Err(kvp_status::InvalidArgument),
            _ => self
                .model
                .finish_reservation(&mut self.resvs[which].model, used as usize)
                .map_err(kvp_status::from),
        };
        let want_status = want.err().unwrap_or(kvp_status::Ok);
        self.want_status(&call, got, want_status);
        if pool_case == 0 {
            self.count(None, got);
        } else {
            self.unchanged = true;
        }
        if got == kvp_status::Ok {
            self.freed_pages(self.census_before);
            // What the finish took back: the unused pages, and each partly used page past
            // its last used slot. Those pages were held since the reservation, and only the
            // slots of the steps taken were handed to anyone (their requests), so nobody
            // may hold one of the slots taken back.
            let ps = self.ps as i64;
            let r = &self.resvs[which];
            let u = used as usize;
            let unused: HashSet<i64> = r.model.pages[r.model.taken_by[u]..]
                .iter()
                .map(|&p| p as i64)
                .collect();
            let kept: Vec<i64> = if u < r.model.slots.len() && ps > 1 {
                (0..r.rows.len())
                    .filter(|&i| (r.model.lens[i] + u as i64) % ps != 0)
                    .map(|i| r.model.slots[u][i] - 1)
                    .collect()
            } else {
                Vec::new()
            };
            let stray: Vec<i64> = self
                .held
                .slots()
                .into_iter()
                .filter(|&s| {
                    unused.contains(&(s / ps)) || kept.iter().any(|&k| k / ps == s / ps && s > k)
                })
                .collect();
            self.check(stray.is_empty(), || {
                format!("{call}: took back slots {stray:?}, which live allocations hold")
            });
            let r = &self.resvs[which];
            if r.made_at == self.touched && !self.model.need_sort {
                let mut twin = r.before.clone();
                let mut prev = r.last.clone();
                for s in 0..used as usize {
                    let seq: Vec<i64> = r.model.lens.iter().map(|&l| l + s as i64 + 1).collect();
                    prev = twin.alloc_decode(&seq, &prev, seq.len()).unwrap();
                }
                let (a, b) = (twin.census(), self.model.census());
                self.check(a == b, || {
                    format!("model: free list {b:?} after finish({used}), {a:?} after as many plain decodes")
                });
            }
        }
    }

    /// `kvp_decode_reservation_get_info` (any reservation, finished or stale included; NULL
    /// out-parameters allowed; a NULL reservation refused, writing nothing).
    fn resv_info(&mut self, input: &mut Input) {
        self.resv_only = true;
        self.unchanged = true;
        let which = input.below(self.resvs.len() + 1);
        let (mut steps, mut batch, mut pages) = (7u32, 7usize, 7u64);
        let nulls = input.byte();
        let sp: *mut u32 = if nulls & 1 != 0 {
            ptr::null_mut()
        } else {
            &mut steps
        };
        let bp: *mut usize = if nulls & 2 != 0 {
            ptr::null_mut()
        } else {
            &mut batch
        };
        let pp: *mut u64 = if nulls & 4 != 0 {
            ptr::null_mut()
        } else {
            &mut pages
        };
        let h = self.resvs.get(which).map_or(ptr::null_mut(), |r| r.handle);
        self.trace
            .push(format!("reservation_get_info({which}, nulls {nulls:#x})"));
        // SAFETY: a live reservation or NULL; out-parameters NULL or writable.
        let got = unsafe { kvp_decode_reservation_get_info(h, sp, bp, pp) };
        match self.resvs.get(which) {
            None => {
                self.want_status("get_info(NULL)", got, kvp_status::NullArgument);
                self.check((steps, batch, pages) == (7, 7, 7), || {
                    "failed get_info wrote".into()
                });
            }
            Some(r) => {
                self.want_status("get_info", got, kvp_status::Ok);
                let want = (
                    if nulls & 1 != 0 { 7 } else { r.steps },
                    if nulls & 2 != 0 { 7 } else { r.rows.len() },
                    if nulls & 4 != 0 {
                        7
                    } else {
                        r.model.pages.len() as u64
                    },
                );
                self.check((steps, batch, pages) == want, || {
                    format!("get_info ({steps}, {batch}, {pages}), want {want:?}")
                });
            }
        }
    }

    /// A plain `kvp_pool_alloc_decode` of a request of a live reservation, continuing its
    /// last stepped slot (or its `last_loc` before the first step): refused with
    /// `INVALID_STATE` whenever that slot lies in a page the reservation holds (a stepped
    /// slot, or a partly filled last page the steps continue); in any case the model's
    /// answer.
    fn resv_plain_decode(&mut self, input: &mut Input) {
        let live: Vec<usize> = (0..self.resvs.len())
            .filter(|&i| {
                let r = &self.resvs[i];
                self.model.is_live(&r.model) && r.taken < r.steps && !r.rows.is_empty()
            })
            .collect();
        if live.is_empty() {
            return;
        }
        let r = &self.resvs[live[input.below(live.len())]];
        let i = input.below(r.rows.len());
        let len = r.model.lens[i] + i64::from(r.taken);
        let last = if r.taken == 0 {
            r.last[i]
        } else {
            r.model.slots[r.taken as usize - 1][i]
        };
        let held = len > 0 && (r.taken > 0 || len % self.ps as i64 != 0);
        let call = format!("alloc_decode of reserved request (len {len}, last_loc {last})");
        self.trace.push(call.clone());
        let mut lb = IndexBuf::new(&[last], self.wide, Pass::Valid);
        let mut out = IndexBuf::output(1, self.wide, Pass::Valid);
        let census = self.census_len();
        let seq = [len + 1];
        // SAFETY: buffers of one element.
        let got =
            unsafe { kvp_pool_alloc_decode(self.pool, seq.as_ptr(), lb.ptr(), 1, out.ptr(), 1) };
        let want = self
            .model
            .alloc_decode(&seq, &[last], 1)
            .map_err(kvp_status::from);
        if held {
            self.check(want == Err(kvp_status::InvalidState), || {
                format!("{call}: the model says {want:?}, but the reservation holds its page")
            });
        }
        self.finish_alloc(
            "alloc_decode (reserved)",
            got,
            want,
            &out,
            1,
            census,
            |run, slots| {
                run.held.blocks.push(slots.to_vec());
            },
        );
        self.count(Some(|s| &mut s.alloc_decode_calls), got);
    }

    /// Frees a reservation handle (finished or not: an unfinished one keeps its pages), or
    /// passes a reservation of another pool to `finish`, a reservation as a pool, a snapshot
    /// as a reservation.
    fn resv_misc(&mut self, input: &mut Input) {
        self.unchanged = true;
        match input.below(4) {
            0 => {
                if !self.resvs.is_empty() {
                    let i = input.below(self.resvs.len());
                    self.free_resv(i);
                }
                // SAFETY: NULL is a no-op.
                unsafe { kvp_decode_reservation_free(ptr::null_mut()) };
            }
            1 => {
                if self.other.is_null() {
                    self.other = new_pool(self.size, self.ps as u32, self.wide, false);
                }
                self.trace
                    .push("finish(pool, reservation of another pool)".into());
                let mut h = ptr::null_mut();
                let steps = 1 + input.below(4) as u32;
                // SAFETY: live pool; an empty batch; writable out-parameter.
                let s = unsafe {
                    kvp_pool_reserve_decode(self.other, ptr::null(), ptr::null(), 0, steps, &mut h)
                };
                self.want_status("reserve_decode (other pool)", s, kvp_status::Ok);
                // SAFETY: live handles.
                let got = unsafe { kvp_decode_reservation_finish(self.pool, h, 0) };
                self.want_status(
                    "finish of another pool's reservation",
                    got,
                    kvp_status::InvalidArgument,
                );
                // SAFETY: live handles; the reservation is not used afterwards.
                let s = unsafe { kvp_decode_reservation_finish(self.other, h, 0) };
                self.want_status("finish (other pool)", s, kvp_status::Ok);
                // SAFETY: as above.
                unsafe { kvp_decode_reservation_free(h) };
            }
            2 => {
                let Some(r) = self.resvs.first() else {
                    return;
                };
                self.trace
                    .push("available_size(reservation as pool)".into());
                let mut n = 7u64;
                // SAFETY: a live handle of another kind (refused by its tag).
                let got = unsafe { kvp_pool_available_size(r.handle.cast::<kvp_pool>(), &mut n) };
                self.want_status(
                    "available_size(reservation)",
                    got,
                    kvp_status::InvalidArgument,
                );
                self.check(n == 7, || "refused available_size wrote".into());
            }
            _ => {
                let Some(saved) = self.saved.first() else {
                    return;
                };
                self.trace
                    .push("reservation_step(snapshot as reservation)".into());
                let mut out = [SENTINEL; 2];
                // SAFETY: a live handle of another kind (refused by its tag).
                let got = unsafe {
                    kvp_decode_reservation_step(
                        saved.snapshot.cast::<kvp_decode_reservation>(),
                        out.as_mut_ptr().cast(),
                        2,
                        ptr::null(),
                        ptr::null(),
                    )
                };
                self.want_status("step(snapshot)", got, kvp_status::InvalidArgument);
                self.check(out == [SENTINEL; 2], || "refused step wrote".into());
            }
        }
    }

    /// `kvp_decode_reservation_free` of reservation `i`, forgotten after this. A live one
    /// ends its holds and its pages stay allocated as if every reserved step had run
    /// (`Model::abandon_reservation`): the slots of the steps not taken go to its requests
    /// (nothing changes in the pool's digest or counters). A finished or stale one changes
    /// nothing.
    fn free_resv(&mut self, i: usize) {
        let mut r = self.resvs.remove(i);
        let live = self.model.is_live(&r.model);
        self.trace.push(format!(
            "reservation_free({i}: taken {} of {}, live {live})",
            r.taken, r.steps
        ));
        // SAFETY: a live reservation handle, forgotten after this.
        unsafe { kvp_decode_reservation_free(r.handle) };
        if live {
            for s in r.taken as usize..r.model.slots.len() {
                r.credit(&mut self.held, s);
            }
            self.model.abandon_reservation(&mut r.model);
        }
    }

    /// Whether a live reservation of a nonempty batch holds pages (no input byte is read
    /// for [`reserved_pick`](Self::reserved_pick) otherwise, so inputs without one decode
    /// as before).
    fn any_held(&self) -> bool {
        self.resvs
            .iter()
            .any(|r| !r.rows.is_empty() && self.model.is_live(&r.model))
    }

    /// Slots of a live reservation's batch, to aim a free, rewind or continuation at the
    /// pages it holds: a request's whole row as if every reserved step had run (its tracked
    /// row up to the reservation, when that is where the reservation started it, then the
    /// slot of every step), one step's slots, or one slot of any step.
    fn reserved_pick(&self, input: &mut Input) -> Option<Vec<i64>> {
        let live: Vec<&Resv> = self
            .resvs
            .iter()
            .filter(|r| !r.rows.is_empty() && self.model.is_live(&r.model))
            .collect();
        if live.is_empty() {
            return None;
        }
        let r = live[input.below(live.len())];
        let i = input.below(r.rows.len());
        let steps = r.model.slots.len();
        Some(match input.below(3) {
            0 => {
                let len = r.model.lens[i] as usize;
                let mut row = match self.held.rows.get(r.rows[i]) {
                    Some(row)
                        if r.clean
                            && row.len() >= len
                            && (len == 0 || row[len - 1] == r.last[i]) =>
                    {
                        row[..len].to_vec()
                    }
                    _ => Vec::new(),
                };
                row.extend(r.model.slots.iter().map(|step| step[i]));
                row
            }
            1 => r.model.slots[input.below(steps)].clone(),
            _ => vec![r.model.slots[input.below(steps)][i]],
        })
    }

    /// One slot of a live reservation's batch (see [`reserved_pick`](Self::reserved_pick)).
    fn reserved_slot(&self, input: &mut Input) -> Option<i64> {
        let pick = self.reserved_pick(input)?;
        pick.get(input.below(pick.len())).copied()
    }

    // ---- frees -----------------------------------------------------------------------

    /// Takes a tracked row or block (or an empty one) for a free, at times slots of a live
    /// reservation's batch; says which.
    fn pick_holding(&self, input: &mut Input) -> Vec<i64> {
        if self.any_held() && input.chance(64) {
            if let Some(pick) = self.reserved_pick(input) {
                return pick;
            }
        }
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
        if self.any_held() && input.chance(64) {
            // A slot of a live reservation's batch (a held page).
            if let Some(s) = self.reserved_slot(input) {
                let pos = input.below(kept.len() + 1);
                kept.insert(pos, s);
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
                    // The model's restore also ends every hold: reservations are stale.
                    let s = &self.saved[want_model.unwrap()];
                    self.model.restore(&s.model);
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
                let known = kvp_debug::StreamOrder as u32 | kvp_debug::ReplayCalls as u32;
                let flags = match input.below(6) {
                    0 => 0,
                    1 => kvp_debug::StreamOrder as u32,
                    2 => 1u32 << (1 + input.below(31)),
                    3 => u32::MAX,
                    4 => kvp_debug::ReplayCalls as u32,
                    _ => u32::from(input.byte()),
                };
                let null = input.chance(32);
                let target = if null { ptr::null_mut() } else { self.pool };
                // SAFETY: live pool or NULL.
                let got = unsafe { kvp_pool_set_debug(target, flags) };
                let want = if null {
                    kvp_status::NullArgument
                } else if flags & !known != 0 {
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
        // The restore ends every hold: reservations are stale.
        let now = self.model.clone();
        self.model.restore(&now);
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
            for r in self.resvs.drain(..) {
                kvp_decode_reservation_free(r.handle);
            }
            kvp_pool_free(self.pool);
            kvp_pool_free(self.other);
        }
    }
}
