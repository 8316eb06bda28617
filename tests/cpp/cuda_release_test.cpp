// C++17 test of stream-ordered release through include/kvpool.hpp: a kvpool::pool (and a
// kvpool::snapshot) destroyed during exception unwinding while their calls are still queued
// behind a long kernel. The destructors must return at once (no wait for the GPU), the
// queued calls must still run on live memory (right slots, no CUDA error), and the memory
// must be freed once the stream has passed them (kvpool::device_pending_releases() == 0).
//
// Needs no CUDA toolkit: the driver (libcuda.so.1) is opened with dlopen for the test's own
// stream, buffers and spin kernel (hand-written PTX, compiled by the driver). Without a
// driver it prints "SKIPPED" and exits 0 — or 1 with --require-gpu (scripts/gpu/run.sh).
// Built and run by tests/ffi_programs.rs (cargo test) and by scripts/gpu/run.sh on a GPU.
//
// Exit status 0 and the final "all N checks passed" line mean success.
#include "kvpool.hpp"

#include "check.hpp"

#include <dlfcn.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace {

// ---- the few driver calls the test needs, resolved with dlsym ----------------------------

using CUresult = int;
using CUdevice = int;
using CUdeviceptr = unsigned long long;
using CUcontext = void *;
using CUmodule = void *;
using CUfunction = void *;
using CUevent = void *;
using CUstream = CUstream_st *;
constexpr CUresult CUDA_SUCCESS = 0;
constexpr CUresult CUDA_ERROR_NOT_READY = 600;

struct Driver {
    void *lib = nullptr;
    CUresult (*cuInit)(unsigned);
    CUresult (*cuDeviceGetCount)(int *);
    CUresult (*cuDeviceGet)(CUdevice *, int);
    CUresult (*cuDevicePrimaryCtxRetain)(CUcontext *, CUdevice);
    CUresult (*cuDevicePrimaryCtxRelease)(CUdevice);
    CUresult (*cuCtxSetCurrent)(CUcontext);
    CUresult (*cuCtxSynchronize)();
    CUresult (*cuStreamCreate)(CUstream *, unsigned);
    CUresult (*cuStreamSynchronize)(CUstream);
    CUresult (*cuStreamDestroy)(CUstream);
    CUresult (*cuMemAlloc)(CUdeviceptr *, size_t);
    CUresult (*cuMemFree)(CUdeviceptr);
    CUresult (*cuMemcpyDtoH)(void *, CUdeviceptr, size_t);
    CUresult (*cuModuleLoadData)(CUmodule *, const void *);
    CUresult (*cuModuleGetFunction)(CUfunction *, CUmodule, const char *);
    CUresult (*cuModuleUnload)(CUmodule);
    CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                               unsigned, unsigned, CUstream, void **, void **);
    CUresult (*cuEventCreate)(CUevent *, unsigned);
    CUresult (*cuEventRecord)(CUevent, CUstream);
    CUresult (*cuEventQuery)(CUevent);
    CUresult (*cuEventDestroy)(CUevent);

    template <class F>
    bool get(F &fn, const char *name) {
        fn = reinterpret_cast<F>(dlsym(lib, name));
        return fn != nullptr;
    }

    // Empty when the driver and a device are usable, else why not.
    std::string open() {
        lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
        if (lib == nullptr) return "no NVIDIA driver (libcuda.so.1)";
        bool ok = get(cuInit, "cuInit") && get(cuDeviceGetCount, "cuDeviceGetCount") &&
                  get(cuDeviceGet, "cuDeviceGet") &&
                  get(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain") &&
                  get(cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2") &&
                  get(cuCtxSetCurrent, "cuCtxSetCurrent") &&
                  get(cuCtxSynchronize, "cuCtxSynchronize") &&
                  get(cuStreamCreate, "cuStreamCreate") &&
                  get(cuStreamSynchronize, "cuStreamSynchronize") &&
                  get(cuStreamDestroy, "cuStreamDestroy_v2") && get(cuMemAlloc, "cuMemAlloc_v2") &&
                  get(cuMemFree, "cuMemFree_v2") && get(cuMemcpyDtoH, "cuMemcpyDtoH_v2") &&
                  get(cuModuleLoadData, "cuModuleLoadData") &&
                  get(cuModuleGetFunction, "cuModuleGetFunction") &&
                  get(cuModuleUnload, "cuModuleUnload") &&
                  get(cuLaunchKernel, "cuLaunchKernel") && get(cuEventCreate, "cuEventCreate") &&
                  get(cuEventRecord, "cuEventRecord") && get(cuEventQuery, "cuEventQuery") &&
                  get(cuEventDestroy, "cuEventDestroy_v2");
        if (!ok) return "libcuda.so.1 lacks a driver API function";
        int count = 0;
        if (cuInit(0) != CUDA_SUCCESS || cuDeviceGetCount(&count) != CUDA_SUCCESS || count < 1)
            return "no usable CUDA device";
        return "";
    }
};

Driver cu;

void ok(CUresult result, const char *what) {
    if (result != CUDA_SUCCESS)
        throw std::runtime_error(std::string(what) + " failed with CUresult " +
                                 std::to_string(result));
}

// A one-thread kernel that spins on the global timer for `ns` nanoseconds (as tests/gpu).
const char *const SPIN_PTX = R"(
.version 8.0
.target sm_80
.address_size 64
.visible .entry kvp_test_spin(.param .u64 ns)
{
  .reg .u64 %r<5>;
  .reg .pred %p;
  ld.param.u64 %r1, [ns];
  mov.u64 %r2, %globaltimer;
SPIN:
  mov.u64 %r3, %globaltimer;
  sub.u64 %r4, %r3, %r2;
  setp.lt.u64 %p, %r4, %r1;
  @%p bra SPIN;
  ret;
}
)";

std::vector<int64_t> download(CUdeviceptr ptr, size_t n) {
    std::vector<int64_t> out(n);
    ok(cu.cuMemcpyDtoH(out.data(), ptr, n * sizeof(int64_t)), "cuMemcpyDtoH");
    return out;
}

std::vector<int64_t> range(int64_t from, int64_t to) {
    std::vector<int64_t> v;
    for (int64_t x = from; x < to; ++x) v.push_back(x);
    return v;
}

struct engine_failure : std::runtime_error {
    engine_failure() : std::runtime_error("the engine fails after enqueueing") {}
};

void test_destructor_during_unwinding(CUstream stream, CUfunction spin) {
    CUdeviceptr out = 0, out2 = 0;
    ok(cu.cuMemAlloc(&out, 64 * sizeof(int64_t)), "cuMemAlloc");
    ok(cu.cuMemAlloc(&out2, 32 * sizeof(int64_t)), "cuMemAlloc");
    CUevent spin_done = nullptr;
    ok(cu.cuEventCreate(&spin_done, 2 /* CU_EVENT_DISABLE_TIMING */), "cuEventCreate");

    using clock = std::chrono::steady_clock;
    clock::time_point thrown{};
    double unwind_ms = -1;
    bool spinning = false;
    std::size_t pending = 0;
    try {
        auto pool = kvpool::pool::create_cuda(0, 4096 * 16, 16);
        unsigned long long ns = 300000000ull;  // 300 ms
        void *args[] = {&ns};
        ok(cu.cuLaunchKernel(spin, 1, 1, 1, 1, 1, 1, 0, stream, args, nullptr), "spin");
        ok(cu.cuEventRecord(spin_done, stream), "cuEventRecord");
        pool.alloc_async(64, kvpool::device_span<int64_t>(reinterpret_cast<int64_t *>(out), 64),
                         stream);
        kvpool::snapshot saved = pool.backup_state_async(stream);
        pool.alloc_async(32, kvpool::device_span<int64_t>(reinterpret_cast<int64_t *>(out2), 32),
                         stream);
        pool.restore_state_async(saved, stream);
        thrown = clock::now();
        throw engine_failure();  // `saved`, then `pool`, are destroyed while unwinding
    } catch (const engine_failure &) {
        unwind_ms = std::chrono::duration<double, std::milli>(clock::now() - thrown).count();
        spinning = cu.cuEventQuery(spin_done) == CUDA_ERROR_NOT_READY;
        pending = kvpool::device_pending_releases();
    }
    std::printf("unwinding (snapshot + pool destructors) took %.3f ms; spin kernel still running: "
                "%s; pending releases: %zu\n",
                unwind_ms, spinning ? "yes" : "no", pending);
    CHECK(unwind_ms >= 0 && unwind_ms < 50);
    CHECK(spinning);       // else the test proves nothing
    CHECK(pending >= 1);   // the pool waits for its queued calls
    // The queued calls ran on live memory, and nothing broke the context.
    CHECK(cu.cuStreamSynchronize(stream) == CUDA_SUCCESS);
    CHECK(cu.cuCtxSynchronize() == CUDA_SUCCESS);
    CHECK(download(out, 64) == range(16, 80));
    CHECK(download(out2, 32) == range(80, 112));
    // Then the memory is freed, by the library's release thread, without another call.
    auto start = clock::now();
    while (kvpool::device_pending_releases() != 0 && clock::now() - start < std::chrono::seconds(5))
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    CHECK(kvpool::device_pending_releases() == 0);
    // The context is healthy: a new pool works.
    auto again = kvpool::pool::create_cuda(0, 4096 * 16, 16);
    again.alloc_async(16, kvpool::device_span<int64_t>(reinterpret_cast<int64_t *>(out), 16),
                      stream);
    again.check_device();
    CHECK(cu.cuStreamSynchronize(stream) == CUDA_SUCCESS);
    CHECK(download(out, 16) == range(16, 32));
    ok(cu.cuEventDestroy(spin_done), "cuEventDestroy");
    ok(cu.cuMemFree(out), "cuMemFree");
    ok(cu.cuMemFree(out2), "cuMemFree");
}

}  // namespace

int main(int argc, char **argv) {
    bool require_gpu = argc > 1 && std::strcmp(argv[1], "--require-gpu") == 0;
    std::string why = cu.open();
    if (!why.empty()) {
        std::printf("cuda_release_test (C++): SKIPPED: %s\n", why.c_str());
        return require_gpu ? 1 : 0;
    }
    CUdevice device = 0;
    CUcontext ctx = nullptr;
    CUstream stream = nullptr;
    CUmodule module = nullptr;
    CUfunction spin = nullptr;
    try {
        ok(cu.cuDeviceGet(&device, 0), "cuDeviceGet");
        ok(cu.cuDevicePrimaryCtxRetain(&ctx, device), "cuDevicePrimaryCtxRetain");
        ok(cu.cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
        ok(cu.cuStreamCreate(&stream, 1 /* CU_STREAM_NON_BLOCKING */), "cuStreamCreate");
        ok(cu.cuModuleLoadData(&module, SPIN_PTX), "cuModuleLoadData(spin PTX)");
        ok(cu.cuModuleGetFunction(&spin, module, "kvp_test_spin"), "cuModuleGetFunction");
        test_destructor_during_unwinding(stream, spin);
    } catch (const std::exception &e) {
        FAIL(std::string("threw: ") + e.what());
    }
    if (stream != nullptr) {
        cu.cuStreamSynchronize(stream);
        cu.cuStreamDestroy(stream);
    }
    if (module != nullptr) cu.cuModuleUnload(module);
    if (ctx != nullptr) cu.cuDevicePrimaryCtxRelease(device);
    return kvp_test::summary("cuda_release_test");
}
