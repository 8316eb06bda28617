//! Turning `(pointer, length)` pairs from C into slices, with the checks C cannot do.

use std::ffi::c_void;

use super::boundary::fail;
use super::status::kvp_status;

/// The checks [`input`] and [`output`] make before they borrow: `ptr` NULL only for `len`
/// 0, aligned for `T`, `len` elements within `isize::MAX` bytes.
pub(crate) fn check<T>(ptr: *const T, len: usize, name: &str) -> Result<(), kvp_status> {
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

/// A buffer's memory as a call sees it: start address, bytes, and its parameter's name.
pub(crate) type Span<'a> = (*const c_void, usize, &'a str);

/// `len` elements of `T` at `ptr`, as a [`Span`] (empty for NULL, which the buffer's own
/// check refuses; the size saturates: an impossible length is refused there too).
pub(crate) fn span<'a, T>(ptr: *const T, len: usize, name: &'a str) -> Span<'a> {
    let bytes = if ptr.is_null() {
        0
    } else {
        len.saturating_mul(std::mem::size_of::<T>())
    };
    (ptr.cast(), bytes, name)
}

/// [`span`] of an index buffer whose element width is known only at run time (a device
/// pool's index type: `device::index_align`).
pub(crate) fn index_span<'a>(
    ptr: *const c_void,
    len: usize,
    width: usize,
    name: &'a str,
) -> Span<'a> {
    span(ptr.cast::<u8>(), len.saturating_mul(width), name)
}

/// Refuses an output buffer that shares memory with another buffer of the call. A call
/// reads its inputs again while it writes its outputs: an `out` over `last_loc` turns a
/// later request's `last_loc` into a slot just handed out, which then continues the wrong
/// page (a slot handed out twice), and over `seq_lens` it runs past the plan. (Rust may not
/// hold a view of memory that is being written through another, either.) Empty buffers
/// share nothing.
pub(crate) fn disjoint(outputs: &[Span<'_>], inputs: &[Span<'_>]) -> Result<(), kvp_status> {
    let overlap = |(a, a_len, _): &Span<'_>, (b, b_len, _): &Span<'_>| {
        let (a, b) = (*a as usize, *b as usize);
        *a_len > 0 && *b_len > 0 && a < b.saturating_add(*b_len) && b < a.saturating_add(*a_len)
    };
    for (k, out) in outputs.iter().enumerate() {
        let others = outputs[k + 1..].iter().chain(inputs);
        if let Some(other) = others.into_iter().find(|other| overlap(out, other)) {
            return Err(fail(
                kvp_status::InvalidArgument,
                format!(
                    "{} overlaps {}: an output must not share memory with the call's other buffers",
                    out.2, other.2
                ),
            ));
        }
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
