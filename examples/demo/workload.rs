//! The synthetic request stream: ShareGPT-like lengths, Poisson arrivals per step, a few
//! shared system prompts, and the odd request no pool of this size could ever serve.

use super::rng::Rng;

/// Shape of the synthetic load.
#[derive(Clone, Debug)]
pub struct WorkloadSpec {
    /// Number of requests in the run.
    pub requests: usize,
    /// Mean arrivals per scheduler step (Poisson).
    pub rate: f64,
    /// Median length of a prompt's own part, in tokens (log-normal).
    pub prompt_median: f64,
    /// Log-space spread of prompt lengths; 1.0 gives a tail reaching ~10x the median.
    pub prompt_sigma: f64,
    /// A prompt's own part is clipped to this many tokens.
    pub max_prompt: u32,
    /// Median output length in tokens (log-normal).
    pub output_median: f64,
    /// Log-space spread of output lengths.
    pub output_sigma: f64,
    /// Outputs are clipped to this many tokens.
    pub max_output: u32,
    /// Lengths of the shared system prompts (empty: no request shares a prefix).
    pub system_prompts: Vec<u32>,
    /// Share of benchmark-style requests (`ignore_eos`, `max_new_tokens` = output length).
    pub ignore_eos_share: f64,
    /// Share of requests that start with one of the system prompts.
    pub system_prompt_share: f64,
    /// Share of requests whose prompt is larger than `pool_size` (they can never run).
    pub oversized_share: f64,
    /// The pool's size in tokens, for the oversized requests.
    pub pool_size: u64,
    /// Priorities are drawn uniformly from `0..=max_priority`.
    pub max_priority: i64,
}

/// The `max_new_tokens` chat clients ask for (capped at `max_output`).
const CHAT_MAX_NEW_TOKENS: [u64; 4] = [256, 512, 1024, 2048];

/// One request as the client sends it.
#[derive(Clone, Copy, Debug)]
pub struct Arrival {
    /// Position in the stream; also the request's id.
    pub id: u32,
    /// The scheduler step at which it reaches the engine.
    pub arrival_step: u64,
    /// Prompt tokens, the system prompt included.
    pub prompt_len: u64,
    /// The shared system prompt the prompt starts with, if any (index into
    /// `WorkloadSpec::system_prompts`).
    pub system_prompt: Option<usize>,
    /// Output tokens it generates before it stops (EOS), at most `max_new_tokens`.
    pub output_len: u64,
    /// The client's `max_new_tokens`.
    pub max_new_tokens: u64,
    /// Benchmark-style request: generates exactly `max_new_tokens`, ignoring EOS.
    pub ignore_eos: bool,
    /// Larger runs first when priority scheduling is on.
    pub priority: i64,
}

/// Draws the whole request stream up front, so the stream depends on the seed only and
/// not on how the scheduler behaves.
///
/// Benchmark-style requests (`ignore_eos`) ask for exactly their output length; chat-style
/// ones ask for 256, 512, 1024 or 2048 tokens and stop at EOS after their sampled length,
/// so the scheduler has to guess how much they will grow.
pub fn generate(spec: &WorkloadSpec, seed: u64) -> Vec<Arrival> {
    let mut rng = Rng::new(seed);
    let mut requests = Vec::with_capacity(spec.requests);
    let mut step = 0;
    while requests.len() < spec.requests {
        let arrivals = rng.poisson(spec.rate) as usize;
        for _ in 0..arrivals.min(spec.requests - requests.len()) {
            let own = draw_len(
                &mut rng,
                spec.prompt_median,
                spec.prompt_sigma,
                spec.max_prompt,
            );
            let output_len = draw_len(
                &mut rng,
                spec.output_median,
                spec.output_sigma,
                spec.max_output,
            );
            let ignore_eos = rng.next_f64() < spec.ignore_eos_share;
            // Chat clients pick a round max_tokens; the answer ends at EOS or there.
            let max_new_tokens =
                CHAT_MAX_NEW_TOKENS[(rng.next_u64() % 4) as usize].min(u64::from(spec.max_output));
            let output_len = if ignore_eos {
                output_len
            } else {
                output_len.min(max_new_tokens)
            };
            let system_prompt = (!spec.system_prompts.is_empty()
                && rng.next_f64() < spec.system_prompt_share)
                .then(|| pick_zipf(&mut rng, spec.system_prompts.len()));
            let oversized = rng.next_f64() < spec.oversized_share;
            let priority = (rng.next_u64() % (spec.max_priority as u64 + 1)) as i64;
            let prompt_len = if oversized {
                spec.pool_size + 1 + rng.next_u64() % spec.pool_size
            } else {
                own + system_prompt.map_or(0, |k| u64::from(spec.system_prompts[k]))
            };
            requests.push(Arrival {
                id: requests.len() as u32,
                arrival_step: step,
                prompt_len,
                system_prompt: system_prompt.filter(|_| !oversized),
                output_len,
                max_new_tokens: if ignore_eos {
                    output_len
                } else {
                    max_new_tokens
                },
                ignore_eos,
                priority,
            });
        }
        step += 1;
    }
    requests
}

/// A log-normal length rounded to whole tokens and clipped to `1..=max`.
fn draw_len(rng: &mut Rng, median: f64, sigma: f64, max: u32) -> u64 {
    let len = rng.log_normal(median, sigma).round();
    len.clamp(1.0, f64::from(max)) as u64
}

/// Index `k` of `0..n` with probability proportional to `1 / (k + 1)`: a few popular
/// system prompts and a tail of rarer ones.
fn pick_zipf(rng: &mut Rng, n: usize) -> usize {
    let total: f64 = (1..=n).map(|k| 1.0 / k as f64).sum();
    let mut x = rng.next_f64() * total;
    for k in 0..n {
        x -= 1.0 / (k + 1) as f64;
        if x < 0.0 {
            return k;
        }
    }
    n - 1
}
