// The ticketed multi-block allocation kernel (kvp_extend_*): alloc_extend of more than 1,024
// requests and alloc_decode of more than 4,096 (more than 1,024 by row, or where the device
// runs no clusters: decode_cluster.cuh), many blocks of EXTEND_BLOCK threads, a block
// a run of requests, the last block to finish deciding the call. Included by pool.cu after
// extend_writes.cuh, whose token loop it shares.

namespace kvp {

// A block whose requests have at least this many tokens on average writes them with
// write_slots' loop. That loop for every block (runs s26-3, s26-4): 300-4,096 requests of 512
// tokens 0.90-0.97x the time, of 16 to 64 tokens 1.00-1.04x, decodes of 2,048-4,096
// 0.96-1.03x; with this cut (run s26-4): 512 tokens 0.91-0.97x, 128 tokens 0.98-1.01x, 16
// and 64 tokens and decodes 0.94-1.00x.
constexpr uint32_t LONG_REQUEST = 128;

// The requests' offsets the block publishes for its token loop (write_slots reads them by
// these names) and its staged new pages.
template <int BLOCK>
struct GridShared {
  unsigned long long tok_off[BLOCK + 1];  // each request's first token, and the block's total
  unsigned long long page_off[BLOCK];     // each request's first new page's rank
  unsigned long long part1[BLOCK];        // tokens into the prefix's partial page
  long long last[BLOCK];                  // last_loc as read
  uint32_t pages[STAGE_CAP];              // the block's new pages, from the ring
};

// alloc_extend (decode = 0) and alloc_decode (decode = 1: prefix = seq - 1, one token each).
// Block b owns requests [b*per_block, (b+1)*per_block). The last block to finish commits the
// cursor or, if any block found a bad last_loc, reverts the new pages and zeroes `out`.
//
// `total_tokens` / `total_pages` are the host's plan from its copies of the lengths; the
// kernel reads the device copies. No write ever passes out[total_tokens) and no page past the
// planned run of the ring is taken: a request whose device lengths overrun the plan (or are
// invalid), or device totals short of it, fault the call (ERR_LENGTHS naming the request).
//
// Fill points: a new page gets its own as it is staged or (LONG_REQUEST) from the thread
// writing its first token (nobody else may look at a page this call takes); a prefix page's
// advances in its request's check (see check_last_loc) and is restored if the call fails.
template <int BLOCK, typename Index>
__device__ void extend(View v, Call call, const long long *prefix_lens, const long long *seq_lens,
                       const Index *last_loc, uint32_t batch, uint32_t per_block, uint32_t decode,
                       unsigned long long total_tokens, unsigned long long total_pages,
                       Index *out) {
  __shared__ GridShared<BLOCK> sh;
  auto &tok_off = sh.tok_off;
  auto &page_off = sh.page_off;
  auto &part1 = sh.part1;
  auto &last = sh.last;
  auto &pages = sh.pages;
  __shared__ unsigned long long errors;
  // Published by the first barrier below (in block_scan_pair or block_sum_pair); nothing
  // reports before it.
  if (threadIdx.x == 0) errors = NO_ERROR;
  Header *h = v.header;
  const Cursor c = h->cursor[call.in];
  const uint32_t n = v.num_pages;
  const bool dead = dead_call(h->fault, c, call);
  const bool short_ = !dead && c.free_len < total_pages;

  const uint32_t first = blockIdx.x * per_block;
  const uint32_t mine = first < batch ? min(per_block, batch - first) : 0;

  // The lengths of the requests before this block's, BEFORE_BATCH per thread at a time,
  // predicated (no branch between the loads, so a batch is in flight at once): the first
  // batch is loaded now, so its round trip overlaps the last_loc checks' below (the last
  // block of a 4,096-request decode adds up 3,840 requests: 15 per thread).
  constexpr uint32_t BEFORE_BATCH = 4;
  long long bq[BEFORE_BATCH], bp[BEFORE_BATCH];
  // The sums below skip a slot past `first` for the whole warp (and so every later one), the
  // same branch for all lanes; in a warp that straddles `first`, a slot past it holds zero
  // lengths, an empty request.
  auto warp_done = [&](uint32_t base, uint32_t u) {
    return base - (threadIdx.x & 31) + u * BLOCK >= first;
  };
  auto load_before = [&](uint32_t base) {
    // A warp with no slot of the batch before `first` skips it whole: one branch ahead of
    // the loads (a branch between them would serialize their round trips).
    if (warp_done(base, 0)) {
#pragma unroll
      for (uint32_t u = 0; u < BEFORE_BATCH; ++u) bq[u] = bp[u] = 0;
      return;
    }
#pragma unroll
    for (uint32_t u = 0; u < BEFORE_BATCH; ++u) {
      const unsigned long long i = base + (unsigned long long)u * BLOCK;
      const bool in = i < first;
      bq[u] = in ? seq_lens[i] : 0;
      bp[u] = !in ? 0 : decode ? bq[u] - 1 : prefix_lens[i];
    }
  };
  if (first > 0) load_before(threadIdx.x);

  // This block's requests, so their loads overlap the reduction below.
  const uint32_t r = threadIdx.x;
  Shape s{0, 0, 0};
  long long ll = -1;
  bool sane = true;
  uint32_t err = ERR_NONE, named = first + r;
  if (r < mine) {
    // The request's three loads first, so that one round trip serves them (the shape's
    // branch would otherwise hold the last_loc load back until the lengths arrived).
    const long long seq = seq_lens[first + r];
    const long long prefix = decode ? seq - 1 : prefix_lens[first + r];
    ll = (long long)last_loc[first + r];
    s = usable_shape(v, prefix, seq, &sane);
    if (!dead) {
      // The last_loc checks only decide the verdict, so they run first and their memory
      // latency overlaps the reduction below; they are reported once the block's errors
      // word is published. A page this call allocates meanwhile carries its tag. A batch of
      // one cannot extend a page twice: no claim needed. (Unusable lengths give an empty
      // shape: no claim, no fill point moved; the call fails below.)
      const bool claim = s.part1 > 0 && batch > 1;
      const Requests<Index> req{prefix_lens, seq_lens, last_loc, decode != 0};
      err = check_last_loc(v, call, first + r, ll, (unsigned long long)prefix, s.part1, claim,
                           req, &named);
    }
  }

  // Tokens and new pages of every request before this block's (none before block 0, which
  // skips the reduction: the condition is the same for the whole block), added up from the
  // first batch loaded above and further batches of BEFORE_BATCH requests per thread.
  Pair before{0, 0};
  if (first > 0) {
    for (uint32_t base = threadIdx.x;;) {
#pragma unroll
      for (uint32_t u = 0; u < BEFORE_BATCH; ++u) {
        if (warp_done(base, u)) break;
        bool sane_before;
        const Shape q = usable_shape(v, bp[u], bq[u], &sane_before);
        before.a += q.tokens;
        before.b += q.new_pages;
      }
      // (No wrap: the next base is only formed when it stays below `first`.)
      if (base >= first || first - base <= BEFORE_BATCH * BLOCK) break;
      base += BEFORE_BATCH * BLOCK;
      load_before(base);
    }
    before = block_sum_pair<BLOCK>(before);
  }
  const unsigned long long tok_before = before.a, pages_before = before.b;

  Pair mine_total;
  const Pair rank = block_scan_pair<BLOCK>(Pair{s.tokens, s.new_pages}, &mine_total);
  const unsigned long long tok_rank = rank.a, page_rank = rank.b;
  const unsigned long long my_tokens = mine_total.a, my_pages_total = mine_total.b;
  if (r < mine) {
    tok_off[r] = tok_rank;
    page_off[r] = page_rank;
    part1[r] = s.part1;
    last[r] = ll;
    if (err != ERR_NONE && sane) report(&errors, named, err);
  }
  if (r == 0) tok_off[mine] = my_tokens;
  __syncthreads();

  // Within the plan: this block's writes and pages lie inside out[0, total_tokens) and the
  // planned run of the ring. Otherwise the call fails, and the block writes only zeros, and
  // only inside the buffer.
  const bool fits = tok_before + my_tokens <= total_tokens &&
                    pages_before + my_pages_total <= total_pages;
  const unsigned long long my_writes =
      fits ? my_tokens : (tok_before < total_tokens ? total_tokens - tok_before : 0);

  // The block's new pages are one run of the ring: stage them in shared memory with one
  // coalesced pass (marking each allocated), so the token loop below makes no global loads.
  // A block with more pages than fit (the host sizes blocks to avoid it) reads the ring.
  const bool live = !dead && !short_ && fits;
  const bool staged = my_pages_total <= STAGE_CAP;
  // Requests of LONG_REQUEST tokens or more on average: the token loop is write_slots'
  // (below), whose thread writing a new page's first token sets its fill point. Shorter ones
  // and decodes: the staging sets every new page's fill point, as if full (a decode's: its
  // one token), and each request's last new page gets its own after the barrier.
  const bool long_requests = !decode && my_tokens >= (unsigned long long)LONG_REQUEST * mine;
  if (live) {
    const uint32_t full = decode ? 1u : v.page_size;
    // STAGE_BATCH pages a thread at a time: their ring loads are issued together (the
    // stores between them would otherwise keep each load behind the previous page's).
    constexpr uint32_t STAGE_BATCH = 4;
    for (unsigned long long k0 = threadIdx.x; k0 < my_pages_total; k0 += STAGE_BATCH * BLOCK) {
      uint32_t batch_pages[STAGE_BATCH];
#pragma unroll
      for (uint32_t u = 0; u < STAGE_BATCH; ++u) {
        const unsigned long long k = k0 + u * BLOCK;
        if (k < my_pages_total) batch_pages[u] = v.ring[ring_pos(c.head, pages_before + k, n)];
      }
#pragma unroll
      for (uint32_t u = 0; u < STAGE_BATCH; ++u) {
        const unsigned long long k = k0 + u * BLOCK;
        if (k >= my_pages_total) break;
        const uint32_t page = batch_pages[u];
        v.state[page] = page_word(KIND_ALLOCATED, call.tag);
        if (v.page_size > 1 && !long_requests) v.fill[page] = fill_word(call.tag, full);
        if (staged) pages[k] = page;
      }
    }
  }
  __syncthreads();
  if (live && long_requests) {
    // A request's offsets read once, in 32 bits where the plan allows, the page size's kind
    // known; the block's slots from out[tok_before], its pages' ranks from pages_before (a
    // ring read past STAGE_CAP pages starts at that rank's position).
    Cursor from = c;
    from.head = ring_pos(c.head, pages_before, n);
    if (v.page_shift != NOT_POW2)
      write_call_slots<BLOCK, true, false, true, false>(sh, v, call, from, mine, staged, 0, 0, 0,
                                                        my_writes, total_tokens, total_pages,
                                                        out + tok_before, {});
    else
      write_call_slots<BLOCK, true, false, false, false>(sh, v, call, from, mine, staged, 0, 0,
                                                         0, my_writes, total_tokens,
                                                         total_pages, out + tok_before, {});
  } else {
    if (live && !decode && v.page_size > 1 && r < mine && s.new_pages > 0) {
      // The tokens in the request's last new page (1..page_size; a full one is already set).
      const unsigned long long tail = mod_ps(s.tokens - s.part1 - 1, v) + 1;
      if (tail < v.page_size) {
        const unsigned long long k = page_rank + s.new_pages - 1;
        const uint32_t page = staged ? pages[k] : v.ring[ring_pos(c.head, pages_before + k, n)];
        v.fill[page] = fill_word(call.tag, tail);
      }
    }
    uint32_t lo = 0;  // the request of the thread's last token
    for (unsigned long long t = threadIdx.x; t < my_writes; t += BLOCK) {
      Index slot = 0;
      if (live) {
        lo = request_of(tok_off, mine, lo, t);
        const unsigned long long k = t - tok_off[lo];
        if (k < part1[lo]) {
          slot = (Index)(last[lo] + 1 + (long long)k);
        } else {
          const unsigned long long j = k - part1[lo];
          const unsigned long long rank = page_off[lo] + div_ps(j, v);
          const uint32_t page =
              staged ? pages[rank] : v.ring[ring_pos(c.head, pages_before + rank, n)];
          slot = (Index)((unsigned long long)page * v.page_size + mod_ps(j, v));
        }
      }
      out[tok_before + t] = slot;
    }
  }

  // Whether the device lengths agree with the plan only decides the verdict: checked after
  // the writes (which the plan already bounds). Named: an unusable request, else the first
  // request that runs past the plan, else (device totals short of it) the last request.
  if (r < mine && (!sane || tok_before + tok_rank + s.tokens > total_tokens ||
                   pages_before + page_rank + s.new_pages > total_pages))
    report(&errors, first + r, ERR_LENGTHS);
  if (r == 0 && blockIdx.x == gridDim.x - 1 &&
      (tok_before + my_tokens < total_tokens || pages_before + my_pages_total < total_pages))
    report(&errors, batch - 1, ERR_LENGTHS);

  if (!conclude(h, &errors)) return;
  const unsigned long long verdict = errors;
  const bool failed = !dead && (short_ || verdict != NO_ERROR);
  if (failed) {
    // Undo: the new pages go back to free, the prefix pages this call advanced get their fill
    // points back, every output becomes the padding slot.
    if (!short_) {
      for (unsigned long long k = threadIdx.x; k < total_pages; k += BLOCK)
        v.state[v.ring[ring_pos(c.head, k, n)]] = page_word(KIND_FREE, 0);
    }
    if (v.page_size > 1) {
      for (uint32_t i = threadIdx.x; i < batch; i += BLOCK) {
        const long long prev = (long long)last_loc[i];
        if (slot_error(prev, v) != ERR_NONE) continue;
        const uint32_t page = (uint32_t)div_ps((unsigned long long)prev, v);
        if (fill_tag(v.fill[page]) == call.tag) v.fill[page] = fill_word(0, v.fill_prev[page]);
      }
    }
    for (unsigned long long t = threadIdx.x; t < total_tokens; t += BLOCK) out[t] = 0;
  } else if (dead) {
    // Blocks wrote zeros where the device lengths put their tokens; the plan's whole output
    // must be the padding slot, even where those disagree with it.
    for (unsigned long long t = threadIdx.x; t < total_tokens; t += BLOCK) out[t] = 0;
  }
  if (threadIdx.x == 0) {
    const long long value = fault_value(failed, short_, verdict, seq_lens,
                                        [&](unsigned long long pos) { return (long long)last_loc[pos]; });
    conclude_take(v, call, c, total_pages, dead, failed, short_, verdict, value);
  }
}

}  // namespace kvp
