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
    /// An argument or configuration value is invalid in a way no other status describes
    /// (including a handle of another kind, e.g. a scheduler passed as a pool).
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
    /// Host memory for the pool's bookkeeping (at `kvp_pool_new`) or for a snapshot could
    /// not be allocated. Reported instead of aborting the process; nothing was created.
    OutOfMemory = 21,
    /// The call is not allowed now (nested free group, group end without begin, snapshot
    /// while a group is open).
    InvalidState = 40,
    /// The snapshot belongs to a different pool.
    ForeignSnapshot = 41,
    /// The object (pool, scheduler, adder or delayer) was poisoned by an earlier internal
    /// panic and refuses further calls; free it.
    Poisoned = 42,
    /// A host call (`kvp_pool_alloc`, ...) on a device pool, or a device call (`*_async`,
    /// `kvp_pool_check_device`, `kvp_pool_available_size_bound`) on a host pool.
    WrongBackend = 43,
    /// The feature is not available in this build or on this pool.
    Unsupported = 50,
    /// No NVIDIA driver (`libcuda.so.1`) could be loaded, or the CUDA device does not exist.
    /// Never a crash: the library loads the driver only when a device pool is created.
    CudaUnavailable = 60,
    /// A CUDA driver call failed; the message names the call and its `CUresult`.
    ///
    /// A device call whose kernels were only partly enqueued (a launch after its first
    /// failed: the earlier ones run, and the host did not record what they change) leaves
    /// the pool refusing work with this status, naming that call, until
    /// `kvp_pool_clear_async` or `kvp_pool_restore_state_async` (any snapshot: none can be
    /// taken after such a call). Without that, the next call could read a cursor the
    /// queued kernels moved and hand the same slots out twice.
    CudaError = 61,
    /// The stream passed to an `*_async` call belongs to another device or context than the
    /// pool (which uses its device's primary context).
    WrongStream = 62,
    /// A kernel of this pool found invalid input that only the device could see (double
    /// free, an index outside the pool, page 0, a `last_loc` in a free page, two requests
    /// extending one page). The call that met it changed nothing; it and every later call
    /// until recovery wrote the padding slot 0 to their outputs. The pool refuses work until
    /// `kvp_pool_clear_async` or `kvp_pool_restore_state_async`; the message names the call,
    /// the element and its value.
    ///
    /// What the engine must do: the faulting call and every call enqueued after it changed
    /// nothing — allocations wrote the padding slot 0 to all of their planned output
    /// (`out[0 .. num_tokens)`, `out[0 .. extend_num_tokens)`, `out[0 .. batch_size)`),
    /// frees freed nothing, rewinds moved nothing — so their outputs must not be used. Then
    /// either restore a snapshot taken before the faulting call
    /// (`kvp_pool_restore_state_async`: requests older than the snapshot keep their slots;
    /// only the calls made since must be redone — a snapshot per scheduler step makes that
    /// one step), or clear the pool (`kvp_pool_clear_async`: every slot free, every live
    /// request's KV dropped). The first call after the recovery reports the old fault once
    /// more; the next is clean.
    DeviceFault = 63,
    /// Only with the `KVP_DEBUG_STREAM_ORDER` check on (`kvp_pool_set_debug`): a call of this
    /// device pool started on the device before the previous call had finished — the two
    /// calls were enqueued on streams not ordered with each other (no event between them).
    /// Detected on the device and handled exactly like `KVP_STATUS_DEVICE_FAULT`: the late
    /// call and every later one changed nothing and wrote the padding slot 0 to their
    /// outputs; the pool refuses work until `kvp_pool_clear_async` or
    /// `kvp_pool_restore_state_async`. The message names both calls and their streams.
    UnorderedStreams = 64,
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
            ErrorKind::OutOfMemory => Self::OutOfMemory,
            ErrorKind::InvalidState => Self::InvalidState,
            ErrorKind::ForeignSnapshot => Self::ForeignSnapshot,
            ErrorKind::Unsupported => Self::Unsupported,
            ErrorKind::WrongBackend => Self::WrongBackend,
            ErrorKind::CudaUnavailable => Self::CudaUnavailable,
            ErrorKind::CudaError => Self::CudaError,
            ErrorKind::WrongStream => Self::WrongStream,
            ErrorKind::DeviceFault => Self::DeviceFault,
            ErrorKind::UnorderedStreams => Self::UnorderedStreams,
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
        21 => b"out of host memory\0",
        40 => b"not allowed in the current state\0",
        41 => b"snapshot belongs to a different pool\0",
        42 => b"object poisoned by an earlier internal panic\0",
        43 => b"wrong backend for this call\0",
        50 => b"unsupported in this build\0",
        60 => b"CUDA driver or device unavailable\0",
        61 => b"CUDA driver call failed\0",
        62 => b"stream belongs to another device or context\0",
        63 => b"device detected invalid input; pool faulted\0",
        64 => b"calls on one pool from streams not ordered with each other; pool faulted\0",
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
            kvp_status::OutOfMemory,
            kvp_status::InvalidState,
            kvp_status::ForeignSnapshot,
            kvp_status::Poisoned,
            kvp_status::WrongBackend,
            kvp_status::Unsupported,
            kvp_status::CudaUnavailable,
            kvp_status::CudaError,
            kvp_status::WrongStream,
            kvp_status::DeviceFault,
            kvp_status::UnorderedStreams,
            kvp_status::Panic,
        ];
        let texts: std::collections::HashSet<_> = all.iter().map(|&s| describe(s as i32)).collect();
        assert_eq!(texts.len(), all.len());
        assert!(!texts.contains(&describe(-1)));
        assert_eq!(describe(12345), b"unknown status\0");
    }
}
