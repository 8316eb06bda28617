//! State digests on the host: the pool digest against the definition's reference
//! implementation (`kvpool::digest::pool_digest`, from the pool's free list, staged pages and
//! page map), pinned values (so other implementations can check theirs), what the digest
//! must and must not see, and tensor-parallel ranks in miniature: several engines (scheduler and
//! pool) driven by the same seeded workload agree step after step, and one perturbed
//! engine is caught at exactly the step it diverged. The device pool's digest is compared
//! with the host's in tests/cuda_lockstep.rs and tests/cuda_multi_device.rs.

mod rng;

use std::collections::BTreeMap;
use std::ptr::null_mut;

use kvpool::admission::{Phase, RequestSpec, Scheduler, SchedulerConfig, SubmitOutcome};
use kvpool::digest::{page_state, pool_digest};
use kvpool::ffi::*;
use kvpool::host::PageState;
use kvpool::{BackendKind, IndexType, Pool, PoolConfig};

use rng::Rng;

fn pool(num_pages: u64, ps: u64, need_sort: bool) -> Pool {
    Pool::new(PoolConfig {
        size: num_pages * ps,
        page_size: ps as u32,
        need_sort,
        index_type: IndexType::I64,
        backend: BackendKind::Host,
    })
    .unwrap()
}

/// The digest recomputed from the pool's observable state with the reference implementation.
fn reference(pool: &Pool) -> u64 {
    let info = pool.info();
    let storage = pool.storage();
    let census = pool.free_page_census();
    let free_len = storage.free_len();
    assert_eq!(census.len(), free_len + storage.staged_len());
    let pages: Vec<(u64, u32)> = (0..=info.num_pages)
        .map(|p| {
            let state = match storage.page_state(p).expect("a page of the pool") {
                PageState::Reserved => page_state::RESERVED,
                PageState::Free => page_state::FREE,
                PageState::Staged => page_state::STAGED,
                PageState::Allocated | PageState::Held => page_state::ALLOCATED,
                PageState::Pending => page_state::PENDING,
            };
            (state, storage.page_fill(p).expect("a page of the pool"))
        })
        .collect();
    pool_digest(
        info.page_size,
        info.need_sort,
        info.in_free_group,
        false,
        &census[..free_len],
        &census[free_len..],
        &pages,
    )
}

#[test]
fn pinned_values_of_the_definition() {
    // A fresh paged pool of 16 pages of 4 slots, and the same after one 5-token extend
    // (pages 1 and 2 allocated, fill points 4 and 1) — values other implementations can
    // check theirs against.
    let mut p = pool(16, 4, false);
    assert_eq!(p.digest(), 0x7319_987b_2706_b53b);
    let mut out = [0i64; 5];
    p.alloc_extend(&[0], &[5], &[-1i64], 5, &mut out).unwrap();
    assert_eq!(out, [4, 5, 6, 7, 8]);
    assert_eq!(p.digest(), reference(&p));
    let fills: Vec<(u64, u32)> = (0..=16u32)
        .map(|page| match page {
            0 => (page_state::RESERVED, 0),
            1 => (page_state::ALLOCATED, 4),
            2 => (page_state::ALLOCATED, 1),
            _ => (page_state::FREE, 0),
        })
        .collect();
    let free: Vec<u32> = (3..=16).collect();
    assert_eq!(
        p.digest(),
        pool_digest(4, false, false, false, &free, &[], &fills)
    );
    assert_eq!(p.digest(), 0xb0b4_43b8_ba96_9c7d, "{:#x}", p.digest());
}

#[test]
fn the_digest_sees_order_fill_points_staging_and_groups_but_not_staged_order() {
    let mut out = [0i64; 64];
    // Free-list order: the same pages freed in two orders.
    let (mut a, mut b) = (pool(8, 4, false), pool(8, 4, false));
    for p in [&mut a, &mut b] {
        p.alloc(8, &mut out).unwrap(); // pages 1, 2
    }
    a.free_pages(&[1i64, 2]).unwrap();
    b.free_pages(&[2i64, 1]).unwrap();
    assert_eq!(a.free_page_census().len(), b.free_page_census().len());
    assert_ne!(a.digest(), b.digest(), "free-list order");
    // Staged pages are a set: released in two orders, equal digests until a merge (which
    // sorts them anyway).
    let (mut a, mut b) = (pool(8, 4, true), pool(8, 4, true));
    for p in [&mut a, &mut b] {
        p.alloc(12, &mut out).unwrap(); // pages 1, 2, 3
    }
    a.free_pages(&[3i64]).unwrap();
    a.free_pages(&[1i64]).unwrap();
    b.free_pages(&[1i64]).unwrap();
    b.free_pages(&[3i64]).unwrap();
    assert_ne!(a.free_page_census(), b.free_page_census());
    assert_eq!(a.digest(), b.digest(), "staged pages hash as a set");
    assert_eq!(a.digest(), reference(&a));
    a.merge_and_sort_free();
    assert_ne!(a.digest(), b.digest(), "a merge changes the state");
    b.merge_and_sort_free();
    assert_eq!(a.digest(), b.digest());
    // Fill points: one slot more in a page.
    let (mut a, mut b) = (pool(8, 4, false), pool(8, 4, false));
    a.alloc_extend(&[0], &[2], &[-1i64], 2, &mut out).unwrap();
    b.alloc_extend(&[0], &[3], &[-1i64], 3, &mut out).unwrap();
    assert_ne!(a.digest(), b.digest(), "fill point");
    // A rewind moves the fill point back: equal again.
    b.rewind(&[5i64]).unwrap();
    assert_eq!(a.digest(), b.digest());
    // An open free group, and a page freed in it.
    let before = a.digest();
    a.free_group_begin().unwrap();
    assert_ne!(a.digest(), before, "group open");
    a.free(&[4i64, 5]).unwrap();
    assert_eq!(a.digest(), reference(&a));
    a.free_group_end().unwrap();
    b.free(&[4i64, 5]).unwrap();
    assert_eq!(
        a.digest(),
        b.digest(),
        "a group's frees land as plain frees do"
    );
    // Counters are not part of it; the index type and a snapshot round trip leave it alone.
    let mut c = pool(8, 4, false);
    c.alloc(4, &mut out).unwrap();
    assert!(c.alloc(1000, &mut out).is_err());
    let snapshot = c.backup_state().unwrap();
    let d = c.digest();
    c.alloc(4, &mut out).unwrap();
    assert_ne!(c.digest(), d);
    c.restore_state(&snapshot).unwrap();
    assert_eq!(c.digest(), d);
    let mut e = Pool::new(PoolConfig {
        index_type: IndexType::I32,
        ..*c.config()
    })
    .unwrap();
    e.alloc(4, &mut [0i32; 4]).unwrap();
    assert_eq!(e.digest(), d, "the index type is not part of the state");
    c.clear();
    assert_eq!(c.digest(), pool(8, 4, false).digest());
}

/// One rank's engine: a scheduler, a host pool and the KV rows of its requests, driven by a
/// seeded workload (arrivals, prefill, decode, retractions, finishes).
struct Engine {
    sched: Scheduler,
    pool: Pool,
    rng: Rng,
    next_id: u64,
    /// id -> (KV row, output tokens so far, output at which it finishes).
    live: BTreeMap<u64, (Vec<i64>, u64, u64)>,
}

impl Engine {
    fn new(seed: u64, ps: u64, need_sort: bool) -> Self {
        let num_pages = 4096 / ps.min(16) * if ps == 1 { 2 } else { 1 };
        let pool = pool(num_pages, ps, need_sort);
        let mut config = SchedulerConfig::new(pool.size(), ps);
        config.chunked_prefill_size = Some(512);
        config.max_prefill_tokens = 1024;
        Self {
            sched: Scheduler::new(config).unwrap(),
            pool,
            rng: Rng(seed),
            next_id: 1,
            live: BTreeMap::new(),
        }
    }

    fn free_row(&mut self, id: u64) {
        let row = std::mem::take(&mut self.live.get_mut(&id).expect("live").0);
        if !row.is_empty() {
            self.pool.free(&row).unwrap();
        }
    }

    fn step(&mut self) {
        if self.rng.chance(40) {
            for _ in 0..self.rng.range(1, 3) {
                let id = self.next_id;
                self.next_id += 1;
                let input_len = self.rng.range(1, 700);
                let max_new_tokens = self.rng.range(1, 80);
                let target = self.rng.range(1, max_new_tokens);
                let spec = RequestSpec {
                    id,
                    input_len,
                    max_new_tokens,
                    ..RequestSpec::default()
                };
                if self.sched.submit(spec).unwrap() == SubmitOutcome::Queued {
                    self.live.insert(id, (Vec::new(), 0, target));
                }
            }
        }
        let plan = self.sched.step(self.pool.available_size(), 0, true);
        for e in plan.retracted.iter().chain(&plan.preempted) {
            self.free_row(e.id);
        }
        for e in &plan.aborted {
            self.free_row(e.id);
            self.live.remove(&e.id);
        }
        if !plan.prefill.is_empty() {
            let (mut prefix, mut seq, mut last) = (Vec::new(), Vec::new(), Vec::new());
            for en in &plan.prefill {
                let row = &self.live[&en.id].0;
                assert_eq!(row.len() as u64, en.prefix_len);
                prefix.push(en.prefix_len as i64);
                seq.push((en.prefix_len + en.extend_len) as i64);
                last.push(row.last().copied().unwrap_or(-1));
            }
            let total: u64 = plan.prefill.iter().map(|e| e.extend_len).sum();
            let mut out = vec![0i64; total as usize];
            self.pool
                .alloc_extend(&prefix, &seq, &last, total, &mut out)
                .unwrap();
            let mut pos = 0;
            for en in &plan.prefill {
                let r = self.live.get_mut(&en.id).unwrap();
                r.0.extend_from_slice(&out[pos..pos + en.extend_len as usize]);
                pos += en.extend_len as usize;
                if !en.chunked {
                    r.1 += 1;
                }
            }
        }
        if !plan.decode.is_empty() {
            let seq: Vec<i64> = plan
                .decode
                .iter()
                .map(|id| self.live[id].0.len() as i64 + 1)
                .collect();
            let last: Vec<i64> = plan
                .decode
                .iter()
                .map(|id| *self.live[id].0.last().unwrap())
                .collect();
            let mut out = vec![0i64; seq.len()];
            self.pool.alloc_decode(&seq, &last, &mut out).unwrap();
            for (id, slot) in plan.decode.iter().zip(out) {
                let r = self.live.get_mut(id).unwrap();
                r.0.push(slot);
                r.1 += 1;
            }
        }
        let done: Vec<u64> = self
            .live
            .iter()
            .filter(|(id, r)| {
                r.1 >= r.2 && matches!(self.sched.request(**id), Some((Phase::Running, _, _)))
            })
            .map(|(&id, _)| id)
            .collect();
        for id in done {
            self.sched.finish(id).unwrap();
            self.free_row(id);
            self.live.remove(&id);
        }
    }

    fn digests(&self) -> (u64, u64) {
        (self.pool.digest(), self.sched.digest())
    }
}

/// Runs `ranks` engines from one seed for `steps` steps, comparing their digests after
/// every step (an all-gather in miniature); `perturb` = (rank, step) makes that rank keep
/// one page more at that step. Returns the first step at which the digests disagree.
fn tensor_parallel(
    ranks: usize,
    steps: u64,
    ps: u64,
    need_sort: bool,
    perturb: Option<(usize, u64)>,
) -> Option<u64> {
    let mut engines: Vec<Engine> = (0..ranks).map(|_| Engine::new(7, ps, need_sort)).collect();
    for step in 1..=steps {
        for (rank, engine) in engines.iter_mut().enumerate() {
            engine.step();
            if perturb == Some((rank, step)) {
                let mut out = vec![0i64; ps as usize];
                engine.pool.alloc(ps as usize, &mut out).unwrap();
            }
        }
        let first = engines[0].digests();
        if engines.iter().any(|e| e.digests() != first) {
            return Some(step);
        }
        if step % 250 == 0 {
            assert_eq!(engines[0].pool.digest(), reference(&engines[0].pool));
        }
    }
    let e = &engines[0];
    let s = e.sched.stats();
    assert!(
        s.prefill_steps > 100 && s.decode_steps > 100 && s.finished > 100,
        "the workload exercised too little: {s:?}"
    );
    None
}

#[test]
fn engines_driven_alike_agree_every_step_and_a_perturbed_one_is_caught_at_once() {
    for (ps, need_sort) in [(1, false), (16, false), (16, true), (64, true)] {
        assert_eq!(
            tensor_parallel(3, 3000, ps, need_sort, None),
            None,
            "page_size {ps} need_sort {need_sort}"
        );
        for (rank, step) in [(1, 1), (2, 1234)] {
            assert_eq!(
                tensor_parallel(3, 1500, ps, need_sort, Some((rank, step))),
                Some(step),
                "page_size {ps} need_sort {need_sort}: perturbation at rank {rank} step {step}"
            );
        }
    }
}

#[test]
fn schedulers_digest_their_queues() {
    let config = SchedulerConfig::new(4096, 16);
    let (mut a, mut b) = (
        Scheduler::new(config).unwrap(),
        Scheduler::new(config).unwrap(),
    );
    assert_eq!(a.digest(), b.digest());
    let spec = |id| RequestSpec {
        id,
        input_len: 100,
        max_new_tokens: 10,
        ..RequestSpec::default()
    };
    a.submit(spec(1)).unwrap();
    a.submit(spec(2)).unwrap();
    b.submit(spec(2)).unwrap();
    b.submit(spec(1)).unwrap();
    assert_ne!(a.digest(), b.digest(), "waiting-queue order");
    let (mut c, mut d) = (
        Scheduler::new(config).unwrap(),
        Scheduler::new(config).unwrap(),
    );
    c.submit(spec(1)).unwrap();
    d.submit(RequestSpec {
        max_new_tokens: 11,
        ..spec(1)
    })
    .unwrap();
    assert_ne!(c.digest(), d.digest(), "a request's fields");
    let mut e = Scheduler::new(config).unwrap();
    e.submit(spec(1)).unwrap();
    assert_eq!(c.digest(), e.digest());
    c.step(4096, 0, true);
    assert_ne!(
        c.digest(),
        e.digest(),
        "a step (admission, ratio, counters)"
    );
    e.step(4096, 0, true);
    assert_eq!(c.digest(), e.digest());
}

#[test]
fn c_abi_digests() {
    let mut config = kvp_pool_config_default();
    config.size = 64;
    config.page_size = 4;
    let (mut p, mut q, mut s) = (null_mut(), null_mut(), null_mut());
    let mut sc = kvp_scheduler_config_default();
    sc.capacity = 1024;
    sc.page_size = 4;
    let (mut dp, mut dq, mut ds) = (0u64, 0u64, 0u64);
    let mut out = [0i64; 5];
    // SAFETY: valid pointers throughout; handles freed at the end.
    unsafe {
        assert_eq!(kvp_pool_new(&config, &mut p), kvp_status::Ok);
        assert_eq!(kvp_pool_new(&config, &mut q), kvp_status::Ok);
        assert_eq!(
            kvp_scheduler_new(&sc, std::ptr::null(), &mut s),
            kvp_status::Ok
        );
        assert_eq!(kvp_pool_digest(p, &mut dp), kvp_status::Ok);
        assert_eq!(dp, 0x7319_987b_2706_b53b);
        let prefix = [0i64];
        let seq = [5i64];
        let last = [-1i64];
        assert_eq!(
            kvp_pool_alloc_extend(
                p,
                prefix.as_ptr(),
                seq.as_ptr(),
                last.as_ptr().cast(),
                1,
                5,
                out.as_mut_ptr().cast(),
                5
            ),
            kvp_status::Ok
        );
        assert_eq!(kvp_pool_digest(p, &mut dp), kvp_status::Ok);
        assert_eq!(dp, 0xb0b4_43b8_ba96_9c7d);
        assert_eq!(kvp_pool_digest(q, &mut dq), kvp_status::Ok);
        assert_ne!(dp, dq);
        // Out-parameters untouched on failure; no digest of the wrong backend or handle kind.
        let mut untouched = 42u64;
        assert_eq!(
            kvp_pool_digest(p, std::ptr::null_mut()),
            kvp_status::NullArgument
        );
        assert_eq!(
            kvp_pool_digest(s.cast_const().cast(), &mut untouched),
            kvp_status::InvalidArgument
        );
        assert_eq!(
            kvp_pool_digest_async(p, &mut untouched, null_mut()),
            kvp_status::WrongBackend
        );
        assert_eq!(
            kvp_scheduler_digest(p.cast_const().cast(), &mut untouched),
            kvp_status::InvalidArgument
        );
        assert_eq!(untouched, 42);
        assert_eq!(kvp_scheduler_digest(s, &mut ds), kvp_status::Ok);
        assert_eq!(ds, 0x18a0_048e_c9db_5aeb);
        kvp_scheduler_free(s);
        kvp_pool_free(p);
        kvp_pool_free(q);
    }
}
