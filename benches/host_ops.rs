//! Host-backend latency of every allocation and free entry point of [`kvpool::Pool`].
//!
//! What is measured: the wall time of one call, taken with [`Instant`] around that call
//! alone, for `alloc`, `alloc_extend`, `alloc_decode`, `free` (token indices),
//! `free_segment` and `free_pages`, at batch sizes 1..1024 and page sizes 1, 16 and 64.
//! Each cell is the median (with p10 and p90) of many individually timed calls after a
//! warm-up. The pool stays in steady state: every timed allocation is undone by an untimed
//! free and every timed free is preceded by an untimed allocation, so nothing runs out and
//! the free list keeps its length. Each pool is fragmented (its pages freed in a shuffled
//! order) before the first case, so page ids are scattered as in a long-running server.
//!
//! Why: the design brief sets host-time targets relative to one CUDA kernel launch
//! (about 5 µs), and SGLang's allocator spends 35–330 µs of host time per call. These
//! numbers say how much of that budget the host backend's bookkeeping and validation use.
//! Validation is shown separately: for `alloc_extend`, `alloc_decode` and `free`, the
//! matching dry run (`check_extend`, `check_decode`, `check_free`: every check, no state
//! change) is timed on the same inputs in the same loop, interleaved with the full call.
//!
//! Inputs (all slot indices `i64`, SGLang's `out_cache_loc` type):
//! - `alloc`, `free`, `free_segment`, `free_pages`: `bs` pages per call, i.e. `alloc(bs ×
//!   page_size)` tokens, and the frees hand back those `bs × page_size` indices (`free`),
//!   the same slots as one row segment (`free_segment`) or their `bs` page ids
//!   (`free_pages`).
//! - `alloc_extend`: 512 new tokens per request; odd requests have an empty prefix, even
//!   ones a cached prefix of 100..400 tokens that is never page-aligned, so the paged index
//!   math runs all three parts (finish the prefix's page, whole pages, a partial tail).
//! - `alloc_decode`: sequence lengths spread so that their residues modulo the page size
//!   are uniform, and advanced by one token per repetition (`rep % page_size`): about
//!   `bs / page_size` requests of each step start a new page, as in real decoding.
//!
//! Run: `cargo bench --bench host_ops` (full), `cargo bench --bench host_ops -- --quick` or
//! `KVPOOL_BENCH_QUICK=1 cargo bench --bench host_ops` (few repetitions, a smoke run).
//! The markdown tables go to stdout, progress to stderr. The sampling, statistics and
//! machine-facts code is shared with `benches/scheduler.rs` (`benches/support/mod.rs`).

mod support;

use std::hint::black_box;
use std::time::Instant;

use kvpool::{Pool, PoolConfig};
use support::{cell_ns, load_average, print_machine, sample, timed, timer_floor, Mode, Summary};

const BATCH_SIZES: [usize; 6] = [1, 4, 16, 64, 256, 1024];
const PAGE_SIZES: [usize; 3] = [1, 16, 64];
/// Usable token slots of every pool: room for the largest extend batch (1024 × 512 new
/// tokens plus prefixes) with plenty to spare; a multiple of every page size.
const POOL_TOKENS: usize = 1 << 21;
/// New tokens per request in an extend batch (SGLang's reference numbers use 512).
const EXTEND_TOKENS: usize = 512;

// ---- inputs -----------------------------------------------------------------------------

/// Cached prefix of request `i` in an extend batch: empty for odd `i`, otherwise 100..400
/// tokens and never a multiple of 16 (so never page-aligned for page sizes 16 and 64).
fn prefix_len(i: usize) -> usize {
    if i % 2 == 1 {
        return 0;
    }
    let len = 100 + (i * 37) % 300;
    if len.is_multiple_of(16) {
        len + 1
    } else {
        len
    }
}

/// Length before the first decode step of request `i`: 64..512, residues uniform mod 64.
fn decode_len(i: usize) -> usize {
    64 + (i * 37) % 448
}

/// Deterministic Fisher–Yates shuffle (xorshift64).
fn shuffle(items: &mut [i64], mut seed: u64) {
    for i in (1..items.len()).rev() {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        items.swap(i, (seed % (i as u64 + 1)) as usize);
    }
}

/// An extend batch whose prefixes are allocated.
struct ExtendBatch {
    prefix_lens: Vec<i64>,
    seq_lens: Vec<i64>,
    last_loc: Vec<i64>,
    tokens: u64,
    rows: Vec<Vec<i64>>,
}

/// One decode step: lengths after the new token and the slot of each last token.
struct DecodeStep {
    seq_lens: Vec<i64>,
    last_loc: Vec<i64>,
}

/// A decode batch: `page_size` consecutive steps over rows that hold every token.
struct DecodeBatch {
    steps: Vec<DecodeStep>,
    rows: Vec<Vec<i64>>,
}

// ---- one pool, one page size ------------------------------------------------------------

/// The measured results for one (page size, batch size).
struct Row {
    page_size: usize,
    bs: usize,
    alloc: Summary,
    extend: [Summary; 2],
    extend_tokens: u64,
    decode: [Summary; 2],
    free: [Summary; 2],
    free_segment: Summary,
    free_pages: Summary,
}

/// Lane order of the `[Summary; 2]` results: the dry run, then the full call.
const CHECK: usize = 0;
const FULL: usize = 1;

struct Bench<'m> {
    pool: Pool,
    ps: usize,
    mode: &'m Mode,
}

impl<'m> Bench<'m> {
    /// A pool of [`POOL_TOKENS`] slots whose free list is in shuffled page order.
    fn new(ps: usize, mode: &'m Mode) -> Self {
        let config = PoolConfig {
            size: POOL_TOKENS as u64,
            page_size: ps as u32,
            ..PoolConfig::default()
        };
        let pool = Pool::new(config).expect("create pool");
        let mut bench = Self { pool, ps, mode };
        let all = bench.alloc_row(POOL_TOKENS);
        let mut pages = bench.page_ids(&all);
        shuffle(&mut pages, 0x9E37_79B9_7F4A_7C15);
        bench
            .pool
            .free_pages(&pages)
            .expect("fragment the free list");
        bench
    }

    fn row(&mut self, bs: usize) -> Row {
        let row = Row {
            page_size: self.ps,
            bs,
            alloc: self.bench_alloc(bs),
            extend: self.bench_extend(bs),
            extend_tokens: (bs * EXTEND_TOKENS) as u64,
            decode: self.bench_decode(bs),
            free: self.bench_free(bs),
            free_segment: self.bench_free_segment(bs),
            free_pages: self.bench_free_pages(bs),
        };
        assert_eq!(
            self.pool.available_size(),
            self.pool.size(),
            "a case leaked slots"
        );
        row
    }

    /// Page ids of slots laid out page by page (each page's slots contiguous).
    fn page_ids(&self, slots: &[i64]) -> Vec<i64> {
        let ps = self.ps as i64;
        slots.iter().step_by(self.ps).map(|&s| s / ps).collect()
    }

    /// Allocates (untimed) the whole pages that hold `tokens` tokens.
    fn alloc_row(&mut self, tokens: usize) -> Vec<i64> {
        let mut row = vec![0; tokens.div_ceil(self.ps) * self.ps];
        self.pool.alloc(row.len(), &mut row).expect("untimed alloc");
        row
    }

    /// Frees (untimed) slots laid out page by page.
    fn release(&mut self, slots: &[i64]) {
        let pages = self.page_ids(slots);
        self.pool.free_pages(&pages).expect("untimed free");
    }

    // ---- cases ------------------------------------------------------------------------

    fn bench_alloc(&mut self, bs: usize) -> Summary {
        let n = bs * self.ps;
        let mut out = vec![0i64; n];
        let [alloc] = sample(self.mode, |_| {
            let (ns, result) = timed(|| self.pool.alloc(n, black_box(&mut out[..])));
            result.expect("alloc");
            self.release(&out);
            [ns]
        });
        alloc
    }

    /// Moves each slot's page back to end at it (untimed): a prefix held in whole pages
    /// but ending inside its last one continues from there (the page's fill point).
    fn rewind_to(&mut self, last_loc: &[i64]) {
        let ends: Vec<i64> = last_loc.iter().copied().filter(|&l| l >= 0).collect();
        self.pool.rewind(&ends).expect("untimed rewind");
    }

    fn extend_batch(&mut self, bs: usize) -> ExtendBatch {
        let prefix: Vec<usize> = (0..bs).map(prefix_len).collect();
        let rows: Vec<Vec<i64>> = prefix.iter().map(|&p| self.alloc_row(p)).collect();
        let last_loc: Vec<i64> = prefix
            .iter()
            .zip(&rows)
            .map(|(&p, row)| if p == 0 { -1 } else { row[p - 1] })
            .collect();
        self.rewind_to(&last_loc);
        ExtendBatch {
            prefix_lens: prefix.iter().map(|&p| p as i64).collect(),
            seq_lens: prefix.iter().map(|&p| (p + EXTEND_TOKENS) as i64).collect(),
            last_loc,
            tokens: (bs * EXTEND_TOKENS) as u64,
            rows,
        }
    }

    /// The pages an extend took from the free list, read back from its output: each
    /// request's new pages follow the tokens that finished its prefix's partial page.
    fn extend_new_pages(&self, batch: &ExtendBatch, out: &[i64]) -> Vec<i64> {
        let ps = self.ps;
        let mut pages = Vec::new();
        let mut pos = 0;
        for (&prefix, &seq) in batch.prefix_lens.iter().zip(&batch.seq_lens) {
            let (prefix, seq) = (prefix as usize, seq as usize);
            let part1 = seq.min(prefix.div_ceil(ps) * ps) - prefix;
            let new_pages = seq.div_ceil(ps) - prefix.div_ceil(ps);
            let first = pos + part1;
            pages.extend((0..new_pages).map(|k| out[first + k * ps] / ps as i64));
            pos += seq - prefix;
        }
        pages
    }

    fn bench_extend(&mut self, bs: usize) -> [Summary; 2] {
        let batch = self.extend_batch(bs);
        let mut out = vec![0i64; batch.tokens as usize];
        let (prefix, seq, last) = (&batch.prefix_lens, &batch.seq_lens, &batch.last_loc);
        let result = sample(self.mode, |_| {
            let (check, result) = timed(|| {
                self.pool.check_extend(
                    black_box(prefix),
                    black_box(seq),
                    black_box(last),
                    batch.tokens,
                )
            });
            result.expect("check_extend");
            let (full, result) = timed(|| {
                self.pool.alloc_extend(
                    black_box(prefix),
                    black_box(seq),
                    black_box(last),
                    batch.tokens,
                    black_box(&mut out[..]),
                )
            });
            result.expect("alloc_extend");
            let pages = self.extend_new_pages(&batch, &out);
            self.pool.free_pages(&pages).expect("undo alloc_extend");
            self.rewind_to(last);
            [check, full]
        });
        for row in &batch.rows {
            self.release(row);
        }
        result
    }

    fn decode_batch(&mut self, bs: usize) -> DecodeBatch {
        let base: Vec<usize> = (0..bs).map(decode_len).collect();
        let rows: Vec<Vec<i64>> = base.iter().map(|&l| self.alloc_row(l + self.ps)).collect();
        let steps = (0..self.ps)
            .map(|step| {
                let seq_lens: Vec<i64> = base.iter().map(|&l| (l + step) as i64).collect();
                let last_loc = seq_lens
                    .iter()
                    .zip(&rows)
                    .map(|(&s, row)| row[s as usize - 2])
                    .collect();
                DecodeStep { seq_lens, last_loc }
            })
            .collect();
        DecodeBatch { steps, rows }
    }

    fn bench_decode(&mut self, bs: usize) -> [Summary; 2] {
        let batch = self.decode_batch(bs);
        let ps = self.ps as i64;
        let mut out = vec![0i64; bs];
        let result = sample(self.mode, |i| {
            let step = &batch.steps[i % batch.steps.len()];
            let (seq, last) = (&step.seq_lens, &step.last_loc);
            self.rewind_to(last);
            let (check, result) = timed(|| self.pool.check_decode(black_box(seq), black_box(last)));
            result.expect("check_decode");
            let (full, result) = timed(|| {
                self.pool
                    .alloc_decode(black_box(seq), black_box(last), black_box(&mut out[..]))
            });
            result.expect("alloc_decode");
            let pages: Vec<i64> = seq
                .iter()
                .zip(&out)
                .filter(|(&s, _)| (s - 1) % ps == 0)
                .map(|(_, &slot)| slot / ps)
                .collect();
            self.pool.free_pages(&pages).expect("undo alloc_decode");
            [check, full]
        });
        for row in &batch.rows {
            self.release(row);
        }
        result
    }

    fn bench_free(&mut self, bs: usize) -> [Summary; 2] {
        let n = bs * self.ps;
        let mut slots = vec![0i64; n];
        sample(self.mode, |_| {
            self.pool.alloc(n, &mut slots).expect("untimed alloc");
            let (check, result) = timed(|| self.pool.check_free(black_box(&slots[..])));
            result.expect("check_free");
            let (full, result) = timed(|| self.pool.free(black_box(&slots[..])));
            result.expect("free");
            [check, full]
        })
    }

    fn bench_free_segment(&mut self, bs: usize) -> Summary {
        let n = bs * self.ps;
        let mut row = vec![0i64; n];
        let [free_segment] = sample(self.mode, |_| {
            self.pool.alloc(n, &mut row).expect("untimed alloc");
            let (ns, result) = timed(|| self.pool.free_segment(black_box(&row[..]), 0, n));
            result.expect("free_segment");
            [ns]
        });
        free_segment
    }

    fn bench_free_pages(&mut self, bs: usize) -> Summary {
        let n = bs * self.ps;
        let mut slots = vec![0i64; n];
        let [free_pages] = sample(self.mode, |_| {
            self.pool.alloc(n, &mut slots).expect("untimed alloc");
            let pages = self.page_ids(&slots);
            let (ns, result) = timed(|| self.pool.free_pages(black_box(&pages[..])));
            result.expect("free_pages");
            [ns]
        });
        free_pages
    }
}

// ---- clock ------------------------------------------------------------------------------

/// Smallest nonzero difference between back-to-back clock readings (resolution plus the
/// cost of one reading): no figure is finer than this.
fn clock_step() -> u64 {
    let origin = Instant::now();
    let mut last = origin.elapsed().as_nanos() as u64;
    let mut step = u64::MAX;
    for _ in 0..100_000 {
        let now = origin.elapsed().as_nanos() as u64;
        if now > last {
            step = step.min(now - last);
            last = now;
        }
    }
    step
}

// ---- report -----------------------------------------------------------------------------

fn print_header(mode: &Mode, floor: Summary, load_at_start: &str) {
    println!("## Host backend: per-call latency\n");
    print_machine(&format!("load average at start {load_at_start}"));
    println!("{}", mode.header_line(""));
    println!(
        "- pool: {POOL_TOKENS} token slots, free list shuffled at start; indices i64; \
         extend: {EXTEND_TOKENS} new tokens per request"
    );
    println!(
        "- timer floor (empty timed region, included in every figure): median {} ns, p90 {} ns; \
         smallest clock step {} ns\n",
        floor.p50,
        floor.p90,
        clock_step(),
    );
}

fn print_latency_tables(rows: &[Row]) {
    println!("### Per call, ns: median [p10–p90]\n");
    println!(
        "`alloc`, `free`, `free_segment`, `free_pages` move `bs` pages (`bs × page_size` \
         tokens) per call; `alloc_extend` writes `bs × {EXTEND_TOKENS}` indices; \
         `alloc_decode` writes `bs`.\n"
    );
    for ps in PAGE_SIZES {
        let kind = if ps == 1 { "token pool" } else { "paged pool" };
        println!("#### page_size = {ps} ({kind})\n");
        println!("| bs | alloc | alloc_extend | alloc_decode | free | free_segment | free_pages |");
        println!("|---:|---|---|---|---|---|---|");
        for r in rows.iter().filter(|r| r.page_size == ps) {
            println!(
                "| {} | {} | {} | {} | {} | {} | {} |",
                r.bs,
                cell_ns(&r.alloc),
                cell_ns(&r.extend[FULL]),
                cell_ns(&r.decode[FULL]),
                cell_ns(&r.free[FULL]),
                cell_ns(&r.free_segment),
                cell_ns(&r.free_pages),
            );
        }
        println!();
    }
}

fn ratio(check: &Summary, full: &Summary) -> String {
    format!("{:.2}", check.p50 as f64 / full.p50.max(1) as f64)
}

fn print_validation_table(rows: &[Row]) {
    println!("### Validation: dry run vs full call, medians in ns\n");
    println!(
        "`check_*` runs every check of the call and changes nothing; it is timed in the same \
         loop as the full call, on the same inputs. `ns/index` = full `alloc_extend` median \
         ÷ indices written.\n"
    );
    println!(
        "| ps | bs | alloc_extend | check_extend | ratio | ns/index | alloc_decode | \
         check_decode | ratio | free | check_free | ratio |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for r in rows {
        let (e, d, f) = (&r.extend, &r.decode, &r.free);
        println!(
            "| {} | {} | {} | {} | {} | {:.2} | {} | {} | {} | {} | {} | {} |",
            r.page_size,
            r.bs,
            e[FULL].p50,
            e[CHECK].p50,
            ratio(&e[CHECK], &e[FULL]),
            e[FULL].p50 as f64 / r.extend_tokens as f64,
            d[FULL].p50,
            d[CHECK].p50,
            ratio(&d[CHECK], &d[FULL]),
            f[FULL].p50,
            f[CHECK].p50,
            ratio(&f[CHECK], &f[FULL]),
        );
    }
    println!();
}

fn fewest_samples(rows: &[Row]) -> usize {
    rows.iter()
        .flat_map(|r| {
            [r.alloc, r.free_segment, r.free_pages]
                .into_iter()
                .chain(r.extend)
                .chain(r.decode)
                .chain(r.free)
        })
        .map(|s| s.samples)
        .min()
        .unwrap_or(0)
}

/// `backup_state` and `restore_state` on a half-used pool: both copy the free list and
/// the page-state map, so they cost O(num_pages), not O(1) as in SGLang 0.5.12 (which kept
/// references to immutable tensors).
fn print_snapshot_table(mode: &Mode) {
    println!("### Snapshots: `backup_state` / `restore_state`, µs: median [p10–p90]");
    println!();
    println!("Pool of {POOL_TOKENS} token slots, half of its pages allocated.");
    println!();
    println!("| page_size | pages | backup_state | restore_state |");
    println!("|---:|---:|---|---|");
    for ps in PAGE_SIZES {
        let mut pool = Pool::new(PoolConfig {
            size: POOL_TOKENS as u64,
            page_size: ps as u32,
            ..PoolConfig::default()
        })
        .unwrap();
        let mut held = vec![0i64; POOL_TOKENS / 2];
        pool.alloc(POOL_TOKENS / 2, &mut held).unwrap();
        let snapshot = pool.backup_state().unwrap();
        let [backup, restore] = sample(mode, |_| {
            let (backup, copy) = timed(|| pool.backup_state().unwrap());
            drop(copy);
            let (restore, result) = timed(|| pool.restore_state(&snapshot));
            result.unwrap();
            [backup, restore]
        });
        let us = |s: &Summary| {
            format!(
                "{:.1} [{:.1}–{:.1}]",
                s.p50 as f64 / 1e3,
                s.p10 as f64 / 1e3,
                s.p90 as f64 / 1e3
            )
        };
        println!(
            "| {ps} | {} | {} | {} |",
            pool.num_pages(),
            us(&backup),
            us(&restore)
        );
    }
    println!();
}

fn main() {
    let mode = Mode::from_args_and_env();
    let load_at_start = load_average();
    let floor = timer_floor(&mode);
    let mut rows = Vec::new();
    for ps in PAGE_SIZES {
        let mut bench = Bench::new(ps, &mode);
        for bs in BATCH_SIZES {
            eprintln!("host_ops: page_size {ps}, bs {bs}");
            rows.push(bench.row(bs));
        }
    }
    print_header(&mode, floor, &load_at_start);
    print_latency_tables(&rows);
    print_validation_table(&rows);
    println!("Fewest samples behind any cell: {}.", fewest_samples(&rows));
    println!();
    print_snapshot_table(&mode);
}
