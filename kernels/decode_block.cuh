// alloc_decode of up to BLOCK requests (at most 1,024) in one block, a request a thread: the
// call a decode step makes, every step. Included by pool.cu after extend_block.cuh, whose
// checks it makes in the same order with the same verdict (the smallest position, then the
// smallest code), so it differs from `extend_block` only in what a decode lets it leave out.
//
// Why a kernel of its own: a one-block call's time is mostly the latency of the instructions
// its one path runs (BENCHMARKS.md: fetching them, and the dependent arithmetic), and a
// decode needs few. Each request is one token, so its shape is one bit (it starts a page or
// continues its last one); token ranks are request ranks and page ranks a ballot's popcount,
// all 32-bit; no token-to-request search and no staging of new pages (a starting request
// reads its own page from the ring, in the same round trip as its prefix page's words). One
// warp needs no barrier and no shared memory: repeats are found with match_any and the
// verdict with a warp reduction. Not by row, the call is written as soon as its pages are in
// and undone if the verdict fails, so that nothing is written after a verdict that lets the
// call take effect (one warp since the twenty-fourth session, run s24-4: 1-32 requests
// 0.95-0.96x the time; blocks since the twenty-fifth; BENCHMARKS.md).

namespace kvp {

// The smallest of (position << 8 | code) over the block, 32-bit (positions < 2^24).
constexpr uint32_t NO_ERROR32 = ~0u;

__device__ inline unsigned long long widen_error(uint32_t key) {
  return key == NO_ERROR32 ? NO_ERROR : (unsigned long long)key;
}

// Blocks of at least this many threads add the warps' counts with two warp reductions (a
// count a lane) instead of every thread reading and adding all BLOCK / 32 of them: at 1,024
// threads that loop was about 90 instructions a thread, on 32 warps sharing one SM's four
// schedulers.
constexpr int RANK_BY_REDUCTION = 512;

// Counts over the block: each thread gets the number of earlier threads whose `flag` holds
// (its rank) and the block's total. One barrier when BLOCK > 32 (`counts` has BLOCK / 32
// entries); two flags at once, in the halves of a 32-bit word (totals are at most 1,024).
template <int BLOCK>
__device__ inline void block_rank2(bool f0, bool f1, uint32_t *counts, uint32_t *rank0,
                                   uint32_t *rank1, uint32_t *total0, uint32_t *total1) {
  const uint32_t lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const uint32_t b0 = __ballot_sync(FULL, f0), b1 = __ballot_sync(FULL, f1);
  const uint32_t below = (1u << lane) - 1;
  uint32_t r0 = __popc(b0 & below), r1 = __popc(b1 & below);
  uint32_t t0 = __popc(b0), t1 = __popc(b1);
  if constexpr (BLOCK > 32) {
    if (lane == 0) counts[warp] = t0 | (t1 << 16);
    __syncthreads();
    uint32_t before = 0, all = 0;
    if constexpr (BLOCK >= RANK_BY_REDUCTION) {
      const uint32_t c = lane < BLOCK / 32 ? counts[lane] : 0;
      before = __reduce_add_sync(FULL, lane < warp ? c : 0);
      all = __reduce_add_sync(FULL, c);
    } else {
#pragma unroll
      for (int w = 0; w < BLOCK / 32; ++w) {
        const uint32_t c = counts[w];
        if ((uint32_t)w < warp) before += c;
        all += c;
      }
    }
    r0 += before & 0xffff;
    r1 += before >> 16;
    t0 = all & 0xffff;
    t1 = all >> 16;
  }
  *rank0 = r0;
  *rank1 = r1;
  *total0 = t0;
  *total1 = t1;
}

// Whether this thread is the first (lowest) of the block to enter `key` (`enter`); threads
// that do not enter get true: a shared table, whose barrier the caller passes between
// `enter_key` and `first_key` (`table` zeroed before an earlier one). `met`: this thread's
// entry found its key there already (no thread of a block meets another: no repeat). (One
// warp finds its repeats with match_any instead: see decode_block.)
template <int CAP>
struct FirstOf {
  PageTable<CAP> *table;
  uint32_t pos = 0;
  bool mine = false;
  bool met = false;

  __device__ void enter_key(bool enter, uint32_t key) {
    mine = enter;
    if (enter) {
      const auto entry = table->enter_meeting(key, threadIdx.x);
      pos = entry.pos;
      met = entry.met;
    }
  }
  __device__ bool first_key() const { return !mine || table->first_of(pos, threadIdx.x); }
};

// The decode kernels' shared memory (one warp needs none but the unused minimum).
template <int BLOCK, bool ROWS>
struct DecodeShared {
  static constexpr bool WARP = BLOCK == 32;
  static constexpr int TABLE_CAP = WARP ? 1 : BLOCK;
  PageTable<TABLE_CAP> claims;
  PageTable<ROWS ? TABLE_CAP : 1> row_claims;
  uint32_t counts[WARP ? 1 : BLOCK / 32];
  uint32_t errors;
  long long last[WARP ? 1 : BLOCK];
  // A block: the ring's first BLOCK pages from the head, one a thread.
  uint32_t ring[WARP ? 1 : BLOCK];
};

// A decode's round trip 1: the cursor, the written cursor's writer, the fault flag and this
// thread's request (a thread past the batch reads the last request again and ignores it:
// every load unconditional). One warp of several requests (kvp_decode_32_*) loads it in
// decode_kernel, ahead of the page-size dispatch, so that every one of these loads issues
// before the kernel's first branch (in the body, ptxas issued the lengths after the
// dispatch's branch): 2-32 requests 0.96-0.98x the time (runs s47-1, s47-2, H100). The other
// decode kernels load it in the body: ahead of the dispatch they took 1.01-1.03x at 1 and
// 256 requests (run s47-1).
template <typename Index>
struct DecodeFirst {
  Cursor c;
  uint32_t found, fault;
  long long seq, row, ll;
};
template <typename Index, bool ROWS, bool ONE>
__device__ __forceinline__ DecodeFirst<Index> load_decode_first(const View &v, const Call &call,
                                                                const long long *seq_lens,
                                                                const Index *last_loc,
                                                                uint32_t batch,
                                                                const TableArgs &tab) {
  if constexpr (ONE) batch = 1;
  const Header *h = v.header;
  const uint32_t i = min((uint32_t)threadIdx.x, batch - 1);
  return DecodeFirst<Index>{h->cursor[call.in],
                            written_cursor_writer(h, call),
                            h->fault,
                            seq_lens[i],
                            ROWS ? tab.rows[i] : 0,
                            ROWS ? -1 : (long long)last_loc[i]};
}

// ROWS: by request row, as extend_block (rows checked and seen once, last_loc from the table,
// the slot into the table and to `out` when it is not NULL). POW2: the page size is a power
// of two (shifts and masks, no call to the 64-bit division on the path). ONE
// (kvp_decode_one_*): the host sends exactly one request, so `batch` is the constant 1 and
// the compiler drops the paths of several (as extend_few's MAXB 1). AHEAD: round trip 1
// comes in `ahead`, loaded by decode_kernel (see DecodeFirst); else the body loads it.
template <int BLOCK, typename Index, bool ROWS, bool POW2, bool ONE, bool AHEAD>
__device__ __forceinline__ void decode_block(DecodeShared<BLOCK, ROWS> &sh, View v, Call call,
                                             const DecodeFirst<Index> &ahead,
                                             const long long *seq_lens, const Index *last_loc,
                                             uint32_t batch, unsigned long long total_tokens,
                                             unsigned long long total_pages, Index *out,
                                             TableArgs tab) {
  if constexpr (ONE) batch = 1;
  constexpr bool WARP = BLOCK == 32;
  constexpr int TABLE_CAP = DecodeShared<BLOCK, ROWS>::TABLE_CAP;
  auto &claims = sh.claims;
  auto &row_claims = sh.row_claims;
  auto &errors = sh.errors;
  auto *last = sh.last;

  const uint32_t r = threadIdx.x;
  if constexpr (!WARP) {
    // Published by the barrier in block_rank2.
    if (r == 0) errors = NO_ERROR32;
    claims.template clear<BLOCK>();
    if (ROWS) row_claims.template clear<BLOCK>();
  }

  KVP_PROBE(0, 0);  // (probes: see pool.cu; anatomy.cu names the points)
  // Round trip 1 (AHEAD: loaded by decode_kernel; the other branch is load_decode_first's
  // loads as they stood here before, so that those kernels' code is as measured).
  Header *h = v.header;
  Cursor c;
  uint32_t found;
  bool dead;
  long long seq, row, ll;
  if constexpr (AHEAD) {
    c = ahead.c;
    found = ahead.found;
    dead = dead_call(ahead.fault, c, call);
    seq = ahead.seq;
    row = ahead.row;
    ll = ahead.ll;
  } else {
    c = h->cursor[call.in];
    found = written_cursor_writer(h, call);
    dead = dead_call(h->fault, c, call);
    const uint32_t i = min(r, batch - 1);
    seq = seq_lens[i];
    row = ROWS ? tab.rows[i] : 0;
    ll = ROWS ? -1 : (long long)last_loc[i];
  }
  // A block loads the ring's first pages, one a thread (the address needs the cursor alone),
  // and hands them over in shared memory at block_rank2's barrier: as soon as the cursor is
  // in (by row, before the table's last_loc), except 1,024 threads not by row, which load
  // them once their checks have the request (run s25-4: the early load 0.96-1.00x the time
  // up to 512 requests, 1.01-1.02x at 1,024).
  constexpr bool RING_AT_CURSOR = ROWS || BLOCK < 1024;
  auto load_ring = [&] {
    return r < v.num_pages ? load_here(&v.ring[ring_pos(c.head, r, v.num_pages)]) : 0u;
  };
  uint32_t ring_mine = 0;
  if constexpr (!WARP && RING_AT_CURSOR) ring_mine = load_ring();

  const bool valid = r < batch;
  const long long prefix = seq - 1;
  const bool usable = valid && lengths_sane(v, prefix, seq);
  // The request's shape: a decode token starts a page or continues the prefix's last one.
  const bool starts = usable && mod_ps<POW2>((unsigned long long)prefix, v) == 0;
  const bool continues = usable && !starts;
  uint32_t row_err = ERR_NONE;
  if (ROWS) {
    if (valid && (row < 0 || (unsigned long long)row >= tab.rows_in_table)) row_err = ERR_ROW;
    else if (valid && seq > 0 && (unsigned long long)seq > tab.row_len) row_err = ERR_ROW_LEN;
    if (valid && row_err == ERR_NONE && usable && prefix > 0)
      ll = table_entry<Index>(
          table_at(tab.table, tab.wide, (unsigned long long)row * tab.stride + prefix - 1));
  }
  if (!valid) ll = -1;
  if constexpr (!WARP) last[r] = ll;
  if constexpr (!WARP && !RING_AT_CURSOR) ring_mine = load_ring();

  // Round trip 2: the prefix page's words (page 0 stands in when there is nothing to check),
  // issued first, then, for a request that starts a page, its page from the ring (rank <
  // new_pages <= free_len when live; else the ring's head stands in).
  //
  // One warp issues them as soon as round trip 1 is in: the words at an address from
  // last_loc alone (load_page_words), and with them the ring's first 32 pages from the
  // head, one a lane (the address needs the cursor alone; a starting request takes the page
  // of its rank by a shuffle, not a load after the ranks; entries past the free list are
  // read and left unused). Run s18-3: 1-32 requests 0.96-0.99x the time. A block of several
  // loads the words after the checks (run s18-2, with them early there too: 33-1,024 requests
  // 1.01-1.03x) and its ring pages before them, one a thread (`ring_mine`; run s25-3, not by
  // row: with the early writes 0.92-0.99x; the ring alone 0.99-1.01x below 256 requests; run
  // s25-4, issued as soon as the cursor is in: by row 0.92-1.00x, not by row 0.96-0.99x up
  // to 512 requests and 1.01-1.02x at 1,024).
  const bool tracked = v.page_size > 1;
  uint32_t word = 0, ring_early = 0;
  unsigned long long filled = 0;
  if constexpr (WARP) {
    const PageWords words = load_page_words<POW2>(ll, v);
    word = words.word;
    filled = words.filled;
    ring_early = r < v.num_pages ? load_here(&v.ring[ring_pos(c.head, r, v.num_pages)]) : 0;
    KVP_PROBE(1, words.page + seq + c.head);
    // A faulted pool (one load: the same in every lane): the plan's whole output is the
    // padding slot, the cursor carried over. Apart, so that ptxas issues the loads above
    // before the checks below, which it otherwise schedules first (the block boundary keeps
    // them apart). (Not in a block of several: its warps could read the flag at different
    // times, a racing call on another stream raising it, and one returning before a
    // barrier the others wait at would hang the block.)
    if (dead) {
      if (!ROWS || out != nullptr)
        for (unsigned long long t = r; t < total_tokens; t += BLOCK) out[t] = 0;
      if (r == 0)
        conclude_take<Replay::ON_WRITTEN>(v, call, c, total_pages, true, false, false, NO_ERROR, 0,
                                          found);
      return;
    }
  }

  const bool check = usable && !dead && prefix > 0 && row_err == ERR_NONE;
  uint32_t err = ERR_NONE;
  if (usable && !dead && prefix == 0 && ll != -1) err = ERR_LAST_LOC_EMPTY;
  if (check) err = slot_error(ll, v);
  const uint32_t prefix_page =
      check && err == ERR_NONE ? (uint32_t)div_ps<POW2>((unsigned long long)ll, v) : 0;
  if constexpr (!WARP) {
    word = v.state[prefix_page];
    filled = tracked ? v.fill[prefix_page] : 0;
  }
  if constexpr (!WARP) sh.ring[r] = ring_mine;
  // One warp: the repeats among the requests that may enter a page (all but the page words'
  // checks passed) and among the rows, found while the words load, then kept to those that
  // enter (found after the checks until run s57-2: 2-32 requests 0.96-0.98x the time, by
  // row 0.89-0.97x; the same sets, as every entrant is a candidate and a row needs no word).
  // Only where some lane is a candidate: match_any is slow (run s16-2).
  uint32_t page_same = 0, row_same = 0;
  if constexpr (WARP) {
    const bool may_enter = check && err == ERR_NONE && continues && batch > 1;
    const bool row_may = ROWS && valid && row_err == ERR_NONE && batch > 1;
    if (__ballot_sync(FULL, may_enter || row_may)) {
      page_same = __match_any_sync(FULL, prefix_page);
      if (ROWS) row_same = __match_any_sync(FULL, (uint32_t)row);
    }
  }
  __syncwarp();

  uint32_t tok_rank, page_rank, tokens, new_pages;
  block_rank2<BLOCK>(usable, starts, sh.counts, &tok_rank, &page_rank, &tokens, &new_pages);
  const bool short_ = !dead && c.free_len < total_pages;
  const bool live = !dead && !short_ && tokens <= total_tokens && new_pages <= total_pages;
  const uint32_t page_at = live && starts ? page_rank : 0;
  uint32_t page;
  if constexpr (WARP) page = __shfl_sync(FULL, ring_early, (int)page_at);  // page_rank < 32
  else page = sh.ring[page_at];  // page_rank < BLOCK
  const unsigned long long in_page = mod_ps<POW2>((unsigned long long)ll, v);

  // Not by row: the call is written as soon as its pages are in, before the checks decide it
  // (the slots, the new pages' words, the continued pages' fill points, the cursor), so that
  // a call that takes effect has nothing left to write once decided; a failing call undoes
  // it. A page taken here was free: a lane whose last_loc points into it reads its word as
  // free or as allocated by this very call, unallocated either way. No check may read
  // another request's early fill point: one warp moves one only once every lane's fill word
  // is in (the test reads the word: the warp's load has returned in every lane); a block
  // loaded its words before block_rank2's barrier, which orders them before any store after
  // it. A fill point is put back from the word as read (two requests continuing one page
  // fail the call, and each thread's undo is its last store to the word).
  constexpr bool EARLY = !ROWS;
  // The call's writes for this request, its slot returned: a new page becomes allocated with
  // one slot handed out; a continued page moves its fill point on by one (`move_fill`).
  auto take = [&](bool move_fill) -> Index {
    if (starts) {
      v.state[page] = page_word(KIND_ALLOCATED, call.tag);
      if (tracked) v.fill[page] = fill_word(call.tag, 1);
      return (Index)((unsigned long long)page * v.page_size);
    }
    if (move_fill) v.fill[prefix_page] = fill_word(call.tag, in_page + 2);
    return (Index)(ll + 1);
  };
  const Cursor next = taken_cursor(v, c, total_pages);
  const bool moved_fill =
      EARLY && live && continues && tracked && err == ERR_NONE && filled != ~0ull;
  if (EARLY && live) {
    const Index slot = take(moved_fill);
    if (valid) out[r] = slot;
    if (r == 0) h->cursor[call.in ^ 1] = stamped(next, call);
  }

  // extend_block's checks, in its order.
  bool enters = false;
  if (check && err == ERR_NONE) {
    if (kind_of(word) != KIND_ALLOCATED) err = unallocated_error(word);
    else if (tag_of(word) == call.tag) err = ERR_NOT_ALLOCATED;
    else if (mod_ps<POW2>((unsigned long long)ll + 1, v) != mod_ps<POW2>((unsigned long long)prefix, v))
      err = ERR_LAST_LOC;
    else if (tracked && fill_tag(filled) == call.tag) err = ERR_SHARED_PAGE;
    else if (tracked && fill_of(filled) != in_page + 1) err = ERR_FILL;
    else enters = continues && batch > 1;
  }
  uint32_t key = NO_ERROR32;
  auto report32 = [&](uint32_t code) { key = min(key, (r << 8) | code); };
  if (err != ERR_NONE) report32(err);
  if (row_err != ERR_NONE) report32(row_err);
  // Device lengths against the plan, as extend_block (tokens are ranked by request).
  if (valid && row_err == ERR_NONE &&
      (!usable || tok_rank + 1ull > total_tokens || page_rank + (starts ? 1ull : 0ull) > total_pages))
    report32(ERR_LENGTHS);
  if (r == 0 && (tokens < total_tokens || new_pages < total_pages))
    key = min(key, ((batch - 1) << 8) | ERR_LENGTHS);

  // Two requests continuing one page; two requests of one row: every one but the first (in
  // batch order) is a repeat.
  const bool row_enters = ROWS && valid && row_err == ERR_NONE && batch > 1;
  unsigned long long verdict;
  if constexpr (WARP) {
    // match_any's groups (above), kept to the lanes that enter. (It ran here, after the
    // checks, until the fifty-seventh session; both in one place, to be issued back to back:
    // run s16-3, by row, each under its own test, 32 requests took 1.07x the time.)
    page_same &= __ballot_sync(FULL, enters);
    if (ROWS) row_same &= __ballot_sync(FULL, row_enters);
    const uint32_t earlier = (1u << r) - 1;
    if (enters && (page_same & earlier)) report32(ERR_SHARED_PAGE);
    if (ROWS && row_enters && (row_same & earlier)) report32(ERR_ROW_TWICE);
    verdict = widen_error(__reduce_min_sync(FULL, key));
  } else {
    FirstOf<TABLE_CAP> page_seen{&claims};
    FirstOf<ROWS ? TABLE_CAP : 1> row_seen{&row_claims};
    page_seen.enter_key(enters, prefix_page);
    if (ROWS) row_seen.enter_key(row_enters, (uint32_t)row);
    if (key != NO_ERROR32) atomicMin(&errors, key);
    // The lookups and their barrier only where some entrant met another: elsewhere every
    // entrant is the first of its key (a block of continuing requests on pages of their own,
    // the common decode, decides at this barrier).
    if (__syncthreads_or(page_seen.met || row_seen.met)) {
      key = NO_ERROR32;
      if (!page_seen.first_key()) report32(ERR_SHARED_PAGE);
      if (ROWS && !row_seen.first_key()) report32(ERR_ROW_TWICE);
      if (key != NO_ERROR32) atomicMin(&errors, key);
      __syncthreads();
    }
    verdict = widen_error(errors);
  }
  const bool failed = !dead && (short_ || verdict != NO_ERROR);
  KVP_PROBE(2, verdict + page);

  if (EARLY && live && !failed) {
    // Written already (commit's turn check: the call is live, so in turn); the host's
    // counts, when it asked for them, once decided.
    if (r == 0) {
      check_replay(v, call, found);
      mirror_counts(v, call, next);
    }
    KVP_PROBE(4, 0);
    return;
  }
  if (EARLY && live) {
    // Failed: the pages taken early go back (free, untagged, as the ticketed kernel's undo
    // leaves them) and the continued pages get their fill points back; the cursor and the
    // output are the failure's, below.
    if (starts) v.state[page] = page_word(KIND_FREE, 0);
    if (moved_fill) v.fill[prefix_page] = filled;
  }
  if (!EARLY && live && !failed) {
    // Round trip 3, only writes.
    const Index slot = take(continues);
    if (valid && (!ROWS || out != nullptr)) out[r] = slot;
    if (ROWS && valid)
      table_put(tab.table, tab.wide, (unsigned long long)row * tab.stride + prefix, (long long)slot);
    KVP_PROBE(3, slot);
  } else if (!ROWS || out != nullptr) {
    // Dead, short or failed: the plan's whole output is the padding slot.
    for (unsigned long long t = r; t < total_tokens; t += BLOCK) out[t] = 0;
  }

  // The value a fault names: the lengths, the row, or last_loc (as read). (`failed` is the
  // same in every lane.)
  long long named = ll;
  if (WARP && failed) named = __shfl_sync(FULL, ll, (int)min(verdict >> 8, 31ull));
  if (r == 0) {
    const unsigned long long pos = verdict >> 8;
    const uint32_t code = (uint32_t)(verdict & 0xff);
    long long value = 0;
    if (failed && !short_) {
      if (code == ERR_LENGTHS || code == ERR_ROW_LEN) value = seq_lens[pos];
      else if (code == ERR_ROW || code == ERR_ROW_TWICE) value = tab.rows[pos];
      else if constexpr (WARP) value = named;
      else value = last[pos];
    }
    conclude_take<Replay::ON_WRITTEN>(v, call, c, total_pages, dead, failed, short_, verdict, value,
                                      found);
  }
  KVP_PROBE(4, 0);
}

// The body is instantiated for both kinds of page size, so a power of two (the usual case)
// runs straight through.
template <int BLOCK, typename Index, bool ROWS = false, bool ONE = false>
__device__ void decode_kernel(View v, Call call, const long long *seq_lens, const Index *last_loc,
                              uint32_t batch, unsigned long long total_tokens,
                              unsigned long long total_pages, Index *out, TableArgs tab = {}) {
  __shared__ DecodeShared<BLOCK, ROWS> sh;
  constexpr bool AHEAD = BLOCK == 32 && !ONE;
  DecodeFirst<Index> ahead{};
  if constexpr (AHEAD)
    ahead = load_decode_first<Index, ROWS, ONE>(v, call, seq_lens, last_loc, batch, tab);
  if (v.page_shift != NOT_POW2)
    decode_block<BLOCK, Index, ROWS, true, ONE, AHEAD>(sh, v, call, ahead, seq_lens, last_loc,
                                                       batch, total_tokens, total_pages, out, tab);
  else
    decode_block<BLOCK, Index, ROWS, false, ONE, AHEAD>(sh, v, call, ahead, seq_lens, last_loc,
                                                        batch, total_tokens, total_pages, out,
                                                        tab);
}

}  // namespace kvp
