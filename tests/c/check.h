/*
 * The check framework shared by the C test programs: counts checks, reports each failure
 * with its file, line and expression, and never stops at the first failure. Each program
 * includes it once and ends with `all N checks passed` when g_failures is 0.
 */
#ifndef KVPOOL_TESTS_CHECK_H
#define KVPOOL_TESTS_CHECK_H

#include "kvpool.h"

#include <stdbool.h>
#include <stdio.h>

static int g_checks = 0;
static int g_failures = 0;
static const char *g_test = "";

static void fail_at(const char *file, int line) {
    g_failures++;
    fprintf(stderr, "FAIL [%s] %s:%d: ", g_test, file, line);
}

static void check_impl(bool ok, const char *file, int line, const char *expr) {
    g_checks++;
    if (!ok) {
        fail_at(file, line);
        fprintf(stderr, "%s\n", expr);
    }
}

static void check_eq_impl(long long got, long long want, const char *file, int line,
                          const char *got_expr, const char *want_expr) {
    g_checks++;
    if (got != want) {
        fail_at(file, line);
        fprintf(stderr, "%s == %s: got %lld, want %lld\n", got_expr, want_expr, got, want);
    }
}

static void check_status_impl(enum kvp_status got, enum kvp_status want, const char *file,
                              int line, const char *call) {
    g_checks++;
    if (got != want) {
        char msg[512];
        msg[0] = '\0';
        if (got != KVP_STATUS_OK) (void)kvp_last_error_message(msg, sizeof msg);
        fail_at(file, line);
        fprintf(stderr, "%s returned %d (%s), want %d (%s); last error: \"%s\"\n", call,
                (int)got, kvp_status_str((int32_t)got), (int)want,
                kvp_status_str((int32_t)want), msg);
    }
}

#define CHECK(cond) check_impl((cond) ? true : false, __FILE__, __LINE__, #cond)
#define CHECK_EQ(got, want) \
    check_eq_impl((long long)(got), (long long)(want), __FILE__, __LINE__, #got, #want)
#define CHECK_STATUS(call, want) check_status_impl((call), (want), __FILE__, __LINE__, #call)
#define CHECK_OK(call) CHECK_STATUS((call), KVP_STATUS_OK)

#endif /* KVPOOL_TESTS_CHECK_H */
