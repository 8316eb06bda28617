//! The synthetic request stream: ShareGPT-like lengths and Poisson arrivals per step.

use super::rng::Rng;

/// Shape of the synthetic load.
#[derive(Clone, Debug)]
pub struct WorkloadSpec {
    /// Number of requests in the run.
    pub requests: usize,
    /// Mean arrivals per scheduler step (Poisson).
    pub rate: f64,
    /// Median prompt length in tokens (log-normal).
    pub prompt_median: f64,
    /// Log-space spread of prompt lengths; 1.0 gives a tail reaching ~10x the median.
    pub prompt_sigma: f64,
    /// Prompts are clipped to this many tokens, as serving benchmarks clip to the context.
    pub max_prompt: u32,
    /// Median output length in tokens (log-normal).
    pub output_median: f64,
    /// Log-space spread of output lengths.
    pub output_sigma: f64,
    /// Outputs are clipped to this many tokens (the request's `max_new_tokens`).
    pub max_output: u32,
}

/// One request as the client sends it.
#[derive(Clone, Copy, Debug)]
pub struct RequestSpec {
    /// Position in the stream; also the request's id.
    pub id: u32,
    /// The scheduler step at which it reaches the waiting queue.
    pub arrival_step: u64,
    /// Prompt tokens.
    pub prompt_len: u32,
    /// Output tokens it will generate before finishing (known to the scheduler as
    /// `max_new_tokens`, as in benchmarks that ignore EOS).
    pub output_len: u32,
}

/// Draws the whole request stream up front, so the stream depends on the seed only and
/// not on how the scheduler behaves.
pub fn generate(spec: &WorkloadSpec, seed: u64) -> Vec<RequestSpec> {
    let mut rng = Rng::new(seed);
    let mut requests = Vec::with_capacity(spec.requests);
    let mut step = 0;
    while requests.len() < spec.requests {
        let arrivals = rng.poisson(spec.rate) as usize;
        for _ in 0..arrivals.min(spec.requests - requests.len()) {
            let prompt_len = draw_len(
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
            requests.push(RequestSpec {
                id: requests.len() as u32,
                arrival_step: step,
                prompt_len,
                output_len,
            });
        }
        step += 1;
    }
    requests
}

/// A log-normal length rounded to whole tokens and clipped to `1..=max`.
fn draw_len(rng: &mut Rng, median: f64, sigma: f64, max: u32) -> u32 {
    let len = rng.log_normal(median, sigma).round();
    (len.clamp(1.0, f64::from(max))) as u32
}
