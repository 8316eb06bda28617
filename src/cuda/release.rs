//! Stream-ordered release: a device pool's memory (and its snapshot buffers, its mapped
//! record, its kernel module) is freed only after the last kernel that uses it has run,
//! without the releasing thread ever waiting for the GPU.
//!
//! Why: an engine may free a pool (a C++ destructor, also during exception unwinding; a
//! Python `close()`) while kernels that read and write the pool's memory are still queued on
//! its stream. Freeing at once would free memory under them, and `cuMemFree` /
//! `cuMemFreeHost` / `cuModuleUnload` may themselves wait for the device — a hidden
//! synchronization kvpool promises never to do.
//!
//! How: every launch records the pool's [`LastUse`] event on the launch's stream (all calls
//! on one pool are ordered on the device, so the last recorded launch completing means every
//! earlier one has). Launches into a stream being captured are not recorded (an event
//! recorded in a capture cannot be queried): the event keeps tracking the eager work, and
//! replays of a captured graph are the caller's to finish before releasing (documented in
//! `kvp_pool_free`). Releasing hands the resources, the event and a reference to the primary
//! context to [`release_after`], which only appends them to a process-wide list and wakes
//! one background thread (`kvpool-release`, started on the first release). That thread polls
//! the events (`cuEventQuery`, never a blocking wait, so it never spins a core on the
//! driver) and frees what is done in the resources' own context, then drops the context
//! reference (the primary context stays retained until the frees are done). Pool creation
//! also reaps what is ready, so memory comes back even if the thread could not be started.
//! At process exit, whatever is still listed is reclaimed by the driver with the process:
//! an exit handler stops the thread's driver calls first, because the driver (and tools such
//! as compute-sanitizer) tear down while exit handlers run.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Once};
use std::time::Duration;

use cudarc::driver::sys::{self, CUevent, CUresult, CUstream};
use parking_lot::{Condvar, Mutex};

use super::driver::{check, PrimaryContext};
use crate::pool::PoolError;

/// A timing-disabled event recorded after each of a pool's launches: when it has
/// completed, no kernel of the pool is queued or running any more.
#[derive(Debug)]
pub(crate) struct LastUse {
    event: CUevent,
}

// SAFETY: an event handle may be used from any thread while its context is alive (the
// owners keep the primary context retained).
unsafe impl Send for LastUse {}
// SAFETY: as above; recording is serialized by the pool's `&mut self`.
unsafe impl Sync for LastUse {}

/// Where an event stands (`cuEventQuery`, which never waits).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Progress {
    /// Queued work before the event has not finished.
    Pending,
    /// All work before the event has finished (or the event was never recorded).
    Done,
    /// The query failed (a broken context: nothing will run any more).
    Broken,
}

/// Whether `stream` (live) is being captured, or its capture status cannot be read.
pub(crate) fn may_be_capturing(stream: CUstream) -> bool {
    let mut capture = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
    // SAFETY: `stream` is live (caller contract); valid out-pointer.
    let result = unsafe { sys::cuStreamIsCapturing(stream, &mut capture) };
    result != CUresult::CUDA_SUCCESS
        || capture != sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE
}

impl LastUse {
    /// Creates the event in the current context (the pool's).
    pub fn new() -> Result<Self, PoolError> {
        let mut event = std::ptr::null_mut();
        // SAFETY: valid out-pointer; the pool's context is current.
        check(
            unsafe {
                sys::cuEventCreate(
                    &mut event,
                    sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32,
                )
            },
            "cuEventCreate",
        )?;
        Ok(Self { event })
    }

    /// Records the event on `stream` after a launch (two cheap driver calls; never waits).
    /// Skipped while `stream` is being captured (see the module doc).
    pub fn mark(&self, stream: CUstream) -> Result<(), PoolError> {
        if may_be_capturing(stream) {
            return Ok(());
        }
        self.record(stream)
    }

    /// [`mark`](Self::mark) for a caller that has just asked `may_be_capturing(stream)`.
    pub fn record(&self, stream: CUstream) -> Result<(), PoolError> {
        // SAFETY: a live event; a live stream that is not capturing (the caller's check).
        check(
            unsafe { sys::cuEventRecord(self.event, stream) },
            "cuEventRecord",
        )
    }

    fn progress(&self) -> Progress {
        // SAFETY: a live event.
        match unsafe { sys::cuEventQuery(self.event) } {
            CUresult::CUDA_SUCCESS => Progress::Done,
            CUresult::CUDA_ERROR_NOT_READY => Progress::Pending,
            _ => Progress::Broken,
        }
    }
}

impl Drop for LastUse {
    fn drop(&mut self) {
        // SAFETY: created in `new`, destroyed once; the driver defers the destruction of an
        // event whose recording has not completed.
        unsafe { sys::cuEventDestroy_v2(self.event) };
    }
}

/// Resources whose `Drop` frees device-side objects; moved to the release thread and only
/// held there until they are dropped.
#[allow(dead_code)]
struct Resources(Box<dyn std::any::Any>);

// SAFETY: the boxed values are driver handles (device pointers, a mapped host pointer, a
// module) that are valid in any thread once their context is current; the release thread
// binds it before dropping them, and nothing else refers to them any more.
unsafe impl Send for Resources {}

/// One release waiting for its pool's last launch. Fields drop in order: the resources
/// (with the context bound), then the event, then the context reference.
#[allow(dead_code)]
struct Deferred {
    resources: Resources,
    after: Arc<LastUse>,
    context: Arc<PrimaryContext>,
}

impl Deferred {
    /// Frees the resources in their context (done on the release thread or at pool creation).
    fn free(self) {
        let _ = self.context.bind();
        drop(self);
    }
}

static PENDING: Mutex<Vec<Deferred>> = Mutex::new(Vec::new());
static WAKE: Condvar = Condvar::new();
static STARTED: Once = Once::new();
/// Releases completed so far (tests watch it).
static FREED: AtomicU64 = AtomicU64::new(0);
/// Releases handed over so far.
static QUEUED: AtomicU64 = AtomicU64::new(0);
/// Releases taken off the list and not yet freed (counted as pending until they are).
static TAKEN: AtomicU64 = AtomicU64::new(0);

/// Set by the exit handler: the release thread makes no more driver calls.
static EXITING: AtomicBool = AtomicBool::new(false);
/// Held by the release thread across its driver calls, so that the exit handler can wait for
/// the one in progress.
static DRIVER: Mutex<()> = Mutex::new(());
/// How long the exit handler waits for a driver call of the release thread to return.
const EXIT_WAIT: Duration = Duration::from_millis(200);

/// Runs at process exit (registered with `atexit` when the thread starts, so before the
/// driver's own teardown): no driver call of the release thread is in flight once it
/// returns, and none follows.
extern "C" fn stop_release_thread() {
    let _in_flight = DRIVER.try_lock_for(EXIT_WAIT);
    EXITING.store(true, Ordering::SeqCst);
}

/// How often the release thread polls the events of waiting releases.
const POLL: Duration = Duration::from_millis(1);

/// Frees `resources` (dropping them in `context`) once everything enqueued before the last
/// [`LastUse::mark`] of `after` has run. Never waits for the GPU; makes no driver call.
pub(crate) fn release_after<T: 'static>(
    after: Arc<LastUse>,
    context: Arc<PrimaryContext>,
    resources: T,
) {
    QUEUED.fetch_add(1, Ordering::Relaxed);
    PENDING.lock().push(Deferred {
        resources: Resources(Box::new(resources)),
        after,
        context,
    });
    STARTED.call_once(|| {
        // SAFETY: registers a plain function that only takes a lock and sets a flag.
        unsafe { libc::atexit(stop_release_thread) };
        // Without the thread (spawning failed), pool creation still reaps what is ready.
        let _ = std::thread::Builder::new()
            .name("kvpool-release".into())
            .spawn(release_thread);
    });
    WAKE.notify_one();
}

/// Takes the releases whose events are done (or can never complete: a broken context).
/// Queries only, under the list's lock; the frees happen after it is released.
fn take_ready() -> Vec<Deferred> {
    let mut pending = PENDING.lock();
    let mut ready = Vec::new();
    let mut i = 0;
    while i < pending.len() {
        let entry = &pending[i];
        let _ = entry.context.bind();
        if entry.after.progress() == Progress::Pending {
            i += 1;
        } else {
            TAKEN.fetch_add(1, Ordering::SeqCst);
            ready.push(pending.swap_remove(i));
        }
    }
    ready
}

fn free_all(ready: Vec<Deferred>) {
    for entry in ready {
        entry.free();
        FREED.fetch_add(1, Ordering::SeqCst);
        TAKEN.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Frees, on the calling thread, the releases whose work has finished (pool creation, which
/// may synchronize anyway, calls it). Never waits for unfinished work.
pub(crate) fn reap_ready() {
    free_all(take_ready());
}

fn release_thread() {
    // Its driver calls must neither fail nor disturb a stream capture another thread of the
    // engine may be running in global mode (as PyTorch's allocator does for its frees).
    let mut mode = sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED;
    // SAFETY: valid in-out pointer; affects this thread only.
    unsafe { sys::cuThreadExchangeStreamCaptureMode(&mut mode) };
    loop {
        {
            let mut pending = PENDING.lock();
            while pending.is_empty() {
                WAKE.wait(&mut pending);
            }
        }
        {
            let _driver = DRIVER.lock();
            if EXITING.load(Ordering::SeqCst) {
                return;
            }
            free_all(take_ready());
        }
        let idle = PENDING.lock().is_empty();
        if !idle {
            std::thread::sleep(POLL);
        }
    }
}

/// Device-pool releases (pools, or the snapshot buffers of a freed pool) whose memory is not
/// freed yet because kernels using it were still queued when they were released. For tests
/// and diagnostics: it drops to 0 shortly after the streams have passed that work.
pub fn pending_releases() -> usize {
    // Under the list's lock, which is also held while releases are taken off it: a release
    // is counted until it is freed.
    let pending = PENDING.lock();
    pending.len() + TAKEN.load(Ordering::SeqCst) as usize
}

/// Releases handed over and releases completed since the process started (for tests).
#[doc(hidden)]
pub fn release_counts() -> (u64, u64) {
    (QUEUED.load(Ordering::SeqCst), FREED.load(Ordering::SeqCst))
}
