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
//!
//! From Rust, a host pool is [`Pool`] (a device pool, [`cuda::DevicePool`], takes device
//! pointers and a stream, as the C ABI's `_async` calls do):
//!
//! ```
//! use kvpool::{ErrorKind, Pool, PoolConfig};
//!
//! let config = PoolConfig { size: 1 << 10, page_size: 16, ..PoolConfig::default() };
//! let mut pool = Pool::new(config)?;
//! // Two requests with empty prefixes (`last_loc` -1) grow to 2 and 1 tokens: page 0 is
//! // the padding page, so they get pages 1 and 2.
//! let mut out = [0i64; 3];
//! pool.alloc_extend(&[0, 0], &[2, 1], &[-1i64, -1], 3, &mut out)?;
//! assert_eq!(out, [16, 17, 32]);
//! // The next token of the first request continues its page after its last slot.
//! let mut next = [0i64; 1];
//! pool.alloc_decode(&[3], &[out[1]], &mut next)?;
//! assert_eq!(next, [18]);
//! // A bad call fails with a kind and a message naming the element, and changes nothing.
//! let err = pool.free(&[out[0], out[0]]).unwrap_err();
//! assert_eq!(err.kind(), ErrorKind::DoubleFree);
//! assert_eq!(pool.available_size(), (1 << 10) - 2 * 16);
//! pool.free(&[out[0], out[1], next[0], out[2]])?;
//! assert_eq!(pool.available_size(), 1 << 10);
//! # Ok::<(), kvpool::PoolError>(())
//! ```
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
