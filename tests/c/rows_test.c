/*
 * C99 test of the request-to-token table calls (include/kvpool.h: kvp_req_table,
 * kvp_pool_alloc_extend_rows, kvp_pool_alloc_decode_rows, kvp_pool_free_rows,
 * kvp_pool_page_table) on a host pool, the way an engine uses them: an int32 req_to_token
 * table with a padded row stride, an int64 pool (out_cache_loc), a prefill, decode steps, a
 * chunked prefill, a FlashInfer page table after each step, bad rows refused with nothing
 * written, and every request freed by row. Built and run by `cargo test` (tests/ffi_programs.rs).
 *
 * Exit status 0 and the final "all N checks passed" line mean success.
 */
#include "kvpool.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "check.h"

enum { SIZE = 64 * 16, PS = 16, ROWS = 8, ROW_LEN = 100, STRIDE = 104 };

static int32_t table[ROWS * STRIDE];

static int32_t at(int64_t row, int64_t k) { return table[row * STRIDE + k]; }

static uint64_t available(struct kvp_pool *pool) {
    uint64_t n = 0;
    CHECK_OK(kvp_pool_available_size(pool, &n));
    return n;
}

/* The page table of `rows` against the table itself: FlashInfer's documented layout. */
static void check_page_table(struct kvp_pool *pool, const struct kvp_req_table *t,
                             const int64_t *rows, const int64_t *seq, size_t n) {
    int32_t indptr[ROWS + 1], indices[64], last[ROWS];
    CHECK_OK(kvp_pool_page_table(pool, t, rows, seq, n, indptr, indices, 64, last));
    CHECK_EQ(indptr[0], 0);
    for (size_t i = 0; i < n; ++i) {
        int32_t pages = (int32_t)((seq[i] + PS - 1) / PS);
        CHECK_EQ(indptr[i + 1] - indptr[i], pages);
        CHECK_EQ(last[i], pages == 0 ? 0 : seq[i] - (int64_t)(pages - 1) * PS);
        for (int32_t p = 0; p < pages; ++p) {
            CHECK_EQ(indices[indptr[i] + p], at(rows[i], (int64_t)p * PS) / PS);
            /* kv_len = page_size * (pages - 1) + last_page_len, every token in its page */
            for (int64_t k = (int64_t)p * PS; k < seq[i] && k < (int64_t)(p + 1) * PS; ++k)
                CHECK_EQ(at(rows[i], k) / PS, indices[indptr[i] + p]);
        }
    }
}

/* The table descriptor's refusals (as kvp_pool_alloc_extend_rows documents them, for all
 * four calls): a NULL `data` is KVP_STATUS_NULL_ARGUMENT, as for any other buffer; an
 * unknown index type, no rows, a row_len of 0, overlapping rows and misaligned data are
 * KVP_STATUS_INVALID_ARGUMENT. Each refused call writes nothing (table, out, page-table
 * arrays) and changes nothing; a refused page table counts nowhere, a refused allocation
 * or free counts as a call. */
static void check_refused_tables(struct kvp_pool *pool, const struct kvp_req_table *t) {
    int32_t before[ROWS * STRIDE];
    memcpy(before, table, sizeof table);
    uint64_t avail = available(pool);
    int64_t row = 0, zero = 0, one = 1, out[2] = {-7, -7};
    int32_t indptr[2] = {-7, -7}, indices[2] = {-7, -7}, last[1] = {-7};
    struct kvp_pool_stats st0, st1;
    CHECK_OK(kvp_pool_get_stats(pool, &st0));

    struct kvp_req_table bad = *t;
    bad.data = NULL;
    CHECK_STATUS(kvp_pool_alloc_extend_rows(pool, &bad, &row, &zero, &one, 1, 1, out, 2),
                 KVP_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(kvp_pool_alloc_decode_rows(pool, &bad, &row, &one, 1, out, 2),
                 KVP_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(kvp_pool_free_rows(pool, &bad, &row, &zero, &one, 1), KVP_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(kvp_pool_page_table(pool, &bad, &row, &one, 1, indptr, indices, 2, last),
                 KVP_STATUS_NULL_ARGUMENT);
    bad = *t;
    bad.rows = 0;
    CHECK_STATUS(kvp_pool_alloc_extend_rows(pool, &bad, &row, &zero, &one, 1, 1, out, 2),
                 KVP_STATUS_INVALID_ARGUMENT);
    bad = *t;
    bad.row_len = 0;
    CHECK_STATUS(kvp_pool_alloc_decode_rows(pool, &bad, &row, &one, 1, out, 2),
                 KVP_STATUS_INVALID_ARGUMENT);
    bad = *t;
    bad.index_type = 2;
    CHECK_STATUS(kvp_pool_alloc_extend_rows(pool, &bad, &row, &zero, &one, 1, 1, out, 2),
                 KVP_STATUS_INVALID_ARGUMENT);
    bad = *t;
    bad.row_stride = ROW_LEN - 1;
    CHECK_STATUS(kvp_pool_page_table(pool, &bad, &row, &one, 1, indptr, indices, 2, last),
                 KVP_STATUS_INVALID_ARGUMENT);
    bad = *t;
    bad.data = (char *)table + 1;
    CHECK_STATUS(kvp_pool_alloc_extend_rows(pool, &bad, &row, &zero, &one, 1, 1, out, 2),
                 KVP_STATUS_INVALID_ARGUMENT);

    /* A page table refused for its lengths or its capacity writes none of its arrays. */
    int64_t rows2[2] = {2, 5}, seq2[2] = {23, 40}, negative[2] = {23, -1},
            too_long[2] = {23, ROW_LEN + 1};
    int32_t indptr3[3] = {-7, -7, -7}, last2[2] = {-7, -7};
    CHECK_STATUS(kvp_pool_page_table(pool, t, rows2, seq2, 2, indptr3, indices, 2, last2),
                 KVP_STATUS_BUFFER_TOO_SMALL); /* 2 + 3 pages */
    CHECK_STATUS(kvp_pool_page_table(pool, t, rows2, negative, 2, indptr3, indices, 2, last2),
                 KVP_STATUS_INVALID_LENGTHS);
    CHECK_STATUS(kvp_pool_page_table(pool, t, rows2, too_long, 2, indptr3, indices, 2, last2),
                 KVP_STATUS_BUFFER_TOO_SMALL);
    CHECK(indptr3[0] == -7 && indptr3[1] == -7 && indptr3[2] == -7);
    CHECK(last2[0] == -7 && last2[1] == -7);

    CHECK(out[0] == -7 && out[1] == -7);
    CHECK(indptr[0] == -7 && indices[0] == -7 && last[0] == -7);
    CHECK(memcmp(before, table, sizeof table) == 0);
    CHECK_EQ(available(pool), avail);
    CHECK_OK(kvp_pool_get_stats(pool, &st1));
    CHECK_EQ(st1.alloc_extend_calls - st0.alloc_extend_calls, 4);
    CHECK_EQ(st1.alloc_decode_calls - st0.alloc_decode_calls, 2);
    CHECK_EQ(st1.free_calls - st0.free_calls, 1);
    CHECK_EQ(st1.rejected_calls - st0.rejected_calls, 7);
    CHECK_EQ(st1.tokens_allocated, st0.tokens_allocated);
}

int main(void) {
    g_test = "rows";
    struct kvp_pool_config c = kvp_pool_config_default();
    c.size = SIZE;
    c.page_size = PS;
    struct kvp_pool *pool = NULL;
    CHECK_OK(kvp_pool_new(&c, &pool));
    struct kvp_req_table t = {table, KVP_INDEX_TYPE_I32, ROWS, STRIDE, ROW_LEN};

    /* Prefill three requests in rows 2, 5, 7; out_cache_loc is the same slots. */
    int64_t rows[3] = {2, 5, 7}, prefix[3] = {0, 0, 0}, seq[3] = {20, 3, 16};
    int64_t out[39];
    CHECK_OK(kvp_pool_alloc_extend_rows(pool, &t, rows, prefix, seq, 3, 39, out, 39));
    size_t k = 0;
    for (int i = 0; i < 3; ++i)
        for (int64_t j = 0; j < seq[i]; ++j) CHECK_EQ(at(rows[i], j), out[k++]);
    CHECK_EQ(available(pool), SIZE - 4 * PS);
    check_page_table(pool, &t, rows, seq, 3);

    /* Three decode steps (no out_cache_loc: the table alone). */
    for (int step = 0; step < 3; ++step) {
        for (int i = 0; i < 3; ++i) seq[i] += 1;
        CHECK_OK(kvp_pool_alloc_decode_rows(pool, &t, rows, seq, 3, NULL, 0));
        for (int i = 0; i < 3; ++i) {
            /* inside the page of the previous token, or the first slot of a new page */
            int64_t prev = at(rows[i], seq[i] - 2), now = at(rows[i], seq[i] - 1);
            CHECK((seq[i] - 1) % PS == 0 ? now % PS == 0 : now == prev + 1);
        }
        check_page_table(pool, &t, rows, seq, 3);
    }

    /* A chunked prefill continues row 5 (6 tokens) to 40. */
    int64_t r5 = 5, p5 = 6, s5 = 40;
    CHECK_OK(kvp_pool_alloc_extend_rows(pool, &t, &r5, &p5, &s5, 1, 34, NULL, 0));
    seq[1] = 40;
    check_page_table(pool, &t, rows, seq, 3);

    /* Bad rows: refused with the host's status; the table and the pool are unchanged. */
    int32_t before[ROWS * STRIDE];
    memcpy(before, table, sizeof table);
    uint64_t avail = available(pool);
    int64_t twice[2] = {0, 0}, zero2[2] = {0, 0}, one2[2] = {1, 1};
    CHECK_STATUS(kvp_pool_alloc_extend_rows(pool, &t, twice, zero2, one2, 2, 2, NULL, 0),
                 KVP_STATUS_INVALID_ARGUMENT);
    int64_t outside = ROWS, one = 1, zero = 0, too_long = ROW_LEN + 1;
    CHECK_STATUS(kvp_pool_alloc_decode_rows(pool, &t, &outside, &one, 1, NULL, 0),
                 KVP_STATUS_INDEX_OUT_OF_RANGE);
    CHECK_STATUS(kvp_pool_alloc_extend_rows(pool, &t, &zero, &zero, &too_long, 1, ROW_LEN + 1,
                                            NULL, 0),
                 KVP_STATUS_BUFFER_TOO_SMALL);
    /* A stale prefix: row 2 holds 23 tokens, not 10. */
    int64_t r2 = 2, p10 = 10, s12 = 12;
    CHECK_STATUS(kvp_pool_alloc_extend_rows(pool, &t, &r2, &p10, &s12, 1, 2, NULL, 0),
                 KVP_STATUS_LAST_LOC_MISMATCH);
    struct kvp_req_table bad = t;
    bad.row_stride = ROW_LEN - 1;
    CHECK_STATUS(kvp_pool_alloc_decode_rows(pool, &bad, &r2, &one, 1, NULL, 0),
                 KVP_STATUS_INVALID_ARGUMENT);
    bad = t;
    bad.index_type = 7;
    CHECK_STATUS(kvp_pool_free_rows(pool, &bad, &r2, &zero, &one, 1), KVP_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(kvp_pool_free_rows(pool, NULL, &r2, &zero, &one, 1), KVP_STATUS_NULL_ARGUMENT);
    /* The device calls on a host pool. */
    CHECK_STATUS(kvp_pool_alloc_decode_rows_async(pool, &t, &r2, &one, &one, 1, NULL, 0, NULL),
                 KVP_STATUS_WRONG_BACKEND);
    CHECK_STATUS(kvp_pool_reserve_scratch_async(pool, ROWS, 8, 64, NULL),
                 KVP_STATUS_WRONG_BACKEND);
    CHECK_STATUS(kvp_pool_reserve_scratch_async(NULL, ROWS, 8, 64, NULL),
                 KVP_STATUS_NULL_ARGUMENT);
    CHECK(memcmp(before, table, sizeof table) == 0);
    CHECK_EQ(available(pool), avail);
    check_refused_tables(pool, &t);

    /* Finish row 7, release row 2's tail past its first page, then free everything. */
    int64_t fr[2] = {7, 2}, fs[2] = {0, PS}, fe[2] = {seq[2], seq[0]};
    CHECK_OK(kvp_pool_free_rows(pool, &t, fr, fs, fe, 2));
    CHECK_EQ(available(pool), avail + 2 * PS + PS);
    int64_t lr[2] = {2, 5}, ls[2] = {0, 0}, le[2] = {PS, 40};
    CHECK_OK(kvp_pool_free_rows(pool, &t, lr, ls, le, 2));
    CHECK_EQ(available(pool), SIZE);
    kvp_pool_free(pool);

    if (g_failures != 0) {
        printf("rows_test (C): %d of %d checks failed\n", g_failures, g_checks);
        return 1;
    }
    printf("rows_test (C): all %d checks passed\n", g_checks);
    return 0;
}
