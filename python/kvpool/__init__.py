"""kvpool from Python: a ctypes binding of kvpool's C ABI (include/kvpool.h).

Standard library only, and importing it needs nothing built. The shared library is loaded
on first use from an absolute path (never searched through LD_LIBRARY_PATH), the first of:
the path given to ``kvpool.load(path)`` (or ``Library(path)``, or ``lib=`` of a handle
class), ``$KVPOOL_LIB``, a ``libkvpool.so`` next to this package, and the newest release
build of the source tree holding it: ``target/release/libkvpool.so`` (``cargo build
--release``) or ``target/release/deps/libkvpool.so`` (where every release build of the crate
writes its cdylib, e.g. ``cargo test --release`` and ``cargo run --release --example demo``,
which do not copy it up to ``target/release``).
Every ``kvp_*`` function gets the ``argtypes`` and ``restype`` of ``SIGNATURES``, which
tests/python/test_kvpool.py checks against the header.

    import kvpool
    with kvpool.Pool(64, page_size=4) as pool:
        slots = pool.alloc_extend([0], [2], [-1])   # [4, 5]

The admission objects have classes too: ``Scheduler`` (kvp_scheduler, the
continuous-batching step; ``step()`` returns a plain ``StepPlan`` copied out of the
library's arrays), ``Adder`` (kvp_adder, one prefill pass's budget) and ``Delayer``
(kvp_delayer, DP-rank prefill negotiation):

    with kvpool.Pool(4096, page_size=16) as pool, kvpool.Scheduler(pool) as sched:
        sched.submit(1, input_len=100, max_new_tokens=20)
        plan = sched.step()    # plan.prefill == [PrefillEntryT(id=1, prefix_len=0, ...)]

Failures raise ``KvpError`` (status number, status name, the library's description of the
status and the thread's ``kvp_last_error_message``). Every integer the package hands to C
(arguments, struct fields, the elements of a list it converts) is first checked against its
C type, where ctypes would silently wrap it: a value out of range raises ``OverflowError``
naming the argument and the value, before any call (buffers and tensors go to C as they
are, and the library checks their values). Pools, snapshots, schedulers, adders
and delayers are freed exactly once: by ``close()``, by leaving a ``with`` block, or (as a
fallback) when collected.

Host arrays (the index and length arguments of a host pool's methods, and the host copies
of the lengths of a device pool's): each may be

- a 1-D buffer of signed integers of the element's width (lengths int64; indices the pool's
  index type, int64 or int32): an ``array.array`` (typecode ``'q'``, ``'i'`` for int32), a
  numpy array, a ``memoryview``, any object with the buffer protocol. Passed by address, no
  copy, O(1) in Python (a read-only buffer is copied first);
- a 1-D, contiguous torch CPU tensor (``torch.int64`` lengths, the pool's index dtype for
  indices), passed by ``data_ptr()``, no copy, O(1);
- a list (or tuple, or other iterable) of ints: converted with ``array.array``, O(n) at C
  speed (about 30 ns an element: 4,096 lengths cost ~0.1 ms), which refuses an element that
  does not fit; only then is the list walked in Python to name it in the ``OverflowError``.

On the hot paths use buffers or tensors: the call then costs a few microseconds more than
the same call from C (``benches/python_overhead.py`` measures it). A wrong element type,
shape or layout raises ``TypeError`` / ``ValueError`` naming the argument before any call;
the values of a buffer or tensor are checked by the library (a negative length is refused as
INVALID_LENGTHS, an invalid index by its own status). Results follow the inputs: a list for
list inputs, a tensor if a tensor went in, a numpy array for numpy inputs, an
``array.array`` for other buffers. ``out=`` takes a preallocated tensor or writable buffer
(SGLang's ``out_cache_loc``), written in place, and returns it itself when exactly filled,
else its written prefix (``out[:k]``; a memoryview for an ``array.array``). ``alloc_extend``'s
``extend_num_tokens`` defaults to ``sum(seq_lens) - sum(prefix_lens)``, an O(n) sum: pass it
(SGLang has it) to skip that. Host pools read and write host memory only, so their methods
take CPU tensors and refuse a CUDA tensor with ``ValueError`` (its pointer must never be
read as a host pointer). This module never imports torch or numpy; it recognizes their
arrays once the caller has.

A loop that allocates into the same buffers every step can prepare the call once
(``prepare_alloc_extend``, ``prepare_alloc_decode`` and their ``_async`` forms): the buffers
are checked and their addresses kept, and ``prepared(batch)`` (``prepared(batch,
extend_num_tokens)``) costs little more than the library call (see ``_prepared.py``).

The hot methods call ``lib.fast.kvp_*``: the same functions with every pointer parameter
declared ``void *``, so that addresses go in as plain ints (ctypes converts an int argument
fastest; a typed pointer argument costs ~1 us more to build); the hottest of them
(``_native.CALLS``) are the library's own builtins, which take the same ints without
ctypes' conversion. Given buffers for every
array (numpy arrays, array.array, memoryviews; ``out`` too, or none: a new one of the
inputs' kind), ``alloc_extend`` (its default ``extend_num_tokens`` summed there too),
``alloc_decode``, ``alloc``
(with ``out``) and ``free_indices`` call ``lib.python.kvp_python_pool_*`` instead, the
library's own builtins, which take the arrays as Python objects and read their buffers in
the library (tens of nanoseconds an array, against 0.5-0.9 us here, and no ctypes argument
conversion; see ``_native.py``); anything else, or
``KVPOOL_PYTHON_NATIVE=0``, takes the path above.

Device pools (``Pool(size, page_size=16, backend="cuda", device=0)``; the library uses the
device's primary context, the one PyTorch uses) keep their state in device memory and are
driven by the ``*_async`` methods: ``alloc_async``, ``alloc_extend_async``,
``alloc_decode_async``, ``free_async``, ``free_pages_async``, ``free_segment_async``,
``free_group_end_async``, ``merge_and_sort_free_async``, ``clear_async``,
``backup_state_async``, ``restore_state_async``; plus ``check_device()`` and
``available_size_bound()``. They take CUDA tensors on the pool's device (by ``data_ptr()``;
dtype, 1-D and contiguity checked before the call), enqueue kernels on ``stream`` and return
without synchronizing; an output tensor (``out=``, else a new one allocated on that stream)
holds its slots once the stream passes the call. ``stream=None`` is
``torch.cuda.current_stream(device)`` (read through ``torch._C._cuda_getCurrentRawStream``,
~0.1 us); an int (cudaStream_t / CUstream) or a ``torch.cuda.Stream`` works too. The host
copies of the lengths (``prefix_lens_host``, ``seq_lens_host``: host arrays as above, e.g. CPU
tensors, SGLang's ``*_lens_cpu``) are required arguments:
kvpool plans and checks an allocation on the host, and taking them from the device tensors
(``.tolist()``, ``.cpu()``) would wait for the stream. What the host can check (a
shortage, bad lengths, a wrong stream) is reported by the call itself; an invalid index
(double free, foreign index, page 0, bad ``last_loc``) is found by a kernel and reported
later, by ``check_device()`` and every later call (KvpError DEVICE_FAULT), until
``clear_async()`` or ``restore_state_async()``. Device tensors passed to a call must stay
allocated until the stream passes it (a tensor allocated on that stream is safe to drop; one
from another stream needs ``tensor.record_stream(stream)``), calls on one pool must be
ordered on the device (one stream, or streams ordered with events). Closing a device pool
or snapshot never waits for the GPU and is safe while its calls are still queued: the library
frees its device memory once the stream has passed them (stream-ordered release;
``device_pending_releases()`` counts those still waiting). ``Pool.set_debug(
DEBUG_STREAM_ORDER)`` (or ``KVPOOL_DEBUG=stream_order`` in the environment) checks on the
device that calls from several streams are ordered (KvpError UNORDERED_STREAMS otherwise).

    import torch, kvpool
    pool = kvpool.Pool(4096, page_size=16, backend="cuda", device=0)
    dev = torch.device("cuda", 0)
    prefix_cpu, seq_cpu = [0, 0], [20, 5]
    out_cache_loc = pool.alloc_extend_async(
        torch.tensor(prefix_cpu, device=dev), torch.tensor(seq_cpu, device=dev),
        torch.tensor([-1, -1], device=dev),
        prefix_lens_host=prefix_cpu, seq_lens_host=seq_cpu)   # 25 slots, written in order
"""

import array
import collections
import contextlib
import ctypes
import dataclasses
import operator
import os
import sys
import threading
import types

from . import _buffers, _native, _prepared

__all__ = [
    "ABI_VERSION",
    "BACKEND_CUDA",
    "DecodeReservation",
    "MAX_RESERVED_STEPS",
    "BACKEND_HOST",
    "INDEX_TYPE_I32",
    "INDEX_TYPE_I64",
    "KvpError",
    "Library",
    "Pool",
    "PoolConfig",
    "PoolInfo",
    "PoolStats",
    "ReqTable",
    "SIGNATURES",
    "STATUS_NAMES",
    "Snapshot",
    "TESTING_FUNCTIONS",
    "digest_value",
    "find_library",
    "load",
    # admission
    "ADD_RESULT_NAMES",
    "Adder",
    "AdderConfig",
    "Admission",
    "Budget",
    "Candidate",
    "DELAY_VERDICT_NAMES",
    "Delayer",
    "DelayerConfig",
    "ENUMS",
    "Evicted",
    "ExtendNeed",
    "Finished",
    "PHASE_NAMES",
    "PrefillEntry",
    "RankInfo",
    "Request",
    "RequestState",
    "RunningRequest",
    "STEP_KIND_NAMES",
    "STRUCTS",
    "Scheduler",
    "SchedulerConfig",
    "SchedulerStats",
    "StepPlan",
    "SubmitResult",
]

# The package's version: the library's (Cargo.toml, KVP_VERSION_* in the header), which the
# wheel's metadata takes from here (pyproject.toml); `load().version()` is the loaded one's.
__version__ = "0.1.0"

# KVP_ABI_VERSION of the header this binding mirrors; a library with another ABI is refused.
ABI_VERSION = 1

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
    21: "KVP_STATUS_OUT_OF_MEMORY",
    40: "KVP_STATUS_INVALID_STATE",
    41: "KVP_STATUS_FOREIGN_SNAPSHOT",
    42: "KVP_STATUS_POISONED",
    43: "KVP_STATUS_WRONG_BACKEND",
    50: "KVP_STATUS_UNSUPPORTED",
    60: "KVP_STATUS_CUDA_UNAVAILABLE",
    61: "KVP_STATUS_CUDA_ERROR",
    62: "KVP_STATUS_WRONG_STREAM",
    63: "KVP_STATUS_DEVICE_FAULT",
    64: "KVP_STATUS_UNORDERED_STREAMS",
    100: "KVP_STATUS_PANIC",
}
STATUS = {name[len("KVP_STATUS_"):]: number for number, name in STATUS_NAMES.items()}

INDEX_TYPE_I64 = 0
INDEX_TYPE_I32 = 1
BACKEND_HOST = 0
BACKEND_CUDA = 1

# enum kvp_policy (kvp_scheduler_config.policy)
POLICY_FCFS = 0
POLICY_LOF = 1
POLICY_RANDOM = 2
POLICY_LPM = 3
POLICY_DFS_WEIGHT = 4
# enum kvp_retraction (kvp_scheduler_config.retraction)
RETRACTION_LENGTH = 0
RETRACTION_PRIORITY = 1
# enum kvp_step_kind (kvp_step_plan.kind)
STEP_KIND_IDLE = 0
STEP_KIND_PREFILL = 1
STEP_KIND_DECODE = 2
# enum kvp_phase (kvp_request_state.phase)
PHASE_WAITING = 0
PHASE_CHUNKING = 1
PHASE_RUNNING = 2
# enum kvp_add_result (kvp_admission.next, kvp_budget.state)
ADD_RESULT_CONTINUE = 0
ADD_RESULT_NO_TOKEN = 1
ADD_RESULT_OTHER = 2
# enum kvp_delay_verdict (kvp_delayer_negotiate)
DELAY_VERDICT_NO_WAIT = 0
DELAY_VERDICT_WAIT_SUCCESS = 1
DELAY_VERDICT_NONE_READY = 2
DELAY_VERDICT_TOKEN_WATERMARK = 3
DELAY_VERDICT_WAIT_TIMEOUT = 4
DELAY_VERDICT_DELAY = 5
# enum kvp_debug (kvp_pool_set_debug flags)
DEBUG_STREAM_ORDER = 1
DEBUG_REPLAY_CALLS = 2

# Every C enum of the header: {enum name: {constant name: value}} (what the tests compare
# with include/kvpool.h), built from the constants above.
_ENUM_PREFIXES = {
    "kvp_index_type": "INDEX_TYPE_",
    "kvp_backend": "BACKEND_",
    "kvp_policy": "POLICY_",
    "kvp_retraction": "RETRACTION_",
    "kvp_step_kind": "STEP_KIND_",
    "kvp_phase": "PHASE_",
    "kvp_add_result": "ADD_RESULT_",
    "kvp_delay_verdict": "DELAY_VERDICT_",
    "kvp_debug": "DEBUG_",
}
ENUMS = {
    enum: {"KVP_" + name: value for name, value in globals().items()
           if name.startswith(prefix) and isinstance(value, int)}
    for enum, prefix in _ENUM_PREFIXES.items()
}
ENUMS["kvp_status"] = {name: number for number, name in STATUS_NAMES.items()}
__all__ += sorted(name[len("KVP_"):] for enum, values in ENUMS.items()
                  for name in values if enum not in ("kvp_status", "kvp_index_type",
                                                     "kvp_backend"))


def _names(enum, prefix):
    return {value: name[len(prefix):] for name, value in ENUMS[enum].items()}


STEP_KIND_NAMES = _names("kvp_step_kind", "KVP_STEP_KIND_")  # {1: "PREFILL", ...}
PHASE_NAMES = _names("kvp_phase", "KVP_PHASE_")
ADD_RESULT_NAMES = _names("kvp_add_result", "KVP_ADD_RESULT_")
DELAY_VERDICT_NAMES = _names("kvp_delay_verdict", "KVP_DELAY_VERDICT_")

# ---- integer range checks ------------------------------------------------------------------
# ctypes silently wraps an int that does not fit its C type (2**64 + 3 becomes 3, -1 becomes
# UINT64_MAX), so every integer this package hands to C is checked against its C type first,
# before any call: a bad value raises OverflowError naming the argument and changes nothing.

_C_INT_BOUNDS = {
    "int32_t": (-(1 << 31), (1 << 31) - 1),
    "uint32_t": (0, (1 << 32) - 1),
    "int64_t": (-(1 << 63), (1 << 63) - 1),
    "uint64_t": (0, (1 << 64) - 1),
    "size_t": (0, (1 << (8 * ctypes.sizeof(ctypes.c_size_t))) - 1),
    "uintptr_t": (0, (1 << (8 * ctypes.sizeof(ctypes.c_void_p))) - 1),
}


def _out_of_range(what, value, c_type):
    low, high = _C_INT_BOUNDS[c_type]
    return OverflowError(f"{what} = {value} is out of range for {c_type} [{low}, {high}]")


def _int(value, c_type, what):
    """``value`` (anything with ``__index__``) as an int that fits the C integer type
    ``c_type`` ("uint64_t", "size_t", ...); else OverflowError (TypeError for a non-integer)
    naming ``what``."""
    try:
        number = operator.index(value)
    except TypeError:
        raise TypeError(f"{what} must be an integer, not {type(value).__name__}") from None
    low, high = _C_INT_BOUNDS[c_type]
    if not low <= number <= high:
        raise _out_of_range(what, number, c_type)
    return number


# array.array typecodes of the C integer types _int_array converts lists to.
_ARRAY_TYPECODES = {
    f"{'u' if code.isupper() else ''}int{8 * array.array(code).itemsize}_t": code
    for code in "QqIi"
}


def _int_array(values, c_type, ctype, what):
    """(ctypes array of ``ctype``, length) holding the integers of ``values``, each checked
    against ``c_type``: converted by ``array.array`` (O(n) at C speed, refusing a value that
    does not fit), and only if it refuses one walked in Python to name it (``what[i]``)."""
    typecode = _ARRAY_TYPECODES[c_type]
    if type(values) is not list and type(values) is not tuple:
        # As _buffers.sequence_array: an iterator is read once (and walked again below if
        # refused), bytes give their integers (array.array would read raw machine words).
        values = list(values)
    try:
        converted = array.array(typecode, values)
    except (OverflowError, TypeError):
        converted = array.array(typecode, [_int(value, c_type, f"{what}[{i}]")
                                           for i, value in enumerate(values)])
    n = len(converted)
    if n == 0:
        return (ctype * 0)(), 0  # an empty array.array's buffer may be NULL or unaligned
    return (ctype * n).from_buffer(converted), n


def _field_c_type(ctype):
    """The C integer type name of a ctypes integer field type, None for other types (bool,
    double, pointers)."""
    code = getattr(ctype, "_type_", None)
    if not isinstance(code, str) or code not in "bBhHiIlLqQ":
        return None
    return f"{'' if code.islower() else 'u'}int{8 * ctypes.sizeof(ctype)}_t"


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


class ReqTable(_Struct):
    """``struct kvp_req_table``: a request-to-token table borrowed for one call (see
    ``Pool.alloc_extend_rows``). Usually built from a 2-D tensor or numpy array by the
    methods themselves; pass one explicitly for other memory."""
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("index_type", ctypes.c_uint32),
        ("rows", ctypes.c_uint64),
        ("row_stride", ctypes.c_uint64),
        ("row_len", ctypes.c_uint64),
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
            "slots_freed",
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


# ---- admission structs (field order and types exactly as in include/kvpool.h) ----------

_u64 = ctypes.c_uint64


class SchedulerConfig(_Struct):
    _fields_ = [
        ("capacity", _u64),
        ("page_size", _u64),
        ("max_prefill_tokens", _u64),
        ("chunked_prefill_size", _u64),
        ("clip_max_new_tokens", _u64),
        ("truncation_align_size", _u64),
        ("prefill_max_requests", _u64),
        ("max_running_requests", _u64),
        ("max_chunked_requests", _u64),
        ("policy", ctypes.c_uint32),
        ("retraction", ctypes.c_uint32),
        ("policy_seed", _u64),
        ("enable_priority", ctypes.c_bool),
        ("low_priority_values_first", ctypes.c_bool),
        ("preemption_threshold", ctypes.c_int64),
        ("enable_mixed_chunk", ctypes.c_bool),
        ("prefix_cache_disabled", ctypes.c_bool),
        ("init_new_token_ratio", ctypes.c_double),
        ("min_new_token_ratio_factor", ctypes.c_double),
        ("new_token_ratio_decay_steps", ctypes.c_uint32),
        ("schedule_conservativeness", ctypes.c_double),
        ("dynamic_chunk_a", ctypes.c_double),
        ("dynamic_chunk_b", ctypes.c_double),
        ("dynamic_chunk_context_len", _u64),
    ]


class Request(_Struct):
    _fields_ = [
        ("id", _u64),
        ("input_len", _u64),
        ("prefix_len", _u64),
        ("prefix_evictable", _u64),
        ("max_new_tokens", _u64),
        ("output_len", _u64),
        ("priority", ctypes.c_int64),
        ("ignore_eos", ctypes.c_bool),
    ]


class SubmitResult(_Struct):
    _fields_ = [("queued", ctypes.c_bool), ("needed", _u64), ("capacity", _u64)]


class PrefillEntry(_Struct):
    _fields_ = [
        ("id", _u64),
        ("prefix_len", _u64),
        ("extend_len", _u64),
        ("chunked", ctypes.c_bool),
    ]


class Evicted(_Struct):
    _fields_ = [("id", _u64), ("kv_len", _u64), ("prefix_len", _u64)]


class Finished(_Struct):
    """struct kvp_finished (``Scheduler.finish_ex`` / ``abort_ex``): the request's KV length
    and the leading ``prefix_len`` tokens of its row that are its cached prefix, locked
    since its admission (unlock them; free or cache ``row[prefix_len:kv_len]``)."""

    _fields_ = [("id", _u64), ("kv_len", _u64), ("prefix_len", _u64),
                ("prefix_evictable", _u64)]


class StepPlanC(_Struct):
    """struct kvp_step_plan as the library writes it (arrays borrowed from the scheduler);
    ``Scheduler.step`` copies it into a ``StepPlan``."""

    _fields_ = [
        ("kind", ctypes.c_uint32),
        ("batch_is_full", ctypes.c_bool),
        ("new_token_ratio", ctypes.c_double),
        ("prefill", ctypes.POINTER(PrefillEntry)),
        ("num_prefill", ctypes.c_size_t),
        ("decode", ctypes.POINTER(_u64)),
        ("num_decode", ctypes.c_size_t),
        ("retracted", ctypes.POINTER(Evicted)),
        ("num_retracted", ctypes.c_size_t),
        ("preempted", ctypes.POINTER(Evicted)),
        ("num_preempted", ctypes.c_size_t),
        ("aborted", ctypes.POINTER(Evicted)),
        ("num_aborted", ctypes.c_size_t),
    ]


class RequestState(_Struct):
    _fields_ = [("phase", ctypes.c_uint32), ("kv_len", _u64), ("output_len", _u64)]


class SchedulerStats(_Struct):
    _fields_ = [
        (name, _u64)
        for name in (
            "steps",
            "prefill_steps",
            "decode_steps",
            "admitted",
            "chunks",
            "retractions",
            "preemptions",
            "aborts",
            "unfittable",
            "finished",
            "waiting",
            "chunking",
            "running",
        )
    ] + [("new_token_ratio", ctypes.c_double)]


class AdderConfig(_Struct):
    _fields_ = [
        ("page_size", _u64),
        ("max_prefill_tokens", _u64),
        ("chunked_prefill_size", _u64),
        ("num_mixed_decode_tokens", _u64),
        ("clip_max_new_tokens", _u64),
        ("truncation_align_size", _u64),
        ("prefill_max_requests", _u64),
        ("max_chunked_requests", _u64),
        ("new_token_ratio", ctypes.c_double),
        ("prefix_cache_disabled", ctypes.c_bool),
    ]

    @classmethod
    def sglang_defaults(cls, page_size=1):
        """SGLang's defaults (the header has no kvp_adder_config_default): max_prefill_tokens
        16384, chunked prefill 8192, clip 4096, ratio 0.7, one chunked request."""
        return _new(cls, page_size=page_size, max_prefill_tokens=16384,
                    chunked_prefill_size=8192, num_mixed_decode_tokens=0,
                    clip_max_new_tokens=4096, truncation_align_size=0, prefill_max_requests=0,
                    max_chunked_requests=1, new_token_ratio=0.7, prefix_cache_disabled=False)


class RunningRequest(_Struct):
    _fields_ = [
        ("input_len", _u64),
        ("output_len", _u64),
        ("max_new_tokens", _u64),
        ("ignore_eos", ctypes.c_bool),
    ]


class Candidate(_Struct):
    _fields_ = [
        ("input_len", _u64),
        ("prefix_len", _u64),
        ("prefix_evictable", _u64),
        ("max_new_tokens", _u64),
        ("output_len", _u64),
        ("ignore_eos", ctypes.c_bool),
    ]


class Admission(_Struct):
    _fields_ = [
        ("admitted", ctypes.c_bool),
        ("chunked", ctypes.c_bool),
        ("extend_len", _u64),
        ("next", ctypes.c_uint32),
    ]


class Budget(_Struct):
    _fields_ = [
        ("rem_total_tokens", ctypes.c_double),
        ("cur_rem_tokens", ctypes.c_int64),
        ("rem_input_tokens", ctypes.c_int64),
        ("rem_chunk_tokens", ctypes.c_int64),
        ("state", ctypes.c_uint32),
    ]


class DelayerConfig(_Struct):
    _fields_ = [
        ("max_delay_passes", ctypes.c_uint32),
        ("token_usage_low_watermark", ctypes.c_double),
        ("max_running_requests", _u64),
        ("queue_min_ratio", ctypes.c_double),
        ("prefill_max_requests", _u64),
    ]


class RankInfo(_Struct):
    _fields_ = [
        ("prefillable", ctypes.c_bool),
        ("force_allow", ctypes.c_bool),
        ("timed_out", ctypes.c_bool),
        ("running_bs", _u64),
        ("max_prefill_bs", _u64),
        ("waiting_len", _u64),
    ]


# Every struct the header defines, by C name.
STRUCTS = {
    "kvp_pool_config": PoolConfig,
    "kvp_pool_info": PoolInfo,
    "kvp_req_table": ReqTable,
    "kvp_pool_stats": PoolStats,
    "kvp_scheduler_config": SchedulerConfig,
    "kvp_request": Request,
    "kvp_submit_result": SubmitResult,
    "kvp_prefill_entry": PrefillEntry,
    "kvp_evicted": Evicted,
    "kvp_finished": Finished,
    "kvp_step_plan": StepPlanC,
    "kvp_request_state": RequestState,
    "kvp_scheduler_stats": SchedulerStats,
    "kvp_adder_config": AdderConfig,
    "kvp_running_request": RunningRequest,
    "kvp_candidate": Candidate,
    "kvp_admission": Admission,
    "kvp_budget": Budget,
    "kvp_delayer_config": DelayerConfig,
    "kvp_rank_info": RankInfo,
}

# ---- signatures ----------------------------------------------------------------------------

_status = ctypes.c_int32  # enum kvp_status
_handle = ctypes.c_void_p  # struct kvp_pool *, kvp_snapshot *, kvp_scheduler *, ...
_u64_p = ctypes.POINTER(ctypes.c_uint64)  # uint64_t * (outputs), const uint64_t * (paths)
_buffer = ctypes.c_void_p  # index buffers of the pool's index type
_i64_array = ctypes.POINTER(ctypes.c_int64)  # prefix_lens, seq_lens
_table_p = ctypes.POINTER(ReqTable)  # const struct kvp_req_table *
_i32_p = ctypes.POINTER(ctypes.c_int32)  # FlashInfer's int32 page tables
_stream = ctypes.c_void_p  # struct CUstream_st * (cudaStream_t, CUstream; NULL: legacy default)

# name -> (restype, argtypes), for every function in include/kvpool.h.
SIGNATURES = {
    "kvp_last_error_message": (ctypes.c_size_t, [ctypes.c_char_p, ctypes.c_size_t]),
    "kvp_pool_config_default": (PoolConfig, []),
    "kvp_pool_new": (_status, [ctypes.POINTER(PoolConfig), ctypes.POINTER(_handle)]),
    "kvp_pool_free": (None, [_handle]),
    "kvp_pool_get_info": (_status, [_handle, ctypes.POINTER(PoolInfo)]),
    "kvp_pool_available_size": (_status, [_handle, ctypes.POINTER(ctypes.c_uint64)]),
    "kvp_pool_get_stats": (_status, [_handle, ctypes.POINTER(PoolStats)]),
    "kvp_pool_extend_need": (
        _status,
        [_handle, _i64_array, _i64_array, ctypes.c_size_t, _u64_p, _u64_p],
    ),
    "kvp_pool_decode_need": (_status, [_handle, _i64_array, ctypes.c_size_t, _u64_p]),
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
    "kvp_pool_rewind": (_status, [_handle, _buffer, ctypes.c_size_t]),
    "kvp_pool_free_segment": (
        _status,
        [_handle, _buffer, ctypes.c_size_t, ctypes.c_size_t, ctypes.c_size_t],
    ),
    "kvp_pool_free_group_begin": (_status, [_handle]),
    "kvp_pool_free_group_end": (_status, [_handle]),
    "kvp_pool_merge_and_sort_free": (_status, [_handle]),
    "kvp_pool_clear": (_status, [_handle]),
    # The package's own entry points: called through ``lib.python`` (_native.py: builtins
    # the library makes, and a PyDLL for the two calls that set them up), never through
    # these CDLL objects.
    "kvp_python_init": (_status, [ctypes.c_void_p] * 6),
    "kvp_python_methods": (_status, [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t,
                                     ctypes.POINTER(ctypes.c_void_p)]),
    "kvp_python_pool_alloc_extend": (ctypes.c_int32, [_handle, ctypes.c_void_p, ctypes.c_void_p,
                                                    ctypes.c_void_p, ctypes.c_size_t,
                                                    ctypes.c_void_p]),
    "kvp_python_pool_alloc_decode": (ctypes.c_int32, [_handle, ctypes.c_void_p, ctypes.c_void_p,
                                                    ctypes.c_void_p]),
    "kvp_python_pool_alloc": (ctypes.c_int32, [_handle, ctypes.c_size_t, ctypes.c_void_p]),
    "kvp_python_pool_free_indices": (ctypes.c_int32, [_handle, ctypes.c_void_p]),
    "kvp_python_pool_alloc_extend_async": (ctypes.c_int32, [
        _handle, ctypes.c_void_p, ctypes.c_void_p, _i64_array, _i64_array, _buffer,
        ctypes.c_size_t, ctypes.c_size_t, _buffer, ctypes.c_size_t, _stream]),
    "kvp_python_pool_alloc_decode_async": (ctypes.c_int32, [
        _handle, ctypes.c_void_p, _i64_array, _buffer, ctypes.c_size_t, _buffer,
        ctypes.c_size_t, _stream]),
    "kvp_python_extend_tokens": (ctypes.c_int64, [ctypes.c_void_p, ctypes.c_void_p]),
    "kvp_pool_backup_state": (_status, [_handle, ctypes.POINTER(_handle)]),
    "kvp_pool_restore_state": (_status, [_handle, _handle]),
    "kvp_snapshot_free": (None, [_handle]),
    # device pools (KVP_BACKEND_CUDA): enqueued on a stream, device buffers
    "kvp_pool_alloc_async": (
        _status,
        [_handle, ctypes.c_size_t, _buffer, ctypes.c_size_t, _stream],
    ),
    "kvp_pool_alloc_extend_async": (
        _status,
        [
            _handle,
            _i64_array,  # prefix_lens_host
            _i64_array,  # seq_lens_host
            _i64_array,  # prefix_lens (device)
            _i64_array,  # seq_lens (device)
            _buffer,  # last_loc (device)
            ctypes.c_size_t,  # batch_size
            ctypes.c_size_t,  # extend_num_tokens
            _buffer,  # out (device)
            ctypes.c_size_t,  # out_len
            _stream,
        ],
    ),
    "kvp_pool_alloc_decode_async": (
        _status,
        [_handle, _i64_array, _i64_array, _buffer, ctypes.c_size_t, _buffer, ctypes.c_size_t,
         _stream],
    ),
    "kvp_pool_free_indices_async": (_status, [_handle, _buffer, ctypes.c_size_t, _stream]),
    "kvp_pool_free_pages_async": (_status, [_handle, _buffer, ctypes.c_size_t, _stream]),
    "kvp_pool_rewind_async": (_status, [_handle, _buffer, ctypes.c_size_t, _stream]),
    "kvp_pool_free_segment_async": (
        _status,
        [_handle, _buffer, ctypes.c_size_t, ctypes.c_size_t, ctypes.c_size_t, _stream],
    ),
    "kvp_pool_free_group_end_async": (_status, [_handle, _stream]),
    "kvp_pool_merge_and_sort_free_async": (_status, [_handle, _stream]),
    "kvp_pool_clear_async": (_status, [_handle, _stream]),
    "kvp_pool_backup_state_async": (_status, [_handle, ctypes.POINTER(_handle), _stream]),
    "kvp_pool_restore_state_async": (_status, [_handle, _handle, _stream]),
    "kvp_pool_check_device": (_status, [_handle]),
    "kvp_pool_available_size_bound": (
        _status,
        [_handle, ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_bool)],
    ),
    # decode reservations (docs/graph-decode.md)
    "kvp_pool_reserve_decode": (
        _status,
        [_handle, _i64_array, _buffer, ctypes.c_size_t, ctypes.c_uint32,
         ctypes.POINTER(_handle)],
    ),
    "kvp_pool_reserve_decode_async": (
        _status,
        [_handle, _i64_array, _i64_array, _buffer, ctypes.c_size_t, ctypes.c_uint32,
         ctypes.POINTER(_handle), _stream],
    ),
    "kvp_decode_reservation_step": (
        _status,
        [_handle, _buffer, ctypes.c_size_t, _table_p, _i64_array],
    ),
    "kvp_decode_reservation_step_async": (
        _status,
        [_handle, _buffer, _table_p, _i64_array, _stream],
    ),
    "kvp_decode_reservation_finish": (_status, [_handle, _handle, ctypes.c_uint32]),
    "kvp_decode_reservation_finish_async": (
        _status,
        [_handle, _handle, ctypes.c_uint32, _stream],
    ),
    "kvp_decode_reservation_get_info": (
        _status,
        [_handle, ctypes.POINTER(ctypes.c_uint32), ctypes.POINTER(ctypes.c_size_t), _u64_p],
    ),
    "kvp_decode_reservation_free": (None, [_handle]),
    "kvp_status_str": (ctypes.c_char_p, [ctypes.c_int32]),
    "kvp_testing_panic": (_status, []),
    "kvp_testing_poison_pool": (_status, [_handle]),
    "kvp_version": (ctypes.c_char_p, []),
    "kvp_abi_version": (ctypes.c_uint32, []),
    # kvp_scheduler
    "kvp_scheduler_config_default": (SchedulerConfig, []),
    "kvp_scheduler_new": (
        _status,
        [ctypes.POINTER(SchedulerConfig), _handle, ctypes.POINTER(_handle)],
    ),
    "kvp_scheduler_free": (None, [_handle]),
    "kvp_scheduler_submit": (
        _status,
        [_handle, ctypes.POINTER(Request), _u64_p, ctypes.c_size_t,
         ctypes.POINTER(SubmitResult)],
    ),
    "kvp_scheduler_update_prefix": (
        _status,
        [_handle, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_uint64, _u64_p, ctypes.c_size_t],
    ),
    "kvp_scheduler_step": (
        _status,
        [_handle, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_bool, ctypes.POINTER(StepPlanC)],
    ),
    "kvp_scheduler_finish": (_status, [_handle, ctypes.c_uint64, _u64_p]),
    "kvp_scheduler_abort": (_status, [_handle, ctypes.c_uint64, _u64_p]),
    "kvp_scheduler_finish_ex": (
        _status, [_handle, ctypes.c_uint64, ctypes.POINTER(Finished)]),
    "kvp_scheduler_abort_ex": (
        _status, [_handle, ctypes.c_uint64, ctypes.POINTER(Finished)]),
    "kvp_scheduler_get_request": (
        _status,
        [_handle, ctypes.c_uint64, ctypes.POINTER(RequestState)],
    ),
    "kvp_scheduler_get_stats": (_status, [_handle, ctypes.POINTER(SchedulerStats)]),
    # kvp_adder
    "kvp_adder_config_default": (AdderConfig, []),
    "kvp_adder_new": (
        _status,
        [ctypes.POINTER(AdderConfig), ctypes.c_uint64, ctypes.c_uint64,
         ctypes.POINTER(RunningRequest), ctypes.c_size_t, ctypes.c_uint64,
         ctypes.POINTER(_handle)],
    ),
    "kvp_adder_free": (None, [_handle]),
    "kvp_adder_add_one_req": (
        _status,
        [_handle, ctypes.POINTER(Candidate), ctypes.POINTER(Admission)],
    ),
    "kvp_adder_add_chunked_req": (
        _status,
        [_handle, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_uint64, ctypes.POINTER(Admission)],
    ),
    "kvp_adder_get_budget": (_status, [_handle, ctypes.POINTER(Budget)]),
    # kvp_delayer
    "kvp_delayer_config_default": (DelayerConfig, []),
    "kvp_delayer_new": (_status, [ctypes.POINTER(DelayerConfig), ctypes.POINTER(_handle)]),
    "kvp_delayer_free": (None, [_handle]),
    "kvp_delayer_local_info": (
        _status,
        [_handle, ctypes.c_bool, ctypes.c_double, ctypes.c_uint64, ctypes.c_uint64,
         ctypes.c_bool, ctypes.POINTER(RankInfo)],
    ),
    "kvp_delayer_negotiate": (
        _status,
        [_handle, ctypes.POINTER(RankInfo), ctypes.c_size_t, ctypes.POINTER(ctypes.c_uint32)],
    ),
    "kvp_delayer_record_prefill": (_status, [_handle, ctypes.c_uint64]),
    # request-to-token tables (kvp_req_table): by request row
    "kvp_pool_alloc_extend_rows": (
        _status,
        [_handle, _table_p, _i64_array, _i64_array, _i64_array, ctypes.c_size_t,
         ctypes.c_size_t, _buffer, ctypes.c_size_t],
    ),
    "kvp_pool_alloc_decode_rows": (
        _status,
        [_handle, _table_p, _i64_array, _i64_array, ctypes.c_size_t, _buffer, ctypes.c_size_t],
    ),
    "kvp_pool_free_rows": (
        _status,
        [_handle, _table_p, _i64_array, _i64_array, _i64_array, ctypes.c_size_t],
    ),
    "kvp_pool_page_table": (
        _status,
        [_handle, _table_p, _i64_array, _i64_array, ctypes.c_size_t, _i32_p, _i32_p,
         ctypes.c_size_t, _i32_p],
    ),
    "kvp_pool_alloc_extend_rows_async": (
        _status,
        [_handle, _table_p, _i64_array, _i64_array, _i64_array, _i64_array, _i64_array,
         ctypes.c_size_t, ctypes.c_size_t, _buffer, ctypes.c_size_t, _stream],
    ),
    "kvp_pool_alloc_decode_rows_async": (
        _status,
        [_handle, _table_p, _i64_array, _i64_array, _i64_array, ctypes.c_size_t, _buffer,
         ctypes.c_size_t, _stream],
    ),
    "kvp_pool_free_rows_async": (
        _status,
        [_handle, _table_p, _i64_array, _i64_array, _i64_array, _i64_array, _i64_array,
         ctypes.c_size_t, _stream],
    ),
    "kvp_pool_reserve_scratch_async": (
        _status, [_handle, _u64, ctypes.c_size_t, _u64, _stream],
    ),
    "kvp_pool_page_table_async": (
        _status,
        [_handle, _table_p, _i64_array, _i64_array, _i64_array, ctypes.c_size_t, _i32_p,
         _i32_p, ctypes.c_size_t, _i32_p, _i32_p, _i32_p, _stream],
    ),
    # state digests (tensor parallelism: ranks compare them)
    "kvp_pool_digest": (_status, [_handle, _u64_p]),
    "kvp_pool_digest_async": (_status, [_handle, _u64_p, _stream]),
    "kvp_scheduler_digest": (_status, [_handle, _u64_p]),
}

# Debug options and stream-ordered release diagnostics (src/ffi/debug.rs), in every build.
SIGNATURES.update({
    "kvp_pool_set_debug": (_status, [_handle, ctypes.c_uint32]),
    "kvp_pool_get_debug": (_status, [_handle, ctypes.POINTER(ctypes.c_uint32)]),
    "kvp_device_pending_releases": (_status, [ctypes.POINTER(ctypes.c_size_t)]),
})

TESTING_FUNCTIONS = frozenset({"kvp_testing_panic", "kvp_testing_poison_pool"})


def _address_type(argtype):
    """``c_void_p`` for a pointer parameter type (the same C ABI), else ``argtype``."""
    if isinstance(argtype, type) and issubclass(argtype, (ctypes._Pointer, ctypes.c_void_p)):
        return ctypes.c_void_p
    return argtype


class KvpError(Exception):
    """A kvpool call returned a status other than KVP_STATUS_OK."""

    def __init__(self, status, name, description, message):
        self.status = status  # the kvp_status number
        self.name = name  # e.g. "KVP_STATUS_DOUBLE_FREE"
        self.description = description  # kvp_status_str(status)
        self.message = message  # kvp_last_error_message() right after the call
        super().__init__(f"{name} ({status}: {description}): {message}")

    def __reduce__(self):
        # Rebuilt from its four fields (pickle, copy): Exception's own reduction passes only
        # the formatted message, which __init__ does not take.
        return type(self), (self.status, self.name, self.description, self.message)


def find_library():
    """The path ``load()`` uses when given none: ``$KVPOOL_LIB``, else ``libkvpool.so`` next
    to this package, else the newer of ``target/release/libkvpool.so`` and
    ``target/release/deps/libkvpool.so`` of the source tree holding it. (Cargo writes the
    cdylib to ``deps/`` on every release build of the crate, including ``cargo test`` and
    ``cargo run --example``, but copies it up to ``target/release`` only for ``cargo
    build``; so after the README's commands only ``deps/`` has it, and after an edit and a
    ``cargo test`` the copy in ``target/release`` is the older one.)"""
    env = os.environ.get("KVPOOL_LIB")
    if env:
        if not os.path.isfile(env):
            raise FileNotFoundError(f"KVPOOL_LIB={env}: no such file")
        return os.path.abspath(env)
    here = os.path.dirname(os.path.abspath(__file__))
    beside = os.path.join(here, "libkvpool.so")
    if os.path.isfile(beside):
        return os.path.normpath(beside)
    release = os.path.join(here, os.pardir, os.pardir, "target", "release")
    built = [os.path.normpath(os.path.join(release, *parts))
             for parts in (("libkvpool.so",), ("deps", "libkvpool.so"))]
    found = [path for path in built if os.path.isfile(path)]
    if found:
        return max(found, key=os.path.getmtime)  # max keeps the first of equal times
    raise FileNotFoundError(
        "libkvpool.so not found: pass its path to kvpool.load(path), set KVPOOL_LIB, or build "
        "it with `cargo build --release` (looked for " +
        ", ".join([os.path.normpath(beside)] + built) + ")")


_loaded = {}
_loaded_lock = threading.Lock()


def load(path=None):
    """The ``Library`` at ``path`` (default: ``find_library()``), loaded once per path. The
    handle classes use ``load()`` when given no ``lib``."""
    path = find_library() if path is None else os.path.abspath(os.fspath(path))
    with _loaded_lock:
        if path not in _loaded:
            _loaded[path] = Library(path)
        return _loaded[path]


# Stream-ordered release diagnostics (src/ffi/debug.rs).
def device_pending_releases(lib=None):
    """How many released device pools (or snapshot buffers of released pools) still wait for
    kernels that were queued when they were closed; their memory is freed shortly after the
    streams pass that work (kvp_device_pending_releases). Never synchronizes."""
    lib = load() if lib is None else lib
    count = ctypes.c_size_t()
    lib.check(lib.kvp_device_pending_releases(ctypes.byref(count)))
    return count.value


__all__ += ["device_pending_releases"]


class Library:
    """The loaded shared library, with every function's signature set.

    The functions are attributes: ``lib.kvp_pool_alloc(...)``. ``path`` defaults to
    ``find_library()``; ``load()`` caches one instance per path.
    """

    def __init__(self, path=None):
        # An absolute path: dlopen must not search LD_LIBRARY_PATH or the system paths.
        path = find_library() if path is None else os.path.abspath(os.fspath(path))
        self.path = path
        self._cdll = ctypes.CDLL(path)
        # ``lib.fast.kvp_*``: the functions with every pointer parameter as ``c_void_p``,
        # what the pool's hot methods call with addresses as ints (``fast_function``).
        self.fast = types.SimpleNamespace()
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
            # A second function object for the same symbol, every pointer parameter declared
            # void * (the same C ABI): it takes addresses as plain ints, the cheapest
            # argument ctypes converts (a typed pointer argument costs ~1 us per call to
            # convert or cast).
            fast = self._cdll[name]
            fast.restype = restype
            fast.argtypes = [_address_type(t) for t in argtypes]
            setattr(self.fast, name, fast)
        self._fast_loaded = dict(vars(self.fast))
        if self.kvp_abi_version() != ABI_VERSION:
            raise RuntimeError(f"{path} has ABI version {self.kvp_abi_version()}; this binding "
                               f"is for ABI version {ABI_VERSION}")
        # ``lib.python.kvp_python_pool_*`` (None where unavailable or turned off): the hot
        # calls on buffers, which the library reads through the buffer protocol.
        self.python = _native.load(path)
        if self.python is not None:
            # The library's builtins for lib.fast's hot functions: the same arguments, no
            # ctypes conversion (about 1 us a call).
            for name in _native.CALLS:
                builtin = getattr(self.python, name)
                setattr(self.fast, name, builtin)
                self._fast_loaded[name] = builtin

    def function(self, name):
        """The configured ctypes function `name` (as loaded, bypassing any override)."""
        return getattr(self._cdll, name)

    def fast_function(self, name):
        """The function `name` as ``lib.fast`` has it when loaded: every pointer parameter
        ``c_void_p``, so that an address goes in as a plain int, or the library's builtin
        taking the same ints (bypassing any override of ``lib.fast.<name>``)."""
        return self._fast_loaded[name]

    # ---- statuses and messages ----

    def last_error_message(self):
        n = self.kvp_last_error_message(None, 0)
        buf = ctypes.create_string_buffer(n + 1)
        self.kvp_last_error_message(buf, n + 1)
        return buf.value.decode("utf-8", "replace")

    def status_str(self, status):
        return self.kvp_status_str(_int(status, "int32_t", "status")).decode("utf-8")

    def check(self, status):
        """Raises KvpError unless `status` is KVP_STATUS_OK; must run right after the call,
        on the same thread (the message is per thread)."""
        if status != 0:
            raise self.error(status, self.last_error_message())

    def error(self, status, message):
        """The KvpError for `status` with `message` (what ``check`` raises)."""
        name = STATUS_NAMES.get(status, f"KVP_STATUS_<unknown {status}>")
        return KvpError(status, name, self.status_str(status), message)

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


# The most steps one reservation covers (the header's KVP_MAX_RESERVED_STEPS).
MAX_RESERVED_STEPS = 1024


class DecodeReservation(_Owner):
    """``steps`` reserved decode steps of a fixed batch (``Pool.reserve_decode`` /
    ``Pool.reserve_decode_async``; docs/graph-decode.md). ``step()`` (host pool) or
    ``step_async()`` (device pool: one kernel, capturable into a CUDA graph) hands out the
    next step's slots; end it with ``Pool.finish_reservation[_async]``. Until then its pages
    are held: freeing, rewinding or continuing a request of the batch raises INVALID_STATE
    (a device pool faults). Closing an unfinished reservation returns nothing to the pool
    and ends its holds."""

    _free_name = "kvp_decode_reservation_free"

    def __init__(self, lib, handle, pool):
        super().__init__(lib, handle)
        self._pool = pool  # its index type, device and table helpers
        steps, batch, pages = ctypes.c_uint32(), ctypes.c_size_t(), ctypes.c_uint64()
        self._lib.check(self._lib.kvp_decode_reservation_get_info(
            self.handle, ctypes.byref(steps), ctypes.byref(batch), ctypes.byref(pages)))
        self.steps, self.batch_size, self.pages = steps.value, batch.value, pages.value

    def step(self, out=None, *, table=None, rows=None):
        """Host pool: the next step's slots (what the matching ``alloc_decode`` would
        return), also written to ``table[rows[i], lens[i] + s]`` when a table is given."""
        pool = self._pool
        t, table_keep, rows_p, rows_keep = None, None, None, None
        if table is not None:
            # (Rows first: a list's elements may run Python code (__index__), which must not
            # run once a buffer's address is taken.)
            rows_p, rows_n, rows_keep = _host_array(rows, _INT64, "rows")
            t, table_keep = pool._table(table, None)
            if rows_n != self.batch_size:
                raise ValueError("rows needs one entry per request of the reservation")
        out, address, length, kind = _out_buffer(self.batch_size, out, pool._index)
        status = self._lib.fast.kvp_decode_reservation_step(
            self.handle, address, length, None if t is None else ctypes.addressof(t), rows_p)
        if status:
            self._lib.check(status)
        del table_keep, rows_keep
        return _result(out, kind, self.batch_size, length)

    def step_async(self, out, *, table=None, rows=None, stream=None):
        """Device pool: enqueues the next step on ``stream`` — ONE kernel with fixed
        arguments, so it may be recorded in ``torch.cuda.graph`` and replayed once per
        step. ``out`` (a CUDA tensor of the pool's index dtype, ``batch_size`` entries) gets
        the slots; with a ``table`` (``req_to_token``) and ``rows`` (an int64 CUDA tensor),
        ``table[rows[i], lens[i] + s]`` too. Returns ``out``. Keep this reservation (and its
        pool) referenced for as long as a graph holding the step may be replayed: freeing it
        (which dropping the last reference does) gives its device memory to the next
        reservation, whose slots a later replay would then hand out again."""
        pool = self._pool
        call = "kvp_decode_reservation_step_async"
        pool._require_device(call)
        buf, n = pool._device_indices(out, "out")
        if n < self.batch_size:
            raise ValueError(f"out holds {n} indices; the reservation's batch is "
                             f"{self.batch_size}")
        t, table_keep, rows_buf = None, None, None
        if table is not None:
            t, table_keep = pool._table(table, pool.device)
            rows_buf, rows_n = pool._device_lengths(rows, "rows")
            if rows_n != self.batch_size:
                raise ValueError("rows needs one entry per request of the reservation")
        status = self._lib.fast.kvp_decode_reservation_step_async(
            self.handle, buf, None if t is None else ctypes.addressof(t), rows_buf,
            pool._stream_handle(stream))
        if status:
            self._lib.check(status)
        del table_keep
        return out


def _tensor_module(value):
    """torch, if ``value`` is a torch tensor (torch is never imported here: a caller that
    has tensors has imported it already), else None."""
    return _buffers._torch(value)


_ELEMENTS = {"int64": _buffers.INT64, "int32": _buffers.INT32}


def _tensor_pointer(tensor, dtype_name, what, device=None):
    """(data pointer, element count) of a tensor the library may read or write directly.

    ``device`` None: a host buffer, so the tensor must be on the CPU (a CUDA tensor's
    pointer must never be read as a host pointer). ``device`` N: a device buffer of a pool on
    CUDA device N, so the tensor must be on ``cuda:N``."""
    return _buffers.tensor_pointer(tensor, _ELEMENTS[dtype_name], what, sys.modules["torch"],
                                   device)


def _import_torch(why):
    """torch (imported now if the caller has not yet), for device pools' defaults."""
    torch = sys.modules.get("torch")
    if torch is None:
        try:
            import torch  # noqa: PLC0415 - only device pools need it, and only here
        except ImportError as e:
            raise ImportError(f"{why} needs PyTorch, which is not installed") from e
    return torch


_BACKEND_NAMES = {"host": BACKEND_HOST, "cuda": BACKEND_CUDA}


def _backend_number(backend):
    """BACKEND_HOST / BACKEND_CUDA from ``"host"`` / ``"cuda"`` (integers pass unchanged, so
    the library judges an unknown one; anything else, e.g. a float, is refused, not
    truncated)."""
    if isinstance(backend, str):
        try:
            return _BACKEND_NAMES[backend.lower()]
        except KeyError:
            raise ValueError(f"backend must be 'host' or 'cuda', not {backend!r}") from None
    try:
        return operator.index(backend)
    except TypeError:
        raise TypeError("backend must be 'host', 'cuda' or an integer (BACKEND_*), not "
                        f"{type(backend).__name__}") from None


def _device_ordinal(device):
    """A CUDA device ordinal from an int, ``"cuda"``/``"cuda:N"`` or a torch.device. Without
    an index (``"cuda"``), torch's current device, as torch reads it (a tensor-parallel
    worker calls ``torch.cuda.set_device(rank)`` and then says ``"cuda"``)."""
    if isinstance(device, int):
        return device
    kind = getattr(device, "type", None)
    if kind is not None:  # torch.device
        if kind != "cuda":
            raise ValueError(f"device {device} is not a CUDA device")
        return _current_cuda_device() if device.index is None else device.index
    text = str(device)
    if text == "cuda":
        return _current_cuda_device()
    if text.startswith("cuda:") and text[5:].isdigit():
        return int(text[5:])
    raise ValueError(f"device must be a CUDA ordinal, 'cuda:N' or a torch.device, not {device!r}")


def _current_cuda_device():
    """torch's current CUDA device (0 without torch: there is no other notion of one)."""
    torch = sys.modules.get("torch")
    return torch.cuda.current_device() if torch is not None else 0


def _extend_num_tokens(given, seq_lens, prefix_lens, seq_keep, prefix_keep):
    """``extend_num_tokens`` as a size_t: ``given``, range-checked, or by default
    ``sum(seq_lens) - sum(prefix_lens)`` (``*_keep``: the arrays ``_buffers.host_array``
    made of them; O(n), vectorized for tensors and numpy arrays, C-speed ``sum`` otherwise).
    A negative default means some ``seq_len < prefix_len``; it becomes 0 so that the
    library names that element (INVALID_LENGTHS). (The pool's calls first ask the library
    for the default: ``Pool._extend_tokens``.)"""
    if given is not None:
        return _int(given, "size_t", "extend_num_tokens")
    total = _buffers.total(seq_lens, seq_keep) - _buffers.total(prefix_lens, prefix_keep)
    return _int(max(total, 0), "size_t", "extend_num_tokens (sum(seq_lens) - sum(prefix_lens))")


_SIZE_MAX = _C_INT_BOUNDS["size_t"][1]
_UINTPTR_MAX = _C_INT_BOUNDS["uintptr_t"][1]


def _size(value, what):
    """``_int(value, "size_t", what)``, with a plain in-range int passed straight through."""
    if type(value) is int and 0 <= value <= _SIZE_MAX:
        return value
    return _int(value, "size_t", what)


_host_array = _buffers.host_array
_out_buffer = _buffers.out_buffer
_result = _buffers.result
_INT64 = _buffers.INT64
_LIST = _buffers.LIST
_ARRAY = _buffers.ARRAY
_KINDS = _buffers._KINDS  # {handler: result kind}; other handlers' results are ARRAY
_device_pointer = _buffers.device_pointer
# The hot methods convert a host array with ``_HOST[type(x)](x, elements, what, writable)``:
# ``_host_array`` without its own Python call (each costs ~0.1 us; a call takes up to four
# arrays). A given ``out`` likewise (``_buffers.given_out`` inlined): its kind is looked up
# after the conversion, which has by then remembered the handler of its type.
_HOST = _buffers.HANDLERS
# Handlers of buffer types: given one for ``out`` (and ``lib.python`` loaded), a hot call
# tries ``lib.python`` first (a torch ``out`` goes straight to the path above).
_BUFFER_HANDLERS = _buffers.BUFFER_HANDLERS
_FALLBACK = _native.FALLBACK
_NO_SUM = _native.NO_SUM
_buffer_kind = _buffers.buffer_kind
_new_output = _buffers.new_output
# CPU tensors in the hot host calls (alloc_extend, alloc_decode, alloc into out=,
# free_indices): the common case is checked inline, in the method (see
# _buffers.TENSOR_TYPES): on a slow host a handler call a tensor cost ~0.5 us more, and
# torch's own attribute reads (~0.1 us each) are most of the rest.
_TENSOR_TYPES = _buffers.TENSOR_TYPES
_UNIT = _buffers.UNIT_STRIDE
_new_tensor = _buffers.new_tensor


def _optional_size(value, what):
    return None if value is None else _size(value, what)


ExtendNeed = collections.namedtuple("ExtendNeed", "pages tokens")
ExtendNeed.__doc__ = """``Pool.extend_need``: pages an ``alloc_extend`` takes from the free
list, and the tokens (``extend_num_tokens``) it writes."""


def _no_host_copy(call, what):
    """The TypeError for a missing ``{what}_host`` argument of ``call``."""
    return TypeError(
        f"{call} needs {what}_host: the host copy of {what} (a list, buffer or CPU "
        f"tensor; SGLang keeps it as {what}_cpu). kvpool sizes and plans the "
        "allocation on the host, and copying the device tensor here would wait for "
        "the stream.")


class Pool(_Owner):
    """A kvpool slot allocator: ``Pool(size, page_size=1, ...)``. Index and length arguments
    are host arrays (see the module's docs): buffers (array.array, numpy, memoryview) and CPU
    tensors go to the library by address in O(1); lists are converted in O(n) at C speed.
    Results are lists for list inputs, else of the inputs' kind (tensor, numpy array,
    array.array); ``out=`` is written in place. Index buffers have the pool's index type
    (int64, or int32 for ``index_type=INDEX_TYPE_I32``).

    ``backend="cuda"`` (or ``BACKEND_CUDA``) with ``device=N`` makes a device pool on CUDA
    device N: its state lives in device memory and it is driven by the ``*_async`` methods,
    which take CUDA tensors and enqueue on a stream (see the module's docs). The host methods
    (``alloc``, ``alloc_extend``, ``free_indices``, ...) raise ``KvpError`` WRONG_BACKEND on a
    device pool, and the ``*_async`` ones on a host pool. ``info()``, ``stats()``,
    ``available_size()`` (a lower bound on a device pool, see ``available_size_bound``),
    ``free_group_begin()`` and ``close()`` serve both."""

    _free_name = "kvp_pool_free"

    def __init__(
        self,
        size,
        page_size=1,
        index_type=INDEX_TYPE_I64,
        need_sort=False,
        backend=BACKEND_HOST,
        device=0,
        *,
        lib=None,
    ):
        lib = load() if lib is None else lib
        backend = _backend_number(backend)
        if backend == BACKEND_CUDA:
            device = _device_ordinal(device)
        config = _configure(lib.config_default(), dict(
            size=size, page_size=page_size, index_type=index_type, need_sort=need_sort,
            backend=backend, device=device))
        size, page_size, index_type = config.size, config.page_size, config.index_type
        handle = ctypes.c_void_p()
        lib.check(lib.kvp_pool_new(ctypes.byref(config), ctypes.byref(handle)))
        super().__init__(lib, handle.value)
        self.index_type = index_type
        self.index_ctype = ctypes.c_int32 if index_type == INDEX_TYPE_I32 else ctypes.c_int64
        self.index_dtype = "int32" if index_type == INDEX_TYPE_I32 else "int64"  # torch's name
        self._index = _ELEMENTS[self.index_dtype]  # what host index arrays hold
        self._raw_stream = None  # device pools: (device) -> current torch stream handle
        self._torch_device = None
        self.page_size = page_size
        self._size = size  # usable slots: no call hands out more
        self.backend = backend
        # CUDA ordinal of a device pool, None for a host pool
        self.device = device if backend == BACKEND_CUDA else None

    @property
    def is_device(self):
        """True for a device (CUDA) pool."""
        return self.backend == BACKEND_CUDA

    # ---- buffers ----
    # Host arrays go to C as addresses (ints) through ``lib.fast``: see _buffers.py for what
    # is accepted and what each kind costs (lists are converted in O(n), at C speed).

    def _indices(self, values, what):
        """(buffer, length) for an index argument of a typed ``lib.kvp_*`` function: a
        ctypes array over a list's values (range-checked: ctypes would silently wrap an int
        that does not fit) or a ``c_void_p`` of a buffer's or tensor's memory. The hot
        methods call ``lib.fast`` with ``_buffers.host_array``'s addresses instead."""
        address, n, keep = _buffers.host_array(values, self._index, what)
        if type(keep) is array.array and keep is not values:  # converted here: the
            return (self.index_ctype * n).from_buffer(keep), n  # ctypes array owns it
        return ctypes.c_void_p(address), n

    @staticmethod
    def _lengths(values, what):
        """(int64_t pointer, length) for a length argument (prefix_lens, seq_lens) of a
        typed ``lib.kvp_*`` function; a list's elements are range-checked, a buffer's or
        tensor's are int64 already (the library checks the values)."""
        address, n, keep = _buffers.host_array(values, _buffers.INT64, what)
        if type(keep) is array.array and keep is not values:
            return (ctypes.c_int64 * n).from_buffer(keep), n
        return ctypes.cast(address, _i64_array), n

    def _host_out(self, n, out, *inputs):
        """(buffer, address, length, kind) for a host output: ``out`` if given (a tensor or a
        writable buffer, written in place), else a new buffer of ``n`` elements of the kind
        of ``inputs`` (a tensor if a tensor went in, a numpy array for numpy, an array.array
        for other buffers, else returned as a list: ``_buffers.result``)."""
        return _buffers.out_buffer(n, out, self._index, *inputs)

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

    def extend_need(self, prefix_lens, seq_lens):
        """``ExtendNeed(pages, tokens)``: what ``alloc_extend`` (or ``alloc_extend_async``,
        given these host lengths) would take, from its own planning, without allocating:
        ``pages`` from the free list, ``tokens`` written (its ``extend_num_tokens``). It
        runs short iff ``pages * page_size > available_size()``. Bad lengths raise the
        allocation's ``KvpError`` (``INVALID_LENGTHS``). Host lengths, either backend."""
        prefix_p, batch, prefix_keep = _HOST[type(prefix_lens)](prefix_lens, _INT64,
                                                                "prefix_lens", False)
        seq_p, seq_n, seq_keep = _HOST[type(seq_lens)](seq_lens, _INT64, "seq_lens", False)
        if batch != seq_n:
            raise ValueError("prefix_lens and seq_lens need one entry per request")
        status, pages, tokens = self._plan_extend(prefix_p, seq_p, batch)
        if status:
            self._lib.check(status)
        del prefix_keep, seq_keep  # the call has returned
        return ExtendNeed(pages, tokens)

    def decode_need(self, seq_lens):
        """Pages ``alloc_decode`` of these lengths (each counting the new token) would take:
        requests with ``(seq_len - 1) % page_size == 0``. Same checks as the allocation."""
        seq_p, batch, seq_keep = _HOST[type(seq_lens)](seq_lens, _INT64, "seq_lens", False)
        pages = ctypes.c_uint64()
        status = self._lib.fast.kvp_pool_decode_need(self.handle, seq_p, batch,
                                                     ctypes.byref(pages))
        if status:
            self._lib.check(status)
        del seq_keep  # the call has returned
        return pages.value

    def _extend_tokens(self, given, prefix_lens, seq_lens, prefix_p, seq_p, batch, seq_n,
                       prefix_keep, seq_keep, plan=True):
        """``extend_num_tokens`` of a call whose host lengths are converted (addresses,
        counts, ``*_keep``): ``given``, range-checked, or by default (``plan``) the
        library's planning's (``kvp_pool_extend_need``: O(n) in C, where summing a tensor
        costs two torch reductions, ~3 us each); where the counts disagree or the planning
        refuses the lengths, ``_extend_num_tokens``' own sum (the allocation then names
        what is wrong)."""
        if given is None and plan and batch == seq_n:
            status, _, tokens = self._plan_extend(prefix_p, seq_p, batch)
            if not status:
                return tokens
            if status == STATUS["INVALID_LENGTHS"]:
                # 0, not the sum of bad lengths (which could size an output of more slots
                # than the pool has): the allocation names the bad length, and counts the
                # refusal.
                return 0
        return _extend_num_tokens(given, seq_lens, prefix_lens, seq_keep, prefix_keep)

    def _plan_extend(self, prefix_p, seq_p, batch):
        """(status, pages, tokens) of ``kvp_pool_extend_need`` on ``batch`` host lengths at
        these addresses: the allocation's own planning, pages and ``extend_num_tokens``
        valid where the status is 0 (its outputs by address: ``lib.fast``'s builtin takes
        ints)."""
        pages, tokens = ctypes.c_uint64(), ctypes.c_uint64()
        status = self._lib.fast.kvp_pool_extend_need(
            self._handle or self.handle, prefix_p, seq_p, batch, ctypes.addressof(pages),
            ctypes.addressof(tokens))
        return status, pages.value, tokens.value

    def _extend_out_len(self, tokens, prefix_p, seq_p, batch):
        """The length of a new output for an extend of ``tokens`` slots, more than the pool
        has (the call refuses it; an output of that many could not even be allocated): the
        planning's count where it is ``tokens`` (the call then runs short, having checked an
        output of that length; the lengths, each at most the pool's size, bound it), else 0
        (the call names the bad length or the count that disagrees before it looks at the
        output). ``prefix_p``, ``seq_p``: converted lengths of ``batch`` entries each."""
        status, _, planned = self._plan_extend(prefix_p, seq_p, batch)
        return tokens if not status and planned == tokens else 0

    def _beyond_pool(self, tokens):
        """The KvpError for a new output of more slots than the pool has (no call could hand
        them out): raised before an output is made (one of that length may not even fit in
        memory) and without calling the library, as ``kvpool.hpp``'s allocating overloads
        do, so staged frees are not merged as a refused C call's shortage would merge them."""
        return self._lib.error(STATUS["OUT_OF_SLOTS"],
                               f"{tokens} tokens need more than the pool's {self._size} slots "
                               "(refused before an output was made)")

    # ---- allocation ----
    # Inputs: lists (converted in O(n) at C speed), array.array / numpy arrays / memoryviews
    # / CPU tensors (zero-copy). Results: a list for list inputs, else the inputs' kind.
    # ``out`` is a preallocated tensor or writable buffer to write into (SGLang's
    # ``out_cache_loc``); the call returns it (its first k elements if longer). ``out_len``
    # shortens a new output buffer (to test BUFFER_TOO_SMALL). ``alloc`` of more slots than
    # the pool has raises OUT_OF_SLOTS before it makes an output (see _beyond_pool).

    # The hot methods below inline what helpers would do (each Python call costs ~0.1 us):
    # ``self._handle or self.handle`` is ``self.handle`` (which raises once closed) without
    # the property's call, and an ``out`` exactly filled is returned without ``_result``.

    def alloc(self, num_tokens, out_len=None, out=None):
        if type(num_tokens) is not int or not 0 <= num_tokens <= _SIZE_MAX:
            num_tokens = _size(num_tokens, "num_tokens")
        if out_len is None and out is not None and _HOST[type(out)] in _BUFFER_HANDLERS:
            native = self._lib.python
            if native is not None:
                try:  # before the call (a buffer without len(): the general path)
                    length = len(out)
                except TypeError:
                    length = None
                if length is not None:
                    status = native.kvp_python_pool_alloc(self._handle or self.handle,
                                                          num_tokens, out)
                    if status != _FALLBACK:
                        return self._native_result(status, out, num_tokens, length)
        elif (out_len is None and type(out) in _TENSOR_TYPES and out.is_cpu
                and out.dtype is self._index.torch and out.stride() == _UNIT):
            # a CPU tensor, the common case checked inline (_TENSOR_TYPES)
            length = out.numel()
            if length:
                status = self._lib.fast.kvp_pool_alloc(self._handle or self.handle,
                                                       num_tokens, out.data_ptr(), length)
                if status:
                    self._lib.check(status)
                return out if length == num_tokens else out[:num_tokens]
        if out_len is not None:
            out_len = _size(out_len, "out_len")
        if out is None:
            if out_len is None and num_tokens > self._size:
                raise self._beyond_pool(num_tokens)
            out, address, length, kind = _out_buffer(
                num_tokens if out_len is None else out_len, None, self._index)
        else:
            address, length, _ = _HOST[type(out)](out, self._index, "out", True)
            kind = _KINDS.get(_HOST[type(out)], _ARRAY)
        status = self._lib.fast.kvp_pool_alloc(self._handle or self.handle, num_tokens,
                                               address, length)
        if status:
            self._lib.check(status)
        if length == num_tokens and kind != _LIST:
            return out
        return _result(out, kind, num_tokens, length)

    def alloc_extend(self, prefix_lens, seq_lens, last_loc, extend_num_tokens=None,
                     out_len=None, out=None):
        """SGLang's ``alloc_extend``. ``extend_num_tokens`` defaults to ``sum(seq_lens) -
        sum(prefix_lens)`` (O(n), summed by the library in C whatever the inputs' kind;
        pass it, as SGLang has it, to skip the sums)."""
        tensor = type(last_loc)
        if (tensor in _TENSOR_TYPES and type(seq_lens) is tensor and type(prefix_lens) is tensor
                and out_len is None and (extend_num_tokens is None
                                         or type(extend_num_tokens) is int
                                         and 0 < extend_num_tokens <= self._size)):
            # CPU tensors, the common case checked inline (_TENSOR_TYPES); else the general path
            p, s, l, i64, index = prefix_lens, seq_lens, last_loc, _INT64.torch, self._index.torch
            if (p.is_cpu and s.is_cpu and l.is_cpu and p.dtype is i64 and s.dtype is i64
                    and l.dtype is index and p.stride() == _UNIT and s.stride() == _UNIT
                    and l.stride() == _UNIT):
                batch = p.numel()
                if batch and s.numel() == batch and l.numel() == batch:
                    prefix_p, seq_p = p.data_ptr(), s.data_ptr()  # (read once: ~0.15 us each)
                    tokens = extend_num_tokens
                    if tokens is None:
                        # The default, the planning's; lengths it refuses, or more tokens
                        # than the pool has: 0, the general path names them.
                        status, _, tokens = self._plan_extend(prefix_p, seq_p, batch)
                        if status or tokens > self._size:
                            tokens = 0
                    if tokens:
                        if out is None:
                            # (a CPU tensor of the index dtype, contiguous: new_tensor's)
                            out, length = _new_tensor(tokens, self._index), tokens
                        elif (type(out) is tensor and out.is_cpu and out.dtype is index
                                and out.stride() == _UNIT):
                            length = out.numel()
                        else:
                            length = None
                        if length is not None:
                            status = self._lib.fast.kvp_pool_alloc_extend(
                                self._handle or self.handle, prefix_p, seq_p, l.data_ptr(),
                                batch, tokens, out.data_ptr(), length)
                            if status:
                                self._lib.check(status)
                            return out if length == tokens else out[:tokens]
        native = self._lib.python
        if native is not None and out_len is None:
            # The inputs' kind if they are all buffers (else None), looked up once: both the
            # default sum and a new output need it.
            kind = (_buffer_kind(prefix_lens, seq_lens, last_loc)
                    if extend_num_tokens is None or out is None else None)
            if extend_num_tokens is None and kind is not None:
                # The default, summed by the library over buffers (NO_SUM: summed below).
                # More tokens than the pool has slots: bad lengths, which the general path
                # names (before sizing an output of that many).
                total = native.kvp_python_extend_tokens(prefix_lens, seq_lens)
                if total != _NO_SUM and total <= self._size:
                    extend_num_tokens = total
            if type(extend_num_tokens) is int and 0 <= extend_num_tokens <= _SIZE_MAX:
                # A new output of the inputs' kind; not for more tokens than the pool has
                # (refused by the call: the general path sizes its output, _extend_out_len).
                if out is None and kind is not None and extend_num_tokens <= self._size:
                    out = _new_output(kind, extend_num_tokens, self._index)
                length = None
                if out is not None and _HOST[type(out)] in _BUFFER_HANDLERS:
                    try:  # before the call (a buffer without len(): the general path)
                        length = len(out)
                    except TypeError:
                        pass
                if length is not None:
                    status = native.kvp_python_pool_alloc_extend(
                        self._handle or self.handle, prefix_lens, seq_lens, last_loc,
                        extend_num_tokens, out)
                    if status != _FALLBACK:
                        return self._native_result(status, out, extend_num_tokens, length)
        index = self._index
        if extend_num_tokens is not None and type(extend_num_tokens) is not int:
            # Before any buffer's address is taken: converting it may run Python code
            # (__index__) that could resize a buffer.
            extend_num_tokens = _int(extend_num_tokens, "size_t", "extend_num_tokens")
        prefix_p, batch, prefix_keep = _HOST[type(prefix_lens)](prefix_lens, _INT64,
                                                                "prefix_lens", False)
        seq_p, seq_n, seq_keep = _HOST[type(seq_lens)](seq_lens, _INT64, "seq_lens", False)
        last_p, last_n, last_keep = _HOST[type(last_loc)](last_loc, index, "last_loc", False)
        if type(extend_num_tokens) is not int or not 0 <= extend_num_tokens <= _SIZE_MAX:
            # (Given out_len, a test knob, no planning: its range check below comes before
            # any library call.)
            extend_num_tokens = self._extend_tokens(extend_num_tokens, prefix_lens, seq_lens,
                                                    prefix_p, seq_p, batch, seq_n,
                                                    prefix_keep, seq_keep, out_len is None)
        if out_len is not None:
            out_len = _size(out_len, "out_len")
        if batch != seq_n or batch != last_n:
            raise ValueError("prefix_lens, seq_lens and last_loc need one entry per request")
        if out is None:
            n = extend_num_tokens if out_len is None else out_len
            if out_len is None and n > self._size:  # refused by the call: see the helper
                n = self._extend_out_len(n, prefix_p, seq_p, batch)
            out, address, length, kind = _out_buffer(n, None, index, prefix_lens, seq_lens,
                                                      last_loc)
        else:
            address, length, _ = _HOST[type(out)](out, index, "out", True)
            kind = _KINDS.get(_HOST[type(out)], _ARRAY)
        status = self._lib.fast.kvp_pool_alloc_extend(
            self._handle or self.handle, prefix_p, seq_p, last_p, batch, extend_num_tokens,
            address, length)
        if status:
            self._lib.check(status)
        del prefix_keep, seq_keep, last_keep  # the call has returned
        if length == extend_num_tokens and kind != _LIST:
            return out
        return _result(out, kind, extend_num_tokens, length)

    def alloc_decode(self, seq_lens, last_loc, out_len=None, out=None):
        tensor = type(seq_lens)
        if tensor in _TENSOR_TYPES and type(last_loc) is tensor and out_len is None:
            # CPU tensors, the common case checked inline (_TENSOR_TYPES); else the general path
            s, l, index = seq_lens, last_loc, self._index.torch
            if (s.is_cpu and l.is_cpu and s.dtype is _INT64.torch and l.dtype is index
                    and s.stride() == _UNIT and l.stride() == _UNIT):
                batch = s.numel()
                if 0 < batch <= self._size and l.numel() == batch:
                    if out is None:
                        # (a CPU tensor of the index dtype, contiguous: new_tensor's)
                        out, length = _new_tensor(batch, self._index), batch
                    elif (type(out) is tensor and out.is_cpu and out.dtype is index
                            and out.stride() == _UNIT):
                        length = out.numel()
                    else:
                        length = None
                    if length is not None:
                        status = self._lib.fast.kvp_pool_alloc_decode(
                            self._handle or self.handle, s.data_ptr(), l.data_ptr(), batch,
                            out.data_ptr(), length)
                        if status:
                            self._lib.check(status)
                        return out if length == batch else out[:batch]
        native = self._lib.python
        if native is not None and out_len is None:
            if out is None:  # a new output of the inputs' kind, if they are all buffers
                kind = _buffer_kind(seq_lens, last_loc)
                if kind is not None and getattr(seq_lens, "ndim", 1) == 1:
                    try:  # (a buffer without len(), e.g. a PickleBuffer: the general path)
                        out = _new_output(kind, len(seq_lens), self._index)
                    except TypeError:
                        pass
            if out is not None and _HOST[type(out)] in _BUFFER_HANDLERS:
                # Lengths before the call, which must not have changed the pool if they
                # raise; an object without len() (a generator) goes the general way.
                try:
                    batch, length = len(seq_lens), len(out)
                except TypeError:
                    batch = None
                if batch is not None:
                    status = native.kvp_python_pool_alloc_decode(self._handle or self.handle,
                                                                 seq_lens, last_loc, out)
                    if status != _FALLBACK:
                        return self._native_result(status, out, batch, length)
        index = self._index
        seq_p, batch, seq_keep = _HOST[type(seq_lens)](seq_lens, _INT64, "seq_lens", False)
        last_p, last_n, last_keep = _HOST[type(last_loc)](last_loc, index, "last_loc", False)
        if out_len is not None:
            out_len = _size(out_len, "out_len")
        if batch != last_n:
            raise ValueError("seq_lens and last_loc need one entry per request")
        if out is None:
            out, address, length, kind = _out_buffer(
                batch if out_len is None else out_len, None, index, seq_lens, last_loc)
        else:
            address, length, _ = _HOST[type(out)](out, index, "out", True)
            kind = _KINDS.get(_HOST[type(out)], _ARRAY)
        status = self._lib.fast.kvp_pool_alloc_decode(self._handle or self.handle, seq_p,
                                                      last_p, batch, address, length)
        if status:
            self._lib.check(status)
        del seq_keep, last_keep  # the call has returned
        if length == batch and kind != _LIST:
            return out
        return _result(out, kind, batch, length)

    def _native_result(self, status, out, k, length):
        """What a hot call made through ``lib.python`` returns: ``out`` (of ``length``
        elements, taken before the call) when exactly filled, else its first ``k`` elements
        (as ``_result``); raises on a failed status."""
        if status:
            self._lib.check(status)
        if length == k:
            return out
        return _result(out, _KINDS.get(_HOST[type(out)], _ARRAY), k, length)

    # ---- prepared calls: the buffers checked once (see _prepared.py) ----

    def prepare_alloc_extend(self, prefix_lens, seq_lens, last_loc, out):
        """``alloc_extend`` bound to persistent buffers, for a loop that allocates into the
        same arrays every step: the buffers are checked here, and ``prepared(batch,
        extend_num_tokens)`` allocates for the first ``batch`` requests into
        ``out[:extend_num_tokens]`` (returning None) at little more than the ctypes call's
        cost. Buffers or tensors only (no lists: they would be copied once); the prepared
        call keeps them alive and unresizable (a tensor whose memory moves is refused)."""
        self._require_host("kvp_pool_alloc_extend")
        keep, tensors = [], []
        index = self._index
        prefix, prefix_n = _prepared.host_buffer(prefix_lens, _INT64, "prefix_lens", False,
                                                 keep, tensors)
        seq, seq_n = _prepared.host_buffer(seq_lens, _INT64, "seq_lens", False, keep, tensors)
        last, last_n = _prepared.host_buffer(last_loc, index, "last_loc", False, keep, tensors)
        buf, n = _prepared.host_buffer(out, index, "out", True, keep, tensors)
        return _prepared.Prepared(self, self._lib.fast.kvp_pool_alloc_extend,
                                  (prefix, seq, last), (buf, n), tensors, keep,
                                  min(prefix_n, seq_n, last_n), n, out, True)

    def prepare_alloc_decode(self, seq_lens, last_loc, out):
        """``alloc_decode`` bound to persistent buffers (see ``prepare_alloc_extend``):
        ``prepared(batch)`` allocates for the first ``batch`` requests into
        ``out[:batch]``."""
        self._require_host("kvp_pool_alloc_decode")
        keep, tensors = [], []
        index = self._index
        seq, seq_n = _prepared.host_buffer(seq_lens, _INT64, "seq_lens", False, keep, tensors)
        last, last_n = _prepared.host_buffer(last_loc, index, "last_loc", False, keep, tensors)
        buf, n = _prepared.host_buffer(out, index, "out", True, keep, tensors)
        return _prepared.Prepared(self, self._lib.fast.kvp_pool_alloc_decode, (seq, last),
                                  (buf, n), tensors, keep, min(seq_n, last_n), n, out, False)

    def _require_host(self, call):
        """A device pool refuses the host calls (as the library would), before any pointer
        is kept."""
        if self.backend != BACKEND_HOST:
            raise self._lib.error(STATUS["WRONG_BACKEND"],
                                  f"{call} needs a host pool; this pool is a device pool: use "
                                  f"{call[len('kvp_pool_'):]}_async() with device tensors")

    # ---- request-to-token tables (SGLang's req_to_token) ----
    # ``table``: a 2-D int32/int64 tensor or numpy array (rows x max_context_len, any row
    # stride, unit column stride) — on the CPU for a host pool, on the pool's device for the
    # *_async methods — or a ReqTable. Rows and lengths are int64 arrays as elsewhere.

    def _table(self, table, device):
        """(ReqTable, keep) for ``table``."""
        if isinstance(table, ReqTable):
            return table, None
        torch = _buffers._torch(table)
        if torch is not None:
            if device is None and not table.is_cpu:
                raise ValueError(f"table is on {table.device}; a host pool reads host memory")
            if device is not None and (not table.is_cuda or table.get_device() != device):
                raise ValueError(f"table is on {table.device}: it must be on cuda:{device}")
            types = {torch.int64: INDEX_TYPE_I64, torch.int32: INDEX_TYPE_I32}
            if table.dtype not in types:
                raise TypeError(f"table has dtype {table.dtype}; it must be int32 or int64")
            if table.dim() != 2 or table.stride(1) != 1:
                raise ValueError("table must be 2-D with contiguous rows (stride(1) == 1)")
            return ReqTable(table.data_ptr(), types[table.dtype], table.shape[0],
                            table.stride(0), table.shape[1]), table
        numpy = _buffers._numpy(table)
        if numpy is not None and device is None:
            types = {numpy.dtype("int64"): INDEX_TYPE_I64, numpy.dtype("int32"): INDEX_TYPE_I32}
            if table.dtype not in types or table.ndim != 2:
                raise TypeError("table must be a 2-D int32 or int64 array")
            if table.strides[1] != table.itemsize or table.strides[0] % table.itemsize:
                raise ValueError("table rows must be contiguous")
            if not table.flags.writeable:
                raise ValueError("table must be writable")
            stride = table.strides[0] // table.itemsize
            if table.shape[0] <= 1:
                stride = table.shape[1]  # one row: its stride is never used (any sign)
            elif stride < 0:  # (a uint64_t: it would wrap)
                raise ValueError(f"table has a negative row stride ({stride}: rows in reverse "
                                 "order, e.g. table[::-1]); the rows must go forward")
            return ReqTable(table.__array_interface__["data"][0], types[table.dtype],
                            table.shape[0], stride, table.shape[1]), table
        raise TypeError("table must be a 2-D torch tensor, a numpy array (host pools) or a "
                        f"ReqTable, not {type(table).__name__}")

    def alloc_extend_rows(self, table, rows, prefix_lens, seq_lens, extend_num_tokens=None,
                          out=None, out_cache_loc=True):
        """``alloc_extend`` by request rows: ``last_loc`` is read from
        ``table[rows[i], prefix_lens[i] - 1]`` and the new slots are written to
        ``table[rows[i], prefix_lens[i]:seq_lens[i]]``. Returns ``out_cache_loc`` (as
        ``alloc_extend`` returns its output), or None with ``out_cache_loc=False``."""
        # (Scalars first and the table last: converting one may run Python code
        # (__index__), which must not run once a buffer's address is taken.)
        if extend_num_tokens is not None and type(extend_num_tokens) is not int:
            extend_num_tokens = _int(extend_num_tokens, "size_t", "extend_num_tokens")
        rows_p, batch, rows_keep = _host_array(rows, _INT64, "rows")
        prefix_p, prefix_n, prefix_keep = _host_array(prefix_lens, _INT64, "prefix_lens")
        seq_p, seq_n, seq_keep = _host_array(seq_lens, _INT64, "seq_lens")
        t, table_keep = self._table(table, None)
        if not batch == prefix_n == seq_n:
            raise ValueError("rows, prefix_lens and seq_lens need one entry per request")
        if type(extend_num_tokens) is not int or not 0 <= extend_num_tokens <= _SIZE_MAX:
            extend_num_tokens = self._extend_tokens(extend_num_tokens, prefix_lens, seq_lens,
                                                    prefix_p, seq_p, batch, seq_n,
                                                    prefix_keep, seq_keep)
        if out_cache_loc:
            n = extend_num_tokens
            if out is None and n > self._size:
                n = self._extend_out_len(n, prefix_p, seq_p, batch)
            out, address, length, kind = _out_buffer(n, out, self._index, prefix_lens,
                                                      seq_lens)
        else:
            address, length = None, 0
        status = self._lib.fast.kvp_pool_alloc_extend_rows(
            self.handle, ctypes.addressof(t), rows_p, prefix_p, seq_p, batch,
            extend_num_tokens, address, length)
        if status:
            self._lib.check(status)
        del table_keep, rows_keep, prefix_keep, seq_keep  # the call has returned
        return _result(out, kind, extend_num_tokens, length) if out_cache_loc else None

    def alloc_decode_rows(self, table, rows, seq_lens, out=None, out_cache_loc=True):
        """``alloc_decode`` by request rows: ``last_loc`` from ``table[rows[i],
        seq_lens[i] - 2]``, the new slot into ``table[rows[i], seq_lens[i] - 1]``."""
        rows_p, batch, rows_keep = _host_array(rows, _INT64, "rows")
        seq_p, seq_n, seq_keep = _host_array(seq_lens, _INT64, "seq_lens")
        t, table_keep = self._table(table, None)  # (last: see alloc_extend_rows)
        if batch != seq_n:
            raise ValueError("rows and seq_lens need one entry per request")
        if out_cache_loc:
            out, address, length, kind = _out_buffer(batch, out, self._index, seq_lens)
        else:
            address, length = None, 0
        status = self._lib.fast.kvp_pool_alloc_decode_rows(
            self.handle, ctypes.addressof(t), rows_p, seq_p, batch, address, length)
        if status:
            self._lib.check(status)
        del table_keep, rows_keep, seq_keep
        return _result(out, kind, batch, length) if out_cache_loc else None

    def free_rows(self, table, rows, starts, ends):
        """Frees ``table[rows[i], starts[i]:ends[i]]`` for every ``i`` as one call."""
        rows_p, batch, rows_keep = _host_array(rows, _INT64, "rows")
        starts_p, starts_n, starts_keep = _host_array(starts, _INT64, "starts")
        ends_p, ends_n, ends_keep = _host_array(ends, _INT64, "ends")
        t, table_keep = self._table(table, None)  # (last: see alloc_extend_rows)
        if not batch == starts_n == ends_n:
            raise ValueError("rows, starts and ends need one entry per request")
        status = self._lib.fast.kvp_pool_free_rows(self.handle, ctypes.addressof(t), rows_p,
                                                   starts_p, ends_p, batch)
        if status:
            self._lib.check(status)
        del table_keep, rows_keep, starts_keep, ends_keep

    def page_table(self, table, rows, seq_lens):
        """FlashInfer's paged-KV page table of ``rows[i]``'s first ``seq_lens[i]`` tokens:
        ``(kv_indptr, kv_indices, kv_last_page_len)`` as ``array.array('i')`` (int32)."""
        rows_p, batch, rows_keep = _host_array(rows, _INT64, "rows")
        seq_p, seq_n, seq_keep = _host_array(seq_lens, _INT64, "seq_lens")
        t, table_keep = self._table(table, None)  # (last: see alloc_extend_rows)
        if batch != seq_n:
            raise ValueError("rows and seq_lens need one entry per request")
        ps, row_len = self.page_size, t.row_len
        # From the converted copy, not `seq_lens` again (an iterator is read once). A length
        # past the rows is the library's to refuse: sized as a full row, not allocated for.
        seq = (ctypes.c_int64 * seq_n).from_address(seq_p) if seq_n else ()
        pages = sum(-(-min(s, row_len) // ps) for s in seq if s > 0)
        indptr = array.array("i", bytes(4 * (batch + 1)))
        indices = array.array("i", bytes(4 * max(pages, 1)))
        last = array.array("i", bytes(4 * max(batch, 1)))
        status = self._lib.fast.kvp_pool_page_table(
            self.handle, ctypes.addressof(t), rows_p, seq_p, batch, indptr.buffer_info()[0],
            indices.buffer_info()[0], pages, last.buffer_info()[0])
        if status:
            self._lib.check(status)
        del table_keep, rows_keep, seq_keep
        return indptr, indices[:pages], last[:batch]

    # ---- frees ----

    def _free(self, name, values, what, *args):
        address, n, keep = _HOST[type(values)](values, self._index, what, False)
        status = getattr(self._lib.fast, name)(self._handle or self.handle, address, n, *args)
        if status:
            self._lib.check(status)
        del keep  # the call has returned

    def free_indices(self, indices):
        if _HOST[type(indices)] in _BUFFER_HANDLERS:
            native = self._lib.python
            if native is not None:
                status = native.kvp_python_pool_free_indices(self._handle or self.handle,
                                                             indices)
                if status != _FALLBACK:
                    if status:
                        self._lib.check(status)
                    return
        elif (type(indices) in _TENSOR_TYPES and indices.is_cpu
                and indices.dtype is self._index.torch and indices.stride() == _UNIT):
            # a CPU tensor, the common case checked inline (_TENSOR_TYPES)
            n = indices.numel()
            if n:
                status = self._lib.fast.kvp_pool_free_indices(self._handle or self.handle,
                                                              indices.data_ptr(), n)
                if status:
                    self._lib.check(status)
                return
        # _free inlined: SGLang frees on every step
        address, n, keep = _HOST[type(indices)](indices, self._index, "indices", False)
        status = self._lib.fast.kvp_pool_free_indices(self._handle or self.handle, address, n)
        if status:
            self._lib.check(status)
        del keep  # the call has returned

    def free_pages(self, page_ids):
        self._free("kvp_pool_free_pages", page_ids, "page_ids")

    def free_segment(self, row, start_pos, length):
        """Frees the pages of ``row[start_pos:start_pos + length]`` (a req_to_token row)."""
        start_pos = _size(start_pos, "start_pos")
        length = _size(length, "length")
        self._free("kvp_pool_free_segment", row, "row", start_pos, length)

    def rewind(self, last_kept):
        """Moves each ``last_kept`` slot's page back to end at it (rejected speculative
        tokens): the next continuation from that slot gets the slots after it again."""
        self._free("kvp_pool_rewind", last_kept, "last_kept")

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

    # ---- decode reservations (docs/graph-decode.md) ----

    def reserve_decode(self, lens, last_loc, steps):
        """Host pool: reserves ``steps`` decode steps of a batch; ``lens[i]`` tokens held
        now, ``last_loc[i]`` the slot of the last one (-1 when none). The pages are taken
        now, in the order ``steps`` ``alloc_decode`` calls would take them. Returns a
        ``DecodeReservation``."""
        lens_p, batch, lens_keep = _host_array(lens, _INT64, "lens")
        last_p, last_n, last_keep = _host_array(last_loc, self._index, "last_loc")
        if batch != last_n:
            raise ValueError("lens and last_loc need one entry per request")
        steps = _int(steps, "uint32_t", "steps")
        handle = ctypes.c_void_p()
        status = self._lib.fast.kvp_pool_reserve_decode(
            self.handle, lens_p, last_p, batch, steps, ctypes.addressof(handle))
        if status:
            self._lib.check(status)
        del lens_keep, last_keep
        return DecodeReservation(self._lib, handle.value, self)

    def finish_reservation(self, reservation, steps_used):
        """Ends a host pool's reservation after ``steps_used`` steps: unused pages back to
        the front of the free list, partly used pages rewound."""
        steps_used = _int(steps_used, "uint32_t", "steps_used")
        self._call("kvp_decode_reservation_finish", reservation.handle, steps_used)

    def reserve_decode_async(self, lens, last_loc, steps, *, lens_host=None, stream=None):
        """Device pool: ``reserve_decode`` enqueued on ``stream`` (one kernel). ``lens``
        (int64) and ``last_loc`` are CUDA tensors, ``lens_host`` the host copy of ``lens``
        (required: the host plans and checks the shortage from it)."""
        call = "kvp_pool_reserve_decode_async"
        self._require_device(call)
        steps = _int(steps, "uint32_t", "steps")  # (first: it may run Python code)
        lens_h, batch, lens_keep = self._host_lengths(lens_host, "lens", call)
        lens_buf, lens_n = self._device_lengths(lens, "lens")
        last_buf, last_n = self._device_indices(last_loc, "last_loc")
        if not batch == lens_n == last_n:
            raise ValueError("lens, last_loc and lens_host need one entry per request")
        handle = ctypes.c_void_p()
        self._async_call(call, lens_h, lens_buf, last_buf, batch, steps,
                         ctypes.addressof(handle), self._stream_handle(stream))
        del lens_keep
        return DecodeReservation(self._lib, handle.value, self)

    def finish_reservation_async(self, reservation, steps_used, *, stream=None):
        """Enqueues the end of a device pool's reservation after ``steps_used`` steps (graph
        replays included); the kernel checks the count against the device's."""
        call = "kvp_decode_reservation_finish_async"
        self._require_device(call)
        steps_used = _int(steps_used, "uint32_t", "steps_used")
        self._async_call(call, reservation.handle, steps_used, self._stream_handle(stream))

    # ---- device pools: buffers and streams ----

    def _require_device(self, call):
        """A host pool refuses the *_async calls that take device buffers here, before any
        pointer is formed (the library would refuse them too)."""
        if self.backend != BACKEND_CUDA:  # not self.is_device (no property call)
            raise self._lib.error(STATUS["WRONG_BACKEND"],
                                  f"{call} needs a device pool (backend='cuda'); this pool "
                                  f"is a host pool: use {call[len('kvp_pool_'):-len('_async')]}"
                                  "() with host buffers")

    def _device_buffer(self, tensor, dtype_name, what):
        """(data pointer, length) of a CUDA tensor on the pool's device."""
        return _buffers.device_pointer(tensor, _ELEMENTS[dtype_name], what, self.device)

    def _device_indices(self, tensor, what):
        """(address, length) of a CUDA tensor of the index dtype on the pool's device."""
        return _device_pointer(tensor, self._index, what, self.device)

    def _device_lengths(self, tensor, what):
        """(address, length) of a CUDA int64 tensor on the pool's device."""
        return _device_pointer(tensor, _INT64, what, self.device)

    def _host_lengths(self, values, what, call):
        """(address, length, keep) of the host copy of a length array (any host array:
        list, array.array, numpy, CPU tensor, ...): required, because reading it from the
        device tensor (``.tolist()``, ``.cpu()``) would synchronize with the stream."""
        if values is None:
            raise _no_host_copy(call, what)
        return _HOST[type(values)](values, _INT64, what + "_host", False)

    def _current_stream(self):
        """The handle of PyTorch's current stream on the pool's device. The first call per
        pool goes through ``torch.cuda.current_stream`` (which initializes PyTorch's CUDA
        state); later ones through ``torch._C._cuda_getCurrentRawStream`` where PyTorch has
        it (the same value, without building a Stream object: ~0.1 us instead of ~3)."""
        current = self._raw_stream
        if current is None:
            torch = _import_torch("stream=None (the current PyTorch stream)")
            handle = torch.cuda.current_stream(self.device).cuda_stream
            raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
            if raw is not None and raw(self.device) == handle:
                self._raw_stream = raw
            else:
                self._raw_stream = lambda device: torch.cuda.current_stream(device).cuda_stream
            return handle
        return current(self.device)

    def _stream_handle(self, stream):
        """The CUstream handle to enqueue on: ``stream`` as an int (a cudaStream_t / CUstream
        value; 0 is the legacy default stream), a torch.cuda.Stream (``.cuda_stream``), an
        object with ``.ptr`` (CuPy) or a ctypes.c_void_p; None is the current PyTorch stream
        of the pool's device."""
        if stream is None:
            if self.backend != BACKEND_CUDA:
                return None  # a host pool refuses every *_async call; no torch needed to say so
            raw = self._raw_stream  # _current_stream's fast path, without its call
            return self._current_stream() if raw is None else raw(self.device)
        if type(stream) is int and 0 <= stream <= _UINTPTR_MAX:
            return stream
        if isinstance(stream, ctypes.c_void_p):
            return stream.value or 0
        if isinstance(stream, int):
            return _int(stream, "uintptr_t", "stream")
        for attribute in ("cuda_stream", "ptr"):
            handle = getattr(stream, attribute, None)
            if isinstance(handle, int):
                return _int(handle, "uintptr_t", f"stream.{attribute}")
        raise TypeError("stream must be None, a torch.cuda.Stream, a CUstream handle (int) or "
                        f"a ctypes.c_void_p, not {type(stream).__name__}")

    def _device_out(self, n, out, stream, handle, lengths=None):
        """(address, length, out) for a device output: ``out`` (a CUDA tensor of the pool's
        index dtype), or a new one of ``n`` elements allocated on the call's stream
        (``stream`` as given, ``handle`` its CUstream): PyTorch's caching allocator ties a
        block to the stream it was allocated on, so the memory is not handed to other
        streams while kvpool's kernels may still write it. A new output of more than the
        pool's slots is not made: an allocation of ``n`` raises ``_beyond_pool``; an extend
        (``lengths``: its converted host copies, ``(prefix_p, seq_p, batch)``) raises it
        when its lengths are valid and add up to ``n``, else gets an empty output (the call
        names the bad length or the count that disagrees before it looks at the output)."""
        if out is None and n > self._size:
            if lengths is None or self._extend_out_len(n, *lengths) == n:
                raise self._beyond_pool(n)
            n = 0
        if out is None:
            torch = _import_torch("out=None")
            device = self._torch_device
            if device is None:
                device = self._torch_device = torch.device("cuda", self.device)
            if stream is None or handle == self._current_stream():
                scope = contextlib.nullcontext()
            elif isinstance(stream, torch.cuda.Stream):
                scope = torch.cuda.stream(stream)
            else:
                default = torch.cuda.default_stream(self.device)
                target = (default if handle == default.cuda_stream
                          else torch.cuda.ExternalStream(handle, device=device))
                scope = torch.cuda.stream(target)
            with scope:
                out = torch.empty(max(n, 0), dtype=getattr(torch, self.index_dtype),
                                  device=device)
        pointer, length = self._device_indices(out, "out")
        return pointer, length, out

    def _async_call(self, name, *args):
        """``lib.fast.<name>(pool, *args)`` (addresses as ints), raising on failure."""
        status = getattr(self._lib.fast, name)(self._handle or self.handle, *args)
        if status:
            self._lib.check(status)

    # ---- device pools: allocation ----
    # Every *_async call enqueues kernels on `stream` and returns without synchronizing; its
    # output tensor is filled when the stream passes the call. Device tensors given to a call
    # (inputs and out) must stay allocated until then: tensors allocated on that same stream
    # are safe to drop (the caching allocator reuses their memory only in stream order);
    # for a tensor from another stream call ``tensor.record_stream(stream)`` or keep it.
    # The result is ``out`` itself when it has exactly the written length, else
    # ``out[:k]`` (a view; a tensor slice costs ~2 us of host time).

    def alloc_async(self, num_tokens, out=None, *, stream=None):
        """Allocates ``num_tokens`` slots (a multiple of page_size) into ``out`` on the device;
        returns ``out[:num_tokens]`` (a new tensor when ``out`` is None; for more slots than
        the pool has, KVP_STATUS_OUT_OF_SLOTS is raised before a tensor is made)."""
        if self.backend != BACKEND_CUDA:
            self._require_device("kvp_pool_alloc_async")
        if type(num_tokens) is not int or not 0 <= num_tokens <= _SIZE_MAX:
            num_tokens = _size(num_tokens, "num_tokens")
        handle = self._stream_handle(stream)
        if out is None:
            buf, n, out = self._device_out(num_tokens, None, stream, handle)
        else:
            buf, n = _device_pointer(out, self._index, "out", self.device)
        status = self._lib.fast.kvp_pool_alloc_async(self._handle or self.handle, num_tokens,
                                                     buf, n, handle)
        if status:
            self._lib.check(status)
        return out if n == num_tokens else out[:num_tokens]

    def alloc_extend_async(self, prefix_lens, seq_lens, last_loc, out=None, *,
                           prefix_lens_host=None, seq_lens_host=None, extend_num_tokens=None,
                           stream=None):
        """SGLang's ``alloc_extend`` on the device: ``prefix_lens``, ``seq_lens`` (int64) and
        ``last_loc`` (index dtype) are CUDA tensors; ``prefix_lens_host`` and
        ``seq_lens_host`` their host copies (lists, array.array, numpy arrays or CPU
        tensors; lists are converted in O(n) at C speed, the others zero-copy), required:
        kvpool plans and checks the allocation on the host from them without waiting for
        the device. ``extend_num_tokens`` defaults to ``sum(seq_lens_host) -
        sum(prefix_lens_host)`` (O(n), summed by the library in C; pass it to skip the
        sums: then host copies that are buffers are read by the library, the cheapest
        plain call). Returns ``out[:extend_num_tokens]`` (a new tensor when ``out`` is None;
        valid lengths adding up to more slots than the pool has raise
        KVP_STATUS_OUT_OF_SLOTS before a tensor is made)."""
        call = "kvp_pool_alloc_extend_async"
        if self.backend != BACKEND_CUDA:
            self._require_device(call)
        native = self._lib.python
        if (native is not None and type(extend_num_tokens) is int
                and _HOST[type(prefix_lens_host)] in _BUFFER_HANDLERS
                and _HOST[type(seq_lens_host)] in _BUFFER_HANDLERS
                and 0 <= extend_num_tokens <= _SIZE_MAX
                and (out is not None or extend_num_tokens <= self._size)):
            # (A new output of more slots than the pool has: the general path, which has
            # the host copies converted to check the lengths first.)
            done = self._extend_async_native(native, prefix_lens, seq_lens, last_loc, out,
                                             prefix_lens_host, seq_lens_host,
                                             extend_num_tokens, stream)
            if done is not None:
                return done
        if extend_num_tokens is not None and type(extend_num_tokens) is not int:
            # Before any address is taken (converting it may run Python code).
            extend_num_tokens = _int(extend_num_tokens, "size_t", "extend_num_tokens")
        # self._host_lengths inlined (one Python call less per host copy)
        if prefix_lens_host is None:
            raise _no_host_copy(call, "prefix_lens")
        prefix_host, batch, prefix_keep = _HOST[type(prefix_lens_host)](
            prefix_lens_host, _INT64, "prefix_lens_host", False)
        if seq_lens_host is None:
            raise _no_host_copy(call, "seq_lens")
        seq_host, seq_host_n, seq_keep = _HOST[type(seq_lens_host)](
            seq_lens_host, _INT64, "seq_lens_host", False)
        device, index = self.device, self._index
        prefix_buf, prefix_n = _device_pointer(prefix_lens, _INT64, "prefix_lens", device)
        seq_buf, seq_n = _device_pointer(seq_lens, _INT64, "seq_lens", device)
        last_buf, last_n = _device_pointer(last_loc, index, "last_loc", device)
        if not batch == seq_host_n == prefix_n == seq_n == last_n:
            raise ValueError("prefix_lens, seq_lens, last_loc and the host copies need one "
                             "entry per request")
        if type(extend_num_tokens) is not int or not 0 <= extend_num_tokens <= _SIZE_MAX:
            extend_num_tokens = self._extend_tokens(
                extend_num_tokens, prefix_lens_host, seq_lens_host, prefix_host, seq_host,
                batch, seq_host_n, prefix_keep, seq_keep)
        raw = self._raw_stream  # stream=None: self._stream_handle(None) without its call
        handle = (raw(device) if stream is None and raw is not None
                  else self._stream_handle(stream))
        if out is None:
            buf, n, out = self._device_out(extend_num_tokens, None, stream, handle,
                                           (prefix_host, seq_host, batch))
        else:
            buf, n = _device_pointer(out, index, "out", device)
        status = self._lib.fast.kvp_pool_alloc_extend_async(
            self._handle or self.handle, prefix_host, seq_host, prefix_buf, seq_buf, last_buf,
            batch, extend_num_tokens, buf, n, handle)
        if status:
            self._lib.check(status)
        del prefix_keep, seq_keep  # the call has returned: the host copies are read
        return out if n == extend_num_tokens else out[:extend_num_tokens]

    # The *_async calls through ``lib.python`` (host copies that are buffers, read by the
    # library): the device arguments as on the general path; None if the library fell back
    # (then nothing was called, and the general path converts or names what it did not take).

    def _extend_async_native(self, native, prefix_lens, seq_lens, last_loc, out,
                             prefix_lens_host, seq_lens_host, extend_num_tokens, stream):
        device, index = self.device, self._index
        prefix_buf, batch = _device_pointer(prefix_lens, _INT64, "prefix_lens", device)
        seq_buf, seq_n = _device_pointer(seq_lens, _INT64, "seq_lens", device)
        last_buf, last_n = _device_pointer(last_loc, index, "last_loc", device)
        if not batch == seq_n == last_n:
            return None
        raw = self._raw_stream
        handle = (raw(device) if stream is None and raw is not None
                  else self._stream_handle(stream))
        if out is None:
            buf, n, out = self._device_out(extend_num_tokens, None, stream, handle)
        else:
            buf, n = _device_pointer(out, index, "out", device)
        status = native.kvp_python_pool_alloc_extend_async(
            self._handle or self.handle, prefix_lens_host, seq_lens_host, prefix_buf, seq_buf,
            last_buf, batch, extend_num_tokens, buf, n, handle)
        if status == _FALLBACK:
            return None
        if status:
            self._lib.check(status)
        return out if n == extend_num_tokens else out[:extend_num_tokens]

    def _decode_async_native(self, native, seq_lens, last_loc, out, seq_lens_host, stream):
        device, index = self.device, self._index
        seq_buf, batch = _device_pointer(seq_lens, _INT64, "seq_lens", device)
        last_buf, last_n = _device_pointer(last_loc, index, "last_loc", device)
        if batch != last_n:
            return None
        raw = self._raw_stream
        handle = (raw(device) if stream is None and raw is not None
                  else self._stream_handle(stream))
        if out is None:
            buf, n, out = self._device_out(batch, None, stream, handle)
        else:
            buf, n = _device_pointer(out, index, "out", device)
        status = native.kvp_python_pool_alloc_decode_async(
            self._handle or self.handle, seq_lens_host, seq_buf, last_buf, batch, buf, n,
            handle)
        if status == _FALLBACK:
            return None
        if status:
            self._lib.check(status)
        return out if n == batch else out[:batch]

    def alloc_decode_async(self, seq_lens, last_loc, out=None, *, seq_lens_host=None,
                           stream=None):
        """SGLang's ``alloc_decode`` on the device: one slot per request. ``seq_lens``
        (int64, counting the new token) and ``last_loc`` are CUDA tensors, ``seq_lens_host``
        the host copy of ``seq_lens`` (required, as for ``alloc_extend_async``). Returns
        ``out[:batch]``."""
        call = "kvp_pool_alloc_decode_async"
        if self.backend != BACKEND_CUDA:
            self._require_device(call)
        native = self._lib.python
        if native is not None and _HOST[type(seq_lens_host)] in _BUFFER_HANDLERS:
            done = self._decode_async_native(native, seq_lens, last_loc, out, seq_lens_host,
                                             stream)
            if done is not None:
                return done
        if seq_lens_host is None:  # self._host_lengths inlined
            raise _no_host_copy(call, "seq_lens")
        seq_host, batch, seq_keep = _HOST[type(seq_lens_host)](
            seq_lens_host, _INT64, "seq_lens_host", False)
        device, index = self.device, self._index
        seq_buf, seq_n = _device_pointer(seq_lens, _INT64, "seq_lens", device)
        last_buf, last_n = _device_pointer(last_loc, index, "last_loc", device)
        if not batch == seq_n == last_n:
            raise ValueError("seq_lens, last_loc and seq_lens_host need one entry per request")
        raw = self._raw_stream  # stream=None: self._stream_handle(None) without its call
        handle = (raw(device) if stream is None and raw is not None
                  else self._stream_handle(stream))
        if out is None:
            buf, n, out = self._device_out(batch, None, stream, handle)
        else:
            buf, n = _device_pointer(out, index, "out", device)
        status = self._lib.fast.kvp_pool_alloc_decode_async(
            self._handle or self.handle, seq_host, seq_buf, last_buf, batch, buf, n, handle)
        if status:
            self._lib.check(status)
        del seq_keep  # the call has returned: the host copy is read
        return out if n == batch else out[:batch]

    def prepare_alloc_extend_async(self, prefix_lens, seq_lens, last_loc, out, *,
                                   prefix_lens_host, seq_lens_host, stream=None):
        """``alloc_extend_async`` bound to persistent buffers (see ``prepare_alloc_extend``):
        ``prepared(batch, extend_num_tokens)`` enqueues the allocation for the first
        ``batch`` requests into ``out[:extend_num_tokens]`` on the stream fixed here
        (``stream=None``: PyTorch's current stream now). The host copies are read by every
        call, so update them in place."""
        self._require_device("kvp_pool_alloc_extend_async")
        keep, tensors = [], []
        prefix_host, prefix_host_n = _prepared.host_buffer(
            prefix_lens_host, _INT64, "prefix_lens_host", False, keep, tensors)
        seq_host, seq_host_n = _prepared.host_buffer(seq_lens_host, _INT64, "seq_lens_host",
                                                     False, keep, tensors)
        prefix_buf, prefix_n = self._prepared_device(prefix_lens, _INT64, "prefix_lens", tensors,
                                                     keep)
        seq_buf, seq_n = self._prepared_device(seq_lens, _INT64, "seq_lens", tensors, keep)
        last_buf, last_n = self._prepared_device(last_loc, self._index, "last_loc", tensors,
                                                 keep)
        buf, n = self._prepared_device(out, self._index, "out", tensors, keep)
        handle = self._stream_handle(stream)
        keep.append(stream)  # a Stream object stays alive with its handle
        return _prepared.Prepared(
            self, self._lib.fast.kvp_pool_alloc_extend_async,
            (prefix_host, seq_host, prefix_buf, seq_buf, last_buf), (buf, n, handle), tensors,
            keep, min(prefix_host_n, seq_host_n, prefix_n, seq_n, last_n), n, out, True)

    def prepare_alloc_decode_async(self, seq_lens, last_loc, out, *, seq_lens_host,
                                   stream=None):
        """``alloc_decode_async`` bound to persistent buffers (see
        ``prepare_alloc_extend_async``): ``prepared(batch)`` enqueues the allocation for the
        first ``batch`` requests into ``out[:batch]``."""
        self._require_device("kvp_pool_alloc_decode_async")
        keep, tensors = [], []
        seq_host, seq_host_n = _prepared.host_buffer(seq_lens_host, _INT64, "seq_lens_host",
                                                     False, keep, tensors)
        seq_buf, seq_n = self._prepared_device(seq_lens, _INT64, "seq_lens", tensors, keep)
        last_buf, last_n = self._prepared_device(last_loc, self._index, "last_loc", tensors,
                                                 keep)
        buf, n = self._prepared_device(out, self._index, "out", tensors, keep)
        handle = self._stream_handle(stream)
        keep.append(stream)
        return _prepared.Prepared(
            self, self._lib.fast.kvp_pool_alloc_decode_async, (seq_host, seq_buf, last_buf),
            (buf, n, handle), tensors, keep, min(seq_host_n, seq_n, last_n), n, out, False)

    def _prepared_device(self, tensor, elements, what, tensors, keep):
        """(address, length) of a CUDA tensor for a prepared call, tracked as
        ``_prepared.track`` does (``tensors``, its storage in ``keep``)."""
        address, n = _device_pointer(tensor, elements, what, self.device)
        _prepared.track(tensor, address, n, keep, tensors)
        return address, n

    # ---- device pools: frees ----
    # An invalid index (double free, foreign index, page 0) is found by a kernel, after the
    # call returned OK: it is reported by ``check_device()`` and by every later call
    # (KvpError DEVICE_FAULT) until ``clear_async()`` or ``restore_state_async()``.

    def free_async(self, indices, *, stream=None):
        """SGLang's ``free``: frees slots by index (a paged pool frees each index's page).
        ``indices`` is a CUDA tensor of the index dtype."""
        if self.backend != BACKEND_CUDA:
            self._require_device("kvp_pool_free_indices_async")
        buf, n = _device_pointer(indices, self._index, "indices", self.device)
        handle = self._stream_handle(stream)
        status = self._lib.fast.kvp_pool_free_indices_async(self._handle or self.handle, buf, n,
                                                            handle)
        if status:
            self._lib.check(status)

    free_indices_async = free_async

    def free_pages_async(self, page_ids, *, stream=None):
        """Frees exactly these pages (a CUDA tensor of the index dtype), in this order."""
        call = "kvp_pool_free_pages_async"
        self._require_device(call)
        buf, n = self._device_indices(page_ids, "page_ids")
        self._async_call(call, buf, n, self._stream_handle(stream))

    def rewind_async(self, last_kept, *, stream=None):
        """``rewind`` on the stream (a CUDA tensor of the index dtype)."""
        call = "kvp_pool_rewind_async"
        self._require_device(call)
        buf, n = self._device_indices(last_kept, "last_kept")
        self._async_call(call, buf, n, self._stream_handle(stream))

    def free_segment_async(self, row, start_pos, length, *, stream=None):
        """Frees the pages of ``row[start_pos:start_pos + length]``; ``row`` is a request's
        req_to_token row (a 1-D CUDA tensor of the index dtype, e.g. ``req_to_token[i]``)."""
        call = "kvp_pool_free_segment_async"
        self._require_device(call)
        start_pos = _size(start_pos, "start_pos")
        length = _size(length, "length")
        buf, n = self._device_indices(row, "row")
        self._async_call(call, buf, n, start_pos, length, self._stream_handle(stream))

    # ---- device pools: request-to-token tables ----
    # ``table`` a 2-D int32/int64 CUDA tensor (SGLang's ``req_to_token``), ``rows`` and the
    # lengths int64 CUDA tensors, their ``*_host`` copies host arrays (required, as for
    # ``alloc_extend_async``). A bad row faults the pool (reported by ``check_device()``);
    # a failing call writes nothing to the table.

    def alloc_extend_rows_async(self, table, rows, prefix_lens, seq_lens, out=None, *,
                                prefix_lens_host=None, seq_lens_host=None,
                                extend_num_tokens=None, out_cache_loc=True, stream=None):
        """``alloc_extend_rows`` on the device: ``last_loc`` read from the table and the new
        slots written into it by the call's kernels. Returns ``out[:extend_num_tokens]``
        (SGLang's ``out_cache_loc``), or None with ``out_cache_loc=False``."""
        call = "kvp_pool_alloc_extend_rows_async"
        self._require_device(call)
        # (Scalars and host copies first: converting them may run Python code, which must
        # not run once an address is taken.)
        if extend_num_tokens is not None and type(extend_num_tokens) is not int:
            extend_num_tokens = _int(extend_num_tokens, "size_t", "extend_num_tokens")
        prefix_host, batch, prefix_keep = self._host_lengths(prefix_lens_host, "prefix_lens",
                                                             call)
        seq_host, seq_host_n, seq_keep = self._host_lengths(seq_lens_host, "seq_lens", call)
        t, table_keep = self._table(table, self.device)
        rows_buf, rows_n = self._device_lengths(rows, "rows")
        prefix_buf, prefix_n = self._device_lengths(prefix_lens, "prefix_lens")
        seq_buf, seq_n = self._device_lengths(seq_lens, "seq_lens")
        if not batch == seq_host_n == prefix_n == seq_n == rows_n:
            raise ValueError("rows, prefix_lens, seq_lens and the host copies need one entry "
                             "per request")
        extend_num_tokens = self._extend_tokens(extend_num_tokens, prefix_lens_host,
                                                seq_lens_host, prefix_host, seq_host, batch,
                                                seq_host_n, prefix_keep, seq_keep)
        handle = self._stream_handle(stream)
        if out_cache_loc:
            buf, n, out = self._device_out(extend_num_tokens, out, stream, handle,
                                           (prefix_host, seq_host, batch))
        else:
            buf, n = None, 0
        self._async_call(call, ctypes.addressof(t), rows_buf, prefix_host, seq_host,
                         prefix_buf, seq_buf, batch, extend_num_tokens, buf, n, handle)
        del table_keep, prefix_keep, seq_keep
        if not out_cache_loc:
            return None
        return out if n == extend_num_tokens else out[:extend_num_tokens]

    def alloc_decode_rows_async(self, table, rows, seq_lens, out=None, *, seq_lens_host=None,
                                out_cache_loc=True, stream=None):
        """``alloc_decode_rows`` on the device (see ``alloc_extend_rows_async``)."""
        call = "kvp_pool_alloc_decode_rows_async"
        self._require_device(call)
        seq_host, batch, seq_keep = self._host_lengths(seq_lens_host, "seq_lens", call)
        t, table_keep = self._table(table, self.device)  # (after the host copy, as above)
        rows_buf, rows_n = self._device_lengths(rows, "rows")
        seq_buf, seq_n = self._device_lengths(seq_lens, "seq_lens")
        if not batch == seq_n == rows_n:
            raise ValueError("rows, seq_lens and seq_lens_host need one entry per request")
        handle = self._stream_handle(stream)
        if out_cache_loc:
            buf, n, out = self._device_out(batch, out, stream, handle)
        else:
            buf, n = None, 0
        self._async_call(call, ctypes.addressof(t), rows_buf, seq_host, seq_buf, batch, buf, n,
                         handle)
        del table_keep, seq_keep
        if not out_cache_loc:
            return None
        return out if n == batch else out[:batch]

    def free_rows_async(self, table, rows, starts, ends, *, starts_host=None, ends_host=None,
                        stream=None):
        """``free_rows`` on the device; ``starts_host`` / ``ends_host`` are required."""
        call = "kvp_pool_free_rows_async"
        self._require_device(call)
        starts_h, batch, starts_keep = self._host_lengths(starts_host, "starts", call)
        ends_h, ends_n, ends_keep = self._host_lengths(ends_host, "ends", call)
        t, table_keep = self._table(table, self.device)  # (after the host copies)
        rows_buf, rows_n = self._device_lengths(rows, "rows")
        starts_buf, starts_n = self._device_lengths(starts, "starts")
        ends_buf, ends_dn = self._device_lengths(ends, "ends")
        if not batch == ends_n == rows_n == starts_n == ends_dn:
            raise ValueError("rows, starts, ends and the host copies need one entry per "
                             "request")
        self._async_call(call, ctypes.addressof(t), rows_buf, starts_h, ends_h, starts_buf,
                         ends_buf, batch, self._stream_handle(stream))
        del table_keep, starts_keep, ends_keep

    def reserve_scratch_async(self, table_rows, batch_size, slots, stream=None):
        """Sizes the device scratch of the by-row calls (``alloc_extend_rows_async``,
        ``alloc_decode_rows_async``, ``free_rows_async``) of up to ``batch_size`` requests
        and ``slots`` slots on tables of up to ``table_rows`` rows, so that they allocate
        no device memory: call it before capturing them into a CUDA graph, where a call
        that would have to grow the scratch raises ``INVALID_STATE`` (the capture intact).
        The scratch only grows; no kernel, no state change."""
        self._call("kvp_pool_reserve_scratch_async", _int(table_rows, "uint64_t", "table_rows"),
                   _int(batch_size, "size_t", "batch_size"), _int(slots, "uint64_t", "slots"),
                   self._stream_handle(stream))

    def page_table_async(self, table, rows, seq_lens, kv_indptr, kv_indices, kv_last_page_len,
                         *, seq_lens_host=None, stream=None):
        """FlashInfer's page table on the device into fixed int32 CUDA tensors
        (``kv_indptr`` batch + 1, ``kv_indices`` any capacity, ``kv_last_page_len`` batch),
        one kernel, no synchronization. Returns the host copies ``(kv_indptr,
        kv_last_page_len)`` as ``array.array('i')`` (for FlashInfer's ``plan()``)."""
        call = "kvp_pool_page_table_async"
        self._require_device(call)
        seq_host, batch, seq_keep = self._host_lengths(seq_lens_host, "seq_lens", call)
        t, table_keep = self._table(table, self.device)  # (after the host copy)
        rows_buf, rows_n = self._device_lengths(rows, "rows")
        seq_buf, seq_n = self._device_lengths(seq_lens, "seq_lens")
        if not batch == seq_n == rows_n:
            raise ValueError("rows, seq_lens and seq_lens_host need one entry per request")
        indptr_buf, indptr_n = self._device_buffer(kv_indptr, "int32", "kv_indptr")
        indices_buf, capacity = self._device_buffer(kv_indices, "int32", "kv_indices")
        last_buf, last_n = self._device_buffer(kv_last_page_len, "int32", "kv_last_page_len")
        if indptr_n < batch + 1 or last_n < batch:
            raise ValueError("kv_indptr needs batch + 1 entries and kv_last_page_len batch")
        indptr_h = array.array("i", bytes(4 * (batch + 1)))
        last_h = array.array("i", bytes(4 * max(batch, 1)))
        self._async_call(call, ctypes.addressof(t), rows_buf, seq_host, seq_buf, batch,
                         indptr_buf, indices_buf, capacity, last_buf, indptr_h.buffer_info()[0],
                         last_h.buffer_info()[0], self._stream_handle(stream))
        del table_keep, seq_keep
        return indptr_h, last_h[:batch]

    def free_group_end_async(self, stream=None):
        """Closes the free group (opened with ``free_group_begin()``) on the device."""
        self._call("kvp_pool_free_group_end_async", self._stream_handle(stream))

    @contextlib.contextmanager
    def free_group_async(self, stream=None):
        """``with pool.free_group_async(stream): ...`` — begin, and end on ``stream`` even if
        the body raises."""
        self.free_group_begin()
        try:
            yield self
        finally:
            self.free_group_end_async(stream)

    def merge_and_sort_free_async(self, stream=None):
        self._call("kvp_pool_merge_and_sort_free_async", self._stream_handle(stream))

    def clear_async(self, stream=None):
        """Frees every slot; also clears a device fault."""
        self._call("kvp_pool_clear_async", self._stream_handle(stream))

    # ---- device pools: snapshots ----

    def backup_state_async(self, stream=None):
        """A ``Snapshot`` of the pool's state as the stream reaches this call (copied on the
        device)."""
        handle = ctypes.c_void_p()
        self._call("kvp_pool_backup_state_async", ctypes.byref(handle),
                   self._stream_handle(stream))
        return Snapshot(self._lib, handle.value)

    def restore_state_async(self, snapshot, stream=None):
        """Returns the pool to ``snapshot``'s state; also clears a device fault."""
        self._call("kvp_pool_restore_state_async", snapshot.handle, self._stream_handle(stream))

    # ---- device pools: queries (no synchronization) ----

    def check_device(self):
        """Raises ``KvpError`` DEVICE_FAULT if a kernel has found invalid input (the message
        names the operation, the element's position and its value), or CUDA_ERROR while the
        pool refuses work after a call whose kernels were only partly enqueued; polls the
        device's fault record without synchronizing, so a fault in work the stream has not
        reached yet is not seen."""
        self._call("kvp_pool_check_device")

    def available_size_bound(self):
        """``(free slots, exact)``: exact unless a paged free by index is still in flight on
        the device, whose pages are counted once the stream has passed it (no synchronization
        needed)."""
        n = ctypes.c_uint64()
        exact = ctypes.c_bool()
        self._call("kvp_pool_available_size_bound", ctypes.byref(n), ctypes.byref(exact))
        return n.value, bool(exact.value)

    # ---- state digest (tensor parallelism) ----

    def digest(self):
        """The host pool's state digest (an int in ``0 .. 2**64``): equal on two pools of the
        same configuration after the same operations, host or device (``kvp_pool_digest``
        in kvpool.h defines it). A device pool raises WRONG_BACKEND: use ``digest_async``."""
        out = ctypes.c_uint64()
        self._call("kvp_pool_digest", ctypes.byref(out))
        return out.value

    def digest_async(self, out=None, *, stream=None):
        """Enqueues the device pool's state digest on ``stream`` (default: the current PyTorch
        stream of the pool's device) without synchronizing into ``out[0]`` (``out``: an int64
        CUDA tensor on the pool's device of at least one element; a new one when None);
        returns ``out[:1]``, which holds the digest's 64 bits once the stream has passed the
        call (``digest_value`` converts it to an
        unsigned int). All-gather it on the same stream to compare ranks."""
        if not self.is_device:
            raise self._lib.error(STATUS["WRONG_BACKEND"], "digest_async needs a device pool "
                                  "(backend='cuda'); this is a host pool: use digest()")
        handle = self._stream_handle(stream)
        if out is None:
            torch = _import_torch("out=None")
            device = torch.device("cuda", self.device)
            target = (torch.cuda.current_stream(self.device) if stream is None
                      else torch.cuda.ExternalStream(handle, device=device))
            with torch.cuda.stream(target):  # the block belongs to the call's stream
                out = torch.empty(1, dtype=torch.int64, device=device)
        pointer, n = self._device_buffer(out, "int64", "out")
        if n < 1:
            raise ValueError("out must hold one element")
        self._call("kvp_pool_digest_async", ctypes.cast(pointer, _u64_p), handle)
        return out[:1]
    # ---- debug options (kvp_pool_set_debug) ----

    def set_debug(self, flags):
        """Switches debug checks on (an or of ``DEBUG_*`` flags) or off (0). With
        ``DEBUG_STREAM_ORDER`` a device pool checks on the device that each call starts after
        the previous one has finished: a call from a stream not ordered with the previous
        call's faults the pool (KvpError UNORDERED_STREAMS from the next call or
        ``check_device()``). With ``DEBUG_REPLAY_CALLS`` a graph replayed at once repeats its
        captured call instead of faulting the pool (for timing a call; not for serving). A
        host pool accepts and ignores the flags."""
        self._call("kvp_pool_set_debug", _int(flags, "uint32_t", "flags"))

    def debug_flags(self):
        """The debug flags in force (always 0 on a host pool)."""
        flags = ctypes.c_uint32()
        self._call("kvp_pool_get_debug", ctypes.byref(flags))
        return flags.value

    # ---- testing builds only ----

    def testing_poison(self):
        self._call("kvp_testing_poison_pool")


def digest_value(value):
    """A digest as an unsigned int: from an int, or from the (int64) tensor
    ``Pool.digest_async`` fills (reading a CUDA tensor waits for its stream)."""
    if not isinstance(value, int):
        value = int(value.reshape(-1)[0].item())
    return value & 0xFFFF_FFFF_FFFF_FFFF


# ---- admission -----------------------------------------------------------------------------

PrefillEntryT = collections.namedtuple("PrefillEntryT", "id prefix_len extend_len chunked")
# prefix_len: the leading tokens of the row that are the cached prefix (unlock them; free
# only row[prefix_len:kv_len]), as in struct kvp_evicted.
EvictedT = collections.namedtuple("EvictedT", "id kv_len prefix_len")


@dataclasses.dataclass
class StepPlan:
    """A copy of one ``kvp_step_plan``: plain Python values, valid after the next step."""

    kind: int  # STEP_KIND_*
    batch_is_full: bool
    new_token_ratio: float
    prefill: list  # [PrefillEntryT(id, prefix_len, extend_len, chunked)]
    decode: list  # [id]
    retracted: list  # [EvictedT(id, kv_len, prefix_len)]
    preempted: list  # [EvictedT(id, kv_len, prefix_len)]
    aborted: list  # [EvictedT(id, kv_len, prefix_len)]

    @property
    def kind_name(self):
        return STEP_KIND_NAMES[self.kind]

    @property
    def evicted(self):
        """Every request whose KV the engine must free now."""
        return self.retracted + self.preempted + self.aborted

    @classmethod
    def copy_of(cls, c_plan):
        def array(pointer, n, convert):
            if n == 0:
                return []
            if not pointer:
                raise ValueError("kvp_step_plan has a NULL array with a non-zero length")
            return [convert(pointer[i]) for i in range(n)]

        def evicted(e):
            return EvictedT(e.id, e.kv_len, e.prefix_len)

        return cls(
            kind=c_plan.kind,
            batch_is_full=bool(c_plan.batch_is_full),
            new_token_ratio=c_plan.new_token_ratio,
            prefill=array(c_plan.prefill, c_plan.num_prefill,
                          lambda e: PrefillEntryT(e.id, e.prefix_len, e.extend_len,
                                                  bool(e.chunked))),
            decode=array(c_plan.decode, c_plan.num_decode, int),
            retracted=array(c_plan.retracted, c_plan.num_retracted, evicted),
            preempted=array(c_plan.preempted, c_plan.num_preempted, evicted),
            aborted=array(c_plan.aborted, c_plan.num_aborted, evicted),
        )


def _configure(struct, overrides):
    """Sets `overrides` on `struct`, refusing names it does not have (a typo must not be
    silently ignored), integers that do not fit their field (ctypes would wrap them) and
    values a double field cannot take (named, where ctypes' own errors name no field).
    Every value is checked before any is set, so a refused call leaves `struct` as it was."""
    fields = _struct_fields(type(struct))
    checked = {}
    for key, value in overrides.items():
        try:
            c_type, low, high = fields[key]
        except KeyError:
            raise TypeError(f"{type(struct).__name__} has no field {key!r}") from None
        if c_type is None or (type(value) is int and low <= value <= high):
            checked[key] = value
        elif c_type == "double":
            checked[key] = _double(value, key)  # converts, or says why not
        else:
            checked[key] = _int(value, c_type, key)  # converts, or says why not
    for key, value in checked.items():
        setattr(struct, key, value)
    return struct


_STRUCT_FIELDS = {}


def _struct_fields(struct_type):
    """{field: (C integer type name, low, high)} of a struct type (("double", -DBL_MAX,
    DBL_MAX) for a double: an int between them is taken as it is, anything else converted by
    ``_double``; (None, None, None) for a field of another type), computed once per type:
    ``submit`` and the other calls that fill a struct per call then check each field in a
    few comparisons."""
    fields = _STRUCT_FIELDS.get(struct_type)
    if fields is None:
        fields = {}
        for name, ctype in struct_type._fields_:
            c_type = _field_c_type(ctype)
            if c_type:
                fields[name] = (c_type, *_C_INT_BOUNDS[c_type])
            elif ctype is ctypes.c_double:
                fields[name] = ("double", -sys.float_info.max, sys.float_info.max)
            else:
                fields[name] = (None, None, None)
        _STRUCT_FIELDS[struct_type] = fields
    return fields


def _double(value, what):
    """``value`` as a C double (what ctypes takes: a real number, or an integer that fits);
    else TypeError / OverflowError naming ``what``."""
    if type(value) is float:
        return value
    try:
        return ctypes.c_double(value).value
    except TypeError:
        raise TypeError(f"{what} must be a real number, not {type(value).__name__}") from None
    except OverflowError:
        raise OverflowError(f"{what} = {value} is out of range for double") from None


def _new(struct_type, *args, **kwargs):
    """``struct_type(*args, **kwargs)`` with every integer field range-checked."""
    names = [name for name, _ in struct_type._fields_]
    if len(args) > len(names):
        raise TypeError(f"{struct_type.__name__} takes at most {len(names)} fields")
    overrides = dict(zip(names, args))
    for key in kwargs:
        if key in overrides:
            raise TypeError(f"{struct_type.__name__} got {key!r} twice")
    overrides.update(kwargs)
    return _configure(struct_type(), overrides)


def _u64_path(path):
    """(pointer, length) for an optional list of prefix-cache node ids."""
    if path is None:
        return None, 0
    return _int_array(path, "uint64_t", ctypes.c_uint64, "prefix_path")


class Scheduler(_Owner):
    """A kvp_scheduler. ``Scheduler(pool, chunked_prefill_size=4096, ...)`` starts
    from ``kvp_scheduler_config_default()`` and sets the given fields. With a pool it is
    attached: capacity and page size come from the pool, ``step()`` reads its available size
    (the ``available`` argument is ignored) and the native pool stays alive until the
    scheduler is freed, even after ``pool.close()``. Without one, pass ``capacity`` (and
    ``page_size``)."""

    _free_name = "kvp_scheduler_free"

    def __init__(self, pool=None, config=None, *, lib=None, **overrides):
        if lib is None:
            lib = load() if pool is None else pool._lib
        if config is None:
            config = lib.kvp_scheduler_config_default()
        elif overrides:
            config = type(config).from_buffer_copy(config)  # the caller's stays as it was
        _configure(config, overrides)
        handle = ctypes.c_void_p()
        pool_handle = None if pool is None else pool.handle
        lib.check(lib.kvp_scheduler_new(ctypes.byref(config), pool_handle,
                                        ctypes.byref(handle)))
        super().__init__(lib, handle.value)
        self.config = config

    def _call(self, name, *args):
        self._lib.check(getattr(self._lib, name)(self.handle, *args))

    def submit(self, id, input_len, max_new_tokens, prefix_len=0, prefix_evictable=0,
               output_len=0, priority=0, ignore_eos=False, prefix_path=None):
        """Queues a request; returns the ``SubmitResult`` (``queued`` false: unfittable)."""
        request = _new(Request, id=id, input_len=input_len, prefix_len=prefix_len,
                       prefix_evictable=prefix_evictable, max_new_tokens=max_new_tokens,
                       output_len=output_len, priority=priority, ignore_eos=ignore_eos)
        path, path_len = _u64_path(prefix_path)
        result = SubmitResult()
        self._call("kvp_scheduler_submit", ctypes.byref(request), path, path_len,
                   ctypes.byref(result))
        return result

    def update_prefix(self, id, prefix_len, prefix_evictable, prefix_path=None):
        id = _int(id, "uint64_t", "id")
        prefix_len = _int(prefix_len, "uint64_t", "prefix_len")
        prefix_evictable = _int(prefix_evictable, "uint64_t", "prefix_evictable")
        path, path_len = _u64_path(prefix_path)
        self._call("kvp_scheduler_update_prefix", id, prefix_len, prefix_evictable, path,
                   path_len)

    def step(self, available=0, evictable=0, allow_prefill=True):
        """Plans the next step; returns a ``StepPlan`` holding copies of the plan's arrays."""
        available = _int(available, "uint64_t", "available")
        evictable = _int(evictable, "uint64_t", "evictable")
        c_plan = StepPlanC()
        self._call("kvp_scheduler_step", available, evictable, allow_prefill,
                   ctypes.byref(c_plan))
        return StepPlan.copy_of(c_plan)

    def finish(self, id):
        """A running request finished; returns the KV tokens it held (to free)."""
        kv_len = ctypes.c_uint64()
        self._call("kvp_scheduler_finish", _int(id, "uint64_t", "id"), ctypes.byref(kv_len))
        return kv_len.value

    def abort(self, id):
        """Drops a request in any phase; returns the KV tokens it held (to free)."""
        kv_len = ctypes.c_uint64()
        self._call("kvp_scheduler_abort", _int(id, "uint64_t", "id"), ctypes.byref(kv_len))
        return kv_len.value

    def finish_ex(self, id):
        """``finish`` reporting what the request held: a ``Finished`` (``id``, ``kv_len``,
        ``prefix_len``: leading tokens of its row that are its cached prefix, locked since
        admission — unlock them, free or cache the rest; ``prefix_evictable``: of those,
        the tokens declared evictable before admission)."""
        out = Finished()
        self._call("kvp_scheduler_finish_ex", _int(id, "uint64_t", "id"), ctypes.byref(out))
        return out

    def abort_ex(self, id):
        """``abort`` reporting what the request held (a ``Finished``, as ``finish_ex``)."""
        out = Finished()
        self._call("kvp_scheduler_abort_ex", _int(id, "uint64_t", "id"), ctypes.byref(out))
        return out

    def request(self, id):
        state = RequestState()
        self._call("kvp_scheduler_get_request", _int(id, "uint64_t", "id"),
                   ctypes.byref(state))
        return state

    def stats(self):
        stats = SchedulerStats()
        self._call("kvp_scheduler_get_stats", ctypes.byref(stats))
        return stats

    # ---- state digest (tensor parallelism) ----

    def digest(self):
        """The scheduler's state digest (an int in ``0 .. 2**64``; ``kvp_scheduler_digest``):
        equal on two schedulers of the same configuration given the same calls."""
        out = ctypes.c_uint64()
        self._call("kvp_scheduler_digest", ctypes.byref(out))
        return out.value


class Adder(_Owner):
    """A kvp_adder for one prefill pass. ``config`` defaults to
    ``AdderConfig.sglang_defaults(page_size)``; keyword arguments set its fields.
    ``running`` is a list of ``RunningRequest`` (or of (input_len, output_len,
    max_new_tokens[, ignore_eos]) tuples)."""

    _free_name = "kvp_adder_free"

    def __init__(self, available, evictable=0, running=(), chunked_in_flight=0, config=None,
                 *, lib=None, **overrides):
        lib = load() if lib is None else lib
        if config is None:
            config = AdderConfig.sglang_defaults(overrides.get("page_size", 1))
        elif overrides:
            config = type(config).from_buffer_copy(config)  # the caller's stays as it was
        _configure(config, overrides)
        available = _int(available, "uint64_t", "available")
        evictable = _int(evictable, "uint64_t", "evictable")
        chunked_in_flight = _int(chunked_in_flight, "uint64_t", "chunked_in_flight")
        rows = [r if isinstance(r, RunningRequest) else _new(RunningRequest, *r)
                for r in running]
        array = (RunningRequest * len(rows))(*rows) if rows else None
        handle = ctypes.c_void_p()
        lib.check(lib.kvp_adder_new(ctypes.byref(config), available, evictable, array,
                                    len(rows), chunked_in_flight, ctypes.byref(handle)))
        super().__init__(lib, handle.value)
        self.config = config

    def _call(self, name, *args):
        self._lib.check(getattr(self._lib, name)(self.handle, *args))

    def add_one_req(self, input_len, max_new_tokens, prefix_len=0, prefix_evictable=0,
                    output_len=0, ignore_eos=False):
        candidate = _new(Candidate, input_len=input_len, prefix_len=prefix_len,
                         prefix_evictable=prefix_evictable, max_new_tokens=max_new_tokens,
                         output_len=output_len, ignore_eos=ignore_eos)
        out = Admission()
        self._call("kvp_adder_add_one_req", ctypes.byref(candidate), ctypes.byref(out))
        return out

    def add_chunked_req(self, prefix_len, remaining, max_new_tokens):
        prefix_len = _int(prefix_len, "uint64_t", "prefix_len")
        remaining = _int(remaining, "uint64_t", "remaining")
        max_new_tokens = _int(max_new_tokens, "uint64_t", "max_new_tokens")
        out = Admission()
        self._call("kvp_adder_add_chunked_req", prefix_len, remaining, max_new_tokens,
                   ctypes.byref(out))
        return out

    def budget(self):
        out = Budget()
        self._call("kvp_adder_get_budget", ctypes.byref(out))
        return out


class Delayer(_Owner):
    """A kvp_delayer. Keyword arguments set ``DelayerConfig`` fields; the defaults are
    SGLang's (30 passes) with every optional condition off. As in SGLang, the first pass the
    slot or queue condition would delay prefills instead, once in a delayer's life."""

    _free_name = "kvp_delayer_free"

    def __init__(self, *, lib=None, **overrides):
        lib = load() if lib is None else lib
        config = _new(DelayerConfig, max_delay_passes=30, token_usage_low_watermark=-1.0,
                      max_running_requests=0, queue_min_ratio=-1.0, prefill_max_requests=0)
        _configure(config, overrides)
        handle = ctypes.c_void_p()
        lib.check(lib.kvp_delayer_new(ctypes.byref(config), ctypes.byref(handle)))
        super().__init__(lib, handle.value)
        self.config = config

    def _call(self, name, *args):
        self._lib.check(getattr(self._lib, name)(self.handle, *args))

    def local_info(self, prefillable, token_usage, running_bs, waiting_len, timed_out=False):
        """This rank's ``RankInfo``. ``timed_out``: it has waited its delay budget (SGLang:
        5000 ms); once every rank says so, the queue condition stops delaying."""
        running_bs = _int(running_bs, "uint64_t", "running_bs")
        waiting_len = _int(waiting_len, "uint64_t", "waiting_len")
        out = RankInfo()
        self._call("kvp_delayer_local_info", prefillable, token_usage, running_bs,
                   waiting_len, timed_out, ctypes.byref(out))
        return out

    def negotiate(self, ranks):
        """The ``DELAY_VERDICT_*`` for this pass from every rank's ``RankInfo`` (or a tuple of
        its fields, range-checked as ``RankInfo``'s: ctypes' own conversion wraps them)."""
        ranks = [r if isinstance(r, RankInfo) else _new(RankInfo, *r) for r in ranks]
        array = (RankInfo * len(ranks))(*ranks) if ranks else None
        verdict = ctypes.c_uint32()
        self._call("kvp_delayer_negotiate", array, len(ranks), ctypes.byref(verdict))
        return verdict.value

    def record_prefill(self, batch_size):
        self._call("kvp_delayer_record_prefill", _int(batch_size, "uint64_t", "batch_size"))
