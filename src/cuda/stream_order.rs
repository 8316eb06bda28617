//! The stream-order debug check (`kvp_pool_set_debug(pool, KVP_DEBUG_STREAM_ORDER)`): detects
//! calls on one device pool from streams that are not ordered with each other.
//!
//! Why: the pool's state is read and written by its kernels in enqueue order, so every call
//! must run on the device after the previous one has finished (one stream, or streams
//! ordered with events). A missing event between two streams silently corrupts the free
//! list only when the two kernels happen to overlap — rare and timing-dependent. This check
//! makes it a reported fault instead.
//!
//! How (all of it device-side, so the host never synchronizes): after each launch the pool
//! enqueues `kvp_debug_mark(seq)` on the launch's stream, which writes the launch's number
//! into a device word once the launch has finished; before each launch it enqueues
//! `kvp_debug_check(expect)` on the new launch's stream, which faults the pool (error code
//! `ERR_UNORDERED`, reported as [`ErrorKind::UnorderedStreams`]) if the word does not hold
//! the previous launch's number yet. Ordered calls always pass: the previous mark ran before
//! the check. Unordered calls are caught whenever the previous launch is still queued or
//! running when the next one starts — the case that corrupts. Each launch is checked (not
//! only those on a new stream handle: one handle, e.g. the per-thread default stream, names
//! different streams on different threads). Two one-thread kernels a launch is the whole
//! cost, paid only with the option on; without it the pool tests one flag per launch.
//!
//! [`ErrorKind::UnorderedStreams`]: crate::pool::ErrorKind::UnorderedStreams

use std::collections::VecDeque;

use cudarc::driver::sys::{self, CUstream};

use super::driver::check;
use super::kernels::Kernels;
use super::layout::{arg, Call, View};
use super::memory::DeviceMemory;
use crate::pool::PoolError;

/// `kvp_pool_set_debug` flag: check that calls on the pool are ordered on the device
/// (`KVP_DEBUG_STREAM_ORDER`; for Rust callers [`DevicePool::DEBUG_STREAM_ORDER`]).
///
/// [`DevicePool::DEBUG_STREAM_ORDER`]: super::DevicePool::DEBUG_STREAM_ORDER
pub(crate) const DEBUG_STREAM_ORDER: u32 = 1;
/// `kvp_pool_set_debug` flag: let a call recorded by stream capture run again when its graph
/// is replayed at once, repeating it on the state before it (`KVP_DEBUG_REPLAY_CALLS`; the
/// kernels' `CALL_REPLAYABLE`). Not a check: it switches one off, for timing a call.
pub(crate) const DEBUG_REPLAY_CALLS: u32 = 2;
/// Every flag `kvp_pool_set_debug` knows.
pub(crate) const DEBUG_ALL: u32 = DEBUG_STREAM_ORDER | DEBUG_REPLAY_CALLS;

/// Recent launches remembered to name their streams in a fault message.
const HISTORY: usize = 1024;

/// The check's state: the device word, the previous launch, and recent launches' streams.
#[derive(Debug)]
pub(crate) struct StreamOrderCheck {
    /// `u32` the mark kernel writes (device memory of the pool's context).
    done: DeviceMemory,
    /// Number of the previous launch since the check was switched on (none: nothing to
    /// check against yet).
    previous: Option<u32>,
    /// `(seq, stream)` of recent launches, oldest first.
    history: VecDeque<(u32, usize)>,
}

impl StreamOrderCheck {
    /// Allocates the device word, zeroed, and synchronizes the context (switching the check
    /// on may synchronize: `DevicePool::set_debug`): the zeroing, on the legacy default
    /// stream, must not land after a launch's mark on a non-blocking stream, and the word
    /// must not hold what a freed allocation left (the check that runs before a mark, on
    /// streams that are not ordered, reads it).
    pub fn new() -> Result<Self, PoolError> {
        let done = DeviceMemory::zeroed(4)?;
        // SAFETY: the pool's context is current.
        check(unsafe { sys::cuCtxSynchronize() }, "cuCtxSynchronize")?;
        Ok(Self {
            done,
            previous: None,
            history: VecDeque::with_capacity(HISTORY),
        })
    }

    /// Forgets the previous launch (the check was off for a while: its mark was never
    /// enqueued). The next launch is then only marked.
    pub fn restart(&mut self) {
        self.previous = None;
    }

    /// Enqueues the check for `call` on `stream`, before the call's kernel.
    pub fn before(
        &self,
        kernels: &Kernels,
        view: &View,
        call: &Call,
        stream: CUstream,
    ) -> Result<(), PoolError> {
        let Some(expect) = self.previous else {
            return Ok(());
        };
        let done = self.done.at(0);
        // SAFETY: `kvp_debug_check(View, Call, const u32 *done, u32 expect)`; one warp.
        unsafe {
            kernels.launch(
                kernels.debug_check,
                1,
                32,
                stream,
                &mut [arg(view), arg(call), arg(&done), arg(&expect)],
            )
        }
    }

    /// Enqueues the mark of `call` on `stream`, after the call's kernel (which is enqueued
    /// already, so a failure here is not the call's: the next launch is then not checked).
    pub fn after(&mut self, kernels: &Kernels, call: &Call, stream: CUstream) {
        let done = self.done.at(0);
        let seq = call.seq;
        // SAFETY: `kvp_debug_mark(u32 *done, u32 seq)`; one warp.
        let marked = unsafe {
            kernels.launch(
                kernels.debug_mark,
                1,
                32,
                stream,
                &mut [arg(&done), arg(&seq)],
            )
        };
        self.previous = marked.is_ok().then_some(seq);
        if self.history.len() == HISTORY {
            self.history.pop_front();
        }
        self.history.push_back((seq, stream as usize));
    }

    /// "stream 0x…" for launch `seq`, if it is recent enough to be remembered.
    fn stream_of(&self, seq: u32) -> Option<String> {
        self.history
            .iter()
            .rev()
            .find(|(s, _)| *s == seq)
            .map(|&(_, stream)| match stream {
                0 => "the legacy default stream (NULL)".to_string(),
                1 => "CU_STREAM_LEGACY".to_string(),
                2 => "the per-thread default stream".to_string(),
                _ => format!("stream {stream:#x}"),
            })
    }

    /// Names the streams of the late launch `late` and of the unfinished one `previous`.
    pub fn describe(&self, late: u32, previous: u32) -> String {
        let name = |seq| {
            self.stream_of(seq)
                .unwrap_or_else(|| "a stream no longer remembered".into())
        };
        format!(
            "call #{late} was enqueued on {}, call #{previous} on {}",
            name(late),
            name(previous)
        )
    }

    /// The device word (released with the pool, after its last launch).
    pub fn into_memory(self) -> DeviceMemory {
        self.done
    }
}
