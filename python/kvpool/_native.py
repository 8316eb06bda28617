"""The library's Python entry points (private to kvpool): ``kvp_python_pool_*`` take a hot
call's host arrays (a device pool's: its host copies) as Python objects and find their
memory through the buffer protocol in the library, which costs tens of nanoseconds an array where ``_buffers`` costs 0.5-0.9 us (see
src/ffi/python.rs).

They are loaded through ``ctypes.PyDLL`` (called with the GIL held; the library releases it
for the pool call) after ``kvp_python_init`` has been given ``ctypes.pythonapi``'s buffer,
thread-state, error and GIL-check functions (an entry point called without the GIL, as
through a CDLL, declines). Each returns the call's status, or ``FALLBACK`` having
called nothing: an array that is not a 1-D C-contiguous buffer of the call's element type
(torch tensors, lists, other dtypes, strided views), a read-only ``out``, lengths that
disagree. The pool's methods then take their general path (``_buffers``), which converts
what it can and names what it cannot. The package tries them for types it knows as buffers,
so a type's first call in a process (before its handler is remembered) takes the general
path. ``KVPOOL_PYTHON_NATIVE=0`` in the environment, or
``lib.python = None``, turns them off.
"""

import ctypes
import os
import types

FALLBACK = -1  # KVP_PYTHON_FALLBACK

_API = ("PyObject_GetBuffer", "PyBuffer_Release", "PyEval_SaveThread", "PyEval_RestoreThread",
        "PyErr_Clear", "PyGILState_Check")

_OBJ, _SIZE, _HANDLE, _ADDR = ctypes.py_object, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_void_p
_STATUS = ctypes.c_int32  # a kvp_status, or FALLBACK
# name -> (restype, argtypes)
SIGNATURES = {
    "kvp_python_pool_alloc_extend": (_STATUS, [_HANDLE, _OBJ, _OBJ, _OBJ, _SIZE, _OBJ]),
    "kvp_python_pool_alloc_decode": (_STATUS, [_HANDLE, _OBJ, _OBJ, _OBJ]),
    "kvp_python_pool_alloc": (_STATUS, [_HANDLE, _SIZE, _OBJ]),
    "kvp_python_pool_free_indices": (_STATUS, [_HANDLE, _OBJ]),
    # device pools: the host copies as objects, device arrays and the stream as addresses
    "kvp_python_pool_alloc_extend_async": (_STATUS, [_HANDLE, _OBJ, _OBJ, _ADDR, _ADDR, _ADDR,
                                                     _SIZE, _SIZE, _ADDR, _SIZE, _ADDR]),
    "kvp_python_pool_alloc_decode_async": (_STATUS, [_HANDLE, _OBJ, _ADDR, _ADDR, _SIZE, _ADDR,
                                                     _SIZE, _ADDR]),
    # alloc_extend's default extend_num_tokens, or NO_SUM
    "kvp_python_extend_tokens": (ctypes.c_int64, [_OBJ, _OBJ]),
}
NO_SUM = -1  # kvp_python_extend_tokens could not sum: the package sums


def load(path):
    """A namespace of the entry points of the library at ``path`` (loaded again as a PyDLL:
    the same library, its functions called with the GIL held), or None where they cannot be
    used: turned off by the environment, a Python without ``ctypes.pythonapi`` (PyPy), or a
    library that refused the C-API functions."""
    if os.environ.get("KVPOOL_PYTHON_NATIVE", "1") == "0":
        return None
    try:
        api = [ctypes.cast(getattr(ctypes.pythonapi, name), ctypes.c_void_p).value
               for name in _API]
        dll = ctypes.PyDLL(path)
    except (AttributeError, OSError):
        return None
    init = dll.kvp_python_init
    init.argtypes = [ctypes.c_void_p] * len(_API)
    init.restype = ctypes.c_int32
    if init(*api) != 0:
        return None
    native = types.SimpleNamespace()
    for name, (restype, argtypes) in SIGNATURES.items():
        function = dll[name]
        function.argtypes = argtypes
        function.restype = restype
        setattr(native, name, function)
    return native
