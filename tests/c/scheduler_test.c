/*
 * C99 test of the scheduler half of kvpool's C ABI (include/kvpool.h), built and run by
 * `cargo test` (tests/ffi_programs.rs). It runs a small continuous-batching engine loop the
 * way the header's kvp_scheduler documentation describes it, with a real pool doing the
 * allocations:
 *
 *   kvp_scheduler_submit new requests
 *   -> kvp_scheduler_step
 *   -> free the slot rows of retracted / preempted / aborted requests
 *   -> one kvp_pool_alloc_extend for plan.prefill
 *   -> one kvp_pool_alloc_decode for plan.decode
 *   -> ("run the model") kvp_scheduler_finish requests whose output reached their target,
 *      and free their rows.
 *
 * Invariants checked: no allocation ever fails; after every step each live request's
 * kv_len (kvp_scheduler_get_request) equals its slot row's length and its output_len the
 * engine's count; the pool's pages in use are exactly the pages of the live rows; an
 * evicted request's kv_len is exactly its row; every request finishes; the pool is full
 * again at the end.
 *
 * Exit status 0 and the final "all N checks passed" line mean success.
 */
#include "kvpool.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- checks (check.h) -------------------------------------------------------------- */

#include "check.h"

/* ---- the engine's view of its requests ------------------------------------------------ */

enum { NUM_REQUESTS = 50, POOL_SIZE = 4096, PAGE_SIZE = 16, MAX_STEPS = 20000 };

struct request {
    uint64_t id;
    uint64_t input_len;
    uint64_t max_new_tokens;
    uint64_t target; /* the engine "generates EOS" once this many tokens are out */
    int64_t *row;    /* the request's slot row (its req_to_token row) */
    size_t row_len;
    uint64_t outputs; /* tokens generated, as the engine counts them */
    bool submitted;
    bool finished;
};

static struct request g_reqs[NUM_REQUESTS];

static struct request *find(uint64_t id) {
    CHECK(id < NUM_REQUESTS);
    return id < NUM_REQUESTS ? &g_reqs[id] : &g_reqs[0];
}

/* A small deterministic generator (the lengths must be the same on every run). */
static uint64_t g_rng = 0x9E3779B97F4A7C15u;
static uint64_t rnd(uint64_t lo, uint64_t hi) {
    g_rng = g_rng * 6364136223846793005u + 1442695040888963407u;
    return lo + (g_rng >> 33) % (hi - lo + 1);
}

static void free_row(struct kvp_pool *pool, struct request *r) {
    if (r->row_len > 0) CHECK_OK(kvp_pool_free_indices(pool, r->row, r->row_len));
    r->row_len = 0;
}

/* Frees the KV of every request the plan evicts (retracted and preempted requests wait
 * again and re-prefill later; aborted ones are gone). */
static void free_evicted(struct kvp_pool *pool, const struct kvp_evicted *list, size_t n,
                         bool gone, int *aborted) {
    size_t i;
    for (i = 0; i < n; i++) {
        struct request *r = find(list[i].id);
        CHECK_EQ(list[i].kv_len, r->row_len);
        free_row(pool, r);
        if (gone) {
            r->finished = true;
            (*aborted)++;
        }
    }
}

/* One kvp_pool_alloc_extend for the whole prefill batch: request i grows from
 * prefix_lens[i] to seq_lens[i], its last cached token in slot last_loc[i]. */
static void run_prefill(struct kvp_pool *pool, const struct kvp_step_plan *plan) {
    size_t n = plan->num_prefill, i, total = 0, at = 0;
    int64_t *prefix_lens, *seq_lens, *last_loc, *out;
    if (n == 0) return;
    prefix_lens = malloc(n * sizeof *prefix_lens);
    seq_lens = malloc(n * sizeof *seq_lens);
    last_loc = malloc(n * sizeof *last_loc);
    for (i = 0; i < n; i++) {
        const struct kvp_prefill_entry *e = &plan->prefill[i];
        struct request *r = find(e->id);
        CHECK_EQ(e->prefix_len, r->row_len);
        CHECK(e->extend_len > 0);
        prefix_lens[i] = (int64_t)e->prefix_len;
        seq_lens[i] = (int64_t)(e->prefix_len + e->extend_len);
        last_loc[i] = r->row_len > 0 ? r->row[r->row_len - 1] : -1;
        total += (size_t)e->extend_len;
    }
    out = malloc(total * sizeof *out);
    CHECK_OK(kvp_pool_alloc_extend(pool, prefix_lens, seq_lens, last_loc, n, total, out,
                                   total));
    for (i = 0; i < n; i++) {
        const struct kvp_prefill_entry *e = &plan->prefill[i];
        struct request *r = find(e->id);
        memcpy(r->row + r->row_len, out + at, (size_t)e->extend_len * sizeof *out);
        r->row_len += (size_t)e->extend_len;
        at += (size_t)e->extend_len;
        if (!e->chunked) r->outputs++; /* the last prefill position yields a token */
    }
    free(out);
    free(last_loc);
    free(seq_lens);
    free(prefix_lens);
}

/* One kvp_pool_alloc_decode for the decode rows: each sequence grows by one token. */
static void run_decode(struct kvp_pool *pool, const struct kvp_step_plan *plan) {
    size_t n = plan->num_decode, i;
    int64_t *seq_lens, *last_loc, *out;
    if (n == 0) return;
    seq_lens = malloc(n * sizeof *seq_lens);
    last_loc = malloc(n * sizeof *last_loc);
    out = malloc(n * sizeof *out);
    for (i = 0; i < n; i++) {
        struct request *r = find(plan->decode[i]);
        CHECK(r->row_len > 0);
        seq_lens[i] = (int64_t)r->row_len + 1;
        last_loc[i] = r->row_len > 0 ? r->row[r->row_len - 1] : -1;
    }
    CHECK_OK(kvp_pool_alloc_decode(pool, seq_lens, last_loc, n, out, n));
    for (i = 0; i < n; i++) {
        struct request *r = find(plan->decode[i]);
        r->row[r->row_len++] = out[i];
        r->outputs++;
    }
    free(out);
    free(last_loc);
    free(seq_lens);
}

/* ---- the engine loop ------------------------------------------------------------------- */

static void test_engine_loop(void) {
    struct kvp_pool_config pool_cfg = kvp_pool_config_default();
    struct kvp_scheduler_config cfg = kvp_scheduler_config_default();
    struct kvp_pool *pool = NULL;
    struct kvp_scheduler *sched = NULL;
    struct kvp_scheduler_stats stats;
    struct kvp_pool_stats pstats;
    struct kvp_submit_result result;
    struct kvp_request big;
    uint64_t avail = 0, next_submit = 0;
    int finished = 0, aborted = 0, retractions = 0, steps = 0, prefill_steps = 0;
    size_t i;

    pool_cfg.size = POOL_SIZE;
    pool_cfg.page_size = PAGE_SIZE;
    CHECK_OK(kvp_pool_new(&pool_cfg, &pool));
    /* Small chunks, and a low initial new-token ratio: admission reserves little for the
     * outputs, so decode memory runs short and requests get retracted. */
    cfg.chunked_prefill_size = 256;
    cfg.init_new_token_ratio = 0.05;
    CHECK_OK(kvp_scheduler_new(&cfg, pool, &sched));
    if (pool == NULL || sched == NULL) return;

    /* A request that can never fit is reported, not queued. */
    memset(&big, 0, sizeof big);
    big.id = 1000;
    big.input_len = POOL_SIZE;
    big.max_new_tokens = 10;
    CHECK_OK(kvp_scheduler_submit(sched, &big, NULL, 0, &result));
    CHECK(!result.queued);
    CHECK_EQ(result.needed, POOL_SIZE + 10 + PAGE_SIZE);
    CHECK_EQ(result.capacity, POOL_SIZE);

    for (i = 0; i < NUM_REQUESTS; i++) {
        struct request *r = &g_reqs[i];
        r->id = i;
        r->input_len = rnd(1, 900);
        r->max_new_tokens = rnd(1, 300);
        r->target = r->max_new_tokens; /* every request runs to its max_new_tokens */
        r->row = malloc((size_t)(r->input_len + r->max_new_tokens) * sizeof *r->row);
    }

    while (finished + aborted < NUM_REQUESTS && steps < MAX_STEPS) {
        struct kvp_step_plan plan;
        uint64_t pages = 0;
        steps++;
        /* Arrivals: five requests every other step. */
        if (steps % 2 == 1) {
            for (i = 0; i < 5 && next_submit < NUM_REQUESTS; i++, next_submit++) {
                struct request *r = &g_reqs[next_submit];
                struct kvp_request req;
                memset(&req, 0, sizeof req);
                req.id = r->id;
                req.input_len = r->input_len;
                req.max_new_tokens = r->max_new_tokens;
                CHECK_OK(kvp_scheduler_submit(sched, &req, NULL, 0, &result));
                CHECK(result.queued);
                r->submitted = true;
            }
        }

        /* Attached to the pool: the scheduler reads its available size itself. */
        CHECK_OK(kvp_scheduler_step(sched, 0, 0, true, &plan));
        if (plan.kind == KVP_STEP_KIND_PREFILL) prefill_steps++;
        free_evicted(pool, plan.retracted, plan.num_retracted, false, &aborted);
        free_evicted(pool, plan.preempted, plan.num_preempted, false, &aborted);
        free_evicted(pool, plan.aborted, plan.num_aborted, true, &aborted);
        retractions += (int)plan.num_retracted;
        run_prefill(pool, &plan);
        run_decode(pool, &plan);

        /* Every live request's KV is exactly its row. */
        for (i = 0; i < next_submit; i++) {
            struct request *r = &g_reqs[i];
            struct kvp_request_state st;
            if (r->finished) continue;
            CHECK_OK(kvp_scheduler_get_request(sched, r->id, &st));
            CHECK_EQ(st.kv_len, r->row_len);
            CHECK_EQ(st.output_len, r->outputs);
            if (st.phase == KVP_PHASE_WAITING) CHECK_EQ(r->row_len, 0);
            /* "Run the model", then finish the requests that reached their target. */
            if (st.phase == KVP_PHASE_RUNNING && st.output_len >= r->target) {
                uint64_t kv_len = 0;
                CHECK_EQ(st.output_len, r->target);
                CHECK_OK(kvp_scheduler_finish(sched, r->id, &kv_len));
                CHECK_EQ(kv_len, r->row_len);
                free_row(pool, r);
                r->finished = true;
                finished++;
            }
            pages += (r->row_len + PAGE_SIZE - 1) / PAGE_SIZE;
        }
        CHECK_OK(kvp_pool_get_stats(pool, &pstats));
        CHECK_EQ(pstats.pages_in_use, pages);
    }

    CHECK_EQ(finished, NUM_REQUESTS);
    CHECK_EQ(aborted, 0);
    CHECK(retractions > 0);
    CHECK(prefill_steps > 1);
    CHECK(steps > 100);
    CHECK_OK(kvp_scheduler_get_stats(sched, &stats));
    CHECK_EQ(stats.finished, NUM_REQUESTS);
    CHECK_EQ(stats.retractions, retractions);
    CHECK_EQ(stats.unfittable, 1);
    CHECK_EQ(stats.steps, steps);
    CHECK_EQ(stats.prefill_steps, prefill_steps);
    CHECK_EQ(stats.waiting + stats.chunking + stats.running, 0);
    CHECK(stats.chunks > stats.admitted); /* some prompts were chunked */
    CHECK_OK(kvp_pool_available_size(pool, &avail));
    CHECK_EQ(avail, POOL_SIZE);
    CHECK_OK(kvp_pool_get_stats(pool, &pstats));
    CHECK_EQ(pstats.pages_in_use, 0);
    CHECK_EQ(pstats.failed_allocations, 0);
    CHECK_EQ(pstats.rejected_calls, 0);
    printf("engine loop: %d requests finished in %d steps (%d prefill), %d retractions\n",
           finished, steps, prefill_steps, retractions);

    /* The scheduler holds a reference to the pool: freeing the caller's pool first is
     * fine, and the idle scheduler still steps (reading the pool) before it is freed. */
    kvp_pool_free(pool);
    {
        struct kvp_step_plan plan;
        CHECK_OK(kvp_scheduler_step(sched, 0, 0, true, &plan));
        CHECK_EQ(plan.kind, KVP_STEP_KIND_IDLE);
    }
    kvp_scheduler_free(sched);
    for (i = 0; i < NUM_REQUESTS; i++) free(g_reqs[i].row);
}

int main(void) {
    g_test = "engine_loop";
    test_engine_loop();
    printf("%-32s %s\n", g_test, g_failures == 0 ? "ok" : "FAILED");
    if (g_failures != 0) {
        printf("scheduler_test (C): %d of %d checks FAILED\n", g_failures, g_checks);
        return 1;
    }
    printf("scheduler_test (C): all %d checks passed\n", g_checks);
    return 0;
}
