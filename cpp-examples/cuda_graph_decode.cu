// cuda_graph_decode.cu — KV slot allocation inside a captured CUDA graph (CUDA C++17,
// kvpool.hpp): multi-step decode reservations (docs/graph-decode.md).
//
// An engine that replays its decode step as a CUDA graph cannot call an allocator whose
// decisions are made on the host. kvpool splits decode allocation in two:
//
//   reserve   pool.reserve_decode_async(lens_host, lens, last_loc, K, stream): the host
//             checks the shortage and plans; one kernel takes every page K decode steps of
//             the batch will need (in the order K alloc_decode calls would) and computes the
//             K x batch slot table. Can fail cleanly (a status, nothing changed).
//   step      reservation.step_async(req_to_token, rows, out, stream): ONE small kernel with
//             fixed arguments — captured once into the graph, replayed once per step. It
//             writes the step's slots to out (out_cache_loc) and into req_to_token, and
//             advances a step counter in device memory.
//   finish    pool.finish_reservation_async(reservation, steps_used, stream): the device
//             checks its counter, unused pages go back, partly used pages are rewound.
//
// The program checks that K replays of the captured step give exactly the slots K uncaptured
// alloc_decode_async calls give on an identical second pool (and the same req_to_token
// entries), finishes, then replays once more past the reservation to show the fault (the
// step writes the padding slot 0 and allocates nothing). Then it times both ways of
// allocating a decode step: the median device time of one graph replay vs one uncaptured
// alloc_decode_async (CUDA events around each, after warm-up), and the median host time of
// cudaGraphLaunch vs the uncaptured call.
//
// Build: cpp-examples/CMakeLists.txt builds it when a CUDA compiler is found; by hand (as
// scripts/gpu/run.sh does): nvcc -O2 -std=c++17 -arch=sm_90 -Iinclude
// cpp-examples/cuda_graph_decode.cu -L<lib dir> -lkvpool -o cuda_graph_decode
// Exits 0 with "cuda_graph_decode: OK", 77 without a CUDA device, 1 on failure.

#include "kvpool.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

constexpr uint64_t kPoolSize = 1 << 16;  // token slots (4,096 pages of 16)
constexpr uint32_t kPageSize = 16;
constexpr int kBatch = 8;                 // requests of the checked batch
constexpr uint32_t kSteps = 40;           // reserved decode steps
constexpr int kMaxContext = 256;          // req_to_token row length
constexpr int kTimedBatch = 64;           // requests of the timed batch
constexpr uint32_t kTimedSteps = 512;     // steps timed each way (after kWarmup)
constexpr uint32_t kWarmup = 32;

void cuda_check(cudaError_t status, const char *what) {
    if (status != cudaSuccess) {
        throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(status));
    }
}

void expect(bool ok, const std::string &what) {
    if (!ok) throw std::logic_error("check failed: " + what);
}

template <class T>
T *device_alloc(std::size_t n) {
    void *p = nullptr;
    cuda_check(cudaMalloc(&p, std::max<std::size_t>(n, 1) * sizeof(T)), "cudaMalloc");
    return static_cast<T *>(p);
}

template <class T>
void to_device(T *dst, const std::vector<T> &src, cudaStream_t stream) {
    cuda_check(cudaMemcpyAsync(dst, src.data(), src.size() * sizeof(T), cudaMemcpyHostToDevice,
                               stream),
               "cudaMemcpyAsync H2D");
    cuda_check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");  // src is pageable
}

template <class T>
std::vector<T> to_host(const T *src, std::size_t n, cudaStream_t stream) {
    std::vector<T> out(n);
    cuda_check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    cuda_check(cudaMemcpy(out.data(), src, n * sizeof(T), cudaMemcpyDeviceToHost), "cudaMemcpy");
    return out;
}

kvpool::pool device_pool() { return kvpool::pool::create_cuda<int64_t>(0, kPoolSize, kPageSize); }

// A batch prefilled to `lens` on `pool`; returns each request's last slot (-1 if empty).
std::vector<int64_t> prefill(kvpool::pool &pool, const std::vector<int64_t> &lens,
                             cudaStream_t stream) {
    const std::size_t n = lens.size();
    int64_t total = 0;
    for (int64_t l : lens) total += l;
    const std::vector<int64_t> zeros(n, 0), none(n, -1);
    int64_t *prefix_d = device_alloc<int64_t>(n), *seq_d = device_alloc<int64_t>(n);
    int64_t *none_d = device_alloc<int64_t>(n), *out_d = device_alloc<int64_t>(total);
    to_device(prefix_d, zeros, stream);
    to_device(seq_d, lens, stream);
    to_device(none_d, none, stream);
    pool.alloc_extend_async(zeros, lens, kvpool::device<const int64_t>(prefix_d, n),
                            kvpool::device<const int64_t>(seq_d, n),
                            kvpool::device<const int64_t>(none_d, n),
                            static_cast<std::size_t>(total),
                            kvpool::device(out_d, static_cast<std::size_t>(total)), stream);
    const std::vector<int64_t> slots = to_host(out_d, static_cast<std::size_t>(total), stream);
    std::vector<int64_t> last(n, -1);
    int64_t at = 0;
    for (std::size_t i = 0; i < n; ++i) {
        at += lens[i];
        if (lens[i] > 0) last[i] = slots[static_cast<std::size_t>(at - 1)];
    }
    for (void *p : {static_cast<void *>(prefix_d), static_cast<void *>(seq_d),
                    static_cast<void *>(none_d), static_cast<void *>(out_d)})
        cuda_check(cudaFree(p), "cudaFree");
    return last;
}

// Uncaptured decode steps on `pool`: step s writes out_all[s * n .. (s + 1) * n), continuing
// from last_d (step 0) or the previous step's slots. seq_all holds every step's lengths
// (device, uploaded once), seq_host the same on the host.
void plain_decodes(kvpool::pool &pool, const std::vector<int64_t> &seq_host, const int64_t *seq_all,
                   const int64_t *last_d, int64_t *out_all, std::size_t n, uint32_t first,
                   uint32_t count, cudaStream_t stream, std::vector<cudaEvent_t> *marks,
                   std::vector<double> *host_us) {
    for (uint32_t s = first; s < first + count; ++s) {
        const std::vector<int64_t> seq(seq_host.begin() + s * n, seq_host.begin() + (s + 1) * n);
        const int64_t *last = s == 0 ? last_d : out_all + (s - 1) * n;
        if (marks) cuda_check(cudaEventRecord((*marks)[2 * (s - first)], stream), "cudaEventRecord");
        const auto t0 = std::chrono::steady_clock::now();
        pool.alloc_decode_async(seq, kvpool::device<const int64_t>(seq_all + s * n, n),
                                kvpool::device<const int64_t>(last, n),
                                kvpool::device(out_all + s * n, n), stream);
        const auto t1 = std::chrono::steady_clock::now();
        if (marks) cuda_check(cudaEventRecord((*marks)[2 * (s - first) + 1], stream), "cudaEventRecord");
        if (host_us) host_us->push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    }
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0.0 : v[v.size() / 2];
}

std::vector<double> elapsed_us(const std::vector<cudaEvent_t> &marks) {
    std::vector<double> us;
    for (std::size_t k = 0; k + 1 < marks.size(); k += 2) {
        float ms = 0;
        cuda_check(cudaEventElapsedTime(&ms, marks[k], marks[k + 1]), "cudaEventElapsedTime");
        us.push_back(1000.0 * ms);
    }
    return us;
}

// Every step's lengths: request i holds lens[i] tokens before step 0.
std::vector<int64_t> step_lengths(const std::vector<int64_t> &lens, uint32_t steps) {
    std::vector<int64_t> seq;
    for (uint32_t s = 0; s < steps; ++s)
        for (int64_t l : lens) seq.push_back(l + s + 1);
    return seq;
}

int check_replays(cudaStream_t stream) {
    kvpool::pool a = device_pool(), b = device_pool();
    const std::vector<int64_t> lens{0, 1, 15, 16, 17, 40, 3, 31};
    const std::size_t n = lens.size();
    const std::vector<int64_t> last = prefill(a, lens, stream);
    expect(prefill(b, lens, stream) == last, "the two pools prefill alike");

    // The engine's buffers: req_to_token (int32, as SGLang's), rows, out_cache_loc.
    int32_t *req_to_token = device_alloc<int32_t>(kBatch * kMaxContext);
    cuda_check(cudaMemsetAsync(req_to_token, 0, kBatch * kMaxContext * sizeof(int32_t), stream),
               "cudaMemsetAsync");
    const std::vector<int64_t> rows{7, 6, 5, 4, 3, 2, 1, 0};
    int64_t *rows_d = device_alloc<int64_t>(n), *lens_d = device_alloc<int64_t>(n);
    int64_t *last_d = device_alloc<int64_t>(n), *out_d = device_alloc<int64_t>(n);
    int64_t *history = device_alloc<int64_t>(n * kSteps);
    to_device(rows_d, rows, stream);
    to_device(lens_d, lens, stream);
    to_device(last_d, last, stream);
    const kvp_req_table table = kvpool::req_table(req_to_token, kBatch, kMaxContext);

    // Reserve K steps on pool a, capture one step into a graph.
    kvpool::decode_reservation res = a.reserve_decode_async(
        lens, kvpool::device<const int64_t>(lens_d, n), kvpool::device<const int64_t>(last_d, n),
        kSteps, stream);
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    cuda_check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), "cudaStreamBeginCapture");
    res.step_async(table, kvpool::device<const int64_t>(rows_d, n), kvpool::device(out_d, n), stream);
    cuda_check(cudaStreamEndCapture(stream, &graph), "cudaStreamEndCapture");
    cuda_check(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");

    // K replays (each step's out copied aside) against K plain decodes on pool b.
    for (uint32_t s = 0; s < kSteps; ++s) {
        cuda_check(cudaGraphLaunch(exec, stream), "cudaGraphLaunch");
        cuda_check(cudaMemcpyAsync(history + s * n, out_d, n * sizeof(int64_t),
                                   cudaMemcpyDeviceToDevice, stream),
                   "cudaMemcpyAsync D2D");
    }
    const std::vector<int64_t> seq_host = step_lengths(lens, kSteps);
    int64_t *seq_all = device_alloc<int64_t>(seq_host.size());
    int64_t *plain = device_alloc<int64_t>(n * kSteps);
    to_device(seq_all, seq_host, stream);
    plain_decodes(b, seq_host, seq_all, last_d, plain, n, 0, kSteps, stream, nullptr, nullptr);
    const std::vector<int64_t> got = to_host(history, n * kSteps, stream);
    const std::vector<int64_t> want = to_host(plain, n * kSteps, stream);
    expect(got == want, "graph replays give the slots of plain alloc_decode calls");
    const std::vector<int32_t> r2t = to_host(req_to_token, kBatch * kMaxContext, stream);
    for (uint32_t s = 0; s < kSteps; ++s)
        for (std::size_t i = 0; i < n; ++i)
            expect(r2t[rows[i] * kMaxContext + lens[i] + s] == want[s * n + i],
                   "req_to_token[rows[i]][lens[i] + s] holds step s's slot");

    // Finish: every step was used. Both pools are then in the same state.
    a.finish_reservation_async(res, kSteps, stream);
    a.check_device();
    expect(a.available_size() == b.available_size(), "equal free slots after the finish");
    uint64_t *digests = device_alloc<uint64_t>(2);
    a.digest_async(digests, stream);
    b.digest_async(digests + 1, stream);
    const std::vector<uint64_t> d = to_host(digests, 2, stream);
    a.check_device();
    expect(d[0] == d[1], "equal state digests after the finish");
    std::printf("cuda_graph_decode: %u graph replays == %u plain alloc_decode_async calls "
                "(%zu requests, %llu pages reserved)\n",
                kSteps, kSteps, n, static_cast<unsigned long long>(res.pages()));

    // One replay too many: the step writes the padding slot 0, allocates nothing, faults.
    const uint64_t free_before = a.available_size();
    cuda_check(cudaGraphLaunch(exec, stream), "cudaGraphLaunch");
    const std::vector<int64_t> past = to_host(out_d, n, stream);
    expect(std::all_of(past.begin(), past.end(), [](int64_t x) { return x == 0; }),
           "a step past the reservation writes the padding slot 0");
    try {
        a.check_device();
        expect(false, "a step past the reservation faults the pool");
    } catch (const kvpool::error &e) {
        expect(e.status() == KVP_STATUS_DEVICE_FAULT, "the fault is KVP_STATUS_DEVICE_FAULT");
        std::printf("cuda_graph_decode: replay past the reservation: %s\n", e.message().c_str());
    }
    expect(a.available_size() == free_before, "nothing was allocated");
    a.clear_async(stream);
    cuda_check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");

    cuda_check(cudaGraphExecDestroy(exec), "cudaGraphExecDestroy");
    cuda_check(cudaGraphDestroy(graph), "cudaGraphDestroy");
    for (void *p : {static_cast<void *>(req_to_token), static_cast<void *>(rows_d),
                    static_cast<void *>(lens_d), static_cast<void *>(last_d),
                    static_cast<void *>(out_d), static_cast<void *>(history),
                    static_cast<void *>(seq_all), static_cast<void *>(plain),
                    static_cast<void *>(digests)})
        cuda_check(cudaFree(p), "cudaFree");
    return 0;
}

// Median device and host time per decode step: graph replay of the captured step vs an
// uncaptured alloc_decode_async, both for a batch of kTimedBatch requests.
void time_steps(cudaStream_t stream) {
    const uint32_t steps = kWarmup + kTimedSteps;
    std::vector<int64_t> lens(kTimedBatch);
    for (int i = 0; i < kTimedBatch; ++i) lens[i] = 1 + (i * 37) % 200;
    const std::size_t n = lens.size();
    std::vector<cudaEvent_t> marks(2 * kTimedSteps);
    for (cudaEvent_t &e : marks) cuda_check(cudaEventCreate(&e), "cudaEventCreate");

    // Graph replays (steps <= 1,024 fit one reservation).
    kvpool::pool a = device_pool();
    const std::vector<int64_t> last = prefill(a, lens, stream);
    int64_t *lens_d = device_alloc<int64_t>(n), *last_d = device_alloc<int64_t>(n);
    int64_t *out_d = device_alloc<int64_t>(n);
    to_device(lens_d, lens, stream);
    to_device(last_d, last, stream);
    kvpool::decode_reservation res = a.reserve_decode_async(
        lens, kvpool::device<const int64_t>(lens_d, n), kvpool::device<const int64_t>(last_d, n),
        steps, stream);
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    cuda_check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), "cudaStreamBeginCapture");
    res.step_async(kvpool::device(out_d, n), stream);
    cuda_check(cudaStreamEndCapture(stream, &graph), "cudaStreamEndCapture");
    cuda_check(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");
    for (uint32_t s = 0; s < kWarmup; ++s) cuda_check(cudaGraphLaunch(exec, stream), "cudaGraphLaunch");
    std::vector<double> graph_host_us;
    for (uint32_t s = 0; s < kTimedSteps; ++s) {
        cuda_check(cudaEventRecord(marks[2 * s], stream), "cudaEventRecord");
        const auto t0 = std::chrono::steady_clock::now();
        cuda_check(cudaGraphLaunch(exec, stream), "cudaGraphLaunch");
        const auto t1 = std::chrono::steady_clock::now();
        cuda_check(cudaEventRecord(marks[2 * s + 1], stream), "cudaEventRecord");
        graph_host_us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    }
    cuda_check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    const std::vector<double> graph_dev_us = elapsed_us(marks);
    a.finish_reservation_async(res, steps, stream);
    a.check_device();

    // Uncaptured alloc_decode_async on an identical pool.
    kvpool::pool b = device_pool();
    expect(prefill(b, lens, stream) == last, "identical pools");
    const std::vector<int64_t> seq_host = step_lengths(lens, steps);
    int64_t *seq_all = device_alloc<int64_t>(seq_host.size());
    int64_t *plain = device_alloc<int64_t>(n * steps);
    to_device(seq_all, seq_host, stream);
    plain_decodes(b, seq_host, seq_all, last_d, plain, n, 0, kWarmup, stream, nullptr, nullptr);
    std::vector<double> plain_host_us;
    plain_decodes(b, seq_host, seq_all, last_d, plain, n, kWarmup, kTimedSteps, stream, &marks,
                  &plain_host_us);
    cuda_check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    const std::vector<double> plain_dev_us = elapsed_us(marks);
    b.check_device();

    std::printf("cuda_graph_decode: decode step of %zu requests, median of %u after %u warm-up:\n",
                n, kTimedSteps, kWarmup);
    std::printf("  device time  graph replay of the reserved step %7.2f us   "
                "alloc_decode_async %7.2f us\n",
                median(graph_dev_us), median(plain_dev_us));
    std::printf("  host time    cudaGraphLaunch                   %7.2f us   "
                "alloc_decode_async %7.2f us\n",
                median(graph_host_us), median(plain_host_us));

    cuda_check(cudaGraphExecDestroy(exec), "cudaGraphExecDestroy");
    cuda_check(cudaGraphDestroy(graph), "cudaGraphDestroy");
    for (cudaEvent_t e : marks) cuda_check(cudaEventDestroy(e), "cudaEventDestroy");
    for (void *p : {static_cast<void *>(lens_d), static_cast<void *>(last_d),
                    static_cast<void *>(out_d), static_cast<void *>(seq_all),
                    static_cast<void *>(plain)})
        cuda_check(cudaFree(p), "cudaFree");
}

int run() {
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
        std::printf("cuda_graph_decode: SKIPPED (no CUDA device)\n");
        return 77;
    }
    kvpool::check_abi_version();
    cuda_check(cudaSetDevice(0), "cudaSetDevice");
    cudaStream_t stream = nullptr;
    cuda_check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
    check_replays(stream);
    time_steps(stream);
    cuda_check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    cuda_check(cudaStreamDestroy(stream), "cudaStreamDestroy");
    std::printf("cuda_graph_decode: OK\n");
    return 0;
}

}  // namespace

int main() {
    try {
        return run();
    } catch (const kvpool::error &e) {
        if (e.status() == KVP_STATUS_CUDA_UNAVAILABLE) {
            std::printf("cuda_graph_decode: SKIPPED (%s)\n", e.what());
            return 77;
        }
        std::fprintf(stderr, "cuda_graph_decode: %s\n", e.what());
        return 1;
    } catch (const std::exception &e) {
        std::fprintf(stderr, "cuda_graph_decode: %s\n", e.what());
        return 1;
    }
}
