//! Device-pool behaviour that is not index math: creation without a driver, the backend
//! checks at the C ABI, foreign streams, counts while a free is in flight, and the proof
//! that no call waits for the GPU. The GPU tests are `#[ignore]`d on CPU machines (run them
//! with `cargo test --release --test cuda_device -- --ignored`).

mod gpu;
mod rng;

use std::ptr::{null, null_mut};
use std::time::{Duration, Instant};

use kvpool::cuda::{DevicePool, DeviceSnapshot};
use kvpool::ffi::*;
use kvpool::{BackendKind, ErrorKind, IndexType, Pool, PoolConfig};

use gpu::{page_words_on_device, DevBuf, Event, Gpu, Graph, PoolImage, Spinner};

fn config(backend: BackendKind, ps: u32) -> PoolConfig {
    PoolConfig {
        size: 4096 * u64::from(ps),
        page_size: ps,
        need_sort: false,
        index_type: IndexType::I64,
        backend,
    }
}

const CUDA0: BackendKind = BackendKind::Cuda { ordinal: 0 };

#[test]
fn creating_a_device_pool_needs_a_driver_and_never_crashes() {
    match gpu::unavailable() {
        Some(_) => {
            let err = DevicePool::new(config(CUDA0, 16)).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::CudaUnavailable, "{err}");
            // The same through the C ABI.
            let mut c = kvp_pool_config_default();
            c.size = 1024;
            c.backend = kvp_backend::Cuda as u32;
            let mut pool = null_mut();
            // SAFETY: valid pointers.
            let status = unsafe { kvp_pool_new(&c, &mut pool) };
            assert_eq!(status, kvp_status::CudaUnavailable);
            assert!(pool.is_null());
        }
        None => {
            let pool = DevicePool::new(config(CUDA0, 16)).unwrap();
            assert_eq!(pool.available_size(), 4096 * 16);
            let err = DevicePool::new(config(BackendKind::Cuda { ordinal: 999 }, 16)).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::CudaUnavailable, "{err}");
        }
    }
}

#[test]
fn async_calls_on_a_host_pool_are_refused() {
    let mut c = kvp_pool_config_default();
    c.size = 1024;
    c.page_size = 16;
    let mut pool = null_mut();
    // SAFETY: valid pointers throughout; NULL device pointers with length 0 are allowed.
    unsafe {
        assert_eq!(kvp_pool_new(&c, &mut pool), kvp_status::Ok);
        assert_eq!(
            kvp_pool_alloc_async(pool, 0, null_mut(), 0, null_mut()),
            kvp_status::WrongBackend
        );
        assert_eq!(
            kvp_pool_free_indices_async(pool, null(), 0, null_mut()),
            kvp_status::WrongBackend
        );
        assert_eq!(kvp_pool_check_device(pool), kvp_status::WrongBackend);
        let mut available = 0;
        assert_eq!(
            kvp_pool_available_size(pool, &mut available),
            kvp_status::Ok
        );
        assert_eq!(available, 1024);
        kvp_pool_free(pool);
    }
}

#[test]
#[ignore = "needs a CUDA GPU: run with --ignored on a GPU machine"]
fn host_calls_on_a_device_pool_are_refused() {
    let mut c = kvp_pool_config_default();
    c.size = 1024;
    c.backend = kvp_backend::Cuda as u32;
    let mut pool = null_mut();
    let mut out = [0i64; 4];
    // SAFETY: valid pointers.
    unsafe {
        assert_eq!(kvp_pool_new(&c, &mut pool), kvp_status::Ok);
        assert_eq!(
            kvp_pool_alloc(pool, 4, out.as_mut_ptr().cast(), 4),
            kvp_status::WrongBackend
        );
        let mut info = kvp_pool_info::default();
        assert_eq!(kvp_pool_get_info(pool, &mut info), kvp_status::Ok);
        assert_eq!(info.backend, kvp_backend::Cuda as u32);
        assert_eq!(info.device, 0);
        assert_eq!(kvp_pool_check_device(pool), kvp_status::Ok);
        kvp_pool_free(pool);
    }
}

#[test]
#[ignore = "needs a CUDA GPU: run with --ignored on a GPU machine"]
fn a_stream_of_another_context_is_rejected() {
    let gpu = Gpu::new(false);
    let mut pool = DevicePool::new(config(CUDA0, 16)).unwrap();
    let out = DevBuf::new(16 * 8);
    // A stream of a second (non-primary) context on the same device.
    let mut device = 0;
    let mut other = null_mut();
    let mut stream = null_mut();
    use cudarc::driver::sys;
    // SAFETY: plain driver calls with valid out-pointers.
    unsafe {
        assert_eq!(
            sys::cuDeviceGet(&mut device, 0),
            sys::CUresult::CUDA_SUCCESS
        );
        let mut params: sys::CUctxCreateParams = std::mem::zeroed();
        let created = sys::cuCtxCreate_v4(&mut other, &mut params, 0, device);
        assert_eq!(created, sys::CUresult::CUDA_SUCCESS);
        assert_eq!(
            sys::cuStreamCreate(&mut stream, 1),
            sys::CUresult::CUDA_SUCCESS
        );
    }
    // SAFETY: `out` holds 16 indices.
    let err = unsafe { pool.alloc(16, out.ptr, 16, stream) }.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::WrongStream, "{err}");
    assert_eq!(
        pool.available_size(),
        4096 * 16,
        "a refused call changes nothing"
    );
    // SAFETY: created above.
    unsafe {
        sys::cuStreamDestroy_v2(stream);
        sys::cuCtxDestroy_v2(other);
    }
    // The pool's own stream still works.
    // SAFETY: as above.
    unsafe { pool.alloc(16, out.ptr, 16, gpu.stream) }.unwrap();
    gpu.sync();
    assert_eq!(out.download::<i64>(16), (16..32).collect::<Vec<i64>>());
}

/// Every device call returns while a one-second kernel is still running on the stream:
/// none of them waits for the GPU. Afterwards the results are checked against a host pool.
#[test]
#[ignore = "needs a CUDA GPU: run with --ignored on a GPU machine"]
fn no_call_waits_for_the_stream() {
    let gpu = Gpu::new(false);
    let spinner = Spinner::new();
    for ps in [1u32, 16] {
        let mut device = DevicePool::new(PoolConfig {
            need_sort: ps == 16,
            ..config(CUDA0, ps)
        })
        .unwrap();
        let mut host = Pool::new(PoolConfig {
            need_sort: ps == 16,
            ..config(BackendKind::Host, ps)
        })
        .unwrap();
        let p = i64::from(ps);
        let prefix = [0i64, 0];
        let seq = [3 * p, p + 1];
        let last = [-1i64, -1];
        let page_ids = DevBuf::new(8);
        let digest = DevBuf::new(8);
        page_ids.upload(&[6i64]); // alloc's first page: extend takes 1..=5 (ps 16) or slots 1..=5
        let (a, b, c, out, out2, out3) = (
            DevBuf::new(64),
            DevBuf::new(64),
            DevBuf::new(64),
            DevBuf::new(8 * 4096),
            DevBuf::new(8 * 4096),
            DevBuf::new(8 * 4096),
        );
        a.upload(&prefix);
        b.upload(&seq);
        c.upload(&last);
        let total = (seq[0] + seq[1]) as u64;

        spinner.launch(gpu.stream, 1_000_000_000);
        let spin_done = Event::record(gpu.stream);
        let started = Instant::now();
        // SAFETY: buffers sized above, alive until the end of the test (after a sync).
        unsafe {
            device
                .alloc_extend(
                    &prefix, &seq, a.ptr, b.ptr, c.ptr, total, out.ptr, 4096, gpu.stream,
                )
                .unwrap();
            device
                .alloc(4 * ps as usize, out2.ptr, 4096, gpu.stream)
                .unwrap();
            let snapshot = device.backup_state(gpu.stream).unwrap();
            device.free_group_begin().unwrap();
            device.free(out2.ptr, 4 * ps as usize, gpu.stream).unwrap();
            device.free_group_end(gpu.stream).unwrap();
            device.merge_and_sort_free(gpu.stream).unwrap();
            device.restore_state(&snapshot, gpu.stream).unwrap();
            device
                .free_segment(out.ptr, total as usize, 0, 3 * ps as usize, gpu.stream)
                .unwrap();
            device.free_pages(page_ids.ptr, 1, gpu.stream).unwrap();
            device.check_device().unwrap();
            let _ = device.available_size_bound();
            device.clear(gpu.stream).unwrap();
            device
                .alloc(2 * ps as usize, out3.ptr, 4096, gpu.stream)
                .unwrap();
            device.digest_async(digest.ptr, gpu.stream).unwrap();
        }
        let elapsed = started.elapsed();
        assert!(
            !spin_done.done(),
            "the one-second kernel finished before the kvpool calls returned: something waited"
        );
        assert!(
            elapsed < Duration::from_millis(500),
            "kvpool calls took {elapsed:?}"
        );
        eprintln!(
            "page_size {ps}: 14 device calls returned in {elapsed:?} while the stream was busy"
        );
        gpu.sync();
        device.check_device().unwrap();
        // After the clear, the last alloc got the first pages, like a fresh host pool.
        let mut expected = vec![0i64; 2 * ps as usize];
        host.alloc(2 * ps as usize, &mut expected).unwrap();
        assert_eq!(out3.download::<i64>(2 * ps as usize), expected);
        // The digest enqueued last saw the state after that alloc: the host pool's.
        assert_eq!(digest.download::<u64>(1)[0], host.digest(), "state digest");
    }
}

/// A paged free by index is counted once the stream has passed it, with no sync by kvpool.
#[test]
#[ignore = "needs a CUDA GPU: run with --ignored on a GPU machine"]
fn a_paged_free_by_index_counts_once_the_stream_passes_it() {
    let gpu = Gpu::new(false);
    let spinner = Spinner::new();
    let mut device = DevicePool::new(config(CUDA0, 16)).unwrap();
    let out = DevBuf::new(8 * 64);
    // SAFETY: `out` holds 64 indices.
    unsafe { device.alloc(64, out.ptr, 64, gpu.stream) }.unwrap();
    assert_eq!(device.available_size_bound(), (4092 * 16, true));
    spinner.launch(gpu.stream, 300_000_000);
    // SAFETY: as above.
    unsafe { device.free(out.ptr, 64, gpu.stream) }.unwrap();
    let (bound, exact) = device.available_size_bound();
    assert_eq!(
        (bound, exact),
        (4092 * 16, false),
        "in flight: a lower bound"
    );
    gpu.sync();
    assert_eq!(device.available_size_bound(), (4096 * 16, true));
}

/// A double free found by the kernel: the call itself succeeds (it was enqueued), the next
/// call and `check_device` report it, nothing changed, and `clear` recovers.
#[test]
#[ignore = "needs a CUDA GPU: run with --ignored on a GPU machine"]
fn a_device_detected_double_free_faults_the_pool_until_cleared() {
    let gpu = Gpu::new(false);
    let mut device = DevicePool::new(config(CUDA0, 16)).unwrap();
    let out = DevBuf::new(8 * 64);
    // SAFETY: `out` holds 64 indices.
    unsafe {
        device.alloc(32, out.ptr, 64, gpu.stream).unwrap();
        device.free(out.ptr, 32, gpu.stream).unwrap();
        device.free(out.ptr, 32, gpu.stream).unwrap(); // the double free: enqueued fine
    }
    gpu.sync();
    let err = device.check_device().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::DeviceFault);
    assert!(err.message().contains("already free"), "{err}");
    assert_eq!(device.fault().unwrap().kind, ErrorKind::DoubleFree);
    // Later calls are refused; the free list is intact (the first free went through).
    // SAFETY: as above.
    let refused = unsafe { device.alloc(16, out.ptr, 64, gpu.stream) }.unwrap_err();
    assert_eq!(refused.kind(), ErrorKind::DeviceFault);
    assert_eq!(device.available_size_bound(), (4096 * 16, true));
    unsafe { device.clear(gpu.stream) }.unwrap();
    gpu.sync();
    // SAFETY: as above.
    unsafe { device.alloc(16, out.ptr, 64, gpu.stream) }.unwrap();
    gpu.sync();
    assert_eq!(out.download::<i64>(16), (16..32).collect::<Vec<i64>>());
}

/// A free naming more pages than are allocated (some of them free or staged: it must fail)
/// changes nothing (`PoolImage`). The known-count free kernel puts each page it takes in its
/// place before the verdict; before the fix, such a release's places ran into the ring's
/// free run (the next free pages' ids overwritten by an allocated page's, which a later call
/// would hand out again) or past the staged buffer. Three destinations: the ring's front (a
/// paged pool), its tail (the token pool), the staged pages (need_sort); the allocated pages
/// named where their places overlap the live entries. Both kernels that share the fix: page
/// ids and token-pool slots (`kvp_free_known_*`), and the ring's front once more through a
/// segment (`kvp_free_segment_*`).
#[test]
#[ignore = "needs a CUDA GPU: run with --ignored on a GPU machine"]
fn a_free_of_more_pages_than_are_allocated_changes_nothing() {
    let gpu = Gpu::new(false);
    for (ps, need_sort, segment) in [
        (16u32, false, false),
        (1, false, false),
        (16, true, false),
        (16, false, true),
    ] {
        let what = format!("page size {ps}, need_sort {need_sort}, segment {segment}");
        let mut device = DevicePool::new(PoolConfig {
            size: 64 * u64::from(ps),
            need_sort,
            ..config(CUDA0, ps)
        })
        .unwrap();
        let layout = device.debug_layout();
        let n = layout.num_pages as usize;
        // (A write past the staged buffer then lands in the page map, which the image reads.)
        assert_eq!(layout.state, layout.staged + 4 * n, "{what}");
        let out = DevBuf::new(8 * n * ps as usize);
        // Pages allocated: two; need_sort: all, then two freed (to the staged buffer).
        let taken = if need_sort { n } else { 2 };
        let slots = taken * ps as usize;
        // SAFETY: `out` holds every slot of the pool; synchronized below.
        unsafe { device.alloc(slots, out.ptr, slots, gpu.stream) }.unwrap();
        gpu.sync();
        let pages: Vec<i64> = out
            .download::<i64>(slots)
            .iter()
            .step_by(ps as usize)
            .map(|&slot| slot / i64::from(ps))
            .collect();
        let (staged, allocated) = pages.split_at(if need_sort { 2 } else { 0 });
        // (A segment names every slot of its pages.)
        let ids = DevBuf::new(8 * n * ps as usize);
        if need_sort {
            ids.upload(staged);
            // SAFETY: `ids` holds the two page ids.
            unsafe { device.free_pages(ids.ptr, 2, gpu.stream) }.unwrap();
            // Before `ids` is overwritten: the upload below is not ordered with this
            // non-blocking stream, whose kernel may not have read the two ids yet.
            gpu.sync();
        }
        // Every page once. Front: the allocated ones first (their places are the ring's
        // first free positions); tail and staged: last (past the free run, the buffer).
        let others: Vec<i64> = (1..=n as i64).filter(|p| !allocated.contains(p)).collect();
        let named: Vec<i64> = if ps > 1 && !need_sort {
            allocated.iter().chain(&others).copied().collect()
        } else {
            others.iter().chain(allocated).copied().collect()
        };
        let row_len = n * ps as usize;
        if segment {
            // The pages' slots in that order, each page's consecutive from its first.
            let ps = i64::from(ps);
            let row: Vec<i64> = named
                .iter()
                .flat_map(|&page| (0..ps).map(move |j| page * ps + j))
                .collect();
            ids.upload(&row);
        } else {
            ids.upload(&named);
        }
        gpu.sync();
        let before = PoolImage::of(&device);
        let backup = unsafe { device.backup_state(gpu.stream) }.unwrap();
        // SAFETY: `ids` holds `n` ids (slots of the token pool), or the segment's `row_len`
        // slots; synchronized below.
        unsafe {
            if segment {
                device.free_segment(ids.ptr, row_len, 0, row_len, gpu.stream)
            } else if ps > 1 {
                device.free_pages(ids.ptr, n, gpu.stream)
            } else {
                device.free(ids.ptr, n, gpu.stream)
            }
        }
        .unwrap();
        gpu.sync();
        let fault = device
            .fault()
            .unwrap_or_else(|| panic!("{what}: the free was accepted"));
        eprintln!("{what}: {fault:?}");
        if let Some(change) = before.difference(&PoolImage::of(&device)) {
            panic!("{what}: the refused free changed the pool: {change}");
        }
        unsafe { device.restore_state(&backup, gpu.stream) }.unwrap();
        gpu.sync();
    }
}

/// A fault inside an open free group can be recovered by a restore: the group's end is
/// refused like any work on a faulted pool, and the restore abandons the group (it was
/// refused while a group was open, which left only a clear, dropping every request).
#[test]
#[ignore = "needs a CUDA GPU: run with --ignored on a GPU machine"]
fn a_restore_recovers_a_fault_inside_an_open_free_group() {
    let gpu = Gpu::new(false);
    let mut device = DevicePool::new(config(CUDA0, 16)).unwrap();
    let out = DevBuf::new(8 * 64);
    let ids = DevBuf::new(8 * 2);
    // SAFETY: `out` holds 64 slots, `ids` two page ids; synchronized below.
    unsafe {
        device.alloc(64, out.ptr, 64, gpu.stream).unwrap();
        gpu.sync();
        let before = PoolImage::of(&device);
        let snapshot = device.backup_state(gpu.stream).unwrap();
        let pages: Vec<i64> = out
            .download::<i64>(64)
            .iter()
            .step_by(16)
            .map(|s| s / 16)
            .collect();
        device.free_group_begin().unwrap();
        ids.upload(&[pages[0], pages[0]]); // the same page twice: refused on the device
        device.free_pages(ids.ptr, 2, gpu.stream).unwrap();
        gpu.sync();
        assert!(device.fault().is_some(), "the double free must fault");
        let refused = device.free_group_end(gpu.stream).unwrap_err();
        assert_eq!(refused.kind(), ErrorKind::DeviceFault, "{refused}");
        device.restore_state(&snapshot, gpu.stream).unwrap();
        gpu.sync();
        assert_eq!(kind_of(device.check_device()), Err(ErrorKind::DeviceFault));
        assert_eq!(kind_of(device.check_device()), Ok(()));
        if let Some(change) = before.difference(&PoolImage::of(&device)) {
            panic!("the restore did not give back the snapshot's state: {change}");
        }
        // The group is closed: a new one opens.
        device.free_group_begin().unwrap();
        ids.upload(&[pages[1]]);
        device.free_pages(ids.ptr, 1, gpu.stream).unwrap();
        device.free_group_end(gpu.stream).unwrap();
        gpu.sync();
        assert!(device.fault().is_none(), "{:?}", device.fault());
        assert_eq!(device.available_size_bound(), (4096 * 16 - 48, true));
    }
}

/// A backup enqueued after a call the device refused, before the host saw the fault, holds
/// a state no one planned (the refused call's counts on the host, an ended free group's
/// pages still pending on the device): its restore changes nothing and faults the pool
/// again, naming the snapshot, where it had cleared the fault and let every call go on.
#[test]
#[ignore = "needs a CUDA GPU: run with --ignored on a GPU machine"]
fn a_snapshot_taken_while_faulted_is_not_restored() {
    let gpu = Gpu::new(false);
    let mut device = DevicePool::new(config(CUDA0, 16)).unwrap();
    let out = DevBuf::new(8 * 64);
    let ids = DevBuf::new(8 * 2);
    // SAFETY: `out` holds 64 slots, `ids` two page ids; synchronized below.
    unsafe {
        device.alloc(64, out.ptr, 64, gpu.stream).unwrap();
        gpu.sync();
        let good = device.backup_state(gpu.stream).unwrap();
        let page = out.download::<i64>(1)[0] / 16;
        ids.upload(&[page, page]);
        // Hold the stream, so that the host enqueues the backup before the fault is seen
        // (one second: under a sanitizer the free's first launch may take a while to enqueue).
        let spinner = Spinner::new();
        spinner.launch(gpu.stream, 1_000_000_000);
        device.free_pages(ids.ptr, 2, gpu.stream).unwrap(); // refused on the device
        let poisoned = device.backup_state(gpu.stream).unwrap();
        gpu.sync();
        assert!(device.fault().is_some(), "the double free must fault");
        device.clear(gpu.stream).unwrap();
        gpu.sync();
        assert_eq!(kind_of(device.check_device()), Err(ErrorKind::DeviceFault));
        assert_eq!(kind_of(device.check_device()), Ok(()));
        let cleared = PoolImage::of(&device);
        device.restore_state(&poisoned, gpu.stream).unwrap();
        gpu.sync();
        let fault = device.fault().expect("restoring it must fault the pool");
        assert_eq!(fault.kind, ErrorKind::InvalidState, "{fault:?}");
        assert!(
            fault.message.contains("taken while the pool was faulted"),
            "{fault:?}"
        );
        if let Some(change) = cleared.difference(&PoolImage::of(&device)) {
            panic!("the refused restore changed the pool: {change}");
        }
        let refused = device.alloc(16, out.ptr, 64, gpu.stream).unwrap_err();
        assert_eq!(refused.kind(), ErrorKind::DeviceFault, "{refused}");
        // A snapshot from before the faulting call recovers it.
        device.restore_state(&good, gpu.stream).unwrap();
        gpu.sync();
        assert_eq!(kind_of(device.check_device()), Err(ErrorKind::DeviceFault));
        assert_eq!(kind_of(device.check_device()), Ok(()));
        assert_eq!(device.available_size_bound(), (4096 * 16 - 64, true));
    }
}

/// A call whose kernels were only partly enqueued (a launch after its first failed; here
/// made to fail by `debug_fail_launch`) blocks the pool until a restore or clear. Its queued
/// kernels run: an extend by row of 2,049 requests (gather, extend, scatter) whose scatter
/// fails has taken its pages and moved the cursor the host did not flip to, so the next call
/// would have read the old cursor and handed the same pages out again; a paged free of more
/// than `SORT_CAP` indices (claim, release) whose release fails leaves its pages claimed.
#[test]
#[ignore = "needs a CUDA GPU: run with --ignored on a GPU machine"]
fn a_call_only_partly_enqueued_blocks_the_pool_until_recovered() {
    let gpu = Gpu::new(false);
    let pages = 8192usize;
    let mut device = DevicePool::new(PoolConfig {
        size: pages as u64 * 16,
        ..config(CUDA0, 16)
    })
    .unwrap();
    let out = DevBuf::new(8 * pages * 16);
    let assert_blocked = |device: &mut DevicePool, what: &str| {
        // SAFETY: `out` holds every slot of the pool.
        for refused in [
            unsafe { device.alloc(16, out.ptr, 16, gpu.stream) }.unwrap_err(),
            unsafe { device.backup_state(gpu.stream) }
                .map(|_| ())
                .unwrap_err(),
            device.check_device().unwrap_err(),
        ] {
            assert_eq!(refused.kind(), ErrorKind::CudaError, "{what}: {refused}");
            assert!(
                refused.message().contains("refuses work"),
                "{what}: {refused}"
            );
        }
    };

    // The extend by row: restored.
    let rows = NewRows::new(&device, 2049);
    let batch = rows.batch;
    gpu.sync();
    let before = PoolImage::of(&device);
    // SAFETY: the buffers hold what the calls say; synchronized below.
    unsafe {
        let snapshot = device.backup_state(gpu.stream).unwrap();
        device.debug_fail_launch(2);
        let err = rows.extend(&mut device, gpu.stream).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::CudaError, "{err}");
        assert!(
            err.message().contains("enqueued 2 of its 3 kernels"),
            "{err}"
        );
        gpu.sync();
        assert_eq!(
            allocated_pages_on_device(&device),
            batch,
            "the queued extend kernel took its pages"
        );
        assert_blocked(&mut device, "extend by row");
        device.restore_state(&snapshot, gpu.stream).unwrap();
        gpu.sync();
        assert_eq!(kind_of(device.check_device()), Ok(()));
        if let Some(change) = before.difference(&PoolImage::of(&device)) {
            panic!("the restore did not give back the snapshot's state: {change}");
        }
    }

    // The free by index: cleared. Every page allocated, then all freed in one call.
    let slots = pages * 16;
    // SAFETY: `out` holds every slot; synchronized below.
    unsafe {
        device.alloc(slots, out.ptr, slots, gpu.stream).unwrap();
        device.debug_fail_launch(1);
        let err = device.free(out.ptr, slots, gpu.stream).unwrap_err();
        assert!(
            err.message().contains("enqueued 1 of its 2 kernels"),
            "{err}"
        );
        gpu.sync();
        assert_eq!(
            allocated_pages_on_device(&device),
            0,
            "the queued claim kernel claimed every page"
        );
        assert_blocked(&mut device, "free by index");
        device.clear(gpu.stream).unwrap();
        // Every page once more, each once.
        device.alloc(slots, out.ptr, slots, gpu.stream).unwrap();
        gpu.sync();
    }
    assert_eq!(kind_of(device.check_device()), Ok(()));
    let mut got: Vec<i64> = out.download(slots);
    got.sort_unstable();
    assert_eq!(got, (16..16 * (pages as i64 + 1)).collect::<Vec<_>>());
}

/// A reservation whose plain decodes would merge staged frees at a later step is three
/// calls: reserve the steps before the merge, the merge, reserve the rest. When the first is
/// enqueued and a later one fails, the first's pages are held by a reservation no handle
/// names: the pool refuses work until a clear. A failure of the first changes nothing.
#[test]
#[ignore = "needs a CUDA GPU: run with --ignored on a GPU machine"]
fn a_reservation_only_partly_enqueued_blocks_the_pool_until_recovered() {
    let gpu = Gpu::new(false);
    let s = gpu.stream;
    let cfg = PoolConfig {
        size: 64,
        need_sort: true,
        ..config(CUDA0, 1)
    };
    let (lens, last) = ([1i64; 4], [1i64, 2, 3, 4]);
    let (lens_d, last_d) = (DevBuf::new(32), DevBuf::new(32));
    lens_d.upload(&lens);
    last_d.upload(&last);
    let (out, filler) = (DevBuf::new(64 * 8), DevBuf::new(64 * 8));
    for fail in 0..3u32 {
        let mut device = DevicePool::new(cfg).unwrap();
        // SAFETY (every call below): the buffers hold what the calls say; synchronized
        // before they are read or dropped.
        unsafe {
            // Four one-token requests (slots 1-4), then all but 5 pages taken and 8 of those
            // freed (staged): step 1 takes 4 of the 5 free pages, step 2 merges.
            device.alloc(4, out.ptr, 4, s).unwrap();
            device.alloc(55, filler.ptr, 55, s).unwrap();
            device.free(filler.ptr, 8, s).unwrap();
        }
        gpu.sync();
        assert_eq!(out.download::<i64>(4), last.to_vec());
        let before = PoolImage::of(&device);
        let merges = device.stats().merges;
        device.debug_fail_call(fail);
        // SAFETY: as above.
        let err = unsafe { device.reserve_decode(&lens, lens_d.ptr, last_d.ptr, 3, s) }
            .map(|_| ())
            .unwrap_err();
        gpu.sync();
        eprintln!("failing call {fail}: {err}");
        assert_eq!(err.kind(), ErrorKind::CudaError, "{err}");
        if fail == 0 {
            assert!(!err.message().contains("refuses work"), "{err}");
            if let Some(change) = before.difference(&PoolImage::of(&device)) {
                panic!("a reservation refused at its first launch changed the pool: {change}");
            }
            assert_eq!(device.stats().merges, merges);
            assert_eq!(kind_of(device.check_device()), Ok(()));
        } else {
            assert!(
                err.message()
                    .contains(&format!("enqueued {fail} of its 3 calls"))
                    && err.message().contains("refuses work"),
                "{err}"
            );
            for refused in [
                unsafe { device.alloc(1, out.ptr, 1, s) }.unwrap_err(),
                device.check_device().unwrap_err(),
            ] {
                assert_eq!(refused.kind(), ErrorKind::CudaError, "{refused}");
                assert!(refused.message().contains("refuses work"), "{refused}");
            }
            // SAFETY: as above.
            unsafe { device.clear(s) }.unwrap();
            gpu.sync();
            assert_eq!(kind_of(device.check_device()), Ok(()));
            continue;
        }
        // Unbroken: the same reservation goes through, merging once.
        // SAFETY: as above.
        let res = unsafe { device.reserve_decode(&lens, lens_d.ptr, last_d.ptr, 3, s) }.unwrap();
        gpu.sync();
        assert_eq!(kind_of(device.check_device()), Ok(()));
        assert_eq!(device.stats().merges, merges + 1);
        device.release_reservation(res);
    }
}

/// Takes (nearly) all free device memory, in chunks down to 512 bytes; returns them.
fn exhaust_device_memory() -> Vec<u64> {
    let mut held = Vec::new();
    let mut chunk = 1usize << 36;
    while chunk >= 512 {
        let mut ptr = 0;
        // SAFETY: a valid out-pointer; the context is current (Gpu::new).
        match unsafe { cudarc::driver::sys::cuMemAlloc_v2(&mut ptr, chunk) } {
            cudarc::driver::sys::CUresult::CUDA_SUCCESS => held.push(ptr),
            _ => chunk /= 2,
        }
    }
    held
}

/// A by-row extend whose kernels need scratch (the gather/scatter shape, past 2,048
/// requests) on a `need_sort` pool with staged pages and too few free: the merge it needs is
/// enqueued only after the scratch is allocated, so a call refused for its scratch
/// (device memory used up) has made no merge and changed nothing. The same call then
/// succeeds with the memory back.
#[test]
#[ignore = "needs a CUDA GPU: run with --ignored on a GPU machine"]
fn a_by_row_call_refused_for_its_scratch_makes_no_merge() {
    let gpu = Gpu::new(false);
    let s = gpu.stream;
    let pages = 8192usize;
    let mut device = DevicePool::new(PoolConfig {
        size: pages as u64 * 16,
        need_sort: true,
        ..config(CUDA0, 16)
    })
    .unwrap();
    let rows = NewRows::new(&device, 2049);
    let filler = DevBuf::new(8 * pages * 16);
    let taken = (pages - 1000) * 16;
    // SAFETY (every call below): the buffers hold what the calls say; synchronized before
    // they are read or dropped.
    unsafe {
        device.alloc(taken, filler.ptr, taken, s).unwrap();
        device.free(filler.ptr, 3000 * 16, s).unwrap(); // staged
    }
    gpu.sync();
    let before = PoolImage::of(&device);
    let merges = device.stats().merges;
    let held = exhaust_device_memory();
    // SAFETY: as above.
    let refused = unsafe { rows.extend(&mut device, s) };
    for ptr in held {
        // SAFETY: allocated above, used by nothing.
        unsafe { cudarc::driver::sys::cuMemFree_v2(ptr) };
    }
    let err = refused.unwrap_err();
    eprintln!("with device memory used up: {err}");
    gpu.sync();
    assert_eq!(device.stats().merges, merges, "the refused call merged");
    if let Some(change) = before.difference(&PoolImage::of(&device)) {
        panic!("the refused call changed the pool: {change}");
    }
    assert_eq!(kind_of(device.check_device()), Ok(()));
    // SAFETY: as above.
    unsafe { rows.extend(&mut device, s) }.unwrap();
    gpu.sync();
    assert_eq!(kind_of(device.check_device()), Ok(()));
    assert_eq!(device.stats().merges, merges + 1);
    assert_eq!(
        allocated_pages_on_device(&device),
        pages - 1000 - 3000 + rows.batch
    );
}

/// `batch` new requests of one token each on rows `0..batch` of a fresh table: a by-row
/// extend on the gather/scatter shape (past 2,048 requests: scratch and three kernels).
struct NewRows {
    batch: usize,
    table: DeviceRows,
    prefix: Vec<i64>,
    seq: Vec<i64>,
    prefix_d: DevBuf,
    seq_d: DevBuf,
    rows_d: DevBuf,
}

impl NewRows {
    fn new(device: &DevicePool, batch: usize) -> Self {
        let kernel = device.debug_extend_kernel(true, batch, false, batch as u64, batch as u64);
        assert_eq!(family(&kernel), "Grid", "{kernel}");
        let (prefix_d, seq_d, rows_d) = DevBuf::lengths(batch);
        let (prefix, seq) = (vec![0i64; batch], vec![1i64; batch]);
        rows_d.upload(&(0..batch as i64).collect::<Vec<_>>());
        prefix_d.upload(&prefix);
        seq_d.upload(&seq);
        Self {
            batch,
            table: DeviceRows::new(batch, 16),
            prefix,
            seq,
            prefix_d,
            seq_d,
            rows_d,
        }
    }

    /// Enqueues the extend (no `out`: the table takes the slots).
    ///
    /// # Safety
    /// `stream` a live stream of the pool's device.
    unsafe fn extend(
        &self,
        device: &mut DevicePool,
        stream: cudarc::driver::sys::CUstream,
    ) -> Result<(), kvpool::PoolError> {
        // SAFETY: the buffers hold `batch` entries and live as long as `self`.
        unsafe {
            device.alloc_extend_rows(
                self.table.desc,
                self.rows_d.ptr,
                &self.prefix,
                &self.seq,
                self.prefix_d.ptr,
                self.seq_d.ptr,
                self.batch as u64,
                0,
                0,
                stream,
            )
        }
    }
}

/// The allocated pages of a device pool (tests only).
fn allocated_pages_on_device(device: &DevicePool) -> usize {
    page_words_on_device(device)
        .iter()
        .filter(|&&w| w & 7 == 3)
        .count()
}

/// The kernel plans its writes from the device copies of the lengths, the host from its
/// own: when the two disagree (a stale device copy), the call faults naming the request,
/// writes only the padding slot and only inside `out[0 .. extend_num_tokens)`, and takes no
/// page. Before the fix, a device copy larger than the host's wrote past `out`.
#[test]
#[ignore = "needs a CUDA GPU: run with --ignored on a GPU machine"]
fn device_lengths_that_disagree_with_the_host_fault_without_writing_out_of_bounds() {
    const GUARD: usize = 4096;
    let gpu = Gpu::new(false);
    for ps in [1u32, 16] {
        let mut device = DevicePool::new(config(CUDA0, ps)).unwrap();
        let host_prefix = [0i64, 0, 0];
        let host_seq = [5i64, 3, 4];
        let total = 12usize;
        // (device prefix, device seq, request the fault must name)
        let cases: [([i64; 3], [i64; 3], i64); 5] = [
            ([0, 0, 0], [5, 3000, 4], 1),  // runs far past the plan
            ([0, 0, 0], [5, 100, 200], 1), // two past it: the first is named
            ([0, 0, 0], [5, 3, 9], 2),     // the last request overruns
            ([0, 0, 0], [5, 1, 4], 2),     // totals short of the plan: the last request
            ([0, 9, 0], [5, 3, 4], 1),     // seq < prefix on the device
        ];
        let prefix_d = DevBuf::new(8 * 3);
        let seq_d = DevBuf::new(8 * 3);
        let last_d = DevBuf::new(8 * 3);
        let out = DevBuf::new(8 * (total + GUARD));
        last_d.upload(&[-1i64; 3]);
        for (prefix, seq, named) in cases {
            out.upload(&vec![-7i64; total + GUARD]);
            prefix_d.upload(&prefix);
            seq_d.upload(&seq);
            let bufs = [&prefix_d, &seq_d, &last_d];
            // SAFETY: the buffers hold what the call says; the test synchronizes after.
            unsafe {
                enqueue_extend(
                    &mut device,
                    &host_prefix,
                    &host_seq,
                    bufs,
                    total,
                    &out,
                    gpu.stream,
                )
            }
            .unwrap();
            gpu.sync();
            let fault = device.fault().expect("the mismatch must fault the pool");
            assert_eq!(fault.kind, ErrorKind::InvalidLengths, "{fault:?}");
            assert_eq!(fault.position, named, "{fault:?}");
            assert!(fault.message.contains("disagree"), "{}", fault.message);
            let what = format!("page size {ps}, device seq {seq:?}");
            assert_refused_cleanly(&mut device, &gpu, &out, total, GUARD, &what);
        }
        // Decode: a device seq_len of 0 (prefix -1) is refused the same way.
        let decode_seq = [1i64, 1];
        seq_d.upload(&[1i64, 0]);
        out.upload(&vec![-7i64; 2 + GUARD]);
        // SAFETY: as above.
        unsafe {
            device
                .alloc_decode(&decode_seq, seq_d.ptr, last_d.ptr, out.ptr, 2, gpu.stream)
                .unwrap();
        }
        gpu.sync();
        let fault = device.fault().expect("decode mismatch must fault");
        assert_eq!((fault.kind, fault.position), (ErrorKind::InvalidLengths, 1));
        assert_refused_cleanly(
            &mut device,
            &gpu,
            &out,
            2,
            GUARD,
            &format!("page size {ps}, decode"),
        );
    }
}

/// The two-warp extend kernels store the slots and the new pages' words before warp 0
/// decides, and free those pages again when the call fails. An extend whose device lengths
/// add up to less than the host's plan must still change no page: before the fix, the writer
/// warp planned the plan's tokens past the device's and took their pages from shared memory
/// past the ones it had staged, what an earlier call had left there (here call A's pages,
/// allocated and in use), marked them allocated, then free. Batches of 3 and 40 requests
/// (`kvp_extend_few4_64_*`, `kvp_extend_pairs_64_*`), pages of 1 and 16 slots.
#[test]
#[ignore = "needs a CUDA GPU: run with --ignored on a GPU machine"]
fn a_two_warp_extend_short_of_its_plan_changes_no_page() {
    const GUARD: usize = 64;
    let gpu = Gpu::new(false);
    for ps in [1u32, 16] {
        for batch in [3usize, 40] {
            let mut device = DevicePool::new(config(CUDA0, ps)).unwrap();
            let (prefix_d, seq_d, last_d) = DevBuf::lengths(batch);
            let out = DevBuf::new(8 * (64 + GUARD));
            // 60 tokens in all, empty prefixes: the first request takes the rest.
            let per = if batch == 3 { 20 } else { 1 };
            let mut seq = vec![per as i64; batch];
            seq[0] = 60 - (batch as i64 - 1) * per as i64;
            let prefix = vec![0i64; batch];
            let last = vec![-1i64; batch];
            // Call A: valid; its pages are staged in shared memory and taken.
            let lengths = [&prefix_d, &seq_d, &last_d];
            extend_on_device(&mut device, &gpu, lengths, [&prefix, &seq, &last], &out);
            gpu.sync();
            assert!(device.fault().is_none(), "call A: {:?}", device.fault());
            let before = page_words_on_device(&device);
            let taken = allocated_pages_on_device(&device);
            assert!(taken > 0);
            // Call B: the same plan on the host, the last request 16 tokens short on the
            // device.
            let mut short = seq.clone();
            *short.last_mut().unwrap() = 0;
            short[0] -= 16 - per as i64;
            prefix_d.upload(&prefix);
            seq_d.upload(&short);
            last_d.upload(&last);
            out.upload(&vec![-7i64; 60 + GUARD]);
            let bufs = [&prefix_d, &seq_d, &last_d];
            // SAFETY: the buffers hold what the call says; the test synchronizes after.
            unsafe { enqueue_extend(&mut device, &prefix, &seq, bufs, 60, &out, gpu.stream) }
                .unwrap();
            gpu.sync();
            let what = format!("page size {ps}, {batch} requests");
            let fault = device
                .fault()
                .expect("the short lengths must fault the pool");
            assert_eq!(fault.kind, ErrorKind::InvalidLengths, "{what}: {fault:?}");
            assert_eq!(
                allocated_pages_on_device(&device),
                taken,
                "{what}: pages freed"
            );
            assert!(
                page_words_on_device(&device) == before,
                "{what}: a page word changed"
            );
            let written: Vec<i64> = out.download(60 + GUARD);
            assert!(
                written[..60].iter().all(|&x| x == 0),
                "{what}: {:?}",
                &written[..60]
            );
            assert!(
                written[60..].iter().all(|&x| x == -7),
                "{what}: a write past out"
            );
        }
    }
}

/// Every allocation kernel (one warp, one block, many blocks: chosen by batch size) refuses a
/// decode whose device lengths disagree with the host's, names the request, writes only the
/// padding slot and only inside the plan, and takes no page.
#[test]
#[ignore = "needs a CUDA GPU"]
fn every_decode_kernel_refuses_device_lengths_that_disagree() {
    const GUARD: usize = 1024;
    let gpu = Gpu::new(false);
    for ps in [1u32, 16] {
        // Room for 5,000 new pages (a decode of 5,000 requests at page size 1).
        let mut device = DevicePool::new(PoolConfig {
            size: 8192 * u64::from(ps),
            ..config(CUDA0, ps)
        })
        .unwrap();
        for batch in [2usize, 200, 700, 2000, 4000, 5000] {
            let named = batch / 2;
            let host_seq = vec![1i64; batch];
            let mut device_seq = host_seq.clone();
            device_seq[named] = 0;
            let seq_d = DevBuf::new(8 * batch);
            let last_d = DevBuf::new(8 * batch);
            let out = DevBuf::new(8 * (batch + GUARD));
            seq_d.upload(&device_seq);
            last_d.upload(&vec![-1i64; batch]);
            out.upload(&vec![-7i64; batch + GUARD]);
            // SAFETY: the buffers hold what the call says; the test synchronizes after.
            unsafe {
                device
                    .alloc_decode(&host_seq, seq_d.ptr, last_d.ptr, out.ptr, batch, gpu.stream)
                    .unwrap();
            }
            gpu.sync();
            let fault = device.fault().expect("the mismatch must fault the pool");
            assert_eq!(
                (fault.kind, fault.position),
                (ErrorKind::InvalidLengths, named as i64),
                "page size {ps}, batch {batch}: {fault:?}"
            );
            let what = format!("page size {ps}, batch {batch}");
            assert_refused_cleanly(&mut device, &gpu, &out, batch, GUARD, &what);
        }
    }
}

/// One shape per kernel an extend can run on, plain or by row (`debug_extend_kernel` names
/// them; the tests check that they reached every family): (requests, tokens each).
const EXTEND_SHAPES: [(usize, i64); 19] = [
    (1, 10),   // One(64); by row the one-warp rows kernel
    (1, 100),  // One(128); by row the 256-thread rows kernel
    (1, 400),  // One(256)
    (1, 3000), // OneBlocks
    (2, 7),    // FewUpTo(2, 64)
    (3, 20),   // FewUpTo(4, 64)
    (6, 40),   // FewUpTo(8, 128)
    (20, 3),   // Few(64)
    (20, 25),  // Few(256)
    (4, 300),  // FewBlocks
    (32, 30),  // FewSpread
    (40, 1),   // Pairs(64); by row Block64
    (64, 8),   // Pairs(256); by row Blocks
    (100, 2),  // Block
    (200, 5),  // Blocks
    (400, 2),  // BlocksWide(512)
    (900, 1),  // BlocksWide(1024)
    (1500, 1), // Grid; by row BlocksWide(2048)
    (3000, 3), // Grid (by row: gather, the plain kernel, scatter)
];

/// Decode batches, one per decode kernel (`DecodeOne`, `Decode(32 .. 1024)`, the clusters
/// where the device has them, the ticketed kernel).
const DECODE_BATCHES: [usize; 10] = [1, 20, 50, 100, 200, 400, 800, 1500, 3000, 5000];

/// The refusal tests' largest call: requests (a decode of 5,000) and tokens (its call A,
/// 5,000 requests of 3 tokens; the largest extend shape is 9,000).
const MOST_REQUESTS: usize = 5000;
const MOST_TOKENS: usize = 5000 * 3;

/// Call B of the refusal tests for `batch` requests of `per` tokens after call A (as many
/// new requests): odd requests continue A's rows, even ones are new. (prefix_lens,
/// seq_lens.)
fn call_b_lengths(batch: usize, per: i64) -> (Vec<i64>, Vec<i64>) {
    let prefix: Vec<i64> = (0..batch)
        .map(|i| if i % 2 == 1 { per } else { 0 })
        .collect();
    let seq = prefix.iter().map(|&p| p + per).collect();
    (prefix, seq)
}

/// Device copies of call B's lengths that disagree with the host's plan, each the host's
/// with one change: a request short by a token, one empty, one a token over, one far over,
/// one past the pool, a negative seq_len, a prefix past its seq_len, a negative prefix, and
/// the tokens moved between the first two requests so that the pages differ (where a move
/// does). Copies from which the host would plan the same totals are left out: no
/// disagreement (the kernel then follows the device's lengths). (what, prefix, seq.)
fn disagreeing_copies(
    device: &DevicePool,
    prefix: &[i64],
    seq: &[i64],
) -> Vec<(&'static str, Vec<i64>, Vec<i64>)> {
    let plan = device.extend_need(prefix, seq).unwrap();
    let totals = |p: &[i64], s: &[i64]| {
        device
            .extend_need(p, s)
            .ok()
            .map(|plan| (plan.tokens, plan.new_pages))
    };
    let planned = Some((plan.tokens, plan.new_pages));
    let (batch, per) = (seq.len(), seq[0] - prefix[0]);
    let (mid, end) = (batch / 2, batch - 1);
    let mut cases = Vec::new();
    let mut with = |what: &'static str, change: &dyn Fn(&mut Vec<i64>, &mut Vec<i64>)| {
        let (mut p, mut s) = (prefix.to_vec(), seq.to_vec());
        change(&mut p, &mut s);
        if totals(&p, &s) != planned {
            cases.push((what, p, s));
        }
    };
    with("the last request a token short", &|_, s| s[end] -= 1);
    with("the first request empty", &|p, s| s[0] = p[0]);
    with("a request a token over", &|_, s| s[mid] += 1);
    with("a request far over", &|_, s| s[mid] += 1 << 20);
    with("a request past the pool", &|_, s| s[end] = i64::MAX);
    with("a negative seq_len", &|_, s| s[mid] = -3);
    with("a prefix past its seq_len", &|p, s| p[mid] = s[mid] + 1);
    with("a negative prefix", &|p, _| p[0] = -1);
    if batch > 1 {
        let moved = |k: i64| {
            let mut s = seq.to_vec();
            s[0] += k;
            s[1] -= k;
            s
        };
        let pages_differ = |k: i64| {
            let p = device.extend_need(prefix, &moved(k));
            matches!(p, Ok(p) if p.new_pages != plan.new_pages)
        };
        if let Some(k) = (1..=per).flat_map(|k| [k, -k]).find(|&k| pages_differ(k)) {
            with("tokens moved between two requests", &|_, s| *s = moved(k));
        }
    }
    cases
}

/// The device seq_lens of a decode the refusal tests try at request `batch / 2`.
const BAD_DECODE_LENGTHS: [(&str, i64); 3] = [
    ("a seq_len of 0", 0),
    ("a negative seq_len", -3),
    ("a huge seq_len", i64::MAX),
];

/// The page sizes of the refusal tests: `KVPOOL_REFUSAL_PAGE_SIZES` (a comma list; the
/// sanitizer steps of scripts/gpu/run.sh keep one), else 1 and 16.
fn refusal_page_sizes() -> Vec<u32> {
    let sizes = std::env::var("KVPOOL_REFUSAL_PAGE_SIZES").unwrap_or_else(|_| "1,16".into());
    let sizes: Vec<u32> = sizes
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    assert!(
        !sizes.is_empty(),
        "KVPOOL_REFUSAL_PAGE_SIZES names no page size"
    );
    sizes
}

/// A device pool for the refusal tests: room for call A and call B of every shape.
fn refusal_pool(ps: u32) -> DevicePool {
    DevicePool::new(PoolConfig {
        size: (1 << 15) * u64::from(ps),
        ..config(CUDA0, ps)
    })
    .unwrap()
}

/// Every kernel family a test of every allocation kernel must reach (`families_to_reach`)
/// is in `reached` (`calls`: how many calls the test checked, for its log).
fn assert_reached_every_family(
    reached: &std::collections::BTreeSet<String>,
    by_row: bool,
    calls: usize,
) {
    let how = if by_row { " by row" } else { "" };
    eprintln!("{calls} calls{how} checked; kernels reached: {reached:?}");
    for family in families_to_reach(by_row) {
        assert!(
            reached.contains(&family),
            "no call{how} reached {family}: {reached:?}"
        );
    }
}

/// The kernel families the refusal tests must reach (`family`), plain or by row.
fn families_to_reach(by_row: bool) -> Vec<String> {
    let mut want = vec![
        "One",
        "OneBlocks",
        "FewUpTo",
        "Few",
        "FewBlocks",
        "FewSpread",
        "Block",
        "Blocks",
        "BlocksWide",
        "Grid",
        "decode DecodeOne",
        "decode Decode",
        "decode Grid",
    ];
    want.push(if by_row { "Block64" } else { "Pairs" });
    if refusal_pool(1).decodes_on_clusters() {
        want.push("decode DecodeCluster");
    }
    want.into_iter().map(String::from).collect()
}

/// Every allocation kernel's replay check (`kernels/pool.cu`: `replayed`; the extends find
/// their own number in the cursor they read, which their commit marks consumed, the decodes
/// in the cursor they write): a call's graph launched once goes through, and launched again
/// right after faults the pool ("ran a second time") instead of handing the same slots out
/// again. One extend of each of `EXTEND_SHAPES` and one decode of each of `DECODE_BATCHES`
/// (every kernel family, `families_to_reach`), page size 16, each on a cleared pool.
#[test]
#[ignore = "needs a CUDA GPU: run with --ignored on a GPU machine"]
fn every_allocation_kernel_faults_when_its_graph_is_replayed_at_once() {
    let gpu = Gpu::new(false);
    let s = gpu.stream;
    let mut reached = std::collections::BTreeSet::new();
    let (prefix_d, seq_d, last_d) = DevBuf::lengths(MOST_REQUESTS);
    let out = DevBuf::new(8 * 16 * MOST_REQUESTS);
    let mut device = refusal_pool(16);
    let mut replays = 0usize;
    for (batch, per) in EXTEND_SHAPES {
        let (prefix, seq) = (vec![0i64; batch], vec![per; batch]);
        prefix_d.upload(&prefix);
        seq_d.upload(&seq);
        last_d.upload(&vec![-1i64; batch]);
        let tokens = batch * per as usize;
        let plan = device.extend_need(&prefix, &seq).unwrap();
        let kernel = device.debug_extend_kernel(false, batch, false, plan.tokens, plan.new_pages);
        reached.insert(family(&kernel));
        let what = format!("extend of {batch} x {per} tokens ({kernel})");
        let bufs = [&prefix_d, &seq_d, &last_d];
        // SAFETY: the buffers hold what the call says and outlive the graph's launches.
        let call =
            |d: &mut DevicePool| unsafe { enqueue_extend(d, &prefix, &seq, bufs, tokens, &out, s) };
        replay_faults(&mut device, &gpu, &out, &what, "alloc_extend", tokens, call);
        replays += 1;
    }
    for batch in DECODE_BATCHES {
        // Call A, uncaptured: `batch` requests of a page each; the decode token of each
        // starts a page. (A replayed decode that continues a page is refused by the page's
        // own check first: its fill point was moved on by the same call.)
        let bufs = [&prefix_d, &seq_d, &last_d];
        let slots = allocate_rows(&mut device, &gpu, bufs, &out, batch, 16);
        let seq = vec![17i64; batch];
        let last: Vec<i64> = (0..batch).map(|i| slots[16 * i + 15]).collect();
        seq_d.upload(&seq);
        last_d.upload(&last);
        let pages = device.decode_need(&seq).unwrap();
        let kernel = device.debug_extend_kernel(false, batch, true, batch as u64, pages);
        reached.insert(format!("decode {}", family(&kernel)));
        let what = format!("decode of {batch} ({kernel})");
        // SAFETY: as above.
        let call = |d: &mut DevicePool| unsafe {
            d.alloc_decode(&seq, seq_d.ptr, last_d.ptr, out.ptr, batch, s)
        };
        replay_faults(&mut device, &gpu, &out, &what, "alloc_decode", batch, call);
        replays += 1;
    }
    assert_reached_every_family(&reached, false, replays);
}

/// Captures `call`, launches its graph once (the call goes through: `n` slots handed out)
/// and once more (the replay faults the pool: "ran a second time", naming `op`), then
/// clears the pool.
fn replay_faults(
    device: &mut DevicePool,
    gpu: &Gpu,
    out: &DevBuf,
    what: &str,
    op: &str,
    n: usize,
    call: impl FnOnce(&mut DevicePool) -> Result<(), kvpool::PoolError>,
) {
    let s = gpu.stream;
    let (graph, status) = Graph::capture(s, || call(device));
    status.unwrap_or_else(|e| panic!("{what}: the capture was refused: {e}"));
    graph.launch(s);
    gpu.sync();
    // (`fault`, not `check_device`: that reports the previous shape's fault once more,
    // as one from before the clear.)
    if let Some(fault) = device.fault() {
        panic!("{what}: the graph's first launch faulted: {fault:?}");
    }
    assert!(
        out.download::<i64>(n).iter().all(|&slot| slot > 0),
        "{what}: the first launch handed out the padding slot"
    );
    graph.launch(s);
    gpu.sync();
    let err = device.check_device().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::DeviceFault, "{what}: {err}");
    assert!(
        err.message().contains("ran a second time") && err.message().contains(op),
        "{what}: {err}"
    );
    // SAFETY: the stream is idle; a clear recovers the pool.
    unsafe { device.clear(s) }.unwrap();
    gpu.sync();
}

/// Every allocation kernel a plain call can run on refuses device lengths that disagree
/// with the host's plan and leaves the pool exactly as it was (`PoolImage`: the cursor, the
/// free and staged pages, the pages' kinds, the in-use pages' fill points read back equal);
/// no slot is handed out, nothing is written past the plan's output. Each refused call
/// (call B, `disagreeing_copies`) follows a valid call of the same shape (call A), whose
/// pages are still in use and whose page ids the kernel staged in shared memory: a kernel
/// that planned past the device's lengths would find them there (the bug that 46b41b6
/// fixed for the two-warp extends). Decodes: `BAD_DECODE_LENGTHS`. Pages of 1 and 16 slots
/// (`refusal_page_sizes`).
#[test]
#[ignore = "needs a CUDA GPU: run with --ignored on a GPU machine"]
fn every_allocation_kernel_refuses_disagreeing_device_lengths_and_changes_nothing() {
    const GUARD: usize = 256;
    let gpu = Gpu::new(false);
    let mut reached = std::collections::BTreeSet::new();
    let mut refused = 0usize;
    let (prefix_d, seq_d, last_d) = DevBuf::lengths(MOST_REQUESTS);
    let out = DevBuf::new(8 * (MOST_TOKENS + GUARD));
    for ps in refusal_page_sizes() {
        let mut device = refusal_pool(ps);
        for (batch, per) in EXTEND_SHAPES {
            let tokens = batch * per as usize;
            let bufs = [&prefix_d, &seq_d, &last_d];
            let slots = allocate_rows(&mut device, &gpu, bufs, &out, batch, per);
            let (prefix, seq) = call_b_lengths(batch, per);
            let last: Vec<i64> = (0..batch)
                .map(|i| match prefix[i] {
                    0 => -1,
                    _ => slots[(i + 1) * per as usize - 1],
                })
                .collect();
            let plan = device.extend_need(&prefix, &seq).unwrap();
            let kernel =
                device.debug_extend_kernel(false, batch, false, plan.tokens, plan.new_pages);
            reached.insert(family(&kernel));
            for (what, device_prefix, device_seq) in disagreeing_copies(&device, &prefix, &seq) {
                let what = format!("page size {ps}, {batch} x {per} tokens ({kernel}): {what}");
                prefix_d.upload(&device_prefix);
                seq_d.upload(&device_seq);
                last_d.upload(&last);
                // SAFETY: the buffers hold what the call says; refused_call synchronizes.
                let bufs = [&prefix_d, &seq_d, &last_d];
                let call =
                    refused_call(&mut device, &gpu, &out, tokens, GUARD, &what, |d| unsafe {
                        enqueue_extend(d, &prefix, &seq, bufs, tokens, &out, gpu.stream)
                    });
                // (A changed prefix may be refused for its last_loc first.)
                if device_prefix == prefix {
                    let fault = device.fault().unwrap();
                    assert_eq!(fault.kind, ErrorKind::InvalidLengths, "{what}: {fault:?}");
                }
                call.assert_refused_then_restore(&mut device, &gpu, &what);
                refused += 1;
            }
            // The next shape starts from an empty pool.
            unsafe { device.clear(gpu.stream) }.unwrap();
        }
        // Decodes: every request of call A one token on.
        for batch in DECODE_BATCHES {
            let per = 3i64;
            let bufs = [&prefix_d, &seq_d, &last_d];
            let slots = allocate_rows(&mut device, &gpu, bufs, &out, batch, per);
            let seq = vec![per + 1; batch];
            let last: Vec<i64> = (0..batch)
                .map(|i| slots[(i + 1) * per as usize - 1])
                .collect();
            let pages = device.decode_need(&seq).unwrap();
            let kernel = device.debug_extend_kernel(false, batch, true, batch as u64, pages);
            reached.insert(format!("decode {}", family(&kernel)));
            let mid = batch / 2;
            for (what, value) in BAD_DECODE_LENGTHS {
                let what = format!("page size {ps}, decode of {batch} ({kernel}): {what}");
                let mut device_seq = seq.clone();
                device_seq[mid] = value;
                seq_d.upload(&device_seq);
                last_d.upload(&last);
                // SAFETY: the buffers hold what the call says; refused_call synchronizes.
                let call = refused_call(&mut device, &gpu, &out, batch, GUARD, &what, |d| unsafe {
                    d.alloc_decode(&seq, seq_d.ptr, last_d.ptr, out.ptr, batch, gpu.stream)
                });
                let fault = device.fault().unwrap();
                assert_eq!(
                    (fault.kind, fault.position),
                    (ErrorKind::InvalidLengths, mid as i64),
                    "{what}: {fault:?}"
                );
                call.assert_refused_then_restore(&mut device, &gpu, &what);
                refused += 1;
            }
            unsafe { device.clear(gpu.stream) }.unwrap();
        }
        gpu.sync();
    }
    assert_reached_every_family(&reached, false, refused);
}

/// The same by request row (`alloc_extend_rows`, `alloc_decode_rows`): call A writes its
/// slots into table rows, call B continues every other row and starts new rows for the
/// rest, reading `last_loc` from the table. A refused call also leaves the table as it was
/// (the rows kernels, and the scatter kernel after the plain kernel of a three-kernel call).
#[test]
#[ignore = "needs a CUDA GPU: run with --ignored on a GPU machine"]
fn every_allocation_kernel_by_row_refuses_disagreeing_device_lengths_and_changes_nothing() {
    const GUARD: usize = 256;
    let gpu = Gpu::new(false);
    let mut reached = std::collections::BTreeSet::new();
    let mut refused = 0usize;
    let (prefix_d, seq_d, rows_d) = DevBuf::lengths(MOST_REQUESTS);
    let out = DevBuf::new(8 * (MOST_TOKENS + GUARD));
    for ps in refusal_page_sizes() {
        let mut device = refusal_pool(ps);
        let shapes = EXTEND_SHAPES.map(|(batch, per)| (batch, per, false));
        let decodes = DECODE_BATCHES.map(|batch| (batch, 3, true));
        for (batch, per, decode) in shapes.into_iter().chain(decodes) {
            // Rows 0 .. batch for call A; call B's new requests take rows batch + i.
            let table = DeviceRows::new(2 * batch, 2 * per as usize + 2);
            let a_rows: Vec<i64> = (0..batch as i64).collect();
            let a_lengths = (vec![0i64; batch], vec![per; batch]);
            rows_d.upload(&a_rows);
            prefix_d.upload(&a_lengths.0);
            seq_d.upload(&a_lengths.1);
            let a_tokens = batch as u64 * per as u64;
            // SAFETY: the buffers hold what the call says; synchronized below.
            unsafe {
                device.alloc_extend_rows(
                    table.desc,
                    rows_d.ptr,
                    &a_lengths.0,
                    &a_lengths.1,
                    prefix_d.ptr,
                    seq_d.ptr,
                    a_tokens,
                    0,
                    0,
                    gpu.stream,
                )
            }
            .unwrap();
            gpu.sync();
            assert!(
                device.fault().is_none(),
                "call A by row, {batch} x {per}: {:?}",
                device.fault()
            );
            let table_before = table.read();
            if decode {
                let seq = vec![per + 1; batch];
                let pages = device.decode_need(&seq).unwrap();
                let kernel = device.debug_extend_kernel(true, batch, true, batch as u64, pages);
                reached.insert(format!("decode {}", family(&kernel)));
                let mid = batch / 2;
                for (what, value) in BAD_DECODE_LENGTHS {
                    let what =
                        format!("page size {ps}, decode by row of {batch} ({kernel}): {what}");
                    let mut device_seq = seq.clone();
                    device_seq[mid] = value;
                    rows_d.upload(&a_rows);
                    seq_d.upload(&device_seq);
                    // SAFETY: the buffers hold what the call says; refused_call synchronizes.
                    let call =
                        refused_call(&mut device, &gpu, &out, batch, GUARD, &what, |d| unsafe {
                            d.alloc_decode_rows(
                                table.desc, rows_d.ptr, &seq, seq_d.ptr, out.ptr, batch, gpu.stream,
                            )
                        });
                    assert_eq!(device.fault().unwrap().position, mid as i64, "{what}");
                    assert!(table.read() == table_before, "{what}: the table changed");
                    call.assert_refused_then_restore(&mut device, &gpu, &what);
                    refused += 1;
                }
            } else {
                let tokens = batch * per as usize;
                let (prefix, seq) = call_b_lengths(batch, per);
                let rows: Vec<i64> = (0..batch)
                    .map(|i| if prefix[i] > 0 { i } else { batch + i } as i64)
                    .collect();
                let plan = device.extend_need(&prefix, &seq).unwrap();
                let kernel =
                    device.debug_extend_kernel(true, batch, false, plan.tokens, plan.new_pages);
                reached.insert(family(&kernel));
                for (what, device_prefix, device_seq) in disagreeing_copies(&device, &prefix, &seq)
                {
                    let what =
                        format!("page size {ps}, {batch} x {per} tokens by row ({kernel}): {what}");
                    rows_d.upload(&rows);
                    prefix_d.upload(&device_prefix);
                    seq_d.upload(&device_seq);
                    // SAFETY: the buffers hold what the call says; refused_call synchronizes.
                    let call =
                        refused_call(&mut device, &gpu, &out, tokens, GUARD, &what, |d| unsafe {
                            d.alloc_extend_rows(
                                table.desc,
                                rows_d.ptr,
                                &prefix,
                                &seq,
                                prefix_d.ptr,
                                seq_d.ptr,
                                tokens as u64,
                                out.ptr,
                                tokens,
                                gpu.stream,
                            )
                        });
                    assert!(table.read() == table_before, "{what}: the table changed");
                    call.assert_refused_then_restore(&mut device, &gpu, &what);
                    refused += 1;
                }
            }
            unsafe { device.clear(gpu.stream) }.unwrap();
            gpu.sync();
        }
    }
    assert_reached_every_family(&reached, true, refused);
}

/// A free by row of an int32 pool from an int64 table whose entries the pool's index type
/// cannot hold (2^32 + 64 .. 2^32 + 127: page 1's slots, narrowed) is refused as out of range,
/// as the host backend refuses it, and frees nothing. Before the fix, the segments kernel
/// narrowed the entries to int32 and freed page 1, in use.
#[test]
#[ignore = "needs a CUDA GPU: run with --ignored on a GPU machine"]
fn a_free_by_row_of_entries_an_int32_pool_cannot_hold_frees_nothing() {
    let gpu = Gpu::new(false);
    let mut device = DevicePool::new(PoolConfig {
        index_type: IndexType::I32,
        ..config(CUDA0, 64)
    })
    .unwrap();
    let out = DevBuf::new(4 * 64);
    // SAFETY: `out` holds 64 int32 slots; synchronized below.
    unsafe { device.alloc(64, out.ptr, 64, gpu.stream) }.unwrap();
    gpu.sync();
    assert_eq!(out.download::<i32>(1)[0], 64, "page 1 allocated");
    let table = DeviceRows::new(1, 64);
    table
        .buf
        .upload(&(0..64).map(|k| (1i64 << 32) + 64 + k).collect::<Vec<i64>>());
    let (rows, starts, ends) = (DevBuf::new(8), DevBuf::new(8), DevBuf::new(8));
    rows.upload(&[0i64]);
    starts.upload(&[0i64]);
    ends.upload(&[64i64]);
    let before = PoolImage::of(&device);
    // SAFETY: the table and the arrays hold what the call says; synchronized below.
    unsafe {
        device.free_rows(
            table.desc,
            rows.ptr,
            &[0],
            &[64],
            starts.ptr,
            ends.ptr,
            gpu.stream,
        )
    }
    .unwrap();
    gpu.sync();
    let fault = device.fault().expect("the free must fault");
    assert_eq!(fault.kind, ErrorKind::IndexOutOfRange, "{fault:?}");
    if let Some(change) = before.difference(&PoolImage::of(&device)) {
        panic!("the refused free changed the pool: {change}");
    }
}

/// A zeroed `int64` request-to-token table in device memory (rows of `row_len`, no gap).
struct DeviceRows {
    buf: DevBuf,
    len: usize,
    desc: kvpool::cuda::DeviceTable,
}

impl DeviceRows {
    fn new(rows: usize, row_len: usize) -> Self {
        let len = rows * row_len;
        let buf = DevBuf::new(8 * len);
        buf.upload(&vec![0i64; len]);
        let desc = kvpool::cuda::DeviceTable {
            data: buf.ptr,
            index_type: IndexType::I64,
            shape: kvpool::TableShape {
                rows: rows as u64,
                row_stride: row_len as u64,
                row_len: row_len as u64,
            },
        };
        Self { buf, len, desc }
    }

    fn read(&self) -> Vec<i64> {
        self.buf.download(self.len)
    }
}

/// A kernel family from `debug_extend_kernel`'s name: `FewUpTo(4, 64)` -> `FewUpTo`.
fn family(kernel: &str) -> String {
    kernel.split('(').next().unwrap_or(kernel).to_string()
}

/// Call A of the refusal test: `batch` new requests of `per` tokens each, checked accepted;
/// returns their slots in batch order.
fn allocate_rows(
    device: &mut DevicePool,
    gpu: &Gpu,
    bufs: [&DevBuf; 3],
    out: &DevBuf,
    batch: usize,
    per: i64,
) -> Vec<i64> {
    let (prefix, seq, last) = (vec![0i64; batch], vec![per; batch], vec![-1i64; batch]);
    extend_on_device(device, gpu, bufs, [&prefix, &seq, &last], out);
    gpu.sync();
    assert!(
        device.fault().is_none(),
        "call A, {batch} x {per}: {:?}",
        device.fault()
    );
    out.download(batch * per as usize)
}

/// Runs `call` (which the host must accept and the device must refuse) as `call_guarded`
/// does, then asserts that it faulted and that the pool reads back as before it.
fn refused_call(
    device: &mut DevicePool,
    gpu: &Gpu,
    out: &DevBuf,
    n: usize,
    guard: usize,
    what: &str,
    call: impl FnOnce(&mut DevicePool) -> Result<(), kvpool::PoolError>,
) -> Guarded {
    let mut before = None;
    let guarded = call_guarded(device, gpu, out, n, guard, what, |d| {
        // (After the backup call_guarded enqueued, which may write the other cursor.)
        gpu.sync();
        before = Some(PoolImage::of(d));
        call(d).unwrap_or_else(|e| panic!("{what}: the host refused the call: {e}"));
    });
    assert!(
        device.fault().is_some(),
        "{what}: the device accepted the call"
    );
    if let Some(change) = before.unwrap().difference(&PoolImage::of(device)) {
        panic!("{what}: the refused call changed the pool: {change}");
    }
    guarded
}

/// After a refused call (synchronized): `out[..n]` holds only the padding slot, the `guard`
/// elements after it still hold the -7 they were filled with, no page is allocated; then the
/// pool is cleared, reports the fault once more, and is healthy.
fn assert_refused_cleanly(
    device: &mut DevicePool,
    gpu: &Gpu,
    out: &DevBuf,
    n: usize,
    guard: usize,
    what: &str,
) {
    let written: Vec<i64> = out.download(n + guard);
    assert!(
        written[..n].iter().all(|&x| x == 0),
        "{what}: a slot was handed out: {:?}",
        &written[..n]
    );
    assert!(
        written[n..].iter().all(|&x| x == -7),
        "{what}: a write past out[{n})"
    );
    assert_eq!(
        allocated_pages_on_device(device),
        0,
        "{what}: a page was taken"
    );
    unsafe { device.clear(gpu.stream) }.unwrap();
    gpu.sync();
    assert_eq!(kind_of(device.check_device()), Err(ErrorKind::DeviceFault));
    assert_eq!(kind_of(device.check_device()), Ok(()));
}

fn kind_of(r: Result<(), kvpool::PoolError>) -> Result<(), ErrorKind> {
    r.map_err(|e| e.kind())
}

/// Uploads an extend's lengths (prefix_lens, seq_lens, last_loc) into `bufs` and enqueues
/// the device pool's `alloc_extend` of them into `out` (the stream is not synchronized).
fn extend_on_device(
    device: &mut DevicePool,
    gpu: &Gpu,
    bufs: [&DevBuf; 3],
    lengths: [&[i64]; 3],
    out: &DevBuf,
) {
    for (buf, values) in bufs.iter().zip(lengths) {
        buf.upload(values);
    }
    let [prefix, seq, _] = lengths;
    let total: i64 = seq.iter().zip(prefix).map(|(s, p)| s - p).sum();
    // SAFETY: the buffers hold what the call says; the caller synchronizes.
    unsafe { enqueue_extend(device, prefix, seq, bufs, total as usize, out, gpu.stream) }.unwrap();
}

/// Enqueues the device pool's `alloc_extend` of the host copies `prefix` and `seq`, whose
/// device copies and `last_loc` are in `bufs` (prefix_lens, seq_lens, last_loc), of `tokens`
/// slots into `out`, given as holding exactly `tokens` indices.
///
/// # Safety
/// `bufs` hold the call's batch and `out` `tokens` indices, alive until the stream passes
/// the call (or, captured, until the graph's last launch has run).
unsafe fn enqueue_extend(
    device: &mut DevicePool,
    prefix: &[i64],
    seq: &[i64],
    bufs: [&DevBuf; 3],
    tokens: usize,
    out: &DevBuf,
    stream: cudarc::driver::sys::CUstream,
) -> Result<(), kvpool::PoolError> {
    // SAFETY: forwarded contract.
    unsafe {
        device.alloc_extend(
            prefix,
            seq,
            bufs[0].ptr,
            bufs[1].ptr,
            bufs[2].ptr,
            tokens as u64,
            out.ptr,
            tokens,
            stream,
        )
    }
}

/// What a guarded device call left: its `n` output slots and the pool as it was before it.
struct Guarded {
    got: Vec<i64>,
    pages_before: usize,
    backup: DeviceSnapshot,
}

/// Fills `out[..n + guard]` with -7, records the pool (allocated pages, a backup), runs
/// `call`, synchronizes, and asserts that nothing past `out[n)` was written.
fn call_guarded(
    device: &mut DevicePool,
    gpu: &Gpu,
    out: &DevBuf,
    n: usize,
    guard: usize,
    what: &str,
    call: impl FnOnce(&mut DevicePool),
) -> Guarded {
    out.upload(&vec![-7i64; n + guard]);
    let pages_before = allocated_pages_on_device(device);
    let backup = unsafe { device.backup_state(gpu.stream) }.unwrap();
    call(device);
    gpu.sync();
    let mut got: Vec<i64> = out.download(n + guard);
    assert!(
        got[n..].iter().all(|&x| x == -7),
        "{what}: a write past out[{n})"
    );
    got.truncate(n);
    Guarded {
        got,
        pages_before,
        backup,
    }
}

impl Guarded {
    /// After a call the device refused: its whole output holds only the padding slot and
    /// the pool still has the allocated pages it had before the call; then the pool is
    /// restored from the backup, reports the fault once more, and is healthy.
    fn assert_refused_then_restore(&self, device: &mut DevicePool, gpu: &Gpu, what: &str) {
        assert!(
            self.got.iter().all(|&x| x == 0),
            "{what}: a slot was handed out"
        );
        assert_eq!(
            allocated_pages_on_device(device),
            self.pages_before,
            "{what}"
        );
        unsafe { device.restore_state(&self.backup, gpu.stream) }.unwrap();
        gpu.sync();
        assert_eq!(kind_of(device.check_device()), Err(ErrorKind::DeviceFault));
        assert_eq!(kind_of(device.check_device()), Ok(()));
    }

    /// A call the host refused with `e`: the device faulted with the host's error kind,
    /// naming the request the host's message names; then as `assert_refused_then_restore`.
    fn assert_refused_as_host(
        &self,
        device: &mut DevicePool,
        gpu: &Gpu,
        e: &kvpool::PoolError,
        what: &str,
    ) {
        let fault = device
            .fault()
            .unwrap_or_else(|| panic!("{what}: no fault ({e})"));
        assert_eq!(
            (fault.kind, Some(fault.position)),
            (e.kind(), host_position(e.message())),
            "{what}: device {fault:?}, host {e}"
        );
        self.assert_refused_then_restore(device, gpu, what);
    }
}

/// Batches against the host pool, settled alike by the decode and few-request extend tests:
/// one the host accepted gives the host's slots without a fault, one it refused is refused on
/// the device as the host refused it (`Guarded::assert_refused_as_host`); after either, the
/// pools have the same free count. Both outcomes are counted.
#[derive(Default)]
struct Outcomes {
    accepted: usize,
    refused: usize,
}

impl Outcomes {
    /// Settles one batch (`host_result` and `want` from the host pool, `call` from the device
    /// pool); true if the host accepted it.
    #[allow(clippy::too_many_arguments)]
    fn settle(
        &mut self,
        host: &Pool,
        host_result: Result<(), kvpool::PoolError>,
        want: &[i64],
        device: &mut DevicePool,
        gpu: &Gpu,
        call: &Guarded,
        what: &str,
    ) -> bool {
        let accepted = match host_result {
            Ok(()) => {
                assert!(device.fault().is_none(), "{what}: {:?}", device.fault());
                assert_eq!(call.got, want, "{what}");
                self.accepted += 1;
                true
            }
            Err(e) => {
                call.assert_refused_as_host(device, gpu, &e, what);
                self.refused += 1;
                false
            }
        };
        assert_eq!(device.available_size(), host.available_size(), "{what}");
        accepted
    }

    /// Both outcomes came more than `least` times (else the test did not test both).
    fn assert_both_more_than(&self, least: usize, test: &str) {
        let Outcomes { accepted, refused } = *self;
        eprintln!("{test}: {accepted} batches accepted, {refused} refused");
        assert!(
            accepted > least && refused > least,
            "{accepted} accepted, {refused} refused"
        );
    }
}

/// Issue 13's reproducer on the device: a stale continuation faults the pool (the slot is
/// not handed out twice), and a rewind lets the owner continue from its last kept slot.
#[test]
#[ignore = "needs a CUDA GPU: run with --ignored on a GPU machine"]
fn a_stale_last_loc_faults_and_a_rewind_reopens_the_page_on_the_device() {
    let gpu = Gpu::new(false);
    let mut device = DevicePool::new(PoolConfig {
        size: 64,
        page_size: 4,
        ..config(CUDA0, 4)
    })
    .unwrap();
    let (prefix_d, seq_d, last_d, out) = (
        DevBuf::new(8),
        DevBuf::new(8),
        DevBuf::new(8),
        DevBuf::new(64),
    );
    let extend = |device: &mut DevicePool, prefix: i64, seq: i64, last: i64| -> i64 {
        prefix_d.upload(&[prefix]);
        seq_d.upload(&[seq]);
        last_d.upload(&[last]);
        let bufs = [&prefix_d, &seq_d, &last_d];
        // SAFETY: one request, one token, buffers of 8 bytes; synchronized below.
        unsafe { enqueue_extend(device, &[prefix], &[seq], bufs, 1, &out, gpu.stream) }.unwrap();
        gpu.sync();
        out.download::<i64>(1)[0]
    };
    assert_eq!(extend(&mut device, 0, 1, -1), 4); // A
    assert_eq!(extend(&mut device, 1, 2, 4), 5); // B continues A's page
    let before = unsafe { device.backup_state(gpu.stream) }.unwrap();
    assert_eq!(
        extend(&mut device, 1, 2, 4),
        0,
        "A's stale continuation gets the padding slot"
    );
    let fault = device.fault().expect("a stale last_loc must fault");
    assert_eq!(fault.kind, ErrorKind::LastLocMismatch);
    assert!(
        fault.message.contains("last handed-out slot"),
        "{}",
        fault.message
    );
    unsafe { device.restore_state(&before, gpu.stream) }.unwrap();
    gpu.sync();
    let _ = device.check_device();
    assert_eq!(kind_of(device.check_device()), Ok(()));
    // Slot 5 rejected: rewind page 1 to slot 4; the next continuation from 4 gets 5 again.
    last_d.upload(&[4i64]);
    // SAFETY: one slot in `last_d`.
    unsafe { device.rewind(last_d.ptr, 1, gpu.stream) }.unwrap();
    gpu.sync();
    assert!(device.fault().is_none());
    assert_eq!(extend(&mut device, 1, 2, 4), 5);
    // A rewind past the fill point faults and changes nothing.
    last_d.upload(&[7i64]);
    // SAFETY: as above.
    unsafe { device.rewind(last_d.ptr, 1, gpu.stream) }.unwrap();
    gpu.sync();
    assert_eq!(device.fault().unwrap().kind, ErrorKind::LastLocMismatch);
}

/// Every C call on a device pool — creation, an `*_async` call, a query, a free — leaves the
/// calling thread's current context as it found it: an engine's own context, none, or the
/// pool's own (primary) context; and after calls that found the pool's context current, an
/// engine's context made current again is still left current (no call may assume the
/// context it saw last).
#[test]
#[ignore = "needs a CUDA GPU: run with --ignored on a GPU machine"]
fn c_calls_leave_the_callers_context_current() {
    use cudarc::driver::sys;
    let gpu = Gpu::new(false); // the primary context, current; `gpu.stream` belongs to it
    let current = || {
        let mut ctx = null_mut();
        // SAFETY: valid out-pointer.
        assert_eq!(
            unsafe { sys::cuCtxGetCurrent(&mut ctx) },
            sys::CUresult::CUDA_SUCCESS
        );
        ctx
    };
    let primary = current(); // before cuCtxCreate, which makes its context current
    assert!(!primary.is_null());
    let out = DevBuf::new(16 * 8);
    let mut own = null_mut();
    let mut device = 0;
    // SAFETY: plain driver calls with valid out-pointers.
    unsafe {
        assert_eq!(
            sys::cuDeviceGet(&mut device, 0),
            sys::CUresult::CUDA_SUCCESS
        );
        let mut params: sys::CUctxCreateParams = std::mem::zeroed();
        assert_eq!(
            sys::cuCtxCreate_v4(&mut own, &mut params, 0, device),
            sys::CUresult::CUDA_SUCCESS
        );
    }
    for engine_ctx in [own, null_mut(), primary, own] {
        // SAFETY: `own` is live. Setting NULL pops the thread's context stack (cuCtxCreate
        // pushed `own` above the primary): pop until no context is current.
        unsafe {
            sys::cuCtxSetCurrent(engine_ctx);
            while engine_ctx.is_null() && !current().is_null() {
                sys::cuCtxSetCurrent(null_mut());
            }
        }
        assert_eq!(current(), engine_ctx);
        let mut cfg = kvp_pool_config_default();
        cfg.size = 4096 * 16;
        cfg.page_size = 16;
        cfg.backend = kvp_backend::Cuda as u32;
        let mut pool = null_mut();
        // SAFETY: valid config and out-pointer; `out` holds 16 indices on the device; the
        // stream is the primary context's.
        unsafe {
            assert_eq!(kvp_pool_new(&cfg, &mut pool), kvp_status::Ok);
            assert_eq!(current(), engine_ctx, "kvp_pool_new changed the context");
            let stream = gpu.stream.cast();
            assert_eq!(
                kvp_pool_alloc_async(pool, 16, out.ptr as *mut _, 16, stream),
                kvp_status::Ok
            );
            assert_eq!(
                current(),
                engine_ctx,
                "kvp_pool_alloc_async changed the context"
            );
            let mut available = 0;
            let mut exact = false;
            assert_eq!(
                kvp_pool_available_size_bound(pool, &mut available, &mut exact),
                kvp_status::Ok
            );
            assert_eq!(kvp_pool_check_device(pool), kvp_status::Ok);
            assert_eq!(current(), engine_ctx, "a query changed the context");
            let mut snapshot = null_mut();
            assert_eq!(
                kvp_pool_backup_state_async(pool, &mut snapshot, stream),
                kvp_status::Ok
            );
            gpu.sync();
            kvp_snapshot_free(snapshot);
            kvp_pool_free(pool);
            assert_eq!(current(), engine_ctx, "kvp_pool_free changed the context");
        }
    }
    // SAFETY: created above, no longer current.
    unsafe {
        sys::cuCtxSetCurrent(null_mut());
        sys::cuCtxDestroy_v2(own);
    }
}

/// Device and host pools side by side for the frees below.
struct Pair {
    host: Pool,
    device: DevicePool,
    rng: rng::Rng,
    /// Index buffer (the frees), output buffer (allocations), lengths and last_loc.
    indices: DevBuf,
    out: DevBuf,
    prefix: DevBuf,
    seq: DevBuf,
    last: DevBuf,
    /// Last: dropped after the buffers and the pool.
    gpu: Gpu,
}

impl Pair {
    /// A host pool and a device pool of `config` (the same but for the backend), with
    /// buffers for every slot of the pool.
    fn new(config: impl Fn(BackendKind) -> PoolConfig, seed: u64) -> Self {
        let host = config(BackendKind::Host);
        let bytes = 8 * (host.size as usize + host.page_size as usize);
        let gpu = Gpu::new(true);
        Pair {
            host: Pool::new(host).unwrap(),
            device: DevicePool::new(config(CUDA0)).unwrap(),
            rng: rng::Rng(seed),
            indices: DevBuf::new(bytes),
            out: DevBuf::new(bytes),
            prefix: DevBuf::new(8 * 1024),
            seq: DevBuf::new(8 * 1024),
            last: DevBuf::new(8 * 1024),
            gpu,
        }
    }

    /// Frees `row[start .. start + len]` as a segment on the device pool and waits for it.
    fn device_free_segment(&mut self, row: &[i64], start: usize, len: usize) {
        self.indices.upload(row);
        // SAFETY: `indices` holds the row; synchronized below.
        unsafe {
            self.device
                .free_segment(self.indices.ptr, row.len(), start, len, self.gpu.stream)
        }
        .unwrap();
        self.gpu.sync();
    }

    /// Frees `row[start..]` as a segment on both pools, where the host refuses: the device
    /// must fault with the host's error kind, at a position the host's message names
    /// (`row[i]`), and free nothing; then it is recovered. Returns the position named.
    fn refused_segment_free(&mut self, row: &[i64], start: usize, what: &str) -> i64 {
        let len = row.len() - start;
        let host_err = self.host.free_segment(row, start, len).unwrap_err();
        let before = unsafe { self.device.backup_state(self.gpu.stream) }.unwrap();
        let allocated = allocated_pages_on_device(&self.device);
        self.device_free_segment(row, start, len);
        let fault = self.device.fault().expect("the device pool faults");
        assert_eq!(fault.kind, host_err.kind(), "{what}: {fault:?}");
        assert!(
            host_err
                .message()
                .contains(&format!("row[{}]", fault.position)),
            "{what}: {fault:?} / {host_err}"
        );
        assert_eq!(
            allocated_pages_on_device(&self.device),
            allocated,
            "{what}: nothing freed"
        );
        self.recover(&before);
        fault.position
    }

    /// Brings the faulted device pool back to `before`, and checks that it is clean again.
    fn recover(&mut self, before: &DeviceSnapshot) {
        unsafe { self.device.restore_state(before, self.gpu.stream) }.unwrap();
        self.gpu.sync();
        assert!(self.device.fault().is_none());
        let _ = self.device.check_device(); // the stale fault, reported once
        self.device.check_device().unwrap();
    }

    /// `rows` new requests of `tokens` tokens each, on both pools: the same indices.
    fn extend(&mut self, rows: usize, tokens: i64) -> Vec<Vec<i64>> {
        let prefix = vec![0i64; rows];
        let seq = vec![tokens; rows];
        let last = vec![-1i64; rows];
        let total = rows as u64 * tokens as u64;
        let mut host_out = vec![0i64; total as usize];
        self.host
            .alloc_extend(&prefix, &seq, &last, total, &mut host_out)
            .unwrap();
        self.prefix.upload(&prefix);
        self.seq.upload(&seq);
        self.last.upload(&last);
        // SAFETY: the buffers hold `rows` lengths / `total` outputs; synchronized below.
        unsafe {
            self.device.alloc_extend(
                &prefix,
                &seq,
                self.prefix.ptr,
                self.seq.ptr,
                self.last.ptr,
                total,
                self.out.ptr,
                total as usize,
                self.gpu.stream,
            )
        }
        .unwrap();
        self.gpu.sync();
        assert_eq!(
            self.out.download::<i64>(total as usize),
            host_out,
            "alloc_extend"
        );
        host_out
            .chunks(tokens as usize)
            .map(<[i64]>::to_vec)
            .collect()
    }

    /// Frees the slots of `rows` by index in one call on both pools, shuffled.
    fn free_rows(&mut self, rows: &[Vec<i64>]) {
        let mut indices: Vec<i64> = rows.concat();
        self.rng.shuffle(&mut indices);
        assert!(indices.len() > 4096, "the multi-block path");
        self.host.free(&indices).unwrap();
        self.indices.upload(&indices);
        // SAFETY: `indices` holds them; synchronized below.
        unsafe {
            self.device
                .free(self.indices.ptr, indices.len(), self.gpu.stream)
        }
        .unwrap();
        self.gpu.sync();
        self.device.check_device().unwrap();
        assert_eq!(
            self.device.available_size_bound(),
            (self.host.available_size(), true)
        );
    }

    /// Allocates every free slot on both pools (`alloc`): the whole free list, in order.
    fn alloc_all(&mut self) {
        let n = self.host.available_size() as usize;
        let mut host_out = vec![0i64; n];
        self.host.alloc(n, &mut host_out).unwrap();
        // SAFETY: `out` holds the whole pool.
        unsafe { self.device.alloc(n, self.out.ptr, n, self.gpu.stream) }.unwrap();
        self.gpu.sync();
        assert_eq!(
            self.out.download::<i64>(n),
            host_out,
            "the free list's order"
        );
        assert_eq!(self.device.available_size_bound(), (0, true));
    }
}

/// A paged free by index of a million indices (65,536 pages of 16 slots, shuffled, every
/// page named by 16 indices): the multi-block claim, count and release over the page map.
/// The pages must reach the front of the free list in ascending order (SGLang's
/// `unique(indices // page_size)`), exactly as on the host pool; a bad index anywhere must
/// free nothing and leave no page claimed.
#[test]
#[ignore = "needs a CUDA GPU: run with --ignored on a GPU machine"]
fn a_million_index_paged_free_releases_pages_in_ascending_order() {
    let slots: u64 = 1 << 20;
    let ps = 16u32;
    let config = |backend| PoolConfig {
        size: slots,
        page_size: ps,
        need_sort: false,
        index_type: IndexType::I64,
        backend,
    };
    let mut p = Pair::new(config, 9);
    let pages = slots / u64::from(ps);

    // The whole pool in 1,024 requests of 64 pages.
    let mut rows = p.extend(1024, 1024);
    assert_eq!(p.device.available_size_bound(), (0, true));

    // Bad: every index but one request's plus one bad one (a slot twice, then the padding
    // slot; the host refuses more indices than slots by itself): a fault, nothing freed, no
    // page left claimed.
    for bad in [rows[700][5], 0] {
        let mut indices: Vec<i64> = rows[1..].concat();
        p.rng.shuffle(&mut indices);
        let at = p.rng.below(indices.len() as u64) as usize;
        indices.insert(at, bad);
        let host_err = p.host.free(&indices).unwrap_err().kind();
        let before = unsafe { p.device.backup_state(p.gpu.stream) }.unwrap();
        p.indices.upload(&indices);
        // SAFETY: as in `free_rows`.
        unsafe { p.device.free(p.indices.ptr, indices.len(), p.gpu.stream) }.unwrap();
        p.gpu.sync();
        assert_eq!(p.device.fault().map(|f| f.kind), Some(host_err));
        assert_eq!(
            allocated_pages_on_device(&p.device),
            pages as usize,
            "a faulted free by index freed or left claimed pages"
        );
        assert_eq!(p.device.available_size_bound(), (0, true));
        p.recover(&before);
    }

    // Half of the requests, then new requests with partial last pages from the front of
    // the free list, then everything still allocated: the free list must be the host's.
    let mut half = Vec::new();
    for i in (0..rows.len()).rev() {
        if p.rng.chance(50) {
            half.push(rows.swap_remove(i));
        }
    }
    p.free_rows(&half);
    rows.extend(p.extend(300, 700));
    p.free_rows(&rows);
    assert_eq!(p.device.available_size_bound(), (slots, true));

    // Every one of the million slots in one call.
    let rows = p.extend(1024, 1024);
    p.free_rows(&rows);
    assert_eq!(p.host.available_size(), slots);
    p.alloc_all();
}

/// Segment frees on page sizes the lockstep test does not run, each a different shape of the
/// segment kernel's lane groups (`segment_lanes`): 2 (one lane a page, 32 pages a warp), 48
/// (not a power of two: 16 lanes, 4 of them past the page), 128 (a whole warp, one step) and
/// 256 (a whole warp, two steps). Rows of 4.5 pages are freed as segments, tail first from a
/// page boundary, then the head, on both pools; one row in four is first freed with one slot
/// of the tail broken (not the first of its page): the device must fault as the host
/// refuses, naming the same position, free nothing, and recover from a snapshot. At the end
/// the free lists must be the host's, in order.
#[test]
#[ignore = "needs a CUDA GPU: run with --ignored on a GPU machine"]
fn segment_frees_of_odd_page_sizes_match_the_host() {
    for ps in [2u32, 48, 128, 256] {
        let slots = 4096 * u64::from(ps);
        let mut p = Pair::new(|backend| config(backend, ps), u64::from(ps));
        let psz = ps as usize;
        let rows = p.extend(200, i64::from(ps) * 9 / 2);
        for (r, row) in rows.iter().enumerate() {
            // A page boundary inside the row, with whole pages after it (4.5 pages a row).
            let cut = (1 + p.rng.below(3) as usize) * psz;
            if r % 4 == 0 {
                // A slot of one of the segment's whole pages, not the page's first.
                let whole = (4 * psz - cut) / psz;
                let head = cut + p.rng.below(whole as u64) as usize * psz;
                let at = head + 1 + p.rng.below(ps as u64 - 1) as usize;
                let mut bad = row.clone();
                bad[at] += 1;
                let named = p.refused_segment_free(&bad, cut, &format!("page_size {ps}"));
                assert_eq!(named, at as i64, "page_size {ps}: the broken slot");
            }
            for (start, len) in [(cut, row.len() - cut), (0, cut)] {
                p.host.free_segment(row, start, len).unwrap();
                p.device_free_segment(row, start, len);
                p.device.check_device().unwrap();
                assert_eq!(
                    p.device.available_size_bound(),
                    (p.host.available_size(), true),
                    "page_size {ps}"
                );
            }
        }
        assert_eq!(p.host.available_size(), slots);
        p.alloc_all();
    }
}

/// Segments of more pages than the segment kernel's grid has lane groups (page size 16:
/// 67,584 groups of 4 lanes at 264 blocks, page size 64: 16,896 of 16), so that each group
/// takes several pages, one a pass (the lockstep test's segments fit in one pass). One
/// request's row of about 2.4 M slots is freed as a segment on both pools; first, on a
/// snapshot, with one slot broken in each quarter of the row (not a page's first: not
/// contiguous) and with the row's second half already freed (every page of it already
/// free): the device must fault as the host refuses, naming the same position, and free
/// nothing. At the end the free lists must be the host's, in order.
#[test]
#[ignore = "needs a CUDA GPU: run with --ignored on a GPU machine"]
fn segment_frees_longer_than_the_grid_match_the_host() {
    for (ps, pages) in [(16u32, 150_000usize), (64, 40_000)] {
        let psz = ps as usize;
        let size = (pages as u64 + 64) * u64::from(ps);
        let mut p = Pair::new(
            |backend| PoolConfig {
                size,
                ..config(backend, ps)
            },
            u64::from(ps),
        );
        let row = p.extend(1, (pages * psz) as i64).remove(0);
        let half = row.len() / 2 / psz * psz;
        for quarter in 0..4 {
            let page = (quarter * pages + p.rng.below(pages as u64) as usize) / 4;
            let at = page * psz + 1 + p.rng.below(u64::from(ps) - 1) as usize;
            let mut bad = row.clone();
            bad[at] += 1;
            let named = p.refused_segment_free(&bad, 0, &format!("page_size {ps}, a broken slot"));
            assert_eq!(named, at as i64, "page_size {ps}: the broken slot");
        }
        // The second half freed, then the whole row: its first page already free is named.
        p.host.free_segment(&row, half, row.len() - half).unwrap();
        p.device_free_segment(&row, half, row.len() - half);
        let named = p.refused_segment_free(&row, 0, &format!("page_size {ps}, half free"));
        assert_eq!(
            named, half as i64,
            "page_size {ps}: the first page already free"
        );
        p.host.free_segment(&row, 0, half).unwrap();
        p.device_free_segment(&row, 0, half);
        p.device.check_device().unwrap();
        assert_eq!(p.host.available_size(), size);
        assert_eq!(p.device.available_size_bound(), (size, true));
        p.alloc_all();
    }
}

/// A long extend of a small batch runs on several blocks that each decide the whole call
/// (`kvp_extend_blocks_*`, ~512 tokens a block): slots, fill points and verdicts
/// must be the host's whichever block reads a continued page after another block of the call
/// has advanced it. Random rounds mix continuations with long fresh requests, sometimes an
/// empty request on a continued page (valid: it adds nothing), sometimes a stale or a second
/// continuation late in the batch (refused whole: padding only, nothing past the plan, no
/// page taken).
#[test]
#[ignore = "needs a CUDA GPU"]
fn long_extends_of_small_batches_decide_alike_in_every_block() {
    let kinds = deciding_block_rounds(false);
    println!(
        "long extends: {} batches of at most 32 requests and a block, {} of more requests \
         than blocks, {} larger; {} with a sharer accepted, {} refused",
        kinds.few, kinds.spread, kinds.more, kinds.sharers_accepted, kinds.refused
    );
    assert!(
        kinds.sharers_accepted > 0
            && kinds.refused > 0
            && kinds.few > 0
            && kinds.spread > 0
            && kinds.more > 0,
        "{kinds:?}"
    );
}

/// The same rounds with a few hundred more fresh requests in most batches (a thousand or two
/// now and then): extends of 257-1,024 requests run on blocks of 512 or 1,024 threads that
/// each decide the call (`kvp_extend_blocks{512,1024}_*`; by row, up to 2,048 requests on
/// 1,024 threads of two each: tests/cuda_rows.rs), larger ones on the ticketed kernel
/// (`kvp_extend_*`),
/// whose blocks check their requests' last_locs in parallel, one block possibly after
/// another has moved a continued page's fill point. An empty request on that page stays
/// valid (the host's rule) whichever block checks it first, on either kernel.
#[test]
#[ignore = "needs a CUDA GPU"]
fn wide_extends_decide_alike_in_every_block() {
    let kinds = deciding_block_rounds(true);
    println!(
        "wide extends: {} batches of 257-1,024 requests (deciding blocks), {} of 1,025-2,048 and \
         {} larger (ticketed kernel); {} with a sharer accepted, {} refused",
        kinds.wide, kinds.paired, kinds.ticketed, kinds.sharers_accepted, kinds.refused
    );
    assert!(
        kinds.sharers_accepted > 0
            && kinds.refused > 0
            && kinds.wide > 0
            && kinds.paired > 0
            && kinds.ticketed > 0,
        "{kinds:?}"
    );
}

/// What [`deciding_block_rounds`] ran: batches by kernel (of more than 1,024 tokens: `few`,
/// `spread`, `more`; by requests, 257-1,024 on the wide deciding blocks, 1,025-2,048 and more
/// on the ticketed kernel: `wide`, `paired`, `ticketed`), calls accepted with an empty request
/// on a continued page, calls refused.
#[derive(Debug, Default)]
struct RoundKinds {
    few: usize,
    spread: usize,
    more: usize,
    wide: usize,
    paired: usize,
    ticketed: usize,
    sharers_accepted: usize,
    refused: usize,
}

/// Random extend rounds on a host and a device pool (page sizes 1, 16, 64; 12 seeds of 8
/// rounds each, wide: `KVPOOL_WIDE_SEEDS`), compared slot by slot, fault by fault. `wide`:
/// most batches get 220-1,000 more short fresh requests, a quarter of them 1,100-2,300
/// (a round's batch then holds 257 to about 2,600).
fn deciding_block_rounds(wide: bool) -> RoundKinds {
    const GUARD: usize = 512;
    const CAP: usize = 1 << 16;
    const MAX_BATCH: usize = 2700;
    let gpu = Gpu::new(false);
    let (prefix_d, seq_d, last_d) = DevBuf::lengths(MAX_BATCH);
    let out = DevBuf::new(8 * (CAP + GUARD));
    let mut kinds = RoundKinds::default();
    // Wide rounds keep at most this many rows (others are dropped from the test's view:
    // their pages stay allocated on both pools), so continuations stay a fraction.
    let keep_rows = if wide { 300 } else { usize::MAX };
    let seeds = if wide {
        rounds_from_env("KVPOOL_WIDE_SEEDS", 12) as u64
    } else {
        12
    };
    for ps in [1u32, 16, 64] {
        for seed in 0..seeds {
            let mut rng = rng::Rng(seed * 1000 + u64::from(ps) + if wide { 7 } else { 0 });
            let pool_config = |backend| PoolConfig {
                size: if wide { 1 << 21 } else { 32768 * u64::from(ps) },
                ..config(backend, ps)
            };
            let mut host = Pool::new(pool_config(BackendKind::Host)).unwrap();
            let mut device = DevicePool::new(pool_config(CUDA0)).unwrap();
            let mut rows: Vec<Vec<i64>> = Vec::new();
            for round in 0..8 {
                // (prefix, seq, last_loc, row it extends)
                let mut batch: Vec<(i64, i64, i64, Option<usize>)> = Vec::new();
                for (i, row) in rows.iter().enumerate() {
                    if rng.chance(60) {
                        let len = row.len() as i64;
                        let add = rng.range(1, 2 * u64::from(ps)) as i64;
                        batch.push((len, len + add, *row.last().unwrap(), Some(i)));
                    }
                }
                for _ in 0..rng.range(1, 3) {
                    batch.push((0, rng.range(300, 1500) as i64, -1, None));
                }
                for _ in 0..rng.range(0, 6) {
                    batch.push((0, rng.range(1, 40) as i64, -1, None));
                }
                // Now and then a burst of short fresh requests, so that batches of more than
                // 32 requests (kvp_extend_blocks_*) come up at every page size; wide rounds
                // mostly a larger one.
                if wide && rng.chance(85) {
                    // Now and then past 1,024 requests and past 2,048 (the ticketed kernel),
                    // in shorter requests.
                    let big = rng.chance(25);
                    let (count, longest) = if big {
                        (rng.range(1100, 2300), 8)
                    } else {
                        (rng.range(220, 1000), 40)
                    };
                    for _ in 0..count {
                        batch.push((0, rng.range(1, longest) as i64, -1, None));
                    }
                } else if rows.len() < 100 && rng.chance(40) {
                    for _ in 0..rng.range(30, 50) {
                        batch.push((0, rng.range(1, 40) as i64, -1, None));
                    }
                }
                // Shuffle, so that continuations land in any block's tokens.
                rng.shuffle(&mut batch);
                // An empty request on a page another request continues.
                let continued = batch
                    .iter()
                    .position(|&(p, s, _, row)| row.is_some() && p % i64::from(ps) != 0 && s > p);
                let mut sharer = false;
                if let Some(k) = continued.filter(|_| rng.chance(70)) {
                    let (p, _, l, _) = batch[k];
                    batch.insert(rng.below(batch.len() as u64 + 1) as usize, (p, p, l, None));
                    sharer = true;
                }
                // Now and then a bad continuation at the batch's end (only the device sees
                // it): a second continuation of a page, or a stale one.
                let bad = round >= 2 && rng.chance(30);
                if bad {
                    let k = batch.iter().position(|&(_, _, _, row)| row.is_some());
                    if let Some(k) = k {
                        let (p, s, l, row) = batch[k];
                        let r = &rows[row.unwrap()];
                        if rng.chance(50)
                            && r.len() >= 2
                            && !(r.len() - 1).is_multiple_of(ps as usize)
                        {
                            batch.push((p - 1, s - 1, r[r.len() - 2], None));
                        } else {
                            batch.push((p, p + 1, l, None));
                        }
                    }
                }
                let prefix: Vec<i64> = batch.iter().map(|b| b.0).collect();
                let seq: Vec<i64> = batch.iter().map(|b| b.1).collect();
                let last: Vec<i64> = batch.iter().map(|b| b.2).collect();
                let total: usize = batch.iter().map(|b| (b.1 - b.0) as usize).sum();
                let what = format!("ps {ps} seed {seed} round {round}: {batch:?}");
                assert!(total <= CAP && batch.len() <= MAX_BATCH, "{what}");
                match batch.len() {
                    n if n > 2048 => kinds.ticketed += 1,
                    n if n > 1024 => kinds.paired += 1,
                    n if n > 256 => kinds.wide += 1,
                    n if total > 1024 && n <= 32 && n > total.div_ceil(512) => kinds.spread += 1,
                    n if total > 1024 && n <= 32 => kinds.few += 1,
                    _ if total > 1024 => kinds.more += 1,
                    _ => {}
                }
                let mut want = vec![0i64; total];
                let host_result = host.alloc_extend(&prefix, &seq, &last, total as u64, &mut want);
                let lengths = [&prefix_d, &seq_d, &last_d];
                let call = call_guarded(&mut device, &gpu, &out, total, GUARD, &what, |device| {
                    extend_on_device(device, &gpu, lengths, [&prefix, &seq, &last], &out)
                });
                match host_result {
                    Ok(()) => {
                        assert!(device.fault().is_none(), "{what}: {:?}", device.fault());
                        assert_eq!(call.got, want, "{what}");
                        kinds.sharers_accepted += usize::from(sharer);
                        let mut at = 0;
                        for &(p, s, _, row) in &batch {
                            let slots = want[at..at + (s - p) as usize].to_vec();
                            at += slots.len();
                            match row {
                                Some(i) => rows[i].extend(slots),
                                None if p == 0 && rows.len() < keep_rows => rows.push(slots),
                                None => {}
                            }
                        }
                    }
                    Err(e) => {
                        assert!(bad, "{what}: the host refused a good call: {e}");
                        let fault = device.fault().unwrap_or_else(|| panic!("{what}: no fault"));
                        assert_eq!(fault.kind, e.kind(), "{what}: {fault:?} vs {e}");
                        assert_eq!(fault.position, batch.len() as i64 - 1, "{what}: {fault:?}");
                        call.assert_refused_then_restore(&mut device, &gpu, &what);
                        kinds.refused += 1;
                    }
                }
                assert_eq!(device.available_size(), host.available_size(), "{what}");
            }
        }
    }
    kinds
}

/// Long prefills on several blocks (src/cuda/pool.rs: `span_grid`, `few_shape`). Past one
/// block an SM, extends of a few requests run blocks of 256 tokens on 128 threads, then of
/// 512 on 256 (`kvp_extend_{few,one}_blocks_{128,256}_*`); past 264 blocks (`TARGET_BLOCKS`)
/// each block takes more than 512 tokens: past what its writers plan (the general loop) and,
/// past 4,096 new pages a block (`STAGE_CAP`), past what it stages in shared memory (each
/// token's page read from the ring). Fresh batches of 1-45 requests of 20 k-1.2 M tokens at
/// page sizes 1, 16 and 64 (at page size 1, 758-4,546 tokens a block past 264 blocks; the
/// 1.15-1.2 M ones unstaged), then each request continued by half as many. Every slot must be
/// the host's.
#[test]
#[ignore = "needs a CUDA GPU"]
fn extends_of_long_prefills_on_several_blocks_match_the_host() {
    const GUARD: usize = 512;
    const SIZE: u64 = 1 << 21;
    let gpu = Gpu::new(false);
    let (prefix_d, seq_d, last_d) = DevBuf::lengths(64);
    let out = DevBuf::new(8 * (1_250_000 + GUARD));
    let mut rng = rng::Rng(21);
    for (ps, requests, total) in [
        (1u32, 1u64, 40_000u64),
        (16, 4, 66_000),
        (64, 8, 130_000),
        (1, 1, 300_000),
        (1, 2, 200_000),
        (16, 2, 300_000),
        (1, 45, 320_000),
        (1, 3, 1_200_000),
        (1, 40, 1_150_000),
    ] {
        let pool_config = |backend| PoolConfig {
            size: SIZE,
            ..config(backend, ps)
        };
        let mut host = Pool::new(pool_config(BackendKind::Host)).unwrap();
        let mut device = DevicePool::new(pool_config(CUDA0)).unwrap();
        // Round 0: fresh requests; round 1: each continued (prefix = its length so far).
        let mut rows: Vec<(i64, i64)> = Vec::new(); // (length, last slot)
        for round in 0..2 {
            let mut lens: Vec<i64> = (0..requests)
                .map(|_| rng.range(1, 2 * total / requests) as i64)
                .collect();
            let sum: i64 = lens.iter().sum();
            // Scale to about `total / (round + 1)` tokens in all.
            let want_total = (total / (round + 1)) as i64;
            for l in &mut lens {
                *l = (*l * want_total / sum).max(1);
            }
            let (prefix, last): (Vec<i64>, Vec<i64>) = if round == 0 {
                (vec![0; lens.len()], vec![-1; lens.len()])
            } else {
                rows.iter().copied().unzip()
            };
            let seq: Vec<i64> = prefix.iter().zip(&lens).map(|(p, l)| p + l).collect();
            let n: usize = lens.iter().sum::<i64>() as usize;
            let what = format!("page size {ps}: {requests} requests of {n} tokens, round {round}");
            let mut want = vec![0i64; n];
            host.alloc_extend(&prefix, &seq, &last, n as u64, &mut want)
                .unwrap();
            let lengths = [&prefix_d, &seq_d, &last_d];
            let call = call_guarded(&mut device, &gpu, &out, n, GUARD, &what, |device| {
                extend_on_device(device, &gpu, lengths, [&prefix, &seq, &last], &out)
            });
            assert!(device.fault().is_none(), "{what}: {:?}", device.fault());
            assert_eq!(call.got, want, "{what}");
            assert_eq!(device.available_size(), host.available_size(), "{what}");
            let mut at = 0;
            rows = seq
                .iter()
                .zip(&lens)
                .map(|(&s, &l)| {
                    at += l as usize;
                    (s, want[at - 1])
                })
                .collect();
        }
    }
}

/// Rounds of a randomized GPU test: `var` if set to a number (run.sh sets fewer under a
/// sanitizer), else `default`.
fn rounds_from_env(var: &str, default: usize) -> usize {
    std::env::var(var)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Where a host error names its request: `last_loc[i]`, `seq_lens[i]` or `request i`.
fn host_position(message: &str) -> Option<i64> {
    ["last_loc[", "seq_lens[", "request "]
        .iter()
        .find_map(|key| {
            let at = message.find(key)? + key.len();
            let digits: String = message[at..]
                .chars()
                .take_while(char::is_ascii_digit)
                .collect();
            digits.parse().ok()
        })
}

/// Decodes of every size on the kernels that serve them (`kvp_decode_{32,...,1024}_*`
/// up to 1,024 requests, `kvp_decode_cluster{4,8}_*` up to 2,048 and 4,096 where the device
/// runs clusters, the ticketed kernel beyond): against the host pool, the same slots for
/// good batches, and for batches with bad last_locs (stale, a second continuation of a
/// page, out of range, in the reserved page, off its page position, non-empty for an empty
/// prefix; sometimes two) the same error kind naming the same request, padding only, nothing
/// past the batch, no page taken. (The ticketed kernel names the host's request when two
/// requests continue one page, as here; see `check_last_loc` in kernels/pool.cu.)
#[test]
#[ignore = "needs a CUDA GPU"]
fn decode_kernels_of_every_size_name_the_hosts_first_bad_request() {
    const GUARD: usize = 256;
    const ROWS: usize = 4500;
    const SIZES: [usize; 21] = [
        1, 5, 32, 33, 64, 65, 128, 129, 256, 257, 512, 513, 1024, 1025, 1300, 2048, 2049, 3001,
        4095, 4096, 4097,
    ];
    let gpu = Gpu::new(false);
    let clusters = gpu.cluster_launch();
    eprintln!("the device launches clusters: {clusters}");
    let (seq_d, last_d, prefix_d) = DevBuf::lengths(ROWS);
    let out = DevBuf::new(8 * (4 * 64 * ROWS + GUARD));
    // Rounds per batch size (KVPOOL_DECODE_ROUNDS; fewer under a sanitizer).
    let rounds = rounds_from_env("KVPOOL_DECODE_ROUNDS", 3);
    let mut outcomes = Outcomes::default();
    for ps in [1u32, 16, 64] {
        let ps64 = i64::from(ps);
        for seed in 0..2u64 {
            let mut rng = rng::Rng(seed * 7919 + u64::from(ps));
            let pool_config = |backend| PoolConfig {
                size: 65536 * u64::from(ps),
                ..config(backend, ps)
            };
            let size = pool_config(BackendKind::Host).size as i64;
            let mut host = Pool::new(pool_config(BackendKind::Host)).unwrap();
            let mut device = DevicePool::new(pool_config(CUDA0)).unwrap();
            // Where the device runs clusters (sm_90), the pool decodes on them.
            assert_eq!(device.decodes_on_clusters(), clusters);
            // The requests: fresh extends of 1 .. 3 pages' worth of tokens, 260 a call.
            let mut rows: Vec<Vec<i64>> = Vec::new();
            while rows.len() < ROWS {
                let seq: Vec<i64> = (0..260.min(ROWS - rows.len()))
                    .map(|_| rng.range(1, 3 * u64::from(ps)) as i64)
                    .collect();
                let prefix = vec![0i64; seq.len()];
                let last = vec![-1i64; seq.len()];
                let total: usize = seq.iter().sum::<i64>() as usize;
                let mut want = vec![0i64; total];
                host.alloc_extend(&prefix, &seq, &last, total as u64, &mut want)
                    .unwrap();
                let lengths = [&prefix_d, &seq_d, &last_d];
                extend_on_device(&mut device, &gpu, lengths, [&prefix, &seq, &last], &out);
                gpu.sync();
                assert_eq!(
                    out.download::<i64>(total),
                    want,
                    "ps {ps}: the set-up extend"
                );
                let mut at = 0;
                for &s in &seq {
                    rows.push(want[at..at + s as usize].to_vec());
                    at += s as usize;
                }
            }
            for round in 0..rounds * SIZES.len() {
                let bs = SIZES[round % SIZES.len()];
                // Distinct requests in random order: (row, seq, last_loc).
                let mut order: Vec<usize> = (0..ROWS).collect();
                rng.shuffle(&mut order);
                let mut batch: Vec<(usize, i64, i64)> = order[..bs]
                    .iter()
                    .map(|&r| (r, rows[r].len() as i64 + 1, *rows[r].last().unwrap()))
                    .collect();
                let bad = rng.chance(60);
                let corruptions = if bad { rng.range(1, 2) } else { 0 };
                // At most one repeated request a batch: with three requests on one page, the
                // ticketed kernel (more than 4,096, or 1,024 without clusters) may name
                // another than the host's.
                let mut repeated = false;
                for _ in 0..corruptions {
                    let k = rng.below(bs as u64) as usize;
                    let (r, seq, last) = batch[k];
                    batch[k] = match rng.below(6) {
                        0 if rows[r].len() >= 2 => (r, seq, rows[r][rows[r].len() - 2]),
                        1 if bs > 1 && !repeated => {
                            repeated = true;
                            let j = (k + 1 + rng.below(bs as u64 - 1) as usize) % bs;
                            batch[j]
                        }
                        2 => (r, seq, size + 3 * ps64),
                        3 => (r, seq, ps64 - 1),
                        4 => (r, seq, last - 1),
                        _ => (r, 1, last),
                    };
                }
                let seq: Vec<i64> = batch.iter().map(|b| b.1).collect();
                let last: Vec<i64> = batch.iter().map(|b| b.2).collect();
                let what = format!("ps {ps} seed {seed} round {round}, batch {bs}");
                let mut want = vec![0i64; bs];
                let host_result = host.alloc_decode(&seq, &last, &mut want);
                seq_d.upload(&seq);
                last_d.upload(&last);
                let call = call_guarded(&mut device, &gpu, &out, bs, GUARD, &what, |device| {
                    // SAFETY: the buffers hold what the call says; call_guarded synchronizes.
                    unsafe {
                        device
                            .alloc_decode(&seq, seq_d.ptr, last_d.ptr, out.ptr, bs, gpu.stream)
                            .unwrap();
                    }
                });
                if outcomes.settle(&host, host_result, &want, &mut device, &gpu, &call, &what) {
                    // A request repeated whole (a page start, so valid) is one request.
                    let mut seen = std::collections::HashSet::new();
                    for (k, &(r, _, _)) in batch.iter().enumerate() {
                        if seen.insert(r) {
                            rows[r].push(want[k]);
                        }
                    }
                }
            }
        }
    }
    // Both outcomes, many times (about 40% of the 6 * 21 * rounds batches are good).
    outcomes.assert_both_more_than(14 * rounds, "decode kernels");
}

/// Extends of a few requests on every shape of `kvp_extend_few_*` (one warp decides; one
/// block of 32, 64 or 256 threads, or several blocks), built for 32 requests or at most 1,
/// 2, 4 or 8 (`kvp_extend_one_*`, `kvp_extend_few{2,4,8}_*`), the same one-block shapes for
/// 33-64 requests, two a lane (`kvp_extend_pairs_*`), and the request-a-thread kernels past
/// them: against the host pool, the same slots for good batches, and for batches
/// with a bad request (a stale last_loc, a second continuation of a page, out of range, in
/// the reserved page, off its page position, non-empty for an empty prefix) the same error
/// kind naming the same request, padding only, nothing past the plan, no page taken.
#[test]
#[ignore = "needs a CUDA GPU"]
fn extends_of_a_few_requests_name_the_hosts_first_bad_request() {
    const GUARD: usize = 256;
    const ROWS: usize = 64;
    const CAP: usize = 1 << 14;
    const SIZES: [usize; 11] = [1, 2, 3, 5, 8, 17, 32, 33, 48, 63, 64];
    // Tokens a batch adds, in all: each of the one-block shapes (at most 64, 256 and 1,024
    // tokens) and several blocks.
    const TOKENS: [u64; 4] = [40, 200, 900, 3000];
    let gpu = Gpu::new(false);
    let (prefix_d, seq_d, last_d) = DevBuf::lengths(ROWS);
    let out = DevBuf::new(8 * (CAP + GUARD));
    let rounds = rounds_from_env("KVPOOL_EXTEND_ROUNDS", 2);
    let mut outcomes = Outcomes::default();
    for ps in [1u32, 16, 64] {
        let ps64 = i64::from(ps);
        for seed in 0..2u64 {
            let mut rng = rng::Rng(seed * 104_729 + u64::from(ps));
            let pool_config = |backend| PoolConfig {
                size: 1 << 20,
                ..config(backend, ps)
            };
            let size = pool_config(BackendKind::Host).size as i64;
            let mut host = Pool::new(pool_config(BackendKind::Host)).unwrap();
            let mut device = DevicePool::new(pool_config(CUDA0)).unwrap();
            let mut rows: Vec<Vec<i64>> = Vec::new();
            for round in 0..rounds * SIZES.len() * TOKENS.len() {
                let bs = SIZES[round % SIZES.len()];
                let per = (TOKENS[round / SIZES.len() % TOKENS.len()] / bs as u64).max(1);
                // (prefix, seq, last_loc, row): rows continued in random order, new ones
                // while there are fewer than ROWS.
                let mut order: Vec<usize> = (0..rows.len()).collect();
                rng.shuffle(&mut order);
                let mut batch: Vec<(i64, i64, i64, Option<usize>)> = Vec::new();
                for k in 0..bs {
                    let add = rng.range(1, 2 * per) as i64;
                    match order.get(k) {
                        Some(&r) if rows.len() >= ROWS || rng.chance(70) => {
                            let len = rows[r].len() as i64;
                            batch.push((len, len + add, *rows[r].last().unwrap(), Some(r)));
                        }
                        _ => batch.push((0, add, -1, None)),
                    }
                }
                let bad = rng.chance(50);
                if bad {
                    let k = rng.below(bs as u64) as usize;
                    let (p, s, l, row) = batch[k];
                    batch[k] = match (rng.below(6), row) {
                        (0, Some(r)) if rows[r].len() >= 2 => {
                            (p, s, rows[r][rows[r].len() - 2], None)
                        }
                        (1, Some(_)) if bs > 1 => {
                            // Another request continuing the same page.
                            let j = (k + 1 + rng.below(bs as u64 - 1) as usize) % bs;
                            let (_, s2, _, _) = batch[j];
                            batch[j] = (p, p + (s2 - batch[j].0).max(1), l, None);
                            (p, s, l, row)
                        }
                        (2, _) => (p.max(1), s.max(p.max(1)), size + 3 * ps64, None),
                        (3, _) => (p.max(1), s.max(p.max(1)), ps64 - 1, None),
                        (4, Some(_)) => (p, s, l - 1, None),
                        _ => (0, s - p, 5 * ps64, None),
                    };
                }
                let prefix: Vec<i64> = batch.iter().map(|b| b.0).collect();
                let seq: Vec<i64> = batch.iter().map(|b| b.1).collect();
                let last: Vec<i64> = batch.iter().map(|b| b.2).collect();
                let total: usize = batch.iter().map(|b| (b.1 - b.0) as usize).sum();
                let what = format!("ps {ps} seed {seed} round {round}: {batch:?}");
                assert!(total <= CAP, "{what}");
                let mut want = vec![0i64; total];
                let host_result = host.alloc_extend(&prefix, &seq, &last, total as u64, &mut want);
                let lengths = [&prefix_d, &seq_d, &last_d];
                let call = call_guarded(&mut device, &gpu, &out, total, GUARD, &what, |device| {
                    extend_on_device(device, &gpu, lengths, [&prefix, &seq, &last], &out)
                });
                if let Err(e) = &host_result {
                    assert!(bad, "{what}: the host refused a good call: {e}");
                }
                if outcomes.settle(&host, host_result, &want, &mut device, &gpu, &call, &what) {
                    let mut at = 0;
                    for &(p, s, _, row) in &batch {
                        let slots = want[at..at + (s - p) as usize].to_vec();
                        at += slots.len();
                        match row {
                            Some(r) => rows[r].extend(slots),
                            None if p == 0 && rows.len() < ROWS => rows.push(slots),
                            None => {}
                        }
                    }
                }
            }
        }
    }
    outcomes.assert_both_more_than(5 * rounds, "extends of a few requests");
}

/// The one-block extend kernels (extend_few's and, since the forty-ninth session, the pairs
/// kernel's: 33-64 requests of up to 512 tokens) load the ring's first pages at the host's
/// head hint with their first round trip and use them only if the cursor's head is that
/// position (the several-block kernels take no hint; a form that did, variant G of
/// BENCHMARKS.md's run s48-1, gave the host's slots in this test's first version, at page
/// size 1): a right hint, a wrong one (a position past the head) and none give the same
/// slots, the host pool's, through random extends of 1-96 requests (new and continued ones;
/// up to 3,000 tokens, so one block and several), `alloc`s of 1-40 whole pages (the alloc
/// kernel may take the hint for each thread's first page) and frees that move the head (by
/// segment: a count the host knows; by index: one it learns later). Whenever the host gives a
/// hint and the stream is idle, the hint is the cursor's head.
#[test]
#[ignore = "needs a CUDA GPU: run with --ignored on a GPU machine"]
fn extends_hand_out_the_same_slots_whatever_the_head_hint() {
    use kvpool::cuda::HintSkew;
    const MOST_TOKENS_A_CALL: usize = 3000;
    const MOST_REQUESTS: u64 = 96;
    // One block takes at most this many tokens (src/cuda/pool.rs: SPAN_TOKENS).
    const ONE_BLOCK_TOKENS: usize = 512;
    // The most requests of the pairs kernel (src/cuda/pool.rs: PAIR_BATCH).
    const PAIR_BATCH: u64 = 64;
    const PAGES: u64 = 16384;
    let gpu = Gpu::new(false);
    let s = gpu.stream;
    let (prefix_d, seq_d, last_d) = DevBuf::lengths(MOST_REQUESTS as usize);
    let out = DevBuf::new(8 * MOST_TOKENS_A_CALL);
    let row_d = DevBuf::new(8 * PAGES as usize * 64);
    let config = |backend, ps: u32| PoolConfig {
        size: PAGES * u64::from(ps),
        ..config(backend, ps)
    };
    for ps in [1u32, 16, 64] {
        let skews = [
            HintSkew::AsIs,
            HintSkew::By(1),
            HintSkew::By(2048),
            HintSkew::Absent,
        ];
        let mut pools: Vec<DevicePool> = skews
            .iter()
            .map(|&skew| {
                let mut d = DevicePool::new(config(CUDA0, ps)).unwrap();
                d.debug_skew_head_hint(skew);
                d
            })
            .collect();
        let mut host = Pool::new(config(BackendKind::Host, ps)).unwrap();
        let mut rng = rng::Rng(4099 + u64::from(ps));
        let mut live: Vec<Vec<i64>> = Vec::new();
        let (mut extends, mut hinted, mut frees) = (0, 0, 0);
        // Hinted calls on several blocks: of at most 32 requests, of more; on the pairs kernel.
        let (mut several_few, mut several_many, mut pairs) = (0, 0, 0);
        let (mut allocs, mut allocs_hinted) = (0, 0);
        for round in 0..400 {
            let what = format!("ps {ps} round {round}");
            // Room for any call (a row is a request's slots: a call may make dozens).
            let short = |host: &Pool| host.available_size() < 4000 * u64::from(ps);
            if !live.is_empty() && (rng.chance(35) || short(&host)) {
                // A row, or rows until the pool has room.
                loop {
                    let row = live.swap_remove(rng.below(live.len() as u64) as usize);
                    let by_index = rng.chance(40);
                    if by_index {
                        host.free(&row).unwrap();
                    } else {
                        host.free_segment(&row, 0, row.len()).unwrap();
                    }
                    row_d.upload(&row);
                    for d in &mut pools {
                        // SAFETY: `row_d` holds the row; the stream is synchronized below.
                        unsafe {
                            if by_index {
                                d.free(row_d.ptr, row.len(), s)
                            } else {
                                d.free_segment(row_d.ptr, row.len(), 0, row.len(), s)
                            }
                        }
                        .unwrap();
                    }
                    gpu.sync();
                    frees += 1;
                    if live.is_empty() || !short(&host) {
                        break;
                    }
                }
                continue;
            }
            // `alloc` of 1-40 whole pages (a new row), one round in eight.
            if rng.chance(12) {
                let tokens = rng.range(1, 40) as usize * ps as usize;
                let mut want = vec![0i64; tokens];
                if host.alloc(tokens, &mut want).is_err() {
                    continue;
                }
                if pools[0].debug_layout().head_hint.is_some() {
                    allocs_hinted += 1;
                }
                for (d, skew) in pools.iter_mut().zip(&skews) {
                    // SAFETY: `out` holds MOST_TOKENS_A_CALL slots; synchronized below.
                    unsafe { d.alloc(tokens, out.ptr, MOST_TOKENS_A_CALL, s) }.unwrap();
                    gpu.sync();
                    assert!(d.fault().is_none(), "{what}, {skew:?}: {:?}", d.fault());
                    assert_eq!(out.download::<i64>(tokens), want, "{what}, {skew:?}: alloc");
                }
                live.push(want);
                allocs += 1;
                continue;
            }
            // New requests or continued distinct live ones, at most 3,000 tokens: 1-8 of up
            // to 100 tokens, 1-32 of up to 700, 33-96 of up to 60 or 33-64 of up to 8 (the
            // pairs kernel's; a call in four each).
            let (batch, most_tokens) = match rng.below(4) {
                0 => (rng.range(1, 8), 100),
                1 => (rng.range(1, 32), 700),
                2 => (rng.range(33, MOST_REQUESTS), 60),
                _ => (rng.range(33, PAIR_BATCH), 8),
            };
            let mut continued = Vec::new();
            let (mut prefix, mut seq, mut last) = (Vec::new(), Vec::new(), Vec::new());
            for _ in 0..batch {
                let room = (MOST_TOKENS_A_CALL
                    - seq
                        .iter()
                        .zip(&prefix)
                        .map(|(s, p): (&i64, &i64)| (s - p) as usize)
                        .sum::<usize>()) as u64;
                if room == 0 {
                    break;
                }
                let tokens = rng.range(1, room.min(most_tokens)) as i64;
                let pick = rng.below(live.len() as u64 + 2) as usize;
                if pick < live.len() && !continued.contains(&pick) && rng.chance(50) {
                    let row = &live[pick];
                    continued.push(pick);
                    prefix.push(row.len() as i64);
                    seq.push(row.len() as i64 + tokens);
                    last.push(*row.last().unwrap());
                } else {
                    continued.push(usize::MAX);
                    prefix.push(0);
                    seq.push(tokens);
                    last.push(-1);
                }
            }
            let total: usize = seq.iter().zip(&prefix).map(|(s, p)| (s - p) as usize).sum();
            let mut want = vec![0i64; total];
            if host
                .alloc_extend(&prefix, &seq, &last, total as u64, &mut want)
                .is_err()
            {
                continue; // out of slots: the host refuses it too (the device is not asked)
            }
            if pools[0].debug_layout().head_hint.is_some() {
                hinted += 1;
                if total > ONE_BLOCK_TOKENS {
                    if prefix.len() <= 32 {
                        several_few += 1;
                    } else {
                        several_many += 1;
                    }
                } else if prefix.len() > 32 && prefix.len() as u64 <= PAIR_BATCH {
                    pairs += 1;
                }
            }
            for (d, skew) in pools.iter_mut().zip(&skews) {
                let lengths = [&prefix_d, &seq_d, &last_d];
                extend_on_device(d, &gpu, lengths, [&prefix, &seq, &last], &out);
                gpu.sync();
                assert!(d.fault().is_none(), "{what}, {skew:?}: {:?}", d.fault());
                assert_eq!(out.download::<i64>(total), want, "{what}, {skew:?}: slots");
            }
            // With the stream idle, a given hint is the cursor's head.
            let layout = pools[0].debug_layout();
            if let Some(hint) = layout.head_hint {
                let cursor: Vec<u32> = gpu::read_device(layout.block + layout.cursor as u64, 8);
                assert_eq!(hint, cursor[0], "{what}: the hint is not the head");
            }
            let mut at = 0;
            for (k, &c) in continued.iter().enumerate() {
                let slots = &want[at..at + (seq[k] - prefix[k]) as usize];
                at += slots.len();
                if c == usize::MAX {
                    live.push(slots.to_vec());
                } else {
                    live[c].extend_from_slice(slots);
                }
            }
            extends += 1;
        }
        let counts = format!(
            "ps {ps}: {extends} extends ({hinted} with a hint, {several_few} of them of at most \
             32 requests on several blocks, {several_many} of more, {pairs} on the pairs \
             kernel), {allocs} allocs ({allocs_hinted} with a hint), {frees} frees"
        );
        eprintln!("{counts}");
        assert!(
            extends > 100
                && hinted > extends / 2
                && several_few > 20
                && several_many > 10
                && pairs > 10
                && allocs_hinted > 10
                && frees > 50,
            "{counts}"
        );
    }
}
