//! Entry points for the Python package (`python/kvpool`, which calls them as builtins:
//! `python_methods.rs`): the hot host-pool calls with their arrays given as Python objects,
//! and the device pool's allocations with their host copies so given, whose memory is found
//! here through CPython's buffer protocol (device arrays stay addresses: a CUDA tensor is
//! no buffer).
//!
//! Why: from Python, finding a numpy array's (or array.array's, memoryview's) address costs
//! about 0.5-0.9 µs an array (`ctypes.c_char.from_buffer` and the checks around it), so a
//! plain `alloc_extend` of four arrays cost 4-8 µs over the same call from C. Here each array
//! costs one `PyObject_GetBuffer` (tens of nanoseconds).
//!
//! How: CPython is not linked. `kvp_python_init` is given the six C-API functions used, as
//! `ctypes.pythonapi` has them. An entry point is called with the GIL held, takes a
//! buffer view of each array, releases the GIL for the pool call (as the package's CDLL
//! calls do), takes it back and releases the views. The pool call is the C function a C
//! caller would make, so every check, status and message is the C API's.
//!
//! Anything else — an array that is not a 1-D C-contiguous buffer of native signed integers
//! of the width the call needs (a torch tensor, a list, a float or unsigned array, a strided
//! view), a read-only output, lengths that disagree, a handle that is not a host pool —
//! returns [`KVP_PYTHON_FALLBACK`] before the pool is called: nothing changed, and the
//! package takes its general path, which converts what it can and names what it cannot.
//! Read-only inputs are read in place (the general path copies them: it can only take the
//! address of a writable buffer).

use std::ffi::{c_char, c_int, c_long, c_void, CStr};
use std::mem::size_of;
use std::sync::OnceLock;

use super::boundary::{fail, ffi_boundary, PanicDefault};
use super::device::{kvp_pool_alloc_decode_async, kvp_pool_alloc_extend_async, CUstream_st};
use super::pool::{
    kvp_pool, kvp_pool_alloc, kvp_pool_alloc_decode, kvp_pool_alloc_extend, kvp_pool_free_indices,
    with_pool,
};
use super::status::kvp_status;
use crate::pool::IndexType;

/// What a `kvp_python_pool_*` call returns when it did not call the pool (an array that is
/// not a 1-D C-contiguous buffer of the call's element type, a read-only `out`, lengths that
/// disagree, a handle that is not a host pool): nothing changed, and the Python package
/// takes its general path. Any other value is the pool call's `kvp_status`.
pub const KVP_PYTHON_FALLBACK: i32 = -1;

/// CPython's `Py_buffer` (part of the stable ABI since Python 3.11; the same layout since 3.3).
#[repr(C)]
struct PyBuffer {
    buf: *mut c_void,
    obj: *mut c_void,
    len: isize,
    itemsize: isize,
    readonly: c_int,
    ndim: c_int,
    format: *const c_char,
    shape: *const isize,
    strides: *const isize,
    suboffsets: *const isize,
    internal: *mut c_void,
}

/// `PyBUF_WRITABLE`, `PyBUF_FORMAT` and `PyBUF_C_CONTIGUOUS` (which implies `PyBUF_ND` and
/// `PyBUF_STRIDES`): an exporter that cannot give a C-contiguous view refuses.
const PYBUF_WRITABLE: c_int = 0x0001;
const PYBUF_FORMAT: c_int = 0x0004;
const PYBUF_C_CONTIGUOUS: c_int = 0x0020 | 0x0010 | 0x0008;

/// `int PyObject_GetBuffer(PyObject *, Py_buffer *, int)`.
type GetBufferFn = unsafe extern "C" fn(*mut c_void, *mut c_void, c_int) -> c_int;
/// `void PyBuffer_Release(Py_buffer *)`.
type ReleaseBufferFn = unsafe extern "C" fn(*mut c_void);
/// `PyThreadState *PyEval_SaveThread(void)`.
type SaveThreadFn = unsafe extern "C" fn() -> *mut c_void;
/// `void PyEval_RestoreThread(PyThreadState *)`.
type RestoreThreadFn = unsafe extern "C" fn(*mut c_void);
/// `void PyErr_Clear(void)`.
type ClearErrorFn = unsafe extern "C" fn();
/// `int PyGILState_Check(void)`.
type HoldsGilFn = unsafe extern "C" fn() -> c_int;

/// The C-API functions the entry points call.
#[derive(Clone, Copy)]
struct PythonApi {
    get_buffer: GetBufferFn,
    release_buffer: ReleaseBufferFn,
    save_thread: SaveThreadFn,
    restore_thread: RestoreThreadFn,
    clear_error: ClearErrorFn,
    holds_gil: HoldsGilFn,
}

impl PythonApi {
    /// The functions' addresses (what tells two runtimes' functions apart).
    fn addresses(&self) -> [usize; 6] {
        [
            self.get_buffer as usize,
            self.release_buffer as usize,
            self.save_thread as usize,
            self.restore_thread as usize,
            self.clear_error as usize,
            self.holds_gil as usize,
        ]
    }
}

static API: OnceLock<PythonApi> = OnceLock::new();

/// Whether `kvp_python_init` has set the C-API functions (the entry points need them).
pub(super) fn python_initialized() -> bool {
    API.get().is_some()
}

impl PanicDefault for i32 {
    fn on_panic() -> Self {
        kvp_status::Panic as i32
    }
}

/// The Python package's entry points (`python/kvpool` calls them as builtins, see
/// `kvp_python_methods`; C and C++ callers have no use for them): the hot host-pool calls
/// with their arrays given as `PyObject *`, whose memory the library finds through CPython's
/// buffer protocol.
///
/// Gives the entry points below the addresses of CPython's `PyObject_GetBuffer`,
/// `PyBuffer_Release`, `PyEval_SaveThread`, `PyEval_RestoreThread`, `PyErr_Clear` and
/// `PyGILState_Check`, in that order (the package passes `ctypes.pythonapi`'s). The first
/// call sets them for the process; a later call with the same functions is a no-op.
///
/// # Errors
/// `KVP_STATUS_NULL_ARGUMENT` if one is NULL; `KVP_STATUS_INVALID_STATE` if an earlier call
/// gave other functions (a second Python runtime in the process).
///
/// # Safety
/// Each argument is NULL or the address of the CPython function it is named for.
#[no_mangle]
#[must_use]
pub unsafe extern "C" fn kvp_python_init(
    get_buffer: *const c_void,
    release_buffer: *const c_void,
    save_thread: *const c_void,
    restore_thread: *const c_void,
    clear_error: *const c_void,
    holds_gil: *const c_void,
) -> kvp_status {
    ffi_boundary(|| {
        let addresses = [
            get_buffer,
            release_buffer,
            save_thread,
            restore_thread,
            clear_error,
            holds_gil,
        ];
        if addresses.iter().any(|a| a.is_null()) {
            return fail(kvp_status::NullArgument, "a Python C-API function is NULL");
        }
        // SAFETY: the caller gives these functions' addresses (the contract above); a
        // function pointer and a data pointer have one representation on every platform
        // CPython runs on.
        let api = unsafe {
            PythonApi {
                get_buffer: std::mem::transmute::<*const c_void, GetBufferFn>(get_buffer),
                release_buffer: std::mem::transmute::<*const c_void, ReleaseBufferFn>(
                    release_buffer,
                ),
                save_thread: std::mem::transmute::<*const c_void, SaveThreadFn>(save_thread),
                restore_thread: std::mem::transmute::<*const c_void, RestoreThreadFn>(
                    restore_thread,
                ),
                clear_error: std::mem::transmute::<*const c_void, ClearErrorFn>(clear_error),
                holds_gil: std::mem::transmute::<*const c_void, HoldsGilFn>(holds_gil),
            }
        };
        if API.get_or_init(|| api).addresses() != api.addresses() {
            return fail(
                kvp_status::InvalidState,
                "kvp_python_init was given other Python C-API functions before",
            );
        }
        kvp_status::Ok
    })
}

/// A buffer view of a Python object, released (with the GIL held) when dropped.
struct View {
    api: PythonApi,
    raw: PyBuffer,
}

impl View {
    /// The view of `object` if it is a 1-D C-contiguous buffer of native signed integers
    /// (writable for an output); the element width is checked by [`holds`](Self::holds).
    ///
    /// # Safety
    /// The GIL is held; `object` is NULL or a live `PyObject *`.
    unsafe fn of(api: PythonApi, object: *mut c_void, writable: bool) -> Option<View> {
        if object.is_null() {
            return None;
        }
        let flags = PYBUF_FORMAT | PYBUF_C_CONTIGUOUS | if writable { PYBUF_WRITABLE } else { 0 };
        let mut raw = std::mem::MaybeUninit::<PyBuffer>::zeroed();
        // SAFETY: caller contract; `raw` is a `Py_buffer` to fill.
        if unsafe { (api.get_buffer)(object, raw.as_mut_ptr().cast(), flags) } != 0 {
            // Not a buffer, or not one of these: the general path says which.
            // SAFETY: GIL held; clears the exception the refusal set.
            unsafe { (api.clear_error)() };
            return None;
        }
        // SAFETY: filled by a successful PyObject_GetBuffer.
        let view = View {
            api,
            raw: unsafe { raw.assume_init() },
        };
        (view.raw.ndim == 1 && !view.raw.shape.is_null() && !view.raw.format.is_null())
            .then_some(view)
    }

    /// Whether the elements are signed integers of `width` bytes in native byte order.
    fn holds(&self, width: usize) -> bool {
        // SAFETY: a view's format is a NUL-terminated string that lives as long as the view.
        let format = unsafe { CStr::from_ptr(self.raw.format) }.to_bytes();
        usize::try_from(self.raw.itemsize) == Ok(width)
            && signed_format_width(format) == Some(width)
    }

    /// The number of elements.
    fn len(&self) -> usize {
        // SAFETY: a 1-D view (checked in `of`) has one extent.
        usize::try_from(unsafe { *self.raw.shape }).unwrap_or(0)
    }

    /// The elements' address; for no elements an aligned dangling one (an empty
    /// array.array's buffer is a static byte, which the C API would refuse as unaligned).
    fn ptr(&self) -> *mut c_void {
        if self.len() == 0 {
            return std::ptr::NonNull::<i64>::dangling().as_ptr().cast();
        }
        self.raw.buf
    }
}

impl Drop for View {
    fn drop(&mut self) {
        // SAFETY: the view came from PyObject_GetBuffer; views are dropped with the GIL held
        // (`without_gil` takes it back before any view goes).
        unsafe { (self.api.release_buffer)((&mut self.raw as *mut PyBuffer).cast()) }
    }
}

/// The width of the signed integers a struct-module format names, if it names native-order
/// ones: what the package's general path accepts (`_buffers._native_formats`): `b h i l q n`
/// at native sizes, alone or after `@`; `b h i l q` at standard sizes after `=` or the
/// native byte order's `<` / `>`.
fn signed_format_width(format: &[u8]) -> Option<usize> {
    let native_order = if cfg!(target_endian = "little") {
        b'<'
    } else {
        b'>'
    };
    let (standard, code) = match *format {
        [code] | [b'@', code] => (false, code),
        [b'=', code] => (true, code),
        [order, code] if order == native_order => (true, code),
        _ => return None,
    };
    Some(match (code, standard) {
        (b'b', _) => 1,
        (b'h', _) => 2,
        (b'i', false) => size_of::<c_int>(),
        (b'l', false) => size_of::<c_long>(),
        (b'i' | b'l', true) => 4,
        (b'q', _) => 8,
        (b'n', false) => size_of::<isize>(),
        _ => return None,
    })
}

/// Clears the calling thread's Python exception (called with the GIL held, after
/// `kvp_python_init`; without it there is no exception to clear).
pub(super) fn clear_python_error() {
    if let Some(api) = API.get() {
        // SAFETY: GIL held (this function's contract).
        unsafe { (api.clear_error)() }
    }
}

/// Runs `body` with the GIL released (called with it held, after `kvp_python_init`), as a
/// ctypes call does: other Python threads run meanwhile.
pub(super) fn gil_released<R>(body: impl FnOnce() -> R) -> R {
    match API.get() {
        Some(&api) => without_gil(api, body),
        None => body(), // no runtime given: nothing to release
    }
}

/// Runs `body` with the GIL released, taking it back before returning (also when `body`
/// panics, so the views are released with the GIL held).
fn without_gil<R>(api: PythonApi, body: impl FnOnce() -> R) -> R {
    struct Restore(PythonApi, *mut c_void);
    impl Drop for Restore {
        fn drop(&mut self) {
            // SAFETY: the thread state PyEval_SaveThread returned, on the same thread.
            unsafe { (self.0.restore_thread)(self.1) }
        }
    }
    // SAFETY: called with the GIL held (every entry point is, as a builtin).
    let _restore = Restore(api, unsafe { (api.save_thread)() });
    body()
}

/// The width of a host pool's index type, or None for anything else (left to the general
/// path's call to report).
fn index_width(pool: *const kvp_pool) -> Option<usize> {
    let mut width = None;
    let _ = with_pool(pool, |pool| {
        width = Some(match pool.config().index_type {
            IndexType::I64 => size_of::<i64>(),
            IndexType::I32 => size_of::<i32>(),
        });
        kvp_status::Ok
    });
    width
}

/// The elements an array argument holds.
#[derive(Clone, Copy)]
enum Elements {
    /// `prefix_lens`, `seq_lens`: always int64.
    Lengths,
    /// Slot indices: the pool's index type.
    Indices,
}

/// The C-API functions and a view of each of `objects` (object, writable; see
/// [`View::of`]), or None — nothing held — before `kvp_python_init`, without the GIL (a
/// call through a CDLL function, which releases it: no C-API function may be called then,
/// so the entry point declines rather than crash), or when an object gives no such view.
///
/// # Safety
/// Each object is NULL or a live `PyObject *` (the entry points' contract).
unsafe fn views_of<const N: usize>(
    objects: [(*mut c_void, bool); N],
) -> Option<(PythonApi, [View; N])> {
    let &api = API.get()?;
    // SAFETY: PyGILState_Check may be called from any thread, GIL held or not.
    if unsafe { (api.holds_gil)() } == 0 {
        return None;
    }
    // SAFETY: the GIL is held; caller contract for the objects.
    let views = objects.map(|(object, writable)| unsafe { View::of(api, object, writable) });
    if views.iter().any(Option::is_none) {
        return None; // the views that were had are released here, GIL held
    }
    Some((api, views.map(|view| view.expect("checked above"))))
}

/// Runs an entry point: a view of each of `arrays` (object, elements, writable), then, with
/// the GIL released and the views' element widths checked, `call` on the views. Falls back
/// (having called nothing) when a view cannot be had or holds other elements.
fn python_call<const N: usize>(
    pool: *mut kvp_pool,
    arrays: [(*mut c_void, Elements, bool); N],
    call: impl FnOnce(&[View; N]) -> i32,
) -> i32 {
    ffi_boundary(|| {
        let elements = arrays.map(|(_, elements, _)| elements);
        // SAFETY: the entry points' contract.
        let Some((api, views)) =
            (unsafe { views_of(arrays.map(|(object, _, writable)| (object, writable))) })
        else {
            return KVP_PYTHON_FALLBACK;
        };
        // The views are dropped after this returns, with the GIL held again.
        without_gil(api, || {
            // Host copies of lengths need no pool (a device pool's calls take only those).
            let needs_index = elements.iter().any(|e| matches!(e, Elements::Indices));
            let index = if needs_index {
                index_width(pool)
            } else {
                Some(0)
            };
            let Some(index) = index else {
                return KVP_PYTHON_FALLBACK;
            };
            let widths_agree = views.iter().zip(elements).all(|(view, elements)| {
                view.holds(match elements {
                    Elements::Lengths => size_of::<i64>(),
                    Elements::Indices => index,
                })
            });
            if !widths_agree {
                return KVP_PYTHON_FALLBACK;
            }
            call(&views)
        })
    })
}

/// What `kvp_python_extend_tokens` returns when it cannot give the sum.
const NO_SUM: i64 = -1;

/// `sum(seq_lens) - sum(prefix_lens)` of two int64 buffers of one length (Python objects),
/// or 0 if that is negative (the allocation then names the offending length, as the package
/// does): `alloc_extend`'s default `extend_num_tokens`, summed here in one pass where the
/// package would sum each array in Python. -1 if either is not such a buffer, their lengths
/// differ, or the sum exceeds `INT64_MAX` (the package then sums them itself).
///
/// # Safety
/// As `kvp_python_pool_alloc_extend`.
#[no_mangle]
#[must_use]
pub unsafe extern "C" fn kvp_python_extend_tokens(
    prefix_lens: *mut c_void,
    seq_lens: *mut c_void,
) -> i64 {
    ffi_boundary(|| {
        // SAFETY: this function's contract.
        let Some((_, [prefix_view, seq_view])) =
            (unsafe { views_of([(prefix_lens, false), (seq_lens, false)]) })
        else {
            return NO_SUM;
        };
        let width = size_of::<i64>();
        if !prefix_view.holds(width)
            || !seq_view.holds(width)
            || prefix_view.len() != seq_view.len()
        {
            return NO_SUM;
        }
        // SAFETY: each view holds `len()` int64 (checked above) and outlives the slices.
        let (prefix, seq) = unsafe {
            (
                std::slice::from_raw_parts(prefix_view.ptr().cast::<i64>(), prefix_view.len()),
                std::slice::from_raw_parts(seq_view.ptr().cast::<i64>(), seq_view.len()),
            )
        };
        let total: i128 = seq.iter().map(|&s| i128::from(s)).sum::<i128>()
            - prefix.iter().map(|&p| i128::from(p)).sum::<i128>();
        i64::try_from(total.max(0)).unwrap_or(NO_SUM)
    })
}

impl PanicDefault for i64 {
    fn on_panic() -> Self {
        NO_SUM
    }
}

/// `kvp_pool_alloc_extend` on Python objects: `prefix_lens`, `seq_lens` (int64) and
/// `last_loc` (the pool's index type) of one length, the batch size; `out` a writable buffer
/// of the pool's index type, whose length is the call's `out_len`. Returns the call's
/// `kvp_status`, or
/// `KVP_PYTHON_FALLBACK` having called nothing. The GIL is released for the pool call.
///
/// # Safety
/// Called with the GIL held (as a builtin, or through `ctypes.PyDLL`), after
/// `kvp_python_init`; each object is a live `PyObject *` (or NULL: falls back).
#[no_mangle]
#[must_use]
pub unsafe extern "C" fn kvp_python_pool_alloc_extend(
    pool: *mut kvp_pool,
    prefix_lens: *mut c_void,
    seq_lens: *mut c_void,
    last_loc: *mut c_void,
    extend_num_tokens: usize,
    out: *mut c_void,
) -> i32 {
    use Elements::{Indices, Lengths};
    let arrays = [
        (prefix_lens, Lengths, false),
        (seq_lens, Lengths, false),
        (last_loc, Indices, false),
        (out, Indices, true),
    ];
    python_call(pool, arrays, |[prefix, seq, last, out]| {
        let batch = prefix.len();
        if seq.len() != batch || last.len() != batch {
            return KVP_PYTHON_FALLBACK;
        }
        // SAFETY: each view's memory holds its `len()` elements of the checked width.
        let status = unsafe {
            kvp_pool_alloc_extend(
                pool,
                prefix.ptr().cast(),
                seq.ptr().cast(),
                last.ptr(),
                batch,
                extend_num_tokens,
                out.ptr(),
                out.len(),
            )
        };
        status as i32
    })
}

/// `kvp_pool_alloc_decode` on Python objects: `seq_lens` (int64) and `last_loc` of one
/// length, `out` writable (see `kvp_python_pool_alloc_extend`).
///
/// # Safety
/// As `kvp_python_pool_alloc_extend`.
#[no_mangle]
#[must_use]
pub unsafe extern "C" fn kvp_python_pool_alloc_decode(
    pool: *mut kvp_pool,
    seq_lens: *mut c_void,
    last_loc: *mut c_void,
    out: *mut c_void,
) -> i32 {
    use Elements::{Indices, Lengths};
    let arrays = [
        (seq_lens, Lengths, false),
        (last_loc, Indices, false),
        (out, Indices, true),
    ];
    python_call(pool, arrays, |[seq, last, out]| {
        let batch = seq.len();
        if last.len() != batch {
            return KVP_PYTHON_FALLBACK;
        }
        // SAFETY: each view's memory holds its `len()` elements of the checked width.
        let status = unsafe {
            kvp_pool_alloc_decode(
                pool,
                seq.ptr().cast(),
                last.ptr(),
                batch,
                out.ptr(),
                out.len(),
            )
        };
        status as i32
    })
}

/// `kvp_pool_alloc` into a Python object: `out` writable, of the pool's index type (see
/// `kvp_python_pool_alloc_extend`).
///
/// # Safety
/// As `kvp_python_pool_alloc_extend`.
#[no_mangle]
#[must_use]
pub unsafe extern "C" fn kvp_python_pool_alloc(
    pool: *mut kvp_pool,
    num_tokens: usize,
    out: *mut c_void,
) -> i32 {
    python_call(pool, [(out, Elements::Indices, true)], |[out]| {
        // SAFETY: the view's memory holds its `len()` elements of the checked width.
        let status = unsafe { kvp_pool_alloc(pool, num_tokens, out.ptr(), out.len()) };
        status as i32
    })
}

/// `kvp_pool_free_indices` of a Python object of the pool's index type (see
/// `kvp_python_pool_alloc_extend`).
///
/// # Safety
/// As `kvp_python_pool_alloc_extend`.
#[no_mangle]
#[must_use]
pub unsafe extern "C" fn kvp_python_pool_free_indices(
    pool: *mut kvp_pool,
    indices: *mut c_void,
) -> i32 {
    python_call(pool, [(indices, Elements::Indices, false)], |[indices]| {
        // SAFETY: the view's memory holds its `len()` elements of the checked width.
        let status = unsafe { kvp_pool_free_indices(pool, indices.ptr(), indices.len()) };
        status as i32
    })
}

/// `kvp_pool_alloc_extend_async` with the host copies `prefix_lens_host` and
/// `seq_lens_host` given as Python objects (int64 buffers of `batch_size` entries); the device
/// arguments and the stream as for the C call. Returns as `kvp_python_pool_alloc_extend`.
///
/// # Safety
/// As `kvp_python_pool_alloc_extend` for the objects; the other arguments as for
/// `kvp_pool_alloc_extend_async`.
#[no_mangle]
#[must_use]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn kvp_python_pool_alloc_extend_async(
    pool: *mut kvp_pool,
    prefix_lens_host: *mut c_void,
    seq_lens_host: *mut c_void,
    prefix_lens: *const i64,
    seq_lens: *const i64,
    last_loc: *const c_void,
    batch_size: usize,
    extend_num_tokens: usize,
    out: *mut c_void,
    out_len: usize,
    stream: *mut CUstream_st,
) -> i32 {
    let arrays = [
        (prefix_lens_host, Elements::Lengths, false),
        (seq_lens_host, Elements::Lengths, false),
    ];
    python_call(pool, arrays, |[prefix, seq]| {
        if prefix.len() != batch_size || seq.len() != batch_size {
            return KVP_PYTHON_FALLBACK;
        }
        // SAFETY: the views hold `batch_size` int64 each; the rest is the caller's contract.
        let status = unsafe {
            kvp_pool_alloc_extend_async(
                pool,
                prefix.ptr().cast(),
                seq.ptr().cast(),
                prefix_lens,
                seq_lens,
                last_loc,
                batch_size,
                extend_num_tokens,
                out,
                out_len,
                stream,
            )
        };
        status as i32
    })
}

/// `kvp_pool_alloc_decode_async` with the host copy `seq_lens_host` given as a Python object
/// (see `kvp_python_pool_alloc_extend_async`).
///
/// # Safety
/// As `kvp_python_pool_alloc_extend_async`.
#[no_mangle]
#[must_use]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn kvp_python_pool_alloc_decode_async(
    pool: *mut kvp_pool,
    seq_lens_host: *mut c_void,
    seq_lens: *const i64,
    last_loc: *const c_void,
    batch_size: usize,
    out: *mut c_void,
    out_len: usize,
    stream: *mut CUstream_st,
) -> i32 {
    python_call(pool, [(seq_lens_host, Elements::Lengths, false)], |[seq]| {
        if seq.len() != batch_size {
            return KVP_PYTHON_FALLBACK;
        }
        // SAFETY: the view holds `batch_size` int64; the rest is the caller's contract.
        let status = unsafe {
            kvp_pool_alloc_decode_async(
                pool,
                seq.ptr().cast(),
                seq_lens,
                last_loc,
                batch_size,
                out,
                out_len,
                stream,
            )
        };
        status as i32
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_of_native_signed_integers_give_their_width() {
        let long = size_of::<c_long>();
        for (format, width) in [
            (&b"q"[..], Some(8)),
            (b"@q", Some(8)),
            (b"=q", Some(8)),
            (b"l", Some(long)),
            (b"=l", Some(4)),
            (b"i", Some(4)),
            (b"=i", Some(4)),
            (b"n", Some(size_of::<isize>())),
            (b"h", Some(2)),
            (b"b", Some(1)),
        ] {
            assert_eq!(signed_format_width(format), width, "{format:?}");
        }
        let native = if cfg!(target_endian = "little") {
            b"<q"
        } else {
            b">q"
        };
        assert_eq!(signed_format_width(native), Some(8));
    }

    #[test]
    fn other_formats_have_no_width() {
        let foreign = if cfg!(target_endian = "little") {
            b">q"
        } else {
            b"<q"
        };
        for format in [
            &b""[..],
            b"Q",
            b"L",
            b"B",
            b"?",
            b"d",
            b"f",
            b"e",
            b"=n",
            b"!q",
            foreign,
            b"qq",
            b"2q",
            b"T{q}",
        ] {
            assert_eq!(signed_format_width(format), None, "{format:?}");
        }
    }

    #[test]
    fn calls_fall_back_before_init() {
        // Without kvp_python_init the entry points touch nothing (no C-API function to call).
        if API.get().is_none() {
            let status =
                unsafe { kvp_python_pool_free_indices(std::ptr::null_mut(), std::ptr::null_mut()) };
            assert_eq!(status, KVP_PYTHON_FALLBACK);
        }
    }
}
