// serving_loop.cpp — a continuous-batching serving loop on kvpool (C++17, kvpool.hpp).
//
// What an inference engine's scheduler thread does every iteration, with kvpool doing the
// bookkeeping SGLang does in Python:
//
//   1. submit the requests that arrived          scheduler::submit   (kvp_scheduler_submit)
//   2. plan the step                               scheduler::step     (kvp_scheduler_step)
//   3. free the KV of retracted / preempted / aborted requests
//   4. allocate KV for the prefill entries         one pool::alloc_extend
//   5. allocate KV for the decode rows             one pool::alloc_decode
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
// kvpool.hpp wraps the C ABI (kvpool.h): handles own themselves, and a failing call throws
// kvpool::error with the status and kvp_last_error_message().
//
// Build and run: see cpp-examples/README.md.

#include "kvpool.hpp"

#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstddef>
#include <random>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

namespace {

// An engine invariant; a violation is a bug in the engine or in kvpool.
void expect(bool ok, const std::string &what) {
    if (!ok) throw std::logic_error("invariant violated: " + what);
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
    Engine(kvpool::pool &pool, kvpool::scheduler &scheduler) : pool_(pool), scheduler_(scheduler) {}

    // Returns false if the request can never fit the pool (fail it back to the client).
    bool submit(const Request &request) {
        kvp_request desc{};
        desc.id = request.id;
        desc.input_len = request.prompt_len;
        desc.max_new_tokens = request.max_new_tokens;
        const kvp_submit_result result = scheduler_.submit(desc);
        if (!result.queued) {
            expect(result.needed >= result.capacity, "an unfittable request fits");
            return false;
        }
        live_.emplace(request.id, request);
        return true;
    }

    // One scheduling iteration. Returns the plan's kind.
    kvp_step_kind step() {
        // Attached scheduler: the `available` argument is not needed (read from the pool).
        // The plan's arrays belong to the scheduler and stay valid until the next step.
        const kvpool::step_plan plan = scheduler_.step(0, /*evictable=*/0, /*allow_prefill=*/true);
        free_evicted(plan.retracted, /*gone=*/false);
        free_evicted(plan.preempted, /*gone=*/false);
        free_evicted(plan.aborted, /*gone=*/true);
        retracted_ += plan.retracted.size();
        allocate_prefill(plan.prefill);
        allocate_decode(plan.decode);
        // ... the model's forward pass would run here, reading/writing KV at the rows ...
        finish_done_requests();
        check_rows();
        return plan.kind;
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
    void free_evicted(kvpool::span<const kvp_evicted> evicted, bool gone) {
        for (const kvp_evicted &e : evicted) {
            Request &r = get(e.id);
            expect(e.kv_len == r.row.size(), "evicted kv_len is not the row length");
            free_row(r);
            if (gone) {
                live_.erase(e.id);
                ++aborted_;
            }
        }
    }

    void free_row(Request &r) {
        pool_.free_indices(r.row);  // an empty row is a no-op
        r.row.clear();
    }

    // One alloc_extend for the whole prefill batch: request i grows from prefix_lens[i]
    // to seq_lens[i] tokens; last_loc[i] is the slot of its last cached token (-1: none).
    void allocate_prefill(kvpool::span<const kvp_prefill_entry> prefill) {
        if (prefill.empty()) return;
        std::vector<int64_t> prefix_lens, seq_lens, last_loc;
        for (const kvp_prefill_entry &e : prefill) {
            const Request &r = get(e.id);
            expect(e.prefix_len == r.row.size(), "prefill prefix_len is not the row length");
            prefix_lens.push_back(static_cast<int64_t>(e.prefix_len));
            seq_lens.push_back(static_cast<int64_t>(e.prefix_len + e.extend_len));
            last_loc.push_back(r.row.empty() ? -1 : r.row.back());
        }
        // The scheduler admitted only what fits: this cannot run out of slots.
        const std::vector<int64_t> slots = pool_.alloc_extend(prefix_lens, seq_lens, last_loc);
        auto at = slots.begin();
        for (const kvp_prefill_entry &e : prefill) {
            Request &r = get(e.id);
            r.row.insert(r.row.end(), at, at + static_cast<std::ptrdiff_t>(e.extend_len));
            at += static_cast<std::ptrdiff_t>(e.extend_len);
            if (!e.chunked) ++r.generated;  // a finished prefill samples the first token
        }
    }

    // One alloc_decode for the decode rows: each sequence grows by one token.
    void allocate_decode(kvpool::span<const uint64_t> decode) {
        if (decode.empty()) return;
        std::vector<int64_t> seq_lens, last_loc;
        for (uint64_t id : decode) {
            const Request &r = get(id);
            expect(!r.row.empty(), "a decoding request has no KV");
            seq_lens.push_back(static_cast<int64_t>(r.row.size()) + 1);  // with the new token
            last_loc.push_back(r.row.back());
        }
        const std::vector<int64_t> slots = pool_.alloc_decode(seq_lens, last_loc);
        for (size_t i = 0; i < decode.size(); ++i) {
            Request &r = get(decode[i]);
            r.row.push_back(slots[i]);
            ++r.generated;
        }
    }

    // Requests that emitted EOS (or hit max_new_tokens) leave; their frees are batched in a
    // free group, as SGLang does for one step's results.
    void finish_done_requests() {
        std::vector<uint64_t> done;
        for (const auto &[id, r] : live_) {
            const kvp_request_state state = scheduler_.request(id);
            if (state.phase == KVP_PHASE_RUNNING && r.generated >= r.eos_after) done.push_back(id);
        }
        if (done.empty()) return;
        auto group = pool_.free_group();
        for (uint64_t id : done) {
            Request &r = get(id);
            const uint64_t kv_len = scheduler_.finish(id);
            expect(kv_len == r.row.size(), "finished kv_len is not the row length");
            free_row(r);
            live_.erase(id);
            ++finished_;
        }
        group.end();
    }

    // The scheduler and the engine agree on every live request, and the pool holds exactly
    // the pages of the live rows.
    void check_rows() {
        const uint64_t page_size = pool_.page_size();
        uint64_t pages = 0;
        for (const auto &[id, r] : live_) {
            const kvp_request_state state = scheduler_.request(id);
            expect(state.kv_len == r.row.size(),
                   "request " + std::to_string(id) + ": kv_len " +
                       std::to_string(state.kv_len) + " != row length " +
                       std::to_string(r.row.size()));
            expect(state.output_len == r.generated,
                   "request " + std::to_string(id) + ": output count differs");
            pages += (r.row.size() + page_size - 1) / page_size;
        }
        expect(pool_.stats().pages_in_use == pages, "pages in use != pages of the live rows");
    }

    kvpool::pool &pool_;
    kvpool::scheduler &scheduler_;
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

    // usable slots; the KV buffers need kPoolSize + kPageSize rows
    kvpool::pool pool = kvpool::pool::create(kPoolSize, kPageSize);
    kvp_scheduler_config config = kvp_scheduler_config_default();  // SGLang's defaults
    config.chunked_prefill_size = 1024;  // small chunks so long prompts interleave
    config.max_running_requests = 64;    // request slots of the engine
    // Attached to the pool: capacity and page size come from it, and it keeps it alive.
    kvpool::scheduler scheduler(config, pool);
    Engine engine(pool, scheduler);

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

    const kvp_scheduler_stats stats = scheduler.stats();
    const uint64_t available = pool.available_size();
    const kvp_pool_stats pool_stats = pool.stats();

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
