//! Randomized model-based test: long random sequences of every pool operation (both pool
//! kinds, several page sizes, `need_sort` on and off, free groups, snapshots, and bad
//! inputs mixed in), run on kvpool and on the reference model in `tests/model/` in
//! lockstep. After every step the two must agree exactly — returned indices, error kinds,
//! free-list order, available size — and the invariants must hold: no slot held twice,
//! nothing leaked, slot 0 never handed out, a failing call changes nothing.

mod model;
mod rng;

use std::collections::{HashMap, HashSet};

use kvpool::{ErrorKind, Pool, PoolConfig, Snapshot};
use model::Model;
use rng::Rng;

/// What the test's "engine" holds: each request's slot row, and raw `alloc` blocks.
#[derive(Clone, Default)]
struct Held {
    rows: Vec<Vec<i64>>,
    blocks: Vec<Vec<i64>>,
}

struct Saved {
    snapshot: Snapshot,
    model: Model,
    held: Held,
}

struct Run {
    pool: Pool,
    model: Model,
    held: Held,
    saved: Option<Saved>,
    rng: Rng,
    ps: u64,
    /// Longest extend per request, so shortages happen regularly but not always.
    max_extend: u64,
    ops: u64,
}

fn unit<T>(r: Result<T, kvpool::PoolError>) -> Result<T, ErrorKind> {
    r.map_err(|e| e.kind())
}

impl Run {
    fn new(seed: u64, size: u64, ps: u64, need_sort: bool) -> Self {
        let config = PoolConfig {
            size,
            page_size: ps as u32,
            need_sort,
            ..PoolConfig::default()
        };
        Self {
            pool: Pool::new(config).unwrap(),
            model: Model::new(size, ps, need_sort),
            held: Held::default(),
            saved: None,
            rng: Rng(seed),
            ps,
            max_extend: (size / 8).max(2),
            ops: 0,
        }
    }

    fn context(&self) -> String {
        format!(
            "ps {} need_sort {} op #{}",
            self.ps, self.model.need_sort, self.ops
        )
    }

    /// Runs one call on both and checks they agree; on error, checks nothing changed.
    fn both<T: PartialEq + std::fmt::Debug>(
        &mut self,
        what: &str,
        on_pool: impl FnOnce(&mut Pool) -> Result<T, ErrorKind>,
        on_model: impl FnOnce(&mut Model) -> Result<T, ErrorKind>,
    ) -> Result<T, ErrorKind> {
        self.ops += 1;
        let census = self.pool.free_page_census();
        let got = on_pool(&mut self.pool);
        let want = on_model(&mut self.model);
        assert_eq!(
            got,
            want,
            "{what} disagrees with the model ({})",
            self.context()
        );
        if let Err(kind) = &got {
            if *kind != ErrorKind::OutOfSlots {
                assert_eq!(
                    self.pool.free_page_census(),
                    census,
                    "failed {what} changed the free list ({})",
                    self.context()
                );
            }
        }
        got
    }

    fn pick_row(&mut self) -> Option<usize> {
        (!self.held.rows.is_empty()).then(|| self.rng.below(self.held.rows.len() as u64) as usize)
    }

    fn last_loc(row: &[i64]) -> i64 {
        row.last().copied().unwrap_or(-1)
    }

    // ---- valid operations --------------------------------------------------------------

    fn extend(&mut self) {
        let mut prefix = Vec::new();
        let mut seq = Vec::new();
        let mut last_loc = Vec::new();
        let mut targets = Vec::new(); // None = new request
        let mut used = HashSet::new();
        for _ in 0..=self.rng.below(6) {
            let existing = self.pick_row().filter(|_| self.rng.chance(50));
            let (len, last) = match existing {
                Some(r) if used.insert(r) => {
                    let row = &self.held.rows[r];
                    (row.len() as i64, Self::last_loc(row))
                }
                Some(_) => continue,
                None => (0, -1),
            };
            let grow = self.rng.below(self.max_extend / 4 + 1) as i64;
            prefix.push(len);
            seq.push(len + grow);
            last_loc.push(last);
            targets.push(existing);
        }
        let total: i64 = seq.iter().zip(&prefix).map(|(s, p)| s - p).sum();
        let total = total as u64;
        let out = self.both(
            "alloc_extend",
            |p| {
                let mut out = vec![0i64; total as usize];
                unit(p.alloc_extend(&prefix, &seq, &last_loc, total, &mut out)).map(|_| out)
            },
            |m| m.alloc_extend(&prefix, &seq, &last_loc, total, total as usize),
        );
        if let Ok(out) = out {
            let mut pos = 0;
            for (i, target) in targets.into_iter().enumerate() {
                let n = (seq[i] - prefix[i]) as usize;
                let slots = &out[pos..pos + n];
                pos += n;
                match target {
                    Some(r) => self.held.rows[r].extend_from_slice(slots),
                    None => self.held.rows.push(slots.to_vec()),
                }
            }
        }
    }

    fn decode(&mut self) {
        let mut rows: Vec<usize> = (0..self.held.rows.len()).collect();
        rows.retain(|_| self.rng.chance(60));
        let seq: Vec<i64> = rows
            .iter()
            .map(|&r| self.held.rows[r].len() as i64 + 1)
            .collect();
        let last_loc: Vec<i64> = rows
            .iter()
            .map(|&r| Self::last_loc(&self.held.rows[r]))
            .collect();
        let out = self.both(
            "alloc_decode",
            |p| {
                let mut out = vec![0i64; seq.len()];
                unit(p.alloc_decode(&seq, &last_loc, &mut out)).map(|_| out)
            },
            |m| m.alloc_decode(&seq, &last_loc, seq.len()),
        );
        if let Ok(out) = out {
            for (&r, slot) in rows.iter().zip(out) {
                self.held.rows[r].push(slot);
            }
        }
    }

    fn alloc_block(&mut self) {
        let n = self.rng.below(self.max_extend / self.ps / 2 + 1) * self.ps;
        let out = self.both(
            "alloc",
            |p| {
                let mut out = vec![0i64; n as usize];
                unit(p.alloc(n as usize, &mut out)).map(|_| out)
            },
            |m| m.alloc(n),
        );
        if let Ok(block) = out {
            self.held.blocks.push(block);
        }
    }

    fn pages_of(&self, slots: &[i64]) -> Vec<i64> {
        let mut pages: Vec<i64> = slots.iter().map(|&s| s / self.ps as i64).collect();
        pages.dedup();
        pages
    }

    /// Finishes a request or drops a block, freeing by index, page id or segment.
    fn finish(&mut self) {
        let from_block = !self.held.blocks.is_empty() && self.rng.chance(30);
        let slots = if from_block {
            let i = self.rng.below(self.held.blocks.len() as u64) as usize;
            self.held.blocks.swap_remove(i)
        } else if let Some(r) = self.pick_row() {
            self.held.rows.swap_remove(r)
        } else {
            return;
        };
        let pages = self.pages_of(&slots);
        let how = self.rng.below(3);
        let result = match how {
            0 => self.both("free", |p| unit(p.free(&slots)), |m| m.free(&slots)),
            1 => self.both(
                "free_pages",
                |p| unit(p.free_pages(&pages)),
                |m| m.free_pages(&pages),
            ),
            _ => {
                let len = slots.len();
                self.both(
                    "free_segment",
                    |p| unit(p.free_segment(&slots, 0, len)),
                    |m| m.free_segment(&slots, 0, len),
                )
            }
        };
        assert!(
            result.is_ok(),
            "valid free failed: {result:?} ({})",
            self.context()
        );
    }

    /// Releases a request's tail from a page boundary (over-allocation release).
    fn truncate(&mut self) {
        let Some(r) = self.pick_row() else { return };
        let len = self.held.rows[r].len() as u64;
        if len == 0 {
            return;
        }
        let start = (self.rng.below(len) / self.ps * self.ps) as usize;
        let row = self.held.rows[r].clone();
        let n = row.len() - start;
        let result = self.both(
            "free_segment",
            |p| unit(p.free_segment(&row, start, n)),
            |m| m.free_segment(&row, start, n),
        );
        assert!(
            result.is_ok(),
            "valid truncate failed: {result:?} ({})",
            self.context()
        );
        self.held.rows[r].truncate(start);
    }

    /// Rejects a request's last tokens (speculative decoding): frees the pages that hold
    /// only rejected tokens, rewinds the page of the last kept one.
    fn rewind(&mut self) {
        let Some(r) = self.pick_row() else { return };
        let row = self.held.rows[r].clone();
        if row.is_empty() {
            return;
        }
        let kept = 1 + self.rng.below(row.len() as u64) as usize;
        let cut = kept.div_ceil(self.ps as usize) * self.ps as usize;
        if cut < row.len() {
            let n = row.len() - cut;
            let freed = self.both(
                "free_segment (rejected pages)",
                |p| unit(p.free_segment(&row, cut, n)),
                |m| m.free_segment(&row, cut, n),
            );
            assert!(freed.is_ok(), "{freed:?} ({})", self.context());
        }
        let last_kept = [row[kept - 1]];
        let result = self.both(
            "rewind",
            |p| unit(p.rewind(&last_kept)),
            |m| m.rewind(&last_kept),
        );
        assert!(
            result.is_ok(),
            "valid rewind failed: {result:?} ({})",
            self.context()
        );
        self.held.rows[r].truncate(kept);
    }

    fn group(&mut self) {
        if self.model.in_group() {
            let r = self.both(
                "free_group_end",
                |p| unit(p.free_group_end()),
                |m| m.free_group_end(),
            );
            assert!(r.is_ok());
        } else {
            let r = self.both(
                "free_group_begin",
                |p| unit(p.free_group_begin()),
                |m| m.free_group_begin(),
            );
            assert!(r.is_ok());
        }
    }

    fn snapshot(&mut self) {
        if self.model.in_group() {
            return;
        }
        if self.saved.is_some() && self.rng.chance(50) {
            let saved = self.saved.as_ref().unwrap();
            self.pool.restore_state(&saved.snapshot).unwrap();
            self.model.restore(&saved.model);
            self.held = saved.held.clone();
            if self.rng.chance(50) {
                self.saved = None;
            }
        } else {
            self.saved = Some(Saved {
                snapshot: self.pool.backup_state().unwrap(),
                model: self.model.clone(),
                held: self.held.clone(),
            });
        }
        self.ops += 1;
    }

    // ---- bad inputs: each must be rejected with the model's kind and change nothing ------

    fn bad_input(&mut self) {
        let before = (self.pool.available_size(), self.pool.free_page_census());
        let size = self.model.size;
        let kind = match self.rng.below(12) {
            0 => {
                // The same index twice in one call.
                let Some(r) = self.pick_row() else { return };
                let Some(&first) = self.held.rows[r].first() else {
                    return;
                };
                let mut indices = self.held.rows[r].clone();
                indices.push(first);
                self.both(
                    "free (dup)",
                    |p| unit(p.free(&indices)),
                    |m| m.free(&indices),
                )
            }
            1 => {
                // A slot in a free page.
                let census = self.model.census();
                if census.is_empty() {
                    return;
                }
                let page = census[self.rng.below(census.len() as u64) as usize] as i64;
                let index = [page * self.ps as i64];
                self.both(
                    "free (free page)",
                    |p| unit(p.free(&index)),
                    |m| m.free(&index),
                )
            }
            2 => {
                let bad = [[0, -3, (size + self.ps + 7) as i64][self.rng.below(3) as usize]];
                self.both("free (range)", |p| unit(p.free(&bad)), |m| m.free(&bad))
            }
            3 => {
                let Some(r) = self.pick_row() else { return };
                let len = self.held.rows[r].len() as i64;
                let last = Self::last_loc(&self.held.rows[r]);
                let (prefix, seq) = ([len], [len - 1]);
                self.both(
                    "alloc_extend (seq < prefix)",
                    |p| unit(p.alloc_extend(&prefix, &seq, &[last], 0, &mut [])),
                    |m| m.alloc_extend(&prefix, &seq, &[last], 0, 0).map(|_| ()),
                )
            }
            4 => {
                let (prefix, seq) = ([0i64], [3i64]);
                self.both(
                    "alloc_extend (total)",
                    |p| unit(p.alloc_extend(&prefix, &seq, &[-1i64], 4, &mut [0; 4])),
                    |m| m.alloc_extend(&prefix, &seq, &[-1], 4, 4).map(|_| ()),
                )
            }
            5 => {
                let (prefix, seq) = ([0i64], [3i64]);
                self.both(
                    "alloc_extend (buffer)",
                    |p| unit(p.alloc_extend(&prefix, &seq, &[-1i64], 3, &mut [0; 2])),
                    |m| m.alloc_extend(&prefix, &seq, &[-1], 3, 2).map(|_| ()),
                )
            }
            6 => {
                // last_loc off by one, or pointing into a free page.
                let Some(r) = self.pick_row() else { return };
                let row = &self.held.rows[r];
                if row.is_empty() {
                    return;
                }
                let len = row.len() as i64;
                let census = self.model.census();
                let wrong = if self.ps > 1 && self.rng.chance(50) {
                    Self::last_loc(row) + 1 // breaks (last_loc + 2) % ps == seq % ps
                } else if let Some(&page) = census.first() {
                    page as i64 * self.ps as i64 + self.ps as i64 - 1 // in a free page
                } else {
                    return;
                };
                let seq = [len + 1];
                self.both(
                    "alloc_decode (last_loc)",
                    |p| unit(p.alloc_decode(&seq, &[wrong], &mut [0; 1])),
                    |m| m.alloc_decode(&seq, &[wrong], 1).map(|_| ()),
                )
            }
            7 => {
                if self.model.in_group() {
                    self.both(
                        "free_group_begin (nested)",
                        |p| unit(p.free_group_begin()),
                        |m| m.free_group_begin(),
                    )
                } else {
                    self.both(
                        "free_group_end (none)",
                        |p| unit(p.free_group_end()),
                        |m| m.free_group_end(),
                    )
                }
            }
            8 => {
                if self.ps == 1 {
                    return;
                }
                let n = self.ps + 1;
                self.both(
                    "alloc (unaligned)",
                    |p| unit(p.alloc(n as usize, &mut vec![0i64; n as usize])),
                    |m| m.alloc(n).map(|_| ()),
                )
            }
            9 => {
                // A stale last_loc: one slot before the request's last, in the same page
                // (a continuation that would hand the request's last slot out again).
                let Some(r) = self.pick_row() else { return };
                let row = &self.held.rows[r];
                let len = row.len();
                if len < 2 || (len as u64 - 1).is_multiple_of(self.ps) {
                    return;
                }
                let (prefix, seq, stale) = ([len as i64 - 1], [len as i64 + 1], [row[len - 2]]);
                self.both(
                    "alloc_extend (stale last_loc)",
                    |p| unit(p.alloc_extend(&prefix, &seq, &stale, 2, &mut [0; 2])),
                    |m| m.alloc_extend(&prefix, &seq, &stale, 2, 2).map(|_| ()),
                )
            }
            10 => {
                // A rewind that would move a page forward, past what it handed out.
                let Some(r) = self.pick_row() else { return };
                let row = &self.held.rows[r];
                let Some(&last) = row.last() else { return };
                if (last as u64 + 1).is_multiple_of(self.ps) {
                    return;
                }
                let ahead = [last + 1];
                self.both(
                    "rewind (ahead of the fill point)",
                    |p| unit(p.rewind(&ahead)),
                    |m| m.rewind(&ahead),
                )
            }
            _ => {
                // Freeing a page twice within one free group.
                if !self.model.in_group() {
                    return;
                }
                let Some(r) = self.pick_row() else { return };
                let row = self.held.rows.swap_remove(r);
                if row.is_empty() {
                    return;
                }
                let ok = self.both("free (group)", |p| unit(p.free(&row)), |m| m.free(&row));
                assert!(ok.is_ok());
                let again = [row[0]];
                let before_again = (self.pool.available_size(), self.pool.free_page_census());
                let kind = self.both(
                    "free (group twice)",
                    |p| unit(p.free(&again)),
                    |m| m.free(&again),
                );
                assert_eq!(kind, Err(ErrorKind::DoubleFree));
                assert_eq!(
                    (self.pool.available_size(), self.pool.free_page_census()),
                    before_again
                );
                return;
            }
        };
        assert!(kind.is_err(), "bad input was accepted ({})", self.context());
        assert_eq!(
            (self.pool.available_size(), self.pool.free_page_census()),
            before,
            "bad input changed the pool ({})",
            self.context()
        );
    }

    // ---- invariants ------------------------------------------------------------------------

    fn check_invariants(&self) {
        let ctx = self.context();
        assert_eq!(
            self.pool.available_size(),
            self.model.available_size(),
            "{ctx}"
        );
        assert_eq!(self.pool.free_page_census(), self.model.census(), "{ctx}");
        assert!(self.pool.storage().scratch_is_clear(), "{ctx}");
        let kv_rows = self.model.size + self.ps;
        let mut slots = HashSet::new();
        let mut pages = HashSet::new();
        for slots_of in self.held.rows.iter().chain(&self.held.blocks) {
            for &slot in slots_of {
                assert!(
                    slot >= self.ps as i64 && (slot as u64) < kv_rows,
                    "slot {slot} ({ctx})"
                );
                assert!(slots.insert(slot), "slot {slot} held twice ({ctx})");
                pages.insert(slot as u64 / self.ps);
            }
        }
        // Each held page has handed out exactly the held slots in it, from its first on.
        let mut held_in_page: HashMap<u64, u64> = HashMap::new();
        for &slot in &slots {
            *held_in_page.entry(slot as u64 / self.ps).or_default() += 1;
        }
        for (&page, &held) in &held_in_page {
            assert_eq!(
                u64::from(self.pool.storage().page_fill(page as u32).unwrap()),
                held,
                "fill point of page {page} ({ctx})"
            );
        }
        let free: HashSet<u64> = self.model.census().into_iter().map(u64::from).collect();
        assert!(
            pages.is_disjoint(&free),
            "a held page is on the free list ({ctx})"
        );
        // Nothing leaked: held pages plus pages pending in a group are exactly the ones in use.
        let stats = self.pool.stats();
        assert_eq!(
            stats.pages_in_use,
            u64::from(self.pool.num_pages()) - free.len() as u64,
            "{ctx}"
        );
        if !self.model.in_group() {
            assert_eq!(pages.len() as u64, stats.pages_in_use, "leak ({ctx})");
        }
    }

    fn step(&mut self) {
        match self.rng.below(100) {
            0..=24 => self.extend(),
            25..=44 => self.decode(),
            45..=59 => self.finish(),
            60..=62 => self.truncate(),
            63..=64 => self.rewind(),
            65..=71 => self.alloc_block(),
            72..=77 => self.group(),
            78..=81 => self.snapshot(),
            82..=83 => {
                self.pool.merge_and_sort_free();
                self.model.merge_and_sort_free();
            }
            84 => {
                if self.rng.chance(20) {
                    self.pool.clear();
                    self.model.clear();
                    self.held = Held::default();
                }
            }
            _ => self.bad_input(),
        }
        self.check_invariants();
    }
}

fn run(seed: u64, num_pages: u64, ps: u64, need_sort: bool, steps: usize) -> u64 {
    let mut run = Run::new(seed, num_pages * ps, ps, need_sort);
    for _ in 0..steps {
        run.step();
    }
    // Drain: close any group, free everything held, and the pool must be full again.
    if run.model.in_group() {
        run.group();
    }
    while !run.held.rows.is_empty() || !run.held.blocks.is_empty() {
        run.finish();
    }
    run.check_invariants();
    assert_eq!(run.pool.available_size(), num_pages * ps);
    assert_eq!(run.pool.stats().pages_in_use, 0);
    run.ops
}

#[test]
fn random_operations_match_the_model() {
    let mut total = 0;
    for ps in [1u64, 2, 4, 16, 64] {
        for need_sort in [false, true] {
            for seed in 0..4 {
                let num_pages = [24, 64, 200, 1000][seed as usize];
                total += run(seed * 7919 + ps, num_pages, ps, need_sort, 3000);
            }
        }
    }
    assert!(total > 100_000, "only {total} operations ran");
    eprintln!("model-based test: {total} operations checked");
}
