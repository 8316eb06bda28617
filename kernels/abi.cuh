// What the library restates about these kernels, as one table: the layouts it mirrors field
// for field (src/cuda/layout.rs, rows.rs) and the constants it sizes launches, grids and
// buffers by (src/cuda/pool.rs and its modules), and the fault codes it decodes (layout.rs).
// A side changed alone would let a kernel read a View at the wrong offsets, or a block write
// past shared memory or past the part of `out` the host planned for it, or a fault be
// reported as another, with nothing to say so. So the host compares this table
// with its own, entry by entry and in this order (src/cuda/abi.rs: `entries`), when it loads
// the module, and refuses the pool if one differs; a CPU test reads the table from the
// fatbin's cubins, so that CI fails first. Included last by pool.cu: every constant is
// defined by then. (Only data: no kernel's code changes with it.)
#pragma once
#include <stddef.h>

namespace kvp {

extern "C" __device__ const unsigned long long kvp_abi[] = {
    // Layouts (kernels/pool_state.cuh, req_table.cuh).
    sizeof(View),
    offsetof(View, record),
    offsetof(View, size),
    offsetof(View, page_shift),
    sizeof(Call),
    offsetof(Call, seq),
    sizeof(Cursor),
    alignof(Cursor),
    sizeof(Header),
    offsetof(Header, fault),
    offsetof(Header, op_error),
    offsetof(Header, chunk_claims),
    sizeof(HostRecord),
    offsetof(HostRecord, mirror_free),
    sizeof(TableArgs),
    offsetof(TableArgs, rows_in_table),
    offsetof(TableArgs, rows),
    // Words and flags.
    KIND_BITS,
    NOT_POW2,
    CALL_MIRROR,
    CALL_IN_GROUP,
    CLAIM_CHUNKS,
    FREE_PAGE_IDS,
    FREE_SLOTS,
    FREE_SEGMENT,
    OP_ALLOC,
    OP_ALLOC_EXTEND,
    OP_ALLOC_DECODE,
    OP_FREE_INDICES,
    OP_FREE_PAGES,
    OP_FREE_SEGMENT,
    OP_GROUP_END,
    OP_MERGE,
    OP_REWIND,
    // Launch shapes and the most a block takes.
    EXTEND_BLOCK,
    FEW_GRID_BLOCK,
    STAGE_CAP,
    SPAN_TOKENS,
    FewBlockTokens<64>::value,
    FewBlockTokens<128>::value,
    PAIR_BATCH,
    CLUSTER_BLOCK,
    FREE_BLOCK,
    SORT_CAP,
    SEGMENT_RUN,
    ROWS_BLOCK,
    SCATTER_BLOCK,
    SCATTER_TOKENS,
    RES_BLOCK,
    RES_MAX_STEPS,
    // What a fault record's code says (pool_state.cuh, req_table.cuh, reservation.cuh).
    ERR_RESERVED,
    ERR_OUT_OF_RANGE,
    ERR_ALREADY_FREE,
    ERR_TWICE_IN_CALL,
    ERR_PENDING,
    ERR_NOT_ALLOCATED,
    ERR_LAST_LOC,
    ERR_LAST_LOC_EMPTY,
    ERR_SHARED_PAGE,
    ERR_UNALIGNED,
    ERR_NOT_CONTIGUOUS,
    ERR_SHORTAGE,
    ERR_FILL,
    ERR_LENGTHS,
    ERR_REWIND_AHEAD,
    ERR_REWIND_TWICE,
    ERR_UNORDERED,
    ERR_ROW,
    ERR_ROW_TWICE,
    ERR_ROW_LEN,
    ERR_RES_OVERRUN,
    ERR_RES_STEPS,
    ERR_RES_FINISHED,
    ERR_RES_PAGE,
    ERR_RES_REWIND,
    ERR_HELD,
    ERR_SNAPSHOT_FAULTED,
    offsetof(Cursor, faulted),
    // The turn check (pool.cu: commit).
    offsetof(Cursor, runs),
    offsetof(Cursor, writer),
    offsetof(Call, runs),
    CALL_REPLAYABLE,
    ERR_OUT_OF_TURN,
    ERR_REPLAYED,
    offsetof(Header, epoch),
    ERR_RES_ENDED,
    // A reservation's owner (reservation.cuh: reservation_step).
    ERR_RES_REUSED,
    // The host's head hint (extend_few.cuh: the ring's first pages with round trip 1).
    offsetof(Call, head_hint),
    NO_HEAD_HINT,
};

}  // namespace kvp
