// The pool's state digest (definition: src/digest.rs and kvp_pool_digest in
// include/kvpool.h): the same 64-bit value the host backend computes for the same state.
//
// Read-only: it reads cursor[call.in] (the state current at its point in the stream) and
// writes neither cursor, so the host does not flip the cursor parity after it. Any number
// of blocks: each sums its pages' terms (free list by ring position from head, staged
// pages, page map) and adds the block's sums to `scratch` with atomicAdd; wrapping
// addition is commutative, so the result does not depend on which block comes first. The
// last block (a ticket in `scratch[3]`) chains the sums into the digest, writes it to `out`
// and zeroes `scratch` for the next call (a graph replay included).
#pragma once
#include "pool_state.cuh"

namespace kvp {
namespace digest {

constexpr unsigned long long VERSION = 1;
constexpr unsigned long long DOMAIN_POOL = 0x4b5650504f4f4c01ull;
constexpr unsigned long long DOMAIN_FREE = 0x465245454c495354ull;
constexpr unsigned long long DOMAIN_STAGED = 0x5354414745440000ull;
constexpr unsigned long long DOMAIN_PAGE = 0x504147454d415000ull;
constexpr int BLOCK = 256;

__device__ inline unsigned long long mix(unsigned long long x) {
  unsigned long long z = x + 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Digest page states: 0 reserved, 1 free, 2 staged, 3 allocated (held pages too: a hold is a
// lock, not a state of the slots), 4 freed in an open group (both device kinds), 6 claimed
// (transient: never seen between calls).
__device__ inline uint32_t state_of(uint32_t kind) {
  if (kind == KIND_PENDING_IDX) return KIND_PENDING_ORD;
  return kind == KIND_HELD ? KIND_ALLOCATED : kind;
}

__device__ inline unsigned long long warp_sum(unsigned long long x) {
  for (int o = 16; o > 0; o >>= 1) x += __shfl_down_sync(0xffffffffu, x, o);
  return x;
}

__device__ void run(const View &v, const Call &call, unsigned long long *scratch,
                    unsigned long long *out) {
  const Cursor c = v.header->cursor[call.in];
  const uint32_t n = v.num_pages;
  const bool paged = v.page_size > 1;
  unsigned long long sums[3] = {0, 0, 0};  // free list, staged, page map
  const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
  for (unsigned long long t = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; t <= n;
       t += stride) {
    if (t < c.free_len) {
      const unsigned long long pos = c.head + t;
      const uint32_t page = v.ring[pos >= n ? pos - n : pos];
      sums[0] += mix(mix(DOMAIN_FREE + t) ^ page);
    }
    if (t < c.staged_len) sums[1] += mix(DOMAIN_STAGED ^ v.staged[t]);
    const uint32_t state = state_of(kind_of(v.state[t]));
    const unsigned long long fill =
        state == KIND_ALLOCATED && paged ? (unsigned long long)fill_of(v.fill[t]) : 0;
    sums[2] += mix(mix(DOMAIN_PAGE + t) ^ ((unsigned long long)state | fill << 8));
  }
  __shared__ unsigned long long partial[3][BLOCK / 32];
  __shared__ bool last;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int i = 0; i < 3; ++i) {
    const unsigned long long s = warp_sum(sums[i]);
    if (lane == 0) partial[i][warp] = s;
  }
  __syncthreads();
  if (threadIdx.x < 3) {
    unsigned long long s = 0;
    for (int w = 0; w < BLOCK / 32; ++w) s += partial[threadIdx.x][w];
    atomicAdd(&scratch[threadIdx.x], s);
  }
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(&scratch[3], 1ull) == gridDim.x - 1;
  __syncthreads();
  if (!last || threadIdx.x != 0) return;
  __threadfence();
  volatile unsigned long long *s = scratch;
  const unsigned long long free_sum = s[0], staged_sum = s[1], page_sum = s[2];
  const unsigned long long values[11] = {VERSION,
                                         v.page_size,
                                         n,
                                         v.need_sort ? 1ull : 0ull,
                                         (call.flags & CALL_IN_GROUP) ? 1ull : 0ull,
                                         // (out of turn: it read some other call's
                                         // state, so it reads as a faulted pool's)
                                         dead_call(v.header->fault, c, call) ? 1ull : 0ull,
                                         c.free_len,
                                         c.staged_len,
                                         free_sum,
                                         staged_sum,
                                         page_sum};
  unsigned long long h = DOMAIN_POOL;
  for (int i = 0; i < 11; ++i) h = mix(h ^ values[i]);
  *out = h;
  s[0] = 0;
  s[1] = 0;
  s[2] = 0;
  s[3] = 0;
}

}  // namespace digest
}  // namespace kvp

extern "C" __global__ void __launch_bounds__(kvp::digest::BLOCK)
    kvp_digest(kvp::View v, kvp::Call call, unsigned long long *scratch, unsigned long long *out) {
  kvp::await_predecessors();
  kvp::digest::run(v, call, scratch, out);
}
