//! The device-side layout of a pool, field for field as in `kernels/pool_state.cuh` (the
//! module's `kvp_abi` holds the kernels' sizes and offsets: `abi.rs` compares them), and the
//! meaning of what kernels report.

use std::ffi::c_void;

use crate::pool::ErrorKind;

/// The free list's shape (`kvp::Cursor`).
#[repr(C, align(16))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Cursor {
    pub head: u32,
    pub free_len: u32,
    pub staged_len: u32,
    pub group_idx_len: u32,
    pub group_ord_len: u32,
    /// A snapshot's copy only: taken while the pool was faulted (`kvp::Cursor::faulted`).
    pub faulted: u32,
    /// The turn check: the writer's `Call::runs` + 1, and the writer's number.
    pub runs: u32,
    pub writer: u32,
}

/// `kvp::Header`: the device memory in front of the arrays.
#[repr(C)]
pub(crate) struct Header {
    pub cursor: [Cursor; 2],
    pub fault: u32,
    pub ticket: u32,
    pub op_error: u64,
    pub sort_count: u32,
    /// The call number of the last clear or restore (`kvp::Header::epoch`).
    pub epoch: u32,
    pub pad: [u32; 2],
    pub chunk_claims: [u32; CLAIM_CHUNKS as usize],
}

/// `kvp::CLAIM_CHUNKS`: chunks of the page map a large paged free by index releases at most.
pub(crate) const CLAIM_CHUNKS: u32 = 1024;

/// `kvp::HostRecord`: host memory the kernels write through its device mapping.
#[repr(C)]
pub(crate) struct HostRecord {
    pub fault_seq: u64,
    pub fault_code: u64,
    pub fault_position: i64,
    pub fault_value: i64,
    pub mirror: [u64; 4],
}

/// `kvp::View`: where a kernel finds the pool (passed by value).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct View {
    pub header: u64,
    pub ring: u64,
    pub staged: u64,
    pub state: u64,
    pub fill: u64,
    pub fill_prev: u64,
    pub claim: u64,
    pub group_idx: u64,
    pub group_ord: u64,
    pub scratch: u64,
    pub slot_tags: u64,
    pub record: u64,
    pub size: u64,
    pub page_size: u32,
    pub num_pages: u32,
    pub need_sort: u32,
    /// `log2(page_size)`, or [`NOT_POW2`].
    pub page_shift: u32,
}

/// `kvp::NOT_POW2`: the page size is not a power of two (kernels divide).
pub(crate) const NOT_POW2: u32 = u32::MAX;

/// `kvp::Call`: per-launch facts.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct Call {
    pub tag: u32,
    pub input: u32,
    pub flags: u32,
    pub op: u32,
    pub seq: u32,
    /// Cursor-moving calls the host made before this one: the `Cursor::runs` the call must
    /// find (the kernels' turn check).
    pub runs: u32,
    /// The ring position the host expects the cursor's head at (`Accounting::head_hint`),
    /// or [`NO_HEAD_HINT`]: kernels that load the ring's first pages load them there with
    /// their first round trip and use them only if the cursor's head is that position.
    pub head_hint: u32,
}

/// No head hint (`kvp::NO_HEAD_HINT`).
pub(crate) const NO_HEAD_HINT: u32 = u32::MAX;

/// Ask the kernel to publish its counts (`CALL_MIRROR`).
pub(crate) const CALL_MIRROR: u32 = 1;
/// A free group is open (`CALL_IN_GROUP`).
pub(crate) const CALL_IN_GROUP: u32 = 2;
/// A second run of the call is let through (`CALL_REPLAYABLE`, `KVP_DEBUG_REPLAY_CALLS`).
pub(crate) const CALL_REPLAYABLE: u32 = 4;

/// Page-word tags have 29 bits; the pool re-tags before reaching this.
pub(crate) const TAG_LIMIT: u32 = (1 << 29) - 1;

/// `kvp::FreeMode`.
pub(crate) const FREE_PAGE_IDS: u32 = 0;
pub(crate) const FREE_SLOTS: u32 = 1;
pub(crate) const FREE_SEGMENT: u32 = 2;

/// What kernels report (`kvp::ErrorCode`: the low 8 bits of a fault record's code),
/// named as in `kernels/pool_state.cuh`, `req_table.cuh` and `reservation.cuh`.
pub(crate) mod err {
    pub(crate) const RESERVED: u64 = 1;
    pub(crate) const OUT_OF_RANGE: u64 = 2;
    pub(crate) const ALREADY_FREE: u64 = 3;
    pub(crate) const TWICE_IN_CALL: u64 = 4;
    pub(crate) const PENDING: u64 = 5;
    pub(crate) const NOT_ALLOCATED: u64 = 6;
    pub(crate) const LAST_LOC: u64 = 7;
    pub(crate) const LAST_LOC_EMPTY: u64 = 8;
    pub(crate) const SHARED_PAGE: u64 = 9;
    pub(crate) const UNALIGNED: u64 = 10;
    pub(crate) const NOT_CONTIGUOUS: u64 = 11;
    pub(crate) const SHORTAGE: u64 = 12;
    pub(crate) const FILL: u64 = 13;
    pub(crate) const LENGTHS: u64 = 14;
    pub(crate) const REWIND_AHEAD: u64 = 15;
    pub(crate) const REWIND_TWICE: u64 = 16;
    pub(crate) const UNORDERED: u64 = 17;
    pub(crate) const ROW: u64 = 18;
    pub(crate) const ROW_TWICE: u64 = 19;
    pub(crate) const ROW_LEN: u64 = 20;
    pub(crate) const RES_OVERRUN: u64 = 21;
    pub(crate) const RES_STEPS: u64 = 22;
    pub(crate) const RES_FINISHED: u64 = 23;
    pub(crate) const RES_PAGE: u64 = 24;
    pub(crate) const RES_REWIND: u64 = 25;
    pub(crate) const HELD: u64 = 26;
    pub(crate) const SNAPSHOT_FAULTED: u64 = 27;
    pub(crate) const OUT_OF_TURN: u64 = 28;
    pub(crate) const REPLAYED: u64 = 29;
    pub(crate) const RES_ENDED: u64 = 30;
    pub(crate) const RES_REUSED: u64 = 31;
}

/// Offsets of the arrays in a pool's device block, all 4-byte words after the header.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Arrays {
    pub ring: usize,
    pub staged: usize,
    pub state: usize,
    pub fill: usize,
    pub fill_prev: usize,
    pub claim: usize,
    pub group_idx: usize,
    pub group_ord: usize,
    pub scratch: usize,
    pub slot_tags: usize,
    pub bytes: usize,
}

/// Each array starts on a 256-byte boundary (coalesced access, 8-byte atomics on `claim`).
fn aligned(offset: usize) -> usize {
    offset.next_multiple_of(256)
}

impl Arrays {
    /// Byte offsets for a pool of `num_pages` pages and `kv_rows` slots: 44 bytes a page
    /// plus 4 a slot (the slot tags of a paged free by index).
    pub fn new(num_pages: u32, kv_rows: u64) -> Self {
        let n = num_pages as usize;
        let ring = aligned(std::mem::size_of::<Header>());
        let staged = aligned(ring + 4 * n);
        let state = aligned(staged + 4 * n);
        let fill = aligned(state + 4 * (n + 1));
        let fill_prev = aligned(fill + 8 * (n + 1));
        let claim = aligned(fill_prev + 4 * (n + 1));
        let group_idx = aligned(claim + 8 * (n + 1));
        let group_ord = aligned(group_idx + 4 * n);
        let scratch = aligned(group_ord + 4 * n);
        let slot_tags = aligned(scratch + 4 * n);
        let bytes = slot_tags + 4 * kv_rows as usize;
        Self {
            ring,
            staged,
            state,
            fill,
            fill_prev,
            claim,
            group_idx,
            group_ord,
            scratch,
            slot_tags,
            bytes,
        }
    }
}

/// 4-byte words of a snapshot after its cursor: the ring, staged and state words, then the
/// fill words (two halves each).
pub(crate) fn snapshot_words(num_pages: u32) -> u64 {
    5 * u64::from(num_pages) + 3
}

/// Bytes of a snapshot: a cursor, then [`snapshot_words`] words.
pub(crate) fn snapshot_bytes(num_pages: u32) -> usize {
    std::mem::size_of::<Cursor>() + snapshot_words(num_pages) as usize * 4
}

/// `kvp::OpKind`: which call a fault came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum DeviceOp {
    /// `alloc`
    Alloc = 1,
    /// `alloc_extend`
    AllocExtend = 2,
    /// `alloc_decode`
    AllocDecode = 3,
    /// `free` by index
    FreeIndices = 4,
    /// `free_pages`
    FreePages = 5,
    /// `free_segment`
    FreeSegment = 6,
    /// `free_group_end`
    GroupEnd = 7,
    /// `merge_and_sort_free`
    Merge = 8,
    /// `rewind`
    Rewind = 9,
    /// `alloc_extend_rows`
    AllocExtendRows = 10,
    /// `alloc_decode_rows`
    AllocDecodeRows = 11,
    /// `free_rows`
    FreeRows = 12,
    /// `reserve_decode`
    ReserveDecode = 13,
    /// a reservation's step
    ReservationStep = 14,
    /// a reservation's finish
    ReservationFinish = 15,
    /// `restore_state` (its only fault: a snapshot taken while faulted)
    Restore = 16,
}

impl DeviceOp {
    pub(super) fn from_raw(raw: u32) -> Option<Self> {
        Some(match raw {
            1 => Self::Alloc,
            2 => Self::AllocExtend,
            3 => Self::AllocDecode,
            4 => Self::FreeIndices,
            5 => Self::FreePages,
            6 => Self::FreeSegment,
            7 => Self::GroupEnd,
            8 => Self::Merge,
            9 => Self::Rewind,
            10 => Self::AllocExtendRows,
            11 => Self::AllocDecodeRows,
            12 => Self::FreeRows,
            13 => Self::ReserveDecode,
            14 => Self::ReservationStep,
            15 => Self::ReservationFinish,
            16 => Self::Restore,
            _ => return None,
        })
    }

    /// The call's name as in the C ABI.
    pub fn name(self) -> &'static str {
        match self {
            Self::Alloc => "kvp_pool_alloc_async",
            Self::AllocExtend => "kvp_pool_alloc_extend_async",
            Self::AllocDecode => "kvp_pool_alloc_decode_async",
            Self::FreeIndices => "kvp_pool_free_indices_async",
            Self::FreePages => "kvp_pool_free_pages_async",
            Self::FreeSegment => "kvp_pool_free_segment_async",
            Self::GroupEnd => "kvp_pool_free_group_end_async",
            Self::Merge => "kvp_pool_merge_and_sort_free_async",
            Self::Rewind => "kvp_pool_rewind_async",
            Self::AllocExtendRows => "kvp_pool_alloc_extend_rows_async",
            Self::AllocDecodeRows => "kvp_pool_alloc_decode_rows_async",
            Self::FreeRows => "kvp_pool_free_rows_async",
            Self::ReserveDecode => "kvp_pool_reserve_decode_async",
            Self::ReservationStep => "kvp_decode_reservation_step_async",
            Self::ReservationFinish => "kvp_decode_reservation_finish_async",
            Self::Restore => "kvp_pool_restore_state_async",
        }
    }

    /// The name of the call's checked input array.
    fn element(self) -> &'static str {
        match self {
            Self::AllocExtend | Self::AllocDecode | Self::ReserveDecode => "last_loc",
            Self::FreeIndices => "indices",
            Self::FreePages => "page_ids",
            Self::FreeSegment => "row",
            Self::Rewind => "last_kept",
            // last_loc as read from the table (rows faults name `rows[i]` themselves).
            Self::AllocExtendRows | Self::AllocDecodeRows => "last_loc (from the table)",
            // The segments laid out as one row, page after page.
            Self::FreeRows => "segments",
            Self::Alloc | Self::GroupEnd | Self::Merge => "state",
            Self::ReservationStep => "rows",
            Self::ReservationFinish => "reserved pages",
            Self::Restore => "snapshot",
        }
    }
}

/// A fault a kernel recorded: which call, what was wrong, and with which element.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceFault {
    /// The call that met the invalid input.
    pub op: Option<DeviceOp>,
    /// What the host backend would have reported for the same input.
    pub kind: ErrorKind,
    /// Position of the offending element in its array.
    pub position: i64,
    /// The offending element's value.
    pub value: i64,
    /// Human-readable description.
    pub message: String,
}

impl DeviceFault {
    /// Decodes a fault record's fields.
    pub(crate) fn decode(code: u64, position: i64, value: i64) -> Self {
        let op = DeviceOp::from_raw((code >> 32) as u32);
        match code & 0xff {
            err::OUT_OF_TURN => return Self::out_of_turn(op, position, value),
            err::REPLAYED => return Self::replayed(op, position),
            _ => {}
        }
        let what = op.map_or("a kernel", DeviceOp::name);
        let element = format!(
            "{}[{position}] = {value}",
            op.map_or("element", DeviceOp::element)
        );
        let (kind, text) = match code & 0xff {
            err::RESERVED => (ErrorKind::ReservedSlot, format!("{element} lies in page 0, the padding page")),
            err::OUT_OF_RANGE => (ErrorKind::IndexOutOfRange, format!("{element} is outside the pool")),
            err::ALREADY_FREE => (ErrorKind::DoubleFree, format!("{element}: its page is already free")),
            err::TWICE_IN_CALL => (ErrorKind::DoubleFree, format!("{element} appears more than once in the call")),
            err::PENDING => (
                ErrorKind::DoubleFree,
                format!("{element}: its page was already freed in the open free group"),
            ),
            err::NOT_ALLOCATED => (
                ErrorKind::NotAllocated,
                format!("{element} lies in a page that is not allocated"),
            ),
            err::LAST_LOC => (
                ErrorKind::LastLocMismatch,
                format!("{element} does not end the request's prefix ((last_loc + 1) % page_size != prefix % page_size)"),
            ),
            err::LAST_LOC_EMPTY => (
                ErrorKind::LastLocMismatch,
                format!("{element} but the prefix is empty, so it must be -1"),
            ),
            err::SHARED_PAGE => (
                ErrorKind::LastLocMismatch,
                format!("{element}: another request of the batch extends the same page"),
            ),
            err::UNALIGNED => (
                ErrorKind::Unaligned,
                format!("{element} is not the first slot of its page"),
            ),
            err::NOT_CONTIGUOUS => (
                ErrorKind::InvalidArgument,
                format!("{element} breaks its page: a page's slots must be consecutive in the row"),
            ),
            err::SHORTAGE => (
                ErrorKind::InvalidState,
                format!("the device free list held {value} pages, fewer than the host counted (internal error)"),
            ),
            err::FILL => (
                ErrorKind::LastLocMismatch,
                format!("{element} is not its page's last handed-out slot (a stale or foreign continuation; rewind the page after rejecting tokens)"),
            ),
            err::LENGTHS if op == Some(DeviceOp::ReserveDecode) => (
                ErrorKind::InvalidLengths,
                format!(
                    "the device copy of lens disagrees with the host copy the reservation was planned from (device lens[{position}] = {value}); nothing was reserved"
                ),
            ),
            err::LENGTHS if op == Some(DeviceOp::ReservationFinish) => (
                ErrorKind::InvalidLengths,
                format!(
                    "the device copy of lens the reservation was made from disagrees with the host copy (device lens[{position}] = {value}): its used steps took other pages than the host planned; nothing was returned"
                ),
            ),
            err::ROW_LEN if op == Some(DeviceOp::ReservationStep) => (
                ErrorKind::BufferTooSmall,
                format!("request {position} would write table position {value}, past the table's row_len"),
            ),
            err::RES_OVERRUN => (
                ErrorKind::InvalidState,
                format!("reservation overrun: all {position} reserved steps were already taken (step counter {value}); the step wrote the padding slot 0, wrote no table entry and allocated nothing"),
            ),
            err::RES_STEPS => (
                ErrorKind::InvalidArgument,
                format!("steps_used = {position} but the device ran {value} steps of the reservation; nothing was returned"),
            ),
            err::RES_FINISHED => (
                ErrorKind::InvalidState,
                format!("reservation overrun: a step of a reservation of {position} steps ran after its finish (step counter {value}); the step wrote the padding slot 0, wrote no table entry and allocated nothing"),
            ),
            err::RES_ENDED => (
                ErrorKind::InvalidState,
                format!("a step of a reservation of {position} steps ran after a clear or restore ended the reservation and freed its pages (a graph holding the step replayed after the recovery; step counter {value}); the step wrote the padding slot 0, wrote no table entry and allocated nothing"),
            ),
            err::RES_REUSED => (
                ErrorKind::InvalidState,
                format!("a step of a freed reservation of {position} steps ran after a later reservation (call #{value}) took its memory (a graph holding the step replayed after kvp_decode_reservation_free); the step wrote the padding slot 0, wrote no table entry and allocated nothing"),
            ),
            err::RES_PAGE => (
                ErrorKind::NotAllocated,
                format!("reserved page {value} (unused page {position}) was freed before the finish: finish a reservation before freeing its requests; nothing was returned"),
            ),
            err::RES_REWIND => (
                ErrorKind::NotAllocated,
                format!("request {position}'s last used slot {value} is no longer in an allocated page filled that far: finish a reservation before freeing or rewinding its requests; nothing was returned"),
            ),
            err::LENGTHS if op == Some(DeviceOp::FreeRows) => (
                ErrorKind::InvalidLengths,
                format!(
                    "the device copies of starts/ends disagree with the host copies the call was planned from, first at request {position} (device ends[{position}] = {value})"
                ),
            ),
            err::LENGTHS => (
                ErrorKind::InvalidLengths,
                format!(
                    "the device copies of the lengths disagree with the host copies the call was planned from, first at request {position} (device seq_lens[{position}] = {value}); nothing past the planned output was written"
                ),
            ),
            err::REWIND_AHEAD => (
                ErrorKind::LastLocMismatch,
                format!("{element} was never handed out: a rewind can only move a page back"),
            ),
            err::REWIND_TWICE => (
                ErrorKind::LastLocMismatch,
                format!("{element} rewinds a page that another element of the call also rewinds"),
            ),
            err::ROW => (
                ErrorKind::IndexOutOfRange,
                format!("rows[{position}] = {value} is outside the table"),
            ),
            err::ROW_TWICE => (
                ErrorKind::InvalidArgument,
                format!("rows[{position}] = {value} repeats an earlier request's row: a row may appear once per call"),
            ),
            err::ROW_LEN => (
                ErrorKind::BufferTooSmall,
                format!("device seq_lens[{position}] = {value} exceeds the table's row_len"),
            ),
            err::SNAPSHOT_FAULTED => (
                ErrorKind::InvalidState,
                "the snapshot was taken while the pool was faulted (its backup was enqueued after a call the device refused, before the host saw the fault), so it may hold a state no one planned; nothing was restored: restore a snapshot taken before the faulting call, or clear the pool".to_string(),
            ),
            err::HELD => (
                ErrorKind::InvalidState,
                format!("{element}: its page is held by a live decode reservation, whose later steps hand out its slots; finish the reservation (kvp_decode_reservation_finish_async) before freeing, rewinding or continuing its requests"),
            ),
            err::UNORDERED => (
                ErrorKind::UnorderedStreams,
                format!(
                    "it started on the device before the previous call of the pool (call #{position}) had finished (the last finished call was #{value}): the two were enqueued on streams not ordered with each other; order them with an event (cudaEventRecord + cudaStreamWaitEvent) or use one stream"
                ),
            ),
            _ => (ErrorKind::InvalidState, format!("unknown fault code {code:#x}")),
        };
        Self {
            op,
            kind,
            position,
            value,
            message: if code & 0xff == err::UNORDERED {
                format!("{what}: {text} (detected on the device by the stream-order debug check; the call changed nothing)")
            } else {
                format!("{what}: {text} (detected on the device; the call changed nothing)")
            },
        }
    }
}

impl DeviceFault {
    /// The turn check's fault (`kernels/pool.cu`, `commit`): call `seq` found the state
    /// as the calls up to `writer` (the last call to write or consume that cursor) left it,
    /// `ahead` cursor-moving calls past the one it was made after (negative: short of it;
    /// `value`: `ahead << 32 | writer`).
    fn out_of_turn(op: Option<DeviceOp>, seq: i64, value: i64) -> Self {
        let what = op.map_or("a call", DeviceOp::name);
        let ahead = (value >> 32) as i32;
        let writer = value as u32;
        let why = if ahead > 0 {
            "calls made after it had already run (its graph was launched after them, or \
             after a clear or restore)"
        } else {
            "calls made before it had not all run (the graph of a captured call not launched \
             yet, skipped or abandoned, or streams not ordered)"
        };
        Self {
            op,
            kind: ErrorKind::InvalidState,
            position: seq,
            value,
            message: format!(
                "{what}: call #{seq} ran out of turn: it found the pool's state as the calls \
                 up to #{writer} left it, not as the call made just before it did: {why}, so \
                 it would have handed out slots another call hands out too. Pool calls must \
                 run on the device in the order they are made; a call recorded by stream \
                 capture is made at capture: launch its graph once, before the pool's next \
                 call (detected on the device by the turn check; the call changed nothing)"
            ),
        }
    }

    /// The turn check's fault for a call that ran a second time.
    fn replayed(op: Option<DeviceOp>, seq: i64) -> Self {
        let what = op.map_or("a call", DeviceOp::name);
        Self {
            op,
            kind: ErrorKind::InvalidState,
            position: seq,
            value: 0,
            message: format!(
                "{what}: call #{seq} ran a second time (its graph was replayed), handing out \
                 the slots of its first run again. A call recorded by stream capture is made \
                 once: launch its graph once (replayed decode steps: a decode reservation, \
                 kvp_pool_reserve_decode_async; timing a call by replaying its graph: \
                 KVP_DEBUG_REPLAY_CALLS) (detected on the device by the turn check)"
            ),
        }
    }
}

/// A kernel argument: the address of a value that lives until the launch returns.
pub(crate) fn arg<T>(value: &T) -> *mut c_void {
    (value as *const T).cast_mut().cast()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_match_the_cuda_header() {
        assert_eq!(std::mem::size_of::<Cursor>(), 32);
        assert_eq!(
            std::mem::size_of::<Header>(),
            96 + 4 * CLAIM_CHUNKS as usize
        );
        assert_eq!(std::mem::size_of::<HostRecord>(), 64);
        assert_eq!(std::mem::size_of::<View>(), 120);
        assert_eq!(std::mem::size_of::<Call>(), 28);
    }

    #[test]
    fn fault_codes_name_the_element_and_the_host_kind() {
        let fault = DeviceFault::decode(3 | (4 << 32), 7, 1234);
        assert_eq!(fault.op, Some(DeviceOp::FreeIndices));
        assert_eq!(fault.kind, ErrorKind::DoubleFree);
        assert!(
            fault.message.contains("indices[7] = 1234"),
            "{}",
            fault.message
        );
        let fault = DeviceFault::decode(err::UNORDERED | (3 << 32), 41, 39);
        assert_eq!(fault.kind, ErrorKind::UnorderedStreams);
        assert_eq!(fault.op, Some(DeviceOp::AllocDecode));
        assert!(
            fault.message.contains("call #41") && fault.message.contains("#39"),
            "{}",
            fault.message
        );
        // The turn check's: behind (value's high half negative), ahead, replayed.
        let fault = DeviceFault::decode(
            err::OUT_OF_TURN | (3 << 32),
            41,
            ((-2i64 as u64) << 32 | 39) as i64,
        );
        assert_eq!(fault.kind, ErrorKind::InvalidState);
        assert_eq!(fault.op, Some(DeviceOp::AllocDecode));
        assert!(
            fault
                .message
                .starts_with("kvp_pool_alloc_decode_async: call #41 ran out of turn")
                && fault.message.contains("up to #39 left it")
                && fault
                    .message
                    .contains("calls made before it had not all run")
                && fault.message.contains("turn check"),
            "{}",
            fault.message
        );
        let fault = DeviceFault::decode(err::OUT_OF_TURN | (2 << 32), 7, (3 << 32) | 12);
        assert!(
            fault.message.contains("up to #12 left it")
                && fault
                    .message
                    .contains("calls made after it had already run"),
            "{}",
            fault.message
        );
        let fault = DeviceFault::decode(err::RES_ENDED | (14 << 32), 2, 1);
        assert_eq!(fault.op, Some(DeviceOp::ReservationStep));
        assert!(
            fault
                .message
                .contains("a step of a reservation of 2 steps ran after a clear or restore"),
            "{}",
            fault.message
        );
        let fault = DeviceFault::decode(err::RES_REUSED | (14 << 32), 2, 77);
        assert_eq!(fault.kind, ErrorKind::InvalidState);
        assert!(
            fault.message.contains(
                "a freed reservation of 2 steps ran after a later reservation (call #77)"
            ),
            "{}",
            fault.message
        );
        let fault = DeviceFault::decode(err::REPLAYED | (3 << 32), 9, 0);
        assert!(
            fault.message.contains("call #9 ran a second time")
                && fault.message.contains("KVP_DEBUG_REPLAY_CALLS"),
            "{}",
            fault.message
        );
        let fault = DeviceFault::decode(26 | (4 << 32), 2, 77);
        assert_eq!(fault.kind, ErrorKind::InvalidState);
        assert!(
            fault.message.contains("indices[2] = 77") && fault.message.contains("held"),
            "{}",
            fault.message
        );
        let fault = DeviceFault::decode(9 | (2 << 32), 3, 40);
        assert_eq!(fault.kind, ErrorKind::LastLocMismatch);
        assert!(
            fault.message.contains("last_loc[3] = 40"),
            "{}",
            fault.message
        );
    }
}
