//! `PrefillAdder` scenarios: the seed article's chunking example and SGLang's unit tests.

use super::*;

fn config(page_size: u64) -> AdderConfig {
    AdderConfig {
        chunked_prefill_size: Some(4096),
        ..AdderConfig::sglang_defaults(page_size)
    }
}

fn prompt(input_len: u64, max_new_tokens: u64) -> Candidate {
    Candidate {
        input_len,
        max_new_tokens,
        ..Candidate::default()
    }
}

#[test]
fn seed_example_chunks_10000_tokens_as_4096_4096_1808() {
    let cfg = config(1);
    let mut adder = PrefillAdder::new(cfg, 200_000, 0, &[], 0);
    let first = adder.add_one_req(&prompt(10_000, 128));
    assert_eq!(first.extend_len, Some(4096));
    assert!(first.chunked);
    // The chunk budget is spent: nothing else joins this pass.
    assert_eq!(first.next, AddResult::Other);
    let mut remaining = 10_000 - 4096;
    let mut chunks = vec![4096];
    while remaining > 0 {
        let running = [RunningRequest {
            input_len: 50,
            output_len: 3,
            max_new_tokens: 100,
            ignore_eos: false,
        }];
        let mut adder = PrefillAdder::new(cfg, 200_000, 0, &running, 1);
        let out = adder.add_chunked_req(ChunkedCandidate {
            prefix_len: 10_000 - remaining,
            remaining,
            max_new_tokens: 128,
            ..ChunkedCandidate::default()
        });
        chunks.push(out.extend_len);
        remaining -= out.extend_len;
        assert_eq!(out.truncated, remaining > 0);
    }
    assert_eq!(chunks, [4096, 4096, 1808]);
}

#[test]
fn no_token_when_the_total_budget_is_short() {
    let cfg = config(16);
    let adder = PrefillAdder::new(cfg, 1000, 0, &[], 0);
    // extend 900 + clip(max_new) 100 + page 16 = 1016 >= 1000.
    let mut a = adder.clone();
    let out = a.add_one_req(&prompt(900, 100));
    assert_eq!((out.extend_len, out.next), (None, AddResult::NoToken));
    assert_eq!(a.budget(), adder.budget(), "a refused request left a trace");
    let out = a.add_one_req(&prompt(800, 100));
    assert_eq!(out.extend_len, Some(800));
}

#[test]
fn running_requests_reserve_their_expected_output() {
    let cfg = config(1);
    let running = [RunningRequest {
        input_len: 10,
        output_len: 100,
        max_new_tokens: 1100,
        ignore_eos: false,
    }];
    // Reserve: min(1000, 4096) × 0.7 = 700, so only 300 tokens of room are left.
    let mut adder = PrefillAdder::new(cfg, 1000, 0, &running, 0);
    assert!((adder.budget().rem_total_tokens() - 300.0).abs() < 1e-9);
    assert_eq!(
        adder.add_one_req(&prompt(250, 100)).next,
        AddResult::NoToken
    );
    assert_eq!(adder.add_one_req(&prompt(150, 100)).extend_len, Some(150));
}

#[test]
fn first_request_may_exceed_the_input_budget() {
    let cfg = AdderConfig {
        max_prefill_tokens: 1000,
        chunked_prefill_size: None,
        ..AdderConfig::sglang_defaults(1)
    };
    let mut adder = PrefillAdder::new(cfg, 100_000, 0, &[], 0);
    let out = adder.add_one_req(&prompt(3000, 10));
    assert_eq!(out.extend_len, Some(3000));
    assert_eq!(out.next, AddResult::Other);
    let mut adder = PrefillAdder::new(cfg, 100_000, 0, &[], 0);
    assert_eq!(
        adder.add_one_req(&prompt(600, 10)).next,
        AddResult::Continue
    );
    let out = adder.add_one_req(&prompt(400, 10));
    assert_eq!((out.extend_len, out.next), (None, AddResult::Other));
}

#[test]
fn own_cached_prefix_is_not_room_for_the_request() {
    let cfg = config(1);
    // 100 free + 600 evictable, of which 500 are this request's own cached prefix.
    let mut adder = PrefillAdder::new(cfg, 100, 600, &[], 0);
    let req = Candidate {
        input_len: 650,
        prefix_len: 500,
        prefix_evictable: 500,
        max_new_tokens: 20,
        ..Candidate::default()
    };
    // extend 150 + 20 + 1 = 171 < 700, but only 200 remain once the prefix is locked.
    assert_eq!(adder.add_one_req(&req).next, AddResult::Continue);
    // Alone, a 200-token extend fits 700 tokens of room (200 + 20 + 1 < 700) — unless its
    // own 500 evictable prefix tokens are counted, which leaves 200.
    let big = Candidate {
        input_len: 700,
        prefix_len: 500,
        prefix_evictable: 500,
        max_new_tokens: 20,
        ..Candidate::default()
    };
    let mut fresh = PrefillAdder::new(cfg, 100, 600, &[], 0);
    let before = fresh.budget().clone();
    assert_eq!(fresh.add_one_req(&big).next, AddResult::NoToken);
    assert_eq!(
        fresh.budget(),
        &before,
        "a refused request left its prefix locked"
    );
    let unlocked = Candidate {
        prefix_evictable: 0,
        ..big
    };
    assert_eq!(fresh.add_one_req(&unlocked).extend_len, Some(200));
}

#[test]
fn mixed_chunk_prefill_exhausts_the_chunk() {
    // SGLang's test: 8 decode rows mixed in; a 56-token prefill uses the whole chunk.
    let (cfg, running) = crate::admission::budget::mixed_chunk_scenario();
    let mut adder = PrefillAdder::new(cfg, 10_000, 0, &running, 0);
    let out = adder.add_one_req(&prompt(56, 10));
    assert_eq!(out.extend_len, Some(56));
    assert!(!out.chunked);
    assert_eq!(out.next, AddResult::Other);
}

#[test]
fn chunks_are_page_and_tile_aligned() {
    let cfg = AdderConfig {
        chunked_prefill_size: Some(1000),
        truncation_align_size: Some(256),
        ..AdderConfig::sglang_defaults(16)
    };
    let mut adder = PrefillAdder::new(cfg, 100_000, 0, &[], 0);
    let out = adder.add_one_req(&prompt(5000, 10));
    assert_eq!(out.extend_len, Some(768));
    assert!(out.chunked);
    // Chunk budget smaller than the tile: refused.
    let cfg = AdderConfig {
        chunked_prefill_size: Some(200),
        ..cfg
    };
    let mut adder = PrefillAdder::new(cfg, 100_000, 0, &[], 0);
    assert_eq!(adder.add_one_req(&prompt(5000, 10)).next, AddResult::Other);
}

#[test]
fn concurrent_chunked_requests_are_limited() {
    let one = AdderConfig {
        chunked_prefill_size: Some(8192),
        ..AdderConfig::sglang_defaults(1)
    };
    let mut adder = PrefillAdder::new(one, 100_000, 0, &[], 1);
    let cont = adder.add_chunked_req(ChunkedCandidate {
        prefix_len: 8192,
        remaining: 5000,
        max_new_tokens: 10,
        ..ChunkedCandidate::default()
    });
    assert_eq!((cont.extend_len, cont.truncated), (5000, false));
    // The carried request finished its prefill, so a new one may be chunked.
    let out = adder.add_one_req(&prompt(9000, 10));
    assert_eq!((out.extend_len, out.chunked), (Some(3192), true));

    let mut adder = PrefillAdder::new(one, 100_000, 0, &[], 1);
    let cont = adder.add_chunked_req(ChunkedCandidate {
        prefix_len: 8192,
        remaining: 3000,
        max_new_tokens: 10,
        ..ChunkedCandidate::default()
    });
    assert!(!cont.truncated);
    let mut limited = PrefillAdder::new(one, 100_000, 0, &[], 1);
    assert_eq!(
        limited.add_one_req(&prompt(9000, 10)).next,
        AddResult::Other
    );
    let two = AdderConfig {
        max_chunked_requests: 2,
        ..one
    };
    let mut adder = PrefillAdder::new(two, 100_000, 0, &[], 1);
    assert_eq!(adder.add_one_req(&prompt(9000, 10)).extend_len, Some(8192));
}

#[test]
fn chunked_request_progresses_within_free_memory() {
    let cfg = config(16);
    let running = [RunningRequest {
        input_len: 10,
        output_len: 0,
        max_new_tokens: 4096,
        ignore_eos: true,
    }];
    // The running request's reservation spends the total budget, but 1000 tokens are free:
    // the chunk continues with what fits now (SGLang would take 4096 and fail to allocate).
    // Its prefix of 4100 tokens leaves 12 slots in its last page, plus 62 whole pages.
    let mut adder = PrefillAdder::new(cfg, 1000, 0, &running, 1);
    assert!(adder.budget().rem_total_tokens() < 0.0);
    let out = adder.add_chunked_req(ChunkedCandidate {
        prefix_len: 4100,
        remaining: 6000,
        max_new_tokens: 10,
        ..ChunkedCandidate::default()
    });
    assert_eq!((out.extend_len, out.truncated), (12 + 62 * 16, true));
    // One free page: the partial page and that page still take 28 tokens.
    let mut adder = PrefillAdder::new(cfg, 16, 0, &running, 1);
    let out = adder.add_chunked_req(ChunkedCandidate {
        prefix_len: 4100,
        remaining: 6000,
        max_new_tokens: 10,
        ..ChunkedCandidate::default()
    });
    assert_eq!(out.extend_len, 28);
    // Page-aligned prefix and no free page: it waits.
    let mut adder = PrefillAdder::new(cfg, 15, 0, &running, 1);
    let out = adder.add_chunked_req(ChunkedCandidate {
        prefix_len: 4096,
        remaining: 6000,
        max_new_tokens: 10,
        ..ChunkedCandidate::default()
    });
    assert_eq!((out.extend_len, out.truncated), (0, true));
}

#[test]
fn ignore_eos_simulation_refuses_when_memory_would_run_out() {
    let cfg = AdderConfig {
        prefix_cache_disabled: true,
        chunked_prefill_size: None,
        ..AdderConfig::sglang_defaults(1)
    };
    let running = [RunningRequest {
        input_len: 100,
        output_len: 0,
        max_new_tokens: 400,
        ignore_eos: true,
    }];
    let req = Candidate {
        input_len: 100,
        max_new_tokens: 400,
        ignore_eos: true,
        ..Candidate::default()
    };
    // cur_rem 1000 - 100 = 900; both have 400 left: 900 - 400×2 = 100 > 2, then fine.
    let mut adder = PrefillAdder::new(cfg, 1000, 0, &running, 0);
    assert_eq!(adder.add_one_req(&req).extend_len, Some(100));
    // A third identical request: 800 - 400×3 < 0 -> refused, no trace.
    assert_refused_for_memory(&mut adder, &req);
}

#[test]
fn prefill_max_requests_caps_the_batch() {
    let cfg = AdderConfig {
        prefill_max_requests: Some(2),
        ..config(1)
    };
    let mut adder = PrefillAdder::new(cfg, 100_000, 0, &[], 0);
    assert!(adder.add_one_req(&prompt(10, 1)).extend_len.is_some());
    assert!(adder.add_one_req(&prompt(10, 1)).extend_len.is_some());
    assert_eq!(adder.add_one_req(&prompt(10, 1)).next, AddResult::Other);
}

// ---- impossible values: refused with an error, the adder unchanged --------------------

use crate::pool::ErrorKind;

#[test]
fn a_candidate_of_u64_max_tokens_is_refused_not_admitted() {
    // Before: extend + max_new + page wrapped to 0 and the page-ceiled extend to -1, so the
    // request was admitted with extend_len 2^64 - 1.
    let mut adder = PrefillAdder::new(config(1), 100_000, 0, &[], 0);
    let before = adder.budget().clone();
    let err = adder.try_add_one_req(&prompt(u64::MAX, 1)).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidLengths);
    assert!(
        err.message().contains("18446744073709551615"),
        "{}",
        err.message()
    );
    assert_eq!(adder.budget(), &before);
    assert_eq!(adder.admitted(), 0);
    // A page-rounded input past INT64_MAX is refused too.
    let mut paged = PrefillAdder::new(config(16), 100_000, 0, &[], 0);
    let err = paged
        .try_add_one_req(&prompt(i64::MAX as u64, 1))
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidLengths);
    // The next valid request is decided as on a fresh adder.
    let out = adder.try_add_one_req(&prompt(100, 10)).unwrap();
    assert_eq!(out.extend_len, Some(100));
}

#[test]
fn the_largest_countable_candidate_is_simply_too_big() {
    let mut adder = PrefillAdder::new(config(1), 100_000, 0, &[], 0);
    let before = adder.budget().clone();
    let out = adder
        .try_add_one_req(&prompt(i64::MAX as u64, u64::MAX))
        .unwrap();
    assert_eq!((out.extend_len, out.next), (None, AddResult::NoToken));
    assert_eq!(adder.budget(), &before);
}

#[test]
fn an_unclipped_ignore_eos_output_does_not_wrap() {
    // Without a prefix cache the ignore_eos simulation counts its whole max_new_tokens.
    let cfg = AdderConfig {
        prefix_cache_disabled: true,
        ..config(1)
    };
    let mut adder = PrefillAdder::new(cfg, 1000, 0, &[], 0);
    let huge = Candidate {
        input_len: 10,
        max_new_tokens: u64::MAX,
        ignore_eos: true,
        ..Candidate::default()
    };
    let before = adder.budget().clone();
    let out = adder.try_add_one_req(&huge).unwrap();
    assert_eq!((out.extend_len, out.next), (None, AddResult::NoToken));
    assert_eq!(adder.budget(), &before);
}

#[test]
fn available_plus_evictable_past_int64_max_is_refused() {
    // Before: u64::MAX + 2 wrapped to a budget of 1 token.
    for (available, evictable) in [(u64::MAX, 2), (i64::MAX as u64, 1), (1 << 63, 0)] {
        let err = PrefillAdder::try_new(config(1), available, evictable, &[], 0).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidArgument);
        assert!(err.message().contains("evictable"), "{}", err.message());
    }
    let max = PrefillAdder::try_new(config(1), i64::MAX as u64, 0, &[], 0).unwrap();
    assert_eq!(max.budget().cur_rem_tokens(), i64::MAX);
}

#[test]
fn configs_that_never_admit_are_refused_naming_the_field() {
    let cases = [
        (
            AdderConfig {
                max_prefill_tokens: 0,
                ..config(1)
            },
            "max_prefill_tokens",
        ),
        (
            AdderConfig {
                clip_max_new_tokens: 0,
                ..config(1)
            },
            "clip_max_new_tokens",
        ),
        (
            AdderConfig {
                new_token_ratio: f64::NAN,
                ..config(1)
            },
            "new_token_ratio",
        ),
        (
            AdderConfig {
                new_token_ratio: -0.5,
                ..config(1)
            },
            "new_token_ratio",
        ),
        (
            AdderConfig {
                max_prefill_tokens: u64::MAX,
                ..config(1)
            },
            "max_prefill_tokens",
        ),
        (
            AdderConfig {
                chunked_prefill_size: Some(1 << 63),
                ..config(1)
            },
            "chunked_prefill_size",
        ),
        (
            AdderConfig {
                page_size: 0,
                ..config(1)
            },
            "page_size",
        ),
    ];
    for (cfg, field) in cases {
        let err = PrefillAdder::try_new(cfg, 1000, 0, &[], 0).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{field}");
        assert!(
            err.message().starts_with(field),
            "{field}: {}",
            err.message()
        );
    }
}

#[test]
fn a_chunk_continuation_past_int64_max_is_refused() {
    let mut adder = PrefillAdder::new(config(16), 100_000, 0, &[], 1);
    let before = adder.budget().clone();
    let err = adder
        .try_add_chunked_req(ChunkedCandidate {
            prefix_len: u64::MAX - 10,
            remaining: 100,
            max_new_tokens: 1,
            ..ChunkedCandidate::default()
        })
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidLengths);
    assert_eq!(adder.budget(), &before);
    let out = adder
        .try_add_chunked_req(ChunkedCandidate {
            prefix_len: 4096,
            remaining: 100,
            max_new_tokens: 1,
            ..ChunkedCandidate::default()
        })
        .unwrap();
    assert_eq!((out.extend_len, out.truncated), (100, false));
}

// ---- the `ignore_eos` future simulation, as SGLang's `add_one_req_ignore_eos` --------

/// `req` is refused for memory (`NoToken`) and the budgets are as before.
fn assert_refused_for_memory(adder: &mut PrefillAdder, req: &Candidate) {
    let before = adder.budget().clone();
    let out = adder.add_one_req(req);
    assert_eq!((out.extend_len, out.next), (None, AddResult::NoToken));
    assert_eq!(adder.budget(), &before);
}

fn no_prefix_cache(clip_max_new_tokens: u64) -> AdderConfig {
    AdderConfig {
        prefix_cache_disabled: true,
        chunked_prefill_size: None,
        clip_max_new_tokens,
        ..AdderConfig::sglang_defaults(1)
    }
}

#[test]
fn an_admitted_ignore_eos_request_reserves_its_clipped_output() {
    // SGLang: `_update_prefill_budget(0, extend, min(max_new_tokens, CLIP))` — the
    // simulation judges the whole output, the reservation is clipped like everyone's.
    let mut adder = PrefillAdder::new(no_prefix_cache(4096), 100_000, 0, &[], 0);
    let req = Candidate {
        input_len: 10,
        max_new_tokens: 10_000,
        ignore_eos: true,
        ..Candidate::default()
    };
    assert_eq!(adder.add_one_req(&req).extend_len, Some(10));
    assert_eq!(
        adder.budget().rem_total_tokens(),
        100_000.0 - (10 + 4096 + 1) as f64
    );
}

#[test]
fn a_retracted_ignore_eos_candidate_occupies_its_fill_once() {
    // SGLang: tokens_occupied = len(origin_input_ids) + len(output_ids), the KV it holds
    // once prefilled — `input_len` here, which already counts the 40 outputs of this
    // retracted request (prompt 60).
    let running = [RunningRequest {
        input_len: 10,
        output_len: 0,
        max_new_tokens: 1000,
        ignore_eos: true,
    }];
    let mut adder = PrefillAdder::new(no_prefix_cache(10), 980, 0, &running, 0);
    let retracted = Candidate {
        input_len: 100,
        output_len: 40,
        max_new_tokens: 140,
        ignore_eos: true,
        ..Candidate::default()
    };
    // cur_rem 980 - 100 = 880. It finishes first (100 left): 880 - 100×2 > 2; then the
    // running one (1000 left) has 880 + 100 freed - 1000 < 1: memory would run out.
    assert_refused_for_memory(&mut adder, &retracted);
}

#[test]
fn the_ignore_eos_simulation_counts_requests_admitted_earlier_in_the_pass() {
    // SGLang builds the simulation's states from the candidate, the running batch *and*
    // `can_run_list`: a request admitted by the normal path before it grows too.
    let mut adder = PrefillAdder::new(no_prefix_cache(10), 500, 0, &[], 0);
    let normal = Candidate {
        input_len: 10,
        max_new_tokens: 1000,
        ..Candidate::default()
    };
    assert_eq!(adder.add_one_req(&normal).extend_len, Some(10));
    let eos = Candidate {
        input_len: 10,
        max_new_tokens: 100,
        ignore_eos: true,
        ..Candidate::default()
    };
    // cur_rem 500 - 11 - 10 = 479. The ignore_eos one (100 left) finishes first:
    // 479 - 100×2 > 2; then the normal one (1000 × 0.7 = 700 left): 479 + 10 - 700 < 1.
    assert_refused_for_memory(&mut adder, &eos);
}

#[test]
fn a_later_ignore_eos_candidate_with_the_most_left_is_placed_as_sglang_places_it() {
    // SGLang's later insertions stop on the last state when every state has fewer tokens
    // left: the candidate goes before it, not after.
    let mut adder = PrefillAdder::new(no_prefix_cache(4096), 22, 0, &[], 0);
    let short = Candidate {
        input_len: 1,
        max_new_tokens: 5,
        ignore_eos: true,
        ..Candidate::default()
    };
    // States [(5, 1)]: 22 - 1 - 5 > 1.
    assert_eq!(adder.add_one_req(&short).extend_len, Some(1));
    let long = Candidate {
        input_len: 1,
        max_new_tokens: 12,
        ..short
    };
    // cur_rem 22 - 2 - 1 = 19. SGLang's order [(12, 1), (5, 1)]: 19 - 12×2 <= 2, refused.
    // (Sorted, [(5, 1), (12, 1)]: 19 - 5×2 > 2 and 19 + 1 - 12 > 1 would admit it.)
    assert_refused_for_memory(&mut adder, &long);
}

#[test]
fn ignore_eos_states_are_inserted_where_sglang_inserts_them() {
    let (a, b) = ((5.0, 1.0), (9.0, 2.0));
    let placed = |state: (f64, f64), first_use: bool| {
        let mut states = vec![a, b];
        insert_as_sglang(&mut states, state, first_use);
        states
    };
    // Before every state with as many left (first use: a stable sort of candidate-first).
    assert_eq!(placed((5.0, 7.0), true), [(5.0, 7.0), a, b]);
    assert_eq!(placed((5.0, 7.0), false), [(5.0, 7.0), a, b]);
    assert_eq!(placed((7.0, 7.0), false), [a, (7.0, 7.0), b]);
    // More left than every state: last on first use, before the last one later.
    assert_eq!(placed((10.0, 7.0), true), [a, b, (10.0, 7.0)]);
    assert_eq!(placed((10.0, 7.0), false), [a, (10.0, 7.0), b]);
    let mut none = Vec::new();
    insert_as_sglang(&mut none, a, false);
    assert_eq!(none, [a]);
}

#[test]
fn the_ignore_eos_simulation_counts_the_chunk_continuation() {
    // SGLang's continuation joins `can_run_list`, whose requests the simulation grows.
    let mut adder = PrefillAdder::new(no_prefix_cache(4096), 171, 0, &[], 1);
    let cont = adder.add_chunked_req(ChunkedCandidate {
        prefix_len: 10,
        remaining: 10,
        max_new_tokens: 100,
        output_len: 0,
        ignore_eos: true,
    });
    assert_eq!((cont.extend_len, cont.truncated), (10, false));
    let eos = Candidate {
        input_len: 10,
        max_new_tokens: 100,
        ignore_eos: true,
        ..Candidate::default()
    };
    // cur_rem 171 - 11 - 10 = 150. States [(100, 10), (100, 20)]: 150 - 100×2 <= 2.
    // (Without the continuation, [(100, 10)]: 150 - 100 > 1 would admit it.)
    assert_refused_for_memory(&mut adder, &eos);
}
