// alloc_extend of up to 32 requests (a prefill of a few requests: the extend engines make
// most): one warp decides the call, the whole block writes it. Included by pool.cu after
// extend_block.cuh and decode_block.cuh, whose checks it makes in extend_block's order with
// the same verdict (the smallest position, then the smallest code).
//
// Why a kernel of its own: a small extend's time is the deciding warp's instructions
// (BENCHMARKS.md, tenth session: 577 a warp for one request on extend_block's 256 threads,
// about 7 cycles each, against 260 for a decode). With at most 32 requests, lane i of every
// warp holds request i: each warp scans tokens and new pages itself (a warp's work, cheaper
// than publishing it), the other warps stage the ring's new pages while warp 0 checks, two
// requests continuing one page are found with match_any and the verdict with a warp
// reduction: no shared table to clear, no atomics, no block scan, one barrier before the
// writes. The writers read a request's offsets from shared memory once per request, not
// once per token.
//
// Verified on an H200 (BENCHMARKS.md, eleventh session): every GPU test and both sanitizers
// pass; 1-32 requests 0.93-0.96x extend_block's time at page sizes 16 and 64. Fourteenth
// session: the offsets, ring positions and one-block writers in 32 bits, 0.89-0.95x again.
//
// One block (up to 512 tokens: two warps up to 64, four up to 256, else 256 threads; the
// fewer warps, the fewer loads and scans of the same requests): the writers store
// their slots into `out` before the verdict, while warp 0 decides (a barrier of their own
// orders the ring's staged pages first), and after it only the new pages' words, or the
// padding slot over their slots when the call fails. Twenty-second session (BENCHMARKS.md):
// 65-512 tokens 0.96-0.99x the time; up to 64 tokens on two warps instead of one warp doing
// everything, 0.91-0.94x. Twenty-third session: 65-256 tokens on four warps, 0.88-0.90x.
// Twenty-fourth: four warps and 256 threads plan their tokens while the ring's pages are in
// flight (0.93-0.98x); two warps write the new pages' words before the verdict too (undone
// if the call fails) and warp 0 concludes without a block barrier (0.94-0.95x).
//
// GRID, several blocks (a long prefill of a few requests): as extend_block's GRID, every
// block decides the whole call from the same inputs and writes its range of the tokens;
// block 0 alone commits or faults (see extend_block.cuh for why a fill word tagged by this
// very call may be this call's own advance, made by a faster block).

namespace kvp {

struct FewShared {
  unsigned long long tok_off[33];  // each request's first token (of the plan's output), and
                                   // the total after the last request
  unsigned long long part1[32];    // tokens into the prefix's partial page
  unsigned long long page_off[32];  // ring rank of the request's first new page
  long long last[32];               // last_loc as read
  unsigned long long scan_in[32][2];  // warp 0's, see after_loads
  unsigned long long verdict;
  uint32_t pages[STAGE_CAP];  // the new pages of this block's tokens, from the ring
};

// GRID, not SPREAD: the block's page range and first request, worked out by the stagers
// and published to warp 0 by the verdict's barrier (see extend_few: warp 0 decides without
// them, and needs them only for the writes after the barrier).
struct BlockRange {
  unsigned long long lo, hi;
  uint32_t first;
};

// Warp 0 of extend_few, once every warp has scanned the requests: extend_block's checks of
// request `lane` (its words `word`, `filled` loaded before the scan), the verdict by a warp
// reduction (returned to every lane), and what the writers need in `sh`; the continued
// page's fill point is left to the request's lane (`*fill_page`, `*fill_to`: set when the
// call takes effect and this block writes it). REPORT_FIRST (two warps): what needs no page
// word (the lengths' reports, the offsets in `sh`) comes first, while the words are in
// flight; elsewhere it did not pay (see extend_few).
template <bool GRID, bool POW2, bool REPORT_FIRST>
__device__ __forceinline__ unsigned long long decide_few(
    FewShared &sh, const View &v, const Call &call, bool dead, uint32_t batch, long long prefix,
    long long ll, bool sane, const Shape &s, uint32_t err, bool check, uint32_t prefix_page,
    uint32_t word, unsigned long long filled, unsigned long long at_tok,
    unsigned long long at_page, unsigned long long tokens, unsigned long long new_pages,
    bool live, unsigned long long total_tokens, unsigned long long total_pages,
    unsigned long long t_begin, unsigned long long t_end, long long *fill_page,
    unsigned long long *fill_to) {
  const uint32_t r = threadIdx.x;
  const bool valid = r < batch;
  const bool tracked = v.page_size > 1;

  uint32_t key = NO_ERROR32;
  auto report32 = [&](uint32_t code) { key = min(key, (r << 8) | code); };
  // Device lengths against the plan: an unusable request, else the first request that runs
  // past the plan, else (device totals short of it) the last request. (The key is the
  // reports' minimum: their order does not matter.)
  auto report_lengths = [&] {
    if (valid && (!sane || at_tok + s.tokens > total_tokens || at_page + s.new_pages > total_pages))
      report32(ERR_LENGTHS);
    if (r == 0 && (tokens < total_tokens || new_pages < total_pages))
      key = min(key, ((batch - 1) << 8) | ERR_LENGTHS);
  };
  // (With the verdict when it is known: one branch of lane 0 for both.)
  auto publish_offsets = [&](bool with_verdict, unsigned long long verdict) {
    if (valid) {
      sh.tok_off[r] = at_tok;
      sh.part1[r] = s.part1;
      sh.page_off[r] = at_page;
      sh.last[r] = ll;
    }
    if (r == 0) {
      sh.tok_off[min(batch, 32u)] = tokens;  // the host sends at most 32 requests
      if (with_verdict) sh.verdict = verdict;
    }
  };
  if constexpr (REPORT_FIRST) {
    report_lengths();
    publish_offsets(false, 0);
    KVP_PROBE(7, word + filled);  // (the words in use from here)
  }

  // extend_block's checks, in its order.
  const unsigned long long in_page = mod_ps<POW2>((unsigned long long)ll, v);
  bool tagged = false, enters = false;
  if (check && err == ERR_NONE) {
    tagged = GRID && tracked && fill_tag(filled) == call.tag;
    if (kind_of(word) != KIND_ALLOCATED) err = unallocated_error(word);
    else if (tag_of(word) == call.tag) err = ERR_NOT_ALLOCATED;
    else if (mod_ps<POW2>((unsigned long long)ll + 1, v) != mod_ps<POW2>((unsigned long long)prefix, v))
      err = ERR_LAST_LOC;
    else if (!GRID && tracked && fill_tag(filled) == call.tag) err = ERR_SHARED_PAGE;
    else if (tracked && !tagged && fill_of(filled) != in_page + 1) err = ERR_FILL;
    else enters = s.part1 > 0 && batch > 1;
    if (err != ERR_NONE) tagged = false;
  }
  if (err != ERR_NONE) report32(err);
  if constexpr (!REPORT_FIRST) report_lengths();

  // Two requests continuing one page: every one but the first (in batch order) is a repeat.
  // GRID: a request finding its page's fill word tagged by this call looks for the page's
  // first continuing request (extend_block's advanced_by_call, with the table's lookup done
  // by match_any).
  // (No request enters: no match_any, a slow instruction, e.g. one request or fresh ones;
  // the branch is the same in every lane. The key is 32-bit and the match kept to the lanes
  // that enter: `first` is read only by a lane that looks.)
  const uint32_t entering = __ballot_sync(FULL, enters);
  const uint32_t same = entering ? __match_any_sync(FULL, prefix_page) & entering : 0;
  const int first = same ? __ffs(same) - 1 : -1;
  // (Every lane shuffles: a shuffle some lanes skip would hang the warp.)
  const long long first_last = GRID ? __shfl_sync(FULL, ll, first < 0 ? (int)r : first) : 0;
  const unsigned long long first_part1 =
      GRID ? __shfl_sync(FULL, s.part1, first < 0 ? (int)r : first) : 0;
  if (enters && first != (int)r) {
    report32(ERR_SHARED_PAGE);
  } else if (GRID) {
    const unsigned long long start = in_page + 1;
    const bool advanced = s.part1 > 0 ? fill_of(filled) == start + s.part1
                                      : first >= 0 && first_last == ll &&
                                            fill_of(filled) == start + first_part1;
    if (tagged && !advanced) report32(ERR_SHARED_PAGE);
  }
  const unsigned long long verdict = widen_error(__reduce_min_sync(FULL, key));

  if constexpr (REPORT_FIRST) {
    if (r == 0) sh.verdict = verdict;
  } else {
    publish_offsets(true, verdict);
  }
  *fill_page = -1;
  if (live && verdict == NO_ERROR && tracked && s.part1 > 0 &&
      (!GRID || (t_begin <= at_tok && at_tok < t_end))) {
    *fill_page = prefix_page;
    *fill_to = in_page + 1 + s.part1;
  }
  return verdict;
}

// Where each request's tokens and new pages start (exclusive prefix sums over the batch, lane
// i request i) and the batch's totals: what every warp of extend_few works out for itself.
struct Offsets {
  unsigned long long at_tok, at_page, tokens, new_pages;
};

// Whether the kernels for at most MAXB requests (see extend_few) have a path of their own for
// a call of one request (the scan and the tokens' searches skipped): the kernel built for
// exactly one, where it is the whole path, and the kernels for 32, which had it before the
// kernels for one existed (the host now sends one request to those; kept as measured). The
// kernels for 2, 4 or 8 are sent at least two requests and carry no such branch.
template <uint32_t MAXB>
constexpr bool ONE_REQUEST_PATH = MAXB == 1 || MAXB == 32;

// A 32-bit sum is exact below 2^26 a total (32 lanes of at most 2^26 + 1 stay below 2^32).
constexpr unsigned long long NARROW_TOTAL = 1ull << 26;

// One request needs no scan. Otherwise, when the plan's totals are below NARROW_TOTAL (every
// extend whose output is under 64 M slots), a 32-bit scan of each value clamped to the plan's
// total + 1: a request whose own value passes the total + 1 makes every running sum from it
// on pass the total, so each request past the plan is still found past it (the verdict's
// ERR_LENGTHS, the first such request, is unchanged) and the call is not live; without such a
// request the sums are exact. Half the shuffles and adds of the 64-bit scan, which the
// stagers wait for before their ring loads (BENCHMARKS.md, fourteenth session). MAXB: the
// most requests the kernel takes (see extend_few); below 32, a scan of log2(MAXB) steps,
// exact in the first MAXB lanes (a lane past the batch holds nothing), and no branch for one
// request, which the host sends elsewhere.
template <uint32_t MAXB>
__device__ __forceinline__ Offsets request_offsets(Pair own, uint32_t batch,
                                                   unsigned long long total_tokens,
                                                   unsigned long long total_pages) {
  const uint32_t lane = threadIdx.x & 31;
  if (ONE_REQUEST_PATH<MAXB> && batch == 1) {  // (uniform: every lane takes the same branch)
    const unsigned long long tokens = __shfl_sync(FULL, own.a, 0);
    const unsigned long long new_pages = __shfl_sync(FULL, own.b, 0);
    return lane == 0 ? Offsets{0, 0, tokens, new_pages}
                     : Offsets{tokens, new_pages, tokens, new_pages};
  }
  if (total_tokens < NARROW_TOTAL && total_pages < NARROW_TOTAL) {
    const uint32_t a = (uint32_t)min(own.a, total_tokens + 1);
    const uint32_t b = (uint32_t)min(own.b, total_pages + 1);
    uint32_t ia = a, ib = b;
    warp_inclusive_scan2<uint32_t, MAXB>(ia, ib);
    return Offsets{ia - a, ib - b, __shfl_sync(FULL, ia, MAXB - 1),
                   __shfl_sync(FULL, ib, MAXB - 1)};
  }
  const Pair incl = warp_inclusive_scan<MAXB>(own);
  return Offsets{incl.a - own.a, incl.b - own.b, __shfl_sync(FULL, incl.a, MAXB - 1),
                 __shfl_sync(FULL, incl.b, MAXB - 1)};
}

// The most tokens the host gives one block of BLOCK threads (src/cuda/pool.rs: WARP_TOKENS
// to two warps, FOUR_WARP_TOKENS to four, SPAN_TOKENS to 256 threads). A call of more still
// runs, on the general writers' loop.
template <int BLOCK>
struct FewBlockTokens {
  static_assert(BLOCK == 64 || BLOCK == 128 || BLOCK == 256,
                "extend_few runs on two warps, four or 256 threads");
  static constexpr uint32_t value = BLOCK == 64 ? 64 : BLOCK == 128 ? 256 : SPAN_TOKENS;
};

// From this warp's scan (lane i, request i: `at`, `s`, `ll`), by shuffles, the request of
// each of the writer's tokens (writer, writer + WRITERS, ...: the last request starting at or
// before it), then its place. One block: values are clamped to 32 bits past the plan's total
// (total_tokens <= FewBlockTokens here): a request they touch makes the call not live, and
// nothing planned here is used then. GRID: the block's tokens from `t_first`, its staged pages
// from ring rank `page_lo`, planned only for a live call whose offsets are narrow (below
// 2^31), so that the clamps change nothing.
template <uint32_t PER, uint32_t WRITERS, bool POW2, bool GRID, uint32_t MAXB>
__device__ __forceinline__ OwnTokens<PER> plan_own_tokens(const View &v, uint32_t writer,
                                                          uint32_t batch, const Offsets &at,
                                                          const Shape &s, long long ll,
                                                          unsigned long long total_tokens,
                                                          uint32_t t_first = 0,
                                                          uint32_t page_lo = 0) {
  if constexpr (!GRID) t_first = page_lo = 0;  // (the one-block kernels' code as measured)
  writer += t_first;
  const unsigned long long cap = total_tokens + 1;
  const uint32_t my_tok = (uint32_t)min(at.at_tok, cap), my_page = (uint32_t)min(at.at_page, cap);
  const uint32_t my_part1 = (uint32_t)min(s.part1, cap), my_len = (uint32_t)min(s.tokens, cap);
  OwnTokens<PER> own;
  // Request q's values (lane q's, by shuffles), and token u's place in request q.
  struct Request {
    uint32_t tok, part1, page, len;
    long long last;
  };
  auto request = [&](uint32_t q) {
    return Request{__shfl_sync(FULL, my_tok, (int)q), __shfl_sync(FULL, my_part1, (int)q),
                   __shfl_sync(FULL, my_page, (int)q), __shfl_sync(FULL, my_len, (int)q),
                   __shfl_sync(FULL, ll, (int)q)};
  };
  auto place = [&](uint32_t u, const Request &q) {
    own.template place<POW2>(u, writer + u * WRITERS - q.tok, q.part1, q.len, q.page, q.last,
                             page_lo, v);
  };
  // (Branches uniform: every lane shuffles.) One request: one set of shuffles, from lane 0,
  // for every token. Several: the searches of all the thread's tokens step by step
  // together, so that each step's shuffles issue back to back, log2(MAXB) steps.
  if (ONE_REQUEST_PATH<MAXB> && batch == 1) {
    const Request first = request(0);
#pragma unroll
    for (uint32_t u = 0; u < PER; ++u) place(u, first);
  } else {
    uint32_t q[PER];
#pragma unroll
    for (uint32_t u = 0; u < PER; ++u) q[u] = 0;
#pragma unroll
    for (uint32_t step = MAXB / 2; step > 0; step >>= 1) {
#pragma unroll
      for (uint32_t u = 0; u < PER; ++u) {
        const uint32_t c = q[u] + step;
        const uint32_t starts_at = __shfl_sync(FULL, my_tok, (int)(c & 31));
        if (c < batch && starts_at <= writer + u * WRITERS) q[u] = c;
      }
    }
#pragma unroll
    for (uint32_t u = 0; u < PER; ++u) place(u, request(q[u]));
  }
  return own;
}

// The stagers' ring loads (EarlyRing): loads in flight per thread before any is used, enough
// for a one-block shape's most new pages (page size 1: at most 4 x BLOCK tokens; since the
// sixteenth session 256 threads take at most 512) to come in one round trip (run s11-1:
// 1,024 pages in two rounds made 2 requests at page size 1 1.09x slower than extend_block);
// a block of several writes about 512 tokens (pool.rs, SPAN_TOKENS). Two or four warps:
// their most tokens, as many pages, spread over their writers.
template <int BLOCK, bool GRID>
struct FewRing {
  static constexpr uint32_t STAGERS = BLOCK - 32;
  static constexpr uint32_t MOST_PAGES = BLOCK < 256 ? FewBlockTokens<BLOCK>::value : 4 * BLOCK;
  static constexpr uint32_t BATCH = GRID ? 4 : (MOST_PAGES + STAGERS - 1) / STAGERS;
  using Early = EarlyRing<BATCH, STAGERS>;
};

// Whether one block's stagers loaded the ring's first pages at the host's head hint
// (`load_hinted_ring`).
template <bool GRID>
__device__ __forceinline__ bool hinted_ring(const Call &call, uint32_t num_pages) {
  return !GRID && call.head_hint < num_pages;
}

// Whether the stagers load the ring's first pages from the cursor's head after all: none
// came at a hint (`load_hinted_ring`), or the head is not where the host predicted.
template <bool GRID>
__device__ __forceinline__ bool missed_ring_hint(const Call &call, const Cursor &c,
                                                 uint32_t num_pages) {
  return !hinted_ring<GRID>(call, num_pages) || c.head != call.head_hint;
}

// One block, the stagers: the ring's first pages from the host's head hint, with round trip
// 1 (used only if the cursor's head turns out to be the hint; else extend_few loads them
// again from the head). Issued by extend_few_kernel (and extend_pairs_kernel) ahead of its
// page-size dispatch and of the cursor's load: where extend_few issued them, ptxas placed the
// cursor's first uses (before the dispatch's branch) ahead of them, and they waited for round
// trip 1. No branch: warp 0 and an unhinted call load nothing. Runs s47-1 and s47-2 (H100):
// 1-32 requests of 512 new tokens 0.97-0.99x the time at page sizes 1, 16 and 64 (a round
// trip fewer for the stagers, but not for the call: about 0.05 us of the ~0.4 expected); run
// s49-1 (H200), the pairs kernel: 33-64 requests of 1 and 8 tokens 0.92x and 0.95-0.96x.
template <int BLOCK, bool GRID>
__device__ __forceinline__ void load_hinted_ring(typename FewRing<BLOCK, GRID>::Early &early,
                                                 const View &v, const Call &call) {
  if constexpr (GRID) return;
  const bool hinted = hinted_ring<GRID>(call, v.num_pages);
  const bool stages = threadIdx.x >= 32;
  early.load(v, hinted ? call.head_hint : 0, stages && hinted ? v.num_pages : 0,
             threadIdx.x - 32);
}

// MAXB, the most requests the host sends the kernel: 32 (kvp_extend_few_*), 1
// (kvp_extend_one_*: `batch` is the constant 1 and the compiler drops every path of several
// requests, the scan, the token search, the repeats' match: a shorter kernel whose
// instructions a cold SM fetches sooner), or 2, 4, 8 (kvp_extend_few{2,4,8}_{64,128,256}_*:
// scans and token searches of log2(MAXB) steps, not five; run s35-1, 2-8 requests of 16-64
// tokens 0.86-0.98x the time). A batch past MAXB is cut to it: the plan's totals then exceed
// the requests' and the call fails (ERR_LENGTHS), writing nothing past them.
template <int BLOCK, typename Index, bool GRID, bool POW2, bool SPREAD, uint32_t MAXB = 32>
__device__ __forceinline__ void extend_few(FewShared &sh,
                                           typename FewRing<BLOCK, GRID>::Early &early, View v,
                                           Call call, const long long *prefix_lens,
                                           const long long *seq_lens, const Index *last_loc,
                                           uint32_t batch, unsigned long long total_tokens,
                                           unsigned long long total_pages, Index *out) {
  static_assert(MAXB == 1 || MAXB == 2 || MAXB == 4 || MAXB == 8 || MAXB == 32,
                "extend_few takes at most 1, 2, 4, 8 or 32 requests");
  if constexpr (MAXB == 1) batch = 1;
  else if constexpr (MAXB < 32) batch = min(batch, MAXB);
  const uint32_t r = threadIdx.x, lane = r & 31;
  const bool decides = r < 32;  // warp 0
  KVP_PROBE(0, 0);  // (probes: see pool.cu; anatomy.cu names the points)
  Header *h = v.header;
  const Cursor c = h->cursor[call.in];
  const uint32_t n = v.num_pages;
  bool dead = dead_call(h->fault, c, call);  // GRID: voted on below
  bool short_ = !dead && c.free_len < total_pages;

  // Round trip 1, in every warp (lane i, request i): every load unconditional, a lane past
  // the batch reading the last request again.
  const uint32_t i = min(lane, batch - 1);
  long long seq = seq_lens[i];
  long long prefix = prefix_lens[i];
  long long ll = (long long)last_loc[i];
  constexpr uint32_t STAGERS = FewRing<BLOCK, GRID>::STAGERS;
  constexpr uint32_t BATCH = FewRing<BLOCK, GRID>::BATCH;
  const bool stages = !decides;
  const uint32_t stager = r - 32;
  __syncwarp();  // keeps the loads together (see extend_block)
  // GRID: block 0 may fault the call while this block starts, so its warps may read the
  // fault flag differently; they agree at the verdict's barrier (one vote, below), before
  // anything but the slots in `out` and the staged pages is written.
  // This block's tokens, worked out while the loads are in flight (GRID: a division).
  const TokenRange block_range = block_tokens<GRID>(total_tokens);
  const unsigned long long t_begin = block_range.begin, t_end = block_range.end;
  const bool valid = lane < batch;
  if (!valid) {
    prefix = 0;
    ll = -1;
  }

  // Round trip 2, as soon as round trip 1 is in, before anything else is worked out. Warp
  // 0: the prefix pages' words, at an address from last_loc alone (as decode_block's: the
  // page clamped into the page map, the prefix page wherever the words are used), in flight
  // during the checks, the shapes and the scan; only when some request has a prefix (new
  // requests need no word checked: with the hint's pages such a call takes one round
  // trip). One block, the stagers: the ring's first pages, from the cursor alone (see
  // EarlyRing), unless they came with round trip 1 at the hint. (A branch per warp: each
  // goes straight to its own loads.) Run s18-3: one request of 512 tokens 0.90-0.97x the
  // time; runs s18-7/9: 1-8 requests of 16-64 tokens 0.84-0.98x (then on one warp: a round
  // trip fewer).
  // Several blocks (their stagers' ranks depend on the scan): warp 0's words alone, since
  // run s21-2 (2-8 requests of 512 tokens 0.98-0.99x; run s18-2 had read 1.01x at 2-32,
  // when warp 0 was not what the barrier waited for: bench-gpu/anatomy.cu's probes).
  uint32_t word = 0;
  unsigned long long filled = 0;
  if (decides) {
    if (__any_sync(FULL, prefix > 0)) {
      const PageWords words = load_page_words<POW2>(ll, v);
      word = words.word;
      filled = words.filled;
      if constexpr (!GRID) KVP_PROBE(1, words.page + seq + prefix + c.head);
    }
    __syncwarp();
  } else if constexpr (!GRID) {
    if (missed_ring_hint<GRID>(call, c, n)) early.load(v, c.head, v.num_pages, stager);
    KVP_PROBE(1, c.head);
  }

  const bool sane = !valid || lengths_sane(v, prefix, seq);
  const bool check = valid && !dead && sane && prefix > 0;
  uint32_t err = ERR_NONE;
  if (valid && !dead && sane && prefix == 0 && ll != -1) err = ERR_LAST_LOC_EMPTY;
  if (check) err = slot_error(ll, v);
  const uint32_t prefix_page =
      check && err == ERR_NONE ? (uint32_t)div_ps<POW2>((unsigned long long)ll, v) : 0;
  const Shape s = valid && sane ? shape_of<POW2>((unsigned long long)prefix, (unsigned long long)seq, v)
                                : Shape{0, 0, 0};
  Pair own{s.tokens, s.new_pages};
  if (decides) own = after_loads(own, &sh.scan_in[r]);

  // Every warp scans the requests (a warp's work: cheaper than publishing it).
  const Offsets at = request_offsets<MAXB>(own, batch, total_tokens, total_pages);
  const unsigned long long at_tok = at.at_tok, at_page = at.at_page;
  const unsigned long long tokens = at.tokens, new_pages = at.new_pages;
  const bool live = !dead && !short_ && tokens <= total_tokens && new_pages <= total_pages;
  KVP_PROBE(6, tokens + at_tok);  // every warp: the scan done

  // GRID: the ring ranks of the new pages this block's tokens use, [lo, hi), from the
  // requests holding its first and last token.
  unsigned long long page_lo = 0, page_hi = new_pages;
  uint32_t first = 0;  // the request holding token t_begin (when live)
  bool one_request = true;  // GRID: whether one request holds all of the block's tokens
  // GRID, not SPREAD: warp 0, whose decision the verdict's barrier waits for, goes straight
  // to it; the stagers work out the range (~460 cycles of ballots, shuffles and 64-bit
  // arithmetic after the scan in run s60-2's probes) and one of them publishes it with the
  // barrier, after which warp 0 reads it for the writes. (SPREAD: every warp works it out,
  // since `planned` depends on it before the barrier.)
  constexpr bool RANGE_BY_STAGERS = GRID && !SPREAD;
  __shared__ BlockRange range_shared;  // (RANGE_BY_STAGERS only: else unused)
  if constexpr (GRID) {
    if (!RANGE_BY_STAGERS || !decides) {
      auto page_at = [&](unsigned long long t) {
        return at_page + (t < s.part1 ? 0 : div_ps<POW2>(t - s.part1, v));
      };
      const unsigned long long end = at_tok + s.tokens;
      const bool holds_lo = live && at_tok <= t_begin && t_begin < end;
      const bool holds_hi = live && at_tok < t_end && t_end <= end;
      const unsigned long long lo = holds_lo ? page_at(t_begin - at_tok) : 0;
      const unsigned long long hi =
          holds_hi ? page_at(t_end - 1 - at_tok) + (t_end - 1 - at_tok < s.part1 ? 0 : 1) : 0;
      const uint32_t lo_lane = __ballot_sync(FULL, holds_lo);
      const uint32_t hi_lane = __ballot_sync(FULL, holds_hi);
      first = lo_lane ? __ffs(lo_lane) - 1 : 0;
      page_lo = lo_lane ? __shfl_sync(FULL, lo, (int)first) : 0;
      page_hi = max(page_lo, hi_lane ? __shfl_sync(FULL, hi, __ffs(hi_lane) - 1) : 0);
      one_request = lo_lane == hi_lane;
      if (RANGE_BY_STAGERS && stager == 0) range_shared = BlockRange{page_lo, page_hi, first};
      KVP_PROBE(1, page_lo + page_hi);
    }
  }

  // One block, within the host's token cap: the writers plan their tokens while warp 0
  // waits for its words and decides (see OwnTokens). (Warp 0 writing a share too, its
  // planning on its path made 2 requests of 64 tokens 1.13x slower on 64 threads: run s19-3;
  // on 64 threads, one writer warp planning up to 8 tokens a lane made 2-8 requests
  // 1.10-1.30x slower: run s19-5, and 65-256 tokens went to 256 threads.) Several blocks,
  // SPREAD (kvp_extend_few_spread_*: more requests than blocks), a block whose tokens span
  // several requests (live, within SPAN_TOKENS, narrow offsets): the writers load the
  // block's pages, plan their share of its tokens while those are in flight, stage them,
  // store the slots before the verdict and write only the new pages' words after it, as one
  // block does. Runs s27-2 and s27-3: 16-32 requests of 64 tokens 0.89-0.90x the time,
  // 8-32 of 128 0.95x, 4-32 of 256 0.99-1.01x. A block of one request keeps the general
  // loop after the verdict, where planning cost more than that loop's search saves (512
  // tokens a request: 1.07-1.10x, run s27-1), and so does kvp_extend_few_blocks_*, without
  // SPREAD: the planning path in the kernel, even unused, made 2-32 requests of 512 tokens
  // 1.03-1.06x slower (run s27-2).
  constexpr uint32_t WRITERS = STAGERS;
  constexpr uint32_t PER =
      ((GRID ? SPAN_TOKENS : FewBlockTokens<BLOCK>::value) + WRITERS - 1) / WRITERS;
  // (Staged: the block's new pages fit in shared memory.)
  // (RANGE_BY_STAGERS: warp 0's, worked out again after the barrier.)
  bool staged = page_hi - page_lo <= STAGE_CAP;
  const bool planned = GRID ? SPREAD && live && !one_request && staged &&
                                  t_end - t_begin <= (unsigned long long)PER * WRITERS &&
                                  narrow_offsets(total_tokens, total_pages)
                            : total_tokens <= (unsigned long long)PER * WRITERS;
  // Four warps and 256 threads plan before staging the ring's pages, while those are still
  // in flight (a warp issues in order: the staging stalls it until they arrive). Run s24-2:
  // 1 x 512 tokens 0.95x the time, 8 x 64 and 32 x 16 0.93x, 2-16 x 16 and 2-4 x 64 0.98x.
  // Two warps plan after it: before, 1-4 x 16 and 1 x 64 took 1.02x.
  constexpr bool PLAN_FIRST = !GRID && BLOCK > 64;
  // Two warps, planned: the call's slots and new pages are written before the verdict, and
  // warp 0 concludes the call alone (below), with REPORT_FIRST. Runs s24-1 and s24-2: 1-4 x 16
  // and 1 x 64 tokens 0.94-0.95x the time. On four warps and 256 threads the writer warps'
  // own path, not warp 0's, then held the end: 1.00-1.05x (run s24-1), and 1.00-1.03x on top
  // of PLAN_FIRST (run s24-2); REPORT_FIRST on several blocks took 1.01-1.06x (run s24-1).
  constexpr bool EARLY = !GRID && BLOCK == 64;
  // (The planning call stands twice, before and after the staging, not in one lambda: the
  // lambda changed the one-block kernels' register allocation from the measured ones.)
  OwnTokens<PER> mine;
  if constexpr (PLAN_FIRST) {
    if (planned && stages)
      mine = plan_own_tokens<PER, WRITERS, POW2, false, MAXB>(v, stager, batch, at, s, ll,
                                                              total_tokens);
  }

  // Round trip 3, while warp 0 decides: the new pages of this block's tokens, from the ring
  // into shared memory (`live`: they are in the free list, new_pages <= free_len), by the
  // other warps. One block: loaded with round trip 2.
  // Several blocks: after the scan, which gives their ranks (loading them with round trip 1
  // from a window of the ring that must hold them made 2-32 requests of 512 tokens
  // 1.04-1.11x slower: runs s21-1, s21-3).
  if (GRID && planned && stages) {
    // Several blocks, planned: the block's pages loaded, the tokens planned while they are
    // in flight, then staged (as extend_block's several blocks). (A warp barrier, no
    // instruction, keeps the loads ahead of the planning.)
    const uint32_t count = (uint32_t)(page_hi - page_lo);
    early.load(v, ring_pos(c.head, page_lo, v.num_pages), min(count, v.num_pages), stager);
    __syncwarp();
    mine = plan_own_tokens<PER, WRITERS, POW2, GRID, MAXB>(v, stager, batch, at, s, ll,
                                                           total_tokens, (uint32_t)t_begin,
                                                           (uint32_t)page_lo);
    early.stage(sh.pages, v, c, page_lo, count, stager);
  } else if (live && staged && stages) {
    // (In 32 bits: the stagers' path runs from the scan to the barrier.)
    if constexpr (GRID) stage_pages<BATCH, STAGERS>(sh.pages, v, c, page_lo, page_hi, stager);
    else early.stage(sh.pages, v, c, 0, (uint32_t)new_pages, stager);
  }
  if (!decides) {
    if constexpr (GRID) KVP_PROBE(2, sh.pages[stager]);
    else KVP_PROBE(2, early.got[0]);
  }
  if constexpr (!PLAN_FIRST && !GRID) {
    if (planned && stages)
      mine = plan_own_tokens<PER, WRITERS, POW2, false, MAXB>(v, stager, batch, at, s, ll,
                                                              total_tokens);
  }

  // Planned: the writers' slots go to `out` while warp 0 decides, once the stagers (the
  // writers) have staged every page (a barrier of their own, warp 0 not in it); after the
  // verdict they write the pool's words of the new pages (EARLY: with the slots), or the
  // padding slot over their slots (the block barrier orders the two). Run s22-1: 1 x 512
  // tokens 0.96x the time, 8 x 64 and 32 x 16 0.98x; the new pages' words a page a thread
  // after the verdict, from shared memory (1ff322b), 1.00-1.02x more.
  // EARLY writes pool words before the verdict, so only for a call whose device totals are
  // the plan's: one short of its plan fails, and its writers plan tokens past the device's,
  // whose pages were never staged (the shared memory past them holds what an earlier kernel
  // left: before this check, such a call marked those pages allocated, then free). Else the
  // slots alone, which the padding overwrites when the call fails.
  const bool writes = live && (!EARLY || (tokens == total_tokens && new_pages == total_pages));
  if (planned && stages) {
    asm volatile("bar.sync 1, %0;" ::"n"(STAGERS) : "memory");
    if (writes)
      mine.template store_slots<WRITERS, EARLY>(sh.pages, v, call, (uint32_t)t_begin,
                                                (uint32_t)t_end, stager, out);
  }

  long long fill_page = -1;
  unsigned long long fill_to = 0;
  // (Probe 7 makes warp 0 wait for its words here, where its checks would use them: when
  // they arrive; with an empty prefix the checks do not need them. EARLY: in decide_few.)
  if (decides && !EARLY) KVP_PROBE(7, word + filled);
  unsigned long long decided = NO_ERROR;
  if (decides)
    decided = decide_few<GRID, POW2, EARLY>(sh, v, call, dead, batch, prefix, ll, sane, s, err,
                                            check, prefix_page, word, filled, at_tok, at_page,
                                            tokens, new_pages, live, total_tokens, total_pages,
                                            t_begin, t_end, &fill_page, &fill_to);
  if (decides) KVP_PROBE(2, fill_to + (unsigned long long)fill_page);

  if (EARLY && planned) {
    // The call's slots and new pages are written already (store_slots). Warp 0 publishes
    // the verdict without waiting (`bar.arrive`: sh.verdict released to the writers'
    // `bar.sync` on the same barrier) and concludes the call itself; the writers wait for
    // the verdict only to undo their writes when the call does not take effect. Nothing is
    // left to write after a verdict that lets it.
    if (decides) {
      asm volatile("bar.arrive 2, %0;" ::"n"(BLOCK) : "memory");
      KVP_PROBE(3, decided);
      const bool failed = !dead && (short_ || decided != NO_ERROR);
      if (live && !failed && fill_page >= 0) v.fill[fill_page] = fill_word(call.tag, fill_to);
      __syncwarp();  // sh.last, from every lane, for lane 0's fault value
      // (The fault's value as below, written out twice: pool.cu's fault_value or one helper
      // for both conclusions changed this kernel's SASS, 1.00-1.01x the time: run s26-2.)
      if (r == 0) {
        const unsigned long long pos = decided >> 8;
        long long value = 0;
        if (failed && !short_)
          value = (decided & 0xff) == ERR_LENGTHS ? seq_lens[pos] : sh.last[pos];
        conclude_take(v, call, c, total_pages, dead, failed, short_, decided, value);
      }
    } else {
      asm volatile("bar.sync 2, %0;" ::"n"(BLOCK) : "memory");
      const unsigned long long verdict = sh.verdict;
      KVP_PROBE(3, verdict);
      const bool failed = !dead && (short_ || verdict != NO_ERROR);
      if (!live || failed) {
        // Dead, short or failed: the pages taken early go back, and the plan's whole output
        // is the padding slot.
        if (writes) mine.template undo_pages<WRITERS>(sh.pages, v, 0, (uint32_t)total_tokens, stager);
        for (unsigned long long t = stager; t < total_tokens; t += WRITERS) out[t] = 0;
      }
    }
    KVP_PROBE(5, 0);
    return;
  }

  // GRID: the vote on the fault flag. A warp that read no fault staged pages and stored
  // slots as for a live call; if another read one, the call is dead here: the block's slots
  // become the padding slot below (the barrier orders those stores), no page is taken. (The
  // vote had a barrier of its own right after round trip 1, ~375 cycles before the scan in
  // run s48-2's probes; here, run s49-1 (H200): 2-32 requests of 512 tokens 0.98-0.99x,
  // one request of 2,048 tokens 0.97x.)
  bool agreed_live = live;
  if constexpr (GRID) {
    dead = __syncthreads_or(dead);
    short_ = !dead && c.free_len < total_pages;
    agreed_live = live && !dead;
    if (RANGE_BY_STAGERS && decides) {
      const BlockRange range = range_shared;
      page_lo = range.lo;
      page_hi = range.hi;
      first = range.first;
      staged = page_hi - page_lo <= STAGE_CAP;
    }
  } else {
    __syncthreads();
  }
  const unsigned long long verdict = sh.verdict;
  KVP_PROBE(3, verdict);
  const bool failed = !dead && (short_ || verdict != NO_ERROR);

  if (agreed_live && !failed) {
    // Round trip 4, only writes. New pages become allocated (at their first token, by the
    // thread that writes it; one block past the token cap: by a loop of their own);
    // continued pages move their fill points; every token gets its slot, the first token
    // of a new page setting its fill point.
    if (fill_page >= 0) v.fill[fill_page] = fill_word(call.tag, fill_to);
    if (planned) {
      // (Live: every rank is below new_pages, all staged; the slots are stored already.)
      if (stages)
        mine.template write_pages<WRITERS>(sh.pages, v, call, (uint32_t)t_begin, (uint32_t)t_end,
                                           stager);
    } else {
      if constexpr (!GRID) {
        for (unsigned long long k = r; k < new_pages; k += BLOCK) {
          const uint32_t page = staged ? sh.pages[k] : v.ring[ring_pos(c.head, k, n)];
          v.state[page] = page_word(KIND_ALLOCATED, call.tag);
        }
      }
      // Offsets in 32 bits where the plan allows (one block: the loop every thread runs
      // after the barrier, at half the instructions).
      write_call_slots<BLOCK, !GRID, GRID, POW2, false>(sh, v, call, c, batch, staged, page_lo,
                                                        first, t_begin, t_end, total_tokens,
                                                        total_pages, out, {});
    }
    KVP_PROBE(4, 0);
  } else {
    // Dead, short or failed: the plan's whole output is the padding slot.
    for (unsigned long long t = t_begin + r; t < t_end; t += BLOCK) out[t] = 0;
  }

  if (r == 0 && (!GRID || blockIdx.x == 0)) {
    const unsigned long long pos = verdict >> 8;
    long long value = 0;
    // The value the fault names: the lengths or last_loc (as read).
    if (failed && !short_)
      value = (verdict & 0xff) == ERR_LENGTHS ? seq_lens[pos] : sh.last[pos];
    conclude_take(v, call, c, total_pages, dead, failed, short_, verdict, value);
  }
  KVP_PROBE(5, 0);
}

// The body is instantiated for both kinds of page size (see extend_kernel).
template <int BLOCK, typename Index, bool GRID = false, bool SPREAD = false, uint32_t MAXB = 32>
__device__ void extend_few_kernel(View v, Call call, const long long *prefix_lens,
                                  const long long *seq_lens, const Index *last_loc,
                                  uint32_t batch, unsigned long long total_tokens,
                                  unsigned long long total_pages, Index *out) {
  __shared__ FewShared sh;
  typename FewRing<BLOCK, GRID>::Early early;
  load_hinted_ring<BLOCK, GRID>(early, v, call);
  if (v.page_shift != NOT_POW2)
    extend_few<BLOCK, Index, GRID, true, SPREAD, MAXB>(sh, early, v, call, prefix_lens,
                                                       seq_lens, last_loc, batch, total_tokens,
                                                       total_pages, out);
  else
    extend_few<BLOCK, Index, GRID, false, SPREAD, MAXB>(sh, early, v, call, prefix_lens,
                                                        seq_lens, last_loc, batch, total_tokens,
                                                        total_pages, out);
}

}  // namespace kvp
