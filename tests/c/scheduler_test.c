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
 * Then the hardening cases: values whose arithmetic would wrap (a request of UINT64_MAX
 * tokens, near-overflow lengths, available + evictable beyond INT64_MAX, at a step and at
 * adder creation) are refused with a status and a message, or reported unfittable, and
 * leave the object as it was (its counters, budgets, and the plan of a following valid
 * step equal a fresh object's); configurations that could never admit anything are
 * refused at creation naming the field.
 *
 * Exit status 0 and the final "all N checks passed" line mean success.
 */
#include "kvpool.h"

#include <math.h>
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
    {
        /* The need query predicts the allocation: it fits (the scheduler admitted it), and
           it takes exactly `pages` pages. */
        uint64_t pages = 0, tokens = 0, before = 0, after = 0;
        CHECK_OK(kvp_pool_extend_need(pool, prefix_lens, seq_lens, n, &pages, &tokens));
        CHECK_EQ(tokens, total);
        CHECK_OK(kvp_pool_available_size(pool, &before));
        CHECK(pages * PAGE_SIZE <= before);
        CHECK_OK(kvp_pool_alloc_extend(pool, prefix_lens, seq_lens, last_loc, n, total, out,
                                       total));
        CHECK_OK(kvp_pool_available_size(pool, &after));
        CHECK_EQ(before - after, pages * PAGE_SIZE);
    }
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
    {
        uint64_t pages = 0, before = 0, after = 0;
        CHECK_OK(kvp_pool_decode_need(pool, seq_lens, n, &pages));
        CHECK_OK(kvp_pool_available_size(pool, &before));
        CHECK_OK(kvp_pool_alloc_decode(pool, seq_lens, last_loc, n, out, n));
        CHECK_OK(kvp_pool_available_size(pool, &after));
        CHECK_EQ(before - after, pages * PAGE_SIZE);
    }
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
                if (r->id % 2 == 0) {
                    CHECK_OK(kvp_scheduler_finish(sched, r->id, &kv_len));
                } else {
                    /* No prefix cache in this loop: the whole row is the request's own. */
                    struct kvp_finished f;
                    CHECK_OK(kvp_scheduler_finish_ex(sched, r->id, &f));
                    CHECK_EQ(f.id, r->id);
                    CHECK_EQ(f.prefix_len, 0);
                    CHECK_EQ(f.prefix_evictable, 0);
                    kv_len = f.kv_len;
                }
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

/* ---- impossible values: refused with a status (or reported unfittable), object unchanged */

/* Every public name of the header carries the KVP_ prefix: the SGLang constants too. */
#if defined(CLIP_MAX_NEW_TOKENS) || defined(RETRACT_DECODE_STEPS)
#error "kvpool.h defines an unprefixed macro"
#endif

static const uint64_t TWO_POW_63 = (uint64_t)1 << 63;

/* The status is `want` and the last error message mentions `needle`. */
static void check_refused(enum kvp_status got, enum kvp_status want, const char *needle,
                          int line) {
    char msg[512];
    g_checks++;
    if (got != want) {
        fail_at(__FILE__, line);
        fprintf(stderr, "status %d (%s), want %d (%s)\n", (int)got,
                kvp_status_str((int32_t)got), (int)want, kvp_status_str((int32_t)want));
        return;
    }
    msg[0] = '\0';
    (void)kvp_last_error_message(msg, sizeof msg);
    g_checks++;
    if (strstr(msg, needle) == NULL) {
        fail_at(__FILE__, line);
        fprintf(stderr, "message \"%s\" does not mention \"%s\"\n", msg, needle);
    }
}
#define CHECK_REFUSED(call, want, needle) check_refused((call), (want), (needle), __LINE__)

static struct kvp_scheduler *unattached_scheduler(void) {
    struct kvp_scheduler_config cfg = kvp_scheduler_config_default();
    struct kvp_scheduler *sched = NULL;
    cfg.capacity = 10000;
    cfg.page_size = 16;
    CHECK_OK(kvp_scheduler_new(&cfg, NULL, &sched));
    return sched;
}

static struct kvp_request request(uint64_t id, uint64_t input_len, uint64_t max_new_tokens) {
    struct kvp_request r;
    memset(&r, 0, sizeof r);
    r.id = id;
    r.input_len = input_len;
    r.max_new_tokens = max_new_tokens;
    return r;
}

/* Two plans decide the same (what the engine reads of them). */
static void check_same_plan(const struct kvp_step_plan *a, const struct kvp_step_plan *b) {
    size_t i;
    CHECK_EQ(a->kind, b->kind);
    CHECK_EQ(a->batch_is_full, b->batch_is_full);
    CHECK(a->new_token_ratio == b->new_token_ratio);
    CHECK_EQ(a->num_prefill, b->num_prefill);
    CHECK_EQ(a->num_decode, b->num_decode);
    CHECK_EQ(a->num_retracted + a->num_preempted + a->num_aborted,
             b->num_retracted + b->num_preempted + b->num_aborted);
    for (i = 0; i < a->num_prefill && i < b->num_prefill; i++) {
        CHECK_EQ(a->prefill[i].id, b->prefill[i].id);
        CHECK_EQ(a->prefill[i].prefix_len, b->prefill[i].prefix_len);
        CHECK_EQ(a->prefill[i].extend_len, b->prefill[i].extend_len);
        CHECK_EQ(a->prefill[i].chunked, b->prefill[i].chunked);
    }
}

/* Submits request 7 (100 tokens) to both and checks the next steps plan the same prefill. */
static void check_same_next_step(struct kvp_scheduler *sched, struct kvp_scheduler *fresh) {
    struct kvp_request r = request(7, 100, 10);
    struct kvp_submit_result result;
    struct kvp_step_plan plan, fresh_plan;
    CHECK_OK(kvp_scheduler_submit(sched, &r, NULL, 0, &result));
    CHECK(result.queued);
    CHECK_OK(kvp_scheduler_submit(fresh, &r, NULL, 0, &result));
    CHECK_OK(kvp_scheduler_step(sched, 10000, 0, true, &plan));
    CHECK_OK(kvp_scheduler_step(fresh, 10000, 0, true, &fresh_plan));
    check_same_plan(&plan, &fresh_plan);
    CHECK_EQ(plan.kind, KVP_STEP_KIND_PREFILL);
    CHECK_EQ(plan.num_prefill, 1);
    if (plan.num_prefill == 1) CHECK_EQ(plan.prefill[0].extend_len, 100);
}

/* Before: input_len UINT64_MAX with max_new_tokens 1 needed UINT64_MAX + 1 + 16, which
 * wrapped to 16: queued, then planned with extend_len 2^64 - 1; inputs just below it wrapped
 * to tiny needs the same way. Now the need does not wrap: unfittable, not queued. */
static void test_submit_need_overflow(void) {
    struct kvp_scheduler *sched = unattached_scheduler();
    struct kvp_scheduler *fresh = unattached_scheduler();
    struct kvp_scheduler_stats stats;
    struct kvp_submit_result result;
    struct kvp_request r;
    const uint64_t cases[][2] = {
        {UINT64_MAX, 1}, {UINT64_MAX - 10, 20}, {UINT64_MAX - 15, 0}, {UINT64_MAX - 4000, 4096}};
    size_t i;
    if (sched == NULL || fresh == NULL) return;
    for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        r = request(1, cases[i][0], cases[i][1]);
        memset(&result, 0xAB, sizeof result);
        CHECK_OK(kvp_scheduler_submit(sched, &r, NULL, 0, &result));
        CHECK(!result.queued);
        CHECK_EQ(result.needed, UINT64_MAX);
        CHECK_EQ(result.capacity, 10000);
    }
    CHECK_OK(kvp_scheduler_get_stats(sched, &stats));
    CHECK_EQ(stats.waiting, 0);
    CHECK_EQ(stats.unfittable, 4);

    /* input_len + output_len beyond 64 bits: the request is malformed. */
    r = request(2, UINT64_MAX - 1, 10);
    r.output_len = 2;
    memset(&result, 0xAB, sizeof result);
    CHECK_REFUSED(kvp_scheduler_submit(sched, &r, NULL, 0, &result),
                  KVP_STATUS_INVALID_LENGTHS, "output_len 2");
    CHECK_EQ(result.needed, 0xABABABABABABABABu); /* untouched */
    CHECK_OK(kvp_scheduler_get_stats(sched, &stats));
    CHECK_EQ(stats.waiting, 0);
    CHECK_EQ(stats.unfittable, 4);

    check_same_next_step(sched, fresh);
    kvp_scheduler_free(fresh);
    kvp_scheduler_free(sched);
}

/* Before: available + evictable wrapped (UINT64_MAX + 2: a budget of 1 token) or turned
 * negative as a signed budget (2^63: "no memory"). Now refused, nothing counted. */
static void test_step_room_overflow(void) {
    struct kvp_scheduler *sched = unattached_scheduler();
    struct kvp_scheduler *fresh = unattached_scheduler();
    struct kvp_scheduler_stats stats;
    struct kvp_step_plan plan;
    struct kvp_pool_config pool_cfg = kvp_pool_config_default();
    struct kvp_pool *pool = NULL;
    struct kvp_scheduler_config cfg = kvp_scheduler_config_default();
    struct kvp_scheduler *attached = NULL;
    const uint64_t rooms[][2] = {{UINT64_MAX, 2}, {TWO_POW_63, 0}, {TWO_POW_63 - 1, 1}};
    size_t i;
    if (sched == NULL || fresh == NULL) return;
    for (i = 0; i < sizeof rooms / sizeof rooms[0]; i++) {
        memset(&plan, 0xAB, sizeof plan);
        CHECK_REFUSED(kvp_scheduler_step(sched, rooms[i][0], rooms[i][1], true, &plan),
                      KVP_STATUS_INVALID_ARGUMENT, "evictable");
        CHECK_EQ(plan.kind, 0xABABABABu); /* untouched */
    }
    CHECK_OK(kvp_scheduler_get_stats(sched, &stats));
    CHECK_EQ(stats.steps, 0);
    check_same_next_step(sched, fresh);
    /* The largest countable room is fine. */
    CHECK_OK(kvp_scheduler_step(sched, TWO_POW_63 - 1, 0, true, &plan));

    /* Attached: the pool's available size plus the caller's evictable tokens. */
    pool_cfg.size = 4096;
    pool_cfg.page_size = 16;
    CHECK_OK(kvp_pool_new(&pool_cfg, &pool));
    CHECK_OK(kvp_scheduler_new(&cfg, pool, &attached));
    if (attached != NULL) {
        CHECK_REFUSED(kvp_scheduler_step(attached, 0, UINT64_MAX - 100, true, &plan),
                      KVP_STATUS_INVALID_ARGUMENT, "available 4096");
        CHECK_OK(kvp_scheduler_get_stats(attached, &stats));
        CHECK_EQ(stats.steps, 0);
        CHECK_OK(kvp_scheduler_step(attached, 0, 0, true, &plan));
        CHECK_EQ(plan.kind, KVP_STEP_KIND_IDLE);
    }
    kvp_scheduler_free(attached);
    kvp_pool_free(pool);
    kvp_scheduler_free(fresh);
    kvp_scheduler_free(sched);
}

static void check_same_budget(const struct kvp_budget *a, const struct kvp_budget *b) {
    CHECK(a->rem_total_tokens == b->rem_total_tokens);
    CHECK_EQ(a->cur_rem_tokens, b->cur_rem_tokens);
    CHECK_EQ(a->rem_input_tokens, b->rem_input_tokens);
    CHECK_EQ(a->rem_chunk_tokens, b->rem_chunk_tokens);
    CHECK_EQ(a->state, b->state);
}

/* Before: add_one_req(input_len = UINT64_MAX) was admitted (its need wrapped to 0 and its
 * page-ceiled extend to -1); available + evictable wrapped at adder creation. */
static void test_adder_overflow(void) {
    struct kvp_adder_config cfg = kvp_adder_config_default();
    struct kvp_adder *adder = NULL, *fresh = NULL;
    struct kvp_adder *untouched = (struct kvp_adder *)&cfg;
    struct kvp_budget before, after;
    struct kvp_admission out, fresh_out;
    struct kvp_candidate c;
    const uint64_t rooms[][2] = {{UINT64_MAX, 2}, {TWO_POW_63, 0}, {TWO_POW_63 - 1, 1}};
    size_t i;

    for (i = 0; i < sizeof rooms / sizeof rooms[0]; i++) {
        adder = untouched;
        CHECK_REFUSED(kvp_adder_new(&cfg, rooms[i][0], rooms[i][1], NULL, 0, 0, &adder),
                      KVP_STATUS_INVALID_ARGUMENT, "evictable");
        CHECK(adder == untouched);
    }
    adder = NULL;
    CHECK_OK(kvp_adder_new(&cfg, TWO_POW_63 - 1, 0, NULL, 0, 0, &adder));
    kvp_adder_free(adder);

    adder = NULL;
    CHECK_OK(kvp_adder_new(&cfg, 100000, 0, NULL, 0, 0, &adder));
    CHECK_OK(kvp_adder_new(&cfg, 100000, 0, NULL, 0, 0, &fresh));
    if (adder == NULL || fresh == NULL) return;
    CHECK_OK(kvp_adder_get_budget(adder, &before));

    memset(&c, 0, sizeof c);
    c.input_len = UINT64_MAX;
    c.max_new_tokens = 1;
    memset(&out, 0xAB, sizeof out);
    CHECK_REFUSED(kvp_adder_add_one_req(adder, &c, &out), KVP_STATUS_INVALID_LENGTHS,
                  "18446744073709551615");
    CHECK_EQ(out.extend_len, 0xABABABABABABABABu); /* untouched */
    CHECK_OK(kvp_adder_get_budget(adder, &after));
    check_same_budget(&before, &after);

    /* A chunk continuation whose length passes INT64_MAX. */
    CHECK_REFUSED(kvp_adder_add_chunked_req(adder, UINT64_MAX - 10, 100, 1, &out),
                  KVP_STATUS_INVALID_LENGTHS, "remaining 100");
    CHECK_OK(kvp_adder_get_budget(adder, &after));
    check_same_budget(&before, &after);

    /* The largest countable request and an unbounded max_new_tokens: decided, not wrapped. */
    c.input_len = TWO_POW_63 - 1;
    c.max_new_tokens = UINT64_MAX;
    CHECK_OK(kvp_adder_add_one_req(adder, &c, &out));
    CHECK(!out.admitted);
    CHECK_EQ(out.next, KVP_ADD_RESULT_NO_TOKEN);
    CHECK_OK(kvp_adder_get_budget(adder, &after));
    check_same_budget(&before, &after);

    /* The next valid request is decided as on a fresh adder. */
    c.input_len = 100;
    c.max_new_tokens = 10;
    CHECK_OK(kvp_adder_add_one_req(adder, &c, &out));
    CHECK_OK(kvp_adder_add_one_req(fresh, &c, &fresh_out));
    CHECK(out.admitted && fresh_out.admitted);
    CHECK_EQ(out.extend_len, 100);
    CHECK_EQ(out.extend_len, fresh_out.extend_len);
    CHECK_EQ(out.next, fresh_out.next);
    CHECK_OK(kvp_adder_get_budget(adder, &after));
    CHECK_OK(kvp_adder_get_budget(fresh, &before));
    check_same_budget(&before, &after);
    kvp_adder_free(fresh);
    kvp_adder_free(adder);
}

/* Configurations that could never admit anything (or whose numbers cannot be counted) are
 * refused at creation, the message naming the field; the out-pointer is untouched. */
static void test_refused_configs(void) {
    struct kvp_scheduler_config base = kvp_scheduler_config_default();
    struct kvp_adder_config abase = kvp_adder_config_default();
    struct kvp_delayer_config dbase = kvp_delayer_config_default();
    struct kvp_scheduler *sched;
    struct kvp_adder *adder;
    struct kvp_delayer *delayer;
    void *untouched = &base;
    int i;
    base.capacity = 10000;
    base.page_size = 16;
    for (i = 0; i < 10; i++) {
        struct kvp_scheduler_config cfg = base;
        const char *field = "";
        switch (i) {
        case 0: cfg.max_prefill_tokens = 0; field = "max_prefill_tokens"; break;
        case 1: cfg.max_prefill_tokens = UINT64_MAX; field = "max_prefill_tokens"; break;
        case 2: cfg.clip_max_new_tokens = 0; field = "clip_max_new_tokens"; break;
        case 3: cfg.init_new_token_ratio = 0.0; field = "init_new_token_ratio"; break;
        case 4: cfg.init_new_token_ratio = NAN; field = "init_new_token_ratio"; break;
        case 5: cfg.min_new_token_ratio_factor = -0.1; field = "min_new_token_ratio_factor"; break;
        case 6: cfg.schedule_conservativeness = 0.0; field = "schedule_conservativeness"; break;
        case 7: cfg.capacity = UINT64_MAX; field = "capacity"; break;
        case 8: cfg.page_size = 16384; field = "page_size"; break;
        default: cfg.chunked_prefill_size = TWO_POW_63; field = "chunked_prefill_size"; break;
        }
        sched = (struct kvp_scheduler *)untouched;
        CHECK_REFUSED(kvp_scheduler_new(&cfg, NULL, &sched), KVP_STATUS_INVALID_ARGUMENT,
                      field);
        CHECK(sched == (struct kvp_scheduler *)untouched);
    }
    for (i = 0; i < 7; i++) {
        struct kvp_adder_config cfg = abase;
        const char *field = "";
        switch (i) {
        case 0: cfg.max_prefill_tokens = 0; field = "max_prefill_tokens"; break;
        case 1: cfg.clip_max_new_tokens = 0; field = "clip_max_new_tokens"; break;
        case 2: cfg.new_token_ratio = 0.0; field = "new_token_ratio"; break;
        case 3: cfg.new_token_ratio = -1.0; field = "new_token_ratio"; break;
        case 4: cfg.new_token_ratio = NAN; field = "new_token_ratio"; break;
        case 5: cfg.page_size = TWO_POW_63; field = "page_size"; break;
        default: cfg.num_mixed_decode_tokens = UINT64_MAX; field = "num_mixed_decode_tokens"; break;
        }
        adder = (struct kvp_adder *)untouched;
        CHECK_REFUSED(kvp_adder_new(&cfg, 1000, 0, NULL, 0, 0, &adder),
                      KVP_STATUS_INVALID_ARGUMENT, field);
        CHECK(adder == (struct kvp_adder *)untouched);
    }
    for (i = 0; i < 3; i++) {
        struct kvp_delayer_config cfg = dbase;
        const char *field = "";
        switch (i) {
        case 0: cfg.token_usage_low_watermark = NAN; field = "token_usage_low_watermark"; break;
        case 1: cfg.queue_min_ratio = INFINITY; field = "queue_min_ratio"; break;
        default: cfg.max_delay_passes = 0; field = "max_delay_passes"; break;
        }
        delayer = (struct kvp_delayer *)untouched;
        CHECK_REFUSED(kvp_delayer_new(&cfg, &delayer), KVP_STATUS_INVALID_ARGUMENT, field);
        CHECK(delayer == (struct kvp_delayer *)untouched);
    }
    /* The defaults themselves are accepted. */
    sched = NULL;
    CHECK_OK(kvp_scheduler_new(&base, NULL, &sched));
    kvp_scheduler_free(sched);
    adder = NULL;
    CHECK_OK(kvp_adder_new(&abase, 1000, 0, NULL, 0, 0, &adder));
    kvp_adder_free(adder);
    delayer = NULL;
    CHECK_OK(kvp_delayer_new(&dbase, &delayer));
    kvp_delayer_free(delayer);
    /* The SGLang constants, prefixed. */
    CHECK_EQ(KVP_CLIP_MAX_NEW_TOKENS, 4096);
    CHECK_EQ(KVP_RETRACT_DECODE_STEPS, 20);
    CHECK_EQ(base.clip_max_new_tokens, KVP_CLIP_MAX_NEW_TOKENS);
}

static void run(const char *name, void (*test)(void)) {
    int before = g_failures;
    g_test = name;
    test();
    printf("%-32s %s\n", name, g_failures == before ? "ok" : "FAILED");
}

/* kvp_scheduler_finish_ex / _abort_ex: the row splits into the locked cached prefix
   (prefix_len, as submitted) and the request's own KV; refusals change nothing. */
static void test_finish_ex(void) {
    struct kvp_scheduler_config cfg = kvp_scheduler_config_default();
    struct kvp_scheduler *sched = NULL;
    struct kvp_request r;
    struct kvp_submit_result result;
    struct kvp_step_plan plan;
    struct kvp_finished f = {99, 99, 99, 99};
    uint64_t kv_len = 0;
    int steps = 0;
    cfg.capacity = 1 << 16;
    cfg.page_size = 16;
    CHECK_OK(kvp_scheduler_new(&cfg, NULL, &sched));
    memset(&r, 0, sizeof r);
    r.id = 1;
    r.input_len = 100;
    r.prefix_len = 32;
    r.prefix_evictable = 16;
    r.max_new_tokens = 4;
    CHECK_OK(kvp_scheduler_submit(sched, &r, NULL, 0, &result));
    r.id = 2;
    CHECK_OK(kvp_scheduler_submit(sched, &r, NULL, 0, &result));
    /* Waiting: not running, and it holds nothing. */
    CHECK_STATUS(kvp_scheduler_finish_ex(sched, 1, &f), KVP_STATUS_INVALID_STATE);
    CHECK_STATUS(kvp_scheduler_finish_ex(sched, 1, NULL), KVP_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(kvp_scheduler_abort_ex(sched, 2, NULL), KVP_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(kvp_scheduler_finish_ex(sched, 7, &f), KVP_STATUS_INVALID_ARGUMENT);
    CHECK_EQ(f.id, 99); /* untouched on failure */
    CHECK_OK(kvp_scheduler_step(sched, 1 << 16, 0, true, &plan));
    CHECK_EQ(plan.num_prefill, 2);
    CHECK_OK(kvp_scheduler_abort_ex(sched, 2, &f));
    CHECK_EQ(f.id, 2);
    CHECK_EQ(f.kv_len, 100);
    CHECK_EQ(f.prefix_len, 32);
    CHECK_EQ(f.prefix_evictable, 16);
    while (steps++ < 3) CHECK_OK(kvp_scheduler_step(sched, 1 << 16, 0, true, &plan));
    CHECK_OK(kvp_scheduler_finish_ex(sched, 1, &f));
    CHECK_EQ(f.id, 1);
    CHECK_EQ(f.kv_len, 103); /* 100 prompt tokens, then 3 decode steps */
    CHECK_EQ(f.prefix_len, 32);
    CHECK_EQ(f.prefix_evictable, 16);
    CHECK_STATUS(kvp_scheduler_finish(sched, 1, &kv_len), KVP_STATUS_INVALID_ARGUMENT);
    /* A waiting request reports no KV and no locked prefix. */
    r.id = 3;
    CHECK_OK(kvp_scheduler_submit(sched, &r, NULL, 0, &result));
    CHECK_OK(kvp_scheduler_abort_ex(sched, 3, &f));
    CHECK_EQ(f.id, 3);
    CHECK_EQ(f.kv_len, 0);
    CHECK_EQ(f.prefix_len, 0);
    kvp_scheduler_free(sched);
}

/* The documented defaults of the three admission configs (SGLang's). */
static void test_config_defaults(void) {
    struct kvp_scheduler_config sc = kvp_scheduler_config_default();
    struct kvp_adder_config ac = kvp_adder_config_default();
    struct kvp_delayer_config dc = kvp_delayer_config_default();
    CHECK_EQ(sc.capacity, 0);
    CHECK_EQ(sc.page_size, 1);
    CHECK_EQ(sc.max_prefill_tokens, 16384);
    CHECK_EQ(sc.chunked_prefill_size, 8192);
    CHECK_EQ(sc.clip_max_new_tokens, KVP_CLIP_MAX_NEW_TOKENS);
    CHECK_EQ(sc.truncation_align_size, 0);
    CHECK_EQ(sc.prefill_max_requests, 0);
    CHECK_EQ(sc.max_running_requests, 0);
    CHECK_EQ(sc.max_chunked_requests, 1);
    CHECK_EQ(sc.policy, KVP_POLICY_FCFS);
    CHECK_EQ(sc.retraction, KVP_RETRACTION_LENGTH);
    CHECK(!sc.enable_priority && !sc.enable_mixed_chunk && !sc.prefix_cache_disabled);
    CHECK_EQ(sc.preemption_threshold, 10);
    CHECK(sc.init_new_token_ratio == 0.7 && sc.min_new_token_ratio_factor == 0.14);
    CHECK_EQ(sc.new_token_ratio_decay_steps, 600);
    CHECK(sc.schedule_conservativeness == 1.0);
    CHECK(sc.dynamic_chunk_a == 0.0);

    CHECK_EQ(ac.page_size, 1);
    CHECK_EQ(ac.max_prefill_tokens, 16384);
    CHECK_EQ(ac.chunked_prefill_size, 8192);
    CHECK_EQ(ac.num_mixed_decode_tokens, 0);
    CHECK_EQ(ac.clip_max_new_tokens, KVP_CLIP_MAX_NEW_TOKENS);
    CHECK_EQ(ac.truncation_align_size, 0);
    CHECK_EQ(ac.prefill_max_requests, 0);
    CHECK_EQ(ac.max_chunked_requests, 1);
    CHECK(ac.new_token_ratio == 0.7);
    CHECK(!ac.prefix_cache_disabled);

    CHECK_EQ(dc.max_delay_passes, 30);
    CHECK(dc.token_usage_low_watermark < 0.0 && dc.queue_min_ratio < 0.0);
    CHECK_EQ(dc.max_running_requests, 0);
    CHECK_EQ(dc.prefill_max_requests, 0);
}

/* kvp_submit_result: `needed` is fill + clipped remaining output + a page (an ignore_eos
 * request without a prefix cache: the page-rounded fill + its whole remaining output + 1),
 * and a request is refused as unfittable exactly when needed >= capacity; one that is
 * queued is admitted by the first step of an empty pool. */
static void test_submit_need_boundary(void) {
    struct kvp_scheduler_config cfg = kvp_scheduler_config_default();
    struct kvp_request r;
    struct kvp_submit_result result;
    struct kvp_step_plan plan;
    int k;
    cfg.page_size = 4;
    for (k = 0; k < 4; k++) {
        struct kvp_scheduler *sched = NULL;
        bool ignore_eos = k >= 2;
        uint64_t needed = ignore_eos ? 12 + 5000 + 1 : 10 + KVP_CLIP_MAX_NEW_TOKENS + 4;
        cfg.prefix_cache_disabled = ignore_eos;
        cfg.capacity = needed + (uint64_t)(k % 2); /* needed, then needed + 1 */
        CHECK_OK(kvp_scheduler_new(&cfg, NULL, &sched));
        memset(&r, 0, sizeof r);
        r.id = 1;
        r.input_len = 10;
        r.max_new_tokens = 5000;
        r.ignore_eos = ignore_eos;
        CHECK_OK(kvp_scheduler_submit(sched, &r, NULL, 0, &result));
        CHECK_EQ(result.needed, needed);
        CHECK_EQ(result.capacity, cfg.capacity);
        CHECK_EQ(result.queued, k % 2 == 1);
        CHECK_OK(kvp_scheduler_step(sched, cfg.capacity, 0, true, &plan));
        CHECK_EQ(plan.num_prefill, k % 2 == 1 ? 1 : 0);
        kvp_scheduler_free(sched);
    }
}

/* The delayer: at most max_delay_passes - 1 passes in a row are delayed (the next one
 * times out and prefills); refusals write nothing. */
static void test_delayer_passes(void) {
    struct kvp_delayer_config dc = kvp_delayer_config_default();
    struct kvp_delayer *delayer = NULL;
    struct kvp_rank_info ranks[2];
    uint32_t verdict = 77;
    int pass;
    dc.max_delay_passes = 4;
    CHECK_OK(kvp_delayer_new(&dc, &delayer));
    CHECK_OK(kvp_delayer_local_info(delayer, true, 0.5, 8, 3, false, &ranks[0]));
    CHECK_OK(kvp_delayer_local_info(delayer, false, 0.5, 8, 0, false, &ranks[1]));
    CHECK_STATUS(kvp_delayer_negotiate(delayer, ranks, 0, &verdict), KVP_STATUS_INVALID_ARGUMENT);
    CHECK_EQ(verdict, 77);
    CHECK_STATUS(kvp_delayer_local_info(delayer, true, NAN, 8, 3, false, &ranks[1]),
                 KVP_STATUS_INVALID_ARGUMENT);
    CHECK(ranks[1].prefillable == false);
    for (pass = 0; pass < 3; pass++) {
        CHECK_OK(kvp_delayer_negotiate(delayer, ranks, 2, &verdict));
        CHECK_EQ(verdict, KVP_DELAY_VERDICT_DELAY);
    }
    CHECK_OK(kvp_delayer_negotiate(delayer, ranks, 2, &verdict));
    CHECK_EQ(verdict, KVP_DELAY_VERDICT_WAIT_TIMEOUT);
    ranks[1].prefillable = true;
    CHECK_OK(kvp_delayer_negotiate(delayer, ranks, 2, &verdict));
    CHECK_EQ(verdict, KVP_DELAY_VERDICT_NO_WAIT);
    kvp_delayer_free(delayer);
}

int main(void) {
    run("engine_loop", test_engine_loop);
    run("finish_ex", test_finish_ex);
    run("submit_need_overflow", test_submit_need_overflow);
    run("step_room_overflow", test_step_room_overflow);
    run("adder_overflow", test_adder_overflow);
    run("refused_configs", test_refused_configs);
    run("config_defaults", test_config_defaults);
    run("submit_need_boundary", test_submit_need_boundary);
    run("delayer_passes", test_delayer_passes);
    if (g_failures != 0) {
        printf("scheduler_test (C): %d of %d checks FAILED\n", g_failures, g_checks);
        return 1;
    }
    printf("scheduler_test (C): all %d checks passed\n", g_checks);
    return 0;
}
