//! The Python package's hot calls as CPython builtin functions (`METH_FASTCALL`), which the
//! package makes once (`PyCFunction_NewEx` on the table [`kvp_python_methods`] gives) and
//! calls where it called ctypes functions:
//!
//! - the entry points of `python.rs` (`kvp_python_*`: arrays as Python objects), and
//! - the C functions the package's hot methods call with every argument an int (`lib.fast`:
//!   the device pool's `*_async` allocations and frees, the host pool's, the request-table
//!   and reservation calls, and `kvp_pool_extend_need`, which gives an extend its default
//!   `extend_num_tokens`), each named as its C function.
//!
//! Why: a ctypes call converts every argument through its argtype and builds a libffi
//! frame: a pair of calls (`alloc` + `free_indices` on buffers) took 1.33 µs through ctypes
//! against 0.42 µs as builtins on the development VM, same process, same library. That was
//! most of what a hot call cost from Python over the same call from C.
//!
//! A builtin converts its integer arguments as ctypes would (`None` is NULL for an address;
//! a size is a non-negative int), then calls. An entry point's builtin returns its status
//! (or sum) as a Python int, and [`KVP_PYTHON_FALLBACK`] — having called nothing, the
//! error cleared — for the wrong argument count or an integer CPython cannot convert, as
//! the entry points do for anything they do not take. A C function's builtin releases the
//! GIL for the call (as ctypes does) and returns its `kvp_status` as an int; it raises
//! `TypeError` for the wrong argument count and CPython's `TypeError` / `OverflowError` for
//! an argument that is no such int, having called nothing.

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::sync::OnceLock;

use super::boundary::{fail, ffi_boundary, PanicDefault};
use super::python::{clear_python_error, gil_released, python_initialized, KVP_PYTHON_FALLBACK};
use super::status::kvp_status;

/// `size_t PyLong_AsSize_t(PyObject *)`.
type AsSizeFn = unsafe extern "C" fn(*mut c_void) -> usize;
/// `void *PyLong_AsVoidPtr(PyObject *)`.
type AsAddressFn = unsafe extern "C" fn(*mut c_void) -> *mut c_void;
/// `PyObject *PyLong_FromLongLong(long long)`.
type FromI64Fn = unsafe extern "C" fn(i64) -> *mut c_void;
/// `PyObject *PyErr_Occurred(void)`.
type ErrorOccurredFn = unsafe extern "C" fn() -> *mut c_void;
/// `void PyErr_SetString(PyObject *type, const char *message)`.
type SetErrorFn = unsafe extern "C" fn(*mut c_void, *const c_char);

/// The C-API functions the builtins call, and two objects.
#[derive(Clone, Copy)]
struct IntApi {
    as_size: AsSizeFn,
    as_address: AsAddressFn,
    from_i64: FromI64Fn,
    error_occurred: ErrorOccurredFn,
    set_error: SetErrorFn,
    /// `Py_None`'s address (an immortal object: never moves or goes).
    none: usize,
    /// `PyExc_TypeError` (a static type object).
    type_error: usize,
}

impl IntApi {
    /// The functions' and objects' addresses (what tells two runtimes apart).
    fn addresses(&self) -> [usize; KVP_PYTHON_METHODS_API_LEN] {
        [
            self.as_size as usize,
            self.as_address as usize,
            self.from_i64 as usize,
            self.error_occurred as usize,
            self.set_error as usize,
            self.none,
            self.type_error,
        ]
    }
}

static INT_API: OnceLock<IntApi> = OnceLock::new();

/// A builtin's arguments (`PyObject *const *args` of `nargs`), with the GIL held. A
/// conversion that fails returns None and leaves CPython's exception set.
struct Args<'a> {
    api: IntApi,
    args: &'a [*mut c_void],
}

impl Args<'_> {
    /// Argument `i` as the object it is (the entry points take arrays so).
    fn object(&self, i: usize) -> Option<*mut c_void> {
        Some(self.args[i])
    }

    /// Argument `i` as an address: NULL for `None`, else an int's value.
    fn address(&self, i: usize) -> Option<*mut c_void> {
        let object = self.args[i];
        if object as usize == self.api.none {
            return Some(std::ptr::null_mut());
        }
        // SAFETY: GIL held; `object` is a live argument.
        let address = unsafe { (self.api.as_address)(object) };
        (!address.is_null() || self.no_error()).then_some(address)
    }

    /// Argument `i` as a `size_t`: a non-negative int.
    fn size(&self, i: usize) -> Option<usize> {
        // SAFETY: GIL held; the argument is live.
        let size = unsafe { (self.api.as_size)(self.args[i]) };
        (size != usize::MAX || self.no_error()).then_some(size)
    }

    /// Whether no exception is set (a conversion that returned its error value meant it).
    fn no_error(&self) -> bool {
        // SAFETY: GIL held.
        unsafe { (self.api.error_occurred)() }.is_null()
    }
}

/// A pointer parameter of any type from an address argument.
trait FromAddress {
    fn from_address(address: *mut c_void) -> Self;
}

impl<T> FromAddress for *mut T {
    fn from_address(address: *mut c_void) -> Self {
        address.cast()
    }
}

impl<T> FromAddress for *const T {
    fn from_address(address: *mut c_void) -> Self {
        address.cast_const().cast()
    }
}

/// The argument slice of a builtin of `n` arguments, if CPython gave `n`.
///
/// # Safety
/// `args` holds `nargs` live objects (CPython's METH_FASTCALL contract).
unsafe fn arguments<'a>(
    args: *const *mut c_void,
    nargs: isize,
    n: usize,
) -> Option<&'a [*mut c_void]> {
    // SAFETY: the contract above.
    (nargs == n as isize).then(|| unsafe { std::slice::from_raw_parts(args, n) })
}

/// Runs an entry point's builtin: `call` on its `n` arguments (None: one did not convert),
/// the result as a Python int; the wrong count, or a failed conversion, falls back.
///
/// # Safety
/// Called by CPython as a `METH_FASTCALL` function: the GIL held, `args` holding `nargs`
/// live objects.
unsafe fn entry_builtin<R: PanicDefault + Into<i64> + From<i32>>(
    args: *const *mut c_void,
    nargs: isize,
    n: usize,
    call: impl FnOnce(&Args) -> Option<R>,
) -> *mut c_void {
    let Some(&api) = INT_API.get() else {
        // Unreachable: the builtins are made from the table kvp_python_methods gives once
        // it has set the functions. NULL without an exception is CPython's SystemError.
        return std::ptr::null_mut();
    };
    let result = ffi_boundary(|| {
        // SAFETY: this function's contract.
        let Some(args) = (unsafe { arguments(args, nargs, n) }) else {
            return R::from(KVP_PYTHON_FALLBACK);
        };
        call(&Args { api, args }).unwrap_or_else(|| {
            clear_python_error(); // the failed conversion's exception
            R::from(KVP_PYTHON_FALLBACK)
        })
    });
    // SAFETY: GIL held. NULL (out of memory) comes back with CPython's exception set.
    unsafe { (api.from_i64)(result.into()) }
}

/// Runs a C function's builtin `name`: `convert` its `n` arguments (None: one did not
/// convert, its exception set), then, with the GIL released, the call it returns; the
/// status as a Python int.
///
/// # Safety
/// As [`entry_builtin`].
unsafe fn call_builtin<F: FnOnce() -> kvp_status>(
    name: &CStr,
    args: *const *mut c_void,
    nargs: isize,
    n: usize,
    convert: impl FnOnce(&Args) -> Option<F>,
) -> *mut c_void {
    let Some(&api) = INT_API.get() else {
        return std::ptr::null_mut(); // unreachable, as in entry_builtin
    };
    let status = ffi_boundary(|| {
        // SAFETY: this function's contract.
        let Some(args) = (unsafe { arguments(args, nargs, n) }) else {
            let message = format!(
                "{} takes {n} arguments ({nargs} given)",
                name.to_string_lossy()
            );
            let message = CString::new(message).expect("no NUL in a name or a number");
            // SAFETY: GIL held; PyExc_TypeError and a NUL-terminated message.
            unsafe { (api.set_error)(api.type_error as *mut c_void, message.as_ptr()) };
            return None;
        };
        let call = convert(&Args { api, args })?;
        Some(gil_released(call))
    });
    match status {
        // SAFETY: GIL held (taken back); NULL (out of memory) comes with its exception.
        Some(status) => unsafe { (api.from_i64)(status as i64) },
        None => std::ptr::null_mut(), // the exception is set
    }
}

impl PanicDefault for Option<kvp_status> {
    fn on_panic() -> Self {
        Some(kvp_status::Panic)
    }
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

const fn method(name: &'static CStr, call: FastCall) -> MethodDef {
    MethodDef {
        name: name.as_ptr(),
        call: Some(call),
        flags: METH_FASTCALL,
        doc: std::ptr::null(),
    }
}

const fn c_name(name: &'static str) -> &'static CStr {
    match CStr::from_bytes_with_nul(name.as_bytes()) {
        Ok(name) => name,
        Err(_) => panic!("a builtin's name is NUL-terminated and has no other NUL"),
    }
}

/// The table of builtins, one per line: `entry NAME(PARAM: KIND, ...) -> RESULT` for an
/// entry point of `python.rs`, `call NAME(PARAM: KIND, ...)` for a C function that returns
/// a `kvp_status`; each argument converted by its KIND (`o`: the object, `a`: an address,
/// `s`: a size) and passed to `super::NAME`.
macro_rules! builtins {
    ($($how:ident $name:ident($($param:ident: $kind:ident),* $(,)?) $(-> $result:ty)?;)*) => {
        /// Every builtin, then a NULL name.
        struct MethodTable([MethodDef; [$(stringify!($name)),*].len() + 1]);
        // SAFETY: never written; its pointers are to static strings and functions.
        unsafe impl Sync for MethodTable {}

        static METHODS: MethodTable = MethodTable([
            $(method(c_name(concat!(stringify!($name), "\0")), {
                unsafe extern "C" fn builtin(
                    _self: *mut c_void,
                    args: *const *mut c_void,
                    nargs: isize,
                ) -> *mut c_void {
                    builtins!(@body $how $name args nargs ($($param: $kind),*) $(-> $result)?)
                }
                builtin
            }),)*
            MethodDef { name: std::ptr::null(), call: None, flags: 0, doc: std::ptr::null() },
        ]);
    };
    (@body entry $name:ident $args:ident $nargs:ident ($($param:ident: $kind:ident),*) -> $result:ty) => {{
        const N: usize = [$(stringify!($param)),*].len();
        // SAFETY: called by CPython as a METH_FASTCALL function; the entry point's objects
        // are live arguments, its integers what the package gives it (its contract).
        unsafe {
            entry_builtin::<$result>($args, $nargs, N, |a| {
                let mut _i = 0usize;
                $(let $param = builtins!(@convert a _i $kind)?; _i += 1;)*
                Some(super::$name($(builtins!(@pass $param $kind)),*))
            })
        }
    }};
    (@body call $name:ident $args:ident $nargs:ident ($($param:ident: $kind:ident),*)) => {{
        const N: usize = [$(stringify!($param)),*].len();
        // SAFETY: called by CPython as a METH_FASTCALL function; the C function's contract
        // is the package's, as through ctypes (it passes what it passed there).
        unsafe {
            call_builtin(c_name(concat!(stringify!($name), "\0")), $args, $nargs, N, |a| {
                let mut _i = 0usize;
                $(let $param = builtins!(@convert a _i $kind)?; _i += 1;)*
                Some(move || super::$name($(builtins!(@pass $param $kind)),*))
            })
        }
    }};
    (@convert $a:ident $i:ident o) => { $a.object($i) };
    (@convert $a:ident $i:ident a) => { $a.address($i) };
    (@convert $a:ident $i:ident s) => { $a.size($i) };
    (@pass $param:ident o) => { $param };
    (@pass $param:ident a) => { FromAddress::from_address($param) };
    (@pass $param:ident s) => { $param };
}

builtins! {
    entry kvp_python_pool_alloc_extend(pool: a, prefix_lens: o, seq_lens: o, last_loc: o,
        extend_num_tokens: s, out: o) -> i32;
    entry kvp_python_pool_alloc_decode(pool: a, seq_lens: o, last_loc: o, out: o) -> i32;
    entry kvp_python_pool_alloc(pool: a, num_tokens: s, out: o) -> i32;
    entry kvp_python_pool_free_indices(pool: a, indices: o) -> i32;
    entry kvp_python_pool_alloc_extend_async(pool: a, prefix_lens_host: o, seq_lens_host: o,
        prefix_lens: a, seq_lens: a, last_loc: a, batch_size: s, extend_num_tokens: s, out: a,
        out_len: s, stream: a) -> i32;
    entry kvp_python_pool_alloc_decode_async(pool: a, seq_lens_host: o, seq_lens: a,
        last_loc: a, batch_size: s, out: a, out_len: s, stream: a) -> i32;
    entry kvp_python_extend_tokens(prefix_lens: o, seq_lens: o) -> i64;
    call kvp_pool_alloc_extend(pool: a, prefix_lens: a, seq_lens: a, last_loc: a,
        batch_size: s, extend_num_tokens: s, out: a, out_len: s);
    call kvp_pool_alloc_decode(pool: a, seq_lens: a, last_loc: a, batch_size: s, out: a,
        out_len: s);
    call kvp_pool_alloc(pool: a, num_tokens: s, out: a, out_len: s);
    call kvp_pool_free_indices(pool: a, indices: a, len: s);
    call kvp_pool_alloc_extend_async(pool: a, prefix_lens_host: a, seq_lens_host: a,
        prefix_lens: a, seq_lens: a, last_loc: a, batch_size: s, extend_num_tokens: s, out: a,
        out_len: s, stream: a);
    call kvp_pool_alloc_decode_async(pool: a, seq_lens_host: a, seq_lens: a, last_loc: a,
        batch_size: s, out: a, out_len: s, stream: a);
    call kvp_pool_alloc_async(pool: a, num_tokens: s, out: a, out_len: s, stream: a);
    call kvp_pool_free_indices_async(pool: a, indices: a, len: s, stream: a);
    call kvp_pool_extend_need(pool: a, prefix_lens_host: a, seq_lens_host: a,
        batch_size: s, out_pages: a, out_tokens: a);
    call kvp_pool_alloc_extend_rows(pool: a, table: a, rows: a, prefix_lens: a, seq_lens: a,
        batch_size: s, extend_num_tokens: s, out: a, out_len: s);
    call kvp_pool_alloc_decode_rows(pool: a, table: a, rows: a, seq_lens: a, batch_size: s,
        out: a, out_len: s);
    call kvp_pool_free_rows(pool: a, table: a, rows: a, starts: a, ends: a, batch_size: s);
    call kvp_decode_reservation_step(reservation: a, out: a, out_len: s, table: a, rows: a);
    call kvp_decode_reservation_step_async(reservation: a, out: a, table: a, rows: a,
        stream: a);
}

/// How many addresses `kvp_python_methods` takes (the length of its `api` array).
pub const KVP_PYTHON_METHODS_API_LEN: usize = 7;

/// The Python package's hot calls as a table of CPython `PyMethodDef`s (`METH_FASTCALL`,
/// ended by a NULL name) for `PyCFunction_NewEx`: builtins named as the `kvp_python_*`
/// entry points and as the C functions the package calls with int arguments, which take
/// those functions' arguments and return their result as a Python int, without ctypes'
/// per-call argument conversion (C and C++ callers have no use for them).
///
/// `api` holds `api_len` (`KVP_PYTHON_METHODS_API_LEN`) addresses: CPython's
/// `PyLong_AsSize_t`, `PyLong_AsVoidPtr`, `PyLong_FromLongLong`, `PyErr_Occurred` and
/// `PyErr_SetString`, then the objects `Py_None` and `PyExc_TypeError` (`PyErr_Clear` is
/// the one `kvp_python_init` was given)
/// (a length other than this library's is a package of another version: refused before
/// any is read). Called after `kvp_python_init`; writes the table's address to `*methods`
/// (static: it outlives the builtins). A later call with the same addresses gives the same
/// table.
///
/// # Errors
/// `KVP_STATUS_NULL_ARGUMENT` if `api`, `methods` or an address is NULL;
/// `KVP_STATUS_INVALID_ARGUMENT` for another `api_len`; `KVP_STATUS_INVALID_STATE` before
/// `kvp_python_init`, or if an earlier call gave others. `*methods` is then unchanged.
///
/// # Safety
/// `api` is NULL or holds `api_len` addresses, each NULL or that of the CPython function or
/// object it is named for; `methods` NULL or writable.
#[no_mangle]
#[must_use]
pub unsafe extern "C" fn kvp_python_methods(
    api: *const *const c_void,
    api_len: usize,
    methods: *mut *const c_void,
) -> kvp_status {
    ffi_boundary(|| {
        if api.is_null() || methods.is_null() {
            return fail(
                kvp_status::NullArgument,
                "kvp_python_methods: api or methods is NULL",
            );
        }
        if api_len != KVP_PYTHON_METHODS_API_LEN {
            return fail(
                kvp_status::InvalidArgument,
                format!(
                    "kvp_python_methods: {api_len} addresses given, this library takes \
                     {KVP_PYTHON_METHODS_API_LEN} (a Python package of another version)"
                ),
            );
        }
        // SAFETY: `api` holds `api_len` addresses (the contract above).
        let given = unsafe { std::slice::from_raw_parts(api, api_len) };
        if given.iter().any(|a| a.is_null()) {
            return fail(
                kvp_status::NullArgument,
                "kvp_python_methods: an address is NULL",
            );
        }
        if !python_initialized() {
            return fail(
                kvp_status::InvalidState,
                "kvp_python_methods before kvp_python_init",
            );
        }
        // SAFETY: the caller gives these functions' addresses, in this order (the contract
        // above); a function pointer and a data pointer have one representation on every
        // platform CPython runs on.
        let api = unsafe {
            IntApi {
                as_size: std::mem::transmute::<*const c_void, AsSizeFn>(given[0]),
                as_address: std::mem::transmute::<*const c_void, AsAddressFn>(given[1]),
                from_i64: std::mem::transmute::<*const c_void, FromI64Fn>(given[2]),
                error_occurred: std::mem::transmute::<*const c_void, ErrorOccurredFn>(given[3]),
                set_error: std::mem::transmute::<*const c_void, SetErrorFn>(given[4]),
                none: given[5] as usize,
                type_error: given[6] as usize,
            }
        };
        if INT_API.get_or_init(|| api).addresses() != api.addresses() {
            return fail(
                kvp_status::InvalidState,
                "kvp_python_methods was given other Python C-API functions before",
            );
        }
        // SAFETY: `methods` is writable (the contract above).
        unsafe { *methods = std::ptr::from_ref(&METHODS.0).cast() };
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
        let full = [f; KVP_PYTHON_METHODS_API_LEN];
        let mut one_null = full;
        one_null[5] = std::ptr::null();
        let call = |api: *const *const c_void, len: usize, out: *mut *const c_void| {
            // SAFETY: each is refused before an address is called or `out` written.
            unsafe { kvp_python_methods(api, len, out) }
        };
        assert_eq!(
            call(one_null.as_ptr(), full.len(), &mut methods),
            kvp_status::NullArgument
        );
        assert_eq!(
            call(std::ptr::null(), full.len(), &mut methods),
            kvp_status::NullArgument
        );
        assert_eq!(
            call(full.as_ptr(), full.len(), std::ptr::null_mut()),
            kvp_status::NullArgument
        );
        // A package of another version passes another count: refused before reading them.
        let status = call(full.as_ptr(), full.len() - 1, &mut methods);
        assert_eq!(status, kvp_status::InvalidArgument);
        if !python_initialized() {
            // No Python runtime in this process: refused before use.
            let early = call(full.as_ptr(), full.len(), &mut methods);
            assert_eq!(early, kvp_status::InvalidState);
        }
        assert!(methods.is_null());
    }

    #[test]
    fn the_table_names_each_builtin_once_and_ends() {
        let (end, entries) = METHODS.0.split_last().expect("a table");
        assert!(end.name.is_null() && end.call.is_none());
        let names: Vec<&CStr> = entries
            .iter()
            .map(|m| {
                assert_eq!(m.flags, METH_FASTCALL);
                assert!(m.call.is_some());
                // SAFETY: the table's names are static C strings.
                unsafe { CStr::from_ptr(m.name) }
            })
            .collect();
        assert_eq!(names.len(), 21);
        for (i, name) in names.iter().enumerate() {
            assert!(name.to_bytes().starts_with(b"kvp_"), "{name:?}");
            assert!(!names[..i].contains(name), "{name:?} twice");
        }
    }
}
