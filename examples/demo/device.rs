//! `--backend cuda`: the engine's pool calls on a `kvpool::cuda::DevicePool` on a GPU, each
//! one also run on a shadow host `Pool` of the same configuration, so that the run proves,
//! call by call, that the GPU hands out exactly the host backend's slots.
//!
//! The engine keeps its rows (`req_to_token`) and its ledger on the host, so the adapter
//! copies the host arrays into device buffers, enqueues the call on the engine's stream,
//! and for an allocation copies the slots back. kvpool itself never synchronizes; the demo
//! does, where its host-side books need it (a real engine keeps `req_to_token`, the lengths
//! and `last_loc` on the device, frees with `free_segment` from there, and never waits):
//! - after each allocation, to read its slots back for the ledger (once per step; twice
//!   when `--mixed-chunk` puts a prefill and a decode batch in one step);
//! - after a free whose page count only the device knows (a paged free by index, counted
//!   when its free group ends), so the scheduler plans from exact counts as on the host;
//! - at the end of each step, to check the device: no fault, and counts and stats equal to
//!   the shadow's.
//!
//! The uploads are blocking `cuMemcpy` calls, ordered with the stream (`cuda::Stream`).

use kvpool::cuda::DevicePool;
use kvpool::{BackendKind, ErrorKind, Pool, PoolConfig, PoolError, PoolInfo, PoolStats};

use super::cuda::{self, DeviceBuffer, Stream};
use super::kv::{self, KvPool, Lockstep};

/// A device pool, its stream and buffers, and the host pool that shadows it.
pub struct DeviceKv {
    // The buffers and the stream come before `pool`: fields drop in declaration order, so
    // they are released while the pool still holds the device's primary context.
    prefix_lens: DeviceBuffer,
    seq_lens: DeviceBuffer,
    last_loc: DeviceBuffer,
    out: DeviceBuffer,
    /// The indices or the row of a free.
    row: DeviceBuffer,
    /// The engine's stream: every call is enqueued on it.
    stream: Stream,
    pool: DevicePool,
    /// The host backend with the same configuration, given every call too.
    shadow: Pool,
    /// The shadow's slots of the current allocation.
    expected: Vec<i64>,
    ordinal: i32,
    gpu: String,
    lockstep: Lockstep,
}

impl DeviceKv {
    /// A device pool shaped as `config` on CUDA device `ordinal`, and its shadow. Fails
    /// with `CudaUnavailable` where there is no driver or no such device.
    pub fn new(config: PoolConfig, ordinal: i32) -> Result<Self, PoolError> {
        let shadow = Pool::new(PoolConfig {
            backend: BackendKind::Host,
            ..config
        })?;
        // Before any raw CUDA call: this loads the driver (or fails cleanly without one)
        // and makes the device's primary context current.
        let pool = DevicePool::new(PoolConfig {
            backend: BackendKind::Cuda { ordinal },
            ..config
        })?;
        let stream = Stream::new()?;
        let gpu = cuda::device_name(ordinal)?;
        Ok(Self {
            prefix_lens: DeviceBuffer::default(),
            seq_lens: DeviceBuffer::default(),
            last_loc: DeviceBuffer::default(),
            out: DeviceBuffer::default(),
            row: DeviceBuffer::default(),
            stream,
            pool,
            shadow,
            expected: Vec::new(),
            ordinal,
            gpu,
            lockstep: Lockstep::default(),
        })
    }

    /// After an allocation both pools accepted: waits for the stream (the engine's one
    /// wait for the slots), then copies the device's `n` slots into `out` and compares
    /// them with the shadow's.
    fn read_back(&mut self, call: &str, n: usize, out: &mut [i64]) -> Result<(), PoolError> {
        self.stream.synchronize()?;
        self.pool.check_device()?;
        self.out.download(&mut out[..n])?;
        if let Some(i) = (0..n).find(|&i| out[i] != self.expected[i]) {
            return Err(differs(format!(
                "{call} (call {}): out[{i}] is {} on the device but {} on the host",
                self.lockstep.calls, out[i], self.expected[i]
            )));
        }
        self.lockstep.indices += n as u64;
        self.exact_counts()
    }

    /// Once the stream is idle, folds the device's published counts in: they must be exact.
    fn exact_counts(&mut self) -> Result<(), PoolError> {
        if self.pool.available_size_bound().1 {
            Ok(())
        } else {
            Err(differs(
                "the device pool's counts are not exact with its stream idle".to_string(),
            ))
        }
    }

    /// After a free: outside a free group, a page count only the device knows would make
    /// `available_size` a lower bound, so wait for the stream then (inside a group the
    /// pages are not available yet anyway).
    fn keep_exact(&mut self) -> Result<(), PoolError> {
        if self.pool.info().in_free_group || self.pool.available_size_bound().1 {
            return Ok(());
        }
        self.stream.synchronize()?;
        self.exact_counts()
    }

    /// Waits for the stream, then: no device fault, exact counts, and the same available
    /// size and stats as the shadow.
    fn check_settled(&mut self) -> Result<(), String> {
        self.stream.synchronize().map_err(|e| e.to_string())?;
        self.pool
            .check_device()
            .map_err(|e| format!("device pool: {e}"))?;
        self.exact_counts().map_err(|e| e.to_string())?;
        let (device, host) = (self.pool.available_size(), self.shadow.available_size());
        if device != host {
            return Err(format!(
                "available_size is {device} on the device but {host} on the host"
            ));
        }
        let (device, host) = (self.pool.stats(), self.shadow.stats());
        if device != host {
            return Err(format!(
                "the device pool's stats differ from the host backend's:\n  device {device:?}\n  host   {host:?}"
            ));
        }
        Ok(())
    }

    /// The device's free list as the host backend lists it (`free_page_census`): the ring
    /// from its head, then the staged pages. Read back once the stream is idle.
    fn device_census(&self) -> Result<Vec<u32>, String> {
        let layout = self.pool.debug_layout();
        let at = |offset: usize| layout.block + offset as u64;
        let read = |offset, n| cuda::read_words(at(offset), n).map_err(|e| e.to_string());
        let n = layout.num_pages as usize;
        let cursor = read(layout.cursor, 8)?;
        let (head, free_len, staged_len) =
            (cursor[0] as usize, cursor[1] as usize, cursor[2] as usize);
        if head >= n || free_len > n || staged_len > n {
            return Err(format!(
                "the device free list's cursor is corrupt: head {head}, {free_len} free, {staged_len} staged of {n} pages"
            ));
        }
        let ring = read(layout.ring, n)?;
        let mut census: Vec<u32> = (0..free_len).map(|k| ring[(head + k) % n]).collect();
        census.extend(read(layout.staged, staged_len)?);
        Ok(census)
    }
}

/// An error for a device result that is not the host backend's.
fn differs(message: String) -> PoolError {
    PoolError::new(
        ErrorKind::InvalidState,
        format!("the CUDA backend differs from the host backend: {message}"),
    )
}

/// The device reads `seq_lens.len()` entries of `last_loc` (its length is not passed), so
/// a shorter one is refused before either pool sees the call (the host would refuse it).
fn check_batch(last_loc: &[i64], seq_lens: &[i64]) -> Result<(), PoolError> {
    if last_loc.len() == seq_lens.len() {
        return Ok(());
    }
    Err(PoolError::new(
        ErrorKind::InvalidLengths,
        format!(
            "last_loc has {} entries but seq_lens has {}",
            last_loc.len(),
            seq_lens.len()
        ),
    ))
}

/// Both pools accepted the call, or both refused it alike (the device's error is returned).
fn agree(
    call: &str,
    device: Result<(), PoolError>,
    host: Result<(), PoolError>,
) -> Result<(), PoolError> {
    match (device, host) {
        (Ok(()), Ok(())) => Ok(()),
        (Err(device), Err(host)) if device.kind() == host.kind() => Err(device),
        (device, host) => {
            let show =
                |r: Result<(), PoolError>| r.map_or_else(|e| e.to_string(), |()| "Ok".into());
            Err(differs(format!(
                "{call} returned {} on the device but {} on the host",
                show(device),
                show(host)
            )))
        }
    }
}

impl KvPool for DeviceKv {
    fn info(&self) -> PoolInfo {
        self.pool.info()
    }

    fn size(&self) -> u64 {
        self.pool.size()
    }

    fn page_size(&self) -> u32 {
        self.pool.page_size()
    }

    fn available_size(&self) -> u64 {
        self.pool.available_size()
    }

    fn stats(&self) -> PoolStats {
        self.pool.stats()
    }

    fn alloc(&mut self, n: usize, out: &mut [i64]) -> Result<(), PoolError> {
        self.lockstep.calls += 1;
        let dst = self.out.reserve(out.len(), &self.stream)?;
        // SAFETY: `dst` holds `out.len()` indices and is neither freed nor rewritten before
        // `read_back` has waited for the stream.
        let device = unsafe { self.pool.alloc(n, dst, out.len(), self.stream.raw()) };
        self.expected.resize(out.len(), 0);
        let host = self.shadow.alloc(n, &mut self.expected);
        agree("alloc", device, host)?;
        self.read_back("alloc", n, out)
    }

    fn alloc_extend(
        &mut self,
        prefix_lens: &[i64],
        seq_lens: &[i64],
        last_loc: &[i64],
        extend_num_tokens: u64,
        out: &mut [i64],
    ) -> Result<(), PoolError> {
        check_batch(last_loc, seq_lens)?;
        self.lockstep.calls += 1;
        let prefix = self.prefix_lens.upload(prefix_lens, &self.stream)?;
        let seq = self.seq_lens.upload(seq_lens, &self.stream)?;
        let last = self.last_loc.upload(last_loc, &self.stream)?;
        let dst = self.out.reserve(out.len(), &self.stream)?;
        // SAFETY: the device arrays hold the host copies (`seq_lens.len()` each) and `dst`
        // `out.len()` indices; none is freed or rewritten before the stream has passed the
        // call (a later upload is ordered after it; growing waits for the stream).
        let device = unsafe {
            self.pool.alloc_extend(
                prefix_lens,
                seq_lens,
                prefix,
                seq,
                last,
                extend_num_tokens,
                dst,
                out.len(),
                self.stream.raw(),
            )
        };
        self.expected.resize(out.len(), 0);
        let host = self.shadow.alloc_extend(
            prefix_lens,
            seq_lens,
            last_loc,
            extend_num_tokens,
            &mut self.expected,
        );
        agree("alloc_extend", device, host)?;
        self.read_back("alloc_extend", extend_num_tokens as usize, out)
    }

    fn alloc_decode(
        &mut self,
        seq_lens: &[i64],
        last_loc: &[i64],
        out: &mut [i64],
    ) -> Result<(), PoolError> {
        check_batch(last_loc, seq_lens)?;
        self.lockstep.calls += 1;
        let seq = self.seq_lens.upload(seq_lens, &self.stream)?;
        let last = self.last_loc.upload(last_loc, &self.stream)?;
        let dst = self.out.reserve(out.len(), &self.stream)?;
        // SAFETY: as in `alloc_extend`.
        let device = unsafe {
            self.pool
                .alloc_decode(seq_lens, seq, last, dst, out.len(), self.stream.raw())
        };
        self.expected.resize(out.len(), 0);
        let host = self
            .shadow
            .alloc_decode(seq_lens, last_loc, &mut self.expected);
        agree("alloc_decode", device, host)?;
        self.read_back("alloc_decode", seq_lens.len(), out)
    }

    fn free(&mut self, indices: &[i64]) -> Result<(), PoolError> {
        self.lockstep.calls += 1;
        let src = self.row.upload(indices, &self.stream)?;
        // SAFETY: `src` holds the indices until the stream has passed the call (the next
        // upload is ordered after it; growing waits for the stream).
        let device = unsafe { self.pool.free(src, indices.len(), self.stream.raw()) };
        let host = self.shadow.free(indices);
        agree("free", device, host)?;
        self.keep_exact()
    }

    fn free_segment(&mut self, row: &[i64], start_pos: usize, len: usize) -> Result<(), PoolError> {
        self.lockstep.calls += 1;
        let src = self.row.upload(row, &self.stream)?;
        // SAFETY: as in `free`; `src` holds the whole row.
        let device = unsafe {
            self.pool
                .free_segment(src, row.len(), start_pos, len, self.stream.raw())
        };
        let host = self.shadow.free_segment(row, start_pos, len);
        agree("free_segment", device, host)?;
        self.keep_exact()
    }

    fn free_group_begin(&mut self) -> Result<(), PoolError> {
        let device = self.pool.free_group_begin();
        let host = self.shadow.free_group_begin();
        agree("free_group_begin", device, host)
    }

    fn free_group_end(&mut self) -> Result<(), PoolError> {
        // SAFETY: the engine's stream, alive as long as `self`.
        let device = unsafe { self.pool.free_group_end(self.stream.raw()) };
        let host = self.shadow.free_group_end();
        agree("free_group_end", device, host)?;
        self.keep_exact()
    }

    fn end_step(&mut self) -> Result<(), String> {
        self.check_settled()?;
        self.lockstep.steps += 1;
        Ok(())
    }

    /// The device's free list read back must be the shadow's, entry for entry, and every
    /// page free: `available_size_bound` is `(size, true)` and `check_device` is `Ok`.
    fn check_all_free(&mut self) -> Result<(), String> {
        self.check_settled()?;
        let bound = self.pool.available_size_bound();
        if bound != (self.pool.size(), true) {
            return Err(format!(
                "available_size_bound is {bound:?}, not ({}, true)",
                self.pool.size()
            ));
        }
        let census = self.device_census()?;
        let expected = self.shadow.free_page_census();
        if census != expected {
            let i = census
                .iter()
                .zip(&expected)
                .position(|(d, h)| d != h)
                .unwrap_or(census.len().min(expected.len()));
            return Err(format!(
                "the device's free list ({} pages) differs from the host backend's ({}) at position {i}",
                census.len(),
                expected.len()
            ));
        }
        kv::all_free(&census, self.pool.info().num_pages)
    }

    fn backend(&self) -> String {
        format!(
            "cuda (kvpool::cuda::DevicePool on GPU {}: {})",
            self.ordinal, self.gpu
        )
    }

    fn lockstep(&self) -> Option<Lockstep> {
        Some(self.lockstep)
    }
}
