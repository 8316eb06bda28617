//! `kvp_pool`: create, query, allocate, free, group, clear.

use std::ffi::c_void;

use super::boundary::{fail, ffi_boundary, status_of};
use super::buffers::{disjoint, input, input_indices, output_indices, span};
use super::handle::{into_raw, release, with_raw, Guarded};
use super::status::kvp_status;
use crate::cuda::{DevicePool, RestoreContext};
use crate::pool::plan::ExtendPlan;
use crate::pool::{
    BackendKind, IndexType, Pool, PoolConfig, PoolError, PoolInfo, PoolOp, PoolStats, SlotIndex,
};

/// A KV-cache slot allocator (SGLang's `TokenToKVPoolAllocator` when `page_size == 1`,
/// `PagedTokenToKVPoolAllocator` otherwise). It hands out integer slot indices into KV
/// buffers the engine owns; it never touches KV data.
///
/// Created by `kvp_pool_new`, released by `kvp_pool_free`.
///
/// Thread safety: a pool may be used from several threads at once; calls on one pool are
/// serialized by an internal lock. `kvp_pool_free` must not run concurrently with any other
/// call on the same pool.
pub struct kvp_pool {
    _private: [u8; 0],
}

/// Index width of a pool's index buffers (`kvp_pool_config.index_type`).
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum kvp_index_type {
    /// `int64_t` (default; SGLang's `out_cache_loc`).
    I64 = 0,
    /// `int32_t`: the same token slots (SGLang's `out_cache_loc` / `req_to_token` entries,
    /// never page ids), 32 bits wide, for int32 tables such as `req_to_token`; needs
    /// `size + page_size <= INT32_MAX + 1`.
    I32 = 1,
}

/// Where a pool lives (`kvp_pool_config.backend`).
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum kvp_backend {
    /// Host memory; every call completes before it returns. Use the plain calls
    /// (`kvp_pool_alloc_extend`, ...).
    Host = 0,
    /// CUDA device `kvp_pool_config.device` (its primary context): free list and page map in
    /// device memory, every operation a kernel on the caller's stream. Use the `*_async`
    /// calls; needs only the NVIDIA driver (sm_80 or newer), no CUDA toolkit.
    Cuda = 1,
}

/// Configuration of a new pool. Start from `kvp_pool_config_default()` and set `size`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct kvp_pool_config {
    /// Usable token slots (SGLang's `max_total_num_tokens`); a positive multiple of
    /// `page_size`. KV buffers need `size + page_size` rows: page 0 is the padding sink.
    pub size: u64,
    /// Tokens per page. 1 gives a token pool (freed slots reused first-in first-out);
    /// more gives a paged pool (most recently freed page reused first). A device pool
    /// takes at most 2^31 (`KVP_STATUS_INVALID_ARGUMENT` above).
    pub page_size: u32,
    /// One of `kvp_index_type`: the element type of every index buffer of this pool.
    pub index_type: u32,
    /// One of `kvp_backend`.
    pub backend: u32,
    /// CUDA device ordinal (ignored by the host backend).
    pub device: i32,
    /// Stage frees and merge them, sorted, only when an allocation runs short (SGLang's
    /// `need_sort`, used for PD disaggregation: sorted pages give contiguous transfers).
    pub need_sort: bool,
}

/// Static facts about a pool, filled by `kvp_pool_get_info`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct kvp_pool_info {
    /// Usable token slots.
    pub size: u64,
    /// Rows the engine's KV buffers need: `size + page_size`.
    pub kv_rows: u64,
    /// The padding slot, always 0: padded rows (e.g. CUDA-graph padding) write their KV
    /// here. It is never allocated.
    pub padding_slot: u64,
    /// Tokens per page.
    pub page_size: u32,
    /// `size / page_size` (page 0 excluded).
    pub num_pages: u32,
    /// One of `kvp_index_type`.
    pub index_type: u32,
    /// One of `kvp_backend`.
    pub backend: u32,
    /// CUDA device ordinal, or -1 for the host backend.
    pub device: i32,
    /// Whether frees are staged and merged sorted.
    pub need_sort: bool,
    /// Whether a free group is open.
    pub in_free_group: bool,
}

/// A pool's counters, filled by `kvp_pool_get_stats`. Call, token and page counters only
/// grow (also across `kvp_pool_clear` and `kvp_pool_restore_state`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct kvp_pool_stats {
    /// `kvp_pool_alloc` calls, failed ones included.
    pub alloc_calls: u64,
    /// `kvp_pool_alloc_extend` calls, failed ones included.
    pub alloc_extend_calls: u64,
    /// `kvp_pool_alloc_decode` calls, failed ones included.
    pub alloc_decode_calls: u64,
    /// `kvp_pool_free_indices`, `_free_pages` and `_free_segment` calls, failed ones included.
    pub free_calls: u64,
    /// Slot indices handed out, one per token (a slot handed out again after a rewind
    /// counts again).
    pub tokens_allocated: u64,
    /// Slot capacity returned to the pool: `pages_freed * page_size`, since a free returns
    /// whole pages. On a paged pool it exceeds `tokens_allocated` when pages were freed
    /// partly used (a 5-token request on 16-token pages frees 16 slots); to find a leak,
    /// compare pages: `pages_allocated - pages_freed` is `pages_in_use` until a
    /// `kvp_pool_clear` or `kvp_pool_restore_state`. Both backends count it from page
    /// counts (a device pool's fill points are on the device).
    pub slots_freed: u64,
    /// Pages taken from the free list.
    pub pages_allocated: u64,
    /// Pages returned to the pool (at `kvp_pool_free_group_end` for frees inside a group).
    pub pages_freed: u64,
    /// Pages currently neither free nor staged (pages freed in an open group count).
    pub pages_in_use: u64,
    /// The largest `pages_in_use` seen.
    pub pages_in_use_peak: u64,
    /// Allocations refused with `KVP_STATUS_OUT_OF_SLOTS`.
    pub failed_allocations: u64,
    /// Calls refused for bad input or state.
    pub rejected_calls: u64,
    /// Merges of staged frees that had something to merge.
    pub merges: u64,
    /// Successful `kvp_pool_restore_state` calls.
    pub restores: u64,
}

impl From<PoolStats> for kvp_pool_stats {
    fn from(s: PoolStats) -> Self {
        Self {
            alloc_calls: s.alloc_calls,
            alloc_extend_calls: s.alloc_extend_calls,
            alloc_decode_calls: s.alloc_decode_calls,
            free_calls: s.free_calls,
            tokens_allocated: s.tokens_allocated,
            slots_freed: s.slots_freed,
            pages_allocated: s.pages_allocated,
            pages_freed: s.pages_freed,
            pages_in_use: s.pages_in_use,
            pages_in_use_peak: s.pages_in_use_peak,
            failed_allocations: s.failed_allocations,
            rejected_calls: s.rejected_calls,
            merges: s.merges,
            restores: s.restores,
        }
    }
}

/// A pool of either backend: what a `kvp_pool *` points to.
// Each handle holds one, already on the heap: boxing the larger variant would only add an
// indirection to every device call.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub(crate) enum PoolObject {
    /// Host backend: the plain calls.
    Host(Pool),
    /// CUDA backend: the `*_async` calls.
    Device(DevicePool),
}

impl PoolObject {
    pub fn info(&self) -> PoolInfo {
        match self {
            Self::Host(pool) => pool.info(),
            Self::Device(pool) => pool.info(),
        }
    }

    pub fn size(&self) -> u64 {
        self.info().size
    }

    pub fn page_size(&self) -> u32 {
        self.info().page_size
    }

    /// Free slots; for a device pool the host's lower bound (see `kvp_pool_available_size`).
    pub fn available_size(&mut self) -> u64 {
        match self {
            Self::Host(pool) => pool.available_size(),
            Self::Device(pool) => pool.available_size_bound().0,
        }
    }

    pub fn stats(&self) -> PoolStats {
        match self {
            Self::Host(pool) => pool.stats(),
            Self::Device(pool) => pool.stats(),
        }
    }

    /// The host planning of an extend batch (either backend).
    pub fn extend_need(
        &self,
        prefix_lens: &[i64],
        seq_lens: &[i64],
    ) -> Result<ExtendPlan, PoolError> {
        match self {
            Self::Host(pool) => pool.extend_need(prefix_lens, seq_lens),
            Self::Device(pool) => pool.extend_need(prefix_lens, seq_lens),
        }
    }

    /// The host planning of a decode batch (either backend).
    pub fn decode_need(&self, seq_lens: &[i64]) -> Result<u64, PoolError> {
        match self {
            Self::Host(pool) => pool.decode_need(seq_lens),
            Self::Device(pool) => pool.decode_need(seq_lens),
        }
    }

    pub fn free_group_begin(&mut self) -> Result<(), PoolError> {
        match self {
            Self::Host(pool) => pool.free_group_begin(),
            Self::Device(pool) => pool.free_group_begin(),
        }
    }
}

/// What a `kvp_pool *` points to.
pub(crate) type PoolHandle = Guarded<PoolObject>;

/// Runs `body` on the pool behind `pool`, of either backend, under its lock and the panic
/// boundary.
pub(crate) fn with_any_pool(
    pool: *const kvp_pool,
    body: impl FnOnce(&mut PoolObject) -> kvp_status,
) -> kvp_status {
    with_raw::<PoolObject, kvp_pool>(pool, "pool", |object| {
        // A call on a device pool binds its primary context while it runs; the thread's
        // own context is current again when it returns.
        let _restore = matches!(object, PoolObject::Device(_)).then(RestoreContext::save);
        body(object)
    })
}

/// Runs `body` on a host pool; a device pool fails with `KVP_STATUS_WRONG_BACKEND`.
pub(crate) fn with_pool(
    pool: *const kvp_pool,
    body: impl FnOnce(&mut Pool) -> kvp_status,
) -> kvp_status {
    with_any_pool(pool, |object| match object {
        PoolObject::Host(pool) => body(pool),
        PoolObject::Device(_) => fail(
            kvp_status::WrongBackend,
            "this is a device pool (KVP_BACKEND_CUDA): use the *_async call on a stream",
        ),
    })
}

/// Runs `body` on a device pool; a host pool fails with `KVP_STATUS_WRONG_BACKEND`.
pub(crate) fn with_device_pool(
    pool: *const kvp_pool,
    body: impl FnOnce(&mut DevicePool) -> kvp_status,
) -> kvp_status {
    with_any_pool(pool, |object| match object {
        PoolObject::Device(pool) => body(pool),
        PoolObject::Host(_) => fail(
            kvp_status::WrongBackend,
            "this is a host pool (KVP_BACKEND_HOST): this call needs a device pool \
             (KVP_BACKEND_CUDA); a host pool's calls are the ones without _async",
        ),
    })
}

/// Calls `$f::<T>($args)` with `T` the pool's index type.
macro_rules! by_index_type {
    ($pool:expr, $f:ident($($arg:expr),* $(,)?)) => {
        match $pool.config().index_type {
            IndexType::I64 => $f::<i64>($pool, $($arg),*),
            IndexType::I32 => $f::<i32>($pool, $($arg),*),
        }
    };
}

/// Returns the default configuration: `size` 0 (must be set), `page_size` 1, int64
/// indices, host backend, `device` 0, `need_sort` false.
#[no_mangle]
pub extern "C" fn kvp_pool_config_default() -> kvp_pool_config {
    kvp_pool_config {
        size: 0,
        page_size: 1,
        index_type: kvp_index_type::I64 as u32,
        backend: kvp_backend::Host as u32,
        device: 0,
        need_sort: false,
    }
}

fn pool_config(c: &kvp_pool_config) -> Result<PoolConfig, kvp_status> {
    let index_type = match c.index_type {
        0 => IndexType::I64,
        1 => IndexType::I32,
        other => {
            return Err(fail(
                kvp_status::InvalidArgument,
                format!("index_type {other} is not a kvp_index_type"),
            ))
        }
    };
    let backend = match c.backend {
        0 => BackendKind::Host,
        1 => BackendKind::Cuda { ordinal: c.device },
        other => {
            return Err(fail(
                kvp_status::InvalidArgument,
                format!("backend {other} is not a kvp_backend"),
            ))
        }
    };
    Ok(PoolConfig {
        size: c.size,
        page_size: c.page_size,
        need_sort: c.need_sort,
        index_type,
        backend,
    })
}

/// Creates a pool with every page free.
///
/// Ownership: `config` is only read during the call. On success `*out_pool` receives a pool
/// owned by the caller, to be released with `kvp_pool_free`.
///
/// A CUDA pool (`backend = KVP_BACKEND_CUDA`) retains device `config->device`'s primary
/// context, allocates its device memory (32 bytes per page plus 4 per slot, once) and
/// loads the kernels; this call, unlike the pool's operations, may synchronize the device.
/// It also frees, on the calling thread, the memory of released device pools whose queued
/// work has finished (normally the library's release thread has done so already; see
/// `kvp_pool_free`).
///
/// Fails with `KVP_STATUS_NULL_ARGUMENT`, `KVP_STATUS_INVALID_ARGUMENT` (page_size 0, size
/// 0, unknown enum value, slots that do not fit the index type, more than 2^32 - 2 pages),
/// `KVP_STATUS_UNALIGNED` (size not a multiple of page_size), `KVP_STATUS_OUT_OF_MEMORY`
/// (the host bookkeeping cannot be allocated), `KVP_STATUS_CUDA_UNAVAILABLE` (no NVIDIA
/// driver, no such device) or `KVP_STATUS_CUDA_ERROR`; `*out_pool` is unmodified on failure.
///
/// # Safety
/// `config` must be NULL or point to a valid config; `out_pool` must be NULL or writable.
#[no_mangle]
#[must_use]
pub unsafe extern "C" fn kvp_pool_new(
    config: *const kvp_pool_config,
    out_pool: *mut *mut kvp_pool,
) -> kvp_status {
    ffi_boundary(|| {
        // SAFETY: caller contract: NULL or a valid config.
        let Some(config) = (unsafe { config.as_ref() }) else {
            return fail(kvp_status::NullArgument, "config is NULL");
        };
        if out_pool.is_null() {
            return fail(kvp_status::NullArgument, "out_pool is NULL");
        }
        let config = tri!(pool_config(config));
        let pool = match config.backend {
            BackendKind::Host => Pool::new(config).map(PoolObject::Host),
            BackendKind::Cuda { .. } => {
                // Creation binds the primary context; the caller's is current again after.
                let _restore = crate::cuda::driver_available().then(RestoreContext::save);
                DevicePool::new(config).map(PoolObject::Device)
            }
        };
        let pool = match pool {
            Ok(pool) => pool,
            Err(err) => return status_of(Err(err)),
        };
        // SAFETY: `out_pool` is non-NULL and writable (caller contract).
        unsafe { *out_pool = into_raw(PoolHandle::new(pool)) };
        kvp_status::Ok
    })
}

/// Releases the caller's reference to a pool. `pool` may be NULL (no-op). A scheduler
/// attached to the pool keeps it alive until the scheduler is freed too. Outstanding
/// snapshots stay valid objects (free them with `kvp_snapshot_free`) but can no longer be
/// restored once the pool is gone.
///
/// Device pool — stream-ordered release: the last reference may go while kernels of the
/// pool (any `*_async` call, backup or restore) are still queued or running. Releasing
/// never waits for them and never synchronizes: the pool's device memory, its mapped host
/// memory and its kernels are freed by a library thread (`kvpool-release`) once the last
/// call's stream has passed it, in the pool's primary context, which stays retained until
/// then. So a C++ destructor (also during exception unwinding) or a Python `close()` is
/// safe right after enqueueing work. What must still outlive the queued calls are the
/// caller's own buffers passed to them (`out`, `last_loc`, lengths, indices), and the
/// streams' work must eventually run: memory of calls recorded by stream capture is not
/// tracked — finish the replays of a graph holding this pool's calls before releasing it.
/// `kvp_device_pending_releases` counts releases still waiting; at process exit the driver
/// reclaims whatever is left.
///
/// # Safety
/// `pool` must be NULL or a pool from `kvp_pool_new` not yet freed, and no other call may
/// use it concurrently or afterwards.
#[no_mangle]
pub unsafe extern "C" fn kvp_pool_free(pool: *mut kvp_pool) {
    // SAFETY: forwarded caller contract.
    unsafe { release::<PoolObject, kvp_pool>(pool) }
}

/// Writes static facts about the pool (size, page size, KV rows, padding slot, ...) to
/// `*out_info`. Fails only with `KVP_STATUS_NULL_ARGUMENT`, `KVP_STATUS_POISONED` or
/// `KVP_STATUS_INVALID_ARGUMENT` (a handle of another kind); `*out_info` is unmodified on
/// failure.
///
/// # Safety
/// `pool` must be a live pool or NULL; `out_info` writable or NULL.
#[no_mangle]
#[must_use]
pub unsafe extern "C" fn kvp_pool_get_info(
    pool: *const kvp_pool,
    out_info: *mut kvp_pool_info,
) -> kvp_status {
    with_any_pool(pool, |pool| {
        if out_info.is_null() {
            return fail(kvp_status::NullArgument, "out_info is NULL");
        }
        let i = pool.info();
        let (backend, device) = match i.backend {
            BackendKind::Host => (kvp_backend::Host, -1),
            BackendKind::Cuda { ordinal } => (kvp_backend::Cuda, ordinal),
        };
        let info = kvp_pool_info {
            size: i.size,
            kv_rows: i.kv_rows,
            padding_slot: i.padding_slot,
            page_size: i.page_size,
            num_pages: i.num_pages,
            index_type: match i.index_type {
                IndexType::I64 => kvp_index_type::I64,
                IndexType::I32 => kvp_index_type::I32,
            } as u32,
            backend: backend as u32,
            device,
            need_sort: i.need_sort,
            in_free_group: i.in_free_group,
        };
        // SAFETY: non-NULL and writable (caller contract).
        unsafe { *out_info = info };
        kvp_status::Ok
    })
}

/// Writes the number of free token slots to `*out_tokens`: free pages plus staged
/// (not yet merged) pages, times `page_size` — SGLang's `available_size()`. Pages freed
/// inside an open free group are not counted until the group ends.
///
/// Host pool: exact. Device pool: exact, except that the pages of a paged
/// `kvp_pool_free_indices_async` still in flight on the stream are not counted yet (a lower
/// bound); they count as soon as the stream has passed that free, without any
/// synchronization. `kvp_pool_available_size_bound` also says whether the value is exact.
///
/// # Safety
/// `pool` must be a live pool or NULL; `out_tokens` writable or NULL.
#[no_mangle]
#[must_use]
pub unsafe extern "C" fn kvp_pool_available_size(
    pool: *const kvp_pool,
    out_tokens: *mut u64,
) -> kvp_status {
    with_any_pool(pool, |pool| {
        if out_tokens.is_null() {
            return fail(kvp_status::NullArgument, "out_tokens is NULL");
        }
        // SAFETY: non-NULL and writable (caller contract).
        unsafe { *out_tokens = pool.available_size() };
        kvp_status::Ok
    })
}

/// Writes what `kvp_pool_alloc_extend` (or `kvp_pool_alloc_extend_async`) of these lengths
/// would take, without allocating: `*out_pages` receives the exact number of pages it takes
/// from the free list (on a token pool, slots), `*out_tokens` (may be NULL) the slots it
/// writes, i.e. the `extend_num_tokens` to pass, `sum(seq_lens_host - prefix_lens_host)`.
/// Request `i` takes `ceil(seq_lens_host[i] / page_size) - ceil(prefix_lens_host[i] /
/// page_size)` pages (its tokens that finish the prefix's partial page take none). For an
/// engine that evicts from its prefix cache before allocating: evict until
/// `kvp_pool_available_size` reaches `pages * page_size`, no more.
///
/// It runs the allocation's own host planning, so the lengths are checked exactly as there,
/// with the same status and message: `0 <= prefix_lens_host[i] <= seq_lens_host[i] <= size`
/// (`KVP_STATUS_INVALID_LENGTHS`, naming the first bad element). It does not see `last_loc`
/// (the allocation also checks it) and changes nothing: no merge, no counter, nothing
/// enqueued, no device memory read. Either backend: a device pool plans from the host
/// copies, exactly as its `_async` call does.
///
/// Shortage rule, exact: with the same lengths (and its other arguments valid), the
/// allocation fails with `KVP_STATUS_OUT_OF_SLOTS` if and only if `pages * page_size > A`,
/// where `A` is the pool's `kvp_pool_available_size` at that call (free pages plus pages
/// staged by `need_sort`; pages freed inside an open free group not counted). Staged pages always
/// count: the allocation merges them first whenever its merge trigger exceeds the free list
/// (SGLang's rule: `extend_num_tokens / page_size + batch_size + 1` pages on a paged pool,
/// `pages` on a token pool), and that trigger is never below `pages`, so a batch that needs
/// staged pages always gets them. (The trigger can fire for a batch that would fit without
/// the staged pages: that merge changes which pages are handed out, never whether the call
/// succeeds.) Device pool: `A` is the host's count, a lower bound while a paged
/// `kvp_pool_free_indices_async` is still in flight (`kvp_pool_available_size_bound`); it
/// only grows as the stream passes such frees, so a value read before the allocation, with
/// no call taking pages in between, is never more than the `A` the allocation sees.
///
/// `batch_size == 0` gives 0 and 0. Fails with `KVP_STATUS_INVALID_LENGTHS`,
/// `KVP_STATUS_NULL_ARGUMENT` (`out_pages` NULL, or an array NULL with `batch_size > 0`),
/// `KVP_STATUS_POISONED`; the out-parameters are unmodified on failure.
///
/// Buffers: `prefix_lens_host`, `seq_lens_host` hold `batch_size` `int64_t` in host memory;
/// only read during the call.
///
/// # Safety
/// `pool` a live pool or NULL; each array NULL or valid for `batch_size` elements;
/// `out_pages` writable or NULL, `out_tokens` writable or NULL.
#[no_mangle]
#[must_use]
pub unsafe extern "C" fn kvp_pool_extend_need(
    pool: *const kvp_pool,
    prefix_lens_host: *const i64,
    seq_lens_host: *const i64,
    batch_size: usize,
    out_pages: *mut u64,
    out_tokens: *mut u64,
) -> kvp_status {
    with_any_pool(pool, |pool| {
        if out_pages.is_null() {
            return fail(kvp_status::NullArgument, "out_pages is NULL");
        }
        // SAFETY (both): forwarded caller contract.
        let prefix = tri!(unsafe { input(prefix_lens_host, batch_size, "prefix_lens_host") });
        let seq = tri!(unsafe { input(seq_lens_host, batch_size, "seq_lens_host") });
        match pool.extend_need(prefix, seq) {
            Ok(plan) => {
                // SAFETY: non-NULL and writable (caller contract); `out_tokens` if non-NULL.
                unsafe {
                    *out_pages = plan.new_pages;
                    if !out_tokens.is_null() {
                        *out_tokens = plan.tokens;
                    }
                }
                kvp_status::Ok
            }
            Err(err) => status_of(Err(err)),
        }
    })
}

/// Writes to `*out_pages` how many pages `kvp_pool_alloc_decode` (or
/// `kvp_pool_alloc_decode_async`) of these lengths would take, without allocating: the
/// requests whose new token starts a page, `(seq_lens_host[i] - 1) % page_size == 0`
/// (`seq_lens_host` counts the new token, as for the allocation). The call writes
/// `batch_size` slots either way.
///
/// Same planning, checks and statuses as the allocation's (`1 <= seq_lens_host[i] <= size`,
/// else `KVP_STATUS_INVALID_LENGTHS`); changes nothing; either backend. Shortage rule as
/// for `kvp_pool_extend_need`: the allocation fails with `KVP_STATUS_OUT_OF_SLOTS` iff
/// `pages * page_size > kvp_pool_available_size` (its merge trigger, `batch_size` pages, is
/// never below `pages`). Fails with `KVP_STATUS_INVALID_LENGTHS`,
/// `KVP_STATUS_NULL_ARGUMENT`, `KVP_STATUS_POISONED`; `*out_pages` unmodified on failure.
///
/// # Safety
/// `pool` a live pool or NULL; `seq_lens_host` NULL or valid for `batch_size` elements;
/// `out_pages` writable or NULL.
#[no_mangle]
#[must_use]
pub unsafe extern "C" fn kvp_pool_decode_need(
    pool: *const kvp_pool,
    seq_lens_host: *const i64,
    batch_size: usize,
    out_pages: *mut u64,
) -> kvp_status {
    with_any_pool(pool, |pool| {
        if out_pages.is_null() {
            return fail(kvp_status::NullArgument, "out_pages is NULL");
        }
        // SAFETY: forwarded caller contract.
        let seq = tri!(unsafe { input(seq_lens_host, batch_size, "seq_lens_host") });
        match pool.decode_need(seq) {
            Ok(pages) => {
                // SAFETY: non-NULL and writable (caller contract).
                unsafe { *out_pages = pages };
                kvp_status::Ok
            }
            Err(err) => status_of(Err(err)),
        }
    })
}

/// Writes the pool's counters to `*out_stats`; unmodified on failure.
///
/// # Safety
/// `pool` must be a live pool or NULL; `out_stats` writable or NULL.
#[no_mangle]
#[must_use]
pub unsafe extern "C" fn kvp_pool_get_stats(
    pool: *const kvp_pool,
    out_stats: *mut kvp_pool_stats,
) -> kvp_status {
    with_any_pool(pool, |pool| {
        if out_stats.is_null() {
            return fail(kvp_status::NullArgument, "out_stats is NULL");
        }
        // SAFETY: non-NULL and writable (caller contract).
        unsafe { *out_stats = pool.stats().into() };
        kvp_status::Ok
    })
}

unsafe fn alloc_typed<I: SlotIndex>(
    pool: &mut Pool,
    num_tokens: usize,
    out: *mut c_void,
    out_len: usize,
) -> kvp_status {
    // SAFETY: forwarded caller contract of `kvp_pool_alloc`.
    let out = buffer!(pool, PoolOp::Alloc, unsafe {
        output_indices::<I>(out, out_len, "out")
    });
    status_of(pool.alloc(num_tokens, out))
}

/// Allocates `num_tokens` slots and writes them to `out[0 .. num_tokens)`.
///
/// A paged pool needs `num_tokens % page_size == 0` (SGLang silently rounds down) and
/// returns whole pages, each page's slots consecutive. A token pool returns the oldest
/// free slots first. `num_tokens == 0` succeeds and writes nothing.
///
/// Buffers: `out` holds `out_len` elements of the pool's index type and is only used
/// during the call. Failure (`KVP_STATUS_OUT_OF_SLOTS`, `KVP_STATUS_UNALIGNED`,
/// `KVP_STATUS_BUFFER_TOO_SMALL`, `KVP_STATUS_NULL_ARGUMENT`, ...) writes nothing to `out`
/// and leaves the pool unchanged (a shortage may merge staged frees first, as SGLang does).
///
/// # Safety
/// `pool` must be a live pool or NULL; `out` NULL or valid for `out_len` elements.
#[no_mangle]
#[must_use]
pub unsafe extern "C" fn kvp_pool_alloc(
    pool: *mut kvp_pool,
    num_tokens: usize,
    out: *mut c_void,
    out_len: usize,
) -> kvp_status {
    // SAFETY: forwarded caller contract.
    with_pool(pool, |pool| unsafe {
        by_index_type!(pool, alloc_typed(num_tokens, out, out_len))
    })
}

#[allow(clippy::too_many_arguments)]
unsafe fn alloc_extend_typed<I: SlotIndex>(
    pool: &mut Pool,
    prefix_lens: *const i64,
    seq_lens: *const i64,
    last_loc: *const c_void,
    batch_size: usize,
    extend_num_tokens: usize,
    out: *mut c_void,
    out_len: usize,
) -> kvp_status {
    // SAFETY (all four): forwarded caller contract of `kvp_pool_alloc_extend`.
    let op = PoolOp::AllocExtend;
    buffer!(
        pool,
        op,
        disjoint(
            &[span(out.cast_const().cast::<I>(), out_len, "out")],
            &[
                span(prefix_lens, batch_size, "prefix_lens"),
                span(seq_lens, batch_size, "seq_lens"),
                span(last_loc.cast::<I>(), batch_size, "last_loc"),
            ],
        )
    );
    let prefix_lens = buffer!(pool, op, unsafe {
        input(prefix_lens, batch_size, "prefix_lens")
    });
    let seq_lens = buffer!(pool, op, unsafe { input(seq_lens, batch_size, "seq_lens") });
    let last_loc = buffer!(pool, op, unsafe {
        input_indices::<I>(last_loc, batch_size, "last_loc")
    });
    let out = buffer!(pool, op, unsafe {
        output_indices::<I>(out, out_len, "out")
    });
    status_of(pool.alloc_extend(
        prefix_lens,
        seq_lens,
        last_loc,
        extend_num_tokens as u64,
        out,
    ))
}

/// Allocates KV slots for a prefill/extend batch of `batch_size` requests and writes them,
/// request after request, to `out[0 .. extend_num_tokens)`.
///
/// Request `i` has `prefix_lens[i]` tokens already cached, the last of them in slot
/// `last_loc[i]` (`-1` for an empty prefix), and grows to `seq_lens[i]` tokens. Its new
/// tokens first fill the rest of the prefix's last page (`last_loc + 1, + 2, ...`), then
/// whole new pages, then one new partial page; new pages come from the free list in batch
/// order. These are SGLang's `alloc_extend` indices, op for op. On a token pool the result
/// equals `kvp_pool_alloc(extend_num_tokens)`.
///
/// Checked before anything is written: `0 <= prefix_lens[i] <= seq_lens[i] <= size`,
/// `extend_num_tokens == sum(seq_lens - prefix_lens)`, `out_len >= extend_num_tokens`,
/// `last_loc[i]` allocated with `(last_loc[i] + 1) % page_size == prefix_lens[i] % page_size`
/// and the last slot its page has handed out (its fill point: see `kvp_pool_rewind`), no two
/// requests extending the same page, and enough free pages (exact count, computed
/// from the host lengths). Failure statuses: `KVP_STATUS_INVALID_LENGTHS`,
/// `KVP_STATUS_BUFFER_TOO_SMALL`, `KVP_STATUS_LAST_LOC_MISMATCH`, `KVP_STATUS_NOT_ALLOCATED`,
/// `KVP_STATUS_INDEX_OUT_OF_RANGE`, `KVP_STATUS_RESERVED_SLOT`, `KVP_STATUS_OUT_OF_SLOTS`,
/// `KVP_STATUS_NULL_ARGUMENT`; `out` is untouched and the pool unchanged, but for one thing: a
/// shortage (`KVP_STATUS_OUT_OF_SLOTS`) may first merge staged (`need_sort`) frees, as SGLang
/// does, so that later allocations get SGLang's pages.
///
/// Buffers: `prefix_lens`, `seq_lens` hold `batch_size` `int64_t`; `last_loc` holds
/// `batch_size` and `out` holds `out_len` elements of the pool's index type. All are only
/// used during the call.
///
/// # Safety
/// Each pointer must be NULL or valid for its stated number of elements.
#[no_mangle]
#[must_use]
pub unsafe extern "C" fn kvp_pool_alloc_extend(
    pool: *mut kvp_pool,
    prefix_lens: *const i64,
    seq_lens: *const i64,
    last_loc: *const c_void,
    batch_size: usize,
    extend_num_tokens: usize,
    out: *mut c_void,
    out_len: usize,
) -> kvp_status {
    // SAFETY: forwarded caller contract.
    with_pool(pool, |pool| unsafe {
        by_index_type!(
            pool,
            alloc_extend_typed(
                prefix_lens,
                seq_lens,
                last_loc,
                batch_size,
                extend_num_tokens,
                out,
                out_len,
            )
        )
    })
}

unsafe fn alloc_decode_typed<I: SlotIndex>(
    pool: &mut Pool,
    seq_lens: *const i64,
    last_loc: *const c_void,
    batch_size: usize,
    out: *mut c_void,
    out_len: usize,
) -> kvp_status {
    // SAFETY (all three): forwarded caller contract of `kvp_pool_alloc_decode`.
    let op = PoolOp::AllocDecode;
    buffer!(
        pool,
        op,
        disjoint(
            &[span(out.cast_const().cast::<I>(), out_len, "out")],
            &[
                span(seq_lens, batch_size, "seq_lens"),
                span(last_loc.cast::<I>(), batch_size, "last_loc"),
            ],
        )
    );
    let seq_lens = buffer!(pool, op, unsafe { input(seq_lens, batch_size, "seq_lens") });
    let last_loc = buffer!(pool, op, unsafe {
        input_indices::<I>(last_loc, batch_size, "last_loc")
    });
    let out = buffer!(pool, op, unsafe {
        output_indices::<I>(out, out_len, "out")
    });
    status_of(pool.alloc_decode(seq_lens, last_loc, out))
}

/// Allocates one slot per request for a decode step and writes them to
/// `out[0 .. batch_size)`.
///
/// `seq_lens[i]` is request `i`'s length *including* the new token; `last_loc[i]` is the
/// slot of its previous last token (`-1` when `seq_lens[i] == 1`). A request whose new token
/// starts a page (`(seq_lens[i] - 1) % page_size == 0`) gets the first slot of the next free
/// page (pages taken in batch order); the others get `last_loc[i] + 1`.
///
/// Checked before anything is written: `1 <= seq_lens[i] <= size`, `out_len >= batch_size`,
/// `last_loc[i]` allocated with `(last_loc[i] + 2) % page_size == seq_lens[i] % page_size`
/// and its page's last handed-out slot, no two requests writing into the same page, enough free pages. Failure statuses as for
/// `kvp_pool_alloc_extend`; `out` is untouched and the pool unchanged (but for the merge a
/// shortage may make first, as there).
///
/// Buffers: `seq_lens` holds `batch_size` `int64_t`; `last_loc` `batch_size` and `out`
/// `out_len` elements of the pool's index type; only used during the call.
///
/// # Safety
/// Each pointer must be NULL or valid for its stated number of elements.
#[no_mangle]
#[must_use]
pub unsafe extern "C" fn kvp_pool_alloc_decode(
    pool: *mut kvp_pool,
    seq_lens: *const i64,
    last_loc: *const c_void,
    batch_size: usize,
    out: *mut c_void,
    out_len: usize,
) -> kvp_status {
    // SAFETY: forwarded caller contract.
    with_pool(pool, |pool| unsafe {
        by_index_type!(
            pool,
            alloc_decode_typed(seq_lens, last_loc, batch_size, out, out_len)
        )
    })
}

unsafe fn free_indices_typed<I: SlotIndex>(
    pool: &mut Pool,
    indices: *const c_void,
    len: usize,
) -> kvp_status {
    // SAFETY: forwarded caller contract of `kvp_pool_free_indices`.
    let indices = buffer!(pool, PoolOp::Free, unsafe {
        input_indices::<I>(indices, len, "indices")
    });
    status_of(pool.free(indices))
}

/// Frees slots by index (SGLang's `free`). Token pool: each index is one slot, returned to
/// the tail of the free list in the given order. Paged pool: each index frees its whole
/// page; the distinct pages return to the front of the free list in ascending order (or are
/// staged, with `need_sort`). Inside a free group the pages are held until the group ends.
///
/// Every index must be an allocated slot and appear once; inside a free group a page may be
/// freed by only one call. On a paged pool an index is checked through its page: the page
/// must be allocated, and a slot of it that was never handed out (past its fill point)
/// still frees the whole page, as in SGLang. Failure (`KVP_STATUS_DOUBLE_FREE`,
/// `KVP_STATUS_INDEX_OUT_OF_RANGE`, `KVP_STATUS_RESERVED_SLOT`, `KVP_STATUS_NULL_ARGUMENT`;
/// `KVP_STATUS_INVALID_STATE` for a page a live decode reservation holds) frees nothing; the
/// message names the offending element. `len == 0` is a no-op.
///
/// Buffers: `indices` holds `len` elements of the pool's index type; only used during the
/// call.
///
/// # Safety
/// `indices` must be NULL or valid for `len` elements.
#[no_mangle]
#[must_use]
pub unsafe extern "C" fn kvp_pool_free_indices(
    pool: *mut kvp_pool,
    indices: *const c_void,
    len: usize,
) -> kvp_status {
    // SAFETY: forwarded caller contract.
    with_pool(pool, |pool| unsafe {
        by_index_type!(pool, free_indices_typed(indices, len))
    })
}

unsafe fn free_pages_typed<I: SlotIndex>(
    pool: &mut Pool,
    page_ids: *const c_void,
    len: usize,
) -> kvp_status {
    // SAFETY: forwarded caller contract of `kvp_pool_free_pages`.
    let page_ids = buffer!(pool, PoolOp::Free, unsafe {
        input_indices::<I>(page_ids, len, "page_ids")
    });
    status_of(pool.free_pages(page_ids))
}

/// Frees exactly these pages (slot index / `page_size`), in the given order (SGLang's
/// `free_page_ids`). On a token pool a page is a slot. Each page must be allocated and
/// listed once; failure frees nothing. `len == 0` is a no-op.
///
/// Buffers: `page_ids` holds `len` elements of the pool's index type; only used during the
/// call.
///
/// # Safety
/// `page_ids` must be NULL or valid for `len` elements.
#[no_mangle]
#[must_use]
pub unsafe extern "C" fn kvp_pool_free_pages(
    pool: *mut kvp_pool,
    page_ids: *const c_void,
    len: usize,
) -> kvp_status {
    // SAFETY: forwarded caller contract.
    with_pool(pool, |pool| unsafe {
        by_index_type!(pool, free_pages_typed(page_ids, len))
    })
}

unsafe fn free_segment_typed<I: SlotIndex>(
    pool: &mut Pool,
    row: *const c_void,
    row_len: usize,
    start_pos: usize,
    len: usize,
) -> kvp_status {
    // SAFETY: forwarded caller contract of `kvp_pool_free_segment`.
    let row = buffer!(pool, PoolOp::Free, unsafe {
        input_indices::<I>(row, row_len, "row")
    });
    status_of(pool.free_segment(row, start_pos, len))
}

/// Frees the pages holding `row[start_pos .. start_pos + len)`, where `row` is one
/// request's slot row (its `req_to_token` row) — SGLang 0.5.23's `free_segment`, which
/// needs no de-duplication. A paged pool needs `start_pos % page_size == 0` and each page's
/// slots consecutive in the row; a segment ending inside a page frees that whole page.
///
/// Failure (`KVP_STATUS_UNALIGNED`, `KVP_STATUS_BUFFER_TOO_SMALL` when the segment passes
/// `row_len`, `KVP_STATUS_INVALID_ARGUMENT` for a non-contiguous page, `KVP_STATUS_DOUBLE_FREE`,
/// ...) frees nothing. `len == 0` is a no-op at any `start_pos <= row_len`, aligned or not
/// (SGLang returns on an empty segment before its alignment check).
///
/// Buffers: `row` holds `row_len` elements of the pool's index type; only used during the
/// call.
///
/// # Safety
/// `row` must be NULL or valid for `row_len` elements.
#[no_mangle]
#[must_use]
pub unsafe extern "C" fn kvp_pool_free_segment(
    pool: *mut kvp_pool,
    row: *const c_void,
    row_len: usize,
    start_pos: usize,
    len: usize,
) -> kvp_status {
    // SAFETY: forwarded caller contract.
    with_pool(pool, |pool| unsafe {
        by_index_type!(pool, free_segment_typed(row, row_len, start_pos, len))
    })
}

unsafe fn rewind_typed<I: SlotIndex>(
    pool: &mut Pool,
    last_kept: *const c_void,
    len: usize,
) -> kvp_status {
    // SAFETY: forwarded caller contract of `kvp_pool_rewind`.
    let last_kept = buffer!(pool, PoolOp::Rewind, unsafe {
        input_indices::<I>(last_kept, len, "last_kept")
    });
    status_of(pool.rewind(last_kept))
}

/// Moves pages' fill points back, for speculative decoding that rejects draft tokens.
///
/// Every allocated page remembers how many of its slots it has handed out (its *fill
/// point*); `kvp_pool_alloc_extend` / `kvp_pool_alloc_decode` accept a `last_loc` only at
/// that point, so a stale `last_loc` can never hand a slot out twice. After a verify step
/// keeps a request's tokens up to slot `last_kept[i]`, this call makes that slot its page's
/// last handed-out slot: the next allocation continuing from `last_kept[i]` gets the slots
/// after it again. Pages that hold only rejected tokens are freed as usual
/// (`kvp_pool_free_pages` / `kvp_pool_free_segment`). On a token pool (one slot a page) a
/// valid rewind changes nothing. Engines that keep rejected slots and overwrite them (SGLang's
/// spec v2, which continues from the allocated length) need no rewind.
///
/// Checked: each `last_kept[i]` is an allocated slot (`KVP_STATUS_NOT_ALLOCATED`,
/// `KVP_STATUS_INDEX_OUT_OF_RANGE`, `KVP_STATUS_RESERVED_SLOT`) at or before its page's fill
/// point, and no page is named twice (`KVP_STATUS_LAST_LOC_MISMATCH`). Failure changes
/// nothing. `len == 0` is a no-op. Allowed inside a free group.
///
/// Buffers: `last_kept` holds `len` elements of the pool's index type; only used during the
/// call.
///
/// # Safety
/// `last_kept` must be NULL or valid for `len` elements.
#[no_mangle]
#[must_use]
pub unsafe extern "C" fn kvp_pool_rewind(
    pool: *mut kvp_pool,
    last_kept: *const c_void,
    len: usize,
) -> kvp_status {
    // SAFETY: forwarded caller contract.
    with_pool(pool, |pool| unsafe {
        by_index_type!(pool, rewind_typed(last_kept, len))
    })
}

/// Opens a free group: frees until `kvp_pool_free_group_end` are validated at once but
/// return to the pool together at the end (SGLang's `free_group_begin`, used to batch a
/// scheduler step's frees). Groups do not nest: a second begin fails with
/// `KVP_STATUS_INVALID_STATE`. Both backends (a device pool's group ends with
/// `kvp_pool_free_group_end_async`); enqueues nothing.
///
/// # Safety
/// `pool` must be a live pool or NULL.
#[no_mangle]
#[must_use]
pub unsafe extern "C" fn kvp_pool_free_group_begin(pool: *mut kvp_pool) -> kvp_status {
    with_any_pool(pool, |pool| status_of(pool.free_group_begin()))
}

/// Closes the free group and returns its pages to the pool. Paged pool: first the pages
/// freed by index (one ascending block), then those freed by page id or segment, in call
/// order. Token pool: every freed slot, in call order. Fails with
/// `KVP_STATUS_INVALID_STATE` if no group is open.
///
/// # Safety
/// `pool` must be a live pool or NULL.
#[no_mangle]
#[must_use]
pub unsafe extern "C" fn kvp_pool_free_group_end(pool: *mut kvp_pool) -> kvp_status {
    with_pool(pool, |pool| status_of(pool.free_group_end()))
}

/// Merges staged frees into the free list, sorted ascending (SGLang's
/// `merge_and_sort_free`). A no-op without `need_sort` or when nothing is staged;
/// allocations call it themselves when they run short.
///
/// # Safety
/// `pool` must be a live pool or NULL.
#[no_mangle]
#[must_use]
pub unsafe extern "C" fn kvp_pool_merge_and_sort_free(pool: *mut kvp_pool) -> kvp_status {
    with_pool(pool, |pool| {
        pool.merge_and_sort_free();
        kvp_status::Ok
    })
}

/// Frees every slot: the free list becomes pages `1 .. num_pages` in order; staged frees
/// and an open free group are dropped. Counters keep counting.
///
/// # Safety
/// `pool` must be a live pool or NULL.
#[no_mangle]
#[must_use]
pub unsafe extern "C" fn kvp_pool_clear(pool: *mut kvp_pool) -> kvp_status {
    with_pool(pool, |pool| {
        pool.clear();
        kvp_status::Ok
    })
}
