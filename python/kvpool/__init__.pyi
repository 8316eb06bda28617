# Type stub of the kvpool package (python/kvpool/__init__.py): its public API, typed for
# mypy & co. without annotations in the runtime code (whose hot paths are tuned to the
# nanosecond). scripts/check-types.sh checks it against the runtime module (mypy's stubtest)
# and type-checks tests/python/typed_usage.py with it; keep it in step with __init__.py.
#
# torch and numpy are optional (the package never imports them), so neither is imported
# here: their arrays are described by the protocols _ArrayLike and _Tensor below, which
# numpy.ndarray and torch.Tensor satisfy. A method that makes a new tensor returns Any.

import array
import ctypes
from _typeshed import StrPath
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from ctypes import _NamedFuncPointer
from dataclasses import dataclass
from types import SimpleNamespace
from typing import (Any, Final, Generic, Literal, NamedTuple, Protocol, SupportsIndex, TypeVar,
                    overload)

from typing_extensions import Buffer, Self, TypedDict, Unpack

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
    # added at runtime from ENUMS (every constant but the status, index type and backend ones)
    "ADD_RESULT_CONTINUE",
    "ADD_RESULT_NO_TOKEN",
    "ADD_RESULT_OTHER",
    "DEBUG_REPLAY_CALLS",
    "DEBUG_STREAM_ORDER",
    "DELAY_VERDICT_DELAY",
    "DELAY_VERDICT_NONE_READY",
    "DELAY_VERDICT_NO_WAIT",
    "DELAY_VERDICT_TOKEN_WATERMARK",
    "DELAY_VERDICT_WAIT_SUCCESS",
    "DELAY_VERDICT_WAIT_TIMEOUT",
    "PHASE_CHUNKING",
    "PHASE_RUNNING",
    "PHASE_WAITING",
    "POLICY_DFS_WEIGHT",
    "POLICY_FCFS",
    "POLICY_LOF",
    "POLICY_LPM",
    "POLICY_RANDOM",
    "RETRACTION_LENGTH",
    "RETRACTION_PRIORITY",
    "STEP_KIND_DECODE",
    "STEP_KIND_IDLE",
    "STEP_KIND_PREFILL",
    # added after device_pending_releases' definition
    "device_pending_releases",
]

__version__: str  # the library's version (Cargo.toml); load().version() is the loaded one's
ABI_VERSION: Final[int]  # KVP_ABI_VERSION this binding mirrors
MAX_RESERVED_STEPS: Final[int]  # KVP_MAX_RESERVED_STEPS: the most steps of one reservation

# ---- enums ---------------------------------------------------------------------------------

STATUS_NAMES: dict[int, str]  # {0: "KVP_STATUS_OK", ...}
STATUS: dict[str, int]  # {"OK": 0, ...}
ENUMS: dict[str, dict[str, int]]  # {C enum name: {"KVP_...": value}}, kvp_status included
STEP_KIND_NAMES: dict[int, str]  # {1: "PREFILL", ...}
PHASE_NAMES: dict[int, str]
ADD_RESULT_NAMES: dict[int, str]
DELAY_VERDICT_NAMES: dict[int, str]

INDEX_TYPE_I64: Final = 0
INDEX_TYPE_I32: Final = 1
BACKEND_HOST: Final = 0
BACKEND_CUDA: Final = 1
# enum kvp_policy (SchedulerConfig.policy)
POLICY_FCFS: Final = 0
POLICY_LOF: Final = 1
POLICY_RANDOM: Final = 2
POLICY_LPM: Final = 3
POLICY_DFS_WEIGHT: Final = 4
# enum kvp_retraction (SchedulerConfig.retraction)
RETRACTION_LENGTH: Final = 0
RETRACTION_PRIORITY: Final = 1
# enum kvp_step_kind (StepPlan.kind)
STEP_KIND_IDLE: Final = 0
STEP_KIND_PREFILL: Final = 1
STEP_KIND_DECODE: Final = 2
# enum kvp_phase (RequestState.phase)
PHASE_WAITING: Final = 0
PHASE_CHUNKING: Final = 1
PHASE_RUNNING: Final = 2
# enum kvp_add_result (Admission.next, Budget.state)
ADD_RESULT_CONTINUE: Final = 0
ADD_RESULT_NO_TOKEN: Final = 1
ADD_RESULT_OTHER: Final = 2
# enum kvp_delay_verdict (Delayer.negotiate)
DELAY_VERDICT_NO_WAIT: Final = 0
DELAY_VERDICT_WAIT_SUCCESS: Final = 1
DELAY_VERDICT_NONE_READY: Final = 2
DELAY_VERDICT_TOKEN_WATERMARK: Final = 3
DELAY_VERDICT_WAIT_TIMEOUT: Final = 4
DELAY_VERDICT_DELAY: Final = 5
# enum kvp_debug (Pool.set_debug flags)
DEBUG_STREAM_ORDER: Final = 1
DEBUG_REPLAY_CALLS: Final = 2

# ---- argument types ------------------------------------------------------------------------

class _ArrayLike(Protocol):
    """A numpy.ndarray or a torch.Tensor (what has a dtype and a shape): a slice of one is
    one of its own type."""

    @property
    def dtype(self) -> object: ...
    @property
    def shape(self) -> object: ...

class _Tensor(_ArrayLike, Protocol):
    """A torch.Tensor: the library reads or writes ``data_ptr()``'s ``numel()`` elements."""

    def data_ptr(self) -> int: ...
    def numel(self) -> int: ...

class _TorchStream(Protocol):  # torch.cuda.Stream
    @property
    def cuda_stream(self) -> int: ...

class _CuPyStream(Protocol):  # cupy.cuda.Stream (any object with an int .ptr)
    @property
    def ptr(self) -> int: ...

class _TorchDevice(Protocol):  # torch.device
    @property
    def type(self) -> str: ...
    @property
    def index(self) -> int | None: ...

# A host array (lengths: int64; indices: the pool's index type, int64 or int32): a 1-D
# buffer (array.array 'q' / 'i', numpy array, memoryview, ...) or a 1-D contiguous torch CPU
# tensor, passed by address; or a list, tuple or other iterable of ints, converted.
# The element type, shape and layout are checked at run time (TypeError / ValueError).
# (numpy arrays are Buffers in numpy's stubs only from Python 3.12: hence _ArrayLike.)
_HostArray = Buffer | _ArrayLike | Iterable[SupportsIndex]
# Host arrays whose calls return a list (when given no `out`).
_Ints = list[int] | tuple[SupportsIndex, ...] | range | Iterator[SupportsIndex]
# Host arrays whose calls return an array.array (when given no `out`).
_PlainBuffer = array.array[int] | memoryview
# An output (`out=`): a writable buffer of the pool's index type (array.array, numpy array,
# memoryview, ...) or a torch CPU tensor. Also the inputs of prepared calls (no lists).
_Out = Buffer | _ArrayLike
# A request-to-token table: a 2-D int32/int64 torch tensor or numpy array (on the CPU for a
# host pool, on the pool's device for the *_async methods), or a ReqTable over other memory.
_Table = ReqTable | _ArrayLike
# A CUDA stream: None (PyTorch's current stream on the pool's device), a cudaStream_t /
# CUstream handle, a torch.cuda.Stream, an object with .ptr (CuPy) or a ctypes.c_void_p.
_Stream = int | ctypes.c_void_p | _TorchStream | _CuPyStream | None
# A CUDA device: an ordinal, "cuda" (torch's current device) / "cuda:N", or a torch.device.
_Device = int | str | _TorchDevice

_ArrayT = TypeVar("_ArrayT", bound=_ArrayLike)
_BufferT = TypeVar("_BufferT", bound=Buffer)
_TensorT = TypeVar("_TensorT", bound=_Tensor)
_OutT = TypeVar("_OutT", bound=_Out)

# A ctypes function of the library (callable; argtypes and restype set from SIGNATURES).
_CFunction = _NamedFuncPointer

# ---- structs -------------------------------------------------------------------------------
# ctypes Structures with the header's fields (include/kvpool.h); constructed as ctypes
# structs are, positionally in field order or by field name, missing fields zero. Integer
# fields read as int, bool fields as bool, double fields as float.

class _Struct(ctypes.Structure):
    def as_dict(self) -> dict[str, Any]: ...

class PoolConfig(_Struct):  # struct kvp_pool_config
    size: int
    page_size: int
    index_type: int
    backend: int
    device: int
    need_sort: bool
    def __init__(self, size: int = ..., page_size: int = ..., index_type: int = ...,
                 backend: int = ..., device: int = ..., need_sort: bool = ...) -> None: ...

class PoolInfo(_Struct):  # struct kvp_pool_info
    size: int
    kv_rows: int
    padding_slot: int
    page_size: int
    num_pages: int
    index_type: int
    backend: int
    device: int
    need_sort: bool
    in_free_group: bool
    def __init__(self, size: int = ..., kv_rows: int = ..., padding_slot: int = ...,
                 page_size: int = ..., num_pages: int = ..., index_type: int = ...,
                 backend: int = ..., device: int = ..., need_sort: bool = ...,
                 in_free_group: bool = ...) -> None: ...

class ReqTable(_Struct):  # struct kvp_req_table: a table borrowed for one call
    data: int | None  # the address of row 0 (void *)
    index_type: int  # INDEX_TYPE_*
    rows: int
    row_stride: int  # in elements
    row_len: int
    def __init__(self, data: int | None = ..., index_type: int = ..., rows: int = ...,
                 row_stride: int = ..., row_len: int = ...) -> None: ...

class PoolStats(_Struct):  # struct kvp_pool_stats
    alloc_calls: int
    alloc_extend_calls: int
    alloc_decode_calls: int
    free_calls: int
    tokens_allocated: int
    slots_freed: int
    pages_allocated: int
    pages_freed: int
    pages_in_use: int
    pages_in_use_peak: int
    failed_allocations: int
    rejected_calls: int
    merges: int
    restores: int
    def __init__(self, alloc_calls: int = ..., alloc_extend_calls: int = ...,
                 alloc_decode_calls: int = ..., free_calls: int = ...,
                 tokens_allocated: int = ..., slots_freed: int = ..., pages_allocated: int = ...,
                 pages_freed: int = ..., pages_in_use: int = ..., pages_in_use_peak: int = ...,
                 failed_allocations: int = ..., rejected_calls: int = ..., merges: int = ...,
                 restores: int = ...) -> None: ...

class SchedulerConfig(_Struct):  # struct kvp_scheduler_config
    capacity: int
    page_size: int
    max_prefill_tokens: int
    chunked_prefill_size: int
    clip_max_new_tokens: int
    truncation_align_size: int
    prefill_max_requests: int
    max_running_requests: int
    max_chunked_requests: int
    policy: int  # POLICY_*
    retraction: int  # RETRACTION_*
    policy_seed: int
    enable_priority: bool
    low_priority_values_first: bool
    preemption_threshold: int
    enable_mixed_chunk: bool
    prefix_cache_disabled: bool
    init_new_token_ratio: float
    min_new_token_ratio_factor: float
    new_token_ratio_decay_steps: int
    schedule_conservativeness: float
    dynamic_chunk_a: float
    dynamic_chunk_b: float
    dynamic_chunk_context_len: int
    def __init__(self, capacity: int = ..., page_size: int = ..., max_prefill_tokens: int = ...,
                 chunked_prefill_size: int = ..., clip_max_new_tokens: int = ...,
                 truncation_align_size: int = ..., prefill_max_requests: int = ...,
                 max_running_requests: int = ..., max_chunked_requests: int = ...,
                 policy: int = ..., retraction: int = ..., policy_seed: int = ...,
                 enable_priority: bool = ..., low_priority_values_first: bool = ...,
                 preemption_threshold: int = ..., enable_mixed_chunk: bool = ...,
                 prefix_cache_disabled: bool = ..., init_new_token_ratio: float = ...,
                 min_new_token_ratio_factor: float = ..., new_token_ratio_decay_steps: int = ...,
                 schedule_conservativeness: float = ..., dynamic_chunk_a: float = ...,
                 dynamic_chunk_b: float = ..., dynamic_chunk_context_len: int = ...) -> None: ...

class Request(_Struct):  # struct kvp_request
    id: int
    input_len: int
    prefix_len: int
    prefix_evictable: int
    max_new_tokens: int
    output_len: int
    priority: int
    ignore_eos: bool
    def __init__(self, id: int = ..., input_len: int = ..., prefix_len: int = ...,
                 prefix_evictable: int = ..., max_new_tokens: int = ..., output_len: int = ...,
                 priority: int = ..., ignore_eos: bool = ...) -> None: ...

class SubmitResult(_Struct):  # struct kvp_submit_result
    queued: bool  # false: the request can never fit
    needed: int
    capacity: int
    def __init__(self, queued: bool = ..., needed: int = ..., capacity: int = ...) -> None: ...

class PrefillEntry(_Struct):  # struct kvp_prefill_entry
    id: int
    prefix_len: int
    extend_len: int
    chunked: bool
    def __init__(self, id: int = ..., prefix_len: int = ..., extend_len: int = ...,
                 chunked: bool = ...) -> None: ...

class Evicted(_Struct):  # struct kvp_evicted
    id: int
    kv_len: int
    prefix_len: int
    def __init__(self, id: int = ..., kv_len: int = ..., prefix_len: int = ...) -> None: ...

class Finished(_Struct):  # struct kvp_finished (Scheduler.finish_ex / abort_ex)
    id: int
    kv_len: int
    prefix_len: int
    prefix_evictable: int
    def __init__(self, id: int = ..., kv_len: int = ..., prefix_len: int = ...,
                 prefix_evictable: int = ...) -> None: ...

class StepPlanC(_Struct):  # struct kvp_step_plan as the library writes it (see StepPlan)
    kind: int
    batch_is_full: bool
    new_token_ratio: float
    prefill: ctypes._Pointer[PrefillEntry]
    num_prefill: int
    decode: ctypes._Pointer[ctypes.c_uint64]
    num_decode: int
    retracted: ctypes._Pointer[Evicted]
    num_retracted: int
    preempted: ctypes._Pointer[Evicted]
    num_preempted: int
    aborted: ctypes._Pointer[Evicted]
    num_aborted: int
    def __init__(self, kind: int = ..., batch_is_full: bool = ..., new_token_ratio: float = ...,
                 prefill: ctypes._Pointer[PrefillEntry] | None = ..., num_prefill: int = ...,
                 decode: ctypes._Pointer[ctypes.c_uint64] | None = ..., num_decode: int = ...,
                 retracted: ctypes._Pointer[Evicted] | None = ..., num_retracted: int = ...,
                 preempted: ctypes._Pointer[Evicted] | None = ..., num_preempted: int = ...,
                 aborted: ctypes._Pointer[Evicted] | None = ...,
                 num_aborted: int = ...) -> None: ...

class RequestState(_Struct):  # struct kvp_request_state
    phase: int  # PHASE_*
    kv_len: int
    output_len: int
    def __init__(self, phase: int = ..., kv_len: int = ..., output_len: int = ...) -> None: ...

class SchedulerStats(_Struct):  # struct kvp_scheduler_stats
    steps: int
    prefill_steps: int
    decode_steps: int
    admitted: int
    chunks: int
    retractions: int
    preemptions: int
    aborts: int
    unfittable: int
    finished: int
    waiting: int
    chunking: int
    running: int
    new_token_ratio: float
    def __init__(self, steps: int = ..., prefill_steps: int = ..., decode_steps: int = ...,
                 admitted: int = ..., chunks: int = ..., retractions: int = ...,
                 preemptions: int = ..., aborts: int = ..., unfittable: int = ...,
                 finished: int = ..., waiting: int = ..., chunking: int = ..., running: int = ...,
                 new_token_ratio: float = ...) -> None: ...

class AdderConfig(_Struct):  # struct kvp_adder_config
    page_size: int
    max_prefill_tokens: int
    chunked_prefill_size: int
    num_mixed_decode_tokens: int
    clip_max_new_tokens: int
    truncation_align_size: int
    prefill_max_requests: int
    max_chunked_requests: int
    new_token_ratio: float
    prefix_cache_disabled: bool
    def __init__(self, page_size: int = ..., max_prefill_tokens: int = ...,
                 chunked_prefill_size: int = ..., num_mixed_decode_tokens: int = ...,
                 clip_max_new_tokens: int = ..., truncation_align_size: int = ...,
                 prefill_max_requests: int = ..., max_chunked_requests: int = ...,
                 new_token_ratio: float = ..., prefix_cache_disabled: bool = ...) -> None: ...
    @classmethod
    def sglang_defaults(cls, page_size: SupportsIndex = ...) -> Self: ...

class RunningRequest(_Struct):  # struct kvp_running_request
    input_len: int
    output_len: int
    max_new_tokens: int
    ignore_eos: bool
    def __init__(self, input_len: int = ..., output_len: int = ..., max_new_tokens: int = ...,
                 ignore_eos: bool = ...) -> None: ...

class Candidate(_Struct):  # struct kvp_candidate
    input_len: int
    prefix_len: int
    prefix_evictable: int
    max_new_tokens: int
    output_len: int
    ignore_eos: bool
    def __init__(self, input_len: int = ..., prefix_len: int = ..., prefix_evictable: int = ...,
                 max_new_tokens: int = ..., output_len: int = ...,
                 ignore_eos: bool = ...) -> None: ...

class Admission(_Struct):  # struct kvp_admission
    admitted: bool
    chunked: bool
    extend_len: int
    next: int  # ADD_RESULT_*
    def __init__(self, admitted: bool = ..., chunked: bool = ..., extend_len: int = ...,
                 next: int = ...) -> None: ...

class Budget(_Struct):  # struct kvp_budget
    rem_total_tokens: float
    cur_rem_tokens: int
    rem_input_tokens: int
    rem_chunk_tokens: int
    state: int  # ADD_RESULT_*
    def __init__(self, rem_total_tokens: float = ..., cur_rem_tokens: int = ...,
                 rem_input_tokens: int = ..., rem_chunk_tokens: int = ...,
                 state: int = ...) -> None: ...

class DelayerConfig(_Struct):  # struct kvp_delayer_config
    max_delay_passes: int
    token_usage_low_watermark: float
    max_running_requests: int
    queue_min_ratio: float
    prefill_max_requests: int
    def __init__(self, max_delay_passes: int = ..., token_usage_low_watermark: float = ...,
                 max_running_requests: int = ..., queue_min_ratio: float = ...,
                 prefill_max_requests: int = ...) -> None: ...

class RankInfo(_Struct):  # struct kvp_rank_info
    prefillable: bool
    force_allow: bool
    timed_out: bool
    running_bs: int
    max_prefill_bs: int
    waiting_len: int
    def __init__(self, prefillable: bool = ..., force_allow: bool = ..., timed_out: bool = ...,
                 running_bs: int = ..., max_prefill_bs: int = ...,
                 waiting_len: int = ...) -> None: ...

STRUCTS: dict[str, type[_Struct]]  # every struct of the header, by C name

# ---- signatures ----------------------------------------------------------------------------

# {C function name: (restype, argtypes)}: ctypes types (restype None for void).
SIGNATURES: dict[str, tuple[type[Any] | None, list[type[Any]]]]
TESTING_FUNCTIONS: frozenset[str]  # exported only by a library built with --features testing

class KvpError(Exception):
    """A kvpool call returned a status other than KVP_STATUS_OK."""

    status: int  # the kvp_status number
    name: str  # e.g. "KVP_STATUS_DOUBLE_FREE"
    description: str  # kvp_status_str(status)
    message: str  # kvp_last_error_message() right after the call
    def __init__(self, status: int, name: str, description: str, message: str) -> None: ...

def find_library() -> str: ...
def load(path: StrPath | None = ...) -> Library: ...
def device_pending_releases(lib: Library | None = ...) -> int: ...

class Library:
    """The loaded shared library, with every function of SIGNATURES as an attribute."""

    path: str  # absolute
    fast: SimpleNamespace  # the hot functions, pointer parameters as ints (or builtins)
    has_testing: bool  # built with --features testing (kvp_testing_* present)
    python: SimpleNamespace | None  # the library's own builtins (None: unavailable or off)
    def __init__(self, path: StrPath | None = ...) -> None: ...
    def function(self, name: str) -> _CFunction: ...
    def fast_function(self, name: str) -> Any: ...  # a ctypes function or a builtin
    def last_error_message(self) -> str: ...
    def status_str(self, status: int) -> str: ...
    def check(self, status: int) -> None: ...  # raises KvpError unless status == 0
    def error(self, status: int, message: str) -> KvpError: ...
    def version(self) -> str: ...
    def abi_version(self) -> int: ...
    def config_default(self) -> PoolConfig: ...
    def testing_panic(self) -> None: ...

    # The C functions (SIGNATURES' names; kvp_testing_* only where has_testing):
    kvp_last_error_message: _CFunction
    kvp_status_str: _CFunction
    kvp_version: _CFunction
    kvp_abi_version: _CFunction
    kvp_testing_panic: _CFunction
    kvp_testing_poison_pool: _CFunction
    kvp_device_pending_releases: _CFunction
    # pools
    kvp_pool_config_default: _CFunction
    kvp_pool_new: _CFunction
    kvp_pool_free: _CFunction
    kvp_pool_get_info: _CFunction
    kvp_pool_available_size: _CFunction
    kvp_pool_get_stats: _CFunction
    kvp_pool_extend_need: _CFunction
    kvp_pool_decode_need: _CFunction
    kvp_pool_alloc: _CFunction
    kvp_pool_alloc_extend: _CFunction
    kvp_pool_alloc_decode: _CFunction
    kvp_pool_free_indices: _CFunction
    kvp_pool_free_pages: _CFunction
    kvp_pool_rewind: _CFunction
    kvp_pool_free_segment: _CFunction
    kvp_pool_free_group_begin: _CFunction
    kvp_pool_free_group_end: _CFunction
    kvp_pool_merge_and_sort_free: _CFunction
    kvp_pool_clear: _CFunction
    kvp_pool_backup_state: _CFunction
    kvp_pool_restore_state: _CFunction
    kvp_snapshot_free: _CFunction
    kvp_pool_digest: _CFunction
    kvp_pool_set_debug: _CFunction
    kvp_pool_get_debug: _CFunction
    kvp_pool_alloc_extend_rows: _CFunction
    kvp_pool_alloc_decode_rows: _CFunction
    kvp_pool_free_rows: _CFunction
    kvp_pool_page_table: _CFunction
    # device pools
    kvp_pool_alloc_async: _CFunction
    kvp_pool_alloc_extend_async: _CFunction
    kvp_pool_alloc_decode_async: _CFunction
    kvp_pool_free_indices_async: _CFunction
    kvp_pool_free_pages_async: _CFunction
    kvp_pool_rewind_async: _CFunction
    kvp_pool_free_segment_async: _CFunction
    kvp_pool_free_group_end_async: _CFunction
    kvp_pool_merge_and_sort_free_async: _CFunction
    kvp_pool_clear_async: _CFunction
    kvp_pool_backup_state_async: _CFunction
    kvp_pool_restore_state_async: _CFunction
    kvp_pool_check_device: _CFunction
    kvp_pool_available_size_bound: _CFunction
    kvp_pool_digest_async: _CFunction
    kvp_pool_alloc_extend_rows_async: _CFunction
    kvp_pool_alloc_decode_rows_async: _CFunction
    kvp_pool_free_rows_async: _CFunction
    kvp_pool_reserve_scratch_async: _CFunction
    kvp_pool_page_table_async: _CFunction
    # decode reservations
    kvp_pool_reserve_decode: _CFunction
    kvp_pool_reserve_decode_async: _CFunction
    kvp_decode_reservation_step: _CFunction
    kvp_decode_reservation_step_async: _CFunction
    kvp_decode_reservation_finish: _CFunction
    kvp_decode_reservation_finish_async: _CFunction
    kvp_decode_reservation_get_info: _CFunction
    kvp_decode_reservation_free: _CFunction
    # the package's entry points (see _native.py)
    kvp_python_init: _CFunction
    kvp_python_methods: _CFunction
    kvp_python_pool_alloc_extend: _CFunction
    kvp_python_pool_alloc_decode: _CFunction
    kvp_python_pool_alloc: _CFunction
    kvp_python_pool_free_indices: _CFunction
    kvp_python_pool_alloc_extend_async: _CFunction
    kvp_python_pool_alloc_decode_async: _CFunction
    kvp_python_extend_tokens: _CFunction
    # admission
    kvp_scheduler_config_default: _CFunction
    kvp_scheduler_new: _CFunction
    kvp_scheduler_free: _CFunction
    kvp_scheduler_submit: _CFunction
    kvp_scheduler_update_prefix: _CFunction
    kvp_scheduler_step: _CFunction
    kvp_scheduler_finish: _CFunction
    kvp_scheduler_abort: _CFunction
    kvp_scheduler_finish_ex: _CFunction
    kvp_scheduler_abort_ex: _CFunction
    kvp_scheduler_get_request: _CFunction
    kvp_scheduler_get_stats: _CFunction
    kvp_scheduler_digest: _CFunction
    kvp_adder_config_default: _CFunction
    kvp_adder_new: _CFunction
    kvp_adder_free: _CFunction
    kvp_adder_add_one_req: _CFunction
    kvp_adder_add_chunked_req: _CFunction
    kvp_adder_get_budget: _CFunction
    kvp_delayer_config_default: _CFunction
    kvp_delayer_new: _CFunction
    kvp_delayer_free: _CFunction
    kvp_delayer_local_info: _CFunction
    kvp_delayer_negotiate: _CFunction
    kvp_delayer_record_prefill: _CFunction

# ---- handles -------------------------------------------------------------------------------

class _Owner:
    """Owns one native handle, freed exactly once: by close(), by leaving a ``with`` block,
    or when collected."""

    def __init__(self, lib: Library, handle: int | None) -> None: ...
    @property
    def handle(self) -> int: ...  # ValueError once closed
    @property
    def closed(self) -> bool: ...
    def close(self) -> None: ...
    def __enter__(self) -> Self: ...
    def __exit__(self, *exc: object) -> None: ...
    def __del__(self) -> None: ...

class Snapshot(_Owner):
    """A copy of a pool's allocator state (Pool.backup_state / backup_state_async)."""

class DecodeReservation(_Owner):
    """``steps`` reserved decode steps of a fixed batch (Pool.reserve_decode[_async])."""

    steps: int
    batch_size: int
    pages: int
    def __init__(self, lib: Library, handle: int | None, pool: Pool) -> None: ...
    # Host pool: the next step's slots (a list, or into `out` as Pool.alloc_decode). A
    # `table` needs `rows` (host array, one per request of the batch).
    @overload
    def step(self, out: None = ..., *, table: _Table | None = ...,
             rows: _HostArray | None = ...) -> list[int]: ...
    @overload
    def step(self, out: _ArrayT, *, table: _Table | None = ...,
             rows: _HostArray | None = ...) -> _ArrayT: ...
    @overload
    def step(self, out: _BufferT, *, table: _Table | None = ...,
             rows: _HostArray | None = ...) -> _BufferT | memoryview: ...
    # Device pool: enqueues the next step (one kernel, capturable); returns `out`. `rows`:
    # an int64 CUDA tensor, needed with a `table`.
    def step_async(self, out: _TensorT, *, table: _Table | None = ...,
                   rows: _Tensor | None = ..., stream: _Stream = ...) -> _TensorT: ...

class ExtendNeed(NamedTuple):  # Pool.extend_need
    pages: int  # pages alloc_extend takes from the free list
    tokens: int  # slots it writes (its extend_num_tokens)

# A prepared allocation (Pool.prepare_*; kvpool._prepared.Prepared at run time): calling it
# writes the first `batch` requests' slots into the prepared `out` and returns None.
class _PreparedCall(Generic[_OutT]):
    capacity: int  # the most requests a call may name
    out_len: int  # the prepared output's length
    out: _OutT

class _PreparedExtend(_PreparedCall[_OutT]):
    def __call__(self, batch: int, extend_num_tokens: int) -> None: ...  # exact ints

class _PreparedDecode(_PreparedCall[_OutT]):
    def __call__(self, batch: int, extend_num_tokens: None = ...) -> None: ...

class Pool(_Owner):
    """A kvpool slot allocator. Host arrays (see _HostArray) go in; results are lists for
    list inputs, else of the inputs' kind (tensor, numpy array, array.array), or `out`
    itself when exactly filled, else its written prefix (a memoryview of an array.array)."""

    index_type: int  # INDEX_TYPE_*
    index_ctype: type[ctypes.c_int64] | type[ctypes.c_int32]
    index_dtype: str  # "int64" or "int32" (torch's and numpy's name)
    page_size: int
    backend: int  # BACKEND_*
    device: int | None  # the CUDA ordinal of a device pool, None for a host pool
    # Defaults: page_size=1, index_type=INDEX_TYPE_I64, need_sort=False, backend=BACKEND_HOST,
    # device=0; lib=None is load().
    def __init__(self, size: SupportsIndex, page_size: SupportsIndex = ...,
                 index_type: SupportsIndex = ..., need_sort: bool = ...,
                 backend: str | int = ...,  # "host" / "cuda" (any case) or BACKEND_*
                 device: _Device = ...,  # a host pool takes an int only
                 *, lib: Library | None = ...) -> None: ...
    @property
    def is_device(self) -> bool: ...

    # ---- queries ----
    def info(self) -> PoolInfo: ...
    def available_size(self) -> int: ...
    def stats(self) -> PoolStats: ...
    def extend_need(self, prefix_lens: _HostArray, seq_lens: _HostArray) -> ExtendNeed: ...
    def decode_need(self, seq_lens: _HostArray) -> int: ...

    # ---- allocation (host pools) ----
    # Given no `out`: a list (alloc), else a new output of the inputs' kind (`out_len`, a
    # test knob, sizes it). Given `out`: `out` when exactly filled, else its first k elements
    # (`out[:k]`; a memoryview for other buffers than numpy arrays); `out_len` is ignored.
    # (`out` is keyword-only here: positional after the defaults, overloads would overlap.)
    @overload
    def alloc(self, num_tokens: SupportsIndex, out_len: SupportsIndex | None = ...,
              out: None = ...) -> list[int]: ...
    @overload
    def alloc(self, num_tokens: SupportsIndex, out_len: SupportsIndex | None = ..., *,
              out: _ArrayT) -> _ArrayT: ...
    @overload
    def alloc(self, num_tokens: SupportsIndex, out_len: SupportsIndex | None = ..., *,
              out: _BufferT) -> _BufferT | memoryview: ...

    @overload  # lists (tuples, ranges, iterators) in: a list
    def alloc_extend(self, prefix_lens: _Ints, seq_lens: _Ints, last_loc: _Ints,
                     extend_num_tokens: SupportsIndex | None = ...,
                     out_len: SupportsIndex | None = ..., out: None = ...) -> list[int]: ...
    @overload  # numpy arrays (or CPU tensors) in: one of that type (of mixed dtypes: _ArrayLike)
    def alloc_extend(self, prefix_lens: _ArrayT, seq_lens: _ArrayT, last_loc: _ArrayT,
                     extend_num_tokens: SupportsIndex | None = ...,
                     out_len: SupportsIndex | None = ..., out: None = ...) -> _ArrayT: ...
    @overload  # array.array / memoryview in: an array.array (with an out_len: see below)
    def alloc_extend(self, prefix_lens: _PlainBuffer, seq_lens: _PlainBuffer,
                     last_loc: _PlainBuffer, extend_num_tokens: SupportsIndex | None = ...,
                     out_len: None = ..., out: None = ...) -> array.array[int]: ...
    @overload  # inputs of several kinds, or an out_len: the module's rules
    def alloc_extend(self, prefix_lens: _HostArray, seq_lens: _HostArray, last_loc: _HostArray,
                     extend_num_tokens: SupportsIndex | None = ...,
                     out_len: SupportsIndex | None = ..., out: None = ...) -> Any: ...
    @overload  # into a numpy array or tensor: it, or its first k elements
    def alloc_extend(self, prefix_lens: _HostArray, seq_lens: _HostArray, last_loc: _HostArray,
                     extend_num_tokens: SupportsIndex | None = ...,
                     out_len: SupportsIndex | None = ..., *, out: _ArrayT) -> _ArrayT: ...
    @overload  # into another buffer: it, or a memoryview of its first k elements
    def alloc_extend(self, prefix_lens: _HostArray, seq_lens: _HostArray, last_loc: _HostArray,
                     extend_num_tokens: SupportsIndex | None = ...,
                     out_len: SupportsIndex | None = ..., *,
                     out: _BufferT) -> _BufferT | memoryview: ...

    @overload
    def alloc_decode(self, seq_lens: _Ints, last_loc: _Ints,
                     out_len: SupportsIndex | None = ..., out: None = ...) -> list[int]: ...
    @overload
    def alloc_decode(self, seq_lens: _ArrayT, last_loc: _ArrayT,
                     out_len: SupportsIndex | None = ..., out: None = ...) -> _ArrayT: ...
    @overload
    def alloc_decode(self, seq_lens: _PlainBuffer, last_loc: _PlainBuffer, out_len: None = ...,
                     out: None = ...) -> array.array[int]: ...
    @overload
    def alloc_decode(self, seq_lens: _HostArray, last_loc: _HostArray,
                     out_len: SupportsIndex | None = ..., out: None = ...) -> Any: ...
    @overload
    def alloc_decode(self, seq_lens: _HostArray, last_loc: _HostArray,
                     out_len: SupportsIndex | None = ..., *, out: _ArrayT) -> _ArrayT: ...
    @overload
    def alloc_decode(self, seq_lens: _HostArray, last_loc: _HostArray,
                     out_len: SupportsIndex | None = ..., *,
                     out: _BufferT) -> _BufferT | memoryview: ...

    # Prepared calls: buffers or tensors only (a list or read-only buffer raises TypeError).
    def prepare_alloc_extend(self, prefix_lens: _Out, seq_lens: _Out, last_loc: _Out,
                             out: _OutT) -> _PreparedExtend[_OutT]: ...
    def prepare_alloc_decode(self, seq_lens: _Out, last_loc: _Out,
                             out: _OutT) -> _PreparedDecode[_OutT]: ...

    # ---- request-to-token tables (host pools) ----
    # As alloc_extend / alloc_decode; the result's kind follows the lengths (not rows or the
    # table). out_cache_loc=False: the slots go to the table only, and None is returned.
    @overload
    def alloc_extend_rows(self, table: _Table, rows: _HostArray, prefix_lens: _HostArray,
                          seq_lens: _HostArray, extend_num_tokens: SupportsIndex | None = ...,
                          out: _Out | None = ..., *, out_cache_loc: Literal[False]) -> None: ...
    @overload
    def alloc_extend_rows(self, table: _Table, rows: _HostArray, prefix_lens: _Ints,
                          seq_lens: _Ints, extend_num_tokens: SupportsIndex | None = ...,
                          out: None = ..., out_cache_loc: Literal[True] = ...) -> list[int]: ...
    @overload
    def alloc_extend_rows(self, table: _Table, rows: _HostArray, prefix_lens: _ArrayT,
                          seq_lens: _ArrayT, extend_num_tokens: SupportsIndex | None = ...,
                          out: None = ..., out_cache_loc: Literal[True] = ...) -> _ArrayT: ...
    @overload
    def alloc_extend_rows(self, table: _Table, rows: _HostArray, prefix_lens: _PlainBuffer,
                          seq_lens: _PlainBuffer, extend_num_tokens: SupportsIndex | None = ...,
                          out: None = ...,
                          out_cache_loc: Literal[True] = ...) -> array.array[int]: ...
    @overload
    def alloc_extend_rows(self, table: _Table, rows: _HostArray, prefix_lens: _HostArray,
                          seq_lens: _HostArray, extend_num_tokens: SupportsIndex | None = ...,
                          out: None = ..., out_cache_loc: bool = ...) -> Any: ...
    @overload
    def alloc_extend_rows(self, table: _Table, rows: _HostArray, prefix_lens: _HostArray,
                          seq_lens: _HostArray, extend_num_tokens: SupportsIndex | None = ..., *,
                          out: _ArrayT, out_cache_loc: Literal[True] = ...) -> _ArrayT: ...
    @overload
    def alloc_extend_rows(self, table: _Table, rows: _HostArray, prefix_lens: _HostArray,
                          seq_lens: _HostArray, extend_num_tokens: SupportsIndex | None = ..., *,
                          out: _BufferT,
                          out_cache_loc: Literal[True] = ...) -> _BufferT | memoryview: ...

    @overload
    def alloc_decode_rows(self, table: _Table, rows: _HostArray, seq_lens: _HostArray,
                          out: _Out | None = ..., *, out_cache_loc: Literal[False]) -> None: ...
    @overload
    def alloc_decode_rows(self, table: _Table, rows: _HostArray, seq_lens: _Ints,
                          out: None = ..., out_cache_loc: Literal[True] = ...) -> list[int]: ...
    @overload
    def alloc_decode_rows(self, table: _Table, rows: _HostArray, seq_lens: _ArrayT,
                          out: None = ..., out_cache_loc: Literal[True] = ...) -> _ArrayT: ...
    @overload
    def alloc_decode_rows(self, table: _Table, rows: _HostArray, seq_lens: _PlainBuffer,
                          out: None = ...,
                          out_cache_loc: Literal[True] = ...) -> array.array[int]: ...
    @overload
    def alloc_decode_rows(self, table: _Table, rows: _HostArray, seq_lens: _HostArray,
                          out: None = ..., out_cache_loc: bool = ...) -> Any: ...
    @overload
    def alloc_decode_rows(self, table: _Table, rows: _HostArray, seq_lens: _HostArray,
                          out: _ArrayT, out_cache_loc: Literal[True] = ...) -> _ArrayT: ...
    @overload
    def alloc_decode_rows(self, table: _Table, rows: _HostArray, seq_lens: _HostArray,
                          out: _BufferT,
                          out_cache_loc: Literal[True] = ...) -> _BufferT | memoryview: ...

    def free_rows(self, table: _Table, rows: _HostArray, starts: _HostArray,
                  ends: _HostArray) -> None: ...
    # FlashInfer's (kv_indptr, kv_indices, kv_last_page_len), each an array.array('i').
    def page_table(self, table: _Table, rows: _HostArray, seq_lens: _HostArray
                   ) -> tuple[array.array[int], array.array[int], array.array[int]]: ...

    # ---- frees (host pools) ----
    def free_indices(self, indices: _HostArray) -> None: ...
    def free_pages(self, page_ids: _HostArray) -> None: ...
    def free_segment(self, row: _HostArray, start_pos: SupportsIndex,
                     length: SupportsIndex) -> None: ...
    def rewind(self, last_kept: _HostArray) -> None: ...
    def free_group_begin(self) -> None: ...  # either backend
    def free_group_end(self) -> None: ...
    @contextmanager
    def free_group(self) -> Iterator[Self]: ...  # begin; end even if the body raises
    def merge_and_sort_free(self) -> None: ...
    def clear(self) -> None: ...

    # ---- snapshots and decode reservations (host pools) ----
    def backup_state(self) -> Snapshot: ...
    def restore_state(self, snapshot: Snapshot) -> None: ...
    def reserve_decode(self, lens: _HostArray, last_loc: _HostArray,
                       steps: SupportsIndex) -> DecodeReservation: ...
    def finish_reservation(self, reservation: DecodeReservation,
                           steps_used: SupportsIndex) -> None: ...

    # ---- device pools (backend="cuda") ----
    # Device arrays are CUDA tensors on the pool's device; the *_host arguments, host arrays,
    # are required (None raises TypeError). Enqueued on `stream`, never synchronized. Given
    # no `out`, a new tensor (Any here: torch is not imported); given one, `out` or
    # `out[:k]` (of its type).
    def reserve_decode_async(self, lens: _Tensor, last_loc: _Tensor, steps: SupportsIndex, *,
                             lens_host: _HostArray | None = ...,
                             stream: _Stream = ...) -> DecodeReservation: ...
    def finish_reservation_async(self, reservation: DecodeReservation, steps_used: SupportsIndex,
                                 *, stream: _Stream = ...) -> None: ...
    @overload
    def alloc_async(self, num_tokens: SupportsIndex, out: None = ..., *,
                    stream: _Stream = ...) -> Any: ...
    @overload
    def alloc_async(self, num_tokens: SupportsIndex, out: _TensorT, *,
                    stream: _Stream = ...) -> _TensorT: ...
    @overload
    def alloc_extend_async(self, prefix_lens: _Tensor, seq_lens: _Tensor, last_loc: _Tensor,
                           out: None = ..., *, prefix_lens_host: _HostArray | None = ...,
                           seq_lens_host: _HostArray | None = ...,
                           extend_num_tokens: SupportsIndex | None = ...,
                           stream: _Stream = ...) -> Any: ...
    @overload
    def alloc_extend_async(self, prefix_lens: _Tensor, seq_lens: _Tensor, last_loc: _Tensor,
                           out: _TensorT, *, prefix_lens_host: _HostArray | None = ...,
                           seq_lens_host: _HostArray | None = ...,
                           extend_num_tokens: SupportsIndex | None = ...,
                           stream: _Stream = ...) -> _TensorT: ...
    @overload
    def alloc_decode_async(self, seq_lens: _Tensor, last_loc: _Tensor, out: None = ..., *,
                           seq_lens_host: _HostArray | None = ...,
                           stream: _Stream = ...) -> Any: ...
    @overload
    def alloc_decode_async(self, seq_lens: _Tensor, last_loc: _Tensor, out: _TensorT, *,
                           seq_lens_host: _HostArray | None = ...,
                           stream: _Stream = ...) -> _TensorT: ...
    # Prepared: the host copies are buffers or CPU tensors (read by every call), the stream
    # fixed now.
    def prepare_alloc_extend_async(self, prefix_lens: _Tensor, seq_lens: _Tensor,
                                   last_loc: _Tensor, out: _TensorT, *, prefix_lens_host: _Out,
                                   seq_lens_host: _Out,
                                   stream: _Stream = ...) -> _PreparedExtend[_TensorT]: ...
    def prepare_alloc_decode_async(self, seq_lens: _Tensor, last_loc: _Tensor, out: _TensorT,
                                   *, seq_lens_host: _Out,
                                   stream: _Stream = ...) -> _PreparedDecode[_TensorT]: ...
    def free_async(self, indices: _Tensor, *, stream: _Stream = ...) -> None: ...
    def free_indices_async(self, indices: _Tensor, *, stream: _Stream = ...) -> None: ...
    def free_pages_async(self, page_ids: _Tensor, *, stream: _Stream = ...) -> None: ...
    def rewind_async(self, last_kept: _Tensor, *, stream: _Stream = ...) -> None: ...
    def free_segment_async(self, row: _Tensor, start_pos: SupportsIndex, length: SupportsIndex,
                           *, stream: _Stream = ...) -> None: ...
    @overload
    def alloc_extend_rows_async(self, table: _Table, rows: _Tensor, prefix_lens: _Tensor,
                                seq_lens: _Tensor, out: None = ..., *,
                                prefix_lens_host: _HostArray | None = ...,
                                seq_lens_host: _HostArray | None = ...,
                                extend_num_tokens: SupportsIndex | None = ...,
                                out_cache_loc: Literal[False], stream: _Stream = ...) -> None: ...
    @overload
    def alloc_extend_rows_async(self, table: _Table, rows: _Tensor, prefix_lens: _Tensor,
                                seq_lens: _Tensor, out: None = ..., *,
                                prefix_lens_host: _HostArray | None = ...,
                                seq_lens_host: _HostArray | None = ...,
                                extend_num_tokens: SupportsIndex | None = ...,
                                out_cache_loc: bool = ..., stream: _Stream = ...) -> Any: ...
    @overload
    def alloc_extend_rows_async(self, table: _Table, rows: _Tensor, prefix_lens: _Tensor,
                                seq_lens: _Tensor, out: _TensorT, *,
                                prefix_lens_host: _HostArray | None = ...,
                                seq_lens_host: _HostArray | None = ...,
                                extend_num_tokens: SupportsIndex | None = ...,
                                out_cache_loc: Literal[True] = ...,
                                stream: _Stream = ...) -> _TensorT: ...
    @overload
    def alloc_decode_rows_async(self, table: _Table, rows: _Tensor, seq_lens: _Tensor,
                                out: None = ..., *, seq_lens_host: _HostArray | None = ...,
                                out_cache_loc: Literal[False], stream: _Stream = ...) -> None: ...
    @overload
    def alloc_decode_rows_async(self, table: _Table, rows: _Tensor, seq_lens: _Tensor,
                                out: None = ..., *, seq_lens_host: _HostArray | None = ...,
                                out_cache_loc: bool = ..., stream: _Stream = ...) -> Any: ...
    @overload
    def alloc_decode_rows_async(self, table: _Table, rows: _Tensor, seq_lens: _Tensor,
                                out: _TensorT, *, seq_lens_host: _HostArray | None = ...,
                                out_cache_loc: Literal[True] = ...,
                                stream: _Stream = ...) -> _TensorT: ...
    def free_rows_async(self, table: _Table, rows: _Tensor, starts: _Tensor, ends: _Tensor, *,
                        starts_host: _HostArray | None = ...,
                        ends_host: _HostArray | None = ..., stream: _Stream = ...) -> None: ...
    # Sizes the by-row calls' device scratch before they are captured into a CUDA graph.
    def reserve_scratch_async(self, table_rows: SupportsIndex, batch_size: SupportsIndex,
                              slots: SupportsIndex, stream: _Stream = ...) -> None: ...
    # Into int32 CUDA tensors; returns the host copies (kv_indptr, kv_last_page_len).
    def page_table_async(self, table: _Table, rows: _Tensor, seq_lens: _Tensor,
                         kv_indptr: _Tensor, kv_indices: _Tensor, kv_last_page_len: _Tensor, *,
                         seq_lens_host: _HostArray | None = ..., stream: _Stream = ...
                         ) -> tuple[array.array[int], array.array[int]]: ...
    def free_group_end_async(self, stream: _Stream = ...) -> None: ...
    @contextmanager
    def free_group_async(self, stream: _Stream = ...) -> Iterator[Self]: ...
    def merge_and_sort_free_async(self, stream: _Stream = ...) -> None: ...
    def clear_async(self, stream: _Stream = ...) -> None: ...
    def backup_state_async(self, stream: _Stream = ...) -> Snapshot: ...
    def restore_state_async(self, snapshot: Snapshot, stream: _Stream = ...) -> None: ...
    def check_device(self) -> None: ...  # raises KvpError DEVICE_FAULT / CUDA_ERROR
    def available_size_bound(self) -> tuple[int, bool]: ...  # (free slots, exact)

    # ---- state digests, debug options ----
    def digest(self) -> int: ...  # host pools
    @overload  # device pools: a 1-element int64 CUDA tensor (out[:1])
    def digest_async(self, out: None = ..., *, stream: _Stream = ...) -> Any: ...
    @overload
    def digest_async(self, out: _TensorT, *, stream: _Stream = ...) -> _TensorT: ...
    def set_debug(self, flags: int) -> None: ...  # DEBUG_* flags, or 0
    def debug_flags(self) -> int: ...
    def testing_poison(self) -> None: ...  # libraries built with --features testing

# An int, or the int64 tensor Pool.digest_async fills: the digest as an unsigned int.
def digest_value(value: int | _ArrayLike) -> int: ...

# ---- admission -----------------------------------------------------------------------------

class PrefillEntryT(NamedTuple):  # StepPlan.prefill's entries
    id: int
    prefix_len: int
    extend_len: int
    chunked: bool

class EvictedT(NamedTuple):  # StepPlan.retracted / preempted / aborted's entries
    id: int
    kv_len: int
    prefix_len: int  # the leading tokens of the row that are the cached prefix

@dataclass
class StepPlan:
    """A copy of one kvp_step_plan (Scheduler.step): plain Python values."""

    kind: int  # STEP_KIND_*
    batch_is_full: bool
    new_token_ratio: float
    prefill: list[PrefillEntryT]
    decode: list[int]  # request ids
    retracted: list[EvictedT]
    preempted: list[EvictedT]
    aborted: list[EvictedT]
    @property
    def kind_name(self) -> str: ...  # "IDLE", "PREFILL" or "DECODE"
    @property
    def evicted(self) -> list[EvictedT]: ...  # retracted + preempted + aborted
    @classmethod
    def copy_of(cls, c_plan: StepPlanC) -> Self: ...

# The fields Scheduler / Adder / Delayer take as keyword arguments (integers are range-checked
# against their C type at run time: OverflowError).
class _SchedulerConfigFields(TypedDict, total=False):
    capacity: SupportsIndex
    page_size: SupportsIndex
    max_prefill_tokens: SupportsIndex
    chunked_prefill_size: SupportsIndex
    clip_max_new_tokens: SupportsIndex
    truncation_align_size: SupportsIndex
    prefill_max_requests: SupportsIndex
    max_running_requests: SupportsIndex
    max_chunked_requests: SupportsIndex
    policy: SupportsIndex
    retraction: SupportsIndex
    policy_seed: SupportsIndex
    enable_priority: bool
    low_priority_values_first: bool
    preemption_threshold: SupportsIndex
    enable_mixed_chunk: bool
    prefix_cache_disabled: bool
    init_new_token_ratio: float
    min_new_token_ratio_factor: float
    new_token_ratio_decay_steps: SupportsIndex
    schedule_conservativeness: float
    dynamic_chunk_a: float
    dynamic_chunk_b: float
    dynamic_chunk_context_len: SupportsIndex

class _AdderConfigFields(TypedDict, total=False):
    page_size: SupportsIndex
    max_prefill_tokens: SupportsIndex
    chunked_prefill_size: SupportsIndex
    num_mixed_decode_tokens: SupportsIndex
    clip_max_new_tokens: SupportsIndex
    truncation_align_size: SupportsIndex
    prefill_max_requests: SupportsIndex
    max_chunked_requests: SupportsIndex
    new_token_ratio: float
    prefix_cache_disabled: bool

class _DelayerConfigFields(TypedDict, total=False):
    max_delay_passes: SupportsIndex
    token_usage_low_watermark: float
    max_running_requests: SupportsIndex
    queue_min_ratio: float
    prefill_max_requests: SupportsIndex

class Scheduler(_Owner):
    """A kvp_scheduler: attached to ``pool``, or standalone with ``capacity=``."""

    config: SchedulerConfig
    def __init__(self, pool: Pool | None = ..., config: SchedulerConfig | None = ..., *,
                 lib: Library | None = ..., **overrides: Unpack[_SchedulerConfigFields]
                 ) -> None: ...
    def submit(self, id: SupportsIndex, input_len: SupportsIndex, max_new_tokens: SupportsIndex,
               prefix_len: SupportsIndex = ..., prefix_evictable: SupportsIndex = ...,
               output_len: SupportsIndex = ..., priority: SupportsIndex = ...,
               ignore_eos: bool = ...,
               prefix_path: Iterable[SupportsIndex] | None = ...) -> SubmitResult: ...
    def update_prefix(self, id: SupportsIndex, prefix_len: SupportsIndex,
                      prefix_evictable: SupportsIndex,
                      prefix_path: Iterable[SupportsIndex] | None = ...) -> None: ...
    # `available` is ignored by a scheduler attached to a pool (it reads the pool's).
    def step(self, available: SupportsIndex = ..., evictable: SupportsIndex = ...,
             allow_prefill: bool = ...) -> StepPlan: ...
    def finish(self, id: SupportsIndex) -> int: ...  # the KV tokens it held
    def abort(self, id: SupportsIndex) -> int: ...
    def finish_ex(self, id: SupportsIndex) -> Finished: ...
    def abort_ex(self, id: SupportsIndex) -> Finished: ...
    def request(self, id: SupportsIndex) -> RequestState: ...
    def stats(self) -> SchedulerStats: ...
    def digest(self) -> int: ...

class Adder(_Owner):
    """A kvp_adder for one prefill pass (config: AdderConfig.sglang_defaults(page_size))."""

    config: AdderConfig
    def __init__(self, available: SupportsIndex, evictable: SupportsIndex = ...,
                 # RunningRequest, or (input_len, output_len, max_new_tokens[, ignore_eos])
                 running: Iterable[RunningRequest | tuple[int, int, int]
                                   | tuple[int, int, int, bool]] = ...,
                 chunked_in_flight: SupportsIndex = ..., config: AdderConfig | None = ..., *,
                 lib: Library | None = ..., **overrides: Unpack[_AdderConfigFields]) -> None: ...
    def add_one_req(self, input_len: SupportsIndex, max_new_tokens: SupportsIndex,
                    prefix_len: SupportsIndex = ..., prefix_evictable: SupportsIndex = ...,
                    output_len: SupportsIndex = ..., ignore_eos: bool = ...) -> Admission: ...
    def add_chunked_req(self, prefix_len: SupportsIndex, remaining: SupportsIndex,
                        max_new_tokens: SupportsIndex) -> Admission: ...
    def budget(self) -> Budget: ...

class Delayer(_Owner):
    """A kvp_delayer (DP-rank prefill negotiation); keyword arguments set DelayerConfig."""

    config: DelayerConfig
    def __init__(self, *, lib: Library | None = ...,
                 **overrides: Unpack[_DelayerConfigFields]) -> None: ...
    def local_info(self, prefillable: bool, token_usage: float, running_bs: SupportsIndex,
                   waiting_len: SupportsIndex, timed_out: bool = ...) -> RankInfo: ...
    # RankInfo, or a tuple of its fields (prefillable, force_allow, timed_out, running_bs,
    # max_prefill_bs, waiting_len), range-checked
    def negotiate(self, ranks: Sequence[RankInfo | tuple[bool, bool, bool, int, int, int]]
                  ) -> int: ...  # a DELAY_VERDICT_*
    def record_prefill(self, batch_size: SupportsIndex) -> None: ...
