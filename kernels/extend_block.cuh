// alloc_extend of a small batch (at most BLOCK * PER requests): the calls engines make most
// after decode steps (a prefill of a few requests; decodes of up to 1,024 requests run on
// decode_block.cuh's kernels, up to 4,096 on decode_cluster.cuh's, larger ones on the
// ticketed kernel; extends of 257-1,024 requests on several blocks of 512 or 1,024 threads,
// see extend_blocks_wide). Included by pool.cu after
// `extend`, whose helpers it shares.
//
// PER requests per thread. Unlike the ticketed multi-block kernel, nothing changes before the
// verdict: the block validates every request against the plan, one barrier makes the verdict
// known to all threads, and only then does the call either take effect (page words, fill
// points, outputs, cursor) or write zeros and fault. So there is no grid ticket, no undo pass
// and no fill_prev; two requests that continue one page are found in a shared-memory table
// rather than with global claims. The dependent global round trips are: the cursor and
// lengths; the prefix pages' words (in flight during the scan) and the ring's new pages; the
// writes.
//
// GRID, several blocks (a long extend of a small batch): every block decides the whole
// call, from the same inputs, so all reach the same verdict without talking to each other;
// each then writes only its share of the tokens (a contiguous range), and block 0 alone
// commits the cursor or faults. Deciding reads nothing another block writes in a call that
// fails (nothing is written then), and in a call that takes effect the only such word is a
// continued page's fill point, which a slower block may find already advanced by this call:
// it recognizes the advance (see `advanced_by_call`) instead of calling it a second
// continuation.

namespace kvp {

// Two requests of the batch must not continue one page. Each continuing request enters its
// page in a shared-memory hash table whose entries keep (page << 32 | smallest request + 1)
// (the same page, so atomicMin keeps the smallest request); after a barrier every request but
// the smallest of its page is a repeat, and the verdict's smallest position names the second
// one in batch order, as the host backend does.
template <int CAP>
struct PageTable {
  static constexpr uint32_t SIZE = 2 * CAP;  // at most half full
  unsigned long long entry[SIZE];

  // Empties the table, the block's BLOCK threads together (a barrier must follow).
  template <int BLOCK>
  __device__ void clear() {
    for (uint32_t e = threadIdx.x; e < SIZE; e += BLOCK) entry[e] = 0;
  }

  // Where a request entered its page, and whether the page was there already (`met`:
  // entered earlier in time, not necessarily in batch order).
  struct Entry {
    uint32_t pos;
    bool met;
  };

  // Enters `page` for request `r`; returns the entry's position.
  __device__ uint32_t enter(uint32_t page, uint32_t r) { return enter_meeting(page, r).pos; }

  // The same, and whether this entrant met an earlier one of its page: of two entrants of
  // one page the later meets the earlier, so a block in which nobody met anybody has no
  // repeat, and needs no lookup to know it.
  __device__ __forceinline__ Entry enter_meeting(uint32_t page, uint32_t r) {
    const unsigned long long key = ((unsigned long long)page << 32) | (r + 1u);
    uint32_t pos = (page * 2654435761u) & (SIZE - 1);
    for (;;) {
      const unsigned long long old = atomicCAS(&entry[pos], 0ull, key);
      if (old == 0) return Entry{pos, false};
      if ((uint32_t)(old >> 32) == page) {
        atomicMin(&entry[pos], key);
        return Entry{pos, true};
      }
      pos = (pos + 1) & (SIZE - 1);
    }
  }

  // After a barrier: whether request `r` is the first of its page.
  __device__ bool first_of(uint32_t pos, uint32_t r) const {
    return (uint32_t)entry[pos] == r + 1u;
  }

  // After a barrier: the first request that entered `page`, or -1.
  __device__ int find(uint32_t page) const {
    for (uint32_t pos = (page * 2654435761u) & (SIZE - 1);; pos = (pos + 1) & (SIZE - 1)) {
      const unsigned long long e = entry[pos];
      if (e == 0) return -1;
      if ((uint32_t)(e >> 32) == page) return (int)(uint32_t)e - 1;
    }
  }
};

// Several blocks: whether a fill word tagged by this very call, found on request `i`'s prefix
// page, is the advance this call makes (by another block that has already decided the call
// valid): the page's continuing request (the first in the table, or `i` itself) starts at
// the same last_loc and the word holds exactly where it ends. Anything else is what one block
// would call it: a second continuation, or a replayed capture's stale one.
template <bool POW2, int CAP>
__device__ bool advanced_by_call(const PageTable<CAP> &claims, uint32_t page, long long ll,
                                 unsigned long long own_part1, unsigned long long filled,
                                 const unsigned long long *part1, const long long *last,
                                 uint32_t batch, const View &v) {
  const unsigned long long start = mod_ps<POW2>((unsigned long long)ll, v) + 1;
  if (own_part1 > 0) return fill_of(filled) == start + own_part1;
  const int q = batch > 1 ? claims.find(page) : -1;
  return q >= 0 && last[q] == ll && fill_of(filled) == start + part1[q];
}

// Several blocks: the request holding a block's first token, as its finder publishes it
// with the stage bounds (`whole`: the block's tokens all lie in it), so that no thread
// reads its offsets by a load that depends on another (plan_block_tokens).
struct FirstRequest {
  bool whole;
  uint32_t tok, len, part1, page;  // its first token, tokens, part 1, first new page's rank
  long long last;                  // its last_loc
};

// Where a block's requests start among its SPAN token positions, written by the threads
// that own the requests (one write of each kind a request, no loop), so that a block of many
// short requests finds each token's request without a search (OwnerLookup): `starts[w]`, bit
// b set where a non-empty request starts at position 32 w + b (several blocks: past position
// 0, whose request is the block's `first`; one block: position 0 too, since request 0 may be
// empty); `start[p]`, that request (read only where its bit is set, so never cleared);
// `last[w]`, the last request starting in positions 32 w .. 32 w + 31, else 0.
template <uint32_t SPAN>
struct TokenOwners {
  static constexpr uint32_t WARPS = SPAN / 32;
  uint32_t starts[WARPS];
  uint32_t last[WARPS];
  uint16_t start[SPAN];

  // Request i starts at position pos (by the thread that owns it; published by a barrier).
  __device__ __forceinline__ void mark(uint32_t pos, uint32_t i) {
    start[pos] = (uint16_t)i;
    atomicOr(&starts[pos / 32], 1u << (pos % 32));
    atomicMax(&last[pos / 32], i);
  }
};

// The request holding the token at position p of the block's span: the last that starts at
// or before it within its warp's positions (their bits), else the last that starts before
// them (a warp-wide maximum over the earlier warps' `last`: request numbers grow with
// position), else `first`. `at` is asked by every lane of the warp, for positions of one
// warp's word (p / 32 the same in every lane); `request` by the lanes that use the answer.
template <uint32_t SPAN>
struct OwnerLookup {
  struct Near {
    uint32_t w;       // the position's word
    unsigned below;   // the starts at or below it in its word
    uint32_t before;  // the last request starting before the word, else 0
  };
  const TokenOwners<SPAN> &owners;
  const uint32_t lane = threadIdx.x % 32;
  const unsigned at_or_below = 0xffffffffu >> (31 - lane);
  const uint32_t last_of_lane = lane < owners.WARPS ? owners.last[lane] : 0;

  __device__ __forceinline__ Near at(uint32_t p) const {
    const uint32_t w = p / 32;
    return Near{w, owners.starts[w] & at_or_below,
                __reduce_max_sync(0xffffffffu, lane < w ? last_of_lane : 0)};
  }
  __device__ __forceinline__ uint32_t request(const Near &n, uint32_t first) const {
    return n.below ? (uint32_t)owners.start[n.w * 32 + 31 - __clz((int)n.below)]
                   : max(n.before, first);
  }
};

// extend_block's shared memory: a struct, so that the body's two instantiations (page sizes
// that are powers of two, and others) share one allocation.
template <int BLOCK, int PER, bool ROWS>
struct ExtendShared {
  static constexpr int CAP = BLOCK * PER;  // requests of the block
  static constexpr int ROW_CAP = ROWS ? CAP : 1;
  unsigned long long tok_off[CAP + 1];
  unsigned long long page_off[CAP];
  unsigned long long part1[CAP];
  long long last[CAP];
  unsigned long long errors;
  PageTable<CAP> claims;
  uint32_t pages[STAGE_CAP];
  // ROWS: each request's first new table entry, and the rows seen (repeats).
  unsigned long long table_at_[ROW_CAP];
  PageTable<ROW_CAP> row_claims;
  // Several blocks: the ring ranks of the new pages this block's tokens use, [lo, hi), and
  // the request holding its first token.
  unsigned long long stage_lo, stage_hi;
  uint32_t stage_first;
  // Each thread's input to the scan, passed through shared memory (see after_loads).
  unsigned long long scan_in[BLOCK][2];
};

// Returns `x`, but only after every global load issued above: a warp barrier orders memory
// accesses, and `x` goes through shared memory after it. The scan that takes `x` runs while
// those loads are in flight; otherwise ptxas schedules its shuffles first and the loads
// after them (a round trip later).
__device__ __forceinline__ Pair after_loads(Pair x, unsigned long long (*slot)[2]) {
  __syncwarp();
  volatile unsigned long long *s = *slot;
  s[0] = x.a;
  s[1] = x.b;
  return Pair{s[0], s[1]};
}

// This thread's tokens of [t_begin, t_end), all in one request (its first token `tok`, `len`
// tokens, `part1` of them into the prefix's page after `last`, new pages from rank `page`).
template <uint32_t PER, int BLOCK, bool POW2>
__device__ __forceinline__ void plan_within_request(OwnTokens<PER> &own, const View &v,
                                                    uint32_t t_begin, uint32_t t_end,
                                                    uint32_t page_lo, uint32_t tok, uint32_t len,
                                                    uint32_t part1, uint32_t page,
                                                    long long last) {
#pragma unroll
  for (uint32_t u = 0; u < PER; ++u) {
    const uint32_t t = t_begin + threadIdx.x + u * BLOCK;
    if (t >= t_end) break;
    own.template place<POW2>(u, t - tok, part1, len, page, last, page_lo, v);
  }
}

// This thread's token u (token t) of request q, from the offsets the block published in `sh`.
template <bool POW2, uint32_t PER, typename Shared>
__device__ __forceinline__ void plan_in_request(OwnTokens<PER> &own, const Shared &sh,
                                                const View &v, uint32_t u, uint32_t t, uint32_t q,
                                                uint32_t page_lo) {
  const uint32_t tok = (uint32_t)sh.tok_off[q];
  own.template place<POW2>(u, t - tok, (uint32_t)sh.part1[q], (uint32_t)sh.tok_off[q + 1] - tok,
                           (uint32_t)sh.page_off[q], sh.last[q], page_lo, v);
}

// This thread's tokens of the block's range [t_begin, t_end) planned (see OwnTokens) from
// the offsets the block published in `sh`.
// GRID (several blocks): a block whose tokens all lie in the request holding its first
// token (`first`; the blocks of a long request's tokens) plans them without a search, the
// request's offsets read once. Run s51-6 (H100): 33-1,024 requests of 512 tokens
// 0.96-1.00x the time; blocks of many short requests pay the check, 33-256 requests of 16
// tokens 1.01x. PUBLISHED (blocks of up to 256 threads): the check and the offsets come as
// `fr`, published with the stage bounds, so no load waits for `first`: 33-256 requests of
// 512 tokens 0.98-0.99x and of 16 tokens 0.99-1.00x 4a4b301's time (runs s52-2, s52-3,
// H200).
// OWNED (one block or several of up to 256 threads): each token's request comes from where
// the block's requests start (`owners`, TokenOwners: a start bit below the token in its
// warp, else a warp-wide maximum), not from a search. Several blocks: 33-256 requests of 16
// tokens 0.94-0.95x, of 64 tokens 0.99-1.00x, of 512 tokens 1.00-1.01x (run s52-6, H100;
// with the galloping search a block of 16-token requests planned its tokens ~1,850 cycles
// after the stage-bound barrier, a block within one request ~470: run s52-3's anatomy,
// H200). One block (its tokens are the call's, never all in its first request): 65-256
// requests of 1-2 tokens 0.86-0.91x, the controls (33 and 256 requests of 16 tokens, page
// 16) 1.00x (run s53-1, H100). Else (the wide several blocks) each token's request is
// searched on from `first`: dependent shared loads, token after token. (Per token, the
// tokens of the first request without a search, run s51-5: 512 tokens 0.97-1.00x, 16
// tokens 1.01-1.02x.)
template <uint32_t PER, int BLOCK, bool POW2, bool GRID, bool PUBLISHED, bool OWNED,
          typename Shared, uint32_t SPAN>
__device__ __forceinline__ OwnTokens<PER> plan_block_tokens(const Shared &sh, const View &v,
                                                            uint32_t batch, uint32_t first,
                                                            const FirstRequest &fr,
                                                            const TokenOwners<SPAN> &owners,
                                                            uint32_t t_begin, uint32_t t_end,
                                                            uint32_t page_lo) {
  OwnTokens<PER> own;
  if constexpr (GRID && PUBLISHED) {
    if (fr.whole) {  // (uniform: the block's)
      plan_within_request<PER, BLOCK, POW2>(own, v, t_begin, t_end, page_lo, fr.tok, fr.len,
                                            fr.part1, fr.page, fr.last);
      return own;
    }
  } else if constexpr (GRID) {
    const uint32_t f_end = (uint32_t)sh.tok_off[first + 1];
    if (f_end >= t_end) {  // (uniform: the block's)
      const uint32_t f_tok = (uint32_t)sh.tok_off[first];
      plan_within_request<PER, BLOCK, POW2>(own, v, t_begin, t_end, page_lo, f_tok, f_end - f_tok,
                                            (uint32_t)sh.part1[first],
                                            (uint32_t)sh.page_off[first], sh.last[first]);
      return own;
    }
  }
  if constexpr (OWNED) {
    const OwnerLookup<SPAN> owner{owners};
#pragma unroll
    for (uint32_t u = 0; u < PER; ++u) {
      const uint32_t p = threadIdx.x + u * BLOCK, t = t_begin + p;
      const auto near = owner.at(p);
      if (t < t_end) plan_in_request<POW2>(own, sh, v, u, t, owner.request(near, first), page_lo);
    }
    return own;
  }
  uint32_t q = first;
#pragma unroll
  for (uint32_t u = 0; u < PER; ++u) {
    const uint32_t t = t_begin + threadIdx.x + u * BLOCK;
    if (t >= t_end) break;
    q = request_of(sh.tok_off, batch, q, t);
    plan_in_request<POW2>(own, sh, v, u, t, q, page_lo);
  }
  return own;
}

// ROWS: an allocation by request row (alloc_extend_rows / alloc_decode_rows) in this one
// kernel: `tab.rows` checked (in the table, each row once: a second shared table; seq within
// row_len), last_loc read from the table (`last_loc` unused), the slots written into the rows
// after the verdict, and to `out` only when it is not NULL. A failing call writes nothing to
// the table. POW2: the page size is a power of two (see extend_kernel).
// ONE (kvp_extend_one_*_rows_*): the host sends exactly one request; `batch` is the
// constant 1 (as extend_few's MAXB 1). SHORT (kvp_extend_block_short_rows_*): one block by
// row that the host sends only 33-256 requests of up to 256 tokens (short requests).
template <int BLOCK, int PER, typename Index, bool ROWS, bool GRID, bool POW2, bool ONE = false,
          bool SHORT = false>
__device__ __forceinline__ void extend_block(ExtendShared<BLOCK, PER, ROWS> &sh, View v,
                                             Call call, const long long *prefix_lens,
                                             const long long *seq_lens, const Index *last_loc,
                                             uint32_t batch,
                                             unsigned long long total_tokens,
                                             unsigned long long total_pages, Index *out,
                                             TableArgs tab) {
  if constexpr (ONE) batch = 1;
  // Several blocks of up to 256 threads publish their first request's offsets with the
  // stage bounds (FirstRequest). Not the wide blocks (512-1,024 threads at 64 registers,
  // which spill): there it took 1.01-1.06x the time at 1,024 requests (run s52-1, H100).
  // (A variable of its own, not a member of ExtendShared, so that the other kernels'
  // shared memory keeps its layout.)
  constexpr bool PUBLISH_FIRST = GRID && !ROWS && BLOCK <= 256;
  __shared__ FirstRequest first_shared;  // (PUBLISH_FIRST only: else unused)
  // Whether the block plans its tokens before the verdict, and how many a thread (see
  // `planned` below).
  constexpr bool PLANS = !ROWS;
  constexpr uint32_t PLAN_PER = !PLANS ? 1 : GRID ? (SPAN_TOKENS + BLOCK - 1) / BLOCK : 2;
  // The same blocks, and one block of up to 256 threads, publish their tokens' requests for
  // the planning (TokenOwners), over the positions a block plans; by row, one or two warps
  // (2-64 requests of up to 64 tokens, more than one) for their writes, over up to two
  // tokens a thread: 0.84-0.96x the time at 4-64 short requests (run s53-3, H100); and
  // SHORT, 256 threads for 33-256 requests of up to 256 tokens, a kernel of its own:
  // 0.90-0.93x at 65-256 requests of 1-2 tokens (run s53-4, H100). Not the other 256-thread
  // kernel by row, which takes extend_few's shapes (2-32 requests of 65-512 tokens): there
  // the same code cost 1.03-1.04x even with the lookup gated off (the kernel spills more
  // at 64 registers; run s53-3).
  constexpr bool ROW_OWNERS = ROWS && !GRID && !ONE && (BLOCK <= 64 || SHORT);
  constexpr bool OWNERS = (PLANS && BLOCK <= 256) || ROW_OWNERS;
  constexpr uint32_t OWNER_SPAN = (PLANS ? PLAN_PER : 2) * BLOCK;
  static_assert(!OWNERS || BLOCK * PER <= 0x10000);
  __shared__ TokenOwners<OWNER_SPAN> owners;  // (OWNERS only: else unused)
  auto &tok_off = sh.tok_off;
  auto &page_off = sh.page_off;
  auto &part1 = sh.part1;
  auto &last = sh.last;
  auto &errors = sh.errors;
  auto &claims = sh.claims;
  auto &pages = sh.pages;
  auto &table_at_ = sh.table_at_;
  auto &row_claims = sh.row_claims;
  auto &stage_lo = sh.stage_lo;
  auto &stage_hi = sh.stage_hi;

  // Thread r owns requests r*PER .. r*PER + PER - 1 (consecutive: one scan over the threads'
  // totals orders them all).
  const uint32_t r = threadIdx.x;
  KVP_PROBE(0, 0);  // (probes: see pool.cu; anatomy.cu names the points)
  // Both published by the barrier in block_scan_plan.
  if (r == 0) errors = NO_ERROR;
  claims.template clear<BLOCK>();
  if (ROWS) row_claims.template clear<BLOCK>();

  Header *h = v.header;
  const Cursor c = h->cursor[call.in];
  const uint32_t n = v.num_pages;
  bool dead = dead_call(h->fault, c, call);  // GRID: voted on below
  bool short_ = !dead && c.free_len < total_pages;
  const bool tracked = v.page_size > 1;
  if constexpr (GRID) {
    if (r == 0) {  // published by the barrier in block_scan_plan
      stage_lo = stage_hi = 0;
      sh.stage_first = 0;
      if constexpr (PUBLISH_FIRST) first_shared.whole = false;
    }
  }
  if constexpr (OWNERS) {  // published by the barrier in block_scan_plan
    if (r < owners.WARPS) owners.starts[r] = owners.last[r] = 0;
  }

  // Round trip 1: this thread's requests. Every load is unconditional (a thread past the
  // batch reads the last request again and ignores it), so they are all in flight at once:
  // a load under a branch is issued only once the previous one's value has been used.
  long long prefix[PER], ll[PER];
  bool sane[PER];
  Shape s[PER];
  long long seq[PER], row[PER];
#pragma unroll
  for (int u = 0; u < PER; ++u) {
    const uint32_t i = min(r * PER + u, batch - 1);
    seq[u] = seq_lens[i];
    row[u] = ROWS ? tab.rows[i] : 0;
    if (!ROWS) ll[u] = (long long)last_loc[i];
    prefix[u] = prefix_lens[i];
  }
  // Left to itself, ptxas issues the loads of last_loc and the cursor after the scan below,
  // which waits for the lengths: a second round trip before the prefix pages' words. A warp
  // barrier (no instruction: the warp is converged) keeps every load above it.
  __syncwarp();
  // GRID: every block decides the call alone, and block 0 faults a bad one as soon as it has
  // decided, so a block starting just then could load the fault flag in some warps before
  // and in others after. They agree at the verdict's barrier (one vote, below): until then a
  // block writes only shared memory (its staged pages, offsets, claims and errors), all of
  // which a dead call ignores.
  // This block's tokens, worked out while the loads are in flight (GRID: a division).
  const TokenRange block_range = block_tokens<GRID>(total_tokens);
  const unsigned long long t_begin = block_range.begin, t_end = block_range.end;
  Pair own{0, 0};
#pragma unroll
  for (int u = 0; u < PER; ++u) {
    const bool valid = r * PER + u < batch;
    if (!valid) {
      prefix[u] = 0;
      ll[u] = -1;
    }
    sane[u] = !valid || lengths_sane(v, prefix[u], seq[u]);
    s[u] = valid && sane[u] ? shape_of<POW2>((unsigned long long)prefix[u], (unsigned long long)seq[u], v)
                            : Shape{0, 0, 0};
    own.a += s[u].tokens;
    own.b += s[u].new_pages;
  }
  // ROWS: the rows' checks, then last_loc from the table (a dependent load, issued for every
  // request at once; a request with an unusable row or lengths reads nothing and is refused).
  uint32_t row_err[PER];
#pragma unroll
  for (int u = 0; u < PER; ++u) {
    row_err[u] = ERR_NONE;
    if (!ROWS) continue;
    const bool valid = r * PER + u < batch;
    if (valid && (row[u] < 0 || (unsigned long long)row[u] >= tab.rows_in_table)) row_err[u] = ERR_ROW;
    else if (valid && seq[u] > 0 && (unsigned long long)seq[u] > tab.row_len) row_err[u] = ERR_ROW_LEN;
    const bool read = valid && row_err[u] == ERR_NONE && sane[u] && prefix[u] > 0;
    ll[u] = read ? table_entry<Index>(table_at(
                       tab.table, tab.wide, (unsigned long long)row[u] * tab.stride + prefix[u] - 1))
                 : -1;
  }
  // Round trip 2, first part: the prefix pages' words, issued unconditionally (page 0 stands
  // in for a request with nothing to check) before the scan, so that the scan and its
  // barrier run while they are in flight.
  uint32_t err[PER], prefix_page[PER], word[PER];
  unsigned long long filled[PER];
  bool check[PER];
#pragma unroll
  for (int u = 0; u < PER; ++u) {
    const uint32_t i = r * PER + u;
    err[u] = ERR_NONE;
    check[u] = i < batch && !dead && sane[u] && prefix[u] > 0 && row_err[u] == ERR_NONE;
    if (i < batch && !dead && sane[u] && prefix[u] == 0 && ll[u] != -1) err[u] = ERR_LAST_LOC_EMPTY;
    if (check[u]) err[u] = slot_error(ll[u], v);
    prefix_page[u] = check[u] && err[u] == ERR_NONE ? (uint32_t)div_ps<POW2>((unsigned long long)ll[u], v) : 0;
  }
  // One block, not by row: the ring's first new pages (a one-block call's new pages are
  // ranks 0..new_pages; at most the plan's), from the cursor alone, with the words, where the
  // planned path loaded them after the scan (as extend_few's EarlyRing since the eighteenth
  // session; loads past the call's pages are left unused).
  constexpr bool EARLY_RING = !GRID && !ROWS;
  EarlyRing<4, BLOCK> early;
  if constexpr (EARLY_RING)
    early.load(v, c.head, (uint32_t)min(total_pages, (unsigned long long)n), r);
#pragma unroll
  for (int u = 0; u < PER; ++u) {
    word[u] = v.state[prefix_page[u]];
    filled[u] = tracked ? v.fill[prefix_page[u]] : 0;
  }
  own = after_loads(own, &sh.scan_in[r]);
  Pair total;
  Pair rank = block_scan_plan<BLOCK>(own, total_tokens, total_pages, &total);
  const unsigned long long tokens = total.a, new_pages = total.b;
  KVP_PROBE(1, tokens + new_pages);
  Pair at[PER];  // each request's offsets
#pragma unroll
  for (int u = 0; u < PER; ++u) {
    const uint32_t i = r * PER + u;
    at[u] = rank;
    if (i < batch) {
      tok_off[i] = rank.a;
      page_off[i] = rank.b;
      part1[i] = s[u].part1;
      last[i] = ll[u];
      if (ROWS && row_err[u] == ERR_NONE)
        table_at_[i] = (unsigned long long)row[u] * tab.stride + (unsigned long long)prefix[u];
    }
    rank.a += s[u].tokens;
    rank.b += s[u].new_pages;
  }
  if (r == 0) tok_off[batch] = tokens;

  // The plan bounds everything: the call takes effect only if the device lengths give exactly
  // the host's totals (checked below), so writes never pass out[total_tokens) and no page
  // beyond the planned run of the ring is taken.
  const bool live = !dead && !short_ && tokens <= total_tokens && new_pages <= total_pages;

  // Round trip 2, second part: the new pages from the ring (of several blocks, those of the
  // block's tokens: found by the requests holding its first and last token, which a barrier
  // publishes while the words are in flight).
  unsigned long long page_lo = 0, page_hi = new_pages;
  uint32_t first = 0;  // the request holding token t_begin (when live)
  FirstRequest first_request{false, 0, 0, 0, 0, 0};  // (PUBLISH_FIRST: with the bounds)
  if constexpr (GRID) {
#pragma unroll
    for (int u = 0; u < PER; ++u) {
      // The new page of request token `k` (the request's first new page for part 1).
      auto page_at = [&](unsigned long long k) {
        return at[u].b + (k < s[u].part1 ? 0 : div_ps<POW2>(k - s[u].part1, v));
      };
      const unsigned long long a = at[u].a, end = a + s[u].tokens;
      if (live && a <= t_begin && t_begin < end) {
        stage_lo = page_at(t_begin - a);
        sh.stage_first = r * PER + u;
        if constexpr (PUBLISH_FIRST)
          first_shared = FirstRequest{end >= t_end, (uint32_t)a, (uint32_t)s[u].tokens,
                                      (uint32_t)s[u].part1, (uint32_t)at[u].b, ll[u]};
      }
      if (live && a < t_end && t_end <= end)
        stage_hi = page_at(t_end - 1 - a) + (t_end - 1 - a < s[u].part1 ? 0 : 1);
      // Where the block's requests start (non-empty ones only: an empty one shares its
      // position with the next), after its first token: the request starting there is
      // `first`, which the lookup falls back to (so a block within one request writes
      // nothing: with it, 512-token requests took 1.03-1.04x the time, run s52-5).
      if (PUBLISH_FIRST && live && a < end && t_begin < a && a < t_end &&
          t_end - t_begin <= OWNER_SPAN) {
        owners.mark((uint32_t)(a - t_begin), r * PER + u);
      }
    }
    __syncthreads();
    page_lo = stage_lo;
    page_hi = max(stage_lo, stage_hi);
    first = sh.stage_first;
    if constexpr (PUBLISH_FIRST) first_request = first_shared;
    KVP_PROBE(6, page_lo + page_hi + first);  // the stage-bound barrier passed
  } else if constexpr (OWNERS) {
    // One block: where its requests start, position 0 included (`first` is request 0,
    // which may be empty); published by the planning's barrier below (by row: the
    // verdict's).
#pragma unroll
    for (int u = 0; u < PER; ++u) {
      const unsigned long long a = at[u].a, end = a + s[u].tokens;
      if (live && a < end && a < t_end && t_end <= OWNER_SPAN) {
        owners.mark((uint32_t)a, r * PER + u);
      }
    }
  }
  const bool staged = page_hi - page_lo <= STAGE_CAP;
  // Within the host's tokens for a block (one block: at most 2 a thread, BLOCK_TOKENS or
  // BLOCK64_TOKENS in src/cuda/pool.rs; several: SPAN_TOKENS each), in 32 bits, not by rows:
  // every thread plans its tokens while the block's new pages are in flight (see OwnTokens).
  // One block publishes the requests' offsets by a barrier of its own (several: the one
  // above). Run s20-4: 33-64 requests of 4-16 tokens 0.62-0.88x the time (with the host's
  // cap of two tokens a thread), several blocks 0.96-1.02x. (PLANS, PLAN_PER: at the top.)
  const bool planned = PLANS && live && staged && t_end - t_begin <= PLAN_PER * BLOCK &&
                       narrow_offsets(total_tokens, total_pages);
  OwnTokens<PLAN_PER> mine;
  if (planned) {  // (uniform: totals, cursor and fault are the block's)
    // Four loads in flight per thread before any is used (as stage_pages); one block's
    // loaded with the words (EARLY_RING).
    const uint32_t count = (uint32_t)(page_hi - page_lo);
    if constexpr (!EARLY_RING) early.load(v, ring_pos(c.head, page_lo, n), min(count, n), r);
    // (Several blocks: a warp barrier, no instruction, keeps the loads ahead of the
    // planning, as in extend_block's round trip 1.)
    if constexpr (GRID) __syncwarp();
    else __syncthreads();
    mine = plan_block_tokens<PLAN_PER, BLOCK, POW2, GRID, PUBLISH_FIRST, OWNERS>(
        sh, v, batch, first, first_request, owners, (uint32_t)t_begin, (uint32_t)t_end,
        (uint32_t)page_lo);
    KVP_PROBE(7, mine.base[0] + mine.rank[0] + mine.fill[0]);  // this thread's tokens planned
    early.stage(pages, v, c, page_lo, count, r);
  } else if (live && staged) {
    stage_pages<4, BLOCK>(pages, v, c, page_lo, page_hi, r);
  }
  KVP_PROBE(2, pages[r]);

  // The same rules as check_last_loc; a page another request of the call continues is found
  // through the table. (A fill word tagged by this very call is a replay of a captured call
  // whose previous run already moved the page on; of several blocks, possibly this call's
  // own advance, told apart once the table is complete.)
  int entry[PER], row_entry[PER];
  bool tagged[PER];
  bool any_entry = false;
#pragma unroll
  for (int u = 0; u < PER; ++u) {
    const uint32_t i = r * PER + u;
    entry[u] = -1;
    row_entry[u] = -1;
    tagged[u] = false;
    const unsigned long long in_page = mod_ps<POW2>((unsigned long long)ll[u], v);
    if (check[u] && err[u] == ERR_NONE) {
      tagged[u] = GRID && tracked && fill_tag(filled[u]) == call.tag;
      if (kind_of(word[u]) != KIND_ALLOCATED) {
        err[u] = unallocated_error(word[u]);
      } else if (tag_of(word[u]) == call.tag) {
        err[u] = ERR_NOT_ALLOCATED;
      } else if (mod_ps<POW2>((unsigned long long)ll[u] + 1, v) !=
                 mod_ps<POW2>((unsigned long long)prefix[u], v)) {
        err[u] = ERR_LAST_LOC;
      } else if (!GRID && tracked && fill_tag(filled[u]) == call.tag) {
        err[u] = ERR_SHARED_PAGE;
      } else if (tracked && !tagged[u] && fill_of(filled[u]) != in_page + 1) {
        err[u] = ERR_FILL;
      } else {
        if (GRID) any_entry |= tagged[u];
        if (s[u].part1 > 0 && batch > 1) {
          entry[u] = (int)claims.enter(prefix_page[u], i);
          any_entry = true;
        }
      }
      if (GRID && err[u] != ERR_NONE) tagged[u] = false;
    }
    if (err[u] != ERR_NONE) report(&errors, i, err[u]);
    if (row_err[u] != ERR_NONE) report(&errors, i, row_err[u]);
    if (ROWS && i < batch && row_err[u] == ERR_NONE && batch > 1) {
      row_entry[u] = (int)row_claims.enter((uint32_t)row[u], i);
      any_entry = true;
    }
    // Device lengths against the plan: an unusable request, else the first request that runs
    // past the plan, else (device totals short of it) the last request.
    // (A request whose row is refused is named for its row, as by the host backend.)
    if (i < batch && row_err[u] == ERR_NONE && (!sane[u] || at[u].a + s[u].tokens > total_tokens ||
                      at[u].b + s[u].new_pages > total_pages))
      report(&errors, i, ERR_LENGTHS);
  }
  if (r == 0 && (tokens < total_tokens || new_pages < total_pages))
    report(&errors, batch - 1, ERR_LENGTHS);

  // The verdict. Repeats of a page are known only once every request has entered its page.
  // GRID: the vote on the fault flag, in the same barriers: no warp saw a fault unless the
  // first one says so, and then the second counts them. (It had a barrier of its own after
  // round trip 1; here, runs s50-1 and s50-2, H100: 33-1,024 requests of 512 tokens
  // 0.97-0.99x the time.)
  bool voted_dead = false;
  if constexpr (GRID) any_entry |= dead;  // (then "any entry or fault")
  if (__syncthreads_or(any_entry)) {
#pragma unroll
    for (int u = 0; u < PER; ++u) {
      if (entry[u] >= 0 && !claims.first_of((uint32_t)entry[u], r * PER + u))
        report(&errors, r * PER + u, ERR_SHARED_PAGE);
      else if (GRID && tagged[u] && !advanced_by_call<POW2>(claims, prefix_page[u], ll[u], s[u].part1,
                                              filled[u], part1, last, batch, v))
        report(&errors, r * PER + u, ERR_SHARED_PAGE);
      if (ROWS && row_entry[u] >= 0 && !row_claims.first_of((uint32_t)row_entry[u], r * PER + u))
        report(&errors, r * PER + u, ERR_ROW_TWICE);
    }
    if constexpr (GRID) voted_dead = __syncthreads_or(dead);
    else __syncthreads();
  }
  bool agreed_live = live;
  if constexpr (GRID) {
    dead = voted_dead;
    short_ = !dead && c.free_len < total_pages;
    agreed_live = live && !dead;
  }
  const unsigned long long verdict = errors;
  KVP_PROBE(3, verdict);
  const bool failed = !dead && (short_ || verdict != NO_ERROR);

  if (agreed_live && !failed) {
    // Round trip 3: only writes (GRID: each by the block whose tokens it concerns). New
    // pages become allocated (GRID or planned: at their first token); continued pages move
    // their fill points; every token gets its slot, the first token of a new page setting
    // its fill point.
    if constexpr (!GRID) {
      for (uint32_t k = r; k < new_pages && !planned; k += BLOCK) {
        const uint32_t page = staged ? pages[k] : v.ring[ring_pos(c.head, k, n)];
        v.state[page] = page_word(KIND_ALLOCATED, call.tag);
      }
    }
#pragma unroll
    for (int u = 0; u < PER; ++u) {
      if (tracked && s[u].part1 > 0 && (!GRID || (t_begin <= at[u].a && at[u].a < t_end))) {
        const unsigned long long in_page = mod_ps<POW2>((unsigned long long)ll[u], v);
        v.fill[prefix_page[u]] = fill_word(call.tag, in_page + 1 + s[u].part1);
      }
    }
    // (A one-block call's t_end is the plan's total, which the device's equals here.)
    if (planned)
      mine.template write<BLOCK>(pages, v, call, (uint32_t)t_begin, (uint32_t)t_end, r, out);
    else {
      // By row, one or two warps and SHORT: each thread's first two tokens' requests
      // without a search (a second token only on one warp: up to 64 tokens; the others
      // take one token a thread).
      uint32_t from = first;
      SecondToken second{false, 0};
      if (ROW_OWNERS && t_end <= OWNER_SPAN) {  // (uniform: the plan's total)
        const OwnerLookup<OWNER_SPAN> owner{owners};
        const auto near = owner.at(r);
        from = owner.request(near, first);
        if constexpr (BLOCK == 32) {
          const auto near2 = owner.at(r + BLOCK);
          second = SecondToken{true, owner.request(near2, first)};
        }
      }
      write_call_slots<BLOCK, true, GRID, POW2, ROWS>(sh, v, call, c, batch, staged, page_lo,
                                                      from, t_begin, t_end, total_tokens,
                                                      total_pages, out, tab, second);
    }
    KVP_PROBE(4, 0);
  } else if (!ROWS || out != nullptr) {
    // Dead, short or failed: the plan's whole output is the padding slot.
    for (unsigned long long t = t_begin + r; t < t_end; t += BLOCK) out[t] = 0;
  }

  if (r == 0 && (!GRID || blockIdx.x == 0)) {
    const unsigned long long pos = verdict >> 8;
    const uint32_t code = (uint32_t)(verdict & 0xff);
    long long value = 0;
    // The value the fault names: the lengths, the row, or last_loc (as read).
    if (failed && !short_) {
      if (code == ERR_LENGTHS || code == ERR_ROW_LEN) value = seq_lens[pos];
      else if (code == ERR_ROW || code == ERR_ROW_TWICE) value = tab.rows[pos];
      else value = last[pos];
    }
    conclude_take(v, call, c, total_pages, dead, failed, short_, verdict, value);
  }
  KVP_PROBE(5, 0);
}

// The body is instantiated for both kinds of page size, so a power of two (the usual case)
// runs without a branch or a call per division.
template <int BLOCK, int PER, typename Index, bool ROWS, bool GRID, bool ONE = false,
          bool SHORT = false>
__device__ __forceinline__ void extend_on(ExtendShared<BLOCK, PER, ROWS> &sh, View v, Call call,
                                          const long long *prefix_lens,
                                          const long long *seq_lens, const Index *last_loc,
                                          uint32_t batch, unsigned long long total_tokens,
                                          unsigned long long total_pages, Index *out,
                                          TableArgs tab) {
  if (v.page_shift != NOT_POW2)
    extend_block<BLOCK, PER, Index, ROWS, GRID, true, ONE, SHORT>(
        sh, v, call, prefix_lens, seq_lens, last_loc, batch, total_tokens, total_pages, out,
        tab);
  else
    extend_block<BLOCK, PER, Index, ROWS, GRID, false, ONE, SHORT>(
        sh, v, call, prefix_lens, seq_lens, last_loc, batch, total_tokens, total_pages, out,
        tab);
}

template <int BLOCK, int PER, typename Index, bool ROWS = false, bool GRID = false,
          bool ONE = false, bool SHORT = false>
__device__ void extend_kernel(View v, Call call, const long long *prefix_lens,
                              const long long *seq_lens, const Index *last_loc, uint32_t batch,
                              unsigned long long total_tokens, unsigned long long total_pages,
                              Index *out, TableArgs tab = {}) {
  __shared__ ExtendShared<BLOCK, PER, ROWS> sh;
  extend_on<BLOCK, PER, Index, ROWS, GRID, ONE, SHORT>(sh, v, call, prefix_lens, seq_lens,
                                                       last_loc, batch, total_tokens,
                                                       total_pages, out, tab);
}

// Several blocks of BLOCK (512 or 1,024) threads, a request a thread, that each decide the
// call (kvp_extend_blocks{512,1024}_*: extends of 257-1,024 requests, where the ticketed
// kernel had served; about a block an SM). Their shared memory passes the 48 KB a kernel
// may declare, so it is the launch's dynamic shared memory: the host reads its size from
// kvp_extend_blocks_wide_shared (pool.cu) and allows it on the kernel when the module loads.
// PER 2 on 1,024 threads (kvp_extend_blocks2048_rows_*): 1,025-2,048 requests, by row only
// (plain, that shape took 1.00-1.09x the ticketed kernel's time, run s30-10, and is not
// built).
template <int BLOCK, typename Index, bool ROWS = false, int PER = 1>
__device__ void extend_blocks_wide(View v, Call call, const long long *prefix_lens,
                                   const long long *seq_lens, const Index *last_loc,
                                   uint32_t batch, unsigned long long total_tokens,
                                   unsigned long long total_pages, Index *out,
                                   TableArgs tab = {}) {
  extern __shared__ __align__(16) unsigned char wide_shared[];
  auto &sh = *reinterpret_cast<ExtendShared<BLOCK, PER, ROWS> *>(wide_shared);
  extend_on<BLOCK, PER, Index, ROWS, true>(sh, v, call, prefix_lens, seq_lens, last_loc, batch,
                                           total_tokens, total_pages, out, tab);
}

}  // namespace kvp
