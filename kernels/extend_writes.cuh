// The write side shared by the deciding extend kernels (extend_block.cuh, extend_few.cuh):
// staging the ring's new pages in shared memory, and the loop after the verdict that hands
// each token its slot (which the ticketed kernel, extend_grid.cuh, also runs for long
// requests, before its ticket). Included by pool.cu before all three.
//
// Both are on the critical path of every thread of a small call, so they work in 32 bits
// where the call allows (BENCHMARKS.md, fourteenth and fifteenth sessions: the 64-bit offsets
// and ring positions cost 1-11% of an extend of 1-256 requests).

namespace kvp {

// x / page_size and x % page_size in the width of x (32 bits: no 64-bit division or shifts).
template <bool POW2, typename Off>
__device__ __forceinline__ Off div_page(Off x, const View &v) {
  if constexpr (sizeof(Off) == 4) return POW2 ? x >> v.page_shift : x / v.page_size;
  else return div_ps<POW2>(x, v);
}
template <bool POW2, typename Off>
__device__ __forceinline__ Off mod_page(Off x, const View &v) {
  if constexpr (sizeof(Off) == 4) return POW2 ? x & (v.page_size - 1) : x % v.page_size;
  else return mod_ps<POW2>(x, v);
}

// Copies the ring's pages of ranks [page_lo, page_hi) (at most STAGE_CAP; the call is live,
// so they are in the free list) into `pages`: thread `me` of STAGERS, BATCH loads in flight
// before any is used, from the `skip`-th page on (the ones before it staged already: see
// EarlyRing). In 32 bits: the q-th page is at ring position first + q, wrapping at most once
// (first < n, and the free list holds at most n pages).
template <uint32_t BATCH, uint32_t STAGERS>
__device__ __forceinline__ void stage_pages(uint32_t *pages, const View &v, const Cursor &c,
                                            unsigned long long page_lo,
                                            unsigned long long page_hi, uint32_t me,
                                            uint32_t skip = 0) {
  const uint32_t n = v.num_pages;
  const uint32_t first = ring_pos(c.head, page_lo, n);
  const uint32_t count = (uint32_t)(page_hi - page_lo), to_end = n - first;
  for (uint32_t base = me + skip; base < count; base += BATCH * STAGERS) {
    uint32_t got[BATCH];
#pragma unroll
    for (uint32_t u = 0; u < BATCH; ++u) {
      const uint32_t q = base + u * STAGERS;
      got[u] = q < count ? v.ring[q < to_end ? first + q : q - to_end] : 0;
    }
#pragma unroll
    for (uint32_t u = 0; u < BATCH; ++u) {
      const uint32_t q = base + u * STAGERS;
      if (q < count) pages[q] = got[u];
    }
  }
}

// BATCH x STAGERS pages of the ring from ring position `first`, loaded before they are
// staged (`load`, then `stage`), so that other work runs while they are in flight. One
// block: the ring's first pages from the head, loaded as soon as the cursor is in, before
// the call's shape is known (its new pages are ranks [0, new_pages)): they travel with the
// deciding warp's loads instead of a round trip after the requests' scan. Several blocks:
// the block's pages, from the rank of its first new page, loaded before the writers plan
// their tokens. Reading ring entries past the free list is harmless (nothing uses them);
// positions are kept below num_pages (a small pool), where ranks of a live call always are.
template <uint32_t BATCH, uint32_t STAGERS>
struct EarlyRing {
  static constexpr uint32_t SPAN = BATCH * STAGERS;
  uint32_t got[BATCH];

  // The pages at positions first + q for q < limit (at most num_pages).
  __device__ __forceinline__ void load(const View &v, uint32_t first, uint32_t limit,
                                       uint32_t me) {
    const uint32_t to_end = v.num_pages - first;
#pragma unroll
    for (uint32_t u = 0; u < BATCH; ++u) {
      const uint32_t q = me + u * STAGERS;
      got[u] = q < limit ? v.ring[q < to_end ? first + q : q - to_end] : 0;
    }
  }

  // Ranks [from, from + count) into `pages` (from its start): the loaded ones (`load` from
  // the ring position of rank `from`), then the rest from the ring.
  __device__ __forceinline__ void stage(uint32_t *pages, const View &v, const Cursor &c,
                                        unsigned long long from, uint32_t count,
                                        uint32_t me) const {
#pragma unroll
    for (uint32_t u = 0; u < BATCH; ++u) {
      const uint32_t q = me + u * STAGERS;
      if (q < count) pages[q] = got[u];
    }
    if (count > SPAN) stage_pages<BATCH, STAGERS>(pages, v, c, from, from + count, me, SPAN);
  }
};

// The most tokens the host gives each block of a several-block extend kernel (src/cuda/pool.rs:
// SPAN_TOKENS, up to TARGET_BLOCKS blocks; past that a block takes more, on the general loop).
constexpr uint32_t SPAN_TOKENS = 512;

// A thread's tokens of a block's range (the block's first + me, + STRIDE, ...): what each
// needs for its slot but its new page, worked out before the verdict (`place`), so that
// after the barrier a token costs one shared load and its stores (`write`); extend_few's
// one block stores the slots before the verdict (`store_slots`) and the new pages' words
// after it (`write_pages`), or, on two warps, before it too (undone by `undo_pages` when the
// call fails). In 32 bits: the
// kernels plan only calls whose offsets are narrow (narrow_offsets). (The general loop,
// write_slots, searches each token's request and reads its offsets from shared memory after
// the barrier: about 950 cycles for the 16 tokens of one request on one warp, with the SM
// warm: bench-gpu/anatomy.cu, run s19-2. Run s19-9, extend_few's one-block kernels: 1-32
// requests of up to 512 tokens 0.63-0.95x the time; run s20-2, extend_block's one block:
// 33-64 requests of 4-16 tokens 0.88-0.97x.)
constexpr uint32_t NO_RANK = ~0u;  // a token of the prefix's partial page (part 1)
template <uint32_t PER>
struct OwnTokens {
  long long base[PER];  // part 1: the slot; a new page: the position in the page
  uint32_t rank[PER];   // a new page's ring rank, counted from the block's first, or NO_RANK
  uint32_t fill[PER];   // a new page's fill point, set by its first token (position 0)

  // Token u is the k-th of a request of `len` tokens, `part1` of them into the prefix's
  // partial page (after `last`, its last_loc), its new pages from ring rank `page`; the
  // block's new pages start at rank `page_lo`.
  template <bool POW2>
  __device__ __forceinline__ void place(uint32_t u, uint32_t k, uint32_t part1, uint32_t len,
                                        uint32_t page, long long last, uint32_t page_lo,
                                        const View &v) {
    if (k < part1) {
      base[u] = last + 1 + (long long)k;
      rank[u] = NO_RANK;
      fill[u] = 0;
    } else {
      const uint32_t j = k - part1, left = len - part1 - j;
      base[u] = mod_page<POW2>(j, v);
      rank[u] = page + div_page<POW2>(j, v) - page_lo;
      fill[u] = left < v.page_size ? left : v.page_size;
    }
  }

  // Calls `f(u)` for each planned token u below t_end that is its new page's first: the
  // tokens that open (and, undoing, close) the call's pages.
  template <uint32_t STRIDE, typename F>
  __device__ __forceinline__ void each_page_opener(uint32_t first, uint32_t t_end, uint32_t me,
                                                   F f) const {
#pragma unroll
    for (uint32_t u = 0; u < PER; ++u) {
      const uint32_t t = first + me + u * STRIDE;
      if (t >= t_end) break;
      if (rank[u] != NO_RANK && base[u] == 0) f(u);
    }
  }

  // A new page's first token (u), the call taking effect: the page becomes allocated
  // (`allocated`, the call's page word) and gets its fill point.
  __device__ __forceinline__ void open_page(const View &v, const Call &call, uint32_t allocated,
                                            uint32_t page, uint32_t u) const {
    v.state[page] = allocated;
    if (v.page_size > 1) v.fill[page] = fill_word(call.tag, fill[u]);
  }

  // After the verdict, the call taking effect: each planned token below t_end gets its slot
  // from the staged `pages`; a new page's first token makes the page allocated and sets its
  // fill point.
  template <uint32_t STRIDE, typename Index>
  __device__ __forceinline__ void write(const uint32_t *pages, const View &v, const Call &call,
                                        uint32_t first, uint32_t t_end, uint32_t me,
                                        Index *out) const {
    const uint32_t allocated = page_word(KIND_ALLOCATED, call.tag);
#pragma unroll
    for (uint32_t u = 0; u < PER; ++u) {
      const uint32_t t = first + me + u * STRIDE;
      if (t >= t_end) break;
      long long slot = base[u];
      if (rank[u] != NO_RANK) {
        const uint32_t page = pages[rank[u]];
        slot += (long long)page * v.page_size;
        if (base[u] == 0) open_page(v, call, allocated, page, u);
      }
      out[t] = (Index)slot;
    }
  }

  // Before the verdict (extend_few's one block): the slots into the caller's `out`, from the
  // staged `pages`; PAGES (two warps): the new pages' words too (allocated, their fill
  // points), so that a call that takes effect has nothing left to write once decided.
  // Otherwise the pool's own words wait for the verdict (`write_pages`). A call that fails
  // overwrites the slots with the padding slot and gives early pages back (`undo_pages`); a
  // page this call takes was free, and the deciding warp, which may read its word either
  // way, names it unallocated either way (free, or allocated by this very call).
  template <uint32_t STRIDE, bool PAGES, typename Index>
  __device__ __forceinline__ void store_slots(const uint32_t *pages, const View &v,
                                              const Call &call, uint32_t first, uint32_t t_end,
                                              uint32_t me, Index *out) const {
    // (Every page read before any slot is stored: one shared-memory latency, not PER.)
    uint32_t page[PER];
#pragma unroll
    for (uint32_t u = 0; u < PER; ++u)
      page[u] = rank[u] != NO_RANK && first + me + u * STRIDE < t_end ? pages[rank[u]] : 0;
#pragma unroll
    for (uint32_t u = 0; u < PER; ++u) {
      const uint32_t t = first + me + u * STRIDE;
      if (t >= t_end) break;
      out[t] = (Index)(base[u] + (long long)page[u] * v.page_size);
    }
    if constexpr (PAGES) {
      const uint32_t allocated = page_word(KIND_ALLOCATED, call.tag);
      each_page_opener<STRIDE>(first, t_end, me,
                               [&](uint32_t u) { open_page(v, call, allocated, page[u], u); });
    }
  }

  // After the verdict, the call taking effect, once `store_slots` has run without PAGES: a
  // new page's first token makes the page allocated and sets its fill point.
  template <uint32_t STRIDE>
  __device__ __forceinline__ void write_pages(const uint32_t *pages, const View &v,
                                              const Call &call, uint32_t first, uint32_t t_end,
                                              uint32_t me) const {
    const uint32_t allocated = page_word(KIND_ALLOCATED, call.tag);
    each_page_opener<STRIDE>(first, t_end, me, [&](uint32_t u) {
      open_page(v, call, allocated, pages[rank[u]], u);
    });
  }

  // The call failing after `store_slots` with PAGES: the pages it opened are free again (as
  // the ticketed kernel's undo leaves them: untagged, their fill words unused while free).
  template <uint32_t STRIDE>
  __device__ __forceinline__ void undo_pages(const uint32_t *pages, const View &v,
                                             uint32_t first, uint32_t t_end,
                                             uint32_t me) const {
    each_page_opener<STRIDE>(first, t_end, me, [&](uint32_t u) {
      v.state[pages[rank[u]]] = page_word(KIND_FREE, 0);
    });
  }
};

// Whether write_slots may count in 32 bits: every token and page offset of the plan, and a
// thread's last token position plus the block's width, fit.
__device__ __forceinline__ bool narrow_offsets(unsigned long long total_tokens,
                                               unsigned long long total_pages) {
  return total_tokens < (1ull << 31) && total_pages < (1ull << 31);
}

// The request of a thread's second token (BLOCK past its first), where the block found it
// without a search (one or two warps by row: TokenOwners); `first` is then its first
// token's.
struct SecondToken {
  bool known;
  uint32_t q;
};

// The slots of this block's tokens [t_begin, t_end) (after the verdict, the call taking
// effect), from the offsets the deciding threads published in `sh` (`tok_off` with the
// total after the last request, `part1`, `page_off`, `last`, and the staged `pages` of
// ranks from `page_lo`; `first`, the request holding token t_begin, where each thread's
// search for its requests starts, or with `second` known this thread's first token's): the
// first token of a new page sets its fill point (GRID: and makes the page allocated, the
// block writing that token). ROWS: each slot also goes into the request's row
// (`sh.table_at_`), and to `out` only when it is not NULL. Off: the width of token and page
// offsets, 32 bits only where `narrow_offsets` holds.
template <int BLOCK, typename Off, bool GRID, bool POW2, bool ROWS, typename Shared,
          typename Index>
__device__ __forceinline__ void write_slots(const Shared &sh, const View &v, const Call &call,
                                            const Cursor &c, uint32_t batch, bool staged,
                                            unsigned long long page_lo, uint32_t first,
                                            unsigned long long t_begin,
                                            unsigned long long t_end, Index *out,
                                            const TableArgs &tab,
                                            SecondToken second = {false, 0}) {
  const bool tracked = v.page_size > 1;
  const uint32_t n = v.num_pages;
  // The request's offsets are read once per request (a thread's tokens are BLOCK apart, so
  // most threads stay within one request).
  uint32_t q = first;
  Off q_tok = (Off)sh.tok_off[q], q_end = (Off)sh.tok_off[q + 1], q_part1 = (Off)sh.part1[q];
  Off q_page = (Off)sh.page_off[q];
  long long q_last = sh.last[q];
  for (Off t = (Off)t_begin + (Off)threadIdx.x; t < (Off)t_end; t += BLOCK) {
    if (t >= q_end) {
      q = second.known && t - (Off)t_begin < (Off)(2 * BLOCK) ? second.q
                                                              : request_of(sh.tok_off, batch, q, t);
      q_tok = (Off)sh.tok_off[q];
      q_end = (Off)sh.tok_off[q + 1];
      q_part1 = (Off)sh.part1[q];
      q_page = (Off)sh.page_off[q];
      q_last = sh.last[q];
    }
    const Off k = t - q_tok;
    Index slot;
    if (k < q_part1) {
      slot = (Index)(q_last + 1 + (long long)k);
    } else {
      const Off j = k - q_part1;
      const Off rank = q_page + div_page<POW2>(j, v);
      const uint32_t page =
          staged ? sh.pages[rank - (Off)page_lo] : v.ring[ring_pos(c.head, rank, n)];
      const Off pos = mod_page<POW2>(j, v);
      if (pos == 0) {
        if (GRID) v.state[page] = page_word(KIND_ALLOCATED, call.tag);
        if (tracked) {
          const Off left = q_end - q_tok - q_part1 - j;
          v.fill[page] = fill_word(call.tag, left < v.page_size ? left : v.page_size);
        }
      }
      slot = (Index)((unsigned long long)page * v.page_size + pos);
    }
    if (!ROWS || out != nullptr) out[t] = slot;
    if constexpr (ROWS) table_put(tab.table, tab.wide, sh.table_at_[q] + k, (long long)slot);
  }
}

// write_slots in 32 bits where the plan allows, else in 64. NARROW: whether the kernel has
// the 32-bit copy at all (extend_few's several-block kernel is faster without it: run s15-1,
// 1.01x the time with it at 8-32 requests, where extend_block's gained 0.95-0.99x).
template <int BLOCK, bool NARROW, bool GRID, bool POW2, bool ROWS, typename Shared,
          typename Index>
__device__ __forceinline__ void write_call_slots(const Shared &sh, const View &v,
                                                 const Call &call, const Cursor &c,
                                                 uint32_t batch, bool staged,
                                                 unsigned long long page_lo, uint32_t first,
                                                 unsigned long long t_begin,
                                                 unsigned long long t_end,
                                                 unsigned long long total_tokens,
                                                 unsigned long long total_pages, Index *out,
                                                 const TableArgs &tab,
                                                 SecondToken second = {false, 0}) {
  if (NARROW && narrow_offsets(total_tokens, total_pages))
    write_slots<BLOCK, uint32_t, GRID, POW2, ROWS>(sh, v, call, c, batch, staged, page_lo,
                                                   first, t_begin, t_end, out, tab, second);
  else
    write_slots<BLOCK, unsigned long long, GRID, POW2, ROWS>(sh, v, call, c, batch, staged,
                                                             page_lo, first, t_begin, t_end,
                                                             out, tab, second);
}

}  // namespace kvp
