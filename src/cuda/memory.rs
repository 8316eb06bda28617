//! Device memory and host memory mapped into the device, owned by a pool.

use std::ffi::c_void;

use cudarc::driver::sys::{self, CUdeviceptr};

use super::driver::check;
use super::release::may_be_capturing;
use crate::pool::error::fail;
use crate::pool::{ErrorKind, PoolError};

/// A `cuMemAlloc` block, freed on drop. Its context must be current when it is dropped.
#[derive(Debug)]
pub(crate) struct DeviceMemory {
    ptr: CUdeviceptr,
    bytes: usize,
}

impl DeviceMemory {
    /// Allocates `bytes` (at least 1), contents undefined. The calling thread's stream
    /// capture mode is relaxed for the `cuMemAlloc` (then restored): in global mode
    /// (PyTorch's default) it would invalidate a capture in progress on another stream, of
    /// this thread or of any other, though nothing of the pool's is being captured (PyTorch's
    /// own allocator relaxes it alike). A call on a stream that is being captured never
    /// gets here ([`zeroed_on`](Self::zeroed_on)).
    pub fn uninit(bytes: usize) -> Result<Self, PoolError> {
        let bytes = bytes.max(1);
        let mut ptr = 0;
        let mut mode = sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED;
        // SAFETY: a valid in/out pointer; the previous mode is put back below.
        check(
            unsafe { sys::cuThreadExchangeStreamCaptureMode(&mut mode) },
            "cuThreadExchangeStreamCaptureMode",
        )?;
        // SAFETY: valid out-pointer; the pool's context is current.
        let allocated = unsafe { sys::cuMemAlloc_v2(&mut ptr, bytes) };
        // SAFETY: as above (restores the thread's mode; cannot fail for a mode it gave).
        unsafe { sys::cuThreadExchangeStreamCaptureMode(&mut mode) };
        check(allocated, "cuMemAlloc")?;
        Ok(Self { ptr, bytes })
    }

    /// Allocates `bytes` (at least 1) and fills them with zeros on the legacy default
    /// stream, which returns before the memset is done and is not ordered with non-blocking
    /// streams: only for pool creation, which synchronizes the context before its first
    /// call. Memory a call's stream will use is zeroed there ([`zeroed_on`](Self::zeroed_on)).
    pub fn zeroed(bytes: usize) -> Result<Self, PoolError> {
        let memory = Self::uninit(bytes)?;
        // SAFETY: the memory holds `memory.bytes` bytes.
        check(
            unsafe { sys::cuMemsetD8_v2(memory.ptr, 0, memory.bytes) },
            "cuMemsetD8",
        )?;
        Ok(memory)
    }

    /// Allocates `bytes` (at least 1) for a call on `stream` and enqueues zeroing them there,
    /// so that later work on `stream` sees zeros without the host waiting (used only when a
    /// pool's scratch, reservation or snapshot buffers must grow). Refused while `stream` is
    /// being captured (`InvalidState`, nothing allocated): `cuMemAlloc` may synchronize the
    /// device, which invalidates a global-mode capture (the engine's whole graph), and the
    /// zeroing would be recorded into the graph instead of run, so calls made before the
    /// graph runs would find the memory undefined. `growing` names what must grow and how
    /// to size it before capturing.
    pub fn zeroed_on(
        bytes: usize,
        stream: sys::CUstream,
        growing: &str,
    ) -> Result<Self, PoolError> {
        if may_be_capturing(stream) {
            return fail(
                ErrorKind::InvalidState,
                format!(
                    "{growing} must grow to {bytes} bytes, but `stream` is being captured: a \
                     captured call allocates no device memory (cuMemAlloc may synchronize, \
                     which would invalidate the capture); nothing was done"
                ),
            );
        }
        let memory = Self::uninit(bytes)?;
        // SAFETY: the memory holds `memory.bytes` bytes; `stream` is a live stream of the
        // context.
        check(
            unsafe { sys::cuMemsetD8Async(memory.ptr, 0, memory.bytes, stream) },
            "cuMemsetD8Async",
        )?;
        Ok(memory)
    }

    /// Device address of byte `offset`.
    pub fn at(&self, offset: usize) -> CUdeviceptr {
        debug_assert!(offset <= self.bytes);
        self.ptr + offset as u64
    }

    /// Size in bytes.
    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

impl Drop for DeviceMemory {
    fn drop(&mut self) {
        // SAFETY: allocated by `cuMemAlloc`, freed once.
        unsafe { sys::cuMemFree_v2(self.ptr) };
    }
}

/// Page-locked host memory mapped into the device's address space: kernels write it, the
/// host reads it with volatile loads, and nobody synchronizes.
#[derive(Debug)]
pub(crate) struct MappedHost {
    host: *mut c_void,
    device: CUdeviceptr,
}

impl MappedHost {
    /// Allocates `bytes` of zeroed mapped memory.
    pub fn zeroed(bytes: usize) -> Result<Self, PoolError> {
        let mut host = std::ptr::null_mut();
        let flags = sys::CU_MEMHOSTALLOC_DEVICEMAP | sys::CU_MEMHOSTALLOC_PORTABLE;
        // SAFETY: valid out-pointer; the pool's context is current.
        check(
            unsafe { sys::cuMemHostAlloc(&mut host, bytes, flags) },
            "cuMemHostAlloc",
        )?;
        // SAFETY: `host` holds `bytes` writable bytes.
        unsafe { std::ptr::write_bytes(host.cast::<u8>(), 0, bytes) };
        let mut mapped = Self { host, device: 0 };
        // SAFETY: `host` is a DEVICEMAP allocation.
        check(
            unsafe { sys::cuMemHostGetDevicePointer_v2(&mut mapped.device, host, 0) },
            "cuMemHostGetDevicePointer",
        )?;
        Ok(mapped)
    }

    /// The host address.
    pub fn host(&self) -> *mut c_void {
        self.host
    }

    /// The address kernels use.
    pub fn device(&self) -> CUdeviceptr {
        self.device
    }
}

impl Drop for MappedHost {
    fn drop(&mut self) {
        // SAFETY: allocated by `cuMemHostAlloc`, freed once.
        unsafe { sys::cuMemFreeHost(self.host) };
    }
}
