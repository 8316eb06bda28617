/* python_overhead.c: the C side of benches/python_overhead.py.
 *
 * Timing loops written in C around the kvpool calls the Python package makes, so that the
 * same call sequence on the same pool, buffers and stream is timed once from C and once
 * from Python in one process and one run. python_overhead.py compiles this file into a
 * shared library (cc -O2 -shared -fPIC -Iinclude) and calls each loop once per round; no
 * Python runs inside a loop. The kvpool functions come in as function pointers taken from
 * the library the Python package loaded (the same code a C program linked with -lkvpool
 * calls through its PLT), so this file needs only the header to build.
 *
 * Each loop: `warmup` untimed iterations, then `reps` timed ones; an iteration is an
 * untimed setup (frees only: the allocation whose slots are freed), the timed call alone
 * between two clock_gettime(CLOCK_MONOTONIC) reads, and an untimed undo that returns the
 * pool to the same state (an allocation's slots freed, a decode rewound). `times[i]` gets
 * the i-th timed call's nanoseconds. Device loops drain the stream every 64 iterations,
 * untimed (through `sync`, cuStreamSynchronize), so the launch queue never fills; the
 * free loop drains after every free.
 * Returns 0, or the first kvp_status that was not KVP_STATUS_OK (stopping there).
 */
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "kvpool.h"

typedef __typeof__(kvp_pool_alloc) alloc_fn;
typedef __typeof__(kvp_pool_alloc_extend) alloc_extend_fn;
typedef __typeof__(kvp_pool_alloc_decode) alloc_decode_fn;
typedef __typeof__(kvp_pool_free_indices) free_indices_fn;
typedef __typeof__(kvp_pool_rewind) rewind_fn;
typedef __typeof__(kvp_pool_alloc_async) alloc_async_fn;
typedef __typeof__(kvp_pool_alloc_extend_async) alloc_extend_async_fn;
typedef __typeof__(kvp_pool_alloc_decode_async) alloc_decode_async_fn;
typedef __typeof__(kvp_pool_free_indices_async) free_indices_async_fn;
typedef __typeof__(kvp_pool_free_segment_async) free_segment_async_fn;
typedef __typeof__(kvp_pool_rewind_async) rewind_async_fn;
typedef int sync_fn(struct CUstream_st *stream); /* cuStreamSynchronize */

/* The library's functions, filled in by python_overhead.py (NULL where not needed). */
struct ovh_functions {
  alloc_fn *alloc;
  alloc_extend_fn *alloc_extend;
  alloc_decode_fn *alloc_decode;
  free_indices_fn *free_indices;
  rewind_fn *rewind;
  alloc_async_fn *alloc_async;
  alloc_extend_async_fn *alloc_extend_async;
  alloc_decode_async_fn *alloc_decode_async;
  free_indices_async_fn *free_indices_async;
  free_segment_async_fn *free_segment_async;
  rewind_async_fn *rewind_async;
  sync_fn *sync;
};

static inline uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

#define CHECK(expr)              \
  do {                           \
    const int status_ = (expr);  \
    if (status_ != 0)            \
      return status_;            \
  } while (0)

/* One loop: SETUP untimed, CALL timed, UNDO untimed; DRAIN every 64 iterations. */
#define LOOP(SETUP, CALL, UNDO, DRAIN)                          \
  for (size_t i = 0; i < warmup + reps; i++) {                  \
    SETUP;                                                      \
    const uint64_t t0 = now_ns();                               \
    const int status = (CALL);                                  \
    const uint64_t t1 = now_ns();                               \
    CHECK(status);                                              \
    if (i >= warmup)                                            \
      times[i - warmup] = t1 - t0;                              \
    UNDO;                                                       \
    if (i % 64 == 63) {                                         \
      DRAIN;                                                    \
    }                                                           \
  }                                                             \
  return 0

#define NOTHING ((void)0)

/* The timer alone: two clock reads around nothing. */
int ovh_timer(size_t warmup, size_t reps, uint64_t *times) {
  LOOP(NOTHING, 0, NOTHING, NOTHING);
}

/* ---- host pools ---------------------------------------------------------------------- */

int ovh_alloc(const struct ovh_functions *f, struct kvp_pool *pool, size_t num_tokens,
              void *out, size_t out_len, size_t warmup, size_t reps, uint64_t *times) {
  LOOP(NOTHING, f->alloc(pool, num_tokens, out, out_len),
       CHECK(f->free_indices(pool, out, num_tokens)), NOTHING);
}

int ovh_alloc_extend(const struct ovh_functions *f, struct kvp_pool *pool,
                     const int64_t *prefix_lens, const int64_t *seq_lens, const void *last_loc,
                     size_t batch_size, size_t extend_num_tokens, void *out, size_t out_len,
                     size_t warmup, size_t reps, uint64_t *times) {
  LOOP(NOTHING,
       f->alloc_extend(pool, prefix_lens, seq_lens, last_loc, batch_size, extend_num_tokens,
                       out, out_len),
       CHECK(f->free_indices(pool, out, extend_num_tokens)), NOTHING);
}

int ovh_alloc_decode(const struct ovh_functions *f, struct kvp_pool *pool,
                     const int64_t *seq_lens, const void *last_loc, size_t batch_size,
                     void *out, size_t out_len, size_t warmup, size_t reps, uint64_t *times) {
  LOOP(NOTHING, f->alloc_decode(pool, seq_lens, last_loc, batch_size, out, out_len),
       CHECK(f->rewind(pool, last_loc, batch_size)), NOTHING);
}

int ovh_free_indices(const struct ovh_functions *f, struct kvp_pool *pool, void *indices,
                     size_t len, size_t warmup, size_t reps, uint64_t *times) {
  LOOP(CHECK(f->alloc(pool, len, indices, len)), f->free_indices(pool, indices, len), NOTHING,
       NOTHING);
}

/* ---- device pools (device buffers, host copies of the lengths, one stream) -------------- */

int ovh_alloc_async(const struct ovh_functions *f, struct kvp_pool *pool, size_t num_tokens,
                    void *out, size_t out_len, struct CUstream_st *stream, size_t warmup,
                    size_t reps, uint64_t *times) {
  LOOP(NOTHING, f->alloc_async(pool, num_tokens, out, out_len, stream),
       CHECK(f->free_segment_async(pool, out, num_tokens, 0, num_tokens, stream)),
       CHECK(f->sync(stream)));
}

int ovh_alloc_extend_async(const struct ovh_functions *f, struct kvp_pool *pool,
                           const int64_t *prefix_lens_host, const int64_t *seq_lens_host,
                           const int64_t *prefix_lens, const int64_t *seq_lens,
                           const void *last_loc, size_t batch_size, size_t extend_num_tokens,
                           void *out, size_t out_len, struct CUstream_st *stream,
                           size_t warmup, size_t reps, uint64_t *times) {
  LOOP(NOTHING,
       f->alloc_extend_async(pool, prefix_lens_host, seq_lens_host, prefix_lens, seq_lens,
                             last_loc, batch_size, extend_num_tokens, out, out_len, stream),
       CHECK(f->free_segment_async(pool, out, extend_num_tokens, 0, extend_num_tokens,
                                   stream)),
       CHECK(f->sync(stream)));
}

int ovh_alloc_decode_async(const struct ovh_functions *f, struct kvp_pool *pool,
                           const int64_t *seq_lens_host, const int64_t *seq_lens,
                           const void *last_loc, size_t batch_size, void *out, size_t out_len,
                           struct CUstream_st *stream, size_t warmup, size_t reps,
                           uint64_t *times) {
  LOOP(NOTHING,
       f->alloc_decode_async(pool, seq_lens_host, seq_lens, last_loc, batch_size, out,
                             out_len, stream),
       CHECK(f->rewind_async(pool, last_loc, batch_size, stream)), CHECK(f->sync(stream)));
}

int ovh_free_async(const struct ovh_functions *f, struct kvp_pool *pool, void *indices,
                   size_t len, struct CUstream_st *stream, size_t warmup, size_t reps,
                   uint64_t *times) {
  /* drained after each free (untimed): a paged free by index is counted once the stream
   * has passed it, and the next setup allocation must see its pages */
  LOOP(CHECK(f->alloc_async(pool, len, indices, len, stream)),
       f->free_indices_async(pool, indices, len, stream), CHECK(f->sync(stream)), NOTHING);
}
