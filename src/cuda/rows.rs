//! Request-to-token tables on a device pool (`kernels/rows.cuh`): `alloc_extend_rows`,
//! `alloc_decode_rows`, `free_rows` and FlashInfer page tables, each enqueued on the
//! caller's stream with no synchronization. The host backend (`src/pool/rows.rs`) is the
//! oracle; `tests/cuda_rows.rs` compares the two element by element.
//!
//! A child module of `pool.rs` (it uses the pool's private launch machinery).

use cudarc::driver::sys::{CUdeviceptr, CUstream};

use super::{
    arg, cluster_slot, decode_slot, wide_slot, DevicePool, ExtendKernel, Launch, BLOCK, FREE_BLOCK,
    FREE_SEGMENT, FREE_SLOTS, WARP_TOKENS,
};
use crate::cuda::counts::Step;
use crate::cuda::layout::DeviceOp;
use crate::cuda::memory::DeviceMemory;
use crate::pool::error::fail;
use crate::pool::rows::{
    check_page_table, check_segments, check_table_type, TableShape, MAX_TABLE_ROWS,
};
use crate::pool::{plan, ErrorKind, IndexType, PoolError};

/// A request-to-token table in device memory, borrowed for one call (until the stream
/// passes it).
#[derive(Clone, Copy, Debug)]
pub struct DeviceTable {
    /// Device address of row 0's first element.
    pub data: CUdeviceptr,
    /// `int64` (`true`) or `int32` entries.
    pub index_type: IndexType,
    /// Rows, stride and usable length.
    pub shape: TableShape,
}

impl DeviceTable {
    pub(super) fn wide(&self) -> u32 {
        u32::from(self.index_type == IndexType::I64)
    }

    pub(super) fn check(&self, max_slot: u64) -> Result<(), PoolError> {
        self.shape.span()?;
        match self.index_type {
            IndexType::I64 => check_table_type::<i64>(max_slot),
            IndexType::I32 => check_table_type::<i32>(max_slot),
        }
    }
}

/// What must grow when a by-row call inside a capture finds the scratch too small.
const ROWS_SCRATCH: &str = "the by-row calls' device scratch (before capturing, size it for \
                            the largest call with kvp_pool_reserve_scratch_async)";

/// Where `rows_alloc` puts its data in the scratch for `batch` requests of `tokens` tokens:
/// `last_loc[batch] | tok_off[batch + 1] | out[tokens]` (the new slots only when the caller
/// gave no `out`). (byte offset of `tok_off`, byte offset of `out`, bytes in all.)
fn alloc_scratch(
    batch: usize,
    tokens: usize,
    index_bytes: usize,
    new_out: bool,
) -> (usize, usize, usize) {
    let off_at = 8 * batch;
    let out_at = off_at + 8 * (batch + 1);
    let out_bytes = if new_out { index_bytes * tokens } else { 0 };
    (off_at, out_at, out_at + out_bytes)
}

/// Bytes of the by-row calls' scratch for calls of up to `batch` requests allocating or
/// freeing up to `slots` slots on tables of up to `table_rows` rows: the mark words (4
/// bytes a row) and the data (`rows_alloc`: `alloc_scratch`, 16 bytes a request and 8
/// more, then the new slots when `out` is NULL; `free_rows_inner`: each
/// segment's pages in whole pages, at most `page_size - 1` slots a request over its
/// slots). `None` when a size does not fit the address space.
fn rows_scratch_bytes(
    table_rows: u64,
    batch: u64,
    slots: u64,
    index_bytes: u64,
    page_size: u64,
) -> Option<(usize, usize)> {
    let marks = table_rows.checked_mul(4)?;
    let pad = batch.checked_mul(page_size - 1)?;
    let data = slots
        .checked_add(pad)?
        .checked_mul(index_bytes)?
        .checked_add(batch.checked_add(1)?.checked_mul(16)?)?;
    let fits = |b: u64| {
        usize::try_from(b)
            .ok()
            .filter(|&b| b <= isize::MAX as usize)
    };
    Some((fits(marks)?, fits(data)?))
}

/// The newest buffer of `buffers` if it holds `bytes`, else a new zeroed one (twice the
/// size, at least 4 KiB), kept as the newest.
fn grow(
    buffers: &mut Vec<DeviceMemory>,
    bytes: usize,
    stream: CUstream,
) -> Result<CUdeviceptr, PoolError> {
    match buffers.last() {
        Some(mem) if mem.bytes() >= bytes => Ok(mem.at(0)),
        last => {
            let size = last.map_or(0, |m| m.bytes() * 2).max(bytes).max(4096);
            let mem = DeviceMemory::zeroed_on(size, stream, ROWS_SCRATCH)?;
            let at = mem.at(0);
            buffers.push(mem);
            Ok(at)
        }
    }
}

/// `kvp::TableArgs` (kernels/req_table.cuh), passed by value to the fused allocation kernels.
#[repr(C)]
pub(super) struct TableArgs {
    table: CUdeviceptr,
    wide: u32,
    pub(super) rows_in_table: u64,
    stride: u64,
    row_len: u64,
    pub(super) rows: CUdeviceptr,
}

/// Threads of the one-block rows kernels (`ROWS_BLOCK` in kernels/rows.cuh).
pub(super) const ROWS_BLOCK: u32 = 1024;
/// Threads of `kvp_rows_scatter_*` (`SCATTER_BLOCK` in kernels/rows.cuh).
pub(super) const SCATTER_BLOCK: u32 = 256;
/// The most tokens of an extend a scatter thread takes per run (`SCATTER_TOKENS` in
/// kernels/rows.cuh).
pub(super) const SCATTER_TOKENS: u64 = 4;
/// The most tokens of an extend a scatter block takes at once: each run pays one block-wide
/// search for its first request and a staging of its requests. The kernel derives its runs
/// from the grid (any grid is correct).
const SCATTER_RUN: u64 = SCATTER_TOKENS * SCATTER_BLOCK as u64;

/// The scatter's grid: for an extend, a block per SCATTER_RUN tokens, but at least two per
/// multiprocessor (down to a token a thread) where the tokens allow, so that a short call
/// still spreads over the device; for a decode, a token a thread.
fn scatter_grid(tokens: u64, extend: bool, multiprocessors: u32) -> u32 {
    let block = u64::from(SCATTER_BLOCK);
    let blocks = if extend {
        tokens
            .div_ceil(SCATTER_RUN)
            .max(tokens.div_ceil(block).min(2 * u64::from(multiprocessors)))
    } else {
        tokens.div_ceil(block)
    };
    blocks.clamp(1, 65_535) as u32
}

fn batch_u32(batch: usize) -> Result<u32, PoolError> {
    u32::try_from(batch)
        .map_err(|_| PoolError::new(ErrorKind::InvalidLengths, "batch_size exceeds 2^32 - 1"))
}

impl DevicePool {
    /// The mark words of a table of `shape.rows` rows (`u32` each), zero at the point of
    /// `stream` where the next kernel runs: a new buffer is zeroed on `stream`, and every
    /// rows kernel leaves the words it set zero again. Grows geometrically; old buffers are
    /// kept until the pool is released (queued kernels may still use them).
    fn rows_marks(
        &mut self,
        shape: &TableShape,
        stream: CUstream,
    ) -> Result<CUdeviceptr, PoolError> {
        grow(&mut self.rows_marks, shape.rows as usize * 4, stream)
    }

    /// Per-call scratch of at least `bytes` (contents undefined).
    fn rows_data(&mut self, bytes: usize, stream: CUstream) -> Result<CUdeviceptr, PoolError> {
        grow(&mut self.rows_data, bytes, stream)
    }

    /// Sizes the by-row calls' device scratch for calls of up to `batch` requests that
    /// allocate or free up to `slots` slots on tables of up to `table_rows` rows, so that
    /// such calls allocate no device memory: needed before recording them by stream capture,
    /// where a call that would have to grow the scratch is refused (`InvalidState`). The
    /// scratch only grows (a smaller size does nothing); new memory is zeroed on `stream`.
    /// Not a call of the pool: no kernel, the pool's state untouched, also while it is
    /// faulted. Refused while `stream` is being captured if anything must grow.
    ///
    /// # Safety
    /// `stream` a live stream of the pool's device (or NULL).
    pub unsafe fn reserve_rows_scratch(
        &mut self,
        table_rows: u64,
        batch: u64,
        slots: u64,
        stream: CUstream,
    ) -> Result<(), PoolError> {
        self.enter(stream, true)?;
        if table_rows > MAX_TABLE_ROWS {
            return fail(
                ErrorKind::InvalidArgument,
                format!("table_rows = {table_rows} exceeds 2^32 - 1 (a table's rows fit 32 bits)"),
            );
        }
        let page_size = u64::from(self.layout.page_size);
        let Some((marks, data)) = rows_scratch_bytes(
            table_rows,
            batch,
            slots,
            self.index_bytes() as u64,
            page_size,
        ) else {
            return fail(
                ErrorKind::InvalidArgument,
                format!(
                    "scratch for {batch} requests and {slots} slots does not fit the address space"
                ),
            );
        };
        if marks > 0 {
            grow(&mut self.rows_marks, marks, stream)?;
        }
        grow(&mut self.rows_data, data, stream)?;
        Ok(())
    }

    pub(super) fn index_bytes(&self) -> usize {
        match self.config.index_type {
            IndexType::I64 => 8,
            IndexType::I32 => 4,
        }
    }

    /// Enqueues [`crate::Pool::alloc_extend_rows`]: `last_loc` read from the table on the
    /// device, the new slots written into the table rows and (when `out` is not 0) to
    /// `out[..extend_num_tokens]`. The `*_host` slices are host copies of the device
    /// lengths, as for [`alloc_extend`](Self::alloc_extend). One kernel for a batch the
    /// one-block allocation kernels serve (every decode of up to 1,024 requests), else three
    /// (gather, extend, scatter) of one call; a bad row faults the pool (naming the request)
    /// and nothing is written to the table.
    ///
    /// # Safety
    /// `table` must describe device memory of the pool's device spanning its shape; `rows`,
    /// `prefix_lens`, `seq_lens` hold `batch` `int64`, `out` (unless 0) `out_len` indices;
    /// all alive until the stream passes the call.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn alloc_extend_rows(
        &mut self,
        table: DeviceTable,
        rows: CUdeviceptr,
        prefix_lens_host: &[i64],
        seq_lens_host: &[i64],
        prefix_lens: CUdeviceptr,
        seq_lens: CUdeviceptr,
        extend_num_tokens: u64,
        out: CUdeviceptr,
        out_len: usize,
        stream: CUstream,
    ) -> Result<(), PoolError> {
        self.stats.alloc_extend_calls += 1;
        // SAFETY: forwarded contract.
        let result = unsafe {
            self.rows_alloc(
                table,
                rows,
                Some((prefix_lens_host, prefix_lens)),
                seq_lens_host,
                seq_lens,
                extend_num_tokens,
                out,
                out_len,
                stream,
            )
        };
        self.record_outcome(result)
    }

    /// Enqueues [`crate::Pool::alloc_decode_rows`] (see
    /// [`alloc_extend_rows`](Self::alloc_extend_rows)).
    ///
    /// # Safety
    /// As for [`alloc_extend_rows`](Self::alloc_extend_rows).
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn alloc_decode_rows(
        &mut self,
        table: DeviceTable,
        rows: CUdeviceptr,
        seq_lens_host: &[i64],
        seq_lens: CUdeviceptr,
        out: CUdeviceptr,
        out_len: usize,
        stream: CUstream,
    ) -> Result<(), PoolError> {
        self.stats.alloc_decode_calls += 1;
        let tokens = seq_lens_host.len() as u64;
        // SAFETY: forwarded contract.
        let result = unsafe {
            self.rows_alloc(
                table,
                rows,
                None,
                seq_lens_host,
                seq_lens,
                tokens,
                out,
                out_len,
                stream,
            )
        };
        self.record_outcome(result)
    }

    #[allow(clippy::too_many_arguments)]
    unsafe fn rows_alloc(
        &mut self,
        table: DeviceTable,
        rows: CUdeviceptr,
        prefix: Option<(&[i64], CUdeviceptr)>,
        seq_lens_host: &[i64],
        seq_lens: CUdeviceptr,
        extend_num_tokens: u64,
        out: CUdeviceptr,
        out_len: usize,
        stream: CUstream,
    ) -> Result<(), PoolError> {
        self.enter(stream, false)?;
        table.check(self.layout.max_slot())?;
        let batch = seq_lens_host.len();
        let decode = prefix.is_none();
        let (tokens, new_pages) = match prefix {
            Some((prefix_host, _)) => {
                if prefix_host.len() != batch {
                    return fail(
                        ErrorKind::InvalidLengths,
                        format!(
                            "prefix_lens has {} entries but seq_lens has {batch}",
                            prefix_host.len()
                        ),
                    );
                }
                let p =
                    plan::plan_extend(&self.layout, prefix_host, seq_lens_host, extend_num_tokens)?;
                (p.tokens, p.new_pages)
            }
            None => (
                batch as u64,
                plan::plan_decode(&self.layout, seq_lens_host)?,
            ),
        };
        if out != 0 {
            Self::check_output(out_len, tokens)?;
        }
        table.shape.check_seq_lens(seq_lens_host)?;
        let ps = u64::from(self.layout.page_size);
        let trigger = match (decode, self.layout.is_paged()) {
            (true, _) => batch as u64,
            (false, true) => extend_num_tokens / ps + batch as u64 + 1,
            (false, false) => new_pages,
        };
        let what = if decode {
            "alloc_decode"
        } else {
            "alloc_extend"
        };
        if batch == 0 {
            return self.ensure_pages(trigger, new_pages, what, stream);
        }
        let batch32 = batch_u32(batch)?;
        let (kernel, grid, block, per_block, _) =
            Self::extend_shape(batch, decode, tokens, new_pages, self.rows_shapes())?;
        let op = if decode {
            DeviceOp::AllocDecodeRows
        } else {
            DeviceOp::AllocExtendRows
        };
        let decode32 = u32::from(decode);
        let prefix_dev = prefix.map_or(seq_lens, |(_, p)| p);
        // A batch of the kernels that decide a whole call in every block (a decode step of up
        // to 1,024 requests, up to 4,096 on a cluster; an extend of up to 2,048): one kernel (it
        // enters rows in a 32-bit keyed table; `TableShape::span`, checked above, bounds the
        // table's rows by 2^32 - 1).
        let typed = &self.kernels.typed;
        // The rows kernel and its block. An extend_few shape runs on the rows kernel of the
        // same grid, but its one-block shapes on two rows kernels only: one warp up to
        // `WARP_TOKENS` (the two-warp shape's limit), else 256 threads.
        let one_kernel = match kernel {
            ExtendKernel::Few(_) | ExtendKernel::FewUpTo(..) if tokens <= WARP_TOKENS => {
                Some((typed.extend_warp_rows, 32))
            }
            ExtendKernel::Few(_) | ExtendKernel::FewUpTo(..) => {
                Some((typed.extend_block_rows, BLOCK))
            }
            // Exactly one request: the same shapes built for one.
            ExtendKernel::One(_) if tokens <= WARP_TOKENS => Some((typed.extend_one_warp_rows, 32)),
            ExtendKernel::One(_) => Some((typed.extend_one_block_rows, BLOCK)),
            ExtendKernel::OneBlocks(_) => Some((typed.extend_one_blocks_rows, block)),
            ExtendKernel::Block64 => Some((typed.extend_block64_rows, block)),
            ExtendKernel::Block => Some((typed.extend_block_short_rows, block)),
            ExtendKernel::Blocks | ExtendKernel::FewBlocks(_) | ExtendKernel::FewSpread => {
                Some((typed.extend_blocks_rows, block))
            }
            ExtendKernel::Decode(threads) => Some((typed.decode_rows[decode_slot(threads)], block)),
            ExtendKernel::DecodeOne => Some((typed.decode_one_rows, block)),
            ExtendKernel::DecodeCluster(blocks) => {
                Some((typed.decode_cluster_rows[cluster_slot(blocks)], block))
            }
            // (Only shapes whose rows kernel the device gives its shared memory: rows_shapes.)
            ExtendKernel::BlocksWide(held) => {
                Some((typed.extend_blocks_wide_rows[wide_slot(held)], block))
            }
            // (`Pairs` is not offered by row, `rows_shapes`; were it, the three kernels below
            // would serve: gather, the plain kernel, scatter.)
            ExtendKernel::Grid | ExtendKernel::Pairs(_) => None,
        };
        if let Some((function, block)) = one_kernel {
            self.ensure_pages(trigger, new_pages, what, stream)?;
            let tab = TableArgs {
                table: table.data,
                wide: table.wide(),
                rows_in_table: table.shape.rows,
                stride: table.shape.row_stride,
                row_len: table.shape.row_len,
                rows,
            };
            let args = [
                arg(&prefix_dev),
                arg(&seq_lens),
                arg(&batch32),
                arg(&decode32),
                arg(&tokens),
                arg(&new_pages),
                arg(&out),
                arg(&tab),
            ];
            // SAFETY: `kvp_extend_{warp,block}_rows_*(View, Call, const i64 *prefix, const i64
            // *seq, u32 batch, u32 decode, u64 tokens, u64 pages, Index *out, TableArgs)`;
            // the shared memory as the kernel was allowed at load.
            unsafe {
                self.run_call(
                    op as u32,
                    Step::Take(new_pages),
                    stream,
                    &[Launch {
                        function,
                        grid,
                        block,
                        shared: kernel.rows_shared_bytes(&self.kernels),
                        extra: &args,
                    }],
                )
            }?;
            self.count_allocation(tokens, new_pages);
            return Ok(());
        }
        let marks_ptr = self.rows_marks(&table.shape, stream)?;
        let (off_at, out_at, bytes) =
            alloc_scratch(batch, tokens as usize, self.index_bytes(), out == 0);
        let base = self.rows_data(bytes, stream)?;
        // After the scratch (whose allocation may fail): a merge is a call of its own, which
        // a refused call must not have made.
        self.ensure_pages(trigger, new_pages, what, stream)?;
        let last_loc = base;
        let tok_off = base + off_at as u64;
        let out = if out == 0 { base + out_at as u64 } else { out };
        let prefix_or_null = prefix.map_or(0, |(_, p)| p);
        let wide = table.wide();
        let (table_rows, stride, row_len) = (
            table.shape.rows,
            table.shape.row_stride,
            table.shape.row_len,
        );
        let extend_fn = kernel.function(&self.kernels.typed);
        let scatter_grid = scatter_grid(tokens, prefix.is_some(), self.multiprocessors);
        let gather_args = [
            arg(&table.data),
            arg(&wide),
            arg(&table_rows),
            arg(&stride),
            arg(&row_len),
            arg(&rows),
            arg(&prefix_or_null),
            arg(&seq_lens),
            arg(&batch32),
            arg(&marks_ptr),
            arg(&last_loc),
            arg(&tok_off),
        ];
        let extend_args = [
            arg(&prefix_dev),
            arg(&seq_lens),
            arg(&last_loc),
            arg(&batch32),
            arg(&per_block),
            arg(&decode32),
            arg(&tokens),
            arg(&new_pages),
            arg(&out),
        ];
        let scatter_args = [
            arg(&table.data),
            arg(&wide),
            arg(&stride),
            arg(&rows),
            arg(&prefix_or_null),
            arg(&seq_lens),
            arg(&batch32),
            arg(&tok_off),
            arg(&out),
            arg(&tokens),
        ];
        // SAFETY: each launch's arguments match its kernel's parameters after (View, Call)
        // (kernels/pool.cu: kvp_rows_gather_*, kvp_extend*_*, kvp_rows_scatter_*).
        unsafe {
            self.run_call(
                op as u32,
                Step::Take(new_pages),
                stream,
                &[
                    Launch {
                        function: self.kernels.typed.rows_gather,
                        grid: 1,
                        block: ROWS_BLOCK,
                        shared: 0,
                        extra: &gather_args,
                    },
                    Launch {
                        function: extend_fn,
                        grid,
                        block,
                        shared: kernel.shared_bytes(&self.kernels),
                        extra: &extend_args,
                    },
                    Launch {
                        function: self.kernels.typed.rows_scatter,
                        grid: scatter_grid,
                        block: SCATTER_BLOCK,
                        shared: 0,
                        extra: &scatter_args,
                    },
                ],
            )
        }?;
        self.count_allocation(tokens, new_pages);
        Ok(())
    }

    /// Enqueues [`crate::Pool::free_rows`]: the pages of `table[rows[i]][starts[i] ..
    /// ends[i])` for every `i`, as one free. The host plans the page count from its copies
    /// of `starts` / `ends` (exact counts at once); the device checks the rows (in range,
    /// distinct) and the segments' slots, faulting the pool on a bad one. A batch whose
    /// segments are all empty enqueues nothing (its rows are not checked).
    ///
    /// # Safety
    /// `table` as for [`alloc_extend_rows`](Self::alloc_extend_rows); `rows`, `starts`,
    /// `ends` hold `batch` `int64` and stay alive until the stream passes the call.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn free_rows(
        &mut self,
        table: DeviceTable,
        rows: CUdeviceptr,
        starts_host: &[i64],
        ends_host: &[i64],
        starts: CUdeviceptr,
        ends: CUdeviceptr,
        stream: CUstream,
    ) -> Result<(), PoolError> {
        self.stats.free_calls += 1;
        // SAFETY: forwarded contract.
        let result = unsafe {
            self.free_rows_inner(table, rows, starts_host, ends_host, starts, ends, stream)
        };
        self.record_outcome(result)
    }

    #[allow(clippy::too_many_arguments)]
    unsafe fn free_rows_inner(
        &mut self,
        table: DeviceTable,
        rows: CUdeviceptr,
        starts_host: &[i64],
        ends_host: &[i64],
        starts: CUdeviceptr,
        ends: CUdeviceptr,
        stream: CUstream,
    ) -> Result<(), PoolError> {
        self.enter(stream, false)?;
        table.check(self.layout.max_slot())?;
        let batch = starts_host.len();
        if ends_host.len() != batch {
            return fail(
                ErrorKind::InvalidLengths,
                format!(
                    "starts has {batch} entries but ends has {}",
                    ends_host.len()
                ),
            );
        }
        check_segments(&table.shape, starts_host, ends_host)?;
        let ps = u64::from(self.layout.page_size);
        let (mut pages, mut virt_len) = (0u64, 0u64);
        for (i, (&s, &e)) in starts_host.iter().zip(ends_host).enumerate() {
            // (An empty segment frees nothing, wherever it starts: as the host pool.)
            if ps > 1 && e > s && !(s as u64).is_multiple_of(ps) {
                return fail(
                    ErrorKind::Unaligned,
                    format!("starts[{i}] = {s} is not a multiple of page_size {ps}"),
                );
            }
            let n = ((e - s) as u64).div_ceil(ps);
            pages += n;
            virt_len += n * ps;
        }
        if pages > u64::from(self.layout.num_pages) {
            return fail(
                ErrorKind::DoubleFree,
                format!(
                    "the segments span {pages} pages but the pool has {}",
                    self.layout.num_pages
                ),
            );
        }
        if pages == 0 {
            return Ok(());
        }
        let batch32 = batch_u32(batch)?;
        let marks = self.rows_marks(&table.shape, stream)?;
        let virt = self.rows_data(self.index_bytes() * virt_len as usize, stream)?;
        let wide = table.wide();
        let (table_rows, stride, row_len) = (
            table.shape.rows,
            table.shape.row_stride,
            table.shape.row_len,
        );
        let mode = if self.layout.is_paged() {
            FREE_SEGMENT
        } else {
            FREE_SLOTS
        };
        let zero = 0u64;
        let count = pages as u32;
        let dest = self.known_dest();
        let segment_args = [
            arg(&table.data),
            arg(&wide),
            arg(&table_rows),
            arg(&stride),
            arg(&row_len),
            arg(&rows),
            arg(&starts),
            arg(&ends),
            arg(&batch32),
            arg(&marks),
            arg(&virt),
            arg(&virt_len),
        ];
        let (free_function, free_grid) = self.free_known_launch(mode, pages);
        let free_args = [
            arg(&virt),
            arg(&mode),
            arg(&virt_len),
            arg(&zero),
            arg(&count),
        ];
        // SAFETY: kvp_rows_segments_*(View, Call, ...) and kvp_free_known_* /
        // kvp_free_segment_*(View, Call, const Index *src, u32 mode, u64 len, u64 start,
        // u32 count).
        unsafe {
            self.run_call(
                DeviceOp::FreeRows as u32,
                Step::Release {
                    dest,
                    pages: Some(pages),
                },
                stream,
                &[
                    Launch {
                        function: self.kernels.typed.rows_segments,
                        grid: 1,
                        block: ROWS_BLOCK,
                        shared: 0,
                        extra: &segment_args,
                    },
                    Launch {
                        function: free_function,
                        grid: free_grid,
                        block: FREE_BLOCK,
                        shared: 0,
                        extra: &free_args,
                    },
                ],
            )
        }?;
        self.record_free(Some(pages));
        Ok(())
    }

    /// Enqueues a FlashInfer page table of `rows` (see [`crate::Pool::page_table`]) into
    /// device buffers `kv_indptr[..=batch]`, `kv_indices[..capacity]`,
    /// `kv_last_page_len[..batch]` (int32), planned from `seq_lens_host`; fills the host
    /// copies `kv_indptr_host` / `kv_last_page_len_host` when given (FlashInfer's `plan()`
    /// wants them on the host). One kernel; reads no pool state, changes nothing, works on
    /// a faulted pool. Returns the page count.
    ///
    /// # Safety
    /// `table` as for [`alloc_extend_rows`](Self::alloc_extend_rows); `rows`, `seq_lens`
    /// hold `batch` `int64`, the outputs their stated lengths; alive until the stream passes
    /// the call.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn page_table(
        &mut self,
        table: DeviceTable,
        rows: CUdeviceptr,
        seq_lens_host: &[i64],
        seq_lens: CUdeviceptr,
        kv_indptr: CUdeviceptr,
        kv_indices: CUdeviceptr,
        capacity: usize,
        kv_last_page_len: CUdeviceptr,
        host: Option<(&mut [i32], &mut [i32])>,
        stream: CUstream,
    ) -> Result<u64, PoolError> {
        self.context.bind()?;
        self.context.check_stream(stream)?;
        let batch = seq_lens_host.len();
        let total = check_page_table(
            &self.layout,
            &table.shape,
            None,
            seq_lens_host,
            batch + 1,
            capacity,
            batch,
        )?;
        if let Some((indptr, last)) = &host {
            if indptr.len() < batch + 1 || last.len() < batch {
                return fail(
                    ErrorKind::BufferTooSmall,
                    "the host copies need batch_size + 1 and batch_size entries",
                );
            }
        }
        let batch32 = batch_u32(batch)?;
        let wide = table.wide();
        let (table_rows, stride, row_len) = (
            table.shape.rows,
            table.shape.row_stride,
            table.shape.row_len,
        );
        let ps = self.layout.page_size;
        let capacity64 = capacity as u64;
        let mut args = [
            arg(&table.data),
            arg(&wide),
            arg(&table_rows),
            arg(&stride),
            arg(&row_len),
            arg(&rows),
            arg(&seq_lens),
            arg(&batch32),
            arg(&ps),
            arg(&kv_indptr),
            arg(&kv_indices),
            arg(&capacity64),
            arg(&kv_last_page_len),
        ];
        // SAFETY: kvp_page_table's parameters, in order; forwarded contract.
        unsafe {
            self.kernels
                .launch(self.kernels.page_table, 1, ROWS_BLOCK, stream, &mut args)
        }?;
        let _ = self.last_use.mark(stream);
        if let Some((indptr, last)) = host {
            let ps = i64::from(ps);
            indptr[0] = 0;
            for (i, &seq) in seq_lens_host.iter().enumerate() {
                let pages = (seq + ps - 1) / ps;
                indptr[i + 1] = indptr[i] + pages as i32;
                last[i] = if pages == 0 {
                    0
                } else {
                    (seq - (pages - 1) * ps) as i32
                };
            }
        }
        Ok(total)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `rows_alloc` asks of the data scratch, with a new output (its own layout).
    fn alloc_needs(batch: u64, tokens: u64, index_bytes: u64) -> u64 {
        alloc_scratch(batch as usize, tokens as usize, index_bytes as usize, true).2 as u64
    }
    /// What `free_rows_inner` asks of the data scratch: each segment in whole pages.
    fn free_needs(segments: &[u64], page_size: u64, index_bytes: u64) -> u64 {
        index_bytes
            * segments
                .iter()
                .map(|&n| n.div_ceil(page_size) * page_size)
                .sum::<u64>()
    }

    #[test]
    fn reserved_scratch_covers_every_call_within_its_bounds() {
        for (page_size, index_bytes) in [(1, 8), (16, 8), (64, 4), (5, 4)] {
            for (batch, slots) in [
                (1u64, 1u64),
                (3, 100),
                (2600, 2600 * 64),
                (4096, 4096),
                (7, 9),
            ] {
                let (marks, data) =
                    rows_scratch_bytes(3000, batch, slots, index_bytes, page_size).unwrap();
                assert_eq!(marks, 3000 * 4);
                let data = data as u64;
                assert!(alloc_needs(batch, slots, index_bytes) <= data);
                // The most padding: every segment one slot into a page, but the first,
                // which takes the rest.
                let mut segments = vec![1; batch as usize];
                segments[0] += slots - batch;
                assert!(free_needs(&segments, page_size, index_bytes) <= data);
                assert!(free_needs(&[slots], page_size, index_bytes) <= data);
            }
        }
        // Sizes past the address space are refused, not wrapped.
        assert_eq!(rows_scratch_bytes(1, u64::MAX, 1, 8, 16), None);
        assert_eq!(rows_scratch_bytes(1, 1, u64::MAX / 4, 8, 16), None);
        assert_eq!(rows_scratch_bytes(u64::MAX, 1, 1, 8, 16), None);
    }

    #[test]
    fn scatter_grids_spread_short_extends_and_cap_long_ones() {
        // 2,049 requests of 512 tokens: a block per 1,024 tokens.
        assert_eq!(scatter_grid(2049 * 512, true, 132), 1025);
        // 2,049 of 16 tokens: a token a thread up to two blocks per multiprocessor.
        assert_eq!(scatter_grid(2049 * 16, true, 132), 129);
        assert_eq!(scatter_grid(100_000, true, 132), 264);
        // No tokens still launches one block; a huge call is capped (the blocks loop).
        assert_eq!(scatter_grid(0, true, 132), 1);
        assert_eq!(scatter_grid(1 << 40, true, 132), 65_535);
        // Decodes: a token a thread.
        assert_eq!(scatter_grid(4097, false, 132), 17);
    }
}
