//! A continuous-batching scheduler loop, shaped like SGLang's, driving a kvpool `Pool`.
//!
//! Each step: arrivals join the waiting queue; a prefill batch is admitted under a chunk
//! budget and a memory rule and allocated with one `alloc_extend`; every running request
//! gets one decode slot from one `alloc_decode` (retracting the newest request while the
//! pool is short); finished requests free their rows inside one free group. The ledger
//! checks every slot the pool hands out, and the books are compared with the pool's own
//! counters after every step.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use kvpool::{ErrorKind, Pool, PoolError};

use super::ledger::Ledger;
use super::metrics::Metrics;
use super::ratio::NewTokenRatio;
use super::workload::RequestSpec;

/// SGLang's cap on the output length used for memory estimates.
const CLIP_MAX_NEW_TOKENS: u64 = 4096;

/// Why a run stopped early; `main` turns it into a message and an exit status.
#[derive(Debug)]
pub struct Failure(pub String);

impl Failure {
    fn pool(call: &str, err: PoolError) -> Self {
        Self(format!("kvpool {call} failed unexpectedly: {err}"))
    }
}

impl From<String> for Failure {
    fn from(message: String) -> Self {
        Self(message)
    }
}

/// A request's life inside the engine.
#[derive(Debug)]
struct Request {
    spec: RequestSpec,
    /// Its `req_to_token` row: the KV slot of every token that has KV, in order.
    row: Vec<i64>,
    /// Output tokens sampled so far. The newest one has no KV yet (it is the next decode
    /// step's input), so a running request's row holds `prompt + generated - 1` slots.
    generated: u32,
    /// Tokens the current prefill must cover: the prompt, plus the output so far after a
    /// retraction (SGLang re-prefills `origin_input_ids + output_ids`).
    prefill_target: u64,
    /// Chunks the current prefill has taken so far.
    chunks: u32,
    /// Admission order; the newest admitted running request is retracted first.
    admitted_at: u64,
    /// Whether it has been admitted at least once (for the queueing delay).
    ever_admitted: bool,
    /// Whether one of its prefills needed more than one chunk.
    was_chunked: bool,
    /// Times it was retracted.
    retractions: u32,
}

impl Request {
    fn new(spec: RequestSpec) -> Self {
        Self {
            spec,
            row: Vec::new(),
            generated: 0,
            prefill_target: u64::from(spec.prompt_len),
            chunks: 0,
            admitted_at: 0,
            ever_admitted: false,
            was_chunked: false,
            retractions: 0,
        }
    }

    fn id(&self) -> u32 {
        self.spec.id
    }

    /// Output tokens the scheduler expects it still to generate: its remaining
    /// `max_new_tokens`, clipped as SGLang clips the estimate (`CLIP_MAX_NEW_TOKENS`).
    fn expected_output(&self) -> u64 {
        u64::from(self.spec.output_len - self.generated).min(CLIP_MAX_NEW_TOKENS)
    }

    fn is_done(&self) -> bool {
        self.generated == self.spec.output_len
    }

    /// The slot of its last token with KV, or -1 for an empty row (kvpool's `last_loc`).
    fn last_loc(&self) -> i64 {
        self.row.last().copied().unwrap_or(-1)
    }
}

/// One request's share of a prefill batch.
struct Chunk {
    req: usize,
    tokens: u64,
}

/// The scheduler: queues, the pool, the books, and the numbers it reports.
pub struct Scheduler {
    pool: Pool,
    ledger: Ledger,
    reqs: Vec<Request>,
    /// Next request (by arrival order) not yet in the waiting queue.
    next_arrival: usize,
    waiting: VecDeque<usize>,
    /// The request whose prefill continues next step (at most one: a chunk is cut only
    /// when the step's budget runs out).
    chunked: Option<usize>,
    /// Decoding requests, in the order their prefill completed.
    running: Vec<usize>,
    /// Whether admission reserves the new-token ratio's share of running requests' output.
    reserve_output: bool,
    ratio: NewTokenRatio,
    chunk_size: u64,
    page_size: u64,
    admissions: u64,
    step: u64,
    finished: usize,
    /// What happened, for the report.
    pub metrics: Metrics,
}

impl Scheduler {
    /// A scheduler over `pool` for this request stream (sorted by arrival step), with a
    /// prefill budget of `chunk_size` tokens per step; `reserve_output` selects SGLang's
    /// new-token-ratio admission over the plain next-step rule.
    pub fn new(
        pool: Pool,
        requests: Vec<RequestSpec>,
        chunk_size: u64,
        reserve_output: bool,
    ) -> Self {
        let ledger = Ledger::new(&pool.info());
        let page_size = u64::from(pool.page_size());
        Self {
            pool,
            ledger,
            reqs: requests.into_iter().map(Request::new).collect(),
            next_arrival: 0,
            waiting: VecDeque::new(),
            chunked: None,
            running: Vec::new(),
            reserve_output,
            ratio: NewTokenRatio::new(),
            chunk_size,
            page_size,
            admissions: 0,
            step: 0,
            finished: 0,
            metrics: Metrics::default(),
        }
    }

    /// The pool (for the final report and checks).
    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    /// The books (for the final checks).
    pub fn ledger(&self) -> &Ledger {
        &self.ledger
    }

    /// Whether every request has finished.
    pub fn is_done(&self) -> bool {
        self.finished == self.reqs.len()
    }

    /// Requests that finished.
    pub fn finished(&self) -> usize {
        self.finished
    }

    /// Steps run so far.
    pub fn steps(&self) -> u64 {
        self.step
    }

    /// Requests waiting for admission (including one mid-way through a chunked prefill).
    pub fn waiting_len(&self) -> usize {
        self.waiting.len() + usize::from(self.chunked.is_some())
    }

    /// Requests decoding.
    pub fn running_len(&self) -> usize {
        self.running.len()
    }

    /// Share of the pool's slots not available right now.
    pub fn utilisation(&self) -> f64 {
        1.0 - self.pool.available_size() as f64 / self.pool.size() as f64
    }

    /// Runs one scheduler step.
    pub fn step(&mut self) -> Result<(), Failure> {
        self.arrive();
        let allocated_before = self.pool.stats().tokens_allocated;
        let mut done = self.prefill()?;
        let prefilled = done.len();
        done.extend(self.decode()?);
        // Sampled at the step's high-water mark: after allocation, before the frees.
        self.metrics
            .sample(self.utilisation(), self.running.len(), self.waiting_len());
        // Requests whose prefill just completed join the decode batch (after this step's
        // decode, as in SGLang where a prefill batch is merged into the running batch
        // next step), unless that prefill already produced their last token.
        let (finished_now, joined): (Vec<usize>, Vec<usize>) = done
            .drain(..prefilled)
            .partition(|&r| self.reqs[r].is_done());
        self.running.extend(joined);
        done.extend(finished_now);
        self.finish(&done)?;
        self.check_books()?;
        if self.running.is_empty() && self.waiting_len() == 0 {
            self.ratio.reset();
        }
        if self.pool.stats().tokens_allocated == allocated_before
            && self.running.is_empty()
            && self.waiting_len() > 0
        {
            return Err(Failure(format!(
                "step {}: nothing running and nothing admitted, but {} requests wait: livelock",
                self.step,
                self.waiting_len()
            )));
        }
        self.step += 1;
        Ok(())
    }

    /// Moves the requests that have arrived by this step into the waiting queue.
    fn arrive(&mut self) {
        while let Some(req) = self.reqs.get(self.next_arrival) {
            if req.spec.arrival_step > self.step {
                break;
            }
            self.waiting.push_back(self.next_arrival);
            self.next_arrival += 1;
        }
    }

    // ---- prefill ----------------------------------------------------------------------

    /// Tokens the running requests are expected to need, which admission must leave free:
    /// a page for each request whose next decode token starts a page (SGLang's
    /// `new_tokens_required_next_decode`), plus, with `--new-token-ratio`, the ratio's
    /// share of their remaining output (the `PrefillAdder`'s `total_offset`).
    fn running_reserve(&self) -> u64 {
        let ps = self.page_size;
        self.running
            .iter()
            .map(|&r| {
                let req = &self.reqs[r];
                let next_page = if req.row.len() as u64 % ps == 0 {
                    ps
                } else {
                    0
                };
                let output = if self.reserve_output {
                    (req.expected_output() as f64 * self.ratio.get()).ceil() as u64
                } else {
                    0
                };
                next_page + output
            })
            .sum()
    }

    /// Decides how many prompt tokens request `r` may prefill this step, charging them to
    /// the step's chunk budget and to the free slots. The memory cost is conservative: the
    /// chunk rounded up to whole pages plus one page in case it straddles a page boundary
    /// (so `alloc_extend` cannot run short), plus, with `--new-token-ratio`, the whole
    /// expected output (SGLang charges it in full on the admitting step; later steps
    /// charge the ratio's share as for any running request).
    ///
    /// A chunk cut by the budget is cut at token granularity (SGLang cuts new requests at
    /// page granularity), so continuing chunks start mid-page and exercise the prefix's
    /// partial-page path of `alloc_extend`.
    fn fit(&self, r: usize, budget: &mut u64, free: &mut u64) -> Option<Chunk> {
        let req = &self.reqs[r];
        let remaining = req.prefill_target - req.row.len() as u64;
        let tokens = remaining.min(*budget);
        let output = if self.reserve_output {
            req.expected_output()
        } else {
            0
        };
        let cost = tokens.div_ceil(self.page_size) * self.page_size + self.page_size + output;
        if tokens == 0 || cost > *free {
            return None;
        }
        *budget -= tokens;
        *free -= cost;
        Some(Chunk { req: r, tokens })
    }

    /// Builds this step's prefill batch: the carried chunked request first, then waiting
    /// requests first-come first-served until the chunk budget or the memory runs out (a
    /// request that does not fit blocks the ones behind it, as in SGLang).
    fn admit(&mut self) -> Vec<Chunk> {
        let mut budget = self.chunk_size;
        let mut free = self
            .pool
            .available_size()
            .saturating_sub(self.running_reserve());
        let mut batch = Vec::new();
        if let Some(r) = self.chunked {
            match self.fit(r, &mut budget, &mut free) {
                Some(chunk) => {
                    self.chunked = None;
                    batch.push(chunk);
                }
                None => return batch,
            }
        }
        while let Some(&r) = self.waiting.front() {
            let Some(chunk) = self.fit(r, &mut budget, &mut free) else {
                break;
            };
            self.waiting.pop_front();
            self.admissions += 1;
            let req = &mut self.reqs[r];
            req.admitted_at = self.admissions;
            if !req.ever_admitted {
                req.ever_admitted = true;
                self.metrics
                    .queue_delays
                    .push(self.step - req.spec.arrival_step);
            }
            batch.push(chunk);
        }
        batch
    }

    /// Admits and allocates this step's prefill batch with one `alloc_extend`; returns the
    /// requests whose prefill completed (each sampled its next token).
    fn prefill(&mut self) -> Result<Vec<usize>, Failure> {
        let batch = self.admit();
        if batch.is_empty() {
            return Ok(Vec::new());
        }
        let mut prefix_lens = Vec::with_capacity(batch.len());
        let mut seq_lens = Vec::with_capacity(batch.len());
        let mut last_loc = Vec::with_capacity(batch.len());
        for chunk in &batch {
            let req = &self.reqs[chunk.req];
            let prefix = req.row.len() as u64;
            prefix_lens.push(prefix as i64);
            seq_lens.push((prefix + chunk.tokens) as i64);
            last_loc.push(req.last_loc());
            self.metrics.partial_prefix_rows += u64::from(prefix % self.page_size != 0);
        }
        let total: u64 = batch.iter().map(|c| c.tokens).sum();
        let mut out = vec![0i64; total as usize];
        let result = timed(&mut self.metrics.pool_time, || {
            self.pool
                .alloc_extend(&prefix_lens, &seq_lens, &last_loc, total, &mut out)
        });
        // Admission guaranteed room, so even a shortage here is a failure.
        result.map_err(|e| Failure::pool("alloc_extend", e))?;
        self.metrics.extend_batches += 1;
        self.metrics.max_extend_batch = self.metrics.max_extend_batch.max(batch.len());

        let mut completed = Vec::new();
        let mut slots = out.into_iter();
        for chunk in batch {
            let req = &mut self.reqs[chunk.req];
            for slot in slots.by_ref().take(chunk.tokens as usize) {
                self.ledger.claim(req.spec.id, &req.row, slot)?;
                self.metrics.record_slot(slot);
                req.row.push(slot);
            }
            req.chunks += 1;
            self.metrics.prefill_tokens += chunk.tokens;
            if req.row.len() as u64 == req.prefill_target {
                if req.chunks > 1 {
                    req.was_chunked = true;
                    self.metrics.max_chunks = self.metrics.max_chunks.max(req.chunks);
                }
                req.chunks = 0;
                req.generated += 1;
                completed.push(chunk.req);
            } else {
                self.chunked = Some(chunk.req);
            }
        }
        Ok(completed)
    }

    // ---- decode -----------------------------------------------------------------------

    /// Gives every running request one slot with one `alloc_decode`, retracting the
    /// newest request while the pool is short; returns the requests that finished.
    fn decode(&mut self) -> Result<Vec<usize>, Failure> {
        let mut retracted = false;
        let mut seq_lens = Vec::with_capacity(self.running.len());
        let mut last_loc = Vec::with_capacity(self.running.len());
        let mut out = Vec::with_capacity(self.running.len());
        loop {
            if self.running.is_empty() {
                return Ok(Vec::new());
            }
            seq_lens.clear();
            last_loc.clear();
            for &r in &self.running {
                let req = &self.reqs[r];
                seq_lens.push(req.row.len() as i64 + 1);
                last_loc.push(req.last_loc());
            }
            out.clear();
            out.resize(self.running.len(), 0i64);
            let result = timed(&mut self.metrics.pool_time, || {
                self.pool.alloc_decode(&seq_lens, &last_loc, &mut out)
            });
            match result {
                Ok(()) => break,
                Err(e) if e.kind() == ErrorKind::OutOfSlots => {
                    self.metrics.decode_shortages += 1;
                    self.retract_one()?;
                    retracted = true;
                }
                Err(e) => return Err(Failure::pool("alloc_decode", e)),
            }
        }
        if retracted {
            self.update_ratio_after_retraction();
        } else {
            self.ratio.decay();
        }
        self.metrics.min_ratio = self.metrics.min_ratio.min(self.ratio.get());
        self.metrics.max_decode_batch = self.metrics.max_decode_batch.max(self.running.len());
        let mut finished = Vec::new();
        for (&r, &slot) in self.running.iter().zip(&out) {
            let req = &mut self.reqs[r];
            self.ledger.claim(req.spec.id, &req.row, slot)?;
            self.metrics.record_slot(slot);
            req.row.push(slot);
            req.generated += 1;
            self.metrics.decode_tokens += 1;
            if req.is_done() {
                finished.push(r);
            }
        }
        self.running.retain(|&r| !self.reqs[r].is_done());
        Ok(finished)
    }

    /// Frees one request's KV so the others can decode, and sends it back to the front of
    /// the waiting queue to be prefilled again. The newest running request goes first, but
    /// at least one keeps running; after that, the request in the middle of a chunked
    /// prefill (it holds KV but does not decode).
    fn retract_one(&mut self) -> Result<(), Failure> {
        let victim = if self.running.len() > 1 {
            let newest = (0..self.running.len())
                .max_by_key(|&i| self.reqs[self.running[i]].admitted_at)
                .expect("running is not empty");
            self.running.remove(newest)
        } else if let Some(r) = self.chunked.take() {
            r
        } else {
            return Err(Failure(format!(
                "step {}: the pool cannot decode even one request",
                self.step
            )));
        };
        self.metrics.retracted_tokens += self.reqs[victim].row.len() as u64;
        self.release(victim, FreePath::Segment)?;
        let req = &mut self.reqs[victim];
        self.metrics.retractions += 1;
        req.retractions += 1;
        req.chunks = 0;
        req.prefill_target = u64::from(req.spec.prompt_len) + u64::from(req.generated);
        self.waiting.push_front(victim);
        Ok(())
    }

    fn update_ratio_after_retraction(&mut self) {
        let (generated, max_new) = self.running.iter().fold((0, 0), |(g, m), &r| {
            let spec = &self.reqs[r].spec;
            (
                g + u64::from(self.reqs[r].generated),
                m + u64::from(spec.output_len),
            )
        });
        self.ratio
            .after_retraction(generated, max_new, self.running.len() as u64);
    }

    // ---- finishing --------------------------------------------------------------------

    /// Frees the finished requests' rows inside one free group, alternating between
    /// `free_segment` (the engine's sync-free path) and `free` (free by index) so both run.
    fn finish(&mut self, done: &[usize]) -> Result<(), Failure> {
        if done.is_empty() {
            return Ok(());
        }
        self.pool
            .free_group_begin()
            .map_err(|e| Failure::pool("free_group_begin", e))?;
        for &r in done {
            let path = if self.reqs[r].id() % 2 == 0 {
                FreePath::Segment
            } else {
                FreePath::Index
            };
            self.release(r, path)?;
            self.finished += 1;
            let req = &self.reqs[r];
            self.metrics.finished_chunked += u64::from(req.was_chunked);
            self.metrics.finished_retracted += u64::from(req.retractions > 0);
        }
        self.pool
            .free_group_end()
            .map_err(|e| Failure::pool("free_group_end", e))
    }

    /// Returns request `r`'s whole row to the pool and the books.
    fn release(&mut self, r: usize, path: FreePath) -> Result<(), Failure> {
        let req = &mut self.reqs[r];
        let result = timed(&mut self.metrics.pool_time, || match path {
            FreePath::Segment => self.pool.free_segment(&req.row, 0, req.row.len()),
            FreePath::Index => self.pool.free(&req.row),
        });
        result.map_err(|e| Failure::pool(path.name(), e))?;
        self.ledger.release(req.spec.id, &req.row)?;
        req.row.clear();
        Ok(())
    }

    /// Compares the books with the pool between steps: the pages the requests hold are
    /// exactly the pages the pool counts in use, and the rest are available.
    fn check_books(&self) -> Result<(), Failure> {
        let stats = self.pool.stats();
        let held = self.ledger.pages_held();
        if stats.pages_in_use != held {
            return Err(Failure(format!(
                "step {}: the pool counts {} pages in use but requests hold {held}",
                self.step, stats.pages_in_use
            )));
        }
        let expected = self.pool.size() - held * self.page_size;
        if self.pool.available_size() != expected {
            return Err(Failure(format!(
                "step {}: available_size is {} but {expected} slots are not held",
                self.step,
                self.pool.available_size()
            )));
        }
        Ok(())
    }
}

/// The two ways a request's KV goes back to the pool.
#[derive(Clone, Copy)]
enum FreePath {
    /// `free_segment(row, 0, len)`: page ids from the row, no search.
    Segment,
    /// `free(row)`: every index frees its page.
    Index,
}

impl FreePath {
    fn name(self) -> &'static str {
        match self {
            Self::Segment => "free_segment",
            Self::Index => "free",
        }
    }
}

/// Runs `f`, adding its duration to `clock` (how long the demo spends inside kvpool).
fn timed<T>(clock: &mut Duration, f: impl FnOnce() -> T) -> T {
    let start = Instant::now();
    let value = f();
    *clock += start.elapsed();
    value
}
