//! The kernels of `kernels/pool.cu`, embedded as a fatbin (sm_80 and sm_90 machine code plus
//! compute_90 PTX, built by `scripts/build-kernels.sh` with a pinned nvcc) and loaded into
//! the pool's context by name. No CUDA toolkit is needed to build or run the library.

use std::ffi::{c_void, CStr, CString};

use cudarc::driver::sys::{self, CUfunction, CUmodule, CUstream};

use super::driver::check;
use super::pool::{
    DECODE_CLUSTERS, DECODE_THREADS, FEW_BOUNDS, FEW_GRID_THREADS, FEW_THREADS, WIDE_BATCHES,
    WIDE_PLAIN_BATCHES,
};
use crate::pool::{ErrorKind, IndexType, PoolError};

/// The fatbin built from `kernels/pool.cu` (`kernels/pool.fatbin.sha256` records its
/// sources; CI fails when they disagree).
pub(super) static FATBIN: &[u8] = include_bytes!("../../kernels/pool.fatbin");

/// Entry points with one instantiation per index type.
#[derive(Debug)]
pub(crate) struct Typed {
    pub alloc: CUfunction,
    pub extend: CUfunction,
    /// `alloc_extend` of at most 256 requests in one block, a request a thread.
    pub extend_block: CUfunction,
    /// The same for at most 64 requests and 256 tokens, in two warps.
    pub extend_block64: CUfunction,
    /// `alloc_extend` of at most 256 requests on several blocks that each decide the call.
    pub extend_blocks: CUfunction,
    /// The same on blocks that hold each of `WIDE_PLAIN_BATCHES` requests, in that order
    /// (`kvp_extend_blocks{N}_*`: 257-1,024 requests), launched with
    /// [`Kernels::wide_shared`] bytes of dynamic shared memory.
    pub extend_blocks_wide: [CUfunction; WIDE_PLAIN_BATCHES.len()],
    /// `alloc_extend` of at most 32 requests decided by one warp (`extend_few.cuh`): one
    /// block of each of `FEW_THREADS` threads (two warps, four, 256 threads), in that order,
    /// and several blocks: one request or more a block (`kvp_extend_few_blocks_{N}_*`, on
    /// each of `FEW_GRID_THREADS` threads, in that order), more requests than blocks
    /// (`kvp_extend_few_spread_*`: a block holding several plans its tokens before the
    /// verdict).
    pub extend_few: [CUfunction; FEW_THREADS.len()],
    pub extend_few_blocks: [CUfunction; FEW_GRID_THREADS.len()],
    pub extend_few_spread: CUfunction,
    /// The same shapes for exactly one request (`kvp_extend_one_{N}_*`, one block of each of
    /// `FEW_THREADS` threads, and `kvp_extend_one_blocks_{N}_*`): the batch a constant, so
    /// the kernels carry no path of several requests.
    pub extend_one: [CUfunction; FEW_THREADS.len()],
    pub extend_one_blocks: [CUfunction; FEW_GRID_THREADS.len()],
    /// The one-block shapes for at most each of `FEW_BOUNDS` requests, in that order
    /// (`kvp_extend_few{B}_{N}_*`).
    pub extend_few_bounded: [[CUfunction; FEW_THREADS.len()]; FEW_BOUNDS.len()],
    /// The one-block shapes for at most `PAIR_BATCH` requests, two a lane
    /// (`kvp_extend_pairs_{N}_*`, `extend_pairs.cuh`), one of each of `FEW_THREADS` threads.
    pub extend_pairs: [CUfunction; FEW_THREADS.len()],
    /// `alloc_decode` in one block of each of `DECODE_THREADS` threads, in that order
    /// (`kvp_decode_{N}_*`), and by request row.
    pub decode: [CUfunction; DECODE_THREADS.len()],
    pub decode_rows: [CUfunction; DECODE_THREADS.len()],
    /// `alloc_decode` of exactly one request (`kvp_decode_one_*`: `kvp_decode_32_*`'s shape,
    /// the batch a constant; by row, `decode_one_rows`).
    pub decode_one: CUfunction,
    /// `alloc_decode` on one thread block cluster of each of `DECODE_CLUSTERS` blocks, in
    /// that order (`kvp_decode_cluster{N}_*`; sm_90: see `DevicePool::decodes_on_clusters`),
    /// and by request row.
    pub decode_cluster: [CUfunction; DECODE_CLUSTERS.len()],
    pub decode_cluster_rows: [CUfunction; DECODE_CLUSTERS.len()],
    /// Frees whose page count the host knows: page ids and token-pool slots
    /// (`kvp_free_known_*`), segments of a paged pool (`kvp_free_segment_*`; grids of more
    /// blocks than one wave holds at one block an SM: `kvp_free_segment_wide_*`, two an SM).
    pub free_known: CUfunction,
    pub free_segment: CUfunction,
    pub free_segment_wide: CUfunction,
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
    /// `extend_block_rows`' shape for 33-256 requests of up to 256 tokens
    /// (`ExtendKernel::Block`): each token's request from where the requests start, which
    /// the same code made slower for extend_few's shapes (2-32 longer requests).
    pub extend_block_short_rows: CUfunction,
    /// The same three shapes and `kvp_decode_32_rows_*`'s for exactly one request
    /// (`kvp_extend_one_{warp,block,blocks}_rows_*`, `kvp_decode_one_rows_*`: the batch a
    /// constant).
    pub extend_one_warp_rows: CUfunction,
    pub extend_one_block_rows: CUfunction,
    pub extend_one_blocks_rows: CUfunction,
    pub decode_one_rows: CUfunction,
    /// `extend_blocks_wide` by request row, for each of `WIDE_BATCHES` in that order
    /// (`kvp_extend_blocks{N}_rows_*`: 257-2,048 requests), launched with
    /// [`Kernels::wide_rows_shared`] bytes.
    pub extend_blocks_wide_rows: [CUfunction; WIDE_BATCHES.len()],
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
    /// The dynamic shared memory, in bytes, of `Typed::extend_blocks_wide`'s kernels (more
    /// than a kernel may declare), as the module computed it; 0 for a kernel that needs more
    /// than the device gives a block (it is not launched: `DeviceShapes`).
    pub wide_shared: [u32; WIDE_PLAIN_BATCHES.len()],
    /// The same for `Typed::extend_blocks_wide_rows`.
    pub wide_rows_shared: [u32; WIDE_BATCHES.len()],
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
    /// Launches go out with programmatic dependent launch (`launch_shared`;
    /// `PrimaryContext::programmatic_launch`).
    programmatic: bool,
}

impl Kernels {
    /// Loads the module into the current context, with the entry points of `index_type`.
    /// `shared_optin`: the most shared memory the device gives a block; `programmatic`:
    /// launch with programmatic dependent launch (see `launch_shared`).
    pub fn load(
        index_type: IndexType,
        shared_optin: u32,
        programmatic: bool,
    ) -> Result<Self, PoolError> {
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
        let get = |name: &str| -> Result<CUfunction, PoolError> {
            let name = CString::new(name).map_err(|_| {
                PoolError::new(ErrorKind::CudaError, "a kernel name holds a NUL byte")
            })?;
            let mut function = std::ptr::null_mut();
            // SAFETY: `module` is loaded; `name` is NUL-terminated.
            check(
                unsafe { sys::cuModuleGetFunction(&mut function, module, name.as_ptr()) },
                "cuModuleGetFunction",
            )?;
            Ok(function)
        };
        let mut kernels = Self::resolve(module, &get, index_type)?;
        kernels.programmatic = programmatic;
        let mut sizes = read_wide_shared(module)?;
        let typed = &kernels.typed;
        let functions = typed
            .extend_blocks_wide
            .iter()
            .chain(&typed.extend_blocks_wide_rows);
        for (&function, bytes) in functions.zip(&mut sizes) {
            // With the kernel's own static shared memory (its scans' words).
            if u64::from(*bytes) + u64::from(static_shared(function)?) <= u64::from(shared_optin) {
                allow_shared(function, *bytes)?;
            } else {
                *bytes = 0;
            }
        }
        let (plain, rows) = sizes.split_at(WIDE_PLAIN_BATCHES.len());
        kernels.wide_shared.copy_from_slice(plain);
        kernels.wide_rows_shared.copy_from_slice(rows);
        Ok(kernels)
    }

    /// The loaded module (for its globals).
    pub fn module(&self) -> CUmodule {
        self.module
    }

    /// Whether launches go out with programmatic dependent launch (`launch_shared`).
    pub fn programmatic(&self) -> bool {
        self.programmatic
    }

    /// The entry points of `module`, each found by its name through `get`: those of
    /// `index_type` (`_i64` / `_i32`) and the untyped ones.
    fn resolve(
        module: CUmodule,
        get: Lookup<'_>,
        index_type: IndexType,
    ) -> Result<Self, PoolError> {
        let index = match index_type {
            IndexType::I64 => "i64",
            IndexType::I32 => "i32",
        };
        Ok(Self {
            module,
            typed: Typed::resolve(get, index)?,
            wide_shared: [0; WIDE_PLAIN_BATCHES.len()],
            wide_rows_shared: [0; WIDE_BATCHES.len()],
            group_end: get("kvp_group_end")?,
            release_claimed: get("kvp_release_claimed")?,
            merge: get("kvp_merge")?,
            reset: get("kvp_reset")?,
            retag: get("kvp_retag")?,
            backup: get("kvp_backup")?,
            restore: get("kvp_restore")?,
            digest: get("kvp_digest")?,
            debug_check: get("kvp_debug_check")?,
            debug_mark: get("kvp_debug_mark")?,
            page_table: get("kvp_page_table")?,
            programmatic: false,
        })
    }
}

/// How many sizes `kvp_extend_blocks_wide_shared` holds.
const WIDE_KERNELS: usize = WIDE_PLAIN_BATCHES.len() + WIDE_BATCHES.len();

/// The sizes in `kvp_extend_blocks_wide_shared` (`kernels/pool.cu`: the shared struct of each
/// of `WIDE_PLAIN_BATCHES`' kernels, then of `WIDE_BATCHES`' rows kernels), copied from the
/// module once per pool.
fn read_wide_shared(module: CUmodule) -> Result<[u32; WIDE_KERNELS], PoolError> {
    read_global(module, c"kvp_extend_blocks_wide_shared")
}

/// The `N` values of the module's global `name` (a `__device__` array of exactly that size),
/// copied to the host. `T` is a plain integer type: the bytes are copied as they are.
pub(super) fn read_global<T: Copy + Default, const N: usize>(
    module: CUmodule,
    name: &CStr,
) -> Result<[T; N], PoolError> {
    let what = name.to_string_lossy();
    let (mut ptr, mut bytes) = (0, 0);
    // SAFETY: `module` is loaded; `name` is NUL-terminated.
    check(
        unsafe { sys::cuModuleGetGlobal_v2(&mut ptr, &mut bytes, module, name.as_ptr()) },
        &format!("cuModuleGetGlobal ({what})"),
    )?;
    let mut values = [T::default(); N];
    if bytes != std::mem::size_of_val(&values) {
        return Err(PoolError::new(
            ErrorKind::CudaError,
            format!(
                "{what} has {bytes} bytes, not {}",
                std::mem::size_of_val(&values)
            ),
        ));
    }
    // SAFETY: `ptr` holds `bytes` bytes, the size of `values`.
    check(
        unsafe { sys::cuMemcpyDtoH_v2(values.as_mut_ptr().cast(), ptr, bytes) },
        &format!("cuMemcpyDtoH ({what})"),
    )?;
    Ok(values)
}

/// The static shared memory of `function`, in bytes.
fn static_shared(function: CUfunction) -> Result<u32, PoolError> {
    let mut bytes = 0;
    // SAFETY: `function` belongs to the loaded module; valid out-pointer.
    check(
        unsafe {
            sys::cuFuncGetAttribute(
                &mut bytes,
                sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES,
                function,
            )
        },
        "cuFuncGetAttribute (shared memory)",
    )?;
    Ok(u32::try_from(bytes).unwrap_or(u32::MAX))
}

/// Lets `function` be launched with `bytes` of dynamic shared memory.
fn allow_shared(function: CUfunction, bytes: u32) -> Result<(), PoolError> {
    let bytes = i32::try_from(bytes).map_err(|_| {
        PoolError::new(
            ErrorKind::CudaError,
            "a kernel's shared memory exceeds 2 GiB",
        )
    })?;
    // SAFETY: `function` belongs to the loaded module.
    check(
        unsafe {
            sys::cuFuncSetAttribute(
                function,
                sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                bytes,
            )
        },
        "cuFuncSetAttribute (the wide extend kernels' shared memory)",
    )
}

/// Finds an entry point of the module by name.
type Lookup<'a> = &'a dyn Fn(&str) -> Result<CUfunction, PoolError>;

impl Typed {
    /// The entry points instantiated per index type, `kvp_{name}_{index}`.
    fn resolve(get: Lookup<'_>, index: &str) -> Result<Self, PoolError> {
        let typed = |name: &str| get(&format!("kvp_{name}_{index}"));
        // `kvp_{stem}{size}{form}_{index}` for each of `sizes`, in their order: the kernels
        // instantiated per block (`DECODE_THREADS`, `FEW_THREADS`, `FEW_GRID_THREADS`,
        // `WIDE_BATCHES`) or cluster (`DECODE_CLUSTERS`) size.
        fn sized<const N: usize>(
            typed: &dyn Fn(&str) -> Result<CUfunction, PoolError>,
            stem: &str,
            sizes: [u32; N],
            form: &str,
        ) -> Result<[CUfunction; N], PoolError> {
            let mut functions = [std::ptr::null_mut(); N];
            for (function, size) in functions.iter_mut().zip(sizes) {
                *function = typed(&format!("{stem}{size}{form}"))?;
            }
            Ok(functions)
        }
        Ok(Self {
            alloc: typed("alloc")?,
            extend: typed("extend")?,
            extend_block: typed("extend_block")?,
            extend_block64: typed("extend_block64")?,
            extend_blocks: typed("extend_blocks")?,
            extend_blocks_wide: sized(&typed, "extend_blocks", WIDE_PLAIN_BATCHES, "")?,
            extend_few: sized(&typed, "extend_few_", FEW_THREADS, "")?,
            extend_few_blocks: sized(&typed, "extend_few_blocks_", FEW_GRID_THREADS, "")?,
            extend_few_spread: typed("extend_few_spread")?,
            extend_one: sized(&typed, "extend_one_", FEW_THREADS, "")?,
            extend_one_blocks: sized(&typed, "extend_one_blocks_", FEW_GRID_THREADS, "")?,
            extend_few_bounded: {
                let mut functions = [[std::ptr::null_mut(); FEW_THREADS.len()]; FEW_BOUNDS.len()];
                for (shapes, bound) in functions.iter_mut().zip(FEW_BOUNDS) {
                    *shapes = sized(&typed, &format!("extend_few{bound}_"), FEW_THREADS, "")?;
                }
                functions
            },
            extend_pairs: sized(&typed, "extend_pairs_", FEW_THREADS, "")?,
            decode: sized(&typed, "decode_", DECODE_THREADS, "")?,
            decode_one: typed("decode_one")?,
            decode_rows: sized(&typed, "decode_", DECODE_THREADS, "_rows")?,
            decode_cluster: sized(&typed, "decode_cluster", DECODE_CLUSTERS, "")?,
            decode_cluster_rows: sized(&typed, "decode_cluster", DECODE_CLUSTERS, "_rows")?,
            free_known: typed("free_known")?,
            free_segment: typed("free_segment")?,
            free_segment_wide: typed("free_segment_wide")?,
            free_slots_paged: typed("free_slots_paged")?,
            claim_slots_paged: typed("claim_slots_paged")?,
            rewind: typed("rewind")?,
            rows_gather: typed("rows_gather")?,
            rows_scatter: typed("rows_scatter")?,
            rows_segments: typed("rows_segments")?,
            extend_warp_rows: typed("extend_warp_rows")?,
            extend_block_rows: typed("extend_block_rows")?,
            extend_block64_rows: typed("extend_block64_rows")?,
            extend_blocks_rows: typed("extend_blocks_rows")?,
            extend_block_short_rows: typed("extend_block_short_rows")?,
            extend_one_warp_rows: typed("extend_one_warp_rows")?,
            extend_one_block_rows: typed("extend_one_block_rows")?,
            extend_one_blocks_rows: typed("extend_one_blocks_rows")?,
            decode_one_rows: typed("decode_one_rows")?,
            extend_blocks_wide_rows: sized(&typed, "extend_blocks", WIDE_BATCHES, "_rows")?,
            reserve_decode: typed("reserve_decode")?,
            reservation_step: typed("reservation_step")?,
            reservation_finish: typed("reservation_finish")?,
            reservation_unhold: typed("reservation_unhold")?,
        })
    }
}

impl Drop for Kernels {
    fn drop(&mut self) {
        // SAFETY: loaded in `load`, unloaded once (the pool binds its context first).
        unsafe { sys::cuModuleUnload(self.module) };
    }
}

/// Whether one cluster of `blocks` blocks of `threads` threads of `function` (a kernel
/// with a compile-time cluster size) can run on the device at once
/// (`cuOccupancyMaxActiveClusters`): false on devices without clusters, or where a
/// partition of the GPU leaves too few multiprocessors.
pub(crate) fn cluster_fits(function: CUfunction, blocks: u32, threads: u32) -> bool {
    let config = sys::CUlaunchConfig {
        gridDimX: blocks,
        gridDimY: 1,
        gridDimZ: 1,
        blockDimX: threads,
        blockDimY: 1,
        blockDimZ: 1,
        sharedMemBytes: 0,
        hStream: std::ptr::null_mut(),
        attrs: std::ptr::null_mut(),
        numAttrs: 0,
    };
    let mut clusters = 0;
    // SAFETY: `function` belongs to the current context's loaded module; valid pointers.
    let result = unsafe { sys::cuOccupancyMaxActiveClusters(&mut clusters, function, &config) };
    result == sys::CUresult::CUDA_SUCCESS && clusters >= 1
}

impl Kernels {
    /// Enqueues `function<<<grid, block, 0, stream>>>(args...)`. Returns as soon as the
    /// launch is queued.
    ///
    /// # Safety
    /// `function` is one of these kernels; `args` must match its parameters, each pointing
    /// to a live value of its type.
    pub(crate) unsafe fn launch(
        &self,
        function: CUfunction,
        grid: u32,
        block: u32,
        stream: CUstream,
        args: &mut [*mut c_void],
    ) -> Result<(), PoolError> {
        // SAFETY: forwarded contract.
        unsafe { self.launch_shared(function, grid, block, 0, stream, args) }
    }

    /// [`launch`](Self::launch) with `shared` bytes of dynamic shared memory.
    ///
    /// With `programmatic` (sm_90), the launch lets the kernel be scheduled while the work
    /// ahead of it on the stream finishes (programmatic dependent launch): every entry point
    /// first waits for that work to complete (`await_predecessors` in `kernels/pool.cu`), so
    /// nothing is read or written earlier, but the launch's own latency overlaps the
    /// previous kernel's end (in a CUDA graph too: capture keeps the edge programmatic).
    /// The kernels never signal their dependents early: a kernel launched after one of
    /// them with the same attribute starts once its blocks have exited, and must wait
    /// (`griddepcontrol.wait`) before reading what it wrote, as any such kernel must.
    ///
    /// # Safety
    /// As for [`launch`](Self::launch); `shared` at most what the kernel was allowed at load
    /// (`allow_shared`).
    pub(crate) unsafe fn launch_shared(
        &self,
        function: CUfunction,
        grid: u32,
        block: u32,
        shared: u32,
        stream: CUstream,
        args: &mut [*mut c_void],
    ) -> Result<(), PoolError> {
        if !self.programmatic {
            // SAFETY: forwarded contract; the pool's context is current.
            return check(
                unsafe {
                    sys::cuLaunchKernel(
                        function,
                        grid,
                        1,
                        1,
                        block,
                        1,
                        1,
                        shared,
                        stream,
                        args.as_mut_ptr(),
                        std::ptr::null_mut(),
                    )
                },
                "cuLaunchKernel",
            );
        }
        // SAFETY: the attribute is plain data, all zeros a valid value of it.
        let mut attribute: sys::CUlaunchAttribute = unsafe { std::mem::zeroed() };
        attribute.id =
            sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
        attribute.value.programmaticStreamSerializationAllowed = 1;
        let config = sys::CUlaunchConfig {
            gridDimX: grid,
            gridDimY: 1,
            gridDimZ: 1,
            blockDimX: block,
            blockDimY: 1,
            blockDimZ: 1,
            sharedMemBytes: shared,
            hStream: stream,
            attrs: &mut attribute,
            numAttrs: 1,
        };
        // SAFETY: forwarded contract; `config` and its attribute live through the call; the
        // pool's context is current.
        check(
            unsafe {
                sys::cuLaunchKernelEx(&config, function, args.as_mut_ptr(), std::ptr::null_mut())
            },
            "cuLaunchKernelEx",
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    /// Every entry point the loader asks for, of both index types, is named in the embedded
    /// fatbin (its ELF string tables hold the names as NUL-terminated strings), so a kernel
    /// renamed or left out fails here rather than at the first pool on a GPU.
    #[test]
    fn every_entry_point_the_loader_asks_for_is_in_the_fatbin() {
        let asked = RefCell::new(Vec::new());
        let get = |name: &str| -> Result<CUfunction, PoolError> {
            let wanted = format!("{name}\0");
            assert!(
                FATBIN.windows(wanted.len()).any(|w| w == wanted.as_bytes()),
                "{name} is not in kernels/pool.fatbin"
            );
            asked.borrow_mut().push(name.to_owned());
            Ok(std::ptr::null_mut())
        };
        for index_type in [IndexType::I64, IndexType::I32] {
            let kernels = Kernels::resolve(std::ptr::null_mut(), &get, index_type).unwrap();
            // No module was loaded: nothing to unload.
            std::mem::forget(kernels);
        }
        let asked = asked.into_inner();
        // The wide extend kernels' shared memory is read from this global at load.
        let global = b"kvp_extend_blocks_wide_shared\0";
        assert!(FATBIN.windows(global.len()).any(|w| w == global));
        for name in [
            "kvp_extend_blocks512_i64",
            "kvp_extend_blocks1024_i32",
            "kvp_extend_blocks512_rows_i32",
            "kvp_extend_blocks1024_rows_i64",
            "kvp_extend_blocks2048_rows_i32",
            "kvp_extend_few_256_i64",
            "kvp_extend_few_blocks_128_i32",
            "kvp_extend_few_blocks_256_i64",
            "kvp_extend_few_spread_i64",
            "kvp_extend_one_64_i32",
            "kvp_extend_one_256_i64",
            "kvp_extend_one_blocks_128_i64",
            "kvp_extend_one_blocks_256_i32",
            "kvp_extend_few2_64_i64",
            "kvp_extend_few4_128_i32",
            "kvp_extend_few8_256_i64",
            "kvp_extend_pairs_64_i32",
            "kvp_extend_pairs_256_i64",
            "kvp_decode_32_i64",
            "kvp_decode_one_i32",
            "kvp_decode_one_rows_i64",
            "kvp_extend_one_warp_rows_i32",
            "kvp_extend_block_short_rows_i64",
            "kvp_extend_one_blocks_rows_i64",
            "kvp_decode_1024_rows_i32",
            "kvp_decode_cluster8_i64",
            "kvp_decode_cluster4_i32",
            "kvp_decode_cluster8_rows_i32",
            "kvp_page_table",
            "kvp_free_segment_wide_i64",
        ] {
            assert!(asked.iter().any(|n| n == name), "{name} was not asked for");
        }
        // No plain kernel of 2,048 requests (by row only), none asked for.
        assert!(!asked
            .iter()
            .any(|n| n.starts_with("kvp_extend_blocks2048_i")));
        // Per index type: 29 typed entry points, 2 x DECODE_THREADS decode kernels,
        // 2 x DECODE_CLUSTERS cluster decode kernels, FEW_THREADS one-block extend_few
        // kernels for each of 32 requests, one, FEW_BOUNDS and two a lane, FEW_GRID_THREADS
        // several-block ones for each of 32 requests and one, WIDE_PLAIN_BATCHES +
        // WIDE_BATCHES wide extend kernels, and the 11 others.
        assert_eq!(
            asked.len(),
            2 * (29
                + 2 * FEW_GRID_THREADS.len()
                + WIDE_KERNELS
                + 2 * DECODE_THREADS.len()
                + 2 * DECODE_CLUSTERS.len()
                + (3 + FEW_BOUNDS.len()) * FEW_THREADS.len()
                + 11)
        );
    }

    /// Every entry point of the kernels' sources first waits for the work ahead of it
    /// (`await_predecessors`): the library launches them all with programmatic dependent
    /// launch (`Kernels::launch_shared`), so one that touched memory before the wait could
    /// read inputs the previous kernel has not finished writing.
    #[test]
    fn every_entry_point_first_awaits_its_predecessors() {
        let sources = [
            ("pool.cu", include_str!("../../kernels/pool.cu")),
            ("digest.cuh", include_str!("../../kernels/digest.cuh")),
        ];
        let mut entries = 0;
        for (file, text) in sources {
            for (at, _) in text.match_indices("extern \"C\" __global__") {
                let body = at + text[at..].find('{').expect("an entry point has a body") + 1;
                // The body's first statement, past blanks and macro line continuations.
                let first: String = text[body..]
                    .chars()
                    .skip_while(|&c| c.is_whitespace() || c == '\\')
                    .take_while(|&c| c != ';')
                    .collect();
                let name: String = text[at..body]
                    .split(|c: char| c == '(' || c.is_whitespace())
                    .rfind(|word| word.starts_with("kvp_"))
                    .unwrap_or("?")
                    .to_string();
                assert!(
                    first == "await_predecessors()" || first == "kvp::await_predecessors()",
                    "{file}: {name} starts with `{first}`, not await_predecessors()"
                );
                entries += 1;
            }
        }
        // (pool.cu's entry points, most defined once per index type by a macro, and the
        // digest's.)
        assert_eq!(entries, 45);
    }
}
