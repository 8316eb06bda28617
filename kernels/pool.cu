// kvpool's CUDA kernels: every operation of a device pool, enqueued on the caller's stream.
//
// The host has validated everything it can see (lengths, counts, shortage) before a launch;
// kernels check what only the device can see (the indices themselves) and are
// all-or-nothing: a call that meets invalid input reverts what it touched, writes the
// padding slot 0 to its outputs, sets the sticky fault and records the first bad element in
// host-mapped memory. Every later kernel of the pool then does nothing (outputs 0) until the
// host resets or restores the pool.
//
// Index math is SGLang's (see src/pool/plan.rs): an extend's new tokens fill the prefix's
// partial page (part 1), then whole new pages (part 2), then a new partial page (part 3);
// requests take new pages from the front of the free list in batch order. Instead of
// SGLang's O(bs^2) prefix sum, each block reduces the requests before its own and scans its
// own requests: O(bs) per block, no recompilation for any batch size.
#include "pool_state.cuh"

namespace kvp {

// Pages sorted in shared memory. More: a one-block scan of the page map (free group end); a
// paged free by index of more indices counts per chunk of the page map as it claims, then
// release_claimed releases chunk by chunk.
constexpr int SORT_CAP = 4096;
constexpr unsigned FULL = 0xffffffffu;
constexpr unsigned long long NO_ERROR = ~0ull;
// `Header::ticket`'s flag: some block of the call reported an error (see conclude).
constexpr uint32_t TICKET_ERROR = 1u << 31;

// The first statement of every entry point. On sm_90 the host launches each kernel with
// programmatic dependent launch (src/cuda/kernels.rs: `Kernels::launch_shared`), so that it
// may be scheduled while the work ahead of it on the stream is finishing; this waits until
// that work has completed and its memory is visible, before the kernel loads or stores
// anything. A kernel launched without it (or on sm_80) passes at once.
__device__ __forceinline__ void await_predecessors() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// ---- small block-wide building blocks ----------------------------------------------------

// Exclusive prefix sum over the block; `total` gets the block's sum.
template <int BLOCK>
__device__ unsigned long long block_exclusive_scan(unsigned long long x,
                                                   unsigned long long *total) {
  __shared__ unsigned long long warp_sums[BLOCK / 32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  unsigned long long v = x;
  for (int o = 1; o < 32; o <<= 1) {
    unsigned long long y = __shfl_up_sync(FULL, v, o);
    if (lane >= o) v += y;
  }
  if (lane == 31) warp_sums[warp] = v;
  __syncthreads();
  if (warp == 0) {
    unsigned long long w = lane < BLOCK / 32 ? warp_sums[lane] : 0;
    for (int o = 1; o < 32; o <<= 1) {
      unsigned long long y = __shfl_up_sync(FULL, w, o);
      if (lane >= o) w += y;
    }
    if (lane < BLOCK / 32) warp_sums[lane] = w;
  }
  __syncthreads();
  const unsigned long long before = warp ? warp_sums[warp - 1] : 0;
  *total = warp_sums[BLOCK / 32 - 1];
  __syncthreads();
  return before + v - x;
}

// Two running totals at once, with one barrier: each thread gets the exclusive prefix of
// (a, b) over the block and the block's totals. Shared memory is used once (no reuse, so no
// barrier after it); a one-warp block needs only shuffles and the barrier for its callers.
struct Pair {
  unsigned long long a, b;
};

// Inclusive prefix sums of two values over the warp, in their own width (extend_few.cuh
// scans in 32 bits where the sums fit). WIDTH < 32: exact in the first WIDTH lanes only (the
// lanes past them sum windows of their own), for callers with at most WIDTH values.
template <typename T, int WIDTH = 32>
__device__ inline void warp_inclusive_scan2(T &a, T &b) {
  const int lane = threadIdx.x & 31;
  for (int o = 1; o < WIDTH; o <<= 1) {
    const T ya = __shfl_up_sync(FULL, a, o);
    const T yb = __shfl_up_sync(FULL, b, o);
    if (lane >= o) {
      a += ya;
      b += yb;
    }
  }
}

template <int WIDTH = 32>
__device__ inline Pair warp_inclusive_scan(Pair x) {
  warp_inclusive_scan2<unsigned long long, WIDTH>(x.a, x.b);
  return x;
}

// The exclusive prefixes of (a, b) over the block and its totals (`*ta`, `*tb`), in the width
// of T.
template <int BLOCK, typename T>
__device__ __forceinline__ void block_scan2(T &a, T &b, T *ta, T *tb) {
  __shared__ T warp_totals[BLOCK / 32][2];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  T ia = a, ib = b;
  warp_inclusive_scan2(ia, ib);
  if (lane == 31) {
    warp_totals[warp][0] = ia;
    warp_totals[warp][1] = ib;
  }
  __syncthreads();
  T before_a = 0, before_b = 0, sum_a = 0, sum_b = 0;
  if constexpr (sizeof(T) == 4 && BLOCK >= 256) {
    // 32 bits, eight warps or more: a warp's totals a lane, added by four warp reductions
    // instead of every thread reading and adding all BLOCK / 32 of them (as decode_block's
    // block_rank2; there, two warps' and four warps' blocks were 1.01-1.03x slower so, run
    // s25-2). Run s26-1: extend_blocks and extend_block at 33-256 requests 0.97-1.00x the
    // time.
    const T wa = lane < BLOCK / 32 ? warp_totals[lane][0] : 0;
    const T wb = lane < BLOCK / 32 ? warp_totals[lane][1] : 0;
    before_a = __reduce_add_sync(FULL, lane < warp ? wa : 0);
    before_b = __reduce_add_sync(FULL, lane < warp ? wb : 0);
    sum_a = __reduce_add_sync(FULL, wa);
    sum_b = __reduce_add_sync(FULL, wb);
  } else {
#pragma unroll
    for (int w = 0; w < BLOCK / 32; ++w) {
      const T wa = warp_totals[w][0], wb = warp_totals[w][1];
      if (w < warp) {
        before_a += wa;
        before_b += wb;
      }
      sum_a += wa;
      sum_b += wb;
    }
  }
  *ta = sum_a;
  *tb = sum_b;
  a = before_a + ia - a;
  b = before_b + ib - b;
}

template <int BLOCK>
__device__ Pair block_scan_pair(Pair x, Pair *total) {
  block_scan2<BLOCK>(x.a, x.b, &total->a, &total->b);
  return x;
}

// block_scan_pair of values bounded by a plan's totals: in 32 bits when the totals are below
// (2^31 / BLOCK), each value clamped to its total + 1 (as extend_few's request_offsets: a
// thread past the plan still makes every running sum from it on pass the total, so the first
// request past the plan and whether the call is live are those of the exact sums; without
// one the sums are exact), else in 64. Half the shuffles of the 64-bit scan on the path
// every thread of extend_block runs before the ring loads.
template <int BLOCK>
__device__ __forceinline__ Pair block_scan_plan(Pair x, unsigned long long total_tokens,
                                                unsigned long long total_pages, Pair *total) {
  constexpr unsigned long long NARROW = (1ull << 31) / BLOCK;
  if (total_tokens < NARROW && total_pages < NARROW) {
    uint32_t a = (uint32_t)min(x.a, total_tokens + 1), b = (uint32_t)min(x.b, total_pages + 1);
    uint32_t ta, tb;
    block_scan2<BLOCK>(a, b, &ta, &tb);
    *total = Pair{ta, tb};
    return Pair{a, b};
  }
  return block_scan_pair<BLOCK>(x, total);
}

// The block's totals of (a, b), with one barrier (shared memory used once, as above).
template <int BLOCK>
__device__ Pair block_sum_pair(Pair x) {
  __shared__ Pair warp_totals[BLOCK / 32];
  for (int o = 16; o > 0; o >>= 1) {
    x.a += __shfl_down_sync(FULL, x.a, o);
    x.b += __shfl_down_sync(FULL, x.b, o);
  }
  if ((threadIdx.x & 31) == 0) warp_totals[threadIdx.x >> 5] = x;
  __syncthreads();
  Pair sum{0, 0};
#pragma unroll
  for (int w = 0; w < BLOCK / 32; ++w) {
    sum.a += warp_totals[w].a;
    sum.b += warp_totals[w].b;
  }
  return sum;
}

// Errors: each block keeps the smallest (position << 8 | code) it met in shared memory (no
// global round trip on the common path); `conclude` combines the blocks.
__device__ inline void report(unsigned long long *errors, unsigned long long position,
                              uint32_t code) {
  atomicMin(errors, (position << 8) | code);
}

__device__ inline void init_errors(unsigned long long *errors) {
  if (threadIdx.x == 0) *errors = NO_ERROR;
  __syncthreads();
}

// After a block's work: true in the one block that finishes last, which then sees every
// other block's writes and finds the call's verdict (smallest error of any block, or
// NO_ERROR) in `*errors`. A single-block grid needs only a barrier.
//
// Ordering: the barrier, then thread 0's fence before its ticket, order the whole block's
// writes before the ticket (a fence is cumulative over what the barrier ordered before it: the
// pattern of cooperative groups' grid sync); the last block fences after its ticket before it
// reads or overwrites what other blocks wrote. The ticket's top bit says that some block
// reported an error: such a block lowers `op_error` and sets the bit before taking its ticket,
// so the last block learns from its own ticket whether `op_error` needs reading (a dependent
// round trip a clean call skips).
__device__ bool conclude(Header *h, unsigned long long *errors) {
  if (gridDim.x == 1) {
    __syncthreads();
    return true;
  }
  __shared__ bool last;
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    if (*errors != NO_ERROR) {
      atomicMin(&h->op_error, *errors);
      __threadfence();
      atomicOr(&h->ticket, TICKET_ERROR);
    }
    const uint32_t seen = atomicAdd(&h->ticket, 1u);
    last = (seen & ~TICKET_ERROR) == gridDim.x - 1;
    if (last) {
      __threadfence();
      if (seen & TICKET_ERROR) {
        *errors = *(volatile unsigned long long *)&h->op_error;
        h->op_error = NO_ERROR;  // ready for the next call
      }
      h->ticket = 0;
    }
  }
  __syncthreads();
  return last;
}

// Thread 0 only: publishes the counts of `c` for the host (see HostRecord).
__device__ void mirror_counts(const View &v, const Call &call, const Cursor &c) {
  if (!(call.flags & CALL_MIRROR)) return;
  const unsigned long long t = (unsigned long long)call.seq << 32;
  volatile unsigned long long *rec = &v.record->mirror_free;
  rec[0] = t | c.free_len;
  rec[1] = t | c.staged_len;
  rec[2] = t | c.group_idx_len;
  rec[3] = t | c.group_ord_len;
}

// The later of two call numbers in the host's wrapping order (0: no call).
__device__ inline uint32_t later_seq(uint32_t a, uint32_t b) {
  if (a == 0) return b;
  if (b == 0) return a;
  return (int32_t)(b - a) > 0 ? b : a;
}

// Thread 0 only: makes the pool faulted (first fault wins) and tells the host. The fault
// is recorded as the latest call known to have run: this one, or the writer of a cursor
// when this kernel's call is older (a graph launched after later calls, or after a clear
// or restore; a reservation step), so that the host never takes a fault raised now for
// one from before its last recovery, which it would not let block the pool. Out of line:
// a fault's path, which a call never takes when all is well, kept out of the kernels'
// bodies (with the turn check's faults inlined at every commit, one-request decode's SASS
// grew from 1,256 instructions to 1,776; out of line, 1,408. Run s44-3, H100, page 16, with
// the replay check's load of its own (since removed): extends of 1-1,024 requests
// 0.92-1.01x the time of the faults inline, decodes 0.96-1.05x).
__device__ __noinline__ void raise_fault_at(Header *h, HostRecord *record, uint32_t op,
                                            uint32_t call_seq, unsigned long long key,
                                            long long value) {
  if (atomicCAS(&h->fault, 0u, 1u) != 0u) return;
  const volatile Cursor *cursors = h->cursor;
  const uint32_t seq = later_seq(later_seq(call_seq, cursors[0].writer), cursors[1].writer);
  volatile HostRecord *rec = record;
  rec->fault_code = (unsigned long long)(key & 0xff) | ((unsigned long long)op << 32);
  rec->fault_position = (long long)(key >> 8);
  rec->fault_value = value;
  __threadfence_system();
  rec->fault_seq = seq;
}
__device__ __forceinline__ void raise_fault(const View &v, const Call &call,
                                            unsigned long long key, long long value) {
  raise_fault_at(v.header, v.record, call.op, call.seq, key, value);
}

// The turn check. The host numbers its cursor-moving calls (`Call::runs`: how many it made
// before this one) and every cursor carries the number of the call that wrote it plus one
// (`Cursor::runs`). A call that reads a cursor of another number runs out of the order the
// calls were made in: a call recorded by stream capture whose graph was launched late
// (after later calls), early (before the calls made ahead of it), twice, or never (a
// later call then finds the cursor before it); or streams the caller did not order. Such
// a call would hand out pages a call before or after it hands out too, so it does nothing
// (its kernels count it dead, as in a faulted pool) and its commit faults the pool.
__device__ __forceinline__ bool out_of_turn(const Cursor &c, const Call &call) {
  return c.runs != call.runs;
}
// Whether a call must change nothing: the pool is faulted, or the call is out of turn.
__device__ __forceinline__ bool dead_call(uint32_t fault, const Cursor &c, const Call &call) {
  return fault != 0 || out_of_turn(c, call);
}

// `next` as the call writes it: with the call's turn.
__device__ __forceinline__ Cursor stamped(Cursor next, const Call &call) {
  next.runs = call.runs + 1;
  next.writer = call.seq;
  return next;
}

// Thread 0 only: writes the call's new cursor and publishes its counts, unchecked (a clear
// or restore, whose cursor is not made from the one it read).
__device__ void publish(const View &v, const Call &call, const Cursor &next) {
  v.header->cursor[call.in ^ 1] = stamped(next, call);
  mirror_counts(v, call, next);
}

// Thread 0 only: the turn check's fault of a call that read a cursor of turn `runs` written
// last written or consumed by call `writer` (out of turn), or that finds itself the consumer
// of the cursor it read (run twice): one function for both, so that commit's test is one
// compare.
__device__ __forceinline__ void raise_turn_fault(const View &v, const Call &call, uint32_t runs,
                                                uint32_t writer) {
  if (runs != call.runs) {
    const unsigned long long ahead = (uint32_t)(runs - call.runs);
    raise_fault(v, call, ((unsigned long long)call.seq << 8) | ERR_OUT_OF_TURN,
                (long long)(ahead << 32 | writer));
  } else {
    raise_fault(v, call, ((unsigned long long)call.seq << 8) | ERR_REPLAYED, 0);
  }
}
// Thread 0 only: faults the pool when the call is out of turn (`c`: the cursor it read).
__device__ __forceinline__ void check_turn(const View &v, const Call &call, const Cursor &c) {
  if (out_of_turn(c, call)) raise_turn_fault(v, call, c.runs, c.writer);
}
// The replay check: a call that has run already (its graph replayed at once, which repeats
// the call on the state before it: the same pages again) finds its own number in `found`,
// one of the two cursors' writer words as read at the kernel's start, and faults the pool,
// unless the call is CALL_REPLAYABLE (benchmarks timing a call by replaying its graph):
// - ON_READ (commit, and conclude_take's default): the cursor the call reads, which its
//   commit overwrites with the call's number (mark_consumed). No load of its own: run
//   s45-6 found such a load cost extends of 1 and 8 requests 0.17-0.22 us.
// - ON_WRITTEN: the cursor the call writes (`written_cursor_writer`, loaded with the cursor
//   the call reads), no mark: the decode kernels, which write their cursor before the
//   verdict, and whose code took 1.02-1.06x the time with the mark (run s46-2, H100).
enum class Replay { ON_READ, ON_WRITTEN };
__device__ __forceinline__ bool replayed(const Call &call, uint32_t found) {
  return found == call.seq && !(call.flags & CALL_REPLAYABLE);
}
// Thread 0 only: faults the pool when the call has run already.
__device__ __forceinline__ void check_replay(const View &v, const Call &call, uint32_t found) {
  if (replayed(call, found)) raise_turn_fault(v, call, call.runs, call.seq);
}
// Thread 0 only: marks the cursor the call read as consumed by it. Only the replay check
// reads the mark, and only in the committing thread, from its own load at the kernel's start:
// a block of this call that reads the cursor after the mark decides as before.
__device__ __forceinline__ void mark_consumed(const View &v, const Call &call) {
  v.header->cursor[call.in].writer = call.seq;
}
// Thread 0 only (of the one block that writes the cursor), once per call: the call's new
// cursor. `next` is the cursor the call read or one made from it, so it still carries the
// reader's turn: a call out of turn faults the pool here, as does a call that has run
// already (`found`, by REPLAY: see Replay).
template <Replay REPLAY>
__device__ void commit_found(const View &v, const Call &call, const Cursor &next, uint32_t found) {
  if (out_of_turn(next, call) || replayed(call, found))
    raise_turn_fault(v, call, next.runs, next.writer);
  publish(v, call, next);
  if constexpr (REPLAY == Replay::ON_READ) mark_consumed(v, call);
}
// The same, ON_READ: `read` is the cursor this thread read at the kernel's start.
__device__ void commit(const View &v, const Call &call, const Cursor &read, const Cursor &next) {
  commit_found<Replay::ON_READ>(v, call, next, read.writer);
}

// Page arithmetic without 64-bit division when page_size is a power of two (the usual case:
// a 64-bit divide costs on the order of a hundred instructions per token).
// The divisions are out of line: inlined at every call site, the 64-bit division code would
// make the kernels several times larger, and a small batch's kernel time is largely the
// fetching of its instructions.
__device__ __noinline__ unsigned long long div_slow(unsigned long long x, unsigned long long d) {
  return x / d;
}
__device__ __noinline__ unsigned long long mod_slow(unsigned long long x, unsigned long long d) {
  return x % d;
}
__device__ inline unsigned long long div_ps(unsigned long long x, const View &v) {
  return v.page_shift != NOT_POW2 ? x >> v.page_shift : div_slow(x, v.page_size);
}
__device__ inline unsigned long long mod_ps(unsigned long long x, const View &v) {
  return v.page_shift != NOT_POW2 ? x & (v.page_size - 1) : mod_slow(x, v.page_size);
}
// The same where the caller already knows which (a kernel body instantiated for both).
template <bool POW2>
__device__ inline unsigned long long div_ps(unsigned long long x, const View &v) {
  return POW2 ? x >> v.page_shift : div_slow(x, v.page_size);
}
template <bool POW2>
__device__ inline unsigned long long mod_ps(unsigned long long x, const View &v) {
  return POW2 ? x & (v.page_size - 1) : mod_slow(x, v.page_size);
}
// A global load issued where it stands in the source. A plain load whose value one branch
// of a kernel leaves unused is moved into the other branch by the compiler (past the
// checks a decode makes before it needs the value: a round trip later); an asm volatile
// statement is not moved. Relaxed at GPU scope: L2's value, as fresh as a plain load's.
__device__ __forceinline__ uint32_t load_here(const uint32_t *p) {
  uint32_t x;
  asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(x) : "l"(p));
  return x;
}
__device__ __forceinline__ unsigned long long load_here(const unsigned long long *p) {
  unsigned long long x;
  asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(x) : "l"(p));
  return x;
}

// The writer of the cursor a call writes, loaded where it stands (with the cursor the call
// reads, so that the kernel's end waits for no load of its own): the decode kernels' `found`.
__device__ __forceinline__ uint32_t written_cursor_writer(const Header *h, const Call &call) {
  return load_here(&h->cursor[call.in ^ 1].writer);
}

// The page words a one-warp check of last_loc reads, issued as soon as last_loc is in: at
// last_loc's page clamped into the page map (num_pages + 1 words), which is the prefix page
// wherever the words are used (a checked last_loc lies in pages 1..num_pages), so the
// address needs no check first. `filled` only where fill points are tracked.
struct PageWords {
  uint32_t page, word;
  unsigned long long filled;
};
template <bool POW2>
__device__ __forceinline__ PageWords load_page_words(long long last_loc, const View &v) {
  const uint32_t page = (uint32_t)min(div_ps<POW2>((unsigned long long)last_loc, v),
                                      (unsigned long long)v.num_pages);
  return PageWords{page, load_here(&v.state[page]),
                   v.page_size > 1 ? load_here(&v.fill[page]) : 0ull};
}

// Timing probes (bench-gpu/anatomy.cu compiles the kernels with KVP_PROBES, run.sh anatomy):
// lane 0 of each warp of block 0 records the SM clock at `point` once `dep` is computed, so
// a phase's cycles can be read off one launch. Without KVP_PROBES a probe is nothing (its
// arguments are not evaluated) and the fatbin is unchanged.
#ifdef KVP_PROBES
constexpr int PROBE_WARPS = 8, PROBE_POINTS = 8;
__device__ unsigned long long probe_clock[PROBE_WARPS][PROBE_POINTS];
__device__ __forceinline__ void probe(int point, unsigned long long dep) {
  // (The never-taken trap makes the clock read wait for `dep`: an input the instruction
  // does not use orders nothing in the SASS.)
  unsigned long long t;
  asm volatile(
      "{\n\t.reg .pred p;\n\tsetp.eq.u64 p, %1, 0xfedcba9876543210;\n\t@p trap;\n\t"
      "mov.u64 %0, %%clock64;\n\t}"
      : "=l"(t)
      : "l"(dep));
  const uint32_t warp = threadIdx.x >> 5;
  if (blockIdx.x == 0 && (threadIdx.x & 31) == 0 && warp < PROBE_WARPS)
    probe_clock[warp][point] = t;
}
#define KVP_PROBE(point, dep) ::kvp::probe(point, (unsigned long long)(dep))
#else
#define KVP_PROBE(point, dep) ((void)0)
#endif

// `head + k` around the ring, for `k < num_pages`.
__device__ inline uint32_t ring_pos(uint32_t head, unsigned long long k, uint32_t n) {
  const unsigned long long p = head + k;
  return (uint32_t)(p >= n ? p - n : p);
}

// The cursor once `pages` pages are taken from the ring's head (conclude_take's, for a
// kernel that commits before its verdict).
__device__ __forceinline__ Cursor taken_cursor(const View &v, const Cursor &c,
                                               unsigned long long pages) {
  Cursor next = c;
  next.head = ring_pos(c.head, pages, v.num_pages);
  next.free_len = c.free_len - (uint32_t)pages;
  return next;
}

// Thread 0 only: the end of a call that takes `pages` pages from the front of the ring
// (the allocation kernels, a decode reservation). A call that took effect moves the cursor
// past them; a failed one faults the pool with its verdict (`value`: the element the verdict
// names) or, short of pages, with ERR_SHORTAGE naming the free list's length; a dead one
// (the pool was faulted before) changes nothing. The replay check ON_READ, or ON_WRITTEN on
// `found` (see Replay).
template <Replay REPLAY = Replay::ON_READ>
__device__ void conclude_take(const View &v, const Call &call, const Cursor &c,
                              unsigned long long pages, bool dead, bool failed, bool short_,
                              unsigned long long verdict, long long value, uint32_t found = 0) {
  Cursor next = c;
  if (!dead && !failed) {
    next.head = ring_pos(c.head, pages, v.num_pages);
    next.free_len = c.free_len - (uint32_t)pages;
  }
  if (failed) {
    if (short_) raise_fault(v, call, ERR_SHORTAGE, (long long)c.free_len);
    else raise_fault(v, call, verdict, value);
  }
  commit_found<REPLAY>(v, call, next, REPLAY == Replay::ON_READ ? c.writer : found);
}

// The element a failed call's fault names (`verdict`: position << 8 | code): the request's
// length for ERR_LENGTHS, else `last_at(pos)` (its last_loc as read); 0 when the call did not
// fail on a verdict (took effect, was dead, or was short of pages).
template <typename LastAt>
__device__ __forceinline__ long long fault_value(bool failed, bool short_,
                                                 unsigned long long verdict,
                                                 const long long *lengths, LastAt last_at) {
  if (!failed || short_) return 0;
  const unsigned long long pos = verdict >> 8;
  return (verdict & 0xff) == ERR_LENGTHS ? lengths[pos] : last_at(pos);
}

__device__ inline uint32_t slot_error(long long slot, const View &v) {
  const long long max_slot = (long long)(v.size + v.page_size - 1);
  if (slot < 0 || slot > max_slot) return ERR_OUT_OF_RANGE;
  if (slot < (long long)v.page_size) return ERR_RESERVED;
  return ERR_NONE;
}

// Takes an allocated page for the free call `tag`: allocated -> `target` kind (tagged).
// Returns ERR_NONE or what is wrong with the page; `*won` says whether this thread took it.
// A page this call already took is a second free of it in the call, unless `sibling_ok`
// (a paged free by index names each page once per token).
__device__ uint32_t take_page_from(const View &v, uint32_t page, uint32_t old, uint32_t target,
                                   uint32_t tag, bool sibling_ok, bool *won) {
  *won = false;
  for (;;) {
    const uint32_t kind = kind_of(old);
    if (kind == KIND_ALLOCATED) {
      const uint32_t seen = atomicCAS(&v.state[page], old, page_word(target, tag));
      if (seen == old) {
        *won = true;
        return ERR_NONE;
      }
      old = seen;
      continue;
    }
    if (kind == KIND_HELD) return ERR_HELD;
    if (tag_of(old) == tag && kind != KIND_RESERVED) return sibling_ok ? ERR_NONE : ERR_TWICE_IN_CALL;
    if (kind == KIND_PENDING_ORD || kind == KIND_PENDING_IDX) return ERR_PENDING;
    if (kind == KIND_RESERVED) return ERR_RESERVED;
    return ERR_ALREADY_FREE;
  }
}

__device__ inline uint32_t take_page(const View &v, uint32_t page, uint32_t target, uint32_t tag,
                                     bool sibling_ok, bool *won) {
  return take_page_from(v, page, v.state[page], target, tag, sibling_ok, won);
}

// Where released pages go: the ring's front (paged), its tail (token pool), the staged
// buffer (need_sort) or an open free group.
enum Dest { DEST_FRONT, DEST_TAIL, DEST_STAGED, DEST_GROUP_ORD, DEST_GROUP_IDX };

__device__ inline Dest release_dest(const View &v, const Call &call, bool by_index) {
  if (call.flags & CALL_IN_GROUP) return by_index ? DEST_GROUP_IDX : DEST_GROUP_ORD;
  if (v.need_sort) return DEST_STAGED;
  return v.page_size > 1 ? DEST_FRONT : DEST_TAIL;
}

// The page kind a released page gets at `dest`.
__device__ inline uint32_t dest_kind(Dest dest) {
  switch (dest) {
    case DEST_FRONT:
    case DEST_TAIL: return KIND_FREE;
    case DEST_STAGED: return KIND_STAGED;
    case DEST_GROUP_ORD: return KIND_PENDING_ORD;
    default: return KIND_PENDING_IDX;
  }
}

// Writes page `i` of a release of `count` pages to its place at `dest` (given cursor `c`).
__device__ inline void put_page(const View &v, const Cursor &c, Dest dest, uint32_t count,
                                uint32_t i, uint32_t page) {
  const uint32_t n = v.num_pages;
  switch (dest) {
    case DEST_FRONT: v.ring[ring_pos(c.head, (unsigned long long)n - count + i, n)] = page; break;
    case DEST_TAIL: v.ring[ring_pos(c.head, (unsigned long long)c.free_len + i, n)] = page; break;
    case DEST_STAGED: v.staged[c.staged_len + i] = page; break;
    case DEST_GROUP_ORD: v.group_ord[c.group_ord_len + i] = page; break;
    case DEST_GROUP_IDX: v.group_idx[c.group_idx_len + i] = page; break;
  }
}

// Whether `count` pages released to `dest` go to places outside its live entries (the
// ring's free run, the staged or group pages so far). Always for a valid release: its pages
// are distinct and allocated, so none of them is among those entries. A release naming free
// or staged pages may count more, and then fails: it must write nowhere (free_known writes
// a page as soon as it takes it, before the verdict; past this bound it would overwrite
// free pages' ids, and past the staged or group buffers the arrays after them).
__device__ inline bool release_fits(const Cursor &c, Dest dest, uint32_t count, uint32_t n) {
  unsigned long long held;
  switch (dest) {
    case DEST_FRONT:
    case DEST_TAIL: held = c.free_len; break;
    case DEST_STAGED: held = c.staged_len; break;
    case DEST_GROUP_ORD: held = c.group_ord_len; break;
    default: held = c.group_idx_len; break;
  }
  return held + count <= n;
}

// The cursor after releasing `count` pages to `dest`.
__device__ inline Cursor advance(Cursor c, Dest dest, uint32_t count, uint32_t n) {
  switch (dest) {
    case DEST_FRONT:
      c.head = ring_pos(c.head, (unsigned long long)n - count, n);
      c.free_len += count;
      break;
    case DEST_TAIL: c.free_len += count; break;
    case DEST_STAGED: c.staged_len += count; break;
    case DEST_GROUP_ORD: c.group_ord_len += count; break;
    case DEST_GROUP_IDX: c.group_idx_len += count; break;
  }
  return c;
}

// Releases `count` pages (page_at(i)) to `dest` with this block's threads, setting their
// page words; returns the new cursor (in every thread).
template <typename PageAt>
__device__ Cursor release_pages(const View &v, const Call &call, Cursor c, Dest dest,
                                uint32_t count, PageAt page_at) {
  const uint32_t kind = dest_kind(dest);
  for (uint32_t i = threadIdx.x; i < count; i += blockDim.x) {
    const uint32_t page = page_at(i);
    put_page(v, c, dest, count, i, page);
    v.state[page] = page_word(kind, call.tag);
  }
  return advance(c, dest, count, v.num_pages);
}

// Sorts `count` distinct page ids ascending into `dst` (may equal `src`). Small sets: a
// bitonic sort in shared memory. Large sets: a scan of the page map for pages whose word
// satisfies `matches`, which yields them in order. Every thread of the block takes part.
template <int BLOCK, typename Matches>
__device__ void sort_pages(const View &v, const uint32_t *src, uint32_t count, uint32_t *dst,
                           Matches matches) {
  if (count <= SORT_CAP) {
    __shared__ uint32_t keys[SORT_CAP];
    uint32_t width = 1;
    while (width < count) width <<= 1;
    for (uint32_t i = threadIdx.x; i < width; i += BLOCK) keys[i] = i < count ? src[i] : ~0u;
    __syncthreads();
    for (uint32_t k = 2; k <= width; k <<= 1) {
      for (uint32_t j = k >> 1; j > 0; j >>= 1) {
        for (uint32_t i = threadIdx.x; i < width; i += BLOCK) {
          const uint32_t partner = i ^ j;
          if (partner > i) {
            const bool up = (i & k) == 0;
            const uint32_t a = keys[i], b = keys[partner];
            if ((a > b) == up) {
              keys[i] = b;
              keys[partner] = a;
            }
          }
        }
        __syncthreads();
      }
    }
    for (uint32_t i = threadIdx.x; i < count; i += BLOCK) dst[i] = keys[i];
    __syncthreads();
    return;
  }
  unsigned long long base = 0;
  for (uint32_t start = 1; start <= v.num_pages; start += BLOCK) {
    const uint32_t page = start + threadIdx.x;
    const bool hit = page <= v.num_pages && matches(v.state[page]);
    unsigned long long total;
    const unsigned long long rank = block_exclusive_scan<BLOCK>(hit ? 1 : 0, &total);
    if (hit) dst[base + rank] = page;
    base += total;
  }
  __syncthreads();
}

// ---- allocation ---------------------------------------------------------------------------

// `alloc(n)`: `pages` whole pages from the front of the ring, each page's slots in order.
// The page of each thread's first token comes from the host's head hint (`Call::head_hint`),
// loaded with the cursor in round trip 1 and used when the cursor's head is the hint (else
// loaded again from the head): the writes then wait for one round trip, not two. The load is
// unconditional (ring position 0 when there is no hint or no token), so that it issues
// before the cursor's value is used. Run s50-2 (H100): 1-4,096 pages 0.89-0.91x the time
// (1.47 -> 1.31 us for one page), 0.98x for 4,096 pages of 64 slots (1,024 blocks
// writing 2 MiB of slots).
template <typename Index>
__device__ void alloc_pages(View v, Call call, unsigned long long pages, Index *out) {
  const uint32_t n = v.num_pages;
  const unsigned long long tokens = pages * v.page_size;
  const unsigned long long first = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
  const unsigned long long first_rank = div_ps(first, v);
  const bool hinted = call.head_hint < n && first < tokens && first_rank < n;
  const uint32_t guess = v.ring[hinted ? ring_pos(call.head_hint, first_rank, n) : 0];
  const Cursor c = v.header->cursor[call.in];
  const uint32_t fault = v.header->fault;
  // Left to itself, ptxas sinks the guess's load into the loop, after the cursor's value is
  // used; a warp barrier (no instruction where the warp is converged) keeps it here.
  __syncwarp();
  const bool dead = dead_call(fault, c, call);
  const bool short_ = !dead && c.free_len < pages;
  const bool hit = hinted && c.head == call.head_hint;
  const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
  for (unsigned long long t = first; t < tokens; t += stride) {
    if (dead || short_) {
      out[t] = 0;
      continue;
    }
    const unsigned long long in_page = mod_ps(t, v);
    const uint32_t page = t == first && hit ? guess : v.ring[ring_pos(c.head, div_ps(t, v), n)];
    if (in_page == 0) {
      v.state[page] = page_word(KIND_ALLOCATED, call.tag);
      if (v.page_size > 1) v.fill[page] = fill_word(call.tag, v.page_size);
    }
    out[t] = (Index)((unsigned long long)page * v.page_size + in_page);
  }
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    Cursor next = c;
    if (!dead && !short_) {
      next.head = ring_pos(c.head, pages, n);
      next.free_len = c.free_len - (uint32_t)pages;
    }
    if (short_) raise_fault(v, call, ERR_SHORTAGE, c.free_len);
    commit(v, call, c, next);
  }
}

// Extend blocks: 256 threads, at most 256 requests each; their new pages are staged in
// shared memory when at most STAGE_CAP (src/cuda/pool.rs sizes blocks for that).
constexpr int EXTEND_BLOCK = 256;
// Threads of extend_few's several-block kernels for at most a request a block on blocks of
// at most 256 tokens (kvp_extend_few_blocks_128_*, kvp_extend_one_blocks_128_*), whose
// blocks take 128 tokens while that needs at most one block an SM (src/cuda/pool.rs,
// few_grid): one token a thread, as 256 threads of 256 tokens had, on twice the blocks of
// half the warps. Runs s63-1 and s63-2 (H200): 2-16 requests of 512 tokens 0.94-0.96x the
// time, 32 0.97-0.98x, 1-8 of 2,048 0.95-0.98x; either half alone did not pay (128 threads
// on 256-token blocks 1.00-1.04x, 256 threads on 128-token blocks 0.98-1.03x). Blocks of
// more tokens run the same kernels on EXTEND_BLOCK threads (kvp_extend_{few,one}_blocks_256_*).
constexpr int FEW_GRID_BLOCK = 128;
constexpr uint32_t STAGE_CAP = 4096;

// Per-request extend shape (see src/pool/plan.rs `ExtendShape`).
struct Shape {
  unsigned long long tokens;     // seq - prefix
  unsigned long long part1;      // tokens into the prefix's partial page
  unsigned long long new_pages;  // pages taken from the free list
};

template <bool POW2>
__device__ inline Shape shape_of(unsigned long long prefix, unsigned long long seq,
                                 const View &v) {
  Shape s;
  s.tokens = seq - prefix;
  const unsigned long long prefix_pages = div_ps<POW2>(prefix + v.page_size - 1, v);
  const unsigned long long filled = prefix_pages * v.page_size;
  s.part1 = (seq < filled ? seq : filled) - prefix;
  const unsigned long long seq_pages = div_ps<POW2>(seq + v.page_size - 1, v);
  s.new_pages = seq_pages > prefix_pages ? seq_pages - prefix_pages : 0;
  return s;
}
__device__ inline Shape shape_of(unsigned long long prefix, unsigned long long seq,
                                 const View &v) {
  Shape s;
  s.tokens = seq - prefix;
  const unsigned long long prefix_pages = div_ps(prefix + v.page_size - 1, v);
  const unsigned long long filled = prefix_pages * v.page_size;
  s.part1 = (seq < filled ? seq : filled) - prefix;
  const unsigned long long seq_pages = div_ps(seq + v.page_size - 1, v);
  s.new_pages = seq_pages > prefix_pages ? seq_pages - prefix_pages : 0;
  return s;
}

// The last request whose first token is at or before `t` (tok_off ascending, `count`
// requests), searching on from `lo`, a request whose first token is at or before `t` (the
// answer for an earlier token of the same thread, or the request holding the block's first
// token). Galloping: the same or the next request costs one or two comparisons, a request d
// further on about 2 log2(d) (a binary search over the rest of the batch from the first
// request took 8 dependent shared loads per thread at 256 requests: BENCHMARKS.md, fifteenth
// session).
__device__ inline uint32_t request_of(const unsigned long long *tok_off, uint32_t count,
                                      uint32_t lo, unsigned long long t) {
  if (lo + 1 >= count || tok_off[lo + 1] > t) return lo;
  ++lo;
  uint32_t step = 1;
  while (lo + step < count && tok_off[lo + step] <= t) {
    lo += step;
    step <<= 1;
  }
  uint32_t hi = lo + step < count ? lo + step : count;
  while (hi - lo > 1) {  // tok_off[lo] <= t < tok_off[hi] (or hi == count)
    const uint32_t mid = (lo + hi) / 2;
    if (tok_off[mid] <= t) lo = mid; else hi = mid;
  }
  return lo;
}

// Whether request `i`'s device lengths are usable at all (0 <= prefix <= seq <= size). The
// host validated its own copies; the device copies may disagree (a stale copy).
__device__ inline bool lengths_sane(const View &v, long long prefix, long long seq) {
  return prefix >= 0 && seq >= prefix && (unsigned long long)seq <= v.size;
}

// A request's shape from device lengths; an empty one when they are unusable (`*sane`
// false: the block that owns the request reports it).
__device__ inline Shape usable_shape(const View &v, long long prefix, long long seq, bool *sane) {
  *sane = lengths_sane(v, prefix, seq);
  return *sane ? shape_of((unsigned long long)prefix, (unsigned long long)seq, v)
               : Shape{0, 0, 0};
}

// The call's requests as the ticketed kernel reads them (a decode's prefix is seq - 1).
template <typename Index>
struct Requests {
  const long long *prefix_lens, *seq_lens;
  const Index *last_loc;
  bool decode;
  __device__ long long prefix(uint32_t q) const {
    return decode ? seq_lens[q] - 1 : prefix_lens[q];
  }
};

// A request that adds nothing to its prefix's page finds the page's fill word tagged by this
// call: valid, as for the host, when the word is the claimant's advance from the same
// last_loc (so the page ended there before the call); else the request is stale (or the
// page was moved by a replayed capture's earlier run). One block's kernels decide the same from their table
// (advanced_by_call, extend_block.cuh). The claim word is there to read: the claimant stores
// the fill word only after its claim's atomic has returned (check_last_loc).
template <typename Index>
__device__ bool moved_by_claimant(const View &v, const Call &call, unsigned long long holder,
                                  long long ll, unsigned long long filled,
                                  const Requests<Index> &req) {
  if ((holder >> 32) != call.tag || (uint32_t)holder == 0) return false;
  const uint32_t q = (uint32_t)holder - 1;
  const long long seq = req.seq_lens[q], prefix = req.prefix(q), last = (long long)req.last_loc[q];
  bool sane;
  const Shape s = usable_shape(v, prefix, seq, &sane);
  return sane && last == ll && fill_of(filled) == mod_ps((unsigned long long)ll, v) + 1 + s.part1;
}

// Checks request `i`'s last_loc: ERR_NONE or what is wrong. It must be its page's last
// handed-out slot (the fill point), so a stale last_loc cannot hand a slot out twice. A request
// that writes `added` slots into its prefix's page (`added > 0`) advances the page's fill point
// at once, tagged with the call and the old value kept in fill_prev (a failing call restores
// it): a check of another request that then finds the call's own tag on the page knows two
// requests of the call meet in one page. With `claim`, the request also claims the page, so
// two requests extending it are caught whichever checks first. Token pools (one slot a page)
// have nothing to track.
//
// A request that adds nothing to its page (an empty one) may find the page already moved by
// another request of the call, in another block (see moved_by_claimant).
//
// `*named`: the request the error names, `i` but for a shared page: the later in batch order
// of `i` and the request found on the page's claim word (the host names the second request
// of a page; exact for two requests on one page, while with three or more the claim word
// may hold another one than the first).
template <typename Index>
__device__ uint32_t check_last_loc(const View &v, const Call &call, uint32_t i, long long ll,
                                   unsigned long long prefix, unsigned long long added,
                                   bool claim, const Requests<Index> &req, uint32_t *named) {
  *named = i;
  if (prefix == 0) return ll == -1 ? ERR_NONE : ERR_LAST_LOC_EMPTY;
  const uint32_t err = slot_error(ll, v);
  if (err != ERR_NONE) return err;
  const uint32_t page = (uint32_t)div_ps((unsigned long long)ll, v);
  const bool tracked = v.page_size > 1;
  // Both loads at once: the fill word is needed unless the page word fails.
  const uint32_t word = v.state[page];
  const unsigned long long filled = tracked ? v.fill[page] : 0;
  // A page this very call allocates was free before it: not the prefix's page.
  if (kind_of(word) != KIND_ALLOCATED) return unallocated_error(word);
  if (tag_of(word) == call.tag) return ERR_NOT_ALLOCATED;
  const unsigned long long in_page = mod_ps((unsigned long long)ll, v);
  if (mod_ps((unsigned long long)ll + 1, v) != mod_ps(prefix, v)) return ERR_LAST_LOC;
  // The request that claimed the page before `i` in this call, if any (claims are 1-based).
  auto later_of = [&](unsigned long long holder) {
    if ((holder >> 32) == call.tag && (uint32_t)holder != 0) *named = max(i, (uint32_t)holder - 1);
  };
  if (tracked) {
    if (fill_tag(filled) == call.tag) {
      // Advanced by the request that claimed the page (one more load; for a request that
      // adds nothing to the page, the claimant's lengths too).
      const unsigned long long holder = __ldcg(&v.claim[page]);
      if (added == 0 && moved_by_claimant(v, call, holder, ll, filled, req)) return ERR_NONE;
      later_of(holder);
      return ERR_SHARED_PAGE;
    }
    if (fill_of(filled) != in_page + 1) return ERR_FILL;
  }
  if (claim) {
    const unsigned long long mine = ((unsigned long long)call.tag << 32) | (i + 1u);
    const unsigned long long old = atomicExch(&v.claim[page], mine);
    if ((old >> 32) == call.tag && old != mine) {
      later_of(old);
      return ERR_SHARED_PAGE;
    }
  }
  if (added > 0 && tracked) {
    v.fill_prev[page] = fill_of(filled);
    v.fill[page] = fill_word(call.tag, in_page + 1 + added);
  }
  return ERR_NONE;
}

// The tokens [begin, end) of a plan of `total` tokens that this block writes: all of them
// for one block, an even share of them for a grid of blocks that each decide the whole call
// (GRID: extend_block.cuh's kvp_extend_blocks_*, extend_few.cuh's kvp_extend_few_blocks_*).
struct TokenRange {
  unsigned long long begin, end;
};
// The division is 32-bit, inline, for a plan of under 2^32 - gridDim.x tokens (every
// realistic call): div_slow's 64-bit one is out of line, a call to code a cold SM fetches
// first, and it held up every block's loads (run s16-2, 64 requests of 512 tokens: 199 of
// kvp_extend_blocks' 3,080 stall samples waited for its first instruction).
template <bool GRID>
__device__ __forceinline__ TokenRange block_tokens(unsigned long long total) {
  if constexpr (!GRID) return {0, total};
  const uint32_t grid = gridDim.x;
  const unsigned long long span =
      total < (1ull << 32) - grid ? ((uint32_t)total + grid - 1) / grid
                                  : div_slow(total + grid - 1, grid);
  const unsigned long long begin = min((unsigned long long)blockIdx.x * span, total);
  return {begin, min(begin + span, total)};
}

}  // namespace kvp

#include "req_table.cuh"
#include "extend_writes.cuh"
#include "extend_block.cuh"
#include "decode_block.cuh"
#include "decode_cluster.cuh"
#include "extend_few.cuh"
#include "extend_pairs.cuh"
#include "extend_grid.cuh"

namespace kvp {

// Rewind (speculative decoding): each last_kept[i] becomes its page's last handed-out slot.
// Checked: an allocated slot at or before its page's fill point, each page once. One block;
// fill points change only once the whole call is known to be valid. The free list does not
// change, so the kernel leaves both cursors alone (the host does not flip the parity after
// it): a captured [alloc_decode, rewind] pair then replays to the same slots every time
// (a benchmark's, with KVP_DEBUG_REPLAY_CALLS: the decode's replay faults otherwise).
template <typename Index>
__device__ void rewind(View v, Call call, const Index *last_kept, unsigned long long len) {
  __shared__ unsigned long long errors;
  if (threadIdx.x == 0) errors = NO_ERROR;  // published by the first barrier in the loop
  Header *h = v.header;
  const Cursor c = h->cursor[call.in];
  const bool dead = dead_call(h->fault, c, call);
  const bool tracked = v.page_size > 1;
  // Round trips: the header with last_kept; the page's word with its fill point (both read
  // whatever the checks will say: page 0 stands in for a slot out of range); the claim.
  // (Before, each waited for the one before it: five in a row.)
  for (unsigned long long base = 0; base < len; base += blockDim.x) {
    const unsigned long long i = base + threadIdx.x;
    const bool in = i < len;
    const long long value = in ? (long long)last_kept[i] : 0;
    unsigned long long pos = i;
    uint32_t err = in ? slot_error(value, v) : ERR_NONE;
    const uint32_t page = in && err == ERR_NONE ? (uint32_t)div_ps((unsigned long long)value, v) : 0;
    const uint32_t word = v.state[page];
    const unsigned long long filled = tracked ? v.fill[page] : 0;
    if (base == 0) __syncthreads();  // the same in every thread
    if (in && !dead && err == ERR_NONE) {
      if (kind_of(word) != KIND_ALLOCATED) {
        err = unallocated_error(word);
      } else if (tracked && mod_ps((unsigned long long)value, v) >= fill_of(filled)) {
        err = ERR_REWIND_AHEAD;
      } else {
        const unsigned long long mine = ((unsigned long long)call.tag << 32) | (i + 1);
        const unsigned long long old = atomicExch(&v.claim[page], mine);
        if ((old >> 32) == call.tag && old != mine) {
          err = ERR_REWIND_TWICE;
          // The later of the two names the repeat, as the host does.
          const unsigned long long other = (old & 0xffffffffull) - 1;
          pos = other > i ? other : i;
        }
      }
    }
    if (in && !dead && err != ERR_NONE) report(&errors, pos, err);
  }
  __syncthreads();
  const unsigned long long verdict = errors;
  if (!dead && verdict == NO_ERROR && tracked) {
    for (unsigned long long i = threadIdx.x; i < len; i += blockDim.x) {
      const unsigned long long slot = (unsigned long long)last_kept[i];
      v.fill[div_ps(slot, v)] = fill_word(call.tag, mod_ps(slot, v) + 1);
    }
  }
  if (threadIdx.x == 0) {
    check_turn(v, call, c);
    if (!dead && verdict != NO_ERROR) raise_fault(v, call, verdict, (long long)last_kept[verdict >> 8]);
    mirror_counts(v, call, c);
  }
}

// ---- frees --------------------------------------------------------------------------------

constexpr int FREE_BLOCK = 1024;

enum FreeMode : uint32_t {
  FREE_PAGE_IDS = 0,    // elements are page ids
  FREE_SLOTS = 1,       // token pool: elements are slots (= pages)
  FREE_SEGMENT = 2,     // paged pool: the pages of row[start, start + len)
};

// Slots a lane of a segment free checks per step, and the lanes that check one page: enough
// for the page at SEGMENT_RUN slots each, a power of two up to a warp (the host sizes the
// grid with the same rule: `segment_lanes` in src/cuda/pool.rs).
// The kernel takes their log2, so that dividing by the lanes is a shift (a division by a
// runtime divisor and the loop finding the lanes were in every warp's path; run s11-4).
constexpr uint32_t SEGMENT_RUN = 4;
__device__ inline uint32_t segment_lanes_log2(uint32_t page_size) {
  const uint32_t need = (page_size + SEGMENT_RUN - 1) / SEGMENT_RUN;
  return need <= 1 ? 0 : min(5u, 32u - (uint32_t)__clz(need - 1));
}

// Frees whose page count the host knows: page ids, token-pool slots, segments; element `i`
// names page `i` of the release. Any number of blocks: each page goes straight from
// allocated to its final kind with a compare-and-swap and is written to its place (when the
// release fits there, `release_fits`: a release of more pages than are allocated names some
// that are not, fails, and writes no place); the last block commits the cursor, or undoes
// every page the call took if any element was bad.
// SEGMENT: its own kernel (mode FREE_SEGMENT, a group of lanes per page; the host sizes its
// grid for that), apart from the page-id / slot one (a thread per element).
template <typename Index, bool SEGMENT>
__device__ void free_known(View v, Call call, const Index *src, uint32_t mode,
                           unsigned long long len, unsigned long long start, uint32_t count) {
  __shared__ unsigned long long errors;
  init_errors(&errors);
  Header *h = v.header;
  const Cursor c = h->cursor[call.in];
  const bool dead = dead_call(h->fault, c, call);
  const Dest dest = release_dest(v, call, false);
  const uint32_t kind = dest_kind(dest);
  const unsigned long long ps = v.page_size;
  const bool fits = release_fits(c, dest, count, v.num_pages);
  // Page `i` of the release: `page` (when `err` is ERR_NONE) goes from allocated to its new
  // kind and, when the release fits, to its place; `pos` is the element an error names.
  auto release = [&](unsigned long long i, uint32_t page, uint32_t err, unsigned long long pos) {
    bool won = false;
    if (err == ERR_NONE) err = take_page(v, page, kind, call.tag, false, &won);
    if (won && fits) put_page(v, c, dest, count, (uint32_t)i, page);
    v.scratch[i] = won ? page : 0;
    if (err != ERR_NONE) report(&errors, pos, err);
  };
  const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
  const unsigned long long thread = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
  if constexpr (!SEGMENT) {
    // A thread per element.
    for (unsigned long long i = thread; i < count && !dead; i += stride) {
      const unsigned long long pos = start + i;
      const long long value = (long long)src[pos];
      uint32_t err = ERR_NONE, page = 0;
      if (mode == FREE_PAGE_IDS) {
        if (value == 0) err = ERR_RESERVED;
        else if (value < 0 || value > (long long)v.num_pages) err = ERR_OUT_OF_RANGE;
        else page = (uint32_t)value;
      } else if ((err = slot_error(value, v)) == ERR_NONE) {
        page = (uint32_t)value;
      }
      release(i, page, err, pos);
    }
  } else {
    // A group of `lanes` lanes per page, 32 / lanes pages a warp: the page's slots must
    // follow its first one by one; each lane checks SEGMENT_RUN consecutive slots a step
    // (loaded before any is compared), so a group's loads are coalesced (a thread per page
    // read a page's worth of memory alone, strided by the page across the warp: that
    // traffic set the time); the smallest offset that does not follow is the group's
    // minimum, and the group's first lane releases the page. Whole warps step together.
    const uint32_t shift = segment_lanes_log2(v.page_size), lanes = 1u << shift;
    const uint32_t lane = threadIdx.x % 32, g = lane & (lanes - 1);
    // Pages a warp takes a pass: 32 / lanes.
    for (unsigned long long base = (thread / 32) << (5 - shift); base < count && !dead;
         base += (stride / 32) << (5 - shift)) {
      const unsigned long long i = base + (lane >> shift);
      const bool here = i < count;
      const unsigned long long pos = start + i * ps;
      // Offsets within the page are 32-bit: a device pool's pages have at most 2^31 slots
      // (DevicePool::new), so stepping past a page's end cannot wrap.
      const uint32_t end = here ? (uint32_t)min(ps, start + len - pos) : 1;
      // A lane's slots of the first step are read with the page's first slot (their
      // addresses do not depend on it); a slot past the page reads its last one again.
      uint32_t j0 = g * SEGMENT_RUN;
      long long got[SEGMENT_RUN];
      auto load_step = [&] {
#pragma unroll
        for (uint32_t u = 0; u < SEGMENT_RUN; ++u)
          got[u] = here ? (long long)src[pos + min(j0 + u, end - 1)] : 0;
      };
      load_step();
      const long long value = here ? (long long)src[pos] : 0;
      uint32_t err = here ? slot_error(value, v) : ERR_OUT_OF_RANGE;
      if (err == ERR_NONE && mod_ps((unsigned long long)value, v) != 0) err = ERR_UNALIGNED;
      uint32_t bad = UINT32_MAX;
      if (err == ERR_NONE) {
        for (;;) {
#pragma unroll
          for (uint32_t u = 0; u < SEGMENT_RUN; ++u)
            if (j0 + u < end && got[u] != value + (long long)(j0 + u)) bad = min(bad, j0 + u);
          j0 += lanes * SEGMENT_RUN;
          if (j0 >= end || bad != UINT32_MAX) break;
          load_step();
        }
      }
      for (uint32_t o = lanes / 2; o > 0; o >>= 1)
        bad = min(bad, __shfl_xor_sync(FULL, bad, o));
      if (here && g == 0) {
        if (err == ERR_NONE && bad != UINT32_MAX) {
          release(i, 0, ERR_NOT_CONTIGUOUS, pos + bad);
        } else {
          release(i, err == ERR_NONE ? (uint32_t)div_ps((unsigned long long)value, v) : 0, err,
                  pos);
        }
      }
    }
  }
  if (!conclude(h, &errors)) return;
  const unsigned long long verdict = errors;
  if (dead) {
    if (threadIdx.x == 0) commit(v, call, c, c);
    return;
  }
  if (verdict != NO_ERROR) {
    const uint32_t taken = page_word(kind, call.tag);
    for (uint32_t i = threadIdx.x; i < count; i += blockDim.x) {
      const uint32_t page = v.scratch[i];
      if (page != 0 && v.state[page] == taken) v.state[page] = page_word(KIND_ALLOCATED, 0);
    }
    if (threadIdx.x == 0) {
      raise_fault(v, call, verdict, (long long)src[verdict >> 8]);
      commit(v, call, c, c);
    }
    return;
  }
  if (threadIdx.x == 0) commit(v, call, c, advance(c, dest, count, v.num_pages));
}

// Paged pool, free by token index: every index frees its page; the distinct pages are
// released in ascending order (SGLang's unique(indices // page_size)). Any number of blocks
// claim the pages (page word -> KIND_CLAIMED with the call's tag). How many there are only
// the device knows; the host learns it from the mirrored counts.
//
// RELEASE (at most SORT_CAP indices, or a pool of at most SORT_CAP pages, so at most SORT_CAP
// distinct pages): the last block sorts the claimed pages in shared memory and releases
// them; one kernel. Otherwise (claim only) this kernel claims, counts the claimed pages per
// `chunk` pages of the page map (Header::chunk_claims), and its last block turns the counts
// into each chunk's offset among all claimed pages (scratch[k]; the total in
// scratch[chunks]) and concludes the verdict: a bad index faults the pool here, and
// `release_claimed`, the second kernel of the same call (same Call: tag, cursor parity,
// flags), reverts the claims or releases the claimed pages, one block per chunk. This kernel
// then writes no cursor: only `release_claimed` does.
//
// Whole warps step together: consecutive indices share pages, so one lane per distinct page
// of the warp's 32 indices (the lowest) claims it for all its sharers, with one
// compare-and-swap instead of one per token, and its verdict on the page is every sharer's
// (with siblings allowed it depends on the page alone). An invalid lane's page is 0, which
// no valid index names. The page's word and the slot's tag are fetched at once. The claim
// counts go to shared memory first (one global atomic per chunk a block touched: every
// warp adding to a handful of global counters on one cache line would serialize).
template <typename Index, bool RELEASE>
__device__ void free_slots_paged(View v, Call call, const Index *indices, unsigned long long len,
                                 uint32_t chunk) {
  __shared__ unsigned long long errors;
  __shared__ uint32_t chunk_counts[RELEASE ? 1 : CLAIM_CHUNKS];
  if constexpr (!RELEASE)
    for (uint32_t k = threadIdx.x; k < CLAIM_CHUNKS; k += blockDim.x) chunk_counts[k] = 0;
  init_errors(&errors);
  Header *h = v.header;
  const Cursor c = h->cursor[call.in];
  const bool dead = dead_call(h->fault, c, call);
  const uint32_t lane = threadIdx.x % 32;
  const uint32_t target = page_word(KIND_CLAIMED, call.tag);
  const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
  for (unsigned long long base = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x - lane;
       base < len && !dead; base += stride) {
    const unsigned long long i = base + lane;
    const long long value = i < len ? (long long)indices[i] : 0;
    uint32_t err = i < len ? slot_error(value, v) : ERR_OUT_OF_RANGE;
    const uint32_t page = err == ERR_NONE ? (uint32_t)div_ps((unsigned long long)value, v) : 0;
    const uint32_t sharers = __match_any_sync(FULL, page);
    const int leader = __ffs(sharers) - 1;
    const uint32_t seen = page != 0 && leader == (int)lane ? v.state[page] : 0;
    const uint32_t slot_tag = page != 0 ? atomicExch(&v.slot_tags[value], call.tag) : 0;
    uint32_t page_err = ERR_NONE;
    bool won = false;
    if (page != 0 && leader == (int)lane) {
      // The usual case, an allocated page, in one compare-and-swap; else the full rules.
      const uint32_t got = kind_of(seen) == KIND_ALLOCATED
                               ? atomicCAS(&v.state[page], seen, target)
                               : ~seen;
      if (got == seen) won = true;
      else page_err = take_page_from(v, page, got == ~seen ? seen : got, KIND_CLAIMED,
                                     call.tag, true, &won);
    }
    if constexpr (RELEASE) {
      if (won) v.scratch[atomicAdd(&h->sort_count, 1u)] = page;
    } else {
      // One count per chunk the warp's new claims fall in.
      const uint32_t winners = __ballot_sync(FULL, won);
      if (won) {
        const uint32_t k = (page - 1) / chunk;
        const uint32_t same = __match_any_sync(winners, k);
        if (__ffs(same) - 1 == (int)lane) atomicAdd(&chunk_counts[k], __popc(same));
      }
    }
    page_err = __shfl_sync(FULL, page_err, page != 0 ? leader : (int)lane);
    if (page != 0) err = slot_tag == call.tag ? ERR_TWICE_IN_CALL : page_err;
    if (i < len && err != ERR_NONE) report(&errors, i, err);
  }
  const uint32_t chunks = RELEASE ? 1 : (v.num_pages + chunk - 1) / chunk;
  if constexpr (!RELEASE) {
    __syncthreads();
    for (uint32_t k = threadIdx.x; k < chunks; k += blockDim.x)
      if (chunk_counts[k] != 0) atomicAdd(&h->chunk_claims[k], chunk_counts[k]);
  }
  if (!conclude(h, &errors)) return;
  const unsigned long long verdict = errors;
  if constexpr (!RELEASE) {
    // Each chunk's offset among the claimed pages, for `release_claimed`; the counts go back
    // to zero. The claimed pages stay claimed: `release_claimed` sees the fault raised here
    // and reverts them.
    const unsigned long long mine =
        threadIdx.x < chunks ? atomicExch(&h->chunk_claims[threadIdx.x], 0u) : 0;
    unsigned long long total;
    const unsigned long long offset = block_exclusive_scan<FREE_BLOCK>(mine, &total);
    if (threadIdx.x < chunks) v.scratch[threadIdx.x] = (uint32_t)offset;
    if (threadIdx.x == 0) {
      v.scratch[chunks] = (uint32_t)total;
      if (!dead && verdict != NO_ERROR)
        raise_fault(v, call, verdict, (long long)indices[verdict >> 8]);
    }
    return;
  }
  __shared__ uint32_t count;
  if (threadIdx.x == 0) {
    count = *(volatile uint32_t *)&h->sort_count;
    h->sort_count = 0;
  }
  __syncthreads();
  if (dead) {
    if (threadIdx.x == 0) commit(v, call, c, c);
    return;
  }
  if (verdict != NO_ERROR) {
    for (uint32_t i = threadIdx.x; i < count; i += blockDim.x)
      v.state[v.scratch[i]] = page_word(KIND_ALLOCATED, 0);
    if (threadIdx.x == 0) {
      raise_fault(v, call, verdict, (long long)indices[verdict >> 8]);
      commit(v, call, c, c);
    }
    return;
  }
  const uint32_t claimed = page_word(KIND_CLAIMED, call.tag);
  sort_pages<FREE_BLOCK>(v, v.scratch, count, v.scratch,
                         [&](uint32_t word) { return word == claimed; });
  const Cursor next = release_pages(v, call, c, release_dest(v, call, true), count,
                                    [&](uint32_t i) { return v.scratch[i]; });
  if (threadIdx.x == 0) commit(v, call, c, next);
}

// The pages of the page map chunk of block `blockIdx.x` (`chunk` pages a block, pages
// 1..num_pages): [*first, *end).
__device__ inline void chunk_range(const View &v, uint32_t chunk, unsigned long long *first,
                                   unsigned long long *end) {
  const unsigned long long last = (unsigned long long)v.num_pages + 1;
  const unsigned long long f = 1 + (unsigned long long)blockIdx.x * chunk;
  *first = f < last ? f : last;
  *end = f + chunk < last ? f + chunk : last;
}

// Large paged free by index, second kernel (after the claim kernel, same Call,
// one block per chunk): each block releases its chunk's claimed pages in ascending order at
// their places (ascending overall: chunks are in page order, and scratch[blockIdx.x] holds
// the claimed pages of the chunks before it), exactly as `release_pages` would release the
// sorted list. Each thread looks at a run of consecutive pages (up to 8, a bit each), so a
// tile of the chunk needs one block-wide scan. If the pool is faulted (by the claim kernel,
// or from before: then nothing was claimed), the chunk's claimed pages go back to allocated
// instead. Block 0 commits the cursor (also when faulted: unchanged).
__device__ void release_claimed(View v, Call call, uint32_t chunk) {
  Header *h = v.header;
  const Cursor c = h->cursor[call.in];
  const uint32_t claimed = page_word(KIND_CLAIMED, call.tag);
  unsigned long long first, end;
  chunk_range(v, chunk, &first, &end);
  if (dead_call(h->fault, c, call)) {
    for (unsigned long long p = first + threadIdx.x; p < end; p += FREE_BLOCK)
      if (v.state[p] == claimed) v.state[p] = page_word(KIND_ALLOCATED, 0);
    if (blockIdx.x == 0 && threadIdx.x == 0) commit(v, call, c, c);
    return;
  }
  const uint32_t count = v.scratch[gridDim.x];
  unsigned long long base = v.scratch[blockIdx.x];
  const Dest dest = release_dest(v, call, true);
  const uint32_t released = page_word(dest_kind(dest), call.tag);
  constexpr uint32_t RUN_MAX = 8;  // pages a thread looks at per tile, at most
  const uint32_t run = min(chunk / FREE_BLOCK, RUN_MAX);
  for (unsigned long long start = first; start < end; start += (unsigned long long)FREE_BLOCK * run) {
    const unsigned long long mine = start + (unsigned long long)threadIdx.x * run;
    // Every word of the run loaded before any is compared (a page past the chunk reads its
    // last page again), so the run is one round trip.
    uint32_t words[RUN_MAX];
#pragma unroll
    for (uint32_t k = 0; k < RUN_MAX; ++k)
      if (k < run) words[k] = v.state[min(mine + k, end - 1)];
    uint32_t hits = 0;
#pragma unroll
    for (uint32_t k = 0; k < RUN_MAX; ++k)
      if (k < run && mine + k < end && words[k] == claimed) hits |= 1u << k;
    unsigned long long total;
    unsigned long long rank = block_exclusive_scan<FREE_BLOCK>(__popc(hits), &total);
    for (; hits != 0; hits &= hits - 1) {
      const unsigned long long p = mine + __ffs(hits) - 1;
      put_page(v, c, dest, count, (uint32_t)(base + rank++), (uint32_t)p);
      v.state[p] = released;
    }
    base += total;
  }
  if (blockIdx.x == 0 && threadIdx.x == 0) commit(v, call, c, advance(c, dest, count, v.num_pages));
}

// Closes a free group: first the pages freed by index (one ascending block), then those
// freed by page id or segment, in call order. One block.
__device__ void group_end(View v, Call call) {
  Header *h = v.header;
  const Cursor c = h->cursor[call.in];
  if (dead_call(h->fault, c, call)) {
    if (threadIdx.x == 0) commit(v, call, c, c);
    return;
  }
  const uint32_t by_index = c.group_idx_len, in_order = c.group_ord_len;
  sort_pages<FREE_BLOCK>(v, v.group_idx, by_index, v.group_idx,
                         [](uint32_t word) { return kind_of(word) == KIND_PENDING_IDX; });
  Call plain = call;
  plain.flags &= ~CALL_IN_GROUP;
  const Dest dest = release_dest(v, plain, true);
  // Two releases in a row; a release to the front must see the cursor the first one left.
  const Cursor mid = release_pages(v, plain, c, dest, by_index, [&](uint32_t i) { return v.group_idx[i]; });
  __syncthreads();
  Cursor next = release_pages(v, plain, mid, dest, in_order, [&](uint32_t i) { return v.group_ord[i]; });
  next.group_idx_len = 0;
  next.group_ord_len = 0;
  if (threadIdx.x == 0) commit(v, call, c, next);
}

// free = sort(free ++ staged): a scan of the page map yields every free or staged page in
// ascending order; the ring restarts at position 0. One block.
__device__ void merge(View v, Call call) {
  Header *h = v.header;
  const Cursor c = h->cursor[call.in];
  Cursor next = c;
  if (!dead_call(h->fault, c, call) && c.staged_len > 0) {
    unsigned long long base = 0;
    for (uint32_t start = 1; start <= v.num_pages; start += FREE_BLOCK) {
      const uint32_t page = start + threadIdx.x;
      uint32_t word = page <= v.num_pages ? v.state[page] : 0;
      const bool hit = kind_of(word) == KIND_FREE || kind_of(word) == KIND_STAGED;
      unsigned long long total;
      const unsigned long long rank = block_exclusive_scan<FREE_BLOCK>(hit ? 1 : 0, &total);
      if (hit) {
        v.ring[base + rank] = page;
        if (kind_of(word) == KIND_STAGED) v.state[page] = page_word(KIND_FREE, call.tag);
      }
      base += total;
    }
    next.head = 0;
    next.free_len = c.free_len + c.staged_len;
    next.staged_len = 0;
  }
  if (threadIdx.x == 0) commit(v, call, c, next);
}

// ---- whole-pool state ---------------------------------------------------------------------

// Every page free in order 1..num_pages, nothing staged or grouped, no fault.
__device__ void reset(View v, Call call) {
  const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
  const unsigned long long first = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
  for (unsigned long long p = first; p <= v.num_pages; p += stride) {
    v.state[p] = p == 0 ? page_word(KIND_RESERVED, 0) : page_word(KIND_FREE, 0);
    v.claim[p] = 0;
    if (p < v.num_pages) v.ring[p] = (uint32_t)(p + 1);
  }
  if (first == 0) {
    Cursor next{};
    next.free_len = v.num_pages;
    v.header->fault = 0;
    v.header->ticket = 0;
    v.header->op_error = NO_ERROR;
    v.header->sort_count = 0;
    v.header->epoch = call.seq;
    publish(v, call, next);
  }
}

// Clears the tags of every page word, claim and slot, so tags can start again at 1.
__device__ void retag(View v) {
  const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
  const unsigned long long first = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
  for (unsigned long long p = first; p <= v.num_pages; p += stride) {
    v.state[p] &= KIND_MASK;
    v.claim[p] = 0;
    v.fill[p] = fill_word(0, fill_of(v.fill[p]));
  }
  for (unsigned long long slot = first; slot < v.size + v.page_size; slot += stride)
    v.slot_tags[slot] = 0;
}

// Snapshot layout: Cursor, then ring, staged, state words and fill words (two each).
//
// A backup taken while the pool is faulted (enqueued after a call the device refused,
// before the host saw the fault) marks the snapshot (`Cursor::faulted`): the state it holds
// may not be one the host's counts or the engine agree with (a refused call's counts, a
// free group whose end the fault turned away, its pages' ids not in the snapshot). Its
// restore changes nothing and faults the pool again (ERR_SNAPSHOT_FAULTED, as this call),
// where it would have cleared the fault and let the calls go on.
__device__ void copy_state(View v, Call call, uint32_t *snap, bool restore) {
  const unsigned long long n = v.num_pages;
  const unsigned long long fill_at = 3 * n + 1;
  const unsigned long long words = fill_at + 2 * (n + 1);
  uint32_t *fill_halves = reinterpret_cast<uint32_t *>(v.fill);
  uint32_t *arrays = snap + sizeof(Cursor) / sizeof(uint32_t);
  Cursor *saved = reinterpret_cast<Cursor *>(snap);
  if (restore && saved->faulted != 0) {
    if (blockIdx.x == 0 && threadIdx.x == 0) {
      Header *h = v.header;
      h->fault = 0;  // this call's fault is the one the host must see (raise_fault: first wins)
      raise_fault(v, call, ERR_SNAPSHOT_FAULTED, 0);
      h->epoch = call.seq;  // a recovery still, for the host: reservations end
      publish(v, call, h->cursor[call.in]);
    }
    return;
  }
  const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
  for (unsigned long long w = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; w < words;
       w += stride) {
    const bool is_state = w >= 2 * n && w < fill_at;
    uint32_t *live = w < n ? &v.ring[w]
                     : w < 2 * n ? &v.staged[w - n]
                     : is_state ? &v.state[w - 2 * n]
                                : &fill_halves[w - fill_at];
    if (restore) {
      uint32_t word = arrays[w];
      // Tags of a restored page map may repeat later calls' tags: clear them (a fill word's
      // tag is its high half).
      // A restore ends every reservation: held pages come back plainly allocated.
      if (is_state) word = kind_of(word) == KIND_HELD ? KIND_ALLOCATED : kind_of(word);
      if (w >= fill_at && ((w - fill_at) & 1)) word = 0;
      *live = word;
    } else {
      arrays[w] = *live;
    }
  }
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    if (restore) {
      v.header->fault = 0;
      v.header->op_error = NO_ERROR;
      v.header->ticket = 0;
      v.header->sort_count = 0;
      v.header->epoch = call.seq;
      publish(v, call, *saved);  // a recovery: not checked for its turn
    } else {
      // A backup out of turn copied some other call's state: marked as a faulted pool's.
      const Cursor c = v.header->cursor[call.in];
      *saved = c;
      saved->faulted = dead_call(v.header->fault, c, call);
      commit(v, call, c, c);
    }
  }
}

}  // namespace kvp

// ---- request-to-token tables (kernels/rows.cuh) ----------------------------------------------
#include "rows.cuh"
#include "reservation.cuh"

using namespace kvp;

// ---- entry points (loaded by name from src/cuda/kernels.rs) ---------------------------------

// The wide deciding blocks (extend_block.cuh, extend_blocks_wide): kvp_extend_blocks{HELD}_*
// holds HELD requests on THREADS threads, HELD / THREADS a thread; kvp_extend_*'s parameters,
// and by row kvp_extend_block_rows_*'s.
#define KVP_EXTEND_WIDE(HELD, THREADS, SUFFIX, INDEX)                                             \
  extern "C" __global__ void __launch_bounds__(THREADS) kvp_extend_blocks##HELD##_##SUFFIX(       \
      View v, Call call, const long long *prefix_lens, const long long *seq_lens,                 \
      const INDEX *last_loc, uint32_t batch, uint32_t per_block, uint32_t decode,                 \
      unsigned long long total_tokens, unsigned long long total_pages, INDEX *out) {              \
    await_predecessors();                                                                         \
    extend_blocks_wide<THREADS, INDEX, false, HELD / THREADS>(v, call, prefix_lens, seq_lens,     \
                                                              last_loc, batch, total_tokens,      \
                                                              total_pages, out);                  \
  }
#define KVP_EXTEND_WIDE_ROWS(HELD, THREADS, SUFFIX, INDEX)                                        \
  extern "C" __global__ void __launch_bounds__(THREADS) kvp_extend_blocks##HELD##_rows_##SUFFIX(  \
      View v, Call call, const long long *prefix_lens, const long long *seq_lens,                 \
      uint32_t batch, uint32_t decode, unsigned long long total_tokens,                           \
      unsigned long long total_pages, INDEX *out, TableArgs tab) {                                \
    await_predecessors();                                                                         \
    extend_blocks_wide<THREADS, INDEX, true, HELD / THREADS>(v, call, prefix_lens, seq_lens,      \
                                                             nullptr, batch, total_tokens,        \
                                                             total_pages, out, tab);              \
  }

#define KVP_INDEX_KERNELS(SUFFIX, INDEX)                                                          \
  extern "C" __global__ void __launch_bounds__(256)                                               \
      kvp_alloc_##SUFFIX(View v, Call call, unsigned long long pages, INDEX *out) {               \
    await_predecessors();                                                                         \
    alloc_pages<INDEX>(v, call, pages, out);                                                      \
  }                                                                                               \
  extern "C" __global__ void __launch_bounds__(EXTEND_BLOCK) kvp_extend_##SUFFIX(                 \
      View v, Call call, const long long *prefix_lens, const long long *seq_lens,                 \
      const INDEX *last_loc, uint32_t batch, uint32_t per_block, uint32_t decode,                 \
      unsigned long long total_tokens, unsigned long long total_pages, INDEX *out) {              \
    await_predecessors();                                                                         \
    extend<EXTEND_BLOCK, INDEX>(v, call, prefix_lens, seq_lens, last_loc, batch, per_block,       \
                                decode, total_tokens, total_pages, out);                          \
  }                                                                                               \
  /* alloc_extend in one block of 256 threads, a request a thread (batch <= 256; batches of       \
     at most 32 run on kvp_extend_few_*) (extend_block.cuh); the same parameters, `decode`        \
     always 0 (decodes run on kvp_decode_*, or kvp_extend past 1,024 requests). */                \
  extern "C" __global__ void __launch_bounds__(EXTEND_BLOCK) kvp_extend_block_##SUFFIX(           \
      View v, Call call, const long long *prefix_lens, const long long *seq_lens,                 \
      const INDEX *last_loc, uint32_t batch, uint32_t per_block, uint32_t decode,                 \
      unsigned long long total_tokens, unsigned long long total_pages, INDEX *out) {              \
    await_predecessors();                                                                         \
    extend_kernel<EXTEND_BLOCK, 1, INDEX>(v, call, prefix_lens, seq_lens, last_loc, batch,        \
                                         total_tokens, total_pages, out);                         \
  }                                                                                               \
  /* Two warps (batch <= 64, at most 256 tokens). */                                              \
  extern "C" __global__ void __launch_bounds__(64) kvp_extend_block64_##SUFFIX(                   \
      View v, Call call, const long long *prefix_lens, const long long *seq_lens,                 \
      const INDEX *last_loc, uint32_t batch, uint32_t per_block, uint32_t decode,                 \
      unsigned long long total_tokens, unsigned long long total_pages, INDEX *out) {              \
    await_predecessors();                                                                         \
    extend_kernel<64, 1, INDEX>(v, call, prefix_lens, seq_lens, last_loc, batch,                  \
                               total_tokens, total_pages, out);                                   \
  }                                                                                               \
  /* Several blocks that each decide the whole call (batch <= 256), each writing a range of       \
     the tokens: a long extend of a small batch, with no grid ticket. */                          \
  extern "C" __global__ void __launch_bounds__(EXTEND_BLOCK) kvp_extend_blocks_##SUFFIX(          \
      View v, Call call, const long long *prefix_lens, const long long *seq_lens,                 \
      const INDEX *last_loc, uint32_t batch, uint32_t per_block, uint32_t decode,                 \
      unsigned long long total_tokens, unsigned long long total_pages, INDEX *out) {              \
    await_predecessors();                                                                         \
    extend_kernel<EXTEND_BLOCK, 1, INDEX, false, true>(v, call, prefix_lens, seq_lens, last_loc,  \
                                                      batch, total_tokens, total_pages,           \
                                                      out);                                       \
  }                                                                                               \
  /* The same for 257-512 and 513-1,024 requests (one block of 256 threads holds 256), on     \
     blocks of 512 and 1,024 threads, their shared memory given at launch (1,025-2,048         \
     requests on 1,024 threads of two each: by row only, kvp_extend_blocks2048_rows_*). */       \
  KVP_EXTEND_WIDE(512, 512, SUFFIX, INDEX)                                                        \
  KVP_EXTEND_WIDE(1024, 1024, SUFFIX, INDEX)                                                      \
  /* Page ids and token-pool slots (mode FREE_PAGE_IDS / FREE_SLOTS). */                          \
  extern "C" __global__ void __launch_bounds__(FREE_BLOCK, 2) kvp_free_known_##SUFFIX(            \
      View v, Call call, const INDEX *src, uint32_t mode, unsigned long long len,                 \
      unsigned long long start, uint32_t count) {                                                 \
    await_predecessors();                                                                         \
    free_known<INDEX, false>(v, call, src, mode, len, start, count);                              \
  }                                                                                               \
  /* Segments of a paged pool: kvp_free_known_*'s parameters, so that the host launches           \
     either alike (`mode` is FREE_SEGMENT here, and unused). */                                   \
  extern "C" __global__ void __launch_bounds__(FREE_BLOCK) kvp_free_segment_##SUFFIX(             \
      View v, Call call, const INDEX *src, uint32_t mode, unsigned long long len,                 \
      unsigned long long start, uint32_t count) {                                                 \
    await_predecessors();                                                                         \
    free_known<INDEX, true>(v, call, src, mode, len, start, count);                               \
  }                                                                                               \
  /* The same at two blocks an SM (32 registers, a few spilled), for grids of more blocks than    \
     an SM count: at one block an SM such a grid ran in two waves (run s12-1: 0.88x the time at   \
     4,096 requests, but 1.05-1.11x below 132 blocks, where one wave holds the grid anyway). */   \
  extern "C" __global__ void __launch_bounds__(FREE_BLOCK, 2) kvp_free_segment_wide_##SUFFIX(     \
      View v, Call call, const INDEX *src, uint32_t mode, unsigned long long len,                 \
      unsigned long long start, uint32_t count) {                                                 \
    await_predecessors();                                                                         \
    free_known<INDEX, true>(v, call, src, mode, len, start, count);                               \
  }                                                                                               \
  extern "C" __global__ void __launch_bounds__(FREE_BLOCK)                                        \
      kvp_free_slots_paged_##SUFFIX(View v, Call call, const INDEX *indices,                      \
                                    unsigned long long len) {                                     \
    await_predecessors();                                                                         \
    free_slots_paged<INDEX, true>(v, call, indices, len, 0);                                      \
  }                                                                                               \
  /* Claim and count: the first of the two kernels of a large paged free by index. */             \
  extern "C" __global__ void __launch_bounds__(FREE_BLOCK)                                        \
      kvp_claim_slots_paged_##SUFFIX(View v, Call call, const INDEX *indices,                     \
                                     unsigned long long len, uint32_t chunk) {                    \
    await_predecessors();                                                                         \
    free_slots_paged<INDEX, false>(v, call, indices, len, chunk);                                 \
  }                                                                                               \
  extern "C" __global__ void __launch_bounds__(FREE_BLOCK)                                        \
      kvp_rewind_##SUFFIX(View v, Call call, const INDEX *last_kept, unsigned long long len) {    \
    await_predecessors();                                                                         \
    rewind<INDEX>(v, call, last_kept, len);                                                       \
  }

// The dynamic shared memory of kvp_extend_blocks{512,1024}_* and of
// kvp_extend_blocks{512,1024,2048}_rows_*, in bytes (of either index type): read by the host
// when it loads the module.
extern "C" __device__ const uint32_t kvp_extend_blocks_wide_shared[5] = {
    sizeof(ExtendShared<512, 1, false>), sizeof(ExtendShared<1024, 1, false>),
    sizeof(ExtendShared<512, 1, true>), sizeof(ExtendShared<1024, 1, true>),
    sizeof(ExtendShared<1024, 2, true>)};

KVP_INDEX_KERNELS(i64, long long)
KVP_INDEX_KERNELS(i32, int)

// Request-to-token tables (rows.cuh): the table's element type is a run-time flag (`wide`:
// int64), the pool's index type a suffix.
#define KVP_ROWS_KERNELS(SUFFIX, INDEX)                                                           \
  /* alloc_extend_rows of a batch the one-block kernels serve, in one kernel: extend_block        \
     with the table (out may be NULL; decodes by row: kvp_decode_N_rows_*). */                    \
  extern "C" __global__ void __launch_bounds__(32) kvp_extend_warp_rows_##SUFFIX(                 \
      View v, Call call, const long long *prefix_lens, const long long *seq_lens,                 \
      uint32_t batch, uint32_t decode, unsigned long long total_tokens,                           \
      unsigned long long total_pages, INDEX *out, TableArgs tab) {                                \
    await_predecessors();                                                                         \
    extend_kernel<32, 1, INDEX, true>(v, call, prefix_lens, seq_lens, nullptr, batch,             \
                                     total_tokens, total_pages, out, tab);                        \
  }                                                                                               \
  extern "C" __global__ void __launch_bounds__(64) kvp_extend_block64_rows_##SUFFIX(              \
      View v, Call call, const long long *prefix_lens, const long long *seq_lens,                 \
      uint32_t batch, uint32_t decode, unsigned long long total_tokens,                           \
      unsigned long long total_pages, INDEX *out, TableArgs tab) {                                \
    await_predecessors();                                                                         \
    extend_kernel<64, 1, INDEX, true>(v, call, prefix_lens, seq_lens, nullptr, batch,             \
                                     total_tokens, total_pages, out, tab);                        \
  }                                                                                               \
  extern "C" __global__ void __launch_bounds__(EXTEND_BLOCK) kvp_extend_block_rows_##SUFFIX(      \
      View v, Call call, const long long *prefix_lens, const long long *seq_lens,                 \
      uint32_t batch, uint32_t decode, unsigned long long total_tokens,                           \
      unsigned long long total_pages, INDEX *out, TableArgs tab) {                                \
    await_predecessors();                                                                         \
    extend_kernel<EXTEND_BLOCK, 1, INDEX, true>(v, call, prefix_lens, seq_lens, nullptr, batch,   \
                                                total_tokens, total_pages, out, tab);             \
  }                                                                                               \
  /* The same shape for 33-256 requests of up to 256 tokens (ExtendKernel::Block), each        \
     token's request from where the requests start (SHORT); kvp_extend_block_rows_* keeps       \
     extend_few's shapes by row (2-32 requests of 65-512 tokens), where that cost 1.03-1.04x. */ \
  extern "C" __global__ void __launch_bounds__(EXTEND_BLOCK)                                      \
      kvp_extend_block_short_rows_##SUFFIX(                                                       \
      View v, Call call, const long long *prefix_lens, const long long *seq_lens,                 \
      uint32_t batch, uint32_t decode, unsigned long long total_tokens,                           \
      unsigned long long total_pages, INDEX *out, TableArgs tab) {                                \
    await_predecessors();                                                                         \
    extend_kernel<EXTEND_BLOCK, 1, INDEX, true, false, false, true>(                              \
        v, call, prefix_lens, seq_lens, nullptr, batch, total_tokens, total_pages, out, tab);     \
  }                                                                                               \
  extern "C" __global__ void __launch_bounds__(EXTEND_BLOCK) kvp_extend_blocks_rows_##SUFFIX(     \
      View v, Call call, const long long *prefix_lens, const long long *seq_lens,                 \
      uint32_t batch, uint32_t decode, unsigned long long total_tokens,                           \
      unsigned long long total_pages, INDEX *out, TableArgs tab) {                                \
    await_predecessors();                                                                         \
    extend_kernel<EXTEND_BLOCK, 1, INDEX, true, true>(v, call, prefix_lens, seq_lens, nullptr,    \
                                                     batch,  total_tokens, total_pages,           \
                                                     out, tab);                                   \
  }                                                                                               \
  /* The same for 257-2,048 requests (kvp_extend_blocks{512,1024,2048}_*'s shapes). */          \
  KVP_EXTEND_WIDE_ROWS(512, 512, SUFFIX, INDEX)                                                   \
  KVP_EXTEND_WIDE_ROWS(1024, 1024, SUFFIX, INDEX)                                                 \
  KVP_EXTEND_WIDE_ROWS(2048, 1024, SUFFIX, INDEX)                                                 \
  extern "C" __global__ void __launch_bounds__(ROWS_BLOCK) kvp_rows_gather_##SUFFIX(              \
      View v, Call call, const void *table, uint32_t wide, unsigned long long table_rows,         \
      unsigned long long stride, unsigned long long row_len, const long long *rows,               \
      const long long *prefix_lens, const long long *seq_lens, uint32_t batch, uint32_t *marks,   \
      INDEX *last_loc, unsigned long long *tok_off) {                                             \
    await_predecessors();                                                                         \
    rows_gather<INDEX>(v, call, table, wide, table_rows, stride, row_len, rows, prefix_lens,      \
                       seq_lens, batch, marks, last_loc, tok_off);                                \
  }                                                                                               \
  extern "C" __global__ void __launch_bounds__(SCATTER_BLOCK) kvp_rows_scatter_##SUFFIX(          \
      View v, Call call, void *table, uint32_t wide, unsigned long long stride,                   \
      const long long *rows, const long long *prefix_lens, const long long *seq_lens,             \
      uint32_t batch, const unsigned long long *tok_off, const INDEX *out,                        \
      unsigned long long tokens) {                                                                \
    await_predecessors();                                                                         \
    rows_scatter<INDEX>(v, table, wide, stride, rows, prefix_lens, seq_lens, batch, tok_off, out, \
                        tokens);                                                                  \
  }                                                                                               \
  extern "C" __global__ void __launch_bounds__(ROWS_BLOCK) kvp_rows_segments_##SUFFIX(            \
      View v, Call call, const void *table, uint32_t wide, unsigned long long table_rows,         \
      unsigned long long stride, unsigned long long row_len, const long long *rows,               \
      const long long *starts, const long long *ends, uint32_t batch, uint32_t *marks,            \
      INDEX *virt, unsigned long long virt_len) {                                                 \
    await_predecessors();                                                                         \
    rows_segments<INDEX>(v, call, table, wide, table_rows, stride, row_len, rows, starts, ends,   \
                         batch, marks, virt, virt_len);                                           \
  }

KVP_ROWS_KERNELS(i64, long long)
KVP_ROWS_KERNELS(i32, int)

// alloc_decode (and alloc_decode_rows) of up to THREADS requests (decode_block.cuh): the
// parameters of kvp_extend_*_ (and kvp_extend_*_rows_), so the host launches either alike;
// `prefix_lens`, `per_block` and `decode` are unused.
#define KVP_DECODE_KERNEL(THREADS, SUFFIX, INDEX)                                                 \
  extern "C" __global__ void __launch_bounds__(THREADS) kvp_decode_##THREADS##_##SUFFIX(          \
      View v, Call call, const long long *prefix_lens, const long long *seq_lens,                 \
      const INDEX *last_loc, uint32_t batch, uint32_t per_block, uint32_t decode,                 \
      unsigned long long total_tokens, unsigned long long total_pages, INDEX *out) {              \
    await_predecessors();                                                                         \
    decode_kernel<THREADS, INDEX>(v, call, seq_lens, last_loc, batch, total_tokens, total_pages,  \
                                  out);                                                           \
  }                                                                                               \
  extern "C" __global__ void __launch_bounds__(THREADS) kvp_decode_##THREADS##_rows_##SUFFIX(     \
      View v, Call call, const long long *prefix_lens, const long long *seq_lens,                 \
      uint32_t batch, uint32_t decode, unsigned long long total_tokens,                           \
      unsigned long long total_pages, INDEX *out, TableArgs tab) {                                \
    await_predecessors();                                                                         \
    decode_kernel<THREADS, INDEX, true>(v, call, seq_lens, nullptr, batch, total_tokens,          \
                                        total_pages, out, tab);                                   \
  }
#define KVP_DECODE_KERNELS(SUFFIX, INDEX)                                                         \
  KVP_DECODE_KERNEL(32, SUFFIX, INDEX)                                                            \
  KVP_DECODE_KERNEL(64, SUFFIX, INDEX)                                                            \
  KVP_DECODE_KERNEL(128, SUFFIX, INDEX)                                                           \
  KVP_DECODE_KERNEL(256, SUFFIX, INDEX)                                                           \
  KVP_DECODE_KERNEL(512, SUFFIX, INDEX)                                                           \
  KVP_DECODE_KERNEL(1024, SUFFIX, INDEX)

KVP_DECODE_KERNELS(i64, long long)
KVP_DECODE_KERNELS(i32, int)

// Calls of exactly one request, the batch a constant (ONE: decode_block.cuh,
// extend_block.cuh): alloc_decode on kvp_decode_32_*'s shape, plain and by row, and
// alloc_extend_rows on kvp_extend_{warp,block,blocks}_rows_*'s shapes.
#define KVP_EXTEND_ONE_ROWS_KERNEL(NAME, THREADS, GRID, SUFFIX, INDEX)                            \
  extern "C" __global__ void __launch_bounds__(THREADS) kvp_extend_one_##NAME##_rows_##SUFFIX(    \
      View v, Call call, const long long *prefix_lens, const long long *seq_lens,                 \
      uint32_t batch, uint32_t decode, unsigned long long total_tokens,                           \
      unsigned long long total_pages, INDEX *out, TableArgs tab) {                                \
    await_predecessors();                                                                         \
    extend_kernel<THREADS, 1, INDEX, true, GRID, true>(v, call, prefix_lens, seq_lens, nullptr,   \
                                                       batch, total_tokens, total_pages, out,     \
                                                       tab);                                      \
  }
#define KVP_ONE_KERNELS(SUFFIX, INDEX)                                                            \
  extern "C" __global__ void __launch_bounds__(32) kvp_decode_one_##SUFFIX(                       \
      View v, Call call, const long long *prefix_lens, const long long *seq_lens,                 \
      const INDEX *last_loc, uint32_t batch, uint32_t per_block, uint32_t decode,                 \
      unsigned long long total_tokens, unsigned long long total_pages, INDEX *out) {              \
    await_predecessors();                                                                         \
    decode_kernel<32, INDEX, false, true>(v, call, seq_lens, last_loc, batch, total_tokens,       \
                                          total_pages, out);                                      \
  }                                                                                               \
  extern "C" __global__ void __launch_bounds__(32) kvp_decode_one_rows_##SUFFIX(                  \
      View v, Call call, const long long *prefix_lens, const long long *seq_lens,                 \
      uint32_t batch, uint32_t decode, unsigned long long total_tokens,                           \
      unsigned long long total_pages, INDEX *out, TableArgs tab) {                                \
    await_predecessors();                                                                         \
    decode_kernel<32, INDEX, true, true>(v, call, seq_lens, nullptr, batch, total_tokens,         \
                                         total_pages, out, tab);                                  \
  }                                                                                               \
  KVP_EXTEND_ONE_ROWS_KERNEL(warp, 32, false, SUFFIX, INDEX)                                      \
  KVP_EXTEND_ONE_ROWS_KERNEL(block, EXTEND_BLOCK, false, SUFFIX, INDEX)                           \
  KVP_EXTEND_ONE_ROWS_KERNEL(blocks, EXTEND_BLOCK, true, SUFFIX, INDEX)
KVP_ONE_KERNELS(i64, long long)
KVP_ONE_KERNELS(i32, int)

// alloc_decode (and alloc_decode_rows) of DECODE_BATCH + 1 to CLUSTER * CLUSTER_BLOCK
// requests on one cluster of CLUSTER blocks (decode_cluster.cuh), with kvp_decode_*'s (and
// kvp_decode_*_rows_'s) parameters. sm_90 only: the host launches them only where clusters
// run (the sm_80 build traps).
#define KVP_DECODE_CLUSTER_KERNEL(CLUSTER, SUFFIX, INDEX)                                         \
  extern "C" __global__ void __launch_bounds__(CLUSTER_BLOCK) KVP_CLUSTER_DIMS(CLUSTER)           \
      kvp_decode_cluster##CLUSTER##_##SUFFIX(                                                     \
          View v, Call call, const long long *prefix_lens, const long long *seq_lens,             \
          const INDEX *last_loc, uint32_t batch, uint32_t per_block, uint32_t decode,             \
          unsigned long long total_tokens, unsigned long long total_pages, INDEX *out) {          \
    await_predecessors();                                                                         \
    decode_cluster_kernel<CLUSTER_BLOCK, CLUSTER, INDEX>(v, call, seq_lens, last_loc, batch,      \
                                                         total_tokens, total_pages, out);         \
  }                                                                                               \
  extern "C" __global__ void __launch_bounds__(CLUSTER_BLOCK) KVP_CLUSTER_DIMS(CLUSTER)           \
      kvp_decode_cluster##CLUSTER##_rows_##SUFFIX(                                                \
          View v, Call call, const long long *prefix_lens, const long long *seq_lens,             \
          uint32_t batch, uint32_t decode, unsigned long long total_tokens,                       \
          unsigned long long total_pages, INDEX *out, TableArgs tab) {                            \
    await_predecessors();                                                                         \
    decode_cluster_kernel<CLUSTER_BLOCK, CLUSTER, INDEX, true>(                                   \
        v, call, seq_lens, nullptr, batch, total_tokens, total_pages, out, tab);                  \
  }
KVP_DECODE_CLUSTER_KERNEL(4, i64, long long)
KVP_DECODE_CLUSTER_KERNEL(8, i64, long long)
KVP_DECODE_CLUSTER_KERNEL(4, i32, int)
KVP_DECODE_CLUSTER_KERNEL(8, i32, int)

// alloc_extend of up to 32 requests (extend_few.cuh): warp 0 decides, then THREADS threads
// write (one block), or several blocks (kvp_extend_few_blocks_{128,256}_*, a long prefill,
// of FEW_GRID_BLOCK or EXTEND_BLOCK threads; kvp_extend_few_spread_*, of EXTEND_BLOCK, one of
// more requests than blocks, whose blocks plan their tokens before the verdict where they
// hold several requests); kvp_extend_one_* the
// same shapes for exactly one request, kvp_extend_few{2,4,8}_* the one-block shapes for at
// most 2, 4 or 8 (extend_few's MAXB). kvp_extend_*'s parameters, so the host launches
// any of them alike; `per_block` and `decode` (0) are unused. KVP_EXTEND_FEW_KERNEL makes
// kvp_extend_NAME_* on THREADS threads (GRID: several blocks).
#define KVP_EXTEND_FEW_KERNEL(NAME, THREADS, GRID, SPREAD, MAXB, SUFFIX, INDEX)                   \
  extern "C" __global__ void __launch_bounds__(THREADS) kvp_extend_##NAME##_##SUFFIX(             \
      View v, Call call, const long long *prefix_lens, const long long *seq_lens,                 \
      const INDEX *last_loc, uint32_t batch, uint32_t per_block, uint32_t decode,                 \
      unsigned long long total_tokens, unsigned long long total_pages, INDEX *out) {              \
    await_predecessors();                                                                         \
    extend_few_kernel<THREADS, INDEX, GRID, SPREAD, MAXB>(v, call, prefix_lens, seq_lens,         \
                                                          last_loc, batch, total_tokens,          \
                                                          total_pages, out);                      \
  }
// The one-block shapes for at most MAXB requests (extend_few's MAXB). (Several blocks for
// 2-8 requests, kvp_extend_few{2,4,8}_blocks_*, took 0.97-1.02x the time: not built, run
// s35-1.)
#define KVP_EXTEND_FEW_BLOCK_SHAPES(NAME, MAXB, SUFFIX, INDEX)                                    \
  KVP_EXTEND_FEW_KERNEL(NAME##_64, 64, false, false, MAXB, SUFFIX, INDEX)                         \
  KVP_EXTEND_FEW_KERNEL(NAME##_128, 128, false, false, MAXB, SUFFIX, INDEX)                       \
  KVP_EXTEND_FEW_KERNEL(NAME##_256, 256, false, false, MAXB, SUFFIX, INDEX)
#define KVP_EXTEND_FEW_KERNELS(SUFFIX, INDEX)                                                     \
  KVP_EXTEND_FEW_BLOCK_SHAPES(few, 32, SUFFIX, INDEX)                                             \
  KVP_EXTEND_FEW_KERNEL(few_blocks_128, FEW_GRID_BLOCK, true, false, 32, SUFFIX, INDEX)           \
  KVP_EXTEND_FEW_KERNEL(few_blocks_256, EXTEND_BLOCK, true, false, 32, SUFFIX, INDEX)             \
  KVP_EXTEND_FEW_KERNEL(few_spread, EXTEND_BLOCK, true, true, 32, SUFFIX, INDEX)                  \
  KVP_EXTEND_FEW_BLOCK_SHAPES(one, 1, SUFFIX, INDEX)                                              \
  KVP_EXTEND_FEW_KERNEL(one_blocks_128, FEW_GRID_BLOCK, true, false, 1, SUFFIX, INDEX)            \
  KVP_EXTEND_FEW_KERNEL(one_blocks_256, EXTEND_BLOCK, true, false, 1, SUFFIX, INDEX)              \
  KVP_EXTEND_FEW_BLOCK_SHAPES(few2, 2, SUFFIX, INDEX)                                             \
  KVP_EXTEND_FEW_BLOCK_SHAPES(few4, 4, SUFFIX, INDEX)                                             \
  KVP_EXTEND_FEW_BLOCK_SHAPES(few8, 8, SUFFIX, INDEX)

KVP_EXTEND_FEW_KERNELS(i64, long long)
KVP_EXTEND_FEW_KERNELS(i32, int)

// alloc_extend of 33-64 requests in one block (extend_pairs.cuh: extend_few's one-block
// shapes with two requests a lane), kvp_extend_*'s parameters; `per_block` and `decode` (0)
// are unused.
#define KVP_EXTEND_PAIRS_KERNEL(THREADS, SUFFIX, INDEX)                                           \
  extern "C" __global__ void __launch_bounds__(THREADS) kvp_extend_pairs_##THREADS##_##SUFFIX(    \
      View v, Call call, const long long *prefix_lens, const long long *seq_lens,                 \
      const INDEX *last_loc, uint32_t batch, uint32_t per_block, uint32_t decode,                 \
      unsigned long long total_tokens, unsigned long long total_pages, INDEX *out) {              \
    await_predecessors();                                                                         \
    extend_pairs_kernel<THREADS, INDEX>(v, call, prefix_lens, seq_lens, last_loc, batch,          \
                                        total_tokens, total_pages, out);                          \
  }
#define KVP_EXTEND_PAIRS_KERNELS(SUFFIX, INDEX)                                                   \
  KVP_EXTEND_PAIRS_KERNEL(64, SUFFIX, INDEX)                                                      \
  KVP_EXTEND_PAIRS_KERNEL(128, SUFFIX, INDEX)                                                     \
  KVP_EXTEND_PAIRS_KERNEL(256, SUFFIX, INDEX)

KVP_EXTEND_PAIRS_KERNELS(i64, long long)
KVP_EXTEND_PAIRS_KERNELS(i32, int)

// Decode reservations (reservation.cuh): the pool's index type a suffix, a request-to-token
// table's element type a run-time flag (`wide`: int64) as for the rows kernels.
#define KVP_RESERVATION_KERNELS(SUFFIX, INDEX)                                                    \
  extern "C" __global__ void __launch_bounds__(RES_BLOCK) kvp_reserve_decode_##SUFFIX(            \
      View v, Call call, const long long *lens_in, const INDEX *last_loc, uint32_t batch,         \
      uint32_t steps, unsigned long long total_pages, unsigned long long first_pages,             \
      uint32_t phase, ResHeader *res, long long *lens, INDEX *slots, uint32_t *taken,             \
      uint32_t *rank) {                                                                           \
    await_predecessors();                                                                         \
    reserve_decode<INDEX>(v, call, lens_in, last_loc, batch, steps, total_pages, first_pages,     \
                          phase, res, lens, slots, taken, rank);                                  \
  }                                                                                               \
  extern "C" __global__ void __launch_bounds__(RES_BLOCK) kvp_reservation_step_##SUFFIX(          \
      View v, Call call, ResHeader *res, const long long *lens, const INDEX *slots,               \
      uint32_t batch, uint32_t steps, INDEX *out, void *table, uint32_t wide,                     \
      unsigned long long table_rows, unsigned long long stride, unsigned long long row_len,       \
      const long long *rows) {                                                                    \
    await_predecessors();                                                                         \
    reservation_step<INDEX>(v, call, res, lens, slots, batch, steps, out, table, wide,            \
                            table_rows, stride, row_len, rows);                                   \
  }                                                                                               \
  extern "C" __global__ void __launch_bounds__(RES_BLOCK) kvp_reservation_finish_##SUFFIX(        \
      View v, Call call, ResHeader *res, const long long *lens, const INDEX *slots,               \
      const uint32_t *taken, uint32_t batch, uint32_t steps, uint32_t used,                       \
      unsigned long long first_unused, unsigned long long unused) {                               \
    await_predecessors();                                                                         \
    reservation_finish<INDEX>(v, call, res, lens, slots, taken, batch, steps, used,               \
                              first_unused, unused);                                              \
  }                                                                                               \
  extern "C" __global__ void __launch_bounds__(RES_BLOCK) kvp_reservation_unhold_##SUFFIX(        \
      View v, ResHeader *res, const long long *lens, const INDEX *slots, const uint32_t *taken,   \
      uint32_t batch, unsigned long long total_pages) {                                           \
    await_predecessors();                                                                         \
    reservation_unhold<INDEX>(v, res, lens, slots, taken, batch, total_pages);                    \
  }

KVP_RESERVATION_KERNELS(i64, long long)
KVP_RESERVATION_KERNELS(i32, int)

extern "C" __global__ void __launch_bounds__(ROWS_BLOCK)
    kvp_page_table(const void *table, uint32_t wide, unsigned long long table_rows,
                   unsigned long long stride, unsigned long long row_len, const long long *rows,
                   const long long *seq_lens, uint32_t batch, uint32_t page_size, int *kv_indptr,
                   int *kv_indices, unsigned long long capacity, int *kv_last_page_len) {
  await_predecessors();
  page_table(table, wide, table_rows, stride, row_len, rows, seq_lens, batch, page_size,
             kv_indptr, kv_indices, capacity, kv_last_page_len);
}

extern "C" __global__ void __launch_bounds__(FREE_BLOCK) kvp_group_end(View v, Call call) {
  await_predecessors();
  group_end(v, call);
}
extern "C" __global__ void __launch_bounds__(FREE_BLOCK, 2)
    kvp_release_claimed(View v, Call call, uint32_t chunk) {
  await_predecessors();
  release_claimed(v, call, chunk);
}
extern "C" __global__ void __launch_bounds__(FREE_BLOCK) kvp_merge(View v, Call call) {
  await_predecessors();
  merge(v, call);
}
extern "C" __global__ void __launch_bounds__(256) kvp_reset(View v, Call call) {
  await_predecessors();
  reset(v, call);
}
extern "C" __global__ void __launch_bounds__(256) kvp_retag(View v) {
  await_predecessors();
  retag(v);
}
extern "C" __global__ void __launch_bounds__(256)
    kvp_backup(View v, Call call, uint32_t *snapshot) {
  await_predecessors();
  copy_state(v, call, snapshot, false);
}
extern "C" __global__ void __launch_bounds__(256)
    kvp_restore(View v, Call call, uint32_t *snapshot) {
  await_predecessors();
  copy_state(v, call, snapshot, true);
}

// ---- state digest (kernels/digest.cuh) -------------------------------------------------------
#include "digest.cuh"

// ---- debug: calls on one pool from streams not ordered with each other --------------------
// (kvp_pool_set_debug(pool, KVP_DEBUG_STREAM_ORDER); src/cuda/stream_order.rs.) Separate
// one-thread kernels around each of the pool's launches, so the operations' kernels are
// unchanged and a pool without the option pays nothing. After every launch the host
// enqueues kvp_debug_mark(seq) on the same stream; before the next launch, on that launch's
// stream, kvp_debug_check(expect = the previous launch's seq). If the previous launch has
// not finished when the check runs, its mark has not been written: the streams are not
// ordered. The check then faults the pool (first fault wins; the fault record names the
// previous call in `position` and the last finished one in `value`), so the kernel it
// guards, and every later one, does nothing.
extern "C" __global__ void __launch_bounds__(32)
    kvp_debug_check(View v, Call call, const uint32_t *done, uint32_t expect) {
  await_predecessors();
  if (threadIdx.x != 0) return;
  const uint32_t seen = *(const volatile uint32_t *)done;
  if (seen != expect)
    raise_fault(v, call, ((unsigned long long)expect << 8) | ERR_UNORDERED, (long long)seen);
}
extern "C" __global__ void __launch_bounds__(32) kvp_debug_mark(uint32_t *done, uint32_t seq) {
  await_predecessors();
  if (threadIdx.x == 0) *(volatile uint32_t *)done = seq;
}

// ---- what the library checks against its own copy when it loads the module ----------------
#include "abi.cuh"
