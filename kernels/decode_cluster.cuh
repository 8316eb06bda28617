// alloc_decode (and alloc_decode_rows) of more requests than one block holds (DECODE_BATCH <
// batch <= CLUSTER * BLOCK), a request a thread, on one thread block cluster (sm_90): the
// blocks of a cluster share their shared memory and a hardware barrier, so they decide the
// call together as decode_block's one block does, without the ticketed kernel's grid-wide
// round trips through global memory. Included by pool.cu after decode_block.cuh, whose checks
// and verdict (the smallest position, then the smallest code) it makes; what crosses blocks:
//
// - ranks: each warp stores its two counts into every block, so that after the barrier a
//   lane reads every block's count of its warp from its own block and warp reductions add
//   them up;
// - the ring's first CLUSTER * BLOCK pages from the head, one a thread: a starting request
//   reads its page from the block that loaded it;
// - two requests continuing one page (by row, also two requests of one row): one
//   open-addressing table spread over the blocks' shared memory (block b holds slots
//   [2 * BLOCK * b, 2 * BLOCK * (b + 1))), entered with atomics on the owning block's memory,
//   at most half full; the second of two to enter reports the later in batch order;
// - errors: a report lowers the error word of every block, so each reads the verdict from
//   its own memory.
//
// Barriers: (1) its arrive right after the blocks clear their tables and error words, its
// wait before the first access to another block's memory; (2) after the table, the counts and
// the reports, made once every block's page words are in: then, where the device totals are
// the plan's, the verdict is in (a call whose totals are not gets decode_block's length
// reports and a barrier (3); it fails), and the call is written after it, nothing written
// before (no undo); a last, relaxed barrier keeps every block until the starting requests
// have read their pages from it. (A first version with barrier (3) for every call and the
// call written before it, as decode_block does, took 1.15-1.37x the time: BENCHMARKS.md,
// twenty-eighth session.)
//
// ROWS: by request row, as decode_block (rows checked and seen once, last_loc from the table,
// the slot into the table and to `out` when it is not NULL; rows meet in a second table).
// Only sm_90 has clusters: the host launches these kernels only where the device supports
// cluster launches and fits a cluster of 8 blocks (`cuOccupancyMaxActiveClusters`).

namespace kvp {

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define KVP_CLUSTERS 1
#define KVP_CLUSTER_DIMS(N) __cluster_dims__(N, 1, 1)
#else
#define KVP_CLUSTER_DIMS(N)
#endif

// Threads per block of the cluster decode kernels.
constexpr int CLUSTER_BLOCK = 512;

#ifdef KVP_CLUSTERS
__device__ __forceinline__ uint32_t cluster_block_rank() {
  uint32_t rank;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
  return rank;
}
// A cluster barrier in two halves: memory operations before the arrive happen before those
// after the wait in every thread of the cluster.
__device__ __forceinline__ void cluster_arrive() {
  asm volatile("barrier.cluster.arrive.release;" ::: "memory");
}
// Only an arrival: orders no memory operation (see its one use).
__device__ __forceinline__ void cluster_arrive_relaxed() {
  asm volatile("barrier.cluster.arrive.relaxed;" ::: "memory");
}
__device__ __forceinline__ void cluster_wait() {
  asm volatile("barrier.cluster.wait.acquire;" ::: "memory");
}
// The generic address of `p`'s variable in the shared memory of the cluster's block `rank`.
template <typename T>
__device__ __forceinline__ T *in_block(T *p, uint32_t rank) {
  unsigned long long remote;
  asm volatile("mapa.u64 %0, %1, %2;" : "=l"(remote) : "l"(p), "r"(rank));
  return reinterpret_cast<T *>(remote);
}
#endif

template <int BLOCK, int CLUSTER, bool ROWS>
struct ClusterDecodeShared {
  static constexpr uint32_t SLOTS = 2 * BLOCK;  // this block's share of a table
  unsigned long long table[SLOTS];              // (page << 32 | smallest request + 1), or 0
  unsigned long long row_table[ROWS ? SLOTS : 1];  // (row << 32 | smallest request + 1), or 0
  uint32_t counts[CLUSTER][BLOCK / 32];  // every block's warps' (usable | starts << 16) counts
  uint32_t errors;                       // the smallest (position << 8 | code) reported
  uint32_t ring[BLOCK];                  // ring pages head + rank * BLOCK + thread
};

template <int BLOCK, int CLUSTER, typename Index, bool ROWS, bool POW2>
__device__ __forceinline__ void decode_cluster(ClusterDecodeShared<BLOCK, CLUSTER, ROWS> &sh,
                                               View v, Call call, const long long *seq_lens,
                                               const Index *last_loc, uint32_t batch,
                                               unsigned long long total_tokens,
                                               unsigned long long total_pages, Index *out,
                                               TableArgs tab) {
#ifdef KVP_CLUSTERS
  using Shared = ClusterDecodeShared<BLOCK, CLUSTER, ROWS>;
  constexpr uint32_t SLOTS = Shared::SLOTS, ALL_SLOTS = SLOTS * CLUSTER;
  static_assert((ALL_SLOTS & (ALL_SLOTS - 1)) == 0, "the table's size is a power of two");
  static_assert(BLOCK / 32 <= 32 && CLUSTER * BLOCK < (1 << 16), "counts fit 16 bits");
  const uint32_t t = threadIdx.x, lane = t & 31, warp = t >> 5;
  const uint32_t rank = cluster_block_rank();
  const uint32_t r = rank * BLOCK + t;  // the request

  if (t == 0) sh.errors = NO_ERROR32;
  for (uint32_t e = t; e < SLOTS; e += BLOCK) sh.table[e] = 0;
  if (ROWS)
    for (uint32_t e = t; e < SLOTS; e += BLOCK) sh.row_table[e] = 0;
  cluster_arrive();  // (1) ready for other blocks' atomics

  // Round trip 1: the cursor, the fault flag, this thread's request (a thread past the batch
  // reads the last request again and ignores it), and the ring's page of this thread
  // (the address needs the cursor alone).
  Header *h = v.header;
  const Cursor c = h->cursor[call.in];
  const uint32_t found = written_cursor_writer(h, call);
  const bool dead = dead_call(h->fault, c, call);
  const uint32_t i = min(r, batch - 1);
  const long long seq = seq_lens[i];
  const long long row = ROWS ? tab.rows[i] : 0;
  long long ll = ROWS ? -1 : (long long)last_loc[i];
  const uint32_t ring_mine =
      r < v.num_pages ? load_here(&v.ring[ring_pos(c.head, r, v.num_pages)]) : 0u;

  const bool valid = r < batch;
  const long long prefix = seq - 1;
  const bool usable = valid && lengths_sane(v, prefix, seq);
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

  // Round trip 2: the prefix page's words (page 0 stands in when there is nothing to check).
  const bool tracked = v.page_size > 1;
  const bool check = usable && !dead && prefix > 0 && row_err == ERR_NONE;
  uint32_t err = ERR_NONE;
  if (usable && !dead && prefix == 0 && ll != -1) err = ERR_LAST_LOC_EMPTY;
  if (check) err = slot_error(ll, v);
  const uint32_t prefix_page =
      check && err == ERR_NONE ? (uint32_t)div_ps<POW2>((unsigned long long)ll, v) : 0;
  const uint32_t word = v.state[prefix_page];
  const unsigned long long filled = tracked ? v.fill[prefix_page] : 0;
  sh.ring[t] = ring_mine;
  const uint32_t usable_in = __ballot_sync(FULL, usable), starts_in = __ballot_sync(FULL, starts);
  const unsigned long long in_page = mod_ps<POW2>((unsigned long long)ll, v);

  // decode_block's checks, in its order.
  bool enters = false;
  if (check && err == ERR_NONE) {
    if (kind_of(word) != KIND_ALLOCATED) err = unallocated_error(word);
    else if (tag_of(word) == call.tag) err = ERR_NOT_ALLOCATED;
    else if (mod_ps<POW2>((unsigned long long)ll + 1, v) != mod_ps<POW2>((unsigned long long)prefix, v))
      err = ERR_LAST_LOC;
    else if (tracked && fill_tag(filled) == call.tag) err = ERR_SHARED_PAGE;
    else if (tracked && fill_of(filled) != in_page + 1) err = ERR_FILL;
    else enters = continues;
  }
  uint32_t key = NO_ERROR32;
  auto report = [&](uint32_t pos, uint32_t code) { key = min(key, (pos << 8) | code); };
  if (err != ERR_NONE) report(r, err);
  if (row_err != ERR_NONE) report(r, row_err);
  if (valid && row_err == ERR_NONE && !usable) report(r, ERR_LENGTHS);

  cluster_wait();  // (1): every block has started, its table and error word are ready
  // This warp's counts, to every block.
  if (lane == 0) {
    const uint32_t counted = __popc(usable_in) | (__popc(starts_in) << 16);
#pragma unroll
    for (uint32_t b = 0; b < (uint32_t)CLUSTER; ++b) *in_block(&sh.counts[rank][warp], b) = counted;
  }
  // The page of a continuing request (by row, also its row) into a table of the cluster
  // (linear probing over the blocks' shares; an entry keeps its key's smallest request). Of
  // two requests of one key, the one that enters second learns of the other from the entry
  // and reports the later of the two in batch order: the second request of every key is
  // reported whatever the order of entry, a key's first never, as by decode_block's tables.
  auto enter = [&](unsigned long long *table, uint32_t key_of, uint32_t code) {
    const unsigned long long mine = ((unsigned long long)key_of << 32) | (r + 1u);
    for (uint32_t pos = (key_of * 2654435761u) & (ALL_SLOTS - 1);;
         pos = (pos + 1) & (ALL_SLOTS - 1)) {
      unsigned long long *e = in_block(&table[pos % SLOTS], pos / SLOTS);
      const unsigned long long old = atomicCAS(e, 0ull, mine);
      if (old == 0) return;
      if ((uint32_t)(old >> 32) == key_of) {
        const uint32_t other = (uint32_t)atomicMin(e, mine) - 1u;
        report(max(other, r), code);
        return;
      }
    }
  };
  if (enters) enter(sh.table, prefix_page, ERR_SHARED_PAGE);
  if (ROWS && valid && row_err == ERR_NONE) enter(sh.row_table, (uint32_t)row, ERR_ROW_TWICE);
  if (key != NO_ERROR32) {
#pragma unroll
    for (uint32_t b = 0; b < (uint32_t)CLUSTER; ++b) atomicMin(in_block(&sh.errors, b), key);
  }
  cluster_arrive();  // (2): the counts, the reports; every block's page words are in
  cluster_wait();

  // Ranks over the cluster, from the counts every block sent.
  uint32_t before = 0, all = 0;
#pragma unroll
  for (uint32_t b = 0; b < (uint32_t)CLUSTER; ++b) {
    const uint32_t counted = lane < BLOCK / 32 ? sh.counts[b][lane] : 0;
    const uint32_t block_all = __reduce_add_sync(FULL, counted);
    all += block_all;
    if (b < rank) before += block_all;
    else if (b == rank) before += __reduce_add_sync(FULL, lane < warp ? counted : 0);
  }
  const uint32_t below = (1u << lane) - 1;
  const uint32_t tok_rank = (before & 0xffff) + __popc(usable_in & below);
  const uint32_t page_rank = (before >> 16) + __popc(starts_in & below);
  const uint32_t tokens = all & 0xffff, new_pages = all >> 16;

  // Device lengths that disagree with the plan (the same totals in every block, so every
  // block takes this branch or none): decode_block's reports of them, and a third barrier.
  // Where the totals are the plan's, a request's ranks stay within it, and the only such
  // report is an unusable request's, made above: the verdict is in.
  if (tokens != total_tokens || new_pages != total_pages) {
    key = NO_ERROR32;
    if (valid && row_err == ERR_NONE &&
        (!usable || tok_rank + 1ull > total_tokens ||
         page_rank + (starts ? 1ull : 0ull) > total_pages))
      report(r, ERR_LENGTHS);
    if (r == 0 && (tokens < total_tokens || new_pages < total_pages))
      report(batch - 1, ERR_LENGTHS);
    if (key != NO_ERROR32) {
#pragma unroll
      for (uint32_t b = 0; b < (uint32_t)CLUSTER; ++b) atomicMin(in_block(&sh.errors, b), key);
    }
    cluster_arrive();  // (3)
    cluster_wait();
  }
  const unsigned long long verdict = widen_error(sh.errors);
  const bool short_ = !dead && c.free_len < total_pages;
  const bool failed = !dead && (short_ || verdict != NO_ERROR);

  if (!dead && !failed) {
    // The call takes effect: a starting request's page from the block that loaded it
    // (page_rank < new_pages <= free_len), its words; a continuing one's fill point.
    uint32_t page = 0;
    if (starts) page = *in_block(&sh.ring[page_rank % BLOCK], page_rank / BLOCK);
    Index slot = (Index)(ll + 1);
    if (starts) {
      v.state[page] = page_word(KIND_ALLOCATED, call.tag);
      if (tracked) v.fill[page] = fill_word(call.tag, 1);
      slot = (Index)((unsigned long long)page * v.page_size);
    } else if (continues) {
      v.fill[prefix_page] = fill_word(call.tag, in_page + 2);
    }
    if (valid && (!ROWS || out != nullptr)) out[r] = slot;
    if (ROWS && valid)
      table_put(tab.table, tab.wide, (unsigned long long)row * tab.stride + prefix, (long long)slot);
    if (r == 0)
      commit_found<Replay::ON_WRITTEN>(v, call, taken_cursor(v, c, total_pages), found);
  } else {
    // Dead, short or failed: the plan's whole output is the padding slot.
    if (!ROWS || out != nullptr)
      for (unsigned long long o = r; o < total_tokens; o += (unsigned long long)CLUSTER * BLOCK)
        out[o] = 0;
    if (r == 0) {
      // The value a fault names: the length, the row, or last_loc as read (from the table
      // by row: nothing was written, so it reads the same).
      const unsigned long long pos = verdict >> 8;
      const uint32_t code = (uint32_t)(verdict & 0xff);
      long long value = 0;
      if (failed && !short_) {
        if (code == ERR_LENGTHS || code == ERR_ROW_LEN) value = seq_lens[pos];
        else if (code == ERR_ROW || code == ERR_ROW_TWICE) value = tab.rows[pos];
        else if (ROWS)
          value = table_entry<Index>(table_at(
              tab.table, tab.wide, (unsigned long long)tab.rows[pos] * tab.stride + seq_lens[pos] - 2));
        else value = (long long)last_loc[pos];
      }
      conclude_take<Replay::ON_WRITTEN>(v, call, c, total_pages, dead, failed, short_, verdict,
                                        value, found);
    }
  }
  // No block leaves while another may still read its shared memory: a starting request's
  // read of the ring above returned before its stores, which use the page, were issued.
  cluster_arrive_relaxed();
  cluster_wait();
#else
  __trap();  // no clusters before sm_90: the host never launches this kernel there
#endif
}

template <int BLOCK, int CLUSTER, typename Index, bool ROWS = false>
__device__ void decode_cluster_kernel(View v, Call call, const long long *seq_lens,
                                      const Index *last_loc, uint32_t batch,
                                      unsigned long long total_tokens,
                                      unsigned long long total_pages, Index *out,
                                      TableArgs tab = {}) {
  __shared__ ClusterDecodeShared<BLOCK, CLUSTER, ROWS> sh;
  if (v.page_shift != NOT_POW2)
    decode_cluster<BLOCK, CLUSTER, Index, ROWS, true>(sh, v, call, seq_lens, last_loc, batch,
                                                      total_tokens, total_pages, out, tab);
  else
    decode_cluster<BLOCK, CLUSTER, Index, ROWS, false>(sh, v, call, seq_lens, last_loc, batch,
                                                       total_tokens, total_pages, out, tab);
}

}  // namespace kvp
