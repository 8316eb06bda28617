//! The CUDA contract around a device pool's lifetime and streams (issue 10):
//!
//! - stream-ordered release: a pool (and its snapshots) released while its kernels are still
//!   queued behind a long kernel returns at once, the queued kernels still run on live
//!   memory (no CUDA error, right outputs), and the memory is freed once the stream has
//!   passed them — also when the release is a destructor running during unwinding;
//! - the stream-order debug check (`kvp_pool_set_debug(pool, KVP_DEBUG_STREAM_ORDER)`):
//!   calls from streams not ordered with each other fault the pool with
//!   `KVP_STATUS_UNORDERED_STREAMS`; streams ordered by an event pass; with the check off
//!   nothing is checked; a host pool accepts the option and ignores it;
//! - the turn check (calls recorded by stream capture): a call made while the graph of a
//!   captured call has not run, graphs launched out of order, a graph launched after later
//!   calls or after a clear, and a graph replayed at once fault the pool (the late or early
//!   call changes nothing) instead of handing pages out twice; graphs launched once each,
//!   in order, before the next call pass and give the slots uncaptured calls give; with
//!   `DEBUG_REPLAY_CALLS` a graph replayed at once repeats its call exactly.
//!
//! The GPU tests are `#[ignore]`d on CPU machines (listed as ignored by `cargo test`); run
//! them with `cargo test --release --test cuda_contract -- --ignored --test-threads=1` (they
//! watch the process-wide count of pending releases). Under compute-sanitizer set
//! `KVPOOL_SANITIZER=1`: kernels may then be serialized, so the timing claims (a kernel still
//! spinning at release) are not asserted, only memory safety and the results.

mod gpu;

use std::ffi::c_void;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr::null_mut;
use std::time::{Duration, Instant};

use cudarc::driver::sys;
use kvpool::cuda::{pending_releases, release_counts, DevicePool};
use kvpool::ffi::*;
use kvpool::{BackendKind, ErrorKind, IndexType, PoolConfig};

use gpu::{last_error, DevBuf, Event, Gpu, Graph, LateCopy, Spinner};

/// How long the spin kernel keeps the stream busy.
const SPIN_NS: u64 = 300_000_000;

fn under_sanitizer() -> bool {
    std::env::var_os("KVPOOL_SANITIZER").is_some()
}

fn device_config(page_size: u32) -> PoolConfig {
    PoolConfig {
        size: 4096 * u64::from(page_size),
        page_size,
        need_sort: false,
        index_type: IndexType::I64,
        backend: BackendKind::Cuda { ordinal: 0 },
    }
}

fn c_device_config() -> kvp_pool_config {
    let mut c = kvp_pool_config_default();
    c.size = 4096 * 16;
    c.page_size = 16;
    c.backend = kvp_backend::Cuda as u32;
    c
}

/// Waits (up to 5 s) until no release is pending; returns how long it took.
fn wait_for_releases() -> Duration {
    let started = Instant::now();
    while pending_releases() > 0 {
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{} releases still pending 5 s after the stream went idle",
            pending_releases()
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    started.elapsed()
}

fn sync_context() {
    // SAFETY: plain driver call; the primary context is current (Gpu::new).
    let result = unsafe { sys::cuCtxSynchronize() };
    assert_eq!(
        result,
        sys::CUresult::CUDA_SUCCESS,
        "the context reports an error: memory was freed under a kernel?"
    );
}

/// Frees a C pool when dropped — the Rust image of a C++ `kvpool::pool` destructor.
struct PoolGuard(*mut kvp_pool);

impl Drop for PoolGuard {
    fn drop(&mut self) {
        // SAFETY: a live pool from kvp_pool_new, freed once.
        unsafe { kvp_pool_free(self.0) };
    }
}

/// Frees a C snapshot when dropped.
struct SnapshotGuard(*mut kvp_snapshot);

impl Drop for SnapshotGuard {
    fn drop(&mut self) {
        // SAFETY: a live snapshot, freed once.
        unsafe { kvp_snapshot_free(self.0) };
    }
}

/// A pool and its snapshot are released through the C ABI, by guards dropped while a panic
/// unwinds, right after enqueueing an alloc, a backup, an alloc and a restore behind a
/// 300 ms kernel. The release returns at once; the queued kernels then run on live memory
/// and write the right slots; afterwards every release completes.
#[test]
#[ignore = "needs a CUDA GPU: run with --ignored on a GPU machine"]
fn a_pool_released_during_unwinding_is_freed_after_its_last_kernel() {
    let gpu = Gpu::new(false);
    let spinner = Spinner::new();
    let out = DevBuf::new(64 * 8);
    let out2 = DevBuf::new(32 * 8);
    let stream = gpu.stream.cast::<CUstream_st>();
    let (queued_before, _) = release_counts();
    let mut pool = null_mut();
    // SAFETY: valid config and out-pointer.
    assert_eq!(
        unsafe { kvp_pool_new(&c_device_config(), &mut pool) },
        kvp_status::Ok
    );
    spinner.launch(gpu.stream, SPIN_NS);
    let spin_done = Event::record(gpu.stream);
    let mut unwound_at = None;
    let result = catch_unwind(AssertUnwindSafe(|| {
        let pool = PoolGuard(pool);
        let mut raw = null_mut();
        // SAFETY: `out`/`out2` hold 64/32 indices and outlive the stream's work (synced below).
        unsafe {
            assert_eq!(
                kvp_pool_alloc_async(pool.0, 64, out.ptr as *mut c_void, 64, stream),
                kvp_status::Ok
            );
            assert_eq!(
                kvp_pool_backup_state_async(pool.0, &mut raw, stream),
                kvp_status::Ok
            );
        }
        let snapshot = SnapshotGuard(raw);
        // SAFETY: as above.
        unsafe {
            assert_eq!(
                kvp_pool_alloc_async(pool.0, 32, out2.ptr as *mut c_void, 32, stream),
                kvp_status::Ok
            );
            assert_eq!(
                kvp_pool_restore_state_async(pool.0, snapshot.0, stream),
                kvp_status::Ok
            );
        }
        unwound_at = Some(Instant::now());
        panic!("the engine fails after enqueueing");
    }));
    let unwind_took = unwound_at.expect("the body ran").elapsed();
    assert!(result.is_err(), "the body must have panicked");
    let spinning = !spin_done.done();
    let pending = pending_releases();
    let (queued_after, _) = release_counts();
    eprintln!(
        "release during unwinding took {unwind_took:?}; spin kernel still running: {spinning}; \
         pending releases: {pending}"
    );
    assert!(
        unwind_took < Duration::from_millis(50),
        "releasing the pool and its snapshot took {unwind_took:?}: it waited for the GPU"
    );
    assert_eq!(
        queued_after - queued_before,
        2,
        "the pool and its snapshot buffers were not handed to the release list"
    );
    if !under_sanitizer() {
        assert!(
            spinning,
            "the spin kernel ended before the release: the test proves nothing"
        );
        assert!(
            pending >= 2,
            "the pool and its snapshot buffers were freed while their kernels were queued"
        );
    }
    gpu.sync();
    sync_context();
    // The queued alloc ran on the pool's live memory: pages 1..=4 of a fresh paged pool.
    assert_eq!(out.download::<i64>(64), (16..80).collect::<Vec<i64>>());
    assert_eq!(out2.download::<i64>(32), (80..112).collect::<Vec<i64>>());
    let waited = wait_for_releases();
    eprintln!("every release completed {waited:?} after the stream went idle");
    let mut count = usize::MAX;
    // SAFETY: valid out-pointer.
    assert_eq!(
        unsafe { kvp_device_pending_releases(&mut count) },
        kvp_status::Ok
    );
    assert_eq!(count, 0);
    // The context is healthy: a new pool works.
    let mut again = DevicePool::new(device_config(16)).unwrap();
    // SAFETY: `out` holds 64 indices; synced below.
    unsafe { again.alloc(16, out.ptr, 64, gpu.stream) }.unwrap();
    gpu.sync();
    assert_eq!(out.download::<i64>(16), (16..32).collect::<Vec<i64>>());
}

/// Dropping a `DevicePool` whose stream is busy, and a snapshot after it (the snapshot
/// buffers then go too): both are deferred, and freed after the stream passes their work.
#[test]
#[ignore = "needs a CUDA GPU: run with --ignored on a GPU machine"]
fn a_snapshot_outliving_its_pool_is_freed_after_the_pools_last_kernel() {
    let gpu = Gpu::new(false);
    let spinner = Spinner::new();
    let out = DevBuf::new(64 * 8);
    let mut pool = DevicePool::new(device_config(1)).unwrap();
    let (queued_before, freed_before) = release_counts();
    spinner.launch(gpu.stream, SPIN_NS);
    let spin_done = Event::record(gpu.stream);
    // SAFETY: `out` holds 64 indices; synced below.
    let snapshot = unsafe {
        pool.alloc(8, out.ptr, 64, gpu.stream).unwrap();
        let snapshot = pool.backup_state(gpu.stream).unwrap();
        pool.alloc(8, out.ptr + 64, 56, gpu.stream).unwrap();
        pool.restore_state(&snapshot, gpu.stream).unwrap();
        snapshot
    };
    let started = Instant::now();
    drop(pool);
    drop(snapshot);
    let took = started.elapsed();
    let spinning = !spin_done.done();
    assert!(took < Duration::from_millis(50), "dropping took {took:?}");
    let (queued, _) = release_counts();
    assert_eq!(queued - queued_before, 2, "pool + snapshot buffers");
    if !under_sanitizer() {
        assert!(
            spinning,
            "the spin kernel ended before the drop: the test proves nothing"
        );
        assert!(pending_releases() >= 2);
    }
    gpu.sync();
    sync_context();
    assert_eq!(out.download::<i64>(16), (1..17).collect::<Vec<i64>>());
    wait_for_releases();
    let (_, freed) = release_counts();
    assert!(freed - freed_before >= 2, "the releases never completed");
}

// ---- the stream-order debug check ------------------------------------------------------------

/// A second stream of the primary context, destroyed on drop.
struct Stream(sys::CUstream);

impl Stream {
    fn new() -> Self {
        let mut stream = null_mut();
        // SAFETY: valid out-pointer; the primary context is current (Gpu::new).
        let result = unsafe { sys::cuStreamCreate(&mut stream, 1) }; // non-blocking
        assert_eq!(result, sys::CUresult::CUDA_SUCCESS);
        Self(stream)
    }

    fn sync(&self) {
        // SAFETY: live stream.
        let result = unsafe { sys::cuStreamSynchronize(self.0) };
        assert_eq!(result, sys::CUresult::CUDA_SUCCESS);
    }

    /// Makes this stream wait for everything enqueued on `other` so far.
    fn wait_for(&self, other: sys::CUstream) {
        wait_for(self.0, other);
    }
}

/// Makes `waiter` wait for everything enqueued on `other` so far (an event between them).
fn wait_for(waiter: sys::CUstream, other: sys::CUstream) {
    let mut event = null_mut();
    // SAFETY: plain driver calls on live handles.
    unsafe {
        assert_eq!(
            sys::cuEventCreate(&mut event, 2), // CU_EVENT_DISABLE_TIMING
            sys::CUresult::CUDA_SUCCESS
        );
        assert_eq!(
            sys::cuEventRecord(event, other),
            sys::CUresult::CUDA_SUCCESS
        );
        assert_eq!(
            sys::cuStreamWaitEvent(waiter, event, 0),
            sys::CUresult::CUDA_SUCCESS
        );
        sys::cuEventDestroy_v2(event);
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        // SAFETY: created in `new`.
        unsafe {
            sys::cuStreamSynchronize(self.0);
            sys::cuStreamDestroy_v2(self.0);
        }
    }
}

/// Stream A runs a long kernel, then a pool call; stream B, not waiting for A, makes the
/// next call. With the check on, B's call starts while A's has not run: the pool faults
/// with `UnorderedStreams`, reported through the C ABI as `KVP_STATUS_UNORDERED_STREAMS`
/// with both calls and streams named; B's call wrote the padding slot. A clear recovers.
#[test]
#[ignore = "needs a CUDA GPU: run with --ignored on a GPU machine"]
fn stream_order_check_catches_unordered_streams() {
    let gpu = Gpu::new(false);
    let b = Stream::new();
    let spinner = Spinner::new();
    let (out_a, out_b) = (DevBuf::new(16 * 8), DevBuf::new(16 * 8));
    out_b.upload(&[-7i64; 16]);
    let mut raw = null_mut();
    // SAFETY: valid config and out-pointer.
    assert_eq!(
        unsafe { kvp_pool_new(&c_device_config(), &mut raw) },
        kvp_status::Ok
    );
    let pool = PoolGuard(raw);
    let (a_stream, b_stream) = (gpu.stream.cast::<CUstream_st>(), b.0.cast::<CUstream_st>());
    let mut flags = 0;
    // SAFETY: a live pool; valid out-pointer.
    unsafe {
        assert_eq!(
            kvp_pool_set_debug(pool.0, DevicePool::DEBUG_STREAM_ORDER),
            kvp_status::Ok
        );
        assert_eq!(kvp_pool_get_debug(pool.0, &mut flags), kvp_status::Ok);
    }
    assert_eq!(flags, kvp_debug::StreamOrder as u32);
    spinner.launch(gpu.stream, SPIN_NS);
    // SAFETY: buffers hold 16 indices and outlive the streams' work (synced below).
    unsafe {
        assert_eq!(
            kvp_pool_alloc_async(pool.0, 16, out_a.ptr as *mut c_void, 16, a_stream),
            kvp_status::Ok
        );
        assert_eq!(
            kvp_pool_alloc_async(pool.0, 16, out_b.ptr as *mut c_void, 16, b_stream),
            kvp_status::Ok
        );
    }
    b.sync();
    gpu.sync();
    sync_context();
    // SAFETY: a live pool.
    let status = unsafe { kvp_pool_check_device(pool.0) };
    let message = last_error();
    eprintln!("check_device: {status:?}: {message}");
    assert_eq!(status, kvp_status::UnorderedStreams, "{message}");
    assert!(
        message.contains("kvp_pool_alloc_async") && message.contains("not ordered"),
        "{message}"
    );
    assert!(
        message.contains(&format!("{:#x}", b.0 as usize))
            && message.contains(&format!("{:#x}", gpu.stream as usize)),
        "the message names both streams: {message}"
    );
    // B's call was refused on the device: the padding slot, not a page of A's.
    assert_eq!(out_b.download::<i64>(16), vec![0i64; 16]);
    // Every later call is refused with the same status until a recovery.
    // SAFETY: as above.
    unsafe {
        assert_eq!(
            kvp_pool_alloc_async(pool.0, 16, out_a.ptr as *mut c_void, 16, a_stream),
            kvp_status::UnorderedStreams
        );
        assert_eq!(kvp_pool_clear_async(pool.0, a_stream), kvp_status::Ok);
    }
    gpu.sync();
    // SAFETY: as above.
    unsafe {
        // The old fault is reported once more after the recovery, then the pool is clean.
        assert_eq!(kvp_pool_check_device(pool.0), kvp_status::UnorderedStreams);
        assert_eq!(kvp_pool_check_device(pool.0), kvp_status::Ok);
        assert_eq!(
            kvp_pool_alloc_async(pool.0, 16, out_a.ptr as *mut c_void, 16, a_stream),
            kvp_status::Ok
        );
    }
    gpu.sync();
    // SAFETY: as above.
    assert_eq!(unsafe { kvp_pool_check_device(pool.0) }, kvp_status::Ok);
    assert_eq!(out_a.download::<i64>(16), (16..32).collect::<Vec<i64>>());
}

/// The same two streams, but B waits for an event recorded on A after A's call: ordered,
/// so the check passes and B's call continues where A's left off. Also: `KVPOOL_DEBUG`
/// switches the check on at creation.
#[test]
#[ignore = "needs a CUDA GPU: run with --ignored on a GPU machine"]
fn stream_order_check_passes_streams_ordered_by_an_event() {
    let gpu = Gpu::new(false);
    let b = Stream::new();
    let spinner = Spinner::new();
    let (out_a, out_b) = (DevBuf::new(16 * 8), DevBuf::new(16 * 8));
    std::env::set_var("KVPOOL_DEBUG", "stream_order");
    let created = DevicePool::new(device_config(16));
    std::env::remove_var("KVPOOL_DEBUG");
    let mut pool = created.unwrap();
    assert_eq!(pool.debug_flags(), DevicePool::DEBUG_STREAM_ORDER);
    for round in 0..3 {
        spinner.launch(gpu.stream, SPIN_NS / 3);
        // SAFETY: buffers hold 16 indices; synced below.
        unsafe { pool.alloc(16, out_a.ptr, 16, gpu.stream) }.unwrap();
        b.wait_for(gpu.stream);
        // SAFETY: as above.
        unsafe { pool.alloc(16, out_b.ptr, 16, b.0) }.unwrap();
        // And back to A, ordered after B.
        wait_for(gpu.stream, b.0);
        b.sync();
        gpu.sync();
        sync_context();
        pool.check_device()
            .unwrap_or_else(|e| panic!("round {round}: ordered streams reported {e}"));
        let base = 16 + 32 * round;
        assert_eq!(
            out_a.download::<i64>(16),
            (base..base + 16).collect::<Vec<i64>>()
        );
        assert_eq!(
            out_b.download::<i64>(16),
            (base + 16..base + 32).collect::<Vec<i64>>()
        );
    }
}

/// With the check off (the default), the same unordered pattern is not checked: whatever
/// the race does to the pool, it is never reported as `UnorderedStreams`, and no check
/// kernel runs (the pool's debug flags are 0).
#[test]
#[ignore = "needs a CUDA GPU: run with --ignored on a GPU machine"]
fn stream_order_check_off_checks_nothing() {
    let gpu = Gpu::new(false);
    let b = Stream::new();
    let spinner = Spinner::new();
    let (out_a, out_b) = (DevBuf::new(16 * 8), DevBuf::new(16 * 8));
    let mut pool = DevicePool::new(device_config(16)).unwrap();
    assert_eq!(pool.debug_flags(), 0);
    spinner.launch(gpu.stream, SPIN_NS);
    // SAFETY: buffers hold 16 indices; synced below.
    unsafe {
        pool.alloc(16, out_a.ptr, 16, gpu.stream).unwrap();
        pool.alloc(16, out_b.ptr, 16, b.0).unwrap();
    }
    b.sync();
    gpu.sync();
    sync_context();
    if let Err(err) = pool.check_device() {
        assert_ne!(err.kind(), ErrorKind::UnorderedStreams, "{err}");
    }
    assert!(pool
        .fault()
        .is_none_or(|f| f.kind != ErrorKind::UnorderedStreams));
}

/// The 16 slots of page `first` (page size 16).
fn pages(first: i64) -> Vec<i64> {
    (first * 16..first * 16 + 16).collect()
}

/// `N` device outputs of 16 `i64` indices each.
fn outputs<const N: usize>() -> [DevBuf; N] {
    std::array::from_fn(|_| DevBuf::new(16 * 8))
}

/// A turn-check fault of an allocation, as `check_device` reports it, its message saying
/// `says`.
fn assert_turn_fault(pool: &mut DevicePool, says: &str) {
    let err = pool.check_device().unwrap_err();
    eprintln!("check_device: {err}");
    assert_eq!(err.kind(), ErrorKind::DeviceFault, "{err}");
    assert!(
        err.message().contains("turn check")
            && err.message().contains("kvp_pool_alloc_async")
            && err.message().contains(says),
        "{err}"
    );
}

/// An allocation of 16 slots into `out` made after a launch that faults the pool: refused
/// on the host when the fault is visible already (`out` keeps what it held), else enqueued
/// and changing nothing on the device (the padding slot).
fn alloc_after_a_fault(gpu: &Gpu, pool: &mut DevicePool, out: &DevBuf) {
    out.upload(&[-7i64; 16]);
    // SAFETY: `out` holds 16 indices and outlives the stream's work.
    let want = match unsafe { pool.alloc(16, out.ptr, 16, gpu.stream) } {
        Ok(()) => 0,
        Err(err) => {
            assert_eq!(err.kind(), ErrorKind::DeviceFault, "{err}");
            -7
        }
    };
    gpu.sync();
    assert_eq!(out.download::<i64>(16), vec![want; 16]);
}

/// Eager alloc A, alloc B captured into a graph not launched, eager alloc C: C would read
/// the cursor B has not written and take A's successor pages, which the graph takes too.
/// C's kernel finds the state from before A instead of A's and faults the pool: C writes the
/// padding slot, later calls are refused on the host, a clear recovers. (Without the check,
/// C's slots equal those the graph's B takes when it runs.)
#[test]
#[ignore = "needs a CUDA GPU: run with --ignored on a GPU machine"]
fn a_call_made_before_a_captured_calls_graph_runs_faults() {
    let gpu = Gpu::new(false);
    let s = gpu.stream;
    let [out_a, out_b, out_c] = outputs();
    out_c.upload(&[-7i64; 16]);
    let mut pool = DevicePool::new(device_config(16)).unwrap();
    // SAFETY (every call below): buffers hold 16 indices and outlive the stream's work.
    unsafe { pool.alloc(16, out_a.ptr, 16, s) }.unwrap();
    let (graph, status) = Graph::capture(s, || unsafe { pool.alloc(16, out_b.ptr, 16, s) });
    status.unwrap();
    unsafe { pool.alloc(16, out_c.ptr, 16, s) }.unwrap();
    gpu.sync();
    assert_eq!(out_a.download::<i64>(16), pages(1));
    assert_eq!(
        out_c.download::<i64>(16),
        vec![0; 16],
        "C wrote the padding slot"
    );
    assert_turn_fault(&mut pool, "calls made before it had not all run");
    let refused = unsafe { pool.alloc(16, out_c.ptr, 16, s) }.unwrap_err();
    assert_eq!(refused.kind(), ErrorKind::DeviceFault, "{refused}");
    // The late graph finds the pool faulted and changes nothing either.
    graph.launch(s);
    gpu.sync();
    assert_eq!(out_b.download::<i64>(16), vec![0; 16]);
    drop(graph);
    unsafe { pool.clear(s) }.unwrap();
    gpu.sync();
    let _ = pool.check_device(); // the old fault, reported once after the recovery
    pool.check_device().unwrap();
    unsafe { pool.alloc(16, out_c.ptr, 16, s) }.unwrap();
    gpu.sync();
    pool.check_device().unwrap();
    assert_eq!(out_c.download::<i64>(16), pages(1));
}

/// A backup inside a capture (global mode) on a pool with no spare snapshot buffer is
/// refused (`InvalidState`) before anything is allocated or enqueued: the capture ends
/// intact (`Graph::capture` panics otherwise). After a snapshot taken and freed uncaptured,
/// the captured backup reuses its buffer, and what the graph copied restores.
#[test]
#[ignore = "needs a CUDA GPU: run with --ignored on a GPU machine"]
fn a_captured_backup_allocates_nothing() {
    let gpu = Gpu::new(false);
    let s = gpu.stream;
    let [out_a, out_b, out_c] = outputs();
    let mut pool = DevicePool::new(device_config(16)).unwrap();
    // SAFETY (every call below): buffers hold 16 indices and outlive the stream's work.
    unsafe { pool.alloc(16, out_a.ptr, 16, s) }.unwrap();
    let (graph, refused) = Graph::capture(s, || unsafe { pool.backup_state(s) });
    let err = refused.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidState, "{err}");
    assert!(err.message().contains("snapshot's device buffer"), "{err}");
    assert!(err.message().contains("being captured"), "{err}");
    drop(graph);
    drop(unsafe { pool.backup_state(s) }.unwrap()); // its buffer becomes the pool's spare
    let (graph, snapshot) = Graph::capture(s, || unsafe { pool.backup_state(s) });
    let snapshot = snapshot.unwrap();
    graph.launch(s);
    unsafe { pool.alloc(16, out_b.ptr, 16, s) }.unwrap();
    unsafe { pool.restore_state(&snapshot, s) }.unwrap();
    unsafe { pool.alloc(16, out_c.ptr, 16, s) }.unwrap();
    gpu.sync();
    pool.check_device().unwrap();
    assert_eq!(out_a.download::<i64>(16), pages(1));
    assert_eq!(out_b.download::<i64>(16), pages(2));
    assert_eq!(
        out_c.download::<i64>(16),
        pages(2),
        "the restore went back to the state the captured backup copied"
    );
}

/// A pool call that allocates device memory (a first backup's snapshot buffer) on a stream
/// that is not being captured, while this thread captures another stream in global mode
/// (PyTorch's default), leaves that capture intact: the library allocates in relaxed
/// capture mode, as PyTorch's allocator does (in global mode the `cuMemAlloc` would
/// invalidate the capture, and `Graph::capture` would panic).
#[test]
#[ignore = "needs a CUDA GPU: run with --ignored on a GPU machine"]
fn an_allocation_beside_a_capture_leaves_it_intact() {
    let (gpu, side) = (Gpu::new(false), Gpu::new(false));
    let [out] = outputs();
    let mut pool = DevicePool::new(device_config(16)).unwrap();
    let mut captured_pool = DevicePool::new(device_config(16)).unwrap();
    // SAFETY (every call below): the buffer holds 16 indices and outlives the streams' work.
    let (graph, (captured, snapshot)) = Graph::capture(side.stream, || unsafe {
        let captured = captured_pool.alloc(16, out.ptr, 16, side.stream);
        (captured, pool.backup_state(gpu.stream))
    });
    captured.unwrap();
    let snapshot = snapshot.unwrap();
    graph.launch(side.stream);
    side.sync();
    gpu.sync();
    captured_pool.check_device().unwrap();
    pool.check_device().unwrap();
    assert_eq!(out.download::<i64>(16), pages(1));
    drop(snapshot);
}

/// A clear after a captured call whose graph never runs (an abandoned capture) rewrites the
/// state and is not checked: no fault, and the next call starts from an empty pool.
#[test]
#[ignore = "needs a CUDA GPU: run with --ignored on a GPU machine"]
fn a_clear_after_an_unlaunched_capture_is_not_checked() {
    let gpu = Gpu::new(false);
    let s = gpu.stream;
    let [out_a, out_b] = outputs();
    let mut pool = DevicePool::new(device_config(16)).unwrap();
    // SAFETY (every call below): buffers hold 16 indices and outlive the stream's work.
    unsafe { pool.alloc(16, out_a.ptr, 16, s) }.unwrap();
    let (graph, status) = Graph::capture(s, || unsafe { pool.alloc(16, out_b.ptr, 16, s) });
    status.unwrap();
    drop(graph);
    unsafe { pool.clear(s) }.unwrap();
    unsafe { pool.alloc(16, out_a.ptr, 16, s) }.unwrap();
    gpu.sync();
    pool.check_device().unwrap();
    assert_eq!(out_a.download::<i64>(16), pages(1));
}

/// Captured calls whose graphs run once each, in capture order, before the next call: no
/// fault, and the slots of the same calls made uncaptured (fresh pages in call order); later
/// uncaptured calls go on from there.
#[test]
#[ignore = "needs a CUDA GPU: run with --ignored on a GPU machine"]
fn captured_calls_launched_once_in_order_pass() {
    let gpu = Gpu::new(false);
    let s = gpu.stream;
    let outs: [DevBuf; 5] = outputs();
    let mut pool = DevicePool::new(device_config(16)).unwrap();
    for round in 0..2i64 {
        // SAFETY (every call below): buffers hold 16 indices and outlive the stream's work.
        unsafe { pool.alloc(16, outs[0].ptr, 16, s) }.unwrap();
        let (g1, status) = Graph::capture(s, || unsafe { pool.alloc(16, outs[1].ptr, 16, s) });
        status.unwrap();
        let (g2, status) = Graph::capture(s, || unsafe { pool.alloc(16, outs[2].ptr, 16, s) });
        status.unwrap();
        g1.launch(s);
        g2.launch(s);
        unsafe { pool.alloc(16, outs[3].ptr, 16, s) }.unwrap();
        unsafe { pool.alloc(16, outs[4].ptr, 16, s) }.unwrap();
        gpu.sync();
        pool.check_device()
            .unwrap_or_else(|e| panic!("round {round}: {e}"));
        for (i, out) in outs.iter().enumerate() {
            assert_eq!(
                out.download::<i64>(16),
                pages(1 + 5 * round + i as i64),
                "round {round}, call {i}"
            );
        }
    }
}

/// A graph replayed right after its own run would repeat its call on the state before it,
/// handing the same pages out again: the replay faults the pool ("ran a second time"). With
/// `DEBUG_REPLAY_CALLS` (how the benchmarks time calls) it repeats the call exactly: no
/// fault, the same slots, and the next call goes on after them.
#[test]
#[ignore = "needs a CUDA GPU: run with --ignored on a GPU machine"]
fn a_graph_replayed_at_once_faults_unless_replays_are_allowed() {
    let gpu = Gpu::new(false);
    let s = gpu.stream;
    let [out_a, out_c] = outputs();
    let mut pool = DevicePool::new(device_config(16)).unwrap();
    // SAFETY (every call below): buffers hold 16 indices and outlive the stream's work.
    let (g1, status) = Graph::capture(s, || unsafe { pool.alloc(16, out_a.ptr, 16, s) });
    status.unwrap();
    g1.launch(s);
    g1.launch(s);
    gpu.sync();
    let err = pool.check_device().unwrap_err();
    eprintln!("replayed: {err}");
    assert_eq!(err.kind(), ErrorKind::DeviceFault, "{err}");
    assert!(
        err.message().contains("ran a second time")
            && err.message().contains("kvp_pool_alloc_async"),
        "{err}"
    );
    drop(g1);

    let mut pool = DevicePool::new(device_config(16)).unwrap();
    pool.set_debug(DevicePool::DEBUG_REPLAY_CALLS).unwrap();
    let (g1, status) = Graph::capture(s, || unsafe { pool.alloc(16, out_a.ptr, 16, s) });
    status.unwrap();
    for _ in 0..3 {
        g1.launch(s);
    }
    unsafe { pool.alloc(16, out_c.ptr, 16, s) }.unwrap();
    gpu.sync();
    pool.check_device().unwrap();
    assert_eq!(out_a.download::<i64>(16), pages(1));
    assert_eq!(out_c.download::<i64>(16), pages(2));
}

/// Two graphs launched in the wrong order: the first to run finds the state from before
/// the call captured ahead of it and faults the pool; nothing after it changes anything.
/// (An uncaptured call first, so that both cursors hold a state. A call after the graphs
/// may find the fault on the host already, and is then refused.)
#[test]
#[ignore = "needs a CUDA GPU: run with --ignored on a GPU machine"]
fn graphs_launched_out_of_order_fault() {
    let gpu = Gpu::new(false);
    let s = gpu.stream;
    let [out_a, out_b, out_c] = outputs();
    let mut pool = DevicePool::new(device_config(16)).unwrap();
    // SAFETY (every call below): buffers hold 16 indices and outlive the stream's work.
    unsafe { pool.alloc(16, out_c.ptr, 16, s) }.unwrap();
    gpu.sync();
    assert_eq!(out_c.download::<i64>(16), pages(1));
    let (g1, status) = Graph::capture(s, || unsafe { pool.alloc(16, out_a.ptr, 16, s) });
    status.unwrap();
    let (g2, status) = Graph::capture(s, || unsafe { pool.alloc(16, out_b.ptr, 16, s) });
    status.unwrap();
    out_a.upload(&[-7i64; 16]);
    out_b.upload(&[-7i64; 16]);
    g2.launch(s);
    g1.launch(s);
    alloc_after_a_fault(&gpu, &mut pool, &out_c);
    assert_turn_fault(&mut pool, "calls made before it had not all run");
    for (out, name) in [(&out_a, "the first graph"), (&out_b, "the second")] {
        assert_eq!(out.download::<i64>(16), vec![0; 16], "{name} wrote padding");
    }
}

/// A graph launched again after later calls (an engine replaying a captured decode each
/// step): it finds the state the later call left and faults the pool. Without the check it
/// would move the cursor the host no longer reads, and the next call would hand out its
/// pages again.
#[test]
#[ignore = "needs a CUDA GPU: run with --ignored on a GPU machine"]
fn a_graph_launched_after_later_calls_faults() {
    let gpu = Gpu::new(false);
    let s = gpu.stream;
    let [out_a, out_c, out_d] = outputs();
    let mut pool = DevicePool::new(device_config(16)).unwrap();
    // SAFETY (every call below): buffers hold 16 indices and outlive the stream's work.
    let (g1, status) = Graph::capture(s, || unsafe { pool.alloc(16, out_a.ptr, 16, s) });
    status.unwrap();
    g1.launch(s);
    unsafe { pool.alloc(16, out_c.ptr, 16, s) }.unwrap();
    gpu.sync();
    assert_eq!(out_a.download::<i64>(16), pages(1));
    assert_eq!(out_c.download::<i64>(16), pages(2));
    g1.launch(s);
    alloc_after_a_fault(&gpu, &mut pool, &out_d);
    assert_turn_fault(&mut pool, "calls made after it had already run");
    assert_eq!(
        out_a.download::<i64>(16),
        vec![0; 16],
        "the late graph wrote padding"
    );
}

/// A graph captured before a clear and launched after it (and after a call made after the
/// clear): it faults the pool, and the fault blocks the pool although the graph's call was
/// made before the recovery (the fault is recorded as the latest call whose state it found:
/// the host lets faults of calls from before a recovery go).
#[test]
#[ignore = "needs a CUDA GPU: run with --ignored on a GPU machine"]
fn a_graph_launched_after_a_clear_faults_and_blocks_the_pool() {
    let gpu = Gpu::new(false);
    let s = gpu.stream;
    let [out_a, out_b, out_g] = outputs();
    let mut pool = DevicePool::new(device_config(16)).unwrap();
    // SAFETY (every call below): buffers hold 16 indices and outlive the stream's work.
    let (g1, status) = Graph::capture(s, || unsafe { pool.alloc(16, out_g.ptr, 16, s) });
    status.unwrap();
    unsafe { pool.clear(s) }.unwrap();
    unsafe { pool.alloc(16, out_a.ptr, 16, s) }.unwrap();
    g1.launch(s);
    alloc_after_a_fault(&gpu, &mut pool, &out_b);
    assert_eq!(out_a.download::<i64>(16), pages(1));
    assert_eq!(
        out_g.download::<i64>(16),
        vec![0; 16],
        "the stale graph wrote padding"
    );
    assert_turn_fault(&mut pool, "calls made after it had already run");
    assert_turn_fault(&mut pool, "calls made after it had already run");
    let refused = unsafe { pool.alloc(16, out_b.ptr, 16, s) }.unwrap_err();
    assert_eq!(refused.kind(), ErrorKind::DeviceFault, "{refused}");
}

/// On a host pool the option is accepted and ignored; unknown flags are refused with a
/// message; the pending-release count needs no driver. Runs everywhere.
#[test]
fn debug_options_on_a_host_pool_and_without_a_driver() {
    let mut c = kvp_pool_config_default();
    c.size = 64;
    c.page_size = 4;
    let mut pool = null_mut();
    let mut flags = 99;
    let mut out = [0i64; 4];
    let mut count = 99;
    // SAFETY: valid pointers throughout.
    unsafe {
        assert_eq!(kvp_pool_new(&c, &mut pool), kvp_status::Ok);
        assert_eq!(
            kvp_pool_set_debug(pool, kvp_debug::StreamOrder as u32),
            kvp_status::Ok
        );
        assert_eq!(kvp_pool_get_debug(pool, &mut flags), kvp_status::Ok);
        assert_eq!(flags, 0, "a host pool has no debug checks");
        assert_eq!(
            kvp_pool_alloc(pool, 4, out.as_mut_ptr().cast(), 4),
            kvp_status::Ok
        );
        assert_eq!(out, [4, 5, 6, 7]);
        assert_eq!(
            kvp_pool_set_debug(pool, 1 << 5),
            kvp_status::InvalidArgument
        );
        assert!(last_error().contains("unknown kvp_debug flags 0x20"));
        assert_eq!(
            kvp_pool_get_debug(pool, null_mut()),
            kvp_status::NullArgument
        );
        assert_eq!(kvp_pool_set_debug(null_mut(), 1), kvp_status::NullArgument);
        kvp_pool_free(pool);
        assert_eq!(
            kvp_device_pending_releases(null_mut()),
            kvp_status::NullArgument
        );
        assert_eq!(kvp_device_pending_releases(&mut count), kvp_status::Ok);
    }
    if gpu::unavailable().is_some() {
        assert_eq!(count, 0, "no device pool was ever made");
        eprintln!("GPU tests of this file skipped (listed as ignored): no NVIDIA driver");
    }
    // SAFETY: a static NUL-terminated string.
    let text =
        unsafe { std::ffi::CStr::from_ptr(kvp_status_str(kvp_status::UnorderedStreams as i32)) };
    assert!(text.to_str().unwrap().contains("not ordered"), "{text:?}");
}

/// Programmatic dependent launch (sm_90, `DevicePool::programmatic_launch`): a call's
/// kernels may be scheduled while the kernel ahead of them still runs, and must wait for it
/// before touching memory. Behind a kernel that lets its dependents launch at once and only
/// after 2 ms writes the call's device `seq_lens` (extends) or `last_loc` (decodes), whose
/// stale contents (zeros) would fault the call, extends of every plain kernel family and
/// decodes of every size class give the host backend's slots and leave the pool unfaulted;
/// graph-captured, the same. (A kernel without the wait read the zeros: the test fails.)
#[test]
#[ignore = "needs a CUDA GPU: run with --ignored on a GPU machine"]
fn calls_behind_a_programmatic_predecessor_wait_for_its_writes() {
    let gpu = Gpu::new(false);
    let s = gpu.stream;
    let config = PoolConfig {
        size: 1 << 20,
        page_size: 16,
        need_sort: false,
        index_type: IndexType::I64,
        backend: BackendKind::Cuda { ordinal: 0 },
    };
    let mut pool = DevicePool::new(config).unwrap();
    let switched_off =
        std::env::var_os("KVPOOL_PROGRAMMATIC_LAUNCH").is_some_and(|value| value == "0");
    // (sm_90 and later launch clusters; the GPU machines' drivers are past CUDA 12.3.)
    assert_eq!(
        pool.programmatic_launch(),
        gpu.cluster_launch() && !switched_off
    );
    if !pool.programmatic_launch() {
        eprintln!("skipped: this device or environment launches without programmatic launch");
        return;
    }
    let mut host = kvpool::Pool::new(PoolConfig {
        backend: BackendKind::Host,
        ..config
    })
    .unwrap();
    let late = LateCopy::new();
    // (requests, new tokens each): One, FewUpTo, Few, FewBlocks, FewSpread, Pairs, Block64
    // by row / Pairs, Block, Blocks, BlocksWide(512), BlocksWide(1024), Grid.
    let extends: [(usize, i64); 12] = [
        (1, 10),
        (3, 20),
        (20, 25),
        (4, 300),
        (32, 40),
        (40, 1),
        (64, 8),
        (100, 2),
        (200, 6),
        (400, 2),
        (900, 1),
        (1500, 1),
    ];
    // Decodes after an extend of one token each: one, a block, the clusters, the ticketed
    // kernel.
    let decodes = [1usize, 20, 300, 1500, 5000];
    let shapes = extends
        .iter()
        .map(|&(batch, per)| (batch, per, false))
        .chain(decodes.iter().map(|&batch| (batch, 1, true)));
    for (batch, per, decode) in shapes {
        for captured in [false, true] {
            let what = format!(
                "{} of {batch} x {per}{}",
                if decode { "decode" } else { "extend" },
                if captured { ", captured" } else { "" }
            );
            unsafe { pool.clear(s) }.unwrap();
            host.clear();
            let prefix = vec![0i64; batch];
            let seq = vec![per; batch];
            let tokens = batch * per as usize;
            let mut want = vec![0i64; tokens];
            host.alloc_extend(&prefix, &seq, &vec![-1i64; batch], tokens as u64, &mut want)
                .unwrap();
            let d_prefix = gpu::upload(&prefix);
            let staged_seq = gpu::upload(&seq);
            let d_seq = gpu::upload(&vec![0i64; batch]); // stale until the late copy
            let d_last = gpu::upload(&vec![-1i64; batch]);
            let out = DevBuf::new(8 * tokens);
            let extend = |pool: &mut DevicePool| {
                // SAFETY: the buffers hold the batch and `tokens` indices and outlive the
                // stream's work (synchronized below).
                unsafe {
                    pool.alloc_extend(
                        &prefix,
                        &seq,
                        d_prefix.ptr,
                        d_seq.ptr,
                        d_last.ptr,
                        tokens as u64,
                        out.ptr,
                        tokens,
                        s,
                    )
                }
            };
            if decode {
                // The extend on time; the decode behind the late copy of last_loc.
                d_seq.upload(&seq);
                extend(&mut pool).unwrap();
                gpu.sync();
                assert_eq!(out.download::<i64>(tokens), want, "{what}: setup");
                let seq1: Vec<i64> = seq.iter().map(|&l| l + 1).collect();
                let last: Vec<i64> = want.clone(); // one token each: its slot is last_loc
                let mut want1 = vec![0i64; batch];
                host.alloc_decode(&seq1, &last, &mut want1).unwrap();
                let d_seq1 = gpu::upload(&seq1);
                let staged_last = gpu::upload(&last);
                let d_last1 = gpu::upload(&vec![0i64; batch]); // stale: slot 0 is refused
                let out1 = DevBuf::new(8 * batch);
                let decode_call = |pool: &mut DevicePool| {
                    // SAFETY: as above, `batch` indices.
                    unsafe { pool.alloc_decode(&seq1, d_seq1.ptr, d_last1.ptr, out1.ptr, batch, s) }
                };
                behind_late_copy(&gpu, &late, [&staged_last, &d_last1], captured, || {
                    decode_call(&mut pool)
                });
                pool.check_device()
                    .unwrap_or_else(|e| panic!("{what}: {e}"));
                assert_eq!(out1.download::<i64>(batch), want1, "{what}");
            } else {
                behind_late_copy(&gpu, &late, [&staged_seq, &d_seq], captured, || {
                    extend(&mut pool)
                });
                pool.check_device()
                    .unwrap_or_else(|e| panic!("{what}: {e}"));
                assert_eq!(out.download::<i64>(tokens), want, "{what}");
            }
        }
    }
}

/// Enqueues `call` on `gpu`'s stream behind a late copy of `bufs[0]` into `bufs[1]` (the
/// words of the call's batch, 2 ms after the copy kernel lets its dependents launch), both
/// captured into one graph launched once if `captured`; then drains the stream.
fn behind_late_copy(
    gpu: &Gpu,
    late: &LateCopy,
    bufs: [&DevBuf; 2],
    captured: bool,
    call: impl FnOnce() -> Result<(), kvpool::PoolError>,
) {
    const LATE_NS: u64 = 2_000_000;
    let s = gpu.stream;
    let words = (bufs[1].bytes / 8) as u64;
    if captured {
        let (graph, status) = Graph::capture(s, || {
            late.launch(s, bufs[0], bufs[1], words, LATE_NS);
            call()
        });
        status.unwrap();
        graph.launch(s);
    } else {
        late.launch(s, bufs[0], bufs[1], words, LATE_NS);
        call().unwrap();
    }
    gpu.sync();
}
