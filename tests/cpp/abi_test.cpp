// C++17 tests of kvpool's C ABI (include/kvpool.h), built and run by `cargo test`
// (tests/ffi_programs.rs) against the library built with `--features testing`.
//
// The same contract as tests/c/abi_test.c, written the way a C++ engine would use the API
// (RAII owners, std::vector buffers), plus several std::thread threads sharing one pool.
// Expected indices follow from the header: slot 0 / page 0 are never handed out; a token
// pool reuses freed slots first-in first-out; a paged pool takes new pages from the front
// of its free list (initially 1, 2, 3, ...) and puts freed pages back at the front.
//
// Exit status 0 and the final "all N checks passed" line mean success.
#include "kvpool.h"

#include "check.hpp"

#include <algorithm>
#include <atomic>
#include <cinttypes>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

namespace {

using kvp_test::check;

// ---- checks on the C ABI's statuses and messages (the rest: check.hpp) ---------------------------

std::string last_error() {
    std::vector<char> buf(kvp_last_error_message(nullptr, 0) + 1, 'X');
    kvp_last_error_message(buf.data(), buf.size());
    return std::string(buf.data());
}

void check_status(kvp_status got, kvp_status want, const char *file, int line,
                  const char *call) {
    std::string what;
    if (got != want) {
        std::string msg = got != KVP_STATUS_OK ? last_error() : std::string();
        what = std::string(call) + " returned " + std::to_string(got) + " (" +
               kvp_status_str(got) + "), want " + std::to_string(want) + " (" +
               kvp_status_str(want) + "); last error: \"" + msg + "\"";
    }
    check(got == want, file, line, what);
}

void check_msg(const std::string &needle, const char *file, int line) {
    std::string msg = last_error();
    const bool found = msg.find(needle) != std::string::npos;
    check(found, file, line,
          found ? std::string() : "last error \"" + msg + "\" does not contain \"" + needle + "\"");
}

#define CHECK_STATUS(call, want) check_status((call), (want), __FILE__, __LINE__, #call)
#define CHECK_MSG(needle) check_msg((needle), __FILE__, __LINE__)

// ---- RAII owners and helpers ---------------------------------------------------------------------

struct PoolDeleter {
    void operator()(kvp_pool *p) const noexcept { kvp_pool_free(p); }
};
struct SnapshotDeleter {
    void operator()(kvp_snapshot *s) const noexcept { kvp_snapshot_free(s); }
};
using Pool = std::unique_ptr<kvp_pool, PoolDeleter>;
using Snapshot = std::unique_ptr<kvp_snapshot, SnapshotDeleter>;

constexpr int64_t kSentinel = -7777;

Pool make_pool(uint64_t size, uint32_t page_size, uint32_t index_type = KVP_INDEX_TYPE_I64,
               bool need_sort = false) {
    kvp_pool_config cfg = kvp_pool_config_default();
    cfg.size = size;
    cfg.page_size = page_size;
    cfg.index_type = index_type;
    cfg.need_sort = need_sort;
    kvp_pool *raw = nullptr;
    CHECK_STATUS(kvp_pool_new(&cfg, &raw), KVP_STATUS_OK);
    CHECK(raw != nullptr);
    return Pool(raw);
}

Snapshot backup(const Pool &pool) {
    kvp_snapshot *raw = nullptr;
    CHECK_STATUS(kvp_pool_backup_state(pool.get(), &raw), KVP_STATUS_OK);
    return Snapshot(raw);
}

long long available(const Pool &pool) {
    uint64_t n = std::numeric_limits<uint64_t>::max();
    CHECK_STATUS(kvp_pool_available_size(pool.get(), &n), KVP_STATUS_OK);
    return static_cast<long long>(n);
}

// In C++ kvp_pool_stats() hides the struct of that name; write `struct kvp_pool_stats`.
struct kvp_pool_stats stats(const Pool &pool) {
    struct kvp_pool_stats s{};
    CHECK_STATUS(kvp_pool_get_stats(pool.get(), &s), KVP_STATUS_OK);
    return s;
}

// In C++ kvp_pool_info() hides the struct of that name; write `struct kvp_pool_info`.
struct kvp_pool_info info(const Pool &pool) {
    struct kvp_pool_info i{};
    CHECK_STATUS(kvp_pool_get_info(pool.get(), &i), KVP_STATUS_OK);
    return i;
}

// Result of an allocating call: the status and the whole output buffer (sentinel-filled
// before the call, so untouched elements stay kSentinel).
template <class T>
struct Out {
    kvp_status status;
    std::vector<T> buf;
    // The first n elements.
    std::vector<T> first(size_t n) const { return std::vector<T>(buf.begin(), buf.begin() + n); }
    bool untouched() const {
        for (T x : buf)
            if (x != static_cast<T>(kSentinel)) return false;
        return true;
    }
};

template <class T = int64_t>
Out<T> alloc(const Pool &pool, size_t n, size_t out_len) {
    Out<T> r{KVP_STATUS_OK, std::vector<T>(out_len + 2, static_cast<T>(kSentinel))};
    r.status = kvp_pool_alloc(pool.get(), n, r.buf.data(), out_len);
    return r;
}

template <class T = int64_t>
Out<T> extend(const Pool &pool, std::vector<int64_t> prefix, std::vector<int64_t> seq,
              std::vector<T> last, size_t out_len) {
    size_t n = 0;
    for (size_t i = 0; i < seq.size(); i++) n += static_cast<size_t>(seq[i] - prefix[i]);
    Out<T> r{KVP_STATUS_OK, std::vector<T>(out_len + 2, static_cast<T>(kSentinel))};
    r.status = kvp_pool_alloc_extend(pool.get(), prefix.data(), seq.data(), last.data(),
                                     seq.size(), n, r.buf.data(), out_len);
    return r;
}

template <class T = int64_t>
Out<T> decode(const Pool &pool, std::vector<int64_t> seq, std::vector<T> last,
              size_t out_len) {
    Out<T> r{KVP_STATUS_OK, std::vector<T>(out_len + 2, static_cast<T>(kSentinel))};
    r.status = kvp_pool_alloc_decode(pool.get(), seq.data(), last.data(), seq.size(),
                                     r.buf.data(), out_len);
    return r;
}

template <class T = int64_t>
kvp_status free_indices(const Pool &pool, std::vector<T> indices) {
    return kvp_pool_free_indices(pool.get(), indices.data(), indices.size());
}

template <class T = int64_t>
kvp_status free_pages(const Pool &pool, std::vector<T> pages) {
    return kvp_pool_free_pages(pool.get(), pages.data(), pages.size());
}

template <class T = int64_t>
kvp_status free_segment(const Pool &pool, const std::vector<T> &row, size_t start,
                        size_t len) {
    return kvp_pool_free_segment(pool.get(), row.data(), row.size(), start, len);
}

// ---- tests ---------------------------------------------------------------------------------------

void test_version() {
    std::string expected = std::to_string(KVP_VERSION_MAJOR) + "." +
                           std::to_string(KVP_VERSION_MINOR) + "." +
                           std::to_string(KVP_VERSION_PATCH);
    CHECK(kvp_version() != nullptr);
    CHECK(std::string(kvp_version()) == expected);
    CHECK_EQ(kvp_abi_version(), KVP_ABI_VERSION);
    if (KVP_VERSION_MAJOR == 0) CHECK_EQ(KVP_ABI_VERSION, KVP_VERSION_MINOR);
}

void test_status_str() {
    const std::vector<kvp_status> known = {
        KVP_STATUS_OK,           KVP_STATUS_NULL_ARGUMENT,      KVP_STATUS_INVALID_ARGUMENT,
        KVP_STATUS_INVALID_LENGTHS, KVP_STATUS_BUFFER_TOO_SMALL, KVP_STATUS_UNALIGNED,
        KVP_STATUS_INDEX_OUT_OF_RANGE, KVP_STATUS_RESERVED_SLOT, KVP_STATUS_DOUBLE_FREE,
        KVP_STATUS_NOT_ALLOCATED, KVP_STATUS_LAST_LOC_MISMATCH, KVP_STATUS_OUT_OF_SLOTS,
        KVP_STATUS_OUT_OF_MEMORY,
        KVP_STATUS_INVALID_STATE, KVP_STATUS_FOREIGN_SNAPSHOT,  KVP_STATUS_POISONED,
        KVP_STATUS_WRONG_BACKEND, KVP_STATUS_UNSUPPORTED,    KVP_STATUS_CUDA_UNAVAILABLE,
        KVP_STATUS_CUDA_ERROR,   KVP_STATUS_WRONG_STREAM,    KVP_STATUS_DEVICE_FAULT,
        KVP_STATUS_UNORDERED_STREAMS, KVP_STATUS_PANIC};
    const std::vector<long long> numbers = {0,  1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 20,
                                            21, 40, 41, 42, 43, 50, 60, 61, 62, 63, 64, 100};
    std::set<std::string> texts;
    for (size_t i = 0; i < known.size(); i++) {
        CHECK_EQ(known[i], numbers[i]);
        const char *s = kvp_status_str(known[i]);
        CHECK(s != nullptr && *s != '\0');
        if (s == nullptr) continue;
        CHECK(std::string(s) != "unknown status");
        texts.insert(s);
    }
    CHECK_EQ(texts.size(), known.size());  // every status has its own text
    for (int32_t n : {-1, 11, 19, 22, 44, 59, 65, 99, 101, 4242, std::numeric_limits<int32_t>::min(),
                      std::numeric_limits<int32_t>::max()})
        CHECK(std::string(kvp_status_str(n)) == "unknown status");
}

void test_config() {
    kvp_pool_config cfg = kvp_pool_config_default();
    CHECK_EQ(cfg.size, 0);
    CHECK_EQ(cfg.page_size, 1);
    CHECK_EQ(cfg.index_type, KVP_INDEX_TYPE_I64);
    CHECK_EQ(cfg.backend, KVP_BACKEND_HOST);
    CHECK_EQ(cfg.device, 0);
    CHECK(!cfg.need_sort);

    int dummy = 0;
    kvp_pool *const sentinel = reinterpret_cast<kvp_pool *>(&dummy);
    struct Case {
        uint64_t size;
        uint32_t page_size, index_type, backend;
        kvp_status want;
        const char *needle;
    };
    const Case cases[] = {
        {0, 1, KVP_INDEX_TYPE_I64, KVP_BACKEND_HOST, KVP_STATUS_INVALID_ARGUMENT, "size"},
        {64, 0, KVP_INDEX_TYPE_I64, KVP_BACKEND_HOST, KVP_STATUS_INVALID_ARGUMENT, "page_size"},
        {10, 4, KVP_INDEX_TYPE_I64, KVP_BACKEND_HOST, KVP_STATUS_UNALIGNED, "page_size"},
        {64, 1, 2, KVP_BACKEND_HOST, KVP_STATUS_INVALID_ARGUMENT, "index_type"},
        {64, 1, KVP_INDEX_TYPE_I64, 9, KVP_STATUS_INVALID_ARGUMENT, "backend"},
        {64, 4, KVP_INDEX_TYPE_I64, KVP_BACKEND_CUDA, KVP_STATUS_CUDA_UNAVAILABLE, "CUDA"},
        {uint64_t{1} << 31, 1, KVP_INDEX_TYPE_I32, KVP_BACKEND_HOST, KVP_STATUS_INVALID_ARGUMENT,
         "index type"},
    };
    for (const Case &c : cases) {
        cfg = kvp_pool_config_default();
        cfg.size = c.size;
        cfg.page_size = c.page_size;
        cfg.index_type = c.index_type;
        cfg.backend = c.backend;
        cfg.device = 999;  // the CUDA case: no such device, with or without a driver
        kvp_pool *out = sentinel;
        CHECK_STATUS(kvp_pool_new(&cfg, &out), c.want);
        CHECK(out == sentinel);
        CHECK_MSG(c.needle);
    }
    kvp_pool *out = sentinel;
    CHECK_STATUS(kvp_pool_new(nullptr, &out), KVP_STATUS_NULL_ARGUMENT);
    CHECK(out == sentinel);
    cfg = kvp_pool_config_default();
    cfg.size = 8;
    CHECK_STATUS(kvp_pool_new(&cfg, nullptr), KVP_STATUS_NULL_ARGUMENT);
    CHECK_MSG("out_pool");
}

void test_null_arguments() {
    Pool pool = make_pool(64, 4);
    Snapshot snap = backup(pool);
    int dummy = 0;
    kvp_snapshot *const snap_sentinel = reinterpret_cast<kvp_snapshot *>(&dummy);
    kvp_snapshot *snap_out = snap_sentinel;
    std::vector<int64_t> out(8, kSentinel);
    const std::vector<int64_t> out_before = out;
    int64_t zero = 0, one = 1, four = 4, minus1 = -1;
    uint64_t n = 4242;
    struct kvp_pool_info i;
    struct kvp_pool_stats s;
    std::memset(&i, 0x5A, sizeof i);
    std::memset(&s, 0x5A, sizeof s);
    unsigned char i_before[sizeof i], s_before[sizeof s];
    std::memcpy(i_before, &i, sizeof i);
    std::memcpy(s_before, &s, sizeof s);

    // pool NULL
    CHECK_STATUS(kvp_pool_get_info(nullptr, &i), KVP_STATUS_NULL_ARGUMENT);
    CHECK_MSG("pool");
    CHECK_STATUS(kvp_pool_available_size(nullptr, &n), KVP_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(kvp_pool_get_stats(nullptr, &s), KVP_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(kvp_pool_alloc(nullptr, 4, out.data(), 8), KVP_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(kvp_pool_alloc_extend(nullptr, &zero, &one, &minus1, 1, 1, out.data(), 8),
                 KVP_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(kvp_pool_alloc_decode(nullptr, &one, &minus1, 1, out.data(), 8),
                 KVP_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(kvp_pool_free_indices(nullptr, &four, 1), KVP_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(kvp_pool_free_pages(nullptr, &one, 1), KVP_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(kvp_pool_free_segment(nullptr, &four, 1, 0, 1), KVP_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(kvp_pool_free_group_begin(nullptr), KVP_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(kvp_pool_free_group_end(nullptr), KVP_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(kvp_pool_merge_and_sort_free(nullptr), KVP_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(kvp_pool_clear(nullptr), KVP_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(kvp_pool_backup_state(nullptr, &snap_out), KVP_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(kvp_pool_restore_state(nullptr, snap.get()), KVP_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(kvp_testing_poison_pool(nullptr), KVP_STATUS_NULL_ARGUMENT);

    // out-parameters NULL
    CHECK_STATUS(kvp_pool_get_info(pool.get(), nullptr), KVP_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(kvp_pool_available_size(pool.get(), nullptr), KVP_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(kvp_pool_get_stats(pool.get(), nullptr), KVP_STATUS_NULL_ARGUMENT);
    CHECK_MSG("out_stats");
    CHECK_STATUS(kvp_pool_backup_state(pool.get(), nullptr), KVP_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(kvp_pool_restore_state(pool.get(), nullptr), KVP_STATUS_NULL_ARGUMENT);

    // buffers NULL with nonzero lengths
    CHECK_STATUS(kvp_pool_alloc(pool.get(), 4, nullptr, 4), KVP_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(kvp_pool_alloc_extend(pool.get(), nullptr, &four, &minus1, 1, 4, out.data(), 8),
                 KVP_STATUS_NULL_ARGUMENT);
    CHECK_MSG("prefix_lens");
    CHECK_STATUS(kvp_pool_alloc_extend(pool.get(), &zero, nullptr, &minus1, 1, 4, out.data(), 8),
                 KVP_STATUS_NULL_ARGUMENT);
    CHECK_MSG("seq_lens");
    CHECK_STATUS(kvp_pool_alloc_extend(pool.get(), &zero, &four, nullptr, 1, 4, out.data(), 8),
                 KVP_STATUS_NULL_ARGUMENT);
    CHECK_MSG("last_loc");
    CHECK_STATUS(kvp_pool_alloc_extend(pool.get(), &zero, &four, &minus1, 1, 4, nullptr, 8),
                 KVP_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(kvp_pool_alloc_decode(pool.get(), nullptr, &minus1, 1, out.data(), 8),
                 KVP_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(kvp_pool_alloc_decode(pool.get(), &one, nullptr, 1, out.data(), 8),
                 KVP_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(kvp_pool_alloc_decode(pool.get(), &one, &minus1, 1, nullptr, 8),
                 KVP_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(kvp_pool_free_indices(pool.get(), nullptr, 2), KVP_STATUS_NULL_ARGUMENT);
    CHECK_MSG("indices");
    CHECK_STATUS(kvp_pool_free_pages(pool.get(), nullptr, 2), KVP_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(kvp_pool_free_segment(pool.get(), nullptr, 8, 0, 4), KVP_STATUS_NULL_ARGUMENT);
    CHECK_MSG("row");

    // nothing written, nothing changed
    CHECK(out == out_before);
    CHECK_EQ(n, 4242);
    CHECK(snap_out == snap_sentinel);
    CHECK(std::memcmp(&i, i_before, sizeof i) == 0);
    CHECK(std::memcmp(&s, s_before, sizeof s) == 0);
    CHECK_EQ(available(pool), 64);

    // NULL with length 0 is fine
    CHECK_STATUS(kvp_pool_alloc(pool.get(), 0, nullptr, 0), KVP_STATUS_OK);
    CHECK_STATUS(kvp_pool_alloc_extend(pool.get(), nullptr, nullptr, nullptr, 0, 0, nullptr, 0),
                 KVP_STATUS_OK);
    CHECK_STATUS(kvp_pool_alloc_decode(pool.get(), nullptr, nullptr, 0, nullptr, 0), KVP_STATUS_OK);
    CHECK_STATUS(kvp_pool_free_indices(pool.get(), nullptr, 0), KVP_STATUS_OK);
    CHECK_STATUS(kvp_pool_free_pages(pool.get(), nullptr, 0), KVP_STATUS_OK);
    CHECK_STATUS(kvp_pool_free_segment(pool.get(), nullptr, 0, 0, 0), KVP_STATUS_OK);
    CHECK_EQ(available(pool), 64);

    kvp_pool_free(nullptr);
    kvp_snapshot_free(nullptr);
}

void test_token_pool() {
    Pool pool = make_pool(8, 1);
    auto r = alloc(pool, 3, 8);
    CHECK_STATUS(r.status, KVP_STATUS_OK);
    CHECK_VEC(r.first(3), 1, 2, 3);
    CHECK_STATUS(free_indices(pool, std::vector<int64_t>{2, 1}), KVP_STATUS_OK);
    r = alloc(pool, 6, 6);
    CHECK_STATUS(r.status, KVP_STATUS_OK);
    CHECK_VEC(r.buf, 4, 5, 6, 7, 8, 2, kSentinel, kSentinel);
    CHECK_EQ(available(pool), 1);

    r = alloc(pool, 2, 2);
    CHECK_STATUS(r.status, KVP_STATUS_OUT_OF_SLOTS);
    CHECK(r.untouched());
    CHECK_EQ(available(pool), 1);
    r = alloc(pool, 1, 1);
    CHECK_VEC(r.first(1), 1);

    // alloc_extend on a token pool equals alloc(extend_num_tokens); decode takes a slot each
    CHECK_STATUS(free_indices(pool, std::vector<int64_t>{5, 4, 8}), KVP_STATUS_OK);
    r = extend(pool, {0}, {2}, std::vector<int64_t>{-1}, 2);
    CHECK_STATUS(r.status, KVP_STATUS_OK);
    CHECK_VEC(r.first(2), 5, 4);
    r = decode(pool, {3}, std::vector<int64_t>{4}, 1);
    CHECK_STATUS(r.status, KVP_STATUS_OK);
    CHECK_VEC(r.first(1), 8);
    CHECK_EQ(available(pool), 0);

    CHECK_STATUS(kvp_pool_clear(pool.get()), KVP_STATUS_OK);
    r = alloc(pool, 8, 8);
    CHECK_VEC(r.first(8), 1, 2, 3, 4, 5, 6, 7, 8);
}

void test_paged_alloc_extend_and_decode() {
    Pool pool = make_pool(64, 4);
    // prefix of 2 tokens: page 1 -> 4, 5
    auto r = extend(pool, {0}, {2}, std::vector<int64_t>{-1}, 2);
    CHECK_STATUS(r.status, KVP_STATUS_OK);
    CHECK_VEC(r.buf, 4, 5, kSentinel, kSentinel);
    // grow to 11: 6, 7 finish page 1; page 2 whole; page 3 partial
    r = extend(pool, {2}, {11}, std::vector<int64_t>{5}, 9);
    CHECK_STATUS(r.status, KVP_STATUS_OK);
    CHECK_VEC(r.buf, 6, 7, 8, 9, 10, 11, 12, 13, 14, kSentinel, kSentinel);
    CHECK_EQ(available(pool), 52);

    r = decode(pool, {12}, std::vector<int64_t>{14}, 1);
    CHECK_VEC(r.first(1), 15);
    r = decode(pool, {13, 1}, std::vector<int64_t>{15, -1}, 2);
    CHECK_STATUS(r.status, KVP_STATUS_OK);
    CHECK_VEC(r.buf, 16, 20, kSentinel, kSentinel);  // pages 4 and 5, in batch order
    CHECK_EQ(available(pool), 44);

    r = extend(pool, {0, 0}, {3, 5}, std::vector<int64_t>{-1, -1}, 8);
    CHECK_STATUS(r.status, KVP_STATUS_OK);
    CHECK_VEC(r.first(8), 24, 25, 26, 28, 29, 30, 31, 32);
    CHECK_EQ(available(pool), 32);

    // errors: nothing written, pool unchanged
    const struct kvp_pool_stats before = stats(pool);
    struct Case {
        std::vector<int64_t> prefix, seq, last;
        size_t out_len;
        kvp_status want;
        const char *needle;
    };
    const Case cases[] = {
        {{5}, {3}, {4}, 8, KVP_STATUS_INVALID_LENGTHS, "seq_lens[0]"},
        {{-2}, {3}, {-1}, 8, KVP_STATUS_INVALID_LENGTHS, "prefix_lens[0]"},
        {{0}, {65}, {-1}, 80, KVP_STATUS_INVALID_LENGTHS, "seq_lens[0]"},
        {{2}, {3}, {6}, 8, KVP_STATUS_LAST_LOC_MISMATCH, "last_loc[0]"},
        {{0}, {3}, {5}, 8, KVP_STATUS_LAST_LOC_MISMATCH, "last_loc[0]"},
        {{1}, {2}, {60}, 8, KVP_STATUS_NOT_ALLOCATED, "last_loc[0]"},
        {{1}, {2}, {68}, 8, KVP_STATUS_INDEX_OUT_OF_RANGE, "last_loc[0]"},
        {{1}, {2}, {0}, 8, KVP_STATUS_RESERVED_SLOT, "last_loc[0]"},
        {{3, 0}, {4, 1}, {26, 24}, 8, KVP_STATUS_LAST_LOC_MISMATCH, "last_loc[1]"},
        {{0}, {4}, {-1}, 3, KVP_STATUS_BUFFER_TOO_SMALL, "output buffer"},
        {{0}, {36}, {-1}, 36, KVP_STATUS_OUT_OF_SLOTS, "free pages"},
    };
    for (const Case &c : cases) {
        r = extend(pool, c.prefix, c.seq, c.last, c.out_len);
        CHECK_STATUS(r.status, c.want);
        CHECK_MSG(c.needle);
        CHECK(r.untouched());
    }
    // extend_num_tokens disagreeing with the lengths
    {
        int64_t prefix = 0, seq = 4, last = -1;
        std::vector<int64_t> out(8, kSentinel);
        CHECK_STATUS(kvp_pool_alloc_extend(pool.get(), &prefix, &seq, &last, 1, 5, out.data(), 8),
                     KVP_STATUS_INVALID_LENGTHS);
        CHECK_MSG("extend_num_tokens");
    }
    // two requests extending page 6 (slots 24..26 allocated)
    r = extend(pool, {3, 2}, {4, 3}, std::vector<int64_t>{26, 25}, 8);
    CHECK_STATUS(r.status, KVP_STATUS_LAST_LOC_MISMATCH);
    CHECK_MSG("page 6");
    r = decode(pool, {0}, std::vector<int64_t>{-1}, 1);
    CHECK_STATUS(r.status, KVP_STATUS_INVALID_LENGTHS);
    r = decode(pool, {4}, std::vector<int64_t>{25}, 1);
    CHECK_STATUS(r.status, KVP_STATUS_LAST_LOC_MISMATCH);
    r = decode(pool, {1, 1}, std::vector<int64_t>{-1, -1}, 1);
    CHECK_STATUS(r.status, KVP_STATUS_BUFFER_TOO_SMALL);
    CHECK(r.untouched());
    CHECK_EQ(available(pool), 32);
    const struct kvp_pool_stats after = stats(pool);
    CHECK_EQ(after.tokens_allocated, before.tokens_allocated);
    CHECK_EQ(after.pages_in_use, before.pages_in_use);
    CHECK_EQ(after.failed_allocations, before.failed_allocations + 1);
    CHECK_EQ(after.rejected_calls, before.rejected_calls + 15);

    // prefix 3 ending at 26: 27 finishes page 6, then a new page 9
    r = extend(pool, {3}, {6}, std::vector<int64_t>{26}, 3);
    CHECK_STATUS(r.status, KVP_STATUS_OK);
    CHECK_VEC(r.first(3), 27, 36, 37);
}

void test_paged_frees() {
    Pool pool = make_pool(32, 4);
    auto r = alloc(pool, 16, 16);  // pages 1..4
    CHECK_VEC(r.first(16), 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19);
    CHECK_STATUS(free_indices(pool, std::vector<int64_t>{17, 9}), KVP_STATUS_OK);  // -> 2 4 5..8
    r = alloc(pool, 8, 8);
    CHECK_VEC(r.first(8), 8, 9, 10, 11, 16, 17, 18, 19);
    {
        // the distinct pages of one call return as one ascending block (1 2 4)
        Pool fresh = make_pool(32, 4);
        CHECK_STATUS(alloc(fresh, 20, 20).status, KVP_STATUS_OK);
        CHECK_STATUS(free_indices(fresh, std::vector<int64_t>{10, 17, 5, 9}), KVP_STATUS_OK);
        auto f = alloc(fresh, 16, 16);
        CHECK_VEC(f.first(16), 4, 5, 6, 7, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27);
    }
    CHECK_STATUS(free_indices(pool, std::vector<int64_t>{6}), KVP_STATUS_OK);  // whole page 1
    CHECK_EQ(available(pool), 20);
    CHECK_STATUS(free_indices(pool, std::vector<int64_t>{8, 8}), KVP_STATUS_DOUBLE_FREE);
    CHECK_MSG("indices[1]");
    CHECK_STATUS(free_indices(pool, std::vector<int64_t>{7}), KVP_STATUS_DOUBLE_FREE);
    CHECK_STATUS(free_pages(pool, std::vector<int64_t>{4, 3}), KVP_STATUS_OK);  // -> 4 3 1 5..8
    CHECK_STATUS(free_pages(pool, std::vector<int64_t>{2, 2}), KVP_STATUS_DOUBLE_FREE);
    CHECK_MSG("page_ids[1]");
    CHECK_EQ(available(pool), 28);
    r = alloc(pool, 12, 12);
    CHECK_VEC(r.first(12), 16, 17, 18, 19, 12, 13, 14, 15, 4, 5, 6, 7);

    // a request row on pages 4, 3, 1 (9 tokens)
    const std::vector<int64_t> row = {16, 17, 18, 19, 12, 13, 14, 15, 4};
    CHECK_STATUS(free_segment(pool, row, 1, 4), KVP_STATUS_UNALIGNED);
    CHECK_STATUS(free_segment(pool, row, 8, 4), KVP_STATUS_BUFFER_TOO_SMALL);
    CHECK_STATUS(free_segment(pool, std::vector<int64_t>{16, 18, 17, 19}, 0, 4),
                 KVP_STATUS_INVALID_ARGUMENT);
    CHECK_EQ(available(pool), 16);
    CHECK_STATUS(free_segment(pool, row, 4, 5), KVP_STATUS_OK);  // pages 3 and 1 -> 3 1 5..8
    CHECK_EQ(available(pool), 24);
    r = alloc(pool, 8, 8);
    CHECK_VEC(r.first(8), 12, 13, 14, 15, 4, 5, 6, 7);

    const long long before = available(pool);
    CHECK_STATUS(free_indices(pool, std::vector<int64_t>{16, 0}), KVP_STATUS_RESERVED_SLOT);
    CHECK_MSG("indices[1]");
    CHECK_STATUS(free_indices(pool, std::vector<int64_t>{3}), KVP_STATUS_RESERVED_SLOT);
    CHECK_STATUS(free_indices(pool, std::vector<int64_t>{16, 36}), KVP_STATUS_INDEX_OUT_OF_RANGE);
    CHECK_MSG("indices[1]");
    CHECK_STATUS(free_pages(pool, std::vector<int64_t>{0}), KVP_STATUS_RESERVED_SLOT);
    CHECK_STATUS(free_pages(pool, std::vector<int64_t>{9}), KVP_STATUS_INDEX_OUT_OF_RANGE);
    CHECK_EQ(available(pool), before);  // page 4 (slot 16) was not freed
    CHECK_STATUS(free_indices(pool, std::vector<int64_t>{16}), KVP_STATUS_OK);
    CHECK_EQ(available(pool), before + 4);
}

void test_double_free() {
    Pool pool = make_pool(8, 1);
    auto r = alloc(pool, 3, 3);
    CHECK_STATUS(free_indices(pool, std::vector<int64_t>{1}), KVP_STATUS_OK);
    CHECK_EQ(available(pool), 6);
    CHECK_STATUS(free_indices(pool, std::vector<int64_t>{2, 1}), KVP_STATUS_DOUBLE_FREE);
    CHECK_MSG("indices[1]");
    CHECK_EQ(available(pool), 6);
    CHECK_STATUS(free_indices(pool, std::vector<int64_t>{3, 3}), KVP_STATUS_DOUBLE_FREE);
    CHECK_MSG("indices[1]");
    CHECK_EQ(available(pool), 6);
    CHECK_STATUS(free_indices(pool, std::vector<int64_t>{3, 2}), KVP_STATUS_OK);
    CHECK_EQ(available(pool), 8);
    // free list: 4..8 1 3 2
    r = alloc(pool, 8, 8);
    CHECK_VEC(r.first(8), 4, 5, 6, 7, 8, 1, 3, 2);
}

void test_free_groups() {
    Pool pool = make_pool(32, 4);
    auto r = alloc(pool, 24, 24);  // pages 1..6
    CHECK_STATUS(kvp_pool_free_group_end(pool.get()), KVP_STATUS_INVALID_STATE);
    CHECK_STATUS(kvp_pool_free_group_begin(pool.get()), KVP_STATUS_OK);
    CHECK_STATUS(kvp_pool_free_group_begin(pool.get()), KVP_STATUS_INVALID_STATE);
    CHECK_MSG("nest");
    CHECK(info(pool).in_free_group);
    CHECK_STATUS(free_indices(pool, std::vector<int64_t>{24}), KVP_STATUS_OK);  // page 6
    CHECK_STATUS(free_pages(pool, std::vector<int64_t>{4, 1}), KVP_STATUS_OK);
    CHECK_STATUS(free_indices(pool, std::vector<int64_t>{8}), KVP_STATUS_OK);  // page 2
    CHECK_STATUS(free_segment(pool, std::vector<int64_t>{12, 13, 14, 15}, 0, 4), KVP_STATUS_OK);
    CHECK_EQ(available(pool), 8);  // held until the group ends
    CHECK_STATUS(free_pages(pool, std::vector<int64_t>{6}), KVP_STATUS_DOUBLE_FREE);
    CHECK_MSG("free group");
    {
        int dummy = 0;
        kvp_snapshot *const sentinel = reinterpret_cast<kvp_snapshot *>(&dummy);
        kvp_snapshot *snap = sentinel;
        CHECK_STATUS(kvp_pool_backup_state(pool.get(), &snap), KVP_STATUS_INVALID_STATE);
        CHECK(snap == sentinel);  // unmodified on failure
    }
    CHECK_STATUS(kvp_pool_free_group_end(pool.get()), KVP_STATUS_OK);
    CHECK(!info(pool).in_free_group);
    CHECK_EQ(available(pool), 28);
    CHECK_STATUS(kvp_pool_free_group_end(pool.get()), KVP_STATUS_INVALID_STATE);
    // by index (2 6 ascending) first, then page-id/segment frees in call order (4 1 3);
    // each block goes to the front: 4 1 3 2 6 7 8
    r = alloc(pool, 20, 20);
    CHECK_VEC(r.first(20), 16, 17, 18, 19, 4, 5, 6, 7, 12, 13, 14, 15, 8, 9, 10, 11, 24, 25, 26,
              27);
}

void test_need_sort() {
    Pool pool = make_pool(32, 4, KVP_INDEX_TYPE_I64, true);
    auto r = alloc(pool, 32, 32);
    CHECK_STATUS(free_pages(pool, std::vector<int64_t>{6, 2, 4}), KVP_STATUS_OK);
    CHECK_EQ(available(pool), 12);  // staged pages count
    CHECK_EQ(stats(pool).merges, 0);
    r = alloc(pool, 8, 8);  // runs short, merges sorted: 2 4 6
    CHECK_VEC(r.first(8), 8, 9, 10, 11, 16, 17, 18, 19);
    CHECK_EQ(stats(pool).merges, 1);
    CHECK_STATUS(kvp_pool_merge_and_sort_free(pool.get()), KVP_STATUS_OK);
    CHECK_EQ(stats(pool).merges, 1);
}

void test_last_error_message() {
    Pool pool = make_pool(8, 1);
    CHECK_STATUS(free_indices(pool, std::vector<int64_t>{0}), KVP_STATUS_RESERVED_SLOT);
    const size_t len = kvp_last_error_message(nullptr, 0);
    CHECK(len > 10);
    std::string full = last_error();
    CHECK_EQ(full.size(), len);
    CHECK(full.find("indices[0]") != std::string::npos);
    for (size_t buf_len : {size_t{0}, size_t{1}, size_t{2}, size_t{7}, len - 1, len, len + 1,
                           len + 40}) {
        std::vector<char> buf(len + 64, 'X');
        CHECK_EQ(kvp_last_error_message(buf.data(), buf_len), len);
        size_t copied = buf_len == 0 ? 0 : std::min(len, buf_len - 1);
        for (size_t k = 0; k < copied; k++) CHECK(buf[k] == full[k]);
        if (buf_len > 0) CHECK(buf[copied] == '\0');
        for (size_t k = buf_len; k < buf.size(); k++)
            if (buf[k] != 'X') {
                FAIL("kvp_last_error_message wrote beyond buf_len");
                break;
            }
    }
    // thread-local: another thread has its own (different) message
    std::string other;
    std::thread t([&] {
        CHECK_STATUS(free_indices(pool, std::vector<int64_t>{1234}), KVP_STATUS_INDEX_OUT_OF_RANGE);
        other = last_error();
    });
    t.join();
    CHECK(other.find("1234") != std::string::npos);
    CHECK(last_error() == full);
}

void test_snapshots() {
    Pool pool = make_pool(64, 4);
    Pool other = make_pool(64, 4);
    auto r = alloc(pool, 8, 8);  // pages 1, 2
    Snapshot snap = backup(pool);
    CHECK(snap != nullptr);
    Snapshot other_snap = backup(other);

    r = alloc(pool, 4, 4);
    CHECK_VEC(r.first(4), 12, 13, 14, 15);
    CHECK_STATUS(free_pages(pool, std::vector<int64_t>{1, 2}), KVP_STATUS_OK);
    CHECK_EQ(available(pool), 60);
    CHECK_STATUS(kvp_pool_restore_state(pool.get(), snap.get()), KVP_STATUS_OK);
    CHECK_EQ(available(pool), 56);
    CHECK_STATUS(free_pages(pool, std::vector<int64_t>{3}), KVP_STATUS_DOUBLE_FREE);
    r = alloc(pool, 4, 4);
    CHECK_VEC(r.first(4), 12, 13, 14, 15);
    CHECK_STATUS(kvp_pool_restore_state(pool.get(), snap.get()), KVP_STATUS_OK);  // reusable
    CHECK_STATUS(free_pages(pool, std::vector<int64_t>{1, 2}), KVP_STATUS_OK);
    CHECK_EQ(stats(pool).restores, 2);

    CHECK_STATUS(kvp_pool_restore_state(other.get(), snap.get()), KVP_STATUS_FOREIGN_SNAPSHOT);
    CHECK_STATUS(kvp_pool_restore_state(pool.get(), other_snap.get()), KVP_STATUS_FOREIGN_SNAPSHOT);
    CHECK_EQ(available(pool), 64);
    CHECK_EQ(available(other), 64);
    CHECK_EQ(stats(pool).restores, 2);

    // the snapshot outlives its pool
    other.reset();
    CHECK_STATUS(kvp_pool_restore_state(pool.get(), other_snap.get()), KVP_STATUS_FOREIGN_SNAPSHOT);
}

void test_int32_pool() {
    Pool pool = make_pool(64, 4, KVP_INDEX_TYPE_I32);
    CHECK_EQ(info(pool).index_type, KVP_INDEX_TYPE_I32);
    auto r = extend<int32_t>(pool, {0}, {2}, {-1}, 2);
    CHECK_STATUS(r.status, KVP_STATUS_OK);
    CHECK_VEC(r.buf, 4, 5, kSentinel, kSentinel);
    r = extend<int32_t>(pool, {2}, {11}, {5}, 9);
    CHECK_VEC(r.buf, 6, 7, 8, 9, 10, 11, 12, 13, 14, kSentinel, kSentinel);
    r = decode<int32_t>(pool, {12, 1}, {14, -1}, 2);
    CHECK_STATUS(r.status, KVP_STATUS_OK);
    CHECK_VEC(r.buf, 15, 16, kSentinel, kSentinel);
    r = alloc<int32_t>(pool, 4, 4);
    CHECK_VEC(r.buf, 20, 21, 22, 23, kSentinel, kSentinel);
    CHECK_STATUS(free_indices<int32_t>(pool, {21, 16}), KVP_STATUS_OK);
    CHECK_STATUS(free_indices<int32_t>(pool, {16}), KVP_STATUS_DOUBLE_FREE);
    CHECK_STATUS(free_pages<int32_t>(pool, {3}), KVP_STATUS_OK);
    CHECK_STATUS(free_segment<int32_t>(pool, {4, 5, 6, 7, 8, 9, 10}, 0, 7), KVP_STATUS_OK);
    CHECK_EQ(available(pool), 64);
    r = alloc<int32_t>(pool, 8, 8);
    CHECK_VEC(r.first(8), 4, 5, 6, 7, 8, 9, 10, 11);
}

void test_info_and_stats() {
    Pool pool = make_pool(64, 4);
    struct kvp_pool_info i = info(pool);
    CHECK_EQ(i.size, 64);
    CHECK_EQ(i.kv_rows, 68);
    CHECK_EQ(i.padding_slot, 0);
    CHECK_EQ(i.page_size, 4);
    CHECK_EQ(i.num_pages, 16);
    CHECK_EQ(i.index_type, KVP_INDEX_TYPE_I64);
    CHECK_EQ(i.backend, KVP_BACKEND_HOST);
    CHECK_EQ(i.device, -1);
    CHECK(!i.need_sort);
    CHECK(!i.in_free_group);

    CHECK_STATUS(alloc(pool, 12, 12).status, KVP_STATUS_OK);       // pages 1..3
    CHECK_STATUS(alloc(pool, 5, 8).status, KVP_STATUS_UNALIGNED);  // rejected
    CHECK_STATUS(alloc(pool, 64, 64).status, KVP_STATUS_OUT_OF_SLOTS);
    CHECK_STATUS(extend(pool, {0}, {5}, std::vector<int64_t>{-1}, 5).status, KVP_STATUS_OK);
    CHECK_STATUS(free_indices(pool, std::vector<int64_t>{4, 9}), KVP_STATUS_OK);  // pages 1, 2
    CHECK_STATUS(kvp_pool_free_group_begin(pool.get()), KVP_STATUS_OK);
    CHECK_STATUS(free_pages(pool, std::vector<int64_t>{3}), KVP_STATUS_OK);
    struct kvp_pool_stats s = stats(pool);
    CHECK_EQ(s.pages_in_use, 3);  // page 3 is pending in the open group
    CHECK_EQ(s.pages_freed, 2);
    CHECK_STATUS(kvp_pool_free_group_end(pool.get()), KVP_STATUS_OK);
    Snapshot snap = backup(pool);
    CHECK_STATUS(kvp_pool_restore_state(pool.get(), snap.get()), KVP_STATUS_OK);
    s = stats(pool);
    CHECK_EQ(s.alloc_calls, 3);
    CHECK_EQ(s.alloc_extend_calls, 1);
    CHECK_EQ(s.alloc_decode_calls, 0);
    CHECK_EQ(s.free_calls, 2);
    CHECK_EQ(s.tokens_allocated, 17);
    CHECK_EQ(s.slots_freed, 12);
    CHECK_EQ(s.pages_allocated, 5);
    CHECK_EQ(s.pages_freed, 3);
    CHECK_EQ(s.pages_in_use, 2);
    CHECK_EQ(s.pages_in_use_peak, 5);
    CHECK_EQ(s.failed_allocations, 1);
    CHECK_EQ(s.rejected_calls, 1);
    CHECK_EQ(s.merges, 0);
    CHECK_EQ(s.restores, 1);
}

void test_panic_boundary() {
    CHECK_STATUS(kvp_testing_panic(), KVP_STATUS_PANIC);
    CHECK(last_error() == "internal panic: kvp_testing_panic");

    Pool pool = make_pool(64, 4);
    Pool healthy = make_pool(64, 4);
    auto r = alloc(pool, 4, 4);
    Snapshot snap = backup(pool);
    CHECK_STATUS(kvp_testing_poison_pool(pool.get()), KVP_STATUS_PANIC);
    CHECK_MSG("kvp_testing_poison_pool");

    uint64_t n = 99;
    CHECK_STATUS(kvp_pool_available_size(pool.get(), &n), KVP_STATUS_POISONED);
    CHECK_MSG("poisoned");
    CHECK_EQ(n, 99);
    struct kvp_pool_info i{};
    i.size = 5;
    CHECK_STATUS(kvp_pool_get_info(pool.get(), &i), KVP_STATUS_POISONED);
    CHECK_EQ(i.size, 5);
    struct kvp_pool_stats s{};
    s.alloc_calls = 5;
    CHECK_STATUS(kvp_pool_get_stats(pool.get(), &s), KVP_STATUS_POISONED);
    CHECK_EQ(s.alloc_calls, 5);
    r = alloc(pool, 4, 4);
    CHECK_STATUS(r.status, KVP_STATUS_POISONED);
    CHECK(r.untouched());
    CHECK_STATUS(extend(pool, {0}, {1}, std::vector<int64_t>{-1}, 1).status, KVP_STATUS_POISONED);
    CHECK_STATUS(decode(pool, {1}, std::vector<int64_t>{-1}, 1).status, KVP_STATUS_POISONED);
    CHECK_STATUS(free_indices(pool, std::vector<int64_t>{4}), KVP_STATUS_POISONED);
    CHECK_STATUS(free_pages(pool, std::vector<int64_t>{1}), KVP_STATUS_POISONED);
    CHECK_STATUS(free_segment(pool, std::vector<int64_t>{4}, 0, 1), KVP_STATUS_POISONED);
    CHECK_STATUS(kvp_pool_free_group_begin(pool.get()), KVP_STATUS_POISONED);
    CHECK_STATUS(kvp_pool_free_group_end(pool.get()), KVP_STATUS_POISONED);
    CHECK_STATUS(kvp_pool_merge_and_sort_free(pool.get()), KVP_STATUS_POISONED);
    CHECK_STATUS(kvp_pool_clear(pool.get()), KVP_STATUS_POISONED);
    int dummy = 0;
    kvp_snapshot *const sentinel = reinterpret_cast<kvp_snapshot *>(&dummy);
    kvp_snapshot *snap_out = sentinel;
    CHECK_STATUS(kvp_pool_backup_state(pool.get(), &snap_out), KVP_STATUS_POISONED);
    CHECK(snap_out == sentinel);
    CHECK_STATUS(kvp_pool_restore_state(pool.get(), snap.get()), KVP_STATUS_POISONED);
    CHECK_STATUS(kvp_testing_poison_pool(pool.get()), KVP_STATUS_POISONED);

    r = alloc(healthy, 4, 4);
    CHECK_STATUS(r.status, KVP_STATUS_OK);
    CHECK_VEC(r.first(4), 4, 5, 6, 7);
    pool.reset();  // a poisoned pool is still freed normally
}

// Several threads allocate and free on one paged pool and one token pool at once. Every
// slot handed out is recorded in a shared set while held: a slot handed out twice while
// held shows up as a failed insert.
void test_threads() {
    constexpr int kThreads = 8;
    constexpr int kIters = 400;
    constexpr int64_t kPage = 4;
    Pool paged = make_pool(4096, kPage);
    Pool token = make_pool(1024, 1);

    std::mutex held_mutex;
    std::set<int64_t> held_paged, held_token;
    std::atomic<int> duplicates{0}, not_held{0};
    std::atomic<uint64_t> decodes{0}, tokens_paged{0}, tokens_token{0}, rejected{0};

    auto hold = [&](std::set<int64_t> &held, const int64_t *slots, size_t n) {
        std::lock_guard<std::mutex> lock(held_mutex);
        for (size_t k = 0; k < n; k++)
            if (!held.insert(slots[k]).second) duplicates++;
    };
    auto unhold = [&](std::set<int64_t> &held, const std::vector<int64_t> &slots) {
        std::lock_guard<std::mutex> lock(held_mutex);
        for (int64_t s : slots)
            if (held.erase(s) != 1) not_held++;
    };

    std::mutex start_mutex;
    std::condition_variable start_cv;
    bool go = false;

    auto worker = [&](int t) {
        {
            std::unique_lock<std::mutex> lock(start_mutex);
            start_cv.wait(lock, [&] { return go; });
        }
        for (int i = 0; i < kIters; i++) {
            // a paged request: prefill, a few decode steps, then free its row by segment
            const int64_t len = 1 + (i * 7 + t * 3) % 23;
            std::vector<int64_t> row(static_cast<size_t>(len), kSentinel);
            const int64_t prefix = 0, minus1 = -1;
            CHECK_STATUS(kvp_pool_alloc_extend(paged.get(), &prefix, &len, &minus1, 1,
                                               static_cast<size_t>(len), row.data(), row.size()),
                         KVP_STATUS_OK);
            hold(held_paged, row.data(), row.size());
            const int steps = (i + t) % 6;
            for (int k = 0; k < steps; k++) {
                const int64_t seq = static_cast<int64_t>(row.size()) + 1;
                const int64_t last = row.back();
                int64_t slot = kSentinel;
                CHECK_STATUS(kvp_pool_alloc_decode(paged.get(), &seq, &last, 1, &slot, 1),
                             KVP_STATUS_OK);
                hold(held_paged, &slot, 1);
                row.push_back(slot);
                decodes++;
            }
            // within a page a request's slots are consecutive
            for (size_t k = 1; k < row.size(); k++)
                if (k % kPage != 0 && row[k] != row[k - 1] + 1) {
                    FAIL("a page's slots are not consecutive in the row");
                    break;
                }
            tokens_paged += row.size();

            // a token-pool batch
            const size_t n = static_cast<size_t>(1 + (i + 2 * t) % 8);
            std::vector<int64_t> slots(n, kSentinel);
            CHECK_STATUS(kvp_pool_alloc(token.get(), n, slots.data(), n), KVP_STATUS_OK);
            hold(held_token, slots.data(), n);
            tokens_token += n;

            // a failing call now and then: the message is this thread's own
            if (i % 16 == t % 16) {
                const int64_t bad = -(1000 * t + i) - 1;
                CHECK_STATUS(kvp_pool_free_indices(token.get(), &bad, 1),
                             KVP_STATUS_INDEX_OUT_OF_RANGE);
                CHECK_MSG("= " + std::to_string(bad) + " ");
                rejected++;
            }

            unhold(held_token, slots);
            CHECK_STATUS(kvp_pool_free_indices(token.get(), slots.data(), n), KVP_STATUS_OK);
            unhold(held_paged, row);
            CHECK_STATUS(kvp_pool_free_segment(paged.get(), row.data(), row.size(), 0, row.size()),
                         KVP_STATUS_OK);
        }
    };

    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; t++) threads.emplace_back(worker, t);
    {
        std::lock_guard<std::mutex> lock(start_mutex);
        go = true;
    }
    start_cv.notify_all();
    for (std::thread &th : threads) th.join();

    CHECK_EQ(duplicates.load(), 0);
    CHECK_EQ(not_held.load(), 0);
    CHECK(held_paged.empty());
    CHECK(held_token.empty());
    CHECK_EQ(available(paged), 4096);
    CHECK_EQ(available(token), 1024);

    const uint64_t calls = uint64_t{kThreads} * kIters;
    struct kvp_pool_stats s = stats(paged);
    CHECK_EQ(s.alloc_extend_calls, calls);
    CHECK_EQ(s.alloc_decode_calls, decodes.load());
    CHECK_EQ(s.free_calls, calls);
    CHECK_EQ(s.tokens_allocated, tokens_paged.load());
    CHECK_EQ(s.pages_allocated, s.pages_freed);
    CHECK_EQ(s.pages_in_use, 0);
    CHECK(s.pages_in_use_peak > 0 && s.pages_in_use_peak <= 1024);
    CHECK_EQ(s.rejected_calls, 0);
    CHECK_EQ(s.failed_allocations, 0);
    s = stats(token);
    CHECK_EQ(s.alloc_calls, calls);
    CHECK_EQ(s.free_calls, calls + rejected.load());
    CHECK_EQ(s.rejected_calls, rejected.load());
    CHECK_EQ(s.tokens_allocated, tokens_token.load());
    CHECK_EQ(s.slots_freed, tokens_token.load());
    CHECK_EQ(s.pages_in_use, 0);
    CHECK(rejected.load() > 0);
}

}  // namespace

int main() {
    struct Test {
        const char *name;
        void (*run)();
    };
    const Test tests[] = {
        {"version", test_version},
        {"status_str", test_status_str},
        {"config", test_config},
        {"null_arguments", test_null_arguments},
        {"token_pool", test_token_pool},
        {"paged_alloc_extend_and_decode", test_paged_alloc_extend_and_decode},
        {"paged_frees", test_paged_frees},
        {"double_free", test_double_free},
        {"free_groups", test_free_groups},
        {"need_sort", test_need_sort},
        {"last_error_message", test_last_error_message},
        {"snapshots", test_snapshots},
        {"int32_pool", test_int32_pool},
        {"info_and_stats", test_info_and_stats},
        {"panic_boundary", test_panic_boundary},
        {"threads", test_threads},
    };
    for (const Test &t : tests) {
        const int before = kvp_test::failures.load();
        kvp_test::current_test = t.name;
        t.run();
        std::printf("%-32s %s\n", t.name, kvp_test::failures.load() == before ? "ok" : "FAILED");
    }
    return kvp_test::summary("abi_test");
}
