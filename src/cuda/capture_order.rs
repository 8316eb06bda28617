//! The capture-order check: the first call after a call recorded by stream capture faults
//! the pool, on the device, unless that captured call has run.
//!
//! Why: the host advances the cursor parity, tag and call number when a call is made, and a
//! captured call is made at capture, while its kernels run only when its graph does. A call
//! enqueued before that graph runs (or after a capture that was abandoned) reads the cursor
//! the captured call has not written and hands out the pages the captured call hands out
//! too. That breaks the contract (kvpool.h, "Backends": launch the graph once, before the
//! pool's next call), but it is an easy mistake for an engine that captures graphs at
//! start-up, and it is the allocator's worst outcome: this check turns it into a fault.
//!
//! How, adding no kernel to the graph: a captured call that moves the cursor is launched
//! with `CALL_MIRROR`, so its kernels publish its number to the mapped host record when they
//! run (`mirror_counts`, four 8-byte writes: up to 0.08 µs of device time, run s42-1; the
//! host's count catch-up takes them like any published counts). The first
//! uncaptured call after it is enqueued behind the stream-order check's one-warp kernel
//! comparing the record's latest published number with the captured call's; a mismatch
//! faults the pool, so that call and every later one change nothing. Calls neither captured
//! nor right after a capture launch nothing extra, and neither does a clear or restore
//! (which rewrites the state). Not caught: a graph replayed after later calls (a replay
//! right after its own call repeats it exactly, which the benchmarks use), a graph skipped
//! when a later captured call's graph ran, a graph launched after a clear or restore.

use cudarc::driver::sys::{CUdeviceptr, CUfunction, CUstream};

use super::layout::{Call, HostRecord, View};
use super::stream_order::enqueue_check;
use crate::pool::PoolError;

/// Marks a check's `Call::op` (above every `DeviceOp`): the fault is the capture-order
/// check's, in front of the call `op & !CAPTURE_CHECK`.
pub(crate) const CAPTURE_CHECK: u32 = 1 << 16;

/// The check's state: where the device publishes call numbers, and what the host expects.
#[derive(Debug)]
pub(crate) struct CaptureOrder {
    /// Device address of the number in the record's first published count (the high half
    /// of `HostRecord::mirror[0]`: `seq << 32 | count`, little-endian).
    published: CUdeviceptr,
    /// The number of the last captured call that moves the cursor.
    captured: u32,
    /// Such a call was captured since the last uncaptured call: the next one checks.
    pending: bool,
}

impl CaptureOrder {
    /// For a pool whose host record is mapped at device address `record`.
    pub fn new(record: CUdeviceptr) -> Self {
        Self {
            published: record + (std::mem::offset_of!(HostRecord, mirror) + 4) as u64,
            captured: 0,
            pending: false,
        }
    }

    /// Whether a captured call's number is still to be checked: until then the host must
    /// not clear the published counts (the number may already be there).
    pub fn pending(&self) -> bool {
        self.pending
    }

    /// Whether a call must publish its number: captured, moving the cursor.
    pub fn publishes(capturing: bool, moves_cursor: bool) -> bool {
        capturing && moves_cursor
    }

    /// Enqueues the check in front of an uncaptured `call` made after a captured one; a
    /// failure leaves the call unmade (nothing of it is enqueued yet). Not in front of a
    /// clear or restore (`recovering`), which rewrites the state whatever ran before it
    /// (and would otherwise carry the fault past its own recovery).
    pub fn before(
        &self,
        check: CUfunction,
        view: &View,
        call: &Call,
        capturing: bool,
        recovering: bool,
        stream: CUstream,
    ) -> Result<(), PoolError> {
        if capturing || recovering || !self.pending {
            return Ok(());
        }
        let guard = Call {
            op: call.op | CAPTURE_CHECK,
            ..*call
        };
        // (The record is mapped for the pool's lifetime.)
        enqueue_check(check, view, &guard, self.published, self.captured, stream)
    }

    /// After `call` is enqueued (`publishes`: it was launched to publish its number).
    pub fn after(&mut self, call: &Call, publishes: bool, capturing: bool) {
        if publishes {
            self.captured = call.seq;
            self.pending = true;
        } else if !capturing {
            self.pending = false;
        }
    }
}
