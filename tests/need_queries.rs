//! `extend_need` / `decode_need` (`kvp_pool_extend_need`, `kvp_pool_decode_need`): they run
//! the allocations' own host planning, change nothing, and predict shortage exactly — an
//! allocation fails with OUT_OF_SLOTS iff `pages * page_size > available_size`, staged
//! (`need_sort`) pages and SGLang's merge trigger included. Checked against the real
//! allocations over random operation sequences on host pools of both kinds, through the C
//! ABI, and (a GPU test, `#[ignore]`d on CPU machines) on a device pool.

mod gpu;
mod rng;

use std::ptr::{null, null_mut};

use kvpool::ffi::*;
use kvpool::{BackendKind, ErrorKind, IndexType, Pool, PoolConfig};
use rng::Rng;

fn host_config(pages: u64, ps: u32, need_sort: bool) -> PoolConfig {
    PoolConfig {
        size: pages * u64::from(ps),
        page_size: ps,
        need_sort,
        index_type: IndexType::I64,
        backend: BackendKind::Host,
    }
}

/// One random run: extend and decode batches (sometimes with bad lengths), frees (staged
/// under `need_sort`), merges. Before every allocation the need query's prediction is
/// compared with what the allocation does. Returns (fits, shortages, invalid) counts.
fn run(seed: u64, ps: u32, need_sort: bool, ops: usize) -> (u32, u32, u32) {
    let mut rng = Rng(seed);
    let mut pool = Pool::new(host_config(48, ps, need_sort)).unwrap();
    let psu = u64::from(ps);
    let mut rows: Vec<Vec<i64>> = Vec::new();
    let (mut fits, mut short, mut invalid) = (0, 0, 0);
    for op in 0..ops {
        let ctx = format!("seed {seed} ps {ps} need_sort {need_sort} op {op}");
        match rng.below(10) {
            0..=3 => {
                // An extend batch: some live requests continue, some new ones start.
                let mut prefix = Vec::new();
                let mut seq = Vec::new();
                let mut last = Vec::new();
                let mut who = Vec::new();
                for (r, row) in rows.iter().enumerate() {
                    if rng.chance(30) {
                        prefix.push(row.len() as i64);
                        seq.push((row.len() as u64 + rng.below(3 * psu + 2)) as i64);
                        last.push(row.last().copied().unwrap_or(-1));
                        who.push(Some(r));
                    }
                }
                for _ in 0..rng.below(4) {
                    prefix.push(0);
                    seq.push(rng.below(5 * psu) as i64);
                    last.push(-1);
                    who.push(None);
                }
                if !seq.is_empty() && rng.chance(10) {
                    let i = rng.below(seq.len() as u64) as usize;
                    prefix[i] = seq[i] + 1; // seq < prefix: invalid
                    last[i] = -1;
                }
                let tokens: i64 = seq.iter().zip(&prefix).map(|(s, p)| s - p).sum();
                let before = pool.digest();
                let stats = pool.stats();
                let need = pool.extend_need(&prefix, &seq);
                assert_eq!(pool.digest(), before, "{ctx}: the query changed the pool");
                assert_eq!(pool.stats(), stats, "{ctx}: the query counted");
                let available = pool.available_size();
                let mut out = vec![0i64; tokens.max(0) as usize];
                let got = pool.alloc_extend(&prefix, &seq, &last, tokens.max(0) as u64, &mut out);
                match need {
                    Err(e) => {
                        invalid += 1;
                        let g = got.expect_err(&ctx);
                        assert_eq!((g.kind(), g.message()), (e.kind(), e.message()), "{ctx}");
                    }
                    Ok(need) => {
                        assert_eq!(need.tokens as i64, tokens, "{ctx}");
                        if need.new_pages * psu > available {
                            short += 1;
                            let g = got.expect_err(&ctx);
                            assert_eq!(g.kind(), ErrorKind::OutOfSlots, "{ctx}: {g}");
                        } else {
                            fits += 1;
                            got.unwrap_or_else(|e| panic!("{ctx}: predicted to fit: {e}"));
                            assert_eq!(
                                pool.available_size(),
                                available - need.new_pages * psu,
                                "{ctx}: pages taken"
                            );
                            let mut at = 0;
                            for (i, w) in who.iter().enumerate() {
                                let n = (seq[i] - prefix[i]) as usize;
                                let slots = &out[at..at + n];
                                at += n;
                                match w {
                                    Some(r) => rows[*r].extend_from_slice(slots),
                                    None => rows.push(slots.to_vec()),
                                }
                            }
                        }
                    }
                }
            }
            4..=5 => {
                // A decode batch of live, non-empty requests.
                let picked: Vec<usize> = (0..rows.len())
                    .filter(|&r| !rows[r].is_empty() && rng.chance(50))
                    .collect();
                let mut seq: Vec<i64> = picked.iter().map(|&r| rows[r].len() as i64 + 1).collect();
                let last: Vec<i64> = picked.iter().map(|&r| *rows[r].last().unwrap()).collect();
                let bad = !seq.is_empty() && rng.chance(10);
                if bad {
                    seq[0] = 0;
                }
                let need = pool.decode_need(&seq);
                let available = pool.available_size();
                let mut out = vec![0i64; seq.len()];
                let got = pool.alloc_decode(&seq, &last, &mut out);
                match need {
                    Err(e) => {
                        invalid += 1;
                        let g = got.expect_err(&ctx);
                        assert_eq!((g.kind(), g.message()), (e.kind(), e.message()), "{ctx}");
                    }
                    Ok(pages) => {
                        let expect = seq
                            .iter()
                            .filter(|&&s| (s as u64 - 1).is_multiple_of(psu))
                            .count();
                        assert_eq!(pages, expect as u64, "{ctx}");
                        if pages * psu > available {
                            short += 1;
                            assert_eq!(got.expect_err(&ctx).kind(), ErrorKind::OutOfSlots);
                        } else {
                            fits += 1;
                            got.unwrap_or_else(|e| panic!("{ctx}: predicted to fit: {e}"));
                            assert_eq!(pool.available_size(), available - pages * psu);
                            for (k, &r) in picked.iter().enumerate() {
                                rows[r].push(out[k]);
                            }
                        }
                    }
                }
            }
            6..=8 => {
                // A request finishes (staged under need_sort).
                if !rows.is_empty() {
                    let r = rng.below(rows.len() as u64) as usize;
                    let row = rows.swap_remove(r);
                    pool.free_segment(&row, 0, row.len()).expect(&ctx);
                }
            }
            _ => {
                if rng.chance(30) {
                    pool.merge_and_sort_free();
                }
            }
        }
    }
    if need_sort {
        assert!(pool.stats().merges > 0, "seed {seed}: no allocation merged");
    }
    (fits, short, invalid)
}

#[test]
fn need_predicts_every_allocation_exactly() {
    for ps in [1u32, 4, 16] {
        for need_sort in [false, true] {
            let mut totals = (0, 0, 0);
            for seed in 0..12 {
                let (f, s, i) = run(seed * 7919 + u64::from(ps), ps, need_sort, 400);
                totals = (totals.0 + f, totals.1 + s, totals.2 + i);
            }
            assert!(
                totals.0 > 100 && totals.1 > 10 && totals.2 > 10,
                "ps {ps} need_sort {need_sort}: too few cases {totals:?}"
            );
        }
    }
}

/// A paged `need_sort` pool where the batch fits only with the staged pages: SGLang's
/// trigger (`tokens / ps + batch + 1`) exceeds the free list, so the merge runs and the
/// batch succeeds, exactly as `pages * ps <= available_size` predicts.
#[test]
fn staged_pages_count_for_the_rule() {
    let mut pool = Pool::new(host_config(8, 4, true)).unwrap();
    let mut out = vec![0i64; 24];
    pool.alloc_extend(&[0], &[24], &[-1i64], 24, &mut out)
        .unwrap(); // 6 pages
    pool.free_segment(&out, 0, 24).unwrap(); // staged
    assert_eq!(pool.available_size(), 32);
    let need = pool.extend_need(&[0, 0], &[13, 8]).unwrap(); // 4 + 2 pages
    assert_eq!((need.new_pages, need.tokens), (6, 21));
    assert!(need.new_pages * 4 <= pool.available_size());
    let mut out = vec![0i64; 21];
    pool.alloc_extend(&[0, 0], &[13, 8], &[-1i64, -1], 21, &mut out)
        .unwrap();
    assert_eq!(pool.stats().merges, 1);
    // Now 2 free pages: a 3-page batch is short, a 2-page one fits.
    assert_eq!(pool.extend_need(&[0], &[9]).unwrap().new_pages, 3);
    let mut out = vec![0i64; 9];
    let err = pool
        .alloc_extend(&[0], &[9], &[-1i64], 9, &mut out)
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::OutOfSlots);
    pool.alloc_extend(&[0], &[8], &[-1i64], 8, &mut out)
        .unwrap();
}

fn ffi_pool(pages: u64, ps: u32) -> *mut kvp_pool {
    let mut c = kvp_pool_config_default();
    c.size = pages * u64::from(ps);
    c.page_size = ps;
    let mut pool = null_mut();
    // SAFETY: valid pointers.
    assert_eq!(unsafe { kvp_pool_new(&c, &mut pool) }, kvp_status::Ok);
    pool
}

#[test]
fn c_abi_extend_and_decode_need() {
    let pool = ffi_pool(16, 4);
    // SAFETY: live pool; arrays valid for their lengths; out-pointers writable.
    unsafe {
        let (mut pages, mut tokens) = (99u64, 99u64);
        // The worked example: prefix 2 -> 11 takes 2 pages (its first 2 tokens finish the
        // prefix's page), 0 -> 3 one page.
        let prefix = [2i64, 0];
        let seq = [11i64, 3];
        assert_eq!(
            kvp_pool_extend_need(
                pool,
                prefix.as_ptr(),
                seq.as_ptr(),
                2,
                &mut pages,
                &mut tokens
            ),
            kvp_status::Ok
        );
        assert_eq!((pages, tokens), (3, 12));
        // out_tokens may be NULL.
        assert_eq!(
            kvp_pool_extend_need(
                pool,
                prefix.as_ptr(),
                seq.as_ptr(),
                2,
                &mut pages,
                null_mut()
            ),
            kvp_status::Ok
        );
        // Empty batch, NULL arrays.
        assert_eq!(
            kvp_pool_extend_need(pool, null(), null(), 0, &mut pages, &mut tokens),
            kvp_status::Ok
        );
        assert_eq!((pages, tokens), (0, 0));
        // Failures leave the out-parameters alone, with the allocation's status and message.
        let (mut p2, mut t2) = (7u64, 7u64);
        let bad = [5i64, 0];
        assert_eq!(
            kvp_pool_extend_need(pool, bad.as_ptr(), [4i64, 3].as_ptr(), 2, &mut p2, &mut t2),
            kvp_status::InvalidLengths
        );
        assert_eq!((p2, t2), (7, 7));
        let mut msg = [0u8; 256];
        let n = kvp_last_error_message(msg.as_mut_ptr().cast(), msg.len());
        let msg = std::str::from_utf8(&msg[..n]).unwrap();
        assert!(
            msg.contains("seq_lens[0] = 4 is less than prefix_lens[0] = 5"),
            "{msg}"
        );
        assert_eq!(
            kvp_pool_extend_need(pool, null(), seq.as_ptr(), 2, &mut p2, &mut t2),
            kvp_status::NullArgument
        );
        assert_eq!(
            kvp_pool_extend_need(pool, prefix.as_ptr(), seq.as_ptr(), 2, null_mut(), &mut t2),
            kvp_status::NullArgument
        );
        assert_eq!(
            kvp_pool_extend_need(pool, [0i64].as_ptr(), [65i64].as_ptr(), 1, &mut p2, &mut t2),
            kvp_status::InvalidLengths
        );
        // Decode: seq_lens 1, 5, 9 start a page on 4-token pages; 2 and 8 do not.
        let dseq = [1i64, 2, 5, 8, 9];
        assert_eq!(
            kvp_pool_decode_need(pool, dseq.as_ptr(), 5, &mut pages),
            kvp_status::Ok
        );
        assert_eq!(pages, 3);
        assert_eq!(
            kvp_pool_decode_need(pool, [0i64].as_ptr(), 1, &mut p2),
            kvp_status::InvalidLengths
        );
        assert_eq!(
            kvp_pool_decode_need(pool, dseq.as_ptr(), 5, null_mut()),
            kvp_status::NullArgument
        );
        assert_eq!(p2, 7);
        // Nothing was counted.
        let mut stats = kvp_pool_stats::default();
        assert_eq!(kvp_pool_get_stats(pool, &mut stats), kvp_status::Ok);
        assert_eq!((stats.rejected_calls, stats.alloc_extend_calls), (0, 0));
        kvp_pool_free(pool);
    }
}

/// A device pool plans from the host copies: the same answers as a host pool, no stream,
/// nothing enqueued; and the rule holds for `kvp_pool_alloc_extend_async`.
#[test]
#[ignore = "needs a CUDA GPU: run with --ignored on a GPU machine"]
fn device_pool_need_matches_its_allocations() {
    if let Some(why) = gpu::unavailable() {
        panic!("{why}");
    }
    let g = gpu::Gpu::new(false);
    let mut c = kvp_pool_config_default();
    c.size = 8 * 4;
    c.page_size = 4;
    c.backend = kvp_backend::Cuda as u32;
    let mut pool = null_mut();
    let host = ffi_pool(8, 4);
    // SAFETY: live pools; arrays valid for their lengths; device buffers of the sizes used.
    unsafe {
        assert_eq!(kvp_pool_new(&c, &mut pool), kvp_status::Ok);
        for (prefix, seq) in [(vec![0i64, 0], vec![13i64, 8]), (vec![2, 0], vec![11, 3])] {
            let (mut a, mut b) = ((0u64, 0u64), (0u64, 0u64));
            let n = prefix.len();
            assert_eq!(
                kvp_pool_extend_need(pool, prefix.as_ptr(), seq.as_ptr(), n, &mut a.0, &mut a.1),
                kvp_status::Ok
            );
            assert_eq!(
                kvp_pool_extend_need(host, prefix.as_ptr(), seq.as_ptr(), n, &mut b.0, &mut b.1),
                kvp_status::Ok
            );
            assert_eq!(a, b);
        }
        // 8 pages needed, 8 available: fits; then 2 needed, none left: short.
        let d_prefix = gpu::DevBuf::new(8);
        let d_seq = gpu::DevBuf::new(8);
        let d_last = gpu::DevBuf::new(8);
        let d_out = gpu::DevBuf::new(36 * 8);
        d_prefix.upload(&[0i64]);
        d_last.upload(&[-1i64]);
        for (len, expect) in [(32i64, kvp_status::Ok), (8, kvp_status::OutOfSlots)] {
            let mut pages = 0;
            assert_eq!(
                kvp_pool_extend_need(
                    pool,
                    [0i64].as_ptr(),
                    [len].as_ptr(),
                    1,
                    &mut pages,
                    null_mut()
                ),
                kvp_status::Ok
            );
            let mut available = 0;
            assert_eq!(
                kvp_pool_available_size(pool, &mut available),
                kvp_status::Ok
            );
            assert_eq!(pages * 4 > available, expect == kvp_status::OutOfSlots);
            d_seq.upload(&[len]);
            let status = kvp_pool_alloc_extend_async(
                pool,
                [0i64].as_ptr(),
                [len].as_ptr(),
                d_prefix.ptr as *const i64,
                d_seq.ptr as *const i64,
                d_last.ptr as *const std::ffi::c_void,
                1,
                len as usize,
                d_out.ptr as *mut std::ffi::c_void,
                36,
                g.stream.cast(),
            );
            assert_eq!(status, expect);
            g.sync();
        }
        assert_eq!(kvp_pool_check_device(pool), kvp_status::Ok);
        kvp_pool_free(pool);
        kvp_pool_free(host);
    }
}
