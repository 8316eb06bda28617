//! The kernels of `kernels/pool.cu`, embedded as a fatbin (sm_80 and sm_90 machine code plus
//! compute_90 PTX, built by `scripts/build-kernels.sh` with a pinned nvcc) and loaded into
//! the pool's context by name. No CUDA toolkit is needed to build or run the library.

use std::ffi::{c_void, CStr};

use cudarc::driver::sys::{self, CUfunction, CUmodule, CUstream};

use super::driver::check;
use crate::pool::{IndexType, PoolError};

/// The fatbin built from `kernels/pool.cu` (`kernels/pool.fatbin.sha256` records its
/// sources; CI fails when they disagree).
static FATBIN: &[u8] = include_bytes!("../../kernels/pool.fatbin");

/// Entry points with one instantiation per index type.
#[derive(Debug)]
pub(crate) struct Typed {
    pub alloc: CUfunction,
    pub extend: CUfunction,
    /// `alloc_extend` / `alloc_decode` of at most 32 requests in one warp.
    pub extend_warp: CUfunction,
    /// `alloc_extend` / `alloc_decode` of at most 256 requests in one block.
    pub extend_block: CUfunction,
    /// The same for at most 64 requests and 256 tokens, in two warps.
    pub extend_block64: CUfunction,
    /// `alloc_extend` of at most 256 requests on several blocks that each decide the call.
    pub extend_blocks: CUfunction,
    /// `alloc_decode` of up to 32, 64, 128, 256, 512 and 1,024 requests in one block of that
    /// many threads (`kvp_decode_{N}_*`; `pool::DECODE_THREADS`), and by request row.
    pub decode: [CUfunction; 6],
    pub decode_rows: [CUfunction; 6],
    /// Frees whose page count the host knows: page ids and token-pool slots
    /// (`kvp_free_known_*`), segments of a paged pool (`kvp_free_segment_*`).
    pub free_known: CUfunction,
    pub free_segment: CUfunction,
    pub free_slots_paged: CUfunction,
    /// The first kernel of a large paged free by index: claims and counts the claimed pages
    /// per chunk of the page map (then [`Kernels::release_claimed`]).
    pub claim_slots_paged: CUfunction,
    pub rewind: CUfunction,
    /// Request-to-token tables (`kernels/rows.cuh`): last_loc and token offsets from the
    /// table, slots into the table, segments of rows laid out for `free_known`.
    pub rows_gather: CUfunction,
    pub rows_scatter: CUfunction,
    pub rows_segments: CUfunction,
    /// `extend_warp` / `extend_block` by request row, in one kernel (the table checked,
    /// read and written by the allocation kernel itself).
    pub extend_warp_rows: CUfunction,
    pub extend_block_rows: CUfunction,
    pub extend_block64_rows: CUfunction,
    pub extend_blocks_rows: CUfunction,
    /// Decode reservations (`kernels/reservation.cuh`): the reserve, one step (capturable),
    /// the finish, the end of an unfinished reservation's holds.
    pub reserve_decode: CUfunction,
    pub reservation_step: CUfunction,
    pub reservation_finish: CUfunction,
    pub reservation_unhold: CUfunction,
}

/// The module and its entry points, loaded into one context.
#[derive(Debug)]
pub(crate) struct Kernels {
    module: CUmodule,
    pub typed: Typed,
    pub group_end: CUfunction,
    /// A large paged free by index, after the claim: the claimed pages released in ascending
    /// order, a block per chunk of the page map.
    pub release_claimed: CUfunction,
    pub merge: CUfunction,
    pub reset: CUfunction,
    pub retag: CUfunction,
    pub backup: CUfunction,
    pub restore: CUfunction,
    /// The state digest (`kernels/digest.cuh`).
    pub digest: CUfunction,
    /// The stream-order debug check (`stream_order.rs`).
    pub debug_check: CUfunction,
    pub debug_mark: CUfunction,
    /// FlashInfer page tables of table rows (no pool state).
    pub page_table: CUfunction,
}

impl Kernels {
    /// Loads the module into the current context, with the entry points of `index_type`.
    pub fn load(index_type: IndexType) -> Result<Self, PoolError> {
        // The driver reads the image during the call only; copy it to an aligned buffer.
        let mut image = vec![0u64; FATBIN.len().div_ceil(8)];
        // SAFETY: `image` has at least `FATBIN.len()` bytes.
        unsafe {
            std::ptr::copy_nonoverlapping(
                FATBIN.as_ptr(),
                image.as_mut_ptr().cast::<u8>(),
                FATBIN.len(),
            )
        };
        let mut module = std::ptr::null_mut();
        // SAFETY: a valid fatbin image; the pool's context is current.
        check(
            unsafe { sys::cuModuleLoadData(&mut module, image.as_ptr().cast::<c_void>()) },
            "cuModuleLoadData (the embedded kernels: is the GPU older than sm_80?)",
        )?;
        let get = |name: &CStr| -> Result<CUfunction, PoolError> {
            let mut function = std::ptr::null_mut();
            // SAFETY: `module` is loaded; `name` is NUL-terminated.
            check(
                unsafe { sys::cuModuleGetFunction(&mut function, module, name.as_ptr()) },
                "cuModuleGetFunction",
            )?;
            Ok(function)
        };
        let typed = match index_type {
            IndexType::I64 => Typed {
                alloc: get(c"kvp_alloc_i64")?,
                extend: get(c"kvp_extend_i64")?,
                extend_warp: get(c"kvp_extend_warp_i64")?,
                extend_block: get(c"kvp_extend_block_i64")?,
                extend_block64: get(c"kvp_extend_block64_i64")?,
                extend_blocks: get(c"kvp_extend_blocks_i64")?,
                decode: [
                    get(c"kvp_decode_32_i64")?,
                    get(c"kvp_decode_64_i64")?,
                    get(c"kvp_decode_128_i64")?,
                    get(c"kvp_decode_256_i64")?,
                    get(c"kvp_decode_512_i64")?,
                    get(c"kvp_decode_1024_i64")?,
                ],
                decode_rows: [
                    get(c"kvp_decode_32_rows_i64")?,
                    get(c"kvp_decode_64_rows_i64")?,
                    get(c"kvp_decode_128_rows_i64")?,
                    get(c"kvp_decode_256_rows_i64")?,
                    get(c"kvp_decode_512_rows_i64")?,
                    get(c"kvp_decode_1024_rows_i64")?,
                ],
                free_known: get(c"kvp_free_known_i64")?,
                free_segment: get(c"kvp_free_segment_i64")?,
                free_slots_paged: get(c"kvp_free_slots_paged_i64")?,
                claim_slots_paged: get(c"kvp_claim_slots_paged_i64")?,
                rewind: get(c"kvp_rewind_i64")?,
                rows_gather: get(c"kvp_rows_gather_i64")?,
                rows_scatter: get(c"kvp_rows_scatter_i64")?,
                rows_segments: get(c"kvp_rows_segments_i64")?,
                extend_warp_rows: get(c"kvp_extend_warp_rows_i64")?,
                extend_block_rows: get(c"kvp_extend_block_rows_i64")?,
                extend_block64_rows: get(c"kvp_extend_block64_rows_i64")?,
                extend_blocks_rows: get(c"kvp_extend_blocks_rows_i64")?,
                reserve_decode: get(c"kvp_reserve_decode_i64")?,
                reservation_step: get(c"kvp_reservation_step_i64")?,
                reservation_finish: get(c"kvp_reservation_finish_i64")?,
                reservation_unhold: get(c"kvp_reservation_unhold_i64")?,
            },
            IndexType::I32 => Typed {
                alloc: get(c"kvp_alloc_i32")?,
                extend: get(c"kvp_extend_i32")?,
                extend_warp: get(c"kvp_extend_warp_i32")?,
                extend_block: get(c"kvp_extend_block_i32")?,
                extend_block64: get(c"kvp_extend_block64_i32")?,
                extend_blocks: get(c"kvp_extend_blocks_i32")?,
                decode: [
                    get(c"kvp_decode_32_i32")?,
                    get(c"kvp_decode_64_i32")?,
                    get(c"kvp_decode_128_i32")?,
                    get(c"kvp_decode_256_i32")?,
                    get(c"kvp_decode_512_i32")?,
                    get(c"kvp_decode_1024_i32")?,
                ],
                decode_rows: [
                    get(c"kvp_decode_32_rows_i32")?,
                    get(c"kvp_decode_64_rows_i32")?,
                    get(c"kvp_decode_128_rows_i32")?,
                    get(c"kvp_decode_256_rows_i32")?,
                    get(c"kvp_decode_512_rows_i32")?,
                    get(c"kvp_decode_1024_rows_i32")?,
                ],
                free_known: get(c"kvp_free_known_i32")?,
                free_segment: get(c"kvp_free_segment_i32")?,
                free_slots_paged: get(c"kvp_free_slots_paged_i32")?,
                claim_slots_paged: get(c"kvp_claim_slots_paged_i32")?,
                rewind: get(c"kvp_rewind_i32")?,
                rows_gather: get(c"kvp_rows_gather_i32")?,
                rows_scatter: get(c"kvp_rows_scatter_i32")?,
                rows_segments: get(c"kvp_rows_segments_i32")?,
                extend_warp_rows: get(c"kvp_extend_warp_rows_i32")?,
                extend_block_rows: get(c"kvp_extend_block_rows_i32")?,
                extend_block64_rows: get(c"kvp_extend_block64_rows_i32")?,
                extend_blocks_rows: get(c"kvp_extend_blocks_rows_i32")?,
                reserve_decode: get(c"kvp_reserve_decode_i32")?,
                reservation_step: get(c"kvp_reservation_step_i32")?,
                reservation_finish: get(c"kvp_reservation_finish_i32")?,
                reservation_unhold: get(c"kvp_reservation_unhold_i32")?,
            },
        };
        Ok(Self {
            module,
            typed,
            group_end: get(c"kvp_group_end")?,
            release_claimed: get(c"kvp_release_claimed")?,
            merge: get(c"kvp_merge")?,
            reset: get(c"kvp_reset")?,
            retag: get(c"kvp_retag")?,
            backup: get(c"kvp_backup")?,
            restore: get(c"kvp_restore")?,
            digest: get(c"kvp_digest")?,
            debug_check: get(c"kvp_debug_check")?,
            debug_mark: get(c"kvp_debug_mark")?,
            page_table: get(c"kvp_page_table")?,
        })
    }
}

impl Drop for Kernels {
    fn drop(&mut self) {
        // SAFETY: loaded in `load`, unloaded once (the pool binds its context first).
        unsafe { sys::cuModuleUnload(self.module) };
    }
}

/// Enqueues `function<<<grid, block, 0, stream>>>(args...)`. Returns as soon as the launch
/// is queued.
///
/// # Safety
/// `args` must match the kernel's parameters, each pointing to a live value of its type.
pub(crate) unsafe fn launch(
    function: CUfunction,
    grid: u32,
    block: u32,
    stream: CUstream,
    args: &mut [*mut c_void],
) -> Result<(), PoolError> {
    // SAFETY: forwarded contract; the pool's context is current.
    check(
        unsafe {
            sys::cuLaunchKernel(
                function,
                grid,
                1,
                1,
                block,
                1,
                1,
                0,
                stream,
                args.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        },
        "cuLaunchKernel",
    )
}
