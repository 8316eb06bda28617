// Request-to-token tables (SGLang's req_to_token): allocation, frees and FlashInfer page
// tables by request row. Included by pool.cu after the extend and free kernels. Host side:
// src/cuda/rows.rs; semantics: src/pool/rows.rs (the host backend is the oracle).
//
// A rows call is one call of the pool (one Call record). An allocation the one-block kernels
// serve is one kernel (extend_block.cuh with a TableArgs: rows checked, last_loc read from
// the table, slots written into it); others, and frees, are several kernels on the
// caller's stream:
//   alloc_extend_rows / alloc_decode_rows of a large batch:
//     rows_gather  (one block) checks the rows (in the table, distinct, seq <= row_len),
//                  reads each request's last_loc from the table into the pool's scratch and
//                  the requests' token offsets; a bad row faults the pool (naming the
//                  request), so the next kernel does nothing;
//     extend       the unchanged extend kernel (warp, block or multi-block), reading last_loc
//                  from the scratch and writing out (the caller's out_cache_loc or scratch);
//     rows_scatter (any grid) copies out into the table rows, unless the pool is faulted:
//                  a failing call writes nothing to the table. An extend's block stages
//                  the requests of its run of tokens, found by one block-wide search.
//   free_rows:
//     rows_segments (one block) checks rows and segments and lays the segments' slots out as
//                  one row of whole pages in the scratch (a segment's partial last page padded
//                  with the slots that continue it), so that
//     free_known   (FREE_SEGMENT / FREE_SLOTS) frees them as one segment.
//   page_table: one block, reads the table and writes kv_indptr / kv_indices /
//     kv_last_page_len (no pool state: no Call).
//
// Duplicate rows are found with a mark word per table row in the scratch (zero between
// calls): each request atomicMax-es ~request into its row's word, a barrier, a request whose
// row holds another request's mark is a repeat (the smallest request of a row keeps it, so
// the repeat named is the second in batch order, as on the host), a barrier, the words are
// zeroed. One block makes the barriers plain __syncthreads; the block loops over any batch.

namespace kvp {

constexpr int ROWS_BLOCK = 1024;

// Exclusive block-wide scan of one value per thread (ROWS_BLOCK threads); returns the
// exclusive prefix and sets *total. Ends with a barrier (shared scratch reusable).
__device__ unsigned long long rows_scan(unsigned long long x, unsigned long long *total) {
  __shared__ unsigned long long warp_sums[ROWS_BLOCK / 32];
  const uint32_t lane = threadIdx.x & 31, w = threadIdx.x >> 5;
  unsigned long long inc = x;
#pragma unroll
  for (int d = 1; d < 32; d <<= 1) {
    const unsigned long long y = __shfl_up_sync(0xffffffffu, inc, d);
    if (lane >= (uint32_t)d) inc += y;
  }
  if (lane == 31) warp_sums[w] = inc;
  __syncthreads();
  if (w == 0) {
    unsigned long long s = lane < ROWS_BLOCK / 32 ? warp_sums[lane] : 0;
#pragma unroll
    for (int d = 1; d < 32; d <<= 1) {
      const unsigned long long y = __shfl_up_sync(0xffffffffu, s, d);
      if (lane >= (uint32_t)d) s += y;
    }
    warp_sums[lane] = s;  // inclusive sums of the warps
  }
  __syncthreads();
  const unsigned long long before = (w > 0 ? warp_sums[w - 1] : 0) + inc - x;
  *total = warp_sums[ROWS_BLOCK / 32 - 1];
  __syncthreads();
  return before;
}

// Marks each valid row of the batch, then reports every repeat. `row_of(i)` returns the row
// of request i or -1 when it has none (invalid: already reported).
template <typename RowOf>
__device__ void find_repeats(uint32_t *marks, uint32_t batch, unsigned long long *errors,
                             RowOf row_of) {
  for (uint32_t i = threadIdx.x; i < batch; i += ROWS_BLOCK) {
    const long long row = row_of(i);
    if (row >= 0) atomicMax(&marks[row], ~i);
  }
  __syncthreads();
  for (uint32_t i = threadIdx.x; i < batch; i += ROWS_BLOCK) {
    const long long row = row_of(i);
    if (row >= 0 && marks[row] != ~i) report(errors, i, ERR_ROW_TWICE);
  }
  __syncthreads();
  for (uint32_t i = threadIdx.x; i < batch; i += ROWS_BLOCK) {
    const long long row = row_of(i);
    if (row >= 0) marks[row] = 0;
  }
}

// alloc_extend_rows / alloc_decode_rows, kernel 1 (one block). `prefix_lens` is NULL for a
// decode (prefix = seq - 1). Writes last_loc[0 .. batch) and, for an extend, the exclusive
// token offsets tok_off[0 .. batch] of the device lengths (unusable lengths count as empty:
// the extend kernel faults the call for them).
template <typename Index>
__device__ void rows_gather(View v, Call call, const void *table, uint32_t wide,
                           unsigned long long table_rows, unsigned long long stride,
                           unsigned long long row_len, const long long *rows,
                           const long long *prefix_lens, const long long *seq_lens,
                           uint32_t batch, uint32_t *marks, Index *last_loc,
                           unsigned long long *tok_off) {
  __shared__ unsigned long long errors;
  __shared__ unsigned long long carry;
  init_errors(&errors);
  if (v.header->fault != 0) return;  // dead: every kernel of the call does nothing
  if (threadIdx.x == 0) carry = 0;
  auto row_of = [&](uint32_t i) -> long long {
    const long long row = rows[i];
    return row >= 0 && (unsigned long long)row < table_rows ? row : -1;
  };
  // Chunks of ROWS_BLOCK requests, a request a thread (the scan needs every thread).
  for (uint32_t base = 0; base < batch; base += ROWS_BLOCK) {
    const uint32_t i = base + threadIdx.x;
    unsigned long long tokens = 0;
    if (i < batch) {
      const long long row = rows[i];
      const long long seq = seq_lens[i];
      const long long prefix = prefix_lens ? prefix_lens[i] : seq - 1;
      long long ll = -1;
      if (row < 0 || (unsigned long long)row >= table_rows) {
        report(&errors, i, ERR_ROW);
      } else if (seq > 0 && (unsigned long long)seq > row_len) {
        report(&errors, i, ERR_ROW_LEN);
      } else if (prefix >= 0 && seq >= prefix) {
        if (prefix > 0) {
          ll = table_entry<Index>(
              table_at(table, wide, (unsigned long long)row * stride + prefix - 1));
        }
        tokens = (unsigned long long)(seq - prefix);
      }
      last_loc[i] = (Index)ll;
    }
    if (prefix_lens) {
      unsigned long long total;
      const unsigned long long before = rows_scan(tokens, &total);
      if (i < batch) tok_off[i] = carry + before;
      __syncthreads();
      if (threadIdx.x == 0) carry += total;
      __syncthreads();
    }
  }
  if (prefix_lens && threadIdx.x == 0) tok_off[batch] = carry;
  __syncthreads();
  find_repeats(marks, batch, &errors, row_of);
  __syncthreads();
  const unsigned long long verdict = errors;
  if (threadIdx.x == 0 && verdict != NO_ERROR) {
    const unsigned long long pos = verdict >> 8;
    const long long value = (verdict & 0xff) == ERR_ROW_LEN ? seq_lens[pos] : rows[pos];
    raise_fault(v, call, verdict, value);
  }
}

// The last request i in [0, batch) with tok_off[i] <= t (tok_off[0] = 0 <= t), searched by
// the whole block at once: each round tests blockDim.x evenly spaced offsets and counts the
// ones at or below t (one load and one barrier a round; two rounds up to 65,536 requests on
// 256 threads). Every thread must call it; every thread gets the answer.
__device__ uint32_t block_request_of(const unsigned long long *tok_off, uint32_t batch,
                                     unsigned long long t) {
  uint32_t lo = 0, len = batch;  // the answer lies in [lo, lo + len)
  while (len > 1) {
    const uint32_t step = (len + blockDim.x - 1) / blockDim.x;
    const unsigned long long k = (unsigned long long)threadIdx.x * step;
    const bool below = k < len && tok_off[lo + k] <= t;
    const uint32_t count = (uint32_t)__syncthreads_count(below);  // >= 1: k = 0
    lo += (count - 1) * step;
    len = min(step, len - (count - 1) * step);
  }
  return lo;
}

// Threads of kvp_rows_scatter_* (kernels/pool.cu) and the requests it stages at once.
constexpr uint32_t SCATTER_BLOCK = 256;
// The most tokens of an extend a scatter thread takes per run (their loads in flight at once).
constexpr uint32_t SCATTER_TOKENS = 4;

// alloc_extend_rows / alloc_decode_rows, kernel 3 (any grid): out[t] into the table, unless
// the pool is faulted (by this call's gather or extend kernel, or earlier).
//
// An extend's tokens are cut into runs of at most SCATTER_TOKENS * SCATTER_BLOCK tokens (a
// multiple of 32, so a warp's loads and stores stay whole), one a block at a time. The block
// loads its run's slots first, so that their round trip overlaps the rest; finds the request
// of the run's first token together (block_request_of); then stages SCATTER_BLOCK requests
// at a time in shared memory (first token, and where token 0 of the call would land in the
// table were it the request's), so that a token finds its request among at most
// SCATTER_BLOCK staged offsets (most often the one its previous token had) and its table
// position is one add. A decode's token t is request t.
template <typename Index>
__device__ void rows_scatter(View v, void *table, uint32_t wide, unsigned long long stride,
                            const long long *rows, const long long *prefix_lens,
                            const long long *seq_lens, uint32_t batch,
                            const unsigned long long *tok_off, const Index *out,
                            unsigned long long tokens) {
  if (*(volatile uint32_t *)&v.header->fault != 0) return;
  if (prefix_lens == nullptr) {
    const unsigned long long step = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long t = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
         t < tokens; t += step) {
      const unsigned long long pos = (unsigned long long)(seq_lens[t] - 1);
      table_put(table, wide, (unsigned long long)rows[t] * stride + pos, (long long)out[t]);
    }
    return;
  }
  __shared__ unsigned long long first[SCATTER_BLOCK + 1];  // staged requests' first tokens
  __shared__ unsigned long long origin[SCATTER_BLOCK];     // their table position less first
  // The run: the grid's share of the tokens, rounded up to 32, at most SCATTER_TOKENS a
  // thread (a smaller grid loops).
  const unsigned long long share = (tokens + gridDim.x - 1) / gridDim.x;
  const unsigned long long run =
      min((share + 31) & ~31ull, (unsigned long long)SCATTER_TOKENS * SCATTER_BLOCK);
  for (unsigned long long t0 = blockIdx.x * run; t0 < tokens; t0 += gridDim.x * run) {
    const unsigned long long t1 = min(t0 + run, tokens);  // the run is [t0, t1)
    // The thread's tokens t0 + threadIdx.x + k * SCATTER_BLOCK and their slots.
    long long slot[SCATTER_TOKENS];
#pragma unroll
    for (uint32_t k = 0; k < SCATTER_TOKENS; ++k) {
      const unsigned long long t = t0 + threadIdx.x + k * SCATTER_BLOCK;
      slot[k] = t < t1 ? (long long)out[t] : 0;
    }
    for (uint32_t w = block_request_of(tok_off, batch, t0);;) {
      // Stage requests [w, w + m) and their end; m >= 1 (w < batch: the loop below leaves
      // before w reaches batch).
      const uint32_t m = min(SCATTER_BLOCK, batch - w);
      const uint32_t j = threadIdx.x;
      if (j < m) {
        const uint32_t i = w + j;
        const unsigned long long at = tok_off[i];
        first[j] = at;
        origin[j] =
            (unsigned long long)rows[i] * stride + (unsigned long long)prefix_lens[i] - at;
      }
      if (j == 0) first[m] = tok_off[w + m];  // tok_off[batch]: the call's tokens
      __syncthreads();
      uint32_t q = 0;  // the request of the thread's previous token (staged index)
#pragma unroll
      for (uint32_t k = 0; k < SCATTER_TOKENS; ++k) {
        const unsigned long long t = t0 + threadIdx.x + k * SCATTER_BLOCK;
        if (t >= t1 || t < first[0] || t >= first[m]) continue;  // not this stage's
        if (first[q + 1] <= t) {
          // The last staged request starting at or before t, past q.
          uint32_t a = q + 1, b = m;  // first[a] <= t < first[b]
          while (b - a > 1) {
            const uint32_t mid = a + (b - a) / 2;
            if (first[mid] <= t) a = mid;
            else b = mid;
          }
          q = a;
        }
        table_put(table, wide, origin[q] + t, slot[k]);
      }
      const bool more = first[m] < t1 && w + m < batch;  // the same for the whole block
      __syncthreads();  // every thread is done with this stage before the next overwrites it
      if (!more) break;
      w += m;
    }
  }
}

// free_rows, kernel 1 (one block): checks rows and segments and writes segment i's slots at
// virt[off_i ..], padded to whole pages (ps = 1: unpadded), off_i the exclusive sum of the
// padded lengths; the host planned virt_len from its copies of starts/ends.
template <typename Index>
__device__ void rows_segments(View v, Call call, const void *table, uint32_t wide,
                             unsigned long long table_rows, unsigned long long stride,
                             unsigned long long row_len, const long long *rows,
                             const long long *starts, const long long *ends, uint32_t batch,
                             uint32_t *marks, Index *virt, unsigned long long virt_len) {
  __shared__ unsigned long long errors;
  __shared__ unsigned long long carry;
  init_errors(&errors);
  if (v.header->fault != 0) return;
  if (threadIdx.x == 0) carry = 0;
  const unsigned long long ps = v.page_size;
  auto row_of = [&](uint32_t i) -> long long {
    const long long row = rows[i];
    return row >= 0 && (unsigned long long)row < table_rows ? row : -1;
  };
  __shared__ unsigned long long seg_off[ROWS_BLOCK], seg_len[ROWS_BLOCK], seg_pad[ROWS_BLOCK];
  __shared__ unsigned long long seg_at[ROWS_BLOCK];
  for (uint32_t base = 0; base < batch; base += ROWS_BLOCK) {
    const uint32_t i = base + threadIdx.x;
    unsigned long long padded = 0;
    long long row = -1, start = 0, len = 0;
    if (i < batch) {
      row = rows[i];
      start = starts[i];
      const long long end = ends[i];
      // (An empty segment frees nothing, wherever it starts: the host's rule too.)
      if (row < 0 || (unsigned long long)row >= table_rows) {
        report(&errors, i, ERR_ROW);
        row = -1;
      } else if (start < 0 || end < start || (unsigned long long)end > row_len ||
                 (ps > 1 && end > start && mod_ps((unsigned long long)start, v) != 0)) {
        report(&errors, i, ERR_LENGTHS);
        row = -1;
      } else {
        len = end - start;
        padded = ps > 1 ? div_ps((unsigned long long)len + ps - 1, v) * ps : (unsigned long long)len;
      }
    }
    unsigned long long total;
    const unsigned long long before = rows_scan(padded, &total);
    const unsigned long long off = carry + before;
    bool copy = row >= 0 && len > 0;
    if (row >= 0 && off + padded > virt_len) {
      report(&errors, i, ERR_LENGTHS);
      copy = false;
    }
    seg_off[threadIdx.x] = off;
    seg_len[threadIdx.x] = copy ? (unsigned long long)len : 0;
    seg_pad[threadIdx.x] = copy ? padded : 0;
    seg_at[threadIdx.x] = copy ? (unsigned long long)row * stride + (unsigned long long)start : 0;
    __syncthreads();
    // A warp per segment, its lanes over the slots. Padding continues the last page from
    // its first slot (a real one), so it never breaks contiguity; free_known checks the real
    // slots as free_segment does.
    const uint32_t lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    const uint32_t in_chunk = min((uint32_t)ROWS_BLOCK, batch - base);
    for (uint32_t r = w; r < in_chunk; r += ROWS_BLOCK / 32) {
      const unsigned long long n = seg_len[r], at = seg_at[r], o = seg_off[r];
      for (unsigned long long k = lane; k < seg_pad[r]; k += 32) {
        const long long s = k < n ? table_at(table, wide, at + k)
                                  : table_at(table, wide, at + (k - k % ps)) + (long long)(k % ps);
        virt[o + k] = (Index)table_entry<Index>(s);
      }
    }
    __syncthreads();
    if (threadIdx.x == 0) carry += total;
    __syncthreads();
  }
  if (threadIdx.x == 0 && carry != virt_len && batch > 0) report(&errors, batch - 1, ERR_LENGTHS);
  __syncthreads();
  find_repeats(marks, batch, &errors, row_of);
  __syncthreads();
  const unsigned long long verdict = errors;
  if (threadIdx.x == 0 && verdict != NO_ERROR) {
    const unsigned long long pos = verdict >> 8;
    const long long value = (verdict & 0xff) == ERR_LENGTHS ? ends[pos] : rows[pos];
    raise_fault(v, call, verdict, value);
  }
}

// FlashInfer page table (one block; reads only the table and the lengths). Device lengths
// outside 0 .. row_len and rows outside the table count as empty requests; writes to
// kv_indices stop at `capacity` (the host checked its copies of the lengths against it).
__device__ void page_table(const void *table, uint32_t wide, unsigned long long table_rows,
                           unsigned long long stride, unsigned long long row_len,
                           const long long *rows, const long long *seq_lens, uint32_t batch,
                           uint32_t page_size, int *kv_indptr, int *kv_indices,
                           unsigned long long capacity, int *kv_last_page_len) {
  __shared__ unsigned long long carry;
  __shared__ unsigned long long off[ROWS_BLOCK];
  __shared__ unsigned long long npages[ROWS_BLOCK];
  __shared__ long long row_base[ROWS_BLOCK];
  const unsigned long long ps = page_size;
  if (threadIdx.x == 0) {
    carry = 0;
    kv_indptr[0] = 0;
  }
  __syncthreads();
  for (uint32_t base = 0; base < batch; base += ROWS_BLOCK) {
    const uint32_t i = base + threadIdx.x;
    unsigned long long pages = 0;
    long long seq = 0, row = 0;
    if (i < batch) {
      row = rows[i];
      seq = seq_lens[i];
      if (row < 0 || (unsigned long long)row >= table_rows || seq < 0 ||
          (unsigned long long)seq > row_len)
        seq = 0;
      pages = ((unsigned long long)seq + ps - 1) / ps;
    }
    unsigned long long total;
    const unsigned long long before = rows_scan(pages, &total);
    off[threadIdx.x] = carry + before;
    npages[threadIdx.x] = pages;
    row_base[threadIdx.x] = row * (long long)stride;
    if (i < batch) {
      kv_indptr[i + 1] = (int)(carry + before + pages);
      kv_last_page_len[i] = pages == 0 ? 0 : (int)((unsigned long long)seq - (pages - 1) * ps);
    }
    __syncthreads();
    // A warp per request, its lanes over the pages.
    const uint32_t lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    const uint32_t in_chunk = min((uint32_t)ROWS_BLOCK, batch - base);
    for (uint32_t r = w; r < in_chunk; r += ROWS_BLOCK / 32) {
      for (unsigned long long p = lane; p < npages[r]; p += 32) {
        const unsigned long long at = off[r] + p;
        if (at < capacity) {
          const long long slot = table_at(table, wide, (unsigned long long)row_base[r] + p * ps);
          kv_indices[at] = (int)(slot / (long long)ps);
        }
      }
    }
    __syncthreads();
    if (threadIdx.x == 0) carry += total;
    __syncthreads();
  }
}

}  // namespace kvp
