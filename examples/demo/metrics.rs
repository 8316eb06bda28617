//! What the scheduler observed, collected during the run and summarised at the end.

use std::time::Duration;

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// Counters and per-step samples of one run.
#[derive(Debug)]
pub struct Metrics {
    /// Prompt (and re-prefill) tokens allocated by `alloc_extend`.
    pub prefill_tokens: u64,
    /// Tokens allocated by `alloc_decode`.
    pub decode_tokens: u64,
    /// Prefill batches (one `alloc_extend` each).
    pub extend_batches: u64,
    /// Largest prefill batch, in requests.
    pub max_extend_batch: usize,
    /// Largest decode batch, in requests.
    pub max_decode_batch: usize,
    /// Extend rows whose prefix ended mid-page (the first part of the three-part math).
    pub partial_prefix_rows: u64,
    /// Most chunks one prefill took.
    pub max_chunks: u32,
    /// Finished requests one of whose prefills took more than one chunk.
    pub finished_chunked: u64,
    /// `alloc_decode` calls refused with `OutOfSlots`.
    pub decode_shortages: u64,
    /// Requests retracted (one request may be retracted more than once).
    pub retractions: u64,
    /// Finished requests that had been retracted at least once.
    pub finished_retracted: u64,
    /// KV slots thrown away by retractions (prefilled or decoded again later).
    pub retracted_tokens: u64,
    /// Steps from arrival to first admission, one entry per request.
    pub queue_delays: Vec<u64>,
    /// Pool utilisation (0..=1) at each step's high-water mark.
    pub utilisation: Vec<f64>,
    /// Running requests at each step.
    pub running: Vec<usize>,
    /// Waiting requests at each step.
    pub waiting: Vec<usize>,
    /// Time spent inside kvpool calls that allocate or free.
    pub pool_time: Duration,
    /// Lowest new-token ratio the scheduler used.
    pub min_ratio: f64,
    /// FNV-1a hash of every slot index handed out, in order: equal digests mean the
    /// pool made the same decisions (the determinism kvpool promises).
    pub slot_digest: u64,
}

impl Default for Metrics {
    fn default() -> Self {
        Self {
            prefill_tokens: 0,
            decode_tokens: 0,
            extend_batches: 0,
            max_extend_batch: 0,
            max_decode_batch: 0,
            partial_prefix_rows: 0,
            max_chunks: 0,
            finished_chunked: 0,
            decode_shortages: 0,
            retractions: 0,
            finished_retracted: 0,
            retracted_tokens: 0,
            queue_delays: Vec::new(),
            utilisation: Vec::new(),
            running: Vec::new(),
            waiting: Vec::new(),
            pool_time: Duration::ZERO,
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
