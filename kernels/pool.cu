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

constexpr int SORT_CAP = 4096;  // pages sorted in shared memory; more: scan of the page map
constexpr unsigned FULL = 0xffffffffu;
constexpr unsigned long long NO_ERROR = ~0ull;

// ---- small block-wide building blocks ----------------------------------------------------

template <int BLOCK>
__device__ unsigned long long block_sum(unsigned long long x) {
  __shared__ unsigned long long warp_sums[BLOCK / 32];
  for (int o = 16; o > 0; o >>= 1) x += __shfl_down_sync(FULL, x, o);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) warp_sums[warp] = x;
  __syncthreads();
  unsigned long long total = 0;
  for (int w = 0; w < BLOCK / 32; ++w) total += warp_sums[w];
  __syncthreads();
  return total;
}

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

__device__ inline void report(Header *h, unsigned long long position, uint32_t code) {
  atomicMin(&h->op_error, (position << 8) | code);
}

// True in the one block that finishes last; it then sees every other block's writes.
__device__ bool last_block_done(Header *h) {
  __shared__ bool last;
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(&h->ticket, 1u) == gridDim.x - 1;
  __syncthreads();
  if (last) __threadfence();
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

// Thread 0 only: makes the pool faulted (first fault wins) and tells the host.
__device__ void raise_fault(const View &v, const Call &call, unsigned long long key,
                            long long value) {
  if (atomicCAS(&v.header->fault, 0u, 1u) != 0u) return;
  volatile HostRecord *rec = v.record;
  rec->fault_code = (unsigned long long)(key & 0xff) | ((unsigned long long)call.op << 32);
  rec->fault_position = (long long)(key >> 8);
  rec->fault_value = value;
  __threadfence_system();
  rec->fault_seq = call.seq;
}

__device__ inline uint32_t slot_error(long long slot, const View &v) {
  const long long max_slot = (long long)(v.size + v.page_size - 1);
  if (slot < 0 || slot > max_slot) return ERR_OUT_OF_RANGE;
  if (slot < (long long)v.page_size) return ERR_RESERVED;
  return ERR_NONE;
}

// Claims an allocated page for the free call `tag` (allocated -> claimed). Returns ERR_NONE,
// or what is wrong with it; `sibling_ok` accepts a page this call already claimed.
__device__ uint32_t claim_page(const View &v, uint32_t page, uint32_t tag, bool sibling_ok,
                               bool *won) {
  *won = false;
  uint32_t old = v.state[page];
  for (;;) {
    const uint32_t kind = kind_of(old);
    if (kind == KIND_ALLOCATED) {
      const uint32_t seen = atomicCAS(&v.state[page], old, page_word(KIND_CLAIMED, tag));
      if (seen == old) {
        *won = true;
        return ERR_NONE;
      }
      old = seen;
      continue;
    }
    if (kind == KIND_CLAIMED && tag_of(old) == tag) return sibling_ok ? ERR_NONE : ERR_TWICE_IN_CALL;
    if (kind == KIND_PENDING_ORD || kind == KIND_PENDING_IDX) return ERR_PENDING;
    if (kind == KIND_RESERVED) return ERR_RESERVED;
    return ERR_ALREADY_FREE;
  }
}

// Where released pages go: the ring's front (paged), its tail (token pool), the staged
// buffer (need_sort) or an open free group.
enum Dest { DEST_FRONT, DEST_TAIL, DEST_STAGED, DEST_GROUP_ORD, DEST_GROUP_IDX };

__device__ inline Dest release_dest(const View &v, const Call &call, bool by_index) {
  if (call.flags & CALL_IN_GROUP) return by_index ? DEST_GROUP_IDX : DEST_GROUP_ORD;
  if (v.need_sort) return DEST_STAGED;
  return v.page_size > 1 ? DEST_FRONT : DEST_TAIL;
}

// Writes `count` pages (page(i) for i < count) to `dest`, setting their page words; every
// thread of the block takes part. Returns the new cursor (meaningful in every thread).
template <typename PageAt>
__device__ Cursor release_pages(const View &v, const Call &call, Cursor c, Dest dest,
                                uint32_t count, PageAt page_at) {
  const uint32_t n = v.num_pages;
  for (uint32_t i = threadIdx.x; i < count; i += blockDim.x) {
    const uint32_t page = page_at(i);
    switch (dest) {
      case DEST_FRONT:
        v.ring[(uint32_t)(((unsigned long long)c.head + n - count + i) % n)] = page;
        v.state[page] = page_word(KIND_FREE, call.tag);
        break;
      case DEST_TAIL:
        v.ring[(uint32_t)(((unsigned long long)c.head + c.free_len + i) % n)] = page;
        v.state[page] = page_word(KIND_FREE, call.tag);
        break;
      case DEST_STAGED:
        v.staged[c.staged_len + i] = page;
        v.state[page] = page_word(KIND_STAGED, call.tag);
        break;
      case DEST_GROUP_ORD:
        v.group_ord[c.group_ord_len + i] = page;
        v.state[page] = page_word(KIND_PENDING_ORD, call.tag);
        break;
      case DEST_GROUP_IDX:
        v.group_idx[c.group_idx_len + i] = page;
        v.state[page] = page_word(KIND_PENDING_IDX, call.tag);
        break;
    }
  }
  switch (dest) {
    case DEST_FRONT:
      c.head = (uint32_t)(((unsigned long long)c.head + n - count) % n);
      c.free_len += count;
      break;
    case DEST_TAIL: c.free_len += count; break;
    case DEST_STAGED: c.staged_len += count; break;
    case DEST_GROUP_ORD: c.group_ord_len += count; break;
    case DEST_GROUP_IDX: c.group_idx_len += count; break;
  }
  return c;
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
template <typename Index>
__device__ void alloc_pages(View v, Call call, unsigned long long pages, Index *out) {
  const Cursor c = v.header->cursor[call.in];
  const uint32_t ps = v.page_size, n = v.num_pages;
  const unsigned long long tokens = pages * ps;
  const bool dead = v.header->fault != 0;
  const bool short_ = !dead && c.free_len < pages;
  const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
  for (unsigned long long t = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
       t < tokens; t += stride) {
    if (dead || short_) {
      out[t] = 0;
      continue;
    }
    const unsigned long long k = t / ps;
    const uint32_t page = v.ring[(uint32_t)((c.head + k) % n)];
    if (t % ps == 0) v.state[page] = page_word(KIND_ALLOCATED, call.tag);
    out[t] = (Index)((unsigned long long)page * ps + t % ps);
  }
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    Cursor next = c;
    if (!dead && !short_) {
      next.head = (uint32_t)((c.head + pages) % n);
      next.free_len = c.free_len - (uint32_t)pages;
    }
    if (short_) raise_fault(v, call, ERR_SHORTAGE, c.free_len);
    v.header->cursor[call.in ^ 1] = next;
    mirror_counts(v, call, next);
  }
}

constexpr int EXTEND_BLOCK = 256;
constexpr int EXTEND_MAX_REQS = EXTEND_BLOCK;  // requests per block

__device__ inline unsigned long long ceil_to(unsigned long long x, unsigned long long m) {
  return (x + m - 1) / m * m;
}

// Per-request extend shape (see src/pool/plan.rs `ExtendShape`).
struct Shape {
  unsigned long long tokens;     // seq - prefix
  unsigned long long part1;      // tokens into the prefix's partial page
  unsigned long long new_pages;  // pages taken from the free list
};

__device__ inline Shape shape_of(unsigned long long prefix, unsigned long long seq,
                                 unsigned long long ps) {
  Shape s;
  s.tokens = seq - prefix;
  const unsigned long long filled = ceil_to(prefix, ps);
  s.part1 = (seq < filled ? seq : filled) - prefix;
  s.new_pages = (ceil_to(seq, ps) - filled) / ps;
  if (seq < filled) s.new_pages = 0;
  return s;
}

// alloc_extend (decode = 0) and alloc_decode (decode = 1: prefix = seq - 1, one token each).
// Block b owns requests [b*per_block, (b+1)*per_block). The last block to finish commits the
// cursor or, if any block found a bad last_loc, reverts the new pages and zeroes `out`.
template <typename Index>
__device__ void extend(View v, Call call, const long long *prefix_lens, const long long *seq_lens,
                       const Index *last_loc, uint32_t batch, uint32_t per_block, uint32_t decode,
                       unsigned long long total_tokens, unsigned long long total_pages,
                       Index *out) {
  __shared__ unsigned long long tok_off[EXTEND_MAX_REQS + 1];
  __shared__ unsigned long long page_off[EXTEND_MAX_REQS];
  __shared__ unsigned long long part1[EXTEND_MAX_REQS];
  __shared__ long long last[EXTEND_MAX_REQS];
  Header *h = v.header;
  const Cursor c = h->cursor[call.in];
  const unsigned long long ps = v.page_size;
  const uint32_t n = v.num_pages;
  const bool dead = h->fault != 0;
  const bool short_ = !dead && c.free_len < total_pages;

  const uint32_t first = blockIdx.x * per_block;
  const uint32_t mine = first < batch ? min(per_block, batch - first) : 0;
  auto prefix_of = [&](uint32_t i) -> unsigned long long {
    return decode ? (unsigned long long)(seq_lens[i] - 1) : (unsigned long long)prefix_lens[i];
  };

  // Tokens and new pages of every request before this block's.
  unsigned long long tok_before = 0, pages_before = 0;
  for (uint32_t i = threadIdx.x; i < first; i += EXTEND_BLOCK) {
    const Shape s = shape_of(prefix_of(i), (unsigned long long)seq_lens[i], ps);
    tok_before += s.tokens;
    pages_before += s.new_pages;
  }
  tok_before = block_sum<EXTEND_BLOCK>(tok_before);
  pages_before = block_sum<EXTEND_BLOCK>(pages_before);

  // This block's requests: shapes, offsets, and the last_loc checks.
  Shape s{0, 0, 0};
  const uint32_t r = threadIdx.x;
  if (r < mine) {
    const uint32_t i = first + r;
    const unsigned long long prefix = prefix_of(i);
    s = shape_of(prefix, (unsigned long long)seq_lens[i], ps);
    const long long ll = (long long)last_loc[i];
    last[r] = ll;
    part1[r] = s.part1;
    uint32_t err = ERR_NONE;
    if (prefix == 0) {
      if (ll != -1) err = ERR_LAST_LOC_EMPTY;
    } else if ((err = slot_error(ll, v)) == ERR_NONE) {
      const uint32_t page = (uint32_t)((unsigned long long)ll / ps);
      const uint32_t word = v.state[page];
      if (kind_of(word) != KIND_ALLOCATED || tag_of(word) == call.tag) {
        err = ERR_NOT_ALLOCATED;
      } else if (((unsigned long long)ll + 1) % ps != prefix % ps) {
        err = ERR_LAST_LOC;
      } else if (s.part1 > 0 && atomicExch(&v.claim[page], call.tag) == call.tag) {
        err = ERR_SHARED_PAGE;
      }
    }
    if (err != ERR_NONE && !dead) report(h, i, err);
  }
  unsigned long long my_tokens, my_pages_total;
  const unsigned long long tok_rank = block_exclusive_scan<EXTEND_BLOCK>(s.tokens, &my_tokens);
  const unsigned long long page_rank = block_exclusive_scan<EXTEND_BLOCK>(s.new_pages, &my_pages_total);
  if (r < mine) {
    tok_off[r] = tok_rank;
    page_off[r] = page_rank;
  }
  if (r == 0) tok_off[mine] = my_tokens;
  __syncthreads();

  // Write the block's tokens; the first token of each new page marks the page allocated.
  for (unsigned long long t = threadIdx.x; t < my_tokens; t += EXTEND_BLOCK) {
    Index slot = 0;
    if (!dead && !short_) {
      uint32_t lo = 0, hi = mine;  // last request with tok_off <= t
      while (hi - lo > 1) {
        const uint32_t mid = (lo + hi) / 2;
        if (tok_off[mid] <= t) lo = mid; else hi = mid;
      }
      const unsigned long long k = t - tok_off[lo];
      if (k < part1[lo]) {
        slot = (Index)(last[lo] + 1 + (long long)k);
      } else {
        const unsigned long long j = k - part1[lo];
        const unsigned long long rank = pages_before + page_off[lo] + j / ps;
        const uint32_t page = v.ring[(uint32_t)((c.head + rank) % n)];
        if (j % ps == 0) v.state[page] = page_word(KIND_ALLOCATED, call.tag);
        slot = (Index)((unsigned long long)page * ps + j % ps);
      }
    }
    out[tok_before + t] = slot;
  }

  if (!last_block_done(h)) return;
  __shared__ unsigned long long verdict;
  if (threadIdx.x == 0) verdict = *(volatile unsigned long long *)&h->op_error;
  __syncthreads();
  const bool failed = !dead && (short_ || verdict != NO_ERROR);
  if (failed) {
    // Undo: the new pages go back to free, every output becomes the padding slot.
    if (!short_) {
      for (unsigned long long k = threadIdx.x; k < total_pages; k += EXTEND_BLOCK)
        v.state[v.ring[(uint32_t)((c.head + k) % n)]] = page_word(KIND_FREE, 0);
    }
    for (unsigned long long t = threadIdx.x; t < total_tokens; t += EXTEND_BLOCK) out[t] = 0;
  }
  if (threadIdx.x == 0) {
    Cursor next = c;
    if (!dead && !failed) {
      next.head = (uint32_t)((c.head + total_pages) % n);
      next.free_len = c.free_len - (uint32_t)total_pages;
    }
    if (failed) {
      const unsigned long long key = short_ ? (unsigned long long)ERR_SHORTAGE : verdict;
      const long long value = short_ ? (long long)c.free_len : (long long)last_loc[verdict >> 8];
      raise_fault(v, call, key, value);
    }
    h->cursor[call.in ^ 1] = next;
    mirror_counts(v, call, next);
    h->op_error = NO_ERROR;
    h->ticket = 0;
  }
}

// ---- frees --------------------------------------------------------------------------------

constexpr int FREE_BLOCK = 1024;

enum FreeMode : uint32_t {
  FREE_PAGE_IDS = 0,    // elements are page ids
  FREE_SLOTS = 1,       // token pool: elements are slots (= pages)
  FREE_SEGMENT = 2,     // paged pool: the pages of row[start, start + len)
};

// Frees whose page count the host knows: page ids, token-pool slots, segments. One block;
// `count` pages. Pages go to the destination in the order given.
template <typename Index>
__device__ void free_known(View v, Call call, const Index *src, uint32_t mode,
                           unsigned long long len, unsigned long long start, uint32_t count) {
  Header *h = v.header;
  const Cursor c = h->cursor[call.in];
  const unsigned long long ps = v.page_size;
  if (h->fault != 0) {
    if (threadIdx.x == 0) {
      h->cursor[call.in ^ 1] = c;
      mirror_counts(v, call, c);
    }
    return;
  }
  for (uint32_t i = threadIdx.x; i < count; i += FREE_BLOCK) {
    unsigned long long pos = start + i;
    long long value = 0;
    uint32_t err = ERR_NONE, page = 0;
    if (mode == FREE_PAGE_IDS) {
      value = (long long)src[pos];
      if (value == 0) err = ERR_RESERVED;
      else if (value < 0 || value > (long long)v.num_pages) err = ERR_OUT_OF_RANGE;
      else page = (uint32_t)value;
    } else if (mode == FREE_SLOTS) {
      value = (long long)src[pos];
      if ((err = slot_error(value, v)) == ERR_NONE) page = (uint32_t)value;
    } else {
      pos = start + (unsigned long long)i * ps;
      value = (long long)src[pos];
      if ((err = slot_error(value, v)) == ERR_NONE) {
        if ((unsigned long long)value % ps != 0) {
          err = ERR_UNALIGNED;
        } else {
          const unsigned long long end = min(ps, start + len - pos);
          for (unsigned long long j = 1; j < end; ++j) {
            if ((long long)src[pos + j] != value + (long long)j) {
              err = ERR_NOT_CONTIGUOUS;
              pos += j;
              break;
            }
          }
          if (err == ERR_NONE) page = (uint32_t)((unsigned long long)value / ps);
        }
      }
    }
    if (err == ERR_NONE) {
      bool won;
      err = claim_page(v, page, call.tag, false, &won);
      if (!won) page = 0;
    }
    v.scratch[i] = page;  // 0: nothing claimed for this element
    if (err != ERR_NONE) report(h, pos, err);
  }
  __syncthreads();
  const unsigned long long verdict = *(volatile unsigned long long *)&h->op_error;
  __syncthreads();
  if (verdict != NO_ERROR) {
    for (uint32_t i = threadIdx.x; i < count; i += FREE_BLOCK) {
      const uint32_t page = v.scratch[i];
      if (page != 0) v.state[page] = page_word(KIND_ALLOCATED, 0);
    }
    if (threadIdx.x == 0) {
      raise_fault(v, call, verdict, (long long)src[verdict >> 8]);
      h->cursor[call.in ^ 1] = c;
      mirror_counts(v, call, c);
      h->op_error = NO_ERROR;
    }
    return;
  }
  const Dest dest = release_dest(v, call, false);
  const Cursor next = release_pages(v, call, c, dest, count,
                                    [&](uint32_t i) { return v.scratch[i]; });
  if (threadIdx.x == 0) {
    h->cursor[call.in ^ 1] = next;
    mirror_counts(v, call, next);
  }
}

// Paged pool, free by token index: every index frees its page; the distinct pages are
// released in ascending order (SGLang's unique(indices // page_size)). How many there are
// only the device knows; the host learns it from the mirrored counts.
template <typename Index>
__device__ void free_slots_paged(View v, Call call, const Index *indices, unsigned long long len) {
  Header *h = v.header;
  const Cursor c = h->cursor[call.in];
  const unsigned long long ps = v.page_size;
  __shared__ uint32_t distinct;
  if (threadIdx.x == 0) distinct = 0;
  if (h->fault != 0) {
    if (threadIdx.x == 0) {
      h->cursor[call.in ^ 1] = c;
      mirror_counts(v, call, c);
    }
    return;
  }
  __syncthreads();
  for (unsigned long long i = threadIdx.x; i < len; i += FREE_BLOCK) {
    const long long value = (long long)indices[i];
    uint32_t err = slot_error(value, v);
    if (err == ERR_NONE) {
      const unsigned long long slot = (unsigned long long)value;
      const uint32_t bit = 1u << (slot & 31);
      if (atomicOr(&v.slot_marks[slot >> 5], bit) & bit) {
        err = ERR_TWICE_IN_CALL;
      } else {
        bool won;
        const uint32_t page = (uint32_t)(slot / ps);
        err = claim_page(v, page, call.tag, true, &won);
        if (won) v.scratch[atomicAdd(&distinct, 1u)] = page;
      }
    }
    if (err != ERR_NONE) report(h, i, err);
  }
  __syncthreads();
  for (unsigned long long i = threadIdx.x; i < len; i += FREE_BLOCK) {
    const long long value = (long long)indices[i];
    if (slot_error(value, v) == ERR_NONE) {
      const unsigned long long slot = (unsigned long long)value;
      atomicAnd(&v.slot_marks[slot >> 5], ~(1u << (slot & 31)));
    }
  }
  const unsigned long long verdict = *(volatile unsigned long long *)&h->op_error;
  const uint32_t count = distinct;
  __syncthreads();
  if (verdict != NO_ERROR) {
    for (uint32_t i = threadIdx.x; i < count; i += FREE_BLOCK)
      v.state[v.scratch[i]] = page_word(KIND_ALLOCATED, 0);
    if (threadIdx.x == 0) {
      raise_fault(v, call, verdict, (long long)indices[verdict >> 8]);
      h->cursor[call.in ^ 1] = c;
      mirror_counts(v, call, c);
      h->op_error = NO_ERROR;
    }
    return;
  }
  const uint32_t claimed = page_word(KIND_CLAIMED, call.tag);
  sort_pages<FREE_BLOCK>(v, v.scratch, count, v.scratch,
                         [&](uint32_t word) { return word == claimed; });
  const Dest dest = release_dest(v, call, true);
  const Cursor next = release_pages(v, call, c, dest, count,
                                    [&](uint32_t i) { return v.scratch[i]; });
  if (threadIdx.x == 0) {
    h->cursor[call.in ^ 1] = next;
    mirror_counts(v, call, next);
  }
}

// Closes a free group: first the pages freed by index (one ascending block), then those
// freed by page id or segment, in call order.
__device__ void group_end(View v, Call call) {
  Header *h = v.header;
  Cursor c = h->cursor[call.in];
  if (h->fault != 0) {
    if (threadIdx.x == 0) {
      h->cursor[call.in ^ 1] = c;
      mirror_counts(v, call, c);
    }
    return;
  }
  const uint32_t by_index = c.group_idx_len, in_order = c.group_ord_len;
  sort_pages<FREE_BLOCK>(v, v.group_idx, by_index, v.group_idx,
                         [](uint32_t word) { return kind_of(word) == KIND_PENDING_IDX; });
  Call plain = call;
  plain.flags &= ~CALL_IN_GROUP;
  const Dest dest = release_dest(v, plain, true);
  // Two releases in a row; a release to the front must see the cursor the first one left.
  Cursor mid = release_pages(v, plain, c, dest, by_index, [&](uint32_t i) { return v.group_idx[i]; });
  __syncthreads();
  Cursor next = release_pages(v, plain, mid, dest, in_order, [&](uint32_t i) { return v.group_ord[i]; });
  next.group_idx_len = 0;
  next.group_ord_len = 0;
  if (threadIdx.x == 0) {
    h->cursor[call.in ^ 1] = next;
    mirror_counts(v, call, next);
  }
}

// free = sort(free ++ staged): a scan of the page map yields every free or staged page in
// ascending order; the ring restarts at position 0.
__device__ void merge(View v, Call call) {
  Header *h = v.header;
  const Cursor c = h->cursor[call.in];
  Cursor next = c;
  if (h->fault == 0 && c.staged_len > 0) {
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
  if (threadIdx.x == 0) {
    h->cursor[call.in ^ 1] = next;
    mirror_counts(v, call, next);
  }
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
    v.header->cursor[call.in ^ 1] = next;
    v.header->fault = 0;
    v.header->ticket = 0;
    v.header->op_error = NO_ERROR;
    mirror_counts(v, call, next);
  }
}

// Clears the tags of every page word and claim, so tags can start again at 1.
__device__ void retag(View v) {
  const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
  for (unsigned long long p = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
       p <= v.num_pages; p += stride) {
    v.state[p] &= KIND_MASK;
    v.claim[p] = 0;
  }
}

// Snapshot layout: Cursor, then ring, staged and state words.
__device__ void copy_state(View v, Call call, uint32_t *snap, bool restore) {
  const unsigned long long n = v.num_pages;
  const unsigned long long words = 3 * n + 1;
  uint32_t *arrays = snap + sizeof(Cursor) / sizeof(uint32_t);
  const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
  for (unsigned long long w = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; w < words;
       w += stride) {
    uint32_t *live = w < n ? &v.ring[w] : w < 2 * n ? &v.staged[w - n] : &v.state[w - 2 * n];
    if (restore) {
      uint32_t word = arrays[w];
      // Tags of a restored page map may repeat later calls' tags: clear them.
      if (w >= 2 * n) word &= KIND_MASK;
      *live = word;
    } else {
      arrays[w] = *live;
    }
  }
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    Cursor *saved = reinterpret_cast<Cursor *>(snap);
    const Cursor next = restore ? *saved : v.header->cursor[call.in];
    if (!restore) *saved = next;
    v.header->cursor[call.in ^ 1] = next;
    if (restore) {
      v.header->fault = 0;
      v.header->op_error = NO_ERROR;
      v.header->ticket = 0;
    }
    mirror_counts(v, call, next);
  }
}

}  // namespace kvp

using namespace kvp;

// ---- entry points (loaded by name from src/cuda/kernels.rs) ---------------------------------

#define KVP_INDEX_KERNELS(SUFFIX, INDEX)                                                          \
  extern "C" __global__ void __launch_bounds__(256)                                               \
      kvp_alloc_##SUFFIX(View v, Call call, unsigned long long pages, INDEX *out) {               \
    alloc_pages<INDEX>(v, call, pages, out);                                                      \
  }                                                                                               \
  extern "C" __global__ void __launch_bounds__(EXTEND_BLOCK) kvp_extend_##SUFFIX(                 \
      View v, Call call, const long long *prefix_lens, const long long *seq_lens,                 \
      const INDEX *last_loc, uint32_t batch, uint32_t per_block, uint32_t decode,                 \
      unsigned long long total_tokens, unsigned long long total_pages, INDEX *out) {              \
    extend<INDEX>(v, call, prefix_lens, seq_lens, last_loc, batch, per_block, decode,             \
                  total_tokens, total_pages, out);                                                \
  }                                                                                               \
  extern "C" __global__ void __launch_bounds__(FREE_BLOCK) kvp_free_known_##SUFFIX(               \
      View v, Call call, const INDEX *src, uint32_t mode, unsigned long long len,                 \
      unsigned long long start, uint32_t count) {                                                 \
    free_known<INDEX>(v, call, src, mode, len, start, count);                                     \
  }                                                                                               \
  extern "C" __global__ void __launch_bounds__(FREE_BLOCK)                                        \
      kvp_free_slots_paged_##SUFFIX(View v, Call call, const INDEX *indices,                      \
                                    unsigned long long len) {                                     \
    free_slots_paged<INDEX>(v, call, indices, len);                                               \
  }

KVP_INDEX_KERNELS(i64, long long)
KVP_INDEX_KERNELS(i32, int)

extern "C" __global__ void __launch_bounds__(FREE_BLOCK) kvp_group_end(View v, Call call) {
  group_end(v, call);
}
extern "C" __global__ void __launch_bounds__(FREE_BLOCK) kvp_merge(View v, Call call) {
  merge(v, call);
}
extern "C" __global__ void __launch_bounds__(256) kvp_reset(View v, Call call) { reset(v, call); }
extern "C" __global__ void __launch_bounds__(256) kvp_retag(View v) { retag(v); }
extern "C" __global__ void __launch_bounds__(256)
    kvp_backup(View v, Call call, uint32_t *snapshot) {
  copy_state(v, call, snapshot, false);
}
extern "C" __global__ void __launch_bounds__(256)
    kvp_restore(View v, Call call, uint32_t *snapshot) {
  copy_state(v, call, snapshot, true);
}
