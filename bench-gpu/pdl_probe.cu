// What programmatic dependent launch (PDL, sm_90) saves between dependent kernels in a CUDA
// graph: a chain of kernels that each read a counter the previous one wrote (as kvpool's
// calls read the cursor the previous call wrote), with one more dependent round trip (a
// table entry at that counter, as a call's page words), then write the counter. Timed per
// launch in a graph of 100 launches, replayed behind nothing (events around each replay),
// for: plain launches; plain launches of the kernel with the PDL instructions (what those
// instructions cost a kernel launched without PDL); PDL launches (the launch attribute, the
// kernel waiting before its first load and letting its dependent launch at its start or at
// its end); and the same as 100 child graphs of one launch each (kvpool_bench's way). The
// counter is checked after every configuration: PDL must not reorder the chain.
//
//   nvcc -O3 -std=c++17 -arch=sm_90 bench-gpu/pdl_probe.cu -o pdl_probe && ./pdl_probe
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CHECK(x)                                                                            \
  do {                                                                                      \
    cudaError_t e_ = (x);                                                                   \
    if (e_ != cudaSuccess) {                                                                \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(1);                                                                         \
    }                                                                                       \
  } while (0)

enum Mode { PLAIN = 0, WAIT_ONLY = 1, TRIGGER_AT_START = 2, TRIGGER_AT_END = 3 };

// MODE PLAIN: no PDL instruction. Otherwise `griddepcontrol.wait` before the first load;
// TRIGGER_AT_START / TRIGGER_AT_END: `griddepcontrol.launch_dependents` there.
template <int MODE>
__global__ void chain_kernel(unsigned long long *counter, const unsigned *table,
                             unsigned *out) {
  if (MODE != PLAIN) asm volatile("griddepcontrol.wait;" ::: "memory");
  if (MODE == TRIGGER_AT_START) asm volatile("griddepcontrol.launch_dependents;");
  if (threadIdx.x == 0) {
    const unsigned long long c = *(volatile unsigned long long *)counter;
    const unsigned word = table[c & 1023];
    out[c & 1023] = word + 1;
    *(volatile unsigned long long *)counter = c + 1;
  }
  if (MODE == TRIGGER_AT_END) asm volatile("griddepcontrol.launch_dependents;");
}

template <int MODE>
void launch(cudaStream_t s, bool pdl, unsigned long long *counter, const unsigned *table,
            unsigned *out) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(1);
  cfg.blockDim = dim3(256);
  cfg.stream = s;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = pdl ? 1 : 0;
  CHECK(cudaLaunchKernelEx(&cfg, chain_kernel<MODE>, counter, table, out));
}

struct Result {
  double median, p10, p90;
};

template <int MODE>
Result time_chain(cudaStream_t s, bool pdl, bool child_graphs, unsigned long long *counter,
                  const unsigned *table, unsigned *out, unsigned long long *expected) {
  const int copies = 100, reps = 200;
  cudaGraph_t graph;
  if (!child_graphs) {
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    for (int i = 0; i < copies; ++i) launch<MODE>(s, pdl, counter, table, out);
    CHECK(cudaStreamEndCapture(s, &graph));
  } else {
    cudaGraph_t unit;
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    launch<MODE>(s, pdl, counter, table, out);
    CHECK(cudaStreamEndCapture(s, &unit));
    CHECK(cudaGraphCreate(&graph, 0));
    cudaGraphNode_t prev = nullptr;
    for (int i = 0; i < copies; ++i) {
      cudaGraphNode_t node;
      CHECK(cudaGraphAddChildGraphNode(&node, graph, prev ? &prev : nullptr, prev ? 1 : 0, unit));
      prev = node;
    }
    CHECK(cudaGraphDestroy(unit));
  }
  cudaGraphExec_t exec;
  CHECK(cudaGraphInstantiate(&exec, graph, 0));
  for (int i = 0; i < 3; ++i) CHECK(cudaGraphLaunch(exec, s));
  std::vector<cudaEvent_t> ev(2 * reps);
  for (auto &e : ev) CHECK(cudaEventCreate(&e));
  for (int r = 0; r < reps; ++r) {
    CHECK(cudaEventRecord(ev[2 * r], s));
    CHECK(cudaGraphLaunch(exec, s));
    CHECK(cudaEventRecord(ev[2 * r + 1], s));
  }
  CHECK(cudaStreamSynchronize(s));
  *expected += (unsigned long long)copies * (reps + 3);
  std::vector<double> us;
  for (int r = 0; r < reps; ++r) {
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, ev[2 * r], ev[2 * r + 1]));
    us.push_back(1000.0 * ms / copies);
  }
  for (auto &e : ev) CHECK(cudaEventDestroy(e));
  CHECK(cudaGraphExecDestroy(exec));
  CHECK(cudaGraphDestroy(graph));
  std::sort(us.begin(), us.end());
  return Result{us[us.size() / 2], us[us.size() / 10], us[us.size() * 9 / 10]};
}

int main() {
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  unsigned long long *counter;
  unsigned *table, *out;
  CHECK(cudaMalloc(&counter, sizeof *counter));
  CHECK(cudaMalloc(&table, 1024 * sizeof *table));
  CHECK(cudaMalloc(&out, 1024 * sizeof *out));
  CHECK(cudaMemset(counter, 0, sizeof *counter));
  CHECK(cudaMemset(table, 0, 1024 * sizeof *table));
  unsigned long long expected = 0;
  int failures = 0;
  auto report = [&](const char *what, Result r) {
    unsigned long long got = 0;
    CHECK(cudaMemcpy(&got, counter, sizeof got, cudaMemcpyDeviceToHost));
    const bool ok = got == expected;
    failures += !ok;
    std::printf("| %s | %.3f | %.3f | %.3f | %s |\n", what, r.median, r.p10, r.p90,
                ok ? "ok" : "COUNTER WRONG");
  };
  std::printf("| launches (graph of 100) | us per launch, median | p10 | p90 | chain |\n");
  std::printf("|---|---:|---:|---:|---|\n");
  for (int round = 0; round < 2; ++round) {
    report("plain", time_chain<PLAIN>(s, false, false, counter, table, out, &expected));
    report("plain, kernel with griddepcontrol.wait",
           time_chain<WAIT_ONLY>(s, false, false, counter, table, out, &expected));
    report("PDL, trigger at start",
           time_chain<TRIGGER_AT_START>(s, true, false, counter, table, out, &expected));
    report("PDL, trigger at end",
           time_chain<TRIGGER_AT_END>(s, true, false, counter, table, out, &expected));
    report("PDL, no trigger (implicit at exit)",
           time_chain<WAIT_ONLY>(s, true, false, counter, table, out, &expected));
    report("plain, 100 child graphs",
           time_chain<PLAIN>(s, false, true, counter, table, out, &expected));
    report("PDL, trigger at start, 100 child graphs",
           time_chain<TRIGGER_AT_START>(s, true, true, counter, table, out, &expected));
  }
  return failures == 0 ? 0 : 1;
}
