// Where a small allocation's device time goes. kvpool's one-block kernels, compiled in from
// kernels/pool.cu and launched on a pool this program lays out itself (no library), beside
// CUDA kernels that do what SGLang's Triton kernels do (bench-gpu/baseline_bench.py's, in the
// same shape: one block of 128 threads a request, the batch's sums by brute force), each
// timed per launch in a graph of 100 launches (kvpool_bench's floor shape). Built with
// -DKVP_PROBES, the kernels record the SM clock at their probes (KVP_PROBE in the kernels:
// see pool.cu), and each phase's cycles are printed from the last launch of each replay.
//
//   nvcc -O2 -std=c++17 -arch=sm_90 -o anatomy bench-gpu/anatomy.cu
//   nvcc -O2 -std=c++17 -arch=sm_90 -DKVP_PROBES -o anatomy_probed bench-gpu/anatomy.cu
//   ./anatomy; ./anatomy_probed          (scripts/gpu/run.sh anatomy runs both)
//
// Every call's output is checked against the slots SGLang's index math gives, after the
// replays. Page size 16, int64 indices; the pool is reset once, and every case's call is
// idempotent under replay (it reads one cursor and writes the other).
#include "../kernels/pool.cu"
#include "spin.cuh"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <set>
#include <string>
#include <vector>

#define CHECK(call)                                                                           \
  do {                                                                                        \
    cudaError_t err_ = (call);                                                                \
    if (err_ != cudaSuccess) {                                                                \
      std::fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #call,               \
                   cudaGetErrorString(err_));                                                 \
      std::exit(1);                                                                           \
    }                                                                                         \
  } while (0)

using kvp::Call;
using kvp::View;

#ifdef KVP_PROBES
#define PROBE(point, dep) KVP_PROBE(point, dep)
#else
#define PROBE(point, dep) ((void)0)
#endif

// ---- the comparison kernels -----------------------------------------------------------------

__global__ void empty_kernel() {}
// An empty kernel taking kvpool's extend parameters (about 200 bytes of them).
__global__ void empty_with_params(View, Call, const long long *, const long long *,
                                  const long long *, uint32_t, uint32_t, uint32_t,
                                  unsigned long long, unsigned long long, long long *) {}

// SGLang's alloc_extend_kernel, one block a request: the batch's token and page sums up to
// this request by brute force (a block reduction), then part 1 (the prefix's partial page),
// part 2 (whole new pages) and part 3 (the new partial page) from `free_pages`.
template <int THREADS>
__global__ void __launch_bounds__(THREADS)
    sglang_extend(const long long *prefix_lens, const long long *seq_lens,
                  const long long *last_loc, const long long *free_pages, long long *out, int bs,
                  long long ps) {
  PROBE(0, 0);
  __shared__ long long sums[2][THREADS / 32];
  const int pid = blockIdx.x, t = threadIdx.x;
  long long ext = 0, pages = 0;
  for (int j = t; j <= pid && j < bs; j += THREADS) {
    const long long s = seq_lens[j], p = prefix_lens[j];
    ext += s - p;
    pages += (s + ps - 1) / ps - (p + ps - 1) / ps;
  }
  for (int o = 16; o > 0; o >>= 1) {
    ext += __shfl_xor_sync(0xffffffffu, ext, o);
    pages += __shfl_xor_sync(0xffffffffu, pages, o);
  }
  if ((t & 31) == 0) sums[0][t >> 5] = ext, sums[1][t >> 5] = pages;
  __syncthreads();
  ext = pages = 0;
  for (int w = 0; w < THREADS / 32; ++w) ext += sums[0][w], pages += sums[1][w];
  const long long seq = seq_lens[pid], pre = prefix_lens[pid], ll = last_loc[pid];
  const long long own_pages = (seq + ps - 1) / ps - (pre + ps - 1) / ps;
  const long long start = ext - (seq - pre), page_start = pages - own_pages;
  PROBE(1, start + page_start + ll);
  const long long pre_up = (pre + ps - 1) / ps * ps;
  const long long part1 = min(seq, pre_up) - pre;
  for (long long k = t; k < part1; k += THREADS) out[start + k] = ll + 1 + k;
  if (pre + part1 == seq) return;
  const long long part2 = seq / ps * ps - pre_up;
  for (long long o = t; o < part2; o += THREADS)
    out[start + part1 + o] = free_pages[page_start + o / ps] * ps + o % ps;
  PROBE(2, 0);
  if (pre + part1 + part2 == seq) return;
  const long long part3 = seq - seq / ps * ps;
  const long long last_page = free_pages[page_start + own_pages - 1];
  for (long long k = t; k < part3; k += THREADS)
    out[start + part1 + part2 + k] = last_page * ps + k;
  PROBE(3, 0);
}

// The same algorithm as the compiler sees Triton's: the page size a constant (SGLang passes
// it as tl.constexpr), pointers that do not alias (so the ring's loads of part 2 are issued
// together, not one store at a time), a request's offsets in 32 bits. (It repeats
// sglang_extend line for line where the two differ only in the page size's type and the
// pointers' aliasing: what the comparison measures.)
template <int THREADS, int PS>
__global__ void __launch_bounds__(THREADS)
    sglang_extend_tuned(const long long *__restrict__ prefix_lens,
                        const long long *__restrict__ seq_lens,
                        const long long *__restrict__ last_loc,
                        const long long *__restrict__ free_pages, long long *__restrict__ out,
                        int bs) {
  PROBE(0, 0);
  __shared__ long long sums[2][THREADS / 32];
  const int pid = blockIdx.x, t = threadIdx.x;
  long long ext = 0, pages = 0;
  for (int j = t; j <= pid && j < bs; j += THREADS) {
    const long long s = seq_lens[j], p = prefix_lens[j];
    ext += s - p;
    pages += (s + PS - 1) / PS - (p + PS - 1) / PS;
  }
  for (int o = 16; o > 0; o >>= 1) {
    ext += __shfl_xor_sync(0xffffffffu, ext, o);
    pages += __shfl_xor_sync(0xffffffffu, pages, o);
  }
  if ((t & 31) == 0) sums[0][t >> 5] = ext, sums[1][t >> 5] = pages;
  __syncthreads();
  ext = pages = 0;
#pragma unroll
  for (int w = 0; w < THREADS / 32; ++w) ext += sums[0][w], pages += sums[1][w];
  const long long seq = seq_lens[pid], pre = prefix_lens[pid], ll = last_loc[pid];
  const int own_pages = (int)((seq + PS - 1) / PS - (pre + PS - 1) / PS);
  const long long start = ext - (seq - pre), page_start = pages - own_pages;
  PROBE(1, start + page_start + ll);
  const long long pre_up = (pre + PS - 1) / PS * PS;
  const int part1 = (int)(min(seq, pre_up) - pre);
  long long *__restrict__ o1 = out + start;
  for (int k = t; k < part1; k += THREADS) o1[k] = ll + 1 + k;
  const int part2 = (int)(seq / PS * PS - min(seq, pre_up));
  const long long *__restrict__ fp = free_pages + page_start;
  long long *__restrict__ o2 = o1 + part1;
  for (int o = t; o < part2; o += THREADS) o2[o] = fp[o / PS] * PS + o % PS;
  PROBE(2, 0);
  const int part3 = (int)(seq - max(seq / PS * PS, pre_up));
  if (part3 <= 0) return;
  const long long last_page = fp[own_pages - 1];
  for (int k = t; k < part3; k += THREADS) o2[part2 + k] = last_page * PS + k;
  PROBE(3, 0);
}

// What a store costs a small kernel: one round trip (every thread loads one value), then
// STORES 64-bit stores a thread, consecutive across the block (as kvpool's slots into
// `out`).
template <int STORES>
__global__ void __launch_bounds__(256) load_then_stores(const long long *__restrict__ in,
                                                        long long *__restrict__ out) {
  const long long x = in[threadIdx.x & 31];
#pragma unroll
  for (int k = 0; k < STORES; ++k) out[threadIdx.x + 256 * k] = x + k;
  if (STORES == 0 && x == -1) out[0] = 0;  // (keeps the load)
}

// SGLang's alloc_decode_kernel, one block a request: the pages the batch starts up to this
// request by brute force, then the request's slot (its last one + 1, or its new page's first).
template <int THREADS>
__global__ void __launch_bounds__(THREADS)
    sglang_decode(const long long *seq_lens, const long long *last_loc, const long long *free_pages,
                  long long *out, int bs, long long ps) {
  PROBE(0, 0);
  __shared__ long long sums[THREADS / 32];
  const int pid = blockIdx.x, t = threadIdx.x;
  long long pages = 0;
  for (int j = t; j <= pid && j < bs; j += THREADS) {
    const long long s = seq_lens[j];
    pages += (s + ps - 1) / ps - (s - 1 + ps - 1) / ps;
  }
  for (int o = 16; o > 0; o >>= 1) pages += __shfl_xor_sync(0xffffffffu, pages, o);
  if ((t & 31) == 0) sums[t >> 5] = pages;
  __syncthreads();
  pages = 0;
  for (int w = 0; w < THREADS / 32; ++w) pages += sums[w];
  const long long seq = seq_lens[pid], ll = last_loc[pid];
  const bool starts = (seq + ps - 1) / ps != (seq - 1 + ps - 1) / ps;
  PROBE(1, pages + ll);
  if (t == 0) out[pid] = starts ? free_pages[pages - 1] * ps : ll + 1;
  PROBE(2, 0);
}

// SGLang's decode as the compiler sees Triton's (the page size a constant, pointers that do
// not alias), for a batch of requests that continue their pages, one block a request; with
// CHECK, the same kernel first reading the page words of last_loc's page (its state word and
// fill point, as kvpool's decode kernels do) and writing the slot only if they say the page is
// allocated and last_loc is its last handed-out slot (else the padding slot 0): the one
// dependent round trip kvpool's check of a continuation adds to SGLang's algorithm. The
// words are set up so that the check passes. (Up to the slot, it repeats sglang_decode line
// for line where the two differ only in the page size's type and the pointers' aliasing,
// as sglang_extend_tuned does sglang_extend: the code measured in run s33-1.)
template <int THREADS, long long PS, bool CHECK>
__global__ void __launch_bounds__(THREADS)
    sglang_decode_tuned(const long long *__restrict__ seq_lens,
                        const long long *__restrict__ last_loc,
                        const long long *__restrict__ free_pages,
                        const uint32_t *__restrict__ state,
                        const unsigned long long *__restrict__ fill, long long *__restrict__ out,
                        int bs) {
  PROBE(0, 0);
  __shared__ long long sums[THREADS / 32];
  const int pid = blockIdx.x, t = threadIdx.x;
  long long pages = 0;
  for (int j = t; j <= pid && j < bs; j += THREADS) {
    const long long s = seq_lens[j];
    pages += (s + PS - 1) / PS - (s - 1 + PS - 1) / PS;
  }
  for (int o = 16; o > 0; o >>= 1) pages += __shfl_xor_sync(0xffffffffu, pages, o);
  if ((t & 31) == 0) sums[t >> 5] = pages;
  __syncthreads();
  pages = 0;
  for (int w = 0; w < THREADS / 32; ++w) pages += sums[w];
  const long long seq = seq_lens[pid], ll = last_loc[pid];
  const bool starts = (seq + PS - 1) / PS != (seq - 1 + PS - 1) / PS;
  PROBE(1, pages + ll);
  if (t != 0) return;
  if (starts) {
    out[pid] = free_pages[pages - 1] * PS;
    return;
  }
  bool ok = true;
  if constexpr (CHECK) {
    const long long page = ll / PS;
    const uint32_t word = state[page];
    const unsigned long long filled = fill[page];
    ok = kvp::kind_of(word) == kvp::KIND_ALLOCATED && kvp::fill_of(filled) == ll % PS + 1;
  }
  out[pid] = ok ? ll + 1 : 0;
  PROBE(2, 0);
}

// The same call twice in one launch: the second runs on a warm SM (its instructions, the
// constant bank, the TLBs and L1 already loaded), so its probes (which overwrite the
// first's) show what a phase costs once nothing is cold.
template <int THREADS>
__global__ void __launch_bounds__(THREADS)
    extend_few_twice(View v, Call call, const long long *prefix_lens, const long long *seq_lens,
                     const long long *last_loc, unsigned long long tokens,
                     unsigned long long pages, long long *out) {
  kvp::extend_few_kernel<THREADS, long long>(v, call, prefix_lens, seq_lens, last_loc, 1, tokens,
                                             pages, out);
  __syncthreads();
  kvp::extend_few_kernel<THREADS, long long>(v, call, prefix_lens, seq_lens, last_loc, 1, tokens,
                                             pages, out);
}
__global__ void __launch_bounds__(32)
    decode_twice(View v, Call call, const long long *seq_lens, const long long *last_loc,
                 long long *out) {
  kvp::decode_kernel<32, long long>(v, call, seq_lens, last_loc, 1, 1, 1, out);
  __syncwarp();
  kvp::decode_kernel<32, long long>(v, call, seq_lens, last_loc, 1, 1, 1, out);
}

// SM cycles and global-timer nanoseconds over one spin, for the clock rate under load.
__global__ void clock_rate(unsigned long long ns, unsigned long long *cycles_and_ns) {
  unsigned long long g0, g1;
  const long long c0 = clock64();
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(g0));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(g1));
  } while (g1 - g0 < ns);
  const long long c1 = clock64();
  cycles_and_ns[0] = (unsigned long long)(c1 - c0);
  cycles_and_ns[1] = g1 - g0;
}

// ---- a pool laid out as the library lays it out (src/cuda/layout.rs), array by array --------

struct Pool {
  View v{};
  std::vector<void *> allocations;
  kvp::HostRecord *record = nullptr;

  template <class T>
  T *zeroed(size_t count) {
    void *p = nullptr;
    CHECK(cudaMalloc(&p, count * sizeof(T)));
    CHECK(cudaMemset(p, 0, count * sizeof(T)));
    allocations.push_back(p);
    return static_cast<T *>(p);
  }

  Pool(uint32_t num_pages, uint32_t page_size) {
    v.header = zeroed<kvp::Header>(1);
    v.ring = zeroed<uint32_t>(num_pages);
    v.staged = zeroed<uint32_t>(num_pages);
    v.state = zeroed<uint32_t>(num_pages + 1);
    v.fill = zeroed<unsigned long long>(num_pages + 1);
    v.fill_prev = zeroed<uint32_t>(num_pages + 1);
    v.claim = zeroed<unsigned long long>(num_pages + 1);
    v.group_idx = zeroed<uint32_t>(num_pages);
    v.group_ord = zeroed<uint32_t>(num_pages);
    v.scratch = zeroed<uint32_t>(num_pages);
    v.size = (unsigned long long)num_pages * page_size;
    v.slot_tags = zeroed<uint32_t>(v.size + page_size);
    CHECK(cudaHostAlloc(reinterpret_cast<void **>(&record), sizeof(kvp::HostRecord),
                        cudaHostAllocMapped));
    std::memset(record, 0, sizeof(kvp::HostRecord));
    CHECK(cudaHostGetDevicePointer(reinterpret_cast<void **>(&v.record), record, 0));
    v.page_size = page_size;
    v.num_pages = num_pages;
    v.need_sort = 0;
    v.page_shift = kvp::NOT_POW2;
    for (uint32_t s = 0; s < 32; ++s)
      if ((1u << s) == page_size) v.page_shift = s;
    // Writes cursor[0]: calls with `in` 0 read it.
    kvp_reset<<<64, 256>>>(v, Call{1, 1, 0, 0, 1, 0});
    CHECK(cudaDeviceSynchronize());
  }
  ~Pool() {
    for (void *p : allocations) cudaFree(p);
    cudaFreeHost(record);
  }
  void expect_no_fault(const char *what) const {
    if (record->fault_seq != 0) {
      std::fprintf(stderr, "%s: the pool faulted (code %llu, position %lld)\n", what,
                   record->fault_code, record->fault_position);
      std::exit(1);
    }
  }
};

// ---- timing -------------------------------------------------------------------------------

double median(std::vector<double> x) {
  std::sort(x.begin(), x.end());
  return x[x.size() / 2];
}

constexpr int kLaunches = 100, kReps = 21, kPoints = 8, kWarps = 8;

struct Timeline {
  // Per warp and point: the median over replays of (clock at the point) - (warp 0's point 0),
  // or -1 where the point was not reached.
  double at[kWarps][kPoints];
};

// Replays `launch` x kLaunches captured in one graph, each replay queued behind a spinner and
// timed by events; returns the median µs per launch. With probes, `timeline` gets the last
// launch's probes of each replay (medians).
double time_in_graph(cudaStream_t s, const std::function<void()> &launch, Timeline *timeline) {
  cudaGraph_t graph;
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  for (int i = 0; i < kLaunches; ++i) launch();
  CHECK(cudaStreamEndCapture(s, &graph));
  cudaGraphExec_t exec;
  CHECK(cudaGraphInstantiate(&exec, graph, 0));
  for (int i = 0; i < 3; ++i) CHECK(cudaGraphLaunch(exec, s));
  CHECK(cudaStreamSynchronize(s));
  cudaEvent_t begin, end;
  CHECK(cudaEventCreate(&begin));
  CHECK(cudaEventCreate(&end));
  std::vector<double> per_launch;
  std::vector<std::vector<double>> samples(kWarps * kPoints);
  for (int r = 0; r < kReps; ++r) {
#ifdef KVP_PROBES
    static unsigned long long none[kvp::PROBE_WARPS][kvp::PROBE_POINTS];
    std::memset(none, 0, sizeof none);
    CHECK(cudaMemcpyToSymbolAsync(kvp::probe_clock, none, sizeof none, 0,
                                  cudaMemcpyHostToDevice, s));
#endif
    spin_kernel<<<1, 1, 0, s>>>(200 * 1000);
    CHECK(cudaEventRecord(begin, s));
    CHECK(cudaGraphLaunch(exec, s));
    CHECK(cudaEventRecord(end, s));
    CHECK(cudaStreamSynchronize(s));
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, begin, end));
    per_launch.push_back(1000.0 * ms / kLaunches);
#ifdef KVP_PROBES
    unsigned long long got[kvp::PROBE_WARPS][kvp::PROBE_POINTS];
    CHECK(cudaMemcpyFromSymbol(got, kvp::probe_clock, sizeof got));
    for (int w = 0; w < kWarps; ++w)
      for (int p = 0; p < kPoints; ++p)
        if (got[w][p] != 0 && got[0][0] != 0)
          samples[w * kPoints + p].push_back((double)(long long)(got[w][p] - got[0][0]));
#endif
  }
  if (timeline)
    for (int w = 0; w < kWarps; ++w)
      for (int p = 0; p < kPoints; ++p) {
        auto &x = samples[w * kPoints + p];
        timeline->at[w][p] = x.size() == (size_t)kReps ? median(x) : -1;
      }
  CHECK(cudaEventDestroy(begin));
  CHECK(cudaEventDestroy(end));
  CHECK(cudaGraphExecDestroy(exec));
  CHECK(cudaGraphDestroy(graph));
  return median(per_launch);
}

// ---- the cases ------------------------------------------------------------------------------

struct DeviceInts {
  long long *p = nullptr;
  explicit DeviceInts(const std::vector<long long> &host) {
    CHECK(cudaMalloc(&p, std::max<size_t>(host.size(), 1) * sizeof(long long)));
    CHECK(cudaMemcpy(p, host.data(), host.size() * sizeof(long long), cudaMemcpyHostToDevice));
  }
  ~DeviceInts() { cudaFree(p); }
  std::vector<long long> download(size_t n) const {
    std::vector<long long> host(n);
    CHECK(cudaMemcpy(host.data(), p, n * sizeof(long long), cudaMemcpyDeviceToHost));
    return host;
  }
};

void expect_slots(const char *what, const std::vector<long long> &got,
                  const std::vector<long long> &want) {
  if (got != want) {
    for (size_t i = 0; i < want.size(); ++i)
      if (got[i] != want[i]) {
        std::fprintf(stderr, "%s: slot %zu is %lld, SGLang's index math gives %lld\n", what, i,
                     (long long)got[i], (long long)want[i]);
        break;
      }
    std::exit(1);
  }
}

struct Row {
  std::string name;
  double us;
  Timeline timeline;
  std::vector<const char *> points;
  int warps;
};

void print_row(const Row &row, double empty_us, double cycles_per_ns) {
  std::printf("| %s | %.3f | %.3f |\n", row.name.c_str(), row.us, row.us - empty_us);
#ifdef KVP_PROBES
  for (int w = 0; w < row.warps; ++w) {
    std::printf("    warp %d:", w);
    for (size_t p = 0; p < row.points.size(); ++p) {
      const double c = row.timeline.at[w][p];
      if (c >= 0) std::printf("  %s %.0f (%.0f ns)", row.points[p], c, c / cycles_per_ns);
    }
    std::printf("\n");
  }
#else
  (void)cycles_per_ns;
#endif
}

int main() {
  constexpr uint32_t kPageSize = 16, kPages = 1 << 16;
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  Pool pool(kPages, kPageSize);
  // (Call::runs 1: the cursor the reset wrote; replayed, so CALL_REPLAYABLE.)
  const Call extend_call{7, 0, kvp::CALL_REPLAYABLE, kvp::OP_ALLOC_EXTEND, 2, 1};

  // SGLang's free pages: the ring's order after a reset (pages 1, 2, ...).
  std::vector<long long> free_host(kPages);
  for (uint32_t i = 0; i < kPages; ++i) free_host[i] = i + 1;
  DeviceInts free_pages(free_host);

  // After a case's replays: no fault (kvpool's kernels) and every slot as SGLang's index
  // math gives it.
  auto verify = [&](const std::string &what, const DeviceInts &out,
                    const std::vector<long long> &want, bool kvpool) {
    CHECK(cudaDeviceSynchronize());
    if (kvpool) pool.expect_no_fault(what.c_str());
    expect_slots(what.c_str(), out.download(want.size()), want);
  };

  std::vector<Row> rows;
  auto add = [&](std::string name, int warps, std::vector<const char *> points,
                 const std::function<void()> &launch) {
    Row row{std::move(name), 0, {}, std::move(points), warps};
    row.us = time_in_graph(s, launch, &row.timeline);
    rows.push_back(row);
  };
  add("empty kernel (32 threads)", 0, {}, [&] { empty_kernel<<<1, 32, 0, s>>>(); });
  // What a launch's shape costs alone: threads, parameters, shared memory (extend_few's
  // FewShared is about 18 KB).
  add("empty kernel (256 threads)", 0, {}, [&] { empty_kernel<<<1, 256, 0, s>>>(); });
  add("empty kernel (256 threads, kvpool's parameters)", 0, {}, [&] {
    empty_with_params<<<1, 256, 0, s>>>(pool.v, Call{}, nullptr, nullptr, nullptr, 0, 0, 0, 0, 0,
                                        nullptr);
  });
  add("empty kernel (256 threads, 18 KB of shared memory)", 0, {},
      [&] { empty_kernel<<<1, 256, 18 * 1024, s>>>(); });

  {
    DeviceInts in(std::vector<long long>(32, 5)), out(std::vector<long long>(256 * 6, 0));
    add("one load, no store (256 threads)", 0, {},
        [&] { load_then_stores<0><<<1, 256, 0, s>>>(in.p, out.p); });
    add("one load, then 1 store a thread (256 threads)", 0, {},
        [&] { load_then_stores<1><<<1, 256, 0, s>>>(in.p, out.p); });
    add("one load, then 3 stores a thread (256 threads)", 0, {},
        [&] { load_then_stores<3><<<1, 256, 0, s>>>(in.p, out.p); });
    add("one load, then 6 stores a thread (256 threads)", 0, {},
        [&] { load_then_stores<6><<<1, 256, 0, s>>>(in.p, out.p); });
    CHECK(cudaDeviceSynchronize());
    const std::vector<long long> got = out.download(256 * 6);
    for (int k = 0; k < 6; ++k)
      if (got[256 * k + 255] != 5 + k) {
        std::fprintf(stderr, "load_then_stores: out[%d] is %lld, not %d\n", 256 * k + 255,
                     got[256 * k + 255], 5 + k);
        std::exit(1);
      }
  }

  // An extend of one request of `tokens` new tokens, empty prefix. (Probe points: see
  // extend_few.cuh; "in" for the writer warps is their cursor, "decided" their pages staged.)
  const std::vector<const char *> kExtendPoints = {"start",   "in",      "decided", "barrier",
                                                   "written", "end",     "scanned", "words"};
  for (const long long tokens : {512ll, 16ll}) {
    DeviceInts prefix({0}), seq({tokens}), last({-1});
    DeviceInts out_kvp(std::vector<long long>(tokens, -7));
    DeviceInts out_sgl(std::vector<long long>(tokens, -7));
    const unsigned long long pages = (tokens + kPageSize - 1) / kPageSize;
    std::vector<long long> want(tokens);
    for (long long k = 0; k < tokens; ++k)
      want[k] = (1 + k / kPageSize) * kPageSize + k % kPageSize;
    const std::string shape = "extend 1 x " + std::to_string(tokens);
    if (tokens > 64) {
      add(shape + ": kvp_extend_few_256_i64", 8, kExtendPoints,
          [&] {
            kvp_extend_few_256_i64<<<1, 256, 0, s>>>(pool.v, extend_call, prefix.p, seq.p,
                                                     last.p, 1, 1, 0, tokens,
                                                     pages, out_kvp.p);
          });
    } else {
      add(shape + ": kvp_extend_few_64_i64", 2, kExtendPoints,
          [&] {
            kvp_extend_few_64_i64<<<1, 64, 0, s>>>(pool.v, extend_call, prefix.p, seq.p,
                                                   last.p, 1, 1, 0, tokens,
                                                   pages, out_kvp.p);
          });
    }
    verify(shape + " (kvpool)", out_kvp, want, true);
    const int threads = tokens > 64 ? 256 : 64;
    add(shape + ": the same kernel's body twice in one launch (probes: the second)", threads / 32,
        kExtendPoints, [&] {
          if (threads == 256)
            extend_few_twice<256><<<1, 256, 0, s>>>(pool.v, extend_call, prefix.p, seq.p, last.p,
                                                    tokens, pages, out_kvp.p);
          else
            extend_few_twice<64><<<1, 64, 0, s>>>(pool.v, extend_call, prefix.p, seq.p, last.p,
                                                  tokens, pages, out_kvp.p);
        });
    verify(shape + " (kvpool, twice)", out_kvp, want, true);
    add(shape + ": SGLang's algorithm, 128 threads", 4,
        {"start", "sums in", "part 2 written", "end"}, [&] {
      sglang_extend<128><<<1, 128, 0, s>>>(prefix.p, seq.p, last.p, free_pages.p, out_sgl.p, 1,
                                           kPageSize);
    });
    verify(shape + " (SGLang's algorithm)", out_sgl, want, false);
    add(shape + ": SGLang's algorithm tuned (page size a constant, no aliasing), 128 threads", 4,
        {"start", "sums in", "part 2 written", "end"}, [&] {
          sglang_extend_tuned<128, kPageSize><<<1, 128, 0, s>>>(prefix.p, seq.p, last.p,
                                                                free_pages.p, out_sgl.p, 1);
        });
    verify(shape + " (SGLang's algorithm, tuned)", out_sgl, want, false);
  }

  // Several blocks: `bs` requests of `len` tokens each (empty prefixes) on `grid` blocks of
  // a kvpool kernel, beside one block a request of SGLang's algorithm. The rows isolate what
  // the several-block kernels' own code costs (their one-block grid against the one-block
  // kernel) from what more blocks cost (the empty kernel's grids). Probes: block 0's warps.
  for (const unsigned grid : {2u, 33u, 256u})
    add("empty kernel (" + std::to_string(grid) + " blocks of 256 threads, 18 KB of shared memory)",
        0, {}, [&] { empty_kernel<<<grid, 256, 18 * 1024, s>>>(); });
  using ExtendKernel = void (*)(View, Call, const long long *, const long long *,
                                const long long *, uint32_t, uint32_t, uint32_t,
                                unsigned long long, unsigned long long, long long *);
  struct Several {
    const char *kernel;
    ExtendKernel launch;
    unsigned bs, len, grid, threads;
  };
  const Several kSeveral[] = {
      {"kvp_extend_few_256_i64", kvp_extend_few_256_i64, 1, 512, 1, 256},
      {"kvp_extend_few_blocks_i64", kvp_extend_few_blocks_i64, 1, 512, 1, 256},
      {"kvp_extend_few_256_i64", kvp_extend_few_256_i64, 1, 1024, 1, 256},
      {"kvp_extend_few_blocks_i64", kvp_extend_few_blocks_i64, 1, 1024, 2, 256},
      {"kvp_extend_few_blocks_i64", kvp_extend_few_blocks_i64, 2, 512, 2, 256},
      {"kvp_extend_few_blocks_i64", kvp_extend_few_blocks_i64, 32, 512, 32, 256},
      // The library's grids for these calls (src/cuda/pool.rs, span_grid: blocks of
      // SHORT_SPAN_TOKENS = 256 tokens, one a thread, while they fit on the SMs; the rows
      // above, at 512 a block, are not what it launches for them).
      {"kvp_extend_few_blocks_i64", kvp_extend_few_blocks_i64, 2, 512, 4, 256},
      {"kvp_extend_few_blocks_i64", kvp_extend_few_blocks_i64, 8, 512, 16, 256},
      {"kvp_extend_few_blocks_i64", kvp_extend_few_blocks_i64, 32, 512, 64, 256},
      {"kvp_extend_block_i64", kvp_extend_block_i64, 33, 16, 1, 256},
      {"kvp_extend_blocks_i64", kvp_extend_blocks_i64, 33, 16, 1, 256},
      {"kvp_extend_blocks_i64", kvp_extend_blocks_i64, 33, 16, 2, 256},
      {"kvp_extend_blocks_i64", kvp_extend_blocks_i64, 33, 512, 33, 256},
      {"kvp_extend_blocks_i64", kvp_extend_blocks_i64, 64, 512, 64, 256},
      {"kvp_extend_blocks_i64", kvp_extend_blocks_i64, 64, 512, 128, 256},  // (the library's)
      {"kvp_extend_blocks_i64", kvp_extend_blocks_i64, 256, 512, 256, 256},
  };
  // extend_block's points 6 and 7 (extend_block.cuh): its several blocks' stage-bound
  // barrier passed, and each thread's tokens planned (before the pages are staged).
  const std::vector<const char *> kBlockPoints = {"start",   "in",  "decided", "barrier",
                                                  "written", "end", "bounds",  "planned"};
  auto is_extend_block = [](const char *kernel) {
    return std::string(kernel).rfind("kvp_extend_block", 0) == 0;
  };
  std::set<std::string> sglang_shapes;
  for (const Several &c : kSeveral) {
    const unsigned long long tokens = (unsigned long long)c.bs * c.len;
    const unsigned long long pages = (unsigned long long)c.bs * ((c.len + kPageSize - 1) / kPageSize);
    std::vector<long long> want(tokens);
    unsigned long long t = 0;
    for (unsigned q = 0; q < c.bs; ++q)
      for (unsigned k = 0; k < c.len; ++k, ++t)
        want[t] = (1 + q * ((c.len + kPageSize - 1) / kPageSize) + k / kPageSize) * kPageSize +
                  k % kPageSize;
    DeviceInts prefix(std::vector<long long>(c.bs, 0)), seq(std::vector<long long>(c.bs, c.len)),
        last(std::vector<long long>(c.bs, -1));
    DeviceInts out_kvp(std::vector<long long>(tokens, -7));
    DeviceInts out_sgl(std::vector<long long>(tokens, -7));
    const std::string shape = "extend " + std::to_string(c.bs) + " x " + std::to_string(c.len);
    const std::string name = shape + ": " + c.kernel + ", " + std::to_string(c.grid) +
                             (c.grid == 1 ? " block" : " blocks");
    add(name, c.threads / 32, is_extend_block(c.kernel) ? kBlockPoints : kExtendPoints, [&] {
      c.launch<<<c.grid, c.threads, 0, s>>>(pool.v, extend_call, prefix.p, seq.p, last.p, c.bs, 1,
                                            0, tokens, pages, out_kvp.p);
    });
    verify(name, out_kvp, want, true);
    // (SGLang's rows once a shape.)
    if (c.launch == kvp_extend_few_256_i64 || c.grid == 1 || !sglang_shapes.insert(shape).second)
      continue;
    add(shape + ": SGLang's algorithm, 128 threads a request", 4,
        {"start", "sums in", "part 2 written", "end"}, [&] {
          sglang_extend<128><<<c.bs, 128, 0, s>>>(prefix.p, seq.p, last.p, free_pages.p,
                                                   out_sgl.p, (int)c.bs, kPageSize);
        });
    verify(shape + " (SGLang's algorithm)", out_sgl, want, false);
    add(shape + ": SGLang's algorithm tuned, 128 threads a request", 4,
        {"start", "sums in", "part 2 written", "end"}, [&] {
          sglang_extend_tuned<128, kPageSize><<<c.bs, 128, 0, s>>>(
              prefix.p, seq.p, last.p, free_pages.p, out_sgl.p, (int)c.bs);
        });
    verify(shape + " (SGLang's algorithm, tuned)", out_sgl, want, false);
  }

  // A decode of one request starting a page, after an extend of 16 tokens made its prefix:
  // the extend reads cursor[0] and writes cursor[1], the decode reads cursor[1].
  {
    DeviceInts prefix({0}), seq({16}), last({-1}), out16(std::vector<long long>(16, 0));
    kvp_extend_few_64_i64<<<1, 64, 0, s>>>(pool.v, Call{3, 0, 0, kvp::OP_ALLOC_EXTEND, 3, 1},
                                           prefix.p, seq.p, last.p, 1, 1, 0,
                                           16, 1, out16.p);
    CHECK(cudaDeviceSynchronize());
    pool.expect_no_fault("decode's prefix");
    DeviceInts dseq({17}), dlast({31}), out_kvp({-7}), out_sgl({-7});
    const Call decode_call{9, 1, kvp::CALL_REPLAYABLE, kvp::OP_ALLOC_DECODE, 4, 2};
    const std::vector<long long> decode_want = {2 * kPageSize};  // page 2's first slot
    add("decode 1, starting a page: kvp_decode_32_i64", 1,
        {"start", "in", "decided", "written", "end"},
        [&] {
          kvp_decode_32_i64<<<1, 32, 0, s>>>(pool.v, decode_call, nullptr, dseq.p, dlast.p, 1,
                                             1, 1, 1, 1, out_kvp.p);
        });
    verify("decode (kvpool)", out_kvp, decode_want, true);
    add("decode 1, starting a page: the same body twice in one launch (probes: the second)", 1,
        {"start", "in", "decided", "written", "end"}, [&] {
          decode_twice<<<1, 32, 0, s>>>(pool.v, decode_call, dseq.p, dlast.p, out_kvp.p);
        });
    verify("decode (kvpool, twice)", out_kvp, decode_want, true);
    // SGLang's free pages after the prefix's page: page 2 on.
    add("decode 1, starting a page: SGLang's algorithm, 128 threads", 4,
        {"start", "sums in", "end"},
        [&] {
          sglang_decode<128><<<1, 128, 0, s>>>(dseq.p, dlast.p, free_pages.p + 1, out_sgl.p, 1,
                                               kPageSize);
        });
    verify("decode (SGLang's algorithm)", out_sgl, decode_want, false);
  }

  // A decode of requests that continue their pages (Triton's decode in
  // bench-gpu/baseline_bench.py: request i holds i % 16 + 1 tokens, so all but the sixteenth
  // continue), SGLang's algorithm tuned, without and with kvpool's check of a continuation
  // (the page words of last_loc's page read before the slot is written): what the check
  // costs by itself. Request i's last slot is in page i + 1, whose words say it is allocated
  // with the request's tokens handed out.
  for (const int bs : {1, 8, 64}) {
    std::vector<long long> seq_host(bs), last_host(bs), want(bs);
    std::vector<uint32_t> state_host(bs + 2, 0);
    std::vector<unsigned long long> fill_host(bs + 2, 0);
    for (int i = 0; i < bs; ++i) {
      const long long held = i % 15 + 1;  // every request continues its page
      seq_host[i] = held + 1;
      last_host[i] = (i + 1) * (long long)kPageSize + held - 1;
      want[i] = last_host[i] + 1;
      state_host[i + 1] = kvp::page_word(kvp::KIND_ALLOCATED, 5);
      fill_host[i + 1] = kvp::fill_word(5, (unsigned long long)held);
    }
    DeviceInts dseq(seq_host), dlast(last_host), out(std::vector<long long>(bs, -7));
    uint32_t *state = nullptr;
    unsigned long long *fill = nullptr;
    CHECK(cudaMalloc(&state, state_host.size() * sizeof(uint32_t)));
    CHECK(cudaMalloc(&fill, fill_host.size() * sizeof(unsigned long long)));
    CHECK(cudaMemcpy(state, state_host.data(), state_host.size() * sizeof(uint32_t),
                     cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(fill, fill_host.data(), fill_host.size() * sizeof(unsigned long long),
                     cudaMemcpyHostToDevice));
    const std::string shape = "decode " + std::to_string(bs) + ", continuing pages";
    add(shape + ": SGLang's algorithm tuned, 128 threads a request", 4,
        {"start", "sums in", "end"}, [&] {
          sglang_decode_tuned<128, kPageSize, false><<<bs, 128, 0, s>>>(
              dseq.p, dlast.p, free_pages.p, state, fill, out.p, bs);
        });
    verify(shape + " (SGLang's algorithm, tuned)", out, want, false);
    add(shape + ": the same, last_loc's page words checked first", 4,
        {"start", "sums in", "end"}, [&] {
          sglang_decode_tuned<128, kPageSize, true><<<bs, 128, 0, s>>>(
              dseq.p, dlast.p, free_pages.p, state, fill, out.p, bs);
        });
    verify(shape + " (SGLang's algorithm, tuned, checked)", out, want, false);
    CHECK(cudaFree(state));
    CHECK(cudaFree(fill));
  }

  unsigned long long *rate;
  CHECK(cudaMallocManaged(&rate, 2 * sizeof(unsigned long long)));
  clock_rate<<<1, 1, 0, s>>>(2 * 1000 * 1000, rate);
  CHECK(cudaStreamSynchronize(s));
  const double cycles_per_ns = (double)rate[0] / (double)rate[1];
  CHECK(cudaFree(rate));

#ifdef KVP_PROBES
  const char *build = "with probes (times include the probes' stores)";
#else
  const char *build = "without probes";
#endif
  std::printf("anatomy, %s; SM clock %.0f MHz; µs per launch, %d launches in one graph, median of "
              "%d replays\n\n| kernel | µs | over the empty kernel |\n|---|---:|---:|\n",
              build, 1000 * cycles_per_ns, kLaunches, kReps);
  for (const Row &row : rows) print_row(row, rows[0].us, cycles_per_ns);
  CHECK(cudaStreamDestroy(s));
  return 0;
}
