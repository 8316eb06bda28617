//! Unit tests of the pool state machine: SGLang's worked examples and the rules we add.

use super::*;

fn pool(size: u64, page_size: u32, need_sort: bool) -> Pool {
    Pool::new(PoolConfig {
        size,
        page_size,
        need_sort,
        ..PoolConfig::default()
    })
    .unwrap()
}

fn alloc(p: &mut Pool, n: usize) -> Vec<i64> {
    let mut out = vec![0i64; n];
    p.alloc(n, &mut out).unwrap();
    out
}

fn extend(p: &mut Pool, prefix: &[i64], seq: &[i64], last_loc: &[i64]) -> Vec<i64> {
    let n: i64 = seq.iter().zip(prefix).map(|(s, p)| s - p).sum();
    let mut out = vec![-7i64; n as usize];
    p.alloc_extend(prefix, seq, last_loc, n as u64, &mut out)
        .unwrap();
    out
}

fn decode(p: &mut Pool, seq: &[i64], last_loc: &[i64]) -> Vec<i64> {
    let mut out = vec![-7i64; seq.len()];
    p.alloc_decode(seq, last_loc, &mut out).unwrap();
    out
}

fn kind<T>(r: Result<T, PoolError>) -> ErrorKind {
    r.err().expect("expected an error").kind()
}

#[test]
fn config_is_validated() {
    let bad = |size, page_size| {
        Pool::new(PoolConfig {
            size,
            page_size,
            ..PoolConfig::default()
        })
        .unwrap_err()
        .kind()
    };
    assert_eq!(bad(0, 1), ErrorKind::InvalidArgument);
    assert_eq!(bad(16, 0), ErrorKind::InvalidArgument);
    assert_eq!(bad(18, 4), ErrorKind::Unaligned);
    let too_wide = PoolConfig {
        size: 1 << 31,
        index_type: IndexType::I32,
        ..PoolConfig::default()
    };
    assert_eq!(kind(Pool::new(too_wide)), ErrorKind::InvalidArgument);
    let cuda = PoolConfig {
        size: 16,
        backend: BackendKind::Cuda { ordinal: 0 },
        ..PoolConfig::default()
    };
    assert_eq!(kind(Pool::new(cuda)), ErrorKind::Unsupported);
}

#[test]
fn token_pool_is_fifo_and_never_returns_slot_zero() {
    let mut p = pool(8, 1, false);
    assert_eq!(p.available_size(), 8);
    assert_eq!(alloc(&mut p, 3), [1, 2, 3]);
    p.free(&[2i64, 1]).unwrap();
    assert_eq!(alloc(&mut p, 6), [4, 5, 6, 7, 8, 2]);
    assert_eq!(p.available_size(), 1);
    assert_eq!(kind(p.alloc(2, &mut [0i64; 2])), ErrorKind::OutOfSlots);
    assert_eq!(alloc(&mut p, 1), [1]);
    assert!(alloc(&mut p, 0).is_empty());
}

#[test]
fn paged_pool_reuses_most_recently_freed_pages_first() {
    let mut p = pool(32, 4, false);
    assert_eq!(p.num_pages(), 8);
    assert_eq!(alloc(&mut p, 8), [4, 5, 6, 7, 8, 9, 10, 11]);
    let c = alloc(&mut p, 4);
    assert_eq!(c, [12, 13, 14, 15]);
    // Any index frees its page; distinct pages go to the front in ascending order.
    p.free(&[9i64, 5, 4]).unwrap();
    assert_eq!(p.free_page_census()[..3], [1, 2, 4]);
    p.free_pages(&[3i64]).unwrap();
    assert_eq!(p.free_page_census()[..4], [3, 1, 2, 4]);
    assert_eq!(kind(p.alloc(6, &mut [0i64; 8])), ErrorKind::Unaligned);
}

#[test]
fn extend_worked_example_page_4() {
    // SGLang's unit test: page 4, prefix 2, seq 11, last_loc 1, free pages [3, 4]
    // -> [2, 3] + [12..15] + [16, 17, 18]. Reproduce with pages 1 and 2 in use.
    let mut p = pool(64, 4, false);
    let prefix = extend(&mut p, &[0], &[2], &[-1]);
    assert_eq!(prefix, [4, 5]); // page 1
    let other = alloc(&mut p, 4); // page 2
    assert_eq!(other, [8, 9, 10, 11]);
    let out = extend(&mut p, &[2], &[11], &[5]);
    assert_eq!(out, [6, 7, 12, 13, 14, 15, 16, 17, 18]);
}

#[test]
fn extend_parts_in_isolation_and_batch_order() {
    let mut p = pool(64, 4, false);
    // Two requests with empty prefixes take pages in batch order.
    let out = extend(&mut p, &[0, 0], &[3, 5], &[-1, -1]);
    assert_eq!(out, [4, 5, 6, 8, 9, 10, 11, 12]);
    // Part 1 only (finish page 1), part 3 only (request 2's tail page 3 continues... new page).
    let out = extend(&mut p, &[3, 5], &[4, 8], &[6, 12]);
    assert_eq!(out, [7, 13, 14, 15]);
    // Zero-length extend writes nothing and takes nothing.
    let before = p.available_size();
    assert!(extend(&mut p, &[4], &[4], &[7]).is_empty());
    assert_eq!(p.available_size(), before);
}

#[test]
fn token_pool_extend_and_decode_equal_alloc() {
    let mut a = pool(32, 1, false);
    let mut b = pool(32, 1, false);
    let out = extend(&mut a, &[0, 0], &[3, 2], &[-1, -1]);
    assert_eq!(out, alloc(&mut b, 5));
    let d = decode(&mut a, &[4, 3], &[3, 5]);
    assert_eq!(d, alloc(&mut b, 2));
}

#[test]
fn decode_takes_a_page_only_at_page_boundaries() {
    let mut p = pool(64, 4, false);
    let a = extend(&mut p, &[0, 0], &[4, 3], &[-1, -1]);
    assert_eq!(a, [4, 5, 6, 7, 8, 9, 10]);
    // Request 0 has 4 tokens: the 5th starts page 3. Request 1 continues in page 2.
    let out = decode(&mut p, &[5, 4], &[7, 10]);
    assert_eq!(out, [12, 11]);
    assert_eq!(p.available_size(), 64 - 12);
}

#[test]
fn shortage_is_detected_before_anything_is_written() {
    let mut p = pool(16, 4, false);
    alloc(&mut p, 8);
    let mut out = [-7i64; 12];
    assert_eq!(
        kind(p.alloc_extend(&[0], &[12], &[-1i64], 12, &mut out)),
        ErrorKind::OutOfSlots
    );
    assert!(out.iter().all(|&x| x == -7));
    assert_eq!(p.available_size(), 8);
    assert_eq!(p.stats().failed_allocations, 1);
    // Exact fit succeeds even though SGLang's over-estimate (extend/ps + bs + 1) does not.
    extend(&mut p, &[0], &[8], &[-1]);
    assert_eq!(p.available_size(), 0);
    // A seq_len longer than the whole pool can never fit: that is bad input, not shortage.
    assert_eq!(
        kind(p.alloc_extend(&[0], &[32], &[-1i64], 32, &mut [0i64; 32])),
        ErrorKind::InvalidLengths
    );
}

#[test]
fn need_sort_stages_frees_and_merges_sorted_when_short() {
    let mut p = pool(16, 4, true);
    assert_eq!(alloc(&mut p, 16), (4..20).collect::<Vec<i64>>());
    p.free_pages(&[3i64, 1]).unwrap();
    assert_eq!(p.available_size(), 8);
    assert_eq!(p.storage().staged_len(), 2);
    // Nothing in the free list: the allocation merges the staged pages, sorted.
    assert_eq!(alloc(&mut p, 4), [4, 5, 6, 7]);
    assert_eq!(p.stats().merges, 1);
    assert_eq!(p.free_page_census(), [3]);
}

/// The one change a refused allocation makes: a shortage merges the staged frees first
/// (SGLang merges, then returns None), so the pool is then exactly as after an explicit
/// `merge_and_sort_free`, and the next allocations get SGLang's pages.
#[test]
fn a_shortage_merges_staged_frees_first_and_changes_nothing_else() {
    let staged = || {
        let mut p = pool(16, 4, true);
        let all = alloc(&mut p, 16);
        p.free(&all[8..12]).unwrap();
        p.free(&all[0..4]).unwrap();
        p
    };
    let mut merged = staged();
    merged.merge_and_sort_free();
    for call in 0..3 {
        let mut p = staged();
        assert_eq!(p.free_page_census(), [3, 1], "call {call}");
        let err = match call {
            0 => p.alloc(12, &mut [0i64; 12]),
            1 => p.alloc_extend(&[0], &[12], &[-1i64], 12, &mut [0i64; 12]),
            _ => p.alloc_decode(&[1, 1, 1], &[-1i64; 3], &mut [0i64; 3]),
        };
        assert_eq!(kind(err), ErrorKind::OutOfSlots, "call {call}");
        assert_eq!(p.free_page_census(), [1, 3], "call {call}");
        assert_eq!(p.digest(), merged.digest(), "call {call}");
        assert_eq!(p.available_size(), 8, "call {call}");
    }
}

#[test]
fn token_pool_need_sort_merges_only_when_short() {
    let mut p = pool(6, 1, true);
    alloc(&mut p, 4);
    p.free(&[3i64, 1]).unwrap();
    assert_eq!(alloc(&mut p, 2), [5, 6]);
    assert_eq!(p.stats().merges, 0);
    assert_eq!(alloc(&mut p, 2), [1, 3]);
    assert_eq!(p.stats().merges, 1);
}

#[test]
fn free_group_defers_and_orders_like_sglang() {
    let mut p = pool(32, 4, false);
    alloc(&mut p, 32); // pages 1..=8
    p.free_group_begin().unwrap();
    assert_eq!(kind(p.free_group_begin()), ErrorKind::InvalidState);
    p.free_pages(&[7i64]).unwrap();
    p.free(&[21i64, 13]).unwrap(); // pages 5, 3
    p.free_segment(&[8i64, 9, 10, 11, 24, 25], 0, 6).unwrap(); // pages 2, 6
    p.free(&[4i64]).unwrap(); // page 1
    assert_eq!(p.available_size(), 0);
    // A page may be freed by only one call per group.
    assert_eq!(kind(p.free(&[28i64])), ErrorKind::DoubleFree);
    p.free_group_end().unwrap();
    // Index frees first as one ascending block, then page/segment frees in call order:
    // prepend [1, 3, 5], then prepend [7, 2, 6].
    assert_eq!(p.free_page_census(), [7, 2, 6, 1, 3, 5]);
    assert_eq!(kind(p.free_group_end()), ErrorKind::InvalidState);
}

#[test]
fn double_free_and_bad_indices_change_nothing() {
    let mut p = pool(32, 4, false);
    let a = alloc(&mut p, 8);
    let census = p.free_page_census();
    let cases: [(&[i64], ErrorKind); 5] = [
        (&[a[0], a[0]], ErrorKind::DoubleFree),
        (&[a[0], 20], ErrorKind::DoubleFree), // page 5 is free
        (&[a[0], 0], ErrorKind::ReservedSlot),
        (&[a[0], 2], ErrorKind::ReservedSlot), // page 0
        (&[a[0], 36], ErrorKind::IndexOutOfRange),
    ];
    for (indices, expected) in cases {
        let err = p.free(indices).unwrap_err();
        assert_eq!(err.kind(), expected, "{indices:?}: {err}");
        assert!(err.message().contains("indices[1]"), "{}", err.message());
        assert_eq!(p.free_page_census(), census);
        assert!(p.storage().scratch_is_clear());
    }
    assert_eq!(kind(p.free_pages(&[1i64, 1])), ErrorKind::DoubleFree);
    assert_eq!(kind(p.free_pages(&[0i64])), ErrorKind::ReservedSlot);
    assert_eq!(kind(p.free_pages(&[9i64])), ErrorKind::IndexOutOfRange);
    assert_eq!(p.stats().rejected_calls, 8);
    p.free(&a).unwrap();
    assert_eq!(kind(p.free(&a[..1])), ErrorKind::DoubleFree);
    assert_eq!(p.available_size(), 32);
}

#[test]
fn last_loc_contract_is_checked() {
    let mut p = pool(64, 4, false);
    let a = extend(&mut p, &[0], &[6], &[-1]); // slots 4..8, 8, 9
    assert_eq!(a, [4, 5, 6, 7, 8, 9]);
    let mut out = [0i64; 8];
    let mut try_extend = |prefix: i64, seq: i64, last: i64| {
        kind(p.alloc_extend(&[prefix], &[seq], &[last], (seq - prefix) as u64, &mut out))
    };
    assert_eq!(try_extend(6, 8, 8), ErrorKind::LastLocMismatch); // (8+1)%4 != 6%4
    assert_eq!(try_extend(0, 2, 9), ErrorKind::LastLocMismatch); // empty prefix needs -1
    assert_eq!(try_extend(2, 4, 17), ErrorKind::NotAllocated); // page 4 is free
    assert_eq!(try_extend(2, 4, 1), ErrorKind::ReservedSlot);
    assert_eq!(try_extend(2, 4, 99), ErrorKind::IndexOutOfRange);
    assert_eq!(try_extend(5, 4, 8), ErrorKind::InvalidLengths);
    // Two requests finishing the same page would get the same slots.
    let err = p
        .alloc_extend(&[6, 6], &[7, 7], &[9i64, 9], 2, &mut out)
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::LastLocMismatch);
    assert!(err.message().contains("request 1 extends page 2"), "{err}");
    assert!(p.storage().scratch_is_clear());
    assert_eq!(p.available_size(), 64 - 8);
}

#[test]
fn output_buffer_too_small_writes_nothing() {
    let mut p = pool(64, 4, false);
    let mut out = [-7i64; 4];
    let err = p
        .alloc_extend(&[0], &[5], &[-1i64], 5, &mut out)
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::BufferTooSmall);
    assert_eq!(out, [-7; 4]);
    assert_eq!(
        kind(p.alloc_extend(&[0], &[5], &[-1i64], 4, &mut out)),
        ErrorKind::InvalidLengths
    );
    assert_eq!(p.available_size(), 64);
}

#[test]
fn free_segment_checks_alignment_and_contiguity() {
    let mut p = pool(64, 4, false);
    let row = extend(&mut p, &[0], &[10], &[-1]); // pages 1, 2, 3 (tail of 2)
    assert_eq!(kind(p.free_segment(&row, 2, 8)), ErrorKind::Unaligned);
    assert_eq!(kind(p.free_segment(&row, 4, 7)), ErrorKind::BufferTooSmall);
    // An empty segment frees nothing wherever it starts (SGLang returns before its
    // alignment check), but still within the row.
    let digest = p.digest();
    p.free_segment(&row, 3, 0).unwrap();
    assert_eq!(p.digest(), digest);
    assert_eq!(kind(p.free_segment(&row, 11, 0)), ErrorKind::BufferTooSmall);
    let mut broken = row.clone();
    broken[5] = 30;
    assert_eq!(
        kind(p.free_segment(&broken, 4, 6)),
        ErrorKind::InvalidArgument
    );
    // Free the tail from position 4: pages 2 and 3, the last one partially used.
    p.free_segment(&row, 4, 6).unwrap();
    assert_eq!(p.free_page_census()[..2], [2, 3]);
    assert_eq!(p.available_size(), 60);
}

#[test]
fn snapshot_restores_allocations_and_frees() {
    let mut p = pool(32, 4, false);
    let a = alloc(&mut p, 8);
    let snap = p.backup_state().unwrap();
    let census = p.free_page_census();
    alloc(&mut p, 12);
    p.free(&a).unwrap();
    p.restore_state(&snap).unwrap();
    assert_eq!(p.free_page_census(), census);
    assert_eq!(p.available_size(), 24);
    // `a` is allocated again, so it can be freed exactly once.
    p.free(&a).unwrap();
    assert_eq!(kind(p.free(&a)), ErrorKind::DoubleFree);
    p.restore_state(&snap).unwrap();
    assert_eq!(p.stats().restores, 2);
    let mut other = pool(32, 4, false);
    assert_eq!(kind(other.restore_state(&snap)), ErrorKind::ForeignSnapshot);
    p.free_group_begin().unwrap();
    assert_eq!(kind(p.backup_state()), ErrorKind::InvalidState);
    assert_eq!(kind(p.restore_state(&snap)), ErrorKind::InvalidState);
}

#[test]
fn stats_track_calls_pages_and_peak() {
    let mut p = pool(32, 4, false);
    let a = alloc(&mut p, 16);
    extend(&mut p, &[0], &[5], &[-1]);
    p.free(&a).unwrap();
    let s = p.stats();
    assert_eq!(
        (s.alloc_calls, s.alloc_extend_calls, s.free_calls),
        (1, 1, 1)
    );
    assert_eq!((s.tokens_allocated, s.pages_allocated), (21, 6));
    assert_eq!((s.pages_freed, s.slots_freed), (4, 16));
    assert_eq!((s.pages_in_use, s.pages_in_use_peak), (2, 6));
    p.clear();
    assert_eq!(p.stats().pages_in_use, 0);
    assert_eq!(p.available_size(), 32);
    assert_eq!(p.free_page_census(), (1..=8).collect::<Vec<u32>>());
}

#[test]
fn i32_indices_match_i64() {
    let mut wide = pool(64, 4, false);
    let mut narrow = Pool::new(PoolConfig {
        size: 64,
        page_size: 4,
        index_type: IndexType::I32,
        ..PoolConfig::default()
    })
    .unwrap();
    let w = extend(&mut wide, &[0, 0], &[5, 9], &[-1, -1]);
    let mut n = [0i32; 14];
    narrow
        .alloc_extend(&[0, 0], &[5, 9], &[-1i32, -1], 14, &mut n)
        .unwrap();
    assert_eq!(w, n.map(i64::from));
}

/// Issue 13's reproducer: with page size 4, request A takes slot 4, request B continues the
/// same page from A's slot and takes slot 5; A's stale continuation from slot 4 would take
/// slot 5 again. The fill point refuses it, on extend and on decode.
#[test]
fn a_stale_last_loc_cannot_hand_a_slot_out_twice() {
    let mut p = pool(64, 4, false);
    let a = extend(&mut p, &[0], &[1], &[-1]);
    assert_eq!(a, vec![4]);
    let b = extend(&mut p, &[1], &[2], &[4]);
    assert_eq!(b, vec![5]);
    let before = p.free_page_census();
    let err = p.alloc_decode(&[2], &[4i64], &mut [0]).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::LastLocMismatch);
    assert!(
        err.message()
            .contains("last_loc[0] = 4 is not where page 1 was left")
            && err.message().contains("last handed-out slot is 5"),
        "{}",
        err.message()
    );
    let err = p
        .alloc_extend(&[1], &[3], &[4i64], 2, &mut [0; 2])
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::LastLocMismatch);
    assert_eq!(p.free_page_census(), before);
    // Continuing from the page's fill point is what the pool expects.
    assert_eq!(decode(&mut p, &[3], &[5]), vec![6]);
    assert_eq!(p.storage().page_fill(1), Some(3));
}

/// A full page may be named by any number of requests (a shared, page-aligned prefix),
/// because nobody writes into it; a last_loc inside it is stale.
#[test]
fn full_pages_are_shared_and_partial_pages_are_not_reentered() {
    let mut p = pool(64, 4, false);
    let shared = extend(&mut p, &[0], &[4], &[-1]);
    let two = extend(&mut p, &[4, 4], &[6, 5], &[shared[3], shared[3]]);
    assert_eq!(two.len(), 3);
    let err = p
        .alloc_extend(&[3], &[5], &[shared[2]], 2, &mut [0i64; 2])
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::LastLocMismatch);
}

/// Speculative decoding with page size 4, modelled on SGLang's EAGLE flow: a request with 6
/// tokens drafts 3 more, the verifier keeps 1; the engine frees the page that holds only
/// rejected tokens, rewinds the page of the last kept one, and the next draft continues from
/// it. No live slot is ever handed out twice.
#[test]
fn speculative_rejection_rewinds_then_continues() {
    let mut p = pool(64, 4, false);
    let mut row = extend(&mut p, &[0], &[6], &[-1]); // prefill: a full page and 2 slots
    let drafts = extend(&mut p, &[6], &[9], &[row[5]]); // 3 draft tokens
    row.extend_from_slice(&drafts);
    assert_eq!(p.storage().page_fill((row[8] / 4) as u32), Some(1));
    // Verify: keep 1 draft token (row[6]); reject row[7] (same page) and row[8] (a page of
    // its own).
    let committed = 7;
    let retry = p.alloc_extend(&[7], &[10], &[row[6]], 3, &mut [0i64; 3]);
    assert_eq!(kind(retry), ErrorKind::LastLocMismatch, "no rewind yet");
    p.free_segment(&row, 8, 1).unwrap();
    p.rewind(&[row[committed - 1]]).unwrap();
    row.truncate(committed);
    let next = extend(&mut p, &[7], &[10], &[row[6]]);
    assert_eq!(
        next[0],
        row[6] + 1,
        "the rejected slot is handed out again, to its owner"
    );
    row.extend_from_slice(&next);
    let mut live = row.clone();
    live.sort_unstable();
    live.dedup();
    assert_eq!(live.len(), row.len(), "a live slot was handed out twice");
    // The freed page's slot is stale now, and a rewind cannot move a page forward.
    assert_eq!(kind(p.rewind(&[row[9] + 1])), ErrorKind::LastLocMismatch);
    assert_eq!(
        kind(p.rewind(&[row[6], row[7]])),
        ErrorKind::LastLocMismatch
    );
    assert_eq!(kind(p.rewind(&[60i64])), ErrorKind::NotAllocated);
    assert_eq!(kind(p.rewind(&[2i64])), ErrorKind::ReservedSlot);
    let stats = p.stats();
    assert_eq!(stats.rejected_calls, 5);
}

#[test]
fn a_token_pool_rewind_is_a_checked_no_op() {
    let mut p = pool(16, 1, false);
    let row = extend(&mut p, &[0], &[3], &[-1]);
    let census = p.free_page_census();
    p.rewind(&row).unwrap();
    assert_eq!(p.free_page_census(), census);
    assert_eq!(
        kind(p.rewind(&[row[0], row[0]])),
        ErrorKind::LastLocMismatch
    );
    assert_eq!(kind(p.rewind(&[15i64])), ErrorKind::NotAllocated);
}

#[test]
fn bookkeeping_that_cannot_be_allocated_is_a_status() {
    // 2^52 slots in 2^31-slot pages: two million pages, but a bit per slot for the checks
    // of a paged free (512 TiB) — more than a 47-bit address space holds, whatever the
    // kernel's overcommit policy. (tests/c/pool_guard_test.c does 2^40 under a limit.)
    let err = Pool::new(PoolConfig {
        size: 1 << 52,
        page_size: 1 << 31,
        ..PoolConfig::default()
    })
    .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::OutOfMemory);
    assert!(err.message().contains("scratch marks"), "{}", err.message());
}
