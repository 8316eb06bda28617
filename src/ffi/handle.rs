//! What every opaque handle points to: a tag naming its kind, then its object (behind a
//! lock, poisoned by a panic, except for immutable snapshots).
//!
//! The tag lets a handle of the wrong kind (a scheduler passed as a pool, a pool as a
//! snapshot) be refused with `KVP_STATUS_INVALID_ARGUMENT` instead of being read as another
//! type: every handle's memory starts with a `u64` tag (`#[repr(C)]`, offset 0), which is
//! read before the type is known. A freed handle is still undefined behaviour: its memory
//! may have been reused.

use std::ffi::c_void;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use super::boundary::{fail, ffi_boundary, panic_message};
use super::last_error;
use super::status::kvp_status;
use crate::cuda::RestoreContext;

/// An object type behind C handles, with the tag its handles start with.
pub(crate) trait HandleKind {
    /// The C type's name, for messages.
    const NAME: &'static str;
    /// Eight ASCII bytes (`kvp_pool`, `kvp_schd`, ...), readable in a memory dump.
    const TAG: u64;
}

const fn tag(label: &[u8; 8]) -> u64 {
    u64::from_le_bytes(*label)
}

impl HandleKind for super::pool::PoolObject {
    const NAME: &'static str = "kvp_pool";
    const TAG: u64 = tag(b"kvp_pool");
}

impl HandleKind for super::scheduler::SchedulerState {
    const NAME: &'static str = "kvp_scheduler";
    const TAG: u64 = tag(b"kvp_schd");
}

impl HandleKind for crate::admission::PrefillAdder {
    const NAME: &'static str = "kvp_adder";
    const TAG: u64 = tag(b"kvp_addr");
}

impl HandleKind for crate::admission::PrefillDelayer {
    const NAME: &'static str = "kvp_delayer";
    const TAG: u64 = tag(b"kvp_dlyr");
}

impl HandleKind for super::snapshot::SnapshotObject {
    const NAME: &'static str = "kvp_snapshot";
    const TAG: u64 = tag(b"kvp_snap");
}

/// The C name of the kind with tag `tag`, if any.
fn kind_name(tag: u64) -> Option<&'static str> {
    use super::pool::PoolObject;
    use super::reservation::ReservationObject;
    use super::scheduler::SchedulerState;
    use super::snapshot::SnapshotObject;
    use crate::admission::{PrefillAdder, PrefillDelayer};
    [
        (PoolObject::TAG, PoolObject::NAME),
        (SchedulerState::TAG, SchedulerState::NAME),
        (PrefillAdder::TAG, PrefillAdder::NAME),
        (PrefillDelayer::TAG, PrefillDelayer::NAME),
        (SnapshotObject::TAG, SnapshotObject::NAME),
        (ReservationObject::TAG, ReservationObject::NAME),
    ]
    .into_iter()
    .find_map(|(t, name)| (t == tag).then_some(name))
}

/// Checks that the non-NULL handle `ptr` (named `name` in errors) is a `T` handle.
///
/// # Safety
/// `ptr` must point to a live handle of some kind (every kind starts with its tag).
unsafe fn check_kind<T: HandleKind>(ptr: *const c_void, name: &str) -> Result<(), kvp_status> {
    // SAFETY: every live handle starts with an aligned u64 tag (caller contract).
    let tag = unsafe { ptr.cast::<u64>().read() };
    if tag == T::TAG {
        return Ok(());
    }
    let what = match kind_name(tag) {
        Some(other) => format!("it is a {other} handle"),
        None => "it does not start with any kvpool handle's tag".to_string(),
    };
    Err(fail(
        kvp_status::InvalidArgument,
        format!("{name} is not a {} handle: {what}", T::NAME),
    ))
}

/// A handle's object. Calls are serialized by the lock; a panic inside a call marks the
/// object poisoned (its state may be torn) and every later call fails.
#[repr(C)]
pub(crate) struct Guarded<T> {
    /// `T::TAG`; first, so that it is at offset 0 whatever `T` is.
    tag: u64,
    value: Mutex<T>,
    poisoned: AtomicBool,
}

impl<T: HandleKind> Guarded<T> {
    /// Wraps `value` in a reference-counted handle (`Arc::into_raw` gives the C pointer).
    pub fn new(value: T) -> Arc<Self> {
        Arc::new(Self {
            tag: T::TAG,
            value: Mutex::new(value),
            poisoned: AtomicBool::new(false),
        })
    }
}

impl<T> Guarded<T> {
    /// Runs `body` under the lock even when the handle is poisoned: for handing a dependent
    /// object's resources back to it (a device reservation's memory, which the pool frees
    /// stream-ordered), never for a call. `body` must only move resources into `T`; a
    /// panic in it is contained (the resources are then dropped here).
    pub fn with_for_release(&self, body: impl FnOnce(&mut T)) {
        let mut guard = self.value.lock();
        let _ = catch_unwind(AssertUnwindSafe(|| body(&mut guard)));
    }

    /// Runs `body` under the lock, poisoning the handle if `body` panics.
    pub fn with(&self, body: impl FnOnce(&mut T) -> kvp_status) -> kvp_status {
        // Checked under the lock: a call that waited for it while the holder panicked must
        // see the poison the holder left.
        let mut guard = self.value.lock();
        if self.poisoned.load(Ordering::Acquire) {
            return fail(
                kvp_status::Poisoned,
                "the object was poisoned by an internal panic in an earlier call; free it",
            );
        }
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

/// The `Guarded<T>` behind the C pointer `ptr` (named `name` in errors): NULL fails with
/// `KVP_STATUS_NULL_ARGUMENT`, a handle of another kind with `KVP_STATUS_INVALID_ARGUMENT`.
///
/// # Safety
/// `ptr` must be NULL or a live handle of some kind.
unsafe fn lookup<'a, T: HandleKind, C>(
    ptr: *const C,
    name: &str,
) -> Result<&'a Guarded<T>, kvp_status> {
    // SAFETY: forwarded caller contract; a checked pointer is a live `T` handle, made by
    // `into_raw::<T, C>`.
    Ok(unsafe { &*checked::<T, C>(ptr, name)? })
}

/// `ptr` as a `T` handle's object, after the checks of [`lookup`]. The pointer keeps the
/// C pointer's reach over the whole `Arc` allocation, counts included, which one taken from
/// a reference to the object would not (`Arc::from_raw` and the count changes need it).
///
/// # Safety
/// `ptr` must be NULL or a live handle of some kind.
unsafe fn checked<T: HandleKind, C>(
    ptr: *const C,
    name: &str,
) -> Result<*const Guarded<T>, kvp_status> {
    if ptr.is_null() {
        return Err(fail(kvp_status::NullArgument, format!("{name} is NULL")));
    }
    // SAFETY: non-NULL and a live handle (caller contract).
    unsafe { check_kind::<T>(ptr.cast(), name)? };
    Ok(ptr.cast::<Guarded<T>>())
}

/// Runs `body` on the object behind the C pointer `ptr` (named `name` in errors), under the
/// panic boundary.
pub(crate) fn with_raw<T: HandleKind, C>(
    ptr: *const C,
    name: &str,
    body: impl FnOnce(&mut T) -> kvp_status,
) -> kvp_status {
    ffi_boundary(|| {
        // SAFETY: NULL or a live handle (the documented contract of every function taking
        // the handle).
        let handle = tri!(unsafe { lookup::<T, C>(ptr, name) });
        handle.with(body)
    })
}

/// A new reference to the object behind the C pointer `ptr` (e.g. a scheduler keeps its
/// pool); fails like `with_raw` for NULL or a handle of another kind.
///
/// # Safety
/// `ptr` must be NULL or a live handle of some kind.
pub(crate) unsafe fn share<T: HandleKind, C>(
    ptr: *const C,
    name: &str,
) -> Result<Arc<Guarded<T>>, kvp_status> {
    // SAFETY: forwarded caller contract.
    let raw = unsafe { checked::<T, C>(ptr, name)? };
    // SAFETY: `raw` came from `Arc::into_raw`, and the caller's reference keeps it alive.
    unsafe {
        Arc::increment_strong_count(raw);
        Ok(Arc::from_raw(raw))
    }
}

/// Releases the C reference `ptr` (NULL: no-op). A handle of another kind is left alone
/// (the thread's last error says so): `_free` functions return no status.
///
/// # Safety
/// `ptr` must be NULL or a live handle of some kind; a `T` handle is released once.
pub(crate) unsafe fn release<T: HandleKind, C>(ptr: *mut C) {
    if ptr.is_null() {
        return;
    }
    ffi_boundary(|| {
        // Releasing a device pool (here or as the last owner, e.g. a scheduler) binds its
        // context; the caller's is current again afterwards.
        let _restore = RestoreContext::save();
        // SAFETY: a live handle (caller contract).
        if let Ok(raw) = unsafe { checked::<T, C>(ptr.cast_const(), "handle") } {
            // SAFETY: created by `Arc::into_raw` in `into_raw`; released once (contract).
            drop(unsafe { Arc::from_raw(raw) });
        }
    })
}

/// An immutable handle's object (a snapshot): no lock, the same leading tag.
#[repr(C)]
pub(crate) struct Tagged<T> {
    /// `T::TAG`, at offset 0.
    tag: u64,
    value: T,
}

/// Hands `value` to C as a boxed, tagged handle.
pub(crate) fn boxed_into_raw<T: HandleKind, C>(value: T) -> *mut C {
    Box::into_raw(Box::new(Tagged { tag: T::TAG, value })).cast()
}

/// The object behind the boxed handle `ptr` (named `name` in errors): NULL fails with
/// `KVP_STATUS_NULL_ARGUMENT`, a handle of another kind with `KVP_STATUS_INVALID_ARGUMENT`.
///
/// # Safety
/// `ptr` must be NULL or a live handle of some kind, alive for `'a`.
pub(crate) unsafe fn boxed_ref<'a, T: HandleKind, C>(
    ptr: *const C,
    name: &str,
) -> Result<&'a T, kvp_status> {
    if ptr.is_null() {
        return Err(fail(kvp_status::NullArgument, format!("{name} is NULL")));
    }
    // SAFETY: non-NULL and a live handle (caller contract).
    unsafe { check_kind::<T>(ptr.cast(), name)? };
    // SAFETY: a live `T` handle, made by `boxed_into_raw`.
    Ok(unsafe { &(*ptr.cast::<Tagged<T>>()).value })
}

/// Releases the boxed handle `ptr` (NULL: no-op; a handle of another kind is left alone).
///
/// # Safety
/// `ptr` must be NULL or a live handle of some kind; a `T` handle is released once.
pub(crate) unsafe fn boxed_release<T: HandleKind, C>(ptr: *mut C) {
    if ptr.is_null() {
        return;
    }
    ffi_boundary(|| {
        // The last device snapshot of a freed pool releases its buffers in the pool's context.
        let _restore = RestoreContext::save();
        // SAFETY: a live handle (caller contract).
        if unsafe { boxed_ref::<T, C>(ptr, "handle") }.is_ok() {
            // SAFETY: created by `Box::into_raw` in `boxed_into_raw`; released once.
            drop(unsafe { Box::from_raw(ptr.cast::<Tagged<T>>()) });
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Box0(Vec<u32>);
    impl HandleKind for Box0 {
        const NAME: &'static str = "test";
        const TAG: u64 = 1;
    }

    #[test]
    fn a_release_reaches_a_poisoned_object_and_a_call_does_not() {
        let handle = Guarded::new(Box0(Vec::new()));
        assert_eq!(
            handle.with(|_| panic!("poison it")),
            kvp_status::Panic,
            "the panic is caught"
        );
        assert_eq!(
            handle.with(|b| {
                b.0.push(1);
                kvp_status::Ok
            }),
            kvp_status::Poisoned
        );
        handle.with_for_release(|b| b.0.push(2));
        handle.with_for_release(|_| panic!("contained"));
        assert_eq!(handle.value.lock().0, vec![2]);
    }
}
