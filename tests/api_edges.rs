//! Adversarial edges of the host backend's public Rust API and of the admission types: every
//! bad argument must give an `Err` of the right kind and change nothing (digest, available
//! size, counters of pages in use), no argument value may reach a panic, and no sum may wrap
//! into a wrong answer. The randomized part drives a pool with valid and invalid calls
//! against a model of the slots each request holds: no slot is handed out twice while live,
//! and `available_size + pages in use × page_size == size` after every call.

mod host_pool;
mod rng;

use std::collections::{BTreeSet, HashSet};

use host_pool::pool;
use kvpool::admission::{
    AddResult, AdderConfig, ChunkSizePredictor, ChunkedCandidate, PrefillAdder, PrefillBudget,
    RequestSpec, Scheduler, SchedulerConfig, SubmitOutcome,
};
use kvpool::{
    BackendKind, ErrorKind, IndexType, Pool, PoolConfig, ReqTable, ReservationPlan, TableShape,
    MAX_RESERVED_STEPS,
};
use rng::Rng;

/// An extend call's arguments (`prefix_lens`, `seq_lens`, `last_loc`, `extend_num_tokens`)
/// and the error kind it must get.
type BadExtend = (Vec<i64>, Vec<i64>, Vec<i64>, u64, ErrorKind);

/// What an error must leave alone.
#[derive(Debug, PartialEq, Eq)]
struct Facts {
    digest: u64,
    available: u64,
    pages_in_use: u64,
    census: Vec<u32>,
}

fn facts(pool: &Pool) -> Facts {
    Facts {
        digest: pool.digest(),
        available: pool.available_size(),
        pages_in_use: pool.stats().pages_in_use,
        census: pool.free_page_census(),
    }
}

/// Asserts `result` is an error of `kind` and that the pool is as `before`.
#[track_caller]
fn refused<T: std::fmt::Debug>(
    pool: &Pool,
    before: &Facts,
    result: Result<T, kvpool::PoolError>,
    kind: ErrorKind,
) {
    match result {
        Ok(v) => panic!("accepted (expected {kind:?}): {v:?}"),
        Err(e) => {
            assert_eq!(e.kind(), kind, "{e}");
            assert!(!e.message().is_empty());
        }
    }
    assert_eq!(&facts(pool), before, "a refused call changed the pool");
}

// ---- defects: each of these failed before its fix ---------------------------------------

/// Address space that costs no memory, for arguments no real buffer could hold; unmapped
/// when dropped.
#[cfg(target_os = "linux")]
struct Mapping {
    base: *mut libc::c_void,
    bytes: usize,
}

#[cfg(target_os = "linux")]
const CHUNK: usize = 2 << 20;

#[cfg(target_os = "linux")]
impl Mapping {
    /// `len` copies of `value` (`i64`, read-only through [`Self::as_i64`]): one 2 MiB
    /// shared-memory file mapped again and again. The extend planning tests need batches
    /// whose lengths add up past 2^64, which no real buffer of that many `i64` would fit.
    fn repeated(value: i64, len: usize) -> Self {
        let bytes = len * 8;
        assert!(
            bytes.is_multiple_of(CHUNK),
            "len must fill whole 2 MiB chunks"
        );
        // SAFETY: plain system calls; every result is checked, and the only memory written
        // is the first chunk, through a mapping made here.
        unsafe {
            let fd = libc::memfd_create(c"kvpool-api-edges".as_ptr(), libc::MFD_CLOEXEC);
            assert!(fd >= 0, "memfd_create failed");
            assert_eq!(libc::ftruncate(fd, CHUNK as libc::off_t), 0);
            let base = libc::mmap(
                std::ptr::null_mut(),
                bytes,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            );
            assert_ne!(base, libc::MAP_FAILED, "cannot reserve {bytes} bytes");
            for k in 0..bytes / CHUNK {
                let at = base.cast::<u8>().add(k * CHUNK).cast();
                let got = libc::mmap(
                    at,
                    CHUNK,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_SHARED | libc::MAP_FIXED,
                    fd,
                    0,
                );
                assert_eq!(got, at, "mmap of chunk {k} failed");
            }
            libc::close(fd);
            std::slice::from_raw_parts_mut(base.cast::<i64>(), CHUNK / 8).fill(value);
            Self { base, bytes }
        }
    }

    /// `len` zeroed `i32` (through [`Self::as_i32_mut`]), not committed (`MAP_NORESERVE`):
    /// pages are only mapped where read (to the zero page) or written.
    fn zeroed_i32(len: usize) -> Self {
        let bytes = len * 4;
        // SAFETY: a plain anonymous mapping; the result is checked.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        assert_ne!(base, libc::MAP_FAILED, "cannot map {bytes} bytes");
        Self { base, bytes }
    }

    fn as_i64(&self) -> &[i64] {
        // SAFETY: `bytes` of readable mapped memory, written only before this borrow.
        unsafe { std::slice::from_raw_parts(self.base.cast::<i64>(), self.bytes / 8) }
    }

    fn as_i32_mut(&mut self) -> &mut [i32] {
        // SAFETY: `bytes` of readable and writable mapped memory, borrowed uniquely.
        unsafe { std::slice::from_raw_parts_mut(self.base.cast::<i32>(), self.bytes / 4) }
    }
}

#[cfg(target_os = "linux")]
impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: the whole mapping made in the constructor.
        unsafe { libc::munmap(self.base, self.bytes) };
    }
}

/// The tokens of an extend batch add up past 2^64 although every request is valid: a pool
/// of 2^35 slots (pages of 2^31) and 2^29 requests of 2^35 new tokens each (sum exactly
/// 2^64), and, for the request-by-request path, a page size that is not a power of two.
/// `extend_need` returned the wrapped sum (0) as the batch's tokens, and `alloc_extend`,
/// passed that sum, reported a shortage instead of the impossible lengths.
#[cfg(target_os = "linux")]
#[test]
fn extend_token_sums_past_2_pow_64_are_refused() {
    for ps in [1u32 << 31, 3 << 30] {
        let p = u64::from(ps);
        let pages = (1u64 << 35) / p;
        let size = pages * p;
        // Enough requests of `size` tokens to pass 2^64, in whole chunks.
        let per_chunk = (CHUNK / 8) as u64;
        let n = ((1u128 << 64).div_ceil(u128::from(size)) as u64).div_ceil(per_chunk) * per_chunk;
        let total = u128::from(n) * u128::from(size);
        assert!(total > u128::from(u64::MAX));
        let wrapped = total as u64;
        let prefix = Mapping::repeated(0, n as usize);
        let seq = Mapping::repeated(size as i64, n as usize);
        let (prefix, seq) = (prefix.as_i64(), seq.as_i64());
        let mut pool = pool(size, ps, true);
        let before = facts(&pool);
        let stats = pool.stats();
        match pool.extend_need(prefix, seq) {
            Ok(plan) => panic!(
                "ps {ps}: extend_need of {n} requests of {size} tokens ({total} in all) \
                 returned {plan:?}"
            ),
            Err(e) => {
                assert_eq!(e.kind(), ErrorKind::InvalidLengths, "{e}");
                assert!(e.message().contains("2^64"), "{e}");
            }
        }
        let last = Mapping::repeated(-1, n as usize); // (4 GiB as a Vec)
        let mut out = vec![0i64; 4];
        let result = pool.alloc_extend(prefix, seq, last.as_i64(), wrapped, &mut out);
        refused(&pool, &before, result, ErrorKind::InvalidLengths);
        assert_eq!(out, [0; 4]);
        let after = pool.stats();
        assert_eq!(after.failed_allocations, stats.failed_allocations);
        assert_eq!(after.rejected_calls, stats.rejected_calls + 1);
        assert_eq!(after.merges, stats.merges);
    }
}

/// `page_table` wrote `kv_last_page_len` as int32 from a page of 2^31 slots: a request of
/// 2^31 tokens got a last page of length -2^31.
#[cfg(target_os = "linux")]
#[test]
fn page_table_refuses_a_page_size_that_int32_cannot_hold() {
    let ps = 1u32 << 31;
    let pool = pool(u64::from(ps), ps, false);
    let row_len = 1u64 << 31;
    // 8 GiB of address space; only the row's first entry is ever read.
    let mut data = Mapping::zeroed_i32(row_len as usize);
    let data = data.as_i32_mut();
    let shape = TableShape {
        rows: 1,
        row_stride: row_len,
        row_len,
    };
    let table = ReqTable::new(data, shape).unwrap();
    let (mut indptr, mut indices, mut last) = ([7i32; 2], [7i32; 1], [7i32; 1]);
    let result = pool.page_table(
        &table,
        &[0],
        &[row_len as i64],
        &mut indptr,
        &mut indices,
        &mut last,
    );
    match result {
        Ok(pages) => panic!(
            "accepted: {pages} page(s), kv_indptr {indptr:?}, kv_last_page_len {last:?} \
             (the request holds {row_len} tokens)"
        ),
        Err(e) => assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}"),
    }
    assert_eq!((indptr, indices, last), ([7; 2], [7], [7]));
}

/// `cur_rem_tokens` subtracted two saturated budgets without saturating: with the room
/// locked down to `-INT64_MAX` and 2 tokens reserved it returned `INT64_MAX` (release
/// build), and a chunked request was then given 100 tokens with nothing available.
#[test]
fn budget_remaining_tokens_saturate_instead_of_wrapping() {
    let config = AdderConfig::sglang_defaults(1);
    let mut budget = PrefillBudget::try_new(&config, 0, 0, &[]).unwrap();
    budget.reserve(1, 0); // current offset: 1 token + 1 page
    budget.lock_prefix(u64::MAX); // room: 0 - INT64_MAX
    assert_eq!(budget.cur_rem_tokens(), i64::MIN);
    assert_eq!(budget.state(), AddResult::NoToken);

    let mut adder = PrefillAdder::try_new(config, 0, 0, &[], 1).unwrap();
    adder.budget_mut().reserve(1, 0);
    adder.budget_mut().lock_prefix(u64::MAX);
    let out = adder
        .try_add_chunked_req(ChunkedCandidate {
            prefix_len: 0,
            remaining: 100,
            max_new_tokens: 10,
            ..ChunkedCandidate::default()
        })
        .unwrap();
    assert_eq!(out.extend_len, 0, "{out:?} with no room at all");
    assert!(out.truncated);
}

/// `ChunkSizePredictor::predict` added 100 to the history unchecked: a history within 100
/// of `u64::MAX` wrapped to a small one and got a chunk (a debug build panicked).
#[test]
fn chunk_prediction_near_u64_max_history_does_not_wrap() {
    let p = ChunkSizePredictor {
        a: 1e-6,
        b: 0.01,
        base_chunk: 8192,
        page_size: 16,
        context_len: 131_072,
        max_prefill_tokens: 16384,
        smooth: 0.75,
    };
    assert_eq!(p.predict(0), Some(8192));
    assert_eq!(p.predict(131_000), None);
    for history in [u64::MAX, u64::MAX - 1, u64::MAX - 99, u64::MAX - 100] {
        assert_eq!(p.predict(history), None, "history {history}");
    }
}

/// A scheduler whose dynamic-chunking predictor may predict chunks past `INT64_MAX` was
/// accepted, and its first step with a chunked request in flight panicked inside
/// `PrefillAdder::new` (the predicted chunk failed the adder's config check).
#[test]
fn scheduler_refuses_a_predictor_whose_chunks_exceed_int64_max() {
    let mut config = SchedulerConfig::new(1 << 20, 1);
    config.chunked_prefill_size = Some(64);
    config.dynamic_chunking = Some(ChunkSizePredictor {
        a: 1.0,
        b: 0.0,
        base_chunk: u64::MAX,
        page_size: 1,
        context_len: u64::MAX,
        max_prefill_tokens: u64::MAX,
        smooth: 1.0,
    });
    match Scheduler::new(config) {
        Err(e) => {
            assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
            assert!(e.message().contains("max_prefill_tokens"), "{e}");
        }
        Ok(mut s) => {
            let spec = RequestSpec {
                id: 1,
                input_len: 1000,
                max_new_tokens: 10,
                ..RequestSpec::default()
            };
            assert_eq!(s.submit(spec).unwrap(), SubmitOutcome::Queued);
            for _ in 0..3 {
                s.try_step(1 << 20, 0, true).unwrap();
            }
            panic!("accepted, and three steps ran");
        }
    }
    // The same predictor with a representable cap is accepted and steps.
    config.dynamic_chunking.as_mut().unwrap().max_prefill_tokens = 4096;
    let mut s = Scheduler::new(config).unwrap();
    s.submit(RequestSpec {
        id: 1,
        input_len: 1000,
        max_new_tokens: 10,
        ..RequestSpec::default()
    })
    .unwrap();
    for _ in 0..3 {
        s.try_step(1 << 20, 0, true).unwrap();
    }
}

/// `PrefillBudget::release_running` took any float: a NaN offset made the total budget
/// NaN, after which every comparison admitted (a request of 10^6 tokens into a room of
/// 1000). It is refused now, changing nothing. (Written against the call's debug output so
/// that it compiles against the old `()` return as well.)
#[test]
fn release_running_refuses_offsets_that_are_not_finite_and_non_negative() {
    let config = AdderConfig::sglang_defaults(1);
    for bad in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, -1.0] {
        let mut adder = PrefillAdder::try_new(config, 1000, 0, &[], 0).unwrap();
        let before = adder.budget().clone();
        let shown = format!("{:?}", adder.budget_mut().release_running(bad, 5));
        assert!(
            shown.starts_with("Err(PoolError { kind: InvalidArgument"),
            "release_running({bad}, 5) gave {shown}"
        );
        assert_eq!(adder.budget(), &before, "offset {bad}");
        let big = kvpool::admission::Candidate {
            input_len: 1_000_000,
            max_new_tokens: 10,
            ..Default::default()
        };
        let admission = adder.try_add_one_req(&big).unwrap();
        assert_eq!(admission.extend_len, None, "offset {bad}: {admission:?}");
    }
    let mut budget = PrefillBudget::try_new(&config, 1000, 0, &[]).unwrap();
    let shown = format!("{:?}", budget.release_running(0.0, 5));
    assert!(shown == "Ok(())" || shown == "()", "{shown}");
    assert_eq!(budget.cur_rem_tokens(), 1005);
}

/// `DecodeReservation::step_slots` sliced past the reservation's steps.
#[test]
fn step_slots_past_the_last_step_are_empty() {
    let mut pool = pool(16 * 64, 16, false);
    let mut out = [0i64; 5];
    pool.alloc_extend(&[0], &[5], &[-1i64], 5, &mut out)
        .unwrap();
    let mut res = pool.reserve_decode(&[0i64, 5], &[-1, out[4]], 2).unwrap();
    assert_eq!(res.step_slots(0).len(), 2);
    assert_eq!(res.step_slots(1).len(), 2);
    for step in [2, 3, u32::MAX] {
        assert!(res.step_slots(step).is_empty(), "step {step}");
    }
    let mut slots = [0i64; 2];
    pool.reservation_step(&mut res, &mut slots).unwrap();
    assert_eq!(slots, res.step_slots(0));
    pool.finish_reservation(&mut res, 1).unwrap();
    assert!(res.step_slots(7).is_empty());
}

/// `ReservationPlan::unused_pages` indexed `taken_by` with any `steps_used`, and
/// `merge_step` trusted `taken_by` to cover every step (its fields are public).
#[test]
fn reservation_plan_queries_take_any_argument() {
    let mut pool = pool(16 * 64, 16, false);
    let res = pool.reserve_decode(&[0i64, 0], &[-1i64, -1], 3).unwrap();
    let plan = res.plan();
    assert_eq!(plan.unused_pages(0), 2);
    assert_eq!(plan.unused_pages(3), 0);
    for used in [4, 1000, u32::MAX] {
        assert_eq!(plan.unused_pages(used), 0, "steps_used {used}");
    }
    // Hand-built plans: too short a `taken_by`, counts past the total.
    let short = ReservationPlan {
        steps: 4,
        batch: 1,
        total_pages: 1,
        taken_by: vec![0],
    };
    assert_eq!(short.merge_step(10), None);
    assert_eq!(short.merge_step(0), Some(1));
    assert_eq!(short.unused_pages(2), 0);
    let inconsistent = ReservationPlan {
        steps: 1,
        batch: 1,
        total_pages: 0,
        taken_by: vec![0, 5],
    };
    assert_eq!(inconsistent.unused_pages(1), 0);
}

/// `ReqTable::row` asserted the row was in the table.
#[test]
fn req_table_rows_outside_the_table_are_empty() {
    let mut data = [0i64; 3 * 8];
    for (k, x) in data.iter_mut().enumerate() {
        *x = k as i64;
    }
    let shape = TableShape {
        rows: 3,
        row_stride: 8,
        row_len: 5,
    };
    let table = ReqTable::new(&mut data[..], shape).unwrap();
    assert_eq!(table.row(2), &[16i64, 17, 18, 19, 20][..]);
    for row in [3, 4, usize::MAX / 8, usize::MAX] {
        assert!(table.row(row).is_empty(), "row {row}");
    }
}

/// `HostStorage::page_state` and `page_fill`, reached from any pool through
/// `Pool::storage`, indexed the page map with any page id. (Compared through their debug
/// output so that the test compiles against the old signatures too.)
#[test]
fn storage_page_queries_outside_the_pool_are_none() {
    let mut p = pool(64, 4, false);
    let mut out = [0i64; 3];
    p.alloc_extend(&[0], &[3], &[-1i64], 3, &mut out).unwrap();
    let storage = p.storage();
    for page in [17, 1000, u32::MAX] {
        assert_eq!(
            format!("{:?}", storage.page_state(page)),
            "None",
            "page {page}"
        );
        assert_eq!(
            format!("{:?}", storage.page_fill(page)),
            "None",
            "page {page}"
        );
    }
    assert_eq!(format!("{:?}", storage.page_state(0)), "Some(Reserved)");
    assert_eq!(format!("{:?}", storage.page_state(1)), "Some(Allocated)");
    assert_eq!(format!("{:?}", storage.page_fill(1)), "Some(3)");
    assert_eq!(format!("{:?}", storage.page_state(16)), "Some(Free)");
}

// ---- edges that were already handled (regression guards) -------------------------------

#[test]
fn configurations_that_cannot_make_a_pool_are_refused() {
    let cases: [(PoolConfig, ErrorKind); 9] = [
        (
            PoolConfig {
                size: 64,
                page_size: 0,
                ..PoolConfig::default()
            },
            ErrorKind::InvalidArgument,
        ),
        (
            PoolConfig {
                size: 0,
                page_size: 16,
                ..PoolConfig::default()
            },
            ErrorKind::InvalidArgument,
        ),
        (
            PoolConfig {
                size: 65,
                page_size: 16,
                ..PoolConfig::default()
            },
            ErrorKind::Unaligned,
        ),
        (
            PoolConfig {
                size: u64::MAX,
                page_size: 1,
                ..PoolConfig::default()
            },
            ErrorKind::InvalidArgument,
        ),
        (
            PoolConfig {
                // u32::MAX pages: one more than page ids can name.
                size: u64::from(u32::MAX),
                page_size: 1,
                ..PoolConfig::default()
            },
            ErrorKind::InvalidArgument,
        ),
        (
            PoolConfig {
                size: 1 << 31,
                page_size: 1,
                index_type: IndexType::I32,
                ..PoolConfig::default()
            },
            ErrorKind::InvalidArgument,
        ),
        (
            PoolConfig {
                // Largest slot past INT64_MAX.
                size: (u64::from(u32::MAX) - 1) * u64::from(u32::MAX),
                page_size: u32::MAX,
                ..PoolConfig::default()
            },
            ErrorKind::InvalidArgument,
        ),
        (
            PoolConfig {
                // Representable, but its bookkeeping cannot be allocated: an error, not an
                // abort.
                size: (u64::from(u32::MAX) - 1) * (1 << 31),
                page_size: 1 << 31,
                ..PoolConfig::default()
            },
            ErrorKind::OutOfMemory,
        ),
        (
            PoolConfig {
                size: 64,
                page_size: 16,
                backend: BackendKind::Cuda { ordinal: 0 },
                ..PoolConfig::default()
            },
            ErrorKind::Unsupported,
        ),
    ];
    for (config, kind) in cases {
        let err = Pool::new(config).unwrap_err();
        assert_eq!(err.kind(), kind, "{config:?}: {err}");
    }
    // A page size that is not a power of two works, with the same rules.
    let mut p = pool(3 * 10, 3, false);
    let mut out = [0i64; 6];
    p.alloc(6, &mut out).unwrap();
    assert_eq!(out, [3, 4, 5, 6, 7, 8]);
    let before = facts(&p);
    let result = p.alloc(4, &mut out);
    refused(&p, &before, result, ErrorKind::Unaligned);
}

#[test]
fn alloc_edges() {
    for ps in [1u32, 3, 16] {
        let size = u64::from(ps) * 8;
        let mut p = pool(size, ps, false);
        let mut out = vec![0i64; size as usize];
        p.alloc(0, &mut out[..0]).unwrap();
        let before = facts(&p);
        let result = p.alloc(ps as usize, &mut out[..ps as usize - 1]);
        refused(&p, &before, result, ErrorKind::BufferTooSmall);
        let kind = if ps == 1 || usize::MAX.is_multiple_of(ps as usize) {
            ErrorKind::BufferTooSmall
        } else {
            ErrorKind::Unaligned
        };
        let result = p.alloc(usize::MAX, &mut out);
        refused(&p, &before, result, kind);
        let result = p.alloc(usize::MAX / ps as usize * ps as usize, &mut out);
        refused(&p, &before, result, ErrorKind::BufferTooSmall);
        let mut big = vec![0i64; size as usize + ps as usize];
        let result = p.alloc(big.len(), &mut big);
        refused(&p, &before, result, ErrorKind::OutOfSlots);
        p.alloc(size as usize, &mut out).unwrap();
        let distinct: HashSet<i64> = out.iter().copied().collect();
        assert_eq!(distinct.len(), size as usize);
        assert!(out
            .iter()
            .all(|&s| s >= i64::from(ps) && s < (size + u64::from(ps)) as i64));
        assert_eq!(p.available_size(), 0);
    }
    // An i32 output from a pool whose slots do not all fit i32.
    let mut p = pool(1 << 31, 1 << 20, false);
    let before = facts(&p);
    let mut out32 = vec![0i32; 1 << 20];
    let result = p.alloc(1 << 20, &mut out32);
    refused(&p, &before, result, ErrorKind::InvalidArgument);
}

#[test]
fn extend_and_decode_length_edges() {
    let ps = 4u32;
    let mut p = pool(4 * 32, ps, false);
    let mut out = [0i64; 6];
    p.alloc_extend(&[0], &[6], &[-1i64], 6, &mut out).unwrap();
    let last = out[5];
    let before = facts(&p);
    let mut o = [0i64; 64];
    let bad_extends: Vec<BadExtend> = vec![
        (vec![0, 0], vec![1], vec![-1], 1, ErrorKind::InvalidLengths),
        (
            vec![0],
            vec![1, 1],
            vec![-1, -1],
            2,
            ErrorKind::InvalidLengths,
        ),
        (vec![0], vec![1], vec![], 1, ErrorKind::InvalidLengths),
        (vec![-1], vec![1], vec![-1], 2, ErrorKind::InvalidLengths),
        (
            vec![i64::MIN],
            vec![0],
            vec![-1],
            0,
            ErrorKind::InvalidLengths,
        ),
        (
            vec![0],
            vec![i64::MIN],
            vec![-1],
            0,
            ErrorKind::InvalidLengths,
        ),
        (
            vec![0],
            vec![i64::MAX],
            vec![-1],
            i64::MAX as u64,
            ErrorKind::InvalidLengths,
        ),
        (
            vec![i64::MAX],
            vec![i64::MAX],
            vec![0],
            0,
            ErrorKind::InvalidLengths,
        ),
        (vec![6], vec![5], vec![last], 0, ErrorKind::InvalidLengths),
        (vec![0], vec![129], vec![-1], 129, ErrorKind::InvalidLengths),
        (vec![0], vec![3], vec![-1], 4, ErrorKind::InvalidLengths),
        (
            vec![0],
            vec![3],
            vec![-1],
            u64::MAX,
            ErrorKind::InvalidLengths,
        ),
        (vec![0], vec![3], vec![5], 3, ErrorKind::LastLocMismatch),
        (vec![6], vec![7], vec![-1], 1, ErrorKind::IndexOutOfRange),
        (vec![6], vec![7], vec![0], 1, ErrorKind::ReservedSlot),
        (vec![6], vec![7], vec![2], 1, ErrorKind::ReservedSlot),
        (
            vec![6],
            vec![7],
            vec![i64::MAX],
            1,
            ErrorKind::IndexOutOfRange,
        ),
        (
            vec![6],
            vec![7],
            vec![i64::MIN],
            1,
            ErrorKind::IndexOutOfRange,
        ),
        (
            vec![6],
            vec![7],
            vec![last - 1],
            1,
            ErrorKind::LastLocMismatch,
        ),
        (
            vec![5],
            vec![7],
            vec![last - 1],
            2,
            ErrorKind::LastLocMismatch,
        ),
        (vec![6], vec![7], vec![last + 4], 1, ErrorKind::NotAllocated),
        // Two requests continuing one page.
        (
            vec![6, 6],
            vec![7, 7],
            vec![last, last],
            2,
            ErrorKind::LastLocMismatch,
        ),
    ];
    for (prefix, seq, last_loc, n, kind) in bad_extends {
        let what = format!("{prefix:?} {seq:?} {last_loc:?} {n}");
        let result = p.alloc_extend(&prefix, &seq, &last_loc, n, &mut o);
        assert!(result.is_err(), "{what}");
        refused(&p, &before, result, kind);
        let result = p.check_extend(&prefix, &seq, &last_loc, n);
        refused(&p, &before, result, kind);
    }
    // An output one short.
    let result = p.alloc_extend(&[6], &[9], &[last], 3, &mut o[..2]);
    refused(&p, &before, result, ErrorKind::BufferTooSmall);
    // Queries never change anything, whatever the lengths.
    for (prefix, seq) in [
        (vec![i64::MIN], vec![i64::MAX]),
        (vec![0; 3], vec![128; 3]),
        (vec![], vec![]),
    ] {
        let _ = p.extend_need(&prefix, &seq);
        let _ = p.decode_need(&seq);
    }
    assert_eq!(facts(&p), before);
    assert_eq!(p.decode_need(&[]).unwrap(), 0);
    let bad_decodes: Vec<(Vec<i64>, Vec<i64>, ErrorKind)> = vec![
        (vec![0], vec![-1], ErrorKind::InvalidLengths),
        (vec![-5], vec![-1], ErrorKind::InvalidLengths),
        (vec![i64::MIN], vec![-1], ErrorKind::InvalidLengths),
        (vec![i64::MAX], vec![last], ErrorKind::InvalidLengths),
        (vec![129], vec![last], ErrorKind::InvalidLengths),
        (vec![7, 7], vec![last], ErrorKind::InvalidLengths),
        (vec![1], vec![last], ErrorKind::LastLocMismatch),
        (vec![7], vec![-1], ErrorKind::IndexOutOfRange),
        (vec![6], vec![last], ErrorKind::LastLocMismatch),
        (vec![7, 7], vec![last, last], ErrorKind::LastLocMismatch),
    ];
    for (seq, last_loc, kind) in bad_decodes {
        let result = p.alloc_decode(&seq, &last_loc, &mut o);
        refused(&p, &before, result, kind);
        let result = p.check_decode(&seq, &last_loc);
        refused(&p, &before, result, kind);
    }
    let result = p.alloc_decode(&[7, 1], &[last, -1], &mut o[..1]);
    refused(&p, &before, result, ErrorKind::BufferTooSmall);
    // Empty batches are no-ops.
    p.alloc_extend::<i64>(&[], &[], &[], 0, &mut []).unwrap();
    p.alloc_decode::<i64>(&[], &[], &mut []).unwrap();
    assert_eq!(facts(&p), before);
}

#[test]
fn free_and_rewind_edges() {
    for ps in [1u32, 4] {
        let p4 = u64::from(ps);
        let mut p = pool(p4 * 16, ps, false);
        let mut out = [0i64; 6];
        p.alloc_extend(&[0], &[6], &[-1i64], 6, &mut out).unwrap();
        let before = facts(&p);
        let free_page_slot = (p4 * 10) as i64;
        let bad_frees: Vec<(Vec<i64>, ErrorKind)> = vec![
            (vec![0], ErrorKind::ReservedSlot),
            (vec![-1], ErrorKind::IndexOutOfRange),
            (vec![i64::MIN], ErrorKind::IndexOutOfRange),
            (vec![i64::MAX], ErrorKind::IndexOutOfRange),
            (vec![(p4 * 17) as i64], ErrorKind::IndexOutOfRange),
            (vec![out[0], out[0]], ErrorKind::DoubleFree),
            (vec![out[1], free_page_slot], ErrorKind::DoubleFree),
            (vec![out[5], out[0], out[5]], ErrorKind::DoubleFree),
        ];
        for (indices, kind) in bad_frees {
            let result = p.free(&indices);
            refused(&p, &before, result, kind);
            let result = p.check_free(&indices);
            refused(&p, &before, result, kind);
        }
        let bad_pages: Vec<(Vec<i64>, ErrorKind)> = vec![
            (vec![0], ErrorKind::ReservedSlot),
            (vec![17], ErrorKind::IndexOutOfRange),
            (vec![-3], ErrorKind::IndexOutOfRange),
            (vec![i64::MAX], ErrorKind::IndexOutOfRange),
            (vec![10], ErrorKind::DoubleFree),
            (
                vec![out[0] / p4 as i64, out[0] / p4 as i64],
                ErrorKind::DoubleFree,
            ),
        ];
        for (ids, kind) in bad_pages {
            let result = p.free_pages(&ids);
            refused(&p, &before, result, kind);
        }
        for (start, len) in [(usize::MAX, 1), (1, usize::MAX), (7, 0), (6, 1), (0, 7)] {
            let result = p.free_segment(&out, start, len);
            if len == 0 {
                // An empty segment inside or at the end of the row frees nothing...
                assert!(start > out.len() || result.is_ok());
            }
            if let Err(e) = result {
                assert_eq!(e.kind(), ErrorKind::BufferTooSmall, "{start} {len}: {e}");
            }
            assert_eq!(facts(&p), before);
        }
        p.free_segment(&out, 6, 0).unwrap();
        let bad_rewinds: Vec<(Vec<i64>, ErrorKind)> = if ps > 1 {
            vec![
                (vec![0], ErrorKind::ReservedSlot),
                (vec![i64::MIN], ErrorKind::IndexOutOfRange),
                (vec![out[5] + 1], ErrorKind::LastLocMismatch),
                (vec![out[4], out[5]], ErrorKind::LastLocMismatch),
                (vec![free_page_slot], ErrorKind::NotAllocated),
            ]
        } else {
            vec![
                (vec![0], ErrorKind::ReservedSlot),
                (vec![out[5], out[5]], ErrorKind::LastLocMismatch),
                (vec![free_page_slot], ErrorKind::NotAllocated),
            ]
        };
        for (kept, kind) in bad_rewinds {
            let result = p.rewind(&kept);
            refused(&p, &before, result, kind);
        }
        p.free::<i64>(&[]).unwrap();
        assert_eq!(facts(&p), before);
        p.free(&out).unwrap();
        let before = facts(&p);
        let result = p.free(&out);
        refused(&p, &before, result, ErrorKind::DoubleFree);
        assert_eq!(p.available_size(), p4 * 16);
    }
}

#[test]
fn group_snapshot_and_foreign_object_edges() {
    let mut a = pool(64, 4, true);
    let mut b = pool(64, 4, true);
    let mut out = [0i64; 8];
    a.alloc(8, &mut out).unwrap();
    let before = facts(&a);
    let result = a.free_group_end();
    refused(&a, &before, result, ErrorKind::InvalidState);
    let snap_b = b.backup_state().unwrap();
    let result = a.restore_state(&snap_b);
    refused(&a, &before, result, ErrorKind::ForeignSnapshot);
    a.free_group_begin().unwrap();
    let before = facts(&a);
    let result = a.free_group_begin();
    refused(&a, &before, result, ErrorKind::InvalidState);
    refused(&a, &before, a.backup_state(), ErrorKind::InvalidState);
    a.free(&out[..1]).unwrap();
    let before = facts(&a);
    // Freed in the group: a second free of that page, by index or id, is a double free.
    let result = a.free(&out[1..2]);
    refused(&a, &before, result, ErrorKind::DoubleFree);
    let result = a.free_pages(&[out[0] / 4]);
    refused(&a, &before, result, ErrorKind::DoubleFree);
    let result = a.rewind(&out[..1]);
    refused(&a, &before, result, ErrorKind::NotAllocated);
    a.free_group_end().unwrap();
    // Staged under need_sort: freeing again is still a double free.
    let before = facts(&a);
    let result = a.free(&out[..1]);
    refused(&a, &before, result, ErrorKind::DoubleFree);
    assert_eq!(a.available_size() + a.stats().pages_in_use * 4, 64);
    // Reservations: another pool's, finished twice, after clear / restore, overrun.
    let mut res = a.reserve_decode(&[0i64], &[-1i64], 2).unwrap();
    let before_b = facts(&b);
    let mut slot = [0i64; 1];
    let result = b.reservation_step(&mut res, &mut slot);
    refused(&b, &before_b, result, ErrorKind::InvalidArgument);
    let result = b.finish_reservation(&mut res, 0);
    refused(&b, &before_b, result, ErrorKind::InvalidArgument);
    b.abandon_reservation(&mut res);
    assert!(!res.is_finished());
    assert_eq!(facts(&b), before_b);
    let before = facts(&a);
    let result = a.finish_reservation(&mut res, 1);
    refused(&a, &before, result, ErrorKind::InvalidArgument);
    let result = a.finish_reservation(&mut res, u32::MAX);
    refused(&a, &before, result, ErrorKind::InvalidArgument);
    a.reservation_step(&mut res, &mut slot).unwrap();
    a.reservation_step(&mut res, &mut slot).unwrap();
    let before = facts(&a);
    let result = a.reservation_step(&mut res, &mut slot);
    refused(&a, &before, result, ErrorKind::InvalidState);
    a.finish_reservation(&mut res, 2).unwrap();
    let before = facts(&a);
    let result = a.finish_reservation(&mut res, 2);
    refused(&a, &before, result, ErrorKind::InvalidState);
    let result = a.reservation_step(&mut res, &mut slot);
    refused(&a, &before, result, ErrorKind::InvalidState);
    let snap = a.backup_state().unwrap();
    let mut res = a.reserve_decode(&[0i64], &[-1i64], 3).unwrap();
    a.restore_state(&snap).unwrap();
    let before = facts(&a);
    let result = a.finish_reservation(&mut res, 0);
    refused(&a, &before, result, ErrorKind::InvalidState);
    let result = a.reservation_step(&mut res, &mut slot);
    refused(&a, &before, result, ErrorKind::InvalidState);
    let mut res = a.reserve_decode(&[0i64], &[-1i64], 3).unwrap();
    a.clear();
    let before = facts(&a);
    let result = a.finish_reservation(&mut res, 0);
    refused(&a, &before, result, ErrorKind::InvalidState);
    a.abandon_reservation(&mut res);
    assert_eq!(facts(&a), before);
    assert_eq!(a.available_size(), 64);
    // Bad reservation arguments.
    for (lens, last, steps, kind) in [
        (vec![0i64], vec![-1i64], 0u32, ErrorKind::InvalidArgument),
        (
            vec![0],
            vec![-1],
            MAX_RESERVED_STEPS + 1,
            ErrorKind::InvalidArgument,
        ),
        (vec![0], vec![-1], u32::MAX, ErrorKind::InvalidArgument),
        (vec![-1], vec![-1], 1, ErrorKind::InvalidLengths),
        (vec![i64::MIN], vec![-1], 1, ErrorKind::InvalidLengths),
        (vec![i64::MAX], vec![-1], 1, ErrorKind::InvalidLengths),
        (vec![63], vec![-1], 2, ErrorKind::InvalidLengths),
        (vec![0, 0], vec![-1], 1, ErrorKind::InvalidLengths),
        (vec![3], vec![-1], 1, ErrorKind::IndexOutOfRange),
        (vec![0; 17], vec![-1; 17], 1, ErrorKind::OutOfSlots),
    ] {
        let result = a.reserve_decode(&lens, &last, steps);
        refused(&a, &before, result, kind);
    }
    // A reservation's held page cannot be freed, rewound or continued.
    let mut res = a.reserve_decode(&[0i64], &[-1i64], 2).unwrap();
    a.reservation_step(&mut res, &mut slot).unwrap();
    let before = facts(&a);
    let result = a.free(&slot);
    refused(&a, &before, result, ErrorKind::InvalidState);
    let result = a.rewind(&slot);
    refused(&a, &before, result, ErrorKind::InvalidState);
    let result = a.alloc_decode(&[2], &slot, &mut [0i64]);
    refused(&a, &before, result, ErrorKind::InvalidState);
    a.finish_reservation(&mut res, 1).unwrap();
    a.free(&slot).unwrap();
    assert_eq!(a.available_size(), 64);
}

#[test]
fn table_edges() {
    let bad_shapes = [
        TableShape {
            rows: 0,
            row_stride: 8,
            row_len: 8,
        },
        TableShape {
            rows: 2,
            row_stride: 8,
            row_len: 0,
        },
        TableShape {
            rows: 2,
            row_stride: 4,
            row_len: 8,
        },
        TableShape {
            rows: u64::MAX,
            row_stride: u64::MAX,
            row_len: u64::MAX,
        },
        TableShape {
            rows: 1 << 32,
            row_stride: 1,
            row_len: 1,
        },
        TableShape {
            rows: 3,
            row_stride: u64::MAX / 2,
            row_len: 1,
        },
    ];
    let mut data = vec![0i64; 64];
    for shape in bad_shapes {
        let err = ReqTable::new(&mut data[..], shape).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{shape:?}");
    }
    let shape = TableShape {
        rows: 4,
        row_stride: 16,
        row_len: 16,
    };
    let err = ReqTable::new(&mut data[..63], shape).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::BufferTooSmall);
    let mut table = ReqTable::new(&mut data[..], shape).unwrap();
    let mut p = pool(64, 4, false);
    p.alloc_extend_rows::<i64, i64>(&mut table, &[1], &[0], &[6], 6, None)
        .unwrap();
    let before = facts(&p);
    let bad: Vec<BadExtend> = vec![
        (vec![4], vec![0], vec![1], 1, ErrorKind::IndexOutOfRange),
        (vec![-1], vec![0], vec![1], 1, ErrorKind::IndexOutOfRange),
        (
            vec![i64::MIN],
            vec![0],
            vec![1],
            1,
            ErrorKind::IndexOutOfRange,
        ),
        (
            vec![0, 0],
            vec![0, 0],
            vec![1, 1],
            2,
            ErrorKind::InvalidArgument,
        ),
        (vec![0], vec![0], vec![17], 17, ErrorKind::BufferTooSmall),
        (vec![0, 2], vec![0], vec![1], 1, ErrorKind::InvalidLengths),
        (vec![1], vec![5], vec![7], 2, ErrorKind::LastLocMismatch),
        (vec![0], vec![3], vec![4], 1, ErrorKind::ReservedSlot),
    ];
    for (rows, prefix, seq, n, kind) in bad {
        let result = p.alloc_extend_rows::<i64, i64>(&mut table, &rows, &prefix, &seq, n, None);
        refused(&p, &before, result, kind);
    }
    let table_before: Vec<i64> = (0..4).flat_map(|r| table.row(r).to_vec()).collect();
    for (rows, seq, kind) in [
        (vec![1i64], vec![0i64], ErrorKind::InvalidLengths),
        (vec![1], vec![17], ErrorKind::BufferTooSmall),
        (vec![9], vec![7], ErrorKind::IndexOutOfRange),
        (vec![1, 1], vec![7, 7], ErrorKind::InvalidArgument),
        (vec![1], vec![6], ErrorKind::LastLocMismatch),
    ] {
        let result = p.alloc_decode_rows::<i64, i64>(&mut table, &rows, &seq, None);
        refused(&p, &before, result, kind);
    }
    for (rows, starts, ends, kind) in [
        (
            vec![1i64],
            vec![0i64],
            vec![17i64],
            ErrorKind::InvalidLengths,
        ),
        (vec![1], vec![-1], vec![6], ErrorKind::InvalidLengths),
        (vec![1], vec![4], vec![2], ErrorKind::InvalidLengths),
        (vec![1], vec![1], vec![6], ErrorKind::Unaligned),
        (
            vec![1, 1],
            vec![0, 0],
            vec![6, 6],
            ErrorKind::InvalidArgument,
        ),
        (vec![1], vec![0, 0], vec![6], ErrorKind::InvalidLengths),
        (vec![5], vec![0], vec![6], ErrorKind::IndexOutOfRange),
        (vec![0], vec![0], vec![1], ErrorKind::ReservedSlot),
    ] {
        let result = p.free_rows(&table, &rows, &starts, &ends);
        refused(&p, &before, result, kind);
    }
    let after: Vec<i64> = (0..4).flat_map(|r| table.row(r).to_vec()).collect();
    assert_eq!(after, table_before, "a refused call wrote the table");
    // Page tables: short outputs, negative lengths, and totals past int32 are refused.
    let (mut indptr, mut indices, mut last) = ([0i32; 3], [0i32; 8], [0i32; 2]);
    for (rows, seq, kind) in [
        (vec![1i64, 1], vec![6i64, 6], None),
        (vec![1], vec![-1], Some(ErrorKind::InvalidLengths)),
        (vec![1], vec![i64::MIN], Some(ErrorKind::InvalidLengths)),
        (vec![1], vec![17], Some(ErrorKind::BufferTooSmall)),
        (vec![7], vec![1], Some(ErrorKind::IndexOutOfRange)),
        // Three rows need four kv_indptr entries.
        (
            vec![1, 1, 1],
            vec![6, 6, 6],
            Some(ErrorKind::BufferTooSmall),
        ),
    ] {
        let result = p.page_table(&table, &rows, &seq, &mut indptr, &mut indices, &mut last);
        match kind {
            None => assert_eq!(result.unwrap(), 4),
            Some(kind) => assert_eq!(result.unwrap_err().kind(), kind),
        }
    }
    assert_eq!(facts(&p), before);
}

#[test]
fn admission_and_scheduler_edges() {
    // Adder configs and candidates the budgets cannot count are refused.
    let base = AdderConfig::sglang_defaults(16);
    for config in [
        AdderConfig {
            page_size: 0,
            ..base
        },
        AdderConfig {
            page_size: u64::MAX,
            ..base
        },
        AdderConfig {
            max_prefill_tokens: 0,
            ..base
        },
        AdderConfig {
            chunked_prefill_size: Some(u64::MAX),
            ..base
        },
        AdderConfig {
            new_token_ratio: f64::NAN,
            ..base
        },
        AdderConfig {
            new_token_ratio: -0.5,
            ..base
        },
        AdderConfig {
            clip_max_new_tokens: 0,
            ..base
        },
        AdderConfig {
            num_mixed_decode_tokens: u64::MAX,
            ..base
        },
        AdderConfig {
            max_chunked_requests: 0,
            ..base
        },
    ] {
        let err = PrefillAdder::try_new(config, 100, 0, &[], 0).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{config:?}");
    }
    let err = PrefillAdder::try_new(base, u64::MAX, 1, &[], 0).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument);
    let mut adder = PrefillAdder::try_new(base, 1000, 0, &[], 0).unwrap();
    let before = adder.budget().clone();
    for c in [
        kvpool::admission::Candidate {
            input_len: 5,
            prefix_len: 6,
            ..Default::default()
        },
        kvpool::admission::Candidate {
            input_len: 5,
            prefix_len: 4,
            prefix_evictable: 5,
            ..Default::default()
        },
        kvpool::admission::Candidate {
            input_len: u64::MAX,
            ..Default::default()
        },
        kvpool::admission::Candidate {
            input_len: i64::MAX as u64,
            ..Default::default()
        },
    ] {
        let err = adder.try_add_one_req(&c).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidLengths, "{c:?}");
    }
    for c in [
        ChunkedCandidate {
            prefix_len: u64::MAX,
            remaining: 1,
            ..Default::default()
        },
        ChunkedCandidate {
            prefix_len: i64::MAX as u64,
            remaining: 0,
            ..Default::default()
        },
    ] {
        let err = adder.try_add_chunked_req(c).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidLengths, "{c:?}");
    }
    assert_eq!(adder.budget(), &before);
    assert_eq!(adder.admitted(), 0);
    // Budget mutators saturate.
    let mut b = PrefillBudget::try_new(&base, u64::MAX >> 1, 0, &[]).unwrap();
    b.unlock_prefix(u64::MAX);
    b.reserve(u64::MAX, u64::MAX);
    b.reserve(u64::MAX, u64::MAX);
    b.lock_prefix(u64::MAX);
    b.lock_prefix(u64::MAX);
    b.lock_prefix(u64::MAX);
    let _ = b.cur_rem_tokens();
    assert_eq!(b.state(), AddResult::NoToken);

    // Scheduler configs.
    let ok = SchedulerConfig::new(1 << 16, 16);
    for config in [
        SchedulerConfig { page_size: 0, ..ok },
        SchedulerConfig { capacity: 0, ..ok },
        SchedulerConfig {
            capacity: u64::MAX,
            ..ok
        },
        SchedulerConfig {
            page_size: 1 << 17,
            ..ok
        },
        SchedulerConfig {
            max_prefill_tokens: 0,
            ..ok
        },
        SchedulerConfig {
            chunked_prefill_size: Some(0),
            ..ok
        },
        SchedulerConfig {
            chunked_prefill_size: Some(u64::MAX),
            ..ok
        },
        SchedulerConfig {
            truncation_align_size: Some(1 << 14),
            ..ok
        },
        SchedulerConfig {
            clip_max_new_tokens: 0,
            ..ok
        },
        SchedulerConfig {
            max_chunked_requests: 0,
            ..ok
        },
    ] {
        let err = Scheduler::new(config).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{config:?}");
    }
    let mut s = Scheduler::new(ok).unwrap();
    let digest = s.digest();
    for (spec, kind) in [
        (
            RequestSpec {
                id: 1,
                input_len: 0,
                ..Default::default()
            },
            ErrorKind::InvalidLengths,
        ),
        (
            RequestSpec {
                id: 1,
                input_len: u64::MAX,
                output_len: 1,
                ..Default::default()
            },
            ErrorKind::InvalidLengths,
        ),
        (
            RequestSpec {
                id: 1,
                input_len: 10,
                prefix_len: 10,
                ..Default::default()
            },
            ErrorKind::InvalidLengths,
        ),
        (
            RequestSpec {
                id: 1,
                input_len: 10,
                prefix_len: 4,
                prefix_evictable: 5,
                ..Default::default()
            },
            ErrorKind::InvalidLengths,
        ),
    ] {
        let err = s.submit(spec).unwrap_err();
        assert_eq!(err.kind(), kind);
    }
    assert_eq!(s.digest(), digest);
    let huge = RequestSpec {
        id: 1,
        input_len: u64::MAX,
        max_new_tokens: u64::MAX,
        priority: i64::MIN,
        ..Default::default()
    };
    assert!(matches!(
        s.submit(huge).unwrap(),
        SubmitOutcome::Unfittable { .. }
    ));
    let spec = RequestSpec {
        id: u64::MAX,
        input_len: 100,
        max_new_tokens: u64::MAX,
        priority: i64::MIN,
        prefix_path: vec![u64::MAX, 3, u64::MAX, 3],
        ..Default::default()
    };
    s.submit(spec.clone()).unwrap();
    let digest = s.digest();
    assert_eq!(s.submit(spec).unwrap_err().kind(), ErrorKind::InvalidState);
    assert_eq!(
        s.update_prefix(u64::MAX, 100, 0, None).unwrap_err().kind(),
        ErrorKind::InvalidLengths
    );
    assert_eq!(
        s.update_prefix(u64::MAX, 10, 11, None).unwrap_err().kind(),
        ErrorKind::InvalidLengths
    );
    assert_eq!(
        s.update_prefix(7, 0, 0, None).unwrap_err().kind(),
        ErrorKind::InvalidArgument
    );
    assert_eq!(
        s.finish(u64::MAX).unwrap_err().kind(),
        ErrorKind::InvalidState
    );
    assert_eq!(s.finish(7).unwrap_err().kind(), ErrorKind::InvalidArgument);
    assert_eq!(s.abort(7).unwrap_err().kind(), ErrorKind::InvalidArgument);
    let err = s.try_step(u64::MAX, 1, true).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument);
    assert_eq!(s.digest(), digest);
    // Every queue policy over odd prefix paths and extreme priorities.
    for policy in [
        kvpool::admission::Policy::Fcfs,
        kvpool::admission::Policy::Lof,
        kvpool::admission::Policy::Lpm,
        kvpool::admission::Policy::DfsWeight,
        kvpool::admission::Policy::Random { seed: u64::MAX },
    ] {
        let mut s = Scheduler::new(SchedulerConfig {
            policy,
            priority: Some(kvpool::admission::PriorityConfig {
                low_values_first: false,
                preemption_threshold: Some(i64::MAX),
            }),
            ..ok
        })
        .unwrap();
        for id in 0..40u64 {
            let spec = RequestSpec {
                id,
                input_len: 1 + id * 37 % 300,
                prefix_len: id % 3,
                max_new_tokens: [0, 1, u64::MAX][id as usize % 3],
                priority: [i64::MIN, 0, i64::MAX][id as usize % 3],
                prefix_path: (0..id % 5)
                    .map(|k| [u64::MAX, id % 4, k][k as usize % 3])
                    .collect(),
                ..Default::default()
            };
            s.submit(spec).unwrap();
        }
        let mut available = 1u64 << 16;
        for step in 0..200 {
            let plan = s.try_step(available, 0, step % 7 != 3).unwrap();
            let used: u64 =
                plan.prefill.iter().map(|e| e.extend_len).sum::<u64>() + plan.decode.len() as u64;
            available = available.saturating_sub(used);
            for ev in plan
                .retracted
                .iter()
                .chain(&plan.preempted)
                .chain(&plan.aborted)
            {
                available += ev.kv_len - ev.prefix_len;
            }
            for &id in plan.decode.iter().take(2) {
                if let Ok(released) = s.finish_released(id) {
                    available += released.kv_len - released.prefix_len;
                }
            }
        }
    }
}

// ---- randomized: valid and invalid calls against a model --------------------------------

/// What the test knows: each request's slots in order, and the pages freed in an open group.
#[derive(Clone, Debug, Default)]
struct Model {
    reqs: Vec<Vec<i64>>,
    pending: BTreeSet<u64>,
}

impl Model {
    fn live(&self) -> HashSet<i64> {
        self.reqs.iter().flatten().copied().collect()
    }

    /// The `last_loc` of each request of `batch`: its last slot, -1 for none.
    fn last_locs(&self, batch: &[usize]) -> Vec<i64> {
        batch
            .iter()
            .map(|&i| self.reqs[i].last().copied().unwrap_or(-1))
            .collect()
    }
}

struct Driver {
    rng: Rng,
    pool: Pool,
    model: Model,
    ps: u64,
    size: u64,
    group: bool,
    snapshot: Option<(kvpool::Snapshot, Model)>,
    calls: u64,
}

impl Driver {
    /// The pool's accounting against the model: nothing lost, nothing handed out twice.
    fn check(&self) {
        let pool = &self.pool;
        let stats = pool.stats();
        assert_eq!(
            pool.available_size() + stats.pages_in_use * self.ps,
            self.size,
            "call {}",
            self.calls
        );
        let census = pool.free_page_census();
        let free: HashSet<u32> = census.iter().copied().collect();
        assert_eq!(free.len(), census.len(), "a page is free twice");
        assert_eq!(census.len() as u64 * self.ps, pool.available_size());
        let mut in_use = BTreeSet::new();
        let mut seen = HashSet::new();
        for &slot in self.model.reqs.iter().flatten() {
            assert!(seen.insert(slot), "slot {slot} is held twice");
            let page = slot as u64 / self.ps;
            assert!(page >= 1 && page <= pool.num_pages() as u64);
            assert!(
                !free.contains(&(page as u32)),
                "live slot {slot} is in a free page"
            );
            in_use.insert(page);
        }
        for page in &self.model.pending {
            assert!(!free.contains(&(*page as u32)));
            assert!(in_use.insert(*page), "pending page {page} is live");
        }
        assert_eq!(
            in_use.len() as u64,
            stats.pages_in_use,
            "call {}",
            self.calls
        );
    }

    fn fresh(&self, slots: &[i64]) {
        let live = self.model.live();
        let mut distinct = HashSet::new();
        for &s in slots {
            assert!(!live.contains(&s), "slot {s} handed out while live");
            assert!(distinct.insert(s), "slot {s} handed out twice in one call");
        }
    }

    /// Distinct requests, `k` at most.
    fn pick(&mut self, k: usize) -> Vec<usize> {
        let mut idx: Vec<usize> = (0..self.model.reqs.len()).collect();
        self.rng.shuffle(&mut idx);
        idx.truncate(k);
        idx
    }

    /// An allocation that may run short: on `Err` it must be a shortage that changed
    /// nothing but (under need_sort) the staged frees' merge.
    fn expect_alloc(&self, result: &Result<(), kvpool::PoolError>, before: &Facts) -> bool {
        match result {
            Ok(()) => true,
            Err(e) => {
                assert_eq!(e.kind(), ErrorKind::OutOfSlots, "{e}");
                assert_eq!(self.pool.available_size(), before.available);
                assert_eq!(self.pool.stats().pages_in_use, before.pages_in_use);
                if !self.pool.info().need_sort {
                    assert_eq!(&facts(&self.pool), before);
                }
                false
            }
        }
    }

    fn extend(&mut self) {
        if self.model.reqs.len() < 12 && self.rng.chance(50) {
            self.model.reqs.push(Vec::new());
        }
        let k = 1 + self.rng.below(4) as usize;
        let batch = self.pick(k);
        let mut prefix = Vec::new();
        let mut seq = Vec::new();
        for &i in &batch {
            let len = self.model.reqs[i].len() as i64;
            prefix.push(len);
            seq.push(len + self.rng.below(3 * self.ps + 2) as i64);
        }
        let last = self.model.last_locs(&batch);
        let n: i64 = seq.iter().zip(&prefix).map(|(s, p)| s - p).sum();
        if seq.iter().any(|&s| s as u64 > self.size) {
            return;
        }
        let before = facts(&self.pool);
        let mut out = vec![0i64; n as usize];
        let result = self
            .pool
            .alloc_extend(&prefix, &seq, &last, n as u64, &mut out);
        if self.expect_alloc(&result, &before) {
            self.fresh(&out);
            let mut at = 0;
            for (k, &i) in batch.iter().enumerate() {
                let t = (seq[k] - prefix[k]) as usize;
                self.model.reqs[i].extend_from_slice(&out[at..at + t]);
                at += t;
            }
        }
    }

    fn decode(&mut self) {
        let k = 1 + self.rng.below(5) as usize;
        let batch = self.pick(k);
        let seq: Vec<i64> = batch
            .iter()
            .map(|&i| self.model.reqs[i].len() as i64 + 1)
            .collect();
        if seq.iter().any(|&s| s as u64 > self.size) {
            return;
        }
        let last = self.model.last_locs(&batch);
        let before = facts(&self.pool);
        let mut out = vec![0i64; batch.len()];
        let result = self.pool.alloc_decode(&seq, &last, &mut out);
        if self.expect_alloc(&result, &before) {
            self.fresh(&out);
            for (k, &i) in batch.iter().enumerate() {
                self.model.reqs[i].push(out[k]);
            }
        }
    }

    fn free(&mut self) {
        let Some(&i) = self.pick(1).first() else {
            return;
        };
        let slots = std::mem::take(&mut self.model.reqs[i]);
        if slots.is_empty() {
            return;
        }
        let pages: Vec<i64> = {
            let mut p: Vec<i64> = slots.iter().map(|&s| s / self.ps as i64).collect();
            p.dedup();
            p
        };
        match self.rng.below(3) {
            0 => self.pool.free(&slots).unwrap(),
            1 => self.pool.free_pages(&pages).unwrap(),
            _ => self.pool.free_segment(&slots, 0, slots.len()).unwrap(),
        }
        if self.group {
            self.model.pending.extend(pages.iter().map(|&p| p as u64));
        }
        self.model.reqs.swap_remove(i);
    }

    fn rewind(&mut self) {
        let Some(&i) = self.pick(1).first() else {
            return;
        };
        let slots = &self.model.reqs[i];
        let Some(&tail) = slots.last() else {
            return;
        };
        let page = tail / self.ps as i64;
        let first = slots
            .iter()
            .position(|&s| s / self.ps as i64 == page)
            .unwrap();
        let keep = first + 1 + self.rng.below((slots.len() - first) as u64) as usize;
        let kept = slots[keep - 1];
        self.pool.rewind(&[kept]).unwrap();
        self.model.reqs[i].truncate(keep);
    }

    fn reserve(&mut self) {
        let k = 1 + self.rng.below(4) as usize;
        let batch = self.pick(k);
        let steps = 1 + self.rng.below(5) as u32;
        let lens: Vec<i64> = batch
            .iter()
            .map(|&i| self.model.reqs[i].len() as i64)
            .collect();
        if lens
            .iter()
            .any(|&l| l as u64 + u64::from(steps) > self.size)
        {
            return;
        }
        let last = self.model.last_locs(&batch);
        let before = facts(&self.pool);
        let mut res = match self.pool.reserve_decode(&lens, &last, steps) {
            Ok(res) => res,
            Err(e) => {
                assert_eq!(e.kind(), ErrorKind::OutOfSlots, "{e}");
                assert_eq!(facts(&self.pool), before, "a refused reservation merged");
                return;
            }
        };
        let used = self.rng.below(u64::from(steps) + 1) as u32;
        let mut out = vec![0i64; batch.len()];
        for s in 0..used {
            self.pool.reservation_step(&mut res, &mut out).unwrap();
            self.fresh(&out);
            for (k, &i) in batch.iter().enumerate() {
                self.model.reqs[i].push(out[k]);
            }
            if batch.is_empty() {
                continue;
            }
            // Held now: a free or continuation of the step's pages is refused.
            let held = facts(&self.pool);
            let result = self.pool.free(&out[..1]);
            refused(&self.pool, &held, result, ErrorKind::InvalidState);
            let result = self.pool.rewind(&out[..1]);
            refused(&self.pool, &held, result, ErrorKind::InvalidState);
            if s + 1 < steps {
                let result =
                    self.pool
                        .alloc_decode(&[lens[0] + i64::from(s) + 2], &out[..1], &mut [0i64]);
                refused(&self.pool, &held, result, ErrorKind::InvalidState);
            }
        }
        let mid = facts(&self.pool);
        let result = self.pool.finish_reservation(&mut res, used.wrapping_add(1));
        refused(&self.pool, &mid, result, ErrorKind::InvalidArgument);
        if self.rng.chance(20) && used > 0 {
            // Abandoned: the pages stay allocated with every step's fill point; the test
            // gives the reserved requests' later slots up by freeing them whole.
            self.pool.abandon_reservation(&mut res);
            for &i in &batch {
                let slots = std::mem::take(&mut self.model.reqs[i]);
                if !slots.is_empty() {
                    self.pool.free(&slots).unwrap();
                    if self.group {
                        let mut p: Vec<u64> = slots.iter().map(|&s| s as u64 / self.ps).collect();
                        p.dedup();
                        self.model.pending.extend(p);
                    }
                }
            }
            // Pages taken for unused steps of requests that had no slot left to free them
            // by: free them by page id (they are allocated, no model slot lies in them).
            let live_pages: HashSet<u64> = self
                .model
                .live()
                .iter()
                .map(|&s| s as u64 / self.ps)
                .collect();
            let census: HashSet<u32> = self.pool.free_page_census().into_iter().collect();
            let stray: Vec<i64> = (1..=self.pool.num_pages())
                .filter(|p| !census.contains(p))
                .filter(|p| !live_pages.contains(&u64::from(*p)))
                .filter(|p| !self.model.pending.contains(&u64::from(*p)))
                .map(i64::from)
                .collect();
            if !stray.is_empty() {
                self.pool.free_pages(&stray).unwrap();
                if self.group {
                    self.model.pending.extend(stray.iter().map(|&p| p as u64));
                }
            }
        } else {
            self.pool.finish_reservation(&mut res, used).unwrap();
            let done = facts(&self.pool);
            let result = self.pool.finish_reservation(&mut res, used);
            refused(&self.pool, &done, result, ErrorKind::InvalidState);
        }
        self.model.reqs.retain(|r| !r.is_empty());
    }

    /// A call that must be refused, with its kind, changing nothing.
    fn invalid(&mut self) {
        let before = facts(&self.pool);
        let ps = self.ps as i64;
        let live: Vec<(usize, i64)> = self
            .model
            .reqs
            .iter()
            .enumerate()
            .filter_map(|(i, r)| r.last().map(|&l| (i, l)))
            .collect();
        let free_slot = self
            .pool
            .free_page_census()
            .first()
            .map(|&p| i64::from(p) * ps);
        let mut out = vec![0i64; 64];
        let (result, kind): (Result<(), kvpool::PoolError>, ErrorKind) = match self.rng.below(14) {
            0 => (
                self.pool.alloc_extend(&[0, 0], &[1], &[-1i64], 1, &mut out),
                ErrorKind::InvalidLengths,
            ),
            1 => (
                self.pool.alloc_extend(&[0], &[2], &[-1i64], 3, &mut out),
                ErrorKind::InvalidLengths,
            ),
            2 => {
                let bad = [-1, i64::MIN, i64::MAX][self.rng.below(3) as usize];
                (
                    self.pool
                        .alloc_extend(&[bad], &[bad], &[-1i64], 0, &mut out),
                    ErrorKind::InvalidLengths,
                )
            }
            // A continuation from a free (or staged) page.
            3 => match free_slot {
                Some(slot) => (
                    self.pool
                        .alloc_extend(&[ps + 1], &[ps + 2], &[slot], 1, &mut out),
                    ErrorKind::NotAllocated,
                ),
                None => return,
            },
            4 => (
                self.pool.alloc_decode(&[0], &[-1i64], &mut out),
                ErrorKind::InvalidLengths,
            ),
            5 => (
                self.pool.alloc_decode(&[1, 1], &[-1i64, -1], &mut out[..1]),
                ErrorKind::BufferTooSmall,
            ),
            6 => match live.first() {
                Some(&(_, l)) => (self.pool.free(&[l, l]), ErrorKind::DoubleFree),
                None => return,
            },
            7 => (self.pool.free(&[0i64]), ErrorKind::ReservedSlot),
            8 => {
                let bad = [-1, i64::MIN, i64::MAX][self.rng.below(3) as usize];
                (self.pool.free(&[bad]), ErrorKind::IndexOutOfRange)
            }
            9 => match free_slot {
                Some(slot) => (self.pool.free(&[slot]), ErrorKind::DoubleFree),
                None => return,
            },
            10 => (
                self.pool
                    .free_pages(&[i64::from(self.pool.num_pages()) + 1]),
                ErrorKind::IndexOutOfRange,
            ),
            11 => (
                self.pool.free_segment(&[1i64], usize::MAX, 2),
                ErrorKind::BufferTooSmall,
            ),
            12 => match live.iter().find(|&&(i, l)| {
                // A stale continuation: the request's next-to-last slot, same page.
                let r = &self.model.reqs[i];
                ps > 1 && r.len() >= 2 && r[r.len() - 2] / ps == l / ps
            }) {
                Some(&(i, _)) => {
                    let r = &self.model.reqs[i];
                    let len = r.len() as i64;
                    (
                        self.pool.alloc_decode(&[len], &[r[r.len() - 2]], &mut out),
                        ErrorKind::LastLocMismatch,
                    )
                }
                None => return,
            },
            _ => {
                if self.group {
                    (self.pool.free_group_begin(), ErrorKind::InvalidState)
                } else {
                    (self.pool.free_group_end(), ErrorKind::InvalidState)
                }
            }
        };
        refused(&self.pool, &before, result, kind);
        assert!(
            out.iter().all(|&x| x == 0),
            "a refused call wrote its output"
        );
    }

    fn step(&mut self) {
        self.calls += 1;
        match self.rng.below(100) {
            0..=24 => self.extend(),
            25..=44 => self.decode(),
            45..=59 => self.free(),
            60..=64 => self.rewind(),
            65..=72 => self.reserve(),
            73..=89 => self.invalid(),
            90..=92 => {
                if self.group {
                    self.pool.free_group_end().unwrap();
                    self.model.pending.clear();
                } else {
                    self.pool.free_group_begin().unwrap();
                }
                self.group = !self.group;
            }
            93..=95 if !self.group => {
                let restore = self.rng.chance(50);
                if let (Some((snap, model)), true) = (&self.snapshot, restore) {
                    self.pool.restore_state(snap).unwrap();
                    self.model = model.clone();
                } else {
                    self.snapshot = Some((self.pool.backup_state().unwrap(), self.model.clone()));
                }
            }
            96 => {
                self.pool.clear();
                self.model = Model::default();
                self.group = false;
            }
            97..=99 => self.pool.merge_and_sort_free(),
            _ => {}
        }
        self.check();
    }
}

#[test]
fn random_valid_and_invalid_calls_keep_the_books() {
    for seed in 0..24u64 {
        let ps = [1u64, 2, 3, 16][seed as usize % 4];
        let size = ps * 48;
        let mut d = Driver {
            rng: Rng(0xA11_ED6E ^ seed),
            pool: pool(size, ps as u32, seed % 3 == 1),
            model: Model::default(),
            ps,
            size,
            group: false,
            snapshot: None,
            calls: 0,
        };
        for _ in 0..1500 {
            d.step();
        }
        let stats = d.pool.stats();
        assert!(stats.rejected_calls > 100, "seed {seed}: {stats:?}");
        assert!(stats.pages_allocated > 100, "seed {seed}: {stats:?}");
    }
}
