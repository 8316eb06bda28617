// kvpool_bench.cu: GPU benchmark of kvpool's CUDA backend, each figure next to the floor of
// the machine it runs on (an empty kernel launch, an empty kernel in a CUDA graph, and device
// copy bandwidth), as the design brief's targets are stated relative to those floors.
//
// Build (on the GPU machine; bench-gpu/README.md has the exact commands), from the repo root:
//   nvcc -O2 -std=c++17 -arch=sm_90 bench-gpu/kvpool_bench.cu -Iinclude -L<libdir> -lkvpool
//        -lcuda -Xlinker -rpath -Xlinker <libdir> -o kvpool_bench
// Run:  ./kvpool_bench [--quick] [--csv PATH] [--device N] [--page-sizes L] [--batch-sizes L]
//                     [--ops L] [--host-only]
//
// What is timed (README.md has the rationale):
//  - host time: one call at a time, steady_clock around the call alone, median and p90 after
//    warm-up; the stream is drained outside the timed region every 64 calls so the launch
//    queue never fills (a full queue would make cuLaunchKernel block and time the GPU); an
//    empty kernel's launch is timed right after each sample, and the row's host ratio is
//    the call's median over that launch's median;
//  - device time of allocations: the call is captured into a CUDA graph once; 100 copies of
//    that graph are chained as child nodes of one graph whose replays are timed with events
//    (the same shape as the floor: 100 launches in one graph). Replaying re-runs the call's
//    kernels with the same arguments; afterwards the pool must be unfaulted and the outputs
//    the expected indices. A kernel that faults on a replay of its own call gets the events
//    method below instead (a warning, and the row's method says so);
//  - device time of frees: a replayed free would free the same slots twice, so frees are
//    timed with events around the one call instead, queued behind a spinning kernel so the
//    GPU runs it back to back with the events; the floor for those rows is an empty kernel
//    timed the same way.
// Every kvpool call is checked; the first output of every configuration is compared with
// SGLang's index math computed here on the host, and every configuration ends with the pool
// holding exactly what it should (kvp_pool_available_size_bound after a sync) and no device
// fault (kvp_pool_check_device).

#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "kvpool.h"
#include "spin.cuh"

namespace {

// ---- failures -------------------------------------------------------------------------

[[noreturn]] void die(const char *fmt, ...) {
  std::fflush(stdout);
  va_list ap;
  va_start(ap, fmt);
  std::fputs("kvpool_bench: ", stderr);
  std::vfprintf(stderr, fmt, ap);
  std::fputc('\n', stderr);
  va_end(ap);
  std::exit(1);
}

#define CUDA_CHECK(expr)                                                                   \
  do {                                                                                     \
    const cudaError_t err_ = (expr);                                                       \
    if (err_ != cudaSuccess)                                                               \
      die("%s:%d: %s: %s (%s)", __FILE__, __LINE__, #expr, cudaGetErrorName(err_),         \
          cudaGetErrorString(err_));                                                       \
  } while (0)

// The driver API's form, for graph nodes of kernels the library launched through the driver
// (the runtime cannot name their functions: cudaErrorInvalidDeviceFunction).
#define CU_CHECK(expr)                                                                     \
  do {                                                                                     \
    const CUresult res_ = (expr);                                                          \
    if (res_ != CUDA_SUCCESS) {                                                            \
      const char *name_ = "?";                                                             \
      cuGetErrorName(res_, &name_);                                                        \
      die("%s:%d: %s: %s", __FILE__, __LINE__, #expr, name_);                              \
    }                                                                                      \
  } while (0)

// The thread's last-error message belongs to the call that just failed, so it is read
// before anything else can call into kvpool.
std::string last_error_message() {
  const size_t len = kvp_last_error_message(nullptr, 0);
  std::string msg(len + 1, '\0');
  kvp_last_error_message(&msg[0], msg.size());
  msg.resize(len);
  return msg;
}

[[noreturn]] void kvp_die(const char *expr, int status, const char *file, int line) {
  const std::string msg = last_error_message();
  die("%s:%d: %s returned %d (%s): %s", file, line, expr, status, kvp_status_str(status),
      msg.c_str());
}

#define KVP_CHECK(expr)                                                                    \
  do {                                                                                     \
    const int status_ = static_cast<int>(expr);                                            \
    if (status_ != 0) kvp_die(#expr, status_, __FILE__, __LINE__);                         \
  } while (0)

// ---- settings -------------------------------------------------------------------------

constexpr int64_t kTokensPerRequest = 512;  // extend: new tokens per request (SGLang's figures)
constexpr int64_t kMaxBatch = 4096;
// --extend-tokens: at most this many a request (a long prefill chunk), and at most
// kMaxBatch * kTokensPerRequest in a batch (the pool is sized for that).
constexpr int64_t kMaxRequestTokens = 16384;
constexpr int64_t kMaxPageSize = 64;

struct Settings {
  bool quick = false;
  // Host timing only: no floors but the launch's, no device timing (graph replays and the
  // spinner behind the event timing need kernels to run concurrently, which a profiler that
  // serializes launches, such as Nsight Compute, does not allow).
  bool host_only = false;
  std::string csv;
  int device = 0;
  std::vector<int64_t> page_sizes = {1, 16, 64};
  std::vector<int64_t> batch_sizes = {1, 8, 64, 256, 1024, 4096};
  // New tokens per request of an extend (and so of the frees of its output): SGLang's 512,
  // or fewer for short prefills (a few requests of up to 64 tokens run on one warp).
  int64_t extend_tokens = kTokensPerRequest;
  // Operations to run (table names; default all).
  std::vector<std::string> ops = {"alloc",        "alloc_extend",      "alloc_extend_rows",
                                  "alloc_decode", "alloc_decode_rows", "free_indices",
                                  "free_segment"};
  bool runs(const std::string &op) const {
    return std::find(ops.begin(), ops.end(), op) != ops.end();
  }
  // host timing
  int warmup = 50;
  int min_samples = 101;
  int max_samples = 2000;
  double cell_seconds = 0.5;  // a cell stops adding samples after this (untimed work included)
  int sync_every = 64;
  // graph replay timing
  int graph_copies = 100;  // copies of the captured call in the timed graph
  // The copies as one flat graph of kernel nodes (--flat-graph), linked as stream capture
  // links consecutive launches, instead of child graphs (see flat_copies).
  bool flat = false;
  int graph_reps = 21;     // timed replays of that graph (median taken)
  // event timing (frees)
  int event_warmup = 10;
  int event_cycles = 200;

  void make_quick() {
    quick = true;
    warmup = 5;
    min_samples = 30;
    max_samples = 30;
    cell_seconds = 0.05;
    graph_copies = 20;
    graph_reps = 3;
    event_warmup = 2;
    event_cycles = 10;
  }
};

// ---- kernels of the harness -----------------------------------------------------------

__global__ void empty_kernel() {}

// An empty kernel that first waits for the kernel ahead of it, as every kvpool entry point
// does (`await_predecessors`): launched with programmatic dependent launch, the floor under
// a call in a flat graph (sm_90).
__global__ void awaiting_empty_kernel() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// Page ids of the decode outputs of the requests that started a new page, for giving
// exactly those pages back (a free by index would also free the pages the other requests
// continue).
__global__ void new_page_ids(const int64_t *out, const int32_t *requests, int count,
                             int64_t page_size, int64_t *pages) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < count) pages[i] = out[requests[i]] / page_size;
}

// ---- small utilities ------------------------------------------------------------------

template <class T>
class DeviceArray {
 public:
  explicit DeviceArray(size_t len) : len_(len) {
    CUDA_CHECK(cudaMalloc(&ptr_, std::max<size_t>(len, 1) * sizeof(T)));
  }
  ~DeviceArray() { cudaFree(ptr_); }
  DeviceArray(const DeviceArray &) = delete;
  DeviceArray &operator=(const DeviceArray &) = delete;

  T *get() const { return ptr_; }
  size_t len() const { return len_; }
  void upload(const std::vector<T> &host) {
    if (host.size() > len_) die("upload of %zu elements into %zu", host.size(), len_);
    CUDA_CHECK(cudaMemcpy(ptr_, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
  }
  std::vector<T> download(cudaStream_t stream, size_t count) const {
    std::vector<T> host(count);
    CUDA_CHECK(cudaMemcpyAsync(host.data(), ptr_, count * sizeof(T), cudaMemcpyDeviceToHost,
                               stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));
    return host;
  }

 private:
  T *ptr_ = nullptr;
  size_t len_;
};

class Event {
 public:
  Event() { CUDA_CHECK(cudaEventCreate(&e_)); }
  ~Event() { cudaEventDestroy(e_); }
  Event(const Event &) = delete;
  Event &operator=(const Event &) = delete;
  cudaEvent_t get() const { return e_; }
  void record(cudaStream_t s) { CUDA_CHECK(cudaEventRecord(e_, s)); }
  // Non-blocking: whether the stream has passed the event.
  bool passed() const {
    const cudaError_t err = cudaEventQuery(e_);
    if (err == cudaSuccess) return true;
    if (err == cudaErrorNotReady) return false;
    CUDA_CHECK(err);
    return false;
  }

 private:
  cudaEvent_t e_ = nullptr;
};

double elapsed_us(const Event &a, const Event &b) {
  float ms = 0;
  CUDA_CHECK(cudaEventElapsedTime(&ms, a.get(), b.get()));
  return static_cast<double>(ms) * 1000.0;
}

struct Stats {
  double median = NAN;
  double p90 = NAN;
  size_t samples = 0;
  // Host time (time_host): the median of an empty-kernel launch timed right after each
  // sample, so the ratio to the launch floor sees the machine as the samples did (this
  // instance's launch time drifts by more than a call's planning from minute to minute).
  double paired_floor = NAN;
};

Stats summarize(std::vector<double> v) {
  Stats s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  s.median = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
  s.p90 = v[static_cast<size_t>(std::ceil(0.9 * static_cast<double>(n))) - 1];
  s.samples = n;
  return s;
}

double mean(const std::vector<double> &v) {
  double sum = 0;
  for (double x : v) sum += x;
  return v.empty() ? NAN : sum / static_cast<double>(v.size());
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

void sync(cudaStream_t s) { CUDA_CHECK(cudaStreamSynchronize(s)); }

// ---- timing methods -------------------------------------------------------------------

// Host time of `call`, one call at a time. `prepare` (untimed) runs before each call and
// `after` (untimed) after it; both must leave the pool in a state the next `prepare` + `call`
// accept. The clock reads are opaque calls, as are kvpool's, so neither moves across them.
template <class Prepare, class Call, class After>
Stats time_host(const Settings &cfg, cudaStream_t s, Prepare prepare, Call call, After after) {
  using clock = std::chrono::steady_clock;
  for (int i = 0; i < cfg.warmup; ++i) {
    prepare();
    call();
    after();
    if ((i + 1) % cfg.sync_every == 0) sync(s);
  }
  sync(s);
  std::vector<double> samples, floor;
  samples.reserve(static_cast<size_t>(cfg.max_samples));
  floor.reserve(static_cast<size_t>(cfg.max_samples));
  const auto start = clock::now();
  while (static_cast<int>(samples.size()) < cfg.max_samples) {
    if (static_cast<int>(samples.size()) >= cfg.min_samples &&
        std::chrono::duration<double>(clock::now() - start).count() > cfg.cell_seconds)
      break;
    prepare();
    const auto t0 = clock::now();
    call();
    const auto t1 = clock::now();
    empty_kernel<<<1, 1, 0, s>>>();
    const auto t2 = clock::now();
    after();
    samples.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    floor.push_back(std::chrono::duration<double, std::micro>(t2 - t1).count());
    if (samples.size() % static_cast<size_t>(cfg.sync_every) == 0) sync(s);
  }
  sync(s);
  CUDA_CHECK(cudaGetLastError());
  Stats stats = summarize(std::move(samples));
  stats.paired_floor = summarize(std::move(floor)).median;
  return stats;
}

// Queues a spinning kernel, then `enqueue`, and reports whether the spinner was still running
// when `enqueue` returned, i.e. whether everything was queued before the GPU reached it.
template <class Enqueue>
bool behind_spinner(cudaStream_t s, unsigned long long spin_ns, Enqueue enqueue) {
  Event spun;
  spin_kernel<<<1, 1, 0, s>>>(spin_ns);
  CUDA_CHECK(cudaGetLastError());
  spun.record(s);
  enqueue();
  return !spun.passed();
}

constexpr unsigned long long kMaxSpinNs = 200ull * 1000 * 1000;

// Device time of one call per graph-unit replay: `unit` is replayed as `copies` chained child
// graphs per launch, `reps` launches queued behind a spinner and timed one by one.
// Returns the median time per call (`calls_per_unit` calls in each copy).
double graph_device_us(const Settings &cfg, cudaStream_t s, cudaGraph_t unit, int copies,
                       int calls_per_unit) {
  if (cfg.host_only) return NAN;
  cudaGraph_t graph = unit;
  if (copies > 1) {
    CUDA_CHECK(cudaGraphCreate(&graph, 0));
    cudaGraphNode_t prev = nullptr;
    for (int i = 0; i < copies; ++i) {
      cudaGraphNode_t node;
      CUDA_CHECK(cudaGraphAddChildGraphNode(&node, graph, prev ? &prev : nullptr, prev ? 1 : 0,
                                            unit));
      prev = node;
    }
  }
  cudaGraphExec_t exec;
  CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  for (int i = 0; i < 2; ++i) CUDA_CHECK(cudaGraphLaunch(exec, s));
  sync(s);

  const int reps = cfg.graph_reps;
  std::vector<Event> begin(static_cast<size_t>(reps)), end(static_cast<size_t>(reps));
  unsigned long long spin_ns = 1000ull * 1000;  // 1 ms, doubled until it covers the queueing
  for (;;) {
    const bool covered = behind_spinner(s, spin_ns, [&] {
      for (int r = 0; r < reps; ++r) {
        begin[r].record(s);
        CUDA_CHECK(cudaGraphLaunch(exec, s));
        end[r].record(s);
      }
    });
    sync(s);
    if (covered) break;
    spin_ns *= 2;
    if (spin_ns > kMaxSpinNs) die("graph replays could not be queued ahead of the GPU");
  }
  std::vector<double> per_call;
  for (int r = 0; r < reps; ++r)
    per_call.push_back(elapsed_us(begin[r], end[r]) / (copies * calls_per_unit));

  CUDA_CHECK(cudaGraphExecDestroy(exec));
  if (graph != unit) CUDA_CHECK(cudaGraphDestroy(graph));
  return summarize(std::move(per_call)).median;
}

template <class Enqueue>
cudaGraph_t capture(cudaStream_t s, Enqueue enqueue) {
  // Global mode: a call that does something not capturable (a synchronous copy, an
  // allocation) fails loudly instead of being recorded wrongly.
  CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  enqueue();
  cudaGraph_t graph;
  CUDA_CHECK(cudaStreamEndCapture(s, &graph));
  size_t nodes = 0;
  CUDA_CHECK(cudaGraphGetNodes(graph, nullptr, &nodes));
  if (nodes == 0) die("the captured call enqueued nothing");
  return graph;
}

// The edges of `graph`, with their data (programmatic or full).
struct Edges {
  std::vector<cudaGraphNode_t> from, to;
  std::vector<cudaGraphEdgeData> data;
};
Edges edges_of(cudaGraph_t graph) {
  // (One query with room to spare: a count query without edge data may be refused as lossy
  // where an edge is programmatic. A call's graph has a few kernels.)
  size_t n = 64;
  Edges e{std::vector<cudaGraphNode_t>(n), std::vector<cudaGraphNode_t>(n),
          std::vector<cudaGraphEdgeData>(n)};
  CUDA_CHECK(cudaGraphGetEdges(graph, e.from.data(), e.to.data(), e.data.data(), &n));
  if (n > e.from.size()) die("a captured call's graph has more than 64 edges");
  e.from.resize(n);
  e.to.resize(n);
  e.data.resize(n);
  return e;
}

// The edge stream capture records from the kernel ahead of a call to the call's first
// kernel: programmatic where the library launches with programmatic dependent launch (a
// library launching without it gets a full edge, and its kernels, which do not wait for
// their predecessor, must not run behind a programmatic one). Found by capturing an empty
// kernel and `call` (a clear: any call the pool takes twice) and launching that graph once,
// as every captured call of a pool must be.
template <class Call>
cudaGraphEdgeData edge_into_call(cudaStream_t s, Call call) {
  cudaGraph_t graph = capture(s, [&] {
    empty_kernel<<<1, 1, 0, s>>>();
    CUDA_CHECK(cudaGetLastError());
    call();
  });
  const Edges e = edges_of(graph);
  if (e.data.empty()) die("a captured call after a kernel has no edge to it");
  cudaGraphExec_t exec;
  CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  CUDA_CHECK(cudaGraphLaunch(exec, s));
  sync(s);
  CUDA_CHECK(cudaGraphExecDestroy(exec));
  CUDA_CHECK(cudaGraphDestroy(graph));
  return e.data[0];  // (the empty kernel's only edge)
}

// `unit` (one captured call: a chain of kernel nodes) copied `copies` times into one flat
// graph, each copy's first kernel after the previous copy's last by `link` (the edge a
// capture of consecutive calls records: edge_into_call), inside a copy by the unit's own
// edges. What a forward pass's capture of many calls holds; child graphs (graph_device_us)
// make every edge between calls a full one. Null when the unit is not a chain of kernels.
cudaGraph_t flat_copies(cudaGraph_t unit, int copies, const cudaGraphEdgeData &link) {
  size_t n = 0;
  CUDA_CHECK(cudaGraphGetNodes(unit, nullptr, &n));
  std::vector<cudaGraphNode_t> nodes(n);
  CUDA_CHECK(cudaGraphGetNodes(unit, nodes.data(), &n));
  const Edges e = edges_of(unit);
  if (n == 0 || e.from.size() != n - 1) return nullptr;
  for (cudaGraphNode_t node : nodes) {
    cudaGraphNodeType type;
    CUDA_CHECK(cudaGraphNodeGetType(node, &type));
    if (type != cudaGraphNodeTypeKernel) return nullptr;
  }
  // The chain in order: the node nothing leads to first, then along the edges.
  std::vector<cudaGraphNode_t> chain;
  std::vector<cudaGraphEdgeData> into;  // the edge into chain[k], k >= 1
  for (cudaGraphNode_t node : nodes)
    if (std::find(e.to.begin(), e.to.end(), node) == e.to.end()) chain.push_back(node);
  if (chain.size() != 1) return nullptr;
  while (chain.size() < n) {
    const auto at = std::find(e.from.begin(), e.from.end(), chain.back());
    if (at == e.from.end()) return nullptr;
    const size_t k = static_cast<size_t>(at - e.from.begin());
    chain.push_back(e.to[k]);
    into.push_back(e.data[k]);
  }
  cudaGraph_t flat;
  CUDA_CHECK(cudaGraphCreate(&flat, 0));
  cudaGraphNode_t prev = nullptr;
  for (int copy = 0; copy < copies; ++copy) {
    for (size_t k = 0; k < chain.size(); ++k) {
      // Through the driver: the library's kernels come from its own module.
      CUDA_KERNEL_NODE_PARAMS params;
      CU_CHECK(cuGraphKernelNodeGetParams(chain[k], &params));
      CUgraphNode node;
      CU_CHECK(cuGraphAddKernelNode(&node, flat, nullptr, 0, &params));
      if (prev != nullptr) {
        const cudaGraphEdgeData &edge = k == 0 ? link : into[k - 1];
        CUDA_CHECK(cudaGraphAddDependencies(flat, &prev, &node, &edge, 1));
      }
      prev = node;
    }
  }
  return flat;
}

struct DeviceTime {
  double us;
  bool graph;          // graph replay, else events around one call
  std::string method;  // for the table
};

// Device time of one captured call `unit` by graph replay: with --flat-graph over
// flat_copies ("flat graph"), else, or where the unit is not a chain of kernels, over
// child-graph copies (graph_device_us; "graph").
DeviceTime replay_device_time(const Settings &cfg, cudaStream_t s, cudaGraph_t unit,
                              const cudaGraphEdgeData &link) {
  if (cfg.flat) {
    cudaGraph_t flat = flat_copies(unit, cfg.graph_copies, link);
    if (flat != nullptr) {
      const double us = graph_device_us(cfg, s, flat, 1, cfg.graph_copies);
      CUDA_CHECK(cudaGraphDestroy(flat));
      return DeviceTime{us, true, "flat graph"};
    }
  }
  return DeviceTime{graph_device_us(cfg, s, unit, cfg.graph_copies, 1), true, "graph"};
}

// Device time of `call` by events around it, `prepare` (untimed) queued just before and
// `after` (untimed) run once the cycle is drained. Each cycle is queued behind a spinner and
// synchronized (so a paged free by index has landed before the next cycle allocates).
// Returns the mean: an event pair resolves about 0.5 us, the mean of many cycles is finer.
template <class Prepare, class Call, class After>
double event_device_us(const Settings &cfg, cudaStream_t s, Prepare prepare, Call call,
                       After after) {
  if (cfg.host_only) return NAN;
  Event e0, e1;
  std::vector<double> samples;
  unsigned long long spin_ns = 100ull * 1000;
  for (int c = 0; c < cfg.event_warmup + cfg.event_cycles;) {
    const bool covered = behind_spinner(s, spin_ns, [&] {
      prepare();
      e0.record(s);
      call();
      e1.record(s);
    });
    sync(s);
    after();
    if (!covered) {  // the sample may contain host latency: drop it, spin longer
      spin_ns *= 2;
      if (spin_ns > kMaxSpinNs) die("a call could not be queued ahead of the GPU");
      continue;
    }
    if (c >= cfg.event_warmup) samples.push_back(elapsed_us(e0, e1));
    ++c;
  }
  return mean(samples);
}

// ---- floors ---------------------------------------------------------------------------

struct Floors {
  Stats host;              // empty kernel launch, host
  double graph_us;         // empty kernel, 100 launches captured in one graph
  double child_graph_us;   // empty kernel, 1 launch captured, 100 child copies (kvpool's way)
  double flat_graph_us;    // awaiting_empty_kernel, 100 programmatic launches in one graph
                           // (flat-graph rows; graph_us where the library launches plainly)
  bool programmatic;       // the library launches programmatically (flat_graph_us's kind)
  double event_us;         // empty kernel between events (frees' way)
  double copy_bytes_per_us;  // D2D copy, bytes read + written per microsecond
};

// Whether the library launches its kernels with programmatic dependent launch on the
// current device, as PrimaryContext::programmatic_launch decides: compute capability 9.0+,
// a CUDA 12.3+ driver, and not KVPOOL_PROGRAMMATIC_LAUNCH=0.
bool library_launches_programmatically() {
  const char *off = std::getenv("KVPOOL_PROGRAMMATIC_LAUNCH");
  if (off != nullptr && std::strcmp(off, "0") == 0) return false;
  int device = 0, major = 0, driver = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  CUDA_CHECK(cudaDriverGetVersion(&driver));
  return major >= 9 && driver >= 12030;
}

Floors measure_floors(const Settings &cfg, cudaStream_t s) {
  Floors f{};
  f.programmatic = library_launches_programmatically();
  auto launch = [&] {
    empty_kernel<<<1, 1, 0, s>>>();
  };
  f.host = time_host(cfg, s, [] {}, [&] {
    launch();
  }, [] {});
  CUDA_CHECK(cudaGetLastError());
  if (cfg.host_only) {
    f.graph_us = f.child_graph_us = f.flat_graph_us = f.event_us = f.copy_bytes_per_us = NAN;
    return f;
  }

  cudaGraph_t hundred = capture(s, [&] {
    for (int i = 0; i < 100; ++i) launch();
  });
  f.graph_us = graph_device_us(cfg, s, hundred, 1, 100);
  CUDA_CHECK(cudaGraphDestroy(hundred));

  cudaGraph_t one = capture(s, launch);
  f.child_graph_us = graph_device_us(cfg, s, one, cfg.graph_copies, 1);
  CUDA_CHECK(cudaGraphDestroy(one));

  f.flat_graph_us = f.graph_us;
  if (f.programmatic) {
    cudaLaunchAttribute attribute{};
    attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attribute.val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t config{};
    config.gridDim = dim3(1);
    config.blockDim = dim3(1);
    config.stream = s;
    config.attrs = &attribute;
    config.numAttrs = 1;
    cudaGraph_t chain = capture(s, [&] {
      for (int i = 0; i < 100; ++i) CUDA_CHECK(cudaLaunchKernelEx(&config, awaiting_empty_kernel));
    });
    f.flat_graph_us = graph_device_us(cfg, s, chain, 1, 100);
    CUDA_CHECK(cudaGraphDestroy(chain));
  }

  f.event_us = event_device_us(cfg, s, [] {}, launch, [] {});

  const size_t bytes = size_t{256} << 20;
  DeviceArray<char> src(bytes), dst(bytes);
  CUDA_CHECK(cudaMemsetAsync(src.get(), 1, bytes, s));
  const int copies = cfg.quick ? 3 : 10;
  for (int i = 0; i < 3; ++i)
    CUDA_CHECK(cudaMemcpyAsync(dst.get(), src.get(), bytes, cudaMemcpyDeviceToDevice, s));
  Event e0, e1;
  e0.record(s);
  for (int i = 0; i < copies; ++i)
    CUDA_CHECK(cudaMemcpyAsync(dst.get(), src.get(), bytes, cudaMemcpyDeviceToDevice, s));
  e1.record(s);
  sync(s);
  f.copy_bytes_per_us = 2.0 * static_cast<double>(bytes) * copies / elapsed_us(e0, e1);
  return f;
}

// ---- the expected indices -------------------------------------------------------------

// SGLang's index math on a pool fresh from a clear. Its free list is then pages
// 1..num_pages (token pool: slots 1..size) and every allocation takes the next pages in
// order, so until something is freed a counter stands in for the free list.
struct FreshPoolModel {
  int64_t page_size;
  int64_t next_page = 1;

  // Three parts per request: the rest of the prefix's last page (last_loc + 1, + 2, ...),
  // then new pages taken in batch order, written from the page-aligned end of the prefix.
  std::vector<int64_t> extend(const std::vector<int64_t> &prefix, const std::vector<int64_t> &seq,
                              const std::vector<int64_t> &last_loc) {
    const int64_t ps = page_size;
    std::vector<int64_t> out;
    for (size_t i = 0; i < seq.size(); ++i) {
      const int64_t prefix_end = ceil_div(prefix[i], ps) * ps;
      const int64_t part1 = std::min(seq[i], prefix_end) - prefix[i];
      for (int64_t k = 0; k < part1; ++k) out.push_back(last_loc[i] + 1 + k);
      std::vector<int64_t> pages;
      for (int64_t n = ceil_div(seq[i], ps) - ceil_div(prefix[i], ps); n > 0; --n)
        pages.push_back(next_page++);
      for (int64_t pos = prefix[i] + part1; pos < seq[i]; ++pos)
        out.push_back(pages[static_cast<size_t>((pos - prefix_end) / ps)] * ps + pos % ps);
    }
    return out;
  }

  // A request whose new token starts a page gets the first slot of the next free page.
  std::vector<int64_t> decode(const std::vector<int64_t> &seq,
                              const std::vector<int64_t> &last_loc) {
    std::vector<int64_t> out;
    for (size_t i = 0; i < seq.size(); ++i)
      out.push_back((seq[i] - 1) % page_size == 0 ? next_page++ * page_size : last_loc[i] + 1);
    return out;
  }
};

void expect_equal(const std::vector<int64_t> &got, const std::vector<int64_t> &want,
                  const std::string &what) {
  if (got.size() != want.size())
    die("%s: %zu indices, expected %zu", what.c_str(), got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    if (got[i] != want[i])
      die("%s: index %zu is %lld, expected %lld (SGLang's index math)", what.c_str(), i,
          static_cast<long long>(got[i]), static_cast<long long>(want[i]));
}

// ---- the pool under test --------------------------------------------------------------

// One batch of requests, host and device copies (kvpool takes both: the host lengths plan
// the call, the device arrays feed the kernels).
struct Batch {
  std::vector<int64_t> prefix, seq, last_loc;
  int64_t tokens = 0;  // sum(seq - prefix)
  DeviceArray<int64_t> d_prefix, d_seq, d_last_loc;

  Batch(std::vector<int64_t> prefix_, std::vector<int64_t> seq_, std::vector<int64_t> last_loc_)
      : prefix(std::move(prefix_)), seq(std::move(seq_)), last_loc(std::move(last_loc_)),
        d_prefix(seq.size()), d_seq(seq.size()), d_last_loc(seq.size()) {
    for (size_t i = 0; i < seq.size(); ++i) tokens += seq[i] - prefix[i];
    d_prefix.upload(prefix);
    d_seq.upload(seq);
    d_last_loc.upload(last_loc);
  }
  size_t size() const { return seq.size(); }
};

struct Pool {
  kvp_pool *pool = nullptr;
  int64_t page_size;
  uint64_t size;
  cudaStream_t s;
  // How a capture links a kernel to this pool's next call (edge_into_call; --flat-graph).
  cudaGraphEdgeData link{};

  Pool(int device, int64_t ps, uint64_t size_, cudaStream_t stream)
      : page_size(ps), size(size_), s(stream) {
    kvp_pool_config config = kvp_pool_config_default();
    config.size = size;
    config.page_size = static_cast<uint32_t>(ps);
    config.index_type = KVP_INDEX_TYPE_I64;
    config.backend = KVP_BACKEND_CUDA;
    config.device = device;
    KVP_CHECK(kvp_pool_new(&config, &pool));
    // The device times replay each captured call: let a replay repeat its call (without
    // this, the turn check faults a captured call that runs twice). A library from before
    // the turn check refuses the flag: its replays repeat their calls anyway (an A/B).
    const kvp_status replays = kvp_pool_set_debug(pool, KVP_DEBUG_REPLAY_CALLS);
    if (replays != KVP_STATUS_OK && replays != KVP_STATUS_INVALID_ARGUMENT)
      kvp_die("kvp_pool_set_debug", replays, __FILE__, __LINE__);
    link = edge_into_call(s, [&] { clear(); });
  }
  ~Pool() { kvp_pool_free(pool); }
  Pool(const Pool &) = delete;
  Pool &operator=(const Pool &) = delete;

  void clear() { KVP_CHECK(kvp_pool_clear_async(pool, s)); }

  void alloc_extend(const Batch &b, DeviceArray<int64_t> &out) {
    KVP_CHECK(kvp_pool_alloc_extend_async(pool, b.prefix.data(), b.seq.data(), b.d_prefix.get(),
                                          b.d_seq.get(), b.d_last_loc.get(), b.size(),
                                          static_cast<size_t>(b.tokens), out.get(), out.len(), s));
  }
  void alloc_decode(const Batch &b, DeviceArray<int64_t> &out) {
    KVP_CHECK(kvp_pool_alloc_decode_async(pool, b.seq.data(), b.d_seq.get(), b.d_last_loc.get(),
                                          b.size(), out.get(), out.len(), s));
  }
  void free_indices(const DeviceArray<int64_t> &indices, size_t len) {
    KVP_CHECK(kvp_pool_free_indices_async(pool, indices.get(), len, s));
  }
  void free_pages(const DeviceArray<int64_t> &pages, size_t len) {
    KVP_CHECK(kvp_pool_free_pages_async(pool, pages.get(), len, s));
  }
  // The whole of `row[0, len)` as one segment: the extend outputs of requests with an empty
  // prefix and page-multiple lengths, laid end to end, are a valid row (each page's slots
  // consecutive, starting page-aligned).
  void free_segment(const DeviceArray<int64_t> &row, size_t len) {
    KVP_CHECK(kvp_pool_free_segment_async(pool, row.get(), len, 0, len, s));
  }

  // Drains the stream and checks that the device saw no invalid input and that exactly
  // `held_tokens` slots are allocated.
  void check_settled(uint64_t held_tokens, const std::string &what) {
    sync(s);
    KVP_CHECK(kvp_pool_check_device(pool));
    uint64_t available = 0;
    bool exact = false;
    KVP_CHECK(kvp_pool_available_size_bound(pool, &available, &exact));
    if (!exact)
      std::fprintf(stderr, "warning: %s: available size still a bound after a sync (%llu)\n",
                   what.c_str(), static_cast<unsigned long long>(available));
    else if (available != size - held_tokens)
      die("%s: %llu slots available, expected %llu", what.c_str(),
          static_cast<unsigned long long>(available),
          static_cast<unsigned long long>(size - held_tokens));
  }
};

// ---- results --------------------------------------------------------------------------

struct Row {
  std::string op;
  int64_t page_size, bs;
  Stats host;
  double device_us;
  double floor_host_us, floor_device_us;
  double bytes;
  std::string device_method;
};

struct Context {
  const Settings &cfg;
  const Floors &floors;
  Pool &pool;
  std::vector<Row> &rows;
};

void add_row(Context &c, const char *op, int64_t bs, Stats host, const DeviceTime &device,
             double bytes) {
  const bool flat = device.method.rfind("flat graph", 0) == 0;
  const double floor = !device.graph ? c.floors.event_us
                       : flat        ? c.floors.flat_graph_us
                                     : c.floors.graph_us;
  c.rows.push_back(Row{op, c.pool.page_size, bs, host, device.us, host.paired_floor, floor,
                       bytes, device.method});
}

// Device time of an allocation. `reset` enqueues what brings the pool to the state the call
// expects (a clear and any setup); `call` enqueues the call, `undo` gives its slots back,
// `verify` (after a drain) checks the pool and the outputs of the replayed call.
// Graph replay first. Replaying re-runs the call's kernels with the same arguments; should
// that fault the pool (a kernel that cannot tell a replay of its own call from a conflict),
// the pool is cleared and the call is timed with events instead, and the row says so.
template <class Reset, class Call, class Undo, class Verify>
DeviceTime alloc_device_time(Context &c, const std::string &what, Reset reset, Call call,
                             Undo undo, Verify verify) {
  Pool &p = c.pool;
  if (c.cfg.host_only) return DeviceTime{NAN, false, "none (--host-only)"};
  reset();
  cudaGraph_t g = capture(p.s, call);
  const DeviceTime replayed = replay_device_time(c.cfg, p.s, g, p.link);
  CUDA_CHECK(cudaGraphDestroy(g));
  sync(p.s);
  const int status = static_cast<int>(kvp_pool_check_device(p.pool));
  if (status == 0) {
    verify();
    return replayed;
  }
  if (status != KVP_STATUS_DEVICE_FAULT)
    kvp_die("kvp_pool_check_device", status, __FILE__, __LINE__);
  std::fprintf(stderr,
               "warning: %s: replaying the captured call faulted the pool (%s); timed with "
               "events instead\n",
               what.c_str(), last_error_message().c_str());
  reset();  // the clear in it recovers the pool
  sync(p.s);
  // The first check after a recovery reports the recovered fault once more (documented);
  // the next one must be clean.
  (void)kvp_pool_check_device(p.pool);
  KVP_CHECK(kvp_pool_check_device(p.pool));
  const double events_us = event_device_us(c.cfg, p.s, [] {}, call, undo);
  return DeviceTime{events_us, false, "events (graph replay faulted)"};
}

std::string where(const char *op, int64_t ps, int64_t bs) {
  return std::string(op) + " page_size " + std::to_string(ps) + " bs " + std::to_string(bs);
}

Batch extend_batch(int64_t bs, int64_t tokens) {
  return Batch(std::vector<int64_t>(bs, 0), std::vector<int64_t>(bs, tokens),
               std::vector<int64_t>(bs, -1));
}

// One row of an allocation that gives `held` slots from a cleared pool: the call once,
// checked (`check`) and undone; host time; device time by graph replay from a clear and
// `clear_outputs`, checked again after. Leaves the pool cleared.
template <class Call, class Undo, class Check, class ClearOutputs>
void bench_allocation(Context &c, const char *op, int64_t bs, const std::string &what,
                      uint64_t held, Call call, Undo undo, Check check,
                      ClearOutputs clear_outputs) {
  Pool &p = c.pool;
  p.clear();
  call();
  check(what);
  undo();

  const Stats host = time_host(c.cfg, p.s, [] {}, call, undo);
  p.check_settled(0, what + " (host timing)");

  const DeviceTime device = alloc_device_time(
      c, what,
      [&] {
        p.clear();
        clear_outputs();
      },
      call, undo,
      [&] {
        p.check_settled(held, what + " (graph replays)");
        check(what + " after graph replays");
      });
  p.clear();

  add_row(c, op, bs, host, device, 8.0 * static_cast<double>(held));
}

// alloc (kvp_pool_alloc_async): bs whole pages, bs * page_size slots. At page size 1 this is
// SGLang's `alloc` of a decode step (its page-1 allocator serves extends and decodes alike
// with `alloc`: a slice of the free tensor, no kernel of its own, so no Triton row).
void bench_alloc(Context &c, int64_t bs) {
  Pool &p = c.pool;
  const int64_t tokens = bs * p.page_size;
  DeviceArray<int64_t> out(static_cast<size_t>(tokens));
  // One request of `tokens` new tokens takes the same pages, each page's slots in order.
  const auto expected = FreshPoolModel{p.page_size}.extend({0}, {tokens}, {-1});
  bench_allocation(
      c, "alloc", bs, where("alloc", p.page_size, bs), static_cast<uint64_t>(tokens),
      [&] {
        KVP_CHECK(kvp_pool_alloc_async(p.pool, static_cast<size_t>(tokens), out.get(),
                                       out.len(), p.s));
      },
      [&] { p.free_segment(out, out.len()); },
      [&](const std::string &when) {
        expect_equal(out.download(p.s, out.len()), expected, when);
      },
      [&] { CUDA_CHECK(cudaMemsetAsync(out.get(), 0xff, out.len() * sizeof(int64_t), p.s)); });
}

// alloc_extend: bs requests with an empty prefix and 512 (--extend-tokens) new tokens each.
// `by_rows`: kvp_pool_alloc_extend_rows_async, request i in row i of an int32 req_to_token
// table of --extend-tokens columns, its new slots written into the row and into `out` (which
// the undo frees as one segment either way).
void bench_extend(Context &c, int64_t bs, bool by_rows = false) {
  Pool &p = c.pool;
  const char *op = by_rows ? "alloc_extend_rows" : "alloc_extend";
  const std::string what = where(op, p.page_size, bs);
  Batch b = extend_batch(bs, c.cfg.extend_tokens);
  DeviceArray<int64_t> out(static_cast<size_t>(b.tokens));
  const auto expected = FreshPoolModel{p.page_size}.extend(b.prefix, b.seq, b.last_loc);

  // The table (by_rows): row i for request i.
  const int64_t row_len = c.cfg.extend_tokens;
  DeviceArray<int32_t> table(by_rows ? static_cast<size_t>(bs * row_len) : 0);
  std::vector<int64_t> row_ids(by_rows ? bs : 0);
  for (size_t i = 0; i < row_ids.size(); ++i) row_ids[i] = static_cast<int64_t>(i);
  DeviceArray<int64_t> d_rows(row_ids.size());
  if (by_rows) d_rows.upload(row_ids);
  const kvp_req_table desc{table.get(), KVP_INDEX_TYPE_I32, static_cast<uint64_t>(bs),
                           static_cast<uint64_t>(row_len), static_cast<uint64_t>(row_len)};
  auto call = [&] {
    if (by_rows)
      KVP_CHECK(kvp_pool_alloc_extend_rows_async(
          p.pool, &desc, d_rows.get(), b.prefix.data(), b.seq.data(), b.d_prefix.get(),
          b.d_seq.get(), b.size(), static_cast<size_t>(b.tokens), out.get(), out.len(), p.s));
    else
      p.alloc_extend(b, out);
  };
  auto undo = [&] { p.free_segment(out, out.len()); };
  // The outputs; by row also the table, whose row i holds request i's slots, in int32.
  auto check = [&](const std::string &when) {
    expect_equal(out.download(p.s, out.len()), expected, when);
    if (!by_rows) return;
    const auto rows = table.download(p.s, table.len());
    for (size_t t = 0; t < expected.size(); ++t)
      if (rows[t] != static_cast<int32_t>(expected[t]))
        die("%s: table entry %zu is %d, expected %lld", when.c_str(), t, rows[t],
            static_cast<long long>(expected[t]));
  };

  bench_allocation(c, op, bs, what, static_cast<uint64_t>(b.tokens), call, undo, check, [&] {
    CUDA_CHECK(cudaMemsetAsync(out.get(), 0xff, out.len() * sizeof(int64_t), p.s));
    if (by_rows)
      CUDA_CHECK(cudaMemsetAsync(table.get(), 0xff, table.len() * sizeof(int32_t), p.s));
  });
}

// alloc_decode on requests of 1..page_size tokens (set up by one extend), so request i's new
// token starts a page iff i % page_size == page_size - 1: about bs / page_size requests take
// a new page and the others continue theirs, as in a decode step of a running server. On the
// token pool every request takes a slot. `by_rows`: kvp_pool_alloc_decode_rows_async on an
// int32 req_to_token table (row i = request i) that holds the setup's slots: last_loc read
// from the table, the new slot written into it.
void bench_decode(Context &c, int64_t bs, bool by_rows = false) {
  Pool &p = c.pool;
  const int64_t ps = p.page_size;
  const char *op = by_rows ? "alloc_decode_rows" : "alloc_decode";
  const std::string what = where(op, ps, bs);

  std::vector<int64_t> setup_len(bs);
  uint64_t held = 0;
  for (int64_t i = 0; i < bs; ++i) {
    setup_len[i] = i % ps + 1;
    held += static_cast<uint64_t>(ceil_div(setup_len[i], ps) * ps);
  }
  Batch setup(std::vector<int64_t>(bs, 0), setup_len, std::vector<int64_t>(bs, -1));
  DeviceArray<int64_t> setup_out(static_cast<size_t>(setup.tokens));
  FreshPoolModel model{ps};
  const auto setup_expected = model.extend(setup.prefix, setup.seq, setup.last_loc);

  p.clear();
  p.alloc_extend(setup, setup_out);
  const auto setup_slots = setup_out.download(p.s, setup_out.len());
  expect_equal(setup_slots, setup_expected, what + " (setup extend)");

  std::vector<int64_t> seq(bs), last_loc(bs);
  std::vector<int32_t> starters;       // requests whose new token starts a page
  std::vector<int64_t> continuing_at;  // last_loc of the others (they fill their page)
  int64_t offset = 0;
  for (int64_t i = 0; i < bs; ++i) {
    offset += setup_len[i];
    seq[i] = setup_len[i] + 1;
    last_loc[i] = setup_slots[static_cast<size_t>(offset - 1)];
    if ((seq[i] - 1) % ps == 0) starters.push_back(static_cast<int32_t>(i));
    else continuing_at.push_back(last_loc[i]);
  }
  Batch b(std::vector<int64_t>(bs, 0), seq, last_loc);
  const auto expected = model.decode(b.seq, b.last_loc);
  DeviceArray<int64_t> out(static_cast<size_t>(bs));

  // The table (by_rows): row i holds request i's setup slots.
  constexpr int64_t kRowLen = 2 * kMaxPageSize;
  std::vector<int32_t> table_host(static_cast<size_t>(bs * kRowLen), 0);
  std::vector<int64_t> row_ids(bs);
  for (int64_t i = 0, at = 0; i < bs; ++i) {
    row_ids[i] = i;
    for (int64_t k = 0; k < setup_len[i]; ++k)
      table_host[static_cast<size_t>(i * kRowLen + k)] =
          static_cast<int32_t>(setup_slots[static_cast<size_t>(at++)]);
  }
  DeviceArray<int32_t> table(table_host.size());
  table.upload(table_host);
  DeviceArray<int64_t> d_rows(row_ids.size());
  d_rows.upload(row_ids);
  const kvp_req_table desc{table.get(), KVP_INDEX_TYPE_I32, static_cast<uint64_t>(bs),
                           static_cast<uint64_t>(kRowLen), static_cast<uint64_t>(kRowLen)};
  auto decode = [&] {
    if (by_rows)
      KVP_CHECK(kvp_pool_alloc_decode_rows_async(p.pool, &desc, d_rows.get(), b.seq.data(),
                                                 b.d_seq.get(), b.size(), out.get(), out.len(),
                                                 p.s));
    else
      p.alloc_decode(b, out);
  };
  DeviceArray<int32_t> d_starters(starters.size());
  d_starters.upload(starters);
  DeviceArray<int64_t> pages(starters.size());
  const int count = static_cast<int>(starters.size());

  DeviceArray<int64_t> d_continuing(continuing_at.size());
  d_continuing.upload(continuing_at);
  // Each page remembers how far it is filled, so repeating the step needs the continuing
  // requests' pages rewound (kvp_pool_rewind_async, as after rejected speculative tokens).
  auto rewind = [&] {
    if (!continuing_at.empty())
      KVP_CHECK(kvp_pool_rewind_async(p.pool, d_continuing.get(), continuing_at.size(), p.s));
  };
  // Undo: the token pool frees the decode slots; a paged pool gives back exactly the new
  // pages, in batch order, so the next step takes the same pages again, and rewinds the
  // pages the other requests continued.
  auto free_new_pages = [&] {
    if (ps == 1) {
      p.free_indices(out, out.len());
    } else if (count > 0) {
      new_page_ids<<<(count + 255) / 256, 256, 0, p.s>>>(out.get(), d_starters.get(), count, ps,
                                                          pages.get());
      CUDA_CHECK(cudaGetLastError());
      p.free_pages(pages, pages.len());
    }
  };
  auto undo = [&] {
    free_new_pages();
    rewind();
  };

  decode();
  expect_equal(out.download(p.s, out.len()), expected, what);
  undo();

  const Stats host = time_host(c.cfg, p.s, [] {}, decode, undo);
  p.check_settled(held, what + " (host timing)");

  // Replays start from the state of the first call: a clear and the setup. A replayed
  // step is the decode and the rewind that makes the next replay a valid continuation; the
  // rewind alone, replayed the same way, is subtracted.
  auto reset = [&] {
    p.clear();
    p.alloc_extend(setup, setup_out);
    CUDA_CHECK(cudaMemsetAsync(out.get(), 0xff, out.len() * sizeof(int64_t), p.s));
  };
  DeviceTime device = alloc_device_time(
      c, what, reset,
      [&] {
        decode();
        rewind();
      },
      free_new_pages,
      [&] {
        p.check_settled(held + static_cast<uint64_t>(count * ps), what + " (graph replays)");
        expect_equal(out.download(p.s, out.len()), expected, what + " after graph replays");
      });
  p.check_settled(held + (device.graph ? static_cast<uint64_t>(count * ps) : 0),
                  what + " (device timing)");
  DeviceTime rewind_time{NAN, true, "graph"};
  if (!continuing_at.empty()) {
    reset();
    cudaGraph_t g = capture(p.s, rewind);
    rewind_time = replay_device_time(c.cfg, p.s, g, p.link);
    CUDA_CHECK(cudaGraphDestroy(g));
    p.check_settled(held, what + " (rewind replays)");
    device.us -= rewind_time.us;
    device.method += " less rewind";
  }
  p.clear();

  add_row(c, op, bs, host, device, 8.0 * bs);
  // The rewind of the continued pages alone (speculative decoding's undo), as subtracted
  // above; its host time on a pool where it is valid again and again (it is idempotent).
  if (!by_rows && !continuing_at.empty() && device.graph) {
    p.alloc_extend(setup, setup_out);
    const Stats rewind_host = time_host(c.cfg, p.s, [] {}, rewind, [] {});
    p.check_settled(held, where("rewind", ps, bs) + " (host timing)");
    p.clear();
    add_row(c, "rewind", bs, rewind_host, rewind_time, 8.0 * continuing_at.size());
  }
}

// Frees of one extend batch's indices (bs requests x 512 tokens, or --extend-tokens): by
// index (SGLang's `free`, which deduplicates pages on a paged pool) or as one row segment.
void bench_free(Context &c, int64_t bs, bool by_index) {
  Pool &p = c.pool;
  const int64_t ps = p.page_size;
  const char *op = by_index ? "free_indices" : "free_segment";
  const std::string what = where(op, ps, bs);
  Batch b = extend_batch(bs, c.cfg.extend_tokens);
  DeviceArray<int64_t> out(static_cast<size_t>(b.tokens));
  // A paged free by index has a page count only the device knows; drain the stream after it
  // so the next allocation sees the pages (without the drain the free list could look short
  // while the free is in flight). Outside the timed region either way.
  const bool drain_after = by_index && ps > 1;
  auto call = [&] {
    if (by_index)
      p.free_indices(out, out.len());
    else
      p.free_segment(out, out.len());
  };

  // Check the free-list order: after the free, the same allocation must give the pages back
  // (paged: freed pages return to the front, ascending for a free by index, in row order for
  // a segment, i.e. 1, 2, ... either way); the token pool appends them at the tail, so the
  // next allocation continues with fresh slots.
  FreshPoolModel model{ps};
  const auto first = model.extend(b.prefix, b.seq, b.last_loc);
  if (ps > 1) model.next_page = 1;
  const auto second = model.extend(b.prefix, b.seq, b.last_loc);
  p.clear();
  p.alloc_extend(b, out);
  expect_equal(out.download(p.s, out.len()), first, what + " (alloc before the free)");
  call();
  sync(p.s);
  p.alloc_extend(b, out);
  expect_equal(out.download(p.s, out.len()), second, what + " (alloc after the free)");
  p.free_segment(out, out.len());

  // The allocation before each free is drained too, so the free is timed on an idle stream
  // (as the Python baseline's free must be: its torch.unique synchronizes, and would otherwise
  // be charged for the allocation's kernel).
  const Stats host = time_host(
      c.cfg, p.s,
      [&] {
        p.alloc_extend(b, out);
        sync(p.s);
      },
      call, [&] {
        if (drain_after) sync(p.s);
      });
  p.check_settled(0, what + " (host timing)");

  const double device =
      event_device_us(c.cfg, p.s, [&] { p.alloc_extend(b, out); }, call, [] {});
  p.check_settled(0, what + " (event timing)");
  p.clear();

  add_row(c, op, bs, host, DeviceTime{device, false, "events"}, 8.0 * b.tokens);
}

// ---- output ---------------------------------------------------------------------------

struct Derived {
  double host_ratio, target, device_ratio;
};

Derived derive(const Row &r, const Floors &f) {
  Derived d;
  d.host_ratio = r.host.median / r.floor_host_us;
  d.target = 1.5 * std::max(r.floor_device_us, r.bytes / f.copy_bytes_per_us);
  d.device_ratio = r.device_us / d.target;
  return d;
}

void print_table(const std::vector<Row> &rows, const Floors &f) {
  std::printf(
      "| op | page_size | bs | host median µs | host p90 µs | device µs | floor host µs | "
      "floor device µs | host ratio | device target µs | device ratio | bytes "
      "| device method |\n");
  std::printf("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n");
  for (const Row &r : rows) {
    const Derived d = derive(r, f);
    std::printf("| %s | %lld | %lld | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.0f "
                "| %s |\n",
                r.op.c_str(), static_cast<long long>(r.page_size), static_cast<long long>(r.bs),
                r.host.median, r.host.p90, r.device_us, r.floor_host_us, r.floor_device_us,
                d.host_ratio, d.target, d.device_ratio, r.bytes, r.device_method.c_str());
  }
}

void write_csv(const std::string &path, const std::vector<Row> &rows, const Floors &f) {
  FILE *file = std::fopen(path.c_str(), "w");
  if (!file) die("cannot write %s: %s", path.c_str(), std::strerror(errno));
  std::fprintf(file,
               "op,page_size,bs,host_median_us,host_p90_us,device_us,floor_host_us,"
               "floor_device_us,host_ratio,device_target_us,device_ratio,bytes,device_method,"
               "host_samples\n");
  for (const Row &r : rows) {
    const Derived d = derive(r, f);
    std::fprintf(file, "%s,%lld,%lld,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,%.0f,%s,%zu\n",
                 r.op.c_str(), static_cast<long long>(r.page_size), static_cast<long long>(r.bs),
                 r.host.median, r.host.p90, r.device_us, r.floor_host_us, r.floor_device_us,
                 d.host_ratio, d.target, d.device_ratio, r.bytes, r.device_method.c_str(),
                 r.host.samples);
  }
  if (std::fclose(file) != 0) die("cannot write %s: %s", path.c_str(), std::strerror(errno));
}

void usage() {
  std::puts(
      "usage: kvpool_bench [--quick] [--csv PATH] [--device N] [--page-sizes LIST]\n"
      "                    [--batch-sizes LIST] [--ops LIST] [--extend-tokens N] [--host-only]\n"
      "                    [--flat-graph]\n"
      "  --quick             a short smoke run (few samples; numbers are not for reporting)\n"
      "  --csv PATH          also write the table as CSV to PATH\n"
      "  --device N          CUDA device ordinal (default 0)\n"
      "  --page-sizes LIST   comma-separated subset of 1,16,64 (default all)\n"
      "  --batch-sizes LIST  comma-separated, each 1..4096 (default 1,8,64,256,1024,4096;\n"
      "                      2048 is a free by index of 2048 x 512 = 1 M indices)\n"
      "  --ops LIST          comma-separated subset of alloc,alloc_extend,\n"
      "                      alloc_extend_rows,alloc_decode,alloc_decode_rows,free_indices,\n"
      "                      free_segment (default all; alloc = bs whole pages)\n"
      "  --extend-tokens N   new tokens per extend request, 1..16384, a multiple of every\n"
      "                      page size run, at most 4096 x 512 in a batch (default 512:\n"
      "                      SGLang's figures; an extend is undone, and the frees give back\n"
      "                      one, as a row segment)\n"
      "  --host-only         host timing only (under a profiler that serializes kernels)\n"
      "  --flat-graph        allocations' device time from the call's kernels copied 100\n"
      "                      times into one graph, linked as a capture of 100 calls links\n"
      "                      them (programmatic dependent launch kept), not child graphs");
}

// A comma-separated subset of `allowed` (the pool is sized for those values).
std::vector<int64_t> parse_list(const std::string &text, const std::vector<int64_t> &allowed) {
  std::vector<int64_t> values;
  size_t pos = 0;
  while (pos <= text.size()) {
    const size_t comma = std::min(text.find(',', pos), text.size());
    const std::string item = text.substr(pos, comma - pos);
    char *end = nullptr;
    const long long v = std::strtoll(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' ||
        std::find(allowed.begin(), allowed.end(), v) == allowed.end())
      die("'%s' is not one of the benchmarked values", item.c_str());
    values.push_back(v);
    pos = comma + 1;
  }
  return values;
}

// Comma-separated batch sizes, each 1..kMaxBatch (the pool is sized for kMaxBatch).
std::vector<int64_t> parse_batch_sizes(const std::string &text) {
  std::vector<int64_t> every(kMaxBatch);
  for (int64_t b = 1; b <= kMaxBatch; ++b) every[b - 1] = b;
  return parse_list(text, every);
}

// A comma-separated subset of `allowed` names.
std::vector<std::string> parse_names(const std::string &text,
                                     const std::vector<std::string> &allowed) {
  std::vector<std::string> names;
  size_t pos = 0;
  while (pos <= text.size()) {
    const size_t comma = std::min(text.find(',', pos), text.size());
    const std::string item = text.substr(pos, comma - pos);
    if (std::find(allowed.begin(), allowed.end(), item) == allowed.end())
      die("'%s' is not one of the benchmarked operations", item.c_str());
    names.push_back(item);
    pos = comma + 1;
  }
  return names;
}

Settings parse_args(int argc, char **argv) {
  Settings cfg;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--quick") {
      cfg.make_quick();
    } else if (arg == "--host-only") {
      cfg.host_only = true;
    } else if (arg == "--flat-graph") {
      cfg.flat = true;
    } else if (arg == "--csv" && i + 1 < argc) {
      cfg.csv = argv[++i];
    } else if (arg == "--device" && i + 1 < argc) {
      cfg.device = std::atoi(argv[++i]);
    } else if (arg == "--page-sizes" && i + 1 < argc) {
      cfg.page_sizes = parse_list(argv[++i], Settings().page_sizes);
    } else if (arg == "--batch-sizes" && i + 1 < argc) {
      cfg.batch_sizes = parse_batch_sizes(argv[++i]);
    } else if (arg == "--ops" && i + 1 < argc) {
      cfg.ops = parse_names(argv[++i], Settings().ops);
    } else if (arg == "--extend-tokens" && i + 1 < argc) {
      std::vector<int64_t> every(kMaxRequestTokens);
      for (int64_t t = 1; t <= kMaxRequestTokens; ++t) every[t - 1] = t;
      const std::vector<int64_t> one = parse_list(argv[++i], every);
      if (one.size() != 1) die("--extend-tokens takes one value");
      cfg.extend_tokens = one[0];
    } else if (arg == "-h" || arg == "--help") {
      usage();
      std::exit(0);
    } else {
      usage();
      die("unknown or incomplete argument: %s", arg.c_str());
    }
  }
  for (const int64_t bs : cfg.batch_sizes)
    if (bs * cfg.extend_tokens > kMaxBatch * kTokensPerRequest)
      die("batch size %lld x --extend-tokens %lld is more than the pool is sized for (%lld "
          "tokens a batch)",
          static_cast<long long>(bs), static_cast<long long>(cfg.extend_tokens),
          static_cast<long long>(kMaxBatch * kTokensPerRequest));
  for (const int64_t ps : cfg.page_sizes)
    if (cfg.extend_tokens % ps != 0)
      die("--extend-tokens %lld is not a multiple of page size %lld (an extend is undone as a "
          "row segment of whole pages)",
          static_cast<long long>(cfg.extend_tokens), static_cast<long long>(ps));
  return cfg;
}

}  // namespace

// The host CPU's model and the instruction sets the library's host planning picks from
// (Linux: /proc/cpuinfo; "unknown" elsewhere), so a run's host figures say what ran them.
struct HostCpu {
  std::string model = "unknown";
  bool avx512f = false;
  bool avx2 = false;
};

HostCpu host_cpu() {
  HostCpu cpu;
  FILE *f = std::fopen("/proc/cpuinfo", "r");
  if (f == nullptr) return cpu;
  char line[8192];
  bool have_model = false, have_flags = false;
  while ((!have_model || !have_flags) && std::fgets(line, sizeof line, f) != nullptr) {
    const std::string text(line);
    const size_t colon = text.find(':');
    if (colon == std::string::npos) continue;
    std::string value = text.substr(colon + 1);
    value.erase(0, value.find_first_not_of(' '));
    value.erase(value.find_last_not_of(" \n") + 1);
    if (!have_model && text.rfind("model name", 0) == 0) {
      cpu.model = value;
      have_model = true;
    } else if (!have_flags && text.rfind("flags", 0) == 0) {
      const std::string flags = " " + value + " ";
      cpu.avx512f = flags.find(" avx512f ") != std::string::npos;
      cpu.avx2 = flags.find(" avx2 ") != std::string::npos;
      have_flags = true;
    }
  }
  std::fclose(f);
  return cpu;
}

int main(int argc, char **argv) {
  const Settings cfg = parse_args(argc, argv);

  if (kvp_abi_version() != KVP_ABI_VERSION)
    die("libkvpool ABI %u, header ABI %u: rebuild against the library's header",
        kvp_abi_version(), static_cast<unsigned>(KVP_ABI_VERSION));
  CUDA_CHECK(cudaSetDevice(cfg.device));
  CUDA_CHECK(cudaFree(nullptr));  // create the primary context, which kvpool shares
  cudaDeviceProp prop;
  CUDA_CHECK(cudaGetDeviceProperties(&prop, cfg.device));
  int driver = 0, runtime = 0;
  CUDA_CHECK(cudaDriverGetVersion(&driver));
  CUDA_CHECK(cudaRuntimeGetVersion(&runtime));
  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));

  std::fprintf(stderr, "measuring floors...\n");
  const Floors floors = measure_floors(cfg, stream);

  // Room for the largest extend batch twice (4096 x 512 tokens) plus the decode setup and its
  // new pages at the largest page size; a multiple of every page size.
  const uint64_t pool_size = 2 * kMaxBatch * kTokensPerRequest + 2 * kMaxBatch * kMaxPageSize;

  std::vector<Row> rows;
  for (const int64_t ps : cfg.page_sizes) {
    Pool pool(cfg.device, ps, pool_size, stream);
    Context c{cfg, floors, pool, rows};
    for (const int64_t bs : cfg.batch_sizes) {
      std::fprintf(stderr, "page_size %lld bs %lld\n", static_cast<long long>(ps),
                   static_cast<long long>(bs));
      if (cfg.runs("alloc")) bench_alloc(c, bs);
      if (cfg.runs("alloc_extend")) bench_extend(c, bs);
      if (cfg.runs("alloc_extend_rows")) bench_extend(c, bs, true);
      if (cfg.runs("alloc_decode")) bench_decode(c, bs);
      if (cfg.runs("alloc_decode_rows")) bench_decode(c, bs, true);
      if (cfg.runs("free_indices")) bench_free(c, bs, true);
      if (cfg.runs("free_segment")) bench_free(c, bs, false);
    }
  }
  // Group the table by op, then page size, then batch size.
  const std::vector<std::string> order = {"alloc", "alloc_extend", "alloc_extend_rows", "alloc_decode", "rewind",
                                          "alloc_decode_rows", "free_indices", "free_segment"};
  std::stable_sort(rows.begin(), rows.end(), [&](const Row &a, const Row &b) {
    const auto ia = std::find(order.begin(), order.end(), a.op) - order.begin();
    const auto ib = std::find(order.begin(), order.end(), b.op) - order.begin();
    return ia < ib;
  });

  std::printf("# kvpool CUDA backend: %s%s\n\n", kvp_version(), cfg.quick ? " (quick run)" : "");
  std::printf("- GPU: %s (sm_%d%d), driver %d, runtime %d; int64 indices; pool of %llu slots\n",
              prop.name, prop.major, prop.minor, driver, runtime,
              static_cast<unsigned long long>(pool_size));
  const HostCpu cpu = host_cpu();
  std::printf("- host CPU: %s; AVX-512F %s, AVX2 %s (the host planning's copies: "
              "src/pool/plan.rs)\n",
              cpu.model.c_str(), cpu.avx512f ? "yes" : "no", cpu.avx2 ? "yes" : "no");
  std::printf("- alloc_extend: %lld new tokens per request, empty prefix; the frees give back "
              "one such batch\n",
              static_cast<long long>(cfg.extend_tokens));
  std::printf("- empty kernel, host launch at the start: median %.2f µs, p90 %.2f µs (%zu "
              "samples); each row's floor host is this launch timed beside its samples\n",
              floors.host.median, floors.host.p90, floors.host.samples);
  std::printf("- empty kernel, device: %.3f µs per launch in a graph of 100 launches; "
              "%.3f µs as %d child-graph copies of one launch; %.3f µs between events; "
              "flat-graph rows' floor %.3f µs (%s)\n",
              floors.graph_us, floors.child_graph_us, cfg.graph_copies, floors.event_us,
              floors.flat_graph_us,
              floors.programmatic
                  ? "100 programmatic launches in one graph of an empty kernel that first "
                    "awaits its predecessor, as the library's kernels are launched"
                  : "the graph of 100: the library launches plainly on this device");
  std::printf("- D2D copy bandwidth (read + written): %.1f GB/s\n",
              floors.copy_bytes_per_us / 1000.0);
  std::printf("- device target = 1.5 × max(floor device, bytes / copy bandwidth); bytes = "
              "indices written (alloc) or read (free), 8 bytes each. Device method: graph = "
              "the captured call replayed as %d child graphs per launch (floor: graph of 100 "
              "launches); flat graph = --flat-graph, the call's kernels copied into one graph "
              "as a capture of consecutive calls links them; events = events around one call queued behind a spinner (floor: "
              "empty kernel between events), for frees, and for an allocation whose graph "
              "replay faulted the pool\n\n",
              cfg.graph_copies);
  print_table(rows, floors);
  if (!cfg.csv.empty()) write_csv(cfg.csv, rows, floors);

  CUDA_CHECK(cudaStreamDestroy(stream));
  return 0;
}
