//! The CUDA backend: [`DevicePool`] keeps a pool's free list, staged frees, page-state map
//! and snapshots in device memory and runs every operation as a kernel on the caller's
//! stream (kernels in `kernels/pool.cu`).
//!
//! Layering: `driver` loads `libcuda` on first use and holds the device's primary
//! context; `kernels` embeds and launches the kernels; `layout` mirrors the device data
//! structures; `counts` keeps the host's free-page counts (exact, or a lower bound while a
//! paged free by index is in flight); `pool` ties them to the allocator semantics shared
//! with the host backend (`crate::pool::plan`); `release` frees a released pool's memory
//! after its last kernel (stream-ordered, never waiting); `stream_order` is the debug check
//! for calls from streams not ordered with each other. (That calls run on the device in the
//! order they were made, a captured call's graph launched once and in turn, the kernels
//! check themselves: the turn check, `kernels/pool.cu`.)

pub(crate) mod counts;
pub(crate) mod driver;
pub(crate) mod kernels;
pub(crate) mod layout;
pub(crate) mod memory;
mod pool;
pub(crate) mod release;
pub(crate) mod stream_order;

pub(crate) use driver::RestoreContext;
pub use layout::{DeviceFault, DeviceOp};
pub use pool::{DebugLayout, DevicePool, DeviceReservation, DeviceSnapshot, DeviceTable, HintSkew};
pub use release::{pending_releases, release_counts};
pub(crate) use stream_order::DEBUG_ALL;

/// Whether the NVIDIA driver can be loaded and initialised (tests use it to skip visibly).
pub fn driver_available() -> bool {
    driver::init().is_ok()
}
