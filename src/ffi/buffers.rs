//! Turning `(pointer, length)` pairs from C into slices, with the checks C cannot do.

use std::ffi::c_void;

use super::boundary::fail;
use super::status::kvp_status;

fn check<T>(ptr: *const T, len: usize, name: &str) -> Result<(), kvp_status> {
    if ptr.is_null() {
        if len == 0 {
            return Ok(());
        }
        return Err(fail(
            kvp_status::NullArgument,
            format!("{name} is NULL but its length is {len}"),
        ));
    }
    if !ptr.cast::<T>().is_aligned() {
        return Err(fail(
            kvp_status::InvalidArgument,
            format!(
                "{name} is not aligned to {} bytes for its element type",
                std::mem::align_of::<T>()
            ),
        ));
    }
    if len
        .checked_mul(std::mem::size_of::<T>())
        .is_none_or(|b| b > isize::MAX as usize)
    {
        return Err(fail(
            kvp_status::InvalidArgument,
            format!("{name} has an impossible length {len}"),
        ));
    }
    Ok(())
}

/// Borrows `len` elements at `ptr` for the duration of the call (NULL allowed when `len == 0`).
///
/// # Safety
/// A non-NULL `ptr` must point to `len` initialized elements that stay valid and unmodified
/// for the call.
pub(crate) unsafe fn input<'a, T>(
    ptr: *const T,
    len: usize,
    name: &str,
) -> Result<&'a [T], kvp_status> {
    check(ptr, len, name)?;
    if len == 0 {
        return Ok(&[]);
    }
    // SAFETY: non-NULL, aligned, size in range (checked); validity is the caller's contract.
    Ok(unsafe { std::slice::from_raw_parts(ptr, len) })
}

/// Borrows `len` writable elements at `ptr` for the duration of the call.
///
/// # Safety
/// A non-NULL `ptr` must point to `len` writable elements no one else accesses during the call.
pub(crate) unsafe fn output<'a, T>(
    ptr: *mut T,
    len: usize,
    name: &str,
) -> Result<&'a mut [T], kvp_status> {
    check(ptr.cast_const(), len, name)?;
    if len == 0 {
        return Ok(&mut []);
    }
    // SAFETY: as for `input`, plus exclusive access, which is the caller's contract.
    Ok(unsafe { std::slice::from_raw_parts_mut(ptr, len) })
}

/// [`input`] for an untyped index buffer of the pool's index type `T`.
///
/// # Safety
/// As for [`input`].
pub(crate) unsafe fn input_indices<'a, T>(
    ptr: *const c_void,
    len: usize,
    name: &str,
) -> Result<&'a [T], kvp_status> {
    // SAFETY: forwarded contract.
    unsafe { input(ptr.cast::<T>(), len, name) }
}

/// [`output`] for an untyped index buffer of the pool's index type `T`.
///
/// # Safety
/// As for [`output`].
pub(crate) unsafe fn output_indices<'a, T>(
    ptr: *mut c_void,
    len: usize,
    name: &str,
) -> Result<&'a mut [T], kvp_status> {
    // SAFETY: forwarded contract.
    unsafe { output(ptr.cast::<T>(), len, name) }
}
