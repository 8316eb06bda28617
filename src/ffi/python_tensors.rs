//! A device pool's `*_async` allocations from Python with every argument as the package gets
//! it: the CUDA tensors' addresses and lengths read here, through CPython's C API, instead
//! of by the package (`_buffers.device_pointer`).
//!
//! Why: the package's five attribute reads and a call cost about 0.8 µs a tensor on the
//! H200 machine (BENCHMARKS.md, twenty-seventh session: `t.stride()` alone 0.17 µs), and an
//! extend takes four tensors. The same reads made here skip the interpreter around them:
//! the torch methods' own cost stays.
//!
//! What is read, as the package's fast path checks it: `is_cuda` is `True`, `dtype` is the
//! dtype object the package gives (so a subclass or another dtype falls back), `stride()`
//! is `(1,)`, `get_device()` is the pool's device; then `data_ptr()` and `numel()`.
//! Anything else — another object, a read that raises, an attribute of another type —
//! clears the exception and returns [`KVP_PYTHON_FALLBACK`] having called nothing, and the
//! package takes its general path, which reads the tensors itself and names what is wrong.
//!
//! How: CPython is not linked; `kvp_python_methods` is given the functions below and the
//! attribute names as Python strings (the package keeps them alive).

use std::ffi::c_void;
use std::sync::OnceLock;

use super::device::CUstream_st;
use super::pool::kvp_pool;
use super::python::{
    clear_python_error, holds_gil, kvp_python_pool_alloc_decode_async,
    kvp_python_pool_alloc_extend_async, KVP_PYTHON_FALLBACK,
};

/// What a `kvp_python_pool_*_tensors` call returns when the call took effect and `out` has
/// more elements than the call wrote (the package returns the leading slice of `out`).
pub const KVP_PYTHON_OK_OUT_LONGER: i32 = -2;

/// `PyObject *PyObject_GetAttr(PyObject *, PyObject *)`.
pub(super) type GetAttrFn = unsafe extern "C" fn(*mut c_void, *mut c_void) -> *mut c_void;
/// `PyObject *PyObject_CallMethodObjArgs(PyObject *, PyObject *name, ..., NULL)`.
pub(super) type CallMethodFn = unsafe extern "C" fn(*mut c_void, *mut c_void, ...) -> *mut c_void;
/// `long long PyLong_AsLongLong(PyObject *)`.
pub(super) type AsI64Fn = unsafe extern "C" fn(*mut c_void) -> i64;
/// `void Py_DecRef(PyObject *)`.
pub(super) type DecRefFn = unsafe extern "C" fn(*mut c_void);
/// `Py_ssize_t PyTuple_Size(PyObject *)`.
pub(super) type TupleSizeFn = unsafe extern "C" fn(*mut c_void) -> isize;
/// `PyObject *PyTuple_GetItem(PyObject *, Py_ssize_t)` (a borrowed reference).
pub(super) type TupleItemFn = unsafe extern "C" fn(*mut c_void, isize) -> *mut c_void;

/// The attributes read, in the order the package passes their names.
#[derive(Clone, Copy)]
pub(super) enum Name {
    IsCuda,
    Dtype,
    Stride,
    GetDevice,
    DataPtr,
    Numel,
}

/// How many attribute names `kvp_python_methods` takes (after the functions and `True`).
pub(super) const NAMES: usize = 6;

/// The C-API functions and objects the tensor reads use.
#[derive(Clone, Copy)]
pub(super) struct TensorApi {
    pub(super) get_attr: GetAttrFn,
    pub(super) call_method: CallMethodFn,
    pub(super) as_i64: AsI64Fn,
    pub(super) dec_ref: DecRefFn,
    pub(super) tuple_size: TupleSizeFn,
    pub(super) tuple_item: TupleItemFn,
    /// `Py_True` (immortal in effect: never moves or goes).
    pub(super) py_true: usize,
    /// The attribute names (`str` objects the package keeps), by [`Name`].
    pub(super) names: [usize; NAMES],
}

impl TensorApi {
    /// The functions' and objects' addresses (what tells two runtimes apart).
    pub(super) fn addresses(&self) -> [usize; 7 + NAMES] {
        let mut all = [0usize; 7 + NAMES];
        all[..7].copy_from_slice(&[
            self.get_attr as usize,
            self.call_method as usize,
            self.as_i64 as usize,
            self.dec_ref as usize,
            self.tuple_size as usize,
            self.tuple_item as usize,
            self.py_true,
        ]);
        all[7..].copy_from_slice(&self.names);
        all
    }
}

pub(super) static TENSOR_API: OnceLock<TensorApi> = OnceLock::new();

/// A new reference, given back when dropped (with the GIL held: the reads run under it).
struct Owned<'a>(&'a TensorApi, *mut c_void);

impl Drop for Owned<'_> {
    fn drop(&mut self) {
        // SAFETY: a new reference this module got, released once, GIL held.
        unsafe { (self.0.dec_ref)(self.1) }
    }
}

impl TensorApi {
    fn name(&self, name: Name) -> *mut c_void {
        self.names[name as usize] as *mut c_void
    }

    /// `object.<name>` (None: the read raised, its exception set).
    ///
    /// # Safety
    /// GIL held; `object` live.
    unsafe fn attr(&self, object: *mut c_void, name: Name) -> Option<Owned<'_>> {
        // SAFETY: this function's contract; the name is a live str.
        let got = unsafe { (self.get_attr)(object, self.name(name)) };
        (!got.is_null()).then_some(Owned(self, got))
    }

    /// `object.<name>()`.
    ///
    /// # Safety
    /// As [`attr`](Self::attr).
    unsafe fn call(&self, object: *mut c_void, name: Name) -> Option<Owned<'_>> {
        // SAFETY: this function's contract; the argument list ends with NULL.
        let got =
            unsafe { (self.call_method)(object, self.name(name), std::ptr::null_mut::<c_void>()) };
        (!got.is_null()).then_some(Owned(self, got))
    }

    /// An int's value (None: not an int, or out of range; the exception set).
    ///
    /// # Safety
    /// GIL held; `object` live.
    unsafe fn int(&self, object: &Owned<'_>) -> Option<i64> {
        // SAFETY: this function's contract.
        let value = unsafe { (self.as_i64)(object.1) };
        // -1 is also the error value; no value read here is -1 when valid (get_device() of a
        // CPU tensor is, which is_cuda refused before): -1 falls back.
        (value != -1).then_some(value)
    }

    /// (address, elements) of `tensor` if it is a 1-D contiguous CUDA tensor of `dtype` on
    /// `device`, as the package's `device_pointer` checks it; None otherwise.
    ///
    /// # Safety
    /// GIL held; `tensor` and `dtype` live objects.
    unsafe fn device_tensor(
        &self,
        tensor: *mut c_void,
        dtype: *mut c_void,
        device: usize,
    ) -> Option<(*mut c_void, usize)> {
        // SAFETY (every read): this function's contract.
        let is_cuda = unsafe { self.attr(tensor, Name::IsCuda) }?;
        if is_cuda.1 as usize != self.py_true {
            return None;
        }
        if unsafe { self.attr(tensor, Name::Dtype) }?.1 != dtype {
            return None;
        }
        let stride = unsafe { self.call(tensor, Name::Stride) }?;
        // SAFETY: `stride` is live; PyTuple_Size of a non-tuple is -1 with an exception.
        if unsafe { (self.tuple_size)(stride.1) } != 1 {
            return None;
        }
        // SAFETY: a tuple of one item: item 0 is a borrowed reference while `stride` lives.
        let unit = unsafe { (self.tuple_item)(stride.1, 0) };
        // SAFETY: `unit` is live (borrowed from `stride`).
        if unit.is_null() || unsafe { (self.as_i64)(unit) } != 1 {
            return None;
        }
        let on = unsafe { self.call(tensor, Name::GetDevice) }?;
        if usize::try_from(unsafe { self.int(&on) }?) != Ok(device) {
            return None;
        }
        let address = unsafe { self.int(&self.call(tensor, Name::DataPtr)?) }?;
        let elements = unsafe { self.call(tensor, Name::Numel) }?;
        // numel() of an empty tensor is 0, of any other at least 1: never -1.
        let elements = usize::try_from(unsafe { self.int(&elements) }?).ok()?;
        Some((address as usize as *mut c_void, elements))
    }
}

/// The device tensors' (address, elements), each of its dtype, or None (the exception of a
/// read that raised cleared): the call falls back. None, reading nothing, without the GIL
/// (a call through a CDLL function, which releases it) or before `kvp_python_methods`.
///
/// # Safety
/// Every object live.
unsafe fn device_tensors<const N: usize>(
    tensors: [(*mut c_void, *mut c_void); N],
    device: usize,
) -> Option<[(*mut c_void, usize); N]> {
    let api = TENSOR_API.get()?;
    if !holds_gil() {
        return None;
    }
    let mut read = [(std::ptr::null_mut(), 0); N];
    for (slot, (tensor, dtype)) in read.iter_mut().zip(tensors) {
        // SAFETY: the GIL is held (checked above); the objects are live (the contract).
        match unsafe { api.device_tensor(tensor, dtype, device) } {
            Some(got) => *slot = got,
            None => {
                clear_python_error(); // a read that raised (nothing set otherwise)
                return None;
            }
        }
    }
    Some(read)
}

/// The status of a call into `out` of `out_len` elements that writes `written`.
fn with_out_length(status: i32, out_len: usize, written: usize) -> i32 {
    if status == 0 && out_len != written {
        KVP_PYTHON_OK_OUT_LONGER
    } else {
        status
    }
}

/// `kvp_python_pool_alloc_extend_async` with the device arrays given as the package gets
/// them: `prefix_lens`, `seq_lens` (int64, dtype object `lengths_dtype`), `last_loc` and
/// `out` (the pool's index type, dtype object `index_dtype`) CUDA tensors on `device`,
/// read here (see the module). Returns the call's `kvp_status`,
/// `KVP_PYTHON_OK_OUT_LONGER` when it took effect and `out` is longer than
/// `extend_num_tokens`, or `KVP_PYTHON_FALLBACK` having called nothing (a tensor or host
/// copy this does not take, lengths that disagree).
///
/// # Safety
/// Called with the GIL held (as a builtin) after `kvp_python_methods`; each object a live
/// `PyObject *`; `stream` as for `kvp_pool_alloc_extend_async`.
#[no_mangle]
#[must_use]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn kvp_python_pool_alloc_extend_tensors(
    pool: *mut kvp_pool,
    prefix_lens_host: *mut c_void,
    seq_lens_host: *mut c_void,
    prefix_lens: *mut c_void,
    seq_lens: *mut c_void,
    last_loc: *mut c_void,
    extend_num_tokens: usize,
    out: *mut c_void,
    stream: *mut CUstream_st,
    device: usize,
    lengths_dtype: *mut c_void,
    index_dtype: *mut c_void,
) -> i32 {
    let tensors = [
        (prefix_lens, lengths_dtype),
        (seq_lens, lengths_dtype),
        (last_loc, index_dtype),
        (out, index_dtype),
    ];
    // SAFETY: this function's contract.
    let Some([prefix, seq, last, out]) = (unsafe { device_tensors(tensors, device) }) else {
        return KVP_PYTHON_FALLBACK;
    };
    let batch = prefix.1;
    if seq.1 != batch || last.1 != batch {
        return KVP_PYTHON_FALLBACK;
    }
    // SAFETY: the tensors hold their elements at their addresses (read above, alive while
    // the caller holds them); the host copies as that function takes them.
    let status = unsafe {
        kvp_python_pool_alloc_extend_async(
            pool,
            prefix_lens_host,
            seq_lens_host,
            prefix.0.cast(),
            seq.0.cast(),
            last.0,
            batch,
            extend_num_tokens,
            out.0,
            out.1,
            stream,
        )
    };
    with_out_length(status, out.1, extend_num_tokens)
}

/// `kvp_python_pool_alloc_decode_async` with the device arrays as CUDA tensors (see
/// `kvp_python_pool_alloc_extend_tensors`): `seq_lens` (int64), `last_loc` and `out`.
///
/// # Safety
/// As `kvp_python_pool_alloc_extend_tensors`.
#[no_mangle]
#[must_use]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn kvp_python_pool_alloc_decode_tensors(
    pool: *mut kvp_pool,
    seq_lens_host: *mut c_void,
    seq_lens: *mut c_void,
    last_loc: *mut c_void,
    out: *mut c_void,
    stream: *mut CUstream_st,
    device: usize,
    lengths_dtype: *mut c_void,
    index_dtype: *mut c_void,
) -> i32 {
    let tensors = [
        (seq_lens, lengths_dtype),
        (last_loc, index_dtype),
        (out, index_dtype),
    ];
    // SAFETY: this function's contract.
    let Some([seq, last, out]) = (unsafe { device_tensors(tensors, device) }) else {
        return KVP_PYTHON_FALLBACK;
    };
    let batch = seq.1;
    if last.1 != batch {
        return KVP_PYTHON_FALLBACK;
    }
    // SAFETY: as in kvp_python_pool_alloc_extend_tensors.
    let status = unsafe {
        kvp_python_pool_alloc_decode_async(
            pool,
            seq_lens_host,
            seq.0.cast(),
            last.0,
            batch,
            out.0,
            out.1,
            stream,
        )
    };
    with_out_length(status, out.1, batch)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_longer_out_is_told_only_when_the_call_took_effect() {
        assert_eq!(with_out_length(0, 8, 8), 0);
        assert_eq!(with_out_length(0, 9, 8), KVP_PYTHON_OK_OUT_LONGER);
        assert_eq!(with_out_length(3, 9, 8), 3);
        assert_eq!(
            with_out_length(KVP_PYTHON_FALLBACK, 9, 8),
            KVP_PYTHON_FALLBACK
        );
    }

    #[test]
    fn calls_fall_back_before_the_api_is_given() {
        if TENSOR_API.get().is_none() {
            let null = std::ptr::null_mut::<c_void>();
            // SAFETY: refused before any object is read.
            let status = unsafe {
                kvp_python_pool_alloc_decode_tensors(
                    null.cast(),
                    null,
                    null,
                    null,
                    null,
                    null.cast(),
                    0,
                    null,
                    null,
                )
            };
            assert_eq!(status, KVP_PYTHON_FALLBACK);
        }
    }
}
