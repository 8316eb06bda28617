// cuda_batch.cu — an engine's KV bookkeeping on a device pool (CUDA C++17, kvpool.hpp).
//
// The pool's state lives on the GPU and every kvpool call below enqueues kernels on the
// engine's one stream and returns without synchronizing, so KV allocation runs in stream
// order with the engine's own kernels — no host round trip per step:
//
//   prefill    H2D copy of the batch's lengths → pool.alloc_extend_async → write_kv kernel
//              (stores each new token's slot in req_to_token and "KV" at that slot)
//   decode     H2D copy of the lengths → gather_last_loc kernel (last_loc from req_to_token,
//              on the device) → pool.alloc_decode_async → write_kv kernel
//   finish     checksum kernel over the request's KV → pool.free_segment_async of its
//              req_to_token row, inside a free group ended on the stream
//   every step pool.check_device(): polls for a fault a kernel found, without a sync
//
// The host knows every length (it schedules the requests), never a slot: slots exist only
// on the device, and last_loc is gathered there. The program synchronizes once, at the end,
// and then checks that every request read back exactly the KV it wrote (a slot handed to two
// live requests, or the padding slot 0, would break a checksum), that the pool is full again
// and that no device fault happened.
//
// What must stay alive until the stream passes a call (nothing is freed before the final
// cudaStreamSynchronize here, which is the simplest way to honour all of it):
//   - the device buffers a kvpool call reads or writes (lengths, last_loc, out, rows);
//   - the pinned host memory a cudaMemcpyAsync reads: each step stages its lengths in its own
//     slice of `staging`, never overwritten, because the copy runs later than the host code;
//   - host arrays passed to kvpool as `*_host` are read during the call only (plain vectors);
//   - a req_to_token row passed to free_segment_async must not change until the stream passes
//     the free: a later prefill reusing the row writes it with a kernel on the same stream,
//     so it is ordered after the free.
//
// Build: cpp-examples/CMakeLists.txt builds it when a CUDA compiler is found (README.md).
// Exits 0 with "cuda_batch: OK", 77 (ctest: skipped) without a CUDA device, 1 on failure.

#include "kvpool.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <cinttypes>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

constexpr uint64_t kPoolSize = 4096;  // token slots (256 pages of 16)
constexpr uint32_t kPageSize = 16;
constexpr int kRequests = 24;         // request ids 0..23, one req_to_token row each
constexpr int kMaxContext = 256;      // req_to_token row length
constexpr int kChunk = 48;            // prefill chunk per request per step
constexpr int kMaxSteps = 1000;

void cuda_check(cudaError_t status, const char *what) {
    if (status != cudaSuccess) {
        throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(status));
    }
}

void expect(bool ok, const std::string &what) {
    if (!ok) throw std::logic_error("check failed: " + what);
}

// The "KV" token `pos` of request `req` stores (an engine would store K and V vectors).
__host__ __device__ int32_t kv_value(int32_t req, int64_t pos) {
    return (req + 1) * 100000 + static_cast<int32_t>(pos);
}

// ---- the engine's kernels (all on the same stream as kvpool's) ------------------------------

// last_loc[i] = slot of batch entry i's last cached token (-1 if it has none).
__global__ void gather_last_loc(const int64_t *req_to_token, const int32_t *batch_req,
                                const int64_t *lens_before, int64_t *last_loc, int batch) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= batch) return;
    const int64_t len = lens_before[i];
    last_loc[i] = len > 0 ? req_to_token[int64_t{batch_req[i]} * kMaxContext + len - 1] : -1;
}

// Block i handles batch entry i: tokens [prefix_lens[i], seq_lens[i]) got the slots
// out[out_start[i] ...]; record them in the request's row and write their "KV".
__global__ void write_kv(const int64_t *out, const int64_t *out_start, const int32_t *batch_req,
                         const int64_t *prefix_lens, const int64_t *seq_lens,
                         int64_t *req_to_token, int32_t *kv, uint64_t kv_rows,
                         unsigned int *bad_slots) {
    const int i = blockIdx.x;
    const int32_t req = batch_req[i];
    for (int64_t pos = prefix_lens[i] + threadIdx.x; pos < seq_lens[i]; pos += blockDim.x) {
        const int64_t slot = out[out_start[i] + pos - prefix_lens[i]];
        if (slot <= 0 || static_cast<uint64_t>(slot) >= kv_rows) {
            atomicAdd(bad_slots, 1u);  // never the padding slot, never outside the buffer
            continue;
        }
        req_to_token[int64_t{req} * kMaxContext + pos] = slot;
        kv[slot] = kv_value(req, pos);
    }
}

// sums[req] = sum of the KV the request reads back through its row (what attention reads).
__global__ void checksum(const int64_t *row, int64_t len, const int32_t *kv,
                         unsigned long long *sum) {
    unsigned long long local = 0;
    for (int64_t pos = threadIdx.x; pos < len; pos += blockDim.x) {
        local += static_cast<unsigned long long>(kv[row[pos]]);
    }
    atomicAdd(sum, local);
}

// ---- host-side scheduling state ---------------------------------------------------------------

struct Request {
    int64_t prompt_len = 0;
    int64_t max_len = 0;   // prompt + output tokens; finishes at this length
    int64_t len = 0;       // tokens in the KV cache (the host knows lengths, not slots)
    int arrival_step = 0;
    bool done = false;
};

// Device buffers of one batch (sized for the largest batch), reused every step: kernels and
// kvpool calls on one stream run in order, so step k+1's writes follow step k's reads.
struct DeviceBatch {
    int32_t *batch_req = nullptr;    // request id of batch entry i
    int64_t *prefix_lens = nullptr;  // tokens cached before this step
    int64_t *seq_lens = nullptr;     // tokens after this step
    int64_t *out_start = nullptr;    // where entry i's slots start in `out`
    int64_t *last_loc = nullptr;
    int64_t *out = nullptr;          // the new slots (SGLang's out_cache_loc)
};

int64_t checksum_expected(int32_t req, int64_t len) {
    int64_t sum = 0;
    for (int64_t pos = 0; pos < len; ++pos) sum += kv_value(req, pos);
    return sum;
}

int run() {
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
        std::printf("cuda_batch: SKIPPED (no CUDA device)\n");
        return 77;
    }
    kvpool::check_abi_version();
    cuda_check(cudaSetDevice(0), "cudaSetDevice");

    // The pool uses device 0's primary context, which the CUDA runtime uses too.
    kvpool::pool pool = kvpool::pool::create_cuda<int64_t>(0, kPoolSize, kPageSize);
    const uint64_t kv_rows = pool.info().kv_rows;  // size + page_size: row 0 is padding

    cudaStream_t stream = nullptr;
    cuda_check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");

    // The engine's device memory.
    DeviceBatch d;
    const std::size_t max_tokens = static_cast<std::size_t>(kRequests) * kChunk;
    cuda_check(cudaMalloc(&d.batch_req, kRequests * sizeof(int32_t)), "cudaMalloc");
    cuda_check(cudaMalloc(&d.prefix_lens, kRequests * sizeof(int64_t)), "cudaMalloc");
    cuda_check(cudaMalloc(&d.seq_lens, kRequests * sizeof(int64_t)), "cudaMalloc");
    cuda_check(cudaMalloc(&d.out_start, kRequests * sizeof(int64_t)), "cudaMalloc");
    cuda_check(cudaMalloc(&d.last_loc, kRequests * sizeof(int64_t)), "cudaMalloc");
    cuda_check(cudaMalloc(&d.out, max_tokens * sizeof(int64_t)), "cudaMalloc");
    int64_t *req_to_token = nullptr;  // [kRequests][kMaxContext]
    int32_t *kv = nullptr;            // the fake KV buffer: kv_rows rows of one int32
    unsigned long long *sums = nullptr;
    unsigned int *bad_slots = nullptr;
    const std::size_t table = static_cast<std::size_t>(kRequests) * kMaxContext;
    cuda_check(cudaMalloc(&req_to_token, table * sizeof(int64_t)), "cudaMalloc");
    cuda_check(cudaMalloc(&kv, kv_rows * sizeof(int32_t)), "cudaMalloc");
    cuda_check(cudaMalloc(&sums, kRequests * sizeof(unsigned long long)), "cudaMalloc");
    cuda_check(cudaMalloc(&bad_slots, sizeof(unsigned int)), "cudaMalloc");
    cuda_check(cudaMemsetAsync(kv, 0, kv_rows * sizeof(int32_t), stream), "cudaMemsetAsync");
    cuda_check(cudaMemsetAsync(sums, 0, kRequests * sizeof(unsigned long long), stream),
               "cudaMemsetAsync");
    cuda_check(cudaMemsetAsync(bad_slots, 0, sizeof(unsigned int), stream), "cudaMemsetAsync");

    // Pinned staging, one slice per step (see the header comment): the source of each
    // step's cudaMemcpyAsync, which runs when the stream gets there, after the host moved on.
    struct PinnedStep {
        int32_t batch_req[kRequests];
        int64_t prefix_lens[kRequests], seq_lens[kRequests], out_start[kRequests];
    };
    PinnedStep *staging = nullptr;
    cuda_check(cudaMallocHost(&staging, sizeof(PinnedStep) * kMaxSteps), "cudaMallocHost");

    // A reproducible workload: prompts of 1..200 tokens, 1..50 output tokens, a third of the
    // requests arriving later (their prefills interleave with the others' decodes).
    std::vector<Request> requests(kRequests);
    uint64_t seed = 12345;
    auto next = [&seed](int64_t lo, int64_t hi) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        return lo + static_cast<int64_t>((seed >> 33) % static_cast<uint64_t>(hi - lo + 1));
    };
    for (int r = 0; r < kRequests; ++r) {
        requests[r].prompt_len = next(1, 200);
        requests[r].max_len = requests[r].prompt_len + next(1, 50);
        requests[r].arrival_step = r < 16 ? 0 : static_cast<int>(next(5, 60));
        expect(requests[r].max_len <= kMaxContext, "a request outgrows its row");
    }

    int finished = 0, step = 0, prefill_steps = 0, decode_steps = 0;
    uint64_t tokens = 0;
    for (; finished < kRequests; ++step) {
        expect(step < kMaxSteps, "the workload does not drain");
        PinnedStep &st = staging[step];

        // Schedule: a prefill step if any arrived request still has prompt left, else decode.
        std::vector<int> batch;
        bool prefill = false;
        for (int r = 0; r < kRequests; ++r) {
            const Request &q = requests[r];
            if (!q.done && q.arrival_step <= step && q.len < q.prompt_len) batch.push_back(r);
        }
        prefill = !batch.empty();
        if (!prefill) {
            for (int r = 0; r < kRequests; ++r) {
                const Request &q = requests[r];
                if (!q.done && q.arrival_step <= step && q.len > 0) batch.push_back(r);
            }
        }
        const int n = static_cast<int>(batch.size());
        if (n == 0) continue;  // nothing arrived yet

        // Host copies of the lengths (kvpool reads them during the call) and their pinned
        // twins for the device copies.
        std::vector<int64_t> prefix_host(n), seq_host(n);
        int64_t total = 0;
        for (int i = 0; i < n; ++i) {
            const Request &q = requests[batch[i]];
            prefix_host[i] = q.len;
            seq_host[i] = prefill ? std::min<int64_t>(q.prompt_len, q.len + kChunk) : q.len + 1;
            st.batch_req[i] = batch[i];
            st.prefix_lens[i] = prefix_host[i];
            st.seq_lens[i] = seq_host[i];
            st.out_start[i] = total;
            total += seq_host[i] - prefix_host[i];
        }
        cuda_check(cudaMemcpyAsync(d.batch_req, st.batch_req, n * sizeof(int32_t),
                                   cudaMemcpyHostToDevice, stream), "cudaMemcpyAsync");
        cuda_check(cudaMemcpyAsync(d.prefix_lens, st.prefix_lens, n * sizeof(int64_t),
                                   cudaMemcpyHostToDevice, stream), "cudaMemcpyAsync");
        cuda_check(cudaMemcpyAsync(d.seq_lens, st.seq_lens, n * sizeof(int64_t),
                                   cudaMemcpyHostToDevice, stream), "cudaMemcpyAsync");
        cuda_check(cudaMemcpyAsync(d.out_start, st.out_start, n * sizeof(int64_t),
                                   cudaMemcpyHostToDevice, stream), "cudaMemcpyAsync");
        // last_loc comes from req_to_token, on the device: the host never sees a slot.
        gather_last_loc<<<(n + 127) / 128, 128, 0, stream>>>(req_to_token, d.batch_req,
                                                             d.prefix_lens, d.last_loc, n);
        cuda_check(cudaGetLastError(), "gather_last_loc");

        const auto prefix_dev = kvpool::device<const int64_t>(d.prefix_lens, n);
        const auto seq_dev = kvpool::device<const int64_t>(d.seq_lens, n);
        const auto last_loc = kvpool::device<const int64_t>(d.last_loc, n);
        const auto out = kvpool::device(d.out, max_tokens);
        // d.prefix_lens, d.seq_lens, d.last_loc and d.out must stay allocated until the
        // stream passes the call; the kernels that fill and read them are on the same stream.
        if (prefill) {
            pool.alloc_extend_async(prefix_host, seq_host, prefix_dev, seq_dev, last_loc,
                                    static_cast<std::size_t>(total), out, stream);
            ++prefill_steps;
        } else {
            pool.alloc_decode_async(seq_host, seq_dev, last_loc, out, stream);
            ++decode_steps;
        }
        write_kv<<<n, 64, 0, stream>>>(d.out, d.out_start, d.batch_req, d.prefix_lens,
                                       d.seq_lens, req_to_token, kv, kv_rows, bad_slots);
        cuda_check(cudaGetLastError(), "write_kv");
        tokens += static_cast<uint64_t>(total);
        for (int i = 0; i < n; ++i) requests[batch[i]].len = seq_host[i];

        // ... the model's forward pass would run here, on the same stream ...

        // Requests at their final length leave: read their KV back (checksum), then free
        // their rows — one free group, ended on the stream, as SGLang batches a step's frees.
        std::vector<int> done;
        for (int r : batch) {
            if (requests[r].len == requests[r].max_len) done.push_back(r);
        }
        if (!done.empty()) {
            auto group = pool.free_group_async(stream);
            for (int r : done) {
                int64_t *row = req_to_token + static_cast<std::size_t>(r) * kMaxContext;
                const int64_t len = requests[r].len;
                checksum<<<1, 128, 0, stream>>>(row, len, kv, sums + r);
                cuda_check(cudaGetLastError(), "checksum");
                // The row must not change until the stream passes this free (nothing writes
                // it before: the request is done and its row is not reused).
                pool.free_segment_async(kvpool::device(row, kMaxContext), 0,
                                        static_cast<std::size_t>(len), stream);
                requests[r].done = true;
                ++finished;
            }
            group.end();
        }

        // A fault (double free, foreign index, bad last_loc) found by a kernel that has run
        // already; no synchronization, so work still queued is judged by a later poll.
        pool.check_device();
    }

    // The only synchronization: the stream has passed every call above.
    cuda_check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    pool.check_device();

    std::vector<unsigned long long> sums_host(kRequests);
    unsigned int bad_host = 0;
    cuda_check(cudaMemcpy(sums_host.data(), sums, kRequests * sizeof(unsigned long long),
                          cudaMemcpyDeviceToHost), "cudaMemcpy");
    cuda_check(cudaMemcpy(&bad_host, bad_slots, sizeof(unsigned int), cudaMemcpyDeviceToHost),
               "cudaMemcpy");
    expect(bad_host == 0, std::to_string(bad_host) + " slots were padding or out of range");
    for (int r = 0; r < kRequests; ++r) {
        const int64_t want = checksum_expected(r, requests[r].max_len);
        expect(static_cast<int64_t>(sums_host[r]) == want,
               "request " + std::to_string(r) + " read back KV it did not write");
    }
    const kvpool::pool::size_bound free_slots = pool.available_size_bound();
    expect(free_slots.exact, "the free count is not exact after the stream drained");
    expect(free_slots.available == kPoolSize, "KV slots leaked");
    const kvp_pool_stats stats = pool.stats();
    expect(stats.pages_in_use == 0, "pages still in use");

    std::printf("cuda_batch: %d requests, %d steps (%d prefill, %d decode), %" PRIu64
                " tokens allocated on the device\n",
                kRequests, step, prefill_steps, decode_steps, tokens);
    std::printf("cuda_batch: peak KV use %" PRIu64 " of %" PRIu64 " pages, %" PRIu64
                " of %" PRIu64 " slots free at the end\n",
                stats.pages_in_use_peak, kPoolSize / kPageSize, free_slots.available, kPoolSize);

    // Everything is idle now, so the buffers can go (cudaFree would wait for the device
    // anyway; kvpool's pool is freed by its destructor after the stream).
    cuda_check(cudaFreeHost(staging), "cudaFreeHost");
    for (void *p : {static_cast<void *>(d.batch_req), static_cast<void *>(d.prefix_lens),
                    static_cast<void *>(d.seq_lens), static_cast<void *>(d.out_start),
                    static_cast<void *>(d.last_loc), static_cast<void *>(d.out),
                    static_cast<void *>(req_to_token), static_cast<void *>(kv),
                    static_cast<void *>(sums), static_cast<void *>(bad_slots)}) {
        cuda_check(cudaFree(p), "cudaFree");
    }
    cuda_check(cudaStreamDestroy(stream), "cudaStreamDestroy");
    std::printf("cuda_batch: OK\n");
    return 0;
}

}  // namespace

int main() {
    try {
        return run();
    } catch (const kvpool::error &e) {
        if (e.status() == KVP_STATUS_CUDA_UNAVAILABLE) {
            std::printf("cuda_batch: SKIPPED (%s)\n", e.what());
            return 77;
        }
        std::fprintf(stderr, "cuda_batch: %s\n", e.what());
        return 1;
    } catch (const std::exception &e) {
        std::fprintf(stderr, "cuda_batch: %s\n", e.what());
        return 1;
    }
}
