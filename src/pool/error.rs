//! Domain errors: what went wrong, and a message naming the offending element.

use std::fmt;

/// The class of a failed pool operation. Each kind maps to one fixed `kvp_status` number.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// A configuration value or argument is invalid in a way no other kind describes.
    InvalidArgument,
    /// A length is negative, `seq_len < prefix_len`, or a batch total disagrees with its parts.
    InvalidLengths,
    /// An output buffer (or an input row) is shorter than the operation needs.
    BufferTooSmall,
    /// A size or position that must be a multiple of `page_size` is not.
    Unaligned,
    /// An index or page id lies outside the pool.
    IndexOutOfRange,
    /// Slot 0 / page 0 is the padding sink; it is never allocated and cannot be freed.
    ReservedSlot,
    /// An index or page is freed twice (already free, twice in one call, or twice in one group).
    DoubleFree,
    /// An index refers to a page that is not allocated (e.g. a `last_loc` in a free page).
    NotAllocated,
    /// `last_loc` is inconsistent with `prefix_len` / `seq_len`, or two requests claim one page.
    LastLocMismatch,
    /// Not enough free slots; detected before anything was produced.
    OutOfSlots,
    /// Host memory for the pool's bookkeeping (or a snapshot) could not be allocated.
    OutOfMemory,
    /// The call is not allowed in the pool's current state (e.g. nested free group).
    InvalidState,
    /// A snapshot taken from a different pool was passed to `restore_state`.
    ForeignSnapshot,
    /// The requested feature is not available in this build.
    Unsupported,
    /// A host-backend call on a device pool, or a device (`_async`) call on a host pool.
    WrongBackend,
    /// No NVIDIA driver (`libcuda`) could be loaded, or the device does not exist.
    CudaUnavailable,
    /// A CUDA driver call failed; the message names the `CUresult`.
    CudaError,
    /// The stream belongs to another device or context than the pool.
    WrongStream,
    /// A kernel found invalid input (double free, foreign index, page 0, bad `last_loc`);
    /// the device pool refuses work until it is cleared or restored.
    DeviceFault,
    /// With the stream-order debug check on: a call of a device pool ran on the device
    /// before the previous call had finished (streams not ordered with each other); the
    /// pool is faulted like for [`DeviceFault`](Self::DeviceFault).
    UnorderedStreams,
}

/// A failed pool operation. The pool is unchanged after any error (all-or-nothing), but for
/// the merge of staged frees an allocation makes before it reports a shortage (as SGLang).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolError {
    kind: ErrorKind,
    message: String,
}

impl PoolError {
    /// Creates an error of `kind` with a human-readable `message`.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
        }
    }

    /// The class of the error.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// What went wrong, naming the offending element where there is one.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for PoolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}: {}", self.kind, self.message)
    }
}

impl std::error::Error for PoolError {}

/// Shorthand for building an `Err(PoolError)`.
pub(crate) fn fail<T>(kind: ErrorKind, message: impl Into<String>) -> Result<T, PoolError> {
    Err(PoolError::new(kind, message))
}
