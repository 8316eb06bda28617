//! The library's side of `kvp_abi` (`kernels/abi.cuh`): what it restates about the embedded
//! kernels — the layouts it mirrors, the constants it sizes launches, grids and buffers by,
//! and the fault codes it decodes — compared entry by entry with the module's table when a pool loads the module. A
//! change made on one side alone (a field, a block size, a cap on what one block takes)
//! would otherwise show only as a kernel reading the wrong offsets or writing past a buffer.

use std::mem::{align_of, offset_of, size_of};

use cudarc::driver::sys::CUmodule;

use super::reservation::RES_BLOCK;
use super::rows::{TableArgs, ROWS_BLOCK, SCATTER_BLOCK, SCATTER_TOKENS};
use super::{
    BLOCK, CLUSTER_BLOCK, FEW_GRID_BLOCK, FOUR_WARP_TOKENS, FREE_BLOCK, PAIR_BATCH, SEGMENT_RUN,
    SORT_CAP, SPAN_TOKENS, STAGE_CAP, WARP_TOKENS,
};
use crate::cuda::kernels::read_global;
use crate::cuda::layout::{
    err, Call, Cursor, DeviceOp, Header, HostRecord, View, CALL_IN_GROUP, CALL_MIRROR,
    CALL_REPLAYABLE, CLAIM_CHUNKS, FREE_PAGE_IDS, FREE_SEGMENT, FREE_SLOTS, NOT_POW2, NO_HEAD_HINT,
    TAG_LIMIT,
};
use crate::pool::reservation::MAX_RESERVED_STEPS;
use crate::pool::{ErrorKind, PoolError};

/// The module's table.
const GLOBAL: &std::ffi::CStr = c"kvp_abi";

/// How many entries `kvp_abi` holds.
const ENTRY_COUNT: usize = 89;

/// Each entry as the library has it, with the kernels' name for it, in `kvp_abi`'s order.
pub(super) fn entries() -> [(&'static str, u64); ENTRY_COUNT] {
    let us = |value: usize| value as u64;
    [
        ("sizeof(View)", us(size_of::<View>())),
        ("offsetof(View, record)", us(offset_of!(View, record))),
        ("offsetof(View, size)", us(offset_of!(View, size))),
        (
            "offsetof(View, page_shift)",
            us(offset_of!(View, page_shift)),
        ),
        ("sizeof(Call)", us(size_of::<Call>())),
        ("offsetof(Call, seq)", us(offset_of!(Call, seq))),
        ("sizeof(Cursor)", us(size_of::<Cursor>())),
        ("alignof(Cursor)", us(align_of::<Cursor>())),
        ("sizeof(Header)", us(size_of::<Header>())),
        ("offsetof(Header, fault)", us(offset_of!(Header, fault))),
        (
            "offsetof(Header, op_error)",
            us(offset_of!(Header, op_error)),
        ),
        (
            "offsetof(Header, chunk_claims)",
            us(offset_of!(Header, chunk_claims)),
        ),
        ("sizeof(HostRecord)", us(size_of::<HostRecord>())),
        (
            "offsetof(HostRecord, mirror_free)",
            us(offset_of!(HostRecord, mirror)),
        ),
        ("sizeof(TableArgs)", us(size_of::<TableArgs>())),
        (
            "offsetof(TableArgs, rows_in_table)",
            us(offset_of!(TableArgs, rows_in_table)),
        ),
        ("offsetof(TableArgs, rows)", us(offset_of!(TableArgs, rows))),
        // A page word's tag takes the bits its kind leaves.
        ("KIND_BITS", u64::from(32 - TAG_LIMIT.count_ones())),
        ("NOT_POW2", u64::from(NOT_POW2)),
        ("CALL_MIRROR", u64::from(CALL_MIRROR)),
        ("CALL_IN_GROUP", u64::from(CALL_IN_GROUP)),
        ("CLAIM_CHUNKS", u64::from(CLAIM_CHUNKS)),
        ("FREE_PAGE_IDS", u64::from(FREE_PAGE_IDS)),
        ("FREE_SLOTS", u64::from(FREE_SLOTS)),
        ("FREE_SEGMENT", u64::from(FREE_SEGMENT)),
        ("OP_ALLOC", DeviceOp::Alloc as u64),
        ("OP_ALLOC_EXTEND", DeviceOp::AllocExtend as u64),
        ("OP_ALLOC_DECODE", DeviceOp::AllocDecode as u64),
        ("OP_FREE_INDICES", DeviceOp::FreeIndices as u64),
        ("OP_FREE_PAGES", DeviceOp::FreePages as u64),
        ("OP_FREE_SEGMENT", DeviceOp::FreeSegment as u64),
        ("OP_GROUP_END", DeviceOp::GroupEnd as u64),
        ("OP_MERGE", DeviceOp::Merge as u64),
        ("OP_REWIND", DeviceOp::Rewind as u64),
        ("EXTEND_BLOCK", u64::from(BLOCK)),
        ("FEW_GRID_BLOCK", u64::from(FEW_GRID_BLOCK)),
        ("STAGE_CAP", STAGE_CAP),
        ("SPAN_TOKENS", SPAN_TOKENS),
        ("FewBlockTokens<64>", WARP_TOKENS),
        ("FewBlockTokens<128>", FOUR_WARP_TOKENS),
        ("PAIR_BATCH", PAIR_BATCH as u64),
        ("CLUSTER_BLOCK", u64::from(CLUSTER_BLOCK)),
        ("FREE_BLOCK", u64::from(FREE_BLOCK)),
        ("SORT_CAP", SORT_CAP),
        ("SEGMENT_RUN", u64::from(SEGMENT_RUN)),
        ("ROWS_BLOCK", u64::from(ROWS_BLOCK)),
        ("SCATTER_BLOCK", u64::from(SCATTER_BLOCK)),
        ("SCATTER_TOKENS", SCATTER_TOKENS),
        ("RES_BLOCK", u64::from(RES_BLOCK)),
        ("RES_MAX_STEPS", u64::from(MAX_RESERVED_STEPS)),
        ("ERR_RESERVED", err::RESERVED),
        ("ERR_OUT_OF_RANGE", err::OUT_OF_RANGE),
        ("ERR_ALREADY_FREE", err::ALREADY_FREE),
        ("ERR_TWICE_IN_CALL", err::TWICE_IN_CALL),
        ("ERR_PENDING", err::PENDING),
        ("ERR_NOT_ALLOCATED", err::NOT_ALLOCATED),
        ("ERR_LAST_LOC", err::LAST_LOC),
        ("ERR_LAST_LOC_EMPTY", err::LAST_LOC_EMPTY),
        ("ERR_SHARED_PAGE", err::SHARED_PAGE),
        ("ERR_UNALIGNED", err::UNALIGNED),
        ("ERR_NOT_CONTIGUOUS", err::NOT_CONTIGUOUS),
        ("ERR_SHORTAGE", err::SHORTAGE),
        ("ERR_FILL", err::FILL),
        ("ERR_LENGTHS", err::LENGTHS),
        ("ERR_REWIND_AHEAD", err::REWIND_AHEAD),
        ("ERR_REWIND_TWICE", err::REWIND_TWICE),
        ("ERR_UNORDERED", err::UNORDERED),
        ("ERR_ROW", err::ROW),
        ("ERR_ROW_TWICE", err::ROW_TWICE),
        ("ERR_ROW_LEN", err::ROW_LEN),
        ("ERR_RES_OVERRUN", err::RES_OVERRUN),
        ("ERR_RES_STEPS", err::RES_STEPS),
        ("ERR_RES_FINISHED", err::RES_FINISHED),
        ("ERR_RES_PAGE", err::RES_PAGE),
        ("ERR_RES_REWIND", err::RES_REWIND),
        ("ERR_HELD", err::HELD),
        ("ERR_SNAPSHOT_FAULTED", err::SNAPSHOT_FAULTED),
        ("offsetof(Cursor, faulted)", us(offset_of!(Cursor, faulted))),
        ("offsetof(Cursor, runs)", us(offset_of!(Cursor, runs))),
        ("offsetof(Cursor, writer)", us(offset_of!(Cursor, writer))),
        ("offsetof(Call, runs)", us(offset_of!(Call, runs))),
        ("CALL_REPLAYABLE", u64::from(CALL_REPLAYABLE)),
        ("ERR_OUT_OF_TURN", err::OUT_OF_TURN),
        ("ERR_REPLAYED", err::REPLAYED),
        ("offsetof(Header, epoch)", us(offset_of!(Header, epoch))),
        ("ERR_RES_ENDED", err::RES_ENDED),
        ("ERR_RES_REUSED", err::RES_REUSED),
        ("offsetof(Call, head_hint)", us(offset_of!(Call, head_hint))),
        ("NO_HEAD_HINT", u64::from(NO_HEAD_HINT)),
    ]
}

/// Whether the kernels' table (`found`, `kvp_abi` as read) is the library's: the first
/// entry that differs, named with both values, otherwise.
pub(super) fn compare(found: &[u64]) -> Result<(), PoolError> {
    let mismatch = |text: String| {
        PoolError::new(
            ErrorKind::CudaError,
            format!(
                "the embedded kernels do not match this library ({text}): rebuild \
                 kernels/pool.fatbin from the same sources (scripts/build-kernels.sh)"
            ),
        )
    };
    if found.len() != ENTRY_COUNT {
        return Err(mismatch(format!(
            "kvp_abi has {} entries, the library expects {ENTRY_COUNT}",
            found.len()
        )));
    }
    for ((name, ours), &theirs) in entries().iter().zip(found) {
        if *ours != theirs {
            return Err(mismatch(format!(
                "{name} is {theirs} in the kernels but {ours} in the library"
            )));
        }
    }
    Ok(())
}

/// Reads `kvp_abi` from the loaded `module` and compares it (see [`compare`]).
pub(super) fn check_module(module: CUmodule) -> Result<(), PoolError> {
    let found: [u64; ENTRY_COUNT] = read_global(module, GLOBAL)?;
    compare(&found)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cuda::kernels::FATBIN;

    /// `symbol`'s initial bytes in every ELF image of the fatbin (its cubins, one per
    /// target architecture; little-endian ELF64, as nvcc writes them).
    fn symbol_in_cubins(fatbin: &[u8], symbol: &str) -> Vec<Vec<u8>> {
        let u16_at = |b: &[u8], at: usize| u16::from_le_bytes(b[at..at + 2].try_into().unwrap());
        let u32_at = |b: &[u8], at: usize| u32::from_le_bytes(b[at..at + 4].try_into().unwrap());
        let u64_at = |b: &[u8], at: usize| {
            usize::try_from(u64::from_le_bytes(b[at..at + 8].try_into().unwrap())).unwrap()
        };
        let mut found = Vec::new();
        let mut start = 0;
        while let Some(at) = fatbin[start..].windows(4).position(|w| w == b"\x7fELF") {
            let elf = &fatbin[start + at..];
            start += at + 4;
            // ELF64, little-endian, EM_CUDA (190).
            if elf[4] != 2 || elf[5] != 1 || u16_at(elf, 18) != 190 {
                continue;
            }
            let (table, entry_size, sections) =
                (u64_at(elf, 0x28), u16_at(elf, 0x3a), u16_at(elf, 0x3c));
            // Section k's header: type at 4, file offset at 24, size at 32, link at 40.
            let header = |k: usize| table + k * usize::from(entry_size);
            for k in 0..usize::from(sections) {
                // SHT_SYMTAB (2): 24-byte symbols, named in the linked string table.
                if u32_at(elf, header(k) + 4) != 2 {
                    continue;
                }
                let (symbols, size) = (u64_at(elf, header(k) + 24), u64_at(elf, header(k) + 32));
                let names = u64_at(elf, header(u32_at(elf, header(k) + 40) as usize) + 24);
                for s in (symbols..symbols + size).step_by(24) {
                    let name_at = names + u32_at(elf, s) as usize;
                    let name_end = name_at + elf[name_at..].iter().position(|&c| c == 0).unwrap();
                    if &elf[name_at..name_end] != symbol.as_bytes() {
                        continue;
                    }
                    // Its section, its offset there and its size.
                    let (index, value, bytes) = (
                        usize::from(u16_at(elf, s + 6)),
                        u64_at(elf, s + 8),
                        u64_at(elf, s + 16),
                    );
                    let data = u64_at(elf, header(index) + 24) + value;
                    found.push(elf[data..data + bytes].to_vec());
                }
            }
        }
        found
    }

    #[test]
    fn every_cubin_of_the_embedded_fatbin_holds_the_librarys_table() {
        let tables = symbol_in_cubins(FATBIN, "kvp_abi");
        // sm_80 and sm_90 (the compute_90 PTX is compressed, and its table is the same
        // source's).
        assert_eq!(tables.len(), 2, "kvp_abi in {} cubins, not 2", tables.len());
        for bytes in tables {
            let values: Vec<u64> = bytes
                .chunks_exact(8)
                .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
                .collect();
            if let Err(e) = compare(&values) {
                panic!("{e}");
            }
        }
    }

    #[test]
    fn a_differing_entry_is_named_with_both_values() {
        let mut values: Vec<u64> = entries().iter().map(|&(_, v)| v).collect();
        assert!(compare(&values).is_ok());
        let at = entries()
            .iter()
            .position(|&(name, _)| name == "SPAN_TOKENS")
            .unwrap();
        values[at] = 1024;
        let e = compare(&values).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::CudaError);
        assert!(
            e.message()
                .contains("SPAN_TOKENS is 1024 in the kernels but 512 in the library"),
            "{}",
            e.message()
        );
        values.pop();
        let e = compare(&values).unwrap_err();
        let short = format!(
            "kvp_abi has {} entries, the library expects {ENTRY_COUNT}",
            ENTRY_COUNT - 1
        );
        assert!(e.message().contains(&short), "{}", e.message());
    }

    #[test]
    fn names_are_distinct() {
        let names: std::collections::HashSet<_> = entries().iter().map(|&(n, _)| n).collect();
        assert_eq!(names.len(), ENTRY_COUNT);
    }
}
