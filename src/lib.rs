//! kvpool: SGLang-grade KV-cache slot allocation for inference engines, behind a C ABI.
//!
//! Module map:
//! - [`pool`]: the allocator state machine (token and paged pools, free groups, staged
//!   frees, snapshots, validation, statistics). Backend-agnostic: it plans every
//!   operation from host-side lengths and counts, and asks its storage to carry it out.
//! - [`host`]: the host-memory backend — free list, page-state map and the index math
//!   executed on the CPU.
//! - [`ffi`]: the C ABI (`include/kvpool.h`). The only module with `#[no_mangle]` items and
//!   raw pointers; everything it does is a thin translation onto [`pool`]. Rust code should
//!   use [`pool`] directly.
//!
//! Seams for later work: a CUDA backend slots in beside [`host`] (device-resident free list,
//! kernels in `kernels/`), and admission (`PrefillAdder`, scheduler step) reads
//! [`pool::Pool::available_size`].
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

pub mod admission;
pub mod host;
pub mod pool;

pub mod ffi;

pub use pool::{
    BackendKind, ErrorKind, IndexType, Pool, PoolConfig, PoolError, PoolInfo, PoolOp, PoolStats,
    SlotIndex, Snapshot,
};

/// The crate version, also returned by `kvp_version()`.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
