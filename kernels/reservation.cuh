// Multi-step decode reservations (issue 11): the pages of K decode steps of a fixed batch,
// taken at once, so that each step is one small kernel with fixed arguments that a captured
// CUDA graph can replay. Included by pool.cu after rows.cuh. Host side:
// src/cuda/reservation.rs; semantics and the oracle: src/pool/reservation.rs.
//
//   reserve_decode  (one block, a call of the pool): checks every last_loc exactly as
//                   alloc_decode does, takes the planned pages from the ring in the order K
//                   decodes would (step-major), writes the K x batch slot table into the
//                   reservation's memory and advances the fill points as if all K steps ran.
//                   When K plain decodes would merge staged frees at a step s* > 1 (need_sort),
//                   it runs as two calls with the merge between them, as the decodes would:
//                   RES_PHASE_FIRST checks and takes the pages of the steps before s*,
//                   RES_PHASE_REST takes the others from the merged ring and writes the table.
//   reservation_step (one block, NOT a call: no cursor, fixed arguments, capturable): reads
//                   the reservation's step counter s, writes slot row s to `out` (and to the
//                   request-to-token table at [rows[i]][lens[i] + s]), increments s. At
//                   s >= K it writes the padding slot 0, writes no table entry and faults.
//   reservation_finish (one block, a call): checks the counter equals the host's steps_used,
//                   puts the pages no used step touched back at the front of the ring in the
//                   order they were taken, rewinds each request's partly used last page.
//   reservation_unhold (one block, NOT a call): ends the holds of a reservation released
//                   unfinished (its pages stay allocated as if every step ran).
//
// Holds: the reserve marks every page the steps hand slots out of (the new pages and each
// request's partly filled last page) KIND_HELD; frees, rewinds and continuations of a held
// page fault with ERR_HELD, so no request of the batch can be freed (and its page handed to
// another request) while later steps still hand out that page's slots. The finish or the
// unhold makes them KIND_ALLOCATED again (or free, for unused pages).
//
// Page order: request i (holding L tokens) first needs a page at step
// first = (P - L % P) % P + 1, then every P steps. Step s takes one page for each request
// whose `first` is (s - 1) % P + 1, in request order. So a request's page at step s is ring
// position  base(s) + rank_i  with rank_i its rank among the requests of the same `first`
// and base(s) = ((s-1) / P) * (all groups) + (groups 1 .. (s-1) % P): min(P, K) block scans,
// not K.

namespace kvp {

constexpr int RES_BLOCK = 1024;
// Largest K (src/pool/reservation.rs MAX_RESERVED_STEPS): bounds the group table below.
constexpr uint32_t RES_MAX_STEPS = 1024;

enum ReservationErr : uint32_t {
  ERR_RES_OVERRUN = 21,   // a step past the K reserved ones (position K, value the counter)
  ERR_RES_STEPS = 22,     // finish: steps_used (position) != the device counter (value)
  ERR_RES_FINISHED = 23,  // a step after the finish (position K, value the counter)
  ERR_RES_PAGE = 24,      // finish: unused page k (position) is no longer allocated (value)
  ERR_RES_REWIND = 25,    // finish: request i's last used slot's page no longer holds it
  ERR_RES_ENDED = 30,     // a step of a reservation a clear or restore ended (position K,
                          // value the counter)
  ERR_RES_REUSED = 31,    // a step of a reservation whose memory a later reservation took
                          // (position K, value the later reservation's call number)
};

// Lives at the start of the reservation's device memory.
struct ResHeader {
  uint32_t counter;  // steps taken
  uint32_t state;    // RES_*
  uint32_t epoch;    // Header::epoch at the reserve: a later clear or restore ends the
                     // reservation, whose pages it freed (a step graph replayed after it
                     // would hand them out again)
  uint32_t owner;    // the reserve's call number (Call::seq), which every step passes: a step
                     // graph of a freed reservation replayed once a later reservation reuses
                     // the memory finds another number (it would hand out that one's slots)
};
constexpr uint32_t RES_EMPTY = 0;     // the reserve failed (the pool is faulted): steps write 0
constexpr uint32_t RES_LIVE = 1;
constexpr uint32_t RES_FINISHED = 2;
constexpr uint32_t RES_FIRST_TAKEN = 3;  // RES_PHASE_FIRST took its pages; RES_PHASE_REST next

// Which part of a reservation one reserve_decode launch does.
enum ResPhase : uint32_t {
  RES_PHASE_ALL = 0,    // everything, in one call
  RES_PHASE_FIRST = 1,  // checks; the first `first_pages` pages (the steps before the merge)
  RES_PHASE_REST = 2,   // after the merge: the other pages, the slot table, the fill points
};

__device__ inline unsigned long long first_page_step(unsigned long long len, const View &v) {
  return (v.page_size - mod_ps(len, v)) % v.page_size + 1;
}

// Keeps the smallest request (tag << 32 | request + 1) of this call in `word`, replacing a
// word of an earlier call. After a barrier, a request whose key is not the word's repeats
// the page of a smaller request.
__device__ inline void claim_smallest(unsigned long long *word, unsigned long long mine,
                                      uint32_t tag) {
  unsigned long long cur = *(volatile unsigned long long *)word;
  for (;;) {
    if ((uint32_t)(cur >> 32) == tag) {
      atomicMin(word, mine);
      return;
    }
    const unsigned long long prev = atomicCAS(word, cur, mine);
    if (prev == cur) return;
    cur = prev;
  }
}

// `first_pages`: the pages of the steps before the merge (RES_PHASE_FIRST / _REST; ignored
// by RES_PHASE_ALL). Page k of the reservation (step-major order) is ring position k of this
// call for RES_PHASE_ALL, taken[k] (taken by the first phase) for k < first_pages and ring
// position k - first_pages of the merged ring otherwise for RES_PHASE_REST.
template <typename Index>
__device__ void reserve_decode(View v, Call call, const long long *lens_in, const Index *last_loc,
                               uint32_t batch, uint32_t steps, unsigned long long total_pages,
                               unsigned long long first_pages, uint32_t phase, ResHeader *res,
                               long long *lens, Index *slots, uint32_t *taken, uint32_t *rank) {
  __shared__ unsigned long long errors;
  __shared__ unsigned long long pages_sum;
  __shared__ uint32_t cyc[RES_MAX_STEPS + 1];  // cyc[j]: requests whose first step is <= j
  __shared__ uint32_t state_at;
  const uint32_t r = threadIdx.x;
  if (r == 0) {
    errors = NO_ERROR;
    pages_sum = 0;
    state_at = *(volatile uint32_t *)&res->state;
  }
  __syncthreads();
  Header *h = v.header;
  const Cursor c = h->cursor[call.in];
  const uint32_t n = v.num_pages;
  // The second phase runs only after a first phase that took its pages (a failed first
  // phase faulted the pool).
  const bool dead =
      dead_call(h->fault, c, call) || (phase == RES_PHASE_REST && state_at != RES_FIRST_TAKEN);
  const unsigned long long here = phase == RES_PHASE_ALL    ? total_pages
                                  : phase == RES_PHASE_FIRST ? first_pages
                                                             : total_pages - first_pages;
  const unsigned long long ring_first = phase == RES_PHASE_REST ? first_pages : 0;
  const bool short_ = !dead && c.free_len < here;
  const bool tracked = v.page_size > 1;
  const unsigned long long K = steps;
  const uint32_t groups = (uint32_t)(v.page_size < K ? v.page_size : K);
  const unsigned long long tagged = (unsigned long long)call.tag << 32;

  // Pass 1: lengths and last_loc (alloc_decode's rules), pages per request, page claims.
  const bool checking = !dead && phase != RES_PHASE_REST;
  if (checking) {
    unsigned long long own = 0;
    for (uint32_t i = r; i < batch; i += RES_BLOCK) {
      const long long L = lens_in[i];
      lens[i] = L;
      rank[i] = 0;
      if (L < 0 || (unsigned long long)L + K > v.size) {
        report(&errors, i, ERR_LENGTHS);
        continue;
      }
      const unsigned long long first = first_page_step((unsigned long long)L, v);
      if (first <= K) own += 1 + div_ps(K - first, v);
      const long long ll = (long long)last_loc[i];
      uint32_t err = ERR_NONE;
      if (L == 0) {
        if (ll != -1) err = ERR_LAST_LOC_EMPTY;
      } else {
        err = slot_error(ll, v);
        if (err == ERR_NONE) {
          const uint32_t page = (uint32_t)div_ps((unsigned long long)ll, v);
          const uint32_t word = v.state[page];
          const unsigned long long filled = tracked ? v.fill[page] : 0;
          const unsigned long long in_page = mod_ps((unsigned long long)ll, v);
          if (kind_of(word) != KIND_ALLOCATED) {
            err = unallocated_error(word);
          } else if (tag_of(word) == call.tag) {
            err = ERR_NOT_ALLOCATED;
          } else if (mod_ps((unsigned long long)ll + 1, v) != mod_ps((unsigned long long)L, v)) {
            err = ERR_LAST_LOC;
          } else if (tracked && fill_of(filled) != in_page + 1) {
            err = ERR_FILL;
          } else if (tracked && mod_ps((unsigned long long)L, v) != 0) {
            // Continues its page: no other request of the batch may.
            claim_smallest(&v.claim[page], tagged | (i + 1u), call.tag);
            rank[i] = page + 1;
          }
        }
      }
      if (err != ERR_NONE) report(&errors, i, err);
    }
    if (own) atomicAdd(&pages_sum, own);
  }
  __syncthreads();
  if (checking) {
    for (uint32_t i = r; i < batch; i += RES_BLOCK) {
      const uint32_t held = rank[i];
      if (held != 0 && v.claim[held - 1] != (tagged | (i + 1u))) report(&errors, i, ERR_SHARED_PAGE);
    }
    // The device lengths must give the host's plan (a stale device copy otherwise).
    if (r == 0 && pages_sum != total_pages && batch > 0) report(&errors, batch - 1, ERR_LENGTHS);
  }
  __syncthreads();
  const unsigned long long verdict = errors;
  const bool failed = !dead && (short_ || verdict != NO_ERROR);
  const bool live = !dead && !failed;

  if (live && phase == RES_PHASE_FIRST) {
    // The steps before the merge: their pages in ring order, held; the table comes later.
    for (unsigned long long k = r; k < first_pages; k += RES_BLOCK) {
      const uint32_t page = v.ring[ring_pos(c.head, k, n)];
      v.state[page] = page_word(KIND_HELD, call.tag);
      taken[k] = page;
    }
  }
  if (live && phase != RES_PHASE_FIRST) {
    // Pass 2: each request's rank among the requests of its first step.
    for (uint32_t g = 1; g <= groups; ++g) {
      unsigned long long running = 0;
      for (uint32_t base = 0; base < batch; base += RES_BLOCK) {
        const uint32_t i = base + r;
        const bool mine = i < batch && first_page_step((unsigned long long)lens[i], v) == g;
        unsigned long long total;
        const unsigned long long before = block_exclusive_scan<RES_BLOCK>(mine ? 1 : 0, &total);
        if (mine) rank[i] = (uint32_t)(running + before);
        running += total;
      }
      if (r == 0) cyc[g] = (uint32_t)running;
    }
    __syncthreads();
    if (r == 0) {
      cyc[0] = 0;
      for (uint32_t g = 1; g <= groups; ++g) cyc[g] += cyc[g - 1];
    }
    __syncthreads();
    // Pass 3: the slot table, the new pages' words, the fill points after K steps; every page
    // the steps hand slots out of is held.
    const unsigned long long per_cycle = cyc[groups];
    for (uint32_t i = r; i < batch; i += RES_BLOCK) {
      const unsigned long long L = (unsigned long long)lens[i];
      const unsigned long long idx = rank[i];
      long long prev = (long long)last_loc[i];
      if (tracked && mod_ps(L, v) != 0)
        v.state[div_ps((unsigned long long)prev, v)] = page_word(KIND_HELD, call.tag);
      for (unsigned long long s = 1; s <= K; ++s) {
        const unsigned long long t = L + s - 1;  // the new token's position
        long long slot;
        if (mod_ps(t, v) == 0) {
          const unsigned long long k =
              div_ps(s - 1, v) * per_cycle + cyc[mod_ps(s - 1, v)] + idx;
          uint32_t page;
          if (k < ring_first) {
            page = taken[k];
          } else {
            page = v.ring[ring_pos(c.head, k - ring_first, n)];
            v.state[page] = page_word(KIND_HELD, call.tag);
            taken[k] = page;
          }
          slot = (long long)((unsigned long long)page * v.page_size);
        } else {
          slot = prev + 1;
        }
        slots[(s - 1) * batch + i] = (Index)slot;
        if (tracked && (s == K || mod_ps(t + 1, v) == 0))
          v.fill[div_ps((unsigned long long)slot, v)] =
              fill_word(call.tag, mod_ps((unsigned long long)slot, v) + 1);
        prev = slot;
      }
    }
  }
  __syncthreads();
  if (r == 0) {
    res->counter = 0;
    res->state = !live ? RES_EMPTY : phase == RES_PHASE_FIRST ? RES_FIRST_TAKEN : RES_LIVE;
    res->epoch = h->epoch;
    res->owner = call.seq;
    const long long value =
        fault_value(failed, short_, verdict, lens_in,
                    [&](unsigned long long pos) { return (long long)last_loc[pos]; });
    conclude_take(v, call, c, here, dead, failed, short_, verdict, value);
  }
}

// One decode step of a live reservation. `table` may be null (then `rows` is unused);
// `out` may be null when a table is given. Changes no pool state but the fault.
template <typename Index>
__device__ void reservation_step(View v, Call call, ResHeader *res, const long long *lens,
                                 const Index *slots, uint32_t batch, uint32_t steps, Index *out,
                                 void *table, uint32_t wide, unsigned long long table_rows,
                                 unsigned long long stride, unsigned long long row_len,
                                 const long long *rows) {
  __shared__ unsigned long long errors;
  __shared__ uint32_t s_at, state_at, dead_at, ended_at, owner_at;
  const uint32_t r = threadIdx.x;
  if (r == 0) {
    errors = NO_ERROR;
    s_at = *(volatile uint32_t *)&res->counter;
    state_at = *(volatile uint32_t *)&res->state;
    dead_at = v.header->fault != 0;
    ended_at = *(volatile uint32_t *)&res->epoch != *(volatile uint32_t *)&v.header->epoch;
    owner_at = *(volatile uint32_t *)&res->owner;
  }
  __syncthreads();
  const uint32_t s = s_at, state = state_at;
  const bool dead = dead_at != 0, ended = ended_at != 0, reused = owner_at != call.seq;
  bool ok = !dead && !ended && !reused && state == RES_LIVE && s < steps;
  if (ok && table != nullptr) {
    for (uint32_t i = r; i < batch; i += blockDim.x) {
      const long long row = rows[i];
      if (row < 0 || (unsigned long long)row >= table_rows)
        report(&errors, i, ERR_ROW);
      else if ((unsigned long long)lens[i] + s >= row_len)
        report(&errors, i, ERR_ROW_LEN);
    }
    __syncthreads();
    ok = errors == NO_ERROR;
  }
  for (uint32_t i = r; i < batch; i += blockDim.x) {
    const Index slot = ok ? slots[(unsigned long long)s * batch + i] : (Index)0;
    if (out != nullptr) out[i] = slot;
    if (ok && table != nullptr)
      table_put(table, wide, (unsigned long long)rows[i] * stride + (unsigned long long)lens[i] + s,
                  (long long)slot);
  }
  if (r == 0) {
    if (ok) {
      res->counter = s + 1;
    } else if (!dead && reused) {
      raise_fault(v, call, ((unsigned long long)steps << 8) | ERR_RES_REUSED, owner_at);
    } else if (!dead && ended) {
      raise_fault(v, call, ((unsigned long long)steps << 8) | ERR_RES_ENDED, s);
    } else if (!dead && state == RES_LIVE && s >= steps) {
      raise_fault(v, call, ((unsigned long long)steps << 8) | ERR_RES_OVERRUN, s);
    } else if (!dead && state == RES_FINISHED) {
      raise_fault(v, call, ((unsigned long long)steps << 8) | ERR_RES_FINISHED, s);
    } else if (!dead && state == RES_LIVE) {
      const unsigned long long pos = errors >> 8;
      const long long value =
          (errors & 0xff) == ERR_ROW ? rows[pos] : lens[pos] + (long long)s;
      raise_fault(v, call, errors, value);
    }
  }
}

// Ends the holds on the pages the reservation keeps: the first `kept` pages it took and each
// request's continued page (the page of its step-1 slot when its length is not a multiple of
// the page size). Keeps the word's tag unless `tag` is non-zero.
template <typename Index>
__device__ void unhold_pages(const View &v, const long long *lens, const Index *slots,
                             const uint32_t *taken, uint32_t batch, unsigned long long kept,
                             uint32_t tag) {
  const auto release = [&](uint32_t page) {
    const uint32_t word = v.state[page];
    if (kind_of(word) == KIND_HELD) v.state[page] = page_word(KIND_ALLOCATED, tag ? tag : tag_of(word));
  };
  for (unsigned long long k = threadIdx.x; k < kept; k += blockDim.x) release(taken[k]);
  if (v.page_size > 1) {
    for (uint32_t i = threadIdx.x; i < batch; i += blockDim.x)
      if (mod_ps((unsigned long long)lens[i], v) != 0)
        release((uint32_t)div_ps((unsigned long long)(long long)slots[i], v));
  }
}

// Ends a reservation after `used` steps: the pages of steps after `used` (taken[first_unused
// ..], `unused` of them) go back to the front of the ring, and each request whose step
// used + 1 continues a page has that page rewound to its last used slot.
//
// `first_unused` is the host's count of the pages steps 1..used took, planned from its copy
// of the lengths; the reserve checked only that the device's lengths (`lens`, as the reserve
// read them) give the same page total. Lengths that move a request's first page to another
// step keep the total but not this count: the host's `taken[first_unused ..]` would then
// hold pages the used steps handed out. So the device counts them from its own lengths, and
// a count that differs faults the call (ERR_LENGTHS, the last request) and returns nothing.
template <typename Index>
__device__ void reservation_finish(View v, Call call, ResHeader *res, const long long *lens,
                                   const Index *slots, const uint32_t *taken, uint32_t batch,
                                   uint32_t steps, uint32_t used, unsigned long long first_unused,
                                   unsigned long long unused) {
  __shared__ unsigned long long errors;
  __shared__ unsigned long long used_pages;  // taken by steps 1..used, by the device's lengths
  __shared__ uint32_t counter_at, state_at, dead_at;
  const uint32_t r = threadIdx.x;
  if (r == 0) {
    errors = NO_ERROR;
    used_pages = 0;
    counter_at = *(volatile uint32_t *)&res->counter;
    state_at = *(volatile uint32_t *)&res->state;
    dead_at = v.header->fault != 0;
  }
  __syncthreads();
  Header *h = v.header;
  const Cursor c = h->cursor[call.in];
  const uint32_t n = v.num_pages;
  const bool tracked = v.page_size > 1;
  const bool run = !dead_call(dead_at, c, call) && state_at == RES_LIVE;
  const bool counted = run && counter_at == used;
  const bool rewinding = counted && tracked && used < steps;
  if (counted) {
    unsigned long long mine = 0;
    for (uint32_t i = r; i < batch; i += RES_BLOCK) {
      const unsigned long long first = first_page_step((unsigned long long)lens[i], v);
      if (first <= used) mine += 1 + div_ps(used - first, v);
    }
    if (mine) atomicAdd(&used_pages, mine);
    for (unsigned long long k = r; k < unused; k += RES_BLOCK) {
      const uint32_t page = taken[first_unused + k];
      if (kind_of(v.state[page]) != KIND_HELD) report(&errors, k, ERR_RES_PAGE);
    }
    if (rewinding) {
      for (uint32_t i = r; i < batch; i += RES_BLOCK) {
        if (mod_ps((unsigned long long)lens[i] + used, v) == 0) continue;  // starts a page
        const unsigned long long kept =
            (unsigned long long)(long long)slots[(unsigned long long)used * batch + i] - 1;
        const uint32_t page = (uint32_t)div_ps(kept, v);
        if (kind_of(v.state[page]) != KIND_HELD || fill_of(v.fill[page]) < mod_ps(kept, v) + 1)
          report(&errors, i, ERR_RES_REWIND);
      }
    }
  }
  __syncthreads();
  // (A count that differs needs a request: lengths give no page without one.)
  const unsigned long long verdict =
      counted && used_pages != first_unused
          ? min(errors, ((unsigned long long)(batch - 1) << 8) | ERR_LENGTHS)
          : errors;
  const bool ok = counted && verdict == NO_ERROR;
  if (ok) {
    for (unsigned long long k = r; k < unused; k += RES_BLOCK) {
      const uint32_t page = taken[first_unused + k];
      v.ring[ring_pos(c.head, (unsigned long long)n - unused + k, n)] = page;
      v.state[page] = page_word(KIND_FREE, call.tag);
    }
    if (rewinding) {
      for (uint32_t i = r; i < batch; i += RES_BLOCK) {
        if (mod_ps((unsigned long long)lens[i] + used, v) == 0) continue;
        const unsigned long long kept =
            (unsigned long long)(long long)slots[(unsigned long long)used * batch + i] - 1;
        v.fill[div_ps(kept, v)] = fill_word(call.tag, mod_ps(kept, v) + 1);
      }
    }
    unhold_pages(v, lens, slots, taken, batch, first_unused, call.tag);
  }
  __syncthreads();
  if (r == 0) {
    Cursor next = c;
    if (ok) {
      if (unused > 0) {
        next.head = ring_pos(c.head, (unsigned long long)n - unused, n);
        next.free_len = c.free_len + (uint32_t)unused;
      }
      res->state = RES_FINISHED;
    } else if (run && !counted) {
      raise_fault(v, call, ((unsigned long long)used << 8) | ERR_RES_STEPS, counter_at);
    } else if (counted) {
      const unsigned long long pos = verdict >> 8;
      long long value;
      if ((verdict & 0xff) == ERR_RES_PAGE)
        value = taken[first_unused + pos];
      else if ((verdict & 0xff) == ERR_LENGTHS)
        value = lens[pos];
      else
        value = (long long)slots[(unsigned long long)used * batch + pos] - 1;
      raise_fault(v, call, verdict, value);
    }
    commit(v, call, c, next);
  }
}

// Ends the holds of a live reservation released unfinished: its pages stay allocated, with
// the fill points of all K steps. Not a call (no cursor, no tag); the host launches it ahead
// of the pool's next call. A faulted pool is left as it is (its clear or restore resets the
// page map anyway).
template <typename Index>
__device__ void reservation_unhold(View v, ResHeader *res, const long long *lens,
                                   const Index *slots, const uint32_t *taken, uint32_t batch,
                                   unsigned long long total_pages) {
  __shared__ bool run;
  if (threadIdx.x == 0)
    run = v.header->fault == 0 && *(volatile uint32_t *)&res->state == RES_LIVE;
  __syncthreads();
  if (!run) return;
  unhold_pages(v, lens, slots, taken, batch, total_pages, 0);
  __syncthreads();
  if (threadIdx.x == 0) res->state = RES_FINISHED;
}

}  // namespace kvp
