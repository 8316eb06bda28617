//! The Python package's entry points (`kvp_python_*`, see `python.rs`) as CPython builtin
//! functions (`METH_FASTCALL`), which the package makes once (`PyCFunction_NewEx` on the
//! table [`kvp_python_methods`] gives) and calls as it called their ctypes functions.
//!
//! Why: a ctypes call converts every argument through its argtype and builds a libffi
//! frame: 1.2-1.6 µs for the six arguments of `alloc_extend` on the development VM, against
//! 0.1-0.15 µs for a builtin taking the same objects (measured side by side in one
//! process, a C prototype of this shim). That was most of what a hot call cost from Python
//! over the same call from C.
//!
//! A builtin converts its integer arguments (the handle, sizes, device addresses, the
//! stream) as ctypes would (`None` is NULL for an address), calls the entry point, and
//! returns its status (or sum) as a Python int. An argument count other than the entry
//! point's, or an integer CPython cannot convert, returns [`KVP_PYTHON_FALLBACK`] (the
//! error cleared) having called nothing, as the entry points do for what they do not take.

use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::OnceLock;

use super::boundary::{fail, ffi_boundary, PanicDefault};
use super::python::{
    kvp_python_extend_tokens, kvp_python_pool_alloc, kvp_python_pool_alloc_decode,
    kvp_python_pool_alloc_decode_async, kvp_python_pool_alloc_extend,
    kvp_python_pool_alloc_extend_async, kvp_python_pool_free_indices, python_initialized,
    KVP_PYTHON_FALLBACK,
};
use super::status::kvp_status;

/// `size_t PyLong_AsSize_t(PyObject *)`.
type AsSizeFn = unsafe extern "C" fn(*mut c_void) -> usize;
/// `void *PyLong_AsVoidPtr(PyObject *)`.
type AsAddressFn = unsafe extern "C" fn(*mut c_void) -> *mut c_void;
/// `PyObject *PyLong_FromLongLong(long long)`.
type FromI64Fn = unsafe extern "C" fn(i64) -> *mut c_void;
/// `PyObject *PyErr_Occurred(void)`.
type ErrorOccurredFn = unsafe extern "C" fn() -> *mut c_void;
/// `void PyErr_Clear(void)`.
type ClearErrorFn = unsafe extern "C" fn();

/// The C-API functions the builtins call, and `None`.
#[derive(Clone, Copy)]
struct IntApi {
    as_size: AsSizeFn,
    as_address: AsAddressFn,
    from_i64: FromI64Fn,
    error_occurred: ErrorOccurredFn,
    clear_error: ClearErrorFn,
    /// `Py_None`'s address (an immortal object: never moves or goes).
    none: usize,
}

impl IntApi {
    /// The functions' addresses and `None`'s (what tells two runtimes apart).
    fn addresses(&self) -> [usize; 6] {
        [
            self.as_size as usize,
            self.as_address as usize,
            self.from_i64 as usize,
            self.error_occurred as usize,
            self.clear_error as usize,
            self.none,
        ]
    }
}

static INT_API: OnceLock<IntApi> = OnceLock::new();

/// A builtin's arguments (`PyObject *const *args` of `nargs`), with the GIL held.
struct Args<'a> {
    api: IntApi,
    args: &'a [*mut c_void],
}

impl Args<'_> {
    /// Argument `i` as the object it is (the entry points take buffers so).
    fn object(&self, i: usize) -> *mut c_void {
        self.args[i]
    }

    /// Argument `i` as an address: NULL for `None`, else an int's value; None (the error
    /// cleared) for anything else.
    fn address(&self, i: usize) -> Option<*mut c_void> {
        let object = self.args[i];
        if object as usize == self.api.none {
            return Some(std::ptr::null_mut());
        }
        // SAFETY: GIL held; `object` is a live argument.
        let address = unsafe { (self.api.as_address)(object) };
        (!address.is_null() || self.converted()).then_some(address)
    }

    /// Argument `i` as a `size_t`: a non-negative int; None (the error cleared) else.
    fn size(&self, i: usize) -> Option<usize> {
        // SAFETY: GIL held; the argument is live.
        let size = unsafe { (self.api.as_size)(self.args[i]) };
        (size != usize::MAX || self.converted()).then_some(size)
    }

    /// Whether the conversion that returned its error value succeeded (the value was
    /// meant); if not, its exception is cleared.
    fn converted(&self) -> bool {
        // SAFETY: GIL held.
        if unsafe { (self.api.error_occurred)() }.is_null() {
            return true;
        }
        // SAFETY: GIL held; clears the conversion's exception.
        unsafe { (self.api.clear_error)() };
        false
    }
}

/// Runs a builtin of `N` arguments: `call` on them (None: an argument did not convert),
/// the result as a Python int. The wrong count falls back.
///
/// # Safety
/// Called by CPython as a `METH_FASTCALL` function: the GIL held, `args` holding `nargs`
/// live objects.
unsafe fn builtin<const N: usize, R: PanicDefault + Into<i64> + From<i32>>(
    args: *const *mut c_void,
    nargs: isize,
    call: impl FnOnce(&Args) -> Option<R>,
) -> *mut c_void {
    let Some(&api) = INT_API.get() else {
        // Unreachable: the builtins are made from the table kvp_python_methods gives once
        // it has set the functions. NULL without an exception is CPython's SystemError.
        return std::ptr::null_mut();
    };
    let result = ffi_boundary(|| {
        if nargs != N as isize {
            return R::from(KVP_PYTHON_FALLBACK);
        }
        // SAFETY: CPython passes `nargs` arguments (the contract above).
        let args = Args {
            api,
            args: unsafe { std::slice::from_raw_parts(args, N) },
        };
        call(&args).unwrap_or(R::from(KVP_PYTHON_FALLBACK))
    });
    // SAFETY: GIL held. NULL (out of memory) comes back with CPython's exception set.
    unsafe { (api.from_i64)(result.into()) }
}

/// A `METH_FASTCALL` function: `(self, args, nargs) -> new reference or NULL`.
type FastCall = unsafe extern "C" fn(*mut c_void, *const *mut c_void, isize) -> *mut c_void;

/// CPython's `PyMethodDef` (the same layout in every CPython 3).
#[repr(C)]
struct MethodDef {
    name: *const c_char,
    call: Option<FastCall>,
    flags: c_int,
    doc: *const c_char,
}

/// `METH_FASTCALL`.
const METH_FASTCALL: c_int = 0x0080;

/// The table `kvp_python_methods` gives: every entry point, then a NULL name.
struct MethodTable([MethodDef; 8]);

// SAFETY: the table is never written; its pointers are to static strings and functions.
unsafe impl Sync for MethodTable {}

const fn method(name: &'static CStr, call: FastCall) -> MethodDef {
    MethodDef {
        name: name.as_ptr(),
        call: Some(call),
        flags: METH_FASTCALL,
        doc: std::ptr::null(),
    }
}

// The builtins: each converts its entry point's arguments in order and returns its result.
// SAFETY (every one): called by CPython as a METH_FASTCALL function; the entry point's
// objects are live arguments, its integers what the package gives it (the contract of each
// entry point, as through ctypes).

unsafe extern "C" fn alloc_extend(
    _: *mut c_void,
    args: *const *mut c_void,
    n: isize,
) -> *mut c_void {
    unsafe {
        builtin::<6, i32>(args, n, |a| {
            Some(kvp_python_pool_alloc_extend(
                a.address(0)?.cast(),
                a.object(1),
                a.object(2),
                a.object(3),
                a.size(4)?,
                a.object(5),
            ))
        })
    }
}

unsafe extern "C" fn alloc_decode(
    _: *mut c_void,
    args: *const *mut c_void,
    n: isize,
) -> *mut c_void {
    unsafe {
        builtin::<4, i32>(args, n, |a| {
            Some(kvp_python_pool_alloc_decode(
                a.address(0)?.cast(),
                a.object(1),
                a.object(2),
                a.object(3),
            ))
        })
    }
}

unsafe extern "C" fn alloc(_: *mut c_void, args: *const *mut c_void, n: isize) -> *mut c_void {
    unsafe {
        builtin::<3, i32>(args, n, |a| {
            Some(kvp_python_pool_alloc(
                a.address(0)?.cast(),
                a.size(1)?,
                a.object(2),
            ))
        })
    }
}

unsafe extern "C" fn free_indices(
    _: *mut c_void,
    args: *const *mut c_void,
    n: isize,
) -> *mut c_void {
    unsafe {
        builtin::<2, i32>(args, n, |a| {
            Some(kvp_python_pool_free_indices(
                a.address(0)?.cast(),
                a.object(1),
            ))
        })
    }
}

unsafe extern "C" fn alloc_extend_async(
    _: *mut c_void,
    args: *const *mut c_void,
    n: isize,
) -> *mut c_void {
    unsafe {
        builtin::<11, i32>(args, n, |a| {
            Some(kvp_python_pool_alloc_extend_async(
                a.address(0)?.cast(),
                a.object(1),
                a.object(2),
                a.address(3)?.cast(),
                a.address(4)?.cast(),
                a.address(5)?,
                a.size(6)?,
                a.size(7)?,
                a.address(8)?,
                a.size(9)?,
                a.address(10)?.cast(),
            ))
        })
    }
}

unsafe extern "C" fn alloc_decode_async(
    _: *mut c_void,
    args: *const *mut c_void,
    n: isize,
) -> *mut c_void {
    unsafe {
        builtin::<8, i32>(args, n, |a| {
            Some(kvp_python_pool_alloc_decode_async(
                a.address(0)?.cast(),
                a.object(1),
                a.address(2)?.cast(),
                a.address(3)?,
                a.size(4)?,
                a.address(5)?,
                a.size(6)?,
                a.address(7)?.cast(),
            ))
        })
    }
}

unsafe extern "C" fn extend_tokens(
    _: *mut c_void,
    args: *const *mut c_void,
    n: isize,
) -> *mut c_void {
    unsafe {
        builtin::<2, i64>(args, n, |a| {
            Some(kvp_python_extend_tokens(a.object(0), a.object(1)))
        })
    }
}

static METHODS: MethodTable = MethodTable([
    method(c"kvp_python_pool_alloc_extend", alloc_extend),
    method(c"kvp_python_pool_alloc_decode", alloc_decode),
    method(c"kvp_python_pool_alloc", alloc),
    method(c"kvp_python_pool_free_indices", free_indices),
    method(c"kvp_python_pool_alloc_extend_async", alloc_extend_async),
    method(c"kvp_python_pool_alloc_decode_async", alloc_decode_async),
    method(c"kvp_python_extend_tokens", extend_tokens),
    MethodDef {
        name: std::ptr::null(),
        call: None,
        flags: 0,
        doc: std::ptr::null(),
    },
]);

/// The Python package's entry points as a table of CPython `PyMethodDef`s (`METH_FASTCALL`,
/// named as the `kvp_python_*` functions, ended by a NULL name) for `PyCFunction_NewEx`:
/// builtins that take the arguments of those functions and return their result as a
/// Python int, without ctypes' per-call argument conversion (C and C++ callers have no use
/// for them).
///
/// Takes the addresses of CPython's `PyLong_AsSize_t`, `PyLong_AsVoidPtr`,
/// `PyLong_FromLongLong`, `PyErr_Occurred` and `PyErr_Clear`, and of `Py_None`, after
/// `kvp_python_init`; writes the table's address to `*methods` (static: it outlives the
/// builtins). A later call with the same functions gives the same table.
///
/// # Errors
/// `KVP_STATUS_NULL_ARGUMENT` if an argument is NULL; `KVP_STATUS_INVALID_STATE` before
/// `kvp_python_init`, or if an earlier call gave other functions. `*methods` is then
/// unchanged.
///
/// # Safety
/// Each function argument is NULL or the address of the CPython function it is named for,
/// `none` NULL or `Py_None`, `methods` NULL or writable.
#[no_mangle]
#[must_use]
pub unsafe extern "C" fn kvp_python_methods(
    as_size_t: *const c_void,
    as_void_ptr: *const c_void,
    from_long_long: *const c_void,
    error_occurred: *const c_void,
    clear_error: *const c_void,
    none: *const c_void,
    methods: *mut *const c_void,
) -> kvp_status {
    ffi_boundary(|| {
        let given = [
            as_size_t,
            as_void_ptr,
            from_long_long,
            error_occurred,
            clear_error,
            none,
        ];
        if given.iter().any(|a| a.is_null()) || methods.is_null() {
            return fail(
                kvp_status::NullArgument,
                "kvp_python_methods: an argument is NULL",
            );
        }
        if !python_initialized() {
            return fail(
                kvp_status::InvalidState,
                "kvp_python_methods before kvp_python_init",
            );
        }
        // SAFETY: the caller gives these functions' addresses (the contract above); a
        // function pointer and a data pointer have one representation on every platform
        // CPython runs on.
        let api = unsafe {
            IntApi {
                as_size: std::mem::transmute::<*const c_void, AsSizeFn>(as_size_t),
                as_address: std::mem::transmute::<*const c_void, AsAddressFn>(as_void_ptr),
                from_i64: std::mem::transmute::<*const c_void, FromI64Fn>(from_long_long),
                error_occurred: std::mem::transmute::<*const c_void, ErrorOccurredFn>(
                    error_occurred,
                ),
                clear_error: std::mem::transmute::<*const c_void, ClearErrorFn>(clear_error),
                none: none as usize,
            }
        };
        if INT_API.get_or_init(|| api).addresses() != api.addresses() {
            return fail(
                kvp_status::InvalidState,
                "kvp_python_methods was given other Python C-API functions before",
            );
        }
        // SAFETY: `methods` is writable (the contract above).
        unsafe { *methods = (&METHODS.0 as *const [MethodDef; 8]).cast() };
        kvp_status::Ok
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_is_refused_before_init_and_without_an_argument() {
        let f = kvp_python_methods as *const c_void; // any non-NULL address
        let mut methods: *const c_void = std::ptr::null();
        // SAFETY: refused before any function is called or `methods` written.
        let null = unsafe { kvp_python_methods(f, f, f, f, f, std::ptr::null(), &mut methods) };
        assert_eq!(null, kvp_status::NullArgument);
        if !python_initialized() {
            // SAFETY: as above (no Python runtime in this process: refused before use).
            let early = unsafe { kvp_python_methods(f, f, f, f, f, f, &mut methods) };
            assert_eq!(early, kvp_status::InvalidState);
        }
        assert!(methods.is_null());
    }

    #[test]
    fn the_table_names_every_entry_point_once_and_ends() {
        let names: Vec<&CStr> = METHODS.0[..METHODS.0.len() - 1]
            .iter()
            .map(|m| {
                assert_eq!(m.flags, METH_FASTCALL);
                assert!(m.call.is_some());
                // SAFETY: the table's names are static C strings.
                unsafe { CStr::from_ptr(m.name) }
            })
            .collect();
        assert_eq!(names.len(), 7);
        for (i, name) in names.iter().enumerate() {
            assert!(name.to_bytes().starts_with(b"kvp_python_"), "{name:?}");
            assert!(!names[..i].contains(name), "{name:?} twice");
        }
        let end = METHODS.0.last().expect("a table");
        assert!(end.name.is_null() && end.call.is_none());
    }
}
