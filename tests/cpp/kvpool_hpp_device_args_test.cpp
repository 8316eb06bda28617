// C++17 test of what include/kvpool.hpp's device-pool (*_async) methods hand to the C ABI,
// runnable without a GPU: this program defines the C functions below itself (a definition in
// the executable takes precedence over libkvpool's), records the arguments the wrapper passes
// and returns KVP_STATUS_OK without touching any buffer. Every other call goes to the real
// library, whose host pools and host reservations stand in for device ones.
//
// Built and run by `cargo test` (tests/ffi_programs.rs). Exit status 0 and the final
// "all N checks passed" line mean success.
#include "kvpool.hpp"

#include "check.hpp"

#include <cstdio>
#include <string>
#include <vector>

namespace {

// What the last recorded call received.
struct recorded {
    int calls = 0;
    const void *out = nullptr;
    std::size_t out_len = 0;
    const kvp_req_table *table = nullptr;
};
recorded g_step, g_extend_rows, g_decode_rows;

// What the last kvp_pool_page_table_async received.
struct recorded_page_table {
    int calls = 0;
    std::size_t batch = 0;
    const int32_t *indptr_host = nullptr;
    const int32_t *last_page_len_host = nullptr;
};
recorded_page_table g_page_table;

}  // namespace

extern "C" {

enum kvp_status kvp_decode_reservation_step_async(struct kvp_decode_reservation *, void *out,
                                                  const struct kvp_req_table *table,
                                                  const int64_t *, struct CUstream_st *) {
    g_step.calls++;
    g_step.out = out;
    g_step.table = table;
    return KVP_STATUS_OK;
}

enum kvp_status kvp_pool_alloc_extend_rows_async(struct kvp_pool *, const struct kvp_req_table *,
                                                 const int64_t *, const int64_t *,
                                                 const int64_t *, const int64_t *,
                                                 const int64_t *, size_t, size_t, void *out,
                                                 size_t out_len, struct CUstream_st *) {
    g_extend_rows.calls++;
    g_extend_rows.out = out;
    g_extend_rows.out_len = out_len;
    return KVP_STATUS_OK;
}

enum kvp_status kvp_pool_alloc_decode_rows_async(struct kvp_pool *, const struct kvp_req_table *,
                                                 const int64_t *, const int64_t *,
                                                 const int64_t *, size_t, void *out,
                                                 size_t out_len, struct CUstream_st *) {
    g_decode_rows.calls++;
    g_decode_rows.out = out;
    g_decode_rows.out_len = out_len;
    return KVP_STATUS_OK;
}

enum kvp_status kvp_pool_page_table_async(struct kvp_pool *, const struct kvp_req_table *,
                                          const int64_t *, const int64_t *, const int64_t *,
                                          size_t batch_size, int32_t *, int32_t *, size_t,
                                          int32_t *, int32_t *kv_indptr_host,
                                          int32_t *kv_last_page_len_host, struct CUstream_st *) {
    g_page_table.calls++;
    g_page_table.batch = batch_size;
    g_page_table.indptr_host = kv_indptr_host;
    g_page_table.last_page_len_host = kv_last_page_len_host;
    return KVP_STATUS_OK;
}

}  // extern "C"

namespace {

// The kernel of decode_reservation::step_async writes out[0 .. batch) unless out is NULL, and
// takes no length: an empty span (NULL or not) must reach it as NULL, a short one not at all.
void test_reservation_step_async() {
    auto pool = kvpool::pool::create(64, 4);
    const std::vector<int64_t> lens{0, 0}, none{-1, -1};
    kvpool::decode_reservation res = pool.reserve_decode(lens, none, 3);
    int64_t buffer[4] = {};
    int32_t table_data[2 * 8] = {};
    const kvp_req_table table = kvpool::req_table(table_data, 2, 8);
    const int64_t rows[2] = {0, 1};
    const auto rows_dev = kvpool::device<const int64_t>(rows, 2);

    res.step_async(table, rows_dev, kvpool::device_span<int64_t>(buffer, 0), nullptr);
    CHECK(g_step.calls == 1 && g_step.out == nullptr && g_step.table == &table);
    res.step_async(table, rows_dev, kvpool::device_span<int64_t>(buffer, 4).subspan(2, 0),
                   nullptr);
    CHECK(g_step.calls == 2 && g_step.out == nullptr);
    res.step_async(table, rows_dev, kvpool::device_span<int64_t>(), nullptr);
    CHECK(g_step.calls == 3 && g_step.out == nullptr);
    res.step_async(table, rows_dev, kvpool::device_span<int64_t>(buffer, 2), nullptr);
    CHECK(g_step.calls == 4 && g_step.out == buffer);
    res.step_async(kvpool::device_span<int64_t>(buffer, 2), nullptr);
    CHECK(g_step.calls == 5 && g_step.out == buffer && g_step.table == nullptr);
    // Short or mistyped outs are refused before the call.
    for (int k = 0; k < 2; ++k) {
        try {
            if (k == 0) res.step_async(table, rows_dev, kvpool::device_span<int64_t>(buffer, 1),
                                       nullptr);
            if (k == 1) res.step_async(kvpool::device_span<int64_t>(buffer, 1), nullptr);
            CHECK(false);
        } catch (const kvpool::error &e) {
            CHECK(e.status() == KVP_STATUS_BUFFER_TOO_SMALL);
        }
    }
    try {
        int32_t narrow[2] = {};
        res.step_async(table, rows_dev, kvpool::device_span<int32_t>(narrow, 2), nullptr);
        CHECK(false);
    } catch (const kvpool::error &e) {
        CHECK(e.status() == KVP_STATUS_INVALID_ARGUMENT);
    }
    CHECK(g_step.calls == 5);
}

// alloc_extend_rows_async / alloc_decode_rows_async document that `out` may be an empty span:
// it reaches the library as NULL (no out_cache_loc), not as a buffer of 0 elements (which the
// library refuses as too small).
void test_rows_async_empty_out() {
    auto pool = kvpool::pool::create(64, 4);
    int64_t buffer[4] = {};
    int32_t table_data[2 * 8] = {};
    const kvp_req_table table = kvpool::req_table(table_data, 2, 8);
    const int64_t rows[1] = {0}, zero[1] = {0}, two[1] = {2};
    const std::vector<int64_t> prefix_host{0}, seq_host{2};
    const auto dev = [](const int64_t *p) { return kvpool::device<const int64_t>(p, 1); };

    pool.alloc_extend_rows_async(table, dev(rows), prefix_host, seq_host, dev(zero), dev(two), 2,
                                 kvpool::device_span<int64_t>(buffer + 1, 0), nullptr);
    CHECK(g_extend_rows.calls == 1 && g_extend_rows.out == nullptr && g_extend_rows.out_len == 0);
    pool.alloc_extend_rows_async(table, dev(rows), prefix_host, seq_host, dev(zero), dev(two), 2,
                                 kvpool::device_span<int64_t>(buffer, 2), nullptr);
    CHECK(g_extend_rows.calls == 2 && g_extend_rows.out == buffer && g_extend_rows.out_len == 2);

    pool.alloc_decode_rows_async(table, dev(rows), seq_host, dev(two),
                                 kvpool::device_span<int64_t>(buffer + 1, 0), nullptr);
    CHECK(g_decode_rows.calls == 1 && g_decode_rows.out == nullptr && g_decode_rows.out_len == 0);
    pool.alloc_decode_rows_async(table, dev(rows), seq_host, dev(two),
                                 kvpool::device_span<int64_t>(buffer, 1), nullptr);
    CHECK(g_decode_rows.calls == 2 && g_decode_rows.out == buffer && g_decode_rows.out_len == 1);
}

// page_table_async fills the host copies of kv_indptr (batch + 1) and kv_last_page_len
// (batch) when both are given. An empty batch has an empty kv_last_page_len: its one-entry
// kv_indptr_host must still reach the library (which writes kv_indptr_host[0] = 0), not be
// dropped with it, leaving the caller's kv_indptr_host[0] unwritten.
void test_page_table_async_host_copies() {
    auto pool = kvpool::pool::create(64, 4);
    int32_t table_data[2 * 8] = {};
    const kvp_req_table table = kvpool::req_table(table_data, 2, 8);
    const int64_t rows[2] = {0, 1}, lens[2] = {3, 5};
    int32_t indptr[3] = {}, indices[4] = {}, last[2] = {};
    std::vector<int32_t> indptr_host(3, -7), last_host(2, -7);
    const auto dev = [](const int64_t *p, std::size_t n) {
        return kvpool::device<const int64_t>(p, n);
    };

    // Batch of 2, both host copies: both passed.
    pool.page_table_async(table, dev(rows, 2), std::vector<int64_t>{3, 5}, dev(lens, 2),
                          kvpool::device(indptr, 3), kvpool::device(indices, 4),
                          kvpool::device(last, 2), indptr_host, last_host, nullptr);
    CHECK(g_page_table.calls == 1 && g_page_table.batch == 2 &&
          g_page_table.indptr_host == indptr_host.data() &&
          g_page_table.last_page_len_host == last_host.data());
    // Neither: neither passed.
    pool.page_table_async(table, dev(rows, 2), std::vector<int64_t>{3, 5}, dev(lens, 2),
                          kvpool::device(indptr, 3), kvpool::device(indices, 4),
                          kvpool::device(last, 2), {}, {}, nullptr);
    CHECK(g_page_table.calls == 2 && g_page_table.indptr_host == nullptr &&
          g_page_table.last_page_len_host == nullptr);
    // Empty batch, exactly sized host copies (1 and 0 entries): kv_indptr_host passed.
    std::vector<int32_t> indptr_host0(1, -7), last_host0;
    pool.page_table_async(table, dev(rows, 0), std::vector<int64_t>{}, dev(lens, 0),
                          kvpool::device(indptr, 1), kvpool::device(indices, 0),
                          kvpool::device(last, 0), indptr_host0, last_host0, nullptr);
    CHECK(g_page_table.calls == 3 && g_page_table.batch == 0 &&
          g_page_table.indptr_host == indptr_host0.data());
}

}  // namespace

int main() {
    try {
        test_reservation_step_async();
        test_rows_async_empty_out();
        test_page_table_async_host_copies();
    } catch (const std::exception &e) {
        FAIL(std::string("threw: ") + e.what());
    }
    return kvp_test::summary("kvpool_hpp_device_args_test");
}
