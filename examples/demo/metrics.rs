//! What the scheduler observed, collected during the run and summarised at the end.

use std::time::Duration;

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// Counters and per-step samples of one run.
#[derive(Debug)]
pub struct Metrics {
    /// Steps the scheduler planned as prefill only.
    pub prefill_steps: u64,
    /// Prefill steps with decode rows mixed in (`--mixed-chunk`).
    pub mixed_steps: u64,
    /// Decode steps.
    pub decode_steps: u64,
    /// Steps with nothing to run.
    pub idle_steps: u64,
    /// Prompt (and re-prefill) tokens allocated by `alloc_extend`.
    pub prefill_tokens: u64,
    /// Prompt tokens served from the shared-prefix cache instead (first admissions and
    /// re-admissions after a retraction).
    pub cached_tokens: u64,
    /// Tokens allocated by `alloc_decode`.
    pub decode_tokens: u64,
    /// Largest prefill batch, in requests.
    pub max_extend_batch: usize,
    /// Largest decode batch, in requests.
    pub max_decode_batch: usize,
    /// Extend rows whose prefix ended mid-page (the first part of the three-part math).
    pub partial_prefix_rows: u64,
    /// Prefills that took more than one chunk.
    pub chunked_prefills: u64,
    /// Most chunks one prefill took.
    pub max_chunks: u32,
    /// Most chunked prefills in flight at once.
    pub max_chunking: usize,
    /// Requests retracted (one request may be retracted more than once).
    pub retractions: u64,
    /// Requests preempted by higher-priority ones.
    pub preemptions: u64,
    /// KV slots thrown away by retractions and preemptions (computed again later).
    pub evicted_tokens: u64,
    /// Requests aborted by the scheduler (could not decode even alone).
    pub aborted: u64,
    /// Requests the scheduler refused at submission: they can never fit the pool.
    pub unfittable: u64,
    /// The first unfittable request: id, tokens needed, pool capacity.
    pub first_unfittable: Option<(u64, u64, u64)>,
    /// Requests finished.
    pub finished: u64,
    /// Finished requests that had been retracted or preempted at least once.
    pub finished_evicted: u64,
    /// Steps from arrival to first admission, one entry per admitted request.
    pub queue_delays: Vec<u64>,
    /// Pool utilisation (0..=1) at each step's high-water mark.
    pub utilisation: Vec<f64>,
    /// Running requests at each step.
    pub running: Vec<usize>,
    /// Waiting requests at each step.
    pub waiting: Vec<usize>,
    /// Time spent inside kvpool calls that allocate or free.
    pub pool_time: Duration,
    /// Time spent inside `Scheduler::step`.
    pub scheduler_time: Duration,
    /// Lowest new-token ratio the scheduler reported.
    pub min_ratio: f64,
    /// FNV-1a hash of every slot index handed out, in order: equal digests mean the
    /// pool made the same decisions (the determinism kvpool promises).
    pub slot_digest: u64,
}

impl Default for Metrics {
    fn default() -> Self {
        Self {
            prefill_steps: 0,
            mixed_steps: 0,
            decode_steps: 0,
            idle_steps: 0,
            prefill_tokens: 0,
            cached_tokens: 0,
            decode_tokens: 0,
            max_extend_batch: 0,
            max_decode_batch: 0,
            partial_prefix_rows: 0,
            chunked_prefills: 0,
            max_chunks: 0,
            max_chunking: 0,
            retractions: 0,
            preemptions: 0,
            evicted_tokens: 0,
            aborted: 0,
            unfittable: 0,
            first_unfittable: None,
            finished: 0,
            finished_evicted: 0,
            queue_delays: Vec::new(),
            utilisation: Vec::new(),
            running: Vec::new(),
            waiting: Vec::new(),
            pool_time: Duration::ZERO,
            scheduler_time: Duration::ZERO,
            min_ratio: f64::INFINITY,
            slot_digest: FNV_OFFSET,
        }
    }
}

impl Metrics {
    /// Adds a slot the pool handed out to the digest.
    pub fn record_slot(&mut self, slot: i64) {
        for byte in slot.to_le_bytes() {
            self.slot_digest = (self.slot_digest ^ u64::from(byte)).wrapping_mul(FNV_PRIME);
        }
    }

    /// Records one step's occupancy.
    pub fn sample(&mut self, utilisation: f64, running: usize, waiting: usize) {
        self.utilisation.push(utilisation);
        self.running.push(running);
        self.waiting.push(waiting);
    }
}

/// Mean, median, 99th percentile and maximum of a sample.
#[derive(Clone, Copy, Debug, Default)]
pub struct Summary {
    /// Arithmetic mean.
    pub mean: f64,
    /// Nearest-rank median.
    pub p50: f64,
    /// Nearest-rank 99th percentile.
    pub p99: f64,
    /// Smallest value.
    pub min: f64,
    /// Largest value.
    pub max: f64,
}

impl Summary {
    /// Summarises `values` (all zeros for an empty sample).
    pub fn of(values: impl IntoIterator<Item = f64>) -> Self {
        let mut sorted: Vec<f64> = values.into_iter().collect();
        if sorted.is_empty() {
            return Self::default();
        }
        sorted.sort_by(f64::total_cmp);
        let rank =
            |p: f64| sorted[((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len()) - 1];
        Self {
            mean: sorted.iter().sum::<f64>() / sorted.len() as f64,
            p50: rank(0.50),
            p99: rank(0.99),
            min: sorted[0],
            max: sorted[sorted.len() - 1],
        }
    }
}

/// A one-line chart of `values`: `width` columns, each the mean of its share of the
/// values, drawn as one of eight block heights relative to `top`.
pub fn sparkline(values: &[f64], width: usize, top: f64) -> String {
    const BARS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
    if values.is_empty() || top <= 0.0 {
        return String::new();
    }
    let per_column = values.len().div_ceil(width.max(1));
    values
        .chunks(per_column)
        .map(|column| {
            let mean = column.iter().sum::<f64>() / column.len() as f64;
            let level = (mean / top * BARS.len() as f64).floor() as usize;
            BARS[level.min(BARS.len() - 1)]
        })
        .collect()
}
