/*
 * C99 test of two guarantees of kvp_pool that protect an engine from itself
 * (include/kvpool.h), built and run by `cargo test` (tests/ffi_programs.rs):
 *
 * 1. kvp_pool_new reports KVP_STATUS_OUT_OF_MEMORY, and creates nothing, when the pool's
 *    host bookkeeping cannot be allocated: it never aborts the process. Run in a child
 *    process under an address-space limit, so the outcome does not depend on the machine.
 * 2. A continuation (last_loc) must start exactly where its page was left (the page's fill
 *    point): a stale last_loc, or one into another request's page, is refused with
 *    KVP_STATUS_LAST_LOC_MISMATCH and the pool is unchanged, so no slot is ever handed out
 *    twice; kvp_pool_rewind moves a page back after rejected speculative tokens.
 *
 * Exit status 0 and the final "all N checks passed" line mean success.
 */
#define _POSIX_C_SOURCE 200809L

#include "kvpool.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"

/* ---- 1. out of memory at creation ------------------------------------------------------ */

/* Creates a pool in a child process limited to 2 GiB of address space; returns the status
   the child saw (as its exit code), or -1 if the child did not exit normally (an abort). */
static int status_under_limit(uint64_t size, uint32_t page_size) {
    fflush(stdout);
    fflush(stderr);
    pid_t child = fork();
    if (child == 0) {
        struct rlimit limit = {(rlim_t)2 << 30, (rlim_t)2 << 30};
        if (setrlimit(RLIMIT_AS, &limit) != 0) _exit(120);
        struct kvp_pool_config cfg = kvp_pool_config_default();
        cfg.size = size;
        cfg.page_size = page_size;
        struct kvp_pool *pool = (struct kvp_pool *)0x1;
        enum kvp_status st = kvp_pool_new(&cfg, &pool);
        if (st == KVP_STATUS_OK) kvp_pool_free(pool);
        else if (pool != (struct kvp_pool *)0x1) _exit(121); /* out-param written on failure */
        char msg[256];
        kvp_last_error_message(msg, sizeof msg);
        if (st != KVP_STATUS_OK && strstr(msg, "cannot allocate host memory") == NULL) _exit(122);
        _exit((int)st);
    }
    int wstatus = 0;
    if (child < 0 || waitpid(child, &wstatus, 0) != child) return -2;
    return WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : -1;
}

static void test_out_of_memory_is_a_status(void) {
    g_test = "out_of_memory_is_a_status";
    /* A million 2^20-slot pages: small page tables, but a bit per slot (128 GiB) to catch an
       index freed twice in one call. */
    CHECK_EQ(status_under_limit((uint64_t)1 << 40, 1u << 20), KVP_STATUS_OUT_OF_MEMORY);
    /* A token pool of 2^32 - 2 slots: 40 GiB of page tables. */
    CHECK_EQ(status_under_limit(((uint64_t)1 << 32) - 2, 1), KVP_STATUS_OUT_OF_MEMORY);
    /* The same limit leaves room for an ordinary pool. */
    CHECK_EQ(status_under_limit((uint64_t)1 << 20, 16), KVP_STATUS_OK);
}

/* ---- 2. fill points -------------------------------------------------------------------- */

enum { PAGE = 4, SIZE = 1024, REQUESTS = 40 };

static struct kvp_pool *new_pool(uint32_t page_size) {
    struct kvp_pool_config cfg = kvp_pool_config_default();
    cfg.size = SIZE;
    cfg.page_size = page_size;
    struct kvp_pool *pool = NULL;
    CHECK_OK(kvp_pool_new(&cfg, &pool));
    return pool;
}

static uint64_t available(struct kvp_pool *pool) {
    uint64_t n = 0;
    CHECK_OK(kvp_pool_available_size(pool, &n));
    return n;
}

static bool last_error_contains(const char *text) {
    char msg[512];
    kvp_last_error_message(msg, sizeof msg);
    return strstr(msg, text) != NULL;
}

/* The reproducer, step by step. */
static void test_stale_last_loc_is_refused(void) {
    g_test = "stale_last_loc_is_refused";
    struct kvp_pool *pool = new_pool(PAGE);
    int64_t zero = 0, one = 1, two = 2, three = 3, none = -1, out[2] = {0, 0};
    CHECK_OK(kvp_pool_alloc_extend(pool, &zero, &one, &none, 1, 1, out, 1)); /* A */
    CHECK_EQ(out[0], 4);
    int64_t a_last = out[0];
    CHECK_OK(kvp_pool_alloc_extend(pool, &one, &two, &a_last, 1, 1, out, 1)); /* B */
    CHECK_EQ(out[0], 5);
    uint64_t before = available(pool);
    out[0] = -9;
    CHECK_STATUS(kvp_pool_alloc_decode(pool, &two, &a_last, 1, out, 1),
                 KVP_STATUS_LAST_LOC_MISMATCH);
    CHECK(last_error_contains("last_loc[0] = 4 is not where page 1 was left"));
    CHECK_EQ(out[0], -9); /* output untouched */
    CHECK_STATUS(kvp_pool_alloc_extend(pool, &one, &three, &a_last, 1, 2, out, 2),
                 KVP_STATUS_LAST_LOC_MISMATCH);
    CHECK_EQ(available(pool), before);
    int64_t b_last = 5;
    CHECK_OK(kvp_pool_alloc_decode(pool, &three, &b_last, 1, out, 1));
    CHECK_EQ(out[0], 6);
    kvp_pool_free(pool);
}

/* Many requests decoding side by side: every stale continuation (any earlier slot of the
   request's last page) is refused, every live continuation accepted, and no slot repeats. */
static void test_interleaved_requests_never_share_a_slot(void) {
    g_test = "interleaved_requests_never_share_a_slot";
    struct kvp_pool *pool = new_pool(PAGE);
    static int64_t rows[REQUESTS][24];
    int64_t lens[REQUESTS];
    static bool seen[SIZE + PAGE];
    memset(seen, 0, sizeof seen);
    for (int r = 0; r < REQUESTS; ++r) lens[r] = 0;
    for (int step = 0; step < 20; ++step) {
        for (int r = 0; r < REQUESTS; ++r) {
            int64_t seq = lens[r] + 1;
            int64_t last = lens[r] > 0 ? rows[r][lens[r] - 1] : -1;
            if (lens[r] >= 2 && (lens[r] - 1) % PAGE != 0) {
                /* Re-extending the request's last token from the slot before it (same
                   page): consistent lengths, but a stale last_loc. */
                int64_t prefix = lens[r] - 1, stale = rows[r][lens[r] - 2], o = -9;
                CHECK_STATUS(kvp_pool_alloc_extend(pool, &prefix, &lens[r], &stale, 1, 1, &o, 1),
                             KVP_STATUS_LAST_LOC_MISMATCH);
                CHECK(last_error_contains("is not where page"));
                CHECK_EQ(o, -9);
            }
            int64_t slot = -9;
            CHECK_OK(kvp_pool_alloc_decode(pool, &seq, &last, 1, &slot, 1));
            CHECK(slot >= PAGE && slot < SIZE + PAGE && !seen[slot]);
            if (slot >= 0 && slot < SIZE + PAGE) seen[slot] = true;
            rows[r][lens[r]++] = slot;
        }
    }
    for (int r = 0; r < REQUESTS; ++r)
        CHECK_OK(kvp_pool_free_segment(pool, rows[r], (size_t)lens[r], 0, (size_t)lens[r]));
    CHECK_EQ(available(pool), SIZE);
    kvp_pool_free(pool);
}

/* Speculative decoding (SGLang's EAGLE flow, page size 4): 6 tokens, 3 drafts, 1 kept. */
static void test_rewind_after_rejected_drafts(void) {
    g_test = "rewind_after_rejected_drafts";
    struct kvp_pool *pool = new_pool(PAGE);
    int64_t row[16];
    int64_t zero = 0, six = 6, seven = 7, nine = 9, ten = 10, none = -1;
    CHECK_OK(kvp_pool_alloc_extend(pool, &zero, &six, &none, 1, 6, row, 6));
    CHECK_OK(kvp_pool_alloc_extend(pool, &six, &nine, &row[5], 1, 3, &row[6], 3));
    /* Verify keeps row[6]; row[7] (same page) and row[8] (its own page) are rejected. */
    int64_t probe[3];
    CHECK_STATUS(kvp_pool_alloc_extend(pool, &seven, &ten, &row[6], 1, 3, probe, 3),
                 KVP_STATUS_LAST_LOC_MISMATCH);
    CHECK_OK(kvp_pool_free_segment(pool, row, 9, 8, 1));
    int64_t ahead = row[7] + 1;
    CHECK_STATUS(kvp_pool_rewind(pool, &ahead, 1), KVP_STATUS_NOT_ALLOCATED);
    int64_t twice[2] = {row[6], row[6]};
    CHECK_STATUS(kvp_pool_rewind(pool, twice, 2), KVP_STATUS_LAST_LOC_MISMATCH);
    CHECK(last_error_contains("which an earlier element also rewinds"));
    CHECK_OK(kvp_pool_rewind(pool, &row[6], 1));
    CHECK_OK(kvp_pool_alloc_extend(pool, &seven, &ten, &row[6], 1, 3, &row[7], 3));
    CHECK_EQ(row[7], row[6] + 1);
    for (int i = 0; i < 10; ++i)
        for (int j = i + 1; j < 10; ++j) CHECK(row[i] != row[j]);
    CHECK_OK(kvp_pool_free_segment(pool, row, 10, 0, 10));
    CHECK_EQ(available(pool), SIZE);
    /* NULL with a nonzero length is refused; an empty rewind is a no-op. */
    CHECK_STATUS(kvp_pool_rewind(pool, NULL, 1), KVP_STATUS_NULL_ARGUMENT);
    CHECK_OK(kvp_pool_rewind(pool, NULL, 0));
    kvp_pool_free(pool);
}

/* An output that shares memory with an input is refused, and nothing changes: the call
   reads its inputs again while it writes (an out over last_loc made a later request continue
   from a slot just handed out: a slot handed out twice). Page size 4: request B holds slots
   4 and 5; A (8 new tokens) and B (one more) with last_loc inside out. */
static void test_an_output_over_an_input_is_refused(void) {
    g_test = "an_output_over_an_input_is_refused";
    struct kvp_pool *pool = new_pool(PAGE);
    int64_t zero = 0, two = 2, none = -1, b_slots[2] = {0, 0};
    CHECK_OK(kvp_pool_alloc_extend(pool, &zero, &two, &none, 1, 2, b_slots, 2));
    uint64_t before = available(pool);
    int64_t prefix[2] = {0, 2}, seq[2] = {8, 3}, buf[16];
    for (int i = 0; i < 16; ++i) buf[i] = -9;
    buf[0] = -1;
    buf[1] = b_slots[1];
    CHECK_STATUS(kvp_pool_alloc_extend(pool, prefix, seq, buf, 2, 9, buf, 16),
                 KVP_STATUS_INVALID_ARGUMENT);
    CHECK(last_error_contains("out overlaps last_loc"));
    CHECK_EQ(buf[2], -9); /* nothing written */
    CHECK_STATUS(kvp_pool_alloc_extend(pool, prefix, seq, buf + 2, 2, 9, seq, 2),
                 KVP_STATUS_INVALID_ARGUMENT);
    CHECK(last_error_contains("out overlaps seq_lens"));
    int64_t dseq[2] = {3, 3};
    CHECK_STATUS(kvp_pool_alloc_decode(pool, dseq, buf, 2, buf + 1, 2),
                 KVP_STATUS_INVALID_ARGUMENT);
    CHECK_EQ(available(pool), before);
    /* Side by side, the same call goes through. */
    int64_t out[9];
    CHECK_OK(kvp_pool_alloc_extend(pool, prefix, seq, buf, 2, 9, out, 9));
    CHECK_EQ(out[8], b_slots[1] + 1);
    kvp_pool_free(pool);
}

int main(void) {
    test_out_of_memory_is_a_status();
    test_an_output_over_an_input_is_refused();
    test_stale_last_loc_is_refused();
    test_interleaved_requests_never_share_a_slot();
    test_rewind_after_rejected_drafts();
    if (g_failures != 0) {
        printf("pool_guard_test (C): %d of %d checks failed\n", g_failures, g_checks);
        return 1;
    }
    printf("pool_guard_test (C): all %d checks passed\n", g_checks);
    return 0;
}
