//! The C ABI (`include/kvpool.h`, generated from this module by cbindgen).
//!
//! The only place with `#[no_mangle]` functions and raw pointers. Every exported body runs
//! inside `boundary::ffi_boundary`; results are `kvp_status` values with out-parameters
//! written only on success; failure text goes to a per-thread last-error slot.
#![allow(non_camel_case_types)]

/// Unwraps a `Result<_, kvp_status>` inside a status-returning function.
macro_rules! tri {
    ($e:expr) => {
        match $e {
            Ok(value) => value,
            Err(status) => return status,
        }
    };
}

/// Unwraps a buffer conversion of a pool call (`$op`, a `PoolOp`) inside a
/// status-returning function; a refused buffer still counts as a call and a rejection.
macro_rules! buffer {
    ($pool:expr, $op:expr, $e:expr) => {
        match $e {
            Ok(value) => value,
            Err(status) => {
                $pool.record_refused($op);
                return status;
            }
        }
    };
}

mod adder;
mod boundary;
mod buffers;
mod debug;
mod delayer;
mod device;
mod digest;
mod handle;
mod last_error;
mod pool;
mod python;
mod python_methods;
mod reservation;
mod rows;
mod scheduler;
mod snapshot;
mod status;
#[cfg(feature = "testing")]
mod testing;
mod version;

pub use adder::*;
pub use debug::*;
pub use delayer::*;
pub use device::*;
pub use digest::*;
pub use last_error::kvp_last_error_message;
pub use pool::*;
pub use python::*;
pub use python_methods::*;
pub use reservation::*;
pub use rows::*;
pub use scheduler::*;
pub use snapshot::*;
pub use status::*;
#[cfg(feature = "testing")]
pub use testing::*;
pub use version::*;
