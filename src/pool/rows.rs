//! Request-to-token tables (SGLang's `req_to_token`): allocation, frees and FlashInfer page
//! tables by request row.
//!
//! A table is borrowed for one call ([`ReqTable`]): `rows` rows of `row_len` usable entries,
//! `row_stride` elements apart, of `i32` or `i64` (independent of the pool's index type).
//! Entry `[r][k]` is the slot of token `k` of the request in row `r`. The pool reads
//! `last_loc` from the table and writes new slots into it; it owns nothing and registers
//! nothing. Everything here is all-or-nothing like the rest of [`Pool`].

use std::marker::PhantomData;
use std::ptr::NonNull;

use super::error::{fail, ErrorKind, PoolError};
use super::{plan, Pool, SlotIndex};

/// The shape of a borrowed table; shared by both backends (a device pool validates it
/// from host data before it enqueues anything).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TableShape {
    /// Number of rows (request slots).
    pub rows: u64,
    /// Elements from one row to the next (`>= row_len` when `rows > 1`).
    pub row_stride: u64,
    /// Usable entries of a row: the longest sequence a row holds.
    pub row_len: u64,
}

/// The most rows a table may have: the device kernels key rows by 32-bit indices.
pub(crate) const MAX_TABLE_ROWS: u64 = u32::MAX as u64;

impl TableShape {
    /// Elements the table spans (`(rows - 1) * row_stride + row_len`), or an error when the
    /// shape is unusable. Row indices must fit 32 bits (the device kernels key rows by them).
    pub fn span(&self) -> Result<u64, PoolError> {
        if self.rows == 0 || self.row_len == 0 {
            return fail(
                ErrorKind::InvalidArgument,
                format!(
                    "the table has {} rows of {} entries; both must be positive",
                    self.rows, self.row_len
                ),
            );
        }
        if self.rows > MAX_TABLE_ROWS {
            return fail(
                ErrorKind::InvalidArgument,
                format!(
                    "the table has {} rows; at most 2^32 - 1 are supported",
                    self.rows
                ),
            );
        }
        if self.rows > 1 && self.row_stride < self.row_len {
            return fail(
                ErrorKind::InvalidArgument,
                format!(
                    "row_stride {} is shorter than row_len {}: rows would overlap",
                    self.row_stride, self.row_len
                ),
            );
        }
        (self.rows - 1)
            .checked_mul(self.row_stride)
            .and_then(|v| v.checked_add(self.row_len))
            .filter(|&v| v <= (isize::MAX as u64) / 8)
            .map_or_else(
                || fail(ErrorKind::InvalidArgument, "the table's size overflows"),
                Ok,
            )
    }

    /// Every `seq_lens[i] <= row_len` (lengths already validated as non-negative).
    pub fn check_seq_lens(&self, seq_lens: &[i64]) -> Result<(), PoolError> {
        for (i, &seq) in seq_lens.iter().enumerate() {
            if seq as u64 > self.row_len {
                return fail(
                    ErrorKind::BufferTooSmall,
                    format!(
                        "seq_lens[{i}] = {seq} exceeds the table's row_len {}",
                        self.row_len
                    ),
                );
            }
        }
        Ok(())
    }
}

/// Checks that a table of index type `T` can hold every slot of a pool whose largest slot
/// is `max_slot`.
pub fn check_table_type<T: SlotIndex>(max_slot: u64) -> Result<(), PoolError> {
    if max_slot > T::MAX {
        return fail(
            ErrorKind::InvalidArgument,
            format!("the pool's largest slot {max_slot} does not fit the table's index type"),
        );
    }
    Ok(())
}

/// Checks `0 <= rows[i] < shape.rows`, and with `distinct`, that no row repeats (the
/// second occurrence in batch order is named).
pub fn check_rows(shape: &TableShape, rows: &[i64], distinct: bool) -> Result<(), PoolError> {
    for (i, &row) in rows.iter().enumerate() {
        if row < 0 || row as u64 >= shape.rows {
            return fail(
                ErrorKind::IndexOutOfRange,
                format!(
                    "rows[{i}] = {row} is outside the table of {} rows",
                    shape.rows
                ),
            );
        }
    }
    if distinct && rows.len() > 1 {
        let mut seen = std::collections::HashMap::with_capacity(rows.len());
        for (i, &row) in rows.iter().enumerate() {
            if let Some(first) = seen.insert(row, i) {
                return fail(
                    ErrorKind::InvalidArgument,
                    format!(
                        "rows[{i}] = {row} repeats rows[{first}]: a row may appear once per call"
                    ),
                );
            }
        }
    }
    Ok(())
}

/// The FlashInfer page count of a batch: `sum(ceil(seq_lens[i] / page_size))`, validating
/// `0 <= seq_lens[i] <= row_len`.
pub fn page_table_pages(
    shape: &TableShape,
    page_size: u32,
    seq_lens: &[i64],
) -> Result<u64, PoolError> {
    let ps = u64::from(page_size);
    let mut total = 0u64;
    for (i, &seq) in seq_lens.iter().enumerate() {
        if seq < 0 {
            return fail(
                ErrorKind::InvalidLengths,
                format!("seq_lens[{i}] = {seq} is negative"),
            );
        }
        // Saturating: rows may repeat, so a batch of long rows can add past 2^64, and a
        // wrapped total would pass the int32 check below.
        total = total.saturating_add((seq as u64).div_ceil(ps));
    }
    shape.check_seq_lens(seq_lens)?;
    if total > i32::MAX as u64 {
        return fail(
            ErrorKind::InvalidLengths,
            format!("the batch has {total} pages; kv_indptr is int32"),
        );
    }
    Ok(total)
}

/// A request-to-token table borrowed for one call.
///
/// Held as a pointer, not a `&mut [T]`: a call that only reads the table (a free by row, a
/// page table) then makes only shared references to it, so index arrays a C caller placed
/// inside the table's memory are not aliased by a unique one (`Self::from_raw`).
pub struct ReqTable<'a, T> {
    data: NonNull<T>,
    len: usize,
    shape: TableShape,
    _borrow: PhantomData<&'a mut [T]>,
}

// SAFETY: a `ReqTable` is a unique borrow of its elements, as `&mut [T]` is (and so Send
// and Sync on the same terms).
unsafe impl<T: Send> Send for ReqTable<'_, T> {}
// SAFETY: as above; `&ReqTable` only reads the elements.
unsafe impl<T: Sync> Sync for ReqTable<'_, T> {}

impl<T> std::fmt::Debug for ReqTable<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReqTable")
            .field("len", &self.len)
            .field("shape", &self.shape)
            .finish()
    }
}

impl<'a, T: SlotIndex> ReqTable<'a, T> {
    /// Borrows `data` as a table of this shape; `data` must span it.
    pub fn new(data: &'a mut [T], shape: TableShape) -> Result<Self, PoolError> {
        // SAFETY: a unique borrow of `data.len()` elements for 'a.
        unsafe { Self::from_raw(data.as_mut_ptr(), data.len(), shape) }
    }

    /// A table of `len` elements at `data` (non-NULL, aligned), which must span `shape`.
    ///
    /// # Safety
    /// `data` must be valid for reads of `len` elements for 'a, and for writes when a call
    /// writes rows ([`row_mut`](Self::row_mut)); nothing else may write them meanwhile.
    pub(crate) unsafe fn from_raw(
        data: *mut T,
        len: usize,
        shape: TableShape,
    ) -> Result<Self, PoolError> {
        let span = shape.span()?;
        if (len as u64) < span {
            return fail(
                ErrorKind::BufferTooSmall,
                format!("the table holds {len} elements but its shape spans {span}"),
            );
        }
        let Some(data) = NonNull::new(data) else {
            return fail(ErrorKind::InvalidArgument, "the table's data is NULL");
        };
        Ok(Self {
            data,
            len,
            shape,
            _borrow: PhantomData,
        })
    }

    /// The table's shape.
    pub fn shape(&self) -> TableShape {
        self.shape
    }

    /// Where row `row` starts; its `row_len` entries lie within the table.
    fn row_start(&self, row: usize) -> usize {
        let start = row.checked_mul(self.shape.row_stride as usize);
        let end = start.and_then(|s| s.checked_add(self.shape.row_len as usize));
        assert!(
            end.is_some_and(|end| end <= self.len),
            "row {row} lies outside the table"
        );
        start.unwrap_or_default()
    }

    /// Row `row`'s usable entries (`row_len` of them), or an empty slice for a row outside
    /// the table.
    pub fn row(&self, row: usize) -> &[T] {
        if row as u64 >= self.shape.rows {
            return &[];
        }
        let start = self.row_start(row);
        // SAFETY: within the table (checked), readable for 'a; only shared references to
        // it live while `&self` does.
        unsafe {
            std::slice::from_raw_parts(self.data.as_ptr().add(start), self.shape.row_len as usize)
        }
    }

    pub(crate) fn row_mut(&mut self, row: usize) -> &mut [T] {
        let start = self.row_start(row);
        // SAFETY: within the table (checked), writable for 'a (the constructors' contract);
        // `&mut self` makes the reference unique.
        unsafe {
            std::slice::from_raw_parts_mut(
                self.data.as_ptr().add(start),
                self.shape.row_len as usize,
            )
        }
    }
}

impl Pool {
    /// [`alloc_extend`](Pool::alloc_extend) by request rows: request `i` lives in table row
    /// `rows[i]`; its `last_loc` is read from `table[rows[i]][prefix_lens[i] - 1]` (`-1` for
    /// an empty prefix) and its new slots are written to `table[rows[i]][prefix .. seq)` and,
    /// when given, to `out[..extend_num_tokens]` (SGLang's `out_cache_loc`). Rows must be
    /// in the table and distinct, `seq_lens[i] <= row_len`. Nothing is written on failure.
    #[allow(clippy::too_many_arguments)]
    pub fn alloc_extend_rows<I: SlotIndex, T: SlotIndex>(
        &mut self,
        table: &mut ReqTable<'_, T>,
        rows: &[i64],
        prefix_lens: &[i64],
        seq_lens: &[i64],
        extend_num_tokens: u64,
        out: Option<&mut [I]>,
    ) -> Result<(), PoolError> {
        self.stats.alloc_extend_calls += 1;
        let result = self.alloc_extend_rows_inner(
            table,
            rows,
            prefix_lens,
            seq_lens,
            extend_num_tokens,
            out,
        );
        self.record(result)
    }

    fn alloc_extend_rows_inner<I: SlotIndex, T: SlotIndex>(
        &mut self,
        table: &mut ReqTable<'_, T>,
        rows: &[i64],
        prefix_lens: &[i64],
        seq_lens: &[i64],
        extend_num_tokens: u64,
        out: Option<&mut [I]>,
    ) -> Result<(), PoolError> {
        check_table_type::<T>(self.layout.max_slot())?;
        if out.is_some() {
            self.check_index_type::<I>()?;
        }
        check_rows_len(rows.len(), seq_lens.len())?;
        let plan = plan::plan_extend(&self.layout, prefix_lens, seq_lens, extend_num_tokens)?;
        if let Some(out) = &out {
            Self::check_output(out, plan.tokens)?;
        }
        check_rows(&table.shape, rows, true)?;
        table.shape.check_seq_lens(seq_lens)?;
        let last_loc: Vec<i64> = rows
            .iter()
            .zip(prefix_lens)
            .map(|(&row, &prefix)| {
                if prefix == 0 {
                    -1
                } else {
                    table.row(row as usize)[prefix as usize - 1].get()
                }
            })
            .collect();
        self.storage
            .check_extend(prefix_lens, seq_lens, &last_loc)?;
        let ps = u64::from(self.layout.page_size);
        let trigger = if self.layout.is_paged() {
            extend_num_tokens / ps + seq_lens.len() as u64 + 1
        } else {
            plan.new_pages
        };
        self.ensure_pages(trigger, plan.new_pages, "alloc_extend")?;
        let mut slots = vec![0i64; plan.tokens as usize];
        self.storage
            .fill_extend(prefix_lens, seq_lens, &last_loc, &mut slots);
        let mut at = 0;
        for ((&row, &prefix), &seq) in rows.iter().zip(prefix_lens).zip(seq_lens) {
            let n = (seq - prefix) as usize;
            let dst = &mut table.row_mut(row as usize)[prefix as usize..seq as usize];
            for (d, &s) in dst.iter_mut().zip(&slots[at..at + n]) {
                *d = T::from_slot(s as u64);
            }
            at += n;
        }
        if let Some(out) = out {
            for (d, &s) in out.iter_mut().zip(&slots) {
                *d = I::from_slot(s as u64);
            }
        }
        self.count_allocation(plan.tokens, plan.new_pages);
        Ok(())
    }

    /// [`alloc_decode`](Pool::alloc_decode) by request rows: `last_loc` of request `i` is
    /// `table[rows[i]][seq_lens[i] - 2]` (`-1` when `seq_lens[i] == 1`) and its new slot goes
    /// to `table[rows[i]][seq_lens[i] - 1]` and, when given, `out[i]`.
    pub fn alloc_decode_rows<I: SlotIndex, T: SlotIndex>(
        &mut self,
        table: &mut ReqTable<'_, T>,
        rows: &[i64],
        seq_lens: &[i64],
        out: Option<&mut [I]>,
    ) -> Result<(), PoolError> {
        self.stats.alloc_decode_calls += 1;
        let result = self.alloc_decode_rows_inner(table, rows, seq_lens, out);
        self.record(result)
    }

    fn alloc_decode_rows_inner<I: SlotIndex, T: SlotIndex>(
        &mut self,
        table: &mut ReqTable<'_, T>,
        rows: &[i64],
        seq_lens: &[i64],
        out: Option<&mut [I]>,
    ) -> Result<(), PoolError> {
        check_table_type::<T>(self.layout.max_slot())?;
        if out.is_some() {
            self.check_index_type::<I>()?;
        }
        check_rows_len(rows.len(), seq_lens.len())?;
        let new_pages = plan::plan_decode(&self.layout, seq_lens)?;
        if let Some(out) = &out {
            Self::check_output(out, seq_lens.len() as u64)?;
        }
        check_rows(&table.shape, rows, true)?;
        table.shape.check_seq_lens(seq_lens)?;
        let last_loc: Vec<i64> = rows
            .iter()
            .zip(seq_lens)
            .map(|(&row, &seq)| {
                if seq < 2 {
                    -1
                } else {
                    table.row(row as usize)[seq as usize - 2].get()
                }
            })
            .collect();
        self.storage.check_decode(seq_lens, &last_loc)?;
        self.ensure_pages(seq_lens.len() as u64, new_pages, "alloc_decode")?;
        let mut slots = vec![0i64; seq_lens.len()];
        self.storage.fill_decode(seq_lens, &last_loc, &mut slots);
        for ((&row, &seq), &s) in rows.iter().zip(seq_lens).zip(&slots) {
            table.row_mut(row as usize)[seq as usize - 1] = T::from_slot(s as u64);
        }
        if let Some(out) = out {
            for (d, &s) in out.iter_mut().zip(&slots) {
                *d = I::from_slot(s as u64);
            }
        }
        self.count_allocation(seq_lens.len() as u64, new_pages);
        Ok(())
    }

    /// Frees, for each `i`, the pages of `table[rows[i]][starts[i] .. ends[i])`
    /// ([`free_segment`](Pool::free_segment) of each row, in batch order, as one call:
    /// either every segment is freed or none). Rows must be in the table and distinct;
    /// `0 <= starts[i] <= ends[i] <= row_len`; paged pools need `starts[i] % page_size == 0`
    /// unless the segment is empty
    /// (a segment ending mid-page frees that page). A page named by two rows (a shared
    /// prefix still referenced elsewhere) is a double free. The table is not modified.
    pub fn free_rows<T: SlotIndex>(
        &mut self,
        table: &ReqTable<'_, T>,
        rows: &[i64],
        starts: &[i64],
        ends: &[i64],
    ) -> Result<(), PoolError> {
        let shape = table.shape;
        let checked = check_free_rows(&shape, rows, starts, ends);
        self.free_with(
            |storage, pages| {
                checked?;
                for (i, ((&row, &start), &end)) in rows.iter().zip(starts).zip(ends).enumerate() {
                    let before = pages.len();
                    storage
                        .collect_segment_frees(
                            table.row(row as usize),
                            start as usize,
                            (end - start) as usize,
                            pages,
                        )
                        .map_err(|e| {
                            PoolError::new(e.kind(), format!("rows[{i}] = {row}: {}", e.message()))
                        })?;
                    debug_assert!(pages.len() >= before);
                }
                check_distinct_pages(pages, rows.len())
            },
            false,
        )
    }

    /// Writes FlashInfer's paged-KV page table of `rows[i]`'s first `seq_lens[i]` tokens:
    /// `kv_indptr[0..=batch]` (exclusive prefix sum of `ceil(seq / page_size)`, from 0),
    /// `kv_indices[..kv_indptr[batch]]` (page ids: `table[row][p * page_size] / page_size`)
    /// and `kv_last_page_len[..batch]` (`seq - (pages - 1) * page_size`, in `1..=page_size`;
    /// 0 for a request with no tokens, which has no pages: FlashInfer reads a request's
    /// length as 0 when its indptr range is empty). All int32: a pool whose page ids or page
    /// size do not fit int32 is refused ([`ErrorKind::InvalidArgument`]). The table's entries
    /// are read, not validated; rows may repeat. Returns the page count. Writes nothing on
    /// failure.
    pub fn page_table<T: SlotIndex>(
        &self,
        table: &ReqTable<'_, T>,
        rows: &[i64],
        seq_lens: &[i64],
        kv_indptr: &mut [i32],
        kv_indices: &mut [i32],
        kv_last_page_len: &mut [i32],
    ) -> Result<u64, PoolError> {
        let shape = table.shape;
        let total = self.check_page_table(
            &shape,
            rows,
            seq_lens,
            kv_indptr.len(),
            kv_indices.len(),
            kv_last_page_len.len(),
        )?;
        let ps = i64::from(self.layout.page_size);
        let mut at = 0usize;
        kv_indptr[0] = 0;
        for (i, (&row, &seq)) in rows.iter().zip(seq_lens).enumerate() {
            let pages = (seq + ps - 1) / ps;
            let r = table.row(row as usize);
            for p in 0..pages {
                kv_indices[at] = (r[(p * ps) as usize].get() / ps) as i32;
                at += 1;
            }
            kv_indptr[i + 1] = at as i32;
            kv_last_page_len[i] = if pages == 0 {
                0
            } else {
                (seq - (pages - 1) * ps) as i32
            };
        }
        Ok(total)
    }

    /// The host checks of [`page_table`](Pool::page_table) (both backends): returns the
    /// page count.
    pub fn check_page_table(
        &self,
        shape: &TableShape,
        rows: &[i64],
        seq_lens: &[i64],
        indptr_len: usize,
        indices_len: usize,
        last_len: usize,
    ) -> Result<u64, PoolError> {
        check_page_table(
            &self.layout,
            shape,
            Some(rows),
            seq_lens,
            indptr_len,
            indices_len,
            last_len,
        )
    }
}

/// The checks of a page-table build from host data (`rows` when the host can see them).
pub(crate) fn check_page_table(
    layout: &super::config::Layout,
    shape: &TableShape,
    rows: Option<&[i64]>,
    seq_lens: &[i64],
    indptr_len: usize,
    indices_len: usize,
    last_len: usize,
) -> Result<u64, PoolError> {
    shape.span()?;
    if layout.max_slot() / u64::from(layout.page_size) > i32::MAX as u64 {
        return fail(
            ErrorKind::InvalidArgument,
            "the pool's page ids do not fit int32 (FlashInfer's index type)",
        );
    }
    if layout.page_size > i32::MAX as u32 {
        // A last page may hold `page_size` tokens, and kv_last_page_len is int32.
        return fail(
            ErrorKind::InvalidArgument,
            format!(
                "the pool's page size {} does not fit int32 (kv_last_page_len, FlashInfer's page_size)",
                layout.page_size
            ),
        );
    }
    if let Some(rows) = rows {
        check_rows_len(rows.len(), seq_lens.len())?;
    }
    let batch = seq_lens.len();
    let total = page_table_pages(shape, layout.page_size, seq_lens)?;
    if let Some(rows) = rows {
        check_rows(shape, rows, false)?;
    }
    for (name, len, need) in [
        ("kv_indptr", indptr_len, batch as u64 + 1),
        ("kv_last_page_len", last_len, batch as u64),
        ("kv_indices", indices_len, total),
    ] {
        if (len as u64) < need {
            return fail(
                ErrorKind::BufferTooSmall,
                format!("{name} holds {len} entries but {need} are needed"),
            );
        }
    }
    Ok(total)
}

/// The host checks of a free by rows that need no pool state.
pub fn check_free_rows(
    shape: &TableShape,
    rows: &[i64],
    starts: &[i64],
    ends: &[i64],
) -> Result<(), PoolError> {
    shape.span()?;
    if starts.len() != rows.len() || ends.len() != rows.len() {
        return fail(
            ErrorKind::InvalidLengths,
            format!(
                "rows has {} entries, starts {} and ends {}",
                rows.len(),
                starts.len(),
                ends.len()
            ),
        );
    }
    check_segments(shape, starts, ends)?;
    check_rows(shape, rows, true)
}

/// `0 <= starts[i] <= ends[i] <= row_len`.
pub fn check_segments(shape: &TableShape, starts: &[i64], ends: &[i64]) -> Result<(), PoolError> {
    for (i, (&start, &end)) in starts.iter().zip(ends).enumerate() {
        if start < 0 || end < start || end as u64 > shape.row_len {
            return fail(
                ErrorKind::InvalidLengths,
                format!(
                    "segment {i} is [{start}, {end}); it must satisfy 0 <= start <= end <= row_len {}",
                    shape.row_len
                ),
            );
        }
    }
    Ok(())
}

fn check_rows_len(rows: usize, batch: usize) -> Result<(), PoolError> {
    if rows != batch {
        return fail(
            ErrorKind::InvalidLengths,
            format!("rows has {rows} entries but seq_lens has {batch}"),
        );
    }
    Ok(())
}

/// Pages collected from several rows must be distinct (segments of one row are).
fn check_distinct_pages(pages: &[u32], rows: usize) -> Result<(), PoolError> {
    if rows < 2 {
        return Ok(());
    }
    let mut seen = std::collections::HashSet::with_capacity(pages.len());
    for &page in pages {
        if !seen.insert(page) {
            return fail(
                ErrorKind::DoubleFree,
                format!("page {page} is named by two rows of the call"),
            );
        }
    }
    Ok(())
}
