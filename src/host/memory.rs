//! Bookkeeping allocations that report exhaustion instead of aborting.
//!
//! Rust's infallible collections abort the whole process when an allocation fails; an
//! engine that sizes its pool from free GPU memory must get `KVP_STATUS_OUT_OF_MEMORY` from
//! `kvp_pool_new` instead. Every allocation a pool makes at creation (and for a snapshot)
//! goes through here; afterwards the pool's calls reuse that capacity.

use std::alloc::{alloc_zeroed, Layout};

use crate::pool::error::{ErrorKind, PoolError};

/// The error for a failed bookkeeping allocation of `count` elements named `what`.
#[cold]
pub(crate) fn exhausted(what: &str, count: usize, elem_bytes: usize) -> PoolError {
    PoolError::new(
        ErrorKind::OutOfMemory,
        format!(
            "cannot allocate host memory for the {what} ({count} entries, {} bytes)",
            count.saturating_mul(elem_bytes)
        ),
    )
}

/// A vector of `len` copies of `value`, or an out-of-memory error.
pub(crate) fn filled<T: Clone>(what: &str, len: usize, value: T) -> Result<Vec<T>, PoolError> {
    let mut v = Vec::new();
    v.try_reserve_exact(len)
        .map_err(|_| exhausted(what, len, std::mem::size_of::<T>()))?;
    v.resize(len, value);
    Ok(v)
}

/// Plain integers whose all-zero bit pattern is the value 0.
pub(crate) trait Zeroable: Copy {}
impl Zeroable for u32 {}
impl Zeroable for u64 {}

/// A vector of `len` zeros from zeroed memory: a large bitmap is then only address space
/// until it is touched (the slot marks of a paged pool cover every slot).
pub(crate) fn zeroed<T: Zeroable>(what: &str, len: usize) -> Result<Vec<T>, PoolError> {
    let too_big = || exhausted(what, len, std::mem::size_of::<T>());
    let layout = Layout::array::<T>(len).map_err(|_| too_big())?;
    if layout.size() == 0 {
        return Ok(Vec::new());
    }
    // SAFETY: the layout has a nonzero size; a null result is handled below.
    let ptr = unsafe { alloc_zeroed(layout) }.cast::<T>();
    if ptr.is_null() {
        return Err(too_big());
    }
    // SAFETY: `ptr` comes from the global allocator with `Layout::array::<T>(len)`, which is
    // the layout `Vec` frees with; all `len` elements are initialised (zero is a valid `T`).
    Ok(unsafe { Vec::from_raw_parts(ptr, len, len) })
}

/// A copy of `src`, or an out-of-memory error (snapshots).
pub(crate) fn copied<T: Clone>(what: &str, src: &[T]) -> Result<Vec<T>, PoolError> {
    let mut v = Vec::new();
    v.try_reserve_exact(src.len())
        .map_err(|_| exhausted(what, src.len(), std::mem::size_of::<T>()))?;
    v.extend_from_slice(src);
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn impossible_sizes_are_errors_not_aborts() {
        let err = zeroed::<u64>("marks", usize::MAX / 4).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::OutOfMemory);
        assert!(err.message().contains("marks"), "{}", err.message());
        let err = filled("page map", usize::MAX / 2, 0u8).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::OutOfMemory);
    }

    #[test]
    fn small_sizes_are_initialised() {
        assert_eq!(zeroed::<u32>("fill", 5).unwrap(), vec![0; 5]);
        assert_eq!(filled("x", 3, 7u8).unwrap(), vec![7; 3]);
        assert_eq!(copied("x", &[1, 2]).unwrap(), vec![1, 2]);
        assert!(zeroed::<u64>("empty", 0).unwrap().is_empty());
    }
}
