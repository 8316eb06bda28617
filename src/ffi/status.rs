//! `kvp_status`: the result of every fallible call, with fixed numbers.

use std::ffi::c_char;

use crate::pool::ErrorKind;

/// Result of a kvpool call. `KVP_STATUS_OK` is 0; every other value is a failure, after
/// which the object is unchanged and `kvp_last_error_message` describes the problem.
///
/// The numbers are part of the ABI: they are never renumbered or reused. Ranges:
/// 1–19 bad arguments, 20–29 resource shortage, 40–49 wrong state, 50–59 unsupported,
/// 60–69 reserved for CUDA errors, 100+ internal failures.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum kvp_status {
    /// Success.
    Ok = 0,
    /// A required pointer argument was NULL.
    NullArgument = 1,
    /// An argument or configuration value is invalid in a way no other status describes.
    InvalidArgument = 2,
    /// A length is negative, `seq_len < prefix_len`, longer than the pool, or a batch total
    /// disagrees with its parts.
    InvalidLengths = 3,
    /// An output buffer (or an input row) is too short.
    BufferTooSmall = 4,
    /// A size or position that must be a multiple of `page_size` is not.
    Unaligned = 5,
    /// An index or page id lies outside the pool.
    IndexOutOfRange = 6,
    /// Slot 0 / page 0 (the padding sink) was passed where an allocated slot is required.
    ReservedSlot = 7,
    /// An index or page is already free, or is freed twice in one call or one free group.
    DoubleFree = 8,
    /// An index refers to a page that is not allocated (e.g. a `last_loc` in a free page).
    NotAllocated = 9,
    /// `last_loc` is inconsistent with the prefix length, or two requests extend one page.
    LastLocMismatch = 10,
    /// Not enough free slots. Detected before anything is written; the pool is unchanged
    /// apart from merging staged frees (`need_sort`), which SGLang does too.
    OutOfSlots = 20,
    /// The call is not allowed now (nested free group, group end without begin, snapshot
    /// while a group is open).
    InvalidState = 40,
    /// The snapshot belongs to a different pool.
    ForeignSnapshot = 41,
    /// The object (pool, scheduler, adder or delayer) was poisoned by an earlier internal
    /// panic and refuses further calls; free it.
    Poisoned = 42,
    /// The feature is not available in this build (e.g. the CUDA backend).
    Unsupported = 50,
    /// An internal panic was caught at the ABI boundary; nothing unwound into the caller.
    Panic = 100,
}

impl From<ErrorKind> for kvp_status {
    fn from(kind: ErrorKind) -> Self {
        match kind {
            ErrorKind::InvalidArgument => Self::InvalidArgument,
            ErrorKind::InvalidLengths => Self::InvalidLengths,
            ErrorKind::BufferTooSmall => Self::BufferTooSmall,
            ErrorKind::Unaligned => Self::Unaligned,
            ErrorKind::IndexOutOfRange => Self::IndexOutOfRange,
            ErrorKind::ReservedSlot => Self::ReservedSlot,
            ErrorKind::DoubleFree => Self::DoubleFree,
            ErrorKind::NotAllocated => Self::NotAllocated,
            ErrorKind::LastLocMismatch => Self::LastLocMismatch,
            ErrorKind::OutOfSlots => Self::OutOfSlots,
            ErrorKind::InvalidState => Self::InvalidState,
            ErrorKind::ForeignSnapshot => Self::ForeignSnapshot,
            ErrorKind::Unsupported => Self::Unsupported,
        }
    }
}

/// NUL-terminated description of each status (static storage).
fn describe(status: i32) -> &'static [u8] {
    match status {
        0 => b"ok\0",
        1 => b"a required pointer argument is NULL\0",
        2 => b"invalid argument\0",
        3 => b"invalid lengths\0",
        4 => b"buffer too small\0",
        5 => b"not a multiple of page_size\0",
        6 => b"index out of range\0",
        7 => b"the padding slot/page 0 is reserved\0",
        8 => b"double free\0",
        9 => b"index refers to a page that is not allocated\0",
        10 => b"last_loc inconsistent with the prefix\0",
        20 => b"out of free slots\0",
        40 => b"not allowed in the current state\0",
        41 => b"snapshot belongs to a different pool\0",
        42 => b"object poisoned by an earlier internal panic\0",
        50 => b"unsupported in this build\0",
        100 => b"internal panic caught at the ABI boundary\0",
        _ => b"unknown status\0",
    }
}

/// Returns a static, NUL-terminated English description of `status` ("unknown status" for
/// numbers kvpool does not define). Never fails; the string must not be freed.
#[no_mangle]
pub extern "C" fn kvp_status_str(status: i32) -> *const c_char {
    describe(status).as_ptr().cast()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_status_has_its_own_description() {
        let all = [
            kvp_status::Ok,
            kvp_status::NullArgument,
            kvp_status::InvalidArgument,
            kvp_status::InvalidLengths,
            kvp_status::BufferTooSmall,
            kvp_status::Unaligned,
            kvp_status::IndexOutOfRange,
            kvp_status::ReservedSlot,
            kvp_status::DoubleFree,
            kvp_status::NotAllocated,
            kvp_status::LastLocMismatch,
            kvp_status::OutOfSlots,
            kvp_status::InvalidState,
            kvp_status::ForeignSnapshot,
            kvp_status::Poisoned,
            kvp_status::Unsupported,
            kvp_status::Panic,
        ];
        let texts: std::collections::HashSet<_> = all.iter().map(|&s| describe(s as i32)).collect();
        assert_eq!(texts.len(), all.len());
        assert!(!texts.contains(&describe(-1)));
        assert_eq!(describe(12345), b"unknown status\0");
    }
}
