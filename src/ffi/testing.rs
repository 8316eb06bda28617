//! Test-only exports (feature `testing`): prove the panic boundary from C and Python.

use super::boundary::ffi_boundary;
use super::pool::{kvp_pool, with_any_pool};
use super::status::kvp_status;

/// Panics inside the ABI boundary; must return `KVP_STATUS_PANIC` with the message
/// "internal panic: kvp_testing_panic" and leave the process running. Testing builds only.
#[no_mangle]
#[must_use]
pub extern "C" fn kvp_testing_panic() -> kvp_status {
    ffi_boundary(|| panic!("kvp_testing_panic"))
}

/// Panics while holding `pool`'s lock, which poisons the pool: this call returns
/// `KVP_STATUS_PANIC`, every later call on the pool `KVP_STATUS_POISONED`. Testing builds only.
///
/// # Safety
/// `pool` must be a live pool or NULL.
#[no_mangle]
#[must_use]
pub unsafe extern "C" fn kvp_testing_poison_pool(pool: *mut kvp_pool) -> kvp_status {
    with_any_pool(pool, |_| panic!("kvp_testing_poison_pool"))
}
