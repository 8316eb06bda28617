/*
 * kvpool — KV-cache slot allocation for LLM inference engines, with SGLang's semantics.
 *
 * Conventions (they hold for every function below):
 *
 *  - Errors. Every fallible function returns `enum kvp_status`; 0 (KVP_STATUS_OK) is
 *    success. Decide success from the status only. After a failure, kvp_last_error_message()
 *    on the same thread describes it (naming the offending element), and the object is
 *    unchanged: a failing call writes no out-parameter and no output buffer, frees nothing
 *    and allocates nothing.
 *  - Ownership. Pointers passed in are borrowed for the duration of the call only. Objects
 *    returned through `**out` are owned by the caller and released with the matching
 *    `kvp_*_free`; `kvp_*_free(NULL)` is a no-op.
 *  - Threads. Every handle may be used from several threads at once (calls are serialized
 *    by an internal lock); its `_free` must not race with other calls on it. Memory a call
 *    hands back for later reading (a scheduler step's plan arrays) stays valid only until
 *    the handle's next such call, which another thread may make: a loop that steps from
 *    several threads serializes the step and its reading of the plan itself.
 *  - Handle kinds. Every handle's memory starts with a tag naming its kind, checked by every
 *    call, so a live handle of another kind (a kvp_scheduler passed as a kvp_pool, a
 *    kvp_pool as a kvp_snapshot, ...) fails with KVP_STATUS_INVALID_ARGUMENT ("pool is not
 *    a kvp_pool handle: it is a kvp_scheduler handle") and changes nothing; a `kvp_*_free`
 *    given one frees nothing (and sets the last error message). A handle already freed, or
 *    a pointer that is no handle at all, is still undefined behaviour.
 *  - Panics. No Rust panic ever unwinds into the caller: it becomes KVP_STATUS_PANIC, and an
 *    object (pool, scheduler, adder, delayer) that panicked while locked returns
 *    KVP_STATUS_POISONED from then on.
 *  - Index buffers. Buffers of slot indices (`void *out`, `last_loc`, `indices`, `page_ids`,
 *    `row`) hold elements of the pool's index type: int64_t by default, int32_t for a pool
 *    created with KVP_INDEX_TYPE_I32. Lengths count elements. Length arrays (`prefix_lens`,
 *    `seq_lens`) are always int64_t. A pointer may be NULL only when its length is 0, and
 *    must be aligned for its element type (else KVP_STATUS_INVALID_ARGUMENT). An output
 *    buffer (`out`, a table a call writes, the page-table arrays) must not share memory
 *    with another buffer of the call (else KVP_STATUS_INVALID_ARGUMENT, checked on host
 *    pools and for the device allocations' `out`: a call reads its inputs again while it
 *    writes, so an `out` over `last_loc` would hand a slot out twice). A call refused for
 *    its buffers still counts in
 *    kvp_pool_get_stats (calls, rejected_calls).
 *  - Slot 0 is the padding slot and page 0 the padding page: never allocated, never freed.
 *    KV buffers need `size + page_size` rows (kvp_pool_info.kv_rows).
 *  - Backends. A host pool (KVP_BACKEND_HOST) runs every call on the calling thread and is
 *    done when it returns. A device pool (KVP_BACKEND_CUDA) keeps its state in GPU memory:
 *    use the `*_async` calls, which take device pointers and a stream (`struct CUstream_st *`,
 *    i.e. a cudaStream_t / CUstream / torch's `cuda_stream`, always the last parameter),
 *    enqueue kernels and return without ever synchronizing. Device buffers must stay alive
 *    until the stream passes the call; all calls on one pool must be ordered on the device
 *    (one stream, or streams ordered by events). What only the device can check (the
 *    indices themselves) faults the pool: see KVP_STATUS_DEVICE_FAULT. The library needs
 *    only the NVIDIA driver at run time (loaded on first use), never the CUDA toolkit.
 *    An `*_async` call may be recorded by stream capture; it then counts as made when
 *    captured: launch that graph exactly once, in capture order, before the pool's next
 *    call, and never replay it as a substitute for calling again (the host-side counts and
 *    the device's cursor advance per call, not per replay) — except
 *    kvp_decode_reservation_step_async, made to be replayed (docs/graph-decode.md). The
 *    kernels check this themselves (the turn check): every call that reads the pool's
 *    state finds the state left by the call made just before it, or it changes nothing and
 *    faults the pool (KVP_STATUS_DEVICE_FAULT, "ran out of turn" or "ran a second time",
 *    naming the calls; every later call changes nothing until a clear or restore). So a
 *    graph launched late (after later calls, or after a clear or restore), early (before
 *    the calls made ahead of it), twice, or never (a capture abandoned: the next call
 *    faults) never hands slots out twice. A clear or restore is not checked (it rewrites
 *    the state). The check costs an allocation 0.99-1.12x its device time (BENCHMARKS.md,
 *    run s45-1, H200; extends of 1-8 requests 1.02-1.04x since run s46-2, H100; decodes of
 *    8 requests cost most). KVP_DEBUG_REPLAY_CALLS lets a graph replayed at once repeat its
 *    call, for timing calls. Every `*_async` call (page tables, digests and reservation
 *    steps too) is a call of the pool for the ordering rule above. A captured call
 *    allocates no device memory (`cuMemAlloc` may synchronize, which invalidates a
 *    capture): one that would have to grow the by-row calls' scratch, or find a
 *    reservation's or snapshot's memory, is refused with KVP_STATUS_INVALID_STATE and the
 *    capture stays intact; size the scratch before capturing with
 *    kvp_pool_reserve_scratch_async. An uncaptured call allocates in relaxed capture mode,
 *    so it never invalidates a capture of another stream.
 *    On compute capability 9.0 and later (with a CUDA 12.3+ driver) the kernels are launched
 *    with programmatic dependent launch: a call's kernel may be scheduled while the kernel
 *    ahead of it on the stream is finishing, and waits for it to complete before it reads or
 *    writes anything, so its launch latency overlaps that kernel's end (also in graphs,
 *    where capture records the edge as programmatic). Ordering is unchanged. The kernels
 *    never signal their dependents early: a kernel of yours launched with the same attribute
 *    right after a call starts once the call's blocks have exited and, as any such kernel,
 *    must wait (griddepcontrol.wait / cudaGridDependencySynchronize) before reading the
 *    call's outputs. KVPOOL_PROGRAMMATIC_LAUNCH=0 in the environment (read when a pool is
 *    created) launches without it.
 *  - Thread state (device pools). A call on a device pool (and kvp_pool_new / kvp_pool_free
 *    of one, and the free of its last snapshot or of a scheduler holding it) makes the
 *    device's primary context current while it runs and makes the calling thread's own
 *    current context (or none) current again before it returns. Host pools never touch
 *    CUDA.
 *  - Release (device pools). kvp_pool_free (and the free of a snapshot or scheduler holding
 *    the last reference) may be called while the pool's kernels are still queued on a
 *    stream: it never waits for them, and the pool's memory is freed only after the last of
 *    them has run (stream-ordered release, by a library thread). See kvp_pool_free.
 *  - Debugging streams. kvp_pool_set_debug(pool, KVP_DEBUG_STREAM_ORDER) (or the
 *    environment variable KVPOOL_DEBUG=stream_order) makes a device pool check on the
 *    device that its calls are ordered, reporting KVP_STATUS_UNORDERED_STREAMS otherwise.
 *  - Continuations. Every allocated page remembers how many of its slots it has handed out
 *    (its fill point). A `last_loc` must be its page's last handed-out slot, so a stale or
 *    foreign `last_loc` is refused (KVP_STATUS_LAST_LOC_MISMATCH; on a device pool, a
 *    fault) instead of handing a slot out twice; kvp_pool_rewind moves a page back after
 *    rejected speculative tokens.
 *  - Request-to-token tables. kvp_req_table describes the engine's own `req_to_token`
 *    (int32 or int64, any row stride), borrowed per call: the *_rows calls read `last_loc`
 *    from it and write the new slots into it (kvp_pool_alloc_extend_rows,
 *    kvp_pool_alloc_decode_rows), free by request row (kvp_pool_free_rows), and
 *    kvp_pool_page_table writes FlashInfer's int32 kv_indptr / kv_indices /
 *    kv_last_page_len. Host pools take host tables, the _async variants device tables;
 *    both backends give identical results, and a failing call writes nothing to the table.
 *  - Decode reservations (docs/graph-decode.md). kvp_pool_reserve_decode[_async] takes the
 *    pages of K decode steps of a batch at once (in the order K kvp_pool_alloc_decode calls
 *    would); kvp_decode_reservation_step_async is then ONE kernel with fixed arguments per
 *    step, capturable into a CUDA graph (a replay past K writes slot 0 and faults);
 *    kvp_decode_reservation_finish[_async] returns what the steps did not use. Until the
 *    finish (or the reservation's free, a clear or a restore) its pages are held: every
 *    free, rewind or continuation (`last_loc`) touching one fails with
 *    KVP_STATUS_INVALID_STATE (a device pool faults), so no slot a later step hands out can
 *    reach another request.
 *
 * Objects: kvp_pool (slot allocation), kvp_snapshot (its saved state),
 * kvp_decode_reservation (K reserved decode steps of a batch), kvp_scheduler (the
 * continuous-batching step over request descriptors), kvp_adder (one prefill pass's
 * admission budget, for engines with their own loop), kvp_delayer (DP-rank prefill
 * negotiation). State digests (kvp_pool_digest, kvp_pool_digest_async, kvp_scheduler_digest)
 * let tensor-parallel ranks, each with its own pool and scheduler, check that they agree.
 *
 * Compile-time version: KVP_VERSION_MAJOR/MINOR/PATCH, KVP_ABI_VERSION; run-time:
 * kvp_version(), kvp_abi_version(). Check KVP_ABI_VERSION == kvp_abi_version() at start-up.
 */

#ifndef KVPOOL_H
#define KVPOOL_H

/* Generated by cbindgen 0.29.4 from src/ffi/ (scripts/regen-header.sh). Do not edit. */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#if defined(__cplusplus) && __cplusplus >= 201703L
#define KVP_NODISCARD [[nodiscard]]
#elif defined(__GNUC__)
#define KVP_NODISCARD __attribute__((warn_unused_result))
#else
#define KVP_NODISCARD
#endif


/**
 * SGLang's default `CLIP_MAX_NEW_TOKENS`: the cap on a request's expected output when
 * reserving room for it (the stop condition still uses the real `max_new_tokens`).
 */
#define KVP_CLIP_MAX_NEW_TOKENS 4096

/**
 * Decode steps of headroom a retraction estimate (and eviction) plans for
 * (`SGLANG_RETRACT_DECODE_STEPS`).
 */
#define KVP_RETRACT_DECODE_STEPS 20

/**
 * The most steps one reservation may cover (`steps` of `kvp_pool_reserve_decode[_async]`;
 * bounds the device kernels' shared memory).
 */
#define KVP_MAX_RESERVED_STEPS 1024

/**
 * Version of the digest definition below (`kvp_pool_digest`, `kvp_scheduler_digest`).
 */
#define KVP_DIGEST_VERSION 1

/**
 * What a `kvp_python_pool_*` call returns when it did not call the pool (an array that is
 * not a 1-D C-contiguous buffer of the call's element type, a read-only `out`, lengths that
 * disagree, a handle that is not a host pool): nothing changed, and the Python package
 * takes its general path. Any other value is the pool call's `kvp_status`.
 */
#define KVP_PYTHON_FALLBACK -1

/**
 * How many addresses `kvp_python_methods` takes (the length of its `api` array).
 */
#define KVP_PYTHON_METHODS_API_LEN 7

/**
 * Major version of the kvpool this header belongs to.
 */
#define KVP_VERSION_MAJOR 0

/**
 * Minor version of the kvpool this header belongs to.
 */
#define KVP_VERSION_MINOR 1

/**
 * Patch version of the kvpool this header belongs to.
 */
#define KVP_VERSION_PATCH 0

/**
 * ABI version of this header. It changes whenever a signature, a struct layout, a status
 * number or a documented ownership rule changes; while kvpool is 0.x it equals the minor
 * version, and the shared library's SONAME is `libkvpool.so.0.<minor>`. Compare it with
 * `kvp_abi_version()` at start-up to catch a header/library mismatch.
 */
#define KVP_ABI_VERSION 1

/**
 * Result of a kvpool call. `KVP_STATUS_OK` is 0; every other value is a failure, after
 * which the object is unchanged and `kvp_last_error_message` describes the problem.
 *
 * The numbers are part of the ABI: they are never renumbered or reused. Ranges:
 * 1–19 bad arguments, 20–29 resource shortage, 40–49 wrong state, 50–59 unsupported,
 * 60–69 reserved for CUDA errors, 100+ internal failures.
 */
enum kvp_status {
  /**
   * Success.
   */
  KVP_STATUS_OK = 0,
  /**
   * A required pointer argument was NULL.
   */
  KVP_STATUS_NULL_ARGUMENT = 1,
  /**
   * An argument or configuration value is invalid in a way no other status describes
   * (including a handle of another kind, e.g. a scheduler passed as a pool).
   */
  KVP_STATUS_INVALID_ARGUMENT = 2,
  /**
   * A length is negative, `seq_len < prefix_len`, longer than the pool, or a batch total
   * disagrees with its parts.
   */
  KVP_STATUS_INVALID_LENGTHS = 3,
  /**
   * An output buffer (or an input row) is too short.
   */
  KVP_STATUS_BUFFER_TOO_SMALL = 4,
  /**
   * A size or position that must be a multiple of `page_size` is not.
   */
  KVP_STATUS_UNALIGNED = 5,
  /**
   * An index or page id lies outside the pool.
   */
  KVP_STATUS_INDEX_OUT_OF_RANGE = 6,
  /**
   * Slot 0 / page 0 (the padding sink) was passed where an allocated slot is required.
   */
  KVP_STATUS_RESERVED_SLOT = 7,
  /**
   * An index or page is already free, or is freed twice in one call or one free group.
   */
  KVP_STATUS_DOUBLE_FREE = 8,
  /**
   * An index refers to a page that is not allocated (e.g. a `last_loc` in a free page).
   */
  KVP_STATUS_NOT_ALLOCATED = 9,
  /**
   * `last_loc` is inconsistent with the prefix length, or two requests extend one page.
   */
  KVP_STATUS_LAST_LOC_MISMATCH = 10,
  /**
   * Not enough free slots. Detected before anything is written; the pool is unchanged
   * apart from merging staged frees (`need_sort`), which SGLang does too.
   */
  KVP_STATUS_OUT_OF_SLOTS = 20,
  /**
   * Host memory for the pool's bookkeeping (at `kvp_pool_new`) or for a snapshot could
   * not be allocated. Reported instead of aborting the process; nothing was created.
   */
  KVP_STATUS_OUT_OF_MEMORY = 21,
  /**
   * The call is not allowed now (nested free group, group end without begin, snapshot
   * while a group is open).
   */
  KVP_STATUS_INVALID_STATE = 40,
  /**
   * The snapshot belongs to a different pool.
   */
  KVP_STATUS_FOREIGN_SNAPSHOT = 41,
  /**
   * The object (pool, scheduler, adder or delayer) was poisoned by an earlier internal
   * panic and refuses further calls; free it.
   */
  KVP_STATUS_POISONED = 42,
  /**
   * A host call (`kvp_pool_alloc`, ...) on a device pool, or a device call (`*_async`,
   * `kvp_pool_check_device`, `kvp_pool_available_size_bound`) on a host pool.
   */
  KVP_STATUS_WRONG_BACKEND = 43,
  /**
   * The feature is not available in this build or on this pool.
   */
  KVP_STATUS_UNSUPPORTED = 50,
  /**
   * No NVIDIA driver (`libcuda.so.1`) could be loaded, or the CUDA device does not exist.
   * Never a crash: the library loads the driver only when a device pool is created.
   */
  KVP_STATUS_CUDA_UNAVAILABLE = 60,
  /**
   * A CUDA driver call failed; the message names the call and its `CUresult`.
   *
   * A device call whose kernels were only partly enqueued (a launch after its first
   * failed: the earlier ones run, and the host did not record what they change) leaves
   * the pool refusing work with this status, naming that call, until
   * `kvp_pool_clear_async` or `kvp_pool_restore_state_async` (any snapshot: none can be
   * taken after such a call). Without that, the next call could read a cursor the
   * queued kernels moved and hand the same slots out twice.
   */
  KVP_STATUS_CUDA_ERROR = 61,
  /**
   * The stream passed to an `*_async` call belongs to another device or context than the
   * pool (which uses its device's primary context).
   */
  KVP_STATUS_WRONG_STREAM = 62,
  /**
   * A kernel of this pool found invalid input that only the device could see (double
   * free, an index outside the pool, page 0, a `last_loc` in a free page, two requests
   * extending one page). The call that met it changed nothing; it and every later call
   * until recovery wrote the padding slot 0 to their outputs. The pool refuses work until
   * `kvp_pool_clear_async` or `kvp_pool_restore_state_async`; the message names the call,
   * the element and its value.
   *
   * What the engine must do: the faulting call and every call enqueued after it changed
   * nothing — allocations wrote the padding slot 0 to all of their planned output
   * (`out[0 .. num_tokens)`, `out[0 .. extend_num_tokens)`, `out[0 .. batch_size)`),
   * frees freed nothing, rewinds moved nothing — so their outputs must not be used. Then
   * either restore a snapshot taken before the faulting call
   * (`kvp_pool_restore_state_async`: requests older than the snapshot keep their slots;
   * only the calls made since must be redone — a snapshot per scheduler step makes that
   * one step), or clear the pool (`kvp_pool_clear_async`: every slot free, every live
   * request's KV dropped). The first call after the recovery reports the old fault once
   * more; the next is clean.
   */
  KVP_STATUS_DEVICE_FAULT = 63,
  /**
   * Only with the `KVP_DEBUG_STREAM_ORDER` check on (`kvp_pool_set_debug`): a call of this
   * device pool started on the device before the previous call had finished — the two
   * calls were enqueued on streams not ordered with each other (no event between them).
   * Detected on the device and handled exactly like `KVP_STATUS_DEVICE_FAULT`: the late
   * call and every later one changed nothing and wrote the padding slot 0 to their
   * outputs; the pool refuses work until `kvp_pool_clear_async` or
   * `kvp_pool_restore_state_async`. The message names both calls and their streams.
   */
  KVP_STATUS_UNORDERED_STREAMS = 64,
  /**
   * An internal panic was caught at the ABI boundary; nothing unwound into the caller.
   */
  KVP_STATUS_PANIC = 100,
};

/**
 * Index width of a pool's index buffers (`kvp_pool_config.index_type`).
 */
enum kvp_index_type
#if defined(__cplusplus) || __STDC_VERSION__ >= 202311L
  : uint32_t
#endif // defined(__cplusplus) || __STDC_VERSION__ >= 202311L
 {
  /**
   * `int64_t` (default; SGLang's `out_cache_loc`).
   */
  KVP_INDEX_TYPE_I64 = 0,
  /**
   * `int32_t`: the same token slots (SGLang's `out_cache_loc` / `req_to_token` entries,
   * never page ids), 32 bits wide, for int32 tables such as `req_to_token`; needs
   * `size + page_size <= INT32_MAX + 1`.
   */
  KVP_INDEX_TYPE_I32 = 1,
};
#ifndef __cplusplus
#if __STDC_VERSION__ >= 202311L
typedef enum kvp_index_type kvp_index_type;
#else
typedef uint32_t kvp_index_type;
#endif // __STDC_VERSION__ >= 202311L
#endif // __cplusplus

/**
 * Where a pool lives (`kvp_pool_config.backend`).
 */
enum kvp_backend
#if defined(__cplusplus) || __STDC_VERSION__ >= 202311L
  : uint32_t
#endif // defined(__cplusplus) || __STDC_VERSION__ >= 202311L
 {
  /**
   * Host memory; every call completes before it returns. Use the plain calls
   * (`kvp_pool_alloc_extend`, ...).
   */
  KVP_BACKEND_HOST = 0,
  /**
   * CUDA device `kvp_pool_config.device` (its primary context): free list and page map in
   * device memory, every operation a kernel on the caller's stream. Use the `*_async`
   * calls; needs only the NVIDIA driver (sm_80 or newer), no CUDA toolkit.
   */
  KVP_BACKEND_CUDA = 1,
};
#ifndef __cplusplus
#if __STDC_VERSION__ >= 202311L
typedef enum kvp_backend kvp_backend;
#else
typedef uint32_t kvp_backend;
#endif // __STDC_VERSION__ >= 202311L
#endif // __cplusplus

/**
 * Waiting-queue order (`kvp_scheduler_config.policy`).
 */
enum kvp_policy
#if defined(__cplusplus) || __STDC_VERSION__ >= 202311L
  : uint32_t
#endif // defined(__cplusplus) || __STDC_VERSION__ >= 202311L
 {
  /**
   * First come, first served.
   */
  KVP_POLICY_FCFS = 0,
  /**
   * Longest output (`max_new_tokens`) first.
   */
  KVP_POLICY_LOF = 1,
  /**
   * Random, from `policy_seed` (reproducible).
   */
  KVP_POLICY_RANDOM = 2,
  /**
   * Longest cached prefix first (arrival order above 128 waiting requests). Priorities do
   * not order it, as in SGLang.
   */
  KVP_POLICY_LPM = 3,
  /**
   * DFS over the prefix tree, heavier subtrees first (needs prefix paths at submit).
   */
  KVP_POLICY_DFS_WEIGHT = 4,
};
#ifndef __cplusplus
#if __STDC_VERSION__ >= 202311L
typedef enum kvp_policy kvp_policy;
#else
typedef uint32_t kvp_policy;
#endif // __STDC_VERSION__ >= 202311L
#endif // __cplusplus

/**
 * Which running requests a decode-memory shortage retracts first.
 */
enum kvp_retraction
#if defined(__cplusplus) || __STDC_VERSION__ >= 202311L
  : uint32_t
#endif // defined(__cplusplus) || __STDC_VERSION__ >= 202311L
 {
  /**
   * Fewest generated tokens first, then longest prompt (SGLang's default).
   */
  KVP_RETRACTION_LENGTH = 0,
  /**
   * Lowest priority first, then as `KVP_RETRACTION_LENGTH`.
   */
  KVP_RETRACTION_PRIORITY = 1,
};
#ifndef __cplusplus
#if __STDC_VERSION__ >= 202311L
typedef enum kvp_retraction kvp_retraction;
#else
typedef uint32_t kvp_retraction;
#endif // __STDC_VERSION__ >= 202311L
#endif // __cplusplus

/**
 * What a step runs (`kvp_step_plan.kind`).
 */
enum kvp_step_kind
#if defined(__cplusplus) || __STDC_VERSION__ >= 202311L
  : uint32_t
#endif // defined(__cplusplus) || __STDC_VERSION__ >= 202311L
 {
  /**
   * Nothing to run.
   */
  KVP_STEP_KIND_IDLE = 0,
  /**
   * A prefill batch, maybe with decode rows mixed in.
   */
  KVP_STEP_KIND_PREFILL = 1,
  /**
   * A decode batch.
   */
  KVP_STEP_KIND_DECODE = 2,
};
#ifndef __cplusplus
#if __STDC_VERSION__ >= 202311L
typedef enum kvp_step_kind kvp_step_kind;
#else
typedef uint32_t kvp_step_kind;
#endif // __STDC_VERSION__ >= 202311L
#endif // __cplusplus

/**
 * Where a request is (`kvp_request_state.phase`).
 */
enum kvp_phase
#if defined(__cplusplus) || __STDC_VERSION__ >= 202311L
  : uint32_t
#endif // defined(__cplusplus) || __STDC_VERSION__ >= 202311L
 {
  /**
   * Waiting for admission (new, retracted or preempted).
   */
  KVP_PHASE_WAITING = 0,
  /**
   * Being prefilled chunk by chunk.
   */
  KVP_PHASE_CHUNKING = 1,
  /**
   * Decoding.
   */
  KVP_PHASE_RUNNING = 2,
};
#ifndef __cplusplus
#if __STDC_VERSION__ >= 202311L
typedef enum kvp_phase kvp_phase;
#else
typedef uint32_t kvp_phase;
#endif // __STDC_VERSION__ >= 202311L
#endif // __cplusplus

/**
 * Verdict for the next candidate (SGLang's `AddReqResult`).
 */
enum kvp_add_result
#if defined(__cplusplus) || __STDC_VERSION__ >= 202311L
  : uint32_t
#endif // defined(__cplusplus) || __STDC_VERSION__ >= 202311L
 {
  /**
   * Keep adding.
   */
  KVP_ADD_RESULT_CONTINUE = 0,
  /**
   * KV memory exhausted: stop and mark the batch full.
   */
  KVP_ADD_RESULT_NO_TOKEN = 1,
  /**
   * Another budget is spent (input, chunk, request cap): stop.
   */
  KVP_ADD_RESULT_OTHER = 2,
};
#ifndef __cplusplus
#if __STDC_VERSION__ >= 202311L
typedef enum kvp_add_result kvp_add_result;
#else
typedef uint32_t kvp_add_result;
#endif // __STDC_VERSION__ >= 202311L
#endif // __cplusplus

/**
 * The verdict of `kvp_delayer_negotiate`.
 */
enum kvp_delay_verdict
#if defined(__cplusplus) || __STDC_VERSION__ >= 202311L
  : uint32_t
#endif // defined(__cplusplus) || __STDC_VERSION__ >= 202311L
 {
  /**
   * Prefill; no rank had to wait.
   */
  KVP_DELAY_VERDICT_NO_WAIT = 0,
  /**
   * Prefill, after waiting for the other ranks.
   */
  KVP_DELAY_VERDICT_WAIT_SUCCESS = 1,
  /**
   * No rank can prefill.
   */
  KVP_DELAY_VERDICT_NONE_READY = 2,
  /**
   * A rank's KV usage is below the low watermark: prefill.
   */
  KVP_DELAY_VERDICT_TOKEN_WATERMARK = 3,
  /**
   * Waited the maximum passes: prefill.
   */
  KVP_DELAY_VERDICT_WAIT_TIMEOUT = 4,
  /**
   * Skip prefill this pass.
   */
  KVP_DELAY_VERDICT_DELAY = 5,
};
#ifndef __cplusplus
#if __STDC_VERSION__ >= 202311L
typedef enum kvp_delay_verdict kvp_delay_verdict;
#else
typedef uint32_t kvp_delay_verdict;
#endif // __STDC_VERSION__ >= 202311L
#endif // __cplusplus

/**
 * Debug checks of a device pool (`kvp_pool_set_debug` flags, or-ed together).
 */
enum kvp_debug
#if defined(__cplusplus) || __STDC_VERSION__ >= 202311L
  : uint32_t
#endif // defined(__cplusplus) || __STDC_VERSION__ >= 202311L
 {
  /**
   * Check on the device that every call of the pool starts after the previous one has
   * finished, i.e. that calls from different streams are ordered (one stream, or an event
   * recorded on the first and waited for by the second). A call that starts too early
   * faults the pool: the next call and `kvp_pool_check_device` return
   * `KVP_STATUS_UNORDERED_STREAMS`, naming both calls and their streams. Costs two
   * one-thread kernels per kernel of the pool; off, it costs nothing. Also switched on for
   * every device pool by the environment variable `KVPOOL_DEBUG=stream_order` at creation.
   */
  KVP_DEBUG_STREAM_ORDER = 1,
  /**
   * Let a call recorded by stream capture run again when its graph is replayed at once,
   * repeating the call on the state before it (the same slots again): for timing a call
   * by replaying its graph, as bench-gpu does. Without it the turn check faults a
   * captured call that runs a second time (`KVP_STATUS_DEVICE_FAULT`). Not for serving:
   * the repeated slots are handed out twice. Costs nothing.
   */
  KVP_DEBUG_REPLAY_CALLS = 2,
};
#ifndef __cplusplus
#if __STDC_VERSION__ >= 202311L
typedef enum kvp_debug kvp_debug;
#else
typedef uint32_t kvp_debug;
#endif // __STDC_VERSION__ >= 202311L
#endif // __cplusplus

/**
 * A CUDA stream (`cudaStream_t` and `CUstream` are pointers to it, so either converts
 * without a cast). Declared, never defined, by kvpool.
 */
struct CUstream_st;

/**
 * One prefill pass's admission budget (SGLang's `PrefillAdder`): offer the in-flight
 * chunked request first (`kvp_adder_add_chunked_req`), then waiting requests in policy
 * order (`kvp_adder_add_one_req`) until the verdict is not `KVP_ADD_RESULT_CONTINUE`.
 * A refused request leaves no trace (select, then commit).
 *
 * Created by `kvp_adder_new` for one pass, released by `kvp_adder_free`. Calls are
 * serialized by an internal lock.
 */
struct kvp_adder;

/**
 * A reservation of `K` decode steps of a fixed batch, made by `kvp_pool_reserve_decode`
 * (host pool) or `kvp_pool_reserve_decode_async` (device pool), stepped by
 * `kvp_decode_reservation_step[_async]`, ended by `kvp_decode_reservation_finish[_async]`
 * and released by `kvp_decode_reservation_free`. It keeps its pool alive.
 *
 * Thread safety: like every handle (calls serialized by a lock; a call also takes its
 * pool's lock, after the reservation's).
 */
struct kvp_decode_reservation;

/**
 * Decides, identically on every data-parallel rank, whether this pass prefills (SGLang's
 * PrefillDelayer), so one rank's prefill does not stall the others' decode. Per pass: each
 * rank calls `kvp_delayer_local_info`, the engine all-gathers the `kvp_rank_info`s (the
 * collective is the engine's), and every rank calls `kvp_delayer_negotiate` on the same
 * array; pass the verdict to `kvp_scheduler_step(..., allow_prefill, ...)` and report the
 * prefill batch size with `kvp_delayer_record_prefill`. Time comes from the caller
 * (`timed_out`), so decisions stay deterministic. As in SGLang, the first pass in a
 * delayer's life that the slot or queue condition would delay prefills instead.
 *
 * Created by `kvp_delayer_new`, released by `kvp_delayer_free`; calls are serialized.
 */
struct kvp_delayer;

/**
 * A KV-cache slot allocator (SGLang's `TokenToKVPoolAllocator` when `page_size == 1`,
 * `PagedTokenToKVPoolAllocator` otherwise). It hands out integer slot indices into KV
 * buffers the engine owns; it never touches KV data.
 *
 * Created by `kvp_pool_new`, released by `kvp_pool_free`.
 *
 * Thread safety: a pool may be used from several threads at once; calls on one pool are
 * serialized by an internal lock. `kvp_pool_free` must not run concurrently with any other
 * call on the same pool.
 */
struct kvp_pool;

/**
 * The continuous-batching scheduler: owns the waiting queue, the in-flight chunked
 * requests and the running set of request descriptors the engine submits, and plans each
 * step (SGLang's `get_next_batch_to_run`: prefill first, else decode with retraction).
 * It never allocates KV: the engine allocates and frees what each plan says.
 *
 * Created by `kvp_scheduler_new`, released by `kvp_scheduler_free`. Workflow per step:
 * `kvp_scheduler_submit` new requests → `kvp_scheduler_step` → free the KV of retracted,
 * preempted and aborted requests → allocate the prefill (`kvp_pool_alloc_extend`) and/or
 * decode (`kvp_pool_alloc_decode`) the plan lists → run the model →
 * `kvp_scheduler_finish` finished requests (and free their KV; `kvp_scheduler_finish_ex`
 * also says which leading tokens are the cached prefix to unlock rather than free).
 *
 * Thread safety: calls are serialized by an internal lock, but a scheduler belongs to one
 * scheduling loop: the arrays of a plan are overwritten by the next `kvp_scheduler_step`.
 */
struct kvp_scheduler;

/**
 * A copy of a pool's allocator state (free list, staged frees, page states), made by
 * `kvp_pool_backup_state` (`_async` for a device pool, whose snapshot lives in device
 * memory) and applied by `kvp_pool_restore_state` (`_async`) (SGLang 0.5.12's
 * `backup_state`/`restore_state`, e.g. to roll back speculative-decoding draft slots).
 *
 * Owned by the caller; release with `kvp_snapshot_free`. Immutable once made, so it may be
 * read from several threads; `kvp_snapshot_free` must not race with its use.
 */
struct kvp_snapshot;

/**
 * Per-pass constants of an adder. Sizes in tokens; 0 means "none" where noted. Start from
 * `kvp_adder_config_default()`.
 */
struct kvp_adder_config {
  /**
   * Tokens per page.
   */
  uint64_t page_size;
  /**
   * `max_prefill_tokens` (16384).
   */
  uint64_t max_prefill_tokens;
  /**
   * `chunked_prefill_size`; 0 disables chunking.
   */
  uint64_t chunked_prefill_size;
  /**
   * Decode rows mixed into this prefill (mixed chunk), charged to every budget.
   */
  uint64_t num_mixed_decode_tokens;
  /**
   * SGLang's `CLIP_MAX_NEW_TOKENS` (`KVP_CLIP_MAX_NEW_TOKENS`, 4096); must be positive.
   */
  uint64_t clip_max_new_tokens;
  /**
   * Chunks end on multiples of this; 0: none.
   */
  uint64_t truncation_align_size;
  /**
   * At most this many requests in the batch; 0: no cap.
   */
  uint64_t prefill_max_requests;
  /**
   * Chunked requests in flight at once (1 = SGLang).
   */
  uint64_t max_chunked_requests;
  /**
   * The current new-token ratio; finite and positive.
   */
  double new_token_ratio;
  /**
   * No prefix cache (`ignore_eos` requests use SGLang's future simulation).
   */
  bool prefix_cache_disabled;
};

/**
 * A running request, as the budget sees it.
 */
struct kvp_running_request {
  /**
   * Prompt tokens.
   */
  uint64_t input_len;
  /**
   * Tokens generated so far.
   */
  uint64_t output_len;
  /**
   * `max_new_tokens`.
   */
  uint64_t max_new_tokens;
  /**
   * Reserved at ratio 1.
   */
  bool ignore_eos;
};

/**
 * A waiting request offered to `kvp_adder_add_one_req`.
 */
struct kvp_candidate {
  /**
   * Tokens it will have in the KV cache once prefilled (prompt, plus output so far if it
   * was retracted).
   */
  uint64_t input_len;
  /**
   * Of those, tokens already cached.
   */
  uint64_t prefix_len;
  /**
   * Of those, tokens evictable now (locked on admission).
   */
  uint64_t prefix_evictable;
  /**
   * `max_new_tokens`.
   */
  uint64_t max_new_tokens;
  /**
   * Tokens generated so far.
   */
  uint64_t output_len;
  /**
   * Generates all `max_new_tokens`.
   */
  bool ignore_eos;
};

/**
 * What `kvp_adder_add_one_req` / `kvp_adder_add_chunked_req` decided.
 */
struct kvp_admission {
  /**
   * Whether the request joins the batch.
   */
  bool admitted;
  /**
   * Joined as a chunk (or, for a continuation: tokens remain after this chunk).
   */
  bool chunked;
  /**
   * Tokens it prefills this step (0 when not admitted).
   */
  uint64_t extend_len;
  /**
   * One of `kvp_add_result`: the verdict for the next candidate (or why this one was
   * refused).
   */
  uint32_t next;
};

/**
 * The budgets as they stand, filled by `kvp_adder_get_budget`.
 */
struct kvp_budget {
  /**
   * `A + E − total_offset`: room once everything admitted has grown.
   */
  double rem_total_tokens;
  /**
   * `A + E − current_offset`: room for this step's allocation.
   */
  int64_t cur_rem_tokens;
  /**
   * Input tokens left in this pass.
   */
  int64_t rem_input_tokens;
  /**
   * Chunk tokens left (`INT64_MAX` when chunking is disabled).
   */
  int64_t rem_chunk_tokens;
  /**
   * One of `kvp_add_result`: SGLang's `budget_state()`.
   */
  uint32_t state;
};

/**
 * Delayer tunables; 0 (or a negative fraction) disables an optional condition. Start from
 * `kvp_delayer_config_default()`.
 */
struct kvp_delayer_config {
  /**
   * The N-th consecutive pass that would be delayed times out and prefills instead, so at
   * most N − 1 passes in a row are delayed (SGLang: 30).
   */
  uint32_t max_delay_passes;
  /**
   * KV usage fraction below which a rank forces prefill; negative: off.
   */
  double token_usage_low_watermark;
  /**
   * Slot condition: request slots per rank; 0: off.
   */
  uint64_t max_running_requests;
  /**
   * Queue condition ratio; negative: off.
   */
  double queue_min_ratio;
  /**
   * Queue condition cap; 0: the ranks' recent prefill batch size.
   */
  uint64_t prefill_max_requests;
};

/**
 * What one rank contributes to a negotiation.
 */
struct kvp_rank_info {
  /**
   * The rank could prefill now.
   */
  bool prefillable;
  /**
   * Its KV usage is below the low watermark.
   */
  bool force_allow;
  /**
   * The caller's clock says this rank has waited its delay budget (SGLang:
   * `prefill_delayer_max_delay_ms`, 5000). Once every rank says so, the queue condition
   * no longer delays; the slot condition and a mixed pass are bounded by passes alone.
   */
  bool timed_out;
  /**
   * Running batch size.
   */
  uint64_t running_bs;
  /**
   * Largest of its last 16 non-empty prefill batches.
   */
  uint64_t max_prefill_bs;
  /**
   * Waiting-queue length.
   */
  uint64_t waiting_len;
};

/**
 * Configuration of a new pool. Start from `kvp_pool_config_default()` and set `size`.
 */
struct kvp_pool_config {
  /**
   * Usable token slots (SGLang's `max_total_num_tokens`); a positive multiple of
   * `page_size`. KV buffers need `size + page_size` rows: page 0 is the padding sink.
   */
  uint64_t size;
  /**
   * Tokens per page. 1 gives a token pool (freed slots reused first-in first-out);
   * more gives a paged pool (most recently freed page reused first). A device pool
   * takes at most 2^31 (`KVP_STATUS_INVALID_ARGUMENT` above).
   */
  uint32_t page_size;
  /**
   * One of `kvp_index_type`: the element type of every index buffer of this pool.
   */
  uint32_t index_type;
  /**
   * One of `kvp_backend`.
   */
  uint32_t backend;
  /**
   * CUDA device ordinal (ignored by the host backend).
   */
  int32_t device;
  /**
   * Stage frees and merge them, sorted, only when an allocation runs short (SGLang's
   * `need_sort`, used for PD disaggregation: sorted pages give contiguous transfers).
   */
  bool need_sort;
};

/**
 * Static facts about a pool, filled by `kvp_pool_get_info`.
 */
struct kvp_pool_info {
  /**
   * Usable token slots.
   */
  uint64_t size;
  /**
   * Rows the engine's KV buffers need: `size + page_size`.
   */
  uint64_t kv_rows;
  /**
   * The padding slot, always 0: padded rows (e.g. CUDA-graph padding) write their KV
   * here. It is never allocated.
   */
  uint64_t padding_slot;
  /**
   * Tokens per page.
   */
  uint32_t page_size;
  /**
   * `size / page_size` (page 0 excluded).
   */
  uint32_t num_pages;
  /**
   * One of `kvp_index_type`.
   */
  uint32_t index_type;
  /**
   * One of `kvp_backend`.
   */
  uint32_t backend;
  /**
   * CUDA device ordinal, or -1 for the host backend.
   */
  int32_t device;
  /**
   * Whether frees are staged and merged sorted.
   */
  bool need_sort;
  /**
   * Whether a free group is open.
   */
  bool in_free_group;
};

/**
 * A pool's counters, filled by `kvp_pool_get_stats`. Call, token and page counters only
 * grow (also across `kvp_pool_clear` and `kvp_pool_restore_state`).
 */
struct kvp_pool_stats {
  /**
   * `kvp_pool_alloc` calls, failed ones included.
   */
  uint64_t alloc_calls;
  /**
   * `kvp_pool_alloc_extend` calls, failed ones included.
   */
  uint64_t alloc_extend_calls;
  /**
   * `kvp_pool_alloc_decode` calls, failed ones included.
   */
  uint64_t alloc_decode_calls;
  /**
   * `kvp_pool_free_indices`, `_free_pages` and `_free_segment` calls, failed ones included.
   */
  uint64_t free_calls;
  /**
   * Slot indices handed out, one per token (a slot handed out again after a rewind
   * counts again).
   */
  uint64_t tokens_allocated;
  /**
   * Slot capacity returned to the pool: `pages_freed * page_size`, since a free returns
   * whole pages. On a paged pool it exceeds `tokens_allocated` when pages were freed
   * partly used (a 5-token request on 16-token pages frees 16 slots); to find a leak,
   * compare pages: `pages_allocated - pages_freed` is `pages_in_use` until a
   * `kvp_pool_clear` or `kvp_pool_restore_state`. Both backends count it from page
   * counts (a device pool's fill points are on the device).
   */
  uint64_t slots_freed;
  /**
   * Pages taken from the free list.
   */
  uint64_t pages_allocated;
  /**
   * Pages returned to the pool (at `kvp_pool_free_group_end` for frees inside a group).
   */
  uint64_t pages_freed;
  /**
   * Pages currently neither free nor staged (pages freed in an open group count).
   */
  uint64_t pages_in_use;
  /**
   * The largest `pages_in_use` seen.
   */
  uint64_t pages_in_use_peak;
  /**
   * Allocations refused with `KVP_STATUS_OUT_OF_SLOTS`.
   */
  uint64_t failed_allocations;
  /**
   * Calls refused for bad input or state.
   */
  uint64_t rejected_calls;
  /**
   * Merges of staged frees that had something to merge.
   */
  uint64_t merges;
  /**
   * Successful `kvp_pool_restore_state` calls.
   */
  uint64_t restores;
};

/**
 * A request-to-token table borrowed for one call (SGLang's `ReqToTokenPool.req_to_token`,
 * PyTorch's `req_to_token` tensor): entry `[r][k]` (at `data + r * row_stride + k`) is the
 * KV slot of token `k` of the request that owns row `r`. Nothing is registered or kept:
 * every call that takes a table reads (and for allocations writes) it during the call
 * (host pools) or when the stream runs the call (device pools).
 *
 * `data` is host memory for a host pool and device memory for a device pool; it must
 * span `(rows - 1) * row_stride + row_len` elements of `index_type` (independent of the
 * pool's index type: SGLang's table is int32 while `out_cache_loc` is int64; an int32
 * table needs the pool's slots to fit int32).
 */
struct kvp_req_table {
  /**
   * First element of row 0.
   */
  void *data;
  /**
   * One of `kvp_index_type`: `int64_t` or `int32_t` entries.
   */
  uint32_t index_type;
  /**
   * Rows (request slots); at most `UINT32_MAX`.
   */
  uint64_t rows;
  /**
   * Elements from one row to the next (`>= row_len` when `rows > 1`); any stride, e.g.
   * `tensor.stride(0)`.
   */
  uint64_t row_stride;
  /**
   * Usable entries per row: the longest sequence a row holds (`max_context_len`).
   */
  uint64_t row_len;
};

/**
 * Configuration of a scheduler. Start from `kvp_scheduler_config_default()` (SGLang's
 * defaults) and change what you need. Sizes are in tokens; 0 means "none" where noted.
 */
struct kvp_scheduler_config {
  /**
   * Token slots of the pool; taken from the pool when the scheduler is attached to one.
   */
  uint64_t capacity;
  /**
   * Tokens per page; taken from the pool when attached.
   */
  uint64_t page_size;
  /**
   * `max_prefill_tokens`: input-token budget of one prefill step (16384); 1 to
   * `INT64_MAX`.
   */
  uint64_t max_prefill_tokens;
  /**
   * `chunked_prefill_size` (8192); 0 disables chunked prefill.
   */
  uint64_t chunked_prefill_size;
  /**
   * SGLang's `CLIP_MAX_NEW_TOKENS` (`KVP_CLIP_MAX_NEW_TOKENS`, 4096): cap on expected
   * output when reserving; must be positive.
   */
  uint64_t clip_max_new_tokens;
  /**
   * Chunks end on multiples of this; 0: none.
   */
  uint64_t truncation_align_size;
  /**
   * At most this many requests per prefill step; 0: no cap.
   */
  uint64_t prefill_max_requests;
  /**
   * At most this many running requests (request slots); 0: no cap.
   */
  uint64_t max_running_requests;
  /**
   * Chunked requests in flight at once (1 = SGLang).
   */
  uint64_t max_chunked_requests;
  /**
   * One of `kvp_policy`.
   */
  uint32_t policy;
  /**
   * One of `kvp_retraction`.
   */
  uint32_t retraction;
  /**
   * Seed of `KVP_POLICY_RANDOM`.
   */
  uint64_t policy_seed;
  /**
   * Priority scheduling: priorities order the queue under FCFS and LOF (not LPM,
   * DFS-weight or random, as in SGLang) and allow preemption.
   */
  bool enable_priority;
  /**
   * With priority scheduling: lower values run first.
   */
  bool low_priority_values_first;
  /**
   * Preempt running requests worse by more than this (SGLang: 10); negative disables.
   */
  int64_t preemption_threshold;
  /**
   * Mix running requests' decode rows into prefill steps (needs chunked prefill).
   */
  bool enable_mixed_chunk;
  /**
   * No prefix cache: `ignore_eos` requests go through SGLang's future simulation.
   */
  bool prefix_cache_disabled;
  /**
   * `SGLANG_INIT_NEW_TOKEN_RATIO` (0.7).
   */
  double init_new_token_ratio;
  /**
   * `SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR` (0.14).
   */
  double min_new_token_ratio_factor;
  /**
   * `SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS` (600).
   */
  uint32_t new_token_ratio_decay_steps;
  /**
   * `schedule_conservativeness` (1.0).
   */
  double schedule_conservativeness;
  /**
   * Dynamic chunk sizing: quadratic coefficient `a` of the latency model
   * `a·l² + b·l + c`; 0 disables.
   */
  double dynamic_chunk_a;
  /**
   * Dynamic chunk sizing: linear coefficient `b`.
   */
  double dynamic_chunk_b;
  /**
   * Dynamic chunk sizing: the model's context length.
   */
  uint64_t dynamic_chunk_context_len;
};

/**
 * A request as the engine submits it.
 */
struct kvp_request {
  /**
   * The engine's id, unique among live requests.
   */
  uint64_t id;
  /**
   * Prompt tokens.
   */
  uint64_t input_len;
  /**
   * Prompt tokens already in the engine's prefix cache (page-aligned on a paged cache).
   */
  uint64_t prefix_len;
  /**
   * Of those, tokens that are evictable now (admission locks them: they stop being room).
   */
  uint64_t prefix_evictable;
  /**
   * `max_new_tokens`.
   */
  uint64_t max_new_tokens;
  /**
   * Tokens generated so far (0 for a new request).
   */
  uint64_t output_len;
  /**
   * Priority (with `enable_priority`); any value, `INT64_MIN` and `INT64_MAX` included.
   */
  int64_t priority;
  /**
   * Generates all `max_new_tokens` regardless of EOS.
   */
  bool ignore_eos;
};

/**
 * Result of `kvp_scheduler_submit`.
 */
struct kvp_submit_result {
  /**
   * `true`: queued. `false`: the request can never fit the pool (admission needs more
   * room than `needed` tokens, so `false` exactly when `needed >= capacity`) and was not
   * queued — fail it instead of letting it wait forever.
   */
  bool queued;
  /**
   * Tokens the request needs at admission: prompt + output so far + clipped remaining
   * output + one page (an `ignore_eos` request with `prefix_cache_disabled`: prompt +
   * output so far rounded up to a page + its whole remaining output + 1, the room
   * SGLang's future simulation needs); `UINT64_MAX` when that sum does not fit in 64 bits.
   */
  uint64_t needed;
  /**
   * The pool's capacity.
   */
  uint64_t capacity;
};

/**
 * One request of a prefill batch: pass `prefix_len` and `prefix_len + extend_len` as its
 * `prefix_lens[i]` and `seq_lens[i]` to `kvp_pool_alloc_extend`.
 */
struct kvp_prefill_entry {
  /**
   * Request id.
   */
  uint64_t id;
  /**
   * Tokens already in the KV cache.
   */
  uint64_t prefix_len;
  /**
   * Tokens this step computes.
   */
  uint64_t extend_len;
  /**
   * More chunks follow in later steps.
   */
  bool chunked;
};

/**
 * A request whose KV the engine must free now: `row[prefix_len .. kv_len)` of its slot
 * row; the leading `prefix_len` tokens belong to the prefix cache (unlock them instead).
 */
struct kvp_evicted {
  /**
   * Request id.
   */
  uint64_t id;
  /**
   * Tokens of KV in its row.
   */
  uint64_t kv_len;
  /**
   * Leading tokens of the row that belong to the prefix cache (its cached prefix at
   * admission).
   */
  uint64_t prefix_len;
};

/**
 * The plan of one step. The arrays belong to the scheduler and stay valid until the next
 * `kvp_scheduler_step` or `kvp_scheduler_free` on it.
 */
struct kvp_step_plan {
  /**
   * One of `kvp_step_kind`.
   */
  uint32_t kind;
  /**
   * Memory is exhausted for new requests (SGLang's `batch_is_full`).
   */
  bool batch_is_full;
  /**
   * The new-token ratio after this step.
   */
  double new_token_ratio;
  /**
   * Prefill entries, chunk continuations first.
   */
  const struct kvp_prefill_entry *prefill;
  /**
   * Entries in `prefill`.
   */
  size_t num_prefill;
  /**
   * Ids decoding this step (each sequence grows by one token): `kvp_pool_alloc_decode`.
   */
  const uint64_t *decode;
  /**
   * Entries in `decode`.
   */
  size_t num_decode;
  /**
   * Retracted for lack of decode memory: free their KV; they wait again.
   */
  const struct kvp_evicted *retracted;
  /**
   * Entries in `retracted`.
   */
  size_t num_retracted;
  /**
   * Preempted by higher-priority requests: free their KV; they wait again.
   */
  const struct kvp_evicted *preempted;
  /**
   * Entries in `preempted`.
   */
  size_t num_preempted;
  /**
   * Gone for lack of memory (could not decode even alone, or evicted and grown past
   * what the pool could ever re-admit): free their KV; fail the requests.
   */
  const struct kvp_evicted *aborted;
  /**
   * Entries in `aborted`.
   */
  size_t num_aborted;
};

/**
 * What a request leaving the scheduler held, filled by `kvp_scheduler_finish_ex` and
 * `kvp_scheduler_abort_ex`: its slot row `row[0 .. kv_len)` splits into the cached prefix
 * it reused, `row[0 .. prefix_len)`, which its admission locked in the engine's prefix
 * cache (unlock it, do not free it), and its own KV, `row[prefix_len .. kv_len)` (free it,
 * or insert it into the prefix cache as SGLang's `cache_finished_req` does). The same split
 * as `kvp_evicted`.
 */
struct kvp_finished {
  /**
   * Request id.
   */
  uint64_t id;
  /**
   * Tokens of KV in its row (what `kvp_scheduler_finish` / `_abort` report).
   */
  uint64_t kv_len;
  /**
   * Leading tokens of the row that belong to the prefix cache: the `prefix_len` the
   * engine gave (`kvp_scheduler_submit` or `kvp_scheduler_update_prefix`) when the
   * request was last admitted, at most `kv_len`; 0 for a request holding no KV (waiting:
   * never admitted, or retracted or preempted since — those reset it).
   */
  uint64_t prefix_len;
  /**
   * Of `prefix_len`, the tokens the engine declared evictable (`prefix_evictable`)
   * before that admission: the part of the prefix no other request had locked then. A
   * record from admission time, not the lock state now — the scheduler does not track
   * other requests' locks on the same prefix; the engine's prefix cache does.
   */
  uint64_t prefix_evictable;
};

/**
 * A live request's state, filled by `kvp_scheduler_get_request`.
 */
struct kvp_request_state {
  /**
   * One of `kvp_phase`.
   */
  uint32_t phase;
  /**
   * Tokens in its KV (its slot row's length).
   */
  uint64_t kv_len;
  /**
   * Tokens generated (the scheduler counts one at the end of the prefill and one per
   * decode step).
   */
  uint64_t output_len;
};

/**
 * Counters and queue sizes, filled by `kvp_scheduler_get_stats`.
 */
struct kvp_scheduler_stats {
  /**
   * `kvp_scheduler_step` calls.
   */
  uint64_t steps;
  /**
   * Prefill steps.
   */
  uint64_t prefill_steps;
  /**
   * Decode steps.
   */
  uint64_t decode_steps;
  /**
   * Requests admitted (whole or first chunk).
   */
  uint64_t admitted;
  /**
   * Prefill entries issued (chunk continuations included).
   */
  uint64_t chunks;
  /**
   * Retractions.
   */
  uint64_t retractions;
  /**
   * Preemptions.
   */
  uint64_t preemptions;
  /**
   * Requests aborted for lack of memory.
   */
  uint64_t aborts;
  /**
   * Submissions refused as unfittable.
   */
  uint64_t unfittable;
  /**
   * Requests finished.
   */
  uint64_t finished;
  /**
   * Waiting requests now.
   */
  uint64_t waiting;
  /**
   * Chunked requests in flight now.
   */
  uint64_t chunking;
  /**
   * Running requests now.
   */
  uint64_t running;
  /**
   * The new-token ratio now.
   */
  double new_token_ratio;
};

#ifdef __cplusplus
extern "C" {
#endif // __cplusplus

/**
 * Returns SGLang's defaults for one pass: `page_size` 1, `max_prefill_tokens` 16384,
 * chunked prefill 8192, no mixed decode rows, clip 4096, no truncation alignment, no
 * request cap, one chunked request in flight, ratio 0.7, prefix cache enabled.
 */
struct kvp_adder_config kvp_adder_config_default(void);

/**
 * Starts a prefill pass: `available` free pool tokens, `evictable` prefix-cache tokens,
 * the running requests (`num_running` entries; NULL when 0) and the number of chunked
 * requests in flight. Ownership: inputs are read during the call; `*out_adder` is owned
 * by the caller (`kvp_adder_free`). Fails with `KVP_STATUS_NULL_ARGUMENT` or
 * `KVP_STATUS_INVALID_ARGUMENT`, the message naming the field: `page_size`,
 * `max_prefill_tokens` or `chunked_prefill_size` beyond `INT64_MAX`, `page_size`,
 * `max_prefill_tokens`, `clip_max_new_tokens` or `max_chunked_requests` 0,
 * `num_mixed_decode_tokens` beyond `INT64_MAX`, a `new_token_ratio` that is not finite
 * and positive, or `available + evictable` beyond `INT64_MAX` tokens (it would wrap into
 * a tiny budget); `*out_adder` is unmodified on failure.
 *
 * # Safety
 * Pointers valid for their stated lengths, or NULL.
 */
KVP_NODISCARD
enum kvp_status kvp_adder_new(const struct kvp_adder_config *config,
                              uint64_t available,
                              uint64_t evictable,
                              const struct kvp_running_request *running,
                              size_t num_running,
                              uint64_t chunked_in_flight,
                              struct kvp_adder **out_adder);

/**
 * Releases an adder. NULL is a no-op.
 *
 * # Safety
 * `adder` NULL or live, not used afterwards.
 */
void kvp_adder_free(struct kvp_adder *adder);

/**
 * Offers a waiting request (SGLang's `add_one_req`): checks the total, input and chunk
 * budgets (locking the request's own cached prefix), admits it whole or as a page- and
 * tile-aligned first chunk, and writes the decision to `*out_admission`. A refused
 * request changes nothing. Fails, changing nothing, with `KVP_STATUS_NULL_ARGUMENT` or
 * `KVP_STATUS_INVALID_LENGTHS`: `prefix_len > input_len`, `prefix_evictable >
 * prefix_len`, or an `input_len` that, rounded up to a page, exceeds `INT64_MAX` tokens
 * (any `max_new_tokens` is fine: the budgets sum it exactly). `prefix_len == input_len`
 * is not refused: when the budgets admit it, it is admitted with `extend_len` 0, nothing
 * to compute. Pass at most `input_len - 1` cached tokens, as SGLang's prefix match does,
 * so that the last token is computed (`kvp_scheduler_submit` refuses a request without
 * one).
 *
 * # Safety
 * `candidate` and `out_admission` valid or NULL.
 */
KVP_NODISCARD
enum kvp_status kvp_adder_add_one_req(struct kvp_adder *adder,
                                      const struct kvp_candidate *candidate,
                                      struct kvp_admission *out_admission);

/**
 * Continues the in-flight chunked request, `prefix_len` tokens prefilled and `remaining`
 * still to go (SGLang's `add_chunked_req`; call it first in a pass). It progresses even
 * when the budget is spent, but never beyond what the free room holds (the rest of its
 * partial page plus whole free pages); `admitted` is false when that is nothing (it then
 * waits). `chunked` says tokens remain after this chunk. Fails, changing nothing, with
 * `KVP_STATUS_NULL_ARGUMENT` or `KVP_STATUS_INVALID_LENGTHS` when `prefix_len +
 * remaining`, rounded up to a page, exceeds `INT64_MAX` tokens. With the prefix cache
 * disabled, the `ignore_eos` simulation of later candidates counts it as a request that
 * stops at EOS and has generated nothing yet (`kvp_scheduler` passes both).
 *
 * # Safety
 * `out_admission` writable or NULL.
 */
KVP_NODISCARD
enum kvp_status kvp_adder_add_chunked_req(struct kvp_adder *adder,
                                          uint64_t prefix_len,
                                          uint64_t remaining,
                                          uint64_t max_new_tokens,
                                          struct kvp_admission *out_admission);

/**
 * Writes the budgets and SGLang's `budget_state()` to `*out_budget`.
 *
 * # Safety
 * `out_budget` writable or NULL.
 */
KVP_NODISCARD
enum kvp_status kvp_adder_get_budget(const struct kvp_adder *adder,
                                     struct kvp_budget *out_budget);

/**
 * Switches a pool's debug checks on (`flags`, an or of `kvp_debug` values) or off (0).
 *
 * Device pool: takes effect for the next call. Switching `KVP_DEBUG_STREAM_ORDER` on the
 * first time allocates a 4-byte device word (and may synchronize, like `kvp_pool_new`: do
 * it at start-up); the first call after switching it on is not checked against the calls
 * made before. Host pool: accepted and ignored (a host pool has no streams); returns
 * `KVP_STATUS_OK`.
 *
 * Fails with `KVP_STATUS_INVALID_ARGUMENT` for an unknown flag, changing nothing.
 *
 * # Safety
 * `pool` a live pool or NULL.
 */
KVP_NODISCARD enum kvp_status kvp_pool_set_debug(struct kvp_pool *pool, uint32_t flags);

/**
 * Writes the pool's debug flags to `*out_flags` (always 0 for a host pool).
 *
 * # Safety
 * `pool` a live pool or NULL; `out_flags` writable or NULL.
 */
KVP_NODISCARD enum kvp_status kvp_pool_get_debug(struct kvp_pool *pool, uint32_t *out_flags);

/**
 * Writes to `*out_count` how many released device pools (or snapshot-buffer sets of
 * released pools) of this process still wait for kernels that were queued when they were
 * released: their memory is freed by a library thread shortly after the streams pass
 * that work (see `kvp_pool_free`). For tests and leak diagnostics; never synchronizes and
 * never loads the driver.
 *
 * # Safety
 * `out_count` writable or NULL.
 */
KVP_NODISCARD enum kvp_status kvp_device_pending_releases(size_t *out_count);

/**
 * Returns SGLang's defaults: 30 passes, no low watermark, no slot or queue condition.
 */
struct kvp_delayer_config kvp_delayer_config_default(void);

/**
 * Creates a delayer. Fails with `KVP_STATUS_NULL_ARGUMENT` or
 * `KVP_STATUS_INVALID_ARGUMENT`, the message naming the field (`max_delay_passes` 0, a
 * NaN or infinite `token_usage_low_watermark` or `queue_min_ratio`).
 *
 * # Safety
 * `config`, `out_delayer` valid or NULL.
 */
KVP_NODISCARD
enum kvp_status kvp_delayer_new(const struct kvp_delayer_config *config,
                                struct kvp_delayer **out_delayer);

/**
 * Releases a delayer. NULL is a no-op.
 *
 * # Safety
 * `delayer` NULL or live, not used afterwards.
 */
void kvp_delayer_free(struct kvp_delayer *delayer);

/**
 * Computes this rank's contribution: `token_usage` is the pool's used fraction (0..1).
 * Fails with `KVP_STATUS_NULL_ARGUMENT`, or `KVP_STATUS_INVALID_ARGUMENT` for a NaN or
 * infinite `token_usage`.
 *
 * # Safety
 * `out_info` writable or NULL.
 */
KVP_NODISCARD
enum kvp_status kvp_delayer_local_info(const struct kvp_delayer *delayer,
                                       bool prefillable,
                                       double token_usage,
                                       uint64_t running_bs,
                                       uint64_t waiting_len,
                                       bool timed_out,
                                       struct kvp_rank_info *out_info);

/**
 * Decides this pass from all ranks' infos (`num_ranks` ≥ 1) and writes a
 * `kvp_delay_verdict` to `*out_verdict`; prefill is allowed for every verdict except
 * `KVP_DELAY_VERDICT_DELAY`.
 *
 * # Safety
 * `ranks` valid for `num_ranks` elements; `out_verdict` writable or NULL.
 */
KVP_NODISCARD
enum kvp_status kvp_delayer_negotiate(struct kvp_delayer *delayer,
                                      const struct kvp_rank_info *ranks,
                                      size_t num_ranks,
                                      uint32_t *out_verdict);

/**
 * Records the size of the prefill batch this rank ran (0 is ignored).
 *
 * # Safety
 * `delayer` live or NULL.
 */
KVP_NODISCARD
enum kvp_status kvp_delayer_record_prefill(struct kvp_delayer *delayer,
                                           uint64_t batch_size);

/**
 * Enqueues `alloc(num_tokens)` on `stream`: `num_tokens` slots into `out[0 .. num_tokens)`
 * (device). Semantics of `kvp_pool_alloc`: a paged pool needs `num_tokens % page_size == 0`
 * and returns whole pages.
 *
 * Checked on the host, before anything is enqueued (failure enqueues nothing and changes
 * nothing, but for a shortage, which may first enqueue the merge of staged `need_sort`
 * frees, as SGLang does): alignment, `out_len`, shortage (`KVP_STATUS_OUT_OF_SLOTS`).
 * Enqueues one kernel (two when the shortage check merges staged frees). `out` must stay alive
 * until the stream passes the call.
 *
 * # Safety
 * `pool` a live pool or NULL; `out` device memory of the pool's device for `out_len`
 * indices; `stream` a live stream of the pool's device's primary context, or NULL.
 */
KVP_NODISCARD
enum kvp_status kvp_pool_alloc_async(struct kvp_pool *pool,
                                     size_t num_tokens,
                                     void *out,
                                     size_t out_len,
                                     struct CUstream_st *stream);

/**
 * Enqueues `alloc_extend` on `stream`: the KV slots of a prefill/extend batch into
 * `out[0 .. extend_num_tokens)` (device), with exactly the indices of
 * `kvp_pool_alloc_extend` (SGLang's three-part index math, new pages in batch order).
 *
 * `prefix_lens_host` / `seq_lens_host` are host copies of the device arrays `prefix_lens`
 * / `seq_lens` (SGLang's `*_lens_cpu`): the host validates the lengths and counts the new
 * pages from them, so no device value is ever read back; the two must agree. The kernel
 * reads `prefix_lens`, `seq_lens` and `last_loc` (device) and writes `out` (device).
 *
 * Checked on the host before anything is enqueued: lengths (`KVP_STATUS_INVALID_LENGTHS`),
 * `out_len` (`KVP_STATUS_BUFFER_TOO_SMALL`), shortage (`KVP_STATUS_OUT_OF_SLOTS`; the merge
 * of staged frees the shortage check may make first stays enqueued, as for
 * `kvp_pool_alloc_async`), NULLs, alignment, the stream (`KVP_STATUS_WRONG_STREAM`). Checked by the kernel: each
 * `last_loc` (allocated, consistent with its prefix, its page's last handed-out slot — see
 * `kvp_pool_rewind` — no page extended twice), and that the device lengths add up to the
 * host plan (a stale device copy: the fault names the first request that runs past the
 * plan, or the last request when the device totals fall short of it). The kernel never
 * writes past `out[extend_num_tokens)` and never takes a page the host did not count,
 * whatever the device lengths say. A kernel that finds a bad element changes nothing,
 * writes the padding slot 0 to all of `out[0 .. extend_num_tokens)`, and faults the pool:
 * the next call (or `kvp_pool_check_device`) returns `KVP_STATUS_DEVICE_FAULT`.
 *
 * Enqueues one kernel (plus a merge when `need_sort` frees must be merged first). All five
 * device buffers must stay alive until the stream passes the call; the host arrays are read
 * during the call only. O(batch) per block; any batch size without recompiling.
 *
 * # Safety
 * Host arrays valid for `batch_size` elements; device arrays of the pool's device valid for
 * `batch_size` (`out`: `out_len`) elements; `stream` as for `kvp_pool_alloc_async`.
 */
KVP_NODISCARD
enum kvp_status kvp_pool_alloc_extend_async(struct kvp_pool *pool,
                                            const int64_t *prefix_lens_host,
                                            const int64_t *seq_lens_host,
                                            const int64_t *prefix_lens,
                                            const int64_t *seq_lens,
                                            const void *last_loc,
                                            size_t batch_size,
                                            size_t extend_num_tokens,
                                            void *out,
                                            size_t out_len,
                                            struct CUstream_st *stream);

/**
 * Enqueues `alloc_decode` on `stream`: one slot per request into `out[0 .. batch_size)`
 * (device), the indices of `kvp_pool_alloc_decode`. `seq_lens_host` is the host copy of
 * `seq_lens` (device). Checks and faults as for `kvp_pool_alloc_extend_async`; enqueues one
 * kernel. `seq_lens`, `last_loc` and `out` must stay alive until the stream passes the call.
 *
 * # Safety
 * As for `kvp_pool_alloc_extend_async`.
 */
KVP_NODISCARD
enum kvp_status kvp_pool_alloc_decode_async(struct kvp_pool *pool,
                                            const int64_t *seq_lens_host,
                                            const int64_t *seq_lens,
                                            const void *last_loc,
                                            size_t batch_size,
                                            void *out,
                                            size_t out_len,
                                            struct CUstream_st *stream);

/**
 * Enqueues a free by slot index (`kvp_pool_free_indices` semantics) of `indices[0 .. len)`
 * (device). Token pool: slots return to the tail in order. Paged pool: the distinct pages
 * are found and sorted on the device (no `torch.unique`, no sync) and return to the front.
 *
 * Counting: on a paged pool the number of distinct pages is known only to the kernel;
 * until the stream has passed this call, `kvp_pool_available_size` does not count them (a
 * lower bound; `kvp_pool_available_size_bound` says so) — they count at the first call
 * after that, with no synchronization. Prefer `kvp_pool_free_segment_async` where a
 * request's row is at hand: its count is exact at once.
 *
 * Checked by the kernel: each index allocated, in range, not slot/page 0, not twice.
 * A bad one: nothing is freed and the pool faults (`KVP_STATUS_DEVICE_FAULT` from the next
 * call). `indices` must stay alive until the stream passes the call. One kernel (paged
 * pool, more than 4,096 indices: two multi-block kernels — claim and count the claimed pages
 * per chunk of the page map, then release them in ascending order).
 *
 * # Safety
 * `indices` device memory of the pool's device valid for `len` indices; `stream` as for
 * `kvp_pool_alloc_async`.
 */
KVP_NODISCARD
enum kvp_status kvp_pool_free_indices_async(struct kvp_pool *pool,
                                            const void *indices,
                                            size_t len,
                                            struct CUstream_st *stream);

/**
 * Enqueues a rewind on `stream` (`kvp_pool_rewind` semantics): each `last_kept[i]` (device)
 * becomes its page's last handed-out slot, so the next continuation from it gets the slots
 * after it again (speculative decoding that rejected draft tokens). The host checks
 * NULLs, alignment and the stream; the kernel checks each slot (allocated, at or before its
 * page's fill point, each page once); a bad one changes nothing and faults the pool. Counts
 * do not change. `last_kept` must stay alive until the stream passes the call. One kernel
 * (one block).
 *
 * # Safety
 * As for `kvp_pool_free_indices_async`.
 */
KVP_NODISCARD
enum kvp_status kvp_pool_rewind_async(struct kvp_pool *pool,
                                      const void *last_kept,
                                      size_t len,
                                      struct CUstream_st *stream);

/**
 * Enqueues a free of exactly the pages `page_ids[0 .. len)` (device), in order
 * (`kvp_pool_free_pages` semantics). The count is exact at once. The kernel checks each
 * page (allocated, in range, not page 0, listed once); a bad one frees nothing and faults
 * the pool. `page_ids` must stay alive until the stream passes the call. One kernel.
 *
 * # Safety
 * As for `kvp_pool_free_indices_async`.
 */
KVP_NODISCARD
enum kvp_status kvp_pool_free_pages_async(struct kvp_pool *pool,
                                          const void *page_ids,
                                          size_t len,
                                          struct CUstream_st *stream);

/**
 * Enqueues a free of the pages of `row[start_pos .. start_pos + len)` (device: one
 * request's `req_to_token` row), `kvp_pool_free_segment` semantics. The page count is
 * known on the host, so `kvp_pool_available_size` is exact at once. Host checks:
 * `start_pos + len <= row_len` (`KVP_STATUS_BUFFER_TOO_SMALL`), paged `start_pos %
 * page_size == 0` (`KVP_STATUS_UNALIGNED`) unless `len == 0` (a no-op). Kernel checks: each page allocated, its slots
 * consecutive and page-aligned in the row; a bad one frees nothing and faults the pool.
 * `row` must stay alive until the stream passes the call. One kernel.
 *
 * # Safety
 * `row` device memory valid for `row_len` indices; `stream` as for
 * `kvp_pool_alloc_async`.
 */
KVP_NODISCARD
enum kvp_status kvp_pool_free_segment_async(struct kvp_pool *pool,
                                            const void *row,
                                            size_t row_len,
                                            size_t start_pos,
                                            size_t len,
                                            struct CUstream_st *stream);

/**
 * Enqueues the end of a free group opened by `kvp_pool_free_group_begin`: its pages return
 * to the pool (paged: those freed by index as one ascending block, then those freed by
 * page id or segment in call order). `KVP_STATUS_INVALID_STATE` without an open group.
 * One kernel.
 *
 * # Safety
 * `pool` a live pool or NULL; `stream` as for `kvp_pool_alloc_async`.
 */
KVP_NODISCARD
enum kvp_status kvp_pool_free_group_end_async(struct kvp_pool *pool,
                                              struct CUstream_st *stream);

/**
 * Enqueues SGLang's `merge_and_sort_free`: staged frees join the free list, which becomes
 * ascending. Enqueues nothing when nothing can be staged. One kernel.
 *
 * # Safety
 * As for `kvp_pool_free_group_end_async`.
 */
KVP_NODISCARD
enum kvp_status kvp_pool_merge_and_sort_free_async(struct kvp_pool *pool,
                                                   struct CUstream_st *stream);

/**
 * Enqueues a reset: every slot free (pages `1 .. num_pages` in order), staged frees and an
 * open free group dropped, and a device fault cleared (the way out of
 * `KVP_STATUS_DEVICE_FAULT`). One kernel.
 *
 * # Safety
 * As for `kvp_pool_free_group_end_async`.
 */
KVP_NODISCARD
enum kvp_status kvp_pool_clear_async(struct kvp_pool *pool,
                                     struct CUstream_st *stream);

/**
 * Enqueues a copy of the allocator state (free ring, staged frees, page map: 12 bytes a
 * page, device to device) into a new snapshot written to `*out_snapshot`. The snapshot's
 * device buffer comes from the pool's spares (buffers of freed snapshots) when there is
 * one, else from `cuMemAlloc` (refused while `stream` is being captured:
 * `KVP_STATUS_INVALID_STATE`, the capture intact; take and free a snapshot before
 * capturing). Fails with `KVP_STATUS_INVALID_STATE` while a free group is open. Release
 * with `kvp_snapshot_free` (its buffer goes back to the pool's spares; no
 * synchronization). One kernel.
 *
 * # Safety
 * `pool` a live pool or NULL; `out_snapshot` writable or NULL; `stream` as for
 * `kvp_pool_alloc_async`.
 */
KVP_NODISCARD
enum kvp_status kvp_pool_backup_state_async(struct kvp_pool *pool,
                                            struct kvp_snapshot **out_snapshot,
                                            struct CUstream_st *stream);

/**
 * Enqueues a restore of `snapshot` (taken from this pool by `kvp_pool_backup_state_async`):
 * slots allocated since are free again, slots freed since allocated again; also clears a
 * device fault. The snapshot stays usable, and may be freed right after this call (its
 * buffer goes to the pool's spares and is reused only in stream order, after the restore
 * has read it). Fails with `KVP_STATUS_FOREIGN_SNAPSHOT` or
 * `KVP_STATUS_INVALID_STATE` (free group open — unless the pool is faulted: its group end
 * is refused like any work, so the restore abandons the group). One kernel. A snapshot
 * whose backup ran while the pool was faulted (enqueued after a call the device refused,
 * before the host saw the fault) is not restored: the kernel changes nothing and faults
 * the pool again, its message saying so; restore one taken before the faulting call.
 *
 * # Safety
 * `pool` a live pool or NULL; `snapshot` a live snapshot or NULL; `stream` as for
 * `kvp_pool_alloc_async`.
 */
KVP_NODISCARD
enum kvp_status kvp_pool_restore_state_async(struct kvp_pool *pool,
                                             const struct kvp_snapshot *snapshot,
                                             struct CUstream_st *stream);

/**
 * Reports what the device found, without synchronizing: `KVP_STATUS_OK`, or
 * `KVP_STATUS_DEVICE_FAULT` with a message naming the call, the element and its value —
 * while the pool is faulted, and once more for a fault from before the last clear/restore;
 * `KVP_STATUS_CUDA_ERROR` while it refuses work after a call only partly enqueued (see
 * `KVP_STATUS_CUDA_ERROR`). A fault in a call the stream has not reached yet is not visible yet: synchronize the
 * stream first to check everything enqueued so far. Device pools only: a host pool (whose
 * calls report their errors themselves) fails with `KVP_STATUS_WRONG_BACKEND`.
 *
 * # Safety
 * `pool` a live pool or NULL.
 */
KVP_NODISCARD
enum kvp_status kvp_pool_check_device(struct kvp_pool *pool);

/**
 * Writes the free token slots to `*out_tokens` and whether that number is exact to
 * `*out_exact` (false while a paged `kvp_pool_free_indices_async` is in flight: then it is
 * a lower bound, exact again once the stream has passed that free). Never synchronizes.
 * Device pools only: a host pool fails with `KVP_STATUS_WRONG_BACKEND` (its
 * `kvp_pool_available_size` is always exact). Both out-pointers are required
 * (`KVP_STATUS_NULL_ARGUMENT`).
 *
 * # Safety
 * `pool` a live pool or NULL; the out-pointers writable or NULL.
 */
KVP_NODISCARD
enum kvp_status kvp_pool_available_size_bound(struct kvp_pool *pool,
                                              uint64_t *out_tokens,
                                              bool *out_exact);

/**
 * Writes the pool's state digest to `*out_digest`: a 64-bit hash of everything that decides
 * the pool's next answers. Two pools of the same configuration (size, page size,
 * `need_sort`; the index type and backend do not matter) that went through the same
 * operations have equal digests, and a host pool and a device pool in the same state give
 * the same value — so tensor-parallel ranks (one pool each, driven by the same inputs)
 * check that they agree by comparing one integer, e.g. with an all-gather per step.
 * O(num_pages); changes nothing. Host pools only: a device pool fails with
 * `KVP_STATUS_WRONG_BACKEND` (use `kvp_pool_digest_async`).
 *
 * Definition (version `KVP_DIGEST_VERSION` = 1; all arithmetic modulo 2^64):
 *
 * - `mix(x)`: `z = x + 0x9E3779B97F4A7C15; z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9;
 *   z = (z ^ (z >> 27)) * 0x94D049BB133111EB; mix(x) = z ^ (z >> 31)` (splitmix64's
 *   output function). `chain(h, x1, x2, ...)`: `h = mix(h ^ x1); h = mix(h ^ x2); ...`.
 * - Free list, in order: `F = sum over k of mix(mix(0x465245454C495354 + k) ^ page_k)`, the
 *   free pages from the one handed out next (`k = 0`), staged pages excluded.
 * - Staged pages (`need_sort` frees not yet merged), as a set (the backends keep them in
 *   different orders, and a merge sorts them): `S = sum of mix(0x5354414745440000 ^ page)`.
 * - Page map, every page `p` in `0 ..= num_pages`: `P = sum of
 *   mix(mix(0x504147454D415000 + p) ^ (state | fill << 8))`, state 0 reserved (page 0),
 *   1 free, 2 staged, 3 allocated, 4 freed in an open free group; `fill` the page's fill
 *   point (slots handed out so far) if it is allocated and `page_size > 1`, else 0.
 * - `digest = chain(0x4B5650504F4F4C01, 1, page_size, num_pages, need_sort, group_open,
 *   faulted, free_len, staged_len, F, S, P)`, booleans as 0/1; `faulted` is a device
 *   pool's sticky fault (always 0 on a host pool); `free_len` and `staged_len` count pages.
 *
 * The three sums are order-independent over their terms, so a device computes them in
 * parallel; the free list stays ordered because each term mixes in its position.
 * Counters (`kvp_pool_get_stats`) are not part of it.
 *
 * # Safety
 * `pool` a live pool or NULL; `out_digest` writable or NULL.
 */
KVP_NODISCARD enum kvp_status kvp_pool_digest(const struct kvp_pool *pool, uint64_t *out_digest);

/**
 * Enqueues the state digest of a device pool (the value `kvp_pool_digest` defines, equal
 * to a host pool's in the same state) on `stream`: one kernel writes it to
 * `*out_device`, one `uint64_t` of device memory on the pool's device, 8-byte aligned. The
 * kernel sees the state as of its point in the stream (after every call enqueued before
 * it) and changes nothing; the call never synchronizes, so read the value once the stream
 * has passed it (e.g. all-gather it on the same stream). A faulted pool is digested too
 * (with `faulted` = 1). `out_device` must stay alive until the stream passes the call.
 *
 * Fails with `KVP_STATUS_NULL_ARGUMENT`, `KVP_STATUS_INVALID_ARGUMENT` (misaligned),
 * `KVP_STATUS_WRONG_STREAM`, `KVP_STATUS_WRONG_BACKEND` (a host pool: use
 * `kvp_pool_digest`) or `KVP_STATUS_CUDA_ERROR`; nothing is enqueued on failure.
 *
 * # Safety
 * `pool` a live pool or NULL; `out_device` device memory as above or NULL; `stream` a live
 * stream of the pool's device's primary context, or NULL.
 */
KVP_NODISCARD
enum kvp_status kvp_pool_digest_async(struct kvp_pool *pool,
                                      uint64_t *out_device,
                                      struct CUstream_st *stream);

/**
 * Writes the scheduler's state digest to `*out_digest`: `chain` (see `kvp_pool_digest`)
 * from `0x4B56505343484544` over 1 (the version), page_size, capacity, then for the
 * waiting queue (in queue order), the in-flight chunked requests (oldest first) and the
 * running requests (admission order) each: their count, then one hash per request; then
 * the bits of the new-token ratio (IEEE-754 double), batch_is_full, the number of
 * submissions so far, and the counters steps, prefill_steps, decode_steps, admitted,
 * chunks, retractions, preemptions, aborts, unfittable, finished. A request's hash is
 * `chain(0x5245515545535400, id, arrival (its submission number), phase (0 waiting,
 * 1 chunking, 2 running), kv_len, fill_len, input_len, prefix_len, prefix_evictable,
 * max_new_tokens, output_len, ignore_eos, priority (two's complement), retractions,
 * path_len, prefix_path[0], ...)`. Two schedulers of the same configuration given the
 * same calls have equal digests. O(live requests); changes nothing. An attached pool is
 * not included (digest it with `kvp_pool_digest` / `kvp_pool_digest_async`).
 *
 * # Safety
 * `scheduler` a live scheduler or NULL; `out_digest` writable or NULL.
 */
KVP_NODISCARD
enum kvp_status kvp_scheduler_digest(const struct kvp_scheduler *scheduler,
                                     uint64_t *out_digest);

/**
 * Copies this thread's last error message into `buf` (at most `buf_len - 1` bytes plus a
 * NUL) and returns the message's full length in bytes, without the NUL. Call it with
 * `buf = NULL, buf_len = 0` to learn the size.
 *
 * The message describes the most recent failing kvpool call *on this thread*; it is
 * meaningful only right after a call returned a status other than `KVP_STATUS_OK` (decide
 * success from the status, never from the message).
 *
 * # Safety
 * `buf` must be NULL or point to `buf_len` writable bytes.
 */
size_t kvp_last_error_message(char *buf, size_t buf_len);

/**
 * Returns the default configuration: `size` 0 (must be set), `page_size` 1, int64
 * indices, host backend, `device` 0, `need_sort` false.
 */
struct kvp_pool_config kvp_pool_config_default(void);

/**
 * Creates a pool with every page free.
 *
 * Ownership: `config` is only read during the call. On success `*out_pool` receives a pool
 * owned by the caller, to be released with `kvp_pool_free`.
 *
 * A CUDA pool (`backend = KVP_BACKEND_CUDA`) retains device `config->device`'s primary
 * context, allocates its device memory (32 bytes per page plus 4 per slot, once) and
 * loads the kernels; this call, unlike the pool's operations, may synchronize the device.
 * It also frees, on the calling thread, the memory of released device pools whose queued
 * work has finished (normally the library's release thread has done so already; see
 * `kvp_pool_free`).
 *
 * Fails with `KVP_STATUS_NULL_ARGUMENT`, `KVP_STATUS_INVALID_ARGUMENT` (page_size 0, size
 * 0, unknown enum value, slots that do not fit the index type, more than 2^32 - 2 pages),
 * `KVP_STATUS_UNALIGNED` (size not a multiple of page_size), `KVP_STATUS_OUT_OF_MEMORY`
 * (the host bookkeeping cannot be allocated), `KVP_STATUS_CUDA_UNAVAILABLE` (no NVIDIA
 * driver, no such device) or `KVP_STATUS_CUDA_ERROR`; `*out_pool` is unmodified on failure.
 *
 * # Safety
 * `config` must be NULL or point to a valid config; `out_pool` must be NULL or writable.
 */
KVP_NODISCARD
enum kvp_status kvp_pool_new(const struct kvp_pool_config *config,
                             struct kvp_pool **out_pool);

/**
 * Releases the caller's reference to a pool. `pool` may be NULL (no-op). A scheduler
 * attached to the pool keeps it alive until the scheduler is freed too. Outstanding
 * snapshots stay valid objects (free them with `kvp_snapshot_free`) but can no longer be
 * restored once the pool is gone.
 *
 * Device pool — stream-ordered release: the last reference may go while kernels of the
 * pool (any `*_async` call, backup or restore) are still queued or running. Releasing
 * never waits for them and never synchronizes: the pool's device memory, its mapped host
 * memory and its kernels are freed by a library thread (`kvpool-release`) once the last
 * call's stream has passed it, in the pool's primary context, which stays retained until
 * then. So a C++ destructor (also during exception unwinding) or a Python `close()` is
 * safe right after enqueueing work. What must still outlive the queued calls are the
 * caller's own buffers passed to them (`out`, `last_loc`, lengths, indices), and the
 * streams' work must eventually run: memory of calls recorded by stream capture is not
 * tracked — finish the replays of a graph holding this pool's calls before releasing it.
 * `kvp_device_pending_releases` counts releases still waiting; at process exit the driver
 * reclaims whatever is left.
 *
 * # Safety
 * `pool` must be NULL or a pool from `kvp_pool_new` not yet freed, and no other call may
 * use it concurrently or afterwards.
 */
void kvp_pool_free(struct kvp_pool *pool);

/**
 * Writes static facts about the pool (size, page size, KV rows, padding slot, ...) to
 * `*out_info`. Fails only with `KVP_STATUS_NULL_ARGUMENT`, `KVP_STATUS_POISONED` or
 * `KVP_STATUS_INVALID_ARGUMENT` (a handle of another kind); `*out_info` is unmodified on
 * failure.
 *
 * # Safety
 * `pool` must be a live pool or NULL; `out_info` writable or NULL.
 */
KVP_NODISCARD
enum kvp_status kvp_pool_get_info(const struct kvp_pool *pool,
                                  struct kvp_pool_info *out_info);

/**
 * Writes the number of free token slots to `*out_tokens`: free pages plus staged
 * (not yet merged) pages, times `page_size` — SGLang's `available_size()`. Pages freed
 * inside an open free group are not counted until the group ends.
 *
 * Host pool: exact. Device pool: exact, except that the pages of a paged
 * `kvp_pool_free_indices_async` still in flight on the stream are not counted yet (a lower
 * bound); they count as soon as the stream has passed that free, without any
 * synchronization. `kvp_pool_available_size_bound` also says whether the value is exact.
 *
 * # Safety
 * `pool` must be a live pool or NULL; `out_tokens` writable or NULL.
 */
KVP_NODISCARD
enum kvp_status kvp_pool_available_size(const struct kvp_pool *pool,
                                        uint64_t *out_tokens);

/**
 * Writes what `kvp_pool_alloc_extend` (or `kvp_pool_alloc_extend_async`) of these lengths
 * would take, without allocating: `*out_pages` receives the exact number of pages it takes
 * from the free list (on a token pool, slots), `*out_tokens` (may be NULL) the slots it
 * writes, i.e. the `extend_num_tokens` to pass, `sum(seq_lens_host - prefix_lens_host)`.
 * Request `i` takes `ceil(seq_lens_host[i] / page_size) - ceil(prefix_lens_host[i] /
 * page_size)` pages (its tokens that finish the prefix's partial page take none). For an
 * engine that evicts from its prefix cache before allocating: evict until
 * `kvp_pool_available_size` reaches `pages * page_size`, no more.
 *
 * It runs the allocation's own host planning, so the lengths are checked exactly as there,
 * with the same status and message: `0 <= prefix_lens_host[i] <= seq_lens_host[i] <= size`
 * (`KVP_STATUS_INVALID_LENGTHS`, naming the first bad element). It does not see `last_loc`
 * (the allocation also checks it) and changes nothing: no merge, no counter, nothing
 * enqueued, no device memory read. Either backend: a device pool plans from the host
 * copies, exactly as its `_async` call does.
 *
 * Shortage rule, exact: with the same lengths (and its other arguments valid), the
 * allocation fails with `KVP_STATUS_OUT_OF_SLOTS` if and only if `pages * page_size > A`,
 * where `A` is the pool's `kvp_pool_available_size` at that call (free pages plus pages
 * staged by `need_sort`; pages freed inside an open free group not counted). Staged pages always
 * count: the allocation merges them first whenever its merge trigger exceeds the free list
 * (SGLang's rule: `extend_num_tokens / page_size + batch_size + 1` pages on a paged pool,
 * `pages` on a token pool), and that trigger is never below `pages`, so a batch that needs
 * staged pages always gets them. (The trigger can fire for a batch that would fit without
 * the staged pages: that merge changes which pages are handed out, never whether the call
 * succeeds.) Device pool: `A` is the host's count, a lower bound while a paged
 * `kvp_pool_free_indices_async` is still in flight (`kvp_pool_available_size_bound`); it
 * only grows as the stream passes such frees, so a value read before the allocation, with
 * no call taking pages in between, is never more than the `A` the allocation sees.
 *
 * `batch_size == 0` gives 0 and 0. Fails with `KVP_STATUS_INVALID_LENGTHS`,
 * `KVP_STATUS_NULL_ARGUMENT` (`out_pages` NULL, or an array NULL with `batch_size > 0`),
 * `KVP_STATUS_POISONED`; the out-parameters are unmodified on failure.
 *
 * Buffers: `prefix_lens_host`, `seq_lens_host` hold `batch_size` `int64_t` in host memory;
 * only read during the call.
 *
 * # Safety
 * `pool` a live pool or NULL; each array NULL or valid for `batch_size` elements;
 * `out_pages` writable or NULL, `out_tokens` writable or NULL.
 */
KVP_NODISCARD
enum kvp_status kvp_pool_extend_need(const struct kvp_pool *pool,
                                     const int64_t *prefix_lens_host,
                                     const int64_t *seq_lens_host,
                                     size_t batch_size,
                                     uint64_t *out_pages,
                                     uint64_t *out_tokens);

/**
 * Writes to `*out_pages` how many pages `kvp_pool_alloc_decode` (or
 * `kvp_pool_alloc_decode_async`) of these lengths would take, without allocating: the
 * requests whose new token starts a page, `(seq_lens_host[i] - 1) % page_size == 0`
 * (`seq_lens_host` counts the new token, as for the allocation). The call writes
 * `batch_size` slots either way.
 *
 * Same planning, checks and statuses as the allocation's (`1 <= seq_lens_host[i] <= size`,
 * else `KVP_STATUS_INVALID_LENGTHS`); changes nothing; either backend. Shortage rule as
 * for `kvp_pool_extend_need`: the allocation fails with `KVP_STATUS_OUT_OF_SLOTS` iff
 * `pages * page_size > kvp_pool_available_size` (its merge trigger, `batch_size` pages, is
 * never below `pages`). Fails with `KVP_STATUS_INVALID_LENGTHS`,
 * `KVP_STATUS_NULL_ARGUMENT`, `KVP_STATUS_POISONED`; `*out_pages` unmodified on failure.
 *
 * # Safety
 * `pool` a live pool or NULL; `seq_lens_host` NULL or valid for `batch_size` elements;
 * `out_pages` writable or NULL.
 */
KVP_NODISCARD
enum kvp_status kvp_pool_decode_need(const struct kvp_pool *pool,
                                     const int64_t *seq_lens_host,
                                     size_t batch_size,
                                     uint64_t *out_pages);

/**
 * Writes the pool's counters to `*out_stats`; unmodified on failure.
 *
 * # Safety
 * `pool` must be a live pool or NULL; `out_stats` writable or NULL.
 */
KVP_NODISCARD
enum kvp_status kvp_pool_get_stats(const struct kvp_pool *pool,
                                   struct kvp_pool_stats *out_stats);

/**
 * Allocates `num_tokens` slots and writes them to `out[0 .. num_tokens)`.
 *
 * A paged pool needs `num_tokens % page_size == 0` (SGLang silently rounds down) and
 * returns whole pages, each page's slots consecutive. A token pool returns the oldest
 * free slots first. `num_tokens == 0` succeeds and writes nothing.
 *
 * Buffers: `out` holds `out_len` elements of the pool's index type and is only used
 * during the call. Failure (`KVP_STATUS_OUT_OF_SLOTS`, `KVP_STATUS_UNALIGNED`,
 * `KVP_STATUS_BUFFER_TOO_SMALL`, `KVP_STATUS_NULL_ARGUMENT`, ...) writes nothing to `out`
 * and leaves the pool unchanged (a shortage may merge staged frees first, as SGLang does).
 *
 * # Safety
 * `pool` must be a live pool or NULL; `out` NULL or valid for `out_len` elements.
 */
KVP_NODISCARD
enum kvp_status kvp_pool_alloc(struct kvp_pool *pool,
                               size_t num_tokens,
                               void *out,
                               size_t out_len);

/**
 * Allocates KV slots for a prefill/extend batch of `batch_size` requests and writes them,
 * request after request, to `out[0 .. extend_num_tokens)`.
 *
 * Request `i` has `prefix_lens[i]` tokens already cached, the last of them in slot
 * `last_loc[i]` (`-1` for an empty prefix), and grows to `seq_lens[i]` tokens. Its new
 * tokens first fill the rest of the prefix's last page (`last_loc + 1, + 2, ...`), then
 * whole new pages, then one new partial page; new pages come from the free list in batch
 * order. These are SGLang's `alloc_extend` indices, op for op. On a token pool the result
 * equals `kvp_pool_alloc(extend_num_tokens)`.
 *
 * Checked before anything is written: `0 <= prefix_lens[i] <= seq_lens[i] <= size`,
 * `extend_num_tokens == sum(seq_lens - prefix_lens)`, `out_len >= extend_num_tokens`,
 * `last_loc[i]` allocated with `(last_loc[i] + 1) % page_size == prefix_lens[i] % page_size`
 * and the last slot its page has handed out (its fill point: see `kvp_pool_rewind`), no two
 * requests extending the same page, and enough free pages (exact count, computed
 * from the host lengths). Failure statuses: `KVP_STATUS_INVALID_LENGTHS`,
 * `KVP_STATUS_BUFFER_TOO_SMALL`, `KVP_STATUS_LAST_LOC_MISMATCH`, `KVP_STATUS_NOT_ALLOCATED`,
 * `KVP_STATUS_INDEX_OUT_OF_RANGE`, `KVP_STATUS_RESERVED_SLOT`, `KVP_STATUS_OUT_OF_SLOTS`,
 * `KVP_STATUS_NULL_ARGUMENT`; `out` is untouched and the pool unchanged, but for one thing: a
 * shortage (`KVP_STATUS_OUT_OF_SLOTS`) may first merge staged (`need_sort`) frees, as SGLang
 * does, so that later allocations get SGLang's pages.
 *
 * Buffers: `prefix_lens`, `seq_lens` hold `batch_size` `int64_t`; `last_loc` holds
 * `batch_size` and `out` holds `out_len` elements of the pool's index type. All are only
 * used during the call.
 *
 * # Safety
 * Each pointer must be NULL or valid for its stated number of elements.
 */
KVP_NODISCARD
enum kvp_status kvp_pool_alloc_extend(struct kvp_pool *pool,
                                      const int64_t *prefix_lens,
                                      const int64_t *seq_lens,
                                      const void *last_loc,
                                      size_t batch_size,
                                      size_t extend_num_tokens,
                                      void *out,
                                      size_t out_len);

/**
 * Allocates one slot per request for a decode step and writes them to
 * `out[0 .. batch_size)`.
 *
 * `seq_lens[i]` is request `i`'s length *including* the new token; `last_loc[i]` is the
 * slot of its previous last token (`-1` when `seq_lens[i] == 1`). A request whose new token
 * starts a page (`(seq_lens[i] - 1) % page_size == 0`) gets the first slot of the next free
 * page (pages taken in batch order); the others get `last_loc[i] + 1`.
 *
 * Checked before anything is written: `1 <= seq_lens[i] <= size`, `out_len >= batch_size`,
 * `last_loc[i]` allocated with `(last_loc[i] + 2) % page_size == seq_lens[i] % page_size`
 * and its page's last handed-out slot, no two requests writing into the same page, enough free pages. Failure statuses as for
 * `kvp_pool_alloc_extend`; `out` is untouched and the pool unchanged (but for the merge a
 * shortage may make first, as there).
 *
 * Buffers: `seq_lens` holds `batch_size` `int64_t`; `last_loc` `batch_size` and `out`
 * `out_len` elements of the pool's index type; only used during the call.
 *
 * # Safety
 * Each pointer must be NULL or valid for its stated number of elements.
 */
KVP_NODISCARD
enum kvp_status kvp_pool_alloc_decode(struct kvp_pool *pool,
                                      const int64_t *seq_lens,
                                      const void *last_loc,
                                      size_t batch_size,
                                      void *out,
                                      size_t out_len);

/**
 * Frees slots by index (SGLang's `free`). Token pool: each index is one slot, returned to
 * the tail of the free list in the given order. Paged pool: each index frees its whole
 * page; the distinct pages return to the front of the free list in ascending order (or are
 * staged, with `need_sort`). Inside a free group the pages are held until the group ends.
 *
 * Every index must be an allocated slot and appear once; inside a free group a page may be
 * freed by only one call. On a paged pool an index is checked through its page: the page
 * must be allocated, and a slot of it that was never handed out (past its fill point)
 * still frees the whole page, as in SGLang. Failure (`KVP_STATUS_DOUBLE_FREE`,
 * `KVP_STATUS_INDEX_OUT_OF_RANGE`, `KVP_STATUS_RESERVED_SLOT`, `KVP_STATUS_NULL_ARGUMENT`;
 * `KVP_STATUS_INVALID_STATE` for a page a live decode reservation holds) frees nothing; the
 * message names the offending element. `len == 0` is a no-op.
 *
 * Buffers: `indices` holds `len` elements of the pool's index type; only used during the
 * call.
 *
 * # Safety
 * `indices` must be NULL or valid for `len` elements.
 */
KVP_NODISCARD
enum kvp_status kvp_pool_free_indices(struct kvp_pool *pool,
                                      const void *indices,
                                      size_t len);

/**
 * Frees exactly these pages (slot index / `page_size`), in the given order (SGLang's
 * `free_page_ids`). On a token pool a page is a slot. Each page must be allocated and
 * listed once; failure frees nothing. `len == 0` is a no-op.
 *
 * Buffers: `page_ids` holds `len` elements of the pool's index type; only used during the
 * call.
 *
 * # Safety
 * `page_ids` must be NULL or valid for `len` elements.
 */
KVP_NODISCARD
enum kvp_status kvp_pool_free_pages(struct kvp_pool *pool,
                                    const void *page_ids,
                                    size_t len);

/**
 * Frees the pages holding `row[start_pos .. start_pos + len)`, where `row` is one
 * request's slot row (its `req_to_token` row) — SGLang 0.5.23's `free_segment`, which
 * needs no de-duplication. A paged pool needs `start_pos % page_size == 0` and each page's
 * slots consecutive in the row; a segment ending inside a page frees that whole page.
 *
 * Failure (`KVP_STATUS_UNALIGNED`, `KVP_STATUS_BUFFER_TOO_SMALL` when the segment passes
 * `row_len`, `KVP_STATUS_INVALID_ARGUMENT` for a non-contiguous page, `KVP_STATUS_DOUBLE_FREE`,
 * ...) frees nothing. `len == 0` is a no-op at any `start_pos <= row_len`, aligned or not
 * (SGLang returns on an empty segment before its alignment check).
 *
 * Buffers: `row` holds `row_len` elements of the pool's index type; only used during the
 * call.
 *
 * # Safety
 * `row` must be NULL or valid for `row_len` elements.
 */
KVP_NODISCARD
enum kvp_status kvp_pool_free_segment(struct kvp_pool *pool,
                                      const void *row,
                                      size_t row_len,
                                      size_t start_pos,
                                      size_t len);

/**
 * Moves pages' fill points back, for speculative decoding that rejects draft tokens.
 *
 * Every allocated page remembers how many of its slots it has handed out (its *fill
 * point*); `kvp_pool_alloc_extend` / `kvp_pool_alloc_decode` accept a `last_loc` only at
 * that point, so a stale `last_loc` can never hand a slot out twice. After a verify step
 * keeps a request's tokens up to slot `last_kept[i]`, this call makes that slot its page's
 * last handed-out slot: the next allocation continuing from `last_kept[i]` gets the slots
 * after it again. Pages that hold only rejected tokens are freed as usual
 * (`kvp_pool_free_pages` / `kvp_pool_free_segment`). On a token pool (one slot a page) a
 * valid rewind changes nothing. Engines that keep rejected slots and overwrite them (SGLang's
 * spec v2, which continues from the allocated length) need no rewind.
 *
 * Checked: each `last_kept[i]` is an allocated slot (`KVP_STATUS_NOT_ALLOCATED`,
 * `KVP_STATUS_INDEX_OUT_OF_RANGE`, `KVP_STATUS_RESERVED_SLOT`) at or before its page's fill
 * point, and no page is named twice (`KVP_STATUS_LAST_LOC_MISMATCH`). Failure changes
 * nothing. `len == 0` is a no-op. Allowed inside a free group.
 *
 * Buffers: `last_kept` holds `len` elements of the pool's index type; only used during the
 * call.
 *
 * # Safety
 * `last_kept` must be NULL or valid for `len` elements.
 */
KVP_NODISCARD
enum kvp_status kvp_pool_rewind(struct kvp_pool *pool,
                                const void *last_kept,
                                size_t len);

/**
 * Opens a free group: frees until `kvp_pool_free_group_end` are validated at once but
 * return to the pool together at the end (SGLang's `free_group_begin`, used to batch a
 * scheduler step's frees). Groups do not nest: a second begin fails with
 * `KVP_STATUS_INVALID_STATE`. Both backends (a device pool's group ends with
 * `kvp_pool_free_group_end_async`); enqueues nothing.
 *
 * # Safety
 * `pool` must be a live pool or NULL.
 */
KVP_NODISCARD enum kvp_status kvp_pool_free_group_begin(struct kvp_pool *pool);

/**
 * Closes the free group and returns its pages to the pool. Paged pool: first the pages
 * freed by index (one ascending block), then those freed by page id or segment, in call
 * order. Token pool: every freed slot, in call order. Fails with
 * `KVP_STATUS_INVALID_STATE` if no group is open.
 *
 * # Safety
 * `pool` must be a live pool or NULL.
 */
KVP_NODISCARD enum kvp_status kvp_pool_free_group_end(struct kvp_pool *pool);

/**
 * Merges staged frees into the free list, sorted ascending (SGLang's
 * `merge_and_sort_free`). A no-op without `need_sort` or when nothing is staged;
 * allocations call it themselves when they run short.
 *
 * # Safety
 * `pool` must be a live pool or NULL.
 */
KVP_NODISCARD enum kvp_status kvp_pool_merge_and_sort_free(struct kvp_pool *pool);

/**
 * Frees every slot: the free list becomes pages `1 .. num_pages` in order; staged frees
 * and an open free group are dropped. Counters keep counting.
 *
 * # Safety
 * `pool` must be a live pool or NULL.
 */
KVP_NODISCARD enum kvp_status kvp_pool_clear(struct kvp_pool *pool);

/**
 * The Python package's entry points (`python/kvpool` calls them as builtins, see
 * `kvp_python_methods`; C and C++ callers have no use for them): the hot host-pool calls
 * with their arrays given as `PyObject *`, whose memory the library finds through CPython's
 * buffer protocol.
 *
 * Gives the entry points below the addresses of CPython's `PyObject_GetBuffer`,
 * `PyBuffer_Release`, `PyEval_SaveThread`, `PyEval_RestoreThread`, `PyErr_Clear` and
 * `PyGILState_Check`, in that order (the package passes `ctypes.pythonapi`'s). The first
 * call sets them for the process; a later call with the same functions is a no-op.
 *
 * # Errors
 * `KVP_STATUS_NULL_ARGUMENT` if one is NULL; `KVP_STATUS_INVALID_STATE` if an earlier call
 * gave other functions (a second Python runtime in the process).
 *
 * # Safety
 * Each argument is NULL or the address of the CPython function it is named for.
 */
KVP_NODISCARD
enum kvp_status kvp_python_init(const void *get_buffer,
                                const void *release_buffer,
                                const void *save_thread,
                                const void *restore_thread,
                                const void *clear_error,
                                const void *holds_gil);

/**
 * `sum(seq_lens) - sum(prefix_lens)` of two int64 buffers of one length (Python objects),
 * or 0 if that is negative (the allocation then names the offending length, as the package
 * does): `alloc_extend`'s default `extend_num_tokens`, summed here in one pass where the
 * package would sum each array in Python. -1 if either is not such a buffer, their lengths
 * differ, or the sum exceeds `INT64_MAX` (the package then sums them itself).
 *
 * # Safety
 * As `kvp_python_pool_alloc_extend`.
 */
KVP_NODISCARD int64_t kvp_python_extend_tokens(void *prefix_lens, void *seq_lens);

/**
 * `kvp_pool_alloc_extend` on Python objects: `prefix_lens`, `seq_lens` (int64) and
 * `last_loc` (the pool's index type) of one length, the batch size; `out` a writable buffer
 * of the pool's index type, whose length is the call's `out_len`. Returns the call's
 * `kvp_status`, or
 * `KVP_PYTHON_FALLBACK` having called nothing. The GIL is released for the pool call.
 *
 * # Safety
 * Called with the GIL held (as a builtin, or through `ctypes.PyDLL`), after
 * `kvp_python_init`; each object is a live `PyObject *` (or NULL: falls back).
 */
KVP_NODISCARD
int32_t kvp_python_pool_alloc_extend(struct kvp_pool *pool,
                                     void *prefix_lens,
                                     void *seq_lens,
                                     void *last_loc,
                                     size_t extend_num_tokens,
                                     void *out);

/**
 * `kvp_pool_alloc_decode` on Python objects: `seq_lens` (int64) and `last_loc` of one
 * length, `out` writable (see `kvp_python_pool_alloc_extend`).
 *
 * # Safety
 * As `kvp_python_pool_alloc_extend`.
 */
KVP_NODISCARD
int32_t kvp_python_pool_alloc_decode(struct kvp_pool *pool,
                                     void *seq_lens,
                                     void *last_loc,
                                     void *out);

/**
 * `kvp_pool_alloc` into a Python object: `out` writable, of the pool's index type (see
 * `kvp_python_pool_alloc_extend`).
 *
 * # Safety
 * As `kvp_python_pool_alloc_extend`.
 */
KVP_NODISCARD int32_t kvp_python_pool_alloc(struct kvp_pool *pool, size_t num_tokens, void *out);

/**
 * `kvp_pool_free_indices` of a Python object of the pool's index type (see
 * `kvp_python_pool_alloc_extend`).
 *
 * # Safety
 * As `kvp_python_pool_alloc_extend`.
 */
KVP_NODISCARD int32_t kvp_python_pool_free_indices(struct kvp_pool *pool, void *indices);

/**
 * `kvp_pool_alloc_extend_async` with the host copies `prefix_lens_host` and
 * `seq_lens_host` given as Python objects (int64 buffers of `batch_size` entries); the device
 * arguments and the stream as for the C call. Returns as `kvp_python_pool_alloc_extend`.
 *
 * # Safety
 * As `kvp_python_pool_alloc_extend` for the objects; the other arguments as for
 * `kvp_pool_alloc_extend_async`.
 */
KVP_NODISCARD
int32_t kvp_python_pool_alloc_extend_async(struct kvp_pool *pool,
                                           void *prefix_lens_host,
                                           void *seq_lens_host,
                                           const int64_t *prefix_lens,
                                           const int64_t *seq_lens,
                                           const void *last_loc,
                                           size_t batch_size,
                                           size_t extend_num_tokens,
                                           void *out,
                                           size_t out_len,
                                           struct CUstream_st *stream);

/**
 * `kvp_pool_alloc_decode_async` with the host copy `seq_lens_host` given as a Python object
 * (see `kvp_python_pool_alloc_extend_async`).
 *
 * # Safety
 * As `kvp_python_pool_alloc_extend_async`.
 */
KVP_NODISCARD
int32_t kvp_python_pool_alloc_decode_async(struct kvp_pool *pool,
                                           void *seq_lens_host,
                                           const int64_t *seq_lens,
                                           const void *last_loc,
                                           size_t batch_size,
                                           void *out,
                                           size_t out_len,
                                           struct CUstream_st *stream);

/**
 * The Python package's hot calls as a table of CPython `PyMethodDef`s (`METH_FASTCALL`,
 * ended by a NULL name) for `PyCFunction_NewEx`: builtins named as the `kvp_python_*`
 * entry points and as the C functions the package calls with int arguments, which take
 * those functions' arguments and return their result as a Python int, without ctypes'
 * per-call argument conversion (C and C++ callers have no use for them).
 *
 * `api` holds `api_len` (`KVP_PYTHON_METHODS_API_LEN`) addresses: CPython's
 * `PyLong_AsSize_t`, `PyLong_AsVoidPtr`, `PyLong_FromLongLong`, `PyErr_Occurred` and
 * `PyErr_SetString`, then the objects `Py_None` and `PyExc_TypeError` (`PyErr_Clear` is
 * the one `kvp_python_init` was given)
 * (a length other than this library's is a package of another version: refused before
 * any is read). Called after `kvp_python_init`; writes the table's address to `*methods`
 * (static: it outlives the builtins). A later call with the same addresses gives the same
 * table.
 *
 * # Errors
 * `KVP_STATUS_NULL_ARGUMENT` if `api`, `methods` or an address is NULL;
 * `KVP_STATUS_INVALID_ARGUMENT` for another `api_len`; `KVP_STATUS_INVALID_STATE` before
 * `kvp_python_init`, or if an earlier call gave others. `*methods` is then unchanged.
 *
 * # Safety
 * `api` is NULL or holds `api_len` addresses, each NULL or that of the CPython function or
 * object it is named for; `methods` NULL or writable.
 */
KVP_NODISCARD
enum kvp_status kvp_python_methods(const void *const *api,
                                   size_t api_len,
                                   const void **methods);

/**
 * Reserves `steps` decode steps of a batch on a host pool and writes the new reservation
 * to `*out_reservation` (release it with `kvp_decode_reservation_free`).
 *
 * `lens[i]` is the number of tokens request `i` holds now (the first reserved step makes it
 * `lens[i] + 1`: `kvp_pool_alloc_decode`'s `seq_lens - 1`); `last_loc[i]` the slot of its
 * last token (`-1` when `lens[i] == 0`). Request `i` needs
 * `ceil((lens[i] + steps) / page_size) - ceil(lens[i] / page_size)` new pages; they are
 * taken now, in exactly the order `steps` successive `kvp_pool_alloc_decode` calls would
 * take them (step 1's new pages in request order, then step 2's, ...), and the slots of
 * every step are computed now. The pages' fill points advance as if every step ran.
 *
 * Until the reservation ends (finish, free, clear, restore) every page its steps hand slots
 * out of — the new pages and each request's partly filled last page — is *held*: a free
 * naming it (by index, page id, segment or row), a `kvp_pool_rewind` into it and a
 * continuation from it (a plain `kvp_pool_alloc_decode` / `_extend` / another reservation
 * whose `last_loc` lies in it) fail with `KVP_STATUS_INVALID_STATE` and change nothing (on
 * a device pool: a fault). So a request of the batch cannot be freed, and its page handed
 * to another request, while later steps still hand out that page's slots.
 *
 * Staged (`need_sort`) frees are merged where the `steps` plain decodes would merge them:
 * before the first step whose batch size exceeds the free list the earlier steps left
 * (SGLang's per-call rule), so every step's slots equal theirs.
 *
 * Checked, nothing changed on failure: `1 <= steps <= 1024` (`KVP_STATUS_INVALID_ARGUMENT`),
 * `0 <= lens[i]` and `lens[i] + steps <= size` (`KVP_STATUS_INVALID_LENGTHS`), each
 * `last_loc` as `kvp_pool_alloc_decode` checks it, and the shortage
 * (`KVP_STATUS_OUT_OF_SLOTS`, exactly when one of the plain decodes would run short; not
 * even a merge happens then). Counts in the stats as `batch_size * steps` tokens and the
 * pages taken (no decode call). Other calls on the pool work normally while the
 * reservation is live.
 *
 * # Safety
 * `pool` a live pool or NULL; `lens` (`int64_t`) and `last_loc` (the pool's index type)
 * NULL or valid for `batch_size` elements; `out_reservation` writable or NULL.
 */
KVP_NODISCARD
enum kvp_status kvp_pool_reserve_decode(struct kvp_pool *pool,
                                        const int64_t *lens,
                                        const void *last_loc,
                                        size_t batch_size,
                                        uint32_t steps,
                                        struct kvp_decode_reservation **out_reservation);

/**
 * Enqueues a reservation of `steps` decode steps of a batch on `stream` (device pool) and
 * writes the new reservation to `*out_reservation`: the device-pool form of
 * `kvp_pool_reserve_decode` (same semantics, page order and statuses). `lens_host` is the
 * host copy of the device array `lens` (`int64_t`, tokens each request holds now), from
 * which the host validates, plans the pages and checks the shortage before anything is
 * enqueued; `last_loc` is a device array of the pool's index type.
 *
 * Enqueues one kernel (with `need_sort`: a merge before it when the first step would merge;
 * when a later step would, two reserve kernels with the merge between them), one block of
 * 1,024 threads, that checks every `last_loc` as `kvp_pool_alloc_decode_async`'s
 * kernel does, takes the planned pages, computes the `steps x batch_size` slot table into
 * device memory the reservation owns (with a copy of `lens`) and advances the fill points.
 * A bad `last_loc`, or device lengths that disagree with the host copy, fault the pool
 * (nothing taken; the reservation's steps then write the padding slot 0). (Device lengths
 * that give the host's page total but place some first pages at other steps are caught by
 * the finish: it then returns nothing and faults the pool, since the pages the used steps
 * took differ from the host's plan.) The first
 * reservations allocate device memory (`cuMemAlloc`, which may synchronize); memory of
 * freed reservations is reused. While `stream` is being captured a reservation that finds
 * no spare memory large enough is refused (`KVP_STATUS_INVALID_STATE`, nothing done, the
 * capture intact): make and free one as large before capturing. `lens` and `last_loc`
 * must stay alive until the stream passes the call; the reservation does not need them
 * afterwards.
 *
 * # Safety
 * `lens_host` valid for `batch_size` elements; `lens`, `last_loc` device memory of the
 * pool's device for `batch_size` elements; `out_reservation` writable; `stream` a live
 * stream of the pool's device's primary context, or NULL.
 */
KVP_NODISCARD
enum kvp_status kvp_pool_reserve_decode_async(struct kvp_pool *pool,
                                              const int64_t *lens_host,
                                              const int64_t *lens,
                                              const void *last_loc,
                                              size_t batch_size,
                                              uint32_t steps,
                                              struct kvp_decode_reservation **out_reservation,
                                              struct CUstream_st *stream);

/**
 * The next step of a host pool's reservation: writes its slots (exactly what the
 * corresponding `kvp_pool_alloc_decode` would return) to `out[0 .. batch_size)` and, when
 * `table` is not NULL, each slot `i` to `table[rows[i]][lens[i] + s]` for step `s`
 * (0-based; `rows` a host array of `batch_size` `int64_t`, distinct rows of the table,
 * `lens[i] + s < row_len`). `out` may be NULL when a table is given. Past the reservation
 * (all `steps` taken, or finished): `KVP_STATUS_INVALID_STATE`, nothing written; a
 * reservation from before a `kvp_pool_clear` / `kvp_pool_restore_state` of its pool: the
 * same. Buffers are only used during the call.
 *
 * # Safety
 * `reservation` a live reservation or NULL; `out` NULL or valid for `out_len` elements of
 * the pool's index type; `table` NULL or a descriptor of host memory spanning its shape;
 * `rows` NULL or valid for `batch_size` elements.
 */
KVP_NODISCARD
enum kvp_status kvp_decode_reservation_step(struct kvp_decode_reservation *reservation,
                                            void *out,
                                            size_t out_len,
                                            const struct kvp_req_table *table,
                                            const int64_t *rows);

/**
 * Enqueues the next step of a device pool's reservation on `stream`: ONE kernel (one
 * block of up to 1,024 threads) that reads the reservation's step counter `s` (in device
 * memory), writes slot row `s` to `out[0 .. batch_size)` (device, the pool's index type;
 * may be NULL when a table is given) and, when `table` is not NULL, each slot `i` to
 * `table[rows[i]][lens[i] + s]` (`table` device memory, `rows` a device array of
 * `batch_size` `int64_t` naming distinct rows), then increments the counter.
 *
 * Capturable: the call changes no host state, never synchronizes, allocates nothing, and
 * its kernel's arguments are fixed, so it may be recorded by stream capture
 * (`cudaStreamBeginCapture`) and the graph replayed once per step: `steps` replays give
 * exactly the slots `steps` uncaptured `kvp_pool_alloc_decode_async` calls would give on an
 * identical pool. Calling it again uncaptured is equally valid (each call is one step).
 * Launches inside a capture are not tracked for the pool's stream-ordered release: finish
 * a graph's replays before `kvp_pool_free`. The stream-order debug check does not cover
 * steps (they are ordered by the engine's graph).
 *
 * Running past the reservation never allocates: a step that finds all `steps` taken (or
 * the reservation finished) writes the padding slot 0 to `out`, writes no table entry,
 * leaves the counter and faults the pool (`KVP_STATUS_DEVICE_FAULT`, the message names the
 * reservation overrun); so does a step replayed after a clear or restore of the pool,
 * which ended the reservation and freed its pages. A row outside the table faults
 * likewise. A step of a faulted pool writes 0 and does nothing else. Rows are not checked
 * for repeats on the device (each step would need a barrier over a table of marks): a
 * repeated row gets two requests' slots written into one row (never outside the table, and
 * the allocation is unaffected).
 *
 * Host checks (status, nothing enqueued): the reservation is live (not finished, its pool
 * not cleared or restored since: `KVP_STATUS_INVALID_STATE`), the pool not faulted, the
 * table's rows hold `max(lens) + steps` entries (`KVP_STATUS_BUFFER_TOO_SMALL`), NULLs and
 * alignment, the stream (`KVP_STATUS_WRONG_STREAM`). `out`, `table.data` and `rows` must stay
 * alive (at the same addresses) for every replay of a graph holding the step.
 *
 * # Safety
 * `reservation` a live reservation or NULL; device buffers of the pool's device as
 * described; `stream` a live stream of the pool's device's primary context, or NULL.
 */
KVP_NODISCARD
enum kvp_status kvp_decode_reservation_step_async(struct kvp_decode_reservation *reservation,
                                                  void *out,
                                                  const struct kvp_req_table *table,
                                                  const int64_t *rows,
                                                  struct CUstream_st *stream);

/**
 * Ends a host pool's reservation after `steps_used` steps, which must be the number of
 * steps taken (`KVP_STATUS_INVALID_ARGUMENT` otherwise): the pages no used step touched go
 * back to the *front* of the free list in the order they were taken (never staged; on a
 * paged pool this is what `kvp_pool_free_pages` of them would do, on a token pool a free
 * would append them: putting them back leaves the pool exactly as `steps_used` plain
 * `kvp_pool_alloc_decode` calls would have), and each request's partly used last page is
 * rewound to its last used slot (as `kvp_pool_rewind`). (With `need_sort`, a merge made
 * for a step after `steps_used` stays made.) Available size and `pages_in_use` are exact
 * afterwards; the other counters keep what the reserve counted (`batch_size * steps`
 * tokens in `tokens_allocated`, every page taken in `pages_allocated`), and the pages
 * returned count in `pages_freed` and `slots_freed` (counters only grow). The
 * reservation's holds end (its requests can be freed, rewound and continued again).
 * Refused, nothing changed: the reservation is finished or its pool was cleared or
 * restored since (`KVP_STATUS_INVALID_STATE`), `pool` is not the reservation's pool
 * (`KVP_STATUS_INVALID_ARGUMENT`). Ignores an open free group (the pages are returned at
 * once).
 *
 * # Safety
 * `pool`, `reservation` live handles or NULL.
 */
KVP_NODISCARD
enum kvp_status kvp_decode_reservation_finish(struct kvp_pool *pool,
                                              struct kvp_decode_reservation *reservation,
                                              uint32_t steps_used);

/**
 * Enqueues the end of a device pool's reservation after `steps_used` steps (the number of
 * steps the engine ran: replays plus uncaptured calls) on `stream`: one kernel (one block)
 * that checks the reservation's device step counter equals `steps_used` — a mismatch
 * faults the pool naming both numbers and returns nothing — and that the device's copy of
 * `lens` (as the reserve read it) gives the used steps the pages the host planned — else
 * it faults the pool (`KVP_STATUS_INVALID_LENGTHS`'s message) and returns nothing —, then
 * returns the unused pages
 * and rewinds partly used pages as `kvp_decode_reservation_finish` does. The host plans
 * the returned page count from `steps_used`, so `kvp_pool_available_size` is exact right
 * after the call, and the holds end (a free of the batch's requests enqueued after the
 * finish is valid). Host checks (status, nothing enqueued): `steps_used <= steps`, the
 * reservation live and of `pool`, the pool not faulted, the stream. A step replayed after
 * the finish writes 0 and faults (see `kvp_decode_reservation_step_async`).
 *
 * # Safety
 * `pool`, `reservation` live handles or NULL; `stream` a live stream of the pool's
 * device's primary context, or NULL.
 */
KVP_NODISCARD
enum kvp_status kvp_decode_reservation_finish_async(struct kvp_pool *pool,
                                                    struct kvp_decode_reservation *reservation,
                                                    uint32_t steps_used,
                                                    struct CUstream_st *stream);

/**
 * Writes the reservation's step count, batch size and the pages it took. Either backend;
 * any of the out-pointers may be NULL.
 *
 * # Safety
 * `reservation` a live reservation or NULL; each out-pointer writable or NULL.
 */
KVP_NODISCARD
enum kvp_status kvp_decode_reservation_get_info(const struct kvp_decode_reservation *reservation,
                                                uint32_t *out_steps,
                                                size_t *out_batch_size,
                                                uint64_t *out_pages);

/**
 * Releases a reservation (NULL: no-op). After a finish this only frees the handle. An
 * unfinished reservation returns nothing to the pool: its pages stay allocated with their
 * fill points as if every reserved step had run (only the engine knows how many ran; call
 * the finish first to get the unused pages back), and its holds end — on a host pool at
 * once, on a device pool in a small kernel the pool enqueues ahead of its next call (on
 * that call's stream; deferred while that stream is being captured). A device
 * reservation's memory is kept by its pool for later reservations: a graph holding one of
 * its steps must not be replayed afterwards (a replay writes the padding slot and faults
 * the pool: after the finish or the end of the holds, or once a later reservation took
 * the memory). Releases the reservation's reference to its pool.
 *
 * # Safety
 * `reservation` NULL or a live reservation, not used concurrently or afterwards.
 */
void kvp_decode_reservation_free(struct kvp_decode_reservation *reservation);

/**
 * `kvp_pool_alloc_extend` by request rows of a `req_to_token` table (host pool).
 *
 * Request `i` owns table row `rows[i]`; it has `prefix_lens[i]` tokens cached, whose slots
 * are `table[rows[i]][0 .. prefix_lens[i])`, and grows to `seq_lens[i]` tokens. Its
 * `last_loc` is read from the table (`table[rows[i]][prefix_lens[i] - 1]`, `-1` for an
 * empty prefix) and its new slots — exactly those of `kvp_pool_alloc_extend` with that
 * `last_loc` — are written to `table[rows[i]][prefix_lens[i] .. seq_lens[i])` and, when
 * `out` is not NULL, request after request to `out[0 .. extend_num_tokens)` (SGLang's
 * `out_cache_loc`, the pool's index type; `out` NULL: `out_len` is ignored).
 *
 * Checked before anything is written, in addition to `kvp_pool_alloc_extend`'s checks
 * (same statuses): the table descriptor (`table` or `table.data` NULL:
 * `KVP_STATUS_NULL_ARGUMENT`; an unknown index type, no rows, `row_len` 0, overlapping
 * rows, misaligned `data`, an int32 table on a pool whose slots do not fit int32:
 * `KVP_STATUS_INVALID_ARGUMENT`), `0 <= rows[i] < table.rows`
 * (`KVP_STATUS_INDEX_OUT_OF_RANGE`), no row twice in one call
 * (`KVP_STATUS_INVALID_ARGUMENT`, naming the second), `seq_lens[i] <= table.row_len`
 * (`KVP_STATUS_BUFFER_TOO_SMALL`). On failure the table, `out` and the pool are unchanged
 * (but for the merge of staged frees a shortage may make first, as for
 * `kvp_pool_alloc_extend`).
 *
 * # Safety
 * `table` must point to a valid descriptor of host memory; `rows`, `prefix_lens`,
 * `seq_lens` hold `batch_size` `int64_t`; `out` is NULL or holds `out_len` elements.
 */
KVP_NODISCARD
enum kvp_status kvp_pool_alloc_extend_rows(struct kvp_pool *pool,
                                           const struct kvp_req_table *table,
                                           const int64_t *rows,
                                           const int64_t *prefix_lens,
                                           const int64_t *seq_lens,
                                           size_t batch_size,
                                           size_t extend_num_tokens,
                                           void *out,
                                           size_t out_len);

/**
 * `kvp_pool_alloc_decode` by request rows (host pool): `seq_lens[i]` counts the new token;
 * `last_loc` of request `i` is `table[rows[i]][seq_lens[i] - 2]` (`-1` when
 * `seq_lens[i] == 1`) and its new slot is written to `table[rows[i]][seq_lens[i] - 1]` and,
 * when `out` is not NULL, to `out[i]`. Checks and statuses as for
 * `kvp_pool_alloc_decode` plus the row checks of `kvp_pool_alloc_extend_rows`.
 *
 * # Safety
 * As for `kvp_pool_alloc_extend_rows`.
 */
KVP_NODISCARD
enum kvp_status kvp_pool_alloc_decode_rows(struct kvp_pool *pool,
                                           const struct kvp_req_table *table,
                                           const int64_t *rows,
                                           const int64_t *seq_lens,
                                           size_t batch_size,
                                           void *out,
                                           size_t out_len);

/**
 * Frees by request row (host pool): for each `i`, the pages of the segment
 * `table[rows[i]][starts[i] .. ends[i])` — `kvp_pool_free_segment` of each row, in batch
 * order, as one all-or-nothing call (one free call in the counters; inside a free group
 * the pages join the group). SGLang's `release_kv_cache` frees `[cache_protected_len,
 * kv_allocated_len)` of a finished request this way.
 *
 * Checked: the table descriptor, rows in range (`KVP_STATUS_INDEX_OUT_OF_RANGE`) and
 * distinct (`KVP_STATUS_INVALID_ARGUMENT`), `0 <= starts[i] <= ends[i] <= row_len`
 * (`KVP_STATUS_INVALID_LENGTHS`), then each segment as by `kvp_pool_free_segment`
 * (paged pools: `starts[i] % page_size == 0` unless the segment is empty, each page's slots
 * contiguous; a segment ending mid-page frees its page), and no page named by two rows
 * (`KVP_STATUS_DOUBLE_FREE`). The table itself is never modified.
 *
 * # Safety
 * `table` must point to a valid descriptor of host memory; `rows`, `starts`, `ends` hold
 * `batch_size` `int64_t`.
 */
KVP_NODISCARD
enum kvp_status kvp_pool_free_rows(struct kvp_pool *pool,
                                   const struct kvp_req_table *table,
                                   const int64_t *rows,
                                   const int64_t *starts,
                                   const int64_t *ends,
                                   size_t batch_size);

/**
 * Writes FlashInfer's paged-KV page table (`BatchDecodeWithPagedKVCacheWrapper.plan`,
 * `paged_kv_t`) of a batch of rows (host pool): request `i` is the first `seq_lens[i]`
 * tokens of row `rows[i]`.
 *
 * - `kv_indptr[0 .. batch_size]` (batch_size + 1 entries): `kv_indptr[0] = 0`,
 *   `kv_indptr[i + 1] = kv_indptr[i] + ceil(seq_lens[i] / page_size)`;
 * - `kv_indices[kv_indptr[i] .. kv_indptr[i + 1])`: request `i`'s page ids,
 *   `table[rows[i]][p * page_size] / page_size` for its pages `p` (on a token pool,
 *   page_size 1, its slots: SGLang's `create_flashinfer_kv_indices_triton`);
 * - `kv_last_page_len[i] = seq_lens[i] - (pages - 1) * page_size`, in `1 .. page_size`.
 *   A request with `seq_lens[i] == 0` has no pages and `kv_last_page_len[i] = 0`
 *   (FlashInfer takes a request with an empty indptr range as length 0; its decode kernels
 *   expect at least one token, so pass such rows only as padding).
 *
 * All three are int32, as FlashInfer requires. The table's entries are read as they are
 * (not validated: an entry outside the pool gives a page id outside the pool, except that
 * an int64 entry whose page id passes the int32 range is truncated to 32 bits, which can
 * land inside the pool); rows may repeat. Checked: the table descriptor, the pool's page
 * ids and page size fit int32 (`KVP_STATUS_INVALID_ARGUMENT`), rows in range,
 * `0 <= seq_lens[i] <= row_len` (`KVP_STATUS_INVALID_LENGTHS` /
 * `KVP_STATUS_BUFFER_TOO_SMALL`), total pages `<= indices_capacity` and `<= INT32_MAX`
 * (`KVP_STATUS_BUFFER_TOO_SMALL` / `KVP_STATUS_INVALID_LENGTHS`). Nothing is written on
 * failure. Changes nothing in the pool and counts nowhere.
 *
 * # Safety
 * `table` must point to a valid descriptor of host memory; `rows`, `seq_lens` hold
 * `batch_size` `int64_t`, `kv_indptr` `batch_size + 1`, `kv_indices` `indices_capacity`,
 * `kv_last_page_len` `batch_size` `int32_t`.
 */
KVP_NODISCARD
enum kvp_status kvp_pool_page_table(struct kvp_pool *pool,
                                    const struct kvp_req_table *table,
                                    const int64_t *rows,
                                    const int64_t *seq_lens,
                                    size_t batch_size,
                                    int32_t *kv_indptr,
                                    int32_t *kv_indices,
                                    size_t indices_capacity,
                                    int32_t *kv_last_page_len);

/**
 * Enqueues `kvp_pool_alloc_extend_rows` on `stream` (device pool): `table.data` is device
 * memory, `rows`, `prefix_lens`, `seq_lens` device arrays of `batch_size` `int64_t`, and
 * `prefix_lens_host` / `seq_lens_host` their host copies (SGLang's `*_lens_cpu`), from which
 * the host plans and checks everything it can (lengths, `seq_lens_host[i] <= row_len`,
 * `out_len`, shortage — failing with a status, enqueuing nothing). `out` (device, may be
 * NULL) receives `out_cache_loc`.
 *
 * On the device, one kernel for a batch the deciding allocation kernels serve (a decode of
 * up to 1,024 requests, up to 4,096 on an sm_90 device's thread block clusters, an extend
 * of up to 2,048 requests: the rows checked, `last_loc` read and the slots written by the
 * allocation kernel), else one call of three kernels: the first checks the rows (in the
 * table, distinct, device `seq_lens[i] <= row_len`) and reads each request's `last_loc`
 * from the table into the pool's scratch; the second is `kvp_pool_alloc_extend_async`'s
 * kernel; the third writes the new slots into the table unless the call failed. A bad row,
 * like a bad `last_loc`, faults the pool (`KVP_STATUS_DEVICE_FAULT` at a later call or
 * `kvp_pool_check_device`, naming the request: `rows[i] = r is outside the table`,
 * `... repeats an earlier request's row`); a failing call writes nothing to the table
 * (`out`, if given, gets the padding slot 0). Results equal the host backend's.
 *
 * The pool keeps a device scratch for these calls (a mark word per table row, and per
 * request `last_loc` and token offsets; with `out` NULL also the new slots); a call that
 * needs more than the pool has allocates it (`cuMemAlloc`, which may synchronize the
 * device; later calls of that size do not), except while `stream` is being captured: it is
 * then refused (`KVP_STATUS_INVALID_STATE`, the capture intact). Size the scratch before
 * capturing with `kvp_pool_reserve_scratch_async`. All buffers must stay alive until the
 * stream passes the call.
 *
 * # Safety
 * `table` must point to a valid descriptor of device memory of the pool's device; the host
 * arrays hold `batch_size` `int64_t`; device pointers as stated.
 */
KVP_NODISCARD
enum kvp_status kvp_pool_alloc_extend_rows_async(struct kvp_pool *pool,
                                                 const struct kvp_req_table *table,
                                                 const int64_t *rows,
                                                 const int64_t *prefix_lens_host,
                                                 const int64_t *seq_lens_host,
                                                 const int64_t *prefix_lens,
                                                 const int64_t *seq_lens,
                                                 size_t batch_size,
                                                 size_t extend_num_tokens,
                                                 void *out,
                                                 size_t out_len,
                                                 struct CUstream_st *stream);

/**
 * Enqueues `kvp_pool_alloc_decode_rows` on `stream` (device pool); see
 * `kvp_pool_alloc_extend_rows_async` (same kernels, one token per request at position
 * `seq_lens[i] - 1`).
 *
 * # Safety
 * As for `kvp_pool_alloc_extend_rows_async`.
 */
KVP_NODISCARD
enum kvp_status kvp_pool_alloc_decode_rows_async(struct kvp_pool *pool,
                                                 const struct kvp_req_table *table,
                                                 const int64_t *rows,
                                                 const int64_t *seq_lens_host,
                                                 const int64_t *seq_lens,
                                                 size_t batch_size,
                                                 void *out,
                                                 size_t out_len,
                                                 struct CUstream_st *stream);

/**
 * Enqueues `kvp_pool_free_rows` on `stream` (device pool): `rows`, `starts`, `ends` are
 * device arrays of `batch_size` `int64_t`, `starts_host` / `ends_host` host copies of the
 * last two. The host checks the segments from its copies (`0 <= start <= end <= row_len`,
 * page-aligned starts) and knows the exact page count (no lower bound, unlike a free by
 * index). On the device, one call of two kernels: the first checks the rows (in the table,
 * distinct) and lays the segments' slots out, page after page, in the pool's scratch; the
 * second is `kvp_pool_free_segment_async`'s kernel over them (so a free page, a page named
 * by two rows, a slot outside the pool fault the pool and free nothing; its fault names the
 * position in the laid-out segments, and as its value -2 for an int64 table's entry an
 * int32 pool cannot hold). A batch whose segments are all empty enqueues nothing.
 *
 * # Safety
 * As for `kvp_pool_alloc_extend_rows_async`.
 */
KVP_NODISCARD
enum kvp_status kvp_pool_free_rows_async(struct kvp_pool *pool,
                                         const struct kvp_req_table *table,
                                         const int64_t *rows,
                                         const int64_t *starts_host,
                                         const int64_t *ends_host,
                                         const int64_t *starts,
                                         const int64_t *ends,
                                         size_t batch_size,
                                         struct CUstream_st *stream);

/**
 * Sizes a device pool's scratch for the by-row `_async` calls
 * (`kvp_pool_alloc_extend_rows_async`, `kvp_pool_alloc_decode_rows_async`,
 * `kvp_pool_free_rows_async`) of up to `batch_size` requests that allocate or free up to
 * `slots` slots, on tables of up to `table_rows` rows, so that those calls allocate no
 * device memory. Call it before recording such calls by stream capture: a captured call
 * that finds the scratch too small is refused (`KVP_STATUS_INVALID_STATE`, nothing done,
 * the capture intact), since `cuMemAlloc` may synchronize the device and so invalidate the
 * engine's capture. The scratch only grows (a smaller size does nothing); new memory is
 * zeroed on `stream` (order the pool's later calls after it, as every call). Not a call of
 * the pool: no kernel, no state change (also on a faulted pool). Fails with
 * `KVP_STATUS_INVALID_ARGUMENT` (`table_rows` over 2^32 - 1, sizes beyond the address
 * space), `KVP_STATUS_INVALID_STATE` (growing while `stream` is being captured),
 * `KVP_STATUS_CUDA_ERROR` (`cuMemAlloc` failed), `KVP_STATUS_WRONG_BACKEND` (a host pool,
 * which needs no scratch).
 *
 * # Safety
 * `pool` a live pool or NULL; `stream` as for `kvp_pool_alloc_async`.
 */
KVP_NODISCARD
enum kvp_status kvp_pool_reserve_scratch_async(struct kvp_pool *pool,
                                               uint64_t table_rows,
                                               size_t batch_size,
                                               uint64_t slots,
                                               struct CUstream_st *stream);

/**
 * Enqueues `kvp_pool_page_table` on `stream` (device pool): FlashInfer's `kv_indptr`
 * (`batch_size + 1`), `kv_indices` (`indices_capacity`) and `kv_last_page_len`
 * (`batch_size`), int32 device buffers, for rows `rows` (device) of `table` (device) with
 * lengths `seq_lens` (device) — one kernel, no synchronization, fixed buffers (CUDA-graph
 * friendly). `seq_lens_host` is the host copy the host plans from: it refuses a batch
 * whose pages exceed `indices_capacity` before enqueuing anything. `kv_indptr_host` and
 * `kv_last_page_len_host` (host, each may be NULL) receive the same `kv_indptr` and
 * `kv_last_page_len` at once, so FlashInfer's `plan()` needs no device-to-host copy.
 *
 * On the device, rows outside the table or lengths outside `0 .. row_len` count as empty
 * requests, and no write goes past `indices_capacity` (the device lengths should equal the
 * host copies). Reads no pool state and changes nothing (works on a faulted pool too), but
 * it is still one of the pool's calls: order it with the others on the device (its kernel
 * is the pool's, released with the pool after the last call's stream has passed it).
 *
 * # Safety
 * As for `kvp_pool_alloc_extend_rows_async`; the host outputs, when not NULL, hold
 * `batch_size + 1` and `batch_size` `int32_t`.
 */
KVP_NODISCARD
enum kvp_status kvp_pool_page_table_async(struct kvp_pool *pool,
                                          const struct kvp_req_table *table,
                                          const int64_t *rows,
                                          const int64_t *seq_lens_host,
                                          const int64_t *seq_lens,
                                          size_t batch_size,
                                          int32_t *kv_indptr,
                                          int32_t *kv_indices,
                                          size_t indices_capacity,
                                          int32_t *kv_last_page_len,
                                          int32_t *kv_indptr_host,
                                          int32_t *kv_last_page_len_host,
                                          struct CUstream_st *stream);

/**
 * Returns SGLang's defaults: capacity 0 and page size 1 (set them, or attach a pool),
 * `max_prefill_tokens` 16384, chunked prefill 8192, clip 4096, FCFS, one chunked request,
 * length retraction, ratio 0.7 / 0.14 / 600 / 1.0, preemption threshold 10 (used only with
 * `enable_priority`), no mixed chunk, no dynamic chunking.
 */
struct kvp_scheduler_config kvp_scheduler_config_default(void);

/**
 * Creates a scheduler. With `pool` non-NULL it is attached: capacity and page size come
 * from the pool, each step reads the pool's available size itself, and the scheduler
 * holds a reference that keeps the pool alive until the scheduler is freed. With `pool`
 * NULL, `config->capacity` and `config->page_size` must be set and each step takes the
 * available size from the caller.
 *
 * Ownership: `config` is read during the call; `*out_scheduler` is owned by the caller
 * (`kvp_scheduler_free`). Fails with `KVP_STATUS_NULL_ARGUMENT` or
 * `KVP_STATUS_INVALID_ARGUMENT`, the message naming the field: zero capacity or page
 * size, a page size above the capacity, a capacity, `max_prefill_tokens` or
 * `chunked_prefill_size` above `INT64_MAX`, `max_prefill_tokens` or
 * `clip_max_new_tokens` 0 (nothing could ever be admitted), an unknown enum value, a chunk
 * smaller than `truncation_align_size`, `max_chunked_requests` 0, a ratio parameter
 * (`init_new_token_ratio`, `min_new_token_ratio_factor`, `schedule_conservativeness`)
 * that is not finite and positive, zero decay steps, negative or non-finite dynamic-chunk
 * coefficients; `*out_scheduler` is unmodified on failure.
 *
 * # Safety
 * `config` and `out_scheduler` must be NULL or valid; `pool` NULL or a live pool.
 */
KVP_NODISCARD
enum kvp_status kvp_scheduler_new(const struct kvp_scheduler_config *config,
                                  const struct kvp_pool *pool,
                                  struct kvp_scheduler **out_scheduler);

/**
 * Releases a scheduler (and its reference to an attached pool). NULL is a no-op.
 *
 * # Safety
 * `scheduler` must be NULL or a live scheduler, not used afterwards.
 */
void kvp_scheduler_free(struct kvp_scheduler *scheduler);

/**
 * Queues a request. `prefix_path` (`path_len` node ids from the prefix-cache root to the
 * request's last matched node) feeds the DFS-weight policy; pass NULL and 0 otherwise.
 *
 * `*out_result` says whether it was queued or can never fit the pool (then it is not
 * queued: fail it); the need is computed without wrapping, so a huge `input_len` or
 * `max_new_tokens` is reported unfittable (`needed` up to `UINT64_MAX`), never queued.
 * Fails with `KVP_STATUS_INVALID_STATE` (id already live), `KVP_STATUS_INVALID_LENGTHS`
 * (`input_len` 0, `input_len + output_len` beyond 64 bits, `prefix_len` not less than the
 * tokens to fill, `prefix_evictable > prefix_len`) or `KVP_STATUS_NULL_ARGUMENT`; nothing
 * is queued and `*out_result` is unmodified on failure.
 *
 * # Safety
 * `request` and `out_result` valid or NULL; `prefix_path` valid for `path_len` elements.
 */
KVP_NODISCARD
enum kvp_status kvp_scheduler_submit(struct kvp_scheduler *scheduler,
                                     const struct kvp_request *request,
                                     const uint64_t *prefix_path,
                                     size_t path_len,
                                     struct kvp_submit_result *out_result);

/**
 * Refreshes a waiting request's cached-prefix information (after the prefix cache
 * changed, or after a retraction reset it to 0). `prefix_path` NULL with `path_len` 0
 * keeps the previous path. Fails with `KVP_STATUS_INVALID_ARGUMENT` (unknown id),
 * `KVP_STATUS_INVALID_STATE` (not waiting) or `KVP_STATUS_INVALID_LENGTHS`.
 *
 * # Safety
 * `prefix_path` valid for `path_len` elements or NULL.
 */
KVP_NODISCARD
enum kvp_status kvp_scheduler_update_prefix(struct kvp_scheduler *scheduler,
                                            uint64_t id,
                                            uint64_t prefix_len,
                                            uint64_t prefix_evictable,
                                            const uint64_t *prefix_path,
                                            size_t path_len);

/**
 * Plans the next step and writes it to `*out_plan`: prefill (chunk continuations first,
 * then waiting requests the budget admits) if there is any, else a decode step with the
 * memory check, retraction and new-token-ratio update.
 *
 * `available` is the pool's free tokens (ignored when attached to a pool: it is read from
 * the pool), `evictable` the engine's prefix-cache evictable tokens, `allow_prefill`
 * false to skip prefill this step (e.g. a `kvp_delayer` verdict). Issuing a plan commits
 * it: the next step assumes the engine ran it. Every admitted prefill fits: the engine's
 * `kvp_pool_alloc_extend` for it cannot run short (given the evictable tokens really are
 * evictable). The plan's arrays stay valid until the next step or `kvp_scheduler_free`.
 *
 * Fails with `KVP_STATUS_NULL_ARGUMENT`, or `KVP_STATUS_INVALID_ARGUMENT` when
 * `available + evictable` exceeds `INT64_MAX` tokens (no pool holds that many); then
 * nothing changes: no step is counted and the previous plan's arrays stay as they were.
 *
 * # Safety
 * `out_plan` writable or NULL.
 */
KVP_NODISCARD
enum kvp_status kvp_scheduler_step(struct kvp_scheduler *scheduler,
                                   uint64_t available,
                                   uint64_t evictable,
                                   bool allow_prefill,
                                   struct kvp_step_plan *out_plan);

/**
 * The engine finished a running request (EOS, stop string or length): it leaves the
 * scheduler; `*out_kv_len` (may be NULL) receives the KV tokens it held, for the engine to
 * free (`kvp_scheduler_finish_ex` also says which leading tokens are its locked cached
 * prefix). Fails with `KVP_STATUS_INVALID_ARGUMENT` (unknown id) or
 * `KVP_STATUS_INVALID_STATE` (not running: use `kvp_scheduler_abort`).
 *
 * # Safety
 * `out_kv_len` writable or NULL.
 */
KVP_NODISCARD
enum kvp_status kvp_scheduler_finish(struct kvp_scheduler *scheduler,
                                     uint64_t id,
                                     uint64_t *out_kv_len);

/**
 * `kvp_scheduler_finish` that also reports what the request held: `*out_finished`
 * receives its id, KV length, and the leading `prefix_len` tokens of its row that belong to
 * the prefix cache (locked since its admission: unlock them) — see `kvp_finished`. The
 * engine frees (or caches) `row[prefix_len .. kv_len)`.
 *
 * Same checks and effect as `kvp_scheduler_finish`: fails with
 * `KVP_STATUS_INVALID_ARGUMENT` (unknown id), `KVP_STATUS_INVALID_STATE` (not running:
 * use `kvp_scheduler_abort_ex`), or `KVP_STATUS_NULL_ARGUMENT` when `out_finished` is NULL
 * (checked first: the request is then not finished). `*out_finished` is unmodified and the
 * scheduler unchanged on failure.
 *
 * # Safety
 * `scheduler` a live scheduler or NULL; `out_finished` writable or NULL.
 */
KVP_NODISCARD
enum kvp_status kvp_scheduler_finish_ex(struct kvp_scheduler *scheduler,
                                        uint64_t id,
                                        struct kvp_finished *out_finished);

/**
 * `kvp_scheduler_abort` that also reports what the request held, as
 * `kvp_scheduler_finish_ex` does (a waiting request reports `kv_len` and `prefix_len` 0:
 * it holds and locks nothing). Fails with `KVP_STATUS_INVALID_ARGUMENT` (unknown id) or
 * `KVP_STATUS_NULL_ARGUMENT` (`out_finished` NULL, checked first: nothing is dropped);
 * `*out_finished` is unmodified and the scheduler unchanged on failure.
 *
 * # Safety
 * `scheduler` a live scheduler or NULL; `out_finished` writable or NULL.
 */
KVP_NODISCARD
enum kvp_status kvp_scheduler_abort_ex(struct kvp_scheduler *scheduler,
                                       uint64_t id,
                                       struct kvp_finished *out_finished);

/**
 * Drops a request in any phase (client disconnect, stop). `*out_kv_len` (may be NULL)
 * receives the KV tokens it held, for the engine to free. Fails with
 * `KVP_STATUS_INVALID_ARGUMENT` for an unknown id.
 *
 * # Safety
 * `out_kv_len` writable or NULL.
 */
KVP_NODISCARD
enum kvp_status kvp_scheduler_abort(struct kvp_scheduler *scheduler,
                                    uint64_t id,
                                    uint64_t *out_kv_len);

/**
 * Writes a live request's phase, KV length and output length to `*out_state`. Fails with
 * `KVP_STATUS_INVALID_ARGUMENT` for an unknown id; `*out_state` is unmodified on failure.
 *
 * # Safety
 * `out_state` writable or NULL.
 */
KVP_NODISCARD
enum kvp_status kvp_scheduler_get_request(const struct kvp_scheduler *scheduler,
                                          uint64_t id,
                                          struct kvp_request_state *out_state);

/**
 * Writes the scheduler's counters and queue sizes to `*out_stats`.
 *
 * # Safety
 * `out_stats` writable or NULL.
 */
KVP_NODISCARD
enum kvp_status kvp_scheduler_get_stats(const struct kvp_scheduler *scheduler,
                                        struct kvp_scheduler_stats *out_stats);

/**
 * Copies the pool's allocator state into a new snapshot written to `*out_snapshot`.
 * Costs O(num_pages) time and memory (5 bytes a page plus 4 per free or staged page: 9 for
 * an empty pool; about 8 µs for 131,072 pages, 180 µs for a 2M-slot token pool;
 * BENCHMARKS.md); restoring costs the same. Fails with `KVP_STATUS_INVALID_STATE` while a
 * free group is open, or `KVP_STATUS_OUT_OF_MEMORY` when the copy cannot be allocated;
 * `*out_snapshot` is unmodified on failure.
 *
 * # Safety
 * `pool` must be a live pool or NULL; `out_snapshot` writable or NULL.
 */
KVP_NODISCARD
enum kvp_status kvp_pool_backup_state(const struct kvp_pool *pool,
                                      struct kvp_snapshot **out_snapshot);

/**
 * Returns the pool to the state saved in `snapshot`: slots allocated since the backup are
 * free again and slots freed since are allocated again. The snapshot is not consumed and
 * can be restored again. Fails with `KVP_STATUS_FOREIGN_SNAPSHOT` (snapshot of another
 * pool) or `KVP_STATUS_INVALID_STATE` (free group open), changing nothing.
 *
 * # Safety
 * `pool` must be a live pool or NULL; `snapshot` a live snapshot or NULL.
 */
KVP_NODISCARD
enum kvp_status kvp_pool_restore_state(struct kvp_pool *pool,
                                       const struct kvp_snapshot *snapshot);

/**
 * Releases a snapshot. `snapshot` may be NULL (no-op). A device snapshot's buffer goes
 * back to its pool for reuse; when the pool is gone too, the buffers are freed once the
 * pool's last kernel (e.g. a restore from this snapshot still queued) has run — the same
 * stream-ordered release as `kvp_pool_free`. This never waits and never synchronizes.
 *
 * # Safety
 * `snapshot` must be NULL or a snapshot not yet freed, not used afterwards.
 */
void kvp_snapshot_free(struct kvp_snapshot *snapshot);

/**
 * Returns a static, NUL-terminated English description of `status` ("unknown status" for
 * numbers kvpool does not define). Never fails; the string must not be freed.
 */
const char *kvp_status_str(int32_t status);

#if defined(KVP_TESTING)
/**
 * Panics inside the ABI boundary; must return `KVP_STATUS_PANIC` with the message
 * "internal panic: kvp_testing_panic" and leave the process running. Testing builds only.
 */
KVP_NODISCARD enum kvp_status kvp_testing_panic(void);
#endif

#if defined(KVP_TESTING)
/**
 * Panics while holding `pool`'s lock, which poisons the pool: this call returns
 * `KVP_STATUS_PANIC`, every later call on the pool `KVP_STATUS_POISONED`. Testing builds only.
 *
 * # Safety
 * `pool` must be a live pool or NULL.
 */
KVP_NODISCARD enum kvp_status kvp_testing_poison_pool(struct kvp_pool *pool);
#endif

/**
 * Returns the library's version as a static NUL-terminated string, e.g. "0.1.0".
 */
const char *kvp_version(void);

/**
 * Returns the library's ABI version; equal to `KVP_ABI_VERSION` when the header and the
 * loaded library match.
 */
uint32_t kvp_abi_version(void);

#ifdef __cplusplus
}  // extern "C"
#endif  // __cplusplus

#endif  /* KVPOOL_H */
