//! The CUDA backend against the host backend, in lockstep: long random sequences of every
//! pool operation (page sizes 1, 16 and 64; `need_sort` on and off; int64 and int32
//! indices; batches of 1 to 1024 requests; free groups, snapshots, explicit merges, clears,
//! and bad inputs that only the device can see) run on a `DevicePool` and a host `Pool`.
//! After every operation the statuses, every output index and the available size must
//! agree; every 64 operations and at the end, the whole free list (ring from its head, then
//! the staged pages) is read back from the device and compared with the host's, and the
//! device pool's state digest (`digest_async`) must equal the host pool's (`digest`).
//!
//! Needs a CUDA GPU: `#[ignore]`d by default, so `cargo test` on a CPU machine lists it as
//! ignored. Run with `cargo test --release --test cuda_lockstep -- --ignored`
//! (`KVPOOL_LOCKSTEP_OPS` operations per configuration, default 9000). The twelve
//! configurations are numbered 0..=11 in the order below (page size, then `need_sort`, then
//! int32); `KVPOOL_LOCKSTEP_CONFIG=i` runs only configuration `i` (with the seed it has in the
//! full run); `KVPOOL_LOCKSTEP_THREADS=n` runs n configurations at once in this process and
//! `KVPOOL_LOCKSTEP_SECONDS=s` stops each after s seconds; `KVPOOL_LOCKSTEP_SEEDS=k` runs
//! each configuration k times with different seeds, from seed round
//! `KVPOOL_LOCKSTEP_FIRST_ROUND` (`scripts/gpu/run.sh lockstep-soak`).

mod gpu;
mod rng;

use kvpool::cuda::DevicePool;
use kvpool::host::PageState;
use kvpool::{BackendKind, ErrorKind, IndexType, Pool, PoolConfig, PoolError};

use gpu::{DevBuf, Gpu, PoolImage};
use rng::Rng;

/// What `Run::backup` keeps before a call the device may refuse.
type Before = (kvpool::cuda::DeviceSnapshot, PoolImage);

fn kind<T>(r: Result<T, PoolError>) -> Result<T, ErrorKind> {
    r.map_err(|e| e.kind())
}

/// Device scratch buffers, reused by every call (the test synchronizes after each).
struct Buffers {
    a: DevBuf,
    b: DevBuf,
    c: DevBuf,
    out: DevBuf,
    digest: DevBuf,
}

struct Saved {
    host: kvpool::Snapshot,
    device: kvpool::cuda::DeviceSnapshot,
    rows: Vec<Vec<i64>>,
    blocks: Vec<Vec<i64>>,
}

struct Run {
    gpu: Gpu,
    host: Pool,
    device: DevicePool,
    bufs: Buffers,
    rng: Rng,
    ps: u64,
    i32: bool,
    rows: Vec<Vec<i64>>,
    blocks: Vec<Vec<i64>>,
    saved: Option<Saved>,
    in_group: bool,
    ops: u64,
    faults: u64,
    /// Frees by index of more than 4,096 indices on a paged pool (the multi-block path).
    large_frees: u64,
    /// Census checks that compared the host's head hint with the device's head.
    head_checks: u64,
}

/// Calls a generic host-pool method whose first argument is an index slice, with indices
/// of the pool's type.
macro_rules! host_call {
    ($run:expr, $method:ident, $idx:expr $(, $rest:expr)*) => {{
        if $run.i32 {
            $run.host.$method(&to32(&$idx) $(, $rest)*)
        } else {
            $run.host.$method(&$idx[..] $(, $rest)*)
        }
    }};
}

fn to32(v: &[i64]) -> Vec<i32> {
    v.iter().map(|&x| x as i32).collect()
}

impl Run {
    fn new(ps: u64, need_sort: bool, i32: bool, seed: u64) -> Self {
        let gpu = Gpu::new(true);
        let num_pages: u64 = if ps == 1 { 32768 } else { 8192 };
        let config = |backend| PoolConfig {
            size: num_pages * ps,
            page_size: ps as u32,
            need_sort,
            index_type: if i32 { IndexType::I32 } else { IndexType::I64 },
            backend,
        };
        let host = Pool::new(config(BackendKind::Host)).unwrap();
        let device = DevicePool::new(config(BackendKind::Cuda { ordinal: 0 })).unwrap();
        let cap = (num_pages * ps) as usize * 8 + 64;
        let bufs = Buffers {
            a: DevBuf::new(cap),
            b: DevBuf::new(cap),
            c: DevBuf::new(cap),
            out: DevBuf::new(cap),
            digest: DevBuf::new(8),
        };
        Self {
            gpu,
            host,
            device,
            bufs,
            rng: Rng(seed),
            ps,
            i32,
            rows: Vec::new(),
            blocks: Vec::new(),
            saved: None,
            in_group: false,
            ops: 0,
            faults: 0,
            large_frees: 0,
            head_checks: 0,
        }
    }

    fn upload_indices(&self, buf: &DevBuf, v: &[i64]) {
        if self.i32 {
            buf.upload(&to32(v));
        } else {
            buf.upload(v);
        }
    }

    fn download_out(&self, n: usize) -> Vec<i64> {
        if self.i32 {
            self.bufs
                .out
                .download::<i32>(n)
                .into_iter()
                .map(i64::from)
                .collect()
        } else {
            self.bufs.out.download::<i64>(n)
        }
    }

    /// Before a call that may be refused on the device: a backup of the pool and its state
    /// as read back (the stream synchronized).
    fn backup(&mut self) -> Before {
        let snapshot = unsafe { self.device.backup_state(self.gpu.stream) }.unwrap();
        self.gpu.sync();
        (snapshot, PoolImage::of(&self.device))
    }

    /// After a device call: synchronize, then the statuses must agree, and a device fault
    /// must be the host's error kind and have left the pool's state as it was (then the
    /// device is restored to before the call).
    fn settle(
        &mut self,
        what: &str,
        host: Result<(), ErrorKind>,
        device: Result<(), ErrorKind>,
        before: Option<Before>,
    ) -> bool {
        self.gpu.sync();
        let fault = self.device.fault();
        match (host, device, fault) {
            (Ok(()), Ok(()), None) => true,
            (Err(h), Err(d), None) => {
                assert_eq!(
                    h, d,
                    "op {} {what}: host and device refused differently",
                    self.ops
                );
                false
            }
            (Err(h), Ok(()), Some(fault)) => {
                assert_eq!(
                    fault.kind, h,
                    "op {} {what}: device fault {fault:?}",
                    self.ops
                );
                assert_eq!(
                    kind(self.device.check_device()),
                    Err(ErrorKind::DeviceFault),
                    "op {} {what}",
                    self.ops
                );
                let (before, image) = before.expect("bad inputs are only generated with a backup");
                // The refused call changed nothing (a restore would hide it if it had).
                let after = PoolImage::of(&self.device);
                let change = if self.device.config().need_sort {
                    image.difference_but_a_merge(&after)
                } else {
                    image.difference(&after)
                };
                if let Some(change) = change {
                    panic!(
                        "op {} {what}: the refused call changed the pool: {change}",
                        self.ops
                    );
                }
                unsafe { self.device.restore_state(&before, self.gpu.stream) }.unwrap();
                self.gpu.sync();
                assert!(self.device.fault().is_none());
                // The stale fault is reported once more, then the pool is healthy.
                assert_eq!(
                    kind(self.device.check_device()),
                    Err(ErrorKind::DeviceFault)
                );
                assert_eq!(kind(self.device.check_device()), Ok(()));
                self.faults += 1;
                false
            }
            other => panic!(
                "op {} {what}: host/device/fault disagree: {other:?}",
                self.ops
            ),
        }
    }

    fn check_available(&mut self) {
        let (device, exact) = self.device.available_size_bound();
        assert!(
            exact,
            "op {}: counts still inexact after synchronizing",
            self.ops
        );
        assert_eq!(
            device,
            self.host.available_size(),
            "op {}: available size",
            self.ops
        );
    }

    /// The device pool's state digest (`digest_async`, one kernel) against the host pool's:
    /// the same definition, so the same value in the same state.
    fn check_digest(&mut self) {
        // SAFETY: `digest` holds one u64 and outlives the synchronized call.
        unsafe {
            self.device
                .digest_async(self.bufs.digest.ptr, self.gpu.stream)
        }
        .unwrap();
        self.gpu.sync();
        let device = self.bufs.digest.download::<u64>(1)[0];
        assert_eq!(
            device,
            self.host.digest(),
            "op {}: state digest (device {device:#x})",
            self.ops
        );
    }

    /// The device's free list (ring from head, then staged) against the host's census, and
    /// the two pools' state digests.
    fn check_census(&mut self) {
        self.check_digest();
        self.gpu.sync();
        let layout = self.device.debug_layout();
        let cursor: Vec<u32> = gpu::read_device(layout.block + layout.cursor as u64, 8);
        let (head, free_len, staged_len) =
            (cursor[0] as usize, cursor[1] as usize, cursor[2] as usize);
        // The head the next call's kernels are told, when the host knows it, is the head
        // (unless a fault froze the cursor: calls change nothing until a clear or restore).
        if let Some(hint) = layout.head_hint.filter(|_| self.device.fault().is_none()) {
            assert_eq!(hint as usize, head, "op {}: head hint", self.ops);
            self.head_checks += 1;
        }
        let n = layout.num_pages as usize;
        let ring: Vec<u32> = gpu::read_device(layout.block + layout.ring as u64, n);
        let staged: Vec<u32> = gpu::read_device(layout.block + layout.staged as u64, staged_len);
        let mut census: Vec<u32> = (0..free_len).map(|k| ring[(head + k) % n]).collect();
        census.extend(staged);
        assert_eq!(
            census,
            self.host.free_page_census(),
            "op {}: free list",
            self.ops
        );
        // Every allocated page has handed out as many slots on the device as on the host
        // (paged pools: a token pool's pages are one slot, and the device keeps no fill).
        if self.ps == 1 {
            return;
        }
        let fill: Vec<u64> = gpu::read_device(layout.block + layout.fill as u64, n + 1);
        let storage = self.host.storage();
        for page in 1..=n as u32 {
            if storage.page_state(page) == Some(PageState::Allocated) {
                assert_eq!(
                    fill[page as usize] as u32,
                    storage.page_fill(page).unwrap(),
                    "op {}: fill point of page {page}",
                    self.ops
                );
            }
        }
    }

    fn pick_distinct(&mut self, max: usize) -> Vec<usize> {
        let live: Vec<usize> = (0..self.rows.len())
            .filter(|&i| !self.rows[i].is_empty())
            .collect();
        let mut chosen = Vec::new();
        for &i in &live {
            if chosen.len() >= max {
                break;
            }
            if self.rng.chance(50) {
                chosen.push(i);
            }
        }
        chosen
    }

    fn batch_size(&mut self) -> usize {
        match self.rng.below(10) {
            0 => 1 + self.rng.below(1024) as usize,
            1..=3 => 1 + self.rng.below(128) as usize,
            _ => 1 + self.rng.below(16) as usize,
        }
    }

    fn extend(&mut self) {
        let bs = self.batch_size();
        let mut continuing = self.pick_distinct(bs);
        continuing.truncate(bs);
        let mut prefix = Vec::new();
        let mut last = Vec::new();
        let mut targets = Vec::new();
        for &i in &continuing {
            prefix.push(self.rows[i].len() as i64);
            last.push(*self.rows[i].last().unwrap());
            targets.push(Some(i));
        }
        while targets.len() < bs {
            prefix.push(0);
            last.push(-1);
            targets.push(None);
        }
        let long = bs <= 4 && self.rng.chance(20);
        // Now and then one request with more new pages than an extend block stages in
        // shared memory (4,096): the kernel's fallback path.
        let huge = long && self.ps == 1 && self.rng.chance(30);
        let max_new = match (huge, long) {
            (true, _) => 6144,
            (false, true) => 512,
            _ => 3 * self.ps,
        };
        let mut seq: Vec<i64> = prefix
            .iter()
            .map(|&p| p + 1 + self.rng.below(max_new) as i64)
            .collect();
        let total: u64 = seq.iter().zip(&prefix).map(|(s, p)| (s - p) as u64).sum();
        // A bad last_loc, only the device can see: a slot of a free page. Only where the
        // batch surely fits (the host checks last_loc before the shortage, the device after).
        let fits = self.host.available_size() >= total + (bs as u64 + 1) * self.ps;
        let bad = self.rng.chance(2) && !continuing.is_empty() && fits && !self.in_group;
        if bad {
            let row = &self.rows[continuing[0]];
            let len = row.len();
            if len >= 2 && !(len - 1).is_multiple_of(self.ps as usize) && self.rng.chance(50) {
                // A stale continuation: from the slot before the row's last, same page
                // (the same number of new tokens, so the totals hold).
                prefix[0] = len as i64 - 1;
                seq[0] -= 1;
                last[0] = row[len - 2];
            } else {
                // A slot of a free page.
                let free_page = self.host.free_page_census()[0] as i64;
                last[0] = free_page * self.ps as i64 + (prefix[0] - 1).rem_euclid(self.ps as i64);
            }
        }
        let before = bad.then(|| self.backup());
        let mut host_out = vec![0i64; total as usize];
        let h = if self.i32 {
            let mut o = vec![0i32; total as usize];
            let r = self
                .host
                .alloc_extend(&prefix, &seq, &to32(&last), total, &mut o);
            host_out = o.into_iter().map(i64::from).collect();
            r
        } else {
            self.host
                .alloc_extend(&prefix, &seq, &last, total, &mut host_out)
        };
        self.bufs.a.upload(&prefix);
        self.bufs.b.upload(&seq);
        self.upload_indices(&self.bufs.c, &last);
        // SAFETY: buffers sized for the pool; the test synchronizes before reusing them.
        let d = unsafe {
            self.device.alloc_extend(
                &prefix,
                &seq,
                self.bufs.a.ptr,
                self.bufs.b.ptr,
                self.bufs.c.ptr,
                total,
                self.bufs.out.ptr,
                total as usize,
                self.gpu.stream,
            )
        };
        let ok = self.settle("alloc_extend", kind(h), kind(d), before);
        if bad && !ok {
            assert!(
                self.download_out(total as usize).iter().all(|&x| x == 0),
                "faulted outputs must be slot 0"
            );
        }
        if ok {
            assert_eq!(
                self.download_out(total as usize),
                host_out,
                "op {}: alloc_extend",
                self.ops
            );
            let mut pos = 0;
            for (k, target) in targets.iter().enumerate() {
                let n = (seq[k] - prefix[k]) as usize;
                let slots = host_out[pos..pos + n].to_vec();
                pos += n;
                match target {
                    Some(i) => self.rows[*i].extend(slots),
                    None => self.rows.push(slots),
                }
            }
        }
    }

    fn decode(&mut self) {
        let bs = self.batch_size();
        let chosen = self.pick_distinct(bs);
        if chosen.is_empty() {
            return;
        }
        let seq: Vec<i64> = chosen
            .iter()
            .map(|&i| self.rows[i].len() as i64 + 1)
            .collect();
        let last: Vec<i64> = chosen
            .iter()
            .map(|&i| *self.rows[i].last().unwrap())
            .collect();
        let n = chosen.len();
        let mut host_out = vec![0i64; n];
        let h = if self.i32 {
            let mut o = vec![0i32; n];
            let r = self.host.alloc_decode(&seq, &to32(&last), &mut o);
            host_out = o.into_iter().map(i64::from).collect();
            r
        } else {
            self.host.alloc_decode(&seq, &last, &mut host_out)
        };
        self.bufs.b.upload(&seq);
        self.upload_indices(&self.bufs.c, &last);
        // SAFETY: as in `extend`.
        let d = unsafe {
            self.device.alloc_decode(
                &seq,
                self.bufs.b.ptr,
                self.bufs.c.ptr,
                self.bufs.out.ptr,
                n,
                self.gpu.stream,
            )
        };
        if self.settle("alloc_decode", kind(h), kind(d), None) {
            assert_eq!(
                self.download_out(n),
                host_out,
                "op {}: alloc_decode",
                self.ops
            );
            for (k, &i) in chosen.iter().enumerate() {
                self.rows[i].push(host_out[k]);
            }
        }
    }

    fn alloc(&mut self) {
        let n = (self.ps * (1 + self.rng.below(8))) as usize;
        let mut host_out = vec![0i64; n];
        let h = if self.i32 {
            let mut o = vec![0i32; n];
            let r = self.host.alloc(n, &mut o);
            host_out = o.into_iter().map(i64::from).collect();
            r
        } else {
            self.host.alloc(n, &mut host_out)
        };
        // SAFETY: as in `extend`.
        let d = unsafe { self.device.alloc(n, self.bufs.out.ptr, n, self.gpu.stream) };
        if self.settle("alloc", kind(h), kind(d), None) {
            assert_eq!(self.download_out(n), host_out, "op {}: alloc", self.ops);
            self.blocks.push(host_out);
        }
    }

    /// Frees one request or block, in one of the three ways; sometimes a bad free.
    fn free(&mut self) {
        let from_rows = !self.rows.is_empty() && (self.blocks.is_empty() || self.rng.chance(80));
        if !from_rows && self.blocks.is_empty() {
            return;
        }
        let mut slots = if from_rows {
            let i = self.rng.below(self.rows.len() as u64) as usize;
            self.rows.swap_remove(i)
        } else {
            let i = self.rng.below(self.blocks.len() as u64) as usize;
            self.blocks.swap_remove(i)
        };
        if slots.is_empty() {
            return;
        }
        let bad = self.rng.chance(2) && !self.in_group;
        let way = self.rng.below(3);
        if way == 0 {
            if self.ps == 1 && self.rng.chance(50) {
                // Token pools keep the caller's order: shuffle it.
                for k in (1..slots.len()).rev() {
                    let j = self.rng.below(k as u64 + 1) as usize;
                    slots.swap(k, j);
                }
            }
            let mut indices = slots.clone();
            if bad {
                indices.push(indices[0]); // the same slot twice
            }
            let before = bad.then(|| self.backup());
            let h = host_call!(self, free, indices);
            self.upload_indices(&self.bufs.a, &indices);
            // SAFETY: as in `extend`.
            let d = unsafe {
                self.device
                    .free(self.bufs.a.ptr, indices.len(), self.gpu.stream)
            };
            if !self.settle("free", kind(h), kind(d), before) {
                self.rows.push(slots);
            }
        } else if way == 1 {
            let ps = self.ps as usize;
            let mut pages: Vec<i64> = slots
                .iter()
                .step_by(ps)
                .map(|&s| s / self.ps as i64)
                .collect();
            if bad {
                pages.push(pages[0]);
            }
            let before = bad.then(|| self.backup());
            let h = host_call!(self, free_pages, pages);
            self.upload_indices(&self.bufs.a, &pages);
            // SAFETY: as in `extend`.
            let d = unsafe {
                self.device
                    .free_pages(self.bufs.a.ptr, pages.len(), self.gpu.stream)
            };
            if !self.settle("free_pages", kind(h), kind(d), before) {
                self.rows.push(slots);
            }
        } else {
            // A tail segment from a page boundary: the request keeps its head.
            let ps = self.ps as usize;
            let pages = slots.len().div_ceil(ps);
            let start = self.rng.below(pages as u64) as usize * ps;
            let mut row = slots.clone();
            if bad {
                row[start] = 0; // the padding slot
            }
            let len = row.len() - start;
            let before = bad.then(|| self.backup());
            let h = host_call!(self, free_segment, row, start, len);
            self.upload_indices(&self.bufs.a, &row);
            // SAFETY: as in `extend`.
            let d = unsafe {
                self.device
                    .free_segment(self.bufs.a.ptr, row.len(), start, len, self.gpu.stream)
            };
            if self.settle("free_segment", kind(h), kind(d), before) {
                slots.truncate(start);
            }
            if !slots.is_empty() {
                self.rows.push(slots);
            }
        }
    }

    /// Frees many requests and blocks by index in one call (on a paged pool usually more
    /// than 4,096 indices: the multi-block path of claim, count and release over the page
    /// map), the indices shuffled; sometimes a bad one (a slot twice, or the padding slot)
    /// that must free nothing.
    fn mass_free(&mut self) {
        let mut taken_rows = Vec::new();
        let mut taken_blocks = Vec::new();
        let mut indices = Vec::new();
        for (from_rows, n) in [(true, self.rows.len()), (false, self.blocks.len())] {
            for i in (0..n).rev() {
                if !self.rng.chance(70) {
                    continue;
                }
                let slots = if from_rows {
                    self.rows.swap_remove(i)
                } else {
                    self.blocks.swap_remove(i)
                };
                indices.extend_from_slice(&slots);
                if from_rows {
                    taken_rows.push(slots);
                } else {
                    taken_blocks.push(slots);
                }
            }
        }
        let give_back = |run: &mut Self, rows: Vec<Vec<i64>>, blocks: Vec<Vec<i64>>| {
            run.rows.extend(rows.into_iter().filter(|r| !r.is_empty()));
            run.blocks.extend(blocks);
        };
        if indices.is_empty() {
            give_back(self, taken_rows, taken_blocks);
            return;
        }
        for k in (1..indices.len()).rev() {
            let j = self.rng.below(k as u64 + 1) as usize;
            indices.swap(k, j);
        }
        // (Not when every slot is named: one more index is refused on the host side.)
        let bad = self.rng.chance(5) && !self.in_group && (indices.len() as u64) < self.host.size();
        if bad {
            let at = self.rng.below(indices.len() as u64 + 1) as usize;
            let value = if self.rng.chance(50) {
                indices[self.rng.below(indices.len() as u64) as usize]
            } else {
                0
            };
            indices.insert(at, value);
        }
        if self.ps > 1 && indices.len() > 4096 {
            self.large_frees += 1;
        }
        let before = bad.then(|| self.backup());
        let h = host_call!(self, free, indices);
        self.upload_indices(&self.bufs.a, &indices);
        // SAFETY: as in `extend`.
        let d = unsafe {
            self.device
                .free(self.bufs.a.ptr, indices.len(), self.gpu.stream)
        };
        let freed = self.settle("free (many)", kind(h), kind(d), before);
        assert!(
            freed != bad,
            "op {}: a bad mass free was accepted",
            self.ops
        );
        if !freed {
            give_back(self, taken_rows, taken_blocks);
        }
    }

    fn group(&mut self) {
        if self.in_group {
            let h = self.host.free_group_end();
            let d = unsafe { self.device.free_group_end(self.gpu.stream) };
            self.settle("free_group_end", kind(h), kind(d), None);
            self.in_group = false;
        } else {
            let h = self.host.free_group_begin();
            let d = self.device.free_group_begin();
            self.settle("free_group_begin", kind(h), kind(d), None);
            self.in_group = true;
        }
    }

    fn snapshot(&mut self) {
        if self.in_group {
            return;
        }
        match self.saved.take() {
            Some(saved) if self.rng.chance(60) => {
                let h = self.host.restore_state(&saved.host);
                let d = unsafe { self.device.restore_state(&saved.device, self.gpu.stream) };
                self.settle("restore_state", kind(h), kind(d), None);
                self.rows = saved.rows.clone();
                self.blocks = saved.blocks.clone();
                self.saved = Some(saved);
            }
            _ => {
                let host = self.host.backup_state().unwrap();
                let device = unsafe { self.device.backup_state(self.gpu.stream) }.unwrap();
                self.saved = Some(Saved {
                    host,
                    device,
                    rows: self.rows.clone(),
                    blocks: self.blocks.clone(),
                });
            }
        }
    }

    /// Speculative rejection: a row keeps a random prefix of its tokens; pages holding only
    /// rejected ones are freed (free_segment), the page of the last kept one is rewound.
    /// Now and then a bad rewind (past the fill point), which only the device can see.
    fn rewind(&mut self) {
        let live: Vec<usize> = (0..self.rows.len())
            .filter(|&i| !self.rows[i].is_empty())
            .collect();
        if live.is_empty() {
            return;
        }
        let i = live[self.rng.below(live.len() as u64) as usize];
        let row = self.rows[i].clone();
        let ps = self.ps as usize;
        let last = *row.last().unwrap();
        let bad = self.rng.chance(10) && !self.in_group && !(last as usize + 1).is_multiple_of(ps);
        if bad {
            let ahead = vec![last + 1];
            let before = Some(self.backup());
            let h = host_call!(self, rewind, ahead);
            self.upload_indices(&self.bufs.a, &ahead);
            // SAFETY: as in `extend`.
            let d = unsafe { self.device.rewind(self.bufs.a.ptr, 1, self.gpu.stream) };
            let ok = self.settle("rewind (ahead)", kind(h), kind(d), before);
            assert!(
                !ok,
                "op {}: a rewind past the fill point was accepted",
                self.ops
            );
            return;
        }
        let kept = 1 + self.rng.below(row.len() as u64) as usize;
        let cut = kept.div_ceil(ps) * ps;
        if cut < row.len() {
            let n = row.len() - cut;
            let h = host_call!(self, free_segment, row, cut, n);
            self.upload_indices(&self.bufs.a, &row);
            // SAFETY: as in `extend`.
            let d = unsafe {
                self.device
                    .free_segment(self.bufs.a.ptr, row.len(), cut, n, self.gpu.stream)
            };
            assert!(self.settle("free_segment (rejected)", kind(h), kind(d), None));
        }
        let last_kept = vec![row[kept - 1]];
        let h = host_call!(self, rewind, last_kept);
        self.upload_indices(&self.bufs.b, &last_kept);
        // SAFETY: as in `extend`.
        let d = unsafe { self.device.rewind(self.bufs.b.ptr, 1, self.gpu.stream) };
        assert!(self.settle("rewind", kind(h), kind(d), None));
        self.rows[i].truncate(kept);
    }

    fn step(&mut self) {
        self.ops += 1;
        let short = self.host.available_size() < self.host.size() / 4;
        match self.rng.below(100) {
            0..=24 if !short => self.extend(),
            0..=24 => self.free(),
            25..=49 => self.decode(),
            50..=71 => self.free(),
            72..=74 => self.mass_free(),
            75..=79 => self.alloc(),
            80..=86 => self.group(),
            87..=91 => self.snapshot(),
            92..=93 => self.rewind(),
            94..=95 => {
                self.host.merge_and_sort_free();
                unsafe { self.device.merge_and_sort_free(self.gpu.stream) }.unwrap();
                self.gpu.sync();
            }
            96 if self.rng.chance(20) => {
                self.host.clear();
                unsafe { self.device.clear(self.gpu.stream) }.unwrap();
                self.gpu.sync();
                self.rows.clear();
                self.blocks.clear();
                self.in_group = false;
            }
            _ => self.extend(),
        }
        self.check_available();
        if self.ops.is_multiple_of(64) {
            self.check_census();
        }
    }
}

/// The configuration `KVPOOL_LOCKSTEP_CONFIG` selects (all when unset).
fn only_config() -> Option<u64> {
    let raw = std::env::var("KVPOOL_LOCKSTEP_CONFIG").ok()?;
    let index = raw
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("KVPOOL_LOCKSTEP_CONFIG={raw:?} is not a number in 0..=11"));
    assert!(
        index < 12,
        "KVPOOL_LOCKSTEP_CONFIG={index}: there are 12 configurations (0..=11)"
    );
    Some(index)
}

/// Operations between two progress lines of a configuration.
const PROGRESS_EVERY: u64 = 50_000;

fn ops_per_config() -> u64 {
    env_u64("KVPOOL_LOCKSTEP_OPS", 9000)
}

/// Seconds after which every configuration stops early (`KVPOOL_LOCKSTEP_SECONDS`; none
/// when unset): a soak run under a time limit still ends with its final census and a
/// result line saying how many operations it compared.
fn deadline() -> Option<std::time::Instant> {
    let secs: f64 = std::env::var("KVPOOL_LOCKSTEP_SECONDS")
        .ok()?
        .parse()
        .ok()?;
    Some(std::time::Instant::now() + std::time::Duration::from_secs_f64(secs))
}

/// Runs at once (`KVPOOL_LOCKSTEP_THREADS`, default 1), one thread each, in this one
/// process: the GPU then runs their kernels side by side in one context instead of
/// time-slicing one context per process.
fn threads() -> usize {
    env_u64("KVPOOL_LOCKSTEP_THREADS", 1).clamp(1, 64) as usize
}

/// An unsigned setting from the environment; `default` when unset or not a number.
fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Runs of each configuration: `KVPOOL_LOCKSTEP_SEEDS` (default 1) of them, run `k` with
/// seed `index + 1 + 12 k` for k from `KVPOOL_LOCKSTEP_FIRST_ROUND` (default 0). A soak
/// keeps more threads busy than there are configurations, and a soak split over several
/// processes gives each its own seeds.
fn seed_rounds() -> std::ops::Range<u64> {
    let first = env_u64("KVPOOL_LOCKSTEP_FIRST_ROUND", 0);
    first..first + env_u64("KVPOOL_LOCKSTEP_SEEDS", 1).max(1)
}

/// Runs configuration `index` (page size, `need_sort`, int32) with `seed` for `ops`
/// operations or until `deadline`; returns (operations, device-detected faults, head
/// hints checked).
fn run_config(
    (index, ps, need_sort, i32, seed): (u64, u64, bool, bool, u64),
    ops: u64,
    deadline: Option<std::time::Instant>,
) -> (u64, u64, u64) {
    let mut run = Run::new(ps, need_sort, i32, seed);
    // Cross the page-word re-tagging (every 2^29 calls) early in the run.
    run.device.debug_jump_tag((1 << 29) - 200);
    let started = std::time::Instant::now();
    for op in 1..=ops {
        run.step();
        // Progress of long (soak) runs, so a run stopped by a time limit still says how
        // far it compared without a disagreement.
        if op % PROGRESS_EVERY == 0 {
            eprintln!(
                "config {index:>2} seed {seed:>3}: {op} ops compared, {} device-detected faults, {:.0} s",
                run.faults,
                started.elapsed().as_secs_f64()
            );
        }
        if op % 256 == 0 && deadline.is_some_and(|d| std::time::Instant::now() >= d) {
            break;
        }
    }
    run.check_census();
    assert_eq!(
        run.device.stats().pages_in_use,
        run.host.stats().pages_in_use,
        "pages in use"
    );
    eprintln!(
        "config {index:>2} seed {seed:>3}: page_size {ps:>2} need_sort {need_sort:<5} int32 {i32:<5}: {} ops, {} bad \
         inputs caught on the device (host refused the same), {} frees of over 4096 indices, {} pages \
         in use at the end, {} head hints checked, {:.0} s",
        run.ops,
        run.faults,
        run.large_frees,
        run.device.stats().pages_in_use,
        run.head_checks,
        started.elapsed().as_secs_f64()
    );
    (run.ops, run.faults, run.head_checks)
}

#[test]
#[ignore = "needs a CUDA GPU: run with --ignored on a GPU machine"]
fn device_pool_matches_host_pool_op_for_op() {
    if let Some(why) = gpu::unavailable() {
        panic!("--ignored GPU test run without a GPU: {why}");
    }
    let only = only_config();
    let (ops, deadline) = (ops_per_config(), deadline());
    let mut configs = Vec::new();
    for round in seed_rounds() {
        let mut index = 0;
        for ps in [1, 16, 64] {
            for need_sort in [false, true] {
                for i32 in [false, true] {
                    if only.is_none_or(|only| only == index) {
                        configs.push((index, ps, need_sort, i32, index + 1 + 12 * round));
                    }
                    index += 1;
                }
            }
        }
    }
    // Each worker takes the next configuration until none is left.
    let next = std::sync::atomic::AtomicUsize::new(0);
    let results = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads().min(configs.len()))
            .map(|_| {
                scope.spawn(|| loop {
                    let k = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Some(&config) = configs.get(k) else {
                        break;
                    };
                    let result = run_config(config, ops, deadline);
                    results.lock().unwrap().push(result);
                })
            })
            .collect();
        let panicked = workers
            .into_iter()
            .map(|w| w.join())
            .filter(Result::is_err)
            .count();
        assert_eq!(
            panicked, 0,
            "{panicked} configuration(s) disagreed (see above)"
        );
    });
    let results = results.into_inner().unwrap();
    let total: u64 = results.iter().map(|r| r.0).sum();
    let faults: u64 = results.iter().map(|r| r.1).sum();
    let head_checks: u64 = results.iter().map(|r| r.2).sum();
    eprintln!(
        "lockstep: {total} operations compared, {faults} device-detected faults, \
         {head_checks} head hints checked against the device's cursor"
    );
    assert!(faults > 0, "the bad-input paths were never exercised");
    assert!(head_checks > 0, "no head hint was ever checked");
}
