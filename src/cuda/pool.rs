//! [`DevicePool`]: a pool whose free list, page states and index math live on a CUDA device.
//!
//! The host validates what it can see (lengths, counts, output sizes, shortage) with the
//! same planning code as the host backend, then enqueues one kernel (two when a shortage
//! triggers SGLang's merge of staged frees; three for a paged free of more than 4,096
//! indices) on the caller's stream and returns. It never
//! synchronizes and never reads device memory: what only the device can check (the indices
//! themselves) the kernels check, and they report through host-mapped memory.

use std::cell::Cell;
use std::ffi::c_void;
use std::mem::ManuallyDrop;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use cudarc::driver::sys::{CUdeviceptr, CUfunction, CUstream};
use parking_lot::Mutex;

use super::counts::{Accounting, Counts, Dest, Step};
use super::driver::PrimaryContext;
use super::kernels::{self, Kernels};
use super::layout::{
    arg, snapshot_bytes, snapshot_words, Arrays, Call, DeviceFault, DeviceOp, HostRecord, View,
    CALL_IN_GROUP, CALL_MIRROR, CALL_REPLAYABLE, CLAIM_CHUNKS, FREE_PAGE_IDS, FREE_SEGMENT,
    FREE_SLOTS, NOT_POW2, NO_HEAD_HINT, TAG_LIMIT,
};
use super::memory::{DeviceMemory, MappedHost};
use super::release::{reap_ready, release_after, LastUse};
use super::stream_order::{StreamOrderCheck, DEBUG_ALL, DEBUG_REPLAY_CALLS, DEBUG_STREAM_ORDER};
use crate::pool::config::Layout;
use crate::pool::error::fail;
use crate::pool::{plan, BackendKind, ErrorKind, PoolConfig, PoolError, PoolInfo, PoolStats};

#[path = "abi.rs"]
mod abi;
#[path = "reservation.rs"]
mod reservation;
#[path = "rows.rs"]
mod rows;
pub use reservation::DeviceReservation;
pub use rows::DeviceTable;

static NEXT_POOL_ID: AtomicU64 = AtomicU64::new(1 << 48);

/// Threads per block of the multi-block kernels (`kvp::EXTEND_BLOCK`, `__launch_bounds__`).
const BLOCK: u32 = 256;
/// Threads of `kvp_extend_few_blocks_128_*` and `kvp_extend_one_blocks_128_*`
/// (`kvp::FEW_GRID_BLOCK`), on `few_shape`'s blocks of at most `SHORT_SPAN_TOKENS` tokens.
pub(super) const FEW_GRID_BLOCK: u32 = 128;
/// New pages an extend block stages in shared memory (`kvp::STAGE_CAP`).
const STAGE_CAP: u64 = 4096;
/// Threads of the single-block free kernels (`kvp::FREE_BLOCK`).
const FREE_BLOCK: u32 = 1024;
/// Pages a paged free by index sorts in shared memory (`kvp::SORT_CAP`): a free of at most
/// this many indices (so at most this many distinct pages) is one kernel; larger ones are
/// two (claim and count per chunk of the page map, release chunk by chunk).
const SORT_CAP: u64 = 4096;
/// The kernels that decide a whole call in every block, a request a thread. A decode of up
/// to `DECODE_BATCH` requests runs on `kvp_decode_{N}_*`, one block of the fewest threads in
/// `DECODE_THREADS` that hold it (a one-block call's idle threads cost time). An extend of up
/// to `WARP_BATCH` requests runs on `kvp_extend_few_*`, where one warp decides and the block
/// writes: two warps (`FEW_THREADS`) for up to `WARP_TOKENS` tokens (the second writing its
/// slots while the first decides: 0.91-0.94x the time of one warp doing both,
/// BENCHMARKS.md, twenty-second session), four for up to `FOUR_WARP_TOKENS` (fewer warps
/// loading and scanning the same requests: 65-256 tokens 0.88-0.90x their time on 256
/// threads, where two warps at four tokens a lane took 1.01x at 65-128: twenty-third
/// session), 256 threads for up to `SPAN_TOKENS` (since the writers plan their tokens before
/// the verdict, 65-256 tokens took 0.63-0.91x the time they had taken on two warps writing
/// after it: BENCHMARKS.md, nineteenth session), else several blocks of 256 of
/// `SHORT_SPAN_TOKENS` or `SPAN_TOKENS` tokens each (`span_grid`; two blocks of 512 tokens
/// take 0.80-0.90x the time of one block of 1,024: BENCHMARKS.md, sixteenth session;
/// plain calls on `few_shape`'s blocks and threads; `kvp_extend_few_spread_*` on
/// `span_grid`'s when the requests outnumber those blocks, see `ExtendKernel::FewSpread`). A
/// plain extend of up to `PAIR_BATCH` requests and `SPAN_TOKENS` tokens runs on the same
/// one-block shapes with two requests a lane (`kvp_extend_pairs_*`: 33-64 requests of 1-8
/// tokens 0.90-0.98x the time of the request-a-thread kernels below, BENCHMARKS.md,
/// thirty-sixth session). A larger
/// extend runs a request a thread: on two warps (`kvp_extend_block64_*`) for up to 64
/// requests and `BLOCK64_TOKENS` tokens, else blocks of 256 threads (`kvp_extend_block_*`)
/// for up to `BLOCK` requests: one block for up to `BLOCK_TOKENS` tokens, more for a longer
/// extend (`kvp_extend_blocks_*`). Two tokens a thread at most in one block (with the
/// threads planning their tokens before the verdict, two a thread had taken 0.62-0.88x the
/// time of up to four on the general loop: BENCHMARKS.md, twentieth session; from the
/// thirty-fifth, one a thread: 257-512 tokens took 0.85-0.89x the time on blocks of
/// `SHORT_SPAN_TOKENS` that they took at two a thread on 256 threads, by row 0.80-0.90x, and
/// 65-128 tokens of 33-64 requests 0.85-0.90x on 256 threads that they took at two a thread
/// on two warps, by row 0.85-0.89x; up to 64 tokens two warps stay faster, 0.95-0.97x the
/// time on 256 threads; since the fifty-third, whose block looks each token's request up
/// instead of searching for it, two a thread again, plain: `BLOCK_TOKENS`,
/// `BLOCK_ROW_TOKENS`). By request row the extend_few shapes run on the request-a-thread
/// kernels of the same shape (`kvp_extend_{warp,block64,block,blocks}_rows_*`; up to 64
/// tokens on one warp, else one block of 256 threads).
/// A decode of more than `DECODE_BATCH` and at most 4,096 requests, also by row, runs on one
/// thread block cluster (`DECODE_CLUSTERS`, sm_90) where the device has them: 0.45-0.52x the
/// ticketed kernel's time at 4,096 requests, by row 0.28-0.32x that of its three kernels
/// (BENCHMARKS.md, twenty-eighth session). Larger batches go to the ticketed multi-block
/// kernel (for extends, one block of 256 threads for up to 4,096 tokens, or deciding blocks
/// of four requests a thread, were both measured slower than several blocks with a ticket:
/// BENCHMARKS.md), except extends of up to 2,048 requests: see `WIDE_BATCHES`.
pub(super) const DECODE_THREADS: [u32; 6] = [32, 64, 128, 256, 512, 1024];
/// The largest page size of a device pool: the kernels count slots within a page in 32
/// bits, with room to step past the page's end (`kvp_free_segment_*` steps a page 128
/// slots at a time).
const MAX_DEVICE_PAGE_SIZE: u32 = 1 << 31;
/// The one-block `kvp_extend_few_{N}_*` kernels, by threads (`few_slot`).
pub(super) const FEW_THREADS: [u32; 3] = [64, 128, BLOCK];
/// The several-block `kvp_extend_{few,one}_blocks_{N}_*` kernels, by threads
/// (`few_grid_slot`; `few_shape` picks them).
pub(super) const FEW_GRID_THREADS: [u32; 2] = [FEW_GRID_BLOCK, BLOCK];
/// The one-block extend_few shapes are also built for at most this many requests
/// (`kvp_extend_few{B}_{N}_*`, `bound_slot`): scans and token searches of log2(B) steps, not
/// five. A one-block call of 2-8 requests runs on the kernel of the smallest bound that holds
/// it (`ExtendKernel::FewUpTo`).
pub(super) const FEW_BOUNDS: [u32; 3] = [2, 4, 8];
/// The most requests of `kvp_extend_pairs_*` (`kvp::PAIR_BATCH`): a plain extend of
/// `WARP_BATCH` + 1 to this many requests and at most `SPAN_TOKENS` tokens runs on the
/// extend_few shapes with two requests a lane (`ExtendKernel::Pairs`), not a request a thread.
pub(super) const PAIR_BATCH: usize = 64;
const DECODE_BATCH: usize = 1024;
/// Threads per block of the cluster decode kernels (`kvp::CLUSTER_BLOCK`).
const CLUSTER_BLOCK: u32 = 512;
/// Blocks per cluster of `kvp_decode_cluster{N}_*`, in the order of `Typed::decode_cluster`:
/// a decode of more than `DECODE_BATCH` and at most `N * CLUSTER_BLOCK` requests runs on
/// one cluster of the fewest blocks that hold it, where the device runs clusters (sm_90;
/// `DevicePool::decodes_on_clusters`), else on the ticketed kernel.
pub(super) const DECODE_CLUSTERS: [u32; 2] = [4, 8];
const WARP_BATCH: usize = 32;
/// Requests a block of the deciding blocks for extends of more than `BLOCK` requests holds
/// (`kvp_extend_blocks{N}_rows_*`, in the order of `Typed::extend_blocks_wide_rows`): an
/// extend runs on the blocks of the fewest that hold it — 512 or 1,024 threads a request
/// each, 1,024 of two requests each (`wide_threads`; by row only: not in
/// `WIDE_PLAIN_BATCHES`) —, at most one block an SM (`DevicePool::multiprocessors`), each
/// deciding the whole call as `kvp_extend_blocks_*`'s do; a shape whose shared memory the
/// device does not give a block is left out. Against the ticketed kernel that served them before,
/// 257-512 requests take 0.71-0.81x its time, 513-1,024 0.82-0.89x; up to `TARGET_BLOCKS`
/// blocks took 1.08-1.15x the time of one an SM at 257-512 requests and 1.54-1.61x at
/// 768-1,024, and two or four requests a thread on 256 threads 1.01-1.41x (BENCHMARKS.md,
/// thirtieth session).
pub(super) const WIDE_BATCHES: [u32; 3] = [512, 1024, 2048];
/// The first of `WIDE_BATCHES`, which serve plain extends too (`kvp_extend_blocks{N}_*`;
/// the others by row only, `kvp_extend_blocks{N}_rows_*`). Blocks of 1,024 threads of two
/// requests each (spilling 56-120 bytes a thread) took 1.00-1.09x the ticketed kernel's
/// time at 1,025-2,048 requests, so plain extends of that size stay on the ticketed kernel
/// and the module has no plain kernel of that shape; by row they took 0.48-0.59x the time of
/// its three kernels (run s30-10, BENCHMARKS.md).
pub(super) const WIDE_PLAIN_BATCHES: [u32; 2] = [512, 1024];

/// Threads of the wide deciding blocks that hold `batch` requests (one of `WIDE_BATCHES`).
fn wide_threads(batch: u32) -> u32 {
    batch.min(1024)
}

/// The most tokens `kvp_extend_few_64_*` takes (two a writer lane).
const WARP_TOKENS: u64 = 64;
/// The most tokens `kvp_extend_few_128_*` takes (three a writer lane).
const FOUR_WARP_TOKENS: u64 = 256;
/// The most tokens one block of `BLOCK` threads takes (`ExtendKernel::Block`), two a thread:
/// 65-256 requests of 257-512 tokens 0.92-0.95x the time they took on several blocks (run
/// s53-6, H100), since the block looks its tokens' requests up from where the requests start.
const BLOCK_TOKENS: u64 = 512;
/// By row, one a thread (`kvp_extend_block_short_rows_*`): at two a thread, 257-512 tokens
/// took 0.96-1.00x the several-block kernel's time, and the second token's lookup 1.02x at up
/// to 256 tokens (run s53-6).
const BLOCK_ROW_TOKENS: u64 = 256;
const BLOCK64_TOKENS: u64 = 64;
/// The most tokens a block of the several-block extend kernels takes (`kvp::SPAN_TOKENS`;
/// past `TARGET_BLOCKS` blocks, more: see `span_grid`).
const SPAN_TOKENS: u64 = 512;
/// The tokens a block of the several-block extend kernels takes while that needs at most one
/// block an SM (`span_grid`).
const SHORT_SPAN_TOKENS: u64 = 256;
/// The tokens a block of `kvp_extend_{few,one}_blocks_128_*` takes while that needs at most
/// one block an SM (`few_shape`).
const FEW_SPAN_TOKENS: u64 = 128;

/// The allocation kernel that serves a batch (`extend_shape`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum ExtendKernel {
    /// Two warps (`kvp_extend_block64_*`).
    Block64,
    /// One block (`kvp_extend_block_*`).
    Block,
    /// Several blocks that each decide the whole call (`kvp_extend_blocks_*`).
    Blocks,
    /// The same on blocks that hold this many requests, one of `WIDE_BATCHES`
    /// (`kvp_extend_blocks{N}_*`, one of `WIDE_PLAIN_BATCHES`; by row
    /// `kvp_extend_blocks{N}_rows_*`; where the device gives a block its shared memory),
    /// launched with dynamic shared memory.
    BlocksWide(u32),
    /// Many blocks (`kvp_extend_*`).
    Grid,
    /// A decode in one block of this many threads, one of `DECODE_THREADS`
    /// (`kvp_decode_{N}_*`).
    Decode(u32),
    /// `Decode(32)` for exactly one request (`kvp_decode_one_*`: the batch a constant in the
    /// kernel; 0.96-0.97x the time, BENCHMARKS.md, thirty-fourth session). By row,
    /// `kvp_decode_one_rows_*` (0.95x).
    DecodeOne,
    /// A decode on one cluster of this many blocks, one of `DECODE_CLUSTERS`
    /// (`kvp_decode_cluster{N}_*`): the blocks decide the call together through their
    /// shared memory, where the ticketed kernel's blocks meet in global memory.
    DecodeCluster(u32),
    /// An extend of at most `WARP_BATCH` requests in one block of this many threads, one of
    /// `FEW_THREADS` (`kvp_extend_few_{N}_*`); by row, the rows kernel of as many threads
    /// (`kvp_extend_{warp,block64,block}_rows_*`).
    Few(u32),
    /// The same on several blocks of this many threads, one of `FEW_GRID_THREADS`
    /// (`kvp_extend_few_blocks_{N}_*`); by row, `Blocks`'s.
    FewBlocks(u32),
    /// `Few` for exactly one request (`kvp_extend_one_{N}_*`), and `FewBlocks`
    /// (`kvp_extend_one_blocks_{N}_*`): the batch a constant in the kernel, which carries no path
    /// of several requests (one request of up to 64 tokens 0.87x the time, 128-512 tokens
    /// 0.94-0.98x, more 0.99-1.00x: BENCHMARKS.md, thirty-fourth session). By row, the
    /// rows kernels of `Few`'s and `FewBlocks`' shapes built for one
    /// (`kvp_extend_one_{warp,block,blocks}_rows_*`: 0.90-0.95x up to 512 tokens).
    One(u32),
    OneBlocks(u32),
    /// `Few(threads)` for at most `bound` requests, one of `FEW_BOUNDS`
    /// (`kvp_extend_few{B}_{N}_*`): the requests' scans and the tokens' searches of log2(B)
    /// steps (2-8 requests of 16-64 tokens 0.86-0.98x the time; several blocks built so took
    /// 0.97-1.02x and are not: BENCHMARKS.md, thirty-fifth session). By row, `Few`'s rows
    /// kernels.
    FewUpTo(u32, u32),
    /// `Few(threads)` for `WARP_BATCH` + 1 to `PAIR_BATCH` requests, two a lane
    /// (`kvp_extend_pairs_{N}_*`): one warp decides, the others stage and write, where a
    /// request a thread (`Block64`, `Block`, `Blocks`) scans the block and fills a shared
    /// table between barriers (33-64 requests of 1-8 tokens 0.90-0.98x their time:
    /// BENCHMARKS.md, thirty-sixth session). Plain only: by row these batches keep the
    /// request-a-thread kernels (`DeviceShapes::by_row`).
    Pairs(u32),
    /// `FewBlocks` for more requests than blocks (`kvp_extend_few_spread_*`): a block whose
    /// tokens span several requests plans them before the verdict and stores their slots
    /// while warp 0 decides (16-32 requests of 64 tokens 0.89-0.90x `FewBlocks`'s time;
    /// calls of at most a request a block stay on `FewBlocks`, where the planning path,
    /// even unused, took 1.03-1.06x: BENCHMARKS.md, twenty-seventh session). On `span_grid`'s
    /// blocks, for plain calls only past as many requests as `few_shape`'s blocks (5-32
    /// requests of 128 tokens on those took 0.82-0.84x the spread kernel's time, run s64-3,
    /// H100). By row, `Blocks`'s.
    FewSpread,
}

impl ExtendKernel {
    /// Its plain kernel (`BlocksWide` of one of `WIDE_PLAIN_BATCHES`: `DevicePool::shapes`
    /// offers no other).
    pub(super) fn function(self, typed: &crate::cuda::kernels::Typed) -> CUfunction {
        match self {
            Self::Block64 => typed.extend_block64,
            Self::Block => typed.extend_block,
            Self::Blocks => typed.extend_blocks,
            Self::BlocksWide(batch) => typed.extend_blocks_wide[wide_slot(batch)],
            Self::Grid => typed.extend,
            Self::Decode(threads) => typed.decode[decode_slot(threads)],
            Self::DecodeOne => typed.decode_one,
            Self::DecodeCluster(blocks) => typed.decode_cluster[cluster_slot(blocks)],
            Self::Few(threads) => typed.extend_few[few_slot(threads)],
            Self::FewBlocks(threads) => typed.extend_few_blocks[few_grid_slot(threads)],
            Self::FewSpread => typed.extend_few_spread,
            Self::One(threads) => typed.extend_one[few_slot(threads)],
            Self::OneBlocks(threads) => typed.extend_one_blocks[few_grid_slot(threads)],
            Self::FewUpTo(bound, threads) => {
                typed.extend_few_bounded[bound_slot(bound)][few_slot(threads)]
            }
            Self::Pairs(threads) => typed.extend_pairs[few_slot(threads)],
        }
    }

    /// The dynamic shared memory its plain kernel (`function`'s) is launched with, in bytes.
    pub(super) fn shared_bytes(self, kernels: &Kernels) -> u32 {
        match self {
            Self::BlocksWide(batch) => kernels.wide_shared[wide_slot(batch)],
            _ => 0,
        }
    }

    /// The same for its rows kernel (the one kernel of `DevicePool::rows_alloc`).
    pub(super) fn rows_shared_bytes(self, kernels: &Kernels) -> u32 {
        match self {
            Self::BlocksWide(batch) => kernels.wide_rows_shared[wide_slot(batch)],
            _ => 0,
        }
    }
}

/// Where the kernel whose blocks hold `batch` requests (one of `WIDE_BATCHES`) sits in
/// `Typed::extend_blocks_wide_rows` and, of `WIDE_PLAIN_BATCHES`, `Typed::extend_blocks_wide`
/// (the plain batches come first in both).
pub(super) fn wide_slot(batch: u32) -> usize {
    match batch {
        512 => 0,
        1024 => 1,
        _ => 2,
    }
}

/// The grid of the several-block extend kernels (`kvp_extend_blocks_*`,
/// `kvp_extend_few_{blocks,spread}_*`) for `tokens` tokens: blocks of `SHORT_SPAN_TOKENS`
/// while that takes at most one block an SM, else of `SPAN_TOKENS`, at most `TARGET_BLOCKS`.
/// Every block decides the whole call, so a block's time is the call's; with fewer tokens
/// each, its planning, staging and writes are shorter. Against blocks of `SPAN_TOKENS`
/// (run s33-8, BENCHMARKS.md): 2-64 requests of 512 tokens 0.93-0.98x the time, 33-256 of 16
/// tokens 0.84-0.89x, 1-8 of 2,048-8,192 tokens 0.94-1.00x, by row alike. Past one block an
/// SM it stopped paying (run s33-7: 128 requests of 512 tokens on 256 blocks, 1.01-1.02x).
pub(super) fn span_grid(tokens: u64, multiprocessors: u32) -> u32 {
    blocks_an_sm(tokens, SHORT_SPAN_TOKENS, multiprocessors)
        .unwrap_or_else(|| tokens.div_ceil(SPAN_TOKENS).min(TARGET_BLOCKS) as u32)
}

/// The grid and threads of `kvp_extend_{few,one}_blocks_{N}_*` (plain extends of at most a
/// request a block) for `tokens` tokens: blocks of `FEW_SPAN_TOKENS` on `FEW_GRID_BLOCK`
/// threads while that takes at most one block an SM, then `span_grid`'s blocks, on
/// `FEW_GRID_BLOCK` threads while they take `SHORT_SPAN_TOKENS` (two tokens a thread), else
/// on `BLOCK`. Against 256 threads on `span_grid`'s blocks (runs s63-1 and s63-2, H200): 2-16
/// requests of 512 tokens 0.94-0.96x the time, 32 0.97-0.98x, 1-8 of 2,048 0.95-0.98x;
/// 256-token blocks on 128 threads 1.00-1.04x (run s63-1) and 1.00x at 2 x 16,384 tokens (run
/// s64-1, H100); 512-token blocks on 128 threads (four tokens a thread) 0.98-1.14x (run s64-1:
/// 8 x 8,192 tokens at page size 1 1.14x), hence `BLOCK` there (run s64-2, H100: 3-32
/// requests of 8,192-16,384 tokens 0.99-1.02x the 256-thread kernels' time before 128
/// threads came in). By row those calls keep `span_grid` and `BLOCK` (128-token blocks of
/// `kvp_extend_blocks_rows_*`: 1.00-1.03x).
fn few_shape(tokens: u64, multiprocessors: u32) -> (u32, u32) {
    if let Some(blocks) = blocks_an_sm(tokens, FEW_SPAN_TOKENS, multiprocessors) {
        return (blocks, FEW_GRID_BLOCK);
    }
    let grid = span_grid(tokens, multiprocessors);
    if tokens <= u64::from(grid) * SHORT_SPAN_TOKENS {
        (grid, FEW_GRID_BLOCK)
    } else {
        (grid, BLOCK)
    }
}

/// Blocks of `span` tokens for `tokens` tokens (at least one, for a call of none) if that
/// takes at most one block an SM (a device that reports no SMs counts as one), else none.
fn blocks_an_sm(tokens: u64, span: u64, multiprocessors: u32) -> Option<u32> {
    let blocks = tokens.div_ceil(span).max(1);
    (blocks <= u64::from(multiprocessors.max(1))).then_some(blocks as u32)
}

/// The threads of the one-block extend_few shape for `tokens` tokens (at most
/// `SPAN_TOKENS`): two warps up to `WARP_TOKENS`, four up to `FOUR_WARP_TOKENS`, else
/// `BLOCK`.
fn few_threads(tokens: u64) -> u32 {
    if tokens <= WARP_TOKENS {
        64
    } else if tokens <= FOUR_WARP_TOKENS {
        128
    } else {
        BLOCK
    }
}

/// Where the kernel of `threads` threads (one of `FEW_THREADS`) sits in `Typed::extend_few`.
pub(super) fn few_slot(threads: u32) -> usize {
    match threads {
        64 => 0,
        128 => 1,
        _ => 2,
    }
}

/// Where the several-block kernels of `threads` threads (one of `FEW_GRID_THREADS`) sit in
/// `Typed::extend_few_blocks` and `Typed::extend_one_blocks`.
pub(super) fn few_grid_slot(threads: u32) -> usize {
    match threads {
        FEW_GRID_BLOCK => 0,
        _ => 1,
    }
}

/// Where the kernels for at most `bound` requests (one of `FEW_BOUNDS`) sit in
/// `Typed::extend_few_bounded`.
pub(super) fn bound_slot(bound: u32) -> usize {
    match bound {
        2 => 0,
        4 => 1,
        _ => 2,
    }
}

/// Where the cluster decode kernel of `blocks` blocks (one of `DECODE_CLUSTERS`) sits in
/// `Typed::decode_cluster`.
pub(super) fn cluster_slot(blocks: u32) -> usize {
    match blocks {
        4 => 0,
        _ => 1,
    }
}

/// Where the decode kernel of `threads` threads (one of `DECODE_THREADS`) sits in
/// `Typed::decode` and `Typed::decode_rows`.
pub(super) fn decode_slot(threads: u32) -> usize {
    match threads {
        32 => 0,
        64 => 1,
        128 => 2,
        256 => 3,
        512 => 4,
        _ => 5,
    }
}

/// Blocks an `alloc` spreads over at most.
const ALLOC_MAX_BLOCKS: u64 = 1024;
/// An extend aims at about this many blocks (two per SM of an H100/H200); frees use at most
/// this many blocks of `FREE_BLOCK` threads.
const TARGET_BLOCKS: u64 = 264;

/// Snapshot buffers of a pool, kept for reuse so that backups need no `cuMemAlloc` (which
/// may synchronize) once warm. Freed when the pool and all its snapshots are gone, after the
/// pool's last kernel (a backup or restore may still be queued): see [`release_after`].
#[derive(Debug)]
struct SnapshotBuffers {
    context: Arc<PrimaryContext>,
    last_use: Arc<LastUse>,
    spare: Mutex<Vec<DeviceMemory>>,
}

impl Drop for SnapshotBuffers {
    fn drop(&mut self) {
        let spare = std::mem::take(&mut *self.spare.lock());
        if !spare.is_empty() {
            release_after(Arc::clone(&self.last_use), Arc::clone(&self.context), spare);
        }
    }
}

/// What a released pool frees once its last kernel has run (see [`release_after`]): the
/// fields are only held, to be dropped (freed) by the release thread.
#[allow(dead_code)]
struct Owned {
    kernels: Kernels,
    memory: DeviceMemory,
    record: MappedHost,
    digest_scratch: DeviceMemory,
    stream_order: Option<DeviceMemory>,
    rows_scratch: Vec<DeviceMemory>,
}

/// Byte offsets of a device pool's state in its device block (see
/// [`DevicePool::debug_layout`]). The current cursor is eight `u32`: head, free length,
/// staged length, group lengths (by index, by order), padding; the ring holds `num_pages`
/// page ids (the free list is `free length` of them from `head`, wrapping), `staged` the
/// staged pages, `state` one word per page (`word & 7`: 0 reserved, 1 free, 2 staged,
/// 3 allocated, 4/5 freed in an open group).
#[derive(Clone, Copy, Debug)]
pub struct DebugLayout {
    /// Device address of the block.
    pub block: u64,
    /// Its size in bytes.
    pub block_bytes: usize,
    /// Offset of the cursor the next call reads (complete once the stream is idle).
    pub cursor: usize,
    /// Offset of the ring.
    pub ring: usize,
    /// Offset of the staged pages.
    pub staged: usize,
    /// Offset of the page words.
    pub state: usize,
    /// Offset of the fill words (`u64` per page; paged pools only): the low half is how many
    /// slots of an allocated page were handed out, the high half the tag of the call that set it.
    pub fill: usize,
    /// Pages of the pool.
    pub num_pages: u32,
    /// The ring position the next call's kernels are told the cursor's head is at, if the
    /// host knows it (once the stream is idle, the cursor's head itself).
    pub head_hint: Option<u32>,
}

/// What a test makes the calls' head hints (`DevicePool::debug_skew_head_hint`).
#[doc(hidden)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HintSkew {
    /// The host's hint, as the library gives it.
    AsIs,
    /// The host's hint moved on by this many ring positions: a wrong one.
    By(u32),
    /// No hint.
    Absent,
}

/// A device pool's saved state: a device buffer filled on the stream by
/// [`DevicePool::backup_state`].
#[derive(Debug)]
pub struct DeviceSnapshot {
    pool_id: u64,
    buffer: Option<DeviceMemory>,
    counts: Counts,
    exact: bool,
    /// Where the free list ended in the ring (`Accounting::tail`), if the host knew.
    tail: Option<u64>,
    buffers: Arc<SnapshotBuffers>,
}

impl Drop for DeviceSnapshot {
    fn drop(&mut self) {
        // Back to the pool's spares: the buffer may still be read by a restore in flight,
        // and the next backup that reuses it is ordered after that on the pool's stream.
        if let Some(buffer) = self.buffer.take() {
            self.buffers.spare.lock().push(buffer);
        }
    }
}

/// A KV-cache slot allocator on a CUDA device: SGLang's token and paged pools, with every
/// operation enqueued on the caller's stream.
///
/// All calls on one pool must be ordered on the device (one stream, or streams ordered with
/// events); device buffers passed in must stay alive until the stream passes the call.
/// Dropping the pool never waits for the GPU: its memory is freed once its last kernel has
/// run (stream-ordered release, [`pending_releases`](super::pending_releases)).
#[derive(Debug)]
pub struct DevicePool {
    id: u64,
    config: PoolConfig,
    layout: Layout,
    // Moved out (to the release list) by `Drop`, never dropped in place.
    kernels: ManuallyDrop<Kernels>,
    memory: ManuallyDrop<DeviceMemory>,
    record: ManuallyDrop<MappedHost>,
    /// The digest kernel's block sums and ticket (four `u64`, zero between calls).
    digest_scratch: ManuallyDrop<DeviceMemory>,
    /// Scratch of the request-to-token table calls (`rows.rs`): mark words (one per table
    /// row, zero between calls) and per-call data, each the newest buffer last; older ones
    /// may still be used by queued kernels and are freed with the pool.
    rows_marks: Vec<DeviceMemory>,
    rows_data: Vec<DeviceMemory>,
    /// Device memory of released decode reservations, reused by later ones (every pool call
    /// is ordered after the kernels that used it); freed with the pool.
    reservation_spares: Vec<DeviceMemory>,
    /// Reservations released unfinished whose holds a kernel has yet to end (ahead of the
    /// next call; see `reservation::end_abandoned_holds`).
    abandoned: Vec<DeviceReservation>,
    /// Recorded after every launch: releasing waits (off-thread) for it.
    last_use: Arc<LastUse>,
    /// `kvp_pool_set_debug` flags.
    debug: u32,
    /// The stream-order check's state, kept from its first use until the pool is released
    /// (its device word may still be written by queued kernels after it is switched off).
    stream_order: Option<StreamOrderCheck>,
    buffers: Arc<SnapshotBuffers>,
    view: View,
    /// Which cursor the next kernel reads.
    parity: u32,
    /// Cursor-moving calls made so far (wraps): the next call's `Call::runs`, which the
    /// kernels compare with the cursor they read (the turn check, `kernels/pool.cu`).
    runs: u32,
    tag: u32,
    /// The device's number of the latest call (wraps, skipping 0).
    seq: u32,
    /// Calls so far, the latest being call `calls` (never wraps: call numbers on the device
    /// are `seq`, which `counts::call_of` maps back).
    calls: u64,
    counts: Accounting,
    group_open: bool,
    stats: PoolStats,
    /// The last clear or restore (in `calls`): faults of earlier calls no longer block.
    recovered_at: u64,
    /// The fault record last read (its four fields) and the call it came from (in `calls`),
    /// worked out when first seen: a record stays until the next fault, and its 32-bit
    /// number alone cannot tell, 2^31 calls later, whether it came before a recovery. (A
    /// new fault with the same four fields, a multiple of 2^32 - 1 calls later, would be
    /// taken for the old one.)
    seen_fault: Cell<Option<([u64; 4], u64)>>,
    /// The fault most recently reported by [`check_device`](Self::check_device).
    reported_fault: u64,
    /// Why the pool refuses work after a call whose kernels were only partly enqueued (a
    /// launch after its first failed): the queued ones run and may change the pool in ways
    /// the host did not record — a cursor moved under the host's parity would let the next
    /// call hand the same pages out again. Cleared by a clear or a restore, which rewrite
    /// the whole state.
    broken: Option<String>,
    /// Test hook ([`debug_fail_launch`](Self::debug_fail_launch),
    /// [`debug_fail_call`](Self::debug_fail_call)): `(calls, launch)`: after `calls` more
    /// calls, the launch of the next one at position `launch` fails.
    fail_launch: Option<(u32, usize)>,
    /// Test hook (`debug_skew_head_hint`): what the calls' head hints become.
    hint_skew: HintSkew,
    /// The device's SMs: a segment free of more blocks runs its two-blocks-an-SM kernel.
    multiprocessors: u32,
    /// Whether decodes of more than `DECODE_BATCH` requests run on a thread block cluster:
    /// the device launches clusters and fits the largest (checked once, at creation).
    clusters: bool,
    context: Arc<PrimaryContext>,
}

// SAFETY: the raw driver handles (module, functions, mapped pointer) are usable from any
// thread once the pool's context is current, which every method makes sure of; the pool is
// only ever used by one thread at a time (`&mut self`, or the C handle's lock).
unsafe impl Send for DevicePool {}
// SAFETY: the snapshot's buffer is only touched on drop (moved into a locked list).
unsafe impl Send for DeviceSnapshot {}

impl DevicePool {
    /// Creates a pool on device `config.backend`'s ordinal with every page free. Allocates
    /// device and mapped memory and loads the kernels; this (unlike every later call) may
    /// synchronize the device.
    pub fn new(config: PoolConfig) -> Result<Self, PoolError> {
        let layout = Layout::new(&config)?;
        if layout.page_size > MAX_DEVICE_PAGE_SIZE {
            return fail(
                ErrorKind::InvalidArgument,
                format!(
                    "page_size {} exceeds {MAX_DEVICE_PAGE_SIZE}, the largest a device pool \
                     takes (its kernels count slots within a page in 32 bits)",
                    layout.page_size
                ),
            );
        }
        let BackendKind::Cuda { ordinal } = config.backend else {
            return fail(
                ErrorKind::WrongBackend,
                "DevicePool needs a CUDA backend config",
            );
        };
        // Creation may synchronize anyway: free what released pools left behind and is done
        // (in their own contexts, maybe of other devices: so before binding this one).
        reap_ready();
        let context = Arc::new(PrimaryContext::retain(ordinal)?);
        let multiprocessors = context.multiprocessors()?;
        let last_use = Arc::new(LastUse::new()?);
        let kernels = Kernels::load(
            config.index_type,
            context.shared_optin()?,
            context.programmatic_launch(),
        )?;
        abi::check_module(kernels.module())?;
        let clusters = context.cluster_launch()
            && kernels::cluster_fits(
                kernels.typed.decode_cluster[DECODE_CLUSTERS.len() - 1],
                DECODE_CLUSTERS[DECODE_CLUSTERS.len() - 1],
                CLUSTER_BLOCK,
            );
        let arrays = Arrays::new(layout.num_pages, layout.kv_rows());
        let memory = DeviceMemory::zeroed(arrays.bytes)?;
        let record = MappedHost::zeroed(std::mem::size_of::<HostRecord>())?;
        let digest_scratch = DeviceMemory::zeroed(4 * std::mem::size_of::<u64>())?;
        let view = View {
            header: memory.at(0),
            ring: memory.at(arrays.ring),
            staged: memory.at(arrays.staged),
            state: memory.at(arrays.state),
            fill: memory.at(arrays.fill),
            fill_prev: memory.at(arrays.fill_prev),
            claim: memory.at(arrays.claim),
            group_idx: memory.at(arrays.group_idx),
            group_ord: memory.at(arrays.group_ord),
            scratch: memory.at(arrays.scratch),
            slot_tags: memory.at(arrays.slot_tags),
            record: record.device(),
            size: layout.size,
            page_size: layout.page_size,
            num_pages: layout.num_pages,
            need_sort: u32::from(config.need_sort),
            page_shift: if layout.page_size.is_power_of_two() {
                layout.page_size.trailing_zeros()
            } else {
                NOT_POW2
            },
        };
        let buffers = Arc::new(SnapshotBuffers {
            context: Arc::clone(&context),
            last_use: Arc::clone(&last_use),
            spare: Mutex::new(Vec::new()),
        });
        let mut pool = Self {
            id: NEXT_POOL_ID.fetch_add(1, Ordering::Relaxed),
            config,
            layout,
            kernels: ManuallyDrop::new(kernels),
            memory: ManuallyDrop::new(memory),
            record: ManuallyDrop::new(record),
            digest_scratch: ManuallyDrop::new(digest_scratch),
            rows_marks: Vec::new(),
            rows_data: Vec::new(),
            reservation_spares: Vec::new(),
            abandoned: Vec::new(),
            last_use,
            debug: 0,
            stream_order: None,
            buffers,
            view,
            parity: 0,
            runs: 0,
            tag: 0,
            seq: 0,
            counts: Accounting::for_ring(u64::from(layout.num_pages)),
            group_open: false,
            stats: PoolStats::default(),
            calls: 0,
            recovered_at: 0,
            seen_fault: Cell::new(None),
            reported_fault: 0,
            broken: None,
            fail_launch: None,
            hint_skew: HintSkew::AsIs,
            multiprocessors,
            clusters,
            context,
        };
        if let Some(flags) = debug_from_env() {
            pool.set_debug(flags)?;
        }
        // The initial state is a reset on the legacy default stream, waited for here.
        pool.enqueue_reset(std::ptr::null_mut())?;
        // SAFETY: plain driver call; creation is allowed to synchronize.
        super::driver::check(
            unsafe { cudarc::driver::sys::cuCtxSynchronize() },
            "cuCtxSynchronize",
        )?;
        Ok(pool)
    }

    // ---- facts ------------------------------------------------------------------------

    /// The configuration the pool was created with.
    pub fn config(&self) -> &PoolConfig {
        &self.config
    }

    /// Whether decodes of 1,025 to 4,096 requests, also by row, run on one thread block
    /// cluster (`kvp_decode_cluster{4,8}_*`): where the device launches clusters (compute
    /// capability 9.0 and later) and has room for one of 8 blocks; else on the ticketed
    /// kernel. Either hands out the same slots.
    pub fn decodes_on_clusters(&self) -> bool {
        self.clusters
    }

    /// Whether the pool launches its kernels with programmatic dependent launch: on compute
    /// capability 9.0 and later with a driver of CUDA 12.3 or later, unless
    /// `KVPOOL_PROGRAMMATIC_LAUNCH=0` was set when the pool was created. Each kernel may then
    /// be scheduled while the kernel ahead of it on the stream is finishing, and waits for
    /// it to complete before touching memory: the launch's latency overlaps that kernel's
    /// end (in CUDA graphs too). Nothing else changes: what a call reads and writes, and
    /// when, is ordered on the stream as before.
    pub fn programmatic_launch(&self) -> bool {
        self.kernels.programmatic()
    }

    /// Static facts about the pool.
    pub fn info(&self) -> PoolInfo {
        PoolInfo {
            size: self.layout.size,
            page_size: self.layout.page_size,
            num_pages: self.layout.num_pages,
            kv_rows: self.layout.kv_rows(),
            padding_slot: 0,
            need_sort: self.config.need_sort,
            index_type: self.config.index_type,
            backend: self.config.backend,
            in_free_group: self.group_open,
        }
    }

    /// Usable token slots.
    pub fn size(&self) -> u64 {
        self.layout.size
    }

    /// Tokens per page.
    pub fn page_size(&self) -> u32 {
        self.layout.page_size
    }

    /// Free token slots (free plus staged pages): exact, unless a paged free by index is
    /// still in flight, whose pages count once the stream has passed it. Reads the mapped
    /// record; never synchronizes.
    pub fn available_size_bound(&mut self) -> (u64, bool) {
        self.catch_up();
        let c = self.counts.counts();
        (
            (c.free + c.staged) * u64::from(self.layout.page_size),
            self.counts.is_exact(),
        )
    }

    /// [`available_size_bound`](Self::available_size_bound) without the exactness flag and
    /// without reading the record (for `&self` callers such as the scheduler).
    pub fn available_size(&self) -> u64 {
        let c = self.counts.counts();
        (c.free + c.staged) * u64::from(self.layout.page_size)
    }

    /// The counters, with `pages_in_use` current (an upper bound while a count is unknown).
    pub fn stats(&self) -> PoolStats {
        PoolStats {
            pages_in_use: u64::from(self.layout.num_pages) - self.free_or_staged(),
            ..self.stats
        }
    }

    fn free_or_staged(&self) -> u64 {
        let c = self.counts.counts();
        c.free + c.staged
    }

    /// Where the pool's state lives on the device, for tests and debuggers that read it
    /// back themselves (kvpool never reads device memory from the host).
    pub fn debug_layout(&self) -> DebugLayout {
        let arrays = Arrays::new(self.layout.num_pages, self.layout.kv_rows());
        let cursor_size = std::mem::size_of::<super::layout::Cursor>();
        DebugLayout {
            block: self.memory.at(0),
            block_bytes: self.memory.bytes(),
            cursor: self.parity as usize * cursor_size,
            ring: arrays.ring,
            staged: arrays.staged,
            state: arrays.state,
            fill: arrays.fill,
            num_pages: self.layout.num_pages,
            head_hint: self.counts.head_hint(),
        }
    }

    /// The kernel an allocation of `batch` requests, `tokens` tokens and `new_pages` new
    /// pages runs on this pool's device, plain or `by_row`, by its shape's name, e.g.
    /// `FewUpTo(4, 64)` (by row, the rows kernel of that shape; `Grid`: gather, the plain
    /// kernel, scatter): tests show with it which kernels they reached.
    #[doc(hidden)]
    pub fn debug_extend_kernel(
        &self,
        by_row: bool,
        batch: usize,
        decode: bool,
        tokens: u64,
        new_pages: u64,
    ) -> String {
        let device = if by_row {
            self.rows_shapes()
        } else {
            self.shapes()
        };
        match Self::extend_shape(batch, decode, tokens, new_pages, device) {
            Ok((kernel, ..)) => format!("{kernel:?}"),
            Err(e) => format!("none ({e})"),
        }
    }

    /// Moves the page-word tag counter to `tag` (at most the limit), so tests can cross
    /// the re-tagging that otherwise happens once every 2^29 calls.
    #[doc(hidden)]
    pub fn debug_jump_tag(&mut self, tag: u32) {
        self.tag = tag.min(TAG_LIMIT);
    }

    /// [`set_debug`](Self::set_debug) flag: the stream-order check (`KVP_DEBUG_STREAM_ORDER`).
    ///
    /// cbindgen:ignore
    pub const DEBUG_STREAM_ORDER: u32 = DEBUG_STREAM_ORDER;

    /// [`set_debug`](Self::set_debug) flag: a graph replayed at once repeats its captured
    /// call instead of faulting the pool (`KVP_DEBUG_REPLAY_CALLS`; for timing a call).
    ///
    /// cbindgen:ignore
    pub const DEBUG_REPLAY_CALLS: u32 = DEBUG_REPLAY_CALLS;

    /// Switches debug checks on or off (`DEBUG_*` flags; 0: all off). With
    /// [`DEBUG_STREAM_ORDER`](Self::DEBUG_STREAM_ORDER) every launch is checked on the
    /// device to start after the previous one has finished; otherwise the pool faults with
    /// [`ErrorKind::UnorderedStreams`]. Switching it on allocates a device word the first
    /// time (may synchronize, like creation). With
    /// [`DEBUG_REPLAY_CALLS`](Self::DEBUG_REPLAY_CALLS) calls made from then on may run again
    /// (their graphs replayed at once). Unknown flags fail with `InvalidArgument`.
    pub fn set_debug(&mut self, flags: u32) -> Result<(), PoolError> {
        if flags & !DEBUG_ALL != 0 {
            return fail(
                ErrorKind::InvalidArgument,
                format!("unknown debug flags {:#x}", flags & !DEBUG_ALL),
            );
        }
        if flags & DEBUG_STREAM_ORDER != 0 {
            self.context.bind()?;
            match &mut self.stream_order {
                Some(check) => check.restart(),
                None => self.stream_order = Some(StreamOrderCheck::new()?),
            }
        }
        self.debug = flags;
        Ok(())
    }

    /// The debug flags in force.
    pub fn debug_flags(&self) -> u32 {
        self.debug
    }

    // ---- faults -------------------------------------------------------------------------

    fn read_record(&self, field: usize) -> u64 {
        let base = self.record.host().cast::<u64>();
        // SAFETY: the record holds 8 u64 fields; volatile because the device writes them.
        unsafe { std::ptr::read_volatile(base.add(field)) }
    }

    /// The fault the device recorded, if any: the device's number of the call it came
    /// from, the call in `calls`, and the fault.
    fn recorded_fault(&self) -> Option<(u32, u64, DeviceFault)> {
        let seq = self.read_record(0);
        if seq == 0 {
            return None;
        }
        // The device writes the number last, after a system fence: the other fields are
        // read after it (an acquire fence, for hosts that reorder loads).
        std::sync::atomic::fence(std::sync::atomic::Ordering::Acquire);
        let raw = [
            seq,
            self.read_record(1),
            self.read_record(2),
            self.read_record(3),
        ];
        let call = match self.seen_fault.get() {
            Some((seen, call)) if seen == raw => call,
            _ => {
                let call = super::counts::call_of(seq as u32, self.seq, self.calls);
                self.seen_fault.set(Some((raw, call)));
                call
            }
        };
        let fault = DeviceFault::decode(raw[1], raw[2] as i64, raw[3] as i64);
        Some((seq as u32, call, fault))
    }

    /// A fault that still blocks the pool: recorded by a call after the last recovery.
    fn blocking_fault(&self) -> Option<DeviceFault> {
        self.blocking_fault_seq().map(|(_, fault)| fault)
    }

    /// The blocking fault and its call's device number. A fault of the recovering call
    /// itself blocks too: the stream-order check raises one as the next call's.
    fn blocking_fault_seq(&self) -> Option<(u32, DeviceFault)> {
        let (seq, call, fault) = self.recorded_fault()?;
        (call >= self.recovered_at).then_some((seq, fault))
    }

    /// How a recorded fault is reported: `DeviceFault`, or `UnorderedStreams` (whose message
    /// also names the streams of the two calls) for the stream-order check's.
    fn fault_error(&self, seq: u32, fault: &DeviceFault, prefix: &str, suffix: &str) -> PoolError {
        if fault.kind == ErrorKind::UnorderedStreams {
            let streams = self
                .stream_order
                .as_ref()
                .map_or_else(String::new, |check| {
                    format!(" ({})", check.describe(seq, fault.position as u32))
                });
            PoolError::new(
                ErrorKind::UnorderedStreams,
                format!("{prefix}call #{seq}: {}{streams}{suffix}", fault.message),
            )
        } else {
            PoolError::new(
                ErrorKind::DeviceFault,
                format!("{prefix}{}{suffix}", fault.message),
            )
        }
    }

    /// Reports a fault the device detected: `Err(DeviceFault)` (or `Err(UnorderedStreams)`
    /// from the stream-order debug check) while the pool is faulted, and once for a fault
    /// from before the last clear/restore; `Err(CudaError)` while a call only partly
    /// enqueued blocks the pool. Never synchronizes, so a fault in a call the
    /// stream has not reached yet is not seen yet.
    pub fn check_device(&mut self) -> Result<(), PoolError> {
        if let Some(err) = self.broken_error() {
            return Err(err);
        }
        if let Some((seq, fault)) = self.blocking_fault_seq() {
            return Err(self.fault_error(seq, &fault, "", ""));
        }
        if let Some((seq, _, fault)) = self.recorded_fault() {
            if u64::from(seq) != self.reported_fault {
                self.reported_fault = u64::from(seq);
                return Err(self.fault_error(
                    seq,
                    &fault,
                    "",
                    " (the pool was cleared or restored since)",
                ));
            }
        }
        Ok(())
    }

    /// The fault blocking the pool, decoded (tests compare it with the host backend).
    pub fn fault(&self) -> Option<DeviceFault> {
        self.blocking_fault()
    }

    // ---- the common path of every call ---------------------------------------------------

    /// Zeroes the mapped record's published counts (fields 4-7; number 0 names no call).
    fn clear_published_counts(&self) {
        let base = self.record.host().cast::<u64>();
        for field in 4..8 {
            // SAFETY: the record holds 8 u64 fields; volatile because the device writes them.
            unsafe { std::ptr::write_volatile(base.add(field), 0) };
        }
    }

    /// Folds the device's published counts into the host's lower bounds.
    fn catch_up(&mut self) {
        if self.counts.is_exact() {
            return;
        }
        let words = [4, 5, 6, 7].map(|i| self.read_record(i));
        let seq = (words[0] >> 32) as u32;
        if words.iter().any(|w| (w >> 32) as u32 != seq) || seq == 0 {
            return; // torn: a kernel is writing it right now
        }
        let count = |w: u64| w & 0xffff_ffff;
        let freed = self.counts.catch_up(
            seq,
            self.seq,
            Counts {
                free: count(words[0]),
                staged: count(words[1]),
                group_idx: count(words[2]),
                group_ord: count(words[3]),
            },
        );
        self.stats.pages_freed += freed;
        self.stats.slots_freed += freed * u64::from(self.layout.page_size);
    }

    /// Makes the context current, checks the stream, refuses work while faulted.
    fn enter(&mut self, stream: CUstream, recovering: bool) -> Result<(), PoolError> {
        self.context.bind()?;
        self.context.check_stream(stream)?;
        if !recovering {
            if let Some(err) = self.refusal() {
                return Err(err);
            }
        }
        self.catch_up();
        Ok(())
    }

    /// The next call's number and tag (re-tagging the device first when tags run out).
    fn next_call(&mut self, op: u32, step: &Step, stream: CUstream) -> Result<Call, PoolError> {
        if self.tag >= TAG_LIMIT {
            self.retag(stream)?;
        }
        self.tag += 1;
        self.seq = self.seq.wrapping_add(1);
        if self.seq == 0 {
            self.seq = 1;
        }
        self.calls += 1;
        if self.counts.is_exact() && step.is_unknown() {
            // The log starts: this call and the later ones publish their counts. Clear the
            // record first, so that one left by a call long ago (over 2^31 calls back, whose
            // number reads as new in the wrapping order) is not taken for theirs. (A kernel
            // of an earlier call may still publish after this: its number is older than
            // this call's, which `catch_up` ignores.)
            self.clear_published_counts();
        }
        let mut flags = 0;
        if self.counts.wants_mirror(step) {
            flags |= CALL_MIRROR;
        }
        if self.group_open {
            flags |= CALL_IN_GROUP;
        }
        if self.debug & DEBUG_REPLAY_CALLS != 0 {
            flags |= CALL_REPLAYABLE;
        }
        Ok(Call {
            tag: self.tag,
            input: self.parity,
            flags,
            op,
            seq: self.seq,
            runs: self.runs,
            head_hint: self.head_hint(),
        })
    }

    /// The next call's head hint (`Call::head_hint`).
    fn head_hint(&self) -> u32 {
        let hint = self.counts.head_hint();
        match self.hint_skew {
            HintSkew::AsIs => hint,
            HintSkew::By(k) => hint
                .map(|h| ((u64::from(h) + u64::from(k)) % u64::from(self.layout.num_pages)) as u32),
            HintSkew::Absent => None,
        }
        .unwrap_or(NO_HEAD_HINT)
    }

    /// Enqueues one kernel of a call and accounts for it.
    ///
    /// # Safety
    /// `extra` must match `function`'s parameters after `(View, Call)`.
    #[allow(clippy::too_many_arguments)]
    unsafe fn run(
        &mut self,
        function: CUfunction,
        grid: u32,
        block: u32,
        op: u32,
        step: Step,
        stream: CUstream,
        extra: &[*mut c_void],
    ) -> Result<(), PoolError> {
        // SAFETY: forwarded contract.
        unsafe {
            self.run_call(
                op,
                step,
                stream,
                &[Launch {
                    function,
                    grid,
                    block,
                    shared: 0,
                    extra,
                }],
            )
        }
    }

    /// Enqueues the kernels of one call, in order on `stream`, all with the same `Call` (tag,
    /// number, cursor parity, flags), and accounts for the call once. At most one of them
    /// writes the other cursor (the call's `step` says whether one does); the others leave
    /// the cursors alone.
    ///
    /// # Safety
    /// Each launch's `extra` must match its function's parameters after `(View, Call)`.
    unsafe fn run_call(
        &mut self,
        op: u32,
        step: Step,
        stream: CUstream,
        launches: &[Launch<'_>],
    ) -> Result<(), PoolError> {
        if !self.abandoned.is_empty() {
            self.end_abandoned_holds(stream)?;
        }
        let call = self.next_call(op, &step, stream)?;
        let view = self.view;
        if self.debug != 0 {
            self.debug_before(&view, &call, stream)?;
        }
        let fail_at = match self.fail_launch {
            Some((0, launch)) => {
                self.fail_launch = None;
                Some(launch)
            }
            Some((calls, launch)) => {
                self.fail_launch = Some((calls - 1, launch));
                None
            }
            None => None,
        };
        for (i, l) in launches.iter().enumerate() {
            // On the stack, not a heap allocation per launch (too small to see beside the
            // launch's own spread: run s25-1, BENCHMARKS.md).
            let mut storage = [std::ptr::null_mut(); 2 + MAX_EXTRA_ARGS];
            let args = &mut storage[..2 + l.extra.len()];
            args[0] = arg(&view);
            args[1] = arg(&call);
            args[2..].copy_from_slice(l.extra);
            // A grid of no blocks: the driver refuses the launch (the test hook's failure).
            let grid = if fail_at == Some(i) { 0 } else { l.grid };
            // SAFETY: forwarded contract.
            let launched = unsafe {
                self.kernels
                    .launch_shared(l.function, grid, l.block, l.shared, stream, args)
            };
            if let Err(err) = launched {
                if i > 0 {
                    return Err(self.break_call(&call, i, launches.len(), &err, stream));
                }
                return Err(err);
            }
        }
        if self.debug != 0 {
            self.debug_after(&call, stream);
        }
        // The kernels are queued: a failure to record (a broken context) cannot undo that.
        let _ = self.last_use.mark(stream);
        if step.moves_cursor() {
            self.parity ^= 1;
            self.runs = self.runs.wrapping_add(1);
        }
        self.counts.record(call.seq, step);
        Ok(())
    }

    /// A call whose launch `failed` of `total` failed after its first: the earlier ones are
    /// queued and will run, so the pool stops taking work until a clear or restore
    /// ([`broken`](Self::broken)); released memory must still wait for those kernels.
    #[cold]
    fn break_call(
        &mut self,
        call: &Call,
        failed: usize,
        total: usize,
        err: &PoolError,
        stream: CUstream,
    ) -> PoolError {
        let _ = self.last_use.mark(stream);
        let why = format!(
            "call #{} ({}) enqueued {failed} of its {total} kernels before a launch failed \
             ({}); the queued ones run, and what they change is not recorded",
            call.seq,
            DeviceOp::from_raw(call.op).map_or("an internal call", DeviceOp::name),
            err.message()
        );
        self.refuse_until_recovered(why)
    }

    /// Makes the pool refuse work until a clear or restore, for `why` (some of a call's
    /// work is queued, some is not: what the queued part changes is not recorded).
    pub(super) fn refuse_until_recovered(&mut self, why: String) -> PoolError {
        let error = PoolError::new(
            ErrorKind::CudaError,
            format!("{why}: the pool refuses work until {RECOVERY}"),
        );
        self.broken = Some(why);
        error
    }

    /// Why the pool refuses work now, if it does: a fault a call after the last recovery
    /// recorded, or a call only partly enqueued (`broken`).
    fn refusal(&self) -> Option<PoolError> {
        if let Some(err) = self.broken_error() {
            return Some(err);
        }
        let (seq, fault) = self.blocking_fault_seq()?;
        Some(self.fault_error(
            seq,
            &fault,
            &format!("the pool is faulted and refuses work until {RECOVERY}: "),
            "",
        ))
    }

    /// The refusal of a pool whose call was only partly enqueued (`broken`).
    fn broken_error(&self) -> Option<PoolError> {
        let why = self.broken.as_ref()?;
        Some(PoolError::new(
            ErrorKind::CudaError,
            format!("the pool refuses work until {RECOVERY}: {why}"),
        ))
    }

    /// Makes the next call's launch at position `launch` (0 its first) fail as the driver
    /// fails one (a grid of no blocks: `CUDA_ERROR_INVALID_VALUE`), so tests can show what a
    /// call only partly enqueued leaves.
    #[doc(hidden)]
    pub fn debug_fail_launch(&mut self, launch: usize) {
        self.fail_launch = Some((0, launch));
    }

    /// Makes the calls' head hints wrong from now on (`HintSkew::By(k)`: `k` positions past
    /// the head; `HintSkew::Absent`: none given), so tests can show that the kernels'
    /// results do not depend on them.
    #[doc(hidden)]
    pub fn debug_skew_head_hint(&mut self, skew: HintSkew) {
        self.hint_skew = skew;
    }

    /// Makes the first launch of the call `calls` calls after the next one fail (0: the
    /// next call's), for operations made of several calls (a reservation with a merge).
    #[doc(hidden)]
    pub fn debug_fail_call(&mut self, calls: u32) {
        self.fail_launch = Some((calls, 0));
    }

    fn retag(&mut self, stream: CUstream) -> Result<(), PoolError> {
        let view = self.view;
        let grid = self.grid_over(u64::from(self.layout.num_pages) + 1);
        // SAFETY: `kvp_retag(View)`.
        unsafe {
            self.kernels
                .launch(self.kernels.retag, grid, BLOCK, stream, &mut [arg(&view)])
        }?;
        let _ = self.last_use.mark(stream);
        self.tag = 0;
        Ok(())
    }

    /// The stream-order check before a launch (debug only).
    #[cold]
    fn debug_before(&self, view: &View, call: &Call, stream: CUstream) -> Result<(), PoolError> {
        match &self.stream_order {
            Some(check) if self.debug & DEBUG_STREAM_ORDER != 0 => {
                check.before(&self.kernels, view, call, stream)
            }
            _ => Ok(()),
        }
    }

    /// The stream-order mark after a launch (debug only).
    #[cold]
    fn debug_after(&mut self, call: &Call, stream: CUstream) {
        if self.debug & DEBUG_STREAM_ORDER != 0 {
            if let Some(check) = &mut self.stream_order {
                check.after(&self.kernels, call, stream);
            }
        }
    }

    fn grid_over(&self, items: u64) -> u32 {
        items.div_ceil(u64::from(BLOCK)).clamp(1, ALLOC_MAX_BLOCKS) as u32
    }

    fn enqueue_reset(&mut self, stream: CUstream) -> Result<(), PoolError> {
        let counts = Counts {
            free: u64::from(self.layout.num_pages),
            ..Counts::default()
        };
        let grid = self.grid_over(u64::from(self.layout.num_pages) + 1);
        // SAFETY: `kvp_reset(View, Call)`.
        unsafe {
            self.run(
                self.kernels.reset,
                grid,
                BLOCK,
                0,
                Step::Set {
                    counts,
                    exact: true,
                    // Every page free from ring position 0: the head is 0, the tail too.
                    tail: Some(0),
                },
                stream,
                &[],
            )
        }?;
        self.recovered();
        Ok(())
    }

    /// After a clear or restore is enqueued: faults of earlier calls and a call only partly
    /// enqueued no longer block, and no group is open.
    fn recovered(&mut self) {
        self.recovered_at = self.calls;
        self.group_open = false;
        self.broken = None;
    }

    fn record_outcome(&mut self, result: Result<(), PoolError>) -> Result<(), PoolError> {
        match &result {
            Ok(()) => {
                let in_use = self.stats().pages_in_use;
                self.stats.pages_in_use_peak = self.stats.pages_in_use_peak.max(in_use);
            }
            Err(err) if err.kind() == ErrorKind::OutOfSlots => self.stats.failed_allocations += 1,
            Err(_) => self.stats.rejected_calls += 1,
        }
        result
    }

    /// SGLang's per-call merge rule, then the shortage check (against the lower bound).
    fn ensure_pages(
        &mut self,
        trigger: u64,
        needed: u64,
        what: &str,
        stream: CUstream,
    ) -> Result<(), PoolError> {
        let c = self.counts.counts();
        let may_have_staged = c.staged > 0 || (self.config.need_sort && !self.counts.is_exact());
        if trigger > c.free && may_have_staged {
            self.enqueue_merge(stream)?;
        }
        let free = self.counts.counts().free;
        if needed > free {
            let note = if self.counts.is_exact() {
                ""
            } else {
                " (a lower bound: a paged free by index is still in flight on the stream)"
            };
            return fail(
                ErrorKind::OutOfSlots,
                format!("{what} needs {needed} free pages but only {free} are available{note}"),
            );
        }
        Ok(())
    }

    fn enqueue_merge(&mut self, stream: CUstream) -> Result<(), PoolError> {
        if self.counts.counts().staged > 0 {
            self.stats.merges += 1;
        }
        // SAFETY: `kvp_merge(View, Call)`.
        unsafe {
            self.run(
                self.kernels.merge,
                1,
                FREE_BLOCK,
                DeviceOp::Merge as u32,
                Step::Merge,
                stream,
                &[],
            )
        }
    }

    fn count_allocation(&mut self, tokens: u64, pages: u64) {
        self.stats.tokens_allocated += tokens;
        self.stats.pages_allocated += pages;
    }

    fn check_output(out_len: usize, needed: u64) -> Result<(), PoolError> {
        if (out_len as u64) < needed {
            return fail(
                ErrorKind::BufferTooSmall,
                format!("the output buffer holds {out_len} indices but {needed} are needed"),
            );
        }
        Ok(())
    }

    // ---- allocation ---------------------------------------------------------------------

    /// Enqueues `alloc(n)`: `n` slots (whole pages on a paged pool) into device buffer
    /// `out[..n]`, which holds `out_len` indices of the pool's index type.
    ///
    /// # Safety
    /// `out` must be device memory of the pool's device holding `out_len` indices, alive
    /// until the stream passes the call; `stream` a live stream (or NULL).
    pub unsafe fn alloc(
        &mut self,
        n: usize,
        out: CUdeviceptr,
        out_len: usize,
        stream: CUstream,
    ) -> Result<(), PoolError> {
        self.stats.alloc_calls += 1;
        // SAFETY: forwarded contract.
        let result = unsafe { self.alloc_inner(n, out, out_len, stream) };
        self.record_outcome(result)
    }

    unsafe fn alloc_inner(
        &mut self,
        n: usize,
        out: CUdeviceptr,
        out_len: usize,
        stream: CUstream,
    ) -> Result<(), PoolError> {
        self.enter(stream, false)?;
        let ps = self.layout.page_size as usize;
        if !n.is_multiple_of(ps) {
            return fail(
                ErrorKind::Unaligned,
                format!("alloc of {n} tokens is not a multiple of page_size {ps}"),
            );
        }
        Self::check_output(out_len, n as u64)?;
        let pages = (n / ps) as u64;
        self.ensure_pages(pages, pages, "alloc", stream)?;
        if n == 0 {
            return Ok(());
        }
        let grid = self.grid_over(n as u64);
        // SAFETY: `kvp_alloc_*(View, Call, u64 pages, Index *out)`.
        unsafe {
            self.run(
                self.kernels.typed.alloc,
                grid,
                BLOCK,
                DeviceOp::Alloc as u32,
                Step::Take(pages),
                stream,
                &[arg(&pages), arg(&out)],
            )
        }?;
        self.count_allocation(n as u64, pages);
        Ok(())
    }

    /// [`crate::Pool::extend_need`] for this pool: the host planning of
    /// [`alloc_extend`](Self::alloc_extend) from host copies of the lengths; reads no device
    /// memory, enqueues nothing, changes nothing. `alloc_extend` of these lengths fails
    /// with [`ErrorKind::OutOfSlots`] iff `new_pages * page_size` exceeds the
    /// [`available_size_bound`](Self::available_size_bound) it sees (exact, or the lower
    /// bound while a paged free by index is in flight).
    pub fn extend_need(
        &self,
        prefix_lens_host: &[i64],
        seq_lens_host: &[i64],
    ) -> Result<plan::ExtendPlan, PoolError> {
        plan::plan_extend_lengths(&self.layout, prefix_lens_host, seq_lens_host)
    }

    /// [`crate::Pool::decode_need`] for this pool (host planning only).
    pub fn decode_need(&self, seq_lens_host: &[i64]) -> Result<u64, PoolError> {
        plan::plan_decode(&self.layout, seq_lens_host)
    }

    /// Enqueues `alloc_extend` (see [`crate::Pool::alloc_extend`] for the index math). The
    /// `*_host` slices are the host copies of the device arrays `prefix_lens` / `seq_lens`
    /// (SGLang's `*_lens_cpu`); the host plans from them, the kernel reads the device ones.
    ///
    /// # Safety
    /// Device pointers must hold `batch` (`out`: `out_len`) elements and stay alive until
    /// the stream passes the call; the device lengths must equal the host copies.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn alloc_extend(
        &mut self,
        prefix_lens_host: &[i64],
        seq_lens_host: &[i64],
        prefix_lens: CUdeviceptr,
        seq_lens: CUdeviceptr,
        last_loc: CUdeviceptr,
        extend_num_tokens: u64,
        out: CUdeviceptr,
        out_len: usize,
        stream: CUstream,
    ) -> Result<(), PoolError> {
        self.stats.alloc_extend_calls += 1;
        let result = (|| {
            self.enter(stream, false)?;
            let batch = seq_lens_host.len();
            let plan = plan::plan_extend(
                &self.layout,
                prefix_lens_host,
                seq_lens_host,
                extend_num_tokens,
            )?;
            Self::check_output(out_len, plan.tokens)?;
            let ps = u64::from(self.layout.page_size);
            let trigger = if self.layout.is_paged() {
                extend_num_tokens / ps + batch as u64 + 1
            } else {
                plan.new_pages
            };
            self.ensure_pages(trigger, plan.new_pages, "alloc_extend", stream)?;
            if batch == 0 {
                return Ok(());
            }
            // SAFETY: forwarded contract.
            unsafe {
                self.launch_extend(
                    prefix_lens,
                    seq_lens,
                    last_loc,
                    batch,
                    false,
                    plan.tokens,
                    plan.new_pages,
                    out,
                    stream,
                )
            }?;
            self.count_allocation(plan.tokens, plan.new_pages);
            Ok(())
        })();
        self.record_outcome(result)
    }

    /// Enqueues `alloc_decode` (see [`crate::Pool::alloc_decode`]).
    ///
    /// # Safety
    /// As for [`alloc_extend`](Self::alloc_extend).
    pub unsafe fn alloc_decode(
        &mut self,
        seq_lens_host: &[i64],
        seq_lens: CUdeviceptr,
        last_loc: CUdeviceptr,
        out: CUdeviceptr,
        out_len: usize,
        stream: CUstream,
    ) -> Result<(), PoolError> {
        self.stats.alloc_decode_calls += 1;
        let result = (|| {
            self.enter(stream, false)?;
            let batch = seq_lens_host.len();
            let new_pages = plan::plan_decode(&self.layout, seq_lens_host)?;
            Self::check_output(out_len, batch as u64)?;
            self.ensure_pages(batch as u64, new_pages, "alloc_decode", stream)?;
            if batch == 0 {
                return Ok(());
            }
            // SAFETY: forwarded contract (the prefix pointer is unused in decode mode).
            unsafe {
                self.launch_extend(
                    seq_lens,
                    seq_lens,
                    last_loc,
                    batch,
                    true,
                    batch as u64,
                    new_pages,
                    out,
                    stream,
                )
            }?;
            self.count_allocation(batch as u64, new_pages);
            Ok(())
        })();
        self.record_outcome(result)
    }

    #[allow(clippy::too_many_arguments)]
    unsafe fn launch_extend(
        &mut self,
        prefix_lens: CUdeviceptr,
        seq_lens: CUdeviceptr,
        last_loc: CUdeviceptr,
        batch: usize,
        decode: bool,
        tokens: u64,
        pages: u64,
        out: CUdeviceptr,
        stream: CUstream,
    ) -> Result<(), PoolError> {
        let (kernel, grid, block, per_block, batch32) =
            Self::extend_shape(batch, decode, tokens, pages, self.shapes())?;
        let function = kernel.function(&self.kernels.typed);
        let shared = kernel.shared_bytes(&self.kernels);
        let decode = u32::from(decode);
        let op = if decode == 1 {
            DeviceOp::AllocDecode
        } else {
            DeviceOp::AllocExtend
        };
        // SAFETY: `kvp_extend*_*(View, Call, const i64 *prefix, const i64 *seq, const Index
        // *last_loc, u32 batch, u32 per_block, u32 decode, u64 tokens, u64 pages, Index *out)`;
        // `shared` as the kernel was allowed at load.
        unsafe {
            self.run_call(
                op as u32,
                Step::Take(pages),
                stream,
                &[Launch {
                    function,
                    grid,
                    block,
                    shared,
                    extra: &[
                        arg(&prefix_lens),
                        arg(&seq_lens),
                        arg(&last_loc),
                        arg(&batch32),
                        arg(&per_block),
                        arg(&decode),
                        arg(&tokens),
                        arg(&pages),
                        arg(&out),
                    ],
                }],
            )
        }
    }

    /// What the device offers `extend_shape` for a plain call: the wide shapes of
    /// `WIDE_PLAIN_BATCHES` whose shared memory the device gives a block.
    pub(super) fn shapes(&self) -> DeviceShapes {
        let mut wide = [false; WIDE_BATCHES.len()];
        for (usable, &bytes) in wide.iter_mut().zip(&self.kernels.wide_shared) {
            *usable = bytes > 0;
        }
        DeviceShapes {
            clusters: self.clusters,
            multiprocessors: self.multiprocessors,
            wide,
            by_row: false,
        }
    }

    /// The same for a call by request row: every wide shape whose rows kernel the device
    /// gives its shared memory (that kernel then serves the batch alone).
    pub(super) fn rows_shapes(&self) -> DeviceShapes {
        DeviceShapes {
            wide: self.kernels.wide_rows_shared.map(|bytes| bytes > 0),
            by_row: true,
            ..self.shapes()
        }
    }

    /// Which extend kernel serves a batch: (kernel, grid, block, requests per block,
    /// batch as `u32`).
    pub(super) fn extend_shape(
        batch: usize,
        decode: bool,
        tokens: u64,
        pages: u64,
        device: DeviceShapes,
    ) -> Result<(ExtendKernel, u32, u32, u32, u32), PoolError> {
        let batch32 = u32::try_from(batch).map_err(|_| {
            PoolError::new(ErrorKind::InvalidLengths, "batch_size exceeds 2^32 - 1")
        })?;
        Ok(if decode && batch <= DECODE_BATCH {
            let threads = DECODE_THREADS
                .into_iter()
                .find(|&t| batch <= t as usize)
                .unwrap_or(DECODE_BATCH as u32);
            let kernel = if batch == 1 {
                ExtendKernel::DecodeOne
            } else {
                ExtendKernel::Decode(threads)
            };
            (kernel, 1, threads, batch32, batch32)
        } else if let Some(blocks) = DECODE_CLUSTERS
            .into_iter()
            .find(|&blocks| decode && device.clusters && batch <= (blocks * CLUSTER_BLOCK) as usize)
        {
            (
                ExtendKernel::DecodeCluster(blocks),
                blocks,
                CLUSTER_BLOCK,
                batch32,
                batch32,
            )
        } else if !decode && batch <= WARP_BATCH {
            let (kernel, grid, threads) = if tokens <= SPAN_TOKENS {
                let threads = few_threads(tokens);
                (ExtendKernel::Few(threads), 1, threads)
            } else {
                let spread_grid = span_grid(tokens, device.multiprocessors);
                let (grid, threads) = if device.by_row {
                    (spread_grid, BLOCK)
                } else {
                    few_shape(tokens, device.multiprocessors)
                };
                // More requests than those blocks: the spread kernel, on `span_grid`'s.
                if batch > grid as usize {
                    (ExtendKernel::FewSpread, spread_grid, BLOCK)
                } else {
                    (ExtendKernel::FewBlocks(threads), grid, threads)
                }
            };
            // Exactly one request: the same shape, its kernel built for one; one block of at
            // most one of `FEW_BOUNDS` requests, its kernel built for that many.
            let bound = FEW_BOUNDS
                .into_iter()
                .find(|&bound| batch <= bound as usize);
            let kernel = match (kernel, bound) {
                (ExtendKernel::Few(threads), _) if batch == 1 => ExtendKernel::One(threads),
                (ExtendKernel::FewBlocks(threads), _) if batch == 1 => {
                    ExtendKernel::OneBlocks(threads)
                }
                (ExtendKernel::Few(threads), Some(bound)) => ExtendKernel::FewUpTo(bound, threads),
                (kernel, _) => kernel,
            };
            (kernel, grid, threads, batch32, batch32)
        } else if !decode && !device.by_row && batch <= PAIR_BATCH && tokens <= SPAN_TOKENS {
            let threads = few_threads(tokens);
            (ExtendKernel::Pairs(threads), 1, threads, batch32, batch32)
        } else if batch <= 64 && tokens <= BLOCK64_TOKENS {
            (ExtendKernel::Block64, 1, 64, batch32, batch32)
        } else if batch <= BLOCK as usize && tokens <= device.block_tokens() {
            (ExtendKernel::Block, 1, BLOCK, batch32, batch32)
        } else if batch <= BLOCK as usize {
            let grid = span_grid(tokens, device.multiprocessors);
            (ExtendKernel::Blocks, grid, BLOCK, batch32, batch32)
        } else if let Some(held) = WIDE_BATCHES
            .into_iter()
            .zip(device.wide)
            .find(|&(held, usable)| !decode && usable && batch <= held as usize)
            .map(|(held, _)| held)
        {
            // Every block decides the call: at most one an SM (at least one, for a call of
            // no tokens), each writing about `SPAN_TOKENS` tokens or more.
            let grid = tokens
                .div_ceil(SPAN_TOKENS)
                .clamp(1, u64::from(device.multiprocessors.max(1))) as u32;
            (
                ExtendKernel::BlocksWide(held),
                grid,
                wide_threads(held),
                batch32,
                batch32,
            )
        } else {
            let per_block = Self::extend_per_block(batch, decode, pages);
            (
                ExtendKernel::Grid,
                batch32.div_ceil(per_block),
                BLOCK,
                per_block,
                batch32,
            )
        })
    }

    /// Requests per block of the multi-block extend kernel.
    fn extend_per_block(batch: usize, decode: bool, pages: u64) -> u32 {
        // About TARGET_BLOCKS blocks share a large batch, each with at most STAGE_CAP new
        // pages on average so the kernel can stage them in shared memory.
        (if decode {
            u64::from(BLOCK)
        } else {
            let by_blocks = (batch as u64).div_ceil(TARGET_BLOCKS);
            let by_pages = STAGE_CAP * batch as u64 / pages.max(1);
            by_blocks.min(by_pages).clamp(1, u64::from(BLOCK))
        }) as u32
    }

    // ---- frees ----------------------------------------------------------------------------

    fn known_dest(&self) -> Dest {
        if self.group_open {
            Dest::GroupOrd
        } else if self.config.need_sort {
            Dest::Staged
        } else if self.layout.is_paged() {
            Dest::FreeFront
        } else {
            Dest::FreeTail
        }
    }

    fn record_free(&mut self, pages: Option<u64>) {
        if let Some(pages) = pages {
            if !self.group_open {
                self.stats.pages_freed += pages;
                self.stats.slots_freed += pages * u64::from(self.layout.page_size);
            }
        }
    }

    /// Enqueues a free by slot index (see [`crate::Pool::free`]). On a paged pool the
    /// number of distinct pages is found by the kernel: until the stream passes the call,
    /// [`available_size_bound`](Self::available_size_bound) does not count them.
    ///
    /// # Safety
    /// `indices` must be device memory holding `len` indices, alive until the stream passes
    /// the call.
    pub unsafe fn free(
        &mut self,
        indices: CUdeviceptr,
        len: usize,
        stream: CUstream,
    ) -> Result<(), PoolError> {
        self.stats.free_calls += 1;
        let result = (|| {
            self.enter(stream, false)?;
            if len == 0 {
                return Ok(());
            }
            if len as u64 > self.layout.size {
                return fail(
                    ErrorKind::DoubleFree,
                    format!(
                        "{len} indices but the pool has {} slots: some index repeats",
                        self.layout.size
                    ),
                );
            }
            let len64 = len as u64;
            if self.layout.is_paged() {
                let dest = if self.group_open {
                    Dest::GroupIdx
                } else {
                    self.known_dest()
                };
                let grid = free_grid(len64);
                let step = Step::Release { dest, pages: None };
                let op = DeviceOp::FreeIndices as u32;
                if len64 <= SORT_CAP || self.layout.num_pages <= SORT_CAP as u32 {
                    // At most SORT_CAP distinct pages: one kernel, sorted in shared memory.
                    // SAFETY: `kvp_free_slots_paged_*(View, Call, const Index *, u64 len)`.
                    unsafe {
                        self.run(
                            self.kernels.typed.free_slots_paged,
                            grid,
                            FREE_BLOCK,
                            op,
                            step,
                            stream,
                            &[arg(&indices), arg(&len64)],
                        )
                    }
                } else {
                    // Claim and count per chunk of the page map, then release in order: two
                    // multi-block kernels of one call; only the second writes the cursor.
                    let chunk = page_chunk(self.layout.num_pages);
                    let chunks = self.layout.num_pages.div_ceil(chunk);
                    // SAFETY: `kvp_claim_slots_paged_*(View, Call, const Index *, u64 len,
                    // u32 chunk)`, `kvp_release_claimed(View, Call, u32 chunk)`.
                    unsafe {
                        self.run_call(
                            op,
                            step,
                            stream,
                            &[
                                Launch {
                                    function: self.kernels.typed.claim_slots_paged,
                                    grid,
                                    block: FREE_BLOCK,
                                    shared: 0,
                                    extra: &[arg(&indices), arg(&len64), arg(&chunk)],
                                },
                                Launch {
                                    function: self.kernels.release_claimed,
                                    grid: chunks,
                                    block: FREE_BLOCK,
                                    shared: 0,
                                    extra: &[arg(&chunk)],
                                },
                            ],
                        )
                    }
                }
            } else {
                // SAFETY: forwarded contract.
                unsafe {
                    self.free_known(
                        indices,
                        FREE_SLOTS,
                        len64,
                        0,
                        len64,
                        DeviceOp::FreeIndices,
                        stream,
                    )
                }
            }
        })();
        self.record_outcome(result)
    }

    /// Enqueues a free of exactly these pages, in order (see [`crate::Pool::free_pages`]).
    ///
    /// # Safety
    /// `page_ids` must be device memory holding `len` indices, alive until the stream
    /// passes the call.
    pub unsafe fn free_pages(
        &mut self,
        page_ids: CUdeviceptr,
        len: usize,
        stream: CUstream,
    ) -> Result<(), PoolError> {
        self.stats.free_calls += 1;
        let result = (|| {
            self.enter(stream, false)?;
            if len == 0 {
                return Ok(());
            }
            if len as u64 > u64::from(self.layout.num_pages) {
                return fail(
                    ErrorKind::DoubleFree,
                    format!(
                        "{len} page ids but the pool has {} pages: some page repeats",
                        self.layout.num_pages
                    ),
                );
            }
            let len64 = len as u64;
            // SAFETY: forwarded contract.
            unsafe {
                self.free_known(
                    page_ids,
                    FREE_PAGE_IDS,
                    len64,
                    0,
                    len64,
                    DeviceOp::FreePages,
                    stream,
                )
            }
        })();
        self.record_outcome(result)
    }

    /// Enqueues a free of the pages of `row[start_pos .. start_pos + len]` (see
    /// [`crate::Pool::free_segment`]). The page count is known on the host: no lower bound.
    ///
    /// # Safety
    /// `row` must be device memory holding `row_len` indices, alive until the stream passes
    /// the call.
    pub unsafe fn free_segment(
        &mut self,
        row: CUdeviceptr,
        row_len: usize,
        start_pos: usize,
        len: usize,
        stream: CUstream,
    ) -> Result<(), PoolError> {
        self.stats.free_calls += 1;
        let result = (|| {
            self.enter(stream, false)?;
            if start_pos.checked_add(len).is_none_or(|end| end > row_len) {
                return fail(
                    ErrorKind::BufferTooSmall,
                    format!("segment {start_pos}..{start_pos}+{len} lies outside the row of {row_len} slots"),
                );
            }
            if len == 0 {
                return Ok(()); // wherever it starts, as the host pool (and SGLang)
            }
            let ps = self.layout.page_size as usize;
            if self.layout.is_paged() && !start_pos.is_multiple_of(ps) {
                return fail(
                    ErrorKind::Unaligned,
                    format!("start_pos {start_pos} is not a multiple of page_size {ps}"),
                );
            }
            let pages = len.div_ceil(ps) as u64;
            if pages > u64::from(self.layout.num_pages) {
                return fail(
                    ErrorKind::DoubleFree,
                    format!(
                        "the segment spans {pages} pages but the pool has {}",
                        self.layout.num_pages
                    ),
                );
            }
            let mode = if self.layout.is_paged() {
                FREE_SEGMENT
            } else {
                FREE_SLOTS
            };
            // SAFETY: forwarded contract.
            unsafe {
                self.free_known(
                    row,
                    mode,
                    len as u64,
                    start_pos as u64,
                    pages,
                    DeviceOp::FreeSegment,
                    stream,
                )
            }
        })();
        self.record_outcome(result)
    }

    /// The kernel and grid of a free of `pages` pages whose page count the host knows, by
    /// `mode` (`FREE_*`): a segment's own kernel with a group of lanes a page, else a thread a
    /// page. Both kernels take the same parameters (the segment kernel ignores `mode`).
    pub(super) fn free_known_launch(&self, mode: u32, pages: u64) -> (CUfunction, u32) {
        let grid = known_grid(mode, pages, self.layout.page_size);
        let typed = &self.kernels.typed;
        let function = match mode {
            FREE_SEGMENT if segment_grid_is_wide(grid, self.multiprocessors) => {
                typed.free_segment_wide
            }
            FREE_SEGMENT => typed.free_segment,
            _ => typed.free_known,
        };
        (function, grid)
    }

    #[allow(clippy::too_many_arguments)]
    unsafe fn free_known(
        &mut self,
        src: CUdeviceptr,
        mode: u32,
        len: u64,
        start: u64,
        pages: u64,
        op: DeviceOp,
        stream: CUstream,
    ) -> Result<(), PoolError> {
        let dest = self.known_dest();
        let count = pages as u32;
        let (function, grid) = self.free_known_launch(mode, pages);
        // SAFETY: `kvp_free_known_*` / `kvp_free_segment_*(View, Call, const Index *src,
        // u32 mode, u64 len, u64 start, u32 count)`.
        unsafe {
            self.run(
                function,
                grid,
                FREE_BLOCK,
                op as u32,
                Step::Release {
                    dest,
                    pages: Some(pages),
                },
                stream,
                &[arg(&src), arg(&mode), arg(&len), arg(&start), arg(&count)],
            )
        }?;
        self.record_free(Some(pages));
        Ok(())
    }

    /// Enqueues a rewind (see [`crate::Pool::rewind`]): each `last_kept[i]` becomes its
    /// page's last handed-out slot. Counts do not change.
    ///
    /// # Safety
    /// `last_kept` must be device memory holding `len` indices, alive until the stream
    /// passes the call.
    pub unsafe fn rewind(
        &mut self,
        last_kept: CUdeviceptr,
        len: usize,
        stream: CUstream,
    ) -> Result<(), PoolError> {
        let result = (|| {
            self.enter(stream, false)?;
            if len == 0 {
                return Ok(());
            }
            if len as u64 > u64::from(self.layout.num_pages) {
                return fail(
                    ErrorKind::LastLocMismatch,
                    format!(
                        "{len} slots but the pool has {} pages: some page is rewound twice",
                        self.layout.num_pages
                    ),
                );
            }
            let len64 = len as u64;
            // SAFETY: `kvp_rewind_*(View, Call, const Index *last_kept, u64 len)`; one block.
            unsafe {
                self.run(
                    self.kernels.typed.rewind,
                    1,
                    FREE_BLOCK,
                    DeviceOp::Rewind as u32,
                    Step::InPlace,
                    stream,
                    &[arg(&last_kept), arg(&len64)],
                )
            }
        })();
        self.record_outcome(result)
    }

    /// Opens a free group (host-only: no device work).
    pub fn free_group_begin(&mut self) -> Result<(), PoolError> {
        let result = if self.group_open {
            fail(
                ErrorKind::InvalidState,
                "a free group is already open; free groups do not nest",
            )
        } else {
            self.group_open = true;
            Ok(())
        };
        self.record_outcome(result)
    }

    /// Enqueues the end of the free group: pages freed by index (one ascending block), then
    /// those freed by page id or segment, in call order.
    ///
    /// # Safety
    /// `stream` must be a live stream of the pool's device (or NULL).
    pub unsafe fn free_group_end(&mut self, stream: CUstream) -> Result<(), PoolError> {
        let result = (|| {
            self.enter(stream, false)?;
            if !self.group_open {
                return fail(
                    ErrorKind::InvalidState,
                    "free_group_end without an open free group",
                );
            }
            let c = self.counts.counts();
            let known = c.group_idx + c.group_ord;
            self.group_open = false;
            let dest = self.known_dest();
            // SAFETY: `kvp_group_end(View, Call)`.
            let launched = unsafe {
                self.run(
                    self.kernels.group_end,
                    1,
                    FREE_BLOCK,
                    DeviceOp::GroupEnd as u32,
                    Step::GroupEnd { dest },
                    stream,
                    &[],
                )
            };
            if launched.is_err() {
                self.group_open = true;
            }
            launched?;
            self.record_free(Some(known));
            Ok(())
        })();
        self.record_outcome(result)
    }

    /// Enqueues SGLang's `merge_and_sort_free` (no launch when nothing can be staged).
    ///
    /// # Safety
    /// `stream` must be a live stream of the pool's device (or NULL).
    pub unsafe fn merge_and_sort_free(&mut self, stream: CUstream) -> Result<(), PoolError> {
        self.enter(stream, false)?;
        let c = self.counts.counts();
        if c.staged > 0 || (self.config.need_sort && !self.counts.is_exact()) {
            self.enqueue_merge(stream)?;
        }
        Ok(())
    }

    /// Enqueues a reset: every page free in order, staged frees and an open group dropped,
    /// and a device fault cleared.
    ///
    /// # Safety
    /// `stream` must be a live stream of the pool's device (or NULL).
    pub unsafe fn clear(&mut self, stream: CUstream) -> Result<(), PoolError> {
        self.enter(stream, true)?;
        self.enqueue_reset(stream)
    }

    // ---- digest ---------------------------------------------------------------------------

    /// Enqueues the state digest (definition: [`crate::digest`]; the same value a host pool
    /// in the same state gives) into `out`, one `u64` of device memory: one kernel that reads
    /// the state as of its point in the stream and changes nothing. Never synchronizes.
    /// Runs on a faulted pool too (the digest then includes the fault).
    ///
    /// # Safety
    /// `out` must be device memory of the pool's device holding one `u64`, alive until the
    /// stream passes the call; `stream` a live stream of the pool's device (or NULL).
    pub unsafe fn digest_async(
        &mut self,
        out: CUdeviceptr,
        stream: CUstream,
    ) -> Result<(), PoolError> {
        self.enter(stream, true)?;
        if out == 0 {
            return fail(ErrorKind::InvalidArgument, "out_device is NULL");
        }
        if !out.is_multiple_of(8) {
            return fail(
                ErrorKind::InvalidArgument,
                "out_device is not aligned for a uint64_t",
            );
        }
        // Read-only: the kernel reads cursor[parity] and writes no cursor, so neither the
        // parity, the tag nor the call number advances (like a rewind, it is not a call of
        // the pool's own sequence).
        let call = Call {
            tag: self.tag,
            input: self.parity,
            flags: if self.group_open { CALL_IN_GROUP } else { 0 },
            op: 0,
            seq: self.seq,
            runs: self.runs,
            head_hint: NO_HEAD_HINT,
        };
        let view = self.view;
        let scratch = self.digest_scratch.at(0);
        let grid = self.grid_over(u64::from(self.layout.num_pages) + 1);
        // SAFETY: `kvp_digest(View, Call, u64 *scratch, u64 *out)`; caller contract for `out`.
        unsafe {
            self.kernels.launch(
                self.kernels.digest,
                grid,
                BLOCK,
                stream,
                &mut [arg(&view), arg(&call), arg(&scratch), arg(&out)],
            )
        }?;
        // Released pools wait for it like for every other kernel.
        let _ = self.last_use.mark(stream);
        Ok(())
    }

    // ---- snapshots --------------------------------------------------------------------------

    /// Enqueues a copy of the allocator state into a snapshot buffer (device memory; reused
    /// from dropped snapshots of this pool when possible, so only the first backups
    /// allocate).
    ///
    /// # Safety
    /// `stream` must be a live stream of the pool's device (or NULL).
    pub unsafe fn backup_state(&mut self, stream: CUstream) -> Result<DeviceSnapshot, PoolError> {
        self.enter(stream, false)?;
        if self.group_open {
            return fail(
                ErrorKind::InvalidState,
                "cannot back up the state while a free group is open",
            );
        }
        let bytes = snapshot_bytes(self.layout.num_pages);
        let spare = self.buffers.spare.lock().pop();
        let buffer = match spare {
            Some(buffer) => buffer,
            // Zeroed on the call's stream (cuMemsetD8 ran on the legacy default stream,
            // unordered with a non-blocking one: it could zero words the backup had copied).
            None => DeviceMemory::zeroed_on(
                bytes,
                stream,
                "the snapshot's device buffer (the pool has no spare one: before capturing, \
                 take a snapshot and free it; its buffer is then reused)",
            )?,
        };
        let target = buffer.at(0);
        let counts = self.counts.counts();
        let exact = self.counts.is_exact();
        let tail = self.counts.tail();
        let grid = self.grid_over(snapshot_words(self.layout.num_pages));
        // SAFETY: `kvp_backup(View, Call, u32 *snapshot)`; `buffer` holds `bytes`.
        let launched = unsafe {
            self.run(
                self.kernels.backup,
                grid,
                BLOCK,
                0,
                Step::Keep,
                stream,
                &[arg(&target)],
            )
        };
        if let Err(err) = launched {
            self.buffers.spare.lock().push(buffer);
            return Err(err);
        }
        Ok(DeviceSnapshot {
            pool_id: self.id,
            buffer: Some(buffer),
            counts,
            exact,
            tail,
            buffers: Arc::clone(&self.buffers),
        })
    }

    /// Enqueues a restore of `snapshot` (of this pool); also clears a device fault. Refused
    /// while a free group is open, unless the pool is faulted: the group is then abandoned.
    ///
    /// # Safety
    /// `stream` must be a live stream of the pool's device (or NULL).
    pub unsafe fn restore_state(
        &mut self,
        snapshot: &DeviceSnapshot,
        stream: CUstream,
    ) -> Result<(), PoolError> {
        let result = (|| {
            self.enter(stream, true)?;
            if snapshot.pool_id != self.id {
                return fail(
                    ErrorKind::ForeignSnapshot,
                    "the snapshot was taken from a different pool",
                );
            }
            // A faulted pool's open group is abandoned (its end is refused like any work,
            // and the snapshot, taken with no group open, has none): restoring is the
            // documented recovery and must not need a clear.
            if self.group_open && self.refusal().is_none() {
                return fail(
                    ErrorKind::InvalidState,
                    "cannot restore a snapshot while a free group is open",
                );
            }
            let source = snapshot.buffer.as_ref().map_or(0, |b| b.at(0));
            let grid = self.grid_over(snapshot_words(self.layout.num_pages));
            // SAFETY: `kvp_restore(View, Call, u32 *snapshot)`.
            unsafe {
                self.run(
                    self.kernels.restore,
                    grid,
                    BLOCK,
                    DeviceOp::Restore as u32,
                    Step::Set {
                        counts: snapshot.counts,
                        exact: snapshot.exact,
                        tail: snapshot.tail,
                    },
                    stream,
                    &[arg(&source)],
                )
            }?;
            self.stats.restores += 1;
            self.recovered();
            Ok(())
        })();
        self.record_outcome(result)
    }
}

/// What ends a refusal of work (a fault, a call only partly enqueued), as messages name it.
const RECOVERY: &str = "kvp_pool_clear_async or kvp_pool_restore_state_async";

/// The most parameters a kernel takes after `(View, Call)` (`Launch::extra`): twelve, in
/// `kvp_reserve_decode_*`; a launch with more panics in `run_call`, caught at the C boundary
/// (and by the first GPU test of that kernel).
const MAX_EXTRA_ARGS: usize = 12;

/// What the device offers the choice of an extend kernel (`DevicePool::extend_shape`).
#[derive(Clone, Copy, Debug)]
pub(super) struct DeviceShapes {
    /// Whether the cluster decode kernels may serve a decode
    /// (`DevicePool::decodes_on_clusters`).
    pub clusters: bool,
    /// The device's SM count: the most blocks of `ExtendKernel::BlocksWide`.
    pub multiprocessors: u32,
    /// Which of `WIDE_BATCHES`' kernels the device gives their shared memory.
    pub wide: [bool; WIDE_BATCHES.len()],
    /// Whether the call is by request row. Its kernels differ from a plain call's in three
    /// shapes: no `ExtendKernel::Pairs`, `ExtendKernel::Block` up to `BLOCK_ROW_TOKENS` (not
    /// `BLOCK_TOKENS`), and 2-32 requests past `SPAN_TOKENS` on `span_grid`'s blocks of
    /// `BLOCK` threads, the spread kernel wherever the requests outnumber those blocks (not
    /// `few_shape`'s: by row its shorter blocks took 1.00-1.03x the time, run s63-2).
    pub by_row: bool,
}

impl DeviceShapes {
    /// The most tokens of `ExtendKernel::Block`.
    fn block_tokens(self) -> u64 {
        if self.by_row {
            BLOCK_ROW_TOKENS
        } else {
            BLOCK_TOKENS
        }
    }
}

/// One kernel launch of a call (see `DevicePool::run_call`): the arguments after
/// `(View, Call)`.
struct Launch<'a> {
    function: CUfunction,
    grid: u32,
    block: u32,
    /// Dynamic shared memory, bytes (`ExtendKernel::shared_bytes`).
    shared: u32,
    extra: &'a [*mut c_void],
}

/// Pages of the page map per block of `kvp_release_claimed` (a chunk): whole tiles of
/// `FREE_BLOCK` pages, about `TARGET_BLOCKS` blocks, so at most `TARGET_BLOCKS` chunks (the
/// claim kernel counts per chunk in `Header::chunk_claims`, and its last block scans the
/// counts with one thread each: at most `CLAIM_CHUNKS` = `FREE_BLOCK` of them).
fn page_chunk(num_pages: u32) -> u32 {
    const _: () = assert!(TARGET_BLOCKS <= FREE_BLOCK as u64);
    const _: () = assert!(FREE_BLOCK == CLAIM_CHUNKS);
    (u64::from(num_pages)
        .div_ceil(TARGET_BLOCKS)
        .next_multiple_of(u64::from(FREE_BLOCK))
        .max(u64::from(FREE_BLOCK))) as u32
}

/// Blocks of a free kernel over `items` elements.
fn free_grid(items: u64) -> u32 {
    items
        .div_ceil(u64::from(FREE_BLOCK))
        .clamp(1, TARGET_BLOCKS) as u32
}

/// Blocks of the kernel of a free of `pages` pages whose count the host knows, by `mode`:
/// a thread per page id or slot, `segment_lanes(page_size)` lanes per page of a segment
/// (`kvp_free_segment_*`).
fn known_grid(mode: u32, pages: u64, page_size: u32) -> u32 {
    let threads_per_page = if mode == FREE_SEGMENT {
        segment_lanes(page_size)
    } else {
        1
    };
    free_grid(pages * u64::from(threads_per_page))
}

/// Whether a segment free of `grid` blocks runs `kvp_free_segment_wide_*` (two blocks an
/// SM, a few registers spilled) rather than `kvp_free_segment_*` (one block an SM): when the
/// grid has more blocks than the device has SMs, which at one block an SM would run in two
/// waves (H200, 132 SMs, run s12-1: the wide kernel took 0.88x the time at 264 blocks,
/// 1.05-1.11x at 1-128 blocks).
fn segment_grid_is_wide(grid: u32, multiprocessors: u32) -> bool {
    grid > multiprocessors
}

/// Slots a lane of `kvp_free_segment_*` checks per step (`kvp::SEGMENT_RUN`).
const SEGMENT_RUN: u32 = 4;

/// Lanes of `kvp_free_segment_*` that check one page (the kernel works with their log2,
/// `kvp::segment_lanes_log2`): enough for the page at `SEGMENT_RUN` slots each, a power of
/// two up to a warp.
fn segment_lanes(page_size: u32) -> u32 {
    page_size.div_ceil(SEGMENT_RUN).next_power_of_two().min(32)
}

/// `KVPOOL_DEBUG` at pool creation: `stream_order` (or `1`) switches the stream-order check
/// on for every device pool of the process, without changing the engine.
fn debug_from_env() -> Option<u32> {
    let value = std::env::var("KVPOOL_DEBUG").ok()?;
    value
        .split([',', ' '])
        .any(|word| matches!(word.trim(), "stream_order" | "1"))
        .then_some(DEBUG_STREAM_ORDER)
}

impl Drop for DevicePool {
    fn drop(&mut self) {
        // Stream-ordered release: module, memory and mapped record are freed in the pool's
        // context once its last kernel has run; nothing here waits for the GPU.
        // SAFETY: each field is taken once, here, and never used again.
        let owned = unsafe {
            Owned {
                kernels: ManuallyDrop::take(&mut self.kernels),
                memory: ManuallyDrop::take(&mut self.memory),
                record: ManuallyDrop::take(&mut self.record),
                digest_scratch: ManuallyDrop::take(&mut self.digest_scratch),
                stream_order: self.stream_order.take().map(StreamOrderCheck::into_memory),
                rows_scratch: std::mem::take(&mut self.rows_marks)
                    .into_iter()
                    .chain(std::mem::take(&mut self.rows_data))
                    .chain(std::mem::take(&mut self.reservation_spares))
                    .chain(
                        std::mem::take(&mut self.abandoned)
                            .into_iter()
                            .filter_map(DeviceReservation::into_memory),
                    )
                    .collect(),
            }
        };
        release_after(Arc::clone(&self.last_use), Arc::clone(&self.context), owned);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_segment_page_gets_enough_lanes_for_four_slots_each() {
        for (page_size, lanes) in [
            (2, 1),
            (4, 1),
            (5, 2),
            (16, 4),
            (48, 16),
            (64, 16),
            (128, 32),
            (1000, 32),
        ] {
            assert_eq!(segment_lanes(page_size), lanes, "page_size {page_size}");
        }
        // Enough blocks for a group per page, within TARGET_BLOCKS.
        assert_eq!(known_grid(FREE_SEGMENT, 1, 16), 1);
        assert_eq!(known_grid(FREE_SEGMENT, 2048, 64), 32);
        assert_eq!(known_grid(FREE_SEGMENT, 1 << 20, 16), TARGET_BLOCKS as u32);
        assert_eq!(known_grid(FREE_SLOTS, 4096, 1), 4);
    }

    #[test]
    fn segment_frees_of_more_than_one_wave_take_the_wide_kernel() {
        // 1,024 requests of 512 tokens at page 16: 128 blocks, one wave at one block an SM.
        // On an H200 (132 SMs) that is the narrow kernel; on a GPU of 108 SMs the wide one.
        let pages = 1024 * 512 / 16;
        assert_eq!(known_grid(FREE_SEGMENT, pages, 16), 128);
        assert!(!segment_grid_is_wide(128, 132));
        assert!(!segment_grid_is_wide(132, 132));
        assert!(segment_grid_is_wide(133, 132));
        assert!(segment_grid_is_wide(128, 108));
        // 4,096 such requests: the full grid.
        let grid = known_grid(FREE_SEGMENT, 4 * pages, 16);
        assert!(segment_grid_is_wide(grid, 132), "{grid} blocks");
    }

    /// Refused before any CUDA call, so this runs without a GPU.
    #[test]
    fn a_device_pool_refuses_pages_its_kernels_cannot_count() {
        let page_size = (1u32 << 31) + 1;
        let Err(err) = DevicePool::new(PoolConfig {
            size: u64::from(page_size),
            page_size,
            need_sort: false,
            index_type: crate::pool::IndexType::I64,
            backend: BackendKind::Cuda { ordinal: 0 },
        }) else {
            panic!("a page of 2^31 + 1 slots is refused");
        };
        assert_eq!(err.kind(), ErrorKind::InvalidArgument);
        assert!(
            err.message()
                .contains(&format!("page_size {page_size} exceeds")),
            "{err}"
        );
    }

    #[test]
    fn decode_kernels_sit_in_the_order_of_their_blocks() {
        for (slot, threads) in DECODE_THREADS.into_iter().enumerate() {
            assert_eq!(decode_slot(threads), slot);
        }
        for (slot, threads) in FEW_THREADS.into_iter().enumerate() {
            assert_eq!(few_slot(threads), slot);
        }
        for (slot, bound) in FEW_BOUNDS.into_iter().enumerate() {
            assert_eq!(bound_slot(bound), slot);
        }
        // The bounds rise and stay within the warp that decides (WARP_BATCH), powers of two
        // (the kernels' scans and searches take log2 of them).
        assert!(FEW_BOUNDS.windows(2).all(|w| w[0] < w[1]));
        assert!(FEW_BOUNDS
            .iter()
            .all(|&b| b.is_power_of_two() && b > 1 && (b as usize) < WARP_BATCH));
        assert_eq!(DECODE_THREADS.last().copied(), Some(DECODE_BATCH as u32));
        for (slot, blocks) in DECODE_CLUSTERS.into_iter().enumerate() {
            assert_eq!(cluster_slot(blocks), slot);
        }
    }

    /// By row, extends of 1,025-2,048 requests run on 1,024 threads of two requests each; a
    /// wide shape the device cannot give its shared memory is left out (the next that holds
    /// the batch, else the ticketed kernel).
    #[test]
    fn wide_shapes_by_row_and_where_the_device_lacks_shared_memory() {
        let shape = |batch: usize, tokens: u64, wide: [bool; 3]| {
            let device = DeviceShapes {
                clusters: true,
                multiprocessors: 132,
                wide,
                by_row: true,
            };
            let (kernel, grid, threads, ..) =
                DevicePool::extend_shape(batch, false, tokens, tokens, device).unwrap();
            (kernel, grid, threads)
        };
        let all = [true; WIDE_BATCHES.len()];
        assert_eq!(
            shape(1025, 1025, all),
            (ExtendKernel::BlocksWide(2048), 3, 1024)
        );
        assert_eq!(
            shape(2048, 1 << 20, all),
            (ExtendKernel::BlocksWide(2048), 132, 1024)
        );
        assert_eq!(shape(2049, 2049, all), (ExtendKernel::Grid, 257, 256));
        assert_eq!(
            shape(300, 600, [false, true, true]),
            (ExtendKernel::BlocksWide(1024), 2, 1024)
        );
        assert_eq!(
            shape(513, 513, [true, false, false]),
            (ExtendKernel::Grid, 257, 256)
        );
        assert_eq!(
            shape(1025, 1025, [true, true, false]),
            (ExtendKernel::Grid, 257, 256)
        );
    }

    /// `span_grid`: blocks of SHORT_SPAN_TOKENS while they fit one an SM, else of
    /// SPAN_TOKENS; `few_shape`: blocks of FEW_SPAN_TOKENS while they fit, else `span_grid`'s,
    /// on FEW_GRID_BLOCK threads up to SHORT_SPAN_TOKENS a block, else on BLOCK.
    #[test]
    fn several_block_extends_take_short_spans_while_they_fit_one_block_an_sm() {
        // (tokens, multiprocessors) -> (span_grid's blocks, few_shape's blocks and threads)
        let cases = [
            ((513, 132), (3, (5, 128))),
            ((132 * 128, 132), (66, (132, 128))),
            // One more token would need 133 blocks of FEW_SPAN_TOKENS: span_grid's.
            ((132 * 128 + 1, 132), (67, (67, 128))),
            ((132 * 256, 132), (132, (132, 128))),
            // One more token would need 133 short blocks: blocks of SPAN_TOKENS, on BLOCK.
            ((132 * 256 + 1, 132), (67, (67, 256))),
            ((108 * 256, 108), (108, (108, 128))),
            ((108 * 256 + 1, 108), (55, (55, 256))),
            (
                (1 << 20, 132),
                (TARGET_BLOCKS as u32, (TARGET_BLOCKS as u32, 256)),
            ),
            // A device that reports no multiprocessors counts as one; a call of no tokens
            // takes one block.
            ((128, 0), (1, (1, 128))),
            ((256, 0), (1, (1, 128))),
            ((1000, 0), (2, (2, 256))),
            ((0, 132), (1, (1, 128))),
        ];
        for ((tokens, multiprocessors), blocks) in cases {
            assert_eq!(
                (
                    span_grid(tokens, multiprocessors),
                    few_shape(tokens, multiprocessors)
                ),
                blocks,
                "{tokens} tokens, {multiprocessors} multiprocessors"
            );
        }
    }

    #[test]
    fn batches_go_to_the_smallest_kernel_that_holds_them() {
        // (batch, decode, tokens, pages) -> (kernel, grid, threads)
        let cases = [
            ((1, true, 1, 1), (ExtendKernel::DecodeOne, 1, 32)),
            ((2, true, 2, 2), (ExtendKernel::Decode(32), 1, 32)),
            ((32, true, 32, 32), (ExtendKernel::Decode(32), 1, 32)),
            ((33, true, 33, 33), (ExtendKernel::Decode(64), 1, 64)),
            ((64, true, 64, 64), (ExtendKernel::Decode(64), 1, 64)),
            ((65, true, 65, 65), (ExtendKernel::Decode(128), 1, 128)),
            ((129, true, 129, 129), (ExtendKernel::Decode(256), 1, 256)),
            ((256, true, 256, 256), (ExtendKernel::Decode(256), 1, 256)),
            ((257, true, 257, 257), (ExtendKernel::Decode(512), 1, 512)),
            ((512, true, 512, 512), (ExtendKernel::Decode(512), 1, 512)),
            ((513, true, 513, 513), (ExtendKernel::Decode(1024), 1, 1024)),
            (
                (1024, true, 1024, 1024),
                (ExtendKernel::Decode(1024), 1, 1024),
            ),
            ((1025, true, 1025, 1025), (ExtendKernel::Grid, 5, 256)),
            ((1, false, 1, 1), (ExtendKernel::One(64), 1, 64)),
            // 2-8 requests: the same shapes built for at most 2, 4 or 8 (FEW_BOUNDS).
            ((2, false, 2, 2), (ExtendKernel::FewUpTo(2, 64), 1, 64)),
            ((3, false, 3, 3), (ExtendKernel::FewUpTo(4, 64), 1, 64)),
            ((4, false, 200, 8), (ExtendKernel::FewUpTo(4, 128), 1, 128)),
            ((5, false, 300, 20), (ExtendKernel::FewUpTo(8, 256), 1, 256)),
            ((8, false, 64, 8), (ExtendKernel::FewUpTo(8, 64), 1, 64)),
            ((9, false, 64, 9), (ExtendKernel::Few(64), 1, 64)),
            // Up to 64 tokens of up to 32 requests on two warps, up to 256 on four, up to
            // 512 on 256 threads (BENCHMARKS.md, twenty-second and twenty-third sessions).
            ((32, false, 64, 32), (ExtendKernel::Few(64), 1, 64)),
            ((32, false, 65, 32), (ExtendKernel::Few(128), 1, 128)),
            ((1, false, 256, 16), (ExtendKernel::One(128), 1, 128)),
            ((1, false, 257, 17), (ExtendKernel::One(256), 1, 256)),
            ((1, false, 512, 32), (ExtendKernel::One(256), 1, 256)),
            ((2, false, 512, 32), (ExtendKernel::FewUpTo(2, 256), 1, 256)),
            ((32, false, 512, 64), (ExtendKernel::Few(256), 1, 256)),
            // Several blocks of FEW_SPAN_TOKENS on FEW_GRID_BLOCK threads while they fit one an
            // SM (few_shape).
            ((1, false, 513, 33), (ExtendKernel::OneBlocks(128), 5, 128)),
            ((2, false, 1024, 64), (ExtendKernel::FewBlocks(128), 8, 128)),
            ((4, false, 1024, 64), (ExtendKernel::FewBlocks(128), 8, 128)),
            (
                (9, false, 4096, 256),
                (ExtendKernel::FewBlocks(128), 32, 128),
            ),
            // Up to as many requests as few_shape's blocks: on those blocks (run s64-3).
            ((5, false, 1024, 64), (ExtendKernel::FewBlocks(128), 8, 128)),
            (
                (17, false, 4096, 256),
                (ExtendKernel::FewBlocks(128), 32, 128),
            ),
            // More requests than those: the spread kernel on span_grid's blocks, where the
            // blocks that hold several plan their tokens.
            ((32, false, 1024, 64), (ExtendKernel::FewSpread, 4, 256)),
            ((32, false, 1025, 65), (ExtendKernel::FewSpread, 5, 256)),
            // 33-64 requests of up to 512 tokens: extend_few's one-block shapes, two requests
            // a lane.
            ((33, false, 33, 33), (ExtendKernel::Pairs(64), 1, 64)),
            ((64, false, 64, 64), (ExtendKernel::Pairs(64), 1, 64)),
            ((33, false, 65, 33), (ExtendKernel::Pairs(128), 1, 128)),
            ((64, false, 128, 64), (ExtendKernel::Pairs(128), 1, 128)),
            ((40, false, 256, 256), (ExtendKernel::Pairs(128), 1, 128)),
            ((40, false, 257, 257), (ExtendKernel::Pairs(256), 1, 256)),
            ((64, false, 512, 64), (ExtendKernel::Pairs(256), 1, 256)),
            ((64, false, 513, 65), (ExtendKernel::Blocks, 3, 256)),
            // Past 64 requests, two tokens a thread at most in one block (BLOCK_TOKENS;
            // BENCHMARKS.md, twentieth, thirty-fifth and fifty-third sessions).
            ((65, false, 65, 65), (ExtendKernel::Block, 1, 256)),
            ((65, false, 257, 65), (ExtendKernel::Block, 1, 256)),
            ((200, false, 512, 512), (ExtendKernel::Block, 1, 256)),
            ((200, false, 513, 513), (ExtendKernel::Blocks, 3, 256)),
            ((200, false, 1025, 1025), (ExtendKernel::Blocks, 5, 256)),
            // One block an SM (132 here) of SHORT_SPAN_TOKENS at most; past that, blocks of
            // SPAN_TOKENS.
            (
                (200, false, 132 * 256, 132),
                (ExtendKernel::Blocks, 132, 256),
            ),
            (
                (200, false, 132 * 256 + 1, 133),
                (ExtendKernel::Blocks, 67, 256),
            ),
            (
                (256, false, 1 << 17, 1 << 13),
                (ExtendKernel::Blocks, 256, 256),
            ),
            (
                (256, false, 1 << 20, 1 << 16),
                (ExtendKernel::Blocks, 264, 256),
            ),
            (
                (1, false, 4096, 4096),
                (ExtendKernel::OneBlocks(128), 32, 128),
            ),
            (
                (1, false, 1 << 14, 1 << 10),
                (ExtendKernel::OneBlocks(128), 128, 128),
            ),
            // Past one block an SM of FEW_SPAN_TOKENS, span_grid's: on FEW_GRID_BLOCK
            // threads while its blocks take SHORT_SPAN_TOKENS, on BLOCK when they take more.
            (
                (2, false, 1 << 15, 1 << 11),
                (ExtendKernel::FewBlocks(128), 128, 128),
            ),
            (
                (1, false, 1 << 16, 1 << 12),
                (ExtendKernel::OneBlocks(256), 128, 256),
            ),
            (
                (8, false, 1 << 16, 1 << 12),
                (ExtendKernel::FewBlocks(256), 128, 256),
            ),
            (
                (32, false, 1 << 20, 1 << 16),
                (ExtendKernel::FewBlocks(256), 264, 256),
            ),
            // 257-1,024 requests: blocks of 512 or 1,024 threads that each decide the call,
            // at least one (no tokens), at most one an SM (132 here).
            ((257, false, 0, 0), (ExtendKernel::BlocksWide(512), 1, 512)),
            (
                (257, false, 257, 257),
                (ExtendKernel::BlocksWide(512), 1, 512),
            ),
            (
                (300, false, 600, 600),
                (ExtendKernel::BlocksWide(512), 2, 512),
            ),
            (
                (512, false, 1 << 18, 1 << 14),
                (ExtendKernel::BlocksWide(512), 132, 512),
            ),
            (
                (513, false, 8208, 513),
                (ExtendKernel::BlocksWide(1024), 17, 1024),
            ),
            (
                (1024, false, 1 << 19, 1 << 15),
                (ExtendKernel::BlocksWide(1024), 132, 1024),
            ),
            // 1,025-2,048, plain: the ticketed kernel (by row: wide_shapes_by_row_...).
            ((1025, false, 1025, 1025), (ExtendKernel::Grid, 257, 256)),
            ((2048, false, 2048, 2048), (ExtendKernel::Grid, 256, 256)),
            ((2049, false, 2049, 2049), (ExtendKernel::Grid, 257, 256)),
            (
                (8, false, 4096, 256),
                (ExtendKernel::FewBlocks(128), 32, 128),
            ),
            (
                (16, false, 4096, 256),
                (ExtendKernel::FewBlocks(128), 32, 128),
            ),
            ((32, false, 3968, 248), (ExtendKernel::FewSpread, 16, 256)),
            ((33, false, 4096, 256), (ExtendKernel::Blocks, 16, 256)),
        ];
        // Where the device runs clusters, decodes of 1,025-4,096 requests run on one cluster
        // of 512-thread blocks; nothing else changes.
        let on_clusters = [
            (
                (1024, true, 1024, 1024),
                (ExtendKernel::Decode(1024), 1, 1024),
            ),
            (
                (1025, true, 1025, 1025),
                (ExtendKernel::DecodeCluster(4), 4, 512),
            ),
            (
                (2048, true, 2048, 1),
                (ExtendKernel::DecodeCluster(4), 4, 512),
            ),
            (
                (2049, true, 2049, 2049),
                (ExtendKernel::DecodeCluster(8), 8, 512),
            ),
            (
                (4096, true, 4096, 0),
                (ExtendKernel::DecodeCluster(8), 8, 512),
            ),
            ((4097, true, 4097, 4097), (ExtendKernel::Grid, 17, 256)),
        ];
        let without = cases.iter().map(|&case| (case, false));
        let with = cases
            .iter()
            .filter(|((batch, decode, ..), _)| !decode || *batch <= DECODE_BATCH)
            .chain(on_clusters.iter())
            .map(|&case| (case, true));
        for (((batch, decode, tokens, pages), want), clusters) in without.chain(with) {
            let device = DeviceShapes {
                clusters,
                multiprocessors: 132,
                // A plain call's shapes (`DevicePool::shapes`).
                wide: std::array::from_fn(|slot| slot < WIDE_PLAIN_BATCHES.len()),
                by_row: false,
            };
            let (kernel, grid, threads, per_block, _) =
                DevicePool::extend_shape(batch, decode, tokens, pages, device).unwrap();
            assert_eq!(
                (kernel, grid, threads),
                want,
                "batch {batch}, tokens {tokens}, clusters {clusters}"
            );
            // Every block of a deciding kernel holds the whole batch; the ticketed kernel's
            // blocks share it, and so do a cluster's.
            match kernel {
                ExtendKernel::Grid => assert!(grid as usize * per_block as usize >= batch),
                ExtendKernel::DecodeCluster(blocks) => {
                    assert_eq!(grid, blocks);
                    assert!((grid * threads) as usize >= batch);
                }
                ExtendKernel::BlocksWide(held) => {
                    assert!(per_block as usize >= batch && held as usize >= batch);
                    assert_eq!(threads, wide_threads(held));
                    assert!((1..=132).contains(&grid));
                }
                _ => assert!(per_block as usize >= batch),
            }
        }
    }

    /// By row (`DevicePool::rows_shapes`: no `Pairs`), 33-64 requests keep the
    /// request-a-thread shapes: two warps up to 64 tokens, one block of 256 threads up to
    /// `BLOCK_ROW_TOKENS`, else several; a plain call of the same shape runs two requests a
    /// lane. Calls of at most a request a block keep `span_grid` and 256 threads by row.
    #[test]
    fn extends_by_row_and_plain_differ_in_three_shapes() {
        let shape = |batch: usize, tokens: u64, by_row: bool| {
            let device = DeviceShapes {
                clusters: true,
                multiprocessors: 132,
                wide: [true; WIDE_BATCHES.len()],
                by_row,
            };
            let (kernel, grid, threads, ..) =
                DevicePool::extend_shape(batch, false, tokens, tokens, device).unwrap();
            (kernel, grid, threads)
        };
        let cases = [
            (
                (33, 33),
                (ExtendKernel::Block64, 1, 64),
                (ExtendKernel::Pairs(64), 1, 64),
            ),
            (
                (64, 64),
                (ExtendKernel::Block64, 1, 64),
                (ExtendKernel::Pairs(64), 1, 64),
            ),
            (
                (33, 65),
                (ExtendKernel::Block, 1, 256),
                (ExtendKernel::Pairs(128), 1, 128),
            ),
            (
                (64, 256),
                (ExtendKernel::Block, 1, 256),
                (ExtendKernel::Pairs(128), 1, 128),
            ),
            (
                (40, 257),
                (ExtendKernel::Blocks, 2, 256),
                (ExtendKernel::Pairs(256), 1, 256),
            ),
            (
                (64, 512),
                (ExtendKernel::Blocks, 2, 256),
                (ExtendKernel::Pairs(256), 1, 256),
            ),
            (
                (64, 513),
                (ExtendKernel::Blocks, 3, 256),
                (ExtendKernel::Blocks, 3, 256),
            ),
            (
                (65, 64),
                (ExtendKernel::Block, 1, 256),
                (ExtendKernel::Block, 1, 256),
            ),
            (
                (32, 64),
                (ExtendKernel::Few(64), 1, 64),
                (ExtendKernel::Few(64), 1, 64),
            ),
            // At most a request a block: by row span_grid's blocks on 256 threads, plain
            // few_shape's on FEW_GRID_BLOCK.
            (
                (1, 513),
                (ExtendKernel::OneBlocks(256), 3, 256),
                (ExtendKernel::OneBlocks(128), 5, 128),
            ),
            (
                (4, 1024),
                (ExtendKernel::FewBlocks(256), 4, 256),
                (ExtendKernel::FewBlocks(128), 8, 128),
            ),
            (
                (5, 1024),
                (ExtendKernel::FewSpread, 4, 256),
                (ExtendKernel::FewBlocks(128), 8, 128),
            ),
            (
                (32, 1024),
                (ExtendKernel::FewSpread, 4, 256),
                (ExtendKernel::FewSpread, 4, 256),
            ),
        ];
        for ((batch, tokens), by_row, plain) in cases {
            assert_eq!(
                shape(batch, tokens, true),
                by_row,
                "by row: {batch} x {tokens}"
            );
            assert_eq!(
                shape(batch, tokens, false),
                plain,
                "plain: {batch} x {tokens}"
            );
        }
    }
}
