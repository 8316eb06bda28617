//! Multi-step decode reservations on the host backend (issue 11): `K` reserved steps must
//! give exactly what `K` plain `alloc_decode` calls give on a twin pool (slots, available
//! size, digest), a finish after `U < K` steps must leave the pool exactly as `U` plain
//! decodes would, and every refusal (shortage, bad `last_loc`, overrun, wrong
//! `steps_used`, a plain decode on a reserved request) must change nothing. While a
//! reservation is live its pages are held: a free, rewind or continuation of them is refused
//! (a request freed before the finish would otherwise let later steps hand its page's
//! slots out twice). The device backend is compared with this one in
//! tests/cuda_reservation.rs.

mod host_pool;
mod rng;

use host_pool::pool;
use kvpool::{DecodeReservation, ErrorKind, Pool, ReqTable, TableShape};
use rng::Rng;

/// A decode batch: each request's length and last slot.
struct Batch {
    lens: Vec<i64>,
    last: Vec<i64>,
}

/// Two identical pools (same operations) holding a random batch, with a free list
/// shuffled by earlier allocations and frees so the pages taken are not simply ascending.
fn twins(rng: &mut Rng, ps: u32, size: u64, bs: usize) -> (Pool, Pool, Batch) {
    let mut a = pool(size, ps, false);
    let mut b = pool(size, ps, false);
    let p = u64::from(ps);
    // Churn: take some pages, free a random half of them in random order.
    let pages = rng.range(1, 40);
    let mut filler = vec![0i64; (pages * p) as usize];
    a.alloc(filler.len(), &mut filler).unwrap();
    b.alloc(filler.len(), &mut filler.clone()).unwrap();
    let mut heads: Vec<i64> = filler.chunks(ps as usize).map(|c| c[0]).collect();
    rng.shuffle(&mut heads);
    heads.truncate(heads.len() / 2);
    a.free(&heads).unwrap();
    b.free(&heads).unwrap();
    // The batch: one extend from empty prefixes (some requests stay empty).
    let lens: Vec<i64> = (0..bs)
        .map(|_| {
            if rng.chance(10) {
                0
            } else {
                rng.range(1, 3 * p + 5) as i64
            }
        })
        .collect();
    let total: i64 = lens.iter().sum();
    let zeros = vec![0i64; bs];
    let none = vec![-1i64; bs];
    let mut out = vec![0i64; total as usize];
    a.alloc_extend(&zeros, &lens, &none, total as u64, &mut out)
        .unwrap();
    let mut twin_out = vec![0i64; total as usize];
    b.alloc_extend(&zeros, &lens, &none, total as u64, &mut twin_out)
        .unwrap();
    assert_eq!(out, twin_out);
    let mut last = Vec::with_capacity(bs);
    let mut pos = 0usize;
    for &len in &lens {
        pos += len as usize;
        last.push(if len == 0 { -1 } else { out[pos - 1] });
    }
    assert_eq!(a.digest(), b.digest());
    (a, b, Batch { lens, last })
}

/// One plain decode step `s` (0-based) of the batch on `pool`, continuing from `prev`.
fn plain_step(pool: &mut Pool, batch: &Batch, s: i64, prev: &mut [i64]) -> Vec<i64> {
    let seq: Vec<i64> = batch.lens.iter().map(|&l| l + s + 1).collect();
    let mut out = vec![0i64; seq.len()];
    pool.alloc_decode(&seq, prev, &mut out).unwrap();
    prev.copy_from_slice(&out);
    out
}

/// The random batches each twin test draws: 40 a page size, 3 under Miri (where each
/// batch's digests over a 16 k-slot pool take minutes).
fn seeds() -> std::ops::Range<u64> {
    0..if cfg!(miri) { 3 } else { 40 }
}

fn reserve(pool: &mut Pool, batch: &Batch, k: u32) -> DecodeReservation {
    pool.reserve_decode(&batch.lens, &batch.last, k).unwrap()
}

#[test]
fn reserved_steps_equal_plain_decodes_on_a_twin() {
    for ps in [1u32, 4, 16] {
        for seed in seeds() {
            let mut rng = Rng(seed * 31 + u64::from(ps));
            let bs = rng.range(1, 24) as usize;
            let (mut a, mut b, batch) = twins(&mut rng, ps, 4096 * u64::from(ps).min(4), bs);
            let k = rng.range(1, 40) as u32;
            let mut res = reserve(&mut a, &batch, k);
            let mut prev = batch.last.clone();
            for s in 0..k {
                let mut got = vec![0i64; bs];
                a.reservation_step(&mut res, &mut got).unwrap();
                let want = plain_step(&mut b, &batch, i64::from(s), &mut prev);
                assert_eq!(got, want, "ps {ps} seed {seed} step {s}");
            }
            // Fill points advanced as if all K steps ran: the pools agree before the finish.
            assert_eq!(
                a.available_size(),
                b.available_size(),
                "ps {ps} seed {seed}"
            );
            assert_eq!(a.digest(), b.digest(), "ps {ps} seed {seed}");
            a.finish_reservation(&mut res, k).unwrap();
            assert_eq!(a.digest(), b.digest(), "ps {ps} seed {seed}");
            assert_eq!(a.free_page_census(), b.free_page_census());
            assert!(a.storage().scratch_is_clear());
        }
    }
}

#[test]
fn a_finish_after_fewer_steps_leaves_the_pool_as_those_plain_decodes() {
    for ps in [1u32, 4, 16] {
        for seed in seeds() {
            let mut rng = Rng(seed * 131 + u64::from(ps) + 7);
            let bs = rng.range(1, 24) as usize;
            let (mut a, mut b, batch) = twins(&mut rng, ps, 4096 * u64::from(ps).min(4), bs);
            let k = rng.range(1, 40) as u32;
            let used = rng.below(u64::from(k)) as u32; // < k
            let mut res = reserve(&mut a, &batch, k);
            let mut prev_b = batch.last.clone();
            let mut prev_a = batch.last.clone();
            for s in 0..used {
                a.reservation_step(&mut res, &mut prev_a).unwrap();
                plain_step(&mut b, &batch, i64::from(s), &mut prev_b);
            }
            assert_eq!(prev_a, prev_b);
            let before = a.stats().pages_freed;
            a.finish_reservation(&mut res, used).unwrap();
            assert_eq!(
                a.stats().pages_freed - before,
                res.plan().unused_pages(used),
                "ps {ps} seed {seed}"
            );
            assert_eq!(
                a.available_size(),
                b.available_size(),
                "ps {ps} seed {seed}"
            );
            assert_eq!(
                a.digest(),
                b.digest(),
                "ps {ps} seed {seed} k {k} used {used}"
            );
            assert_eq!(a.free_page_census(), b.free_page_census());
            // Both continue with plain decodes from where the used steps left off.
            for s in used..used + 3 {
                let want = plain_step(&mut b, &batch, i64::from(s), &mut prev_b);
                let got = plain_step(&mut a, &batch, i64::from(s), &mut prev_a);
                assert_eq!(got, want, "ps {ps} seed {seed} after finish, step {s}");
            }
            assert_eq!(a.digest(), b.digest());
        }
    }
}

#[test]
fn a_shortage_is_refused_and_changes_nothing() {
    for ps in [1u32, 4, 16] {
        let mut rng = Rng(u64::from(ps) * 977);
        let size = 64 * u64::from(ps);
        let (mut a, _, batch) = twins(&mut rng, ps, size, 6);
        let digest = a.digest();
        let available = a.available_size();
        let pages = available / u64::from(ps);
        // Enough steps that every request needs more pages than there are.
        let k = (pages as u32 + 1) * ps;
        let k = k.min((size as u32) - *batch.lens.iter().max().unwrap() as u32);
        let err = a.reserve_decode(&batch.lens, &batch.last, k).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::OutOfSlots, "ps {ps}: {err}");
        assert_eq!(a.digest(), digest);
        assert_eq!(a.available_size(), available);
    }
}

#[test]
fn bad_last_loc_is_refused_and_changes_nothing() {
    let mut rng = Rng(5);
    let (mut a, _, batch) = twins(&mut rng, 4, 4096, 8);
    let digest = a.digest();
    let i = batch.lens.iter().position(|&l| l > 0).unwrap();
    for bad in [batch.last[i] + 1, 0, -1, 1 << 40] {
        let mut last = batch.last.clone();
        last[i] = bad;
        let err = a.reserve_decode(&batch.lens, &last, 5).unwrap_err();
        assert!(
            matches!(
                err.kind(),
                ErrorKind::LastLocMismatch
                    | ErrorKind::ReservedSlot
                    | ErrorKind::IndexOutOfRange
                    | ErrorKind::NotAllocated
            ),
            "{err}"
        );
        assert!(err.message().contains(&format!("last_loc[{i}]")), "{err}");
        assert_eq!(a.digest(), digest);
    }
    // A length that disagrees with last_loc, a negative length, a zero step count.
    let mut lens = batch.lens.clone();
    lens[i] += 1;
    assert!(a.reserve_decode(&lens, &batch.last, 5).is_err());
    lens[i] = -3;
    assert_eq!(
        a.reserve_decode(&lens, &batch.last, 5).unwrap_err().kind(),
        ErrorKind::InvalidLengths
    );
    assert_eq!(
        a.reserve_decode(&batch.lens, &batch.last, 0)
            .unwrap_err()
            .kind(),
        ErrorKind::InvalidArgument
    );
    assert_eq!(a.digest(), digest);
}

#[test]
fn past_the_reservation_is_an_error_and_writes_nothing() {
    let mut rng = Rng(9);
    let (mut a, _, batch) = twins(&mut rng, 4, 4096, 5);
    let mut res = reserve(&mut a, &batch, 3);
    let mut out = vec![0i64; 5];
    for _ in 0..3 {
        a.reservation_step(&mut res, &mut out).unwrap();
    }
    let digest = a.digest();
    let mut past = vec![-7i64; 5];
    let err = a.reservation_step(&mut res, &mut past).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidState);
    assert!(err.message().contains("overrun"), "{err}");
    assert_eq!(past, vec![-7; 5]);
    assert_eq!(res.steps_taken(), 3);
    assert_eq!(a.digest(), digest);
    // The wrong step count at finish is refused; the right one works.
    assert_eq!(
        a.finish_reservation(&mut res, 2).unwrap_err().kind(),
        ErrorKind::InvalidArgument
    );
    a.finish_reservation(&mut res, 3).unwrap();
    assert_eq!(
        a.reservation_step(&mut res, &mut past).unwrap_err().kind(),
        ErrorKind::InvalidState
    );
    assert_eq!(
        a.finish_reservation(&mut res, 3).unwrap_err().kind(),
        ErrorKind::InvalidState
    );
}

#[test]
fn a_plain_decode_on_a_reserved_request_is_refused_while_its_page_is_held() {
    // Page 4: a request of 5 tokens ends mid-page; the reservation holds its page.
    let mut a = pool(1024, 4, false);
    let mut out = vec![0i64; 5];
    a.alloc_extend(&[0], &[5], &[-1i64], 5, &mut out).unwrap();
    let last = [out[4]];
    let mut res = a.reserve_decode(&[5], &last, 6).unwrap();
    let digest = a.digest();
    let mut slot = [0i64];
    let err = a.alloc_decode(&[6], &last, &mut slot).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidState, "{err}");
    assert!(
        err.message().contains("held by a live decode reservation"),
        "{err}"
    );
    assert_eq!(a.digest(), digest);
    // A second reservation of the same request is refused the same way.
    let err = a.reserve_decode(&[5], &last, 2).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidState, "{err}");
    assert_eq!(a.digest(), digest);
    // Other pool calls work while the reservation is live.
    let mut other = vec![0i64; 8];
    a.alloc(8, &mut other).unwrap();
    a.reservation_step(&mut res, &mut slot).unwrap();
    assert_eq!(slot[0], out[4] + 1);
    a.free(&other).unwrap();
    a.finish_reservation(&mut res, 1).unwrap();
    // After the finish the request continues normally from its last used slot.
    a.alloc_decode(&[7], &slot, &mut out[..1]).unwrap();
    assert_eq!(out[0], slot[0] + 1);
}

#[test]
fn an_abandoned_reservation_keeps_its_pages_as_if_every_step_ran_and_ends_its_holds() {
    for ps in [1u32, 16] {
        let mut rng = Rng(21 + u64::from(ps));
        let (mut a, mut b, batch) = twins(&mut rng, ps, 4096 * 4, 7);
        let mut res = reserve(&mut a, &batch, 9);
        let mut out = vec![0i64; 7];
        a.reservation_step(&mut res, &mut out).unwrap();
        let mut prev = batch.last.clone();
        let mut plain = Vec::new();
        for s in 0..9 {
            plain.extend(plain_step(&mut b, &batch, s, &mut prev));
        }
        assert_eq!(a.digest(), b.digest());
        // Held: none of the batch's slots can be freed yet.
        assert_eq!(
            a.free(&plain).unwrap_err().kind(),
            ErrorKind::InvalidState,
            "ps {ps}"
        );
        a.abandon_reservation(&mut res);
        assert!(res.is_finished());
        assert_eq!(a.digest(), b.digest());
        // Now every slot the 9 steps hand out (and the batch's own) can be freed.
        let mut own: Vec<i64> = batch.last.iter().copied().filter(|&l| l >= 0).collect();
        own.extend(&plain);
        a.free(&own).unwrap();
        b.free(&own).unwrap();
        assert_eq!(a.digest(), b.digest());
        assert_eq!(
            a.reservation_step(&mut res, &mut out).unwrap_err().kind(),
            ErrorKind::InvalidState
        );
    }
}

#[test]
fn a_restore_ends_the_holds_of_the_reservations_it_ends() {
    let mut a = pool(1024, 4, false);
    let mut out = vec![0i64; 5];
    a.alloc_extend(&[0], &[5], &[-1i64], 5, &mut out).unwrap();
    let _res = a.reserve_decode(&[5], &[out[4]], 6).unwrap();
    let snapshot = a.backup_state().unwrap();
    a.restore_state(&snapshot).unwrap();
    // The snapshot was taken with the pages held; restored, they are plainly allocated.
    a.free(&out).unwrap();
    // The reservation's own new page (tokens 9-11) stays allocated.
    assert_eq!(a.available_size(), 1020);
}

#[test]
fn a_clear_ends_the_reservation() {
    let mut rng = Rng(3);
    let (mut a, _, batch) = twins(&mut rng, 4, 4096, 4);
    let mut res = reserve(&mut a, &batch, 4);
    a.clear();
    let mut out = vec![0i64; 4];
    assert_eq!(
        a.reservation_step(&mut res, &mut out).unwrap_err().kind(),
        ErrorKind::InvalidState
    );
    assert_eq!(
        a.finish_reservation(&mut res, 0).unwrap_err().kind(),
        ErrorKind::InvalidState
    );
    let mut other = pool(4096, 4, false);
    let mut res2 = reserve(
        &mut other,
        &Batch {
            lens: vec![0; 4],
            last: vec![-1; 4],
        },
        2,
    );
    assert_eq!(
        a.reservation_step(&mut res2, &mut out).unwrap_err().kind(),
        ErrorKind::InvalidArgument
    );
}

#[test]
fn steps_with_a_table_write_each_slot_at_its_token_position() {
    const ROWS: usize = 16;
    const ROW_LEN: usize = 200;
    let shape = TableShape {
        rows: ROWS as u64,
        row_stride: ROW_LEN as u64,
        row_len: ROW_LEN as u64,
    };
    for ps in [1u32, 4, 16] {
        let mut rng = Rng(77 + u64::from(ps));
        let (mut a, mut b, batch) = twins(&mut rng, ps, 4096 * u64::from(ps).min(4), 6);
        let rows: Vec<i64> = vec![3, 0, 15, 7, 9, 1];
        let mut data = vec![0i32; ROWS * ROW_LEN];
        let k = 10u32;
        let mut res = reserve(&mut a, &batch, k);
        let mut prev = batch.last.clone();
        for s in 0..k {
            let mut table = ReqTable::new(&mut data[..], shape).unwrap();
            let mut out = vec![0i64; 6];
            a.reservation_step_rows(&mut res, &mut table, &rows, Some(&mut out[..]))
                .unwrap();
            let want = plain_step(&mut b, &batch, i64::from(s), &mut prev);
            assert_eq!(out, want);
            for (i, &row) in rows.iter().enumerate() {
                let at = row as usize * ROW_LEN + (batch.lens[i] + i64::from(s)) as usize;
                assert_eq!(i64::from(data[at]), want[i], "ps {ps} step {s} request {i}");
            }
        }
        // A repeated row is refused, the table untouched (the reservation is used up anyway).
        let mut table = ReqTable::new(&mut data[..], shape).unwrap();
        let err = a
            .reservation_step_rows::<i64, i32>(&mut res, &mut table, &rows, None)
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidState);
        a.finish_reservation(&mut res, k).unwrap();
        assert_eq!(a.digest(), b.digest());
    }
}

#[test]
fn a_table_row_too_short_is_refused_before_anything_is_written() {
    let mut a = pool(1024, 4, false);
    let mut out = vec![0i64; 3];
    a.alloc_extend(&[0], &[3], &[-1i64], 3, &mut out).unwrap();
    let mut res = a.reserve_decode(&[3], &[out[2]], 4).unwrap();
    let shape = TableShape {
        rows: 2,
        row_stride: 5,
        row_len: 5,
    };
    let mut data = [0i64; 10];
    let mut step = [0i64];
    for s in 0..2 {
        let mut table = ReqTable::new(&mut data[..], shape).unwrap();
        a.reservation_step_rows(&mut res, &mut table, &[1], Some(&mut step[..]))
            .unwrap();
        assert_eq!(data[5 + 3 + s], step[0]);
    }
    let mut table = ReqTable::new(&mut data[..], shape).unwrap();
    let err = a
        .reservation_step_rows(&mut res, &mut table, &[1], Some(&mut step[..]))
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::BufferTooSmall, "{err}");
    let mut table = ReqTable::new(&mut data[..], shape).unwrap();
    let err = a
        .reservation_step_rows(&mut res, &mut table, &[2], Some(&mut step[..]))
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::IndexOutOfRange, "{err}");
    assert_eq!(res.steps_taken(), 2);
    a.finish_reservation(&mut res, 2).unwrap();
}

#[test]
fn freeing_a_request_of_a_live_reservation_is_refused_until_the_finish() {
    // Page size 4: request A holds 1 token (slot 4k); the reservation's steps 1-3 hand out
    // the rest of A's page. Were A freed after step 1, its page could go to request B while
    // steps 2-3 still hand A the page's slots: one slot held twice.
    let mut a = pool(1024, 4, false);
    let mut out = vec![0i64; 1];
    a.alloc_extend(&[0], &[1], &[-1i64], 1, &mut out).unwrap();
    let mut res = a.reserve_decode(&[1], &[out[0]], 6).unwrap();
    let mut first = [0i64];
    a.reservation_step(&mut res, &mut first).unwrap();
    let digest = a.digest();
    let page = out[0] / 4;
    let new_page_slot = res.step_slots(3)[0]; // step 4 starts a new page
    let refusals = [
        ("free", a.free(&[out[0], first[0]])),
        ("free of the unused new page", a.free(&[new_page_slot])),
        ("free_pages", a.free_pages(&[page])),
        ("free_segment", a.free_segment(&[out[0], first[0]], 0, 2)),
        ("rewind", a.rewind(&[out[0]])),
    ];
    for (what, result) in refusals {
        let err = result.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidState, "{what}: {err}");
        assert!(
            err.message().contains("held by a live decode reservation"),
            "{what}: {err}"
        );
        assert_eq!(a.digest(), digest, "{what} changed the pool");
    }
    // Inside a free group the same.
    a.free_group_begin().unwrap();
    assert_eq!(
        a.free(&[out[0]]).unwrap_err().kind(),
        ErrorKind::InvalidState
    );
    a.free_group_end().unwrap();
    assert_eq!(a.digest(), digest);
    // Another request cannot get the page: an allocation takes other pages.
    let mut other = vec![0i64; 8];
    a.alloc(8, &mut other).unwrap();
    assert!(other.iter().all(|&s| s / 4 != page));
    a.free(&other).unwrap();
    // After the finish the request's slots free normally.
    a.finish_reservation(&mut res, 1).unwrap();
    a.free(&[out[0], first[0]]).unwrap();
    assert_eq!(a.available_size(), 1024);
}

#[test]
fn staged_frees_are_merged_when_the_reservation_needs_them() {
    let mut a = pool(64, 4, true);
    let mut all = vec![0i64; 64];
    a.alloc(64, &mut all).unwrap();
    a.free(&all[..32]).unwrap(); // 8 pages staged, none free
    let mut res = a.reserve_decode(&[0, 0], &[-1i64, -1], 9).unwrap();
    assert_eq!(res.plan().total_pages, 6);
    let mut seen = std::collections::HashSet::new();
    let mut out = [0i64; 2];
    for _ in 0..9 {
        a.reservation_step(&mut res, &mut out).unwrap();
        assert!(out.iter().all(|&s| (4..36).contains(&s) && seen.insert(s)));
    }
    a.finish_reservation(&mut res, 9).unwrap();
    assert_eq!(a.available_size(), 8);
}

/// With `need_sort`, K plain decodes merge staged frees at the first step whose batch size
/// exceeds the free list left by the steps before it (SGLang's per-call rule); a
/// reservation merges at that same step, so its slots equal theirs step by step, and it
/// fails exactly when one of them would run short (then changing nothing, not even a merge).
#[test]
fn with_need_sort_the_merge_happens_at_the_step_plain_decodes_merge() {
    let (mut merged_later, mut merged_first, mut short) = (0, 0, 0);
    for seed in 0..300u64 {
        let mut rng = Rng(seed * 7 + 1);
        let ps = [1u32, 4, 16][seed as usize % 3];
        let p = u64::from(ps);
        let mut a = pool(64 * p, ps, true);
        let mut b = pool(64 * p, ps, true);
        let bs = rng.range(1, 9) as usize;
        let lens: Vec<i64> = (0..bs).map(|_| rng.range(0, 3 * p) as i64).collect();
        let total: i64 = lens.iter().sum();
        let mut out = vec![0i64; total as usize];
        let (zeros, none) = (vec![0i64; bs], vec![-1i64; bs]);
        for pool in [&mut a, &mut b] {
            pool.alloc_extend(&zeros, &lens, &none, total as u64, &mut out)
                .unwrap();
        }
        let mut last = Vec::with_capacity(bs);
        let mut pos = 0usize;
        for &len in &lens {
            pos += len as usize;
            last.push(if len == 0 { -1 } else { out[pos - 1] });
        }
        // Leave a few pages free and stage a random part of the rest.
        let free = a.storage().free_len() as u64;
        let keep = rng.range(0, free.min(3 * bs as u64) + 1);
        let mut filler = vec![0i64; ((free - keep) * p) as usize];
        for pool in [&mut a, &mut b] {
            pool.alloc(filler.len(), &mut filler).unwrap();
        }
        let staged: Vec<i64> = filler
            .chunks(ps as usize)
            .map(|c| c[0])
            .filter(|_| rng.chance(50))
            .collect();
        for pool in [&mut a, &mut b] {
            pool.free(&staged).unwrap();
        }
        let k = rng.range(1, 12) as u32;
        let before = a.digest();
        let merges = b.stats().merges;
        let reserved = a.reserve_decode(&lens, &last, k);
        let mut prev = last.clone();
        let mut plain = Vec::new();
        let mut failed = false;
        for s in 0..i64::from(k) {
            let seq: Vec<i64> = lens.iter().map(|&l| l + s + 1).collect();
            let mut row = vec![0i64; bs];
            match b.alloc_decode(&seq, &prev, &mut row) {
                Ok(()) => {
                    if b.stats().merges > merges {
                        if s == 0 {
                            merged_first += 1;
                        } else if b.stats().merges == merges + 1 && plain.len() == s as usize {
                            merged_later += 1;
                        }
                    }
                    prev.clone_from(&row);
                    plain.push(row);
                }
                Err(err) => {
                    assert_eq!(err.kind(), ErrorKind::OutOfSlots, "seed {seed}");
                    failed = true;
                    break;
                }
            }
        }
        match reserved {
            Err(err) => {
                assert!(
                    failed,
                    "seed {seed}: the reservation failed ({err}), the decodes did not"
                );
                assert_eq!(err.kind(), ErrorKind::OutOfSlots, "seed {seed}");
                assert_eq!(
                    a.digest(),
                    before,
                    "seed {seed}: a refused reservation changed the pool"
                );
                short += 1;
            }
            Ok(mut res) => {
                assert!(
                    !failed,
                    "seed {seed}: the decodes ran short, the reservation did not"
                );
                for (s, want) in plain.iter().enumerate() {
                    let mut got = vec![0i64; bs];
                    a.reservation_step(&mut res, &mut got).unwrap();
                    assert_eq!(&got, want, "seed {seed} ps {ps} step {s}");
                }
                a.finish_reservation(&mut res, k).unwrap();
                assert_eq!(a.digest(), b.digest(), "seed {seed}");
                assert_eq!(a.stats().merges, b.stats().merges, "seed {seed}");
            }
        }
    }
    // The cases that matter all occurred.
    assert!(merged_later >= 10, "merges after step 1: {merged_later}");
    assert!(merged_first >= 10, "merges at step 1: {merged_first}");
    assert!(short >= 5, "shortages: {short}");
}
