//! Soak: long runs of random valid and invalid operations on host pools, checked against
//! cheap invariants instead of a reference model, so that 10^8 operations are affordable.
//!
//! The "engine" keeps its requests' slot rows and raw `alloc` blocks, and a shadow of the
//! pool: an ownership bit per slot, a count of owned slots per page, the pages freed inside
//! the open free group, and the number of free pages that follow from those. Checked after
//! every call, O(1) or O(slots the call touched):
//!
//! - every slot handed out lies in `page_size .. size + page_size` and was not owned (no
//!   slot is ever live twice), new pages are ones the engine holds nothing of and that are
//!   not waiting in the free group, and the index math is SGLang's (a continuation goes on
//!   at `last_loc + 1`, a new page starts at its first slot, a page's slots are consecutive);
//! - a valid call succeeds (an allocation may only run short), an invalid one fails with
//!   the expected error kind;
//! - `available_size` and `pages_in_use` equal what the shadow says, so a failed call that
//!   changed something or a free that lost a page shows at once.
//!
//! Every `KVPOOL_SOAK_CHECK_EVERY` calls (default 1000) and at the end of each round, a
//! full check: the free-page census (free list plus staged pages) is exactly the pages the
//! shadow has free, without duplicates; each held page's fill point equals the slots the
//! engine holds in it and those are its first slots; the pool's scratch marks are clear.
//! Each round ends by freeing everything: the pool must be full again.
//!
//! Configurations cycle over page sizes 1/4/16/64, `need_sort` off and on, `int64` and
//! `int32` indices; operations cover `alloc`, `alloc_extend` (batches of new requests and
//! continuations), `alloc_decode`, the three frees, truncation, rewinds after rejected
//! draft tokens, free groups, snapshots and restores, merges, `clear`, and invalid inputs
//! (duplicates, free pages, padding and out-of-range indices, stale `last_loc`s and ones
//! in pages the engine does not hold, two requests continuing one page, rewinds ahead of
//! the fill point or in pages not held, bad lengths and buffers, unaligned sizes, nested
//! groups, foreign snapshots, snapshots inside a group).
//!
//! `KVPOOL_SOAK_OPS` sets the number of pool calls (default 10^6 in release builds, 10^5
//! in debug ones); `KVPOOL_SOAK_SEED` the first seed. The figure in BENCHMARKS.md came
//! from `KVPOOL_SOAK_OPS=100000000 cargo test --release --test soak -- --nocapture`.

mod rng;

use std::time::Instant;

use kvpool::{ErrorKind, IndexType, Pool, PoolConfig, PoolError, SlotIndex, Snapshot};
use rng::Rng;

/// Pool calls per round (one fresh pool per round, configurations in turn); fewer when the
/// whole run is shorter than `CONFIGS` such rounds.
const ROUND_OPS: u64 = 200_000;
/// Violations printed in full; later ones are only counted.
const PRINTED: u64 = 20;

/// The engine's view of the pool, restored together with a snapshot.
#[derive(Clone)]
struct Shadow<I> {
    rows: Vec<Vec<I>>,
    blocks: Vec<Vec<I>>,
    /// One flag per slot: handed out and not freed.
    owned: Vec<bool>,
    /// Owned slots per page (also the page's fill point: a page's owned slots are its first).
    held: Vec<u32>,
    /// Pages neither held nor waiting in the free group: what the pool must have free.
    free_pages: u64,
}

struct Soak<I: SlotIndex> {
    pool: Pool,
    /// A snapshot of another pool, for the foreign-restore case.
    foreign: Snapshot,
    ps: u64,
    num_pages: u64,
    size: u64,
    max_extend: u64,
    rng: Rng,
    s: Shadow<I>,
    /// Pages freed inside the open free group, returned to the pool at its end.
    pending: Vec<u32>,
    in_pending: Vec<bool>,
    in_group: bool,
    saved: Option<(Snapshot, Shadow<I>)>,
    check_every: u64,
    label: String,
    ops: u64,
    violations: u64,
}

fn kind<T>(r: Result<T, PoolError>) -> Result<T, ErrorKind> {
    r.map_err(|e| e.kind())
}

impl<I: SlotIndex> Soak<I> {
    fn new(seed: u64, ps: u64, num_pages: u64, need_sort: bool, check_every: u64) -> Self {
        let index_type = if I::MAX == i32::MAX as u64 {
            IndexType::I32
        } else {
            IndexType::I64
        };
        let config = |size| PoolConfig {
            size,
            page_size: ps as u32,
            need_sort,
            index_type,
            ..PoolConfig::default()
        };
        let size = num_pages * ps;
        let other = Pool::new(config(ps)).unwrap();
        Self {
            pool: Pool::new(config(size)).unwrap(),
            foreign: other.backup_state().unwrap(),
            ps,
            num_pages,
            size,
            max_extend: (size / 8).max(2),
            rng: Rng(seed),
            s: Shadow {
                rows: Vec::new(),
                blocks: Vec::new(),
                owned: vec![false; (size + ps) as usize],
                held: vec![0; num_pages as usize + 1],
                free_pages: num_pages,
            },
            pending: Vec::new(),
            in_pending: vec![false; num_pages as usize + 1],
            in_group: false,
            saved: None,
            check_every,
            label: format!(
                "ps {ps} need_sort {need_sort} {} seed {seed}",
                if index_type == IndexType::I32 {
                    "int32"
                } else {
                    "int64"
                }
            ),
            ops: 0,
            violations: 0,
        }
    }

    fn violation(&mut self, what: std::fmt::Arguments) {
        self.violations += 1;
        if self.violations <= PRINTED {
            eprintln!("VIOLATION ({}, call #{}): {what}", self.label, self.ops);
        }
    }

    fn slot(v: I) -> u64 {
        v.get() as u64
    }

    fn idx(v: i64) -> I {
        I::from_slot(v as u64)
    }

    // ---- shadow bookkeeping -----------------------------------------------------------

    /// Records a slot handed out; `fresh` says it must start or lie in a page the engine
    /// held nothing of before this call.
    fn own(&mut self, v: I) {
        let slot = v.get();
        if slot < self.ps as i64 || slot as u64 >= self.size + self.ps {
            return self.violation(format_args!("slot {slot} handed out is out of range"));
        }
        let slot = slot as u64;
        let page = (slot / self.ps) as usize;
        if self.s.owned[slot as usize] {
            return self.violation(format_args!("slot {slot} handed out while live"));
        }
        if self.in_pending[page] {
            return self.violation(format_args!(
                "slot {slot} handed out from page {page}, freed in the open group"
            ));
        }
        self.s.owned[slot as usize] = true;
        self.s.held[page] += 1;
        if self.s.held[page] == 1 {
            self.s.free_pages -= 1;
        }
    }

    /// Records a slot given back (freed with its page, or rewound).
    fn disown(&mut self, v: I) {
        let slot = Self::slot(v) as usize;
        assert!(
            self.s.owned[slot],
            "soak bug: disowning unowned slot {slot}"
        );
        self.s.owned[slot] = false;
        self.s.held[slot / self.ps as usize] -= 1;
    }

    /// Records pages freed by a successful free call (their slots already disowned).
    fn pages_freed(&mut self, pages: &[u32]) {
        for &page in pages {
            assert_eq!(self.s.held[page as usize], 0, "soak bug: partial page free");
            if self.in_group {
                self.in_pending[page as usize] = true;
                self.pending.push(page);
            } else {
                self.s.free_pages += 1;
            }
        }
    }

    fn distinct_pages(&self, slots: &[I]) -> Vec<u32> {
        let mut pages: Vec<u32> = slots
            .iter()
            .map(|&v| (Self::slot(v) / self.ps) as u32)
            .collect();
        pages.sort_unstable();
        pages.dedup();
        pages
    }

    /// Checks that `slot` may start a new page: page-aligned, in a page the engine holds
    /// nothing of.
    fn check_new_page(&mut self, v: I, what: &str) {
        let slot = v.get();
        if slot < 0 || slot as u64 >= self.size + self.ps {
            return; // reported by own()
        }
        let slot = slot as u64;
        if !slot.is_multiple_of(self.ps) {
            return self.violation(format_args!("{what}: new page starts at slot {slot}"));
        }
        if self.s.held[(slot / self.ps) as usize] != 0 {
            self.violation(format_args!(
                "{what}: page {} handed out again while held",
                slot / self.ps
            ));
        }
    }

    /// Takes slots `out` as the growth of a row from `prefix` tokens ending at `last`,
    /// checking SGLang's index math.
    fn take_growth(&mut self, prefix: u64, last: i64, out: &[I], what: &str) {
        let ps = self.ps;
        let mut prev = last;
        for (k, &v) in out.iter().enumerate() {
            let t = prefix + k as u64;
            if t.is_multiple_of(ps) {
                self.check_new_page(v, what);
            } else if v.get() != prev + 1 {
                self.violation(format_args!(
                    "{what}: token {t} got slot {} after slot {prev}",
                    v.get()
                ));
            }
            prev = v.get();
            self.own(v);
        }
    }

    // ---- checks after every call ------------------------------------------------------

    /// O(1): the pool's counts agree with the shadow.
    fn check_counts(&mut self, what: &str) {
        let available = self.pool.available_size();
        let expected = self.s.free_pages * self.ps;
        if available != expected {
            self.violation(format_args!(
                "after {what}: available {available}, shadow says {expected}"
            ));
        }
        let in_use = self.pool.stats().pages_in_use;
        if in_use != self.num_pages - self.s.free_pages {
            self.violation(format_args!(
                "after {what}: pages_in_use {in_use}, shadow says {}",
                self.num_pages - self.s.free_pages
            ));
        }
    }

    /// A valid call must succeed (allocations may run short).
    fn expect_ok<T>(&mut self, what: &str, r: &Result<T, ErrorKind>, may_run_short: bool) {
        match r {
            Ok(_) => {}
            Err(ErrorKind::OutOfSlots) if may_run_short => {}
            Err(e) => self.violation(format_args!("valid {what} failed with {e:?}")),
        }
    }

    /// An invalid call must fail with `want`.
    fn expect_err<T>(&mut self, what: &str, r: Result<T, ErrorKind>, want: ErrorKind) {
        match r {
            Err(got) if got == want => {}
            Err(got) => self.violation(format_args!("{what} failed with {got:?}, not {want:?}")),
            Ok(_) => self.violation(format_args!("{what} was accepted")),
        }
    }

    /// O(size): census, fill points, scratch marks.
    fn full_check(&mut self) {
        let mut census = self.pool.free_page_census();
        census.sort_unstable();
        let len = census.len();
        census.dedup();
        if census.len() != len {
            self.violation(format_args!("a page is on the free list twice"));
        }
        let expected: Vec<u32> = (1..=self.num_pages as u32)
            .filter(|&p| self.s.held[p as usize] == 0 && !self.in_pending[p as usize])
            .collect();
        if census != expected {
            self.violation(format_args!(
                "free-page census ({} pages) differs from the shadow ({} pages)",
                census.len(),
                expected.len()
            ));
        }
        for page in 1..=self.num_pages as usize {
            let held = self.s.held[page];
            if held == 0 {
                continue;
            }
            let fill = self.pool.storage().page_fill(page as u32).unwrap();
            if fill != held {
                self.violation(format_args!(
                    "page {page}: fill point {fill}, engine holds {held} slots"
                ));
            }
            let first = page * self.ps as usize;
            if (0..self.ps as usize).any(|k| self.s.owned[first + k] != (k < held as usize)) {
                self.violation(format_args!("page {page}: held slots are not its first"));
            }
        }
        if !self.pool.storage().scratch_is_clear() {
            self.violation(format_args!("scratch marks left set"));
        }
        self.check_counts("full check");
    }

    // ---- valid operations -------------------------------------------------------------

    fn pick_row(&mut self) -> Option<usize> {
        (!self.s.rows.is_empty()).then(|| self.rng.below(self.s.rows.len() as u64) as usize)
    }

    fn last_loc(row: &[I]) -> i64 {
        row.last().map_or(-1, |v| v.get())
    }

    fn extend(&mut self) {
        let mut prefix = Vec::new();
        let mut seq = Vec::new();
        let mut last_loc = Vec::new();
        let mut targets = Vec::new();
        for _ in 0..=self.rng.below(6) {
            let existing = self.pick_row().filter(|_| self.rng.chance(50));
            let (len, last) = match existing {
                Some(r) if !targets.contains(&Some(r)) => {
                    let row = &self.s.rows[r];
                    (row.len() as i64, Self::last_loc(row))
                }
                Some(_) => continue,
                None => (0, -1),
            };
            let grow = self.rng.below(self.max_extend / 4 + 1) as i64;
            prefix.push(len);
            seq.push(len + grow);
            last_loc.push(Self::idx(last));
            targets.push(existing);
        }
        let total: u64 = seq.iter().zip(&prefix).map(|(s, p)| (s - p) as u64).sum();
        let mut out = vec![I::from_slot(0); total as usize];
        let r = kind(
            self.pool
                .alloc_extend(&prefix, &seq, &last_loc, total, &mut out),
        );
        self.expect_ok("alloc_extend", &r, true);
        if r.is_ok() {
            let mut pos = 0;
            for (i, target) in targets.into_iter().enumerate() {
                let n = (seq[i] - prefix[i]) as usize;
                let slots = &out[pos..pos + n];
                pos += n;
                self.take_growth(prefix[i] as u64, last_loc[i].get(), slots, "alloc_extend");
                match target {
                    Some(r) => self.s.rows[r].extend_from_slice(slots),
                    None => self.s.rows.push(slots.to_vec()),
                }
            }
        }
    }

    fn decode(&mut self) {
        let mut rows: Vec<usize> = (0..self.s.rows.len()).collect();
        rows.retain(|_| self.rng.chance(60));
        let seq: Vec<i64> = rows
            .iter()
            .map(|&r| self.s.rows[r].len() as i64 + 1)
            .collect();
        let last_loc: Vec<I> = rows
            .iter()
            .map(|&r| Self::idx(Self::last_loc(&self.s.rows[r])))
            .collect();
        let mut out = vec![I::from_slot(0); seq.len()];
        let r = kind(self.pool.alloc_decode(&seq, &last_loc, &mut out));
        self.expect_ok("alloc_decode", &r, true);
        if r.is_ok() {
            for (i, &row) in rows.iter().enumerate() {
                self.take_growth(
                    seq[i] as u64 - 1,
                    last_loc[i].get(),
                    &out[i..=i],
                    "alloc_decode",
                );
                self.s.rows[row].push(out[i]);
            }
        }
    }

    fn alloc_block(&mut self) {
        let n = self.rng.below(self.max_extend / self.ps / 2 + 1) * self.ps;
        let mut out = vec![I::from_slot(0); n as usize];
        let r = kind(self.pool.alloc(n as usize, &mut out));
        self.expect_ok("alloc", &r, true);
        if r.is_ok() {
            self.take_growth(0, -1, &out, "alloc");
            self.s.blocks.push(out);
        }
    }

    /// Finishes a request or drops a block, freeing by index, page id or segment.
    fn finish(&mut self) {
        let slots = if !self.s.blocks.is_empty() && self.rng.chance(30) {
            let i = self.rng.below(self.s.blocks.len() as u64) as usize;
            self.s.blocks.swap_remove(i)
        } else if let Some(r) = self.pick_row() {
            self.s.rows.swap_remove(r)
        } else {
            return;
        };
        let pages = self.distinct_pages(&slots);
        let r = match self.rng.below(3) {
            0 => kind(self.pool.free(&slots)),
            1 => {
                let ids: Vec<I> = pages.iter().map(|&p| I::from_slot(u64::from(p))).collect();
                kind(self.pool.free_pages(&ids))
            }
            _ => kind(self.pool.free_segment(&slots, 0, slots.len())),
        };
        self.expect_ok("free", &r, false);
        if r.is_ok() {
            for &v in &slots {
                self.disown(v);
            }
            self.pages_freed(&pages);
        } else {
            self.s.blocks.push(slots);
        }
    }

    /// Releases a request's tail from a page boundary (over-allocation release).
    fn truncate(&mut self) {
        let Some(r) = self.pick_row() else { return };
        let len = self.s.rows[r].len() as u64;
        if len == 0 {
            return;
        }
        let start = (self.rng.below(len) / self.ps * self.ps) as usize;
        self.free_tail(r, start);
    }

    fn free_tail(&mut self, r: usize, start: usize) {
        let row = std::mem::take(&mut self.s.rows[r]);
        let n = row.len() - start;
        let res = kind(self.pool.free_segment(&row, start, n));
        self.expect_ok("free_segment (tail)", &res, false);
        if res.is_ok() {
            let pages = self.distinct_pages(&row[start..]);
            for &v in &row[start..] {
                self.disown(v);
            }
            self.pages_freed(&pages);
            self.s.rows[r] = row[..start].to_vec();
        } else {
            self.s.rows[r] = row;
        }
    }

    /// Rejects a request's last tokens (speculative decoding): frees the pages holding only
    /// rejected tokens, rewinds the page of the last kept one.
    fn rewind(&mut self) {
        let Some(r) = self.pick_row() else { return };
        let len = self.s.rows[r].len();
        if len == 0 {
            return;
        }
        let kept = 1 + self.rng.below(len as u64) as usize;
        let cut = kept.div_ceil(self.ps as usize) * self.ps as usize;
        if cut < len {
            self.free_tail(r, cut);
            self.ops += 1;
            self.check_counts("free_segment (rejected pages)");
        }
        let row = &self.s.rows[r];
        if row.len() != cut.min(len) {
            return; // the free failed (already reported)
        }
        let last_kept = [row[kept - 1]];
        let res = kind(self.pool.rewind(&last_kept));
        self.expect_ok("rewind", &res, false);
        if res.is_ok() {
            let dropped: Vec<I> = self.s.rows[r][kept..].to_vec();
            for v in dropped {
                self.disown(v);
            }
            self.s.rows[r].truncate(kept);
        }
    }

    fn group(&mut self) {
        if self.in_group {
            let r = kind(self.pool.free_group_end());
            self.expect_ok("free_group_end", &r, false);
            if r.is_ok() {
                self.in_group = false;
                for page in std::mem::take(&mut self.pending) {
                    self.in_pending[page as usize] = false;
                    self.s.free_pages += 1;
                }
            }
        } else {
            let r = kind(self.pool.free_group_begin());
            self.expect_ok("free_group_begin", &r, false);
            self.in_group |= r.is_ok();
        }
    }

    fn snapshot(&mut self) {
        if self.in_group {
            let r = kind(self.pool.backup_state());
            return self.expect_err("backup_state in a group", r, ErrorKind::InvalidState);
        }
        if self.saved.is_some() && self.rng.chance(50) {
            let (snapshot, shadow) = self.saved.as_ref().unwrap();
            let r = kind(self.pool.restore_state(snapshot));
            if r.is_ok() {
                self.s = shadow.clone();
            }
            self.expect_ok("restore_state", &r, false);
            if self.rng.chance(50) {
                self.saved = None;
            }
        } else {
            let r = kind(self.pool.backup_state());
            self.expect_ok("backup_state", &r, false);
            if let Ok(snapshot) = r {
                self.saved = Some((snapshot, self.s.clone()));
            }
        }
    }

    fn clear(&mut self) {
        self.pool.clear();
        self.s.rows.clear();
        self.s.blocks.clear();
        self.s.owned.iter_mut().for_each(|o| *o = false);
        self.s.held.iter_mut().for_each(|h| *h = 0);
        self.s.free_pages = self.num_pages;
        for page in std::mem::take(&mut self.pending) {
            self.in_pending[page as usize] = false;
        }
        self.in_group = false;
    }

    // ---- invalid operations: each must fail with its kind and change nothing -----------

    /// A page the engine holds nothing of (free, staged or pending in the group), if one is
    /// found in a few tries.
    fn unheld_page(&mut self) -> Option<u64> {
        (0..8)
            .map(|_| 1 + self.rng.below(self.num_pages))
            .find(|&p| self.s.held[p as usize] == 0)
    }

    fn bad_input(&mut self) {
        let ps = self.ps as i64;
        let size = self.size as i64;
        let zero = I::from_slot(0);
        match self.rng.below(16) {
            0 => {
                let Some(r) = self.pick_row() else { return };
                let Some(&first) = self.s.rows[r].first() else {
                    return;
                };
                let mut indices = self.s.rows[r].clone();
                indices.push(first);
                let r = kind(self.pool.free(&indices));
                self.expect_err("free (duplicate)", r, ErrorKind::DoubleFree);
            }
            1 => {
                let Some(page) = self.unheld_page() else {
                    return;
                };
                let index = [Self::idx(page as i64 * ps + self.rng.below(self.ps) as i64)];
                let r = kind(self.pool.free(&index));
                self.expect_err("free (page not held)", r, ErrorKind::DoubleFree);
            }
            2 => {
                let (bad, want) = match self.rng.below(4) {
                    0 => (0, ErrorKind::ReservedSlot),
                    1 if ps > 1 => (ps - 1, ErrorKind::ReservedSlot),
                    2 => (-3, ErrorKind::IndexOutOfRange),
                    _ => (size + ps + 7, ErrorKind::IndexOutOfRange),
                };
                let r = kind(self.pool.free(&[Self::idx(bad)]));
                self.expect_err("free (padding or out of range)", r, want);
            }
            3 => {
                let (bad, want) = if self.rng.chance(50) {
                    (0, ErrorKind::ReservedSlot)
                } else {
                    (size / ps + 1, ErrorKind::IndexOutOfRange)
                };
                let r = kind(self.pool.free_pages(&[Self::idx(bad)]));
                self.expect_err("free_pages (page 0 or out of range)", r, want);
            }
            4 => {
                let Some(r) = self.pick_row() else { return };
                let len = self.s.rows[r].len() as i64;
                let last = [Self::idx(Self::last_loc(&self.s.rows[r]))];
                let r = kind(
                    self.pool
                        .alloc_extend(&[len], &[len - 1], &last, 0, &mut []),
                );
                self.expect_err("alloc_extend (seq < prefix)", r, ErrorKind::InvalidLengths);
            }
            5 => {
                let mut out = [zero; 4];
                let r = kind(
                    self.pool
                        .alloc_extend(&[0], &[3], &[Self::idx(-1)], 4, &mut out),
                );
                self.expect_err("alloc_extend (total)", r, ErrorKind::InvalidLengths);
            }
            6 => {
                let mut out = [zero; 2];
                let r = kind(
                    self.pool
                        .alloc_extend(&[0], &[3], &[Self::idx(-1)], 3, &mut out),
                );
                self.expect_err("alloc_extend (buffer)", r, ErrorKind::BufferTooSmall);
            }
            7 => {
                // A stale last_loc: one slot before the request's last, in the same page.
                let Some(r) = self.pick_row() else { return };
                let row = &self.s.rows[r];
                let len = row.len();
                if len < 2 || (len as u64 - 1).is_multiple_of(self.ps) {
                    return;
                }
                let stale = [row[len - 2]];
                let mut out = [zero; 2];
                let (prefix, seq) = ([len as i64 - 1], [len as i64 + 1]);
                let r = kind(self.pool.alloc_extend(&prefix, &seq, &stale, 2, &mut out));
                self.expect_err(
                    "alloc_extend (stale last_loc)",
                    r,
                    ErrorKind::LastLocMismatch,
                );
            }
            8 => {
                // A decode whose last_loc lies in a page the engine does not hold.
                let Some(page) = self.unheld_page() else {
                    return;
                };
                let last = page as i64 * ps + ps - 1;
                let seq = [ps + 1];
                let want = if self.s.owned.get(last as usize) == Some(&true) {
                    return;
                } else {
                    ErrorKind::NotAllocated
                };
                let mut out = [zero; 1];
                let r = kind(self.pool.alloc_decode(&seq, &[Self::idx(last)], &mut out));
                self.expect_err("alloc_decode (last_loc in a free page)", r, want);
            }
            9 => {
                // Two requests continuing one page.
                let Some(r) = self.pick_row() else { return };
                let row = &self.s.rows[r];
                let len = row.len() as i64;
                if len == 0 || len % ps == 0 {
                    return;
                }
                let last = Self::idx(Self::last_loc(row));
                let mut out = [zero; 2];
                let r = kind(self.pool.alloc_extend(
                    &[len, len],
                    &[len + 1, len + 1],
                    &[last, last],
                    2,
                    &mut out,
                ));
                self.expect_err(
                    "alloc_extend (one page twice)",
                    r,
                    ErrorKind::LastLocMismatch,
                );
            }
            10 => {
                // A rewind ahead of the fill point.
                let Some(r) = self.pick_row() else { return };
                let Some(&last) = self.s.rows[r].last() else {
                    return;
                };
                if (Self::slot(last) + 1) % self.ps == 0 {
                    return;
                }
                let ahead = [Self::idx(last.get() + 1)];
                let r = kind(self.pool.rewind(&ahead));
                self.expect_err("rewind (ahead)", r, ErrorKind::LastLocMismatch);
            }
            11 => {
                let Some(page) = self.unheld_page() else {
                    return;
                };
                let r = kind(self.pool.rewind(&[Self::idx(page as i64 * ps)]));
                self.expect_err("rewind (page not held)", r, ErrorKind::NotAllocated);
            }
            12 => {
                let r = if self.in_group {
                    kind(self.pool.free_group_begin())
                } else {
                    kind(self.pool.free_group_end())
                };
                self.expect_err("free group (nested or none)", r, ErrorKind::InvalidState);
            }
            13 => {
                if ps == 1 {
                    return;
                }
                let n = self.ps as usize + 1;
                let r = kind(self.pool.alloc(n, &mut vec![zero; n]));
                self.expect_err("alloc (unaligned)", r, ErrorKind::Unaligned);
            }
            14 => {
                let r = kind(self.pool.restore_state(&self.foreign));
                self.expect_err("restore_state (foreign)", r, ErrorKind::ForeignSnapshot);
            }
            _ => {
                let r = kind(self.pool.alloc_decode(&[0], &[Self::idx(-1)], &mut [zero]));
                self.expect_err("alloc_decode (seq_len 0)", r, ErrorKind::InvalidLengths);
            }
        }
    }

    fn step(&mut self) {
        let what = match self.rng.below(1000) {
            0..=199 => {
                self.extend();
                "alloc_extend"
            }
            200..=339 => {
                self.decode();
                "alloc_decode"
            }
            340..=539 => {
                self.finish();
                "free"
            }
            540..=569 => {
                self.truncate();
                "truncate"
            }
            570..=609 => {
                self.rewind();
                "rewind"
            }
            610..=669 => {
                self.alloc_block();
                "alloc"
            }
            670..=719 => {
                self.group();
                "free group"
            }
            720..=729 => {
                self.snapshot();
                "snapshot"
            }
            730..=749 => {
                self.pool.merge_and_sort_free();
                "merge_and_sort_free"
            }
            750 => {
                self.clear();
                "clear"
            }
            _ => {
                self.bad_input();
                "invalid input"
            }
        };
        self.ops += 1;
        self.check_counts(what);
        if self.ops.is_multiple_of(self.check_every) {
            self.full_check();
        }
    }

    /// Runs `ops` calls, then frees everything: the pool must be full and idle again.
    fn run(mut self, ops: u64) -> Outcome {
        while self.ops < ops {
            self.step();
        }
        if self.in_group {
            self.group();
            self.ops += 1;
        }
        while !self.s.rows.is_empty() || !self.s.blocks.is_empty() {
            if self.s.rows.is_empty() {
                let block = self.s.blocks.pop().unwrap();
                self.s.rows.push(block);
            }
            self.finish();
            self.ops += 1;
        }
        self.full_check();
        let stats = self.pool.stats();
        if self.pool.available_size() != self.size || stats.pages_in_use != 0 {
            let (available, size) = (self.pool.available_size(), self.size);
            self.violation(format_args!(
                "drained pool: available {available} of {size}, {} pages in use",
                stats.pages_in_use
            ));
        }
        Outcome {
            ops: self.ops,
            violations: self.violations,
            rejected: stats.rejected_calls,
            short: stats.failed_allocations,
            tokens: stats.tokens_allocated,
            restores: stats.restores,
        }
    }
}

/// What a round did: calls, violations, and the pool's own counts of refused calls,
/// shortages, slots handed out and restores (to show every path was taken).
#[derive(Default)]
struct Outcome {
    ops: u64,
    violations: u64,
    rejected: u64,
    short: u64,
    tokens: u64,
    restores: u64,
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .map(|v| v.replace('_', "").parse().expect(name))
        .unwrap_or(default)
}

/// Configurations: page sizes 1/4/16/64 x `need_sort` off/on x int64/int32 indices.
const CONFIGS: u64 = 16;

/// One round: configuration `round % CONFIGS`, a fresh pool, `ops` calls.
fn round(round: u64, seed: u64, ops: u64, check_every: u64) -> Outcome {
    let config = round % CONFIGS;
    let ps = [1u64, 4, 16, 64][(config % 4) as usize];
    let need_sort = config / 4 % 2 == 1;
    let num_pages = [2048u64, 1024, 512, 128][(config % 4) as usize];
    if config / 8 == 0 {
        Soak::<i64>::new(seed, ps, num_pages, need_sort, check_every).run(ops)
    } else {
        Soak::<i32>::new(seed, ps, num_pages, need_sort, check_every).run(ops)
    }
}

#[test]
fn soak_random_operations_keep_every_invariant() {
    let default = if cfg!(debug_assertions) {
        100_000
    } else {
        1_000_000
    };
    let target = env_u64("KVPOOL_SOAK_OPS", default);
    let seed = env_u64("KVPOOL_SOAK_SEED", 1);
    let check_every = env_u64("KVPOOL_SOAK_CHECK_EVERY", 1000);
    let start = Instant::now();
    let (mut ops, mut violations, mut rounds) = (0u64, 0u64, 0u64);
    let mut total = Outcome::default();
    // Short runs use shorter rounds, so that every configuration gets at least one.
    let round_ops = ROUND_OPS.min(target.div_ceil(CONFIGS)).max(1);
    while ops < target {
        let n = round_ops.min(target - ops);
        let r = round(rounds, seed.wrapping_add(rounds), n, check_every);
        ops += r.ops;
        violations += r.violations;
        total.rejected += r.rejected;
        total.short += r.short;
        total.tokens += r.tokens;
        total.restores += r.restores;
        rounds += 1;
        if rounds % 50 == 0 {
            eprintln!(
                "soak: {ops} calls, {violations} violations, {rounds} rounds, {:.1} s",
                start.elapsed().as_secs_f64()
            );
        }
    }
    eprintln!(
        "soak: {ops} pool calls in {rounds} rounds, {violations} invariant violations, {:.1} s \
         (pool counters: {} calls refused, {} shortages, {} slots handed out, {} restores)",
        start.elapsed().as_secs_f64(),
        total.rejected,
        total.short,
        total.tokens,
        total.restores
    );
    assert!(total.rejected > 0 && total.short > 0 && total.restores > 0);
    assert_eq!(violations, 0, "invariant violations (see stderr)");
    assert!(ops >= target);
}
