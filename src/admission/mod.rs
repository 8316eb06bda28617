//! Prefill admission and the continuous-batching scheduler step (SGLang's `PrefillAdder`,
//! `NewTokenRatioTracker` and `get_new_batch_prefill` / `update_running_batch`).
//!
//! Everything here is host-side arithmetic over numbers the engine supplies (the pool's
//! available size, the prefix cache's evictable size, request lengths): no clocks, no
//! randomness the caller did not seed, and no allocation in the pool: the engine allocates
//! what a plan says. The same inputs give the same decisions on every rank.

mod adder;
mod budget;
mod delayer;
mod dynamic_chunk;
mod ratio;
pub mod scheduler;
mod tokens;

pub use adder::{Admission, Candidate, ChunkedCandidate, ChunkedOutcome, PrefillAdder};
pub use budget::{AddResult, AdderConfig, PrefillBudget, RunningRequest};
pub use delayer::{DelayerConfig, PrefillDelayer, RankInfo, Verdict};
pub use dynamic_chunk::ChunkSizePredictor;
pub use ratio::{NewTokenRatio, RatioConfig, RETRACT_DECODE_STEPS};
pub use scheduler::{
    Evicted, Phase, Policy, PrefillEntry, PriorityConfig, Released, RequestSpec, RetractionPolicy,
    Scheduler, SchedulerConfig, SchedulerStats, StepKind, StepPlan, SubmitOutcome,
};

/// SGLang's default `CLIP_MAX_NEW_TOKENS`: the cap on a request's expected output when
/// reserving room for it (the stop condition still uses the real `max_new_tokens`).
// In C: KVP_CLIP_MAX_NEW_TOKENS (cbindgen.toml renames it).
pub const CLIP_MAX_NEW_TOKENS: u64 = 4096;

pub(crate) use tokens::ceil_paged;
