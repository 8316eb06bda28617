//! A minimal CUDA harness for the GPU tests: the device's primary context, a stream,
//! device buffers with blocking copies, and a hand-written PTX kernel that spins for a given
//! time (so the tests need the NVIDIA driver only, no toolkit). Tests may synchronize
//! freely; the library under test may not.
#![allow(dead_code)]

use std::ffi::c_void;

use cudarc::driver::sys::{self, CUdeviceptr, CUresult, CUstream};

/// Why a GPU test cannot run here, or `None` when a driver and a device are present.
pub fn unavailable() -> Option<String> {
    if !kvpool::cuda::driver_available() {
        return Some("no NVIDIA driver or CUDA device".into());
    }
    None
}

fn ok(result: CUresult, what: &str) {
    assert_eq!(result, CUresult::CUDA_SUCCESS, "{what} failed");
}

/// Primary context of device 0 (current on the calling thread) and one stream.
pub struct Gpu {
    pub stream: CUstream,
    device: sys::CUdevice,
}

impl Gpu {
    /// `blocking`: a stream that synchronizes with the legacy default stream (so blocking
    /// `cuMemcpy` calls order with it).
    pub fn new(blocking: bool) -> Self {
        // SAFETY: plain driver calls with valid out-pointers.
        unsafe {
            ok(sys::cuInit(0), "cuInit");
            let mut device = 0;
            ok(sys::cuDeviceGet(&mut device, 0), "cuDeviceGet");
            let mut ctx = std::ptr::null_mut();
            ok(sys::cuDevicePrimaryCtxRetain(&mut ctx, device), "retain");
            ok(sys::cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
            let mut stream = std::ptr::null_mut();
            let flags = if blocking { 0 } else { 1 }; // CU_STREAM_NON_BLOCKING = 1
            ok(sys::cuStreamCreate(&mut stream, flags), "cuStreamCreate");
            Self { stream, device }
        }
    }

    /// Whether the device launches thread block clusters (sm_90 and later).
    pub fn cluster_launch(&self) -> bool {
        let mut supported = 0;
        // SAFETY: valid device handle and out-pointer.
        ok(
            unsafe {
                sys::cuDeviceGetAttribute(
                    &mut supported,
                    sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH,
                    self.device,
                )
            },
            "cuDeviceGetAttribute",
        );
        supported != 0
    }

    pub fn sync(&self) {
        // SAFETY: live stream.
        ok(
            unsafe { sys::cuStreamSynchronize(self.stream) },
            "cuStreamSynchronize",
        );
    }

    /// Device count.
    pub fn devices() -> i32 {
        let mut n = 0;
        // SAFETY: valid out-pointer.
        ok(unsafe { sys::cuDeviceGetCount(&mut n) }, "cuDeviceGetCount");
        n
    }
}

impl Drop for Gpu {
    fn drop(&mut self) {
        // SAFETY: created in `new`.
        unsafe {
            sys::cuStreamSynchronize(self.stream);
            sys::cuStreamDestroy_v2(self.stream);
            sys::cuDevicePrimaryCtxRelease_v2(self.device);
        }
    }
}

/// A device buffer of `bytes` bytes.
pub struct DevBuf {
    pub ptr: CUdeviceptr,
    pub bytes: usize,
}

impl DevBuf {
    /// Three buffers of `n` int64 each: a call's device lengths and `last_loc`.
    pub fn lengths(n: usize) -> (Self, Self, Self) {
        (Self::new(8 * n), Self::new(8 * n), Self::new(8 * n))
    }

    pub fn new(bytes: usize) -> Self {
        let mut ptr = 0;
        // SAFETY: valid out-pointer.
        ok(
            unsafe { sys::cuMemAlloc_v2(&mut ptr, bytes.max(8)) },
            "cuMemAlloc",
        );
        Self {
            ptr,
            bytes: bytes.max(8),
        }
    }

    /// Copies `data` to the start of the buffer (blocking; the caller has synchronized).
    pub fn upload<T: Copy>(&self, data: &[T]) {
        let bytes = std::mem::size_of_val(data);
        assert!(
            bytes <= self.bytes,
            "upload of {bytes} bytes into {}",
            self.bytes
        );
        if bytes > 0 {
            // SAFETY: `data` is `bytes` readable bytes; the buffer holds at least that.
            ok(
                unsafe { sys::cuMemcpyHtoD_v2(self.ptr, data.as_ptr().cast::<c_void>(), bytes) },
                "cuMemcpyHtoD",
            );
            // From pageable memory the copy returns once the data is staged; its transfer
            // runs on the legacy stream, which a non-blocking stream's next kernel does not
            // wait for. (Not the context: a spinner may hold a test's stream.)
            // SAFETY: the legacy default stream.
            ok(
                unsafe { sys::cuStreamSynchronize(std::ptr::null_mut()) },
                "cuStreamSynchronize(legacy)",
            );
        }
    }

    /// Reads `n` elements from byte `offset` (blocking).
    pub fn download_at<T: Copy + Default>(&self, offset: usize, n: usize) -> Vec<T> {
        let mut out = vec![T::default(); n];
        let bytes = std::mem::size_of_val(out.as_slice());
        if bytes > 0 {
            // SAFETY: `out` has `bytes` writable bytes; the range lies inside the buffer.
            ok(
                unsafe {
                    sys::cuMemcpyDtoH_v2(
                        out.as_mut_ptr().cast::<c_void>(),
                        self.ptr + offset as u64,
                        bytes,
                    )
                },
                "cuMemcpyDtoH",
            );
        }
        out
    }

    pub fn download<T: Copy + Default>(&self, n: usize) -> Vec<T> {
        self.download_at(0, n)
    }
}

impl Drop for DevBuf {
    fn drop(&mut self) {
        // SAFETY: allocated in `new`.
        unsafe { sys::cuMemFree_v2(self.ptr) };
    }
}

/// Reads `n` `T`s at device address `addr` (blocking).
pub fn read_device<T: Copy + Default>(addr: u64, n: usize) -> Vec<T> {
    let mut out = vec![T::default(); n];
    let bytes = std::mem::size_of_val(out.as_slice());
    if bytes > 0 {
        // SAFETY: the caller names a readable device range.
        ok(
            unsafe { sys::cuMemcpyDtoH_v2(out.as_mut_ptr().cast::<c_void>(), addr, bytes) },
            "cuMemcpyDtoH",
        );
    }
    out
}

/// A one-thread kernel from hand-written PTX (NUL-terminated), JIT compiled by the driver.
struct PtxKernel {
    module: sys::CUmodule,
    function: sys::CUfunction,
}

impl PtxKernel {
    fn load(ptx: &str, name: &std::ffi::CStr) -> Self {
        assert!(ptx.ends_with('\0'), "PTX must be NUL-terminated");
        let mut module = std::ptr::null_mut();
        let mut function = std::ptr::null_mut();
        // SAFETY: NUL-terminated PTX and name; valid out-pointers.
        unsafe {
            ok(
                sys::cuModuleLoadData(&mut module, ptx.as_ptr().cast::<c_void>()),
                "cuModuleLoadData(test PTX)",
            );
            ok(
                sys::cuModuleGetFunction(&mut function, module, name.as_ptr()),
                "cuModuleGetFunction",
            );
        }
        Self { module, function }
    }

    /// Enqueues the kernel on one thread.
    ///
    /// # Safety
    /// `args` match the kernel's parameters, each pointing at a live value during the call.
    unsafe fn launch(&self, stream: CUstream, args: &mut [*mut c_void]) {
        // SAFETY: forwarded contract.
        ok(
            unsafe {
                sys::cuLaunchKernel(
                    self.function,
                    1,
                    1,
                    1,
                    1,
                    1,
                    1,
                    0,
                    stream,
                    args.as_mut_ptr(),
                    std::ptr::null_mut(),
                )
            },
            "cuLaunchKernel(test PTX)",
        );
    }
}

impl Drop for PtxKernel {
    fn drop(&mut self) {
        // SAFETY: loaded in `load`.
        unsafe { sys::cuModuleUnload(self.module) };
    }
}

/// A kernel that spins on the global timer for `ns` nanoseconds.
pub struct Spinner(PtxKernel);

const SPIN_PTX: &str = "
.version 8.0
.target sm_80
.address_size 64
.visible .entry kvp_test_spin(.param .u64 ns)
{
  .reg .u64 %r<5>;
  .reg .pred %p;
  ld.param.u64 %r1, [ns];
  mov.u64 %r2, %globaltimer;
SPIN:
  mov.u64 %r3, %globaltimer;
  sub.u64 %r4, %r3, %r2;
  setp.lt.u64 %p, %r4, %r1;
  @%p bra SPIN;
  ret;
}
\0";

impl Spinner {
    pub fn new() -> Self {
        Self(PtxKernel::load(SPIN_PTX, c"kvp_test_spin"))
    }

    /// Enqueues a one-thread kernel that runs for `ns` nanoseconds.
    pub fn launch(&self, stream: CUstream, ns: u64) {
        // SAFETY: one u64 parameter, pointing at a live value during the call.
        unsafe {
            self.0
                .launch(stream, &mut [(&ns as *const u64).cast_mut().cast()])
        };
    }
}

/// A one-thread kernel that lets the kernel after it launch at once (programmatic dependent
/// launch: `griddepcontrol.launch_dependents` first), then spins for `ns` nanoseconds, then
/// copies `n` 8-byte words from `src` to `dst`: a predecessor whose writes a kernel behind it
/// sees only if it waits for it (sm_90).
pub struct LateCopy(PtxKernel);

const LATE_COPY_PTX: &str = "
.version 8.0
.target sm_90
.address_size 64
.visible .entry kvp_test_late_copy(.param .u64 src, .param .u64 dst, .param .u64 n,
                                   .param .u64 ns)
{
  .reg .u64 %r<12>;
  .reg .pred %p;
  griddepcontrol.launch_dependents;
  ld.param.u64 %r1, [ns];
  mov.u64 %r2, %globaltimer;
SPIN:
  mov.u64 %r3, %globaltimer;
  sub.u64 %r4, %r3, %r2;
  setp.lt.u64 %p, %r4, %r1;
  @%p bra SPIN;
  ld.param.u64 %r5, [src];
  ld.param.u64 %r6, [dst];
  ld.param.u64 %r7, [n];
  mov.u64 %r8, 0;
COPY:
  setp.ge.u64 %p, %r8, %r7;
  @%p bra DONE;
  shl.b64 %r9, %r8, 3;
  add.u64 %r10, %r5, %r9;
  ld.global.u64 %r11, [%r10];
  add.u64 %r10, %r6, %r9;
  st.global.u64 [%r10], %r11;
  add.u64 %r8, %r8, 1;
  bra COPY;
DONE:
  ret;
}
\0";

impl LateCopy {
    /// Loads the kernel (sm_90 and later).
    pub fn new() -> Self {
        Self(PtxKernel::load(LATE_COPY_PTX, c"kvp_test_late_copy"))
    }

    /// Enqueues the copy of `n` words from `src` to `dst` after `ns` nanoseconds.
    pub fn launch(&self, stream: CUstream, src: &DevBuf, dst: &DevBuf, n: u64, ns: u64) {
        let mut args: [*mut c_void; 4] = [
            (&src.ptr as *const u64).cast_mut().cast(),
            (&dst.ptr as *const u64).cast_mut().cast(),
            (&n as *const u64).cast_mut().cast(),
            (&ns as *const u64).cast_mut().cast(),
        ];
        // SAFETY: four u64 parameters, each pointing at a live value during the call.
        unsafe { self.0.launch(stream, &mut args) };
    }
}

/// A recorded event: `done()` polls it without waiting.
pub struct Event(sys::CUevent);

impl Event {
    pub fn record(stream: CUstream) -> Self {
        let mut event = std::ptr::null_mut();
        // SAFETY: valid out-pointer; live stream.
        unsafe {
            ok(sys::cuEventCreate(&mut event, 0), "cuEventCreate");
            ok(sys::cuEventRecord(event, stream), "cuEventRecord");
        }
        Self(event)
    }

    pub fn done(&self) -> bool {
        // SAFETY: live event.
        match unsafe { sys::cuEventQuery(self.0) } {
            CUresult::CUDA_SUCCESS => true,
            CUresult::CUDA_ERROR_NOT_READY => false,
            other => panic!("cuEventQuery: {other:?}"),
        }
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        // SAFETY: created in `record`.
        unsafe { sys::cuEventDestroy_v2(self.0) };
    }
}

/// A CUDA graph captured from a stream (global capture mode, the strictest: any call that
/// may synchronize, from any thread, invalidates the capture) and instantiated.
pub struct Graph {
    graph: sys::CUgraph,
    exec: sys::CUgraphExec,
}

impl Graph {
    /// Captures what `record` enqueues on `stream`; returns the graph and `record`'s value.
    pub fn capture<T>(stream: CUstream, record: impl FnOnce() -> T) -> (Self, T) {
        // SAFETY: live stream; valid out-pointers; capture is ended before returning.
        unsafe {
            ok(
                sys::cuStreamBeginCapture_v2(
                    stream,
                    sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL,
                ),
                "cuStreamBeginCapture",
            );
            let value = record();
            let mut graph = std::ptr::null_mut();
            ok(
                sys::cuStreamEndCapture(stream, &mut graph),
                "cuStreamEndCapture",
            );
            let mut exec = std::ptr::null_mut();
            ok(
                sys::cuGraphInstantiateWithFlags(&mut exec, graph, 0),
                "cuGraphInstantiate",
            );
            (Self { graph, exec }, value)
        }
    }

    /// Enqueues one replay on `stream`.
    pub fn launch(&self, stream: CUstream) {
        // SAFETY: instantiated graph, live stream.
        ok(
            unsafe { sys::cuGraphLaunch(self.exec, stream) },
            "cuGraphLaunch",
        );
    }
}

impl Drop for Graph {
    fn drop(&mut self) {
        // SAFETY: created in `capture`.
        unsafe {
            sys::cuGraphExecDestroy(self.exec);
            sys::cuGraphDestroy(self.graph);
        }
    }
}

// ---- C-ABI helpers shared by the GPU tests ----------------------------------------------

/// Whether this GPU test must be skipped here (no driver or device); says why on stderr.
pub fn skip() -> bool {
    if let Some(why) = unavailable() {
        eprintln!("skipped: {why}");
        return true;
    }
    false
}

/// The calling thread's last kvpool error message.
pub fn last_error() -> String {
    let mut buf = vec![0u8; 4096];
    // SAFETY: `buf` is writable for its length; the message is NUL-terminated.
    unsafe { kvpool::ffi::kvp_last_error_message(buf.as_mut_ptr().cast(), buf.len()) };
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

/// A device buffer holding `values`.
pub fn upload<T: Copy>(values: &[T]) -> DevBuf {
    let buf = DevBuf::new(std::mem::size_of_val(values));
    buf.upload(values);
    buf
}

/// Element size of a `kvp_index_type`.
pub fn width(index_type: u32) -> usize {
    if index_type == kvpool::ffi::kvp_index_type::I64 as u32 {
        8
    } else {
        4
    }
}

/// `values` as the bytes of a buffer of `index_type` elements.
pub fn narrow(values: &[i64], index_type: u32) -> Vec<u8> {
    if width(index_type) == 8 {
        values.iter().flat_map(|v| v.to_le_bytes()).collect()
    } else {
        values
            .iter()
            .flat_map(|&v| (v as i32).to_le_bytes())
            .collect()
    }
}

/// The elements of a buffer of `index_type`, as i64 values.
pub fn widen(bytes: &[u8], index_type: u32) -> Vec<i64> {
    if width(index_type) == 8 {
        bytes
            .chunks(8)
            .map(|c| i64::from_le_bytes(c.try_into().unwrap()))
            .collect()
    } else {
        bytes
            .chunks(4)
            .map(|c| i64::from(i32::from_le_bytes(c.try_into().unwrap())))
            .collect()
    }
}

/// One request-to-token table on each backend, zeroed: the host's in a Vec, the device's
/// in a DevBuf, and their descriptions (the host's points into the Vec, whose buffer does
/// not move with the struct).
pub struct Tables {
    pub host: Vec<u8>,
    pub dev: DevBuf,
    pub host_desc: kvpool::ffi::kvp_req_table,
    pub dev_desc: kvpool::ffi::kvp_req_table,
}

impl Tables {
    pub fn new(table_type: u32, rows: u64, row_stride: u64, row_len: u64) -> Self {
        let span = ((rows - 1) * row_stride + row_len) as usize;
        let mut host = vec![0u8; span * width(table_type)];
        let dev = DevBuf::new(host.len());
        dev.upload(&host);
        let host_desc = kvpool::ffi::kvp_req_table {
            data: host.as_mut_ptr().cast(),
            index_type: table_type,
            rows,
            row_stride,
            row_len,
        };
        let dev_desc = kvpool::ffi::kvp_req_table {
            data: dev.ptr as usize as *mut c_void,
            ..host_desc
        };
        Self {
            host,
            dev,
            host_desc,
            dev_desc,
        }
    }

    /// Whether the device table equals the host's, byte for byte.
    pub fn agree(&self) -> bool {
        self.dev.download::<u8>(self.host.len()) == self.host
    }
}

/// Every page word of a device pool, read back.
pub fn page_words_on_device(device: &kvpool::cuda::DevicePool) -> Vec<u32> {
    let layout = device.debug_layout();
    read_device(
        layout.block + layout.state as u64,
        layout.num_pages as usize + 1,
    )
}

/// A device pool's state as the next call sees it, read back (synchronize the pool's stream
/// first): the cursor the next call reads, the free pages in ring order from the head, the
/// staged pages, every page's kind, and each allocated page's fill point. What a refused
/// call must leave as it found it. Other bytes it may leave as it pleases: ring entries past
/// the free run and a free page's fill word (a call writes them before it reads them), and
/// page words' tags (an undo writes tag 0, which names no call: a tag only tells a call
/// whether it set the word itself).
#[derive(Debug, PartialEq)]
pub struct PoolImage {
    /// head, free_len, staged_len and the two group lengths.
    pub cursor: Vec<u32>,
    pub free_run: Vec<u32>,
    /// The staged pages (released under need_sort, waiting for a merge).
    pub staged: Vec<u32>,
    pub kinds: Vec<u32>,
    /// (page, fill point) of every allocated or held page.
    pub in_use: Vec<(usize, u32)>,
}

impl PoolImage {
    pub fn of(device: &kvpool::cuda::DevicePool) -> Self {
        const KIND_MASK: u32 = 7;
        const ALLOCATED: u32 = 3;
        const HELD: u32 = 7;
        let layout = device.debug_layout();
        let pages = layout.num_pages as usize;
        let at = |offset: usize| layout.block + offset as u64;
        let cursor: Vec<u32> = read_device(at(layout.cursor), 5);
        let ring: Vec<u32> = read_device(at(layout.ring), pages);
        let free_run = (0..cursor[1] as usize)
            .map(|i| ring[(cursor[0] as usize + i) % pages])
            .collect();
        let staged = read_device(at(layout.staged), cursor[2] as usize);
        let words = page_words_on_device(device);
        let fills: Vec<u64> = if device.page_size() > 1 {
            read_device(at(layout.fill), pages + 1)
        } else {
            vec![0; pages + 1]
        };
        let in_use = (0..=pages)
            .filter(|&p| matches!(words[p] & KIND_MASK, ALLOCATED | HELD))
            .map(|p| (p, fills[p] as u32))
            .collect();
        Self {
            cursor,
            free_run,
            staged,
            kinds: words.iter().map(|w| w & KIND_MASK).collect(),
            in_use,
        }
    }

    /// `difference`, blind to a merge of the staged pages into the free ones: a need_sort
    /// pool may enqueue one before a call's kernel (the host decides from counts alone, as
    /// SGLang merges before it finds a shortage), so a call the device refuses may follow
    /// one. Compared: the free and staged pages as one set, the group lengths, every page's
    /// kind with staged read as free, and the in-use pages.
    pub fn difference_but_a_merge(&self, after: &Self) -> Option<String> {
        const FREE: u32 = 1;
        const STAGED: u32 = 2;
        let merged = |image: &Self| {
            let mut free: Vec<u32> = image
                .free_run
                .iter()
                .chain(&image.staged)
                .copied()
                .collect();
            free.sort_unstable();
            let kinds: Vec<u32> = image
                .kinds
                .iter()
                .map(|&k| if k == STAGED { FREE } else { k })
                .collect();
            Self {
                cursor: vec![0, 0, 0, image.cursor[3], image.cursor[4]],
                free_run: free,
                staged: Vec::new(),
                kinds,
                in_use: image.in_use.clone(),
            }
        };
        merged(self).difference(&merged(after))
    }

    /// The first part of `after` that differs from this image, described; `None` if equal.
    pub fn difference(&self, after: &Self) -> Option<String> {
        if self.cursor != after.cursor {
            return Some(format!("cursor {:?} -> {:?}", self.cursor, after.cursor));
        }
        let first = |a: &[u32], b: &[u32]| (0..a.len().min(b.len())).find(|&i| a[i] != b[i]);
        if self.free_run != after.free_run {
            let i = first(&self.free_run, &after.free_run);
            return Some(format!("free run at {i:?} (of {})", self.free_run.len()));
        }
        if self.staged != after.staged {
            return Some(format!(
                "staged pages {:?} -> {:?}",
                self.staged, after.staged
            ));
        }
        if let Some(p) = first(&self.kinds, &after.kinds) {
            let (a, b) = (self.kinds[p], after.kinds[p]);
            return Some(format!("page {p}'s kind {a} -> {b}"));
        }
        let i = (0..self.in_use.len()).find(|&i| self.in_use[i] != after.in_use[i])?;
        Some(format!(
            "in-use page (page, fill point) {:?} -> {:?}",
            self.in_use[i], after.in_use[i]
        ))
    }
}
