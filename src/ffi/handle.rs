//! What every opaque handle points to: its object behind a lock, poisoned by a panic.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use super::boundary::{fail, ffi_boundary, panic_message};
use super::last_error;
use super::status::kvp_status;

/// A handle's object. Calls are serialized by the lock; a panic inside a call marks the
/// object poisoned (its state may be torn) and every later call fails.
pub(crate) struct Guarded<T> {
    value: Mutex<T>,
    poisoned: AtomicBool,
}

impl<T> Guarded<T> {
    /// Wraps `value` in a reference-counted handle (`Arc::into_raw` gives the C pointer).
    pub fn new(value: T) -> Arc<Self> {
        Arc::new(Self {
            value: Mutex::new(value),
            poisoned: AtomicBool::new(false),
        })
    }

    /// Runs `body` under the lock, poisoning the handle if `body` panics.
    pub fn with(&self, body: impl FnOnce(&mut T) -> kvp_status) -> kvp_status {
        if self.poisoned.load(Ordering::Acquire) {
            return fail(
                kvp_status::Poisoned,
                "the object was poisoned by an internal panic in an earlier call; free it",
            );
        }
        let mut guard = self.value.lock();
        match catch_unwind(AssertUnwindSafe(|| body(&mut guard))) {
            Ok(status) => status,
            Err(payload) => {
                self.poisoned.store(true, Ordering::Release);
                last_error::set(panic_message(payload.as_ref()));
                kvp_status::Panic
            }
        }
    }
}

/// Hands a new handle to C.
pub(crate) fn into_raw<T, C>(handle: Arc<Guarded<T>>) -> *mut C {
    Arc::into_raw(handle).cast_mut().cast()
}

/// Runs `body` on the object behind the C pointer `ptr` (named `name` in errors), under the
/// panic boundary.
pub(crate) fn with_raw<T, C>(
    ptr: *const C,
    name: &str,
    body: impl FnOnce(&mut T) -> kvp_status,
) -> kvp_status {
    ffi_boundary(|| {
        // SAFETY: a non-NULL `ptr` came from `into_raw::<T, C>` and is not yet released (the
        // documented contract of every function taking the handle).
        let Some(handle) = (unsafe { ptr.cast::<Guarded<T>>().as_ref() }) else {
            return fail(kvp_status::NullArgument, format!("{name} is NULL"));
        };
        handle.with(body)
    })
}

/// A new reference to the object behind a live C pointer (e.g. a scheduler keeps its pool).
///
/// # Safety
/// `ptr` must be a live handle from `into_raw::<T, C>`.
pub(crate) unsafe fn share<T, C>(ptr: *const C) -> Arc<Guarded<T>> {
    let raw = ptr.cast::<Guarded<T>>();
    // SAFETY: `raw` came from `Arc::into_raw`, and the caller's reference keeps it alive.
    unsafe {
        Arc::increment_strong_count(raw);
        Arc::from_raw(raw)
    }
}

/// Releases the C reference `ptr` (NULL: no-op).
///
/// # Safety
/// `ptr` must be NULL or a live handle from `into_raw::<T, C>`, released once.
pub(crate) unsafe fn release<T, C>(ptr: *mut C) {
    ffi_boundary(|| {
        if !ptr.is_null() {
            // SAFETY: created by `Arc::into_raw` in `into_raw`; released once (contract).
            drop(unsafe { Arc::from_raw(ptr.cast::<Guarded<T>>().cast_const()) });
        }
    })
}
