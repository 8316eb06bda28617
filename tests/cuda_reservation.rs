//! Multi-step decode reservations on a device pool (issue 11), against the host backend and
//! against plain decodes: three pools go through the same operations — a host pool
//! (`kvp_pool_reserve_decode`, host steps), a device pool whose reservation's step is
//! captured into a CUDA graph and replayed, and a twin device pool running uncaptured
//! `kvp_pool_alloc_decode_async` calls. Every slot, the request-to-token table and the state
//! digests must agree, before and after a finish with fewer steps than reserved. Running
//! past the reservation must fault without allocating or writing the table. The GPU tests
//! are `#[ignore]`d on CPU machines (run them with
//! `cargo test --release --test cuda_reservation -- --ignored`; scripts/gpu/run.sh does).

mod gpu;
mod rng;

use std::ffi::c_void;
use std::ptr::null_mut;

use kvpool::cuda::{DevicePool, DeviceReservation};
use kvpool::ffi::*;
use kvpool::{BackendKind, ErrorKind, IndexType, PoolConfig};

use gpu::{
    last_error, narrow, read_device, skip, upload, widen, width, DevBuf, Gpu, Graph, PoolImage,
    Tables,
};
use rng::Rng;

const I64: u32 = kvp_index_type::I64 as u32;
const I32: u32 = kvp_index_type::I32 as u32;
const ROWS: u64 = 64;
const ROW_LEN: u64 = 400;
const STRIDE: u64 = 403;

fn dptr<T>(buf: &DevBuf) -> *mut T {
    buf.ptr as usize as *mut T
}

/// A host pool, a device pool (reservations) and a twin device pool (plain decodes).
struct Trio {
    host: *mut kvp_pool,
    dev: *mut kvp_pool,
    twin: *mut kvp_pool,
    index_type: u32,
}

impl Drop for Trio {
    fn drop(&mut self) {
        // SAFETY: created by kvp_pool_new.
        unsafe {
            kvp_pool_free(self.host);
            kvp_pool_free(self.dev);
            kvp_pool_free(self.twin);
        }
    }
}

impl Trio {
    fn new(size: u64, ps: u32, index_type: u32) -> Self {
        Self::with_need_sort(size, ps, index_type, false)
    }

    fn with_need_sort(size: u64, ps: u32, index_type: u32, need_sort: bool) -> Self {
        let mut c = kvp_pool_config_default();
        c.size = size;
        c.page_size = ps;
        c.index_type = index_type;
        c.need_sort = need_sort;
        let (mut host, mut dev, mut twin) = (null_mut(), null_mut(), null_mut());
        // SAFETY: valid pointers.
        unsafe {
            assert_eq!(kvp_pool_new(&c, &mut host), kvp_status::Ok);
            c.backend = kvp_backend::Cuda as u32;
            assert_eq!(kvp_pool_new(&c, &mut dev), kvp_status::Ok);
            assert_eq!(kvp_pool_new(&c, &mut twin), kvp_status::Ok);
        }
        Self {
            host,
            dev,
            twin,
            index_type,
        }
    }

    fn devices(&self) -> [*mut kvp_pool; 2] {
        [self.dev, self.twin]
    }

    /// `alloc(n)` on all three; the slots (equal on all three).
    fn alloc(&self, gpu: &Gpu, n: usize) -> Vec<i64> {
        let w = width(self.index_type);
        let mut out = vec![0u8; n * w];
        // SAFETY: buffers valid for `n` indices.
        unsafe {
            assert_eq!(
                kvp_pool_alloc(self.host, n, out.as_mut_ptr().cast(), n),
                kvp_status::Ok
            );
            for pool in self.devices() {
                let d = DevBuf::new(n * w);
                assert_eq!(
                    kvp_pool_alloc_async(pool, n, dptr(&d), n, gpu.stream.cast()),
                    kvp_status::Ok
                );
                gpu.sync();
                assert_eq!(d.download::<u8>(n * w), out);
            }
        }
        widen(&out, self.index_type)
    }

    /// Frees `indices` on all three.
    fn free(&self, gpu: &Gpu, indices: &[i64]) {
        let bytes = narrow(indices, self.index_type);
        let d = upload(&bytes);
        // SAFETY: buffers valid for `indices.len()` indices.
        unsafe {
            assert_eq!(
                kvp_pool_free_indices(self.host, bytes.as_ptr().cast(), indices.len()),
                kvp_status::Ok
            );
            for pool in self.devices() {
                assert_eq!(
                    kvp_pool_free_indices_async(pool, dptr(&d), indices.len(), gpu.stream.cast()),
                    kvp_status::Ok
                );
            }
        }
        gpu.sync();
    }

    /// Extends new (empty) requests to `lens` tokens on all three; each request's slots.
    fn extend(&self, gpu: &Gpu, lens: &[i64]) -> Vec<Vec<i64>> {
        let n = lens.len();
        let w = width(self.index_type);
        let total: i64 = lens.iter().sum();
        let prefix = vec![0i64; n];
        let none = narrow(&vec![-1i64; n], self.index_type);
        let mut out = vec![0u8; total as usize * w];
        let (pd, sd, ld) = (upload(&prefix), upload(lens), upload(&none));
        // SAFETY: buffers valid for their lengths.
        unsafe {
            assert_eq!(
                kvp_pool_alloc_extend(
                    self.host,
                    prefix.as_ptr(),
                    lens.as_ptr(),
                    none.as_ptr().cast(),
                    n,
                    total as usize,
                    if total == 0 {
                        null_mut()
                    } else {
                        out.as_mut_ptr().cast()
                    },
                    total as usize,
                ),
                kvp_status::Ok
            );
            for pool in self.devices() {
                let d = DevBuf::new(total as usize * w);
                assert_eq!(
                    kvp_pool_alloc_extend_async(
                        pool,
                        prefix.as_ptr(),
                        lens.as_ptr(),
                        dptr(&pd),
                        dptr(&sd),
                        dptr(&ld),
                        n,
                        total as usize,
                        dptr(&d),
                        total as usize,
                        gpu.stream.cast(),
                    ),
                    kvp_status::Ok,
                    "{}",
                    last_error()
                );
                gpu.sync();
                assert_eq!(d.download::<u8>(total as usize * w), out);
            }
        }
        let slots = widen(&out, self.index_type);
        let mut at = 0usize;
        lens.iter()
            .map(|&l| {
                let row = slots[at..at + l as usize].to_vec();
                at += l as usize;
                row
            })
            .collect()
    }

    /// One plain decode step on the twin (device, uncaptured) and, when `host` is set, on
    /// the host pool too; the twin's slots.
    fn plain_decode(&self, gpu: &Gpu, pool: *mut kvp_pool, seq: &[i64], prev: &[i64]) -> Vec<i64> {
        let n = seq.len();
        let w = width(self.index_type);
        let last = narrow(prev, self.index_type);
        // SAFETY: buffers valid for `n` elements.
        unsafe {
            if pool == self.host {
                let mut out = vec![0u8; n * w];
                assert_eq!(
                    kvp_pool_alloc_decode(
                        pool,
                        seq.as_ptr(),
                        last.as_ptr().cast(),
                        n,
                        out.as_mut_ptr().cast(),
                        n
                    ),
                    kvp_status::Ok,
                    "{}",
                    last_error()
                );
                return widen(&out, self.index_type);
            }
            let (sd, ld, od) = (upload(seq), upload(&last), DevBuf::new(n * w));
            assert_eq!(
                kvp_pool_alloc_decode_async(
                    pool,
                    seq.as_ptr(),
                    dptr(&sd),
                    dptr(&ld),
                    n,
                    dptr(&od),
                    n,
                    gpu.stream.cast(),
                ),
                kvp_status::Ok,
                "{}",
                last_error()
            );
            gpu.sync();
            widen(&od.download::<u8>(n * w), self.index_type)
        }
    }

    fn digest(&self, gpu: &Gpu, pool: *mut kvp_pool) -> u64 {
        let mut d = 0u64;
        // SAFETY: valid pointers.
        unsafe {
            if pool == self.host {
                assert_eq!(kvp_pool_digest(pool, &mut d), kvp_status::Ok);
            } else {
                let word = DevBuf::new(8);
                assert_eq!(
                    kvp_pool_digest_async(pool, dptr(&word), gpu.stream.cast()),
                    kvp_status::Ok
                );
                gpu.sync();
                d = word.download::<u64>(1)[0];
            }
        }
        d
    }

    fn available(&self, pool: *mut kvp_pool) -> u64 {
        let mut n = 0u64;
        // SAFETY: valid pointers.
        assert_eq!(
            unsafe { kvp_pool_available_size(pool, &mut n) },
            kvp_status::Ok
        );
        n
    }

    fn check_device(&self) {
        for pool in self.devices() {
            // SAFETY: live pool.
            let status = unsafe { kvp_pool_check_device(pool) };
            assert_eq!(status, kvp_status::Ok, "{}", last_error());
        }
    }

    /// All three agree: digests and available sizes.
    fn agree(&self, gpu: &Gpu, what: &str) {
        self.check_device();
        let host = self.digest(gpu, self.host);
        assert_eq!(self.digest(gpu, self.dev), host, "{what}: device digest");
        assert_eq!(self.digest(gpu, self.twin), host, "{what}: twin digest");
        let avail = self.available(self.host);
        assert_eq!(self.available(self.dev), avail, "{what}: device available");
        assert_eq!(self.available(self.twin), avail, "{what}: twin available");
    }
}

/// A batch in flight: lengths, last slots, table rows.
struct Batch {
    lens: Vec<i64>,
    last: Vec<i64>,
    rows: Vec<i64>,
}

/// Pools with a shuffled free list and a batch of `bs` requests extended to random lengths.
fn setup(gpu: &Gpu, rng: &mut Rng, ps: u32, index_type: u32, bs: usize) -> (Trio, Batch) {
    let size = 4096 * u64::from(ps).min(4);
    let p = Trio::new(size, ps, index_type);
    let filler = p.alloc(gpu, rng.range(1, 30) as usize * ps as usize);
    let mut heads: Vec<i64> = filler.chunks(ps as usize).map(|c| c[0]).collect();
    rng.shuffle(&mut heads);
    heads.truncate(heads.len() / 2);
    p.free(gpu, &heads);
    let lens: Vec<i64> = (0..bs)
        .map(|_| {
            if rng.chance(10) {
                0
            } else {
                rng.range(1, 3 * u64::from(ps) + 5) as i64
            }
        })
        .collect();
    let slots = p.extend(gpu, &lens);
    let last = slots
        .iter()
        .map(|s| s.last().copied().unwrap_or(-1))
        .collect();
    let mut rows: Vec<i64> = (0..ROWS as i64).collect();
    rng.shuffle(&mut rows);
    rows.truncate(bs);
    p.agree(gpu, "setup");
    (p, Batch { lens, last, rows })
}

/// Reserve `k` steps on the host and device pools, capture one device step (writing `out`
/// and a device table) into a graph, replay it `used` times, and compare every replay with
/// the host step and with a plain decode on the twin; then finish with `used` and compare
/// the pools, and continue with plain decodes on all three.
fn capture_and_replay(
    seed: u64,
    ps: u32,
    index_type: u32,
    table_type: u32,
    bs: usize,
    k: u32,
    used: u32,
) {
    let gpu = Gpu::new(false);
    let mut rng = Rng(seed);
    let (p, batch) = setup(&gpu, &mut rng, ps, index_type, bs);
    let w = width(index_type);
    let tables = Tables::new(table_type, ROWS, STRIDE, ROW_LEN);
    let last = narrow(&batch.last, index_type);
    let (lens_d, last_d, rows_d) = (upload(&batch.lens), upload(&last), upload(&batch.rows));
    let out_d = DevBuf::new(bs * w);
    let (mut hres, mut dres) = (null_mut(), null_mut());
    // SAFETY: every buffer is valid for `bs` elements and outlives the synchronizations.
    unsafe {
        assert_eq!(
            kvp_pool_reserve_decode(
                p.host,
                batch.lens.as_ptr(),
                last.as_ptr().cast(),
                bs,
                k,
                &mut hres
            ),
            kvp_status::Ok,
            "{}",
            last_error()
        );
        assert_eq!(
            kvp_pool_reserve_decode_async(
                p.dev,
                batch.lens.as_ptr(),
                dptr(&lens_d),
                dptr(&last_d),
                bs,
                k,
                &mut dres,
                gpu.stream.cast(),
            ),
            kvp_status::Ok,
            "{}",
            last_error()
        );
        gpu.sync();
        let (graph, status) = Graph::capture(gpu.stream, || {
            kvp_decode_reservation_step_async(
                dres,
                dptr(&out_d),
                &tables.dev_desc,
                dptr(&rows_d),
                gpu.stream.cast(),
            )
        });
        assert_eq!(status, kvp_status::Ok, "{}", last_error());
        // Capturing ran nothing.
        let mut prev = batch.last.clone();
        for s in 0..used {
            graph.launch(gpu.stream);
            gpu.sync();
            let got = widen(&out_d.download::<u8>(bs * w), index_type);
            let mut out_h = vec![0u8; bs * w];
            assert_eq!(
                kvp_decode_reservation_step(
                    hres,
                    out_h.as_mut_ptr().cast(),
                    bs,
                    &tables.host_desc,
                    batch.rows.as_ptr()
                ),
                kvp_status::Ok,
                "{}",
                last_error()
            );
            let want = widen(&out_h, index_type);
            let seq: Vec<i64> = batch.lens.iter().map(|&l| l + i64::from(s) + 1).collect();
            let twin = p.plain_decode(&gpu, p.twin, &seq, &prev);
            assert_eq!(got, want, "seed {seed} ps {ps}: replay {s} vs host");
            assert_eq!(got, twin, "seed {seed} ps {ps}: replay {s} vs plain decode");
            prev = twin;
        }
        assert!(tables.agree(), "seed {seed} ps {ps}: tables");
        if used == k {
            // Fill points as if every step ran: equal before the finish.
            p.agree(&gpu, "all steps, before the finish");
        }
        assert_eq!(
            kvp_decode_reservation_finish(p.host, hres, used),
            kvp_status::Ok,
            "{}",
            last_error()
        );
        assert_eq!(
            kvp_decode_reservation_finish_async(p.dev, dres, used, gpu.stream.cast()),
            kvp_status::Ok,
            "{}",
            last_error()
        );
        gpu.sync();
        p.agree(
            &gpu,
            &format!("seed {seed} ps {ps} k {k}: finish after {used}"),
        );
        // Everyone continues with plain decodes from where the used steps left off.
        let mut prevs = [prev.clone(), prev.clone(), prev];
        for s in used..used + 2 {
            let seq: Vec<i64> = batch.lens.iter().map(|&l| l + i64::from(s) + 1).collect();
            let a = p.plain_decode(&gpu, p.host, &seq, &prevs[0]);
            let b = p.plain_decode(&gpu, p.dev, &seq, &prevs[1]);
            let c = p.plain_decode(&gpu, p.twin, &seq, &prevs[2]);
            assert_eq!(a, b, "seed {seed}: after the finish, step {s}");
            assert_eq!(a, c, "seed {seed}: after the finish, step {s}");
            prevs = [a, b, c];
        }
        p.agree(&gpu, "after the finish, plain decodes");
        drop(graph);
        kvp_decode_reservation_free(hres);
        kvp_decode_reservation_free(dres);
    }
}

#[test]
#[ignore = "needs a CUDA GPU: run with --ignored on a GPU machine"]
fn graph_replays_equal_host_steps_and_plain_decodes() {
    if skip() {
        return;
    }
    for ps in [1u32, 4, 16] {
        for (seed, (it, tt)) in [(I64, I32), (I32, I32), (I64, I64)].into_iter().enumerate() {
            let seed = seed as u64 * 17 + u64::from(ps);
            let mut rng = Rng(seed ^ 0xabc);
            let bs = rng.range(1, 40) as usize;
            let k = rng.range(1, 24) as u32;
            capture_and_replay(seed, ps, it, tt, bs, k, k);
            let used = rng.below(u64::from(k)) as u32;
            capture_and_replay(seed + 1000, ps, it, tt, bs, k, used);
        }
    }
}

/// Batches past one block of the kernels (1,024 requests) and long reservations.
#[test]
#[ignore = "needs a CUDA GPU: run with --ignored on a GPU machine"]
fn large_batches_and_long_reservations() {
    if skip() {
        return;
    }
    // ROWS bounds the batch of capture_and_replay's table: use the plain path here.
    for (ps, bs, k) in [(1u32, 1500usize, 3u32), (16, 2100, 40), (4, 1025, 9)] {
        let gpu = Gpu::new(false);
        let mut rng = Rng(u64::from(ps) * 7 + bs as u64);
        let size = 200_000 * u64::from(ps).min(4);
        let p = Trio::new(size, ps, I64);
        let lens: Vec<i64> = (0..bs)
            .map(|_| rng.range(0, 2 * u64::from(ps) + 3) as i64)
            .collect();
        let slots = p.extend(&gpu, &lens);
        let last: Vec<i64> = slots
            .iter()
            .map(|s| s.last().copied().unwrap_or(-1))
            .collect();
        let (lens_d, last_d, out_d) = (upload(&lens), upload(&last), DevBuf::new(bs * 8));
        let (mut hres, mut dres) = (null_mut(), null_mut());
        // SAFETY: buffers valid for `bs` elements.
        unsafe {
            assert_eq!(
                kvp_pool_reserve_decode(
                    p.host,
                    lens.as_ptr(),
                    last.as_ptr().cast(),
                    bs,
                    k,
                    &mut hres
                ),
                kvp_status::Ok
            );
            assert_eq!(
                kvp_pool_reserve_decode_async(
                    p.dev,
                    lens.as_ptr(),
                    dptr(&lens_d),
                    dptr(&last_d),
                    bs,
                    k,
                    &mut dres,
                    gpu.stream.cast()
                ),
                kvp_status::Ok,
                "{}",
                last_error()
            );
            let mut prev = last.clone();
            let used = k - 1;
            for s in 0..used {
                // Uncaptured steps are steps too.
                assert_eq!(
                    kvp_decode_reservation_step_async(
                        dres,
                        dptr(&out_d),
                        std::ptr::null(),
                        std::ptr::null(),
                        gpu.stream.cast()
                    ),
                    kvp_status::Ok,
                    "{}",
                    last_error()
                );
                gpu.sync();
                let got = out_d.download::<i64>(bs);
                let mut want = vec![0i64; bs];
                assert_eq!(
                    kvp_decode_reservation_step(
                        hres,
                        want.as_mut_ptr().cast(),
                        bs,
                        std::ptr::null(),
                        std::ptr::null()
                    ),
                    kvp_status::Ok
                );
                let seq: Vec<i64> = lens.iter().map(|&l| l + i64::from(s) + 1).collect();
                let twin = p.plain_decode(&gpu, p.twin, &seq, &prev);
                assert_eq!(got, want, "ps {ps} bs {bs}: step {s}");
                assert_eq!(got, twin, "ps {ps} bs {bs}: step {s}");
                prev = twin;
            }
            assert_eq!(
                kvp_decode_reservation_finish(p.host, hres, used),
                kvp_status::Ok
            );
            assert_eq!(
                kvp_decode_reservation_finish_async(p.dev, dres, used, gpu.stream.cast()),
                kvp_status::Ok
            );
            gpu.sync();
            p.agree(&gpu, &format!("ps {ps} bs {bs} k {k}"));
            kvp_decode_reservation_free(hres);
            kvp_decode_reservation_free(dres);
        }
    }
}

/// A device pool of `size` slots in pages of 4, int64 indices, on device 0.
fn page4_pool(size: u64) -> DevicePool {
    DevicePool::new(PoolConfig {
        size,
        page_size: 4,
        need_sort: false,
        index_type: IndexType::I64,
        backend: BackendKind::Cuda { ordinal: 0 },
    })
    .unwrap()
}

/// A reservation made inside a capture (global mode) on a pool with no spare reservation
/// memory is refused (`InvalidState`) before anything is allocated, enqueued or taken: the
/// capture ends intact (`Graph::capture` panics otherwise). After one made and freed
/// uncaptured, the same reservation inside a capture reuses its memory, and its graph and
/// steps give the slots an uncaptured twin pool gives.
#[test]
#[ignore = "needs a CUDA GPU: run with --ignored on a GPU machine"]
fn a_reservation_inside_a_capture_allocates_nothing() {
    if skip() {
        return;
    }
    let gpu = Gpu::new(false);
    let stream = gpu.stream;
    let (mut pool, mut twin) = (page4_pool(1024), page4_pool(1024));
    let lens = [0i64, 0];
    let (lens_d, last_d) = (upload(&lens), upload(&[-1i64, -1]));
    let (out, want) = (DevBuf::new(2 * 8), DevBuf::new(2 * 8));
    // SAFETY: device buffers valid for their lengths, alive until the synchronizations.
    unsafe {
        let (graph, refused) = Graph::capture(stream, || {
            pool.reserve_decode(&lens, lens_d.ptr, last_d.ptr, 2, stream)
        });
        let err = refused.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidState, "{err}");
        assert!(
            err.message().contains("reservation's device memory"),
            "{err}"
        );
        assert!(err.message().contains("being captured"), "{err}");
        drop(graph);
        assert_eq!(
            pool.available_size(),
            1024,
            "the refused reservation took nothing"
        );
        // Both pools: a reservation made, finished unused and freed (the spare), then one
        // of two steps (captured on `pool`).
        for p in [&mut pool, &mut twin] {
            let mut spare = p
                .reserve_decode(&lens, lens_d.ptr, last_d.ptr, 2, stream)
                .unwrap();
            p.finish_reservation(&mut spare, 0, stream).unwrap();
            p.release_reservation(spare);
        }
        let (graph, res) = Graph::capture(stream, || {
            pool.reserve_decode(&lens, lens_d.ptr, last_d.ptr, 2, stream)
        });
        let res = res.unwrap();
        graph.launch(stream);
        let twin_res = twin
            .reserve_decode(&lens, lens_d.ptr, last_d.ptr, 2, stream)
            .unwrap();
        for step in 0..2 {
            pool.reservation_step(&res, out.ptr, None, stream).unwrap();
            twin.reservation_step(&twin_res, want.ptr, None, stream)
                .unwrap();
            gpu.sync();
            pool.check_device().unwrap();
            twin.check_device().unwrap();
            assert_eq!(
                out.download::<i64>(2),
                want.download::<i64>(2),
                "step {step}"
            );
        }
        drop(graph);
        pool.release_reservation(res);
        twin.release_reservation(twin_res);
    }
}

/// Two empty requests on a fresh page-size-4 pool of 1,024 slots reserved for two steps
/// (step 1 starts pages 1 and 2, slots 4 and 8; step 2 continues them), and a graph of the
/// reservation's step writing `out`, captured and launched once: step 1 taken, the pool
/// checked. Returns the pool, the reservation and the graph.
///
/// # Safety
/// `out` holds 2 indices and outlives the stream's work.
unsafe fn one_step_of_two_replayed(
    gpu: &Gpu,
    out: &DevBuf,
) -> (DevicePool, DeviceReservation, Graph) {
    let stream = gpu.stream;
    let mut pool = page4_pool(1024);
    let lens = [0i64, 0];
    let (lens_d, last_d) = (upload(&lens), upload(&[-1i64, -1]));
    // SAFETY: device buffers valid for their lengths, alive until the synchronization.
    unsafe {
        let res = pool
            .reserve_decode(&lens, lens_d.ptr, last_d.ptr, 2, stream)
            .unwrap();
        let (graph, status) = Graph::capture(stream, || {
            pool.reservation_step(&res, out.ptr, None, stream)
        });
        status.unwrap();
        graph.launch(stream);
        gpu.sync();
        pool.check_device().unwrap();
        (pool, res, graph)
    }
}

/// A step graph of a freed reservation replayed after a later reservation took its memory
/// (the pool's spare, reused): the step writes the padding slot, not the later
/// reservation's slots (which that one's own steps hand out), and faults the pool naming
/// the later reservation's call; nothing is handed out twice.
#[test]
#[ignore = "needs a CUDA GPU: run with --ignored on a GPU machine"]
fn a_step_graph_replayed_after_its_memory_is_reused_faults() {
    if skip() {
        return;
    }
    let gpu = Gpu::new(false);
    let stream = gpu.stream;
    let out = DevBuf::new(2 * 8);
    // SAFETY: device buffers valid for their lengths, alive until the synchronizations.
    unsafe {
        let (mut pool, mut first, graph) = one_step_of_two_replayed(&gpu, &out);
        let taken = out.download::<i64>(2);
        pool.finish_reservation(&mut first, 1, stream).unwrap();
        pool.release_reservation(first);
        // The same shape again, continuing both requests: on the first one's memory.
        let (next_lens, next_last) = ([1i64, 1], upload(&taken));
        let next_lens_d = upload(&next_lens);
        let second = pool
            .reserve_decode(&next_lens, next_lens_d.ptr, next_last.ptr, 2, stream)
            .unwrap();
        out.upload(&[-7i64; 2]);
        graph.launch(stream);
        gpu.sync();
        assert_eq!(
            out.download::<i64>(2),
            vec![0, 0],
            "the stale step wrote the padding slot, not the later reservation's slots"
        );
        let err = pool.check_device().unwrap_err();
        assert_eq!(err.kind(), ErrorKind::DeviceFault, "{err}");
        assert!(err.message().contains("after a later reservation"), "{err}");
        drop(graph);
        pool.release_reservation(second);
    }
}

/// A step graph replayed after a clear, which ended the reservation and freed its pages: the
/// step writes the padding slot, not step 2's slots (which an allocation made after the
/// clear has handed out again), and faults the pool; the fault blocks the pool although the
/// reservation was made before the clear (a fault is recorded as the latest call whose state
/// it found).
#[test]
#[ignore = "needs a CUDA GPU: run with --ignored on a GPU machine"]
fn a_step_replayed_after_a_clear_faults_and_blocks_the_pool() {
    if skip() {
        return;
    }
    let gpu = Gpu::new(false);
    let stream = gpu.stream;
    let out = DevBuf::new(2 * 8);
    let fresh = DevBuf::new(8 * 8);
    // SAFETY: device buffers valid for their lengths, alive until the synchronizations.
    unsafe {
        let (mut pool, res, graph) = one_step_of_two_replayed(&gpu, &out);
        assert_eq!(out.download::<i64>(2), vec![4, 8]);

        pool.clear(stream).unwrap();
        pool.alloc(8, fresh.ptr, 8, stream).unwrap();
        out.upload(&[-7i64; 2]);
        graph.launch(stream);
        gpu.sync();
        assert_eq!(fresh.download::<i64>(8), (4..12).collect::<Vec<i64>>());
        assert_eq!(
            out.download::<i64>(2),
            vec![0, 0],
            "the ended reservation's step wrote the padding slot, not slots 5 and 9"
        );
        for _ in 0..2 {
            let err = pool.check_device().unwrap_err();
            assert_eq!(err.kind(), ErrorKind::DeviceFault, "{err}");
            assert!(
                err.message()
                    .contains("after a clear or restore ended the reservation"),
                "{err}"
            );
        }
        drop(graph);
        pool.release_reservation(res);
    }
}

/// Replaying past the reservation writes the padding slot, writes no table entry, takes no
/// page (the pool's device state is unchanged but for the fault) and faults the pool with a
/// message naming the overrun; a replay after the finish faults likewise; a finish whose
/// steps_used disagrees with the device's count faults naming both.
#[test]
#[ignore = "needs a CUDA GPU: run with --ignored on a GPU machine"]
fn overruns_and_wrong_step_counts_fault_without_allocating() {
    if skip() {
        return;
    }
    let gpu = Gpu::new(false);
    let stream = gpu.stream;
    let mut pool = page4_pool(1024);
    let lens = [3i64, 4, 0, 9];
    let total: i64 = lens.iter().sum();
    let (zeros, none) = (upload(&[0i64; 4]), upload(&[-1i64; 4]));
    let lens_d = upload(&lens);
    let ext = DevBuf::new(total as usize * 8);
    let table = DevBuf::new(4 * 32 * 8);
    table.upload(&vec![0i64; 4 * 32]);
    let rows_d = upload(&[2i64, 0, 3, 1]);
    let out = DevBuf::new(4 * 8);
    let dev_table = kvpool::cuda::DeviceTable {
        data: table.ptr,
        index_type: IndexType::I64,
        shape: kvpool::TableShape {
            rows: 4,
            row_stride: 32,
            row_len: 32,
        },
    };
    // SAFETY: device buffers valid for their lengths, alive until the synchronizations.
    unsafe {
        pool.alloc_extend(
            &[0; 4],
            &lens,
            zeros.ptr,
            lens_d.ptr,
            none.ptr,
            total as u64,
            ext.ptr,
            total as usize,
            stream,
        )
        .unwrap();
        gpu.sync();
        let slots = ext.download::<i64>(total as usize);
        let mut last = [-1i64; 4];
        let mut at = 0;
        for (i, &l) in lens.iter().enumerate() {
            at += l as usize;
            if l > 0 {
                last[i] = slots[at - 1];
            }
        }
        let last_d = upload(&last);
        let mut res = pool
            .reserve_decode(&lens, lens_d.ptr, last_d.ptr, 2, stream)
            .unwrap();
        let (graph, status) = Graph::capture(stream, || {
            pool.reservation_step(&res, out.ptr, Some((dev_table, rows_d.ptr)), stream)
        });
        status.unwrap();
        graph.launch(stream);
        graph.launch(stream);
        gpu.sync();
        pool.check_device().unwrap();
        let counter = read_device::<u32>(res.counter_device(), 1)[0];
        assert_eq!(counter, 2);
        // The pool's device state (cursor, ring, staged, page words, fill points).
        let layout = pool.debug_layout();
        let snapshot =
            |at: usize| read_device::<u8>(layout.block + at as u64, layout.block_bytes - at);
        let cursor = read_device::<u8>(layout.block + layout.cursor as u64, 32);
        let arrays = snapshot(layout.ring);
        let table_before = table.download::<i64>(4 * 32);
        out.upload(&[-5i64; 4]);
        let available = pool.available_size();

        graph.launch(stream); // the third replay of a 2-step reservation
        gpu.sync();
        assert_eq!(
            out.download::<i64>(4),
            vec![0; 4],
            "the overrun writes the padding slot"
        );
        assert_eq!(
            table.download::<i64>(4 * 32),
            table_before,
            "and no table entry"
        );
        assert_eq!(read_device::<u32>(res.counter_device(), 1)[0], 2);
        assert_eq!(
            read_device::<u8>(layout.block + layout.cursor as u64, 32),
            cursor
        );
        assert_eq!(snapshot(layout.ring), arrays, "nothing allocated");
        assert_eq!(pool.available_size(), available);
        let err = pool.check_device().unwrap_err();
        assert_eq!(err.kind(), ErrorKind::DeviceFault, "{err}");
        assert!(err.message().contains("reservation overrun"), "{err}");
        assert!(
            err.message().contains("kvp_decode_reservation_step_async"),
            "{err}"
        );
        // Faulted: the finish is refused on the host.
        assert_eq!(
            pool.finish_reservation(&mut res, 2, stream)
                .unwrap_err()
                .kind(),
            ErrorKind::DeviceFault
        );
        drop(graph);
        pool.release_reservation(res);
        pool.clear(stream).unwrap();
        gpu.sync();
        let _ = pool.check_device();
        pool.check_device().unwrap();

        // A step after the finish, and a finish with the wrong count.
        let ext2 = DevBuf::new(total as usize * 8);
        pool.alloc_extend(
            &[0; 4],
            &lens,
            zeros.ptr,
            lens_d.ptr,
            none.ptr,
            total as u64,
            ext2.ptr,
            total as usize,
            stream,
        )
        .unwrap();
        gpu.sync();
        let slots = ext2.download::<i64>(total as usize);
        let mut at = 0;
        for (i, &l) in lens.iter().enumerate() {
            at += l as usize;
            last[i] = if l > 0 { slots[at - 1] } else { -1 };
        }
        let last_d = upload(&last);
        let mut res = pool
            .reserve_decode(&lens, lens_d.ptr, last_d.ptr, 3, stream)
            .unwrap();
        let (graph, status) = Graph::capture(stream, || {
            pool.reservation_step(&res, out.ptr, None, stream)
        });
        status.unwrap();
        graph.launch(stream);
        pool.finish_reservation(&mut res, 1, stream).unwrap();
        graph.launch(stream);
        gpu.sync();
        assert_eq!(out.download::<i64>(4), vec![0; 4]);
        let err = pool.check_device().unwrap_err();
        assert!(err.message().contains("after its finish"), "{err}");
        drop(graph);
        pool.release_reservation(res);
        pool.clear(stream).unwrap();
        gpu.sync();
        let _ = pool.check_device();

        let ext3 = DevBuf::new(total as usize * 8);
        pool.alloc_extend(
            &[0; 4],
            &lens,
            zeros.ptr,
            lens_d.ptr,
            none.ptr,
            total as u64,
            ext3.ptr,
            total as usize,
            stream,
        )
        .unwrap();
        gpu.sync();
        let slots = ext3.download::<i64>(total as usize);
        let mut at = 0;
        for (i, &l) in lens.iter().enumerate() {
            at += l as usize;
            last[i] = if l > 0 { slots[at - 1] } else { -1 };
        }
        let last_d = upload(&last);
        let mut res = pool
            .reserve_decode(&lens, lens_d.ptr, last_d.ptr, 3, stream)
            .unwrap();
        pool.reservation_step(&res, out.ptr, None, stream).unwrap();
        pool.reservation_step(&res, out.ptr, None, stream).unwrap();
        pool.finish_reservation(&mut res, 3, stream).unwrap();
        gpu.sync();
        let err = pool.check_device().unwrap_err();
        assert!(err.message().contains("steps_used = 3"), "{err}");
        assert!(err.message().contains("ran 2"), "{err}");
        pool.release_reservation(res);
    }
}

/// A bad last_loc faults the device pool at the reservation (the host pool refuses it with
/// the same kind), and the reservation's steps then write the padding slot.
#[test]
#[ignore = "needs a CUDA GPU: run with --ignored on a GPU machine"]
fn a_bad_last_loc_faults_the_reservation() {
    if skip() {
        return;
    }
    let gpu = Gpu::new(false);
    let mut rng = Rng(99);
    let (p, batch) = setup(&gpu, &mut rng, 4, I64, 6);
    let i = batch
        .lens
        .iter()
        .position(|&l| l > 0 && l % 4 != 0)
        .unwrap_or(0);
    let mut last = batch.last.clone();
    last[i] += 1;
    let (lens_d, last_d, out_d) = (upload(&batch.lens), upload(&last), DevBuf::new(6 * 8));
    let (mut hres, mut dres) = (null_mut(), null_mut());
    // SAFETY: buffers valid for 6 elements.
    unsafe {
        let host = kvp_pool_reserve_decode(
            p.host,
            batch.lens.as_ptr(),
            last.as_ptr().cast(),
            6,
            4,
            &mut hres,
        );
        assert_ne!(host, kvp_status::Ok);
        out_d.upload(&[-5i64; 6]);
        // Hold the stream so the host cannot have seen the fault when it enqueues the step.
        let spinner = gpu::Spinner::new();
        spinner.launch(gpu.stream, 200_000_000);
        assert_eq!(
            kvp_pool_reserve_decode_async(
                p.dev,
                batch.lens.as_ptr(),
                dptr(&lens_d),
                dptr(&last_d),
                6,
                4,
                &mut dres,
                gpu.stream.cast()
            ),
            kvp_status::Ok
        );
        assert_eq!(
            kvp_decode_reservation_step_async(
                dres,
                dptr(&out_d),
                std::ptr::null(),
                std::ptr::null(),
                gpu.stream.cast()
            ),
            kvp_status::Ok
        );
        gpu.sync();
        // The device reports a fault; its message names the element the host named.
        assert_eq!(host, kvp_status::LastLocMismatch);
        assert_eq!(kvp_pool_check_device(p.dev), kvp_status::DeviceFault);
        let message = last_error();
        assert!(message.contains(&format!("last_loc[{i}]")), "{message}");
        assert!(
            message.contains("kvp_pool_reserve_decode_async"),
            "{message}"
        );
        kvp_decode_reservation_free(dres);
    }
    assert_eq!(out_d.download::<i64>(6), vec![0; 6]);
}

/// Device lengths that give the host's page total but move requests' first new page to
/// another step pass the reserve, which checks the total: host lens 5 and 5 at page size 4
/// (a page each at step 4), device lens 4 and 4 (full pages: a page each at step 1, every
/// last_loc check passing). After one step the host's plan has used no page, the device's
/// two. Before the fix the finish returned the host's unused pages, the two pages that step
/// had handed out; now it finds that its lengths give the used step other pages, faults the
/// pool and returns nothing (`PoolImage` unchanged).
#[test]
#[ignore = "needs a CUDA GPU: run with --ignored on a GPU machine"]
fn a_finish_refuses_device_lengths_that_moved_pages_to_other_steps() {
    if skip() {
        return;
    }
    let gpu = Gpu::new(false);
    let stream = gpu.stream;
    let mut pool = page4_pool(256);
    let (zeros, none, four) = (upload(&[0i64; 2]), upload(&[-1i64; 2]), upload(&[4i64; 2]));
    let ext = DevBuf::new(8 * 8);
    let out = DevBuf::new(2 * 8);
    // SAFETY: device buffers valid for their lengths, alive until the synchronizations.
    unsafe {
        pool.alloc_extend(
            &[0, 0],
            &[4, 4],
            zeros.ptr,
            four.ptr,
            none.ptr,
            8,
            ext.ptr,
            8,
            stream,
        )
        .unwrap();
        gpu.sync();
        let slots = ext.download::<i64>(8);
        let last = upload(&[slots[3], slots[7]]);
        let mut res = pool
            .reserve_decode(&[5, 5], four.ptr, last.ptr, 4, stream)
            .unwrap();
        pool.reservation_step(&res, out.ptr, None, stream).unwrap();
        gpu.sync();
        assert!(pool.fault().is_none(), "the reserve: {:?}", pool.fault());
        let stepped = out.download::<i64>(2);
        assert!(
            stepped.iter().all(|&slot| slot % 4 == 0 && slot > 0),
            "step 1 opened a page for each request: {stepped:?}"
        );
        let before = PoolImage::of(&pool);
        pool.finish_reservation(&mut res, 1, stream).unwrap();
        gpu.sync();
        let fault = pool.fault().expect("the finish must fault");
        assert_eq!(fault.kind, ErrorKind::InvalidLengths, "{fault:?}");
        if let Some(change) = before.difference(&PoolImage::of(&pool)) {
            panic!("the refused finish changed the pool: {change}");
        }
        pool.release_reservation(res);
    }
}

/// While a reservation is live, a plain decode continuing a reserved request's partly
/// filled page is caught by the fill-point rule (a device fault, as on the host a
/// LAST_LOC_MISMATCH), and other calls work normally.
#[test]
#[ignore = "needs a CUDA GPU: run with --ignored on a GPU machine"]
fn a_plain_decode_on_a_reserved_request_faults() {
    if skip() {
        return;
    }
    let gpu = Gpu::new(false);
    let p = Trio::new(4096, 4, I64);
    let lens = [5i64, 8];
    let slots = p.extend(&gpu, &lens);
    let last = [slots[0][4], slots[1][7]];
    let (lens_d, last_d) = (upload(&lens), upload(&last));
    let mut dres = null_mut();
    // SAFETY: buffers valid for 2 elements, alive until the synchronizations.
    unsafe {
        assert_eq!(
            kvp_pool_reserve_decode_async(
                p.dev,
                lens.as_ptr(),
                dptr(&lens_d),
                dptr(&last_d),
                2,
                6,
                &mut dres,
                gpu.stream.cast()
            ),
            kvp_status::Ok
        );
        gpu.sync();
        // Another request comes and goes while the reservation is live.
        let other = {
            let out = DevBuf::new(8 * 8);
            assert_eq!(
                kvp_pool_alloc_async(p.dev, 8, dptr(&out), 8, gpu.stream.cast()),
                kvp_status::Ok
            );
            gpu.sync();
            out
        };
        assert_eq!(
            kvp_pool_free_indices_async(p.dev, dptr(&other), 8, gpu.stream.cast()),
            kvp_status::Ok
        );
        gpu.sync();
        p.check_device();
        // Request 0 (5 tokens, its page partly filled) continued by a plain decode.
        let seq = [6i64];
        let (seq_d, one_last, out) = (upload(&seq), upload(&[last[0]]), DevBuf::new(8));
        assert_eq!(
            kvp_pool_alloc_decode_async(
                p.dev,
                seq.as_ptr(),
                dptr(&seq_d),
                dptr(&one_last),
                1,
                dptr(&out),
                1,
                gpu.stream.cast()
            ),
            kvp_status::Ok
        );
        gpu.sync();
        assert_eq!(out.download::<i64>(1), vec![0]);
        assert_eq!(kvp_pool_check_device(p.dev), kvp_status::DeviceFault);
        let message = last_error();
        assert!(
            message.contains("held by a live decode reservation"),
            "{message}"
        );
        kvp_decode_reservation_free(dres);
    }
}

/// Reserves `k` steps of a batch on the host and device pools (not the twin).
fn reserve_two(
    p: &Trio,
    gpu: &Gpu,
    lens: &[i64],
    last: &[i64],
    k: u32,
) -> (*mut kvp_decode_reservation, *mut kvp_decode_reservation) {
    let (lens_d, last_d) = (upload(lens), upload(last));
    let (mut hres, mut dres) = (null_mut(), null_mut());
    // SAFETY: buffers valid for the batch, alive until the synchronization.
    unsafe {
        assert_eq!(
            kvp_pool_reserve_decode(
                p.host,
                lens.as_ptr(),
                last.as_ptr().cast(),
                lens.len(),
                k,
                &mut hres
            ),
            kvp_status::Ok
        );
        assert_eq!(
            kvp_pool_reserve_decode_async(
                p.dev,
                lens.as_ptr(),
                dptr(&lens_d),
                dptr(&last_d),
                lens.len(),
                k,
                &mut dres,
                gpu.stream.cast()
            ),
            kvp_status::Ok
        );
    }
    gpu.sync();
    (hres, dres)
}

/// One step of both reservations; the slots (equal on both).
fn step_two(
    gpu: &Gpu,
    hres: *mut kvp_decode_reservation,
    dres: *mut kvp_decode_reservation,
    bs: usize,
) -> Vec<i64> {
    let out_d = DevBuf::new(bs * 8);
    let mut want = vec![0i64; bs];
    // SAFETY: live reservations; buffers valid for `bs` slots.
    unsafe {
        assert_eq!(
            kvp_decode_reservation_step(
                hres,
                want.as_mut_ptr().cast(),
                bs,
                std::ptr::null(),
                std::ptr::null()
            ),
            kvp_status::Ok
        );
        assert_eq!(
            kvp_decode_reservation_step_async(
                dres,
                dptr(&out_d),
                std::ptr::null(),
                std::ptr::null(),
                gpu.stream.cast()
            ),
            kvp_status::Ok
        );
    }
    gpu.sync();
    assert_eq!(out_d.download::<i64>(bs), want);
    want
}

/// While a reservation is live, every page its steps hand slots out of is held: a free (by
/// index or page id), a rewind or a continuation of a request of its batch is refused on
/// the host (INVALID_STATE, nothing changed) and faults the device pool with the same kind
/// — without the hold, a request freed before the finish would let its page go to another
/// request while later steps still hand out that page's slots. A reservation released
/// unfinished ends its holds (on the device, in a kernel ahead of the pool's next call):
/// the batch then frees normally and the pools agree.
#[test]
#[ignore = "needs a CUDA GPU: run with --ignored on a GPU machine"]
fn a_live_reservation_holds_its_pages_until_finished_or_released() {
    if skip() {
        return;
    }
    let gpu = Gpu::new(false);
    let lens = [1i64, 6];
    for offender in ["free_indices", "free_pages", "rewind", "alloc_decode"] {
        let p = Trio::new(4096, 4, I64);
        let slots = p.extend(&gpu, &lens);
        let last = [slots[0][0], slots[1][5]];
        let (hres, dres) = reserve_two(&p, &gpu, &lens, &last, 6);
        let first = step_two(&gpu, hres, dres, 2);
        let before = p.digest(&gpu, p.host);
        assert_eq!(p.digest(&gpu, p.dev), before);
        // Request 0 after one step: slots[0][0] and first[0], both in one held page.
        let (values, seq) = match offender {
            "free_indices" => (vec![slots[0][0], first[0]], 0),
            "free_pages" => (vec![slots[0][0] / 4], 0),
            "rewind" => (vec![slots[0][0]], 0),
            _ => (vec![first[0]], 3i64),
        };
        let (values_d, seq_d, out_d) = (upload(&values), upload(&[seq]), DevBuf::new(8));
        let n = values.len();
        let mut out = [0i64];
        // SAFETY: buffers valid for `n` elements, alive until the synchronization.
        let (host, dev) = unsafe {
            match offender {
                "free_indices" => (
                    kvp_pool_free_indices(p.host, values.as_ptr().cast(), n),
                    kvp_pool_free_indices_async(p.dev, dptr(&values_d), n, gpu.stream.cast()),
                ),
                "free_pages" => (
                    kvp_pool_free_pages(p.host, values.as_ptr().cast(), n),
                    kvp_pool_free_pages_async(p.dev, dptr(&values_d), n, gpu.stream.cast()),
                ),
                "rewind" => (
                    kvp_pool_rewind(p.host, values.as_ptr().cast(), n),
                    kvp_pool_rewind_async(p.dev, dptr(&values_d), n, gpu.stream.cast()),
                ),
                _ => (
                    kvp_pool_alloc_decode(
                        p.host,
                        [seq].as_ptr(),
                        values.as_ptr().cast(),
                        1,
                        out.as_mut_ptr().cast(),
                        1,
                    ),
                    kvp_pool_alloc_decode_async(
                        p.dev,
                        [seq].as_ptr(),
                        dptr(&seq_d),
                        dptr(&values_d),
                        1,
                        dptr(&out_d),
                        1,
                        gpu.stream.cast(),
                    ),
                ),
            }
        };
        assert_eq!(host, kvp_status::InvalidState, "{offender}: host");
        let message = last_error();
        assert!(
            message.contains("held by a live decode reservation"),
            "{offender}: {message}"
        );
        assert_eq!(p.digest(&gpu, p.host), before, "{offender}: host changed");
        assert_eq!(
            dev,
            kvp_status::Ok,
            "{offender}: device enqueue: {}",
            last_error()
        );
        gpu.sync();
        // SAFETY: live pool.
        assert_eq!(
            unsafe { kvp_pool_check_device(p.dev) },
            kvp_status::DeviceFault,
            "{offender}"
        );
        let message = last_error();
        assert!(
            message.contains("held by a live decode reservation"),
            "{offender}: {message}"
        );
        // SAFETY: live reservations, not used afterwards.
        unsafe {
            kvp_decode_reservation_free(hres);
            kvp_decode_reservation_free(dres);
        }
    }

    // Released unfinished after one step: the holds end and the batch frees normally.
    for ps in [4u32, 1] {
        let p = Trio::new(4096, ps, I64);
        let slots = p.extend(&gpu, &lens);
        let last = [slots[0][0], slots[1][5]];
        let (hres, dres) = reserve_two(&p, &gpu, &lens, &last, 6);
        let first = step_two(&gpu, hres, dres, 2);
        // SAFETY: live reservations, not used afterwards.
        unsafe {
            kvp_decode_reservation_free(hres);
            kvp_decode_reservation_free(dres);
        }
        assert_eq!(
            p.digest(&gpu, p.dev),
            p.digest(&gpu, p.host),
            "ps {ps}: released"
        );
        let mut batch: Vec<i64> = slots.concat();
        batch.extend(&first);
        free_two(&p, &gpu, &batch);
        p.check_device();
        assert_eq!(
            p.digest(&gpu, p.dev),
            p.digest(&gpu, p.host),
            "ps {ps}: freed"
        );
        assert_eq!(p.available(p.dev), p.available(p.host), "ps {ps}");
    }
}

/// Random rounds: reserve, run a random number of steps (graph replays and direct calls
/// mixed), finish, free some requests and start new ones; the host and device pools agree
/// after every round.
#[test]
#[ignore = "needs a CUDA GPU: run with --ignored on a GPU machine"]
fn random_reservation_rounds_agree_with_the_host() {
    if skip() {
        return;
    }
    for ps in [1u32, 16] {
        let gpu = Gpu::new(false);
        let mut rng = Rng(4242 + u64::from(ps));
        let p = Trio::new(8192 * u64::from(ps).min(4), ps, I64);
        let bs = 12usize;
        let lens0: Vec<i64> = (0..bs).map(|_| rng.range(0, 40) as i64).collect();
        let mut held: Vec<Vec<i64>> = p.extend(&gpu, &lens0);
        for round in 0..30 {
            let lens: Vec<i64> = held.iter().map(|h| h.len() as i64).collect();
            let last: Vec<i64> = held
                .iter()
                .map(|h| h.last().copied().unwrap_or(-1))
                .collect();
            let k = rng.range(1, 12) as u32;
            let used = rng.range(0, u64::from(k)) as u32;
            let (lens_d, last_d, out_d) = (upload(&lens), upload(&last), DevBuf::new(bs * 8));
            let (mut hres, mut dres) = (null_mut(), null_mut());
            // SAFETY: buffers valid for `bs` elements, alive until the synchronizations.
            unsafe {
                assert_eq!(
                    kvp_pool_reserve_decode(
                        p.host,
                        lens.as_ptr(),
                        last.as_ptr().cast(),
                        bs,
                        k,
                        &mut hres
                    ),
                    kvp_status::Ok,
                    "{}",
                    last_error()
                );
                assert_eq!(
                    kvp_pool_reserve_decode_async(
                        p.dev,
                        lens.as_ptr(),
                        dptr(&lens_d),
                        dptr(&last_d),
                        bs,
                        k,
                        &mut dres,
                        gpu.stream.cast()
                    ),
                    kvp_status::Ok,
                    "{}",
                    last_error()
                );
                let (graph, status) = Graph::capture(gpu.stream, || {
                    kvp_decode_reservation_step_async(
                        dres,
                        dptr(&out_d),
                        std::ptr::null(),
                        std::ptr::null(),
                        gpu.stream.cast(),
                    )
                });
                assert_eq!(status, kvp_status::Ok);
                for s in 0..used {
                    if rng.chance(50) {
                        graph.launch(gpu.stream);
                    } else {
                        assert_eq!(
                            kvp_decode_reservation_step_async(
                                dres,
                                dptr(&out_d),
                                std::ptr::null(),
                                std::ptr::null(),
                                gpu.stream.cast()
                            ),
                            kvp_status::Ok
                        );
                    }
                    gpu.sync();
                    let got = out_d.download::<i64>(bs);
                    let mut want = vec![0i64; bs];
                    assert_eq!(
                        kvp_decode_reservation_step(
                            hres,
                            want.as_mut_ptr().cast(),
                            bs,
                            std::ptr::null(),
                            std::ptr::null()
                        ),
                        kvp_status::Ok
                    );
                    assert_eq!(got, want, "ps {ps} round {round} step {s}");
                    for (h, &slot) in held.iter_mut().zip(&got) {
                        h.push(slot);
                    }
                }
                assert_eq!(
                    kvp_decode_reservation_finish(p.host, hres, used),
                    kvp_status::Ok
                );
                assert_eq!(
                    kvp_decode_reservation_finish_async(p.dev, dres, used, gpu.stream.cast()),
                    kvp_status::Ok
                );
                gpu.sync();
                drop(graph);
                kvp_decode_reservation_free(hres);
                kvp_decode_reservation_free(dres);
            }
            // The twin pool is not stepped here: compare the host and device pools only.
            p.check_device();
            assert_eq!(
                p.digest(&gpu, p.dev),
                p.digest(&gpu, p.host),
                "ps {ps} round {round}"
            );
            assert_eq!(p.available(p.dev), p.available(p.host));
            // Finish a few requests and start new ones in their places.
            for request in held.iter_mut() {
                if rng.chance(25) && !request.is_empty() {
                    free_two(&p, &gpu, request);
                    let len = rng.range(0, 30) as i64;
                    *request = extend_two(&p, &gpu, len);
                }
            }
            assert_eq!(
                p.digest(&gpu, p.dev),
                p.digest(&gpu, p.host),
                "ps {ps} round {round}"
            );
        }
    }
}

/// Frees `indices` on the host and device pools (not the twin).
fn free_two(p: &Trio, gpu: &Gpu, indices: &[i64]) {
    let d = upload(indices);
    // SAFETY: buffers valid for `indices.len()` elements.
    unsafe {
        assert_eq!(
            kvp_pool_free_indices(p.host, indices.as_ptr().cast(), indices.len()),
            kvp_status::Ok
        );
        assert_eq!(
            kvp_pool_free_indices_async(
                p.dev,
                dptr::<c_void>(&d),
                indices.len(),
                gpu.stream.cast()
            ),
            kvp_status::Ok
        );
    }
    gpu.sync();
}

/// Extends one new request of `len` tokens on the host and device pools (not the twin).
fn extend_two(p: &Trio, gpu: &Gpu, len: i64) -> Vec<i64> {
    let n = len as usize;
    let mut out = vec![0i64; n];
    let (pd, sd, ld, od) = (
        upload(&[0i64]),
        upload(&[len]),
        upload(&[-1i64]),
        DevBuf::new(n * 8),
    );
    // SAFETY: buffers valid for their lengths.
    unsafe {
        assert_eq!(
            kvp_pool_alloc_extend(
                p.host,
                [0i64].as_ptr(),
                [len].as_ptr(),
                [-1i64].as_ptr().cast(),
                1,
                n,
                if n == 0 {
                    null_mut()
                } else {
                    out.as_mut_ptr().cast()
                },
                n
            ),
            kvp_status::Ok
        );
        assert_eq!(
            kvp_pool_alloc_extend_async(
                p.dev,
                [0i64].as_ptr(),
                [len].as_ptr(),
                dptr(&pd),
                dptr(&sd),
                dptr(&ld),
                1,
                n,
                dptr(&od),
                n,
                gpu.stream.cast()
            ),
            kvp_status::Ok
        );
    }
    gpu.sync();
    assert_eq!(od.download::<i64>(n), out);
    out
}

/// The merges a pool made so far.
fn merges(pool: *mut kvp_pool) -> u64 {
    // SAFETY: live pool; a zeroed stats struct is a valid out-value.
    unsafe {
        let mut stats = std::mem::zeroed::<kvp_pool_stats>();
        assert_eq!(kvp_pool_get_stats(pool, &mut stats), kvp_status::Ok);
        stats.merges
    }
}

/// With `need_sort`, K plain decodes merge staged frees at the first step whose batch size
/// exceeds the free list left by the steps before it; the device reservation merges at that
/// same step (two reserve kernels with the merge between them when it is not step 1), so
/// every step's slots equal the host reservation's and the twin's plain decodes, and a
/// shortage of those decodes refuses the reservation on both backends with nothing changed.
#[test]
#[ignore = "needs a CUDA GPU: run with --ignored on a GPU machine"]
fn with_need_sort_the_device_merges_at_the_step_plain_decodes_merge() {
    if skip() {
        return;
    }
    let gpu = Gpu::new(false);
    let (mut merged_later, mut short) = (0, 0);
    for seed in 0..90u64 {
        let mut rng = Rng(seed * 13 + 5);
        let ps = [1u32, 4, 16][seed as usize % 3];
        let p64 = u64::from(ps);
        let p = Trio::with_need_sort(64 * p64, ps, I64, true);
        let bs = rng.range(1, 9) as usize;
        let lens: Vec<i64> = (0..bs).map(|_| rng.range(0, 3 * p64) as i64).collect();
        let slots = p.extend(&gpu, &lens);
        let last: Vec<i64> = slots
            .iter()
            .map(|s| s.last().copied().unwrap_or(-1))
            .collect();
        // Leave a few pages free and stage a random part of the rest.
        let free = p.available(p.host) / p64;
        let keep = rng.range(0, free.min(3 * bs as u64) + 1);
        let filler = p.alloc(&gpu, ((free - keep) * p64) as usize);
        let staged: Vec<i64> = filler
            .chunks(ps as usize)
            .map(|c| c[0])
            .filter(|_| rng.chance(50))
            .collect();
        p.free(&gpu, &staged);
        let k = rng.range(1, 12) as u32;
        let merges_before = merges(p.twin);
        let (lens_d, last_d) = (upload(&lens), upload(&last));
        let (mut hres, mut dres) = (null_mut(), null_mut());
        // SAFETY: buffers valid for `bs` elements, alive until the synchronizations.
        unsafe {
            let host = kvp_pool_reserve_decode(
                p.host,
                lens.as_ptr(),
                last.as_ptr().cast(),
                bs,
                k,
                &mut hres,
            );
            let dev = kvp_pool_reserve_decode_async(
                p.dev,
                lens.as_ptr(),
                dptr(&lens_d),
                dptr(&last_d),
                bs,
                k,
                &mut dres,
                gpu.stream.cast(),
            );
            assert_eq!(dev, host, "seed {seed}: {}", last_error());
            if host == kvp_status::OutOfSlots {
                short += 1;
                p.agree(&gpu, "refused reservation");
                continue;
            }
            assert_eq!(host, kvp_status::Ok, "seed {seed}");
            let mut prev = last.clone();
            for s in 0..i64::from(k) {
                let seq: Vec<i64> = lens.iter().map(|&l| l + s + 1).collect();
                let want = p.plain_decode(&gpu, p.twin, &seq, &prev);
                // The device step equals the host step (checked inside), both the decode.
                let got = step_two(&gpu, hres, dres, bs);
                assert_eq!(got, want, "seed {seed} ps {ps} step {s}");
                prev = want;
            }
            let merged_at_step_one = {
                // The twin merged at its first step iff the batch exceeded the free list then.
                (bs as u64) > keep
            };
            if merges(p.twin) > merges_before && !merged_at_step_one {
                merged_later += 1;
            }
            assert_eq!(
                kvp_decode_reservation_finish(p.host, hres, k),
                kvp_status::Ok
            );
            assert_eq!(
                kvp_decode_reservation_finish_async(p.dev, dres, k, gpu.stream.cast()),
                kvp_status::Ok
            );
            gpu.sync();
            kvp_decode_reservation_free(hres);
            kvp_decode_reservation_free(dres);
        }
        p.agree(&gpu, &format!("seed {seed}"));
        assert_eq!(merges(p.dev), merges(p.host), "seed {seed}");
    }
    assert!(merged_later >= 5, "merges after step 1: {merged_later}");
    assert!(short >= 3, "shortages: {short}");
}
