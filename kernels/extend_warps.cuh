// alloc_extend of up to 32 requests on warps that each decide the whole call
// (kvp_extend_warps_*): a prefill of a few requests, long enough for several warps. Included
// by pool.cu after extend_few.cuh, whose decision (decide_few: extend_block's checks in its
// order, the same verdict) every warp makes for itself.
//
// Why: extend_few's several blocks decide on one warp and publish the verdict, the offsets
// and the staged pages to the block through shared memory and block barriers; the other
// warps wait at the barrier for the deciding warp, and then search each token's request in
// shared memory. Here a warp needs nobody: lane i holds request i, the warp scans the
// requests, loads the ring's pages of its own tokens and plans those tokens (shuffles) while
// its page words and ring pages are in flight, decides, and writes. No block barrier, no
// shared memory but a warp's own staged pages. Every warp reads the same few hundred bytes
// of requests (one cache line a field for 32 requests), which SGLang's kernels do for every
// request too.
//
// As extend_block's GRID: every warp decides from the same inputs, so all reach the same
// verdict; each writes only its share of the tokens, and the grid's first warp alone commits
// or faults (a fill word tagged by this very call may be this call's own advance, made by a
// faster warp: decide_few's GRID checks tell the two apart). The cursor a warp reads is the
// call's input cursor, which the committing warp does not write.

namespace kvp {

// Threads of a kvp_extend_warps_* block (src/cuda/pool.rs: WARPS_BLOCK).
constexpr uint32_t WARPS_BLOCK = 128;
// Tokens a warp plans and writes at a time (two a lane); a warp given more (a grid at the
// host's cap of blocks) takes them in rounds of this many.
constexpr uint32_t WARP_ROUND = 64;

struct WarpsShared {
  unsigned long long scan_in[WARPS_BLOCK][2];        // see after_loads
  uint32_t pages[WARPS_BLOCK / 32][WARP_ROUND];  // each warp's new pages of a round
};

// This warp's tokens of a plan of `total`: an even share over the grid's warps.
__device__ __forceinline__ TokenRange warp_tokens(unsigned long long total) {
  const uint32_t warps = gridDim.x * (WARPS_BLOCK / 32);
  const uint32_t me = blockIdx.x * (WARPS_BLOCK / 32) + (threadIdx.x >> 5);
  const unsigned long long span = total < (1ull << 32) - warps
                                      ? ((uint32_t)total + warps - 1) / warps
                                      : div_slow(total + warps - 1, warps);
  const unsigned long long begin = min((unsigned long long)me * span, total);
  return {begin, min(begin + span, total)};
}

// One round of a warp's tokens [first, end) (at most WARP_ROUND, of a live call with narrow
// offsets): the ring's pages they use loaded (`load`), the tokens planned from the warp's
// scan while those are in flight, then staged in the warp's `pages` (`stage`) and written
// once the call is known to take effect (`write`).
template <bool POW2>
struct WarpRound {
  static constexpr uint32_t PER = WARP_ROUND / 32;
  uint32_t first, end, page_lo, count;
  EarlyRing<PER, 32> ring;
  OwnTokens<PER> mine;

  // The new pages of tokens [first, end) are ring ranks [page_lo, page_lo + count): found
  // from the requests holding the round's first and last token (lane i, request i: `at`,
  // `s`), as extend_few's several blocks find a block's.
  __device__ __forceinline__ void load(const View &v, const Cursor &c, uint32_t batch,
                                       const Offsets &at, const Shape &s, long long ll,
                                       unsigned long long total_tokens, uint32_t first_,
                                       uint32_t end_) {
    first = first_;
    end = end_;
    const uint32_t lane = threadIdx.x & 31;
    auto page_at = [&](unsigned long long t) {
      return at.at_page + (t < s.part1 ? 0 : div_ps<POW2>(t - s.part1, v));
    };
    const unsigned long long stop = at.at_tok + s.tokens;
    const bool holds_lo = at.at_tok <= first && first < stop;
    const bool holds_hi = at.at_tok < end && end <= stop;
    const unsigned long long lo = holds_lo ? page_at(first - at.at_tok) : 0;
    const unsigned long long hi =
        holds_hi ? page_at(end - 1 - at.at_tok) + (end - 1 - at.at_tok < s.part1 ? 0 : 1) : 0;
    const uint32_t lo_lane = __ballot_sync(FULL, holds_lo), hi_lane = __ballot_sync(FULL, holds_hi);
    page_lo = lo_lane ? (uint32_t)__shfl_sync(FULL, lo, __ffs(lo_lane) - 1) : 0;
    const uint32_t page_hi = hi_lane ? (uint32_t)__shfl_sync(FULL, hi, __ffs(hi_lane) - 1) : 0;
    count = page_hi > page_lo ? page_hi - page_lo : 0;  // at most a page a token
    ring.load(v, ring_pos(c.head, page_lo, v.num_pages), min(count, v.num_pages), lane);
    __syncwarp();  // (no instruction: keeps the loads ahead of the planning)
    mine = plan_own_tokens<PER, 32, POW2, true>(v, lane, batch, at, s, ll, total_tokens, first,
                                                page_lo);
  }

  // The call takes effect: the pages staged, then every token's slot, a new page's first
  // token making the page allocated and setting its fill point.
  template <typename Index>
  __device__ __forceinline__ void write(uint32_t *pages, const View &v, const Call &call,
                                        const Cursor &c, Index *out) const {
    const uint32_t lane = threadIdx.x & 31;
    ring.stage(pages, v, c, page_lo, count, lane);
    __syncwarp();
    mine.template write<32>(pages, v, call, first, end, lane, out);
    __syncwarp();  // (the next round stages over these pages)
  }
};

template <typename Index, bool POW2>
__device__ __forceinline__ void extend_warps(WarpsShared &sh, View v, Call call,
                                             const long long *prefix_lens,
                                             const long long *seq_lens, const Index *last_loc,
                                             uint32_t batch, unsigned long long total_tokens,
                                             unsigned long long total_pages, Index *out) {
  const uint32_t lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  KVP_PROBE(0, 0);  // (probes: see pool.cu)
  Header *h = v.header;
  const Cursor c = h->cursor[call.in];
  const bool dead = h->fault != 0;
  const bool short_ = !dead && c.free_len < total_pages;

  // Round trip 1 (lane i, request i): every load unconditional, a lane past the batch
  // reading the last request again.
  const uint32_t i = min(lane, batch - 1);
  long long seq = seq_lens[i];
  long long prefix = prefix_lens[i];
  long long ll = (long long)last_loc[i];
  __syncwarp();  // keeps the loads together (see extend_block)
  const TokenRange range = warp_tokens(total_tokens);
  const bool valid = lane < batch;
  if (!valid) {
    prefix = 0;
    ll = -1;
  }
  // Round trip 2, first part: the prefix pages' words, as soon as last_loc is in.
  const PageWords words = load_page_words<POW2>(ll, v);
  __syncwarp();

  const bool sane = !valid || lengths_sane(v, prefix, seq);
  const bool check = valid && !dead && sane && prefix > 0;
  uint32_t err = ERR_NONE;
  if (valid && !dead && sane && prefix == 0 && ll != -1) err = ERR_LAST_LOC_EMPTY;
  if (check) err = slot_error(ll, v);
  const uint32_t prefix_page =
      check && err == ERR_NONE ? (uint32_t)div_ps<POW2>((unsigned long long)ll, v) : 0;
  const Shape s = valid && sane ? shape_of<POW2>((unsigned long long)prefix, (unsigned long long)seq, v)
                                : Shape{0, 0, 0};
  const Pair own = after_loads(Pair{s.tokens, s.new_pages}, &sh.scan_in[threadIdx.x]);
  const Offsets at = request_offsets(own, batch, total_tokens, total_pages);
  const bool live = !dead && !short_ && at.tokens <= total_tokens && at.new_pages <= total_pages;
  KVP_PROBE(1, at.tokens + at.at_tok);

  // Round trip 2, second part: the ring's pages of the warp's first round, loaded and its
  // tokens planned before the decision, which runs while they are in flight. (The host
  // sends only plans of narrow offsets: then a live call's are exact in 32 bits.)
  const bool planned = live && narrow_offsets(total_tokens, total_pages);
  const uint32_t t_begin = (uint32_t)range.begin, t_end = (uint32_t)range.end;
  WarpRound<POW2> round;
  if (planned && t_begin < t_end)
    round.load(v, c, batch, at, s, ll, total_tokens, t_begin, min(t_end, t_begin + WARP_ROUND));

  long long fill_page = -1;
  unsigned long long fill_to = 0;
  const unsigned long long verdict = decide_few<true, POW2, false, true>(
      sh, v, call, dead, batch, prefix, ll, sane, s, err, check, prefix_page, words.word,
      words.filled, at.at_tok, at.at_page, at.tokens, at.new_pages, live, total_tokens,
      total_pages, range.begin, range.end, &fill_page, &fill_to);
  KVP_PROBE(3, verdict);
  const bool failed = !dead && (short_ || verdict != NO_ERROR);

  if (live && !failed && planned) {
    // Round trip 3, only writes: the continued page's fill point (by the warp holding the
    // request's first token), then the warp's tokens round by round.
    if (fill_page >= 0) v.fill[fill_page] = fill_word(call.tag, fill_to);
    uint32_t *pages = sh.pages[warp];
    if (t_begin < t_end) round.write(pages, v, call, c, out);
    for (uint32_t t = t_begin + WARP_ROUND; t < t_end; t += WARP_ROUND) {
      round.load(v, c, batch, at, s, ll, total_tokens, t, min(t_end, t + WARP_ROUND));
      round.write(pages, v, call, c, out);
    }
    KVP_PROBE(4, 0);
  } else if (!live || failed) {
    // Dead, short or failed: the plan's whole output is the padding slot.
    for (unsigned long long t = range.begin + lane; t < range.end; t += 32) out[t] = 0;
  } else {
    // Live and valid but not planned: a plan the host does not send (wide offsets).
    __trap();
  }

  if (blockIdx.x == 0 && warp == 0) {
    // The value the fault names: the lengths or last_loc (as read, lane pos's).
    const unsigned long long pos = verdict >> 8;
    const long long last_at_pos = __shfl_sync(FULL, ll, (int)(pos & 31));
    if (lane == 0) {
      long long value = 0;
      if (failed && !short_) value = (verdict & 0xff) == ERR_LENGTHS ? seq_lens[pos] : last_at_pos;
      conclude_take(v, call, c, total_pages, dead, failed, short_, verdict, value);
    }
  }
  KVP_PROBE(5, 0);
}

// The body is instantiated for both kinds of page size (see extend_kernel).
template <typename Index>
__device__ void extend_warps_kernel(View v, Call call, const long long *prefix_lens,
                                    const long long *seq_lens, const Index *last_loc,
                                    uint32_t batch, unsigned long long total_tokens,
                                    unsigned long long total_pages, Index *out) {
  __shared__ WarpsShared sh;
  if (v.page_shift != NOT_POW2)
    extend_warps<Index, true>(sh, v, call, prefix_lens, seq_lens, last_loc, batch, total_tokens,
                              total_pages, out);
  else
    extend_warps<Index, false>(sh, v, call, prefix_lens, seq_lens, last_loc, batch,
                               total_tokens, total_pages, out);
}

}  // namespace kvp
