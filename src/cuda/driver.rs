//! The CUDA driver, loaded on first use: initialisation, the device's primary context, and
//! driver errors as [`PoolError`]s.
//!
//! `libcuda` is opened with `dlopen` only when a device pool is created, so the library
//! links and runs on machines without a driver; there every device call fails with
//! [`ErrorKind::CudaUnavailable`] instead of cudarc's loader panicking.

use std::sync::OnceLock;

use cudarc::driver::sys::{self, CUcontext, CUdevice, CUresult, CUstream};

use crate::pool::{ErrorKind, PoolError};

/// `Ok` for `CUDA_SUCCESS`, otherwise a [`ErrorKind::CudaError`] naming `call`.
pub(crate) fn check(result: CUresult, call: &str) -> Result<(), PoolError> {
    if result == CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(PoolError::new(
            ErrorKind::CudaError,
            format!("{call} failed with {result:?}"),
        ))
    }
}

/// Whether `libcuda` was loaded and initialised (no attempt is made here).
static INIT: OnceLock<Result<(), PoolError>> = OnceLock::new();

/// Loads `libcuda` and runs `cuInit` once per process.
pub(crate) fn init() -> Result<(), PoolError> {
    INIT.get_or_init(|| {
        // SAFETY: only tries to open the library.
        if !unsafe { sys::is_culib_present() } {
            return Err(PoolError::new(
                ErrorKind::CudaUnavailable,
                "CUDA backend: the NVIDIA driver library (libcuda.so.1) could not be loaded",
            ));
        }
        // SAFETY: the library is present; cuInit may be called any number of times.
        match unsafe { sys::cuInit(0) } {
            CUresult::CUDA_SUCCESS => Ok(()),
            other => Err(PoolError::new(
                ErrorKind::CudaUnavailable,
                format!("CUDA backend: cuInit failed with {other:?}: no usable device or driver"),
            )),
        }
    })
    .clone()
}

/// The calling thread's current context, made current again when this is dropped: a C call
/// on a device pool binds the pool's primary context while it runs and leaves the thread's
/// context as it found it (an engine may have its own context current).
pub(crate) struct RestoreContext {
    previous: Option<CUcontext>,
}

impl RestoreContext {
    /// Remembers the current context. Does nothing (and loads no driver) in a process that
    /// never initialised the driver: host pools never touch CUDA.
    pub fn save() -> Self {
        if !matches!(INIT.get(), Some(Ok(()))) {
            return Self { previous: None };
        }
        let mut current = std::ptr::null_mut();
        // SAFETY: the driver is initialised; valid out-pointer. A thread with no context
        // reads NULL (or an error, on some drivers): restoring then unbinds.
        if unsafe { sys::cuCtxGetCurrent(&mut current) } != CUresult::CUDA_SUCCESS {
            current = std::ptr::null_mut();
        }
        Self {
            previous: Some(current),
        }
    }
}

impl Drop for RestoreContext {
    fn drop(&mut self) {
        let Some(previous) = self.previous else {
            return;
        };
        let mut current = std::ptr::null_mut();
        // SAFETY: the driver is initialised (`previous` was read); `previous` is the
        // caller's context (or NULL, which unbinds), current when the call began.
        unsafe {
            if sys::cuCtxGetCurrent(&mut current) == CUresult::CUDA_SUCCESS && current != previous {
                sys::cuCtxSetCurrent(previous);
            }
        }
    }
}

/// A retained primary context of one device (the context PyTorch and the CUDA runtime use).
#[derive(Debug)]
pub(crate) struct PrimaryContext {
    device: CUdevice,
    ctx: CUcontext,
}

// SAFETY: a context handle is thread-agnostic; every use binds it to the calling thread.
unsafe impl Send for PrimaryContext {}
// SAFETY: as above; the handle is never mutated.
unsafe impl Sync for PrimaryContext {}

impl PrimaryContext {
    /// Retains the primary context of device `ordinal` and makes it current.
    pub fn retain(ordinal: i32) -> Result<Self, PoolError> {
        init()?;
        let mut count = 0;
        // SAFETY: the driver is initialised; out-pointers are valid.
        check(
            unsafe { sys::cuDeviceGetCount(&mut count) },
            "cuDeviceGetCount",
        )?;
        if ordinal < 0 || ordinal >= count {
            return Err(PoolError::new(
                ErrorKind::CudaUnavailable,
                format!("CUDA device {ordinal} does not exist ({count} devices)"),
            ));
        }
        let mut device = 0;
        // SAFETY: as above.
        check(
            unsafe { sys::cuDeviceGet(&mut device, ordinal) },
            "cuDeviceGet",
        )?;
        let mut ctx = std::ptr::null_mut();
        // SAFETY: as above.
        check(
            unsafe { sys::cuDevicePrimaryCtxRetain(&mut ctx, device) },
            "cuDevicePrimaryCtxRetain",
        )?;
        let context = Self { device, ctx };
        context.bind()?;
        Ok(context)
    }

    fn attribute(&self, attribute: sys::CUdevice_attribute) -> Result<i32, PoolError> {
        let mut value = 0;
        // SAFETY: `self.device` is a valid device handle; valid out-pointer.
        check(
            unsafe { sys::cuDeviceGetAttribute(&mut value, attribute, self.device) },
            "cuDeviceGetAttribute",
        )?;
        Ok(value)
    }

    /// The device's streaming multiprocessors (how many blocks of a kernel at one block an SM
    /// run in one wave).
    pub fn multiprocessors(&self) -> Result<u32, PoolError> {
        let count =
            self.attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?;
        // A device reports at least one; 1 keeps the arithmetic defined if one did not.
        Ok(u32::try_from(count).unwrap_or(0).max(1))
    }

    /// The most shared memory a block may use once a kernel opts in, in bytes (227 KB on an
    /// H100/H200, 163 KB on an A100).
    pub fn shared_optin(&self) -> Result<u32, PoolError> {
        let bytes = self.attribute(
            sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
        )?;
        Ok(u32::try_from(bytes).unwrap_or(0))
    }

    /// Whether the device launches thread block clusters (compute capability 9.0 and later);
    /// false when the driver cannot say.
    pub fn cluster_launch(&self) -> bool {
        self.attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH)
            .is_ok_and(|supported| supported != 0)
    }

    /// Whether kernels on this device go out with programmatic dependent launch
    /// (`Kernels::launch_shared`): compute capability 9.0 or later (the kernels' wait for
    /// their predecessors, `griddepcontrol.wait`, is sm_90's) and a driver of CUDA 12.3 or
    /// later (from which stream capture records such a launch as a programmatic edge of the
    /// graph); unless the environment sets `KVPOOL_PROGRAMMATIC_LAUNCH=0` (read when a pool
    /// is created). False when the driver cannot say.
    pub fn programmatic_launch(&self) -> bool {
        if std::env::var_os("KVPOOL_PROGRAMMATIC_LAUNCH").is_some_and(|value| value == "0") {
            return false;
        }
        let mut version = 0;
        // SAFETY: the driver is initialised; valid out-pointer.
        let driver = unsafe { sys::cuDriverGetVersion(&mut version) };
        driver == CUresult::CUDA_SUCCESS
            && version >= 12030
            && self
                .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)
                .is_ok_and(|major| major >= 9)
    }

    /// Makes the context current on the calling thread (a no-op when it already is).
    pub fn bind(&self) -> Result<(), PoolError> {
        let mut current = std::ptr::null_mut();
        // SAFETY: valid out-pointer.
        check(
            unsafe { sys::cuCtxGetCurrent(&mut current) },
            "cuCtxGetCurrent",
        )?;
        if current != self.ctx {
            // SAFETY: `self.ctx` is retained.
            check(unsafe { sys::cuCtxSetCurrent(self.ctx) }, "cuCtxSetCurrent")?;
        }
        Ok(())
    }

    /// Fails with [`ErrorKind::WrongStream`] unless `stream` belongs to this context. The
    /// context must be current (NULL and the per-thread default streams resolve to it).
    pub fn check_stream(&self, stream: CUstream) -> Result<(), PoolError> {
        let mut owner = std::ptr::null_mut();
        // SAFETY: the caller vouches that `stream` is a live stream handle (or a default-stream
        // constant); the out-pointer is valid.
        let result = unsafe { sys::cuStreamGetCtx(stream, &mut owner) };
        if result != CUresult::CUDA_SUCCESS {
            return Err(PoolError::new(
                ErrorKind::WrongStream,
                format!("cuStreamGetCtx rejected the stream ({result:?})"),
            ));
        }
        if owner != self.ctx {
            return Err(PoolError::new(
                ErrorKind::WrongStream,
                "the stream belongs to another device or context than the pool, which uses \
                 its device's primary context",
            ));
        }
        Ok(())
    }
}

impl Drop for PrimaryContext {
    fn drop(&mut self) {
        // SAFETY: retained in `retain`, released once. Nothing to do about a failure here.
        unsafe { sys::cuDevicePrimaryCtxRelease_v2(self.device) };
    }
}
