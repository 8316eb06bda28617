//! kvpool: SGLang-grade KV-cache slot allocation for inference engines, behind a C ABI.
//!
//! Module map:
//! - [`pool`]: the allocator state machine (token and paged pools, free groups, staged
//!   frees, snapshots, validation, statistics). Backend-agnostic: it plans every
//!   operation from host-side lengths and counts, and asks its storage to carry it out.
//! - [`host`]: the host-memory backend — free list, page-state map and the index math
//!   executed on the CPU.
//! - [`cuda`]: the CUDA backend — the same pools in device memory, every operation a kernel
//!   on the caller's stream (`kernels/`), no device synchronization.
//! - [`ffi`]: the C ABI (`include/kvpool.h`). The only module with `#[no_mangle]` items and
//!   raw pointers; everything it does is a thin translation onto [`pool`]. Rust code should
//!   use [`pool`] directly.
//!
//! - [`digest`]: the state digests of pools and schedulers (tensor-parallel ranks compare
//!   them to check that they agree).
//! - [`admission`]: prefill admission and the scheduler step; it reads a pool's available
//!   size and never touches indices.
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

pub mod admission;
pub mod cuda;
pub mod digest;
pub mod host;
pub mod pool;

pub mod ffi;

pub use pool::{
    BackendKind, DecodeReservation, ErrorKind, IndexType, Pool, PoolConfig, PoolError, PoolInfo,
    PoolOp, PoolStats, ReqTable, ReservationPlan, SlotIndex, Snapshot, TableShape,
    MAX_RESERVED_STEPS,
};

/// The crate version, also returned by `kvp_version()`.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
