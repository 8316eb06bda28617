//! kvpool's main-job demo: a continuous-batching scheduler driving a `Pool` through a
//! synthetic, ShareGPT-like workload, checking every slot it is given, and reporting
//! what happened.
//!
//! ```text
//! cargo run --release --example demo
//! cargo run --release --example demo -- --page-size 1 --need-sort
//! cargo run --release --example demo -- --help
//! ```
//!
//! The run is deterministic for a given seed: no clock enters a decision (wall time
//! appears only in the report). It exits non-zero if any check fails.

mod demo {
    pub mod args;
    pub mod ledger;
    pub mod metrics;
    pub mod ratio;
    pub mod rng;
    pub mod scheduler;
    pub mod workload;
}

use std::io::{IsTerminal, Write};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use kvpool::{BackendKind, ErrorKind, Pool, PoolConfig, PoolStats};

use demo::args::{self, Args, Backend, Command};
use demo::metrics::{sparkline, Metrics, Summary};
use demo::scheduler::{Failure, Scheduler};
use demo::workload::{self, WorkloadSpec};

/// Width of the sparklines in the report.
const CHART_WIDTH: usize = 64;

fn main() -> ExitCode {
    let args = match args::parse(std::env::args().skip(1)) {
        Ok(Command::Run(args)) => args,
        Ok(Command::Help) => {
            println!("{}", args::usage());
            return ExitCode::SUCCESS;
        }
        Err(message) => {
            eprintln!("error: {message}\n\n{}", args::usage());
            return ExitCode::from(2);
        }
    };
    let pool = match create_pool(&args) {
        Ok(pool) => pool,
        Err(code) => return code,
    };
    let spec = workload_spec(&args);
    let requests = workload::generate(&spec, args.seed);
    print_header(&args, &spec, &pool);

    let mut scheduler = Scheduler::new(pool, requests, args.chunk, args.new_token_ratio);
    let started = Instant::now();
    let outcome = run(&mut scheduler).and_then(|()| final_checks(&scheduler));
    let wall = started.elapsed();
    match outcome {
        Ok(()) => {
            print_report(&scheduler, wall, args.new_token_ratio);
            ExitCode::SUCCESS
        }
        Err(Failure(message)) => {
            eprintln!("\ncheck failed: {message}");
            ExitCode::FAILURE
        }
    }
}

/// Creates the pool the flags ask for. A backend this build lacks is reported as such
/// (exit status 2): the demo never pretends a GPU ran.
fn create_pool(args: &Args) -> Result<Pool, ExitCode> {
    let backend = match args.backend {
        Backend::Host => BackendKind::Host,
        Backend::Cuda => BackendKind::Cuda { ordinal: 0 },
    };
    let config = PoolConfig {
        size: args.size,
        page_size: args.page_size,
        need_sort: args.need_sort,
        backend,
        ..PoolConfig::default()
    };
    Pool::new(config).map_err(|err| {
        if err.kind() == ErrorKind::Unsupported {
            eprintln!("error: cannot create a pool on backend {backend:?}: {err}");
            eprintln!("(this build of kvpool has no CUDA backend; run with --backend host)");
        } else {
            eprintln!("error: invalid pool configuration: {err}");
        }
        ExitCode::from(2)
    })
}

/// The workload: prompts with a median of 480 tokens and a tail to `--max-prompt`,
/// outputs with a median of 200 tokens, close to ShareGPT's shape.
fn workload_spec(args: &Args) -> WorkloadSpec {
    WorkloadSpec {
        requests: args.requests,
        rate: args.rate,
        prompt_median: 480.0,
        prompt_sigma: 1.0,
        max_prompt: args.max_prompt,
        output_median: 200.0,
        output_sigma: 0.8,
        max_output: args.max_output,
    }
}

/// Steps the scheduler until every request has finished, with a progress line on stderr
/// (rewritten in place on a terminal, a plain line every 500 steps otherwise).
fn run(scheduler: &mut Scheduler) -> Result<(), Failure> {
    let terminal = std::io::stderr().is_terminal();
    let every = if terminal { 50 } else { 500 };
    while !scheduler.is_done() {
        scheduler.step()?;
        if scheduler.steps() % every == 0 {
            let line = format!(
                "step {:>6}  finished {:>5}  waiting {:>5}  running {:>4}  pool {:>5.1}%",
                scheduler.steps(),
                scheduler.finished(),
                scheduler.waiting_len(),
                scheduler.running_len(),
                100.0 * scheduler.utilisation()
            );
            if terminal {
                eprint!("\r{line}");
                let _ = std::io::stderr().flush();
            } else {
                eprintln!("{line}");
            }
        }
    }
    if terminal {
        eprint!("\r{:80}\r", "");
    }
    Ok(())
}

/// Checks that the run left nothing behind: every slot is back, the books are empty, the
/// free pages are exactly `1..=num_pages`, and the counters agree with what the demo did.
fn final_checks(scheduler: &Scheduler) -> Result<(), Failure> {
    let ledger_pages = scheduler.ledger().pages_held();
    let ledger_slots = scheduler.ledger().slots_held();
    let shortages = scheduler.metrics.decode_shortages;
    let pool = scheduler.pool();
    let stats = pool.stats();
    let mut failures = Vec::new();
    if ledger_pages != 0 || ledger_slots != 0 {
        failures.push(format!(
            "requests still hold {ledger_pages} pages / {ledger_slots} slots"
        ));
    }
    if pool.available_size() != pool.size() {
        failures.push(format!(
            "available_size {} != size {}",
            pool.available_size(),
            pool.size()
        ));
    }
    if stats.pages_in_use != 0 {
        failures.push(format!("stats.pages_in_use is {}", stats.pages_in_use));
    }
    if stats.pages_allocated != stats.pages_freed {
        failures.push(format!(
            "{} pages allocated but {} freed",
            stats.pages_allocated, stats.pages_freed
        ));
    }
    if stats.rejected_calls != 0 {
        failures.push(format!(
            "{} calls were rejected as invalid",
            stats.rejected_calls
        ));
    }
    if stats.failed_allocations != shortages {
        failures.push(format!(
            "stats.failed_allocations is {} but the demo saw {shortages} shortages",
            stats.failed_allocations
        ));
    }
    let mut census = pool.free_page_census();
    census.sort_unstable();
    if !census.iter().copied().eq(1..=pool.num_pages()) {
        failures.push(format!(
            "the free pages are not exactly 1..={} ({} listed)",
            pool.num_pages(),
            census.len()
        ));
    }
    if failures.is_empty() {
        Ok(())
    } else {
        Err(Failure(format!("after the run: {}", failures.join("; "))))
    }
}

// ---- report ---------------------------------------------------------------------------

fn print_header(args: &Args, spec: &WorkloadSpec, pool: &Pool) {
    let info = pool.info();
    println!("kvpool demo: continuous batching on a host pool");
    println!(
        "  pool      {} token slots, page size {} ({} pages), kv_rows {}, need_sort {}",
        group(info.size),
        info.page_size,
        group(u64::from(info.num_pages)),
        group(info.kv_rows),
        if info.need_sort { "on" } else { "off" }
    );
    println!(
        "  workload  {} requests, seed {}, {:.2} arrivals/step, prompt median {} (max {}), output median {} (max {}), chunk {}",
        group(spec.requests as u64),
        args.seed,
        spec.rate,
        spec.prompt_median,
        spec.max_prompt,
        spec.output_median,
        spec.max_output,
        args.chunk
    );
    println!(
        "  admission {}",
        if args.new_token_ratio {
            "FCFS; reserves the next decode step plus SGLang's new-token ratio of running output"
        } else {
            "FCFS; reserves only what the next decode step needs (retracts when decode runs short)"
        }
    );
}

fn print_report(scheduler: &Scheduler, wall: Duration, new_token_ratio: bool) {
    let steps = scheduler.steps();
    let finished = scheduler.finished();
    let stats = scheduler.pool().stats();
    let m = &scheduler.metrics;

    println!();
    println!("scheduler");
    println!("  steps                {}", group(steps));
    println!("  requests finished    {}", group(finished as u64));
    println!(
        "  prefill tokens       {} in {} alloc_extend batches (largest {} requests; {} rows continued mid-page)",
        group(m.prefill_tokens),
        group(m.extend_batches),
        m.max_extend_batch,
        group(m.partial_prefix_rows)
    );
    println!(
        "  decode tokens        {} (largest decode batch {})",
        group(m.decode_tokens),
        m.max_decode_batch
    );
    println!(
        "  chunked prefills     {} requests needed more than one chunk (at most {} chunks)",
        group(m.finished_chunked),
        m.max_chunks
    );
    println!(
        "  retractions          {} ({} requests retracted at least once; {} KV slots freed to be recomputed)",
        group(m.retractions),
        group(m.finished_retracted),
        group(m.retracted_tokens)
    );
    if new_token_ratio {
        println!(
            "  new-token ratio      fell to {:.3} (the share of running requests' remaining output reserved)",
            m.min_ratio
        );
    }

    let delay = Summary::of(m.queue_delays.iter().map(|&d| d as f64));
    println!();
    println!("queueing delay (steps from arrival to first admission)");
    println!(
        "  mean {:.1}  p50 {}  p99 {}  max {}",
        delay.mean, delay.p50, delay.p99, delay.max
    );

    print_occupancy(m);
    print_stats(&stats);

    let calls =
        stats.alloc_calls + stats.alloc_extend_calls + stats.alloc_decode_calls + stats.free_calls;
    let secs = wall.as_secs_f64();
    let pool_secs = m.pool_time.as_secs_f64();
    println!();
    println!("time");
    println!(
        "  wall {:.3} s, {} allocator calls ({:.0} calls/s overall)",
        secs,
        group(calls),
        calls as f64 / secs
    );
    println!(
        "  inside kvpool {:.3} s ({:.1}% of wall), {:.2} µs per call",
        pool_secs,
        100.0 * pool_secs / secs,
        1e6 * pool_secs / calls.max(1) as f64
    );
    println!();
    println!(
        "slot stream digest {:#018x} (same seed and flags, same digest)",
        m.slot_digest
    );
    println!("all checks passed: every slot fresh and in range, books match the pool every step, everything freed at the end");
}

/// Utilisation, running and waiting over the run, as numbers and sparklines.
fn print_occupancy(m: &Metrics) {
    let util = Summary::of(m.utilisation.iter().copied());
    let running: Vec<f64> = m.running.iter().map(|&r| r as f64).collect();
    let waiting: Vec<f64> = m.waiting.iter().map(|&w| w as f64).collect();
    let max_running = running.iter().copied().fold(0.0, f64::max);
    let max_waiting = waiting.iter().copied().fold(0.0, f64::max);
    let per_column = m.utilisation.len().div_ceil(CHART_WIDTH);
    let busy = m.utilisation.iter().filter(|&&u| u >= 0.9).count();
    println!();
    println!("pool utilisation (per step, after allocation, before that step's frees)");
    println!(
        "  min {:.1}%  mean {:.1}%  p50 {:.1}%  max {:.1}%  ({:.1}% of steps at >= 90%)",
        100.0 * util.min,
        100.0 * util.mean,
        100.0 * util.p50,
        100.0 * util.max,
        100.0 * busy as f64 / m.utilisation.len().max(1) as f64
    );
    println!("  over time, {per_column} steps per column:");
    println!(
        "    pool     {}  (0..100%)",
        sparkline(&m.utilisation, CHART_WIDTH, 1.0)
    );
    println!(
        "    running  {}  (0..{max_running})",
        sparkline(&running, CHART_WIDTH, max_running)
    );
    println!(
        "    waiting  {}  (0..{max_waiting})",
        sparkline(&waiting, CHART_WIDTH, max_waiting)
    );
}

fn print_stats(s: &PoolStats) {
    println!();
    println!("kvpool stats");
    println!(
        "  calls            alloc {}  alloc_extend {}  alloc_decode {}  free {}",
        group(s.alloc_calls),
        group(s.alloc_extend_calls),
        group(s.alloc_decode_calls),
        group(s.free_calls)
    );
    println!(
        "  pages            allocated {}  freed {}  in use {}  peak {}",
        group(s.pages_allocated),
        group(s.pages_freed),
        group(s.pages_in_use),
        group(s.pages_in_use_peak)
    );
    println!(
        "  tokens           allocated {}  freed {}",
        group(s.tokens_allocated),
        group(s.tokens_freed)
    );
    println!(
        "  failures         failed allocations {}  rejected calls {}",
        group(s.failed_allocations),
        group(s.rejected_calls)
    );
    println!("  merges           {}", group(s.merges));
}

/// `1234567` as `1,234,567`.
fn group(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}
