//! The panic boundary every exported function runs inside.

use std::any::Any;
use std::panic::{catch_unwind, AssertUnwindSafe};

use super::last_error;
use super::status::kvp_status;
use crate::pool::PoolError;

/// What an exported function returns when its body panicked.
pub(crate) trait PanicDefault {
    fn on_panic() -> Self;
}

impl PanicDefault for kvp_status {
    fn on_panic() -> Self {
        kvp_status::Panic
    }
}

impl PanicDefault for () {
    fn on_panic() -> Self {}
}

/// Text of a panic payload.
pub(crate) fn panic_message(payload: &(dyn Any + Send)) -> String {
    let text = payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic payload".to_string());
    format!("internal panic: {text}")
}

/// Runs `body`, turning a panic into `R::on_panic()` and recording its message, so no
/// unwind ever crosses into C.
pub(crate) fn ffi_boundary<R: PanicDefault>(body: impl FnOnce() -> R) -> R {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(result) => result,
        Err(payload) => {
            last_error::set(panic_message(payload.as_ref()));
            R::on_panic()
        }
    }
}

/// Converts a domain result into a status, recording the message of a failure.
pub(crate) fn status_of(result: Result<(), PoolError>) -> kvp_status {
    match result {
        Ok(()) => kvp_status::Ok,
        Err(err) => status_of_error(err),
    }
}

/// A domain error as the failing call's status, its message recorded.
pub(crate) fn status_of_error(err: PoolError) -> kvp_status {
    fail(err.kind().into(), err.message())
}

/// Records `message` and returns `status`.
pub(crate) fn fail(status: kvp_status, message: impl Into<String>) -> kvp_status {
    last_error::set(message);
    status
}
