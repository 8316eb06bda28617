/*
 * C99 test of multi-step decode reservations (include/kvpool.h: kvp_pool_reserve_decode,
 * kvp_decode_reservation_step / _finish / _get_info / _free) on a host pool: K reserved steps
 * against K plain kvp_pool_alloc_decode calls on a twin pool (slots, available size,
 * digest), a step writing into an int32 req_to_token table, an early finish leaving the pool
 * as the plain decodes would, and the refusals (shortage, overrun, wrong steps_used, a plain
 * decode on a reserved request, NULLs, wrong backend, wrong handle kind) changing nothing.
 * Built and run by `cargo test` (tests/ffi_programs.rs).
 *
 * Exit status 0 and the final "all N checks passed" line mean success.
 */
#include "kvpool.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "check.h"

enum { SIZE = 64 * 4, PS = 4, BS = 3, K = 6, ROWS = 4, ROW_LEN = 32 };

static uint64_t available(struct kvp_pool *pool) {
    uint64_t n = 0;
    CHECK_OK(kvp_pool_available_size(pool, &n));
    return n;
}

static uint64_t digest(struct kvp_pool *pool) {
    uint64_t d = 0;
    CHECK_OK(kvp_pool_digest(pool, &d));
    return d;
}

static struct kvp_pool *new_pool(void) {
    struct kvp_pool_config c = kvp_pool_config_default();
    c.size = SIZE;
    c.page_size = PS;
    struct kvp_pool *pool = NULL;
    CHECK_OK(kvp_pool_new(&c, &pool));
    return pool;
}

/* A batch of three requests of 5, 4 and 1 tokens (the second ends a page). */
static void prefill(struct kvp_pool *pool, int64_t *last) {
    int64_t prefix[BS] = {0, 0, 0}, seq[BS] = {5, 4, 1}, ll[BS] = {-1, -1, -1}, out[10];
    CHECK_OK(kvp_pool_alloc_extend(pool, prefix, seq, ll, BS, 10, out, 10));
    last[0] = out[4];
    last[1] = out[8];
    last[2] = out[9];
}

static struct kvp_pool_stats stats(struct kvp_pool *pool) {
    struct kvp_pool_stats st;
    CHECK_OK(kvp_pool_get_stats(pool, &st));
    return st;
}

/* The counters of an early finish: the reserve counted batch * K tokens and its pages, the
 * finish counts the unused pages as freed (counters only grow), so pages_in_use and the
 * available size equal a twin's that ran the plain decodes. Then a snapshot taken while a
 * reservation holds pages restores them plainly allocated: the batch can be freed. */
static void test_counters_and_restore(void) {
    g_test = "reservation counters and restore";
    struct kvp_pool *a = new_pool(), *b = new_pool();
    int64_t last[BS], prev[BS];
    prefill(a, last);
    prefill(b, prev);
    const int64_t lens[BS] = {5, 4, 1};
    struct kvp_pool_stats a0 = stats(a), b0 = stats(b);
    struct kvp_decode_reservation *res = NULL;
    CHECK_OK(kvp_pool_reserve_decode(a, lens, last, BS, K, &res));
    for (int s = 0; s < 2; ++s) {
        int64_t got[BS], want[BS], seq[BS];
        CHECK_OK(kvp_decode_reservation_step(res, got, BS, NULL, NULL));
        for (int i = 0; i < BS; ++i) seq[i] = lens[i] + s + 1;
        CHECK_OK(kvp_pool_alloc_decode(b, seq, prev, BS, want, BS));
        CHECK(memcmp(got, want, sizeof got) == 0);
        memcpy(prev, want, sizeof prev);
    }
    CHECK_OK(kvp_decode_reservation_finish(a, res, 2));
    kvp_decode_reservation_free(res);
    struct kvp_pool_stats a1 = stats(a), b1 = stats(b);
    CHECK_EQ(available(a), available(b));
    CHECK_EQ(a1.pages_in_use, b1.pages_in_use);
    /* 4 pages reserved (see above); the 2 steps used took 1 (request 1 at step 1). */
    CHECK_EQ(a1.tokens_allocated - a0.tokens_allocated, BS * K);
    CHECK_EQ(a1.pages_allocated - a0.pages_allocated, 4);
    CHECK_EQ(a1.pages_freed - a0.pages_freed, 3);
    CHECK_EQ(a1.slots_freed - a0.slots_freed, 3 * PS);
    CHECK_EQ(a1.alloc_decode_calls, a0.alloc_decode_calls);
    CHECK_EQ(b1.tokens_allocated - b0.tokens_allocated, BS * 2);
    CHECK_EQ(b1.pages_allocated - b0.pages_allocated, 1);

    /* A snapshot taken while the reservation holds the batch's pages. */
    int64_t lens2[BS];
    for (int i = 0; i < BS; ++i) lens2[i] = lens[i] + 2;
    res = NULL;
    CHECK_OK(kvp_pool_reserve_decode(a, lens2, prev, BS, 3, &res));
    struct kvp_snapshot *snap = NULL;
    CHECK_OK(kvp_pool_backup_state(a, &snap));
    uint64_t held_avail = available(a), held_digest = digest(a);
    CHECK_STATUS(kvp_pool_free_indices(a, prev, BS), KVP_STATUS_INVALID_STATE);
    CHECK_OK(kvp_pool_restore_state(a, snap)); /* while the reservation is live */
    CHECK_EQ(available(a), held_avail);
    CHECK_EQ(digest(a), held_digest);
    /* The restore ended the reservation: its step and finish are refused, its free is
       harmless, and the pages it held are plain allocated pages again. */
    int64_t past[BS] = {-7, -7, -7};
    CHECK_STATUS(kvp_decode_reservation_step(res, past, BS, NULL, NULL), KVP_STATUS_INVALID_STATE);
    CHECK_EQ(past[0], -7);
    CHECK_STATUS(kvp_decode_reservation_finish(a, res, 0), KVP_STATUS_INVALID_STATE);
    kvp_decode_reservation_free(res);
    CHECK_OK(kvp_pool_free_indices(a, prev, BS));
    CHECK(available(a) > held_avail);
    kvp_snapshot_free(snap);
    kvp_pool_free(a);
    kvp_pool_free(b);
}

/* A reserve or step refused for its buffers counts as a rejected call and as no decode
 * call (a reservation has no call counter of its own), as a refused pool call counts. */
static void test_refused_buffers_count_as_rejected_calls(void) {
    g_test = "reservation buffer refusals in the counters";
    struct kvp_pool *a = new_pool();
    int64_t last[BS];
    prefill(a, last);
    const int64_t lens[BS] = {5, 4, 1};
    struct kvp_decode_reservation *res = NULL;
    struct kvp_pool_stats s0 = stats(a);
    CHECK_STATUS(kvp_pool_reserve_decode(a, lens, NULL, BS, K, &res), KVP_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(kvp_pool_reserve_decode(a, NULL, last, BS, K, &res), KVP_STATUS_NULL_ARGUMENT);
    CHECK(res == NULL);
    struct kvp_pool_stats s1 = stats(a);
    CHECK_EQ(s1.rejected_calls - s0.rejected_calls, 2);
    CHECK_EQ(s1.alloc_decode_calls, s0.alloc_decode_calls);

    CHECK_OK(kvp_pool_reserve_decode(a, lens, last, BS, K, &res));
    uint64_t before = digest(a);
    int64_t out[BS];
    struct kvp_req_table bad = {out, 7, 1, BS, BS}; /* unknown index type */
    const int64_t rows[BS] = {0, 1, 2};
    CHECK_STATUS(kvp_decode_reservation_step(res, NULL, BS, NULL, NULL), KVP_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(kvp_decode_reservation_step(res, out, BS, &bad, rows),
                 KVP_STATUS_INVALID_ARGUMENT);
    struct kvp_pool_stats s2 = stats(a);
    CHECK_EQ(s2.rejected_calls - s1.rejected_calls, 2);
    CHECK_EQ(s2.alloc_decode_calls, s1.alloc_decode_calls);
    CHECK_EQ(digest(a), before);
    /* Nothing was taken: the first step is still step 0. */
    CHECK_OK(kvp_decode_reservation_step(res, out, BS, NULL, NULL));
    CHECK_OK(kvp_decode_reservation_finish(a, res, 1));
    kvp_decode_reservation_free(res);
    kvp_pool_free(a);
}

int main(void) {
    g_test = "reservation";
    struct kvp_pool *a = new_pool(), *b = new_pool();
    int64_t last[BS], last_b[BS];
    prefill(a, last);
    prefill(b, last_b);
    CHECK(memcmp(last, last_b, sizeof last) == 0);
    const int64_t lens[BS] = {5, 4, 1};

    /* Reserve K steps on a; check the info. */
    struct kvp_decode_reservation *res = NULL;
    CHECK_OK(kvp_pool_reserve_decode(a, lens, last, BS, K, &res));
    uint32_t steps = 0;
    size_t batch = 0;
    uint64_t pages = 0;
    CHECK_OK(kvp_decode_reservation_get_info(res, &steps, &batch, &pages));
    CHECK_EQ(steps, K);
    CHECK_EQ(batch, BS);
    /* ceil((L + 6) / 4) - ceil(L / 4): 5 -> 3 - 2 = 1, 4 -> 3 - 1 = 2, 1 -> 2 - 1 = 1. */
    CHECK_EQ(pages, 4);

    /* A plain decode continuing request 0's partly filled page is refused: the reservation
       holds the page until its finish. */
    int64_t seq0 = 6, one = 0;
    uint64_t before = digest(a);
    CHECK_STATUS(kvp_pool_alloc_decode(a, &seq0, &last[0], 1, &one, 1), KVP_STATUS_INVALID_STATE);
    char message[512];
    (void)kvp_last_error_message(message, sizeof message);
    CHECK(strstr(message, "held by a live decode reservation") != NULL);
    CHECK_EQ(digest(a), before);

    /* K steps against K plain decodes on b; the first two also write an int32 table. */
    int32_t table[ROWS * ROW_LEN];
    memset(table, 0, sizeof table);
    struct kvp_req_table t = {table, KVP_INDEX_TYPE_I32, ROWS, ROW_LEN, ROW_LEN};
    const int64_t rows[BS] = {3, 0, 2};
    int64_t prev[BS];
    memcpy(prev, last_b, sizeof prev);
    for (int s = 0; s < K; ++s) {
        int64_t got[BS], want[BS], seq[BS];
        if (s < 2) {
            CHECK_OK(kvp_decode_reservation_step(res, got, BS, &t, rows));
        } else {
            CHECK_OK(kvp_decode_reservation_step(res, got, BS, NULL, NULL));
        }
        for (int i = 0; i < BS; ++i) seq[i] = lens[i] + s + 1;
        CHECK_OK(kvp_pool_alloc_decode(b, seq, prev, BS, want, BS));
        for (int i = 0; i < BS; ++i) {
            CHECK_EQ(got[i], want[i]);
            if (s < 2) CHECK_EQ(table[rows[i] * ROW_LEN + lens[i] + s], want[i]);
        }
        memcpy(prev, want, sizeof prev);
    }
    CHECK_EQ(available(a), available(b));
    CHECK_EQ(digest(a), digest(b));

    /* Past the reservation: an error, nothing written. */
    int64_t past[BS] = {-7, -7, -7};
    before = digest(a);
    CHECK_STATUS(kvp_decode_reservation_step(res, past, BS, NULL, NULL), KVP_STATUS_INVALID_STATE);
    CHECK_EQ(past[0], -7);
    CHECK_EQ(digest(a), before);
    /* The wrong step count, the wrong pool, NULLs. */
    CHECK_STATUS(kvp_decode_reservation_finish(a, res, K - 1), KVP_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(kvp_decode_reservation_finish(b, res, K), KVP_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(kvp_decode_reservation_finish(NULL, res, K), KVP_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(kvp_decode_reservation_finish(a, NULL, K), KVP_STATUS_NULL_ARGUMENT);
    CHECK_OK(kvp_decode_reservation_finish(a, res, K));
    CHECK_EQ(digest(a), digest(b));
    CHECK_STATUS(kvp_decode_reservation_finish(a, res, K), KVP_STATUS_INVALID_STATE);
    kvp_decode_reservation_free(res);

    /* An early finish: reserve 6 more steps on a, use 2, finish; b runs 2 plain decodes. */
    int64_t lens2[BS], cur_a[BS];
    for (int i = 0; i < BS; ++i) lens2[i] = lens[i] + K;
    memcpy(cur_a, prev, sizeof cur_a);
    res = NULL;
    CHECK_OK(kvp_pool_reserve_decode(a, lens2, cur_a, BS, K, &res));
    for (int s = 0; s < 2; ++s) {
        int64_t got[BS], want[BS], seq[BS];
        CHECK_OK(kvp_decode_reservation_step(res, got, BS, NULL, NULL));
        for (int i = 0; i < BS; ++i) seq[i] = lens2[i] + s + 1;
        CHECK_OK(kvp_pool_alloc_decode(b, seq, prev, BS, want, BS));
        for (int i = 0; i < BS; ++i) CHECK_EQ(got[i], want[i]);
        memcpy(prev, want, sizeof prev);
    }
    CHECK_OK(kvp_decode_reservation_finish(a, res, 2));
    CHECK_EQ(available(a), available(b));
    CHECK_EQ(digest(a), digest(b));
    kvp_decode_reservation_free(res);

    /* A shortage is refused with nothing changed and no handle written. */
    before = digest(a);
    uint64_t avail = available(a);
    struct kvp_decode_reservation *none = NULL;
    int64_t lens3[BS];
    for (int i = 0; i < BS; ++i) lens3[i] = lens2[i] + 2;
    CHECK_STATUS(kvp_pool_reserve_decode(a, lens3, prev, BS, 200, &none), KVP_STATUS_OUT_OF_SLOTS);
    CHECK(none == NULL);
    CHECK_EQ(digest(a), before);
    CHECK_EQ(available(a), avail);
    /* Bad arguments. */
    CHECK_STATUS(kvp_pool_reserve_decode(a, lens3, prev, BS, 0, &none), KVP_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(kvp_pool_reserve_decode(a, lens3, prev, BS, 2, NULL), KVP_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(kvp_pool_reserve_decode(a, NULL, prev, BS, 2, &none), KVP_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(kvp_pool_reserve_decode(NULL, lens3, prev, BS, 2, &none), KVP_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(kvp_pool_reserve_decode_async(a, lens3, lens3, prev, BS, 2, &none, NULL),
                 KVP_STATUS_WRONG_BACKEND);
    /* A pool passed as a reservation. */
    CHECK_STATUS(kvp_decode_reservation_step((struct kvp_decode_reservation *)a, past, BS, NULL, NULL),
                 KVP_STATUS_INVALID_ARGUMENT);
    CHECK(none == NULL);
    CHECK_EQ(digest(a), before);

    /* While a reservation is live its requests can be neither freed nor rewound (later steps
       still hand out their pages' slots); freeing the reservation unfinished ends that. */
    res = NULL;
    CHECK_OK(kvp_pool_reserve_decode(a, lens3, prev, BS, 3, &res));
    before = digest(a);
    CHECK_STATUS(kvp_pool_free_indices(a, prev, BS), KVP_STATUS_INVALID_STATE);
    CHECK_STATUS(kvp_pool_rewind(a, prev, BS), KVP_STATUS_INVALID_STATE);
    CHECK_EQ(digest(a), before);
    kvp_decode_reservation_free(res);
    CHECK_EQ(digest(a), before);
    CHECK_OK(kvp_pool_rewind(a, prev, BS)); /* back to before the 3 steps (new pages kept) */
    CHECK(digest(a) != before);

    /* A reservation keeps its pool alive; freeing it unfinished keeps its pages. */
    res = NULL;
    CHECK_OK(kvp_pool_reserve_decode(a, lens3, prev, BS, 3, &res));
    uint64_t after_reserve = available(a);
    kvp_pool_free(a);
    CHECK_STATUS(kvp_decode_reservation_step_async(res, past, NULL, NULL, NULL),
                 KVP_STATUS_WRONG_BACKEND);
    CHECK_OK(kvp_decode_reservation_step(res, past, BS, NULL, NULL));
    CHECK(after_reserve < avail);
    kvp_decode_reservation_free(res);
    kvp_decode_reservation_free(NULL);
    kvp_pool_free(b);

    test_counters_and_restore();
    test_refused_buffers_count_as_rejected_calls();

    if (g_failures != 0) {
        printf("reservation_test (C): %d of %d checks failed\n", g_failures, g_checks);
        return 1;
    }
    printf("reservation_test (C): all %d checks passed\n", g_checks);
    return 0;
}
