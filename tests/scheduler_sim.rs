//! Closed-loop simulation: `kvpool::admission::Scheduler` driving a real `kvpool::Pool`
//! the way an inference engine would, over thousands of steps of random workload, on a grid
//! of configurations (page sizes 1/16/64, chunked prefill on/off with small chunks, mixed
//! chunk, several chunked requests in flight, every policy, priority scheduling with and
//! without preemption, request caps, clipped output estimates, a modelled prefix cache).
//!
//! The engine loop per step: random arrivals (`submit`; some requests can never fit and
//! must be reported unfittable), `step(available, evictable, allow_prefill)`, free the KV of
//! retracted / preempted / aborted requests, one `alloc_extend` for every prefill entry, one
//! `alloc_decode` for the decode rows, then random EOS-like finishes and client aborts.
//!
//! The optional prefix cache is modelled exactly: an entry is a page-aligned run of slots
//! the engine keeps from a finished, aborted or retracted request. Each entry is the cached
//! prefix of at most one request (its `prefix_len` / `prefix_evictable`, announced at
//! `submit` or with `update_prefix`); unlocked entries are reported as evictable and are
//! evicted, oldest first (with an `update_prefix(id, 0, 0)` for the owner), when an
//! allocation would otherwise run short. An admitted request locks its entry, which heads
//! its slot row; when it leaves, the engine frees only the rest of the row (what
//! `Evicted::prefix_len` promises) and unlocks the entry, or keeps more of the row in it.
//!
//! Invariants checked after every step: no allocation ever fails; every live request's
//! `kv_len` equals the engine's slot row and its output count the engine's; an evicted
//! request's reported `kv_len` / `prefix_len` are its row and cached head, so the engine
//! frees exactly what the scheduler counts as freed; pool pages in use equal
//! the pages of live rows plus cached entries (no leak, no page owned twice); `counts()`
//! matches; plans are well-formed; the scheduler never idles while work is admissible;
//! every request finishes, is aborted or was reported unfittable (drained with a step
//! limit); and the same seed gives the same plans.
//!
//! `KVPOOL_SIM_CONFIG=<index>` runs one configuration of the grid, `KVPOOL_SIM_TRACE=1`
//! prints every plan, `KVPOOL_SIM_VERBOSE=1` prints per-configuration counts (with
//! `-- --nocapture`). At the end of the file, minimal reproductions of scheduler bugs the
//! simulation found.

mod rng;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use kvpool::admission::{
    ChunkSizePredictor, Evicted, Phase, Policy, PriorityConfig, RatioConfig, RequestSpec,
    RetractionPolicy, Scheduler, SchedulerConfig, StepKind, StepPlan, SubmitOutcome,
};
use kvpool::{Pool, PoolConfig};
use rng::Rng;

/// One simulated configuration.
#[derive(Clone, Copy, Debug)]
struct Sim {
    /// Position in the grid (`KVPOOL_SIM_CONFIG=<index>` runs only this one).
    index: usize,
    seed: u64,
    sched: SchedulerConfig,
    need_sort: bool,
    /// The engine keeps a prefix cache (and reports it as evictable).
    prefix_cache: bool,
    /// Percent chance per step of an arrival burst.
    arrival_pct: u64,
    /// Steps with arrivals; then the queue drains.
    arrival_steps: u64,
    /// Drain steps allowed beyond the serial bound before a live request counts as stuck.
    drain_slack: u64,
}

/// Event counters, summed over the grid.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Events {
    steps: u64,
    prefill_steps: u64,
    decode_steps: u64,
    idle_steps: u64,
    mixed_steps: u64,
    submitted: u64,
    unfittable: u64,
    finished: u64,
    client_aborts: u64,
    retractions: u64,
    preemptions: u64,
    oom_aborts: u64,
    /// Prefill entries (whole prompts, first chunks and continuations).
    prefill_entries: u64,
    chunked_entries: u64,
    continuations: u64,
    batch_full_steps: u64,
    prefix_hits: u64,
    cache_evictions: u64,
    held_back_steps: u64,
    /// Prefill passes that preempted requests and then admitted nothing.
    futile_preemptions: u64,
    /// Chunked requests retracted or aborted because they stalled with nothing running.
    chunk_stalls: u64,
    /// Steps that ended with two or more chunked requests in flight.
    multi_chunking_steps: u64,
    drain_steps: u64,
}

impl Events {
    fn add(&mut self, o: &Events) {
        self.steps += o.steps;
        self.prefill_steps += o.prefill_steps;
        self.decode_steps += o.decode_steps;
        self.idle_steps += o.idle_steps;
        self.mixed_steps += o.mixed_steps;
        self.submitted += o.submitted;
        self.unfittable += o.unfittable;
        self.finished += o.finished;
        self.client_aborts += o.client_aborts;
        self.retractions += o.retractions;
        self.preemptions += o.preemptions;
        self.oom_aborts += o.oom_aborts;
        self.prefill_entries += o.prefill_entries;
        self.chunked_entries += o.chunked_entries;
        self.continuations += o.continuations;
        self.batch_full_steps += o.batch_full_steps;
        self.prefix_hits += o.prefix_hits;
        self.cache_evictions += o.cache_evictions;
        self.held_back_steps += o.held_back_steps;
        self.drain_steps += o.drain_steps;
        self.futile_preemptions += o.futile_preemptions;
        self.chunk_stalls += o.chunk_stalls;
        self.multi_chunking_steps += o.multi_chunking_steps;
    }
}

/// The engine's record of a live request.
#[derive(Debug)]
struct Live {
    input: u64,
    ignore_eos: bool,
    max_new: u64,
    /// Output length at which the request stops (EOS-like, or `max_new`).
    target: u64,
    phase: Phase,
    /// Tokens generated so far, as the engine counts them.
    output: u64,
    /// The request's KV slots, in token order (its `req_to_token` row).
    row: Vec<i64>,
    /// The prefix-cache entry it matched: unlocked while it waits, locked (and heading
    /// `row`) while it is admitted.
    entry: Option<u64>,
    /// Tokens at the head of `row` that belong to the locked entry (0 while waiting).
    prefix: u64,
}

/// A prefix-cache entry: page-aligned slots the engine keeps after a request ended. It is
/// the cached prefix of at most one request at a time (`owner`), and locked while that
/// request is admitted; unlocked entries are evictable.
#[derive(Debug)]
struct CacheEntry {
    id: u64,
    slots: Vec<i64>,
    owner: Option<u64>,
    locked: bool,
    path: Vec<u64>,
}

struct Engine {
    sim: Sim,
    ps: u64,
    rng: Rng,
    pool: Pool,
    sched: Scheduler,
    live: BTreeMap<u64, Live>,
    cache: Vec<CacheEntry>,
    next_id: u64,
    next_entry: u64,
    step_no: u64,
    digest: u64,
    ev: Events,
    /// Per-page owner marks for the ownership census (epoch-stamped).
    marks: Vec<u64>,
    /// Stamp of the current census in `marks`.
    epoch: u64,
    /// Print every plan (`KVPOOL_SIM_TRACE=1`).
    trace: bool,
}

/// Names the configuration and step in failure messages.
fn describe(sim: &Sim, step: u64) -> String {
    format!(
        "config #{} step {}: seed {:#x}, {:?}, need_sort {}, prefix_cache {}",
        sim.index, step, sim.seed, sim.sched, sim.need_sort, sim.prefix_cache
    )
}

/// `describe` for an `Engine`, borrowing only the fields it reads.
macro_rules! ctx {
    ($e:expr) => {
        describe(&$e.sim, $e.step_no)
    };
}

fn fnv(h: &mut u64, x: u64) {
    for b in x.to_le_bytes() {
        *h ^= u64::from(b);
        *h = h.wrapping_mul(0x0000_0100_0000_01B3);
    }
}

impl Engine {
    fn new(sim: Sim) -> Self {
        let ps = sim.sched.page_size;
        let pool = Pool::new(PoolConfig {
            size: sim.sched.capacity,
            page_size: ps as u32,
            need_sort: sim.need_sort,
            ..PoolConfig::default()
        })
        .expect("pool");
        let pages = pool.num_pages() as usize + 1;
        Self {
            sim,
            ps,
            rng: Rng(sim.seed),
            pool,
            sched: Scheduler::new(sim.sched).expect("scheduler config"),
            live: BTreeMap::new(),
            cache: Vec::new(),
            next_id: 1,
            next_entry: 1,
            step_no: 0,
            digest: 0xCBF2_9CE4_8422_2325,
            ev: Events::default(),
            marks: vec![0; pages],
            epoch: 0,
            trace: std::env::var_os("KVPOOL_SIM_TRACE").is_some(),
        }
    }

    fn ctx(&self) -> String {
        describe(&self.sim, self.step_no)
    }

    /// Whether a waiting request could be admitted alone into the empty pool, by SGLang's
    /// arithmetic: `fill + min(max_new − output, clip) + page < capacity`, or without a
    /// prefix cache for `ignore_eos`, `ceil_page(fill) + (max_new − output) + 1 < capacity`.
    fn admissible_alone(&self, r: &Live) -> bool {
        let c = &self.sim.sched;
        let fill = r.input + r.output;
        let left = r.max_new - r.output;
        if c.prefix_cache_disabled && r.ignore_eos {
            fill.div_ceil(self.ps) * self.ps + left + 1 < c.capacity
        } else {
            fill + left.min(c.clip_max_new_tokens) + self.ps < c.capacity
        }
    }

    /// The live requests, one short line each (the first 40), after those that can never
    /// be admitted again.
    fn summary(&self) -> String {
        let mut out = String::new();
        for (id, r) in &self.live {
            if r.phase == Phase::Waiting && !self.admissible_alone(r) {
                out += &format!(
                    "\n  NEVER ADMISSIBLE ALONE: {id}: input {} output {}/{} ignore_eos {} \
                     (clip {}, capacity {})",
                    r.input,
                    r.output,
                    r.max_new,
                    r.ignore_eos,
                    self.sim.sched.clip_max_new_tokens,
                    self.sim.sched.capacity
                );
            }
        }
        for (id, r) in self.live.iter().take(40) {
            out += &format!(
                "\n  {id}: {:?} input {} output {}/{} (target {}, ignore_eos {}) kv {}",
                r.phase,
                r.input,
                r.output,
                r.max_new,
                r.target,
                r.ignore_eos,
                r.row.len()
            );
        }
        out
    }

    /// Evictable tokens: the unlocked cache entries.
    fn cache_tokens(&self) -> u64 {
        self.cache
            .iter()
            .filter(|e| !e.locked)
            .map(|e| e.slots.len() as u64)
            .sum()
    }

    fn pages(&self, tokens: usize) -> u64 {
        (tokens as u64).div_ceil(self.ps)
    }

    // ---- arrivals --------------------------------------------------------------------

    /// A path in a small prefix tree (root children 1..=3, their children `10a + b`): a
    /// node id always has the same parent, as in a real radix tree.
    fn random_path(&mut self) -> Vec<u64> {
        let mut path = Vec::new();
        let mut node = 0;
        for _ in 0..self.rng.below(3) {
            node = node * 10 + self.rng.range(1, 3);
            path.push(node);
        }
        path
    }

    /// Submits a random request (of the given `kind` in 0..100, or a random one).
    fn submit_random(&mut self, kind: Option<u64>) {
        let s = self.sim.sched.capacity;
        let id = self.next_id;
        self.next_id += 1;
        // Prompt lengths scale with the pool; output lengths do not (they set how many
        // steps a request lives).
        let kind = kind.unwrap_or_else(|| self.rng.below(100));
        let (mut input, max_new) = if kind < 3 {
            // Longer than the pool: can never run.
            (self.rng.range(s + 1, s + s / 4), self.rng.range(1, 64))
        } else if kind < 6 {
            // Nearly the pool, plus output: mostly unfittable.
            (
                self.rng.range(s - s / 8, s - 1),
                self.rng.range(s / 16, s / 8),
            )
        } else if kind < 8 {
            // Big but fittable: runs (nearly) alone.
            (self.rng.range(s / 3, s / 2), self.rng.range(16, 128))
        } else if kind < 25 {
            // Long prompts: chunked.
            (self.rng.range(s / 8, s / 3), self.rng.range(1, 64))
        } else {
            let max_new = match self.rng.below(10) {
                0 => self.rng.range(1, 3),
                1..=5 => self.rng.range(64, 256),
                _ => self.rng.range(1, 64),
            };
            (self.rng.range(1, s / 16), max_new)
        };
        let ignore_eos = self.rng.chance(20);
        let target = if ignore_eos || self.rng.chance(70) {
            max_new
        } else {
            self.rng.range(1, max_new)
        };
        let priority = self.rng.below(40) as i64;
        let mut path = self.random_path();
        // A cache hit: the request shares an unowned cached entry's tokens.
        let mut entry = None;
        if self.sim.prefix_cache && self.rng.chance(40) {
            let free: Vec<usize> = (0..self.cache.len())
                .filter(|&i| self.cache[i].owner.is_none() && !self.cache[i].locked)
                .collect();
            if !free.is_empty() {
                let i = free[self.rng.below(free.len() as u64) as usize];
                let len = self.cache[i].slots.len() as u64;
                if input <= len {
                    input = len + self.rng.range(1, s / 16);
                }
                entry = Some(i);
                path.clone_from(&self.cache[i].path);
            }
        }
        let prefix = entry.map_or(0, |i| self.cache[i].slots.len() as u64);
        let spec = RequestSpec {
            id,
            input_len: input,
            prefix_len: prefix,
            prefix_evictable: prefix,
            max_new_tokens: max_new,
            output_len: 0,
            ignore_eos,
            priority,
            prefix_path: path,
        };
        self.ev.submitted += 1;
        let out = self
            .sched
            .submit(spec)
            .unwrap_or_else(|e| panic!("submit {id}: {e} ({})", self.ctx()));
        // SGLang's admission of a request alone in an empty pool of `s` tokens needs
        // `input + min(max_new, clip) + page < s`; without a prefix cache, an `ignore_eos`
        // request goes through the future simulation instead, which uses the unclipped
        // `max_new` and needs `ceil_page(input) + max_new + 1 < s`. A request that fails
        // either can never run; it must not be queued (see the idle check in `step`).
        let simulated = self.sim.sched.prefix_cache_disabled && ignore_eos;
        let needed = if simulated {
            input.div_ceil(self.ps) * self.ps + max_new + 1
        } else {
            input + max_new.min(self.sim.sched.clip_max_new_tokens) + self.ps
        };
        let never_admissible = needed >= s;
        match out {
            SubmitOutcome::Unfittable {
                needed: reported,
                capacity,
            } => {
                assert!(
                    capacity == s && reported >= s && never_admissible,
                    "request {id} (input {input}, max_new {max_new}, ignore_eos {ignore_eos}) \
                     reported {out:?} but fits ({})",
                    self.ctx()
                );
                assert_eq!(reported, needed, "SubmitOutcome::Unfittable::needed");
                assert!(self.sched.request(id).is_none(), "unfittable request kept");
                self.ev.unfittable += 1;
                return;
            }
            SubmitOutcome::Queued => assert!(
                needed < s,
                "request {id} (input {input}, max_new {max_new}) must be unfittable ({})",
                self.ctx()
            ),
        }
        let entry = entry.map(|i| {
            self.cache[i].owner = Some(id);
            self.cache[i].id
        });
        self.live.insert(
            id,
            Live {
                input,
                ignore_eos,
                max_new,
                target,
                phase: Phase::Waiting,
                output: 0,
                row: Vec::new(),
                entry,
                prefix: 0,
            },
        );
    }

    // ---- KV release and the prefix cache ---------------------------------------------

    fn entry_index(&self, entry_id: u64) -> usize {
        self.cache
            .iter()
            .position(|e| e.id == entry_id)
            .expect("the entry is cached")
    }

    /// Ends a request's hold on its KV (finished, aborted, retracted or preempted). The head
    /// of its row that is its cached prefix (`r.prefix` tokens) goes back to the cache,
    /// unlocked; of its own tokens the engine frees them all, or (with the cache on) keeps
    /// their whole pages in the cache, extending the entry as a radix insert would. The
    /// entry then belongs to `owner` (the request, when it waits again) or to nobody.
    /// Returns the entry's id and length.
    fn release(&mut self, r: &mut Live, owner: Option<u64>) -> Option<(u64, u64)> {
        let ps = self.ps as usize;
        let row = std::mem::take(&mut r.row);
        let prefix = std::mem::take(&mut r.prefix) as usize;
        let len = row.len();
        let keep = if self.sim.prefix_cache && self.rng.chance(60) {
            (len / ps * ps).max(prefix)
        } else {
            prefix
        };
        if keep < len {
            let result = if keep == 0 && self.rng.chance(50) {
                self.pool.free(&row)
            } else {
                self.pool.free_segment(&row, keep, len - keep)
            };
            result.unwrap_or_else(|e| panic!("free of {} slots: {e} ({})", len - keep, ctx!(self)));
        }
        let id = match r.entry.take() {
            Some(id) => {
                let i = self.entry_index(id);
                let e = &mut self.cache[i];
                // Locked exactly while the request is admitted, and then it is the row's head.
                assert_eq!(e.locked, prefix > 0, "entry {id} lock state");
                if prefix > 0 {
                    assert_eq!(e.slots[..], row[..prefix], "entry {id} vs its row");
                }
                if keep > e.slots.len() {
                    e.slots = row[..keep].to_vec();
                }
                e.locked = false;
                e.owner = owner;
                id
            }
            None if keep > 0 => {
                let id = self.next_entry;
                self.next_entry += 1;
                let path = self.random_path();
                self.cache.push(CacheEntry {
                    id,
                    slots: row[..keep].to_vec(),
                    owner,
                    locked: false,
                    path,
                });
                id
            }
            None => return None,
        };
        let len = self.cache[self.entry_index(id)].slots.len() as u64;
        Some((id, len))
    }

    /// Evicts unlocked cached entries, oldest first, until `pages` pages are free.
    fn make_room(&mut self, pages: u64) {
        while self.pool.available_size() / self.ps < pages {
            let Some(i) = self.cache.iter().position(|e| !e.locked) else {
                break;
            };
            let e = self.cache.remove(i);
            self.pool
                .free_segment(&e.slots, 0, e.slots.len())
                .unwrap_or_else(|err| panic!("evicting entry {}: {err} ({})", e.id, self.ctx()));
            self.ev.cache_evictions += 1;
            if let Some(owner) = e.owner {
                let r = self.live.get_mut(&owner).expect("entry owner is live");
                assert_eq!(r.phase, Phase::Waiting, "an unlocked entry's owner waits");
                r.entry = None;
                self.sched
                    .update_prefix(owner, 0, 0, Some(&[]))
                    .unwrap_or_else(|err| panic!("update_prefix({owner}): {err} ({})", self.ctx()));
            }
        }
    }

    /// Takes a request the plan evicted out of the live set, checking that the scheduler's
    /// account of its KV is the engine's: `kv_len` tokens in its row, the first
    /// `prefix_len` of them its cached prefix (the engine frees only the rest).
    fn take_evicted(&mut self, e: &Evicted, was: &[Phase], what: &str) -> Live {
        let r = self
            .live
            .remove(&e.id)
            .unwrap_or_else(|| panic!("{what} request {} is not live ({})", e.id, ctx!(self)));
        assert!(
            was.contains(&r.phase),
            "{what} request {} was {:?} ({})",
            e.id,
            r.phase,
            ctx!(self),
        );
        assert_eq!(
            (e.kv_len, e.prefix_len),
            (r.row.len() as u64, r.prefix),
            "{what} request {}: reported (kv_len, prefix_len) vs the engine's row and \
             cached prefix ({})",
            e.id,
            ctx!(self),
        );
        if r.phase == Phase::Chunking {
            self.ev.chunk_stalls += 1;
        }
        r
    }

    /// A retracted or preempted request: its KV is released; it waits again, its cached
    /// prefix (if the engine kept one) announced with `update_prefix`.
    fn requeue(&mut self, e: &Evicted, was: &[Phase], what: &str) {
        let mut r = self.take_evicted(e, was, what);
        r.phase = Phase::Waiting;
        if let Some((entry, len)) = self.release(&mut r, Some(e.id)) {
            r.entry = Some(entry);
            let path = self.cache[self.entry_index(entry)].path.clone();
            self.sched
                .update_prefix(e.id, len, len, Some(&path))
                .unwrap_or_else(|err| panic!("update_prefix({}): {err} ({})", e.id, ctx!(self)));
        }
        self.live.insert(e.id, r);
    }

    // ---- one engine step --------------------------------------------------------------

    fn step(&mut self, arrivals: bool) {
        self.step_no += 1;
        self.ev.steps += 1;
        if arrivals && self.rng.chance(self.sim.arrival_pct) {
            for _ in 0..self.rng.range(1, 3) {
                self.submit_random(None);
            }
        }
        // Now and then a burst of long prompts, for several chunked requests at once.
        if arrivals && self.rng.chance(1) {
            for _ in 0..3 {
                self.submit_random(Some(7));
            }
        }
        let allow_prefill = !self.rng.chance(8);
        if !allow_prefill {
            self.ev.held_back_steps += 1;
        }
        let running_before: Vec<u64> = self
            .live
            .iter()
            .filter(|(_, r)| r.phase == Phase::Running)
            .map(|(&id, _)| id)
            .collect();
        let chunking_before = self
            .live
            .values()
            .filter(|r| r.phase == Phase::Chunking)
            .count();
        let available = self.pool.available_size();
        let evictable = self.cache_tokens();
        let plan = self.sched.step(available, evictable, allow_prefill);
        if self.trace {
            println!(
                "step {} avail {available} evictable {evictable} allow {allow_prefill}: {plan:?}",
                self.step_no
            );
        }
        self.record(&plan);
        self.check_plan_shape(&plan, allow_prefill, &running_before, chunking_before);

        for e in &plan.preempted {
            self.requeue(e, &[Phase::Running], "preempted");
        }
        for e in &plan.retracted {
            self.requeue(e, &[Phase::Running, Phase::Chunking], "retracted");
        }
        for e in &plan.aborted {
            let mut r = self.take_evicted(
                e,
                &[Phase::Running, Phase::Chunking, Phase::Waiting],
                "aborted",
            );
            assert!(self.sched.request(e.id).is_none(), "aborted request kept");
            self.release(&mut r, None);
        }
        self.check_leak("after freeing evicted requests");

        self.run_prefill(&plan);
        self.run_decode(&plan);
        self.check_all("after the step");

        self.finish_some();
        if arrivals && self.rng.chance(3) {
            self.client_abort();
        }
        self.check_all("after finishes and aborts");
    }

    fn record(&mut self, plan: &StepPlan) {
        let h = &mut self.digest;
        fnv(h, plan.kind as u64);
        for e in &plan.prefill {
            fnv(h, e.id);
            fnv(h, e.prefix_len);
            fnv(h, e.extend_len);
            fnv(h, u64::from(e.chunked));
        }
        fnv(h, u64::MAX);
        for &id in &plan.decode {
            fnv(h, id);
        }
        for list in [&plan.retracted, &plan.preempted, &plan.aborted] {
            fnv(h, u64::MAX - 1);
            for e in list {
                fnv(h, e.id);
                fnv(h, e.kv_len);
                fnv(h, e.prefix_len);
            }
        }
        fnv(h, u64::from(plan.batch_is_full));
        fnv(h, plan.new_token_ratio.to_bits());

        let ev = &mut self.ev;
        match plan.kind {
            StepKind::Idle => ev.idle_steps += 1,
            StepKind::Prefill => ev.prefill_steps += 1,
            StepKind::Decode => ev.decode_steps += 1,
        }
        if plan.kind == StepKind::Prefill && !plan.decode.is_empty() {
            ev.mixed_steps += 1;
        }
        ev.retractions += plan.retracted.len() as u64;
        ev.preemptions += plan.preempted.len() as u64;
        ev.oom_aborts += plan.aborted.len() as u64;
        ev.prefill_entries += plan.prefill.len() as u64;
        ev.chunked_entries += plan.prefill.iter().filter(|e| e.chunked).count() as u64;
        ev.batch_full_steps += u64::from(plan.batch_is_full);
        ev.futile_preemptions += u64::from(!plan.preempted.is_empty() && plan.prefill.is_empty());
    }

    /// Structural checks of a plan against the engine's view before it runs.
    fn check_plan_shape(
        &self,
        plan: &StepPlan,
        allow_prefill: bool,
        running_before: &[u64],
        chunking_before: usize,
    ) {
        let ctx = || format!("{plan:?} ({})", self.ctx());
        // Each request appears at most once in a plan.
        let mut seen = BTreeSet::new();
        let ids = plan
            .prefill
            .iter()
            .map(|e| e.id)
            .chain(plan.decode.iter().copied())
            .chain(plan.retracted.iter().map(|e| e.id))
            .chain(plan.preempted.iter().map(|e| e.id))
            .chain(plan.aborted.iter().map(|e| e.id));
        for id in ids {
            assert!(seen.insert(id), "request {id} appears twice: {}", ctx());
            assert!(
                self.live.contains_key(&id),
                "plan names request {id}, which is not live (finished, aborted or unfittable): {}",
                ctx()
            );
        }
        // Preemption happens in a prefill pass, even one that ends up admitting nothing.
        assert!(
            allow_prefill || plan.preempted.is_empty(),
            "preempted while prefill is held back: {}",
            ctx()
        );
        let evicted = plan.retracted.len() + plan.preempted.len() + plan.aborted.len();
        match plan.kind {
            StepKind::Prefill => {
                assert!(allow_prefill, "prefill while held back: {}", ctx());
                assert!(!plan.prefill.is_empty(), "empty prefill: {}", ctx());
                if !plan.decode.is_empty() {
                    assert!(self.sim.sched.enable_mixed_chunk, "mixed rows: {}", ctx());
                }
            }
            StepKind::Decode => assert!(plan.prefill.is_empty(), "{}", ctx()),
            StepKind::Idle => {
                assert!(plan.prefill.is_empty() && plan.decode.is_empty());
                assert!(
                    running_before.len() <= evicted,
                    "idle while requests run: {}",
                    ctx()
                );
                // With nothing running or chunking, any waiting request fits the pool alone:
                // idling then would wait forever.
                if allow_prefill
                    && !self.live.is_empty()
                    && running_before.is_empty()
                    && chunking_before == 0
                {
                    panic!(
                        "idle with {} waiting requests and an empty batch (each fits alone, \
                         or should have been reported unfittable): {}{}",
                        self.live.len(),
                        ctx(),
                        self.summary()
                    );
                }
            }
        }
        // Decode rows: every running request that was not evicted, or none (a prefill step
        // without mixing). Never a request that is prefilling.
        if plan.kind == StepKind::Decode || !plan.decode.is_empty() {
            let evicted: BTreeSet<u64> = plan
                .retracted
                .iter()
                .chain(&plan.preempted)
                .chain(&plan.aborted)
                .map(|e| e.id)
                .collect();
            let want: BTreeSet<u64> = running_before
                .iter()
                .copied()
                .filter(|id| !evicted.contains(id))
                .collect();
            let got: BTreeSet<u64> = plan.decode.iter().copied().collect();
            assert_eq!(got, want, "decode rows: {}", ctx());
        }
        if let Some(cap) = self.sim.sched.prefill_max_requests {
            let continuations = plan
                .prefill
                .iter()
                .filter(|e| self.live[&e.id].phase == Phase::Chunking)
                .count();
            let new = plan.prefill.len() - continuations;
            assert!(
                new <= cap.saturating_sub(continuations),
                "{new} admissions exceed prefill_max_requests {cap}: {}",
                ctx()
            );
        }
    }

    fn run_prefill(&mut self, plan: &StepPlan) {
        if plan.prefill.is_empty() {
            return;
        }
        let (mut prefix_lens, mut seq_lens, mut last_loc) = (Vec::new(), Vec::new(), Vec::new());
        let mut new_pages = 0;
        for en in &plan.prefill {
            let phase = self.live[&en.id].phase;
            match phase {
                Phase::Waiting => {
                    // Its cached prefix (if it matched one) is locked and heads its row.
                    let entry = self.live[&en.id].entry;
                    let cached = entry.map_or(Vec::new(), |entry_id| {
                        let i = self.entry_index(entry_id);
                        let e = &mut self.cache[i];
                        assert!(!e.locked && e.owner == Some(en.id), "entry {entry_id}");
                        e.locked = true;
                        e.slots.clone()
                    });
                    assert_eq!(
                        en.prefix_len,
                        cached.len() as u64,
                        "request {} admitted with prefix_len {} but its cached prefix is {} ({})",
                        en.id,
                        en.prefix_len,
                        cached.len(),
                        ctx!(self),
                    );
                    if !cached.is_empty() {
                        self.ev.prefix_hits += 1;
                    }
                    let r = self.live.get_mut(&en.id).expect("live");
                    assert!(r.row.is_empty() && r.prefix == 0);
                    r.prefix = cached.len() as u64;
                    r.row = cached;
                }
                Phase::Chunking => self.ev.continuations += 1,
                Phase::Running => {
                    panic!("prefill of running request {} ({})", en.id, ctx!(self))
                }
            }
            let r = &self.live[&en.id];
            assert_eq!(
                en.prefix_len,
                r.row.len() as u64,
                "prefill entry {en:?}: the request holds {} slots ({})",
                r.row.len(),
                ctx!(self),
            );
            assert!(en.extend_len > 0, "empty extend {en:?} ({})", ctx!(self));
            let fill = r.input + r.output;
            let end = en.prefix_len + en.extend_len;
            if en.chunked {
                assert!(
                    end < fill,
                    "chunk {en:?} ends at/after fill {fill} ({})",
                    ctx!(self)
                );
            } else {
                assert_eq!(
                    end,
                    fill,
                    "final prefill {en:?} must reach fill ({})",
                    ctx!(self)
                );
            }
            new_pages += end.div_ceil(self.ps) - en.prefix_len.div_ceil(self.ps);
            prefix_lens.push(en.prefix_len as i64);
            seq_lens.push(end as i64);
            last_loc.push(r.row.last().copied().unwrap_or(-1));
        }
        let total: u64 = plan.prefill.iter().map(|e| e.extend_len).sum();
        self.make_room(new_pages);
        let mut out = vec![0i64; total as usize];
        if let Err(e) = self
            .pool
            .alloc_extend(&prefix_lens, &seq_lens, &last_loc, total, &mut out)
        {
            panic!(
                "admission led to a failed alloc_extend: {e}\n{} new pages, {} free, {} cached\nplan {plan:?}\n({})",
                new_pages,
                self.pool.available_size() / self.ps,
                self.cache_tokens(),
                self.ctx()
            );
        }
        let mut pos = 0;
        for en in &plan.prefill {
            let r = self.live.get_mut(&en.id).expect("live");
            let n = en.extend_len as usize;
            r.row.extend_from_slice(&out[pos..pos + n]);
            pos += n;
            if en.chunked {
                r.phase = Phase::Chunking;
            } else {
                r.phase = Phase::Running;
                r.output += 1;
            }
        }
    }

    fn run_decode(&mut self, plan: &StepPlan) {
        if plan.decode.is_empty() {
            return;
        }
        let mut seq_lens = Vec::with_capacity(plan.decode.len());
        let mut last_loc = Vec::with_capacity(plan.decode.len());
        let mut new_pages = 0;
        for id in &plan.decode {
            let r = &self.live[id];
            assert!(
                r.output < r.max_new,
                "request {id} decodes past max_new_tokens {} ({})",
                r.max_new,
                self.ctx()
            );
            let seq = r.row.len() as u64 + 1;
            new_pages += u64::from((seq - 1).is_multiple_of(self.ps));
            seq_lens.push(seq as i64);
            last_loc.push(*r.row.last().expect("a running request holds KV"));
        }
        self.make_room(new_pages);
        let mut out = vec![0i64; seq_lens.len()];
        if let Err(e) = self.pool.alloc_decode(&seq_lens, &last_loc, &mut out) {
            panic!(
                "admission led to a failed alloc_decode: {e}\n{new_pages} new pages, {} free\nplan {plan:?}\n({})",
                self.pool.available_size() / self.ps,
                self.ctx()
            );
        }
        for (id, slot) in plan.decode.iter().zip(out) {
            let r = self.live.get_mut(id).expect("live");
            r.row.push(slot);
            r.output += 1;
        }
    }

    fn finish_some(&mut self) {
        let done: Vec<u64> = self
            .live
            .iter()
            .filter(|(_, r)| r.phase == Phase::Running && r.output >= r.target)
            .map(|(&id, _)| id)
            .collect();
        for id in done {
            let kv = self
                .sched
                .finish(id)
                .unwrap_or_else(|e| panic!("finish({id}): {e} ({})", self.ctx()));
            let mut r = self.live.remove(&id).expect("live");
            assert_eq!(
                kv,
                r.row.len() as u64,
                "finished request {id}: kv_len {kv} vs {} slots ({})",
                r.row.len(),
                self.ctx()
            );
            self.release(&mut r, None);
            self.ev.finished += 1;
        }
    }

    fn client_abort(&mut self) {
        if self.live.is_empty() {
            return;
        }
        let k = self.rng.below(self.live.len() as u64) as usize;
        let id = *self.live.keys().nth(k).expect("k < len");
        let kv = self
            .sched
            .abort(id)
            .unwrap_or_else(|e| panic!("abort({id}): {e} ({})", self.ctx()));
        let mut r = self.live.remove(&id).expect("live");
        assert_eq!(
            kv,
            r.row.len() as u64,
            "aborted {:?} request {id}: kv_len {kv} vs {} slots ({})",
            r.phase,
            r.row.len(),
            self.ctx()
        );
        self.release(&mut r, None);
        self.ev.client_aborts += 1;
    }

    // ---- invariants -------------------------------------------------------------------

    fn check_leak(&self, when: &str) {
        // A row's head that is a locked cache entry is counted with the cache.
        let rows: u64 = self
            .live
            .values()
            .map(|r| self.pages(r.row.len()) - r.prefix / self.ps)
            .sum();
        let cached: u64 = self.cache.iter().map(|e| self.pages(e.slots.len())).sum();
        let in_use = self.pool.stats().pages_in_use;
        assert_eq!(
            in_use,
            rows + cached,
            "{when}: {in_use} pages in use, live rows hold {rows} and the cache {cached} ({})",
            self.ctx()
        );
        assert_eq!(
            self.pool.available_size(),
            self.pool.size() - in_use * self.ps,
            "{when}: available_size disagrees with pages in use"
        );
    }

    /// Every slot row (past its cached head) and cache entry owns its pages alone,
    /// page-contiguously; a locked entry is exactly the head of its request's row.
    fn check_ownership(&mut self) {
        let ps = self.ps;
        self.epoch += 1;
        let stamp = self.epoch;
        let num_pages = u64::from(self.pool.num_pages());
        let mut owned = 0u64;
        for (id, r) in &self.live {
            if r.prefix > 0 {
                let e = &self.cache[self.entry_index(r.entry.expect("locked entry"))];
                assert!(e.locked && e.owner == Some(*id), "request {id}'s entry");
                assert_eq!(
                    e.slots[..],
                    r.row[..r.prefix as usize],
                    "request {id}'s head"
                );
            }
        }
        let rows = self
            .live
            .values()
            .map(|r| (&r.row, r.prefix as usize))
            .chain(self.cache.iter().map(|e| (&e.slots, 0)));
        for (row, from) in rows {
            let mut prev = 0i64;
            for (i, &slot) in row.iter().enumerate().skip(from) {
                let page = slot as u64 / ps;
                assert!((1..=num_pages).contains(&page), "slot {slot} out of range");
                assert_eq!(
                    slot as u64 % ps,
                    i as u64 % ps,
                    "slot {slot} at {i} misaligned"
                );
                if (i as u64).is_multiple_of(ps) {
                    assert_ne!(
                        self.marks[page as usize], stamp,
                        "page {page} owned twice (step {})",
                        self.step_no
                    );
                    self.marks[page as usize] = stamp;
                    owned += 1;
                } else {
                    assert_eq!(slot, prev + 1, "row not page-contiguous at {i}");
                }
                prev = slot;
            }
        }
        assert_eq!(owned, self.pool.stats().pages_in_use);
    }

    fn check_all(&mut self, when: &str) {
        let (mut waiting, mut chunking, mut running) = (0, 0, 0);
        for (&id, r) in &self.live {
            let got = self.sched.request(id);
            let Some((phase, kv_len, output)) = got else {
                panic!(
                    "{when}: live request {id} unknown to the scheduler ({})",
                    self.ctx()
                );
            };
            assert_eq!(
                (phase, kv_len, output),
                (r.phase, r.row.len() as u64, r.output),
                "{when}: request {id} (phase, kv_len, output) vs the engine's ({})",
                self.ctx()
            );
            match phase {
                Phase::Waiting => {
                    waiting += 1;
                    assert!(r.row.is_empty() && r.prefix == 0, "waiting request {id}");
                }
                Phase::Chunking => {
                    chunking += 1;
                    assert!(kv_len > 0 && kv_len < r.input + r.output);
                }
                Phase::Running => {
                    running += 1;
                    assert_eq!(kv_len + 1, r.input + output, "running request {id}");
                    assert!(output <= r.max_new);
                }
            }
        }
        if when == "after the step" && chunking >= 2 {
            self.ev.multi_chunking_steps += 1;
        }
        assert_eq!(
            self.sched.counts(),
            (waiting, chunking, running),
            "{when}: counts() ({})",
            self.ctx()
        );
        if let Some(max) = self.sim.sched.max_running_requests {
            assert!(
                running + chunking <= max,
                "{when}: {running} running + {chunking} chunking > max_running_requests {max} ({})",
                self.ctx()
            );
        }
        self.check_leak(when);
        if self.step_no.is_multiple_of(4) {
            self.check_ownership();
        }
    }
}

/// Runs one configuration to the end; returns the plan digest and the events.
fn simulate(sim: Sim) -> (u64, Events) {
    let mut engine = Engine::new(sim);
    for _ in 0..sim.arrival_steps {
        engine.step(true);
    }
    // No new arrivals: everything left must finish. Bound: four times the steps the
    // requests would take run one after another (prefill chunks plus remaining outputs).
    let ps = sim.sched.page_size;
    let chunk = sim
        .sched
        .chunked_prefill_size
        .map_or(u64::MAX, |c| (c / 2).max(ps));
    let serial: u64 = engine
        .live
        .values()
        .map(|r| (r.input + r.output).div_ceil(chunk) + r.max_new - r.output)
        .sum();
    let limit = 4 * serial + sim.drain_slack;
    let mut drained = 0;
    while !engine.live.is_empty() {
        assert!(
            drained < limit,
            "{} requests never finished within {limit} drain steps ({}): {}",
            engine.live.len(),
            engine.ctx(),
            engine.summary()
        );
        engine.step(false);
        drained += 1;
    }
    engine.ev.drain_steps = drained;
    if std::env::var_os("KVPOOL_SIM_VERBOSE").is_some() {
        println!(
            "config #{}: ps {} drained in {drained} steps {:?}",
            sim.index, sim.sched.page_size, engine.ev
        );
    }
    // Idle and empty: every page is back (cached entries aside), and a final step resets.
    engine.check_ownership();
    let plan = engine
        .sched
        .step(engine.pool.available_size(), engine.cache_tokens(), true);
    assert_eq!(plan.kind, StepKind::Idle);
    assert_eq!(engine.sched.counts(), (0, 0, 0));
    // Dropping the cache returns every page.
    while !engine.cache.is_empty() {
        let e = engine.cache.remove(0);
        assert!(!e.locked && e.owner.is_none(), "entry {} still held", e.id);
        engine.pool.free(&e.slots).expect("free a cached entry");
    }
    assert_eq!(engine.pool.available_size(), engine.pool.size());
    assert_eq!(engine.pool.stats().pages_in_use, 0);
    let stats = engine.sched.stats();
    let ev = engine.ev;
    assert_eq!(stats.steps, ev.steps + 1);
    assert_eq!(stats.prefill_steps, ev.prefill_steps);
    assert_eq!(stats.decode_steps, ev.decode_steps);
    assert_eq!(stats.chunks, ev.prefill_entries);
    assert_eq!(stats.retractions, ev.retractions);
    assert_eq!(stats.preemptions, ev.preemptions);
    assert_eq!(stats.aborts, ev.oom_aborts);
    assert_eq!(stats.unfittable, ev.unfittable);
    assert_eq!(stats.finished, ev.finished);
    assert_eq!(
        ev.submitted,
        ev.unfittable + ev.finished + ev.client_aborts + ev.oom_aborts,
        "every request finishes, is aborted or is unfittable"
    );
    (engine.digest, ev)
}

/// The configuration grid: every page size × chunking mode × policy, with priority,
/// request caps, clipping, prefix caching and `need_sort` varied across it.
fn grid() -> Vec<Sim> {
    // Optimised builds (`cargo test --release`) run the full length; debug builds, about
    // ten times slower per step, a shorter one over the same grid.
    let arrival_steps = if cfg!(debug_assertions) { 400 } else { 2000 };
    let mut rng = Rng(0x5EED_5C4E_D000_0F00);
    let mut sims = Vec::new();
    // (chunked, mixed, max_chunked_requests)
    let chunk_modes = [
        (false, false, 1),
        (true, false, 1),
        (true, true, 1),
        (true, false, 3),
        (true, true, 3),
    ];
    for (p, &ps) in [1u64, 16, 64].iter().enumerate() {
        let capacity = match ps {
            1 => 1024,
            16 => 2048,
            _ => 4096,
        };
        for (c, &(chunked, mixed, max_chunked)) in chunk_modes.iter().enumerate() {
            for (k, policy) in [
                Policy::Fcfs,
                Policy::Lof,
                Policy::Lpm,
                Policy::Random { seed: rng.next() },
                Policy::DfsWeight,
            ]
            .into_iter()
            .enumerate()
            {
                let n = (p * 25 + c * 5 + k) as u64;
                let mut cfg = SchedulerConfig::new(capacity, ps);
                cfg.chunked_prefill_size = chunked.then(|| {
                    let sizes: &[u64] = if ps == 64 {
                        &[128, 256, 512]
                    } else {
                        &[64, 128, 256, 512]
                    };
                    sizes[rng.below(sizes.len() as u64) as usize]
                });
                cfg.enable_mixed_chunk = mixed;
                cfg.max_chunked_requests = max_chunked;
                cfg.policy = policy;
                // Priority scheduling on about half, with preemption on most of those.
                if n % 2 == 1 {
                    cfg.priority = Some(PriorityConfig {
                        low_values_first: rng.chance(50),
                        preemption_threshold: (n % 6 != 5).then_some(10),
                    });
                    if rng.chance(50) {
                        cfg.retraction = RetractionPolicy::Priority;
                    }
                }
                if n.is_multiple_of(3) {
                    cfg.max_running_requests = Some(rng.range(4, 12) as usize);
                }
                if rng.chance(25) {
                    cfg.prefill_max_requests = Some(rng.range(2, 5) as usize);
                }
                if rng.chance(30) {
                    cfg.max_prefill_tokens = capacity / 4;
                }
                if rng.chance(30) {
                    cfg.clip_max_new_tokens = capacity / 16;
                }
                if let Some(chunk) = cfg.chunked_prefill_size {
                    if ps <= 16 && rng.chance(20) {
                        cfg.truncation_align_size = Some(32.min(chunk));
                    }
                }
                // An optimistic new-token ratio on some: admission overcommits sooner, so
                // decode retraction happens often.
                if rng.chance(60) {
                    cfg.ratio = RatioConfig {
                        init: 0.4,
                        min_factor: 0.1,
                        decay_steps: 40,
                        conservativeness: 1.0,
                    };
                }
                // Dynamic chunk sizing (SGLang's PP predictor) on a few chunked configs.
                if let Some(chunk) = cfg.chunked_prefill_size {
                    if rng.chance(20) {
                        cfg.dynamic_chunking = Some(ChunkSizePredictor {
                            a: 1e-4,
                            b: 0.0,
                            base_chunk: chunk,
                            page_size: ps,
                            context_len: capacity,
                            max_prefill_tokens: cfg.max_prefill_tokens,
                            smooth: 0.75,
                        });
                    }
                }
                let prefix_cache = n % 4 < 2;
                // Without a prefix cache, SGLang admits ignore_eos requests by simulation.
                cfg.prefix_cache_disabled = !prefix_cache && rng.chance(50);
                sims.push(Sim {
                    index: sims.len(),
                    seed: rng.next(),
                    sched: cfg,
                    need_sort: rng.chance(30),
                    prefix_cache,
                    arrival_pct: 8 + rng.below(12),
                    arrival_steps,
                    drain_slack: 2_000,
                });
            }
        }
    }
    sims
}

#[test]
fn scheduler_drives_a_real_pool_without_failures_leaks_or_stuck_requests() {
    let start = Instant::now();
    let mut sims = grid();
    // `KVPOOL_SIM_CONFIG=<index>` reruns one configuration (as named in a failure).
    if let Ok(only) = std::env::var("KVPOOL_SIM_CONFIG") {
        let only: usize = only.parse().expect("KVPOOL_SIM_CONFIG is a config index");
        sims.retain(|s| s.index == only);
    }
    let next = AtomicUsize::new(0);
    let totals = Mutex::new(Events::default());
    let workers = std::thread::available_parallelism().map_or(2, |n| n.get());
    std::thread::scope(|s| {
        for _ in 0..workers {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(&sim) = sims.get(i) else { break };
                let t = Instant::now();
                let (digest, ev) = simulate(sim);
                // Decisions are deterministic: the same seed gives the same plans.
                let (again, ev2) = simulate(sim);
                assert_eq!(digest, again, "plans differ between two runs of config {i}");
                assert_eq!(ev, ev2);
                if std::env::var_os("KVPOOL_SIM_VERBOSE").is_some() {
                    println!(
                        "config #{i}: {} steps, 2 runs in {:.0?}",
                        ev.steps,
                        t.elapsed()
                    );
                }
                totals.lock().expect("totals").add(&ev);
            });
        }
    });
    let t = totals.into_inner().expect("totals");
    println!(
        "scheduler_sim: {} configs (each run twice) in {:.1?}\n{t:#?}",
        sims.len(),
        start.elapsed()
    );
    assert!(t.retractions > 0, "no retraction happened: {t:?}");
    assert!(t.chunked_entries > 0, "no chunked prefill happened: {t:?}");
    assert!(t.unfittable > 0, "no unfittable request: {t:?}");
    assert!(t.preemptions > 0, "no preemption happened: {t:?}");
    assert!(t.batch_full_steps > 0, "batch_is_full never set: {t:?}");
    assert!(t.prefix_hits > 0, "no cached prefix was used: {t:?}");
    assert!(t.mixed_steps > 0, "no mixed prefill+decode step: {t:?}");
}

// ---- minimal reproductions of scheduler bugs the simulation found ---------------------
//
// Each drives `Scheduler` alone with the engine's numbers spelled out. They state the
// behaviour SGLang has (or the contract `SubmitOutcome::Unfittable` promises), not any
// particular fix.

fn plain(id: u64, input_len: u64, max_new_tokens: u64) -> RequestSpec {
    RequestSpec {
        id,
        input_len,
        max_new_tokens,
        ..RequestSpec::default()
    }
}

/// SGLang's `update_running_batch` clears `batch_is_full` whenever the running batch shrinks
/// (`if batch.batch_size() < initial_bs`); here it stays set until the running set is empty,
/// so a loaded server admits nothing while any request still runs.
#[test]
fn batch_is_full_clears_when_a_running_request_finishes() {
    let mut config = SchedulerConfig::new(1000, 1);
    config.chunked_prefill_size = None;
    let mut s = Scheduler::new(config).unwrap();
    s.submit(plain(1, 100, 100)).unwrap();
    s.submit(plain(2, 100, 100)).unwrap();
    s.submit(plain(3, 700, 50)).unwrap();
    // 1 and 2 fit (201 + 201 reserved); 3 needs 751 of the 598 left: NO_TOKEN, batch full.
    let plan = s.step(1000, 0, true);
    let ids: Vec<u64> = plan.prefill.iter().map(|e| e.id).collect();
    assert_eq!((ids, plan.batch_is_full), (vec![1, 2], true));
    let plan = s.step(800, 0, true);
    assert_eq!(plan.decode, [1, 2]);
    // Request 1 finishes; 101 tokens stay in use (request 2). Request 3 needs 751 and
    // 899 − 2's reservation (98 × ratio ≤ 69) ≥ 830 remain: SGLang admits it now.
    assert_eq!(s.finish(1).unwrap(), 101);
    let plan = s.step(899, 0, true);
    assert_eq!(
        (plan.kind, plan.prefill.first().map(|e| e.id)),
        (StepKind::Prefill, Some(3)),
        "the batch shrank but admission stayed blocked: {plan:?}"
    );
}

/// Without a prefix cache, `ignore_eos` requests are admitted by the future simulation,
/// which reserves the unclipped `max_new_tokens`; `submit` checks the clipped need only.
/// A request the simulation can never admit is queued, and at the head of the queue it
/// blocks everything behind it forever.
#[test]
fn ignore_eos_request_the_simulation_never_admits_is_unfittable() {
    let mut config = SchedulerConfig::new(1000, 1);
    config.chunked_prefill_size = None;
    config.prefix_cache_disabled = true;
    config.clip_max_new_tokens = 100;
    let mut s = Scheduler::new(config).unwrap();
    // Clipped need 500 + 100 + 1 < 1000; simulated need 500 + 600 > 1000.
    let big = RequestSpec {
        ignore_eos: true,
        ..plain(1, 500, 600)
    };
    let out = s.submit(big).unwrap();
    s.submit(plain(2, 10, 10)).unwrap();
    let plan = s.step(1000, 0, true);
    assert!(
        matches!(out, SubmitOutcome::Unfittable { .. }) || plan.kind == StepKind::Prefill,
        "queued ({out:?}) but an empty pool admits nothing: {plan:?}"
    );
}

/// A retracted or preempted request re-prefills its output so far and reserves
/// `min(max_new − output, clip)` more; with `max_new − output > clip` that need grows with
/// the output and can pass the pool's capacity. Such a request can never be admitted again:
/// it must be aborted (reported in `plan.aborted`), not left to block the queue forever.
#[test]
fn requeued_request_that_no_longer_fits_alone_does_not_wait_forever() {
    let mut config = SchedulerConfig::new(1000, 1);
    config.chunked_prefill_size = None;
    config.clip_max_new_tokens = 10;
    config.max_running_requests = Some(1);
    config.priority = Some(PriorityConfig {
        low_values_first: true,
        preemption_threshold: Some(10),
    });
    let mut s = Scheduler::new(config).unwrap();
    // Needs 900 + 10 + 1 = 911 at submission.
    let a = RequestSpec {
        priority: 50,
        ..plain(1, 900, 200)
    };
    assert_eq!(s.submit(a).unwrap(), SubmitOutcome::Queued);
    let mut used = 0;
    used += s.step(1000, 0, true).prefill[0].extend_len;
    for _ in 0..89 {
        used += s.step(1000 - used, 0, true).decode.len() as u64;
    }
    assert_eq!(s.request(1).unwrap(), (Phase::Running, 989, 90));
    // A request 50 priority points better preempts it (the one request slot is taken).
    let b = RequestSpec {
        priority: 0,
        ..plain(2, 5, 5)
    };
    s.submit(b).unwrap();
    let plan = s.step(1000 - used, 0, true);
    // Evicted for request 2; it could never be re-admitted, so it is aborted, not re-queued.
    let preempted: Vec<(u64, u64)> = plan.preempted.iter().map(|e| (e.id, e.kv_len)).collect();
    let aborted: Vec<(u64, u64)> = plan.aborted.iter().map(|e| (e.id, e.kv_len)).collect();
    assert!(preempted.is_empty());
    assert_eq!(aborted, [(1, 989)]);
    assert!(s.request(1).is_none());
    used = 5;
    while s.request(2).is_some_and(|r| r.2 < 5) {
        used += s.step(1000 - used, 0, true).decode.len() as u64;
    }
    s.finish(2).unwrap();
    // Request 1 now needs 990 + 10 + 1 = 1001 > 1000 tokens: it can never run again.
    for _ in 0..10 {
        let plan = s.step(1000, 0, true);
        if plan.kind != StepKind::Idle || s.request(1).is_none() {
            return;
        }
    }
    panic!(
        "request 1 waits forever on an empty pool: {:?}, counts {:?}",
        s.request(1),
        s.counts()
    );
}

/// DFS-weight ordering builds its tree from the paths the engine passed; paths taken at
/// different times can disagree (a radix split turns `[1, 2]` into `[1, 3, 2]`, while an
/// older waiting request still reports `[1, 2]`). A node reached under two parents is
/// emitted twice, and `dfs_weight` panics in `copy_from_slice`.
#[test]
fn dfs_weight_survives_paths_that_disagree() {
    let mut config = SchedulerConfig::new(1 << 20, 1);
    config.policy = Policy::DfsWeight;
    let mut s = Scheduler::new(config).unwrap();
    let with_path = |id, path: &[u64]| RequestSpec {
        prefix_path: path.to_vec(),
        ..plain(id, 10, 5)
    };
    s.submit(with_path(1, &[1, 2])).unwrap();
    s.submit(with_path(2, &[1, 3, 2])).unwrap();
    let plan = s.step(1 << 20, 0, true);
    assert_eq!(plan.prefill.len(), 2);
}
