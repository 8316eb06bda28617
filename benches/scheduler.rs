//! Host time of the continuous-batching scheduler step ([`kvpool::admission::Scheduler::step`])
//! and of the prefill admission core under it ([`kvpool::admission::PrefillAdder`]).
//!
//! What is measured: the wall time of one call, taken with [`Instant`] around that call
//! alone. Each cell is the median (with p10 and p90) of many individually timed calls after
//! a warm-up, with the harness shared with `benches/host_ops.rs` (`benches/support/mod.rs`).
//!
//! Why: the design brief's target is a scheduler step with 1,024 waiting and 256 running
//! requests in at most 50 µs of host time (SGLang's Python scheduler takes milliseconds).
//!
//! How state is restored. `step` mutates the scheduler (admitted requests leave the queue,
//! decode grows every running request, retraction re-queues some), so every sample of a
//! `step` case starts from a **freshly built scheduler** in exactly the same state: untimed,
//! the 256 running requests are submitted and admitted by one setup pass, then the waiting
//! requests are submitted (and, for the "batch full" cases, one more untimed step latches
//! `batch_is_full`). Only the measured `step` is inside the timer; building the scheduler,
//! dropping the returned plan and dropping the scheduler are not. Each sample therefore
//! makes the same decisions, which the bench checks (the plan's shape must match the first
//! sample's). Cross-check: one extra case keeps a single long-lived scheduler instead and
//! holds its population steady between samples (untimed: the oldest running requests
//! finish and new requests are submitted so that 256 run and 1,024 wait again), so its
//! hash map and vectors have churned as in a long-running server.
//!
//! Warm and cold. A freshly built state is hot in every cache, which flatters the step: in
//! a server the GPU forward pass and other host threads run between two steps. So every
//! fresh-state case is measured twice: warm (the step right after the untimed build) and
//! cold (the build, then 64 MiB read untimed, twice the L3 of the recording machine, then
//! the step): the two ends of what a server may see.
//!
//! Workload (deterministic, splitmix64): prompts of 64–1,023 tokens (70%), 1,024–4,095
//! (25%) or 4,096–16,383 (5%); `max_new_tokens` 128–8,192 (half are 512 or 1,024); half of
//! the waiting requests share one of 16 cached system prompts (256–2,032 tokens,
//! page-aligned), half of those also a cached document (512 tokens more), with the matching
//! prefix-tree path for the DFS-weight policy. Running requests have generated 0–2,047
//! tokens. Scheduler: `SchedulerConfig::new(1 << 20, 16)`, i.e. SGLang's defaults
//! (`max_prefill_tokens` 16,384, chunked prefill 8,192, clip 4,096, new-token ratio 0.7) on
//! a 1,048,576-token pool with 16-token pages. The 256 running requests hold 567,319 tokens
//! of KV (481,257 free).
//!
//! Run: `cargo bench --bench scheduler` (full), `cargo bench --bench scheduler -- --quick`
//! or `KVPOOL_BENCH_QUICK=1 cargo bench --bench scheduler` (a smoke run). `-- --only step`
//! (or `scaling`, `adder`) runs one group; `-- --only step:retracts,warm` only the `step`
//! cases whose description contains "retracts" and "warm" (for `perf record`). The markdown
//! tables go to stdout, progress to stderr.

mod support;

use std::hint::black_box;

use kvpool::admission::{
    AdderConfig, Candidate, Policy, PrefillAdder, RequestSpec, RunningRequest, Scheduler,
    SchedulerConfig, StepKind, StepPlan,
};
use support::{cell_ns, load_average, print_machine, sample, timed, timer_floor, Mode, Summary};

/// Token slots of the pool the scheduler budgets for.
const CAPACITY: u64 = 1 << 20;
const PAGE_SIZE: u64 = 16;
/// Running requests of every `step` case.
const RUNNING: usize = 256;
/// Waiting requests of the headline cases (the brief's target).
const WAITING: usize = 1024;
/// Waiting-queue sizes of the scaling table.
const WAITING_SIZES: [usize; 5] = [16, 64, 256, 1024, 4096];
/// The brief's host-time target for one step, in ns.
const TARGET_NS: u64 = 50_000;
/// Room that never binds: the pool's free tokens are handed to the scheduler as they are,
/// so "ample" is what the 256 running requests leave of the pool.
const SETUP_ROOM: u64 = 1 << 40;
/// A pool almost full: enough for the decode step, not for any admission.
const NEARLY_FULL: u64 = 4096;
/// Bytes touched (untimed) to evict the scheduler from every cache level in the "cold"
/// cases: twice the 32 MiB L3 of the machine the numbers were recorded on.
const FLUSH_BYTES: usize = 64 << 20;
/// Calls per sample in the `add_one_req` cases (the first is timed alone, the rest together).
const ADDER_CALLS: usize = 32;

// ---- case selection ---------------------------------------------------------------------

/// `--only GROUP[:TEXT]`: one group, and within it the cases whose description contains
/// every comma-separated part of TEXT.
struct Only(Option<(String, Option<String>)>);

impl Only {
    fn from_args() -> Self {
        let args: Vec<String> = std::env::args().collect();
        Self(
            args.iter()
                .position(|a| a == "--only")
                .and_then(|i| args.get(i + 1).cloned())
                .map(|o| match o.split_once(':') {
                    Some((group, case)) => (group.to_string(), Some(case.to_string())),
                    None => (o, None),
                }),
        )
    }

    fn runs(&self, group: &str) -> bool {
        self.0.as_ref().is_none_or(|(g, _)| g == group)
    }

    fn runs_case(&self, description: &str) -> bool {
        self.0
            .as_ref()
            .and_then(|(_, case)| case.as_deref())
            .is_none_or(|case| case.split(',').all(|part| description.contains(part)))
    }
}

// ---- workload ---------------------------------------------------------------------------

/// splitmix64.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Cached system prompts shared by half of the requests.
const SYSTEM_PROMPTS: u64 = 16;
/// Documents cached under each system prompt.
const DOCS_PER_PROMPT: u64 = 8;
const DOC_TOKENS: u64 = 512;

fn system_prompt_len(s: u64) -> u64 {
    256 + (s * 113) % 1792 / PAGE_SIZE * PAGE_SIZE
}

/// Generates request specs: prompt and output lengths, cached prefixes and their
/// prefix-tree paths (see the module docs).
struct Generator {
    rng: Rng,
    /// Cached prefixes already offered as evictable (later sharers pass 0).
    seen: std::collections::HashSet<(u64, u64)>,
}

impl Generator {
    fn new(seed: u64) -> Self {
        Self {
            rng: Rng(seed),
            seen: Default::default(),
        }
    }

    fn input_len(&mut self) -> u64 {
        match self.rng.below(100) {
            0..70 => 64 + self.rng.below(960),
            70..95 => 1024 + self.rng.below(3072),
            _ => 4096 + self.rng.below(12288),
        }
    }

    fn max_new_tokens(&mut self) -> u64 {
        match self.rng.below(100) {
            0..10 => 128,
            10..25 => 256,
            25..50 => 512,
            50..75 => 1024,
            75..90 => 2048,
            90..97 => 4096,
            _ => 8192,
        }
    }

    /// A waiting request (nothing generated yet).
    fn waiting(&mut self, id: u64) -> RequestSpec {
        let input_len = self.input_len();
        let max_new_tokens = self.max_new_tokens();
        let mut spec = RequestSpec {
            id,
            input_len,
            max_new_tokens,
            ..RequestSpec::default()
        };
        if self.rng.below(2) == 0 {
            let s = self.rng.below(SYSTEM_PROMPTS);
            let sys = system_prompt_len(s);
            let doc = self.rng.below(DOCS_PER_PROMPT);
            let (node, path, len) = if self.rng.below(2) == 0 {
                (
                    doc + 1,
                    vec![1 + s, 1000 + s * DOCS_PER_PROMPT + doc],
                    sys + DOC_TOKENS,
                )
            } else {
                (0, vec![1 + s], sys)
            };
            if len < input_len {
                spec.prefix_len = len;
                spec.prefix_evictable = if self.seen.insert((s, node)) { len } else { 0 };
                spec.prefix_path = path;
            }
        }
        spec
    }

    /// A request that is decoding: it has generated up to 2,047 tokens. Its spec marks all
    /// but one token of what it holds as cached, so the setup pass admits all 256 at once
    /// (each request's KV length after admission is its prompt plus output either way).
    fn running(&mut self, id: u64) -> RequestSpec {
        let input_len = self.input_len();
        let max_new_tokens = self.max_new_tokens();
        let output_len = self.rng.below(max_new_tokens.min(2048));
        RequestSpec {
            id,
            input_len,
            max_new_tokens,
            output_len,
            prefix_len: input_len + output_len - 1,
            ..RequestSpec::default()
        }
    }
}

/// Prepared specs: the running population and the longest waiting queue (shorter queues
/// are its prefixes).
struct Workload {
    running: Vec<RequestSpec>,
    waiting: Vec<RequestSpec>,
    /// More waiting requests for the steady-state loop's refills.
    spare: Vec<RequestSpec>,
}

impl Workload {
    fn new() -> Self {
        let mut g = Generator::new(0x5EED_0001);
        let running = (0..RUNNING as u64).map(|i| g.running(i)).collect();
        let waiting = (0..*WAITING_SIZES.iter().max().unwrap() as u64)
            .map(|i| g.waiting(1_000_000 + i))
            .collect();
        let spare = (0..100_000).map(|i| g.waiting(2_000_000 + i)).collect();
        Self {
            running,
            waiting,
            spare,
        }
    }

    /// Tokens of KV the running requests hold once admitted.
    fn running_kv(&self) -> u64 {
        self.running
            .iter()
            .map(|r| r.input_len + r.output_len)
            .sum()
    }

    /// The pool's free tokens with the running requests in it.
    fn ample(&self) -> u64 {
        CAPACITY - self.running_kv()
    }
}

fn config(policy: Policy) -> SchedulerConfig {
    let mut c = SchedulerConfig::new(CAPACITY, PAGE_SIZE);
    c.policy = policy;
    c
}

/// A scheduler with the 256 running requests admitted (one untimed pass) and the first
/// `waiting` waiting requests queued.
fn build(config: SchedulerConfig, w: &Workload, waiting: usize) -> Scheduler {
    let mut s = Scheduler::new(config).expect("scheduler");
    for spec in &w.running {
        s.submit(spec.clone()).expect("submit running");
    }
    let plan = s.step(SETUP_ROOM, 0, true);
    assert_eq!(
        plan.prefill.len(),
        RUNNING,
        "setup pass admits every running request"
    );
    assert_eq!(s.counts(), (0, 0, RUNNING));
    for spec in &w.waiting[..waiting] {
        s.submit(spec.clone()).expect("submit waiting");
    }
    assert_eq!(s.counts(), (waiting, 0, RUNNING));
    s
}

/// What a plan decided, compared sample to sample.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Shape {
    kind: StepKind,
    admitted: usize,
    chunked: usize,
    prefill_tokens: u64,
    decoded: usize,
    retracted: usize,
    batch_is_full: bool,
}

impl Shape {
    fn of(plan: &StepPlan) -> Self {
        Self {
            kind: plan.kind,
            admitted: plan.prefill.len(),
            chunked: plan.prefill.iter().filter(|e| e.chunked).count(),
            prefill_tokens: plan.prefill.iter().map(|e| e.extend_len).sum(),
            decoded: plan.decode.len(),
            retracted: plan.retracted.len() + plan.aborted.len(),
            batch_is_full: plan.batch_is_full,
        }
    }

    fn describe(&self) -> String {
        match self.kind {
            StepKind::Prefill => format!(
                "prefill {} req ({} chunked), {} tok; stop: {}",
                self.admitted,
                self.chunked,
                self.prefill_tokens,
                if self.batch_is_full {
                    "memory"
                } else {
                    "input/chunk budget"
                }
            ),
            StepKind::Decode if self.retracted > 0 => {
                format!("decode {}, retracted {}", self.decoded, self.retracted)
            }
            StepKind::Decode => format!("decode {}", self.decoded),
            StepKind::Idle => "idle".into(),
        }
    }
}

/// Times `step(available, 0, allow_prefill)` on a fresh scheduler per sample, built by
/// `prepare` (untimed). Every sample must decide the same.
fn bench_step(
    mode: &Mode,
    mut prepare: impl FnMut() -> Scheduler,
    available: u64,
    allow_prefill: bool,
) -> (Summary, Shape) {
    let mut shape = None;
    let [summary] = sample(mode, |_| {
        let mut s = prepare();
        let (ns, plan) = timed(|| s.step(black_box(available), 0, allow_prefill));
        let got = Shape::of(&plan);
        assert_eq!(
            *shape.get_or_insert(got),
            got,
            "samples decided differently"
        );
        drop(plan);
        drop(s);
        [ns]
    });
    (summary, shape.expect("sampled"))
}

/// Reads one byte per cache line of `buf` (its pages were written when it was made, so
/// they are real memory, and reading leaves no dirty lines to write back during the step).
fn flush_caches(buf: &[u8]) {
    let sum = buf
        .chunks(64)
        .fold(0u64, |acc, line| acc.wrapping_add(u64::from(line[0])));
    black_box(sum);
}

/// The smallest available room with which the pass admits at least `n` requests.
fn room_admitting(w: &Workload, n: usize) -> u64 {
    let admitted = |room: u64| {
        let mut s = build(config(Policy::Fcfs), w, WAITING);
        s.step(room, 0, true).prefill.len()
    };
    let (mut lo, mut hi) = (0, w.ample());
    assert!(admitted(hi) >= n, "ample room admits at least {n}");
    while lo + 1 < hi {
        let mid = lo + (hi - lo) / 2;
        if admitted(mid) >= n {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    hi
}

// ---- the step at 1,024 waiting / 256 running --------------------------------------------

struct StepRow {
    name: &'static str,
    how: &'static str,
    warm: Summary,
    /// Caches flushed between building the state and the step (not for the steady loop).
    cold: Option<Summary>,
    shape: Shape,
}

/// How a `step` case prepares its scheduler.
#[derive(Clone, Copy)]
enum Start {
    /// Built fresh.
    Fresh,
    /// Built fresh, then one untimed step with the pool nearly full: the pass admits nothing
    /// (NO_TOKEN), latches `batch_is_full`, and the running requests decode once.
    BatchFull,
}

fn bench_steps(mode: &Mode, only: &Only, w: &Workload) -> Vec<StepRow> {
    let ample = w.ample();
    let prepare = |start: Start| {
        let mut s = build(config(Policy::Fcfs), w, WAITING);
        if let Start::BatchFull = start {
            let plan = s.step(NEARLY_FULL, 0, true);
            assert!(plan.kind == StepKind::Decode && plan.batch_is_full);
        }
        s
    };
    let flush = vec![1u8; FLUSH_BYTES];
    let run = |name, how, start: Start, available: u64, allow_prefill| {
        eprintln!("scheduler: {name}; {how}");
        let (warm, shape) = bench_step(mode, || prepare(start), available, allow_prefill);
        let cold = only.runs_case(&format!("{name}; {how}; cold")).then(|| {
            eprintln!("scheduler: {name}; {how}; cold");
            let cold_prepare = || {
                let s = prepare(start);
                flush_caches(&flush);
                s
            };
            let (cold, cold_shape) = bench_step(mode, cold_prepare, available, allow_prefill);
            assert_eq!(shape, cold_shape);
            cold
        });
        StepRow {
            name,
            how,
            warm,
            cold,
            shape,
        }
    };
    let cases: [(&str, &str, Start, u64, bool); 6] = [
        (
            "prefill, stops on chunk budget",
            "fresh; free = what running leaves",
            Start::Fresh,
            ample,
            true,
        ),
        (
            "prefill, stops on memory",
            "fresh; free = least that admits 3",
            Start::Fresh,
            u64::MAX, // calibrated below
            true,
        ),
        (
            "prefill admits none → decode",
            "fresh; free = 4,096",
            Start::Fresh,
            NEARLY_FULL,
            true,
        ),
        (
            "decode (batch full, prefill skipped)",
            "batch full; free = 4,096",
            Start::BatchFull,
            NEARLY_FULL,
            true,
        ),
        (
            "decode (allow_prefill = false)",
            "fresh; free = what running leaves",
            Start::Fresh,
            ample,
            false,
        ),
        (
            "decode that retracts",
            "batch full; free = 0",
            Start::BatchFull,
            0,
            true,
        ),
    ];
    let mut rows: Vec<StepRow> = cases
        .into_iter()
        .filter(|(name, how, ..)| only.runs_case(&format!("{name}; {how}; warm; cold")))
        .map(|(name, how, start, available, allow_prefill)| {
            let available = if available == u64::MAX {
                room_admitting(w, 3)
            } else {
                available
            };
            run(name, how, start, available, allow_prefill)
        })
        .collect();
    let (name, how) = (
        "prefill, stops on chunk budget",
        "steady-state loop (finish + submit refill)",
    );
    if only.runs_case(&format!("{name}; {how}; warm")) {
        eprintln!("scheduler: {name}; {how}");
        let (warm, shape) = bench_steady(mode, w);
        rows.push(StepRow {
            name,
            how,
            warm,
            cold: None,
            shape,
        });
    }
    rows
}

/// The cross-check: one scheduler, population restored between samples by finishing the
/// oldest running requests and submitting new ones. Decisions vary from sample to sample
/// (different requests reach the head of the queue), so the shape reported is the first's.
fn bench_steady(mode: &Mode, w: &Workload) -> (Summary, Shape) {
    let mut s = build(config(Policy::Fcfs), w, WAITING);
    let ample = w.ample();
    let mut running: std::collections::VecDeque<u64> = w.running.iter().map(|r| r.id).collect();
    let mut spare = w.spare.iter().cycle();
    let mut shape = None;
    let [summary] = sample(mode, |_| {
        let (ns, plan) = timed(|| s.step(black_box(ample), 0, true));
        let got = Shape::of(&plan);
        assert_eq!(got.kind, StepKind::Prefill, "steady loop stays in prefill");
        shape.get_or_insert(got);
        running.extend(plan.prefill.iter().filter(|e| !e.chunked).map(|e| e.id));
        drop(plan);
        while s.counts().2 > RUNNING {
            let id = running.pop_front().expect("tracked");
            s.finish(id).expect("finish a running request");
        }
        while s.counts().0 < WAITING {
            let spec = spare.next().expect("cycle");
            if s.request(spec.id).is_none() {
                s.submit(spec.clone()).expect("refill");
            }
        }
        [ns]
    });
    (summary, shape.expect("sampled"))
}

// ---- scaling with the waiting queue, per policy -----------------------------------------

const POLICIES: [(&str, Policy); 5] = [
    ("Fcfs", Policy::Fcfs),
    ("Lof", Policy::Lof),
    ("Lpm", Policy::Lpm),
    ("DfsWeight", Policy::DfsWeight),
    ("Random", Policy::Random { seed: 7 }),
];

struct ScalingRow {
    waiting: usize,
    cells: Vec<(Summary, Shape)>,
}

fn bench_scaling(mode: &Mode, w: &Workload) -> Vec<ScalingRow> {
    let ample = w.ample();
    WAITING_SIZES
        .iter()
        .map(|&n| ScalingRow {
            waiting: n,
            cells: POLICIES
                .iter()
                .map(|&(name, policy)| {
                    eprintln!("scheduler: scaling {name}, waiting {n}");
                    bench_step(mode, || build(config(policy), w, n), ample, true)
                })
                .collect(),
        })
        .collect()
}

// ---- PrefillAdder alone -----------------------------------------------------------------

struct AdderRow {
    running: usize,
    /// `[first call, later calls amortized]`, normal path.
    normal: [Summary; 2],
    /// The same, `ignore_eos` future simulation (prefix cache disabled).
    ignore_eos: [Summary; 2],
}

fn running_views(n: usize) -> Vec<RunningRequest> {
    let mut g = Generator::new(0x5EED_0002);
    (0..n as u64)
        .map(|i| {
            let r = g.running(i);
            RunningRequest {
                input_len: r.input_len,
                output_len: r.output_len + 1,
                max_new_tokens: r.max_new_tokens,
                ignore_eos: i % 8 == 0,
            }
        })
        .collect()
}

/// Times `add_one_req` on a fresh adder per sample: the first call alone, then the other
/// `ADDER_CALLS - 1` in one timed region (per call). Budgets never bind, so every call
/// admits its candidate (`Continue`).
fn bench_add_one_req(
    mode: &Mode,
    cfg: AdderConfig,
    running: &[RunningRequest],
    candidates: &[Candidate],
) -> [Summary; 2] {
    sample(mode, |_| {
        let mut adder = PrefillAdder::new(cfg, 1 << 34, 0, running, 0);
        let (first, out) = timed(|| adder.add_one_req(black_box(&candidates[0])));
        assert!(out.extend_len.is_some());
        let (rest, admitted) = timed(|| {
            let mut admitted = 0;
            for c in &candidates[1..] {
                let out = adder.add_one_req(black_box(c));
                admitted += usize::from(out.extend_len.is_some());
            }
            admitted
        });
        assert_eq!(admitted, candidates.len() - 1, "budgets never bind");
        [first, rest / (candidates.len() as u64 - 1)]
    })
}

fn bench_adder(mode: &Mode, w: &Workload) -> (Vec<AdderRow>, Vec<(usize, Summary)>) {
    let cfg = AdderConfig {
        max_prefill_tokens: 1 << 34,
        chunked_prefill_size: None,
        ..AdderConfig::sglang_defaults(PAGE_SIZE)
    };
    let candidates: Vec<Candidate> = w.waiting[..ADDER_CALLS]
        .iter()
        .map(|r| Candidate {
            input_len: r.input_len,
            prefix_len: r.prefix_len,
            prefix_evictable: r.prefix_evictable,
            max_new_tokens: r.max_new_tokens,
            output_len: 0,
            ignore_eos: false,
        })
        .collect();
    let ignore_eos: Vec<Candidate> = candidates
        .iter()
        .map(|c| Candidate {
            ignore_eos: true,
            ..*c
        })
        .collect();
    let sim_cfg = AdderConfig {
        prefix_cache_disabled: true,
        ..cfg
    };
    let rows = [0, 256, 1024]
        .iter()
        .map(|&n| {
            eprintln!("scheduler: add_one_req, running {n}");
            let running = running_views(n);
            AdderRow {
                running: n,
                normal: bench_add_one_req(mode, cfg, &running, &candidates),
                ignore_eos: bench_add_one_req(mode, sim_cfg, &running, &ignore_eos),
            }
        })
        .collect();
    let new = [0, 64, 256, 1024, 4096]
        .iter()
        .map(|&n| {
            eprintln!("scheduler: PrefillAdder::new, running {n}");
            let running = running_views(n);
            let [s] = sample(mode, |_| {
                let (ns, adder) =
                    timed(|| PrefillAdder::new(cfg, 1 << 34, 0, black_box(&running), 0));
                drop(adder);
                [ns]
            });
            (n, s)
        })
        .collect();
    (rows, new)
}

// ---- report -----------------------------------------------------------------------------

fn us(ns: u64) -> String {
    format!("{:.1}", ns as f64 / 1000.0)
}

fn cell_us(s: &Summary) -> String {
    format!("{} [{}–{}]", us(s.p50), us(s.p10), us(s.p90))
}

fn print_header(mode: &Mode, floor: Summary, w: &Workload, load_at_start: &str) {
    println!("## Scheduler (host): per-step latency\n");
    print_machine(&format!(
        "load average at start {load_at_start}, at end {}",
        load_average()
    ));
    println!("{}", mode.header_line(" with untimed setup"));
    println!(
        "- scheduler: SGLang defaults on a {CAPACITY}-token pool, page size {PAGE_SIZE}; \
         {RUNNING} running requests holding {} tokens (free with them in it: {})",
        w.running_kv(),
        w.ample(),
    );
    println!(
        "- timer floor (empty timed region, included in every figure): median {} ns, p90 {} ns\n",
        floor.p50, floor.p90,
    );
}

fn meets(s: &Summary) -> &'static str {
    if s.p90 <= TARGET_NS {
        "yes"
    } else if s.p50 <= TARGET_NS {
        "median only"
    } else {
        "**no**"
    }
}

fn print_steps(rows: &[StepRow]) {
    println!("### `Scheduler::step`, {WAITING} waiting / {RUNNING} running, FCFS\n");
    println!(
        "µs: median [p10–p90]; target: ≤ {} µs host (design brief); \"meets\": yes = p90 \
         within the target, median only, or no. Each sample steps a freshly built scheduler \
         (untimed) unless noted. Warm: the step runs right after its state was built (caches \
         hot). Cold: {} MiB touched between building and stepping, so the scheduler's data \
         comes from memory.\n",
        TARGET_NS / 1000,
        FLUSH_BYTES >> 20,
    );
    println!(
        "| case | state before the step | decided | warm µs | warm ÷ target | meets | \
         cold µs | cold ÷ target | meets |"
    );
    println!("|---|---|---|---|---:|---|---|---:|---|");
    let ratio = |s: &Summary| format!("{:.2}", s.p50 as f64 / TARGET_NS as f64);
    for r in rows {
        let (cold, cold_ratio, cold_meets) = match &r.cold {
            Some(c) => (cell_us(c), ratio(c), meets(c)),
            None => ("–".into(), "–".into(), "–"),
        };
        println!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            r.name,
            r.how,
            r.shape.describe(),
            cell_us(&r.warm),
            ratio(&r.warm),
            meets(&r.warm),
            cold,
            cold_ratio,
            cold_meets,
        );
    }
    println!();
}

fn print_scaling(rows: &[ScalingRow]) {
    println!("### Prefill step vs waiting-queue length, {RUNNING} running, per policy\n");
    println!(
        "µs: median [p10–p90]; free room = what the running requests leave, so each pass \
         stops on the chunk budget (or an empty queue). Lpm sorts by prefix only up to 128 \
         waiting (SGLang's `WAITING_QUEUE_PREFIX_MATCH_MAX`), FCFS above.\n"
    );
    print!("| waiting |");
    for (name, _) in POLICIES {
        print!(" {name} |");
    }
    println!();
    println!("|---:|{}", "---|".repeat(POLICIES.len()));
    for r in rows {
        print!("| {} |", r.waiting);
        for (s, _) in &r.cells {
            print!(" {} |", cell_us(s));
        }
        println!();
    }
    println!("\nRequests admitted (chunked among them) per pass:\n");
    print!("| waiting |");
    for (name, _) in POLICIES {
        print!(" {name} |");
    }
    println!();
    println!("|---:|{}", "---|".repeat(POLICIES.len()));
    for r in rows {
        print!("| {} |", r.waiting);
        for (_, shape) in &r.cells {
            print!(" {} ({}) |", shape.admitted, shape.chunked);
        }
        println!();
    }
    println!();
}

fn print_adder(rows: &[AdderRow], new: &[(usize, Summary)]) {
    println!("### `PrefillAdder::add_one_req` alone\n");
    println!(
        "ns: median [p10–p90]. Fresh adder per sample, {ADDER_CALLS} candidates from the \
         workload, budgets that never bind (every call admits). \"first\": the first call \
         timed alone (timer floor included); \"per call\": the other {} calls timed together, \
         divided by {}. The `ignore_eos` path is SGLang's future simulation (prefix cache \
         disabled, candidate `ignore_eos`); 1 running request in 8 is `ignore_eos`.\n",
        ADDER_CALLS - 1,
        ADDER_CALLS - 1,
    );
    println!("| running | first | per call | ignore_eos: first | ignore_eos: per call |");
    println!("|---:|---|---|---|---|");
    for r in rows {
        println!(
            "| {} | {} | {} | {} | {} |",
            r.running,
            cell_ns(&r.normal[0]),
            cell_ns(&r.normal[1]),
            cell_ns(&r.ignore_eos[0]),
            cell_ns(&r.ignore_eos[1]),
        );
    }
    println!("\n### `PrefillAdder::new` vs running requests\n");
    println!("ns: median [p10–p90], one call timed alone; the adder is dropped untimed.\n");
    println!("| running | `PrefillAdder::new` | ns per running request |");
    println!("|---:|---|---:|");
    for (n, s) in new {
        println!(
            "| {} | {} | {} |",
            n,
            cell_ns(s),
            if *n == 0 {
                "–".to_string()
            } else {
                format!("{:.2}", s.p50 as f64 / *n as f64)
            },
        );
    }
    println!();
}

fn main() {
    let mode = Mode::from_args_and_env();
    let only = Only::from_args();
    let load_at_start = load_average();
    let floor = timer_floor(&mode);
    let w = Workload::new();
    let steps = only.runs("step").then(|| bench_steps(&mode, &only, &w));
    let scaling = only.runs("scaling").then(|| bench_scaling(&mode, &w));
    let adder = only.runs("adder").then(|| bench_adder(&mode, &w));

    print_header(&mode, floor, &w, &load_at_start);
    let mut fewest = usize::MAX;
    if let Some(rows) = &steps {
        print_steps(rows);
        fewest = rows
            .iter()
            .flat_map(|r| std::iter::once(&r.warm).chain(&r.cold))
            .map(|s| s.samples)
            .fold(fewest, usize::min);
    }
    if let Some(rows) = &scaling {
        print_scaling(rows);
        fewest = rows
            .iter()
            .flat_map(|r| &r.cells)
            .map(|(s, _)| s.samples)
            .fold(fewest, usize::min);
    }
    if let Some((rows, new)) = &adder {
        print_adder(rows, new);
        fewest = rows
            .iter()
            .flat_map(|r| r.normal.iter().chain(&r.ignore_eos))
            .chain(new.iter().map(|(_, s)| s))
            .map(|s| s.samples)
            .fold(fewest, usize::min);
    }
    println!("Fewest samples behind any cell: {fewest}.");
}
