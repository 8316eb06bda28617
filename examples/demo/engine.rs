//! The serving loop: how an inference engine drives kvpool's `Scheduler` and `Pool`.
//!
//! The scheduler decides, the engine executes. Each step:
//! 1. arriving requests are submitted (`Scheduler::submit`); a request that can never fit
//!    the pool comes back `Unfittable` and is refused at once;
//! 2. `Scheduler::step(available, evictable, allow_prefill)` plans the step;
//! 3. the KV of the requests the plan retracted, preempted or aborted is freed;
//! 4. the plan's prefill entries get their slots from one `alloc_extend`;
//! 5. the plan's decode rows get theirs from one `alloc_decode`;
//! 6. requests that produced their last token are finished (`Scheduler::finish`) and their
//!    KV freed.
//!
//! Admission guarantees steps 4 and 5: a failed allocation is a failed check, never
//! something to retry. The engine keeps each request's `req_to_token` row and checks it
//! against the scheduler's view (`Scheduler::request`) and every slot against an
//! independent ledger, every step.
//!
//! The pool is a `super::kv::KvPool`: kvpool's host `Pool`, or with `--backend cuda` a
//! `DevicePool` behind the same calls (`super::device`), so the loop is the same for both.
//!
//! The demo's prefix cache is the simplest one that exists: a few system prompts whose KV
//! is computed once and pinned for the whole run. Requests that start with one share its
//! pages (their rows begin with the same slots), so nothing is ever evictable.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use kvpool::admission::{
    Evicted, Phase, PrefillEntry, RequestSpec, Scheduler, StepKind, StepPlan, SubmitOutcome,
};
use kvpool::PoolError;

use super::kv::KvPool;
use super::ledger::Ledger;
use super::metrics::Metrics;
use super::workload::Arrival;

/// Consecutive idle steps with requests still queued after which the run is declared stuck.
const STALL_STEPS: u64 = 1000;
/// Steps without any request finishing or aborting, while some are live, after which the
/// run is declared stuck (e.g. retracting and re-admitting the same requests forever).
const NO_FINISH_STEPS: u64 = 100_000;

/// Why a run stopped early; `main` turns it into a message and an exit status.
#[derive(Debug)]
pub struct Failure(pub String);

impl From<String> for Failure {
    fn from(message: String) -> Self {
        Self(message)
    }
}

/// Where a request is, as the engine sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Status {
    /// Not yet arrived.
    Pending,
    /// Submitted: waiting, prefilling or decoding inside the scheduler.
    Live,
    /// Produced its last token.
    Finished,
    /// Aborted by the scheduler (it could not decode even alone).
    Aborted,
    /// Refused at submission: it can never fit the pool.
    Unfittable,
}

/// One request inside the engine.
#[derive(Debug)]
struct Request {
    arrival: Arrival,
    status: Status,
    /// Its `req_to_token` row: the KV slot of every token that has KV, in order. Starts
    /// with its system prompt's shared slots when that prompt is cached.
    row: Vec<i64>,
    /// Leading slots of `row` owned by the prefix cache (never freed with the request).
    cached: usize,
    /// Chunks the current prefill has taken so far.
    chunks: u32,
    /// Admitted at least once (for the queueing delay).
    admitted: bool,
    /// Times retracted or preempted.
    evictions: u32,
}

impl Request {
    fn id(&self) -> u64 {
        u64::from(self.arrival.id)
    }

    /// Output tokens after which it stops: EOS at its sampled length, or `max_new_tokens`.
    fn stop_len(&self) -> u64 {
        self.arrival.output_len.min(self.arrival.max_new_tokens)
    }
}

/// The ledger owner of shared prefix `k` (request ids stay below these).
fn prefix_owner(k: usize) -> u32 {
    u32::MAX - 1 - k as u32
}

/// The engine: the pool, the scheduler, the requests' rows, and the books.
pub struct Engine {
    /// The host `Pool`, or a device pool behind the same calls (`--backend cuda`).
    pool: Box<dyn KvPool>,
    scheduler: Scheduler,
    ledger: Ledger,
    /// The pinned system prompts' rows (empty for a prompt shorter than a page).
    prefixes: Vec<Vec<i64>>,
    reqs: Vec<Request>,
    /// Next request (by arrival order) not yet submitted.
    next_arrival: usize,
    /// Submitted requests not yet finished or aborted.
    live: usize,
    /// Live requests holding KV of their own (prefilling or decoding).
    holding: BTreeSet<u64>,
    step: u64,
    idle_streak: u64,
    /// The last step at which a request left, or nothing was live.
    last_exit: u64,
    /// Finished + aborted requests at `last_exit`.
    exits_seen: u64,
    /// Scratch buffers for the allocator calls.
    prefix_lens: Vec<i64>,
    seq_lens: Vec<i64>,
    last_loc: Vec<i64>,
    out: Vec<i64>,
    /// What happened, for the report.
    pub metrics: Metrics,
}

impl Engine {
    /// An engine over `pool` and `scheduler` for this request stream (sorted by arrival
    /// step). Computes and pins the system prompts first: each gets `len` rounded down to
    /// whole pages of KV (a paged prefix cache only matches whole pages).
    pub fn new(
        mut pool: Box<dyn KvPool>,
        scheduler: Scheduler,
        arrivals: Vec<Arrival>,
        system_prompts: &[u32],
    ) -> Result<Self, Failure> {
        let mut ledger = Ledger::new(&pool.info());
        let ps = u64::from(pool.page_size());
        let mut prefixes = Vec::with_capacity(system_prompts.len());
        let mut metrics = Metrics::default();
        for (k, &len) in system_prompts.iter().enumerate() {
            let n = (u64::from(len) / ps * ps) as usize;
            let mut row = vec![0i64; n];
            pool.alloc(n, &mut row)
                .map_err(|e| pool_failure("alloc (system prompt)", e))?;
            let mut claimed = Vec::with_capacity(n);
            for slot in row {
                ledger.claim(prefix_owner(k), &claimed, slot)?;
                metrics.record_slot(slot);
                claimed.push(slot);
            }
            prefixes.push(claimed);
        }
        if pool.available_size() != scheduler.config().capacity {
            return Err(Failure(format!(
                "the scheduler's capacity {} is not what the pool has left after pinning the system prompts ({})",
                scheduler.config().capacity,
                pool.available_size()
            )));
        }
        let reqs = arrivals
            .into_iter()
            .map(|arrival| Request {
                arrival,
                status: Status::Pending,
                row: Vec::new(),
                cached: 0,
                chunks: 0,
                admitted: false,
                evictions: 0,
            })
            .collect();
        Ok(Self {
            pool,
            scheduler,
            ledger,
            prefixes,
            reqs,
            next_arrival: 0,
            live: 0,
            holding: BTreeSet::new(),
            step: 0,
            idle_streak: 0,
            last_exit: 0,
            exits_seen: 0,
            prefix_lens: Vec::new(),
            seq_lens: Vec::new(),
            last_loc: Vec::new(),
            out: Vec::new(),
            metrics,
        })
    }

    /// The pool (for the report and the final checks).
    pub fn pool(&self) -> &dyn KvPool {
        self.pool.as_ref()
    }

    /// The pool, for the final checks that wait for a device.
    pub fn pool_mut(&mut self) -> &mut dyn KvPool {
        self.pool.as_mut()
    }

    /// The scheduler (for the report and the final checks).
    pub fn scheduler(&self) -> &Scheduler {
        &self.scheduler
    }

    /// The books (for the final checks).
    pub fn ledger(&self) -> &Ledger {
        &self.ledger
    }

    /// Steps run so far.
    pub fn steps(&self) -> u64 {
        self.step
    }

    /// Requests in the stream.
    pub fn requests(&self) -> usize {
        self.reqs.len()
    }

    /// Whether every request has arrived and left (finished, aborted or refused).
    pub fn is_done(&self) -> bool {
        self.next_arrival == self.reqs.len() && self.live == 0
    }

    /// Share of the pool's slots not available right now.
    pub fn utilisation(&self) -> f64 {
        1.0 - self.pool.available_size() as f64 / self.pool.size() as f64
    }

    /// Requests that arrived and ended, by how: finished, aborted, unfittable.
    pub fn outcomes(&self) -> (usize, usize, usize) {
        let count = |s| self.reqs.iter().filter(|r| r.status == s).count();
        (
            count(Status::Finished),
            count(Status::Aborted),
            count(Status::Unfittable),
        )
    }

    /// Runs one step of the serving loop.
    pub fn step(&mut self) -> Result<(), Failure> {
        // 1. New requests join the scheduler's waiting queue.
        self.submit_arrivals()?;

        // 2. The scheduler plans the step from the pool's free tokens. The demo's prefix
        //    cache is pinned, so nothing is evictable; prefill is always allowed.
        let available = self.pool.available_size();
        let plan = timed(&mut self.metrics.scheduler_time, || {
            self.scheduler.step(available, 0, true)
        });

        // 3. Free the KV of retracted, preempted and aborted requests before allocating:
        //    the plan counted that room.
        self.free_evicted(&plan)?;

        // 4. Prefill: one alloc_extend for the whole batch. Admission guarantees it.
        self.prefill(&plan.prefill)?;

        // 5. Decode: one slot per decoding request from one alloc_decode. Guaranteed too.
        self.decode(&plan.decode)?;

        self.record(&plan);

        // 6. Requests that produced their last token leave; their KV goes back.
        self.finish_done(&plan)?;

        // A device backend waits for its stream here and checks itself against the host
        // backend, so the books below see exact counts (the host pool has nothing to do).
        self.pool
            .end_step()
            .map_err(|e| Failure(format!("step {}: {e}", self.step)))?;
        self.check_books()?;
        self.check_progress(&plan)?;
        self.step += 1;
        Ok(())
    }

    /// Frees the pinned system prompts once the run is over.
    pub fn shutdown(&mut self) -> Result<(), Failure> {
        for (k, row) in std::mem::take(&mut self.prefixes).into_iter().enumerate() {
            if row.is_empty() {
                continue;
            }
            let result = timed(&mut self.metrics.pool_time, || {
                self.pool.free_segment(&row, 0, row.len())
            });
            result.map_err(|e| pool_failure("free_segment (system prompt)", e))?;
            self.ledger.release(prefix_owner(k), &row)?;
        }
        Ok(())
    }

    // ---- 1. submission ----------------------------------------------------------------

    fn submit_arrivals(&mut self) -> Result<(), Failure> {
        while let Some(req) = self.reqs.get_mut(self.next_arrival) {
            if req.arrival.arrival_step > self.step {
                break;
            }
            self.next_arrival += 1;
            let a = req.arrival;
            // A request starting with a cached system prompt reuses its pages: its row
            // begins with the prompt's slots, and the scheduler counts them as prefix.
            let cached = a
                .system_prompt
                .map(|k| &self.prefixes[k])
                .filter(|row| !row.is_empty());
            let spec = RequestSpec {
                id: req.id(),
                input_len: a.prompt_len,
                prefix_len: cached.map_or(0, |row| row.len() as u64),
                prefix_evictable: 0,
                max_new_tokens: a.max_new_tokens,
                output_len: 0,
                ignore_eos: a.ignore_eos,
                priority: a.priority,
                prefix_path: a.system_prompt.map(|k| k as u64).into_iter().collect(),
            };
            let outcome = self
                .scheduler
                .submit(spec)
                .map_err(|e| Failure(format!("submit of request {} failed: {e}", a.id)))?;
            match outcome {
                SubmitOutcome::Queued => {
                    req.status = Status::Live;
                    req.row = cached.cloned().unwrap_or_default();
                    req.cached = req.row.len();
                    self.live += 1;
                }
                SubmitOutcome::Unfittable { needed, capacity } => {
                    req.status = Status::Unfittable;
                    self.metrics.unfittable += 1;
                    self.metrics
                        .first_unfittable
                        .get_or_insert((req.id(), needed, capacity));
                }
            }
        }
        Ok(())
    }

    // ---- 3. evictions -----------------------------------------------------------------

    fn free_evicted(&mut self, plan: &StepPlan) -> Result<(), Failure> {
        if plan.retracted.is_empty() && plan.preempted.is_empty() && plan.aborted.is_empty() {
            return Ok(());
        }
        self.pool
            .free_group_begin()
            .map_err(|e| pool_failure("free_group_begin", e))?;
        for e in plan.retracted.iter().chain(&plan.preempted) {
            self.release(e, "evicted")?;
            let req = &mut self.reqs[e.id as usize];
            req.evictions += 1;
            req.chunks = 0;
            self.metrics.evicted_tokens += e.kv_len - req.cached as u64;
            // Its prompt is still cached: tell the scheduler (a retraction forgets it).
            if req.cached > 0 {
                let cached = req.cached as u64;
                self.scheduler
                    .update_prefix(e.id, cached, 0, None)
                    .map_err(|err| {
                        Failure(format!("update_prefix of request {} failed: {err}", e.id))
                    })?;
            }
        }
        self.metrics.retractions += plan.retracted.len() as u64;
        self.metrics.preemptions += plan.preempted.len() as u64;
        for e in &plan.aborted {
            self.release(e, "aborted")?;
            self.reqs[e.id as usize].status = Status::Aborted;
            self.live -= 1;
            self.metrics.aborted += 1;
        }
        self.pool
            .free_group_end()
            .map_err(|e| pool_failure("free_group_end", e))
    }

    // ---- 4. prefill -------------------------------------------------------------------

    fn prefill(&mut self, batch: &[PrefillEntry]) -> Result<(), Failure> {
        if batch.is_empty() {
            return Ok(());
        }
        let ps = u64::from(self.pool.page_size());
        self.prefix_lens.clear();
        self.seq_lens.clear();
        self.last_loc.clear();
        for e in batch {
            let req = &self.reqs[e.id as usize];
            if e.prefix_len != req.row.len() as u64 {
                return Err(Failure(format!(
                    "step {}: the plan prefills request {} from position {} but its row holds {} slots",
                    self.step,
                    e.id,
                    e.prefix_len,
                    req.row.len()
                )));
            }
            self.prefix_lens.push(e.prefix_len as i64);
            self.seq_lens.push((e.prefix_len + e.extend_len) as i64);
            self.last_loc.push(req.row.last().copied().unwrap_or(-1));
            self.metrics.partial_prefix_rows += u64::from(e.prefix_len % ps != 0);
        }
        let total: u64 = batch.iter().map(|e| e.extend_len).sum();
        self.out.clear();
        self.out.resize(total as usize, 0);
        let result = timed(&mut self.metrics.pool_time, || {
            self.pool.alloc_extend(
                &self.prefix_lens,
                &self.seq_lens,
                &self.last_loc,
                total,
                &mut self.out,
            )
        });
        result.map_err(|err| {
            Failure(format!(
                "step {}: alloc_extend of {total} tokens for {} admitted requests failed with {} \
                 slots available: {err} (admission must guarantee this allocation)",
                self.step,
                batch.len(),
                self.pool.available_size()
            ))
        })?;
        self.metrics.max_extend_batch = self.metrics.max_extend_batch.max(batch.len());
        self.metrics.prefill_tokens += total;

        let mut slots = self.out.iter().copied();
        for e in batch {
            let req = &mut self.reqs[e.id as usize];
            if !req.admitted {
                req.admitted = true;
                let delay = self.step - req.arrival.arrival_step;
                self.metrics.queue_delays.push(delay);
            }
            if req.chunks == 0 {
                self.metrics.cached_tokens += e.prefix_len;
            }
            for slot in slots.by_ref().take(e.extend_len as usize) {
                self.ledger.claim(req.arrival.id, &req.row, slot)?;
                self.metrics.record_slot(slot);
                req.row.push(slot);
            }
            self.holding.insert(e.id);
            req.chunks += 1;
            if !e.chunked {
                if req.chunks > 1 {
                    self.metrics.chunked_prefills += 1;
                    self.metrics.max_chunks = self.metrics.max_chunks.max(req.chunks);
                }
                req.chunks = 0;
            }
        }
        Ok(())
    }

    // ---- 5. decode --------------------------------------------------------------------

    fn decode(&mut self, batch: &[u64]) -> Result<(), Failure> {
        if batch.is_empty() {
            return Ok(());
        }
        self.seq_lens.clear();
        self.last_loc.clear();
        for &id in batch {
            let row = &self.reqs[id as usize].row;
            self.seq_lens.push(row.len() as i64 + 1);
            self.last_loc.push(row.last().copied().unwrap_or(-1));
        }
        self.out.clear();
        self.out.resize(batch.len(), 0);
        let result = timed(&mut self.metrics.pool_time, || {
            self.pool
                .alloc_decode(&self.seq_lens, &self.last_loc, &mut self.out)
        });
        result.map_err(|err| {
            Failure(format!(
                "step {}: alloc_decode for {} requests failed with {} slots available: {err} \
                 (the scheduler's decode check must guarantee this allocation)",
                self.step,
                batch.len(),
                self.pool.available_size()
            ))
        })?;
        self.metrics.max_decode_batch = self.metrics.max_decode_batch.max(batch.len());
        self.metrics.decode_tokens += batch.len() as u64;
        for (&id, &slot) in batch.iter().zip(&self.out) {
            let req = &mut self.reqs[id as usize];
            self.ledger.claim(req.arrival.id, &req.row, slot)?;
            self.metrics.record_slot(slot);
            req.row.push(slot);
        }
        Ok(())
    }

    // ---- 6. finishing -----------------------------------------------------------------

    /// Finishes the requests that produced their last token this step (a completed prefill
    /// samples the first output token, each decode row one more), freeing their KV inside
    /// one free group.
    fn finish_done(&mut self, plan: &StepPlan) -> Result<(), Failure> {
        let produced = plan
            .prefill
            .iter()
            .filter(|e| !e.chunked)
            .map(|e| e.id)
            .chain(plan.decode.iter().copied());
        let mut done = Vec::new();
        for id in produced {
            let (phase, _, output_len) = self.view(id)?;
            let req = &self.reqs[id as usize];
            if phase != Phase::Running || output_len > req.stop_len() {
                return Err(Failure(format!(
                    "step {}: request {id} produced a token but is {phase:?} with {output_len} of {} output tokens",
                    self.step,
                    req.stop_len()
                )));
            }
            if output_len == req.stop_len() {
                done.push(id);
            }
        }
        if done.is_empty() {
            return Ok(());
        }
        self.pool
            .free_group_begin()
            .map_err(|e| pool_failure("free_group_begin", e))?;
        for &id in &done {
            let kv_len = self
                .scheduler
                .finish(id)
                .map_err(|e| Failure(format!("finish of request {id} failed: {e}")))?;
            let prefix_len = self.reqs[id as usize].cached as u64;
            let evicted = Evicted {
                id,
                kv_len,
                prefix_len,
            };
            self.release(&evicted, "finished")?;
            let req = &mut self.reqs[id as usize];
            req.status = Status::Finished;
            self.metrics.finished += 1;
            self.metrics.finished_evicted += u64::from(req.evictions > 0);
        }
        self.live -= done.len();
        self.pool
            .free_group_end()
            .map_err(|e| pool_failure("free_group_end", e))
    }

    /// Returns a request's own KV (its row past the cached prefix) to the pool and the
    /// books, alternating between `free_segment` (the engine's sync-free path) and `free`
    /// (by index) so both run. The scheduler's `kv_len` must match the row.
    fn release(&mut self, e: &Evicted, why: &str) -> Result<(), Failure> {
        let req = &mut self.reqs[e.id as usize];
        if e.kv_len != req.row.len() as u64 {
            return Err(Failure(format!(
                "step {}: request {} ({why}) held {} tokens of KV per the scheduler but its row holds {}",
                self.step,
                e.id,
                e.kv_len,
                req.row.len()
            )));
        }
        if e.prefix_len != req.cached as u64 {
            return Err(Failure(format!(
                "step {}: request {} ({why}) has {} cached tokens per the scheduler but {} in its row",
                self.step, e.id, e.prefix_len, req.cached
            )));
        }
        if !self.holding.remove(&e.id) {
            return Err(Failure(format!(
                "step {}: request {} ({why}) was never prefilled",
                self.step, e.id
            )));
        }
        let own = &req.row[req.cached..];
        if !own.is_empty() {
            let by_segment = e.id.is_multiple_of(2);
            let result = timed(&mut self.metrics.pool_time, || {
                if by_segment {
                    self.pool.free_segment(&req.row, req.cached, own.len())
                } else {
                    self.pool.free(own)
                }
            });
            let call = if by_segment { "free_segment" } else { "free" };
            result.map_err(|err| pool_failure(call, err))?;
            self.ledger.release(req.arrival.id, own)?;
        }
        req.row.truncate(req.cached);
        Ok(())
    }

    // ---- checks and metrics -----------------------------------------------------------

    /// The scheduler's (phase, kv_len, output_len) of a live request.
    fn view(&self, id: u64) -> Result<(Phase, u64, u64), Failure> {
        self.scheduler.request(id).ok_or_else(|| {
            Failure(format!(
                "step {}: the scheduler does not know request {id}",
                self.step
            ))
        })
    }

    fn record(&mut self, plan: &StepPlan) {
        let m = &mut self.metrics;
        match plan.kind {
            StepKind::Prefill if plan.decode.is_empty() => m.prefill_steps += 1,
            StepKind::Prefill => m.mixed_steps += 1,
            StepKind::Decode => m.decode_steps += 1,
            StepKind::Idle => m.idle_steps += 1,
        }
        m.min_ratio = m.min_ratio.min(plan.new_token_ratio);
        let (waiting, chunking, running) = self.scheduler.counts();
        m.max_chunking = m.max_chunking.max(chunking);
        // Sampled at the step's high-water mark: after allocation, before the frees.
        let utilisation = 1.0 - self.pool.available_size() as f64 / self.pool.size() as f64;
        m.sample(utilisation, running, waiting + chunking);
    }

    /// Between steps: the pages the rows hold are exactly the pages the pool counts in
    /// use, the rest are available, every request holding KV is prefilling or decoding in
    /// the scheduler with exactly its row's length of KV, and the scheduler holds exactly
    /// the live requests (waiting ones hold no KV of their own: their rows were cut back
    /// to the cached prefix when they were evicted, and grow only through the plan).
    fn check_books(&self) -> Result<(), Failure> {
        let stats = self.pool.stats();
        let held = self.ledger.pages_held();
        if stats.pages_in_use != held {
            return Err(Failure(format!(
                "step {}: the pool counts {} pages in use but the rows hold {held}",
                self.step, stats.pages_in_use
            )));
        }
        let expected = self.pool.size() - held * u64::from(self.pool.page_size());
        if self.pool.available_size() != expected {
            return Err(Failure(format!(
                "step {}: available_size is {} but {expected} slots are not held",
                self.step,
                self.pool.available_size()
            )));
        }
        for &id in &self.holding {
            let (phase, kv_len, _) = self.view(id)?;
            let req = &self.reqs[id as usize];
            if phase == Phase::Waiting || kv_len != req.row.len() as u64 {
                return Err(Failure(format!(
                    "step {}: request {id} is {phase:?} with kv_len {kv_len} per the scheduler, \
                     but its row holds {} slots ({} cached)",
                    self.step,
                    req.row.len(),
                    req.cached
                )));
            }
        }
        let (waiting, chunking, running) = self.scheduler.counts();
        if chunking + running != self.holding.len() || waiting + chunking + running != self.live {
            return Err(Failure(format!(
                "step {}: the scheduler has {waiting} waiting, {chunking} chunking and {running} \
                 running requests, but {} are live and {} hold KV",
                self.step,
                self.live,
                self.holding.len()
            )));
        }
        Ok(())
    }

    /// A run where requests stay queued while the scheduler plans nothing, or where none
    /// ever finishes, would never end.
    fn check_progress(&mut self, plan: &StepPlan) -> Result<(), Failure> {
        if plan.kind == StepKind::Idle && self.live > 0 {
            self.idle_streak += 1;
            if self.idle_streak >= STALL_STEPS {
                return Err(Failure(format!(
                    "step {}: {} requests are queued but the scheduler planned nothing for {STALL_STEPS} steps",
                    self.step, self.live
                )));
            }
        } else {
            self.idle_streak = 0;
        }
        let exits = self.metrics.finished + self.metrics.aborted;
        if self.live == 0 || exits != self.exits_seen {
            self.exits_seen = exits;
            self.last_exit = self.step;
        } else if self.step - self.last_exit >= NO_FINISH_STEPS {
            return Err(Failure(format!(
                "step {}: no request finished for {NO_FINISH_STEPS} steps; {} are live",
                self.step, self.live
            )));
        }
        Ok(())
    }
}

fn pool_failure(call: &str, err: PoolError) -> Failure {
    Failure(format!("kvpool {call} failed unexpectedly: {err}"))
}

/// Runs `f`, adding its duration to `clock`.
fn timed<T>(clock: &mut Duration, f: impl FnOnce() -> T) -> T {
    let start = Instant::now();
    let value = f();
    *clock += start.elapsed();
    value
}
