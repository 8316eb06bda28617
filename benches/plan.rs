//! Host planning of a batched allocation: what a device pool's `alloc_extend_async` /
//! `alloc_decode_async` do on the CPU before the launch (validate every host length, count
//! tokens and new pages), measured through `Pool::extend_need` / `Pool::decode_need`,
//! which run exactly that planning. Beside it, in the same run, the baseline: the same
//! validation request by request with early returns (how planning was written before the
//! branch-free pass), reimplemented here.
//!
//! ```sh
//! cargo bench --bench plan            # KVPOOL_BENCH_QUICK=1 or --quick for a smoke run
//! ```

// Shared with the other benches; this one reads fewer of its fields.
#[allow(dead_code)]
mod support;

use std::hint::black_box;

use kvpool::{BackendKind, IndexType, Pool, PoolConfig};
use support::{cell_ns, load_average, print_machine, sample, timed, timer_floor, Mode};

const SIZE: u64 = 1 << 26;

/// The previous planning loop: per request, the checks in order with an early return.
fn request_by_request(prefix: &[i64], seq: &[i64], size: u64, ps: u64) -> Option<(u64, u64)> {
    let (mut tokens, mut pages) = (0u64, 0u64);
    let shift = ps.trailing_zeros();
    for (&p, &s) in prefix.iter().zip(seq) {
        if p < 0 || s < p || s as u64 > size {
            return None;
        }
        tokens += (s - p) as u64;
        pages += ((s as u64 + ps - 1) >> shift) - ((p as u64 + ps - 1) >> shift);
    }
    Some((tokens, pages))
}

fn decode_request_by_request(seq: &[i64], size: u64, ps: u64) -> Option<u64> {
    let mut pages = 0;
    for &s in seq {
        if s < 1 || s as u64 > size {
            return None;
        }
        pages += u64::from((s as u64 - 1) & (ps - 1) == 0);
    }
    Some(pages)
}

fn main() {
    let mode = Mode::from_args_and_env();
    let load = load_average();
    println!("# Host planning (`cargo bench --bench plan`)\n");
    print_machine(&load);
    println!("{}", mode.header_line(""));
    let floor = timer_floor(&mode);
    println!("- timer floor (empty timed region): {} ns\n", floor.p50);
    println!("| op | page_size | bs | planning ns: median [p10–p90] | request by request (baseline) | baseline / planning |");
    println!("|---|---:|---:|---|---|---:|");
    for ps in [1u32, 16, 64] {
        let pool = Pool::new(PoolConfig {
            size: SIZE,
            page_size: ps,
            index_type: IndexType::I64,
            backend: BackendKind::Host,
            need_sort: false,
        })
        .expect("pool");
        for bs in [1usize, 64, 256, 1024, 4096] {
            // Prefixes of 0..2 pages and 1..4 pages of new tokens, as in a prefill batch.
            let prefix: Vec<i64> = (0..bs)
                .map(|i| ((i * 37) % (2 * ps as usize + 1)) as i64)
                .collect();
            let seq: Vec<i64> = prefix
                .iter()
                .enumerate()
                .map(|(i, &p)| p + 1 + ((i * 101) % (4 * ps as usize + 13)) as i64)
                .collect();
            let [plan, base] = sample(&mode, |_| {
                let (a, r) = timed(|| pool.extend_need(black_box(&prefix), black_box(&seq)));
                let plan = r.expect("extend_need");
                let (b, r) = timed(|| {
                    request_by_request(black_box(&prefix), black_box(&seq), SIZE, ps.into())
                });
                assert_eq!(
                    r,
                    Some((plan.tokens, plan.new_pages)),
                    "the two plans disagree"
                );
                [a, b]
            });
            println!(
                "| extend | {ps} | {bs} | {} | {} | {:.1} |",
                cell_ns(&plan),
                cell_ns(&base),
                base.p50 as f64 / plan.p50.max(1) as f64
            );
            let dseq: Vec<i64> = seq.iter().map(|&s| s + 1).collect();
            let [plan, base] = sample(&mode, |_| {
                let (a, r) = timed(|| pool.decode_need(black_box(&dseq)));
                let pages = r.expect("decode_need");
                let (b, r) = timed(|| decode_request_by_request(black_box(&dseq), SIZE, ps.into()));
                assert_eq!(r, Some(pages), "the two plans disagree");
                [a, b]
            });
            println!(
                "| decode | {ps} | {bs} | {} | {} | {:.1} |",
                cell_ns(&plan),
                cell_ns(&base),
                base.p50 as f64 / plan.p50.max(1) as f64
            );
        }
    }
}
