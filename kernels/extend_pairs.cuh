// alloc_extend of 33-64 requests in one block (a prefill or a speculative verify of a batch
// of that size, up to 512 tokens): extend_few's one-block kernels with two requests a lane.
// Included by pool.cu after extend_few.cuh, whose shapes, phases and verdict it keeps.
//
// Why: at 33 requests a call left extend_few (warp 0 decides by shuffles, the other warps
// stage and write) for extend_block (a request a thread: a block scan, a shared table of
// continued pages and barriers between them). Run s36-3 (BENCHMARKS.md, thirty-sixth
// session), one token a request at page size 1: 32 requests took 2.03 us on extend_few's two
// warps, 33 took 2.67 on extend_block's. Here lane l of every warp holds requests 2l and
// 2l + 1: each warp scans the lanes' sums (one scan, as for 32 requests) and each lane
// splits its own, warp 0 checks both of its requests, and two requests continuing one page
// are found in a small table warp 0 alone fills (match_any compares one value a lane; the
// pairs' keys would need a comparison across lanes for each of them). No block scan, one
// barrier before the writes. Run s36-3: 33-64 requests of 1, 2, 4 and 8 tokens 0.90-0.91x,
// 0.93-0.94x, 0.94-0.96x and 0.97-0.98x the time of the request-a-thread kernels (33 x 1:
// 2.43 us). Not all of the step at 33 is gone, likely because warp 0, whose path set a small
// extend's time in earlier sessions' probes, now checks two requests a lane (not measured
// phase by phase). The stagers load the ring's first pages at the host's head hint with
// round trip 1, as extend_few's one block does (run s49-1, H200: 0.92-0.96x).

namespace kvp {

// The most requests of kvp_extend_pairs_* (the host: `PAIR_BATCH` in src/cuda/pool.rs).
constexpr uint32_t PAIR_BATCH = 64;

struct PairShared {
  unsigned long long tok_off[PAIR_BATCH + 1];  // each request's first token, and the total
  unsigned long long part1[PAIR_BATCH];        // tokens into the prefix's partial page
  unsigned long long page_off[PAIR_BATCH];     // ring rank of the request's first new page
  long long last[PAIR_BATCH];                  // last_loc as read
  unsigned long long scan_in[32][2];           // warp 0's, see after_loads
  unsigned long long verdict;
  PageTable<PAIR_BATCH> claims;  // warp 0's: the continued pages, for repeats
  uint32_t pages[STAGE_CAP];     // the call's new pages, from the ring
};

// A lane's two requests (2 * lane + u, u = 0, 1) and where each starts.
struct PairLanes {
  long long prefix[2], ll[2];
  bool valid[2], sane[2], check[2];
  uint32_t err[2], prefix_page[2];
  Shape s[2];
  unsigned long long at_tok[2], at_page[2];
};

// Warp 0, once every warp has scanned the requests: extend_few's decide_few for both of the
// lane's requests. Repeats go through `sh.claims` (cleared by warp 0 at the kernel's start),
// with warp barriers only. The continued pages' fill points are left to the lane
// (`fill_page[u]`, `fill_to[u]`: set when the call takes effect).
template <bool POW2, bool REPORT_FIRST>
__device__ __forceinline__ unsigned long long decide_pairs(
    PairShared &sh, const View &v, const Call &call, uint32_t batch, const PairLanes &q,
    const uint32_t word[2], const unsigned long long filled[2], unsigned long long tokens,
    unsigned long long new_pages, bool live, unsigned long long total_tokens,
    unsigned long long total_pages, long long fill_page[2], unsigned long long fill_to[2]) {
  const uint32_t lane = threadIdx.x;
  const bool tracked = v.page_size > 1;
  uint32_t key = NO_ERROR32;
  auto report32 = [&](uint32_t i, uint32_t code) { key = min(key, (i << 8) | code); };
  auto report_lengths = [&] {
#pragma unroll
    for (uint32_t u = 0; u < 2; ++u) {
      if (q.valid[u] && (!q.sane[u] || q.at_tok[u] + q.s[u].tokens > total_tokens ||
                         q.at_page[u] + q.s[u].new_pages > total_pages))
        report32(2 * lane + u, ERR_LENGTHS);
    }
    if (lane == 0 && (tokens < total_tokens || new_pages < total_pages))
      report32(batch - 1, ERR_LENGTHS);
  };
  auto publish_offsets = [&](bool with_verdict, unsigned long long verdict) {
#pragma unroll
    for (uint32_t u = 0; u < 2; ++u) {
      if (q.valid[u]) {
        const uint32_t i = 2 * lane + u;
        sh.tok_off[i] = q.at_tok[u];
        sh.part1[i] = q.s[u].part1;
        sh.page_off[i] = q.at_page[u];
        sh.last[i] = q.ll[u];
      }
    }
    if (lane == 0) {
      sh.tok_off[batch] = tokens;
      if (with_verdict) sh.verdict = verdict;
    }
  };
  if constexpr (REPORT_FIRST) {
    report_lengths();
    publish_offsets(false, 0);
  }

  // extend_block's checks, in its order, for each request.
  bool enters[2];
  unsigned long long in_page[2];
#pragma unroll
  for (uint32_t u = 0; u < 2; ++u) {
    uint32_t err = q.err[u];
    enters[u] = false;
    in_page[u] = mod_ps<POW2>((unsigned long long)q.ll[u], v);
    if (q.check[u] && err == ERR_NONE) {
      if (kind_of(word[u]) != KIND_ALLOCATED) err = unallocated_error(word[u]);
      else if (tag_of(word[u]) == call.tag) err = ERR_NOT_ALLOCATED;
      else if (mod_ps<POW2>((unsigned long long)q.ll[u] + 1, v) !=
               mod_ps<POW2>((unsigned long long)q.prefix[u], v))
        err = ERR_LAST_LOC;
      else if (tracked && fill_tag(filled[u]) == call.tag) err = ERR_SHARED_PAGE;
      else if (tracked && fill_of(filled[u]) != in_page[u] + 1) err = ERR_FILL;
      else enters[u] = q.s[u].part1 > 0 && batch > 1;
    }
    if (err != ERR_NONE) report32(2 * lane + u, err);
  }
  if constexpr (!REPORT_FIRST) report_lengths();

  // Two requests continuing one page: every one but the first (in batch order) is a repeat.
  // (No request enters, e.g. fresh requests: no table. The branch is the same in every lane.)
  if (__any_sync(FULL, enters[0] || enters[1])) {
    int entry[2];
#pragma unroll
    for (uint32_t u = 0; u < 2; ++u)
      entry[u] = enters[u] ? (int)sh.claims.enter(q.prefix_page[u], 2 * lane + u) : -1;
    __syncwarp();
#pragma unroll
    for (uint32_t u = 0; u < 2; ++u) {
      if (entry[u] >= 0 && !sh.claims.first_of((uint32_t)entry[u], 2 * lane + u))
        report32(2 * lane + u, ERR_SHARED_PAGE);
    }
  }
  const unsigned long long verdict = widen_error(__reduce_min_sync(FULL, key));

  if constexpr (REPORT_FIRST) {
    if (lane == 0) sh.verdict = verdict;
  } else {
    publish_offsets(true, verdict);
  }
#pragma unroll
  for (uint32_t u = 0; u < 2; ++u) {
    fill_page[u] = -1;
    if (live && verdict == NO_ERROR && tracked && q.s[u].part1 > 0) {
      fill_page[u] = q.prefix_page[u];
      fill_to[u] = in_page[u] + 1 + q.s[u].part1;
    }
  }
  return verdict;
}

// plan_own_tokens for two requests a lane: each of the writer's tokens (writer, writer +
// WRITERS, ...) belongs to the last request starting at or before it, found among the lanes'
// first requests (log2(32) steps of shuffles, all the writer's tokens together), then
// between that lane's two. Values clamped to 32 bits past the plan's total, as there.
template <uint32_t PER, uint32_t WRITERS, bool POW2>
__device__ __forceinline__ OwnTokens<PER> plan_pair_tokens(const View &v, uint32_t writer,
                                                           uint32_t batch, const PairLanes &q,
                                                           unsigned long long total_tokens) {
  const unsigned long long cap = total_tokens + 1;
  const uint32_t lanes = (batch + 1) / 2;
  uint32_t tok[2], page[2], part1[2], len[2];
#pragma unroll
  for (uint32_t u = 0; u < 2; ++u) {
    tok[u] = (uint32_t)min(q.at_tok[u], cap);
    page[u] = (uint32_t)min(q.at_page[u], cap);
    part1[u] = (uint32_t)min(q.s[u].part1, cap);
    len[u] = (uint32_t)min(q.s[u].tokens, cap);
  }
  uint32_t at[PER];
#pragma unroll
  for (uint32_t u = 0; u < PER; ++u) at[u] = 0;
  // (Every lane shuffles: a shuffle some lanes skip would hang the warp.)
#pragma unroll
  for (uint32_t step = 16; step > 0; step >>= 1) {
#pragma unroll
    for (uint32_t u = 0; u < PER; ++u) {
      const uint32_t c = at[u] + step;
      const uint32_t starts_at = __shfl_sync(FULL, tok[0], (int)(c & 31));
      if (c < lanes && starts_at <= writer + u * WRITERS) at[u] = c;
    }
  }
  OwnTokens<PER> own;
#pragma unroll
  for (uint32_t u = 0; u < PER; ++u) {
    const uint32_t t = writer + u * WRITERS, from = at[u];
    const uint32_t second_at = __shfl_sync(FULL, tok[1], (int)from);
    const bool second = 2 * from + 1 < batch && second_at <= t;
    auto pick = [&](const uint32_t (&x)[2]) {
      const uint32_t a = __shfl_sync(FULL, x[0], (int)from), b = __shfl_sync(FULL, x[1], (int)from);
      return second ? b : a;
    };
    const uint32_t first_at = __shfl_sync(FULL, tok[0], (int)from);
    const uint32_t r_part1 = pick(part1), r_len = pick(len), r_page = pick(page);
    const long long l0 = __shfl_sync(FULL, q.ll[0], (int)from);
    const long long l1 = __shfl_sync(FULL, q.ll[1], (int)from);
    own.template place<POW2>(u, t - (second ? second_at : first_at), r_part1, r_len, r_page,
                             second ? l1 : l0, 0, v);
  }
  return own;
}

// The kernel: extend_few's one-block path (GRID off) for up to PAIR_BATCH requests, on two
// warps (up to 64 tokens), four (up to 256) or 256 threads (up to 512), as the host picks
// (`ExtendKernel::Pairs`). A batch past PAIR_BATCH is cut to it: the plan's totals then
// exceed the requests' and the call fails (ERR_LENGTHS), writing nothing past them.
template <int BLOCK, typename Index, bool POW2>
__device__ __forceinline__ void extend_pairs(PairShared &sh,
                                             typename FewRing<BLOCK, false>::Early &early,
                                             View v, Call call, const long long *prefix_lens,
                                             const long long *seq_lens, const Index *last_loc,
                                             uint32_t batch, unsigned long long total_tokens,
                                             unsigned long long total_pages, Index *out) {
  batch = min(batch, PAIR_BATCH);
  const uint32_t r = threadIdx.x, lane = r & 31;
  const bool decides = r < 32;  // warp 0
  if (decides) sh.claims.template clear<32>();  // (used after warp 0's warp barriers only)
  Header *h = v.header;
  const Cursor c = h->cursor[call.in];
  const uint32_t n = v.num_pages;
  const bool dead = dead_call(h->fault, c, call);
  const bool short_ = !dead && c.free_len < total_pages;

  // Round trip 1, in every warp (lane l, requests 2l and 2l + 1): every load unconditional,
  // a lane past the batch reading the last request again.
  PairLanes q;
  long long seq[2];
#pragma unroll
  for (uint32_t u = 0; u < 2; ++u) {
    const uint32_t i = min(2 * lane + u, batch - 1);
    seq[u] = seq_lens[i];
    q.prefix[u] = prefix_lens[i];
    q.ll[u] = (long long)last_loc[i];
  }
  __syncwarp();  // keeps the loads together (see extend_block)
#pragma unroll
  for (uint32_t u = 0; u < 2; ++u) {
    q.valid[u] = 2 * lane + u < batch;
    if (!q.valid[u]) {
      q.prefix[u] = 0;
      q.ll[u] = -1;
    }
  }

  // Round trip 2, as soon as round trip 1 is in: warp 0, the prefix pages' words, only when
  // some request has a prefix; the stagers, the ring's first pages from the cursor, unless
  // they came with round trip 1 at the host's head hint (see extend_few).
  constexpr uint32_t STAGERS = FewRing<BLOCK, false>::STAGERS;
  const bool stages = !decides;
  const uint32_t stager = r - 32;
  uint32_t word[2] = {0, 0};
  unsigned long long filled[2] = {0, 0};
  if (decides) {
    if (__any_sync(FULL, q.prefix[0] > 0 || q.prefix[1] > 0)) {
#pragma unroll
      for (uint32_t u = 0; u < 2; ++u) {
        const PageWords words = load_page_words<POW2>(q.ll[u], v);
        word[u] = words.word;
        filled[u] = words.filled;
      }
    }
    __syncwarp();
  } else if (missed_ring_hint<false>(call, c, n)) {
    early.load(v, c.head, v.num_pages, stager);
  }

  Pair own{0, 0};
#pragma unroll
  for (uint32_t u = 0; u < 2; ++u) {
    const bool valid = q.valid[u];
    q.sane[u] = !valid || lengths_sane(v, q.prefix[u], seq[u]);
    q.check[u] = valid && !dead && q.sane[u] && q.prefix[u] > 0;
    q.err[u] = ERR_NONE;
    if (valid && !dead && q.sane[u] && q.prefix[u] == 0 && q.ll[u] != -1)
      q.err[u] = ERR_LAST_LOC_EMPTY;
    if (q.check[u]) q.err[u] = slot_error(q.ll[u], v);
    q.prefix_page[u] = q.check[u] && q.err[u] == ERR_NONE
                           ? (uint32_t)div_ps<POW2>((unsigned long long)q.ll[u], v)
                           : 0;
    q.s[u] = valid && q.sane[u] ? shape_of<POW2>((unsigned long long)q.prefix[u],
                                                 (unsigned long long)seq[u], v)
                                : Shape{0, 0, 0};
    own.a += q.s[u].tokens;
    own.b += q.s[u].new_pages;
  }
  if (decides) own = after_loads(own, &sh.scan_in[r]);

  // Every warp scans the lanes' sums (extend_few's scan of 32 requests, each lane's two
  // requests as one), then splits its own.
  const Offsets at = request_offsets<32>(own, (batch + 1) / 2, total_tokens, total_pages);
  q.at_tok[0] = at.at_tok;
  q.at_page[0] = at.at_page;
  q.at_tok[1] = at.at_tok + q.s[0].tokens;
  q.at_page[1] = at.at_page + q.s[0].new_pages;
  const unsigned long long tokens = at.tokens, new_pages = at.new_pages;
  const bool live = !dead && !short_ && tokens <= total_tokens && new_pages <= total_pages;

  // The writers plan their tokens while warp 0 decides, as extend_few's one block: four
  // warps and 256 threads before staging the ring's pages (while those are in flight), two
  // warps after it; two warps write the new pages' words with the slots, before the verdict.
  constexpr uint32_t WRITERS = STAGERS;
  constexpr uint32_t PER = (FewBlockTokens<BLOCK>::value + WRITERS - 1) / WRITERS;
  const bool staged = new_pages <= STAGE_CAP;
  const bool planned = total_tokens <= (unsigned long long)PER * WRITERS;
  constexpr bool PLAN_FIRST = BLOCK > 64;
  constexpr bool EARLY = BLOCK == 64;
  OwnTokens<PER> mine;
  if constexpr (PLAN_FIRST) {
    if (planned && stages) mine = plan_pair_tokens<PER, WRITERS, POW2>(v, stager, batch, q, total_tokens);
  }
  if (live && staged && stages) early.stage(sh.pages, v, c, 0, (uint32_t)new_pages, stager);
  if constexpr (!PLAN_FIRST) {
    if (planned && stages) mine = plan_pair_tokens<PER, WRITERS, POW2>(v, stager, batch, q, total_tokens);
  }
  // (EARLY: pool words before the verdict, only for a call whose device totals are the
  // plan's, as in extend_few.)
  const bool writes = live && (!EARLY || (tokens == total_tokens && new_pages == total_pages));
  if (planned && stages) {
    asm volatile("bar.sync 1, %0;" ::"n"(STAGERS) : "memory");
    if (writes)
      mine.template store_slots<WRITERS, EARLY>(sh.pages, v, call, 0, (uint32_t)total_tokens,
                                                stager, out);
  }

  long long fill_page[2] = {-1, -1};
  unsigned long long fill_to[2] = {0, 0};
  unsigned long long decided = NO_ERROR;
  if (decides)
    decided = decide_pairs<POW2, EARLY>(sh, v, call, batch, q, word, filled, tokens, new_pages,
                                        live, total_tokens, total_pages, fill_page, fill_to);
  auto move_fill_points = [&] {
#pragma unroll
    for (uint32_t u = 0; u < 2; ++u)
      if (fill_page[u] >= 0) v.fill[fill_page[u]] = fill_word(call.tag, fill_to[u]);
  };
  // The value a failed call's fault names: the lengths or last_loc (as read).
  auto conclude = [&](unsigned long long verdict, bool failed) {
    const unsigned long long pos = verdict >> 8;
    long long value = 0;
    if (failed && !short_) value = (verdict & 0xff) == ERR_LENGTHS ? seq_lens[pos] : sh.last[pos];
    conclude_take(v, call, c, total_pages, dead, failed, short_, verdict, value);
  };

  if (EARLY && planned) {
    // Two warps: the call's slots and new pages are written already; warp 0 publishes the
    // verdict without waiting and concludes the call, the writer warp waits for it only to
    // undo its writes when the call does not take effect (as extend_few's two warps).
    if (decides) {
      asm volatile("bar.arrive 2, %0;" ::"n"(BLOCK) : "memory");
      const bool failed = !dead && (short_ || decided != NO_ERROR);
      if (live && !failed) move_fill_points();
      __syncwarp();  // sh.last, from every lane, for lane 0's fault value
      if (r == 0) conclude(decided, failed);
    } else {
      asm volatile("bar.sync 2, %0;" ::"n"(BLOCK) : "memory");
      const unsigned long long verdict = sh.verdict;
      const bool failed = !dead && (short_ || verdict != NO_ERROR);
      if (!live || failed) {
        if (writes) mine.template undo_pages<WRITERS>(sh.pages, v, 0, (uint32_t)total_tokens, stager);
        for (unsigned long long t = stager; t < total_tokens; t += WRITERS) out[t] = 0;
      }
    }
    return;
  }

  __syncthreads();
  const unsigned long long verdict = sh.verdict;
  const bool failed = !dead && (short_ || verdict != NO_ERROR);
  if (live && !failed) {
    move_fill_points();
    if (planned) {
      // (Live: every rank is below new_pages, all staged; the slots are stored already.)
      if (stages)
        mine.template write_pages<WRITERS>(sh.pages, v, call, 0, (uint32_t)total_tokens, stager);
    } else {
      // Past the host's token cap for the shape: the general loop after the verdict.
      for (unsigned long long k = r; k < new_pages; k += BLOCK) {
        const uint32_t page = staged ? sh.pages[k] : v.ring[ring_pos(c.head, k, n)];
        v.state[page] = page_word(KIND_ALLOCATED, call.tag);
      }
      write_call_slots<BLOCK, true, false, POW2, false>(sh, v, call, c, batch, staged, 0, 0, 0,
                                                        total_tokens, total_tokens, total_pages,
                                                        out, {});
    }
  } else {
    // Dead, short or failed: the plan's whole output is the padding slot.
    for (unsigned long long t = r; t < total_tokens; t += BLOCK) out[t] = 0;
  }
  if (r == 0) conclude(verdict, failed);
}

// The body is instantiated for both kinds of page size (see extend_kernel).
template <int BLOCK, typename Index>
__device__ void extend_pairs_kernel(View v, Call call, const long long *prefix_lens,
                                    const long long *seq_lens, const Index *last_loc,
                                    uint32_t batch, unsigned long long total_tokens,
                                    unsigned long long total_pages, Index *out) {
  __shared__ PairShared sh;
  typename FewRing<BLOCK, false>::Early early;
  load_hinted_ring<BLOCK, false>(early, v, call);
  if (v.page_shift != NOT_POW2)
    extend_pairs<BLOCK, Index, true>(sh, early, v, call, prefix_lens, seq_lens, last_loc,
                                     batch, total_tokens, total_pages, out);
  else
    extend_pairs<BLOCK, Index, false>(sh, early, v, call, prefix_lens, seq_lens, last_loc,
                                      batch, total_tokens, total_pages, out);
}

}  // namespace kvp
