"""The library's Python entry points (private to kvpool): ``kvp_python_pool_*`` take a hot
call's host arrays (a device pool's: its host copies) as Python objects and find their
memory through the buffer protocol in the library, which costs tens of nanoseconds an
array where ``_buffers`` costs 0.5-0.9 us (see src/ffi/python.rs and python_methods.rs).

They are the library's own CPython builtins (``METH_FASTCALL``: made here once with
``PyCFunction_NewEx`` from the table ``kvp_python_methods`` gives), called with the GIL
held, which the library releases for the pool call. A builtin takes the same arguments as
the ``kvp_python_*`` function of its name (objects for the arrays, ints for the handle,
sizes, device addresses and the stream; None is NULL) without ctypes' argument conversion,
which cost about 1 us a call. Each returns the call's status, or ``FALLBACK`` having
called nothing: an array that is not a 1-D C-contiguous buffer of the call's element type
(torch tensors, lists, other dtypes, strided views), a read-only ``out``, lengths that
disagree, an argument that is no int where one is needed. The pool's methods then take
their general path (``_buffers``), which converts what it can and names what it cannot.
The package tries them for types it knows as buffers, so a type's first call in a process
(before its handler is remembered) takes the general path. ``KVPOOL_PYTHON_NATIVE=0`` in
the environment, or ``lib.python = None``, turns them off.

The same table has builtins for the C functions of ``CALLS``, named as those functions,
taking every argument as an int (None is NULL) and releasing the GIL for the call, as the
ctypes functions of ``lib.fast`` do, which they replace (``Library``); they raise
``TypeError`` / ``OverflowError`` for an argument that is no such int. With
``KVPOOL_PYTHON_NATIVE=0``, ``lib.fast`` keeps its ctypes functions.
"""

import ctypes
import os
import types

FALLBACK = -1  # KVP_PYTHON_FALLBACK

# kvp_python_init's C-API functions
_API = ("PyObject_GetBuffer", "PyBuffer_Release", "PyEval_SaveThread", "PyEval_RestoreThread",
        "PyErr_Clear", "PyGILState_Check")
# kvp_python_methods' (then the addresses of None and TypeError)
_INT_API = ("PyLong_AsSize_t", "PyLong_AsVoidPtr", "PyLong_FromLongLong", "PyErr_Occurred",
            "PyErr_SetString")

# The builtins, named as the C functions whose arguments they take:
ENTRY_POINTS = (
    "kvp_python_pool_alloc_extend",        # (pool, prefix, seq, last_loc, extend_num_tokens, out)
    "kvp_python_pool_alloc_decode",        # (pool, seq, last_loc, out)
    "kvp_python_pool_alloc",               # (pool, num_tokens, out)
    "kvp_python_pool_free_indices",        # (pool, indices)
    # device pools: the host copies as objects, device arrays and the stream as addresses
    "kvp_python_pool_alloc_extend_async",  # (pool, prefix_host, seq_host, prefix, seq,
                                           #  last_loc, batch, extend_num_tokens, out,
                                           #  out_len, stream)
    "kvp_python_pool_alloc_decode_async",  # (pool, seq_host, seq, last_loc, batch, out,
                                           #  out_len, stream)
    "kvp_python_extend_tokens",            # alloc_extend's default extend_num_tokens, or NO_SUM
)
NO_SUM = -1  # kvp_python_extend_tokens could not sum: the package sums

# The C functions the table has as builtins (lib.fast's hot ones: every argument an int).
CALLS = (
    "kvp_pool_alloc_extend", "kvp_pool_alloc_decode", "kvp_pool_alloc", "kvp_pool_free_indices",
    "kvp_pool_alloc_extend_async", "kvp_pool_alloc_decode_async", "kvp_pool_alloc_async",
    "kvp_pool_free_indices_async", "kvp_pool_alloc_extend_rows", "kvp_pool_alloc_decode_rows",
    "kvp_pool_free_rows", "kvp_decode_reservation_step", "kvp_decode_reservation_step_async",
    "kvp_pool_extend_need",
)


class _MethodDef(ctypes.Structure):
    """CPython's ``PyMethodDef``."""
    _fields_ = [("name", ctypes.c_char_p), ("call", ctypes.c_void_p), ("flags", ctypes.c_int),
                ("doc", ctypes.c_char_p)]


def _address(name):
    return ctypes.cast(getattr(ctypes.pythonapi, name), ctypes.c_void_p).value


def load(path):
    """A namespace of the entry points of the library at ``path`` (loaded again as a PyDLL,
    whose ``kvp_python_init`` and ``kvp_python_methods`` run with the GIL held), or None
    where they cannot be used: turned off by the environment, a Python without
    ``ctypes.pythonapi`` (PyPy), or a library that refused the C-API functions."""
    if os.environ.get("KVPOOL_PYTHON_NATIVE", "1") == "0":
        return None
    try:
        api = [_address(name) for name in _API]
        int_api = [_address(name) for name in _INT_API]
        # PyCFunction_NewEx(def, self, module) through a prototype of our own (setting
        # argtypes on ctypes.pythonapi's would change them for the whole process).
        new_builtin = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_void_p, ctypes.c_void_p,
                                        ctypes.c_void_p)(_address("PyCFunction_NewEx"))
        dll = ctypes.PyDLL(path)
        init, methods = dll.kvp_python_init, dll.kvp_python_methods
    except (AttributeError, OSError):
        return None
    init.argtypes = [ctypes.c_void_p] * len(_API)
    init.restype = ctypes.c_int32
    methods.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t,
                        ctypes.POINTER(ctypes.c_void_p)]
    methods.restype = ctypes.c_int32
    # then None and TypeError (CPython: an object's id is its address); the library refuses
    # another count (a library of another version)
    addresses = int_api + [id(None), id(TypeError)]
    table = ctypes.c_void_p()
    if (init(*api) != 0
            or methods((ctypes.c_void_p * len(addresses))(*addresses), len(addresses),
                       ctypes.byref(table)) != 0):
        return None
    native = types.SimpleNamespace(_dll=dll)  # the table lives in the library: keep it loaded
    size = ctypes.sizeof(_MethodDef)
    for at in range(table.value, table.value + 64 * size, size):
        name = _MethodDef.from_address(at).name
        if name is None:
            break
        setattr(native, name.decode(), new_builtin(at, None, None))
    if not all(hasattr(native, name) for name in ENTRY_POINTS + CALLS):
        return None
    return native
