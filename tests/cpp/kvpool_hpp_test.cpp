// C++17 tests of include/kvpool.hpp, the header-only RAII layer over kvpool.h.
//
// Built and run by `cargo test` (tests/ffi_programs.rs, against the library built with
// `--features testing`, with -DKVP_TESTING) and by ctest in the consumer project
// cpp-examples/ (against an installed kvpool, without the test-only parts).
// Expected indices follow from the header, as in tests/cpp/abi_test.cpp.
//
// Exit status 0 and the final "all N checks passed" line mean success.
#include "kvpool.hpp"

#include "check.hpp"

#include <array>
#include <atomic>
#include <cstdio>
#include <functional>
#include <initializer_list>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

namespace {

using kvp_test::check;

// ---- CHECK_THROWS (the rest: check.hpp) ---------------------------------------------------

// `body` throws a kvpool::error with `status` whose message contains `needle`.
void check_throws(const std::function<void()> &body, kvp_status status, const std::string &needle,
                  const char *file, int line, const char *expr) {
    try {
        body();
        check(false, file, line, std::string(expr) + " did not throw");
    } catch (const kvpool::error &e) {
        check(e.status() == status, file, line,
              std::string(expr) + " threw status " + std::to_string(e.status()) + ": " + e.what());
        check(e.message().find(needle) != std::string::npos, file, line,
              std::string(expr) + ": message \"" + e.message() + "\" lacks \"" + needle + "\"");
        check(std::string(e.what()).find(e.message()) != std::string::npos, file, line,
              std::string(expr) + ": what() lacks the message");
    }
}

#define CHECK_THROWS(status, needle, ...)                                              \
    check_throws([&] { __VA_ARGS__; }, KVP_STATUS_##status, (needle), __FILE__, __LINE__, \
                 #__VA_ARGS__)

// ---- tests --------------------------------------------------------------------------------

void test_types() {
    // Handles are move-only.
    static_assert(!std::is_copy_constructible_v<kvpool::pool>);
    static_assert(!std::is_copy_assignable_v<kvpool::pool>);
    static_assert(std::is_nothrow_move_constructible_v<kvpool::pool>);
    static_assert(std::is_nothrow_move_assignable_v<kvpool::scheduler>);
    static_assert(!std::is_copy_constructible_v<kvpool::snapshot>);
    static_assert(!std::is_copy_constructible_v<kvpool::scheduler>);
    static_assert(!std::is_copy_constructible_v<kvpool::adder>);
    static_assert(!std::is_copy_constructible_v<kvpool::delayer>);
    static_assert(std::is_base_of_v<std::runtime_error, kvpool::error>);
    // A span converts from containers of the same or a less qualified element type.
    static_assert(std::is_convertible_v<std::vector<uint64_t> &, kvpool::span<const uint64_t>>);
    static_assert(!std::is_convertible_v<std::vector<int64_t> &, kvpool::span<const uint64_t>>);
    static_assert(!std::is_convertible_v<const std::vector<uint64_t> &, kvpool::span<uint64_t>>);
    // ... but never from a device_span: device memory is not a host buffer (the host methods'
    // container parameters refuse one too: tests/ffi_programs.rs, device_span_is_not_a_host_buffer).
    static_assert(!std::is_convertible_v<kvpool::device_span<int32_t>, kvpool::span<int32_t>>);
    static_assert(!std::is_constructible_v<kvpool::span<const int64_t>,
                                           kvpool::device_span<const int64_t> &>);
    std::array<uint64_t, 3> a{1, 2, 3};
    kvpool::span<const uint64_t> s = a;
    CHECK_EQ(s.size(), 3u);
    CHECK_EQ(s[2], 3u);
    CHECK(!s.empty() && kvpool::span<int>().empty());
}

void test_version() {
    kvpool::check_abi_version();
    CHECK_EQ(kvpool::abi_version(), static_cast<uint32_t>(KVP_ABI_VERSION));
    CHECK(kvpool::version() == std::to_string(KVP_VERSION_MAJOR) + "." +
                                   std::to_string(KVP_VERSION_MINOR) + "." +
                                   std::to_string(KVP_VERSION_PATCH));
}

void test_errors() {
    kvp_pool_config config = kvp_pool_config_default();  // size 0: invalid
    CHECK_THROWS(INVALID_ARGUMENT, "size", kvpool::pool{config});
    config.size = 10;
    config.page_size = 4;
    CHECK_THROWS(UNALIGNED, "page_size", kvpool::pool{config});
    config.size = 64;
    config.backend = KVP_BACKEND_CUDA;
    config.device = 999;  // no such device, with or without a driver
    CHECK_THROWS(CUDA_UNAVAILABLE, "CUDA", kvpool::pool{config});
    try {
        kvpool::check(KVP_STATUS_OUT_OF_SLOTS, "my_call");
        CHECK(false);
    } catch (const kvpool::error &e) {
        CHECK_EQ(e.status(), KVP_STATUS_OUT_OF_SLOTS);
        CHECK(std::string(e.what()).rfind("my_call: ", 0) == 0);
        CHECK(std::string(e.what()).find(kvp_status_str(KVP_STATUS_OUT_OF_SLOTS)) !=
              std::string::npos);
    }
    kvpool::check(KVP_STATUS_OK, "no throw");
}

void test_token_pool() {
    auto pool = kvpool::pool::create(8);
    CHECK_EQ(pool.page_size(), 1u);
    CHECK_EQ(pool.index_type(), KVP_INDEX_TYPE_I64);
    CHECK_VEC(pool.alloc(3), 1, 2, 3);
    pool.free_indices(std::vector<int64_t>{2, 1});
    CHECK_EQ(pool.available_size(), 7u);
    CHECK_VEC(pool.alloc(6), 4, 5, 6, 7, 8, 2);
    CHECK_THROWS(OUT_OF_SLOTS, "", pool.alloc(2));
    CHECK_EQ(pool.available_size(), 1u);
    CHECK_VEC(pool.alloc(1), 1);
    CHECK(pool.alloc(0).empty());
    CHECK_THROWS(DOUBLE_FREE, "indices[1]", pool.free_indices(std::vector<int64_t>{3, 3}));
    pool.clear();
    CHECK_EQ(pool.available_size(), 8u);
}

void test_paged_pool() {
    auto pool = kvpool::pool::create(64, 4);
    const kvp_pool_info info = pool.info();
    CHECK_EQ(info.kv_rows, 68u);
    CHECK_EQ(info.num_pages, 16u);
    CHECK_EQ(info.device, -1);
    std::vector<int64_t> prefix{0}, seq{2}, last{-1};
    // need queries: what an allocation would take, nothing allocated
    const auto need = pool.extend_need(std::vector<int64_t>{0, 2}, std::array<int64_t, 2>{3, 11});
    CHECK_EQ(need.pages, 3u);
    CHECK_EQ(need.tokens, 12u);
    CHECK_EQ(pool.decode_need(std::vector<int64_t>{1, 2, 5, 8}), 2u);
    CHECK_EQ(pool.available_size(), 64u);
    CHECK_THROWS(INVALID_LENGTHS, "seq_lens[0] = 1 is less than prefix_lens[0] = 2",
                 pool.extend_need(std::vector<int64_t>{2}, std::vector<int64_t>{1}));
    CHECK_THROWS(INVALID_LENGTHS, "one entry per request",
                 pool.extend_need(std::vector<int64_t>{0, 0}, seq));
    CHECK_THROWS(INVALID_LENGTHS, "exceeds the pool size",
                 pool.extend_need(std::vector<int64_t>{0}, std::vector<int64_t>{65}));
    CHECK_EQ(pool.stats().rejected_calls, 0u);
    CHECK_VEC(pool.alloc_extend(prefix, seq, last), 4, 5);
    CHECK_VEC(pool.alloc_extend(std::vector<int64_t>{2}, std::array<int64_t, 1>{11},
                                std::vector<int64_t>{5}),
              6, 7, 8, 9, 10, 11, 12, 13, 14);
    CHECK_EQ(pool.available_size(), 52u);
    // Into a caller buffer (pointer + size), as into a preallocated out_cache_loc.
    int64_t out[10];
    for (int64_t &x : out) x = -7;
    const int64_t p2[] = {0, 0}, s2[] = {3, 5}, l2[] = {-1, -1};
    pool.alloc_extend(p2, s2, l2, 8, kvpool::span<int64_t>(out, 8));
    CHECK_VEC(std::vector<int64_t>(out, out + 10), 16, 17, 18, 20, 21, 22, 23, 24, -7, -7);
    CHECK_EQ(pool.available_size(), 40u);
    // decode: request of 3 tokens at 16 17 18 grows into 19; a new one takes a fresh page
    CHECK_VEC(pool.alloc_decode(std::vector<int64_t>{4, 1}, std::vector<int64_t>{18, -1}), 19,
              28);
    // a stale continuation (from 18, after 19 was handed out) is refused; a rewind to 18
    // (token 19 rejected) lets the request continue from there again
    CHECK_THROWS(LAST_LOC_MISMATCH, "is not where page 4 was left",
                 pool.alloc_decode(std::vector<int64_t>{4}, std::vector<int64_t>{18}));
    pool.rewind(std::vector<int64_t>{18});
    CHECK_VEC(pool.alloc_decode(std::vector<int64_t>{4}, std::vector<int64_t>{18}), 19);
    // a too-small output buffer and bad lengths are the library's errors
    std::vector<int64_t> small(3);
    CHECK_THROWS(BUFFER_TOO_SMALL, "",
                 pool.alloc_extend(prefix, std::vector<int64_t>{4}, last, 4, small));
    CHECK_THROWS(UNALIGNED, "page_size", pool.alloc(6));
    CHECK_THROWS(LAST_LOC_MISMATCH, "last_loc[0]",
                 pool.alloc_extend(std::vector<int64_t>{1}, std::vector<int64_t>{2},
                                   std::vector<int64_t>{5}));
    // mismatched batch sizes are caught before the call
    const uint64_t calls = pool.stats().alloc_extend_calls;
    CHECK_THROWS(INVALID_LENGTHS, "one entry per request",
                 pool.alloc_extend(std::vector<int64_t>{0, 0}, seq, last));
    CHECK_EQ(pool.stats().alloc_extend_calls, calls);
    // frees by page and by row segment
    pool.free_pages(std::vector<int64_t>{7});
    CHECK_THROWS(DOUBLE_FREE, "page_ids[0]", pool.free_pages(std::vector<int64_t>{7}));
    std::vector<int64_t> row{4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14};
    CHECK_THROWS(UNALIGNED, "", pool.free_segment(row, 2, 4));
    pool.free_segment(row, 0, row.size());
    CHECK_EQ(pool.available_size(), 36u + 4 + 12);
}

void test_index_types() {
    auto pool = kvpool::pool::create<int32_t>(64, 4);
    CHECK_EQ(pool.index_type(), KVP_INDEX_TYPE_I32);
    CHECK_EQ(pool.info().index_type, static_cast<uint32_t>(KVP_INDEX_TYPE_I32));
    std::vector<int32_t> row = pool.alloc_extend(std::vector<int64_t>{0}, std::vector<int64_t>{2},
                                                 std::vector<int32_t>{-1});
    CHECK_VEC(row, 4, 5);
    CHECK_VEC(pool.alloc<int32_t>(4), 8, 9, 10, 11);
    // an int64 buffer on an int32 pool is refused before the call, naming both types
    const kvp_pool_stats before = pool.stats();
    CHECK_THROWS(INVALID_ARGUMENT, "out holds int64_t but the pool's index type is int32_t",
                 pool.alloc<int64_t>(4));
    CHECK_THROWS(INVALID_ARGUMENT, "indices holds int64_t",
                 pool.free_indices(std::vector<int64_t>{4}));
    CHECK_THROWS(INVALID_ARGUMENT, "last_loc holds int64_t",
                 pool.alloc_decode(std::vector<int64_t>{3}, std::vector<int64_t>{5}));
    const kvp_pool_stats after = pool.stats();
    CHECK_EQ(after.alloc_calls, before.alloc_calls);
    CHECK_EQ(after.free_calls, before.free_calls);
    CHECK_EQ(after.rejected_calls, before.rejected_calls);
    pool.free_indices(row);
    pool.free_pages(std::array<int32_t, 1>{2});
    CHECK_EQ(pool.available_size(), 64u);
    // and the other way round
    auto pool64 = kvpool::pool::create(64, 4);
    CHECK_THROWS(INVALID_ARGUMENT, "row holds int32_t but the pool's index type is int64_t",
                 pool64.free_segment(std::vector<int32_t>{4}, 0, 1));
    // a config that asks for int32 gives an int32 pool through the config constructor too
    kvp_pool_config config = kvp_pool_config_default();
    config.size = 16;
    config.index_type = KVP_INDEX_TYPE_I32;
    kvpool::pool from_config(config);
    CHECK_EQ(from_config.index_type(), KVP_INDEX_TYPE_I32);
    CHECK_THROWS(INVALID_ARGUMENT, "index type is int32_t", from_config.alloc(1));
}

void test_free_group_guard() {
    auto pool = kvpool::pool::create(32, 4);
    pool.alloc(24);  // pages 1..6
    {
        auto group = pool.free_group();
        CHECK(pool.info().in_free_group);
        CHECK_THROWS(INVALID_STATE, "", pool.free_group_begin());
        pool.free_indices(std::vector<int64_t>{24});
        pool.free_pages(std::vector<int64_t>{4, 1});
        CHECK_EQ(pool.available_size(), 8u);
        group.end();
        CHECK(!pool.info().in_free_group);
        CHECK_EQ(pool.available_size(), 20u);
    }
    // the destructor ends a group left open by an exception
    try {
        auto group = pool.free_group();
        pool.free_indices(std::vector<int64_t>{8});
        pool.free_indices(std::vector<int64_t>{8});  // DOUBLE_FREE: throws
        CHECK(false);
    } catch (const kvpool::error &e) {
        CHECK_EQ(e.status(), KVP_STATUS_DOUBLE_FREE);
    }
    CHECK(!pool.info().in_free_group);
    CHECK_EQ(pool.available_size(), 24u);
    CHECK_THROWS(INVALID_STATE, "", pool.free_group_end());
    // the pool object moved while its group is open: the guard still ends that group (it
    // held the moved-from wrapper once, and its end() then threw on an empty pool)
    {
        auto group = pool.free_group();
        pool.free_indices(std::vector<int64_t>{12});  // page 3
        kvpool::pool moved(std::move(pool));
        CHECK(moved.info().in_free_group);
        group.end();
        CHECK(!moved.info().in_free_group);
        CHECK_EQ(moved.available_size(), 28u);
        auto again = moved.free_group();  // ended by its destructor, after two moves
        kvpool::pool elsewhere(std::move(moved));
        elsewhere.free_indices(std::vector<int64_t>{20});  // page 5
        CHECK_EQ(elsewhere.available_size(), 28u);
        pool = std::move(elsewhere);
    }
    CHECK(!pool.info().in_free_group);
    CHECK_EQ(pool.available_size(), 32u);
}

void test_snapshots_and_moves() {
    auto pool = kvpool::pool::create(64, 4);
    pool.alloc(8);
    kvpool::snapshot snap = pool.backup_state();
    CHECK(static_cast<bool>(snap));
    CHECK_VEC(pool.alloc(4), 12, 13, 14, 15);
    pool.restore_state(snap);
    CHECK_EQ(pool.available_size(), 56u);
    CHECK_VEC(pool.alloc(4), 12, 13, 14, 15);
    pool.restore_state(snap);  // not consumed
    CHECK_EQ(pool.stats().restores, 2u);
    auto other = kvpool::pool::create(64, 4);
    CHECK_THROWS(FOREIGN_SNAPSHOT, "", other.restore_state(snap));

    // moves transfer ownership; a moved-from handle is NULL and its calls throw
    kvp_pool *raw = pool.get();
    kvpool::pool moved = std::move(pool);
    CHECK(moved.get() == raw);
    CHECK(!pool);  // NOLINT(bugprone-use-after-move): tested on purpose
    CHECK_THROWS(NULL_ARGUMENT, "", pool.available_size());
    CHECK_EQ(moved.available_size(), 56u);
    other = std::move(moved);  // frees other's pool, takes this one
    CHECK(other.get() == raw);
    // release / adopt round trip
    kvp_pool *released = other.release();
    CHECK(released == raw && !other);
    // The wrapper's own checks (sizes, index types) of a moved-from or released pool throw
    // NULL_ARGUMENT too, not a status judged from the old pool's facts (64 slots, int64_t).
    CHECK_THROWS(NULL_ARGUMENT, "NULL", other.alloc(1000));
    CHECK_THROWS(NULL_ARGUMENT, "NULL", other.free_indices(std::vector<int32_t>{4}));
    CHECK_THROWS(NULL_ARGUMENT, "NULL", pool.alloc(1000));  // NOLINT(bugprone-use-after-move)
    CHECK_THROWS(NULL_ARGUMENT, "NULL",
                 pool.alloc_decode(std::vector<int64_t>{1}, std::vector<int32_t>{-1}));
    kvpool::pool adopted = kvpool::pool::adopt(released);
    CHECK_EQ(adopted.available_size(), 56u);
    CHECK_EQ(adopted.page_size(), 4u);
    CHECK_THROWS(NULL_ARGUMENT, "NULL", kvpool::pool::adopt(nullptr));
    kvp_snapshot *raw_snap = snap.release();
    kvpool::snapshot readopted = kvpool::snapshot::adopt(raw_snap);
    adopted.restore_state(readopted);
    CHECK_EQ(adopted.stats().restores, 3u);
}

void test_scheduler() {
    auto pool = kvpool::pool::create(1000000);
    kvp_scheduler_config config = kvp_scheduler_config_default();
    config.chunked_prefill_size = 4096;
    kvpool::scheduler sched(config, pool);
    kvp_request request{};
    request.id = 9;
    request.input_len = 10000;
    request.max_new_tokens = 10;
    CHECK(sched.submit(request).queued);
    CHECK_THROWS(INVALID_STATE, "", sched.submit(request));  // id already live
    CHECK_EQ(sched.request(9).phase, static_cast<uint32_t>(KVP_PHASE_WAITING));
    // The seed article's example: chunks of 4096, 4096 and 1808 tokens, then decode.
    std::vector<int64_t> row;
    const uint64_t chunks[][2] = {{0, 4096}, {4096, 4096}, {8192, 1808}};
    for (const auto &chunk : chunks) {
        kvpool::step_plan plan = sched.step();
        CHECK_EQ(plan.kind, KVP_STEP_KIND_PREFILL);
        CHECK_EQ(plan.prefill.size(), 1u);
        CHECK(plan.decode.empty() && plan.retracted.empty() && plan.aborted.empty());
        const kvp_prefill_entry &e = plan.prefill[0];
        CHECK_EQ(e.id, 9u);
        CHECK_EQ(e.prefix_len, chunk[0]);
        CHECK_EQ(e.extend_len, chunk[1]);
        const std::vector<int64_t> prefix{static_cast<int64_t>(e.prefix_len)};
        const std::vector<int64_t> seq{prefix[0] + static_cast<int64_t>(e.extend_len)};
        std::vector<int64_t> slots =
            pool.alloc_extend(prefix, seq, std::vector<int64_t>{row.empty() ? -1 : row.back()});
        row.insert(row.end(), slots.begin(), slots.end());
    }
    CHECK_EQ(row.size(), 10000u);
    CHECK_EQ(row.back(), 10000);
    for (int k = 1; k < 10; ++k) {
        kvpool::step_plan plan = sched.step();
        CHECK_EQ(plan.kind, KVP_STEP_KIND_DECODE);
        CHECK(plan.decode.size() == 1 && plan.decode[0] == 9);
        const std::vector<int64_t> seq{static_cast<int64_t>(row.size()) + 1};
        std::vector<int64_t> slot = pool.alloc_decode(seq, std::vector<int64_t>{row.back()});
        row.push_back(slot[0]);
    }
    const kvp_request_state state = sched.request(9);
    CHECK_EQ(state.kv_len, row.size());
    CHECK_EQ(state.output_len, 10u);
    // finish_ex: no cached prefix here, the whole row is the request's own
    const kvp_finished fin = sched.finish_ex(9);
    CHECK_EQ(fin.id, 9u);
    CHECK_EQ(fin.kv_len, row.size());
    CHECK_EQ(fin.prefix_len, 0u);
    pool.free_indices(row);
    CHECK_THROWS(INVALID_ARGUMENT, "9", sched.finish_ex(9));
    // abort_ex of a waiting request with a cached prefix: it holds and locks nothing yet
    request.id = 10;
    request.prefix_len = 64;
    request.prefix_evictable = 64;
    CHECK(sched.submit(request).queued);
    const kvp_finished gone = sched.abort_ex(10);
    CHECK_EQ(gone.kv_len, 0u);
    CHECK_EQ(gone.prefix_len, 0u);
    CHECK_THROWS(INVALID_ARGUMENT, "9", sched.request(9));
    CHECK_THROWS(INVALID_ARGUMENT, "12345", sched.finish(12345));
    CHECK_EQ(sched.step().kind, KVP_STEP_KIND_IDLE);
    const kvp_scheduler_stats stats = sched.stats();
    CHECK_EQ(stats.steps, 13u);
    CHECK_EQ(stats.chunks, 3u);
    CHECK_EQ(stats.finished, 1u);
    CHECK_EQ(pool.available_size(), 1000000u);
}

void test_digests() {
    auto a = kvpool::pool::create(64, 4);
    auto b = kvpool::pool::create(64, 4);
    CHECK_EQ(a.digest(), 0x7319987B2706B53Bull);  // pinned: tests/digest.rs
    std::vector<int64_t> prefix{0}, seq{5}, last{-1};
    a.alloc_extend(prefix, seq, last);
    CHECK_EQ(a.digest(), 0xB0B443B8BA969C7Dull);
    CHECK(a.digest() != b.digest());
    b.alloc_extend(prefix, seq, last);
    CHECK_EQ(a.digest(), b.digest());
    CHECK_THROWS(WRONG_BACKEND, "host pool", a.digest_async(nullptr, nullptr));
    kvp_scheduler_config config = kvp_scheduler_config_default();
    config.capacity = 1024;
    config.page_size = 4;
    kvpool::scheduler s(config), t(config);
    CHECK_EQ(s.digest(), t.digest());
    kvp_request request{};
    request.id = 1;
    request.input_len = 10;
    request.max_new_tokens = 4;
    s.submit(request);
    CHECK(s.digest() != t.digest());
    t.submit(request);
    CHECK_EQ(s.digest(), t.digest());
}

void test_detached_scheduler() {
    kvp_scheduler_config config = kvp_scheduler_config_default();
    CHECK_THROWS(INVALID_ARGUMENT, "capacity", kvpool::scheduler{config});
    config.capacity = 10000;
    config.page_size = 16;
    kvpool::scheduler sched(config);
    kvp_request request{};
    request.id = 1;
    request.input_len = 9000;
    request.max_new_tokens = 2000;
    const kvp_submit_result unfit = sched.submit(request);
    CHECK(!unfit.queued);
    CHECK_EQ(unfit.needed, 11016u);
    CHECK_EQ(unfit.capacity, 10000u);
    // Attaching to a moved-from pool (NULL) throws: it must not make a detached scheduler
    // (kvp_scheduler_new's NULL pool), which would then plan against sizes the caller passes.
    auto pool = kvpool::pool::create(10000, 16);
    const kvpool::pool taken = std::move(pool);
    CHECK_THROWS(NULL_ARGUMENT, "moved-from",
                 kvpool::scheduler(config, pool));  // NOLINT(bugprone-use-after-move)
    request.input_len = 100;
    const std::vector<uint64_t> path{1, 2, 3};
    CHECK(sched.submit(request, path).queued);
    sched.update_prefix(1, 16, 0);
    CHECK_THROWS(INVALID_ARGUMENT, "", sched.update_prefix(77, 0, 0));
    kvpool::step_plan plan = sched.step(10000);
    CHECK_EQ(plan.kind, KVP_STEP_KIND_PREFILL);
    CHECK(plan.prefill.size() == 1 && plan.prefill[0].prefix_len == 16);
    CHECK_EQ(sched.abort(1), 16u + 84u);
    CHECK_EQ(sched.stats().unfittable, 1u);
}

void test_adder() {
    kvp_adder_config config{};
    config.page_size = 1;
    config.max_prefill_tokens = 16384;
    config.chunked_prefill_size = 4096;
    config.clip_max_new_tokens = 4096;
    config.max_chunked_requests = 1;
    config.new_token_ratio = 0.7;
    kvpool::adder adder(config, 200000, 0);
    kvp_candidate candidate{};
    candidate.input_len = 10000;
    candidate.max_new_tokens = 128;
    const kvp_admission first = adder.add_one_req(candidate);
    CHECK(first.admitted && first.chunked);
    CHECK_EQ(first.extend_len, 4096u);
    CHECK_EQ(first.next, static_cast<uint32_t>(KVP_ADD_RESULT_OTHER));
    const kvp_budget budget = adder.budget();
    CHECK_EQ(budget.rem_total_tokens, 200000.0 - 4097);
    CHECK_EQ(budget.rem_input_tokens, 16384 - 4096);
    // the next pass continues the chunk; running requests reserve their expected output
    const std::vector<kvp_running_request> running{{10, 100, 1100, false}};
    kvpool::adder next(config, 200000 - 4096, 0, running, 1);
    const kvp_admission cont = next.add_chunked_req(4096, 10000 - 4096, 128);
    CHECK(cont.admitted && cont.chunked);
    CHECK_EQ(cont.extend_len, 4096u);
    candidate.prefix_len = 20000;  // longer than the input
    CHECK_THROWS(INVALID_LENGTHS, "prefix_len", next.add_one_req(candidate));
    config.page_size = 0;
    CHECK_THROWS(INVALID_ARGUMENT, "page_size", kvpool::adder(config, 100, 0));
}

void test_delayer() {
    kvp_delayer_config config{};
    config.max_delay_passes = 3;
    config.token_usage_low_watermark = -1.0;
    config.queue_min_ratio = -1.0;
    kvpool::delayer delayer(config);
    kvp_rank_info ready{}, idle{};
    ready.prefillable = true;
    const std::array<kvp_rank_info, 2> all{ready, ready}, none{idle, idle}, mixed{ready, idle};
    CHECK_EQ(delayer.negotiate(all), KVP_DELAY_VERDICT_NO_WAIT);
    CHECK_EQ(delayer.negotiate(none), KVP_DELAY_VERDICT_NONE_READY);
    CHECK_EQ(delayer.negotiate(mixed), KVP_DELAY_VERDICT_DELAY);
    CHECK_EQ(delayer.negotiate(mixed), KVP_DELAY_VERDICT_DELAY);
    CHECK_EQ(delayer.negotiate(mixed), KVP_DELAY_VERDICT_WAIT_TIMEOUT);
    CHECK_THROWS(INVALID_ARGUMENT, "num_ranks", delayer.negotiate({}));
    delayer.record_prefill(5);
    const kvp_rank_info info = delayer.local_info(true, 0.5, 4, 10);
    CHECK(info.prefillable && !info.force_allow && !info.timed_out);
    CHECK_EQ(info.max_prefill_bs, 5u);
    config.max_delay_passes = 0;
    CHECK_THROWS(INVALID_ARGUMENT, "max_delay_passes", kvpool::delayer{config});
}

// Several threads share one pool through const and non-const methods (internally locked).
void test_threads() {
    auto pool = kvpool::pool::create(4096, 16);
    std::mutex held_mutex;
    std::set<int64_t> held;
    std::atomic<int> duplicates{0};
    auto worker = [&](int t) {
        for (int i = 0; i < 200; ++i) {
            const int64_t n = 1 + (i * 7 + t) % 40;
            std::vector<int64_t> row = pool.alloc_extend(std::vector<int64_t>{0},
                                                         std::vector<int64_t>{n},
                                                         std::vector<int64_t>{-1});
            {
                std::lock_guard<std::mutex> lock(held_mutex);
                for (int64_t s : row)
                    if (!held.insert(s).second) duplicates++;
            }
            (void)pool.available_size();
            {
                std::lock_guard<std::mutex> lock(held_mutex);
                for (int64_t s : row) held.erase(s);
            }
            pool.free_segment(row, 0, row.size());
        }
    };
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) threads.emplace_back(worker, t);
    for (std::thread &th : threads) th.join();
    CHECK_EQ(duplicates.load(), 0);
    CHECK_EQ(pool.available_size(), 4096u);
    const kvp_pool_stats stats = pool.stats();
    CHECK_EQ(stats.alloc_extend_calls, 800u);
    CHECK_EQ(stats.pages_in_use, 0u);
}

// Debug options: a host pool accepts and ignores them; unknown flags are refused. No device
// pool is made here, so no release is pending.
void test_debug_options() {
    auto pool = kvpool::pool::create(64, 4);
    pool.set_debug(KVP_DEBUG_STREAM_ORDER);
    CHECK_EQ(pool.debug_flags(), 0u);
    CHECK_VEC(pool.alloc(8), 4, 5, 6, 7, 8, 9, 10, 11);
    CHECK_THROWS(INVALID_ARGUMENT, "unknown kvp_debug flags 0x8", pool.set_debug(8));
    pool.set_debug(0);
    CHECK_EQ(kvpool::device_pending_releases(), 0u);
    CHECK_EQ(static_cast<int>(KVP_STATUS_UNORDERED_STREAMS), 64);
    CHECK(std::string(kvp_status_str(KVP_STATUS_UNORDERED_STREAMS)).find("not ordered") !=
          std::string::npos);
}

#ifdef KVP_TESTING
// The test-only exports of a `--features testing` build, through kvpool::check.
void test_panic_and_poison() {
    CHECK_THROWS(PANIC, "internal panic: kvp_testing_panic",
                 kvpool::check(kvp_testing_panic(), "kvp_testing_panic"));
    auto pool = kvpool::pool::create(64, 4);
    CHECK_THROWS(PANIC, "", kvpool::check(kvp_testing_poison_pool(pool.get()), "poison"));
    CHECK_THROWS(POISONED, "poisoned", pool.alloc(4));
    CHECK_THROWS(POISONED, "poisoned", pool.info());
}
#endif

}  // namespace

void test_req_table() {
    // An int32 req_to_token of 4 rows of 40 tokens, stride 48; an int64 pool of 8-token pages.
    auto pool = kvpool::pool::create(64 * 8, 8);
    std::vector<int32_t> req_to_token(4 * 48, 0);
    const kvp_req_table table = kvpool::req_table(req_to_token.data(), 4, 40, 48);
    std::vector<int64_t> out(13);
    pool.alloc_extend_rows(table, std::vector<int64_t>{3, 1}, std::vector<int64_t>{0, 0},
                           std::vector<int64_t>{10, 3}, 13, out);
    for (int k = 0; k < 10; ++k) CHECK_EQ(req_to_token[3 * 48 + k], out[k]);
    for (int k = 0; k < 3; ++k) CHECK_EQ(req_to_token[1 * 48 + k], out[10 + k]);
    pool.alloc_decode_rows(table, std::vector<int64_t>{3, 1}, std::vector<int64_t>{11, 4});
    CHECK_EQ(req_to_token[3 * 48 + 10], req_to_token[3 * 48 + 9] + 1);
    const kvpool::page_table_t t =
        pool.page_table(table, std::vector<int64_t>{3, 1}, std::vector<int64_t>{11, 4});
    CHECK_VEC(t.kv_indptr, 0, 2, 3);
    CHECK_VEC(t.kv_last_page_len, 3, 4);
    CHECK_EQ(t.kv_indices[0], req_to_token[3 * 48] / 8);
    CHECK_EQ(t.kv_indices[1], req_to_token[3 * 48 + 8] / 8);
    CHECK_EQ(t.kv_indices[2], req_to_token[1 * 48] / 8);
    CHECK_THROWS(INVALID_ARGUMENT, "repeats",
                 pool.alloc_decode_rows(table, std::vector<int64_t>{1, 1},
                                        std::vector<int64_t>{5, 5}));
    pool.free_rows(table, std::vector<int64_t>{3, 1}, std::vector<int64_t>{0, 0},
                   std::vector<int64_t>{11, 4});
    CHECK_EQ(pool.available_size(), 64u * 8u);
    // The device variants compile and refuse a host pool.
    const std::vector<int64_t> none;
    const kvpool::device_span<const int64_t> no_dev;
    CHECK_THROWS(WRONG_BACKEND, "",
                 pool.alloc_extend_rows_async(table, no_dev, none, none, no_dev, no_dev, 0,
                                              kvpool::device_span<int64_t>(), nullptr));
    CHECK_THROWS(WRONG_BACKEND, "",
                 pool.alloc_decode_rows_async(table, no_dev, none, no_dev,
                                              kvpool::device_span<int64_t>(), nullptr));
    CHECK_THROWS(WRONG_BACKEND, "",
                 pool.free_rows_async(table, no_dev, none, none, no_dev, no_dev, nullptr));
    CHECK_THROWS(WRONG_BACKEND, "host pool", pool.reserve_scratch_async(40, 8, 64, nullptr));
    std::vector<int32_t> indptr_host(1);
    int32_t dummy = 0;
    CHECK_THROWS(WRONG_BACKEND, "",
                 pool.page_table_async(table, no_dev, none, no_dev,
                                       kvpool::device_span<int32_t>(&dummy, 1),
                                       kvpool::device_span<int32_t>(),
                                       kvpool::device_span<int32_t>(), indptr_host,
                                       kvpool::span<int32_t>(), nullptr));
}

// The overloads that return a vector size it from lengths the library has not checked yet: a
// length beyond the pool is the library's error (a kvpool::error), never a std::length_error,
// a std::bad_alloc or gigabytes zero-filled before the refusal.
void test_result_sizes() {
    auto pool = kvpool::pool::create(64, 4);
    const int64_t huge = int64_t{1} << 62;
    CHECK_THROWS(OUT_OF_SLOTS, "64 slots", pool.alloc(std::size_t{1} << 62));
    CHECK_THROWS(OUT_OF_SLOTS, "", pool.alloc(68));
    CHECK_THROWS(INVALID_LENGTHS, "seq_lens[0] = 4611686018427387904 exceeds the pool size 64",
                 pool.alloc_extend(std::vector<int64_t>{0}, std::vector<int64_t>{huge},
                                   std::vector<int64_t>{-1}));
    // (an int64_t sum of these overflowed: undefined behaviour)
    CHECK_THROWS(INVALID_LENGTHS, "exceeds the pool size 64",
                 pool.alloc_extend(std::vector<int64_t>{0, 0},
                                   std::vector<int64_t>{INT64_MAX, INT64_MAX},
                                   std::vector<int64_t>{-1, -1}));
    CHECK_THROWS(OUT_OF_SLOTS, "",
                 pool.alloc_extend(std::vector<int64_t>{0, 0}, std::vector<int64_t>{40, 40},
                                   std::vector<int64_t>{-1, -1}));
    CHECK_THROWS(INVALID_LENGTHS, "less than prefix_lens[0]",
                 pool.alloc_extend(std::vector<int64_t>{5}, std::vector<int64_t>{1},
                                   std::vector<int64_t>{-1}));
    std::vector<int32_t> req_to_token(4 * 8, 0);
    const kvp_req_table table = kvpool::req_table(req_to_token.data(), 4, 8);
    CHECK_THROWS(BUFFER_TOO_SMALL, "exceeds the table's row_len 8",
                 pool.page_table(table, std::vector<int64_t>{0}, std::vector<int64_t>{INT64_MAX}));
    CHECK_THROWS(BUFFER_TOO_SMALL, "row_len",
                 pool.page_table(table, std::vector<int64_t>{0, 1},
                                 std::vector<int64_t>{huge, huge}));
    // Lengths within a (real, 8 MiB) row, but a batch of 2^40 pages, since rows may repeat:
    // the library refuses more than INT32_MAX pages (kv_indptr is int32). That is its
    // kvpool::error, not a std::bad_alloc from a kv_indices of 2^40 entries sized first
    // (nor, for a batch just past INT32_MAX pages, 8 GiB zero-filled before the refusal).
    {
        auto tokens = kvpool::pool::create(64);
        const std::size_t row_len = std::size_t{1} << 21, batch = std::size_t{1} << 19;
        std::vector<int32_t> long_row(row_len, 0);
        const kvp_req_table one_row = kvpool::req_table(long_row.data(), 1, row_len);
        CHECK_THROWS(INVALID_LENGTHS, "1099511627776 pages; kv_indptr is int32",
                     tokens.page_table(one_row, std::vector<int64_t>(batch, 0),
                                       std::vector<int64_t>(batch, int64_t{1} << 21)));
    }
    CHECK_EQ(pool.available_size(), 64u);
    CHECK_EQ(pool.stats().pages_in_use, 0u);
    // What fits still works.
    CHECK_EQ(pool.alloc(64).size(), 64u);
    pool.clear();
    CHECK_EQ(pool.alloc_extend(std::vector<int64_t>{0, 0}, std::vector<int64_t>{32, 32},
                               std::vector<int64_t>{-1, -1})
                 .size(),
             64u);
}

void test_decode_reservation() {
    // Two requests of 5 and 8 tokens on 4-token pages; 6 reserved steps against 6 plain
    // decodes on a twin pool.
    auto a = kvpool::pool::create(64 * 4, 4);
    auto b = kvpool::pool::create(64 * 4, 4);
    const std::vector<int64_t> prefix{0, 0}, seq{5, 8}, none{-1, -1};
    const std::vector<int64_t> slots = a.alloc_extend(prefix, seq, none);
    CHECK(b.alloc_extend(prefix, seq, none) == slots);
    std::vector<int64_t> last{slots[4], slots[12]};
    kvpool::decode_reservation res = a.reserve_decode(seq, last, 6);
    CHECK_EQ(res.steps(), 6u);
    CHECK_EQ(res.batch_size(), 2u);
    CHECK_EQ(res.pages(), 1u + 2u);  // 5 -> 11 tokens: 2 -> 3 pages; 8 -> 14: 2 -> 4
    std::vector<int32_t> req_to_token(2 * 20, 0);
    const kvp_req_table table = kvpool::req_table(req_to_token.data(), 2, 20);
    const std::vector<int64_t> rows{1, 0};
    // An out of int32_t on an int64_t pool is refused before anything is written: the
    // library writes the pool's index type (it had overrun the buffer).
    std::vector<int32_t> narrow(2, -7);
    CHECK_THROWS(INVALID_ARGUMENT, "index type", res.step(narrow));
    CHECK_THROWS(INVALID_ARGUMENT, "index type", res.step(table, rows, narrow));
    CHECK_THROWS(INVALID_ARGUMENT, "index type",
                 res.step_async(kvpool::device_span<int32_t>(narrow.data(), 2), nullptr));
    CHECK(narrow == std::vector<int32_t>(2, -7));
    for (int64_t s = 0; s < 4; ++s) {
        std::vector<int64_t> got(2);
        if (s == 3) {
            // With a table, an empty out is skipped (passed as NULL), whatever its data():
            // an emptied vector that kept its memory included.
            std::vector<int64_t> emptied(2, -7);
            emptied.clear();
            res.step(table, rows, emptied);
            got = {req_to_token[1 * 20 + 5 + s], req_to_token[0 * 20 + 8 + s]};
        } else {
            res.step(table, rows, got);
        }
        const std::vector<int64_t> want = b.alloc_decode(std::vector<int64_t>{6 + s, 9 + s}, last);
        CHECK(got == want);
        CHECK_EQ(req_to_token[1 * 20 + 5 + s], want[0]);
        CHECK_EQ(req_to_token[0 * 20 + 8 + s], want[1]);
        last = want;
    }
    // A plain decode on a reserved request is refused: the reservation holds its page.
    CHECK_THROWS(INVALID_STATE, "held by a live decode reservation",
                 a.alloc_decode(std::vector<int64_t>{10, 13}, last));
    CHECK_THROWS(INVALID_STATE, "held by a live decode reservation", a.free_indices(last));
    a.finish_reservation(res, 4);
    CHECK_EQ(a.digest(), b.digest());
    CHECK_EQ(a.available_size(), b.available_size());
    CHECK_THROWS(INVALID_STATE, "finished", a.finish_reservation(res, 4));
    // The device variants compile and refuse a host pool.
    const kvpool::device_span<const int64_t> no_dev;
    CHECK_THROWS(WRONG_BACKEND, "",
                 a.reserve_decode_async(std::vector<int64_t>{}, no_dev,
                                        kvpool::device_span<int64_t>(), 2, nullptr));
    CHECK_THROWS(WRONG_BACKEND, "",
                 res.step_async(kvpool::device_span<int64_t>(nullptr, 2), nullptr));
    // A moved-from reservation throws NULL_ARGUMENT, also where the wrapper checks `out`'s
    // element type before the call (the old reservation's index type is gone with it).
    kvpool::decode_reservation taken = std::move(res);
    CHECK_THROWS(NULL_ARGUMENT, "NULL", res.step(narrow));  // NOLINT(bugprone-use-after-move)
    CHECK_THROWS(NULL_ARGUMENT, "NULL",
                 res.step_async(kvpool::device_span<int32_t>(narrow.data(), 2), nullptr));
    CHECK_THROWS(INVALID_STATE, "finished", taken.step(last));
}

int main() {
    struct Test {
        const char *name;
        void (*run)();
    };
    const Test tests[] = {
        {"types", test_types},
        {"version", test_version},
        {"errors", test_errors},
        {"token_pool", test_token_pool},
        {"paged_pool", test_paged_pool},
        {"req_table", test_req_table},
        {"decode_reservation", test_decode_reservation},
        {"result_sizes", test_result_sizes},
        {"index_types", test_index_types},
        {"free_group_guard", test_free_group_guard},
        {"snapshots_and_moves", test_snapshots_and_moves},
        {"scheduler", test_scheduler},
        {"detached_scheduler", test_detached_scheduler},
        {"digests", test_digests},
        {"adder", test_adder},
        {"delayer", test_delayer},
        {"threads", test_threads},
        {"debug_options", test_debug_options},
#ifdef KVP_TESTING
        {"panic_and_poison", test_panic_and_poison},
#endif
    };
    for (const Test &t : tests) {
        const int before = kvp_test::failures.load();
        try {
            t.run();
        } catch (const std::exception &e) {
            FAIL(std::string(t.name) + " threw: " + e.what());
        }
        std::printf("%-24s %s\n", t.name, kvp_test::failures.load() == before ? "ok" : "FAILED");
    }
    return kvp_test::summary("kvpool_hpp_test");
}
