// serving_loop.cpp — a continuous-batching serving loop on kvpool's C ABI (C++17).
//
// What an inference engine's scheduler thread does every iteration, with kvpool doing the
// bookkeeping SGLang does in Python:
//
//   1. submit the requests that arrived          kvp_scheduler_submit
//   2. plan the step                               kvp_scheduler_step
//   3. free the KV of retracted / preempted / aborted requests
//   4. allocate KV for the prefill entries         one kvp_pool_alloc_extend
//   5. allocate KV for the decode rows             one kvp_pool_alloc_decode
//   6. run the model (simulated here: every request "emits EOS" at a random length)
//   7. finish the requests that are done, free their KV
//
// The scheduler never allocates: it is attached to the pool (it reads the pool's free size
// itself) and tells the engine what to allocate and free. The engine owns the slot rows
// (SGLang's req_to_token): row[i] is the KV-buffer slot of the request's token i.
//
// The program checks the invariants an engine relies on and exits non-zero if one fails:
// no allocation ever fails, the scheduler's kv_len of every request equals the engine's row
// length, every request finishes, and the pool is full again at the end.
//
// Build and run: see cpp-examples/README.md.

#include "kvpool.h"

#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

namespace {

// ---- errors ---------------------------------------------------------------------------------

// Every fallible kvp_* call returns a kvp_status; anything but KVP_STATUS_OK becomes an
// exception carrying kvp_last_error_message() (per thread: read it right after the call).
struct KvpError : std::runtime_error {
    KvpError(kvp_status status, const std::string &what)
        : std::runtime_error(what), status(status) {}
    kvp_status status;
};

std::string last_error_message() {
    std::string message(kvp_last_error_message(nullptr, 0), '\0');
    kvp_last_error_message(message.data(), message.size() + 1);  // writes the NUL too
    return message;
}

void kvp_check(kvp_status status, const char *call) {
    if (status != KVP_STATUS_OK) {
        throw KvpError(status, std::string(call) + " failed: " + kvp_status_str(status) + ": " +
                                   last_error_message());
    }
}

// An engine invariant; a violation is a bug in the engine or in kvpool.
void expect(bool ok, const std::string &what) {
    if (!ok) throw std::logic_error("invariant violated: " + what);
}

// ---- owners ---------------------------------------------------------------------------------

struct PoolDeleter {
    void operator()(kvp_pool *pool) const noexcept { kvp_pool_free(pool); }
};
struct SchedulerDeleter {
    void operator()(kvp_scheduler *scheduler) const noexcept { kvp_scheduler_free(scheduler); }
};
using PoolPtr = std::unique_ptr<kvp_pool, PoolDeleter>;
using SchedulerPtr = std::unique_ptr<kvp_scheduler, SchedulerDeleter>;

PoolPtr make_pool(uint64_t size, uint32_t page_size) {
    kvp_pool_config config = kvp_pool_config_default();
    config.size = size;  // usable slots; the KV buffers need size + page_size rows
    config.page_size = page_size;
    kvp_pool *pool = nullptr;
    kvp_check(kvp_pool_new(&config, &pool), "kvp_pool_new");
    return PoolPtr(pool);
}

// Attached to `pool`: capacity and page size come from it, and the scheduler keeps it alive.
SchedulerPtr make_scheduler(const kvp_scheduler_config &config, const kvp_pool *pool) {
    kvp_scheduler *scheduler = nullptr;
    kvp_check(kvp_scheduler_new(&config, pool, &scheduler), "kvp_scheduler_new");
    return SchedulerPtr(scheduler);
}

// ---- the engine -----------------------------------------------------------------------------

struct Request {
    uint64_t id = 0;
    uint64_t prompt_len = 0;
    uint64_t max_new_tokens = 0;
    uint64_t eos_after = 0;    // the simulated model emits EOS after this many tokens
    uint64_t generated = 0;    // tokens generated so far, as the engine counts them
    std::vector<int64_t> row;  // KV slots of the tokens in the cache (req_to_token row)
};

class Engine {
public:
    Engine(kvp_pool *pool, kvp_scheduler *scheduler) : pool_(pool), scheduler_(scheduler) {}

    // Returns false if the request can never fit the pool (fail it back to the client).
    bool submit(const Request &request) {
        kvp_request desc{};
        desc.id = request.id;
        desc.input_len = request.prompt_len;
        desc.max_new_tokens = request.max_new_tokens;
        kvp_submit_result result{};
        kvp_check(kvp_scheduler_submit(scheduler_, &desc, nullptr, 0, &result),
                  "kvp_scheduler_submit");
        if (!result.queued) {
            expect(result.needed >= result.capacity, "an unfittable request fits");
            return false;
        }
        live_.emplace(request.id, request);
        return true;
    }

    // One scheduling iteration. Returns the plan's kind.
    kvp_step_kind step() {
        kvp_step_plan plan{};
        // Attached scheduler: the `available` argument is ignored (read from the pool).
        kvp_check(kvp_scheduler_step(scheduler_, 0, /*evictable=*/0, /*allow_prefill=*/true,
                                     &plan),
                  "kvp_scheduler_step");
        // The plan's arrays belong to the scheduler and stay valid until the next step.
        free_evicted(plan.retracted, plan.num_retracted, /*gone=*/false);
        free_evicted(plan.preempted, plan.num_preempted, /*gone=*/false);
        free_evicted(plan.aborted, plan.num_aborted, /*gone=*/true);
        retracted_ += plan.num_retracted;
        allocate_prefill(plan);
        allocate_decode(plan);
        // ... the model's forward pass would run here, reading/writing KV at the rows ...
        finish_done_requests();
        check_rows();
        return static_cast<kvp_step_kind>(plan.kind);
    }

    bool idle() const { return live_.empty(); }
    uint64_t finished() const { return finished_; }
    uint64_t aborted() const { return aborted_; }
    uint64_t retracted() const { return retracted_; }

private:
    Request &get(uint64_t id) {
        auto it = live_.find(id);
        expect(it != live_.end(), "the plan names unknown request " + std::to_string(id));
        return it->second;
    }

    // Retracted and preempted requests wait again (and re-prefill prompt + output so far);
    // aborted ones are gone. Either way their KV goes back to the pool now, before this
    // step allocates.
    void free_evicted(const kvp_evicted *list, size_t n, bool gone) {
        for (size_t i = 0; i < n; ++i) {
            Request &r = get(list[i].id);
            expect(list[i].kv_len == r.row.size(), "evicted kv_len is not the row length");
            free_row(r);
            if (gone) {
                live_.erase(list[i].id);
                ++aborted_;
            }
        }
    }

    void free_row(Request &r) {
        if (!r.row.empty()) {
            kvp_check(kvp_pool_free_indices(pool_, r.row.data(), r.row.size()),
                      "kvp_pool_free_indices");
        }
        r.row.clear();
    }

    // One alloc_extend for the whole prefill batch: request i grows from prefix_lens[i]
    // to seq_lens[i] tokens; last_loc[i] is the slot of its last cached token (-1: none).
    void allocate_prefill(const kvp_step_plan &plan) {
        if (plan.num_prefill == 0) return;
        std::vector<int64_t> prefix_lens, seq_lens, last_loc;
        size_t total = 0;
        for (size_t i = 0; i < plan.num_prefill; ++i) {
            const kvp_prefill_entry &e = plan.prefill[i];
            const Request &r = get(e.id);
            expect(e.prefix_len == r.row.size(), "prefill prefix_len is not the row length");
            prefix_lens.push_back(static_cast<int64_t>(e.prefix_len));
            seq_lens.push_back(static_cast<int64_t>(e.prefix_len + e.extend_len));
            last_loc.push_back(r.row.empty() ? -1 : r.row.back());
            total += e.extend_len;
        }
        std::vector<int64_t> slots(total);
        // The scheduler admitted only what fits: this cannot run out of slots.
        kvp_check(kvp_pool_alloc_extend(pool_, prefix_lens.data(), seq_lens.data(),
                                        last_loc.data(), plan.num_prefill, total,
                                        slots.data(), slots.size()),
                  "kvp_pool_alloc_extend");
        size_t at = 0;
        for (size_t i = 0; i < plan.num_prefill; ++i) {
            const kvp_prefill_entry &e = plan.prefill[i];
            Request &r = get(e.id);
            r.row.insert(r.row.end(), slots.begin() + at, slots.begin() + at + e.extend_len);
            at += e.extend_len;
            if (!e.chunked) ++r.generated;  // a finished prefill samples the first token
        }
    }

    // One alloc_decode for the decode rows: each sequence grows by one token.
    void allocate_decode(const kvp_step_plan &plan) {
        if (plan.num_decode == 0) return;
        std::vector<int64_t> seq_lens, last_loc;
        for (size_t i = 0; i < plan.num_decode; ++i) {
            const Request &r = get(plan.decode[i]);
            expect(!r.row.empty(), "a decoding request has no KV");
            seq_lens.push_back(static_cast<int64_t>(r.row.size()) + 1);  // with the new token
            last_loc.push_back(r.row.back());
        }
        std::vector<int64_t> slots(plan.num_decode);
        kvp_check(kvp_pool_alloc_decode(pool_, seq_lens.data(), last_loc.data(),
                                        plan.num_decode, slots.data(), slots.size()),
                  "kvp_pool_alloc_decode");
        for (size_t i = 0; i < plan.num_decode; ++i) {
            Request &r = get(plan.decode[i]);
            r.row.push_back(slots[i]);
            ++r.generated;
        }
    }

    // Requests that emitted EOS (or hit max_new_tokens) leave; their frees are batched in a
    // free group, as SGLang does for one step's results.
    void finish_done_requests() {
        std::vector<uint64_t> done;
        for (const auto &[id, r] : live_) {
            kvp_request_state state{};
            kvp_check(kvp_scheduler_get_request(scheduler_, id, &state),
                      "kvp_scheduler_get_request");
            if (state.phase == KVP_PHASE_RUNNING && r.generated >= r.eos_after) done.push_back(id);
        }
        if (done.empty()) return;
        kvp_check(kvp_pool_free_group_begin(pool_), "kvp_pool_free_group_begin");
        for (uint64_t id : done) {
            Request &r = get(id);
            uint64_t kv_len = 0;
            kvp_check(kvp_scheduler_finish(scheduler_, id, &kv_len), "kvp_scheduler_finish");
            expect(kv_len == r.row.size(), "finished kv_len is not the row length");
            free_row(r);
            live_.erase(id);
            ++finished_;
        }
        kvp_check(kvp_pool_free_group_end(pool_), "kvp_pool_free_group_end");
    }

    // The scheduler and the engine agree on every live request, and the pool holds exactly
    // the pages of the live rows.
    void check_rows() {
        kvp_pool_info info{};
        kvp_check(kvp_pool_get_info(pool_, &info), "kvp_pool_get_info");
        uint64_t pages = 0;
        for (const auto &[id, r] : live_) {
            kvp_request_state state{};
            kvp_check(kvp_scheduler_get_request(scheduler_, id, &state),
                      "kvp_scheduler_get_request");
            expect(state.kv_len == r.row.size(),
                   "request " + std::to_string(id) + ": kv_len " +
                       std::to_string(state.kv_len) + " != row length " +
                       std::to_string(r.row.size()));
            expect(state.output_len == r.generated,
                   "request " + std::to_string(id) + ": output count differs");
            pages += (r.row.size() + info.page_size - 1) / info.page_size;
        }
        kvp_pool_stats stats{};
        kvp_check(kvp_pool_get_stats(pool_, &stats), "kvp_pool_get_stats");
        expect(stats.pages_in_use == pages, "pages in use != pages of the live rows");
    }

    kvp_pool *pool_;
    kvp_scheduler *scheduler_;
    std::unordered_map<uint64_t, Request> live_;
    uint64_t finished_ = 0;
    uint64_t aborted_ = 0;
    uint64_t retracted_ = 0;
};

int run() {
    if (kvp_abi_version() != KVP_ABI_VERSION) {
        std::fprintf(stderr, "header ABI %d, library ABI %u: rebuild against the library\n",
                     KVP_ABI_VERSION, kvp_abi_version());
        return 1;
    }
    constexpr uint64_t kPoolSize = 16384;  // token slots
    constexpr uint32_t kPageSize = 16;
    constexpr uint64_t kRequests = 200;

    PoolPtr pool = make_pool(kPoolSize, kPageSize);
    kvp_scheduler_config config = kvp_scheduler_config_default();  // SGLang's defaults
    config.chunked_prefill_size = 1024;  // small chunks so long prompts interleave
    config.max_running_requests = 64;    // request slots of the engine
    SchedulerPtr scheduler = make_scheduler(config, pool.get());
    Engine engine(pool.get(), scheduler.get());

    // A reproducible workload: 200 requests arriving over about 400 steps, prompts of
    // 16..3000 tokens (every 50th one longer than the whole pool: it is rejected), up to
    // 512 new tokens, EOS somewhere before max_new_tokens.
    std::mt19937_64 rng(2024);
    auto uniform = [&rng](uint64_t lo, uint64_t hi) { return lo + rng() % (hi - lo + 1); };
    uint64_t next_id = 0, rejected = 0, steps = 0, prefill_steps = 0;
    while (next_id < kRequests || !engine.idle()) {
        if (next_id < kRequests && uniform(0, 1) == 0) {
            Request r;
            r.id = next_id++;
            r.prompt_len = r.id % 50 == 49 ? 2 * kPoolSize : uniform(16, 3000);
            r.max_new_tokens = uniform(1, 512);
            r.eos_after = uniform(1, r.max_new_tokens);
            if (!engine.submit(r)) ++rejected;
        }
        if (engine.step() == KVP_STEP_KIND_PREFILL) ++prefill_steps;
        expect(++steps < 1000000, "the workload does not drain");
    }

    kvp_scheduler_stats stats{};
    kvp_check(kvp_scheduler_get_stats(scheduler.get(), &stats), "kvp_scheduler_get_stats");
    uint64_t available = 0;
    kvp_check(kvp_pool_available_size(pool.get(), &available), "kvp_pool_available_size");
    kvp_pool_stats pool_stats{};
    kvp_check(kvp_pool_get_stats(pool.get(), &pool_stats), "kvp_pool_get_stats");

    std::printf("serving_loop: %" PRIu64 " requests, %" PRIu64 " finished, %" PRIu64
                " aborted, %" PRIu64 " rejected as unfittable\n",
                kRequests, engine.finished(), engine.aborted(), rejected);
    std::printf("serving_loop: %" PRIu64 " steps (%" PRIu64 " prefill, %" PRIu64
                " decode), %" PRIu64 " prefill chunks, %" PRIu64 " retractions\n",
                steps, prefill_steps, stats.decode_steps, stats.chunks, engine.retracted());
    std::printf("serving_loop: peak KV use %" PRIu64 " of %" PRIu64 " pages, %" PRIu64
                " of %" PRIu64 " slots free at the end\n",
                pool_stats.pages_in_use_peak, kPoolSize / kPageSize, available, kPoolSize);

    expect(engine.finished() + engine.aborted() + rejected == kRequests, "requests were lost");
    expect(engine.aborted() == 0, "a request was aborted");
    expect(stats.finished == engine.finished(), "finished counts differ");
    expect(stats.waiting + stats.chunking + stats.running == 0, "the scheduler is not empty");
    expect(available == kPoolSize, "KV slots leaked");
    expect(pool_stats.failed_allocations == 0, "an allocation failed");
    std::printf("serving_loop: OK\n");
    return 0;
}

}  // namespace

int main() {
    try {
        return run();
    } catch (const std::exception &e) {
        std::fprintf(stderr, "serving_loop: %s\n", e.what());
        return 1;
    }
}
