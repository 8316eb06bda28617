//! The scheduler's state digest (definition: [`crate::digest`]).

use super::request::{Phase, Request};
use super::Scheduler;
use crate::digest::{Chain, DIGEST_VERSION, DOMAIN_REQUEST, DOMAIN_SCHEDULER};

fn request_hash(r: &Request) -> u64 {
    let s = &r.spec;
    let phase = match r.phase {
        Phase::Waiting => 0,
        Phase::Chunking => 1,
        Phase::Running => 2,
    };
    Chain::new(DOMAIN_REQUEST)
        .extend([
            s.id,
            r.arrival,
            phase,
            r.kv_len,
            r.fill_len,
            s.input_len,
            s.prefix_len,
            s.prefix_evictable,
            s.max_new_tokens,
            s.output_len,
            u64::from(s.ignore_eos),
            s.priority as u64,
            u64::from(r.retractions),
            s.prefix_path.len() as u64,
        ])
        .extend(s.prefix_path.iter().copied())
        .value()
}

impl Scheduler {
    /// The state digest: the waiting queue in order, the chunked requests in flight, the
    /// running set in admission order (each request's id and every field a decision reads),
    /// the new-token ratio, `batch_is_full`, the arrival counter and the counters. Equal for
    /// two schedulers of the same configuration after the same calls. O(live requests).
    pub fn digest(&self) -> u64 {
        let mut h = Chain::new(DOMAIN_SCHEDULER);
        h.extend([DIGEST_VERSION, self.config.page_size, self.config.capacity]);
        for queue in [&self.waiting, &self.chunking, &self.running] {
            h.push(queue.len() as u64);
            h.extend(queue.iter().map(|&slot| request_hash(&self.requests[slot])));
        }
        let s = &self.stats;
        h.extend([
            self.ratio.current().to_bits(),
            u64::from(self.batch_is_full),
            self.next_arrival,
            s.steps,
            s.prefill_steps,
            s.decode_steps,
            s.admitted,
            s.chunks,
            s.retractions,
            s.preemptions,
            s.aborts,
            s.unfittable,
            s.finished,
        ]);
        h.value()
    }
}
