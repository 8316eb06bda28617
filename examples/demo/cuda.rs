//! The raw CUDA the device backend needs besides kvpool: the engine's stream, device
//! buffers that grow, blocking copies, and the GPU's name.
//!
//! kvpool takes device pointers and a stream, and never allocates, copies or synchronizes
//! for its caller: the engine owns these (in SGLang, PyTorch does), so the demo does too.
//! Nothing here may run before `DevicePool::new` has succeeded: by then the driver is loaded
//! and initialised and device 0's primary context is current on this thread (without a
//! driver, cudarc's dynamically loaded functions would panic instead of failing).

use std::ffi::{c_char, c_void, CStr};

use cudarc::driver::sys::{self, CUdeviceptr, CUresult, CUstream};
use kvpool::{ErrorKind, PoolError};

/// `Ok` for `CUDA_SUCCESS`, otherwise a `CudaError` naming the call.
fn check(result: CUresult, call: &str) -> Result<(), PoolError> {
    if result == CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(PoolError::new(
            ErrorKind::CudaError,
            format!("{call} failed with {result:?}"),
        ))
    }
}

/// The engine's stream, on which every pool call is enqueued.
#[derive(Debug)]
pub struct Stream(CUstream);

impl Stream {
    /// A blocking stream (flags 0): it synchronizes with the legacy default stream, on
    /// which the blocking `cuMemcpy` calls below run, so a copy is ordered after the
    /// kernels enqueued before it and before those enqueued after it.
    pub fn new() -> Result<Self, PoolError> {
        let mut stream = std::ptr::null_mut();
        // SAFETY: valid out-pointer; the context is current (module docs).
        check(
            unsafe { sys::cuStreamCreate(&mut stream, 0) },
            "cuStreamCreate",
        )?;
        Ok(Self(stream))
    }

    /// The handle kvpool's calls take.
    pub fn raw(&self) -> CUstream {
        self.0
    }

    /// Waits until the GPU has run everything enqueued on the stream.
    pub fn synchronize(&self) -> Result<(), PoolError> {
        // SAFETY: a live stream.
        check(
            unsafe { sys::cuStreamSynchronize(self.0) },
            "cuStreamSynchronize",
        )
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        // SAFETY: created in `new`, destroyed once, after its work is done.
        unsafe {
            sys::cuStreamSynchronize(self.0);
            sys::cuStreamDestroy_v2(self.0);
        }
    }
}

/// A device array of `i64` indices or lengths, allocated on first use and grown as needed.
#[derive(Debug, Default)]
pub struct DeviceBuffer {
    ptr: CUdeviceptr,
    bytes: usize,
}

impl DeviceBuffer {
    /// Room for `len` values at least. Growing waits for `stream` first: kernels enqueued
    /// earlier may still read the old block.
    pub fn reserve(&mut self, len: usize, stream: &Stream) -> Result<CUdeviceptr, PoolError> {
        let bytes = len.max(1) * std::mem::size_of::<i64>();
        if bytes > self.bytes {
            stream.synchronize()?;
            self.release();
            let bytes = bytes.next_power_of_two().max(4096);
            let mut ptr = 0;
            // SAFETY: valid out-pointer; the context is current.
            check(unsafe { sys::cuMemAlloc_v2(&mut ptr, bytes) }, "cuMemAlloc")?;
            (self.ptr, self.bytes) = (ptr, bytes);
        }
        Ok(self.ptr)
    }

    /// Copies `data` to the start of the buffer and returns its address. The copy blocks
    /// until `data` has been taken (so the engine may reuse it at once) and is ordered
    /// with `stream` (see [`Stream::new`]).
    pub fn upload(&mut self, data: &[i64], stream: &Stream) -> Result<CUdeviceptr, PoolError> {
        let ptr = self.reserve(data.len(), stream)?;
        if !data.is_empty() {
            // SAFETY: `data` is readable for its size, which the buffer holds.
            check(
                unsafe {
                    sys::cuMemcpyHtoD_v2(
                        ptr,
                        data.as_ptr().cast::<c_void>(),
                        std::mem::size_of_val(data),
                    )
                },
                "cuMemcpyHtoD",
            )?;
        }
        Ok(ptr)
    }

    /// Copies the first `out.len()` values back (blocking: the caller has synchronized
    /// the stream that wrote them).
    pub fn download(&self, out: &mut [i64]) -> Result<(), PoolError> {
        let bytes = std::mem::size_of_val(out);
        if bytes == 0 {
            return Ok(());
        }
        assert!(
            bytes <= self.bytes,
            "download of {bytes} bytes from {}",
            self.bytes
        );
        // SAFETY: `out` is writable for `bytes`, which the buffer holds.
        check(
            unsafe { sys::cuMemcpyDtoH_v2(out.as_mut_ptr().cast::<c_void>(), self.ptr, bytes) },
            "cuMemcpyDtoH",
        )
    }

    fn release(&mut self) {
        if self.ptr != 0 {
            // SAFETY: allocated by `cuMemAlloc` in `reserve`, freed once.
            unsafe { sys::cuMemFree_v2(self.ptr) };
            (self.ptr, self.bytes) = (0, 0);
        }
    }
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        self.release();
    }
}

/// Reads `n` `u32` words at device address `addr` (blocking; for the free-list census,
/// after the stream is idle).
pub fn read_words(addr: CUdeviceptr, n: usize) -> Result<Vec<u32>, PoolError> {
    let mut words = vec![0u32; n];
    if n > 0 {
        // SAFETY: the caller names a readable device range of `n` words.
        check(
            unsafe {
                sys::cuMemcpyDtoH_v2(
                    words.as_mut_ptr().cast::<c_void>(),
                    addr,
                    std::mem::size_of_val(words.as_slice()),
                )
            },
            "cuMemcpyDtoH",
        )?;
    }
    Ok(words)
}

/// The marketing name of CUDA device `ordinal` ("NVIDIA H200").
pub fn device_name(ordinal: i32) -> Result<String, PoolError> {
    let mut device = 0;
    let mut name = [0 as c_char; 256];
    // SAFETY: valid out-pointers; `name` holds 256 bytes and the driver NUL-terminates.
    unsafe {
        check(sys::cuDeviceGet(&mut device, ordinal), "cuDeviceGet")?;
        check(
            sys::cuDeviceGetName(name.as_mut_ptr(), name.len() as i32, device),
            "cuDeviceGetName",
        )?;
        Ok(CStr::from_ptr(name.as_ptr()).to_string_lossy().into_owned())
    }
}
