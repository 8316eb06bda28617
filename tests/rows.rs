//! Request-to-token tables on the host backend: `alloc_extend_rows` / `alloc_decode_rows` /
//! `free_rows` against the classic calls on a second pool (last_loc gathered and slots
//! scattered by hand, frees as one free group), `page_table` against a reference written from
//! FlashInfer's documented layout, and the all-or-nothing rule for bad rows. The device
//! backend is compared with this one in tests/cuda_rows.rs.

mod host_pool;
mod rng;
mod rows_work;

use host_pool::pool;
use kvpool::{ErrorKind, Pool, ReqTable, SlotIndex, TableShape};
use rows_work::{flashinfer_reference, Op, Work};

const ROWS: usize = 24;
const ROW_LEN: i64 = 300;
const STRIDE: u64 = 307;

fn shape() -> TableShape {
    TableShape {
        rows: ROWS as u64,
        row_stride: STRIDE,
        row_len: ROW_LEN as u64,
    }
}

fn span() -> usize {
    (ROWS - 1) * STRIDE as usize + ROW_LEN as usize
}

fn at(row: i64, k: i64) -> usize {
    row as usize * STRIDE as usize + k as usize
}

/// Drives `ops` operations through the rows API (pool `a`, table `ta`) and the classic API
/// (pool `b`, table `tb` kept by hand); every output, table entry and digest must agree.
fn lockstep<T: SlotIndex + PartialEq>(seed: u64, ps: u32, need_sort: bool, ops: usize) {
    let size = 2048 * u64::from(ps).min(4);
    let mut a = pool(size, ps, need_sort);
    let mut b = pool(size, ps, need_sort);
    let mut ta: Vec<T> = vec![T::from_slot(0); span()];
    let mut tb: Vec<i64> = vec![0; span()];
    let mut work = Work::new(seed, ROWS, ROW_LEN, ps, 12);
    let (mut ok, mut failed) = (0, 0);
    for step in 0..ops {
        let op = work.next();
        let mut table = ReqTable::new(&mut ta[..], shape()).unwrap();
        let (ra, rb) = match &op {
            Op::Extend { rows, prefix, seq } => {
                let total: i64 = seq.iter().zip(prefix).map(|(s, p)| s - p).sum();
                let mut out_a = vec![-7i64; total as usize];
                let ra = a.alloc_extend_rows(
                    &mut table,
                    rows,
                    prefix,
                    seq,
                    total as u64,
                    Some(&mut out_a[..]),
                );
                let last: Vec<i64> = rows
                    .iter()
                    .zip(prefix)
                    .map(|(&r, &p)| if p == 0 { -1 } else { tb[at(r, p - 1)] })
                    .collect();
                let mut out_b = vec![-7i64; total as usize];
                let rb = b.alloc_extend(prefix, seq, &last, total as u64, &mut out_b);
                if rb.is_ok() {
                    let mut k = 0;
                    for ((&r, &p), &s) in rows.iter().zip(prefix).zip(seq) {
                        for pos in p..s {
                            tb[at(r, pos)] = out_b[k];
                            k += 1;
                        }
                    }
                }
                assert_eq!(out_a, out_b, "step {step}: out_cache_loc");
                (ra, rb)
            }
            Op::Decode { rows, seq } => {
                let mut out_a = vec![-7i64; rows.len()];
                let ra = a.alloc_decode_rows(&mut table, rows, seq, Some(&mut out_a[..]));
                let last: Vec<i64> = rows
                    .iter()
                    .zip(seq)
                    .map(|(&r, &s)| if s < 2 { -1 } else { tb[at(r, s - 2)] })
                    .collect();
                let mut out_b = vec![-7i64; rows.len()];
                let rb = b.alloc_decode(seq, &last, &mut out_b);
                if rb.is_ok() {
                    for ((&r, &s), &o) in rows.iter().zip(seq).zip(&out_b) {
                        tb[at(r, s - 1)] = o;
                    }
                }
                assert_eq!(out_a, out_b, "step {step}: out_cache_loc");
                (ra, rb)
            }
            Op::Free { rows, starts, ends } => {
                let ra = a.free_rows(&table, rows, starts, ends);
                b.free_group_begin().unwrap();
                let mut rb = Ok(());
                for ((&r, &s), &e) in rows.iter().zip(starts).zip(ends) {
                    let row = &tb[at(r, 0)..at(r, ROW_LEN)];
                    rb = b.free_segment(row, s as usize, (e - s) as usize);
                    assert!(rb.is_ok(), "step {step}: {rb:?}");
                }
                b.free_group_end().unwrap();
                (ra, rb)
            }
            Op::PageTable { rows, seq } => {
                let total: usize = seq
                    .iter()
                    .map(|&s| (s as usize).div_ceil(ps as usize))
                    .sum();
                let mut indptr = vec![-1i32; rows.len() + 1];
                let mut indices = vec![-1i32; total + 3];
                let mut last = vec![-1i32; rows.len()];
                let pages = a
                    .page_table(&table, rows, seq, &mut indptr, &mut indices, &mut last)
                    .unwrap();
                assert_eq!(pages as usize, total);
                let slots: Vec<Vec<i64>> = rows
                    .iter()
                    .zip(seq)
                    .map(|(&r, &s)| tb[at(r, 0)..at(r, s)].to_vec())
                    .collect();
                let (ri, rx, rl) = flashinfer_reference(&slots, i64::from(ps));
                assert_eq!(indptr, ri, "step {step}: kv_indptr");
                assert_eq!(&indices[..total], &rx[..], "step {step}: kv_indices");
                assert!(
                    indices[total..].iter().all(|&v| v == -1),
                    "written past the pages"
                );
                assert_eq!(last, rl, "step {step}: kv_last_page_len");
                (Ok(()), Ok(()))
            }
        };
        assert_eq!(ra, rb, "step {step}: {op:?}");
        match ra {
            Ok(()) => {
                work.apply(&op);
                ok += 1;
            }
            Err(err) => {
                assert_eq!(err.kind(), ErrorKind::OutOfSlots, "step {step}");
                failed += 1;
            }
        }
        let same = ta.iter().zip(&tb).all(|(x, &y)| x.get() == y);
        assert!(same, "step {step}: tables differ after {op:?}");
        assert_eq!(a.digest(), b.digest(), "step {step}: digests");
        assert_eq!(
            a.stats().pages_in_use,
            b.stats().pages_in_use,
            "step {step}"
        );
    }
    assert!(ok > ops / 2, "{ok} calls succeeded, {failed} failed");
}

#[test]
fn rows_api_matches_classic_calls() {
    for (seed, ps, need_sort) in [
        (1, 1, false),
        (2, 4, false),
        (3, 16, false),
        (4, 16, true),
        (5, 3, false),
    ] {
        lockstep::<i64>(seed, ps, need_sort, 1500);
        lockstep::<i32>(seed + 100, ps, need_sort, 1500);
    }
}

fn table_unchanged_after<F>(ps: u32, f: F)
where
    F: FnOnce(&mut Pool, &mut ReqTable<'_, i32>) -> Result<(), kvpool::PoolError>,
{
    let mut p = pool(512 * u64::from(ps), ps, false);
    let mut data = vec![0i32; span()];
    {
        let mut t = ReqTable::new(&mut data[..], shape()).unwrap();
        p.alloc_extend_rows::<i64, i32>(&mut t, &[0, 1], &[0, 0], &[5, 9], 14, None)
            .unwrap();
    }
    let before = data.clone();
    let digest = p.digest();
    let mut t = ReqTable::new(&mut data[..], shape()).unwrap();
    assert!(f(&mut p, &mut t).is_err());
    assert_eq!(data, before);
    assert_eq!(p.digest(), digest);
}

#[test]
fn bad_rows_change_nothing() {
    for ps in [1, 4] {
        // Row out of range, negative, twice in one call, past row_len.
        table_unchanged_after(ps, |p, t| {
            let e = p.alloc_decode_rows::<i64, i32>(t, &[0, ROWS as i64], &[6, 1], None);
            assert_eq!(e.as_ref().unwrap_err().kind(), ErrorKind::IndexOutOfRange);
            e
        });
        table_unchanged_after(ps, |p, t| {
            let e = p.alloc_decode_rows::<i64, i32>(t, &[-1], &[1], None);
            assert_eq!(e.as_ref().unwrap_err().kind(), ErrorKind::IndexOutOfRange);
            e
        });
        table_unchanged_after(ps, |p, t| {
            let e = p.alloc_extend_rows::<i64, i32>(t, &[2, 3, 2], &[0, 0, 0], &[1, 1, 1], 3, None);
            let err = e.as_ref().unwrap_err();
            assert_eq!(err.kind(), ErrorKind::InvalidArgument);
            assert!(
                err.message().contains("rows[2] = 2 repeats rows[0]"),
                "{err}"
            );
            e
        });
        table_unchanged_after(ps, |p, t| {
            let e = p.alloc_extend_rows::<i64, i32>(
                t,
                &[0],
                &[5],
                &[ROW_LEN + 1],
                (ROW_LEN - 4) as u64,
                None,
            );
            assert_eq!(e.as_ref().unwrap_err().kind(), ErrorKind::BufferTooSmall);
            e
        });
        // A stale prefix length: last_loc read from the table is not the fill point.
        if ps > 1 {
            table_unchanged_after(ps, |p, t| {
                let e = p.alloc_extend_rows::<i64, i32>(t, &[1], &[6], &[10], 4, None);
                assert_eq!(e.as_ref().unwrap_err().kind(), ErrorKind::LastLocMismatch);
                e
            });
        }
        // Shortage.
        table_unchanged_after(ps, |p, t| {
            let rows: Vec<i64> = (5..15).collect();
            let e = p.alloc_extend_rows::<i64, i32>(
                t,
                &rows,
                &[0; 10],
                &[ROW_LEN; 10],
                10 * ROW_LEN as u64,
                None,
            );
            assert_eq!(e.as_ref().unwrap_err().kind(), ErrorKind::OutOfSlots);
            e
        });
        // Free: twice the same row, a segment past the row, a page named by two rows.
        table_unchanged_after(ps, |p, t| p.free_rows(t, &[0, 0], &[0, 0], &[5, 5]));
        table_unchanged_after(ps, |p, t| p.free_rows(t, &[0], &[0], &[ROW_LEN + 1]));
        table_unchanged_after(ps, |p, t| {
            let e = p.free_rows(t, &[0, 1, 0], &[0, 0, 0], &[5, 9, 5]);
            assert_eq!(e.as_ref().unwrap_err().kind(), ErrorKind::InvalidArgument);
            e
        });
    }
}

#[test]
fn shared_prefix_pages_are_a_double_free() {
    let ps = 4;
    let mut p = pool(256, ps, false);
    let mut data = vec![0i64; span()];
    let mut t = ReqTable::new(&mut data[..], shape()).unwrap();
    p.alloc_extend_rows::<i64, i64>(&mut t, &[0], &[0], &[8], 8, None)
        .unwrap();
    // Row 1 shares row 0's first 8 slots (a radix-cache hit), then grows on its own.
    for k in 0..8 {
        data[at(1, k)] = data[at(0, k)];
    }
    let mut t = ReqTable::new(&mut data[..], shape()).unwrap();
    p.alloc_extend_rows::<i64, i64>(&mut t, &[1], &[8], &[13], 5, None)
        .unwrap();
    let digest = p.digest();
    let err = p.free_rows(&t, &[0, 1], &[0, 0], &[8, 13]).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::DoubleFree);
    assert_eq!(p.digest(), digest);
    // Freeing the shared part once and each row's own part is fine.
    p.free_rows(&t, &[0, 1], &[0, 8], &[8, 13]).unwrap();
    assert_eq!(p.stats().pages_in_use, 0);
}

/// A page count that would pass 2^64 (rows may repeat: 2^21 requests of one row of 2^43
/// tokens at page size 1) is refused as too many for int32, not wrapped to 0 and taken for
/// an empty table (then the build indexed past `kv_indices`, panicked and poisoned the pool).
#[test]
fn a_page_count_past_2_pow_64_is_refused() {
    let p = pool(256, 1, false);
    let row_len = 1u64 << 43;
    let shape = TableShape {
        rows: 1,
        row_stride: row_len,
        row_len,
    };
    let n = 1usize << 21;
    let (rows, seq_lens) = (vec![0i64; n], vec![row_len as i64; n]);
    let err = p
        .check_page_table(&shape, &rows, &seq_lens, n + 1, 0, n)
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidLengths, "{err}");
    assert!(err.message().contains("kv_indptr is int32"), "{err}");
}

#[test]
fn page_table_edge_cases() {
    let ps = 4;
    let mut p = pool(256, ps, false);
    let mut data = vec![0i32; span()];
    let mut t = ReqTable::new(&mut data[..], shape()).unwrap();
    p.alloc_extend_rows::<i64, i32>(&mut t, &[3, 4], &[0, 0], &[9, 4], 13, None)
        .unwrap();
    let (mut indptr, mut indices, mut last) = (vec![9; 4], vec![9; 5], vec![9; 3]);
    // Row 3 twice (rows may repeat), an empty request, a full last page.
    let n = p
        .page_table(
            &t,
            &[3, 5, 4],
            &[9, 0, 4],
            &mut indptr,
            &mut indices,
            &mut last,
        )
        .unwrap();
    assert_eq!(n, 4);
    assert_eq!(indptr, [0, 3, 3, 4]);
    assert_eq!(last, [1, 0, 4]);
    assert_eq!(indices[..4], [1, 2, 3, 4]);
    // Capacity too small: nothing written.
    let (mut indptr, mut indices, mut last) = (vec![9; 3], vec![9; 3], vec![9; 2]);
    let err = p
        .page_table(&t, &[3, 3], &[9, 1], &mut indptr, &mut indices, &mut last)
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::BufferTooSmall);
    assert_eq!(
        (indptr, indices, last),
        (vec![9; 3], vec![9; 3], vec![9; 2])
    );
}

/// Index arrays a C caller keeps in the table's row padding (stride above row_len) are read
/// while the call holds the table: a free by row and a page table borrow it for reading only,
/// so those arrays stay validly borrowed. (They borrowed the whole table as `&mut`, which
/// Stacked Borrows, in `cargo +nightly miri test --test rows`, rejects.)
#[test]
fn index_arrays_inside_the_tables_padding_are_read_where_they_are() {
    use kvpool::ffi::*;
    use std::ptr::null_mut;
    let mut config = kvp_pool_config_default();
    config.size = 64;
    config.page_size = 4;
    let mut pool = null_mut();
    // Two rows of 8 entries, stride 12: entries 8..12 are row 0's padding.
    let mut table = vec![0i64; 20];
    let base = table.as_mut_ptr();
    let desc = kvp_req_table {
        data: base.cast(),
        index_type: kvp_index_type::I64 as u32,
        rows: 2,
        row_stride: 12,
        row_len: 8,
    };
    let (mut indptr, mut indices, mut last) = ([0i32; 2], [0i32; 4], [0i32; 1]);
    // SAFETY: every pointer is valid for what the call reads or writes; the arrays in the
    // padding (base + 8 ..) lie outside both rows' entries.
    unsafe {
        assert_eq!(kvp_pool_new(&config, &mut pool), kvp_status::Ok);
        let (rows, prefix, seq) = ([0i64, 1], [0i64, 0], [8i64, 8]);
        let status = kvp_pool_alloc_extend_rows(
            pool,
            &desc,
            rows.as_ptr(),
            prefix.as_ptr(),
            seq.as_ptr(),
            2,
            16,
            null_mut(),
            0,
        );
        assert_eq!(status, kvp_status::Ok);
        // A page table of row 1's 8 tokens: rows = [1], seq_lens = [8] in the padding.
        base.add(8).write(1);
        base.add(9).write(8);
        let status = kvp_pool_page_table(
            pool,
            &desc,
            base.add(8),
            base.add(9),
            1,
            indptr.as_mut_ptr(),
            indices.as_mut_ptr(),
            indices.len(),
            last.as_mut_ptr(),
        );
        assert_eq!(status, kvp_status::Ok);
        assert_eq!((indptr, last), ([0, 2], [4]));
        assert_eq!(
            indices[..2],
            [(*base.add(12) / 4) as i32, (*base.add(16) / 4) as i32]
        );
        // Free row 1's tokens 0 .. 8: rows = [1], starts = [0], ends = [8] in the padding.
        base.add(9).write(0);
        base.add(10).write(8);
        let status = kvp_pool_free_rows(pool, &desc, base.add(8), base.add(9), base.add(10), 1);
        assert_eq!(status, kvp_status::Ok);
        let mut available = 0;
        assert_eq!(
            kvp_pool_available_size(pool, &mut available),
            kvp_status::Ok
        );
        assert_eq!(available, 64 - 8);
        kvp_pool_free(pool);
    }
}
