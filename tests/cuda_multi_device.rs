//! Device pools on several GPUs in one process, through the C ABI: a pool on device 0 and
//! one on device 1, each driven on its own stream with its calls interleaved (both devices'
//! work enqueued before either is waited for), each call made while the *other* device's
//! context is current (the pool must bind its own and give the caller's back). Every
//! output index is compared with a host pool twin, and the device pools' state digests with
//! the twins' digests. Then the foreign-stream check that one GPU cannot run: a call on
//! the pool of device 0 with a stream of device 1 (and the reverse) is refused with
//! `KVP_STATUS_WRONG_STREAM` and changes nothing (digest and available size unchanged).
//!
//! Needs CUDA GPUs: `#[ignore]`d by default. With one GPU it runs as a dry run (both pools
//! on device 0, each on its own stream) and says that the two-device parts were skipped.
//! Run: `cargo test --release --test cuda_multi_device -- --ignored --nocapture`
//! (`KVPOOL_MULTI_OPS` rounds, default 3000).

mod gpu;
mod rng;

use std::ffi::c_void;
use std::ptr::null_mut;

use cudarc::driver::sys::{self, CUcontext, CUdeviceptr, CUresult, CUstream};
use kvpool::ffi::*;
use kvpool::{BackendKind, IndexType, Pool, PoolConfig};

use rng::Rng;

fn ok(result: CUresult, what: &str) {
    assert_eq!(result, CUresult::CUDA_SUCCESS, "{what} failed");
}

fn current_context() -> CUcontext {
    let mut ctx = null_mut();
    // SAFETY: valid out-pointer.
    ok(unsafe { sys::cuCtxGetCurrent(&mut ctx) }, "cuCtxGetCurrent");
    ctx
}

const BUF_ELEMS: usize = 1 << 16;

/// One device's primary context, a stream of it and scratch buffers in its memory.
struct Device {
    ordinal: i32,
    ctx: CUcontext,
    device: sys::CUdevice,
    stream: CUstream,
    /// prefix_lens, seq_lens, last_loc / indices, out, digest.
    bufs: [CUdeviceptr; 5],
}

impl Device {
    fn new(ordinal: i32) -> Self {
        let mut device = 0;
        let mut ctx = null_mut();
        let mut stream = null_mut();
        let mut bufs = [0; 5];
        // SAFETY: plain driver calls with valid out-pointers.
        unsafe {
            ok(sys::cuDeviceGet(&mut device, ordinal), "cuDeviceGet");
            ok(sys::cuDevicePrimaryCtxRetain(&mut ctx, device), "retain");
            ok(sys::cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
            ok(sys::cuStreamCreate(&mut stream, 1), "cuStreamCreate");
            for b in &mut bufs {
                ok(sys::cuMemAlloc_v2(b, BUF_ELEMS * 8), "cuMemAlloc");
            }
        }
        Self {
            ordinal,
            ctx,
            device,
            stream,
            bufs,
        }
    }

    fn bind(&self) {
        // SAFETY: retained context.
        ok(unsafe { sys::cuCtxSetCurrent(self.ctx) }, "cuCtxSetCurrent");
    }

    fn sync(&self) {
        // SAFETY: live stream.
        ok(
            unsafe { sys::cuStreamSynchronize(self.stream) },
            "cuStreamSynchronize",
        );
    }

    /// Blocking copy into buffer `i` (the stream is idle: callers synchronize first).
    fn upload(&self, i: usize, data: &[i64]) {
        assert!(data.len() <= BUF_ELEMS);
        if data.is_empty() {
            return;
        }
        self.bind();
        // SAFETY: the buffer holds BUF_ELEMS i64.
        ok(
            unsafe {
                sys::cuMemcpyHtoD_v2(self.bufs[i], data.as_ptr().cast::<c_void>(), data.len() * 8)
            },
            "cuMemcpyHtoD",
        );
    }

    fn download(&self, i: usize, n: usize) -> Vec<i64> {
        let mut out = vec![0i64; n];
        if n > 0 {
            self.bind();
            // SAFETY: as above.
            ok(
                unsafe {
                    sys::cuMemcpyDtoH_v2(out.as_mut_ptr().cast::<c_void>(), self.bufs[i], n * 8)
                },
                "cuMemcpyDtoH",
            );
        }
        out
    }

    fn ptr<T>(&self, i: usize) -> *mut T {
        self.bufs[i] as usize as *mut T
    }

    fn stream(&self) -> *mut CUstream_st {
        self.stream.cast()
    }
}

impl Drop for Device {
    fn drop(&mut self) {
        self.bind();
        // SAFETY: created in `new`.
        unsafe {
            sys::cuStreamSynchronize(self.stream);
            for b in self.bufs {
                sys::cuMemFree_v2(b);
            }
            sys::cuStreamDestroy_v2(self.stream);
            sys::cuDevicePrimaryCtxRelease_v2(self.device);
        }
    }
}

/// A device pool (C ABI) and its host twin, with the KV rows of the requests they serve.
struct Lane {
    dev: Device,
    pool: *mut kvp_pool,
    host: Pool,
    ps: u64,
    rows: Vec<Vec<i64>>,
    rng: Rng,
    /// What the enqueued operation must produce: (what, expected output) or a status.
    pending: Option<(String, Vec<i64>, Vec<usize>)>,
}

const PAGES: u64 = 2048;

impl Lane {
    fn new(ordinal: i32, ps: u64, seed: u64) -> Self {
        let dev = Device::new(ordinal);
        let mut config = kvp_pool_config_default();
        config.size = PAGES * ps;
        config.page_size = ps as u32;
        config.backend = kvp_backend::Cuda as u32;
        config.device = ordinal;
        let mut pool = null_mut();
        // SAFETY: valid pointers.
        assert_eq!(unsafe { kvp_pool_new(&config, &mut pool) }, kvp_status::Ok);
        let mut info = kvp_pool_info::default();
        // SAFETY: live pool.
        assert_eq!(
            unsafe { kvp_pool_get_info(pool, &mut info) },
            kvp_status::Ok
        );
        assert_eq!(info.device, ordinal);
        let host = Pool::new(PoolConfig {
            size: PAGES * ps,
            page_size: ps as u32,
            need_sort: false,
            index_type: IndexType::I64,
            backend: BackendKind::Host,
        })
        .unwrap();
        Self {
            dev,
            pool,
            host,
            ps,
            rows: Vec::new(),
            rng: Rng(seed),
            pending: None,
        }
    }

    /// Enqueues one random operation on the device pool (with the host twin run at once);
    /// [`settle`](Self::settle) checks it after the stream is synchronized.
    fn enqueue(&mut self) {
        let live: Vec<usize> = (0..self.rows.len())
            .filter(|&i| !self.rows[i].is_empty())
            .collect();
        let op = self.rng.below(100);
        let short = self.host.available_size() < self.host.size() / 3;
        if (op < 40 && !short) || live.is_empty() {
            // Extend: new requests and continuations of live rows.
            let mut targets: Vec<Option<usize>> = Vec::new();
            for _ in 0..self.rng.range(1, 6) {
                targets.push(None);
            }
            for &i in live.iter().take(self.rng.below(4) as usize) {
                targets.push(Some(i));
            }
            let (mut prefix, mut seq, mut last) = (Vec::new(), Vec::new(), Vec::new());
            for t in &targets {
                let row: &[i64] = t.map_or(&[], |i| &self.rows[i]);
                let p = row.len() as i64;
                prefix.push(p);
                seq.push(p + self.rng.range(1, 200) as i64);
                last.push(row.last().copied().unwrap_or(-1));
            }
            let total: usize = prefix.iter().zip(&seq).map(|(p, s)| (s - p) as usize).sum();
            let mut expected = vec![0i64; total];
            let h = self
                .host
                .alloc_extend(&prefix, &seq, &last, total as u64, &mut expected);
            self.dev.upload(0, &prefix);
            self.dev.upload(1, &seq);
            self.dev.upload(2, &last);
            // SAFETY: device buffers of this pool's device, alive until the stream passes.
            let d = unsafe {
                kvp_pool_alloc_extend_async(
                    self.pool,
                    prefix.as_ptr(),
                    seq.as_ptr(),
                    self.dev.ptr(0),
                    self.dev.ptr(1),
                    self.dev.ptr(2),
                    prefix.len(),
                    total,
                    self.dev.ptr(3),
                    BUF_ELEMS,
                    self.dev.stream(),
                )
            };
            match h {
                Ok(()) => {
                    assert_eq!(d, kvp_status::Ok, "device {}: extend", self.dev.ordinal);
                    let mut rows = Vec::new();
                    for t in targets {
                        let i = t.unwrap_or_else(|| {
                            self.rows.push(Vec::new());
                            self.rows.len() - 1
                        });
                        rows.push(i);
                    }
                    self.pending = Some((
                        format!("extend {prefix:?} -> {seq:?}"),
                        expected,
                        rows.iter()
                            .zip(prefix.iter().zip(&seq))
                            .flat_map(|(&i, (p, s))| std::iter::repeat_n(i, (s - p) as usize))
                            .collect(),
                    ));
                }
                Err(e) => assert_eq!(
                    d,
                    kvp_status::OutOfSlots,
                    "device {}: host refused the extend with {e}",
                    self.dev.ordinal
                ),
            }
        } else if op < 75 {
            // Decode one token for up to 32 live rows.
            let picked: Vec<usize> = live.iter().copied().take(32).collect();
            let seq: Vec<i64> = picked
                .iter()
                .map(|&i| self.rows[i].len() as i64 + 1)
                .collect();
            let last: Vec<i64> = picked
                .iter()
                .map(|&i| *self.rows[i].last().unwrap())
                .collect();
            let mut expected = vec![0i64; seq.len()];
            let h = self.host.alloc_decode(&seq, &last, &mut expected);
            self.dev.upload(1, &seq);
            self.dev.upload(2, &last);
            // SAFETY: as above.
            let d = unsafe {
                kvp_pool_alloc_decode_async(
                    self.pool,
                    seq.as_ptr(),
                    self.dev.ptr(1),
                    self.dev.ptr(2),
                    seq.len(),
                    self.dev.ptr(3),
                    BUF_ELEMS,
                    self.dev.stream(),
                )
            };
            match h {
                Ok(()) => {
                    assert_eq!(d, kvp_status::Ok, "device {}: decode", self.dev.ordinal);
                    self.pending = Some(("decode".into(), expected, picked));
                }
                Err(e) => assert_eq!(
                    d,
                    kvp_status::OutOfSlots,
                    "device {}: host refused the decode with {e}",
                    self.dev.ordinal
                ),
            }
        } else {
            // Free a live row by its token indices.
            let i = live[self.rng.below(live.len() as u64) as usize];
            let row = std::mem::take(&mut self.rows[i]);
            self.host.free(&row).unwrap();
            self.dev.upload(2, &row);
            // SAFETY: as above.
            let d = unsafe {
                kvp_pool_free_indices_async(
                    self.pool,
                    self.dev.ptr(2),
                    row.len(),
                    self.dev.stream(),
                )
            };
            assert_eq!(d, kvp_status::Ok, "device {}: free", self.dev.ordinal);
        }
    }

    /// After the stream is synchronized: the enqueued allocation's output equals the twin's.
    fn settle(&mut self) {
        self.dev.sync();
        if let Some((what, expected, rows)) = self.pending.take() {
            let got = self.dev.download(3, expected.len());
            assert_eq!(got, expected, "device {}: {what}", self.dev.ordinal);
            for (slot, i) in got.into_iter().zip(rows) {
                self.rows[i].push(slot);
            }
        }
        // SAFETY: live pool.
        assert_eq!(unsafe { kvp_pool_check_device(self.pool) }, kvp_status::Ok);
    }

    /// The device pool's digest (synchronizes).
    fn device_digest(&self) -> u64 {
        // SAFETY: buffer 4 holds a u64 of this device.
        let status =
            unsafe { kvp_pool_digest_async(self.pool, self.dev.ptr(4), self.dev.stream()) };
        assert_eq!(status, kvp_status::Ok);
        self.dev.sync();
        self.dev.download(4, 1)[0] as u64
    }

    fn available(&self) -> u64 {
        let mut n = 0;
        // SAFETY: live pool.
        assert_eq!(
            unsafe { kvp_pool_available_size(self.pool, &mut n) },
            kvp_status::Ok
        );
        n
    }
}

impl Drop for Lane {
    fn drop(&mut self) {
        self.dev.sync();
        // SAFETY: created in `new`, the stream is idle.
        unsafe { kvp_pool_free(self.pool) };
    }
}

fn rounds() -> u64 {
    std::env::var("KVPOOL_MULTI_OPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3000)
}

#[test]
#[ignore = "needs CUDA GPUs (two for the full test): run with --ignored on a GPU machine"]
fn pools_on_two_devices_stay_apart() {
    if let Some(why) = gpu::unavailable() {
        panic!("--ignored GPU test run without a GPU: {why}");
    }
    let count = gpu::Gpu::devices();
    let second = if count >= 2 { 1 } else { 0 };
    if count < 2 {
        eprintln!(
            "DRY RUN: {count} CUDA device(s): both pools on device 0 (own streams); the \
             two-device context checks and the foreign-stream check are SKIPPED"
        );
    }
    for ps in [1u64, 16] {
        let mut lanes = [Lane::new(0, ps, 11), Lane::new(second, ps, 12)];
        for round in 0..rounds() {
            // Enqueue on both devices before waiting for either; each call is made while the
            // other lane's context is current, and must leave it current.
            for l in 0..2 {
                let other = lanes[1 - l].dev.ctx;
                lanes[1 - l].dev.bind();
                lanes[l].enqueue();
                // `enqueue` binds its own device for the uploads; make the other current
                // again and repeat a pure pool call to check the context is handed back.
                lanes[1 - l].dev.bind();
                let _ = lanes[l].available();
                assert_eq!(
                    current_context(),
                    other,
                    "round {round}: a call on the pool of device {} changed the caller's context",
                    lanes[l].dev.ordinal
                );
            }
            for lane in &mut lanes {
                lane.settle();
            }
            if round % 50 == 0 {
                for lane in &lanes {
                    assert_eq!(
                        lane.device_digest(),
                        lane.host.digest(),
                        "round {round}: digest of the pool on device {}",
                        lane.dev.ordinal
                    );
                    assert_eq!(lane.available(), lane.host.available_size());
                }
            }
        }
        for lane in &lanes {
            assert_eq!(lane.device_digest(), lane.host.digest());
        }
        eprintln!(
            "page_size {ps}: {} rounds on devices {} and {}: outputs and digests match the host twins",
            rounds(),
            lanes[0].dev.ordinal,
            lanes[1].dev.ordinal
        );
        if count >= 2 {
            foreign_streams_are_refused(&lanes);
        }
    }
    if count < 2 {
        eprintln!("SKIPPED: the foreign-stream check needs two CUDA devices (found {count})");
    }
}

/// A call on one device's pool with the other device's stream is refused and changes
/// nothing.
fn foreign_streams_are_refused(lanes: &[Lane; 2]) {
    for l in 0..2 {
        let (lane, other) = (&lanes[l], &lanes[1 - l]);
        let before = lane.device_digest();
        let available = lane.available();
        let ps = lane.ps as usize;
        // SAFETY: the pool's own buffers; the stream is a live stream of the other device.
        let statuses = unsafe {
            [
                kvp_pool_alloc_async(
                    lane.pool,
                    ps,
                    lane.dev.ptr::<c_void>(3),
                    BUF_ELEMS,
                    other.dev.stream(),
                ),
                kvp_pool_digest_async(lane.pool, lane.dev.ptr(4), other.dev.stream()),
                kvp_pool_clear_async(lane.pool, other.dev.stream()),
            ]
        };
        for status in statuses {
            assert_eq!(
                status,
                kvp_status::WrongStream,
                "pool on device {} given a stream of device {}",
                lane.dev.ordinal,
                other.dev.ordinal
            );
        }
        other.dev.sync();
        assert_eq!(
            lane.available(),
            available,
            "a refused call changes nothing"
        );
        assert_eq!(
            lane.device_digest(),
            before,
            "a refused call changes nothing"
        );
        // SAFETY: live pool.
        assert_eq!(unsafe { kvp_pool_check_device(lane.pool) }, kvp_status::Ok);
    }
    eprintln!(
        "foreign streams: calls on the pool of device 0 with a stream of device 1 (and the \
         reverse) refused with KVP_STATUS_WRONG_STREAM, nothing changed"
    );
}
