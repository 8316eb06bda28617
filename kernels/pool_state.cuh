// Device-side layout of a kvpool pool. Mirrored field for field by `src/cuda/layout.rs`:
// change both together (`kvp_abi`, abi.cuh, is compared with the library's copy when a pool
// loads the module, and by a CPU test).
#pragma once
#include <stdint.h>

namespace kvp {

// One byte of meaning per page, in the low bits of a 32-bit word; the high bits carry the
// tag of the operation that last changed the page, so a kernel can tell "allocated by me,
// in this very call" from "allocated earlier" without a grid-wide barrier.
enum PageKind : uint32_t {
  KIND_RESERVED = 0,     // page 0, the padding sink
  KIND_FREE = 1,         // in the free ring
  KIND_STAGED = 2,       // released under need_sort, waiting for a merge
  KIND_ALLOCATED = 3,    // handed out
  KIND_PENDING_ORD = 4,  // freed by page id / segment inside an open free group
  KIND_PENDING_IDX = 5,  // freed by token index inside an open free group (paged pool)
  KIND_CLAIMED = 6,      // claimed by the paged free by index in progress (transient)
  KIND_HELD = 7,         // allocated and held by a live decode reservation, whose later
                         // steps hand out its slots: no free, rewind or continuation
};
constexpr uint32_t KIND_BITS = 3;
constexpr uint32_t KIND_MASK = (1u << KIND_BITS) - 1;

__host__ __device__ inline uint32_t page_word(uint32_t kind, uint32_t tag) {
  return (tag << KIND_BITS) | kind;
}
__host__ __device__ inline uint32_t kind_of(uint32_t word) { return word & KIND_MASK; }
__host__ __device__ inline uint32_t tag_of(uint32_t word) { return word >> KIND_BITS; }

// Fill words: the fill point in the low half, the tag of the call that set it in the high half
// (so a check can tell "advanced by another request of this very call" without a barrier).
__host__ __device__ inline unsigned long long fill_word(uint32_t tag, unsigned long long fill) {
  return ((unsigned long long)tag << 32) | fill;
}
__host__ __device__ inline uint32_t fill_of(unsigned long long word) { return (uint32_t)word; }
__host__ __device__ inline uint32_t fill_tag(unsigned long long word) {
  return (uint32_t)(word >> 32);
}

// The free list's shape. Kept twice (`Header::cursor[2]`): a kernel reads cursor[in] and
// writes cursor[in ^ 1]; the host flips `in` after every launch. Multi-block kernels can then
// update the shape without a grid-wide barrier: nobody reads what is being written.
struct __align__(16) Cursor {  // two 16-byte loads and stores
  uint32_t head;           // ring position of the next page to hand out
  uint32_t free_len;       // pages in the ring from head on
  uint32_t staged_len;     // pages in `staged`
  uint32_t group_idx_len;  // pages in `group_idx` (open free group, freed by token index)
  uint32_t group_ord_len;  // pages in `group_ord` (open free group, freed by page/segment)
  uint32_t faulted;        // a snapshot's copy only: taken while the pool was faulted (0 live)
  // The turn check (pool.cu, `commit`): how many cursor-moving calls the host had made when
  // this cursor was written (the writer's Call::runs + 1), and the writer's number. A call
  // reads a cursor whose `runs` is its own Call::runs, or it is out of turn.
  uint32_t runs;
  uint32_t writer;
};

// Chunks of the page map a large paged free by index releases (one block each) at most.
constexpr uint32_t CLAIM_CHUNKS = 1024;

// Device-memory header in front of the arrays.
struct Header {
  Cursor cursor[2];
  uint32_t fault;                // sticky: non-zero once a kernel found invalid input
  uint32_t ticket;               // last-block-done counter of multi-block kernels, with a flag
                                 // (the top bit): some block reported an error (see conclude)
  unsigned long long op_error;   // smallest (position << 8 | code) found by the current call
  uint32_t sort_count;           // distinct pages claimed by the current free by index
  uint32_t epoch;                // the call number of the last clear or restore: it ends every
                                 // reservation made before it (reservation.cuh)
  uint32_t pad[2];
  // Pages a large paged free by index claimed, per chunk of the page map; zero between calls
  // (the claim kernel's last block turns them into offsets and zeroes them).
  uint32_t chunk_claims[CLAIM_CHUNKS];
};

// Host memory mapped into the device (cuMemHostAlloc DEVICEMAP): what the host reads
// without synchronizing. Every field is written with single 8-byte stores.
struct HostRecord {
  // The first fault: written once per fault (the call's seq last, after a system fence).
  unsigned long long fault_seq;
  unsigned long long fault_code;  // ErrorCode | (op << 32)
  long long fault_position;
  long long fault_value;
  // Counts as of call `seq`, each packed (seq << 32 | count): consistent when the four
  // seqs agree. Written only when the host asked (it is waiting for an exact count).
  unsigned long long mirror_free;
  unsigned long long mirror_staged;
  unsigned long long mirror_group_idx;
  unsigned long long mirror_group_ord;
};

// What kernels report: the low 8 bits of `op_error` and `fault_code`.
enum ErrorCode : uint32_t {
  ERR_NONE = 0,
  ERR_RESERVED = 1,          // slot/page 0 or a slot in page 0
  ERR_OUT_OF_RANGE = 2,      // outside the pool
  ERR_ALREADY_FREE = 3,      // page free or staged
  ERR_TWICE_IN_CALL = 4,     // the same index/page twice in one call
  ERR_PENDING = 5,           // page already freed in the open free group
  ERR_NOT_ALLOCATED = 6,     // last_loc in a page that is not allocated
  ERR_LAST_LOC = 7,          // (last_loc + 1) % page_size != prefix % page_size
  ERR_LAST_LOC_EMPTY = 8,    // empty prefix but last_loc != -1
  ERR_SHARED_PAGE = 9,       // two requests extend one page
  ERR_UNALIGNED = 10,        // segment page head not page-aligned
  ERR_NOT_CONTIGUOUS = 11,   // segment page's tokens not consecutive
  ERR_SHORTAGE = 12,         // the device free list is shorter than the host believed
  ERR_FILL = 13,             // last_loc is not its page's last handed-out slot (stale)
  ERR_LENGTHS = 14,          // the device lengths disagree with the host copies' plan
  ERR_REWIND_AHEAD = 15,     // a rewind past the slots its page has handed out
  ERR_REWIND_TWICE = 16,     // two elements of one rewind name the same page
  ERR_UNORDERED = 17,        // debug: the previous call had not finished (unordered streams)
  // 18-20: request-to-token tables (req_table.cuh); 21-25: reservations (reservation.cuh)
  ERR_HELD = 26,             // page held by a live decode reservation (free/rewind/last_loc)
  ERR_SNAPSHOT_FAULTED = 27, // restore: the snapshot was taken while the pool was faulted
  ERR_OUT_OF_TURN = 28,      // the cursor is not the one the call was made after (position:
                             // the call's number; value: found runs - expected << 32 | writer)
  ERR_REPLAYED = 29,         // the call ran a second time (position: its number)
};

// What a page word that is not KIND_ALLOCATED tells a continuation or a rewind of the page.
__host__ __device__ inline uint32_t unallocated_error(uint32_t word) {
  return kind_of(word) == KIND_HELD ? ERR_HELD : ERR_NOT_ALLOCATED;
}

// Which call a fault came from (`fault_code >> 32`).
enum OpKind : uint32_t {
  OP_ALLOC = 1,
  OP_ALLOC_EXTEND = 2,
  OP_ALLOC_DECODE = 3,
  OP_FREE_INDICES = 4,
  OP_FREE_PAGES = 5,
  OP_FREE_SEGMENT = 6,
  OP_GROUP_END = 7,
  OP_MERGE = 8,
  OP_REWIND = 9,
  // 10-15: by row and reservations (the host's DeviceOp, src/cuda/layout.rs)
  OP_RESTORE = 16,  // the host passes it; a restore faults only for a faulted snapshot
};

// Everything a kernel needs to find the pool; passed by value.
struct View {
  Header *header;
  uint32_t *ring;        // num_pages page ids, circular
  uint32_t *staged;      // num_pages
  uint32_t *state;       // num_pages + 1 page words
  unsigned long long *fill;  // num_pages + 1: (tag << 32) | slots of the page handed out so
                             // far (its fill point; a continuation must end exactly there),
                             // tagged with the call that last set it. Paged pools only.
  uint32_t *fill_prev;   // num_pages + 1: a prefix page's fill point before the current call
                         // advanced it, to undo a call that fails
  unsigned long long *claim;  // num_pages + 1: (tag << 32 | request + 1) of the request
                              // that extends the page (per request, so a graph replay of
                              // the same call is not mistaken for a second request)
  uint32_t *group_idx;   // num_pages
  uint32_t *group_ord;   // num_pages
  uint32_t *scratch;     // num_pages: pages collected by a free call
  uint32_t *slot_tags;   // kv_rows: tag of the free call that last named the slot
  HostRecord *record;    // device pointer of the mapped host record
  unsigned long long size;  // usable slots
  uint32_t page_size;
  uint32_t num_pages;
  uint32_t need_sort;
  uint32_t page_shift;   // log2(page_size), or NOT_POW2: shifts instead of 64-bit division
};
constexpr uint32_t NOT_POW2 = 0xffffffffu;

// Per-call facts from the host.
struct Call {
  uint32_t tag;     // marks page words; unique per call until the host re-tags, never 0
  uint32_t in;      // which cursor to read
  uint32_t flags;   // CALL_*
  uint32_t op;      // OpKind, for the fault record
  uint32_t seq;     // the host's call counter (wraps, never 0): names the call to the host
  uint32_t runs;    // the host's count of cursor-moving calls before this one (wraps): the
                    // `runs` of the cursor this call must find (the turn check)
  uint32_t head_hint;  // the ring position the host expects the cursor's head at, or
                       // NO_HEAD_HINT: a guess, which a kernel compares with the cursor's
                       // head before using anything loaded at it
};
constexpr uint32_t NO_HEAD_HINT = ~0u;
constexpr uint32_t CALL_MIRROR = 1;      // write the counts to the host record
constexpr uint32_t CALL_IN_GROUP = 2;    // a free group is open: frees become pending
constexpr uint32_t CALL_REPLAYABLE = 4;  // a second run of the call (its graph replayed at
                                         // once) is let through (KVP_DEBUG_REPLAY_CALLS)

}  // namespace kvp
