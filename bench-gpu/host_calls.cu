// host_calls.cu: what each driver call on a device pool's host path costs, one call at a time,
// beside the empty-kernel launch kvpool_bench takes as its host floor. Needs no library.
//
// A device allocation's host time is its planning plus these calls: cuCtxGetCurrent (bind),
// cuStreamGetCtx (the stream's context), cuLaunchKernel with the allocation kernels'
// parameters (View, Call and nine scalars and pointers, 200 bytes), then cuStreamIsCapturing
// and cuEventRecord (the release's last-use event). Issue 9 asks for the whole call within
// 1.3x of one launch at 4,096 requests; this says which of the calls leave room for that.
//
//   nvcc -O2 -std=c++17 -arch=sm_90 bench-gpu/host_calls.cu -lcuda -o host_calls
//   ./host_calls [--rounds N]      (scripts/gpu/run.sh host-calls)
//
// Each case runs 64 calls per round, each timed alone with steady_clock, and the stream is
// drained outside the timed region after every round so the launch queue never fills; the
// cases alternate round by round, so drift of the machine reaches all of them alike. The
// table gives the median and p10-p90 over every sample, in ns, and each median minus the
// median of the case it extends.
#include <cuda.h>
#include <cuda_runtime.h>

#include "spin.cuh"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#define CU_CHECK(call)                                                                    \
  do {                                                                                    \
    CUresult r_ = (call);                                                                 \
    if (r_ != CUDA_SUCCESS) {                                                             \
      const char *name_ = nullptr;                                                        \
      cuGetErrorName(r_, &name_);                                                         \
      std::fprintf(stderr, "%s failed: %s\n", #call, name_ ? name_ : "?");              \
      std::exit(1);                                                                       \
    }                                                                                     \
  } while (0)
#define CUDA_CHECK(call)                                                                  \
  do {                                                                                    \
    cudaError_t e_ = (call);                                                              \
    if (e_ != cudaSuccess) {                                                              \
      std::fprintf(stderr, "%s failed: %s\n", #call, cudaGetErrorString(e_));             \
      std::exit(1);                                                                       \
    }                                                                                     \
  } while (0)

// The allocation kernels' parameter shape (src/cuda/layout.rs: View, Call).
struct View {
  uint64_t pointers[13];
  uint32_t page_size, num_pages, need_sort, page_shift;
};
struct Call {
  uint32_t tag, input, flags, op, seq, pad;
};

__global__ void empty_kernel() {}
__global__ void shaped_kernel(View, Call, const int64_t *, const int64_t *, const int64_t *,
                              uint32_t, uint32_t, uint32_t, uint64_t, uint64_t, int64_t *) {}

struct Case {
  std::string name;
  std::string extends;  // the case whose median this one's difference is taken against
  std::function<void()> call;
  std::vector<double> samples;
};

double percentile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(q * static_cast<double>(v.size() - 1))];
}

int main(int argc, char **argv) {
  int rounds = 400;
  for (int i = 1; i + 1 < argc; i += 2)
    if (!std::strcmp(argv[i], "--rounds")) rounds = std::atoi(argv[i + 1]);
  CUDA_CHECK(cudaSetDevice(0));
  CUDA_CHECK(cudaFree(nullptr));
  cudaStream_t rt_stream;
  CUDA_CHECK(cudaStreamCreateWithFlags(&rt_stream, cudaStreamNonBlocking));
  CUstream s = reinterpret_cast<CUstream>(rt_stream);
  CUcontext ctx;
  CU_CHECK(cuCtxGetCurrent(&ctx));
  CUevent event;
  CU_CHECK(cuEventCreate(&event, CU_EVENT_DISABLE_TIMING));
  cudaFunction_t rt_empty, rt_shaped;
  CUDA_CHECK(cudaGetFuncBySymbol(&rt_empty, reinterpret_cast<const void *>(empty_kernel)));
  CUDA_CHECK(cudaGetFuncBySymbol(&rt_shaped, reinterpret_cast<const void *>(shaped_kernel)));
  CUfunction empty = reinterpret_cast<CUfunction>(rt_empty);
  CUfunction shaped = reinterpret_cast<CUfunction>(rt_shaped);
  CUfunction spin = nullptr;
  {
    cudaFunction_t f;
    CUDA_CHECK(cudaGetFuncBySymbol(&f, reinterpret_cast<const void *>(spin_kernel)));
    spin = reinterpret_cast<CUfunction>(f);
  }

  View view{};
  Call call{};
  const int64_t *prefix = nullptr, *seq = nullptr, *last = nullptr;
  uint32_t batch = 4096, per_block = 1, decode = 0;
  uint64_t tokens = 4096, pages = 256;
  int64_t *out = nullptr;
  void *args[] = {&view, &call, &prefix, &seq, &last, &batch, &per_block,
                  &decode, &tokens, &pages, &out};

  auto launch_shaped = [&] { CU_CHECK(cuLaunchKernel(shaped, 1, 1, 1, 32, 1, 1, 0, s, args, nullptr)); };
  auto capturing = [&] {
    CUstreamCaptureStatus status;
    CU_CHECK(cuStreamIsCapturing(s, &status));
    if (status != CU_STREAM_CAPTURE_STATUS_NONE) std::abort();
  };
  auto bind = [&] {
    CUcontext current;
    CU_CHECK(cuCtxGetCurrent(&current));
    if (current != ctx) std::abort();
  };
  auto stream_ctx = [&] {
    CUcontext owner;
    CU_CHECK(cuStreamGetCtx(s, &owner));
    if (owner != ctx) std::abort();
  };
  CUlaunchAttribute attr{};
  attr.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT;
  attr.value.programmaticEvent.event = event;
  attr.value.programmaticEvent.flags = 0;
  attr.value.programmaticEvent.triggerAtBlockStart = 0;
  CUlaunchConfig config{};
  config.gridDimX = config.gridDimY = config.gridDimZ = 1;
  config.blockDimX = 32;
  config.blockDimY = config.blockDimZ = 1;
  config.hStream = s;
  CUlaunchConfig with_event = config;
  with_event.attrs = &attr;
  with_event.numAttrs = 1;

  // Does a launch that records the event as it completes work at all, and under capture?
  const CUresult ex_plain = cuLaunchKernelEx(&with_event, shaped, args, nullptr);
  CU_CHECK(cuStreamSynchronize(s));
  std::printf("- cuLaunchKernelEx with CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT: %d", ex_plain);
  {
    unsigned long long ns = 50ull * 1000 * 1000;
    void *spin_args[] = {&ns};
    CU_CHECK(cuLaunchKernel(spin, 1, 1, 1, 1, 1, 1, 0, s, spin_args, nullptr));
    const CUresult launched = cuLaunchKernelEx(&with_event, shaped, args, nullptr);
    const CUresult early = cuEventQuery(event);
    CU_CHECK(cuStreamSynchronize(s));
    const CUresult late = cuEventQuery(event);
    std::printf("; behind a 50 ms spinner: launch %d, query before %d, after the sync %d",
                launched, early, late);
  }
  {
    CU_CHECK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_RELAXED));
    const CUresult captured = cuLaunchKernelEx(&with_event, shaped, args, nullptr);
    CUgraph graph = nullptr;
    const CUresult ended = cuStreamEndCapture(s, &graph);
    std::printf("; under capture: launch %d, end capture %d\n", captured, ended);
    if (graph) cuGraphDestroy(graph);
    (void)cudaGetLastError();
  }
  const bool event_attribute = ex_plain == CUDA_SUCCESS;

  std::vector<Case> cases;
  cases.push_back({"runtime launch, empty kernel (kvpool_bench's floor)", "",
                   [&] { empty_kernel<<<1, 1, 0, rt_stream>>>(); }, {}});
  cases.push_back({"cuLaunchKernel, empty kernel", "",
                   [&] { CU_CHECK(cuLaunchKernel(empty, 1, 1, 1, 1, 1, 1, 0, s, nullptr, nullptr)); },
                   {}});
  cases.push_back({"cuLaunchKernel, the allocation kernels' 200 B of parameters", "",
                   launch_shaped, {}});
  cases.push_back({"cuLaunchKernelEx, 200 B, no attributes",
                   "cuLaunchKernel, the allocation kernels' 200 B of parameters",
                   [&] { CU_CHECK(cuLaunchKernelEx(&config, shaped, args, nullptr)); }, {}});
  cases.push_back({"launch + cuEventRecord",
                   "cuLaunchKernel, the allocation kernels' 200 B of parameters",
                   [&] {
                     launch_shaped();
                     CU_CHECK(cuEventRecord(event, s));
                   },
                   {}});
  cases.push_back({"launch + cuStreamIsCapturing + cuEventRecord (the release mark)",
                   "launch + cuEventRecord",
                   [&] {
                     launch_shaped();
                     capturing();
                     CU_CHECK(cuEventRecord(event, s));
                   },
                   {}});
  cases.push_back({"bind + cuStreamGetCtx + launch + mark (a device call's driver calls)",
                   "launch + cuStreamIsCapturing + cuEventRecord (the release mark)",
                   [&] {
                     bind();
                     stream_ctx();
                     launch_shaped();
                     capturing();
                     CU_CHECK(cuEventRecord(event, s));
                   },
                   {}});
  if (event_attribute)
    cases.push_back({"cuStreamIsCapturing + cuLaunchKernelEx recording the event",
                     "cuLaunchKernel, the allocation kernels' 200 B of parameters",
                     [&] {
                       capturing();
                       CU_CHECK(cuLaunchKernelEx(&with_event, shaped, args, nullptr));
                     },
                     {}});
  cases.push_back({"cuCtxGetCurrent alone", "", bind, {}});
  cases.push_back({"cuStreamGetCtx alone", "", stream_ctx, {}});
  cases.push_back({"cuStreamIsCapturing alone", "", capturing, {}});
  cases.push_back({"cuEventRecord alone (idle stream)", "",
                   [&] { CU_CHECK(cuEventRecord(event, s)); }, {}});

  using clock = std::chrono::steady_clock;
  constexpr int kPerRound = 64;
  for (int round = -20; round < rounds; ++round) {  // 20 rounds of warm-up
    for (Case &c : cases) {
      for (int i = 0; i < kPerRound; ++i) {
        const auto t0 = clock::now();
        c.call();
        const auto t1 = clock::now();
        if (round >= 0) c.samples.push_back(std::chrono::duration<double, std::nano>(t1 - t0).count());
      }
      CU_CHECK(cuStreamSynchronize(s));
    }
  }

  std::vector<double> empty_timer;
  for (int i = 0; i < 10000; ++i) {
    const auto t0 = clock::now();
    const auto t1 = clock::now();
    empty_timer.push_back(std::chrono::duration<double, std::nano>(t1 - t0).count());
  }
  std::printf("- %d rounds x %d calls per case, cases alternating; timer floor (empty timed "
              "region) %.0f ns median\n\n",
              rounds, kPerRound, percentile(empty_timer, 0.5));
  std::printf("| case | median ns | p10-p90 ns | median minus the case it extends |\n");
  std::printf("|---|---:|---|---|\n");
  for (const Case &c : cases) {
    const double median = percentile(c.samples, 0.5);
    std::string delta = "";
    for (const Case &base : cases)
      if (base.name == c.extends) {
        char buf[160];
        std::snprintf(buf, sizeof buf, "%+.0f (over \"%s\")", median - percentile(base.samples, 0.5),
                      base.name.c_str());
        delta = buf;
      }
    std::printf("| %s | %.0f | %.0f-%.0f | %s |\n", c.name.c_str(), median,
                percentile(c.samples, 0.1), percentile(c.samples, 0.9), delta.c_str());
  }
  CU_CHECK(cuEventDestroy(event));
  CUDA_CHECK(cudaStreamDestroy(rt_stream));
  return 0;
}
