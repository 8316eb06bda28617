"""A small ctypes binding of kvpool's C ABI (include/kvpool.h), used by the Python tests.

Standard library only. The library is loaded from an explicit path (never found through
LD_LIBRARY_PATH), and every exported ``kvp_*`` function gets its ``argtypes`` and
``restype`` from ``SIGNATURES``, which tests/python/test_kvpool.py checks against the header.

    lib = Library("/path/to/libkvpool.so")
    with Pool(lib, size=64, page_size=4) as pool:
        slots = pool.alloc_extend([0], [2], [-1])   # [4, 5]

Failures raise ``KvpError`` (status number, status name, the library's description of the
status and the thread's ``kvp_last_error_message``). Pools and snapshots are freed exactly
once: by ``close()``, by leaving a ``with`` block, or (as a fallback) when collected.
"""

import contextlib
import ctypes
import os
import threading

__all__ = [
    "BACKEND_CUDA",
    "BACKEND_HOST",
    "INDEX_TYPE_I32",
    "INDEX_TYPE_I64",
    "KvpError",
    "Library",
    "Pool",
    "PoolConfig",
    "PoolInfo",
    "PoolStats",
    "SIGNATURES",
    "STATUS_NAMES",
    "Snapshot",
    "TESTING_FUNCTIONS",
]

# ---- enums ---------------------------------------------------------------------------------

STATUS_NAMES = {
    0: "KVP_STATUS_OK",
    1: "KVP_STATUS_NULL_ARGUMENT",
    2: "KVP_STATUS_INVALID_ARGUMENT",
    3: "KVP_STATUS_INVALID_LENGTHS",
    4: "KVP_STATUS_BUFFER_TOO_SMALL",
    5: "KVP_STATUS_UNALIGNED",
    6: "KVP_STATUS_INDEX_OUT_OF_RANGE",
    7: "KVP_STATUS_RESERVED_SLOT",
    8: "KVP_STATUS_DOUBLE_FREE",
    9: "KVP_STATUS_NOT_ALLOCATED",
    10: "KVP_STATUS_LAST_LOC_MISMATCH",
    20: "KVP_STATUS_OUT_OF_SLOTS",
    40: "KVP_STATUS_INVALID_STATE",
    41: "KVP_STATUS_FOREIGN_SNAPSHOT",
    42: "KVP_STATUS_POISONED",
    50: "KVP_STATUS_UNSUPPORTED",
    100: "KVP_STATUS_PANIC",
}
STATUS = {name[len("KVP_STATUS_"):]: number for number, name in STATUS_NAMES.items()}

INDEX_TYPE_I64 = 0
INDEX_TYPE_I32 = 1
BACKEND_HOST = 0
BACKEND_CUDA = 1

# ---- structs -------------------------------------------------------------------------------


class _Struct(ctypes.Structure):
    def as_dict(self):
        return {name: getattr(self, name) for name, _ in self._fields_}

    def __repr__(self):
        fields = ", ".join(f"{k}={v!r}" for k, v in self.as_dict().items())
        return f"{type(self).__name__}({fields})"


class PoolConfig(_Struct):
    _fields_ = [
        ("size", ctypes.c_uint64),
        ("page_size", ctypes.c_uint32),
        ("index_type", ctypes.c_uint32),
        ("backend", ctypes.c_uint32),
        ("device", ctypes.c_int32),
        ("need_sort", ctypes.c_bool),
    ]


class PoolInfo(_Struct):
    _fields_ = [
        ("size", ctypes.c_uint64),
        ("kv_rows", ctypes.c_uint64),
        ("padding_slot", ctypes.c_uint64),
        ("page_size", ctypes.c_uint32),
        ("num_pages", ctypes.c_uint32),
        ("index_type", ctypes.c_uint32),
        ("backend", ctypes.c_uint32),
        ("device", ctypes.c_int32),
        ("need_sort", ctypes.c_bool),
        ("in_free_group", ctypes.c_bool),
    ]


class PoolStats(_Struct):
    _fields_ = [
        (name, ctypes.c_uint64)
        for name in (
            "alloc_calls",
            "alloc_extend_calls",
            "alloc_decode_calls",
            "free_calls",
            "tokens_allocated",
            "tokens_freed",
            "pages_allocated",
            "pages_freed",
            "pages_in_use",
            "pages_in_use_peak",
            "failed_allocations",
            "rejected_calls",
            "merges",
            "restores",
        )
    ]


# ---- signatures ----------------------------------------------------------------------------

_status = ctypes.c_int32  # enum kvp_status
_handle = ctypes.c_void_p  # struct kvp_pool *, struct kvp_snapshot *
_buffer = ctypes.c_void_p  # index buffers of the pool's index type
_i64_array = ctypes.POINTER(ctypes.c_int64)  # prefix_lens, seq_lens

# name -> (restype, argtypes), for every function in include/kvpool.h.
SIGNATURES = {
    "kvp_last_error_message": (ctypes.c_size_t, [ctypes.c_char_p, ctypes.c_size_t]),
    "kvp_pool_config_default": (PoolConfig, []),
    "kvp_pool_new": (_status, [ctypes.POINTER(PoolConfig), ctypes.POINTER(_handle)]),
    "kvp_pool_free": (None, [_handle]),
    "kvp_pool_get_info": (_status, [_handle, ctypes.POINTER(PoolInfo)]),
    "kvp_pool_available_size": (_status, [_handle, ctypes.POINTER(ctypes.c_uint64)]),
    "kvp_pool_get_stats": (_status, [_handle, ctypes.POINTER(PoolStats)]),
    "kvp_pool_alloc": (_status, [_handle, ctypes.c_size_t, _buffer, ctypes.c_size_t]),
    "kvp_pool_alloc_extend": (
        _status,
        [
            _handle,
            _i64_array,
            _i64_array,
            _buffer,
            ctypes.c_size_t,
            ctypes.c_size_t,
            _buffer,
            ctypes.c_size_t,
        ],
    ),
    "kvp_pool_alloc_decode": (
        _status,
        [_handle, _i64_array, _buffer, ctypes.c_size_t, _buffer, ctypes.c_size_t],
    ),
    "kvp_pool_free_indices": (_status, [_handle, _buffer, ctypes.c_size_t]),
    "kvp_pool_free_pages": (_status, [_handle, _buffer, ctypes.c_size_t]),
    "kvp_pool_free_segment": (
        _status,
        [_handle, _buffer, ctypes.c_size_t, ctypes.c_size_t, ctypes.c_size_t],
    ),
    "kvp_pool_free_group_begin": (_status, [_handle]),
    "kvp_pool_free_group_end": (_status, [_handle]),
    "kvp_pool_merge_and_sort_free": (_status, [_handle]),
    "kvp_pool_clear": (_status, [_handle]),
    "kvp_pool_backup_state": (_status, [_handle, ctypes.POINTER(_handle)]),
    "kvp_pool_restore_state": (_status, [_handle, _handle]),
    "kvp_snapshot_free": (None, [_handle]),
    "kvp_status_str": (ctypes.c_char_p, [ctypes.c_int32]),
    "kvp_testing_panic": (_status, []),
    "kvp_testing_poison_pool": (_status, [_handle]),
    "kvp_version": (ctypes.c_char_p, []),
    "kvp_abi_version": (ctypes.c_uint32, []),
}

# Exported only by a library built with `--features testing`.
TESTING_FUNCTIONS = frozenset({"kvp_testing_panic", "kvp_testing_poison_pool"})


class KvpError(Exception):
    """A kvpool call returned a status other than KVP_STATUS_OK."""

    def __init__(self, status, name, description, message):
        self.status = status  # the kvp_status number
        self.name = name  # e.g. "KVP_STATUS_DOUBLE_FREE"
        self.description = description  # kvp_status_str(status)
        self.message = message  # kvp_last_error_message() right after the call
        super().__init__(f"{name} ({status}: {description}): {message}")


class Library:
    """The loaded shared library, with every function's signature set.

    The functions are attributes: ``lib.kvp_pool_alloc(...)``.
    """

    def __init__(self, path):
        # An absolute path: dlopen must not search LD_LIBRARY_PATH or the system paths.
        path = os.path.abspath(os.fspath(path))
        self.path = path
        self._cdll = ctypes.CDLL(path)
        self.has_testing = True
        for name, (restype, argtypes) in SIGNATURES.items():
            try:
                fn = getattr(self._cdll, name)
            except AttributeError:
                if name in TESTING_FUNCTIONS:
                    self.has_testing = False
                    continue
                raise
            fn.restype = restype
            fn.argtypes = argtypes
            setattr(self, name, fn)

    def function(self, name):
        """The configured ctypes function `name` (as loaded, bypassing any override)."""
        return getattr(self._cdll, name)

    # ---- statuses and messages ----

    def last_error_message(self):
        n = self.kvp_last_error_message(None, 0)
        buf = ctypes.create_string_buffer(n + 1)
        self.kvp_last_error_message(buf, n + 1)
        return buf.value.decode("utf-8", "replace")

    def status_str(self, status):
        return self.kvp_status_str(status).decode("utf-8")

    def check(self, status):
        """Raises KvpError unless `status` is KVP_STATUS_OK; must run right after the call,
        on the same thread (the message is per thread)."""
        if status != 0:
            message = self.last_error_message()
            name = STATUS_NAMES.get(status, f"KVP_STATUS_<unknown {status}>")
            raise KvpError(status, name, self.status_str(status), message)

    # ---- library-level calls ----

    def version(self):
        return self.kvp_version().decode("ascii")

    def abi_version(self):
        return self.kvp_abi_version()

    def config_default(self):
        return self.kvp_pool_config_default()

    def testing_panic(self):
        self.check(self.kvp_testing_panic())


class _Owner:
    """Owns one native handle and frees it exactly once."""

    _free_name = None

    def __init__(self, lib, handle):
        self._lib = lib
        self._handle = handle
        self._lock = threading.Lock()

    @property
    def handle(self):
        handle = self._handle
        if handle is None:
            raise ValueError(f"{type(self).__name__} is closed")
        return handle

    @property
    def closed(self):
        return self._handle is None

    def close(self):
        with self._lock:
            handle, self._handle = self._handle, None
        if handle is not None:
            getattr(self._lib, self._free_name)(handle)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        with contextlib.suppress(Exception):
            self.close()


class Snapshot(_Owner):
    """A copy of a pool's allocator state (kvp_pool_backup_state)."""

    _free_name = "kvp_snapshot_free"


class Pool(_Owner):
    """A kvpool slot allocator. Index lists are Python ints; buffers passed to the library
    have the pool's index type (int64, or int32 for ``index_type=INDEX_TYPE_I32``)."""

    _free_name = "kvp_pool_free"

    def __init__(
        self,
        lib,
        size,
        page_size=1,
        index_type=INDEX_TYPE_I64,
        need_sort=False,
        backend=BACKEND_HOST,
        device=0,
    ):
        config = lib.config_default()
        config.size = size
        config.page_size = page_size
        config.index_type = index_type
        config.need_sort = need_sort
        config.backend = backend
        config.device = device
        handle = ctypes.c_void_p()
        lib.check(lib.kvp_pool_new(ctypes.byref(config), ctypes.byref(handle)))
        super().__init__(lib, handle.value)
        self.index_type = index_type
        self.index_ctype = ctypes.c_int32 if index_type == INDEX_TYPE_I32 else ctypes.c_int64
        self.page_size = page_size

    # ---- buffers ----

    def _indices(self, values):
        """A ctypes array of the pool's index type holding `values` (range-checked: ctypes
        would silently wrap an int that does not fit)."""
        values = [int(v) for v in values]
        bits = 8 * ctypes.sizeof(self.index_ctype)
        low, high = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
        for i, v in enumerate(values):
            if not low <= v <= high:
                raise OverflowError(f"element {i} = {v} does not fit {self.index_ctype.__name__}")
        return (self.index_ctype * len(values))(*values)

    def _out(self, n):
        return (self.index_ctype * n)()

    @staticmethod
    def _lengths(values):
        values = [int(v) for v in values]
        return (ctypes.c_int64 * len(values))(*values)

    def _call(self, name, *args):
        self._lib.check(getattr(self._lib, name)(self.handle, *args))

    # ---- queries ----

    def info(self):
        info = PoolInfo()
        self._call("kvp_pool_get_info", ctypes.byref(info))
        return info

    def available_size(self):
        n = ctypes.c_uint64()
        self._call("kvp_pool_available_size", ctypes.byref(n))
        return n.value

    def stats(self):
        stats = PoolStats()
        self._call("kvp_pool_get_stats", ctypes.byref(stats))
        return stats

    # ---- allocation ----

    def alloc(self, num_tokens, out_len=None):
        out = self._out(num_tokens if out_len is None else out_len)
        self._call("kvp_pool_alloc", num_tokens, out, len(out))
        return list(out[:num_tokens])

    def alloc_extend(self, prefix_lens, seq_lens, last_loc, extend_num_tokens=None,
                     out_len=None):
        if extend_num_tokens is None:
            extend_num_tokens = sum(int(s) - int(p) for p, s in zip(prefix_lens, seq_lens))
        batch = len(seq_lens)
        if len(prefix_lens) != batch or len(last_loc) != batch:
            raise ValueError("prefix_lens, seq_lens and last_loc need one entry per request")
        out = self._out(max(extend_num_tokens, 0) if out_len is None else out_len)
        self._call(
            "kvp_pool_alloc_extend",
            self._lengths(prefix_lens),
            self._lengths(seq_lens),
            self._indices(last_loc),
            batch,
            extend_num_tokens,
            out,
            len(out),
        )
        return list(out[:extend_num_tokens])

    def alloc_decode(self, seq_lens, last_loc, out_len=None):
        batch = len(seq_lens)
        if len(last_loc) != batch:
            raise ValueError("seq_lens and last_loc need one entry per request")
        out = self._out(batch if out_len is None else out_len)
        self._call(
            "kvp_pool_alloc_decode",
            self._lengths(seq_lens),
            self._indices(last_loc),
            batch,
            out,
            len(out),
        )
        return list(out[:batch])

    # ---- frees ----

    def free_indices(self, indices):
        buf = self._indices(indices)
        self._call("kvp_pool_free_indices", buf, len(buf))

    def free_pages(self, page_ids):
        buf = self._indices(page_ids)
        self._call("kvp_pool_free_pages", buf, len(buf))

    def free_segment(self, row, start_pos, length):
        buf = self._indices(row)
        self._call("kvp_pool_free_segment", buf, len(buf), start_pos, length)

    def free_group_begin(self):
        self._call("kvp_pool_free_group_begin")

    def free_group_end(self):
        self._call("kvp_pool_free_group_end")

    @contextlib.contextmanager
    def free_group(self):
        """``with pool.free_group(): ...`` — begin, and end even if the body raises."""
        self.free_group_begin()
        try:
            yield self
        finally:
            self.free_group_end()

    def merge_and_sort_free(self):
        self._call("kvp_pool_merge_and_sort_free")

    def clear(self):
        self._call("kvp_pool_clear")

    # ---- snapshots ----

    def backup_state(self):
        handle = ctypes.c_void_p()
        self._call("kvp_pool_backup_state", ctypes.byref(handle))
        return Snapshot(self._lib, handle.value)

    def restore_state(self, snapshot):
        self._call("kvp_pool_restore_state", snapshot.handle)

    # ---- testing builds only ----

    def testing_poison(self):
        self._call("kvp_testing_poison_pool")
