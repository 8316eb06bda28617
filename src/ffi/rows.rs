//! Request-to-token tables: allocation, frees and FlashInfer page tables by request row
//! (host pools; the `_async` variants of device pools are in `device_rows.rs`).

use std::ffi::c_void;

use super::boundary::{fail, status_of, status_of_error};
use super::buffers::{check, disjoint, index_span, input, output, output_indices, span, Span};
use super::device::{check_device_ptr, device_ptr, index_align, stream_of, CUstream_st};
use super::pool::{kvp_pool, with_device_pool, with_pool};
use super::status::kvp_status;
use crate::cuda::DeviceTable;
use crate::pool::{IndexType, Pool, PoolOp, ReqTable, SlotIndex, TableShape};

/// A request-to-token table borrowed for one call (SGLang's `ReqToTokenPool.req_to_token`,
/// PyTorch's `req_to_token` tensor): entry `[r][k]` (at `data + r * row_stride + k`) is the
/// KV slot of token `k` of the request that owns row `r`. Nothing is registered or kept:
/// every call that takes a table reads (and for allocations writes) it during the call
/// (host pools) or when the stream runs the call (device pools).
///
/// `data` is host memory for a host pool and device memory for a device pool; it must
/// span `(rows - 1) * row_stride + row_len` elements of `index_type` (independent of the
/// pool's index type: SGLang's table is int32 while `out_cache_loc` is int64; an int32
/// table needs the pool's slots to fit int32).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct kvp_req_table {
    /// First element of row 0.
    pub data: *mut c_void,
    /// One of `kvp_index_type`: `int64_t` or `int32_t` entries.
    pub index_type: u32,
    /// Rows (request slots); at most `UINT32_MAX`.
    pub rows: u64,
    /// Elements from one row to the next (`>= row_len` when `rows > 1`); any stride, e.g.
    /// `tensor.stride(0)`.
    pub row_stride: u64,
    /// Usable entries per row: the longest sequence a row holds (`max_context_len`).
    pub row_len: u64,
}

/// Reads and checks a table descriptor (the shape and the index type; not the data).
pub(crate) fn table_of(
    table: *const kvp_req_table,
) -> Result<(kvp_req_table, TableShape, IndexType), kvp_status> {
    if table.is_null() {
        return Err(fail(kvp_status::NullArgument, "table is NULL"));
    }
    // SAFETY: non-NULL; the caller's contract is a valid descriptor.
    let t = unsafe { *table };
    let index_type = match t.index_type {
        0 => IndexType::I64,
        1 => IndexType::I32,
        other => {
            return Err(fail(
                kvp_status::InvalidArgument,
                format!("table.index_type {other} is not a kvp_index_type"),
            ))
        }
    };
    let shape = TableShape {
        rows: t.rows,
        row_stride: t.row_stride,
        row_len: t.row_len,
    };
    shape.span().map_err(status_of_error)?;
    let align = match index_type {
        IndexType::I64 => 8,
        IndexType::I32 => 4,
    };
    if t.data.is_null() {
        return Err(fail(kvp_status::NullArgument, "table.data is NULL"));
    }
    if !(t.data as usize).is_multiple_of(align) {
        return Err(fail(
            kvp_status::InvalidArgument,
            "table.data is not aligned for its element type",
        ));
    }
    Ok((t, shape, index_type))
}

/// Borrows a host table.
///
/// # Safety
/// `t.data` must be valid for the span of `shape`, with no other access during the call.
pub(crate) unsafe fn host_table<'a, T: SlotIndex>(
    t: &kvp_req_table,
    shape: TableShape,
) -> Result<ReqTable<'a, T>, kvp_status> {
    let span = elements(&shape)?;
    // SAFETY: forwarded contract.
    let data = unsafe { output(t.data.cast::<T>(), span, "table.data") }?;
    ReqTable::new(data, shape).map_err(status_of_error)
}

/// Borrows a host table a call only reads (a free by row, a page table): as
/// [`host_table`], but no `&mut` to its memory is made, so index arrays the caller placed
/// inside it stay validly borrowed.
///
/// # Safety
/// `t.data` must be valid for reads of the span of `shape`, not written during the call.
pub(crate) unsafe fn host_table_read<'a, T: SlotIndex>(
    t: &kvp_req_table,
    shape: TableShape,
) -> Result<ReqTable<'a, T>, kvp_status> {
    let span = elements(&shape)?;
    let data = t.data.cast::<T>();
    check(data.cast_const(), span, "table.data")?;
    // SAFETY: checked pointer; validity for reads is the caller's contract, and the call
    // writes no row.
    unsafe { ReqTable::from_raw(data, span, shape) }.map_err(status_of_error)
}

/// The elements a table of `shape` spans.
fn elements(shape: &TableShape) -> Result<usize, kvp_status> {
    shape.span().map(|n| n as usize).map_err(status_of_error)
}

/// A host table's memory as a [`Span`] (empty for a shape `host_table` refuses anyway).
pub(crate) fn table_span<'a, T>(t: &kvp_req_table, shape: &TableShape) -> Span<'a> {
    let elements = shape.span().map_or(0, |n| n as usize);
    span(t.data.cast_const().cast::<T>(), elements, "table.data")
}

/// [`table_span`] for a table whose element type is known at run time (device tables).
pub(crate) fn table_span_of<'a>(
    t: &kvp_req_table,
    shape: &TableShape,
    index: IndexType,
) -> Span<'a> {
    match index {
        IndexType::I64 => table_span::<i64>(t, shape),
        IndexType::I32 => table_span::<i32>(t, shape),
    }
}

/// Dispatches on the pool's index type (`I`) and the table's (`T`).
macro_rules! by_types {
    ($pool:expr, $table_type:expr, $f:ident($($arg:expr),* $(,)?)) => {
        match ($pool.config().index_type, $table_type) {
            (IndexType::I64, IndexType::I64) => $f::<i64, i64>($pool, $($arg),*),
            (IndexType::I64, IndexType::I32) => $f::<i64, i32>($pool, $($arg),*),
            (IndexType::I32, IndexType::I64) => $f::<i32, i64>($pool, $($arg),*),
            (IndexType::I32, IndexType::I32) => $f::<i32, i32>($pool, $($arg),*),
        }
    };
}

#[allow(clippy::too_many_arguments)]
unsafe fn extend_rows_typed<I: SlotIndex, T: SlotIndex>(
    pool: &mut Pool,
    t: kvp_req_table,
    shape: TableShape,
    rows: *const i64,
    prefix_lens: *const i64,
    seq_lens: *const i64,
    batch_size: usize,
    extend_num_tokens: usize,
    out: *mut c_void,
    out_len: usize,
) -> kvp_status {
    let op = PoolOp::AllocExtend;
    buffer!(
        pool,
        op,
        disjoint(
            &[
                span(out.cast_const().cast::<I>(), out_len, "out"),
                table_span::<T>(&t, &shape),
            ],
            &[
                span(rows, batch_size, "rows"),
                span(prefix_lens, batch_size, "prefix_lens"),
                span(seq_lens, batch_size, "seq_lens"),
            ],
        )
    );
    // SAFETY (all): forwarded caller contract of `kvp_pool_alloc_extend_rows`.
    let rows = buffer!(pool, op, unsafe { input(rows, batch_size, "rows") });
    let prefix_lens = buffer!(pool, op, unsafe {
        input(prefix_lens, batch_size, "prefix_lens")
    });
    let seq_lens = buffer!(pool, op, unsafe { input(seq_lens, batch_size, "seq_lens") });
    let out = if out.is_null() {
        None
    } else {
        Some(buffer!(pool, op, unsafe {
            output_indices::<I>(out, out_len, "out")
        }))
    };
    let mut table = buffer!(pool, op, unsafe { host_table::<T>(&t, shape) });
    status_of(pool.alloc_extend_rows(
        &mut table,
        rows,
        prefix_lens,
        seq_lens,
        extend_num_tokens as u64,
        out,
    ))
}

/// `kvp_pool_alloc_extend` by request rows of a `req_to_token` table (host pool).
///
/// Request `i` owns table row `rows[i]`; it has `prefix_lens[i]` tokens cached, whose slots
/// are `table[rows[i]][0 .. prefix_lens[i])`, and grows to `seq_lens[i]` tokens. Its
/// `last_loc` is read from the table (`table[rows[i]][prefix_lens[i] - 1]`, `-1` for an
/// empty prefix) and its new slots — exactly those of `kvp_pool_alloc_extend` with that
/// `last_loc` — are written to `table[rows[i]][prefix_lens[i] .. seq_lens[i])` and, when
/// `out` is not NULL, request after request to `out[0 .. extend_num_tokens)` (SGLang's
/// `out_cache_loc`, the pool's index type; `out` NULL: `out_len` is ignored).
///
/// Checked before anything is written, in addition to `kvp_pool_alloc_extend`'s checks
/// (same statuses): the table descriptor (`table` or `table.data` NULL:
/// `KVP_STATUS_NULL_ARGUMENT`; an unknown index type, no rows, `row_len` 0, overlapping
/// rows, misaligned `data`, an int32 table on a pool whose slots do not fit int32:
/// `KVP_STATUS_INVALID_ARGUMENT`), `0 <= rows[i] < table.rows`
/// (`KVP_STATUS_INDEX_OUT_OF_RANGE`), no row twice in one call
/// (`KVP_STATUS_INVALID_ARGUMENT`, naming the second), `seq_lens[i] <= table.row_len`
/// (`KVP_STATUS_BUFFER_TOO_SMALL`). On failure the table, `out` and the pool are unchanged
/// (but for the merge of staged frees a shortage may make first, as for
/// `kvp_pool_alloc_extend`).
///
/// # Safety
/// `table` must point to a valid descriptor of host memory; `rows`, `prefix_lens`,
/// `seq_lens` hold `batch_size` `int64_t`; `out` is NULL or holds `out_len` elements.
#[no_mangle]
#[must_use]
pub unsafe extern "C" fn kvp_pool_alloc_extend_rows(
    pool: *mut kvp_pool,
    table: *const kvp_req_table,
    rows: *const i64,
    prefix_lens: *const i64,
    seq_lens: *const i64,
    batch_size: usize,
    extend_num_tokens: usize,
    out: *mut c_void,
    out_len: usize,
) -> kvp_status {
    with_pool(pool, |pool| {
        let (t, shape, table_type) = buffer!(pool, PoolOp::AllocExtend, table_of(table));
        // SAFETY: forwarded caller contract.
        unsafe {
            by_types!(
                pool,
                table_type,
                extend_rows_typed(
                    t,
                    shape,
                    rows,
                    prefix_lens,
                    seq_lens,
                    batch_size,
                    extend_num_tokens,
                    out,
                    out_len
                )
            )
        }
    })
}

#[allow(clippy::too_many_arguments)]
unsafe fn decode_rows_typed<I: SlotIndex, T: SlotIndex>(
    pool: &mut Pool,
    t: kvp_req_table,
    shape: TableShape,
    rows: *const i64,
    seq_lens: *const i64,
    batch_size: usize,
    out: *mut c_void,
    out_len: usize,
) -> kvp_status {
    let op = PoolOp::AllocDecode;
    buffer!(
        pool,
        op,
        disjoint(
            &[
                span(out.cast_const().cast::<I>(), out_len, "out"),
                table_span::<T>(&t, &shape),
            ],
            &[
                span(rows, batch_size, "rows"),
                span(seq_lens, batch_size, "seq_lens"),
            ],
        )
    );
    // SAFETY (all): forwarded caller contract of `kvp_pool_alloc_decode_rows`.
    let rows = buffer!(pool, op, unsafe { input(rows, batch_size, "rows") });
    let seq_lens = buffer!(pool, op, unsafe { input(seq_lens, batch_size, "seq_lens") });
    let out = if out.is_null() {
        None
    } else {
        Some(buffer!(pool, op, unsafe {
            output_indices::<I>(out, out_len, "out")
        }))
    };
    let mut table = buffer!(pool, op, unsafe { host_table::<T>(&t, shape) });
    status_of(pool.alloc_decode_rows(&mut table, rows, seq_lens, out))
}

/// `kvp_pool_alloc_decode` by request rows (host pool): `seq_lens[i]` counts the new token;
/// `last_loc` of request `i` is `table[rows[i]][seq_lens[i] - 2]` (`-1` when
/// `seq_lens[i] == 1`) and its new slot is written to `table[rows[i]][seq_lens[i] - 1]` and,
/// when `out` is not NULL, to `out[i]`. Checks and statuses as for
/// `kvp_pool_alloc_decode` plus the row checks of `kvp_pool_alloc_extend_rows`.
///
/// # Safety
/// As for `kvp_pool_alloc_extend_rows`.
#[no_mangle]
#[must_use]
pub unsafe extern "C" fn kvp_pool_alloc_decode_rows(
    pool: *mut kvp_pool,
    table: *const kvp_req_table,
    rows: *const i64,
    seq_lens: *const i64,
    batch_size: usize,
    out: *mut c_void,
    out_len: usize,
) -> kvp_status {
    with_pool(pool, |pool| {
        let (t, shape, table_type) = buffer!(pool, PoolOp::AllocDecode, table_of(table));
        // SAFETY: forwarded caller contract.
        unsafe {
            by_types!(
                pool,
                table_type,
                decode_rows_typed(t, shape, rows, seq_lens, batch_size, out, out_len)
            )
        }
    })
}

unsafe fn free_rows_typed<T: SlotIndex>(
    pool: &mut Pool,
    t: kvp_req_table,
    shape: TableShape,
    rows: *const i64,
    starts: *const i64,
    ends: *const i64,
    batch_size: usize,
) -> kvp_status {
    let op = PoolOp::Free;
    // SAFETY (all): forwarded caller contract of `kvp_pool_free_rows`.
    let rows = buffer!(pool, op, unsafe { input(rows, batch_size, "rows") });
    let starts = buffer!(pool, op, unsafe { input(starts, batch_size, "starts") });
    let ends = buffer!(pool, op, unsafe { input(ends, batch_size, "ends") });
    let table = buffer!(pool, op, unsafe { host_table_read::<T>(&t, shape) });
    status_of(pool.free_rows(&table, rows, starts, ends))
}

/// Frees by request row (host pool): for each `i`, the pages of the segment
/// `table[rows[i]][starts[i] .. ends[i])` — `kvp_pool_free_segment` of each row, in batch
/// order, as one all-or-nothing call (one free call in the counters; inside a free group
/// the pages join the group). SGLang's `release_kv_cache` frees `[cache_protected_len,
/// kv_allocated_len)` of a finished request this way.
///
/// Checked: the table descriptor, rows in range (`KVP_STATUS_INDEX_OUT_OF_RANGE`) and
/// distinct (`KVP_STATUS_INVALID_ARGUMENT`), `0 <= starts[i] <= ends[i] <= row_len`
/// (`KVP_STATUS_INVALID_LENGTHS`), then each segment as by `kvp_pool_free_segment`
/// (paged pools: `starts[i] % page_size == 0` unless the segment is empty, each page's slots
/// contiguous; a segment ending mid-page frees its page), and no page named by two rows
/// (`KVP_STATUS_DOUBLE_FREE`). The table itself is never modified.
///
/// # Safety
/// `table` must point to a valid descriptor of host memory; `rows`, `starts`, `ends` hold
/// `batch_size` `int64_t`.
#[no_mangle]
#[must_use]
pub unsafe extern "C" fn kvp_pool_free_rows(
    pool: *mut kvp_pool,
    table: *const kvp_req_table,
    rows: *const i64,
    starts: *const i64,
    ends: *const i64,
    batch_size: usize,
) -> kvp_status {
    with_pool(pool, |pool| {
        let (t, shape, table_type) = buffer!(pool, PoolOp::Free, table_of(table));
        // SAFETY: forwarded caller contract.
        unsafe {
            match table_type {
                IndexType::I64 => {
                    free_rows_typed::<i64>(pool, t, shape, rows, starts, ends, batch_size)
                }
                IndexType::I32 => {
                    free_rows_typed::<i32>(pool, t, shape, rows, starts, ends, batch_size)
                }
            }
        }
    })
}

#[allow(clippy::too_many_arguments)]
unsafe fn page_table_typed<T: SlotIndex>(
    pool: &mut Pool,
    t: kvp_req_table,
    shape: TableShape,
    rows: *const i64,
    seq_lens: *const i64,
    batch_size: usize,
    kv_indptr: *mut i32,
    kv_indices: *mut i32,
    indices_capacity: usize,
    kv_last_page_len: *mut i32,
) -> kvp_status {
    tri!(disjoint(
        &[
            span(
                kv_indptr.cast_const(),
                batch_size.saturating_add(1),
                "kv_indptr"
            ),
            span(kv_indices.cast_const(), indices_capacity, "kv_indices"),
            span(
                kv_last_page_len.cast_const(),
                batch_size,
                "kv_last_page_len"
            ),
        ],
        &[
            span(rows, batch_size, "rows"),
            span(seq_lens, batch_size, "seq_lens"),
            table_span::<T>(&t, &shape),
        ],
    ));
    // SAFETY (all): forwarded caller contract of `kvp_pool_page_table`.
    let rows = tri!(unsafe { input(rows, batch_size, "rows") });
    let seq_lens = tri!(unsafe { input(seq_lens, batch_size, "seq_lens") });
    let kv_indptr = tri!(unsafe { output(kv_indptr, batch_size + 1, "kv_indptr") });
    let kv_indices = tri!(unsafe { output(kv_indices, indices_capacity, "kv_indices") });
    let kv_last = tri!(unsafe { output(kv_last_page_len, batch_size, "kv_last_page_len") });
    let table = tri!(unsafe { host_table_read::<T>(&t, shape) });
    status_of(
        pool.page_table(&table, rows, seq_lens, kv_indptr, kv_indices, kv_last)
            .map(|_| ()),
    )
}

/// Writes FlashInfer's paged-KV page table (`BatchDecodeWithPagedKVCacheWrapper.plan`,
/// `paged_kv_t`) of a batch of rows (host pool): request `i` is the first `seq_lens[i]`
/// tokens of row `rows[i]`.
///
/// - `kv_indptr[0 .. batch_size]` (batch_size + 1 entries): `kv_indptr[0] = 0`,
///   `kv_indptr[i + 1] = kv_indptr[i] + ceil(seq_lens[i] / page_size)`;
/// - `kv_indices[kv_indptr[i] .. kv_indptr[i + 1])`: request `i`'s page ids,
///   `table[rows[i]][p * page_size] / page_size` for its pages `p` (on a token pool,
///   page_size 1, its slots: SGLang's `create_flashinfer_kv_indices_triton`);
/// - `kv_last_page_len[i] = seq_lens[i] - (pages - 1) * page_size`, in `1 .. page_size`.
///   A request with `seq_lens[i] == 0` has no pages and `kv_last_page_len[i] = 0`
///   (FlashInfer takes a request with an empty indptr range as length 0; its decode kernels
///   expect at least one token, so pass such rows only as padding).
///
/// All three are int32, as FlashInfer requires. The table's entries are read as they are
/// (not validated: an entry outside the pool gives a page id outside the pool, except that
/// an int64 entry whose page id passes the int32 range is truncated to 32 bits, which can
/// land inside the pool); rows may repeat. Checked: the table descriptor, the pool's page
/// ids and page size fit int32 (`KVP_STATUS_INVALID_ARGUMENT`), rows in range,
/// `0 <= seq_lens[i] <= row_len` (`KVP_STATUS_INVALID_LENGTHS` /
/// `KVP_STATUS_BUFFER_TOO_SMALL`), total pages `<= indices_capacity` and `<= INT32_MAX`
/// (`KVP_STATUS_BUFFER_TOO_SMALL` / `KVP_STATUS_INVALID_LENGTHS`). Nothing is written on
/// failure. Changes nothing in the pool and counts nowhere.
///
/// # Safety
/// `table` must point to a valid descriptor of host memory; `rows`, `seq_lens` hold
/// `batch_size` `int64_t`, `kv_indptr` `batch_size + 1`, `kv_indices` `indices_capacity`,
/// `kv_last_page_len` `batch_size` `int32_t`.
#[no_mangle]
#[must_use]
pub unsafe extern "C" fn kvp_pool_page_table(
    pool: *mut kvp_pool,
    table: *const kvp_req_table,
    rows: *const i64,
    seq_lens: *const i64,
    batch_size: usize,
    kv_indptr: *mut i32,
    kv_indices: *mut i32,
    indices_capacity: usize,
    kv_last_page_len: *mut i32,
) -> kvp_status {
    with_pool(pool, |pool| {
        let (t, shape, table_type) = tri!(table_of(table));
        // SAFETY: forwarded caller contract.
        unsafe {
            match table_type {
                IndexType::I64 => page_table_typed::<i64>(
                    pool,
                    t,
                    shape,
                    rows,
                    seq_lens,
                    batch_size,
                    kv_indptr,
                    kv_indices,
                    indices_capacity,
                    kv_last_page_len,
                ),
                IndexType::I32 => page_table_typed::<i32>(
                    pool,
                    t,
                    shape,
                    rows,
                    seq_lens,
                    batch_size,
                    kv_indptr,
                    kv_indices,
                    indices_capacity,
                    kv_last_page_len,
                ),
            }
        }
    })
}

// ---- device pools ---------------------------------------------------------------------------

pub(crate) fn device_table(
    t: &kvp_req_table,
    shape: TableShape,
    index_type: IndexType,
) -> DeviceTable {
    DeviceTable {
        data: device_ptr(t.data.cast_const()),
        index_type,
        shape,
    }
}

/// Enqueues `kvp_pool_alloc_extend_rows` on `stream` (device pool): `table.data` is device
/// memory, `rows`, `prefix_lens`, `seq_lens` device arrays of `batch_size` `int64_t`, and
/// `prefix_lens_host` / `seq_lens_host` their host copies (SGLang's `*_lens_cpu`), from which
/// the host plans and checks everything it can (lengths, `seq_lens_host[i] <= row_len`,
/// `out_len`, shortage — failing with a status, enqueuing nothing). `out` (device, may be
/// NULL) receives `out_cache_loc`.
///
/// On the device, one kernel for a batch the deciding allocation kernels serve (a decode of
/// up to 1,024 requests, up to 4,096 on an sm_90 device's thread block clusters, an extend
/// of up to 2,048 requests: the rows checked, `last_loc` read and the slots written by the
/// allocation kernel), else one call of three kernels: the first checks the rows (in the
/// table, distinct, device `seq_lens[i] <= row_len`) and reads each request's `last_loc`
/// from the table into the pool's scratch; the second is `kvp_pool_alloc_extend_async`'s
/// kernel; the third writes the new slots into the table unless the call failed. A bad row,
/// like a bad `last_loc`, faults the pool (`KVP_STATUS_DEVICE_FAULT` at a later call or
/// `kvp_pool_check_device`, naming the request: `rows[i] = r is outside the table`,
/// `... repeats an earlier request's row`); a failing call writes nothing to the table
/// (`out`, if given, gets the padding slot 0). Results equal the host backend's.
///
/// The pool keeps a device scratch for these calls (a mark word per table row, and per
/// request `last_loc` and token offsets; with `out` NULL also the new slots); a call that
/// needs more than the pool has allocates it (`cuMemAlloc`, which may synchronize the
/// device; later calls of that size do not), except while `stream` is being captured: it is
/// then refused (`KVP_STATUS_INVALID_STATE`, the capture intact). Size the scratch before
/// capturing with `kvp_pool_reserve_scratch_async`. All buffers must stay alive until the
/// stream passes the call.
///
/// # Safety
/// `table` must point to a valid descriptor of device memory of the pool's device; the host
/// arrays hold `batch_size` `int64_t`; device pointers as stated.
#[no_mangle]
#[must_use]
pub unsafe extern "C" fn kvp_pool_alloc_extend_rows_async(
    pool: *mut kvp_pool,
    table: *const kvp_req_table,
    rows: *const i64,
    prefix_lens_host: *const i64,
    seq_lens_host: *const i64,
    prefix_lens: *const i64,
    seq_lens: *const i64,
    batch_size: usize,
    extend_num_tokens: usize,
    out: *mut c_void,
    out_len: usize,
    stream: *mut CUstream_st,
) -> kvp_status {
    with_device_pool(pool, |pool| {
        let (t, shape, table_type) = tri!(table_of(table));
        // SAFETY: forwarded caller contract.
        let prefix_host = tri!(unsafe { input(prefix_lens_host, batch_size, "prefix_lens_host") });
        let seq_host = tri!(unsafe { input(seq_lens_host, batch_size, "seq_lens_host") });
        tri!(check_device_ptr(rows.cast(), batch_size, 8, "rows"));
        tri!(check_device_ptr(
            prefix_lens.cast(),
            batch_size,
            8,
            "prefix_lens"
        ));
        tri!(check_device_ptr(seq_lens.cast(), batch_size, 8, "seq_lens"));
        tri!(check_device_ptr(out, 0, index_align(pool), "out"));
        tri!(disjoint(
            &[
                index_span(out.cast_const(), out_len, index_align(pool), "out"),
                table_span_of(&t, &shape, table_type),
            ],
            &[
                span(rows, batch_size, "rows"),
                span(prefix_lens, batch_size, "prefix_lens"),
                span(seq_lens, batch_size, "seq_lens"),
            ],
        ));
        // SAFETY: forwarded caller contract.
        status_of(unsafe {
            pool.alloc_extend_rows(
                device_table(&t, shape, table_type),
                device_ptr(rows),
                prefix_host,
                seq_host,
                device_ptr(prefix_lens),
                device_ptr(seq_lens),
                extend_num_tokens as u64,
                device_ptr(out.cast_const()),
                out_len,
                stream_of(stream),
            )
        })
    })
}

/// Enqueues `kvp_pool_alloc_decode_rows` on `stream` (device pool); see
/// `kvp_pool_alloc_extend_rows_async` (same kernels, one token per request at position
/// `seq_lens[i] - 1`).
///
/// # Safety
/// As for `kvp_pool_alloc_extend_rows_async`.
#[no_mangle]
#[must_use]
pub unsafe extern "C" fn kvp_pool_alloc_decode_rows_async(
    pool: *mut kvp_pool,
    table: *const kvp_req_table,
    rows: *const i64,
    seq_lens_host: *const i64,
    seq_lens: *const i64,
    batch_size: usize,
    out: *mut c_void,
    out_len: usize,
    stream: *mut CUstream_st,
) -> kvp_status {
    with_device_pool(pool, |pool| {
        let (t, shape, table_type) = tri!(table_of(table));
        // SAFETY: forwarded caller contract.
        let seq_host = tri!(unsafe { input(seq_lens_host, batch_size, "seq_lens_host") });
        tri!(check_device_ptr(rows.cast(), batch_size, 8, "rows"));
        tri!(check_device_ptr(seq_lens.cast(), batch_size, 8, "seq_lens"));
        tri!(check_device_ptr(out, 0, index_align(pool), "out"));
        tri!(disjoint(
            &[
                index_span(out.cast_const(), out_len, index_align(pool), "out"),
                table_span_of(&t, &shape, table_type),
            ],
            &[
                span(rows, batch_size, "rows"),
                span(seq_lens, batch_size, "seq_lens")
            ],
        ));
        // SAFETY: forwarded caller contract.
        status_of(unsafe {
            pool.alloc_decode_rows(
                device_table(&t, shape, table_type),
                device_ptr(rows),
                seq_host,
                device_ptr(seq_lens),
                device_ptr(out.cast_const()),
                out_len,
                stream_of(stream),
            )
        })
    })
}

/// Enqueues `kvp_pool_free_rows` on `stream` (device pool): `rows`, `starts`, `ends` are
/// device arrays of `batch_size` `int64_t`, `starts_host` / `ends_host` host copies of the
/// last two. The host checks the segments from its copies (`0 <= start <= end <= row_len`,
/// page-aligned starts) and knows the exact page count (no lower bound, unlike a free by
/// index). On the device, one call of two kernels: the first checks the rows (in the table,
/// distinct) and lays the segments' slots out, page after page, in the pool's scratch; the
/// second is `kvp_pool_free_segment_async`'s kernel over them (so a free page, a page named
/// by two rows, a slot outside the pool fault the pool and free nothing; its fault names the
/// position in the laid-out segments, and as its value -2 for an int64 table's entry an
/// int32 pool cannot hold). A batch whose segments are all empty enqueues nothing.
///
/// # Safety
/// As for `kvp_pool_alloc_extend_rows_async`.
#[no_mangle]
#[must_use]
pub unsafe extern "C" fn kvp_pool_free_rows_async(
    pool: *mut kvp_pool,
    table: *const kvp_req_table,
    rows: *const i64,
    starts_host: *const i64,
    ends_host: *const i64,
    starts: *const i64,
    ends: *const i64,
    batch_size: usize,
    stream: *mut CUstream_st,
) -> kvp_status {
    with_device_pool(pool, |pool| {
        let (t, shape, table_type) = tri!(table_of(table));
        // SAFETY: forwarded caller contract.
        let starts_h = tri!(unsafe { input(starts_host, batch_size, "starts_host") });
        let ends_h = tri!(unsafe { input(ends_host, batch_size, "ends_host") });
        tri!(check_device_ptr(rows.cast(), batch_size, 8, "rows"));
        tri!(check_device_ptr(starts.cast(), batch_size, 8, "starts"));
        tri!(check_device_ptr(ends.cast(), batch_size, 8, "ends"));
        // SAFETY: forwarded caller contract.
        status_of(unsafe {
            pool.free_rows(
                device_table(&t, shape, table_type),
                device_ptr(rows),
                starts_h,
                ends_h,
                device_ptr(starts),
                device_ptr(ends),
                stream_of(stream),
            )
        })
    })
}

/// Sizes a device pool's scratch for the by-row `_async` calls
/// (`kvp_pool_alloc_extend_rows_async`, `kvp_pool_alloc_decode_rows_async`,
/// `kvp_pool_free_rows_async`) of up to `batch_size` requests that allocate or free up to
/// `slots` slots, on tables of up to `table_rows` rows, so that those calls allocate no
/// device memory. Call it before recording such calls by stream capture: a captured call
/// that finds the scratch too small is refused (`KVP_STATUS_INVALID_STATE`, nothing done,
/// the capture intact), since `cuMemAlloc` may synchronize the device and so invalidate the
/// engine's capture. The scratch only grows (a smaller size does nothing); new memory is
/// zeroed on `stream` (order the pool's later calls after it, as every call). Not a call of
/// the pool: no kernel, no state change (also on a faulted pool). Fails with
/// `KVP_STATUS_INVALID_ARGUMENT` (`table_rows` over 2^32 - 1, sizes beyond the address
/// space), `KVP_STATUS_INVALID_STATE` (growing while `stream` is being captured),
/// `KVP_STATUS_CUDA_ERROR` (`cuMemAlloc` failed), `KVP_STATUS_WRONG_BACKEND` (a host pool,
/// which needs no scratch).
///
/// # Safety
/// `pool` a live pool or NULL; `stream` as for `kvp_pool_alloc_async`.
#[no_mangle]
#[must_use]
pub unsafe extern "C" fn kvp_pool_reserve_scratch_async(
    pool: *mut kvp_pool,
    table_rows: u64,
    batch_size: usize,
    slots: u64,
    stream: *mut CUstream_st,
) -> kvp_status {
    with_device_pool(pool, |pool| {
        // SAFETY: forwarded caller contract.
        status_of(unsafe {
            pool.reserve_rows_scratch(table_rows, batch_size as u64, slots, stream_of(stream))
        })
    })
}

/// Enqueues `kvp_pool_page_table` on `stream` (device pool): FlashInfer's `kv_indptr`
/// (`batch_size + 1`), `kv_indices` (`indices_capacity`) and `kv_last_page_len`
/// (`batch_size`), int32 device buffers, for rows `rows` (device) of `table` (device) with
/// lengths `seq_lens` (device) — one kernel, no synchronization, fixed buffers (CUDA-graph
/// friendly). `seq_lens_host` is the host copy the host plans from: it refuses a batch
/// whose pages exceed `indices_capacity` before enqueuing anything. `kv_indptr_host` and
/// `kv_last_page_len_host` (host, each may be NULL) receive the same `kv_indptr` and
/// `kv_last_page_len` at once, so FlashInfer's `plan()` needs no device-to-host copy.
///
/// On the device, rows outside the table or lengths outside `0 .. row_len` count as empty
/// requests, and no write goes past `indices_capacity` (the device lengths should equal the
/// host copies). Reads no pool state and changes nothing (works on a faulted pool too), but
/// it is still one of the pool's calls: order it with the others on the device (its kernel
/// is the pool's, released with the pool after the last call's stream has passed it).
///
/// # Safety
/// As for `kvp_pool_alloc_extend_rows_async`; the host outputs, when not NULL, hold
/// `batch_size + 1` and `batch_size` `int32_t`.
#[no_mangle]
#[must_use]
pub unsafe extern "C" fn kvp_pool_page_table_async(
    pool: *mut kvp_pool,
    table: *const kvp_req_table,
    rows: *const i64,
    seq_lens_host: *const i64,
    seq_lens: *const i64,
    batch_size: usize,
    kv_indptr: *mut i32,
    kv_indices: *mut i32,
    indices_capacity: usize,
    kv_last_page_len: *mut i32,
    kv_indptr_host: *mut i32,
    kv_last_page_len_host: *mut i32,
    stream: *mut CUstream_st,
) -> kvp_status {
    with_device_pool(pool, |pool| {
        let (t, shape, table_type) = tri!(table_of(table));
        // SAFETY: forwarded caller contract.
        let seq_host = tri!(unsafe { input(seq_lens_host, batch_size, "seq_lens_host") });
        tri!(check_device_ptr(rows.cast(), batch_size, 8, "rows"));
        tri!(check_device_ptr(seq_lens.cast(), batch_size, 8, "seq_lens"));
        tri!(check_device_ptr(
            kv_indptr.cast(),
            batch_size + 1,
            4,
            "kv_indptr"
        ));
        tri!(check_device_ptr(
            kv_indices.cast(),
            indices_capacity,
            4,
            "kv_indices"
        ));
        tri!(check_device_ptr(
            kv_last_page_len.cast(),
            batch_size,
            4,
            "kv_last_page_len"
        ));
        let host = match (kv_indptr_host.is_null(), kv_last_page_len_host.is_null()) {
            (true, true) => None,
            (false, false) => Some((
                // SAFETY: forwarded caller contract.
                tri!(unsafe { output(kv_indptr_host, batch_size + 1, "kv_indptr_host") }),
                tri!(unsafe { output(kv_last_page_len_host, batch_size, "kv_last_page_len_host") }),
            )),
            _ => {
                return fail(
                    kvp_status::NullArgument,
                    "kv_indptr_host and kv_last_page_len_host must both be NULL or both be given",
                )
            }
        };
        // SAFETY: forwarded caller contract.
        status_of(
            unsafe {
                pool.page_table(
                    device_table(&t, shape, table_type),
                    device_ptr(rows),
                    seq_host,
                    device_ptr(seq_lens),
                    device_ptr(kv_indptr.cast_const()),
                    device_ptr(kv_indices.cast_const()),
                    indices_capacity,
                    device_ptr(kv_last_page_len.cast_const()),
                    host,
                    stream_of(stream),
                )
            }
            .map(|_| ()),
        )
    })
}
