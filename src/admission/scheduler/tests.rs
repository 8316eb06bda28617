//! Scheduler scenarios: the seed article's example, retraction, policies, priority.

use super::*;
use crate::admission::RatioConfig;

fn spec(id: u64, input_len: u64, max_new_tokens: u64) -> RequestSpec {
    RequestSpec {
        id,
        input_len,
        max_new_tokens,
        ..RequestSpec::default()
    }
}

fn scheduler(capacity: u64, page_size: u64, f: impl FnOnce(&mut SchedulerConfig)) -> Scheduler {
    let mut config = SchedulerConfig::new(capacity, page_size);
    f(&mut config);
    Scheduler::new(config).unwrap()
}

/// Runs steps with a simple engine: `available` shrinks with what the plans allocate.
struct Engine {
    capacity: u64,
    used: u64,
}

impl Engine {
    fn step(&mut self, s: &mut Scheduler) -> StepPlan {
        let plan = s.step(self.capacity - self.used, 0, true);
        for e in plan
            .retracted
            .iter()
            .chain(&plan.preempted)
            .chain(&plan.aborted)
        {
            self.used -= e.kv_len;
        }
        self.used += plan.prefill.iter().map(|e| e.extend_len).sum::<u64>();
        self.used += plan.decode.len() as u64;
        assert!(self.used <= self.capacity, "over-committed: {plan:?}");
        plan
    }
}

#[test]
fn seed_example_chunks_10000_tokens_as_4096_4096_1808() {
    let mut s = scheduler(1_000_000, 1, |c| c.chunked_prefill_size = Some(4096));
    let mut engine = Engine {
        capacity: 1_000_000,
        used: 0,
    };
    s.submit(spec(9, 10_000, 10)).unwrap();
    let chunks: Vec<(u64, u64, bool)> = (0..3)
        .map(|_| {
            let e = engine.step(&mut s).prefill[0];
            (e.prefix_len, e.extend_len, e.chunked)
        })
        .collect();
    assert_eq!(
        chunks,
        [(0, 4096, true), (4096, 4096, true), (8192, 1808, false)]
    );
    assert_eq!(s.request(9).unwrap(), (Phase::Running, 10_000, 1));
}

#[test]
fn mixed_chunk_keeps_the_decode_batch_running_every_step() {
    let mut s = scheduler(1_000_000, 1, |c| {
        c.chunked_prefill_size = Some(4096);
        c.enable_mixed_chunk = true;
    });
    let mut engine = Engine {
        capacity: 1_000_000,
        used: 0,
    };
    for id in 0..3 {
        s.submit(spec(id, 100, 1000)).unwrap();
    }
    let plan = engine.step(&mut s);
    assert_eq!(plan.prefill.len(), 3);
    assert!(plan.decode.is_empty());
    s.submit(spec(9, 10_000, 10)).unwrap();
    let mut chunks = Vec::new();
    for _ in 0..3 {
        let plan = engine.step(&mut s);
        assert_eq!(plan.kind, StepKind::Prefill);
        assert_eq!(plan.prefill.len(), 1);
        chunks.push(plan.prefill[0].extend_len);
        // The three running requests decode in every step, mixed into the prefill batch.
        assert_eq!(plan.decode, [0, 1, 2]);
    }
    // Their three decode tokens are charged to each step's chunk budget (SGLang's
    // `rem_chunk_tokens = chunked_prefill_size - num_mixed`).
    assert_eq!(chunks, [4093, 4093, 1814]);
    assert_eq!(s.request(9).unwrap().0, Phase::Running);
    let plan = engine.step(&mut s);
    assert_eq!((plan.kind, plan.decode.len()), (StepKind::Decode, 4));
}

#[test]
fn without_mixed_chunk_prefill_steps_pause_decoding() {
    let mut s = scheduler(1_000_000, 1, |c| c.chunked_prefill_size = Some(4096));
    let mut engine = Engine {
        capacity: 1_000_000,
        used: 0,
    };
    s.submit(spec(0, 100, 1000)).unwrap();
    engine.step(&mut s);
    s.submit(spec(1, 10_000, 10)).unwrap();
    let kinds: Vec<StepKind> = (0..4).map(|_| engine.step(&mut s).kind).collect();
    assert_eq!(
        kinds,
        [
            StepKind::Prefill,
            StepKind::Prefill,
            StepKind::Prefill,
            StepKind::Decode
        ]
    );
}

#[test]
fn unfittable_requests_are_reported_not_queued() {
    let mut s = scheduler(10_000, 16, |_| {});
    // 9000 + min(2000, 4096) + 16 >= 10000.
    let out = s.submit(spec(1, 9000, 2000)).unwrap();
    assert_eq!(
        out,
        SubmitOutcome::Unfittable {
            needed: 11_016,
            capacity: 10_000
        }
    );
    assert_eq!(s.counts(), (0, 0, 0));
    assert_eq!(
        s.submit(spec(2, 5000, 2000)).unwrap(),
        SubmitOutcome::Queued
    );
    assert_eq!(
        s.submit(spec(2, 10, 1)).unwrap_err().kind(),
        ErrorKind::InvalidState
    );
    let bad = RequestSpec {
        prefix_len: 5000,
        ..spec(3, 5000, 10)
    };
    assert_eq!(s.submit(bad).unwrap_err().kind(), ErrorKind::InvalidLengths);
}

#[test]
fn retraction_follows_sglang_order_and_ratio() {
    let mut s = scheduler(100_000, 16, |_| {});
    // Each fills exactly one page; outputs so far 0, 4 and 8 (as if resumed).
    let with_output = |id, input_len, output_len, max_new_tokens| RequestSpec {
        output_len,
        ..spec(id, input_len, max_new_tokens)
    };
    s.submit(with_output(0, 16, 0, 100)).unwrap();
    s.submit(with_output(1, 12, 4, 100)).unwrap();
    s.submit(with_output(2, 8, 8, 200)).unwrap();
    assert_eq!(s.step(100_000, 0, true).prefill.len(), 3);
    // All three end on a page boundary: the decode needs 3 pages and none is free.
    // Fewest generated tokens go first: request 0 (frees one page, still short), then 1.
    let plan = s.step(0, 0, true);
    assert_eq!(
        plan.retracted,
        [
            Evicted {
                id: 0,
                kv_len: 16,
                prefix_len: 0
            },
            Evicted {
                id: 1,
                kv_len: 16,
                prefix_len: 0
            }
        ]
    );
    assert_eq!(plan.decode, [2]);
    // Ratio over the request that stays: (9 + 20) / (200 + 1).
    assert!((plan.new_token_ratio - 29.0 / 201.0).abs() < 1e-12);
    assert_eq!(s.counts(), (2, 0, 1));
    // A retracted request re-prefills its prompt and its output so far.
    assert_eq!(s.request(1).unwrap(), (Phase::Waiting, 0, 5));
    let plan = s.step(100_000, 0, true);
    let refill: Vec<(u64, u64)> = plan.prefill.iter().map(|e| (e.id, e.extend_len)).collect();
    assert_eq!(refill, [(0, 17), (1, 17)]);
}

#[test]
fn ties_in_the_retraction_key_retract_the_later_request_first() {
    let mut s = scheduler(100_000, 16, |_| {});
    for id in 0..3 {
        s.submit(spec(id, 16, 100)).unwrap();
    }
    s.step(100_000, 0, true);
    let plan = s.step(16, 0, true);
    let ids: Vec<u64> = plan.retracted.iter().map(|e| e.id).collect();
    assert_eq!(ids, [2]);
}

#[test]
fn last_request_that_cannot_decode_is_aborted() {
    let mut s = scheduler(1000, 16, |_| {});
    s.submit(spec(7, 32, 10)).unwrap();
    s.step(1000, 0, true);
    // kv_len 32 is page-aligned: the next token needs a page, and nothing is free.
    let plan = s.step(0, 0, true);
    assert_eq!(
        plan.aborted,
        [Evicted {
            id: 7,
            kv_len: 32,
            prefix_len: 0
        }]
    );
    assert!(plan.decode.is_empty());
    assert_eq!(s.counts(), (0, 0, 0));
    assert_eq!(s.stats().aborts, 1);
}

#[test]
fn ratio_decays_per_decode_step_and_resets_when_idle() {
    let mut s = scheduler(100_000, 1, |_| {});
    s.submit(spec(1, 10, 100)).unwrap();
    s.step(100_000, 0, true);
    let r0 = s.new_token_ratio();
    s.step(100_000, 0, true);
    let decay = (0.7 - 0.098) / 600.0;
    assert!((s.new_token_ratio() - (r0 - decay)).abs() < 1e-12);
    s.finish(1).unwrap();
    s.step(100_000, 0, true);
    assert!((s.new_token_ratio() - 0.7).abs() < 1e-12);
}

fn admitted_order(s: &mut Scheduler) -> Vec<u64> {
    s.step(1 << 30, 0, true)
        .prefill
        .iter()
        .map(|e| e.id)
        .collect()
}

#[test]
fn policies_order_the_queue() {
    let mk = |policy| {
        let mut s = scheduler(1 << 30, 1, |c| c.policy = policy);
        s.submit(spec(1, 10, 5)).unwrap();
        s.submit(RequestSpec {
            prefix_len: 8,
            ..spec(2, 10, 50)
        })
        .unwrap();
        s.submit(RequestSpec {
            prefix_len: 4,
            ..spec(3, 10, 500)
        })
        .unwrap();
        s
    };
    assert_eq!(admitted_order(&mut mk(Policy::Fcfs)), [1, 2, 3]);
    assert_eq!(admitted_order(&mut mk(Policy::Lof)), [3, 2, 1]);
    assert_eq!(admitted_order(&mut mk(Policy::Lpm)), [2, 3, 1]);
    let a = admitted_order(&mut mk(Policy::Random { seed: 42 }));
    assert_eq!(a, admitted_order(&mut mk(Policy::Random { seed: 42 })));
    let mut sorted = a.clone();
    sorted.sort();
    assert_eq!(sorted, [1, 2, 3]);
    let differs = (0..20).any(|seed| admitted_order(&mut mk(Policy::Random { seed })) != a);
    assert!(differs, "the seed does not change the order");
}

#[test]
fn dfs_weight_visits_heavier_subtrees_first() {
    let mut s = scheduler(1 << 30, 1, |c| c.policy = Policy::DfsWeight);
    let with_path = |id, path: &[u64]| RequestSpec {
        prefix_path: path.to_vec(),
        ..spec(id, 10, 5)
    };
    s.submit(with_path(1, &[10])).unwrap(); // subtree 10: one request
    s.submit(with_path(2, &[20, 21])).unwrap(); // subtree 20: three requests
    s.submit(with_path(3, &[20])).unwrap();
    s.submit(with_path(4, &[20, 21])).unwrap();
    s.submit(with_path(5, &[])).unwrap(); // at the root
                                          // Heavier child 20 first; inside it child 21's requests before node 20's own; root last.
    assert_eq!(admitted_order(&mut s), [2, 4, 3, 1, 5]);
}

#[test]
fn lpm_orders_by_the_match_alone_even_with_priority_scheduling() {
    // SGLang's calc_priority applies priorities to FCFS and LOF only: LPM sorts by
    // -prefix, and its FCFS fallback above 128 waiting requests does not sort at all.
    let prio = PriorityConfig {
        low_values_first: true,
        preemption_threshold: None,
    };
    let mk = |waiting: u64| {
        let mut s = scheduler(1 << 30, 1, |c| {
            c.policy = Policy::Lpm;
            c.priority = Some(prio);
        });
        s.submit(RequestSpec {
            priority: 1,
            ..spec(1, 10, 5)
        })
        .unwrap();
        s.submit(RequestSpec {
            priority: 9,
            prefix_len: 8,
            ..spec(2, 10, 5)
        })
        .unwrap();
        for id in 3..=waiting {
            s.submit(RequestSpec {
                priority: 0,
                ..spec(id, 10, 5)
            })
            .unwrap();
        }
        s
    };
    assert_eq!(admitted_order(&mut mk(2)), [2, 1]);
    let order = admitted_order(&mut mk(129));
    assert_eq!(order[..3], [1, 2, 3], "above 128 waiting: arrival order");
}

#[test]
fn priority_orders_and_preempts() {
    let prio = PriorityConfig {
        low_values_first: true,
        preemption_threshold: Some(10),
    };
    let mut s = scheduler(10_000, 1, |c| {
        c.priority = Some(prio);
        c.max_running_requests = Some(2);
    });
    s.submit(RequestSpec {
        priority: 50,
        ..spec(1, 100, 100)
    })
    .unwrap();
    s.submit(RequestSpec {
        priority: 45,
        ..spec(2, 100, 100)
    })
    .unwrap();
    assert_eq!(admitted_order(&mut s), [2, 1]);
    // Slots are full. A request 5 better than the worst does not preempt (threshold 10);
    // one 30 better preempts the lowest-priority running request (1).
    s.submit(RequestSpec {
        priority: 40,
        ..spec(3, 100, 100)
    })
    .unwrap();
    let plan = s.step(9000, 0, true);
    assert_eq!(plan.kind, StepKind::Decode);
    s.abort(3).unwrap();
    s.submit(RequestSpec {
        priority: 20,
        ..spec(4, 100, 100)
    })
    .unwrap();
    let plan = s.step(9000, 0, true);
    assert_eq!(
        plan.preempted,
        [Evicted {
            id: 1,
            kv_len: 101,
            prefix_len: 0
        }]
    );
    assert_eq!(plan.prefill.iter().map(|e| e.id).collect::<Vec<_>>(), [4]);
    assert_eq!(s.request(1).unwrap().0, Phase::Waiting);
    assert_eq!(s.stats().preemptions, 1);
}

#[test]
fn max_running_requests_fills_the_batch() {
    let mut s = scheduler(1 << 20, 1, |c| c.max_running_requests = Some(2));
    for id in 0..4 {
        s.submit(spec(id, 10, 10)).unwrap();
    }
    let plan = s.step(1 << 20, 0, true);
    assert_eq!(plan.prefill.len(), 2);
    assert!(plan.batch_is_full);
    assert_eq!(s.step(1 << 20, 0, true).kind, StepKind::Decode);
}

#[test]
fn prefill_can_be_held_back_by_the_caller() {
    let mut s = scheduler(1 << 20, 1, |_| {});
    s.submit(spec(1, 10, 10)).unwrap();
    assert_eq!(s.step(1 << 20, 0, false).kind, StepKind::Idle);
    assert_eq!(s.step(1 << 20, 0, true).kind, StepKind::Prefill);
}

#[test]
fn stalled_chunked_request_alone_is_aborted() {
    let mut s = scheduler(100_000, 16, |c| c.chunked_prefill_size = Some(1024));
    s.submit(spec(1, 5000, 10)).unwrap();
    let plan = s.step(100_000, 0, true);
    assert_eq!(plan.prefill[0].extend_len, 1024);
    // The engine reports no free memory (its cache is not evictable): the chunk cannot
    // continue and nothing runs that could free memory.
    let plan = s.step(0, 0, true);
    assert_eq!(
        plan.aborted,
        [Evicted {
            id: 1,
            kv_len: 1024,
            prefix_len: 0
        }]
    );
}

#[test]
fn dynamic_chunking_shrinks_later_chunks() {
    let predictor = ChunkSizePredictor {
        a: 1e-5,
        b: 0.0,
        base_chunk: 4096,
        page_size: 1,
        context_len: 1 << 20,
        max_prefill_tokens: 16384,
        smooth: 0.75,
    };
    let mut s = scheduler(1 << 22, 1, |c| {
        c.chunked_prefill_size = Some(4096);
        c.dynamic_chunking = Some(predictor);
    });
    s.submit(spec(1, 30_000, 10)).unwrap();
    let chunks: Vec<u64> = (0..3)
        .map(|_| s.step(1 << 22, 0, true).prefill[0].extend_len)
        .collect();
    assert_eq!(chunks[0], 4096);
    assert_eq!(chunks[1], predictor.predict(4096).unwrap());
    assert!(chunks[1] < 4096 && chunks[2] < chunks[1], "{chunks:?}");
}

/// Three running requests reserving 50, 75 and 100 tokens (ratio 1) with priorities 50, 40
/// and 30 (lower runs first), all request slots taken — SGLang's preemption test setup.
fn preemption_setup() -> Scheduler {
    let mut s = scheduler(1 << 20, 1, |c| {
        c.priority = Some(PriorityConfig {
            low_values_first: true,
            preemption_threshold: Some(10),
        });
        c.max_running_requests = Some(3);
        c.ratio = RatioConfig {
            init: 1.0,
            min_factor: 1.0,
            ..RatioConfig::default()
        };
    });
    for (id, priority, max_new) in [(1, 50, 51), (2, 40, 76), (3, 30, 101)] {
        s.submit(RequestSpec {
            priority,
            ..spec(id, 10, max_new)
        })
        .unwrap();
    }
    assert_eq!(s.step(1 << 20, 0, true).prefill.len(), 3);
    s
}

fn urgent(priority: i64) -> RequestSpec {
    RequestSpec {
        priority,
        ..spec(9, 100, 30)
    }
}

#[test]
fn preemption_takes_the_lowest_priority_request_that_makes_room() {
    let mut s = preemption_setup();
    s.submit(urgent(10)).unwrap();
    // Offsets 50 + 75 + 100 = 225; room 310 - 225 = 85; the urgent request needs
    // 100 + 30 = 130, i.e. 45 more: preempting request 1 (offset 50) is enough.
    let plan = s.step(310, 0, true);
    assert_eq!(
        plan.preempted,
        [Evicted {
            id: 1,
            kv_len: 10,
            prefix_len: 0
        }]
    );
    assert_eq!(plan.prefill.iter().map(|e| e.id).collect::<Vec<_>>(), [9]);
    assert_eq!(s.request(1).unwrap().0, Phase::Waiting);
}

#[test]
fn preemption_takes_several_victims_when_one_is_not_enough() {
    let mut s = preemption_setup();
    s.submit(urgent(10)).unwrap();
    // Room 300 - 225 = 75: 55 short, more than request 1's 50; request 2 (75) follows.
    let plan = s.step(300, 0, true);
    let victims: Vec<u64> = plan.preempted.iter().map(|e| e.id).collect();
    assert_eq!(victims, [1, 2]);
    assert_eq!(s.stats().preemptions, 2);
}

#[test]
fn preemption_respects_the_threshold_and_capacity() {
    let mut s = preemption_setup();
    // Only 5 better than the worst running request: not worth preempting.
    s.submit(urgent(45)).unwrap();
    let plan = s.step(310, 0, true);
    assert!(plan.preempted.is_empty());
    assert_eq!(plan.kind, StepKind::Decode);
    s.abort(9).unwrap();
    // Even preempting all three (225) cannot make 130 + 215 tokens of room: nobody is
    // preempted for nothing.
    s.submit(urgent(0)).unwrap();
    let plan = s.step(10, 0, true);
    assert!(plan.preempted.is_empty());
    assert_eq!(s.counts(), (1, 0, 3));
}

#[test]
fn finishing_a_request_clears_batch_is_full() {
    let mut s = scheduler(1 << 20, 1, |_| {});
    s.submit(spec(1, 100, 10)).unwrap();
    s.submit(spec(2, 100, 10)).unwrap();
    // Room for one: the pass stops on memory with a request running.
    let plan = s.step(150, 0, true);
    assert_eq!(plan.prefill.len(), 1);
    assert!(plan.batch_is_full);
    assert_eq!(s.step(1 << 20, 0, true).kind, StepKind::Decode);
    s.finish(1).unwrap();
    // The running batch shrank: the next step tries prefill again (SGLang clears the flag).
    let plan = s.step(1 << 20, 0, true);
    assert_eq!(plan.prefill.iter().map(|e| e.id).collect::<Vec<_>>(), [2]);
}

/// Two running requests of 48 tokens, each behind a 32-token cached prefix (a shared
/// system prompt), both ending on a page boundary (page size 16).
fn two_requests_behind_a_cached_prefix() -> Scheduler {
    let mut s = scheduler(100_000, 16, |_| {});
    for id in 0..2 {
        s.submit(RequestSpec {
            prefix_len: 32,
            ..spec(id, 48, 100)
        })
        .unwrap();
    }
    s.step(100_000, 0, true);
    s
}

#[test]
fn retraction_counts_only_a_requests_own_pages_as_freed() {
    // Each holds 48 tokens, 16 of them its own, and needs a page for its next token.
    // 16 free tokens: retracting request 1 frees its one own page (not 3).
    let mut s = two_requests_behind_a_cached_prefix();
    let plan = s.step(16, 0, true);
    assert_eq!(
        plan.retracted,
        [Evicted {
            id: 1,
            kv_len: 48,
            prefix_len: 32
        }]
    );
    assert_eq!(plan.decode, [0]);
    // No free memory: retracting one frees exactly the page the other needs.
    let mut s = two_requests_behind_a_cached_prefix();
    let plan = s.step(0, 0, true);
    assert_eq!(plan.retracted.len(), 1);
    assert!(plan.decode.len() == 1 && plan.aborted.is_empty());
}

// ---- impossible values: refused or reported, the scheduler unchanged ------------------

/// Queue counts, counters and the plan a following valid step makes: equal for two
/// schedulers that differ only by refused calls.
fn observe(s: &mut Scheduler) -> ((usize, usize, usize), SchedulerStats, StepPlan) {
    let before = (s.counts(), s.stats());
    let plan = s.step(10_000, 0, true);
    (before.0, before.1, plan)
}

#[test]
fn a_submission_whose_need_overflows_is_unfittable_not_queued() {
    // Before: input_len u64::MAX with max_new 1 needed 2^64 - 1 + 1 + 16, which wrapped
    // to 16 < capacity: queued, and planned with extend_len 2^64 - 1.
    let mut s = scheduler(10_000, 16, |_| {});
    let mut fresh = scheduler(10_000, 16, |_| {});
    for (input_len, max_new) in [(u64::MAX, 1), (u64::MAX - 10, 20), (u64::MAX - 10, 0)] {
        let out = s.submit(spec(1, input_len, max_new)).unwrap();
        assert_eq!(
            out,
            SubmitOutcome::Unfittable {
                needed: u64::MAX,
                capacity: 10_000
            },
            "input_len {input_len}"
        );
    }
    // Not queued; only the counter of refusals moved.
    assert_eq!(s.counts(), (0, 0, 0));
    assert_eq!(s.stats().unfittable, 3);
    s.submit(spec(7, 100, 10)).unwrap();
    fresh.submit(spec(7, 100, 10)).unwrap();
    let (plan, fresh_plan) = (s.step(10_000, 0, true), fresh.step(10_000, 0, true));
    assert_eq!(plan, fresh_plan);
    assert_eq!(plan.prefill[0].extend_len, 100);
}

#[test]
fn an_ignore_eos_need_that_overflows_is_unfittable() {
    let mut s = scheduler(10_000, 16, |c| c.prefix_cache_disabled = true);
    let out = s
        .submit(RequestSpec {
            ignore_eos: true,
            ..spec(1, 100, u64::MAX)
        })
        .unwrap();
    assert!(matches!(
        out,
        SubmitOutcome::Unfittable {
            needed: u64::MAX,
            ..
        }
    ));
    assert_eq!(s.counts(), (0, 0, 0));
}

#[test]
fn input_plus_output_past_64_bits_is_refused() {
    let mut s = scheduler(10_000, 16, |_| {});
    let mut fresh = scheduler(10_000, 16, |_| {});
    let err = s
        .submit(RequestSpec {
            output_len: 2,
            ..spec(1, u64::MAX - 1, 10)
        })
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidLengths);
    assert!(err.message().contains("output_len 2"), "{}", err.message());
    assert_eq!(observe(&mut s), observe(&mut fresh));
}

#[test]
fn a_room_past_int64_max_is_refused_and_changes_nothing() {
    // Before: available + evictable wrapped (u64::MAX + 2 = 1 token of budget) or turned
    // negative as an i64 (2^63: "no memory").
    let mut s = scheduler(10_000, 16, |_| {});
    let mut fresh = scheduler(10_000, 16, |_| {});
    for sched in [&mut s, &mut fresh] {
        sched.submit(spec(1, 100, 10)).unwrap();
    }
    for (available, evictable) in [(u64::MAX, 2), (1 << 63, 0), (i64::MAX as u64, 1)] {
        let err = s.try_step(available, evictable, true).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidArgument);
        assert!(err.message().contains("evictable"), "{}", err.message());
    }
    assert_eq!(observe(&mut s), observe(&mut fresh));
    // The largest countable room is fine.
    assert!(s.try_step(i64::MAX as u64, 0, true).is_ok());
}

#[test]
fn configs_that_never_admit_are_refused_naming_the_field() {
    type Edit = fn(&mut SchedulerConfig);
    let cases: [(Edit, &str); 9] = [
        (|c| c.max_prefill_tokens = 0, "max_prefill_tokens"),
        (|c| c.max_prefill_tokens = u64::MAX, "max_prefill_tokens"),
        (|c| c.clip_max_new_tokens = 0, "clip_max_new_tokens"),
        (|c| c.capacity = u64::MAX, "capacity"),
        (|c| c.page_size = 20_000, "page_size"),
        (
            |c| c.chunked_prefill_size = Some(1 << 63),
            "chunked_prefill_size",
        ),
        (|c| c.ratio.init = 0.0, "init_new_token_ratio"),
        (
            |c| c.ratio.min_factor = f64::NAN,
            "min_new_token_ratio_factor",
        ),
        (
            |c| c.ratio.conservativeness = -1.0,
            "schedule_conservativeness",
        ),
    ];
    for (edit, field) in cases {
        let mut config = SchedulerConfig::new(10_000, 16);
        edit(&mut config);
        let err = Scheduler::new(config).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{field}");
        assert!(
            err.message().starts_with(field),
            "{field}: {}",
            err.message()
        );
    }
}

#[test]
fn extreme_priorities_order_and_preempt_without_wrapping() {
    // High values first: the rank of i64::MIN is -i64::MIN = 2^63, which wrapped to
    // i64::MIN (the best rank) before; rank differences up to 2^64 overflowed.
    let mut s = scheduler(10_000, 1, |c| {
        c.priority = Some(PriorityConfig {
            low_values_first: false,
            preemption_threshold: Some(10),
        });
        c.max_running_requests = Some(1);
    });
    s.submit(RequestSpec {
        priority: i64::MIN,
        ..spec(1, 100, 100)
    })
    .unwrap();
    s.submit(RequestSpec {
        priority: i64::MAX - 1,
        ..spec(2, 100, 100)
    })
    .unwrap();
    let plan = s.step(10_000, 0, true);
    assert_eq!(plan.prefill.iter().map(|e| e.id).collect::<Vec<_>>(), [2]);
    // The best priority preempts the worst one running.
    s.finish(2).unwrap();
    s.step(10_000, 0, true); // 1 runs
    s.submit(RequestSpec {
        priority: i64::MAX,
        ..spec(3, 100, 100)
    })
    .unwrap();
    let plan = s.step(9_000, 0, true);
    assert_eq!(plan.preempted.iter().map(|e| e.id).collect::<Vec<_>>(), [1]);
    assert_eq!(plan.prefill.iter().map(|e| e.id).collect::<Vec<_>>(), [3]);
}

/// `finish_released` / `abort_released` split a row into the locked cached prefix and the
/// request's own KV: the admission's `prefix_len` (and `prefix_evictable` as declared
/// then); nothing for a request that holds no KV; and the same effect as `finish` /
/// `abort` (invalid calls change nothing).
#[test]
fn released_requests_report_their_locked_prefix() {
    let mut s = scheduler(1 << 20, 16, |c| c.chunked_prefill_size = Some(64));
    let with_prefix = |id, input, prefix, evictable| RequestSpec {
        prefix_len: prefix,
        prefix_evictable: evictable,
        ..spec(id, input, 8)
    };
    s.submit(with_prefix(1, 100, 32, 16)).unwrap();
    s.submit(with_prefix(2, 50, 16, 0)).unwrap();
    s.submit(with_prefix(3, 40, 0, 0)).unwrap();
    // Request 1 (100 tokens, 32 cached) takes the 64-token chunk: 32 + 64 = 96 in KV.
    let plan = s.step(1 << 20, 0, true);
    assert_eq!(plan.prefill[0].id, 1);
    assert_eq!(plan.prefill[0].prefix_len, 32);
    assert_eq!(plan.prefill[0].extend_len, 64);
    assert!(plan.prefill[0].chunked);
    // A chunking request is not finished yet; the refusal changes nothing.
    assert_eq!(
        s.finish_released(1).unwrap_err().kind(),
        ErrorKind::InvalidState
    );
    assert_eq!(
        s.finish_released(77).unwrap_err().kind(),
        ErrorKind::InvalidArgument
    );
    // Aborting it mid-prefill: its row holds 96 tokens, the first 32 the locked prefix.
    assert_eq!(
        s.abort_released(1).unwrap(),
        Released {
            id: 1,
            kv_len: 96,
            prefix_len: 32,
            prefix_evictable: 16
        }
    );
    // Request 2 runs to the end: 50 prompt tokens (16 cached) plus the decoded ones.
    let mut steps = 0;
    while s.request(2).map(|r| r.0) != Some(Phase::Running) {
        s.step(1 << 20, 0, true);
        steps += 1;
        assert!(steps < 10);
    }
    s.step(1 << 20, 0, true); // one decode step
    let kv_len = s.request(2).unwrap().1;
    let r = s.finish_released(2).unwrap();
    assert_eq!(
        r,
        Released {
            id: 2,
            kv_len,
            prefix_len: 16,
            prefix_evictable: 0
        }
    );
    assert!(kv_len >= 50);
    assert_eq!(s.stats().finished, 1);
    // A waiting request holds nothing, whatever prefix it was submitted with.
    s.submit(with_prefix(4, 300, 32, 32)).unwrap();
    let r = s.abort_released(4).unwrap();
    assert_eq!((r.kv_len, r.prefix_len, r.prefix_evictable), (0, 0, 0));
    // finish / abort still return the KV length.
    while s.request(3).map(|r| r.0) != Some(Phase::Running) {
        s.step(1 << 20, 0, true);
    }
    let kv = s.request(3).unwrap().1;
    assert_eq!(s.finish(3).unwrap(), kv);
}
