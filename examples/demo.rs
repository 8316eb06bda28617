//! kvpool's main-job demo: a serving simulation in which kvpool's own `Scheduler` decides
//! what each step runs and a `Pool` hands out the KV slots, on a synthetic, ShareGPT-like
//! workload. The engine side checks every slot it is given against its own books and the
//! scheduler's view, and reports what happened.
//!
//! ```text
//! cargo run --release --example demo
//! cargo run --release --example demo -- --page-size 1 --need-sort --mixed-chunk
//! cargo run --release --example demo -- --backend cuda
//! cargo run --release --example demo -- --help
//! ```
//!
//! `--backend cuda` runs the same simulation with a `kvpool::cuda::DevicePool` on GPU 0,
//! every call checked against a host pool (`demo/device.rs`); without a GPU and driver it
//! says so and exits with status 2.
//!
//! The loop itself (what an engine copies) is `demo/engine.rs`. The run is deterministic
//! for a given seed: no clock enters a decision (wall time appears only in the report). It
//! exits non-zero if any check fails.

mod demo {
    pub mod args;
    pub mod cuda;
    pub mod device;
    pub mod engine;
    pub mod kv;
    pub mod ledger;
    pub mod metrics;
    pub mod rng;
    pub mod workload;
}

use std::io::{IsTerminal, Write};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use kvpool::admission::{Policy, PriorityConfig, Scheduler, SchedulerConfig, SchedulerStats};
use kvpool::{BackendKind, ErrorKind, Pool, PoolConfig, PoolStats};

use demo::args::{self, Args, Backend, Command, PolicyName};
use demo::device::DeviceKv;
use demo::engine::{Engine, Failure};
use demo::kv::KvPool;
use demo::metrics::{sparkline, Metrics, Summary};
use demo::workload::{self, WorkloadSpec};

/// Width of the sparklines in the report.
const CHART_WIDTH: usize = 64;

/// SGLang's default priority-preemption threshold.
const PREEMPTION_THRESHOLD: i64 = 10;

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
    let system_prompts = system_prompts(&args, pool.as_ref());
    let scheduler = match create_scheduler(&args, pool.as_ref(), &system_prompts) {
        Ok(scheduler) => scheduler,
        Err(code) => return code,
    };
    let spec = workload_spec(&args, &system_prompts);
    let requests = workload::generate(&spec, args.seed);
    print_header(&args, &spec, pool.as_ref(), scheduler.config());

    let started = Instant::now();
    let outcome = Engine::new(pool, scheduler, requests, &system_prompts).and_then(|mut engine| {
        run(&mut engine)?;
        engine.shutdown()?;
        final_checks(&mut engine)?;
        Ok(engine)
    });
    let wall = started.elapsed();
    match outcome {
        Ok(engine) => {
            print_report(&engine, wall);
            ExitCode::SUCCESS
        }
        Err(Failure(message)) => {
            eprintln!("\ncheck failed: {message}");
            ExitCode::FAILURE
        }
    }
}

/// Creates the pool the flags ask for: a host `Pool`, or a `DevicePool` on GPU 0 shadowed
/// by a host pool. A GPU that cannot be used is reported as such (exit status 2): the demo
/// never pretends a GPU ran.
fn create_pool(args: &Args) -> Result<Box<dyn KvPool>, ExitCode> {
    let config = PoolConfig {
        size: args.size,
        page_size: args.page_size,
        need_sort: args.need_sort,
        backend: BackendKind::Host,
        ..PoolConfig::default()
    };
    let pool: Result<Box<dyn KvPool>, _> = match args.backend {
        Backend::Host => Pool::new(config).map(|pool| Box::new(pool) as _),
        Backend::Cuda => DeviceKv::new(config, 0).map(|pool| Box::new(pool) as _),
    };
    pool.map_err(|err| {
        match err.kind() {
            ErrorKind::CudaUnavailable | ErrorKind::CudaError => {
                eprintln!("error: cannot create a pool on CUDA device 0: {err}");
                eprintln!(
                    "(--backend cuda needs an NVIDIA GPU and its driver; run with --backend host)"
                );
            }
            _ => eprintln!("error: invalid pool configuration: {err}"),
        }
        ExitCode::from(2)
    })
}

/// The shared system prompts: 512, 1024, 1536, ... tokens. Their KV is pinned for the
/// whole run, whole pages only (a paged prefix cache matches whole pages).
fn system_prompts(args: &Args, pool: &dyn KvPool) -> Vec<u32> {
    let ps = pool.page_size();
    (1..=args.shared_prefixes as u32)
        .map(|k| 512 * k / ps * ps)
        .collect()
}

/// SGLang's defaults (`SchedulerConfig::new`) with the flags applied. The scheduler's
/// capacity is what the pool has left once the system prompts are pinned.
fn create_scheduler(
    args: &Args,
    pool: &dyn KvPool,
    system_prompts: &[u32],
) -> Result<Scheduler, ExitCode> {
    let pinned: u64 = system_prompts.iter().map(|&len| u64::from(len)).sum();
    if pinned * 2 > pool.size() {
        eprintln!(
            "error: the {} system prompts ({pinned} tokens) would take more than half of the pool; raise --size or lower --shared-prefixes",
            system_prompts.len()
        );
        return Err(ExitCode::from(2));
    }
    let mut config = SchedulerConfig::new(pool.size() - pinned, u64::from(pool.page_size()));
    config.chunked_prefill_size = args.chunk;
    config.enable_mixed_chunk = args.mixed_chunk;
    config.max_running_requests = args.max_running;
    config.max_chunked_requests = args.max_chunked;
    config.prefix_cache_disabled = system_prompts.is_empty();
    config.policy = match args.policy {
        PolicyName::Fcfs => Policy::Fcfs,
        PolicyName::Lof => Policy::Lof,
        PolicyName::Lpm => Policy::Lpm,
        PolicyName::Random => Policy::Random { seed: args.seed },
        PolicyName::DfsWeight => Policy::DfsWeight,
    };
    if args.priority {
        config.priority = Some(PriorityConfig {
            low_values_first: false,
            preemption_threshold: Some(PREEMPTION_THRESHOLD),
        });
    }
    Scheduler::new(config).map_err(|err| {
        eprintln!("error: invalid scheduler configuration: {err}");
        ExitCode::from(2)
    })
}

/// The workload: prompts with a median of 480 tokens of their own and a tail to
/// `--max-prompt`, 60% of them behind a shared system prompt, outputs with a median of
/// `--output-median` (200) tokens, close to ShareGPT's shape; plus the odd prompt larger
/// than the pool.
fn workload_spec(args: &Args, system_prompts: &[u32]) -> WorkloadSpec {
    WorkloadSpec {
        requests: args.requests,
        rate: args.rate,
        prompt_median: 480.0,
        prompt_sigma: 1.0,
        max_prompt: args.max_prompt,
        output_median: args.output_median,
        output_sigma: 0.8,
        max_output: args.max_output,
        system_prompts: system_prompts.to_vec(),
        ignore_eos_share: args.ignore_eos,
        system_prompt_share: 0.6,
        oversized_share: args.oversized,
        pool_size: args.size,
        max_priority: 30,
    }
}

/// Steps the engine until every request has left, with a progress line on stderr
/// (rewritten in place on a terminal, a plain line every 500 steps otherwise).
fn run(engine: &mut Engine) -> Result<(), Failure> {
    let terminal = std::io::stderr().is_terminal();
    let every = if terminal { 50 } else { 500 };
    while !engine.is_done() {
        engine.step()?;
        if engine.steps().is_multiple_of(every) {
            let (waiting, chunking, running) = engine.scheduler().counts();
            let line = format!(
                "step {:>6}  finished {:>5}  waiting {:>5}  chunking {:>2}  running {:>4}  pool {:>5.1}%  ratio {:.3}",
                engine.steps(),
                engine.metrics.finished,
                waiting,
                chunking,
                running,
                100.0 * engine.utilisation(),
                engine.scheduler().new_token_ratio()
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
        eprint!("\r{:100}\r", "");
    }
    Ok(())
}

/// Checks that the run left nothing behind: every request finished, was refused as
/// unfittable or was aborted; the scheduler is empty and its counters agree with what the
/// engine saw; every slot is back, the books are empty and the free pages are exactly
/// `1..=num_pages`; no allocation failed and no call was rejected. A device pool is waited
/// for first, then its free list is read back and compared with its host shadow's.
fn final_checks(engine: &mut Engine) -> Result<(), Failure> {
    let all_free = engine.pool_mut().check_all_free();
    let m = &engine.metrics;
    let s = engine.scheduler().stats();
    let pool = engine.pool();
    let stats = pool.stats();
    let mut failures = Vec::new();
    let (finished, aborted, unfittable) = engine.outcomes();
    if finished + aborted + unfittable != engine.requests() {
        failures.push(format!(
            "{} requests, but {finished} finished, {aborted} aborted and {unfittable} unfittable",
            engine.requests()
        ));
    }
    if engine.scheduler().counts() != (0, 0, 0) {
        failures.push(format!(
            "the scheduler still holds (waiting, chunking, running) = {:?}",
            engine.scheduler().counts()
        ));
    }
    let expected = [
        ("finished", s.finished, finished as u64),
        ("unfittable", s.unfittable, unfittable as u64),
        ("aborts", s.aborts, aborted as u64),
        ("retractions", s.retractions, m.retractions),
        ("preemptions", s.preemptions, m.preemptions),
        ("steps", s.steps, engine.steps()),
        (
            "prefill_steps",
            s.prefill_steps,
            m.prefill_steps + m.mixed_steps,
        ),
        ("decode_steps", s.decode_steps, m.decode_steps),
        (
            "admitted",
            s.admitted,
            m.queue_delays.len() as u64 + m.retractions + m.preemptions,
        ),
    ];
    for (name, counted, seen) in expected {
        if counted != seen {
            failures.push(format!(
                "scheduler stats.{name} is {counted} but the engine saw {seen}"
            ));
        }
    }
    let ledger = engine.ledger();
    if ledger.pages_held() != 0 || ledger.slots_held() != 0 {
        failures.push(format!(
            "rows still hold {} pages / {} slots",
            ledger.pages_held(),
            ledger.slots_held()
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
    if stats.failed_allocations != 0 {
        failures.push(format!(
            "{} allocations failed for lack of slots",
            stats.failed_allocations
        ));
    }
    if stats.rejected_calls != 0 {
        failures.push(format!(
            "{} calls were rejected as invalid",
            stats.rejected_calls
        ));
    }
    if let Err(message) = all_free {
        failures.push(message);
    }
    if failures.is_empty() {
        Ok(())
    } else {
        Err(Failure(format!("after the run: {}", failures.join("; "))))
    }
}

// ---- report ---------------------------------------------------------------------------

fn print_header(args: &Args, spec: &WorkloadSpec, pool: &dyn KvPool, config: &SchedulerConfig) {
    let info = pool.info();
    let backend = match info.backend {
        BackendKind::Host => "a host pool".to_string(),
        BackendKind::Cuda { ordinal } => format!("a CUDA device pool (GPU {ordinal})"),
    };
    println!("kvpool demo: a serving loop driven by kvpool's Scheduler on {backend}");
    println!(
        "  pool       {} token slots, page size {} ({} pages), kv_rows {}, need_sort {}",
        group(info.size),
        info.page_size,
        group(u64::from(info.num_pages)),
        group(info.kv_rows),
        if info.need_sort { "on" } else { "off" }
    );
    let prompts: Vec<String> = spec.system_prompts.iter().map(|l| l.to_string()).collect();
    println!(
        "  prefix     {}",
        if prompts.is_empty() {
            "no prefix cache".to_string()
        } else {
            format!(
                "{} system prompts pinned ({} tokens); scheduler capacity {}",
                prompts.len(),
                prompts.join(" + "),
                group(config.capacity)
            )
        }
    );
    println!(
        "  scheduler  policy {}, chunked prefill {}, max_prefill_tokens {}, mixed chunk {}, max running {}, chunked in flight {}, priority {}",
        args.policy.as_str(),
        config
            .chunked_prefill_size
            .map_or("off".to_string(), |c| c.to_string()),
        config.max_prefill_tokens,
        if config.enable_mixed_chunk { "on" } else { "off" },
        config
            .max_running_requests
            .map_or("unlimited".to_string(), |n| n.to_string()),
        config.max_chunked_requests,
        match config.priority {
            Some(p) => format!(
                "on (preemption threshold {})",
                p.preemption_threshold.unwrap_or(0)
            ),
            None => "off".to_string(),
        }
    );
    println!(
        "  workload   {} requests, seed {}, {:.2} arrivals/step; prompts: median {} tokens (max {}) after a system prompt for {:.0}%, {:.1}% larger than the pool",
        group(spec.requests as u64),
        args.seed,
        spec.rate,
        spec.prompt_median,
        spec.max_prompt,
        if spec.system_prompts.is_empty() { 0.0 } else { 100.0 * spec.system_prompt_share },
        100.0 * spec.oversized_share
    );
    println!(
        "             outputs: median {} (max {}); {:.0}% ignore_eos (max_new_tokens = output), the rest chat (max_new_tokens 256..2048, stop at EOS)",
        spec.output_median,
        spec.max_output,
        100.0 * spec.ignore_eos_share
    );
}

fn print_report(engine: &Engine, wall: Duration) {
    let m = &engine.metrics;
    let steps = engine.steps();
    let stats = engine.pool().stats();
    let (finished, aborted, unfittable) = engine.outcomes();

    println!();
    println!("serving");
    println!(
        "  steps                {}: prefill {}, mixed prefill+decode {}, decode {}, idle {}",
        group(steps),
        group(m.prefill_steps),
        group(m.mixed_steps),
        group(m.decode_steps),
        group(m.idle_steps)
    );
    println!(
        "  requests             {} finished, {} unfittable, {} aborted (of {})",
        group(finished as u64),
        group(unfittable as u64),
        group(aborted as u64),
        group(engine.requests() as u64)
    );
    if let Some((id, needed, capacity)) = m.first_unfittable {
        println!(
            "                       Unfittable, e.g. request {id}: needs {} tokens, capacity {}",
            group(needed),
            group(capacity)
        );
    }
    println!(
        "  prefill tokens       {} computed, {} served from the prefix cache (largest batch {} requests; {} rows continued mid-page)",
        group(m.prefill_tokens),
        group(m.cached_tokens),
        m.max_extend_batch,
        group(m.partial_prefix_rows)
    );
    println!(
        "  decode tokens        {} (largest decode batch {})",
        group(m.decode_tokens),
        m.max_decode_batch
    );
    println!(
        "  chunked prefills     {} prefills took more than one chunk (at most {} chunks; at most {} in flight)",
        group(m.chunked_prefills),
        m.max_chunks,
        m.max_chunking
    );
    println!(
        "  retractions          {}, preemptions {} ({} finished requests were evicted at least once; {} KV slots freed to be recomputed)",
        group(m.retractions),
        group(m.preemptions),
        group(m.finished_evicted),
        group(m.evicted_tokens)
    );
    println!(
        "  new-token ratio      fell to {:.3}",
        if m.min_ratio.is_finite() {
            m.min_ratio
        } else {
            0.0
        }
    );

    let delay = Summary::of(m.queue_delays.iter().map(|&d| d as f64));
    println!();
    println!("queueing delay (steps from arrival to first admission)");
    println!(
        "  mean {:.1}  p50 {}  p99 {}  max {}",
        delay.mean, delay.p50, delay.p99, delay.max
    );

    print_occupancy(m);
    print_scheduler_stats(&engine.scheduler().stats());
    print_stats(&stats);

    let calls =
        stats.alloc_calls + stats.alloc_extend_calls + stats.alloc_decode_calls + stats.free_calls;
    let secs = wall.as_secs_f64();
    let pool_secs = m.pool_time.as_secs_f64();
    let sched_secs = m.scheduler_time.as_secs_f64();
    println!();
    println!("time");
    println!("  wall {secs:.3} s for {} steps", group(steps));
    println!(
        "  Scheduler::step {:.3} s ({:.1}% of wall), {:.2} µs per step",
        sched_secs,
        100.0 * sched_secs / secs,
        1e6 * sched_secs / steps.max(1) as f64
    );
    println!(
        "  pool calls       {:.3} s ({:.1}% of wall), {} calls, {:.2} µs per call",
        pool_secs,
        100.0 * pool_secs / secs,
        group(calls),
        1e6 * pool_secs / calls.max(1) as f64
    );
    println!();
    println!("backend            {}", engine.pool().backend());
    if let Some(l) = engine.pool().lockstep() {
        println!(
            "device: {} calls, every index identical to the host backend",
            group(l.calls)
        );
        println!(
            "  {} indices compared; after each of {} steps no device fault and the host backend's counts and stats; the free list read back identical at the end",
            group(l.indices),
            group(l.steps)
        );
        println!("  (the pool call times above include the copies, the waits for the stream and the host shadow)");
    }
    println!(
        "slot stream digest {:#018x} (same seed and flags, same digest)",
        m.slot_digest
    );
    println!("all checks passed: every allocation the scheduler planned succeeded, every slot fresh and in range, rows match the scheduler and the pool every step, every request finished or was refused, everything freed at the end");
}

fn print_scheduler_stats(s: &SchedulerStats) {
    println!();
    println!("scheduler stats");
    println!(
        "  steps            {}  prefill {}  decode {}",
        group(s.steps),
        group(s.prefill_steps),
        group(s.decode_steps)
    );
    println!(
        "  requests         admitted {}  chunks {}  finished {}",
        group(s.admitted),
        group(s.chunks),
        group(s.finished)
    );
    println!(
        "  evictions        retractions {}  preemptions {}  aborts {}  unfittable {}",
        group(s.retractions),
        group(s.preemptions),
        group(s.aborts),
        group(s.unfittable)
    );
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
        "  slots            handed out {}  returned (whole pages) {}",
        group(s.tokens_allocated),
        group(s.slots_freed)
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
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}
