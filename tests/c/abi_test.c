/*
 * C99 tests of kvpool's C ABI (include/kvpool.h), built and run by `cargo test`
 * (tests/ffi_programs.rs) against the library built with `--features testing`.
 *
 * Every expected index below is derived from the header's documented semantics:
 * slot 0 / page 0 are never handed out; a token pool reuses freed slots first-in first-out
 * (frees go to the tail); a paged pool takes new pages from the front of its free list
 * (initially 1, 2, 3, ...) and puts freed pages back at the front.
 *
 * Exit status 0 and the final "all N checks passed" line mean success.
 */
#include "kvpool.h"

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* ---- checks: the shared ones (check.h) and those only this program needs ---------- */

#include "check.h"

static void last_error(char *buf, size_t len) {
    size_t n = kvp_last_error_message(buf, len);
    (void)n;
}

static void check_str_impl(const char *got, const char *want, const char *file, int line,
                           const char *expr) {
    g_checks++;
    if (got == NULL || strcmp(got, want) != 0) {
        fail_at(file, line);
        fprintf(stderr, "%s: got \"%s\", want \"%s\"\n", expr, got ? got : "(null)", want);
    }
}

/* The last error message of this thread contains `needle`. */
static void check_msg_impl(const char *needle, const char *file, int line) {
    char msg[512];
    g_checks++;
    last_error(msg, sizeof msg);
    if (strstr(msg, needle) == NULL) {
        fail_at(file, line);
        fprintf(stderr, "last error message \"%s\" does not contain \"%s\"\n", msg, needle);
    }
}

static void check_i64s_impl(const int64_t *got, const int64_t *want, size_t n,
                            const char *file, int line, const char *expr) {
    size_t i;
    g_checks++;
    for (i = 0; i < n; i++) {
        if (got[i] != want[i]) {
            fail_at(file, line);
            fprintf(stderr, "%s: element %zu is %lld, want %lld (got:", expr, i,
                    (long long)got[i], (long long)want[i]);
            for (i = 0; i < n; i++) fprintf(stderr, " %lld", (long long)got[i]);
            fprintf(stderr, ")\n");
            return;
        }
    }
}

static void check_i32s_impl(const int32_t *got, const int32_t *want, size_t n,
                            const char *file, int line, const char *expr) {
    size_t i;
    g_checks++;
    for (i = 0; i < n; i++) {
        if (got[i] != want[i]) {
            fail_at(file, line);
            fprintf(stderr, "%s: element %zu is %ld, want %ld (got:", expr, i, (long)got[i],
                    (long)want[i]);
            for (i = 0; i < n; i++) fprintf(stderr, " %ld", (long)got[i]);
            fprintf(stderr, ")\n");
            return;
        }
    }
}

#define CHECK_STR(got, want) check_str_impl((got), (want), __FILE__, __LINE__, #got)
#define CHECK_MSG(needle) check_msg_impl((needle), __FILE__, __LINE__)
#define COUNT(a) (sizeof(a) / sizeof((a)[0]))
/* CHECK_I64S(buf, 1, 2, 3): buf[0..3) == {1, 2, 3} */
#define CHECK_I64S(got, ...)                                                             \
    do {                                                                                 \
        const int64_t want_[] = {__VA_ARGS__};                                           \
        check_i64s_impl((got), want_, COUNT(want_), __FILE__, __LINE__, #got);           \
    } while (0)
#define CHECK_I32S(got, ...)                                                             \
    do {                                                                                 \
        const int32_t want_[] = {__VA_ARGS__};                                           \
        check_i32s_impl((got), want_, COUNT(want_), __FILE__, __LINE__, #got);           \
    } while (0)

/* ---- helpers ------------------------------------------------------------------------ */

#define SENTINEL ((int64_t)-7777)
#define SENTINEL32 ((int32_t)-7777)

static void fill_i64(int64_t *buf, size_t n, int64_t value) {
    size_t i;
    for (i = 0; i < n; i++) buf[i] = value;
}

static void fill_i32(int32_t *buf, size_t n, int32_t value) {
    size_t i;
    for (i = 0; i < n; i++) buf[i] = value;
}

static bool all_i64(const int64_t *buf, size_t n, int64_t value) {
    size_t i;
    for (i = 0; i < n; i++)
        if (buf[i] != value) return false;
    return true;
}

static struct kvp_pool *new_pool_ex(uint64_t size, uint32_t page_size, uint32_t index_type,
                                    bool need_sort) {
    struct kvp_pool_config cfg = kvp_pool_config_default();
    struct kvp_pool *pool = NULL;
    cfg.size = size;
    cfg.page_size = page_size;
    cfg.index_type = index_type;
    cfg.need_sort = need_sort;
    CHECK_STATUS(kvp_pool_new(&cfg, &pool), KVP_STATUS_OK);
    CHECK(pool != NULL);
    return pool;
}

static struct kvp_pool *new_pool(uint64_t size, uint32_t page_size) {
    return new_pool_ex(size, page_size, KVP_INDEX_TYPE_I64, false);
}

static long long available(const struct kvp_pool *pool) {
    uint64_t n = UINT64_MAX;
    CHECK_STATUS(kvp_pool_available_size(pool, &n), KVP_STATUS_OK);
    return (long long)n;
}

static struct kvp_pool_stats stats_of(const struct kvp_pool *pool) {
    struct kvp_pool_stats s;
    memset(&s, 0xEE, sizeof s);
    CHECK_STATUS(kvp_pool_get_stats(pool, &s), KVP_STATUS_OK);
    return s;
}

static struct kvp_pool_info info_of(const struct kvp_pool *pool) {
    struct kvp_pool_info info;
    memset(&info, 0xEE, sizeof info);
    CHECK_STATUS(kvp_pool_get_info(pool, &info), KVP_STATUS_OK);
    return info;
}

/* One request's extend on an int64 pool. */
static enum kvp_status extend1(struct kvp_pool *pool, int64_t prefix, int64_t seq,
                               int64_t last_loc, int64_t *out, size_t out_len) {
    return kvp_pool_alloc_extend(pool, &prefix, &seq, &last_loc, 1, (size_t)(seq - prefix),
                                 out, out_len);
}

static enum kvp_status decode1(struct kvp_pool *pool, int64_t seq, int64_t last_loc,
                               int64_t *out) {
    return kvp_pool_alloc_decode(pool, &seq, &last_loc, 1, out, 1);
}

static enum kvp_status free1(struct kvp_pool *pool, int64_t index) {
    return kvp_pool_free_indices(pool, &index, 1);
}

/* ---- tests ------------------------------------------------------------------------------ */

static void test_version(void) {
    char expected[64];
    snprintf(expected, sizeof expected, "%d.%d.%d", KVP_VERSION_MAJOR, KVP_VERSION_MINOR,
             KVP_VERSION_PATCH);
    CHECK_STR(kvp_version(), expected);
    CHECK_EQ(kvp_abi_version(), KVP_ABI_VERSION);
    /* Documented: while kvpool is 0.x the ABI version equals the minor version. */
    if (KVP_VERSION_MAJOR == 0) CHECK_EQ(KVP_ABI_VERSION, KVP_VERSION_MINOR);
}

static void test_status_str(void) {
    static const int32_t known[] = {
        KVP_STATUS_OK,           KVP_STATUS_NULL_ARGUMENT,  KVP_STATUS_INVALID_ARGUMENT,
        KVP_STATUS_INVALID_LENGTHS, KVP_STATUS_BUFFER_TOO_SMALL, KVP_STATUS_UNALIGNED,
        KVP_STATUS_INDEX_OUT_OF_RANGE, KVP_STATUS_RESERVED_SLOT, KVP_STATUS_DOUBLE_FREE,
        KVP_STATUS_NOT_ALLOCATED, KVP_STATUS_LAST_LOC_MISMATCH, KVP_STATUS_OUT_OF_SLOTS,
        KVP_STATUS_OUT_OF_MEMORY,
        KVP_STATUS_INVALID_STATE, KVP_STATUS_FOREIGN_SNAPSHOT, KVP_STATUS_POISONED,
        KVP_STATUS_WRONG_BACKEND, KVP_STATUS_UNSUPPORTED, KVP_STATUS_CUDA_UNAVAILABLE,
        KVP_STATUS_CUDA_ERROR, KVP_STATUS_WRONG_STREAM, KVP_STATUS_DEVICE_FAULT,
        KVP_STATUS_UNORDERED_STREAMS, KVP_STATUS_PANIC,
    };
    static const int32_t unknown[] = {-1, 11, 19, 22, 39, 44, 51, 59, 65, 99, 101, 12345,
                                      INT32_MIN, INT32_MAX};
    size_t i, j;
    /* The status numbers are ABI: fixed forever. */
    CHECK_EQ(KVP_STATUS_OK, 0);
    CHECK_EQ(KVP_STATUS_NULL_ARGUMENT, 1);
    CHECK_EQ(KVP_STATUS_INVALID_ARGUMENT, 2);
    CHECK_EQ(KVP_STATUS_INVALID_LENGTHS, 3);
    CHECK_EQ(KVP_STATUS_BUFFER_TOO_SMALL, 4);
    CHECK_EQ(KVP_STATUS_UNALIGNED, 5);
    CHECK_EQ(KVP_STATUS_INDEX_OUT_OF_RANGE, 6);
    CHECK_EQ(KVP_STATUS_RESERVED_SLOT, 7);
    CHECK_EQ(KVP_STATUS_DOUBLE_FREE, 8);
    CHECK_EQ(KVP_STATUS_NOT_ALLOCATED, 9);
    CHECK_EQ(KVP_STATUS_LAST_LOC_MISMATCH, 10);
    CHECK_EQ(KVP_STATUS_OUT_OF_SLOTS, 20);
    CHECK_EQ(KVP_STATUS_OUT_OF_MEMORY, 21);
    CHECK_EQ(KVP_STATUS_INVALID_STATE, 40);
    CHECK_EQ(KVP_STATUS_FOREIGN_SNAPSHOT, 41);
    CHECK_EQ(KVP_STATUS_POISONED, 42);
    CHECK_EQ(KVP_STATUS_WRONG_BACKEND, 43);
    CHECK_EQ(KVP_STATUS_UNSUPPORTED, 50);
    CHECK_EQ(KVP_STATUS_CUDA_UNAVAILABLE, 60);
    CHECK_EQ(KVP_STATUS_CUDA_ERROR, 61);
    CHECK_EQ(KVP_STATUS_WRONG_STREAM, 62);
    CHECK_EQ(KVP_STATUS_DEVICE_FAULT, 63);
    CHECK_EQ(KVP_STATUS_UNORDERED_STREAMS, 64);
    CHECK_EQ(KVP_STATUS_PANIC, 100);

    for (i = 0; i < COUNT(known); i++) {
        const char *s = kvp_status_str(known[i]);
        CHECK(s != NULL);
        if (s == NULL) continue;
        CHECK(strlen(s) > 0);
        CHECK(strcmp(s, "unknown status") != 0);
        CHECK(kvp_status_str(known[i]) == s); /* static storage: the same string each time */
        for (j = 0; j < i; j++) CHECK(strcmp(s, kvp_status_str(known[j])) != 0);
    }
    for (i = 0; i < COUNT(unknown); i++) CHECK_STR(kvp_status_str(unknown[i]), "unknown status");
}

static void test_config_default(void) {
    struct kvp_pool_config cfg = kvp_pool_config_default();
    CHECK_EQ(cfg.size, 0);
    CHECK_EQ(cfg.page_size, 1);
    CHECK_EQ(cfg.index_type, KVP_INDEX_TYPE_I64);
    CHECK_EQ(cfg.backend, KVP_BACKEND_HOST);
    CHECK_EQ(cfg.device, 0);
    CHECK(cfg.need_sort == false);
}

static int g_sentinel_object;
#define SENTINEL_POOL ((struct kvp_pool *)(void *)&g_sentinel_object)
#define SENTINEL_SNAPSHOT ((struct kvp_snapshot *)(void *)&g_sentinel_object)

static void expect_bad_config(struct kvp_pool_config cfg, enum kvp_status want,
                              const char *needle, int line) {
    struct kvp_pool *pool = SENTINEL_POOL;
    check_status_impl(kvp_pool_new(&cfg, &pool), want, __FILE__, line, "kvp_pool_new");
    check_impl(pool == SENTINEL_POOL, __FILE__, line, "*out_pool unmodified on failure");
    check_msg_impl(needle, __FILE__, line);
}

static void test_bad_config(void) {
    struct kvp_pool_config cfg;
    struct kvp_pool *pool = SENTINEL_POOL;

    cfg = kvp_pool_config_default();
    cfg.size = 64;
    CHECK_STATUS(kvp_pool_new(NULL, &pool), KVP_STATUS_NULL_ARGUMENT);
    CHECK(pool == SENTINEL_POOL);
    CHECK_MSG("config");
    CHECK_STATUS(kvp_pool_new(&cfg, NULL), KVP_STATUS_NULL_ARGUMENT);
    CHECK_MSG("out_pool");

    cfg = kvp_pool_config_default(); /* size 0 */
    expect_bad_config(cfg, KVP_STATUS_INVALID_ARGUMENT, "size", __LINE__);

    cfg = kvp_pool_config_default();
    cfg.size = 64;
    cfg.page_size = 0;
    expect_bad_config(cfg, KVP_STATUS_INVALID_ARGUMENT, "page_size", __LINE__);

    cfg = kvp_pool_config_default();
    cfg.size = 10;
    cfg.page_size = 4;
    expect_bad_config(cfg, KVP_STATUS_UNALIGNED, "page_size", __LINE__);

    cfg = kvp_pool_config_default();
    cfg.size = 64;
    cfg.index_type = 2;
    expect_bad_config(cfg, KVP_STATUS_INVALID_ARGUMENT, "index_type", __LINE__);

    cfg = kvp_pool_config_default();
    cfg.size = 64;
    cfg.backend = 7;
    expect_bad_config(cfg, KVP_STATUS_INVALID_ARGUMENT, "backend", __LINE__);

    cfg = kvp_pool_config_default();
    cfg.size = 64;
    cfg.page_size = 4;
    cfg.backend = KVP_BACKEND_CUDA;
    cfg.device = 999; /* no such device, with or without a driver: never a crash */
    expect_bad_config(cfg, KVP_STATUS_CUDA_UNAVAILABLE, "CUDA", __LINE__);

    /* int32 indices need size + page_size <= INT32_MAX + 1. */
    cfg = kvp_pool_config_default();
    cfg.size = (uint64_t)1 << 31;
    cfg.page_size = 1u << 20;
    cfg.index_type = KVP_INDEX_TYPE_I32;
    expect_bad_config(cfg, KVP_STATUS_INVALID_ARGUMENT, "index type", __LINE__);
    cfg.size = (uint64_t)1 << 31;
    cfg.page_size = 1;
    expect_bad_config(cfg, KVP_STATUS_INVALID_ARGUMENT, "index type", __LINE__);

    /* At most 2^32 - 2 pages (page ids are 32-bit), refused before any memory is taken. */
    cfg = kvp_pool_config_default();
    cfg.size = ((uint64_t)1 << 32) - 1;
    expect_bad_config(cfg, KVP_STATUS_INVALID_ARGUMENT, "pages", __LINE__);
    cfg.size = (uint64_t)1 << 62;
    cfg.page_size = 1u << 30;
    expect_bad_config(cfg, KVP_STATUS_INVALID_ARGUMENT, "pages", __LINE__);

    /* a good config still works afterwards */
    cfg = kvp_pool_config_default();
    cfg.size = 16;
    pool = NULL;
    CHECK_STATUS(kvp_pool_new(&cfg, &pool), KVP_STATUS_OK);
    CHECK(pool != NULL);
    kvp_pool_free(pool);
}

static void test_null_arguments(void) {
    struct kvp_pool *pool = new_pool(64, 4);
    struct kvp_pool_info info, info_copy;
    struct kvp_pool_stats st, st_copy;
    struct kvp_snapshot *snap = NULL, *snap_out = SENTINEL_SNAPSHOT;
    uint64_t n = 12345;
    int64_t out[8], one = 1, minus1 = -1, four = 4;

    CHECK_STATUS(kvp_pool_backup_state(pool, &snap), KVP_STATUS_OK);
    fill_i64(out, COUNT(out), SENTINEL);
    memset(&info, 0x5A, sizeof info);
    memcpy(&info_copy, &info, sizeof info);
    memset(&st, 0x5A, sizeof st);
    memcpy(&st_copy, &st, sizeof st);

    /* pool NULL */
    CHECK_STATUS(kvp_pool_get_info(NULL, &info), KVP_STATUS_NULL_ARGUMENT);
    CHECK_MSG("pool");
    CHECK(memcmp(&info, &info_copy, sizeof info) == 0);
    CHECK_STATUS(kvp_pool_available_size(NULL, &n), KVP_STATUS_NULL_ARGUMENT);
    CHECK_EQ(n, 12345);
    CHECK_STATUS(kvp_pool_get_stats(NULL, &st), KVP_STATUS_NULL_ARGUMENT);
    CHECK(memcmp(&st, &st_copy, sizeof st) == 0);
    CHECK_STATUS(kvp_pool_alloc(NULL, 4, out, 8), KVP_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(kvp_pool_alloc_extend(NULL, &one, &four, &four, 1, 3, out, 8),
                 KVP_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(kvp_pool_alloc_decode(NULL, &one, &minus1, 1, out, 8), KVP_STATUS_NULL_ARGUMENT);
    CHECK(all_i64(out, COUNT(out), SENTINEL));
    CHECK_STATUS(kvp_pool_free_indices(NULL, &four, 1), KVP_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(kvp_pool_free_pages(NULL, &one, 1), KVP_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(kvp_pool_free_segment(NULL, &four, 1, 0, 1), KVP_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(kvp_pool_free_group_begin(NULL), KVP_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(kvp_pool_free_group_end(NULL), KVP_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(kvp_pool_merge_and_sort_free(NULL), KVP_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(kvp_pool_clear(NULL), KVP_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(kvp_pool_backup_state(NULL, &snap_out), KVP_STATUS_NULL_ARGUMENT);
    CHECK(snap_out == SENTINEL_SNAPSHOT);
    CHECK_STATUS(kvp_pool_restore_state(NULL, snap), KVP_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(kvp_testing_poison_pool(NULL), KVP_STATUS_NULL_ARGUMENT);

    /* out-parameter NULL */
    CHECK_STATUS(kvp_pool_get_info(pool, NULL), KVP_STATUS_NULL_ARGUMENT);
    CHECK_MSG("out_info");
    CHECK_STATUS(kvp_pool_available_size(pool, NULL), KVP_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(kvp_pool_get_stats(pool, NULL), KVP_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(kvp_pool_backup_state(pool, NULL), KVP_STATUS_NULL_ARGUMENT);
    CHECK_MSG("out_snapshot");
    CHECK_STATUS(kvp_pool_restore_state(pool, NULL), KVP_STATUS_NULL_ARGUMENT);
    CHECK_MSG("snapshot");

    /* buffer NULL with a nonzero length */
    CHECK_STATUS(kvp_pool_alloc(pool, 4, NULL, 4), KVP_STATUS_NULL_ARGUMENT);
    CHECK_MSG("out");
    CHECK_STATUS(kvp_pool_alloc_extend(pool, NULL, &four, &minus1, 1, 4, out, 8),
                 KVP_STATUS_NULL_ARGUMENT);
    CHECK_MSG("prefix_lens");
    {
        int64_t zero = 0;
        CHECK_STATUS(kvp_pool_alloc_extend(pool, &zero, NULL, &minus1, 1, 4, out, 8),
                     KVP_STATUS_NULL_ARGUMENT);
        CHECK_MSG("seq_lens");
        CHECK_STATUS(kvp_pool_alloc_extend(pool, &zero, &four, NULL, 1, 4, out, 8),
                     KVP_STATUS_NULL_ARGUMENT);
        CHECK_MSG("last_loc");
        CHECK_STATUS(kvp_pool_alloc_extend(pool, &zero, &four, &minus1, 1, 4, NULL, 8),
                     KVP_STATUS_NULL_ARGUMENT);
        CHECK_MSG("out");
    }
    CHECK_STATUS(kvp_pool_alloc_decode(pool, NULL, &minus1, 1, out, 8), KVP_STATUS_NULL_ARGUMENT);
    CHECK_MSG("seq_lens");
    CHECK_STATUS(kvp_pool_alloc_decode(pool, &one, NULL, 1, out, 8), KVP_STATUS_NULL_ARGUMENT);
    CHECK_MSG("last_loc");
    CHECK_STATUS(kvp_pool_alloc_decode(pool, &one, &minus1, 1, NULL, 8), KVP_STATUS_NULL_ARGUMENT);
    CHECK_MSG("out");
    CHECK(all_i64(out, COUNT(out), SENTINEL));
    CHECK_STATUS(kvp_pool_free_indices(pool, NULL, 1), KVP_STATUS_NULL_ARGUMENT);
    CHECK_MSG("indices");
    CHECK_STATUS(kvp_pool_free_pages(pool, NULL, 1), KVP_STATUS_NULL_ARGUMENT);
    CHECK_MSG("page_ids");
    CHECK_STATUS(kvp_pool_free_segment(pool, NULL, 4, 0, 4), KVP_STATUS_NULL_ARGUMENT);
    CHECK_MSG("row");

    /* nothing was allocated or freed by any of the above */
    CHECK_EQ(available(pool), 64);

    /* NULL is fine when the length is 0 */
    CHECK_STATUS(kvp_pool_alloc(pool, 0, NULL, 0), KVP_STATUS_OK);
    CHECK_STATUS(kvp_pool_alloc_extend(pool, NULL, NULL, NULL, 0, 0, NULL, 0), KVP_STATUS_OK);
    CHECK_STATUS(kvp_pool_alloc_decode(pool, NULL, NULL, 0, NULL, 0), KVP_STATUS_OK);
    CHECK_STATUS(kvp_pool_free_indices(pool, NULL, 0), KVP_STATUS_OK);
    CHECK_STATUS(kvp_pool_free_pages(pool, NULL, 0), KVP_STATUS_OK);
    CHECK_STATUS(kvp_pool_free_segment(pool, NULL, 0, 0, 0), KVP_STATUS_OK);
    CHECK_EQ(available(pool), 64);

    /* freeing NULL is a no-op */
    kvp_pool_free(NULL);
    kvp_snapshot_free(NULL);

    kvp_snapshot_free(snap);
    kvp_pool_free(pool);
}

static void test_token_pool_fifo(void) {
    struct kvp_pool *pool = new_pool(8, 1);
    int64_t out[8];
    int64_t freed[2] = {2, 1};
    int64_t freed2[2] = {8, 3};
    int64_t freed3[2] = {5, 4};

    CHECK_EQ(available(pool), 8);
    CHECK_STATUS(kvp_pool_alloc(pool, 3, out, 8), KVP_STATUS_OK);
    CHECK_I64S(out, 1, 2, 3);
    CHECK_EQ(available(pool), 5);

    CHECK_STATUS(kvp_pool_free_indices(pool, freed, 2), KVP_STATUS_OK);
    CHECK_EQ(available(pool), 7);
    /* free list: 4 5 6 7 8 2 1 (freed slots appended in the given order) */
    CHECK_STATUS(kvp_pool_alloc(pool, 6, out, 8), KVP_STATUS_OK);
    CHECK_I64S(out, 4, 5, 6, 7, 8, 2);
    CHECK_EQ(available(pool), 1);

    /* shortage: nothing written, nothing taken */
    fill_i64(out, 8, SENTINEL);
    CHECK_STATUS(kvp_pool_alloc(pool, 2, out, 8), KVP_STATUS_OUT_OF_SLOTS);
    CHECK(all_i64(out, 8, SENTINEL));
    CHECK_EQ(available(pool), 1);

    CHECK_STATUS(kvp_pool_alloc(pool, 1, out, 1), KVP_STATUS_OK);
    CHECK_I64S(out, 1);
    CHECK_EQ(available(pool), 0);

    /* alloc of 0 succeeds and writes nothing */
    fill_i64(out, 8, SENTINEL);
    CHECK_STATUS(kvp_pool_alloc(pool, 0, out, 8), KVP_STATUS_OK);
    CHECK(all_i64(out, 8, SENTINEL));

    CHECK_STATUS(kvp_pool_free_indices(pool, freed2, 2), KVP_STATUS_OK);
    CHECK_STATUS(kvp_pool_alloc(pool, 2, out, 2), KVP_STATUS_OK);
    CHECK_I64S(out, 8, 3);

    /* on a token pool alloc_extend equals alloc(extend_num_tokens) */
    CHECK_STATUS(kvp_pool_free_indices(pool, freed3, 2), KVP_STATUS_OK);
    CHECK_STATUS(extend1(pool, 0, 2, -1, out, 8), KVP_STATUS_OK);
    CHECK_I64S(out, 5, 4);

    /* clear: the free list becomes 1..size in order */
    CHECK_STATUS(kvp_pool_clear(pool), KVP_STATUS_OK);
    CHECK_EQ(available(pool), 8);
    CHECK_STATUS(kvp_pool_alloc(pool, 8, out, 8), KVP_STATUS_OK);
    CHECK_I64S(out, 1, 2, 3, 4, 5, 6, 7, 8);
    kvp_pool_free(pool);
}

static void test_token_pool_decode(void) {
    struct kvp_pool *pool = new_pool(8, 1);
    int64_t out[4];
    int64_t seq[2] = {1, 3}, last[2] = {-1, 1};

    CHECK_STATUS(kvp_pool_alloc(pool, 2, out, 4), KVP_STATUS_OK);
    CHECK_I64S(out, 1, 2);
    /* every decode token of a token pool takes the next free slot */
    CHECK_STATUS(kvp_pool_alloc_decode(pool, seq, last, 2, out, 4), KVP_STATUS_OK);
    CHECK_I64S(out, 3, 4);
    CHECK_EQ(available(pool), 4);
    /* a non-empty prefix needs an allocated last_loc */
    last[1] = 7;
    CHECK_STATUS(kvp_pool_alloc_decode(pool, seq, last, 2, out, 4), KVP_STATUS_NOT_ALLOCATED);
    CHECK_MSG("last_loc[1]");
    CHECK_EQ(available(pool), 4);
    kvp_pool_free(pool);
}

static void test_paged_alloc_extend_and_decode(void) {
    struct kvp_pool *pool = new_pool(64, 4);
    int64_t out[40];

    /* prefix of 2 tokens: takes page 1 -> slots 4, 5 */
    CHECK_STATUS(extend1(pool, 0, 2, -1, out, 40), KVP_STATUS_OK);
    CHECK_I64S(out, 4, 5);
    CHECK_EQ(available(pool), 60);

    /* grow it to 11: finish page 1 (6, 7), a whole page 2 (8..11), a partial page 3 */
    fill_i64(out, 40, SENTINEL);
    CHECK_STATUS(extend1(pool, 2, 11, 5, out, 40), KVP_STATUS_OK);
    CHECK_I64S(out, 6, 7, 8, 9, 10, 11, 12, 13, 14, SENTINEL);
    CHECK_EQ(available(pool), 52);

    /* decode: token 12 fits page 3; token 13 starts page 4 */
    CHECK_STATUS(decode1(pool, 12, 14, out), KVP_STATUS_OK);
    CHECK_I64S(out, 15);
    CHECK_EQ(available(pool), 52);
    CHECK_STATUS(decode1(pool, 13, 15, out), KVP_STATUS_OK);
    CHECK_I64S(out, 16);
    CHECK_EQ(available(pool), 48);

    /* a decode batch: request 0 continues page 4, request 1 (first token) takes page 5 */
    {
        int64_t seq[2] = {14, 1}, last[2] = {16, -1};
        fill_i64(out, 40, SENTINEL);
        CHECK_STATUS(kvp_pool_alloc_decode(pool, seq, last, 2, out, 40), KVP_STATUS_OK);
        CHECK_I64S(out, 17, 20, SENTINEL);
        CHECK_EQ(available(pool), 44);
    }

    /* an extend batch: pages in batch order (6 for request 0, 7 and 8 for request 1) */
    {
        int64_t prefix[2] = {0, 0}, seq[2] = {3, 5}, last[2] = {-1, -1};
        fill_i64(out, 40, SENTINEL);
        CHECK_STATUS(kvp_pool_alloc_extend(pool, prefix, seq, last, 2, 8, out, 40),
                     KVP_STATUS_OK);
        CHECK_I64S(out, 24, 25, 26, 28, 29, 30, 31, 32, SENTINEL);
        CHECK_EQ(available(pool), 32);
    }

    /* prefix 3 ending at 26: finish page 6 with 27, then a partial new page 9 */
    CHECK_STATUS(extend1(pool, 3, 6, 26, out, 40), KVP_STATUS_OK);
    CHECK_I64S(out, 27, 36, 37);
    CHECK_EQ(available(pool), 28);

    /* ---- errors: each changes nothing and writes nothing ---- */
    {
        int64_t prefix[2], seq[2], last[2];
        struct kvp_pool_stats before = stats_of(pool);
        fill_i64(out, 40, SENTINEL);

        CHECK_STATUS(extend1(pool, 5, 3, 4, out, 40), KVP_STATUS_INVALID_LENGTHS);
        CHECK_MSG("seq_lens[0]");
        prefix[0] = -1;
        seq[0] = 3;
        last[0] = -1;
        CHECK_STATUS(kvp_pool_alloc_extend(pool, prefix, seq, last, 1, 4, out, 40),
                     KVP_STATUS_INVALID_LENGTHS);
        CHECK_MSG("prefix_lens[0]");
        prefix[0] = 0;
        seq[0] = 4;
        CHECK_STATUS(kvp_pool_alloc_extend(pool, prefix, seq, last, 1, 3, out, 40),
                     KVP_STATUS_INVALID_LENGTHS);
        CHECK_MSG("extend_num_tokens");
        CHECK_STATUS(extend1(pool, 0, 65, -1, out, 40), KVP_STATUS_INVALID_LENGTHS);
        CHECK_MSG("pool size");

        /* last_loc must end the prefix: (last_loc + 1) % 4 == prefix % 4 */
        CHECK_STATUS(extend1(pool, 2, 3, 6, out, 40), KVP_STATUS_LAST_LOC_MISMATCH);
        CHECK_MSG("last_loc[0]");
        CHECK_STATUS(extend1(pool, 0, 3, 5, out, 40), KVP_STATUS_LAST_LOC_MISMATCH);
        CHECK_STATUS(extend1(pool, 1, 2, 60, out, 40), KVP_STATUS_NOT_ALLOCATED);
        CHECK_MSG("last_loc[0]");
        CHECK_STATUS(extend1(pool, 1, 2, 68, out, 40), KVP_STATUS_INDEX_OUT_OF_RANGE);
        CHECK_STATUS(extend1(pool, 1, 2, 0, out, 40), KVP_STATUS_RESERVED_SLOT);
        /* two requests extending page 9 (slots 36, 37 allocated) */
        prefix[0] = 1;
        seq[0] = 2;
        last[0] = 36;
        prefix[1] = 2;
        seq[1] = 3;
        last[1] = 37;
        CHECK_STATUS(kvp_pool_alloc_extend(pool, prefix, seq, last, 2, 2, out, 40),
                     KVP_STATUS_LAST_LOC_MISMATCH);
        CHECK_MSG("page 9");

        /* output too short */
        CHECK_STATUS(extend1(pool, 0, 4, -1, out, 3), KVP_STATUS_BUFFER_TOO_SMALL);
        /* shortage: 7 free pages, 8 needed */
        CHECK_STATUS(extend1(pool, 0, 32, -1, out, 40), KVP_STATUS_OUT_OF_SLOTS);

        /* decode errors */
        CHECK_STATUS(decode1(pool, 0, -1, out), KVP_STATUS_INVALID_LENGTHS);
        CHECK_MSG("seq_lens[0]");
        CHECK_STATUS(decode1(pool, 12, 13, out), KVP_STATUS_LAST_LOC_MISMATCH);
        CHECK_STATUS(decode1(pool, 1, 5, out), KVP_STATUS_LAST_LOC_MISMATCH);
        seq[0] = 1;
        seq[1] = 1;
        last[0] = -1;
        last[1] = -1;
        CHECK_STATUS(kvp_pool_alloc_decode(pool, seq, last, 2, out, 1),
                     KVP_STATUS_BUFFER_TOO_SMALL);
        /* two requests writing into page 9: 38 (after 37) twice */
        seq[0] = 3;
        seq[1] = 3;
        last[0] = 37;
        last[1] = 37;
        CHECK_STATUS(kvp_pool_alloc_decode(pool, seq, last, 2, out, 2),
                     KVP_STATUS_LAST_LOC_MISMATCH);

        CHECK(all_i64(out, 40, SENTINEL));
        CHECK_EQ(available(pool), 28);
        {
            struct kvp_pool_stats after = stats_of(pool);
            CHECK_EQ(after.tokens_allocated, before.tokens_allocated);
            CHECK_EQ(after.pages_allocated, before.pages_allocated);
            CHECK_EQ(after.pages_in_use, before.pages_in_use);
            CHECK_EQ(after.failed_allocations, before.failed_allocations + 1);
            CHECK_EQ(after.rejected_calls, before.rejected_calls + 16);
        }
    }

    /* the pool still works: the next page is 10 */
    CHECK_STATUS(extend1(pool, 0, 1, -1, out, 40), KVP_STATUS_OK);
    CHECK_I64S(out, 40);
    kvp_pool_free(pool);
}

static void test_paged_alloc(void) {
    struct kvp_pool *pool = new_pool(32, 4);
    int64_t out[40];

    fill_i64(out, 40, SENTINEL);
    CHECK_STATUS(kvp_pool_alloc(pool, 6, out, 40), KVP_STATUS_UNALIGNED);
    CHECK(all_i64(out, 40, SENTINEL));
    CHECK_STATUS(kvp_pool_alloc(pool, 8, out, 7), KVP_STATUS_BUFFER_TOO_SMALL);
    CHECK(all_i64(out, 40, SENTINEL));
    CHECK_STATUS(kvp_pool_alloc(pool, 36, out, 40), KVP_STATUS_OUT_OF_SLOTS);
    CHECK(all_i64(out, 40, SENTINEL));
    CHECK_EQ(available(pool), 32);

    CHECK_STATUS(kvp_pool_alloc(pool, 8, out, 40), KVP_STATUS_OK);
    CHECK_I64S(out, 4, 5, 6, 7, 8, 9, 10, 11, SENTINEL);
    CHECK_STATUS(kvp_pool_alloc(pool, 24, out, 24), KVP_STATUS_OK);
    CHECK_I64S(out, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30,
               31, 32, 33, 34, 35);
    CHECK_EQ(available(pool), 0);
    kvp_pool_free(pool);
}

static void test_paged_frees(void) {
    struct kvp_pool *pool = new_pool(32, 4); /* 8 pages, slots 4..35 */
    int64_t out[40];

    CHECK_STATUS(kvp_pool_alloc(pool, 16, out, 40), KVP_STATUS_OK); /* pages 1..4 */
    CHECK_I64S(out, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19);
    CHECK_EQ(available(pool), 16);

    /* free by index: pages 4 and 2 go to the front in ascending order -> 2 4 5 6 7 8 */
    {
        int64_t idx[2] = {17, 9};
        CHECK_STATUS(kvp_pool_free_indices(pool, idx, 2), KVP_STATUS_OK);
    }
    CHECK_EQ(available(pool), 24);
    CHECK_STATUS(kvp_pool_alloc(pool, 8, out, 40), KVP_STATUS_OK);
    CHECK_I64S(out, 8, 9, 10, 11, 16, 17, 18, 19);
    CHECK_EQ(available(pool), 16); /* free: 5 6 7 8 */

    /* one index frees its whole page */
    CHECK_STATUS(free1(pool, 5), KVP_STATUS_OK);
    CHECK_EQ(available(pool), 20); /* free: 1 5 6 7 8 */
    CHECK_STATUS(free1(pool, 6), KVP_STATUS_DOUBLE_FREE);
    CHECK_MSG("indices[0]");
    /* two indices of one page in one call free it once; the same index twice is an error */
    {
        int64_t same[2] = {9, 9};
        int64_t two[2] = {8, 9};
        CHECK_STATUS(kvp_pool_free_indices(pool, same, 2), KVP_STATUS_DOUBLE_FREE);
        CHECK_MSG("indices[1]");
        CHECK_EQ(available(pool), 20);
        CHECK_STATUS(kvp_pool_free_indices(pool, two, 2), KVP_STATUS_OK);
    }
    CHECK_EQ(available(pool), 24); /* free: 2 1 5 6 7 8 */

    /* free_pages: exactly these pages, in the given order, at the front */
    {
        int64_t pages[2] = {3, 4};
        CHECK_STATUS(kvp_pool_free_pages(pool, pages, 2), KVP_STATUS_OK);
        CHECK_EQ(available(pool), 32); /* free: 3 4 2 1 5 6 7 8 */
        CHECK_STATUS(kvp_pool_free_pages(pool, pages, 1), KVP_STATUS_DOUBLE_FREE);
        CHECK_MSG("page_ids[0]");
    }
    CHECK_STATUS(kvp_pool_alloc(pool, 12, out, 40), KVP_STATUS_OK);
    CHECK_I64S(out, 12, 13, 14, 15, 16, 17, 18, 19, 8, 9, 10, 11);
    CHECK_EQ(available(pool), 20); /* free: 1 5 6 7 8 */

    /* free_segment of a request row holding pages 3, 4, 2 (10 tokens) */
    {
        int64_t row[10] = {12, 13, 14, 15, 16, 17, 18, 19, 8, 9};
        int64_t bad[4] = {12, 13, 15, 14};
        int64_t off[4] = {13, 14, 15, 16};
        CHECK_STATUS(kvp_pool_free_segment(pool, row, 10, 2, 4), KVP_STATUS_UNALIGNED);
        CHECK_STATUS(kvp_pool_free_segment(pool, row, 10, 4, 7), KVP_STATUS_BUFFER_TOO_SMALL);
        CHECK_STATUS(kvp_pool_free_segment(pool, bad, 4, 0, 4), KVP_STATUS_INVALID_ARGUMENT);
        CHECK_MSG("row[2]");
        CHECK_STATUS(kvp_pool_free_segment(pool, off, 4, 0, 4), KVP_STATUS_UNALIGNED);
        CHECK_EQ(available(pool), 20);
        /* row[4..10): page 4 and (ending inside it) the whole page 2 */
        CHECK_STATUS(kvp_pool_free_segment(pool, row, 10, 4, 6), KVP_STATUS_OK);
        CHECK_EQ(available(pool), 28); /* free: 4 2 1 5 6 7 8 */
        CHECK_STATUS(kvp_pool_free_segment(pool, row, 10, 8, 2), KVP_STATUS_DOUBLE_FREE);
        CHECK_MSG("row[8]");
        CHECK_STATUS(kvp_pool_free_segment(pool, row, 10, 0, 0), KVP_STATUS_OK);
        CHECK_EQ(available(pool), 28);
    }
    CHECK_STATUS(kvp_pool_alloc(pool, 8, out, 40), KVP_STATUS_OK);
    CHECK_I64S(out, 16, 17, 18, 19, 8, 9, 10, 11);

    /* the distinct pages of one call return as one ascending block: 1 2 4 go to the front */
    {
        struct kvp_pool *fresh = new_pool(32, 4);
        int64_t idx[4] = {9, 17, 5, 10}; /* pages 2 4 1 2 */
        CHECK_STATUS(kvp_pool_alloc(fresh, 20, out, 40), KVP_STATUS_OK); /* pages 1..5 */
        CHECK_STATUS(kvp_pool_free_indices(fresh, idx, 4), KVP_STATUS_OK);
        CHECK_EQ(available(fresh), 24);
        CHECK_STATUS(kvp_pool_alloc(fresh, 16, out, 40), KVP_STATUS_OK);
        CHECK_I64S(out, 4, 5, 6, 7, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27);
        kvp_pool_free(fresh);
    }

    /* reserved and out-of-range indices; a failing call frees nothing */
    {
        int64_t mixed[2] = {12, 0};
        int64_t page0[1] = {0};
        int64_t page9[1] = {9};
        int64_t negative[1] = {-3};
        long long before = available(pool);
        CHECK_STATUS(free1(pool, 0), KVP_STATUS_RESERVED_SLOT);
        CHECK_MSG("indices[0]");
        CHECK_STATUS(free1(pool, 2), KVP_STATUS_RESERVED_SLOT); /* inside page 0 */
        CHECK_STATUS(free1(pool, 36), KVP_STATUS_INDEX_OUT_OF_RANGE);
        CHECK_MSG("indices[0]");
        CHECK_STATUS(free1(pool, -1), KVP_STATUS_INDEX_OUT_OF_RANGE);
        CHECK_STATUS(kvp_pool_free_indices(pool, mixed, 2), KVP_STATUS_RESERVED_SLOT);
        CHECK_MSG("indices[1]");
        CHECK_STATUS(kvp_pool_free_pages(pool, page0, 1), KVP_STATUS_RESERVED_SLOT);
        CHECK_STATUS(kvp_pool_free_pages(pool, page9, 1), KVP_STATUS_INDEX_OUT_OF_RANGE);
        CHECK_STATUS(kvp_pool_free_pages(pool, negative, 1), KVP_STATUS_INDEX_OUT_OF_RANGE);
        CHECK_EQ(available(pool), before);
        CHECK_STATUS(free1(pool, 12), KVP_STATUS_OK); /* page 3 was not freed above */
        CHECK_EQ(available(pool), before + 4);
    }
    kvp_pool_free(pool);
}

static void test_double_free(void) {
    struct kvp_pool *pool = new_pool(8, 1);
    int64_t out[8];
    int64_t twice[2] = {2, 1};
    int64_t dup[2] = {3, 3};
    int64_t ok[2] = {2, 3};
    int64_t page[1] = {2};

    CHECK_STATUS(kvp_pool_alloc(pool, 3, out, 8), KVP_STATUS_OK);
    CHECK_STATUS(free1(pool, 1), KVP_STATUS_OK);
    CHECK_EQ(available(pool), 6);

    CHECK_STATUS(kvp_pool_free_indices(pool, twice, 2), KVP_STATUS_DOUBLE_FREE);
    CHECK_MSG("indices[1]");
    CHECK_EQ(available(pool), 6); /* slot 2 was not freed */
    CHECK_STATUS(kvp_pool_free_indices(pool, dup, 2), KVP_STATUS_DOUBLE_FREE);
    CHECK_MSG("indices[1]");
    CHECK_EQ(available(pool), 6);

    CHECK_STATUS(kvp_pool_free_indices(pool, ok, 2), KVP_STATUS_OK);
    CHECK_EQ(available(pool), 8);
    CHECK_STATUS(kvp_pool_free_pages(pool, page, 1), KVP_STATUS_DOUBLE_FREE);
    CHECK_MSG("page_ids[0]");
    CHECK_EQ(available(pool), 8);
    {
        struct kvp_pool_stats st = stats_of(pool);
        CHECK_EQ(st.slots_freed, 3);
        CHECK_EQ(st.rejected_calls, 3);
        CHECK_EQ(st.free_calls, 5);
    }
    kvp_pool_free(pool);
}

static void test_free_groups(void) {
    struct kvp_pool *pool = new_pool(32, 4);
    struct kvp_snapshot *snap = SENTINEL_SNAPSHOT;
    int64_t out[40];

    CHECK_STATUS(kvp_pool_alloc(pool, 24, out, 40), KVP_STATUS_OK); /* pages 1..6 */
    CHECK_EQ(available(pool), 8);

    CHECK_STATUS(kvp_pool_free_group_end(pool), KVP_STATUS_INVALID_STATE);
    CHECK_MSG("free group");
    CHECK(!info_of(pool).in_free_group);

    CHECK_STATUS(kvp_pool_free_group_begin(pool), KVP_STATUS_OK);
    CHECK(info_of(pool).in_free_group);
    CHECK_STATUS(kvp_pool_free_group_begin(pool), KVP_STATUS_INVALID_STATE);
    CHECK(info_of(pool).in_free_group);

    {
        int64_t page5[1] = {5};
        int64_t page2[1] = {2};
        CHECK_STATUS(kvp_pool_free_pages(pool, page5, 1), KVP_STATUS_OK);
        CHECK_STATUS(free1(pool, 12), KVP_STATUS_OK); /* page 3 */
        CHECK_STATUS(kvp_pool_free_pages(pool, page2, 1), KVP_STATUS_OK);
        CHECK_STATUS(free1(pool, 4), KVP_STATUS_OK); /* page 1 */
    }
    /* held until the group ends */
    CHECK_EQ(available(pool), 8);
    CHECK_EQ(stats_of(pool).pages_in_use, 6);
    /* a page may be freed only once per group */
    CHECK_STATUS(free1(pool, 21), KVP_STATUS_DOUBLE_FREE);
    CHECK_MSG("indices[0]");
    /* no snapshot while a group is open */
    CHECK_STATUS(kvp_pool_backup_state(pool, &snap), KVP_STATUS_INVALID_STATE);
    CHECK(snap == SENTINEL_SNAPSHOT);

    CHECK_STATUS(kvp_pool_free_group_end(pool), KVP_STATUS_OK);
    CHECK(!info_of(pool).in_free_group);
    CHECK_EQ(available(pool), 24);
    CHECK_EQ(stats_of(pool).pages_in_use, 2);
    CHECK_STATUS(kvp_pool_free_group_end(pool), KVP_STATUS_INVALID_STATE);

    /* returned: first the by-index pages as one ascending block (1 3), then the page-id
     * frees in call order (5 2); each lands at the front -> 5 2 1 3 7 8 */
    CHECK_STATUS(kvp_pool_alloc(pool, 16, out, 40), KVP_STATUS_OK);
    CHECK_I64S(out, 20, 21, 22, 23, 8, 9, 10, 11, 4, 5, 6, 7, 12, 13, 14, 15);

    /* clear drops an open group */
    CHECK_STATUS(kvp_pool_free_group_begin(pool), KVP_STATUS_OK);
    CHECK_STATUS(free1(pool, 20), KVP_STATUS_OK);
    CHECK_STATUS(kvp_pool_clear(pool), KVP_STATUS_OK);
    CHECK(!info_of(pool).in_free_group);
    CHECK_EQ(available(pool), 32);
    CHECK_STATUS(kvp_pool_free_group_end(pool), KVP_STATUS_INVALID_STATE);
    CHECK_STATUS(kvp_pool_alloc(pool, 8, out, 40), KVP_STATUS_OK);
    CHECK_I64S(out, 4, 5, 6, 7, 8, 9, 10, 11);
    kvp_pool_free(pool);
}

static void test_need_sort(void) {
    struct kvp_pool *pool = new_pool_ex(32, 4, KVP_INDEX_TYPE_I64, true);
    int64_t out[40];
    int64_t idx[2] = {20, 8}; /* pages 5 and 2 */
    int64_t pages[2] = {7, 3};

    CHECK(info_of(pool).need_sort);
    CHECK_STATUS(kvp_pool_alloc(pool, 32, out, 40), KVP_STATUS_OK);
    CHECK_EQ(available(pool), 0);
    CHECK_STATUS(kvp_pool_free_indices(pool, idx, 2), KVP_STATUS_OK);
    /* staged pages count as available */
    CHECK_EQ(available(pool), 8);
    CHECK_EQ(stats_of(pool).merges, 0);
    CHECK_STATUS(free1(pool, 21), KVP_STATUS_DOUBLE_FREE); /* staged = already free */
    /* the allocation runs short and merges, sorted */
    CHECK_STATUS(kvp_pool_alloc(pool, 4, out, 40), KVP_STATUS_OK);
    CHECK_I64S(out, 8, 9, 10, 11);
    CHECK_EQ(stats_of(pool).merges, 1);

    CHECK_STATUS(kvp_pool_free_pages(pool, pages, 2), KVP_STATUS_OK);
    CHECK_EQ(available(pool), 12);
    CHECK_STATUS(kvp_pool_merge_and_sort_free(pool), KVP_STATUS_OK);
    CHECK_EQ(stats_of(pool).merges, 2);
    CHECK_STATUS(kvp_pool_merge_and_sort_free(pool), KVP_STATUS_OK); /* nothing staged */
    CHECK_EQ(stats_of(pool).merges, 2);
    CHECK_EQ(available(pool), 12);
    CHECK_STATUS(kvp_pool_alloc(pool, 12, out, 40), KVP_STATUS_OK);
    CHECK_I64S(out, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31);
    kvp_pool_free(pool);
}

static void test_last_error_message(void) {
    struct kvp_pool *pool = new_pool(8, 1);
    char full[512], small[8];
    size_t len, n;

    CHECK_STATUS(free1(pool, 0), KVP_STATUS_RESERVED_SLOT);
    len = kvp_last_error_message(NULL, 0);
    CHECK(len > 10);

    memset(full, 'X', sizeof full);
    n = kvp_last_error_message(full, sizeof full);
    CHECK_EQ(n, len);
    CHECK_EQ(strlen(full), len);
    CHECK(strstr(full, "indices[0]") != NULL);

    /* truncated: buf_len - 1 bytes plus a NUL, nothing written beyond */
    memset(small, 'X', sizeof small);
    n = kvp_last_error_message(small, 5);
    CHECK_EQ(n, len);
    CHECK(memcmp(small, full, 4) == 0);
    CHECK_EQ(small[4], '\0');
    CHECK(small[5] == 'X' && small[6] == 'X' && small[7] == 'X');

    memset(small, 'X', sizeof small);
    n = kvp_last_error_message(small, 1);
    CHECK_EQ(n, len);
    CHECK_EQ(small[0], '\0');
    CHECK_EQ(small[1], 'X');

    memset(small, 'X', sizeof small);
    n = kvp_last_error_message(small, 0); /* non-NULL, length 0: nothing written */
    CHECK_EQ(n, len);
    CHECK_EQ(small[0], 'X');

    /* exactly len + 1 bytes: the whole message; len bytes: all but the last byte */
    {
        char exact[512];
        memset(exact, 'X', sizeof exact);
        n = kvp_last_error_message(exact, len + 1);
        CHECK_EQ(n, len);
        CHECK_STR(exact, full);
        memset(exact, 'X', sizeof exact);
        n = kvp_last_error_message(exact, len);
        CHECK_EQ(n, len);
        CHECK_EQ(strlen(exact), len - 1);
        CHECK(strncmp(exact, full, len - 1) == 0);
        CHECK_EQ(exact[len], 'X');
    }

    /* a different failure gives a different message */
    CHECK_STATUS(free1(pool, 99), KVP_STATUS_INDEX_OUT_OF_RANGE);
    CHECK_MSG("indices[0] = 99");
    {
        char other[512];
        n = kvp_last_error_message(other, sizeof other);
        CHECK_EQ(n, strlen(other));
        CHECK(strcmp(other, full) != 0);
    }
    kvp_pool_free(pool);
}

static void test_snapshots(void) {
    struct kvp_pool *pool = new_pool(64, 4);
    struct kvp_pool *other = new_pool(64, 4);
    struct kvp_snapshot *snap = NULL, *other_snap = NULL;
    int64_t out[16];

    CHECK_STATUS(kvp_pool_alloc(pool, 8, out, 16), KVP_STATUS_OK); /* pages 1, 2 */
    CHECK_STATUS(kvp_pool_backup_state(pool, &snap), KVP_STATUS_OK);
    CHECK(snap != NULL);
    CHECK_STATUS(kvp_pool_backup_state(other, &other_snap), KVP_STATUS_OK);

    /* after the backup: allocate page 3, free page 1 */
    CHECK_STATUS(kvp_pool_alloc(pool, 4, out, 16), KVP_STATUS_OK);
    CHECK_I64S(out, 12, 13, 14, 15);
    CHECK_STATUS(free1(pool, 4), KVP_STATUS_OK);
    CHECK_EQ(available(pool), 56);

    CHECK_STATUS(kvp_pool_restore_state(pool, snap), KVP_STATUS_OK);
    CHECK_EQ(available(pool), 56);
    /* page 3 is free again and first in line; page 1 is allocated again */
    {
        int64_t page3[1] = {3};
        CHECK_STATUS(kvp_pool_free_pages(pool, page3, 1), KVP_STATUS_DOUBLE_FREE);
    }
    CHECK_STATUS(kvp_pool_alloc(pool, 4, out, 16), KVP_STATUS_OK);
    CHECK_I64S(out, 12, 13, 14, 15);
    CHECK_STATUS(free1(pool, 4), KVP_STATUS_OK);

    /* the snapshot is not consumed */
    CHECK_STATUS(kvp_pool_restore_state(pool, snap), KVP_STATUS_OK);
    CHECK_EQ(available(pool), 56);
    CHECK_STATUS(kvp_pool_alloc(pool, 8, out, 16), KVP_STATUS_OK);
    CHECK_I64S(out, 12, 13, 14, 15, 16, 17, 18, 19);
    CHECK_EQ(stats_of(pool).restores, 2);

    /* snapshots of another pool are refused and change nothing */
    CHECK_STATUS(kvp_pool_restore_state(other, snap), KVP_STATUS_FOREIGN_SNAPSHOT);
    CHECK_EQ(available(other), 64);
    CHECK_STATUS(kvp_pool_restore_state(pool, other_snap), KVP_STATUS_FOREIGN_SNAPSHOT);
    CHECK_EQ(available(pool), 48);
    CHECK_EQ(stats_of(pool).restores, 2);

    /* not while a free group is open */
    CHECK_STATUS(kvp_pool_free_group_begin(pool), KVP_STATUS_OK);
    CHECK_STATUS(kvp_pool_restore_state(pool, snap), KVP_STATUS_INVALID_STATE);
    CHECK_STATUS(kvp_pool_free_group_end(pool), KVP_STATUS_OK);
    CHECK_EQ(available(pool), 48);

    /* a snapshot outlives its pool but can no longer be restored */
    kvp_pool_free(other);
    CHECK_STATUS(kvp_pool_restore_state(pool, other_snap), KVP_STATUS_FOREIGN_SNAPSHOT);
    kvp_snapshot_free(other_snap);

    kvp_pool_free(pool);
    kvp_snapshot_free(snap);
}

static void test_int32_pool(void) {
    struct kvp_pool *pool = new_pool_ex(64, 4, KVP_INDEX_TYPE_I32, false);
    int32_t out[16], last;
    int64_t prefix, seq;

    CHECK_EQ(info_of(pool).index_type, KVP_INDEX_TYPE_I32);

    /* the same worked example with int32_t buffers; elements past the result untouched */
    fill_i32(out, 16, SENTINEL32);
    prefix = 0;
    seq = 2;
    last = -1;
    CHECK_STATUS(kvp_pool_alloc_extend(pool, &prefix, &seq, &last, 1, 2, out, 2), KVP_STATUS_OK);
    CHECK_I32S(out, 4, 5, SENTINEL32, SENTINEL32);
    fill_i32(out, 16, SENTINEL32);
    prefix = 2;
    seq = 11;
    last = 5;
    CHECK_STATUS(kvp_pool_alloc_extend(pool, &prefix, &seq, &last, 1, 9, out, 16), KVP_STATUS_OK);
    CHECK_I32S(out, 6, 7, 8, 9, 10, 11, 12, 13, 14, SENTINEL32);
    fill_i32(out, 16, SENTINEL32);
    seq = 12;
    last = 14;
    CHECK_STATUS(kvp_pool_alloc_decode(pool, &seq, &last, 1, out, 1), KVP_STATUS_OK);
    CHECK_I32S(out, 15, SENTINEL32);
    fill_i32(out, 16, SENTINEL32);
    CHECK_STATUS(kvp_pool_alloc(pool, 8, out, 8), KVP_STATUS_OK);
    CHECK_I32S(out, 16, 17, 18, 19, 20, 21, 22, 23, SENTINEL32);
    CHECK_EQ(available(pool), 44);

    {
        int32_t idx[2] = {21, 16}; /* pages 5 and 4 */
        int32_t zero[1] = {0};
        int32_t page3[1] = {3};
        int32_t row[6] = {4, 5, 6, 7, 8, 9};
        CHECK_STATUS(kvp_pool_free_indices(pool, idx, 2), KVP_STATUS_OK);
        CHECK_EQ(available(pool), 52);
        CHECK_STATUS(kvp_pool_free_indices(pool, idx, 1), KVP_STATUS_DOUBLE_FREE);
        CHECK_STATUS(kvp_pool_free_indices(pool, zero, 1), KVP_STATUS_RESERVED_SLOT);
        CHECK_STATUS(kvp_pool_free_pages(pool, page3, 1), KVP_STATUS_OK);
        CHECK_EQ(available(pool), 56);
        CHECK_STATUS(kvp_pool_free_segment(pool, row, 6, 0, 6), KVP_STATUS_OK);
        CHECK_EQ(available(pool), 64);
    }
    /* free: 1 2 3 4 5 ... (segment pages 1 2, then page 3, then 4 5) */
    fill_i32(out, 16, SENTINEL32);
    CHECK_STATUS(kvp_pool_alloc(pool, 12, out, 16), KVP_STATUS_OK);
    CHECK_I32S(out, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, SENTINEL32);
    kvp_pool_free(pool);

    /* an int32 token pool */
    pool = new_pool_ex(8, 1, KVP_INDEX_TYPE_I32, false);
    fill_i32(out, 16, SENTINEL32);
    CHECK_STATUS(kvp_pool_alloc(pool, 3, out, 3), KVP_STATUS_OK);
    CHECK_I32S(out, 1, 2, 3, SENTINEL32);
    kvp_pool_free(pool);
}

static void test_info_and_stats(void) {
    struct kvp_pool *pool = new_pool(64, 4);
    struct kvp_pool_info info = info_of(pool);
    struct kvp_pool_stats st = stats_of(pool);
    int64_t out[80];

    CHECK_EQ(info.size, 64);
    CHECK_EQ(info.kv_rows, 68);
    CHECK_EQ(info.padding_slot, 0);
    CHECK_EQ(info.page_size, 4);
    CHECK_EQ(info.num_pages, 16);
    CHECK_EQ(info.index_type, KVP_INDEX_TYPE_I64);
    CHECK_EQ(info.backend, KVP_BACKEND_HOST);
    CHECK_EQ(info.device, -1);
    CHECK(!info.need_sort);
    CHECK(!info.in_free_group);

    CHECK_EQ(st.alloc_calls, 0);
    CHECK_EQ(st.alloc_extend_calls, 0);
    CHECK_EQ(st.alloc_decode_calls, 0);
    CHECK_EQ(st.free_calls, 0);
    CHECK_EQ(st.tokens_allocated, 0);
    CHECK_EQ(st.slots_freed, 0);
    CHECK_EQ(st.pages_allocated, 0);
    CHECK_EQ(st.pages_freed, 0);
    CHECK_EQ(st.pages_in_use, 0);
    CHECK_EQ(st.pages_in_use_peak, 0);
    CHECK_EQ(st.failed_allocations, 0);
    CHECK_EQ(st.rejected_calls, 0);
    CHECK_EQ(st.merges, 0);
    CHECK_EQ(st.restores, 0);

    CHECK_STATUS(kvp_pool_alloc(pool, 8, out, 80), KVP_STATUS_OK);           /* 4..11 */
    CHECK_STATUS(kvp_pool_alloc(pool, 6, out, 80), KVP_STATUS_UNALIGNED);    /* rejected */
    CHECK_STATUS(kvp_pool_alloc(pool, 68, out, 80), KVP_STATUS_OUT_OF_SLOTS); /* failed */
    CHECK_STATUS(extend1(pool, 0, 3, -1, out, 80), KVP_STATUS_OK);            /* 12 13 14 */
    CHECK_I64S(out, 12, 13, 14);
    CHECK_STATUS(decode1(pool, 4, 14, out), KVP_STATUS_OK); /* 15 */
    CHECK_I64S(out, 15);
    st = stats_of(pool);
    CHECK_EQ(st.alloc_calls, 3);
    CHECK_EQ(st.alloc_extend_calls, 1);
    CHECK_EQ(st.alloc_decode_calls, 1);
    CHECK_EQ(st.tokens_allocated, 12);
    CHECK_EQ(st.pages_allocated, 3);
    CHECK_EQ(st.pages_in_use, 3);
    CHECK_EQ(st.pages_in_use_peak, 3);
    CHECK_EQ(st.failed_allocations, 1);
    CHECK_EQ(st.rejected_calls, 1);

    {
        int64_t page1[1] = {1};
        int64_t row[4] = {12, 13, 14, 15};
        CHECK_STATUS(free1(pool, 4), KVP_STATUS_OK);                             /* page 1 */
        CHECK_STATUS(kvp_pool_free_pages(pool, page1, 1), KVP_STATUS_DOUBLE_FREE); /* rejected */
        CHECK_STATUS(kvp_pool_free_segment(pool, row, 4, 0, 4), KVP_STATUS_OK);  /* page 3 */
    }
    st = stats_of(pool);
    CHECK_EQ(st.free_calls, 3);
    CHECK_EQ(st.pages_freed, 2);
    CHECK_EQ(st.slots_freed, 8);
    CHECK_EQ(st.pages_in_use, 1);
    CHECK_EQ(st.pages_in_use_peak, 3);
    CHECK_EQ(st.rejected_calls, 2);
    CHECK_EQ(st.merges, 0);
    CHECK_EQ(st.restores, 0);

    /* counters keep counting across clear */
    CHECK_STATUS(kvp_pool_clear(pool), KVP_STATUS_OK);
    st = stats_of(pool);
    CHECK_EQ(st.pages_in_use, 0);
    CHECK_EQ(st.alloc_calls, 3);
    CHECK_EQ(st.tokens_allocated, 12);
    CHECK_EQ(st.pages_in_use_peak, 3);
    kvp_pool_free(pool);

    /* info of other configurations */
    pool = new_pool_ex(8, 1, KVP_INDEX_TYPE_I32, true);
    info = info_of(pool);
    CHECK_EQ(info.size, 8);
    CHECK_EQ(info.kv_rows, 9);
    CHECK_EQ(info.page_size, 1);
    CHECK_EQ(info.num_pages, 8);
    CHECK_EQ(info.index_type, KVP_INDEX_TYPE_I32);
    CHECK(info.need_sort);
    kvp_pool_free(pool);
}

static void test_panic_boundary(void) {
    struct kvp_pool *pool = new_pool(64, 4);
    struct kvp_pool *healthy = new_pool(64, 4);
    struct kvp_snapshot *snap = NULL, *snap_out = SENTINEL_SNAPSHOT;
    struct kvp_pool_info info, info_copy;
    struct kvp_pool_stats st, st_copy;
    uint64_t n = 777;
    int64_t out[8], one = 1, zero = 0, four = 4, minus1 = -1;
    char msg[256];

    CHECK_STATUS(kvp_testing_panic(), KVP_STATUS_PANIC);
    last_error(msg, sizeof msg);
    CHECK_STR(msg, "internal panic: kvp_testing_panic");
    /* the process and the library are still fine */
    CHECK_STATUS(kvp_testing_panic(), KVP_STATUS_PANIC);
    CHECK_EQ(available(pool), 64);

    CHECK_STATUS(kvp_pool_alloc(pool, 4, out, 8), KVP_STATUS_OK);
    CHECK_STATUS(kvp_pool_backup_state(pool, &snap), KVP_STATUS_OK);
    CHECK_STATUS(kvp_testing_poison_pool(pool), KVP_STATUS_PANIC);
    CHECK_MSG("kvp_testing_poison_pool");

    memset(&info, 0x5A, sizeof info);
    memcpy(&info_copy, &info, sizeof info);
    memset(&st, 0x5A, sizeof st);
    memcpy(&st_copy, &st, sizeof st);
    fill_i64(out, 8, SENTINEL);
    CHECK_STATUS(kvp_pool_get_info(pool, &info), KVP_STATUS_POISONED);
    CHECK_MSG("poisoned");
    CHECK(memcmp(&info, &info_copy, sizeof info) == 0);
    CHECK_STATUS(kvp_pool_available_size(pool, &n), KVP_STATUS_POISONED);
    CHECK_EQ(n, 777);
    CHECK_STATUS(kvp_pool_get_stats(pool, &st), KVP_STATUS_POISONED);
    CHECK(memcmp(&st, &st_copy, sizeof st) == 0);
    CHECK_STATUS(kvp_pool_alloc(pool, 4, out, 8), KVP_STATUS_POISONED);
    CHECK_STATUS(kvp_pool_alloc_extend(pool, &zero, &one, &minus1, 1, 1, out, 8),
                 KVP_STATUS_POISONED);
    CHECK_STATUS(kvp_pool_alloc_decode(pool, &one, &minus1, 1, out, 8), KVP_STATUS_POISONED);
    CHECK(all_i64(out, 8, SENTINEL));
    CHECK_STATUS(kvp_pool_free_indices(pool, &four, 1), KVP_STATUS_POISONED);
    CHECK_STATUS(kvp_pool_free_pages(pool, &one, 1), KVP_STATUS_POISONED);
    CHECK_STATUS(kvp_pool_free_segment(pool, &four, 1, 0, 1), KVP_STATUS_POISONED);
    CHECK_STATUS(kvp_pool_free_group_begin(pool), KVP_STATUS_POISONED);
    CHECK_STATUS(kvp_pool_free_group_end(pool), KVP_STATUS_POISONED);
    CHECK_STATUS(kvp_pool_merge_and_sort_free(pool), KVP_STATUS_POISONED);
    CHECK_STATUS(kvp_pool_clear(pool), KVP_STATUS_POISONED);
    CHECK_STATUS(kvp_pool_backup_state(pool, &snap_out), KVP_STATUS_POISONED);
    CHECK(snap_out == SENTINEL_SNAPSHOT);
    CHECK_STATUS(kvp_pool_restore_state(pool, snap), KVP_STATUS_POISONED);
    CHECK_STATUS(kvp_testing_poison_pool(pool), KVP_STATUS_POISONED);

    /* other pools are unaffected */
    CHECK_STATUS(kvp_pool_alloc(healthy, 4, out, 8), KVP_STATUS_OK);
    CHECK_I64S(out, 4, 5, 6, 7);
    CHECK_EQ(available(healthy), 60);

    /* a poisoned pool can still be freed */
    kvp_pool_free(pool);
    kvp_snapshot_free(snap);
    kvp_pool_free(healthy);
}

/* Every handle starts with a tag naming its kind: a handle of the wrong kind is refused with
 * KVP_STATUS_INVALID_ARGUMENT naming both kinds, and nothing changes (a `_free` of the wrong
 * kind frees nothing). */
#define AS(type, handle) ((type *)(void *)(handle))
static void test_wrong_handle_kinds(void) {
    struct kvp_pool *pool = new_pool(64, 4);
    struct kvp_pool *other = new_pool(64, 4);
    struct kvp_scheduler_config sc = kvp_scheduler_config_default();
    struct kvp_adder_config ac = kvp_adder_config_default();
    struct kvp_delayer_config dc = kvp_delayer_config_default();
    struct kvp_scheduler *sched = NULL, *sched_out = AS(struct kvp_scheduler, SENTINEL_POOL);
    struct kvp_adder *adder = NULL;
    struct kvp_delayer *delayer = NULL;
    struct kvp_snapshot *snap = NULL, *snap_out = SENTINEL_SNAPSHOT;
    struct kvp_scheduler_stats sched_stats, sched_stats_after;
    struct kvp_budget budget, budget_after;
    struct kvp_pool_stats st;
    struct kvp_step_plan plan;
    struct kvp_admission admission;
    int64_t out[8], one = 1, four = 4;
    uint64_t n = 12345;

    ac.page_size = 4;
    ac.max_prefill_tokens = 1024;
    ac.chunked_prefill_size = 256;
    ac.max_chunked_requests = 1;
    ac.new_token_ratio = 0.5;
    dc.max_delay_passes = 3;
    /* Compared with memcmp below: kvp_budget has tail padding that a struct copy need not
     * write, so both start zeroed. */
    memset(&budget, 0, sizeof budget);
    memset(&budget_after, 0, sizeof budget_after);
    CHECK_OK(kvp_scheduler_new(&sc, pool, &sched));
    CHECK_OK(kvp_adder_new(&ac, 64, 0, NULL, 0, 0, &adder));
    CHECK_OK(kvp_delayer_new(&dc, &delayer));
    CHECK_OK(kvp_pool_alloc(pool, 8, out, 8));
    CHECK_OK(kvp_pool_backup_state(pool, &snap));
    CHECK_OK(kvp_pool_alloc(pool, 4, out, 8));
    CHECK_OK(kvp_scheduler_get_stats(sched, &sched_stats));
    CHECK_OK(kvp_adder_get_budget(adder, &budget));
    st = stats_of(pool);
    fill_i64(out, COUNT(out), SENTINEL);
    admission.extend_len = 777;

    /* a scheduler, an adder, a delayer or a snapshot passed as a pool */
    CHECK_STATUS(kvp_pool_available_size(AS(struct kvp_pool, sched), &n),
                 KVP_STATUS_INVALID_ARGUMENT);
    CHECK_MSG("pool is not a kvp_pool handle: it is a kvp_scheduler handle");
    CHECK_EQ(n, 12345);
    CHECK_STATUS(kvp_pool_alloc(AS(struct kvp_pool, adder), 4, out, 8),
                 KVP_STATUS_INVALID_ARGUMENT);
    CHECK_MSG("it is a kvp_adder handle");
    CHECK_STATUS(kvp_pool_free_indices(AS(struct kvp_pool, delayer), &four, 1),
                 KVP_STATUS_INVALID_ARGUMENT);
    CHECK_MSG("it is a kvp_delayer handle");
    CHECK_STATUS(kvp_pool_alloc_extend(AS(struct kvp_pool, snap), &one, &four, &four, 1, 3,
                                       out, 8),
                 KVP_STATUS_INVALID_ARGUMENT);
    CHECK_MSG("pool is not a kvp_pool handle: it is a kvp_snapshot handle");
    CHECK(all_i64(out, COUNT(out), SENTINEL));
    CHECK_STATUS(kvp_pool_backup_state(AS(struct kvp_pool, sched), &snap_out),
                 KVP_STATUS_INVALID_ARGUMENT);
    CHECK(snap_out == SENTINEL_SNAPSHOT);
    /* ... and as the pool a scheduler attaches to */
    CHECK_STATUS(kvp_scheduler_new(&sc, AS(struct kvp_pool, adder), &sched_out),
                 KVP_STATUS_INVALID_ARGUMENT);
    CHECK_MSG("pool is not a kvp_pool handle: it is a kvp_adder handle");
    CHECK(sched_out == AS(struct kvp_scheduler, SENTINEL_POOL));

    /* a pool (or a scheduler) passed as a snapshot: the pool is not restored */
    CHECK_STATUS(kvp_pool_restore_state(pool, AS(struct kvp_snapshot, other)),
                 KVP_STATUS_INVALID_ARGUMENT);
    CHECK_MSG("snapshot is not a kvp_snapshot handle: it is a kvp_pool handle");
    CHECK_STATUS(kvp_pool_restore_state(pool, AS(struct kvp_snapshot, sched)),
                 KVP_STATUS_INVALID_ARGUMENT);
    CHECK_MSG("it is a kvp_scheduler handle");

    /* a pool passed as a scheduler, an adder as a delayer and the other way round */
    CHECK_STATUS(kvp_scheduler_step(AS(struct kvp_scheduler, pool), 0, 0, true, &plan),
                 KVP_STATUS_INVALID_ARGUMENT);
    CHECK_MSG("scheduler is not a kvp_scheduler handle: it is a kvp_pool handle");
    CHECK_STATUS(kvp_scheduler_get_stats(AS(struct kvp_scheduler, delayer), &sched_stats_after),
                 KVP_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(kvp_adder_get_budget(AS(struct kvp_adder, delayer), &budget_after),
                 KVP_STATUS_INVALID_ARGUMENT);
    CHECK_MSG("adder is not a kvp_adder handle: it is a kvp_delayer handle");
    CHECK_STATUS(kvp_adder_add_chunked_req(AS(struct kvp_adder, sched), 0, 100, 10, &admission),
                 KVP_STATUS_INVALID_ARGUMENT);
    CHECK_EQ(admission.extend_len, 777);
    CHECK_STATUS(kvp_delayer_record_prefill(AS(struct kvp_delayer, adder), 3),
                 KVP_STATUS_INVALID_ARGUMENT);
    CHECK_MSG("delayer is not a kvp_delayer handle: it is a kvp_adder handle");

    /* freeing a handle through another kind's `_free` frees nothing */
    kvp_pool_free(AS(struct kvp_pool, sched));
    CHECK_MSG("handle is not a kvp_pool handle: it is a kvp_scheduler handle");
    kvp_snapshot_free(AS(struct kvp_snapshot, pool));
    CHECK_MSG("handle is not a kvp_snapshot handle: it is a kvp_pool handle");
    kvp_scheduler_free(AS(struct kvp_scheduler, snap));
    kvp_adder_free(AS(struct kvp_adder, delayer));
    kvp_delayer_free(AS(struct kvp_delayer, pool));

    /* nothing changed, and every object still works */
    CHECK_EQ(available(pool), 64 - 12);
    CHECK_EQ(stats_of(pool).alloc_calls, st.alloc_calls);
    CHECK_EQ(stats_of(pool).rejected_calls, st.rejected_calls);
    CHECK_OK(kvp_scheduler_get_stats(sched, &sched_stats_after));
    CHECK(memcmp(&sched_stats, &sched_stats_after, sizeof sched_stats) == 0);
    CHECK_OK(kvp_adder_get_budget(adder, &budget_after));
    /* field by field: the struct has tail padding, which memcmp would read */
    CHECK(budget.rem_total_tokens == budget_after.rem_total_tokens);
    CHECK_EQ(budget.cur_rem_tokens, budget_after.cur_rem_tokens);
    CHECK_EQ(budget.rem_input_tokens, budget_after.rem_input_tokens);
    CHECK_EQ(budget.rem_chunk_tokens, budget_after.rem_chunk_tokens);
    CHECK_EQ(budget.state, budget_after.state);
    CHECK_OK(kvp_delayer_record_prefill(delayer, 1));
    CHECK_OK(kvp_scheduler_step(sched, 0, 0, true, &plan));
    CHECK_OK(kvp_pool_restore_state(pool, snap));
    CHECK_EQ(available(pool), 64 - 8);

    kvp_snapshot_free(snap);
    kvp_scheduler_free(sched);
    kvp_adder_free(adder);
    kvp_delayer_free(delayer);
    kvp_pool_free(other);
    kvp_pool_free(pool);
}
#undef AS

/* kvp_pool_check_device and kvp_pool_available_size_bound are device-pool calls: a host
 * pool refuses them with KVP_STATUS_WRONG_BACKEND, writing nothing. The debug options are
 * accepted and ignored by a host pool (an unknown flag is refused), and
 * kvp_device_pending_releases answers without any device pool. */
static void test_host_pool_device_queries(void) {
    struct kvp_pool *pool = new_pool(64, 4);
    uint64_t tokens = 12345;
    bool exact = false;
    uint32_t flags = 77;
    size_t pending = 77;

    CHECK_STATUS(kvp_pool_available_size_bound(pool, &tokens, &exact), KVP_STATUS_WRONG_BACKEND);
    CHECK_EQ(tokens, 12345);
    CHECK(exact == false);
    CHECK_STATUS(kvp_pool_check_device(pool), KVP_STATUS_WRONG_BACKEND);
    CHECK_MSG("host pool");
    CHECK_STATUS(kvp_pool_check_device(NULL), KVP_STATUS_NULL_ARGUMENT);

    CHECK_OK(kvp_pool_set_debug(pool, KVP_DEBUG_STREAM_ORDER));
    CHECK_OK(kvp_pool_get_debug(pool, &flags));
    CHECK_EQ(flags, 0);
    CHECK_STATUS(kvp_pool_set_debug(pool, 4), KVP_STATUS_INVALID_ARGUMENT);
    CHECK_MSG("unknown kvp_debug flags");
    CHECK_STATUS(kvp_pool_get_debug(pool, NULL), KVP_STATUS_NULL_ARGUMENT);
    CHECK_OK(kvp_pool_set_debug(pool, 0));

    CHECK_OK(kvp_device_pending_releases(&pending));
    CHECK_EQ(pending, 0);
    CHECK_STATUS(kvp_device_pending_releases(NULL), KVP_STATUS_NULL_ARGUMENT);
    CHECK_EQ(available(pool), 64);
    kvp_pool_free(pool);
}

/* A paged free by index checks each index through its page, as SGLang frees
 * unique(indices // page_size): a slot of an allocated page that the page has not handed
 * out yet frees the whole page; a slot of a free page is a double free. */
static void test_free_by_index_checks_the_page(void) {
    struct kvp_pool *pool = new_pool(64, 4);
    int64_t out[8];
    int64_t past_fill = 10; /* page 2 will have handed out slot 8 only */

    CHECK_STATUS(extend1(pool, 0, 5, -1, out, 8), KVP_STATUS_OK); /* 4..7, then 8 */
    CHECK_EQ(out[4], 8);
    CHECK_STATUS(kvp_pool_free_indices(pool, &past_fill, 1), KVP_STATUS_OK);
    CHECK_EQ(available(pool), 64 - 4);
    CHECK_STATUS(free1(pool, 8), KVP_STATUS_DOUBLE_FREE);
    CHECK_MSG("page 2 is already free");
    kvp_pool_free(pool);
}

int main(void) {
    struct {
        const char *name;
        void (*run)(void);
    } tests[] = {
        {"version", test_version},
        {"status_str", test_status_str},
        {"config_default", test_config_default},
        {"bad_config", test_bad_config},
        {"null_arguments", test_null_arguments},
        {"token_pool_fifo", test_token_pool_fifo},
        {"token_pool_decode", test_token_pool_decode},
        {"paged_alloc_extend_and_decode", test_paged_alloc_extend_and_decode},
        {"paged_alloc", test_paged_alloc},
        {"paged_frees", test_paged_frees},
        {"double_free", test_double_free},
        {"free_groups", test_free_groups},
        {"need_sort", test_need_sort},
        {"last_error_message", test_last_error_message},
        {"snapshots", test_snapshots},
        {"int32_pool", test_int32_pool},
        {"info_and_stats", test_info_and_stats},
        {"panic_boundary", test_panic_boundary},
        {"wrong_handle_kinds", test_wrong_handle_kinds},
        {"host_pool_device_queries", test_host_pool_device_queries},
        {"free_by_index_checks_the_page", test_free_by_index_checks_the_page},
    };
    size_t i;
    for (i = 0; i < COUNT(tests); i++) {
        int before = g_failures;
        g_test = tests[i].name;
        tests[i].run();
        printf("%-32s %s\n", tests[i].name, g_failures == before ? "ok" : "FAILED");
    }
    if (g_failures != 0) {
        printf("abi_test (C): %d of %d checks FAILED\n", g_failures, g_checks);
        return 1;
    }
    printf("abi_test (C): all %d checks passed\n", g_checks);
    return 0;
}
