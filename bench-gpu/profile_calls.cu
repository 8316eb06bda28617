// A minimal driver for profiling kvpool's allocation kernels with Nsight Compute: it repeats
// [alloc_extend of `bs` requests x `tokens` new tokens, alloc_decode of the same requests
// (continuing their pages), clear] on one stream, so the allocation kernels' launches
// (kvp_extend_* and, for decodes of up to 1,024 requests, kvp_decode_*) alternate extend
// (even) and decode (odd).
//
//   nvcc -O2 -std=c++17 -arch=sm_90 -Iinclude bench-gpu/profile_calls.cu -Lgpu-artifacts/lib \
//        -lkvpool -o profile_calls
//   ncu --clock-control none --kernel-name "regex:kvp_(extend|decode)" --launch-skip 40 \
//       --launch-count 2 \
//       ./profile_calls --page-size 16 --bs 1 --tokens 100 --iterations 40
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "kvpool.h"

#define CHECK_KVP(call)                                                                   \
  do {                                                                                    \
    kvp_status status_ = (call);                                                          \
    if (status_ != KVP_STATUS_OK) {                                                       \
      char msg_[512];                                                                     \
      kvp_last_error_message(msg_, sizeof msg_);                                          \
      std::fprintf(stderr, "%s failed: %s\n", #call, msg_);                              \
      std::exit(1);                                                                       \
    }                                                                                     \
  } while (0)
#define CHECK_CUDA(call)                                                                  \
  do {                                                                                    \
    cudaError_t err_ = (call);                                                            \
    if (err_ != cudaSuccess) {                                                            \
      std::fprintf(stderr, "%s failed: %s\n", #call, cudaGetErrorString(err_));           \
      std::exit(1);                                                                       \
    }                                                                                     \
  } while (0)

template <typename T>
T *upload(const std::vector<T> &host) {
  T *device = nullptr;
  CHECK_CUDA(cudaMalloc(&device, host.size() * sizeof(T) + 8));
  CHECK_CUDA(cudaMemcpy(device, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
  return device;
}

int main(int argc, char **argv) {
  int64_t page_size = 16, bs = 1, tokens = 100, iterations = 40;
  for (int i = 1; i + 1 < argc; i += 2) {
    const long long value = std::atoll(argv[i + 1]);
    if (!std::strcmp(argv[i], "--page-size")) page_size = value;
    else if (!std::strcmp(argv[i], "--bs")) bs = value;
    else if (!std::strcmp(argv[i], "--tokens")) tokens = value;
    else if (!std::strcmp(argv[i], "--iterations")) iterations = value;
  }
  cudaStream_t stream;
  CHECK_CUDA(cudaSetDevice(0));
  CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  kvp_pool_config config = kvp_pool_config_default();
  config.size = (uint64_t)page_size * 300000;
  config.page_size = (uint32_t)page_size;
  config.index_type = KVP_INDEX_TYPE_I64;
  config.backend = KVP_BACKEND_CUDA;
  kvp_pool *pool = nullptr;
  CHECK_KVP(kvp_pool_new(&config, &pool));

  // Extend: empty prefixes, `tokens` each. Decode: seq = tokens + 1, continuing from the
  // last slot each extend handed out (read back after the extend).
  std::vector<int64_t> zeros(bs, 0), seq(bs, tokens), dseq(bs, tokens + 1), none(bs, -1);
  int64_t *d_zeros = upload(zeros), *d_seq = upload(seq), *d_dseq = upload(dseq);
  int64_t *d_none = upload(none), *d_last = upload(none);
  int64_t *out = nullptr, *dout = nullptr;
  CHECK_CUDA(cudaMalloc(&out, bs * tokens * sizeof(int64_t)));
  CHECK_CUDA(cudaMalloc(&dout, bs * sizeof(int64_t)));
  std::vector<int64_t> slots(bs * tokens), last(bs);
  for (int64_t it = 0; it < iterations; ++it) {
    CHECK_KVP(kvp_pool_alloc_extend_async(pool, zeros.data(), seq.data(), d_zeros, d_seq, d_none,
                                          bs, bs * tokens, out, bs * tokens, stream));
    if (it == 0) {
      CHECK_CUDA(cudaMemcpyAsync(slots.data(), out, slots.size() * 8, cudaMemcpyDeviceToHost,
                                 stream));
      CHECK_CUDA(cudaStreamSynchronize(stream));
      for (int64_t r = 0; r < bs; ++r) last[r] = slots[(r + 1) * tokens - 1];
      CHECK_CUDA(cudaMemcpy(d_last, last.data(), bs * 8, cudaMemcpyHostToDevice));
    }
    CHECK_KVP(kvp_pool_alloc_decode_async(pool, dseq.data(), d_dseq, d_last, bs, dout, bs,
                                          stream));
    CHECK_KVP(kvp_pool_clear_async(pool, stream));
  }
  CHECK_CUDA(cudaStreamSynchronize(stream));
  CHECK_KVP(kvp_pool_check_device(pool));
  std::printf("profile_calls: page %lld bs %lld tokens %lld x %lld iterations: ok\n",
              (long long)page_size, (long long)bs, (long long)tokens, (long long)iterations);
  kvp_pool_free(pool);
  return 0;
}
