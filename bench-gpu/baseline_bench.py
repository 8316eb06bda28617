#!/usr/bin/env python3
"""kvpool's CUDA backend from Python (ctypes) against a baseline of SGLang's published
allocator algorithm, written here in PyTorch + Triton, on the same GPU in the same run.

Measured per operation, page size and batch size (the same grid as kvpool_bench.cu):

- host time: one call at a time, ``time.perf_counter_ns`` around the call alone, median and
  p90 after warm-up; the stream is drained every 64 calls outside the timed region;
- device time: the call captured into a ``torch.cuda.CUDAGraph`` (for the baseline just its
  Triton kernel launch, as SGLang's reference figures), replayed back to back behind a
  spinning kernel and timed with CUDA events, i.e. device time per graph replay. A decode
  that continues pages is replayed with a rewind of them after it (kvpool refuses a stale
  continuation) and the rewind alone is subtracted, for kvpool and the baseline alike. Frees
  cannot be replayed (they would free the same slots twice), so they are timed with events
  around one call, queued behind a spinner; the baseline's paged free synchronizes
  (``torch.unique``) and gets no device figure;
- the baseline's Triton kernel (paged allocations) also per launch in a graph of 100: the
  kernel launched 100 times with the same inputs in one captured graph, replayed the same way,
  the time per replay divided by 100 (``baseline_device_graph100_us``): the shape of
  kvpool_bench.cu's figures and of the floor per launch in a graph of 100, without the graph's
  own launch (about 1.3 µs per replay). SGLang's kernels change no allocator state (they read
  the lengths and the free pages and write the output), so the launches may repeat; a decode
  needs no rewind here;
- floors: an empty Triton kernel, a one-element PyTorch op and a ctypes call into kvpool
  that does nothing on the GPU, timed the same ways.

Before timing each configuration, both allocators run the same operations from a fresh pool
and their outputs are copied to the host and compared: kvpool must produce the baseline's
indices exactly.

Usage: baseline_bench.py --lib path/to/libkvpool.so [--quick] [--csv PATH] [--device N]
                         [--page-sizes 1,16,64] [--batch-sizes 1,8,64,256,1024,4096]
                         [--ops alloc_extend,alloc_decode,free_indices,free_segment]
                         [--extend-tokens N] [--host-only]
       baseline_bench.py --lib ... --ops decode_step,extend_step   (run only when named)

``decode_step`` and ``extend_step`` are a decode and an extend as SGLang's scheduler makes
them with its request-to-token table (``alloc_for_decode``: last_loc gathered from the
table, the Triton kernel, the slots cast to int32 and written back; ``alloc_for_extend``:
last_loc from the prefixes, the Triton kernel, the Triton write of each row), each captured
as one graph, against kvpool's ``kvp_pool_alloc_decode_rows_async`` /
``kvp_pool_alloc_extend_rows_async`` (one call reads last_loc from the table and writes the
slots into it); device time per replay of a one-step graph on both sides (see
``Bench.decode_step`` and ``Bench.extend_step``).

``--host-only`` skips every device timing (the figures print as nan): for a profiler that
serializes kernels, under which nothing can be queued behind a spinner.

The CSV (``--csv``) has the table's columns, then ``floor_device_graph_us`` and
``floor_device_graph100_us`` (the empty Triton kernel per graph replay and per launch in a
graph of 100, the same on every row) for scripts/gpu/triton_table.py; new columns go at the
end of a line, so readers of the older columns keep working.

``--ops`` takes kvpool_bench.cu's list as is (scripts/gpu/run.sh passes both programs the
same BENCH_ARGS): operations this program has no baseline for are skipped, and said so.
"""

import argparse
import ctypes
import gc
import math
import os
import statistics
import sys
import time

import torch
import triton
import triton.language as tl

PAGE_SIZES = (1, 16, 64)
BATCH_SIZES = (1, 8, 64, 256, 1024, 4096)
OPS = ("alloc_extend", "alloc_decode", "free_indices", "free_segment", "decode_step",
       "extend_step")
# The steps run only when asked for (kvpool_bench.cu has no such operations, so
# scripts/gpu/run.sh's bench step, which gives both programs the same --ops, never names
# them): see Bench.decode_step and Bench.extend_step.
DEFAULT_OPS = OPS[:4]
TOKENS_PER_REQUEST = 512  # extend: new tokens per request (SGLang's reference figures)
MAX_BATCH = 4096
# --extend-tokens: at most this many a request (a long prefill chunk), and at most
# MAX_BATCH * TOKENS_PER_REQUEST in a batch (the pool is sized for that).
MAX_REQUEST_TOKENS = 16384
MAX_PAGE_SIZE = 64
# Room for the largest extend batch twice plus the decode setup and its new pages at the
# largest page size; a multiple of every page size. The same pool as kvpool_bench.cu.
POOL_SIZE = 2 * MAX_BATCH * TOKENS_PER_REQUEST + 2 * MAX_BATCH * MAX_PAGE_SIZE

I64 = torch.int64


class Settings:
    def __init__(self, quick, host_only=False, extend_tokens=TOKENS_PER_REQUEST):
        self.extend_tokens = extend_tokens  # new tokens per extend request
        self.quick = quick
        self.host_only = host_only  # no device timing (under a profiler)
        self.warmup = 5 if quick else 50
        self.min_samples = 30 if quick else 101
        self.max_samples = 30 if quick else 2000
        self.cell_seconds = 0.05 if quick else 0.5
        self.sync_every = 64
        self.replays = 20 if quick else 100  # graph replays per timed round
        self.rounds = 2 if quick else 7  # timed rounds (median taken)
        self.event_warmup = 2 if quick else 10
        self.event_cycles = 10 if quick else 200


# ---- the baseline: SGLang's published algorithm, our code ------------------------------


@triton.jit
def empty_kernel(ptr):
    pass


# The free-list tensor is re-sliced by whole elements after every allocation, so its address
# changes alignment; without do_not_specialize each alignment would be a separate compile.
@triton.jit(do_not_specialize=["free_pages_ptr"])
def extend_kernel(prefix_ptr, seq_ptr, last_loc_ptr, free_pages_ptr, out_ptr, bs,
                  PAGE: tl.constexpr, SCAN_BLOCK: tl.constexpr, WRITE_BLOCK: tl.constexpr):
    """One program per request. Kept deliberately as SGLang's algorithm: every program
    recomputes its own output offset and first-page offset by walking all requests
    (O(bs) each, O(bs^2) in all) instead of a shared scan."""
    rid = tl.program_id(0)
    tokens_before = tl.zeros([SCAN_BLOCK], dtype=tl.int64)
    pages_before = tl.zeros([SCAN_BLOCK], dtype=tl.int64)
    for start in range(0, bs, SCAN_BLOCK):
        j = start + tl.arange(0, SCAN_BLOCK)
        before = j < rid
        pre_j = tl.load(prefix_ptr + j, mask=before, other=0)
        seq_j = tl.load(seq_ptr + j, mask=before, other=0)
        tokens_before += seq_j - pre_j
        pages_before += (seq_j + PAGE - 1) // PAGE - (pre_j + PAGE - 1) // PAGE
    out_start = tl.sum(tokens_before)
    page_start = tl.sum(pages_before)

    pre = tl.load(prefix_ptr + rid)
    seq = tl.load(seq_ptr + rid)
    last_loc = tl.load(last_loc_ptr + rid)
    my_pages = (seq + PAGE - 1) // PAGE - (pre + PAGE - 1) // PAGE
    prefix_end = (pre + PAGE - 1) // PAGE * PAGE  # end of the prefix's last page
    lane = tl.arange(0, PAGE)

    # Part 1: the rest of the prefix's last page, right after last_loc.
    n1 = tl.minimum(seq, prefix_end) - pre
    tl.store(out_ptr + out_start + lane, last_loc + 1 + lane, mask=lane < n1)

    # Part 2: whole new pages, in a loop bounded at run time (one compile for any length).
    n2 = tl.maximum(seq // PAGE * PAGE - prefix_end, 0)
    for start in range(0, n2, WRITE_BLOCK):
        o = start + tl.arange(0, WRITE_BLOCK)
        inside = o < n2
        page = tl.load(free_pages_ptr + page_start + o // PAGE, mask=inside, other=0)
        tl.store(out_ptr + out_start + n1 + o, page * PAGE + o % PAGE, mask=inside)

    # Part 3: the start of one more new page, the request's last.
    n3 = seq - pre - n1 - n2
    tail = lane < n3
    page = tl.load(free_pages_ptr + page_start + my_pages - 1 + lane * 0, mask=tail, other=0)
    tl.store(out_ptr + out_start + n1 + n2 + lane, page * PAGE + lane, mask=tail)


@triton.jit(do_not_specialize=["free_pages_ptr"])
def decode_kernel(seq_ptr, last_loc_ptr, free_pages_ptr, out_ptr, bs,
                  PAGE: tl.constexpr, SCAN_BLOCK: tl.constexpr):
    """One program per request; its rank among the requests that start a page is, as in
    SGLang, recomputed by every program from all requests (O(bs^2) in all)."""
    rid = tl.program_id(0)
    starters_before = tl.zeros([SCAN_BLOCK], dtype=tl.int64)
    for start in range(0, bs, SCAN_BLOCK):
        j = start + tl.arange(0, SCAN_BLOCK)
        before = j < rid
        seq_j = tl.load(seq_ptr + j, mask=before, other=0)
        starters_before += tl.where(before & ((seq_j - 1) % PAGE == 0), 1, 0)
    rank = tl.sum(starters_before)

    seq = tl.load(seq_ptr + rid)
    last_loc = tl.load(last_loc_ptr + rid)
    starts_page = (seq - 1) % PAGE == 0
    page = tl.load(free_pages_ptr + rank, mask=starts_page, other=0)
    tl.store(out_ptr + rid, tl.where(starts_page, page * PAGE, last_loc + 1))


@triton.jit
def write_rows_kernel(table_ptr, rows_ptr, prefix_ptrs_ptr, prefix_ptr, seq_ptr, extend_ptr,
                      out_ptr, stride, BLOCK: tl.constexpr):
    """An extend's slots into the request-to-token table (int32) as SGLang writes them
    (``write_req_to_token_pool_triton``'s semantics, our code): one program a request
    copies its prefix's slots, read through the address of the prefix's own int64 tensor,
    to the start of its row, then its new slots, whose place in the output it finds by
    adding up every earlier request's count (O(bs) a program, as SGLang's)."""
    rid = tl.program_id(0)
    dst = table_ptr + tl.load(rows_ptr + rid) * stride
    pre = tl.load(prefix_ptr + rid)
    new = tl.load(seq_ptr + rid) - pre
    src = tl.load(prefix_ptrs_ptr + rid).to(tl.pointer_type(tl.int64))
    for k in range(tl.cdiv(pre, BLOCK)):
        o = k * BLOCK + tl.arange(0, BLOCK)
        inside = o < pre
        tl.store(dst + o, tl.load(src + o, mask=inside).to(tl.int32), mask=inside)
    before = tl.cast(0, tl.int64)
    for i in range(rid):
        before += tl.load(extend_ptr + i)
    for k in range(tl.cdiv(new, BLOCK)):
        o = k * BLOCK + tl.arange(0, BLOCK)
        inside = o < new
        tl.store(dst + pre + o, tl.load(out_ptr + before + o, mask=inside).to(tl.int32),
                 mask=inside)


SCAN_BLOCK = 1024
WRITE_BLOCK = 1024


class BaselineAllocator:
    """SGLang's allocator as published: the free list is an int64 tensor of page ids (token
    pool: slot ids); allocation takes a prefix view of it, a free concatenates a new tensor.
    Token pool (page_size 1): allocations are slices, frees go to the tail. Paged pool:
    Triton kernels write the indices, frees go to the front (paged ``free`` through
    ``torch.unique``, which synchronizes)."""

    def __init__(self, size, page_size, device):
        self.size = size
        self.page_size = page_size
        self.device = device
        self.clear()

    def clear(self):
        count = self.size // self.page_size
        self.free_pages = torch.arange(1, count + 1, dtype=I64, device=self.device)

    def available_size(self):
        return len(self.free_pages) * self.page_size

    def alloc(self, num_tokens):
        pages = num_tokens // self.page_size
        if pages > len(self.free_pages):
            return None
        taken = self.free_pages[:pages]
        self.free_pages = self.free_pages[pages:]
        if self.page_size == 1:
            return taken
        lane = torch.arange(self.page_size, dtype=I64, device=self.device)
        return (taken[:, None] * self.page_size + lane).reshape(-1)

    def alloc_extend(self, prefix, prefix_cpu, seq, seq_cpu, last_loc, extend_num_tokens):
        if self.page_size == 1:
            return self.alloc(extend_num_tokens)
        ps = self.page_size
        # The exact page count from the host copies of the lengths: no device sync.
        new_pages = int(((seq_cpu + ps - 1) // ps - (prefix_cpu + ps - 1) // ps).sum())
        if new_pages > len(self.free_pages):
            return None
        out = torch.empty(extend_num_tokens, dtype=I64, device=self.device)
        self.launch_extend(prefix, seq, last_loc, out)
        self.free_pages = self.free_pages[new_pages:]
        return out

    def launch_extend(self, prefix, seq, last_loc, out):
        bs = prefix.numel()
        extend_kernel[(bs,)](prefix, seq, last_loc, self.free_pages, out, bs,
                             PAGE=self.page_size, SCAN_BLOCK=SCAN_BLOCK, WRITE_BLOCK=WRITE_BLOCK)

    def alloc_decode(self, seq, seq_cpu, last_loc):
        bs = seq.numel()
        if self.page_size == 1:
            return self.alloc(bs)
        new_pages = int(((seq_cpu - 1) % self.page_size == 0).sum())
        if new_pages > len(self.free_pages):
            return None
        out = torch.empty(bs, dtype=I64, device=self.device)
        self.launch_decode(seq, last_loc, out)
        self.free_pages = self.free_pages[new_pages:]
        return out

    def launch_decode(self, seq, last_loc, out):
        bs = seq.numel()
        decode_kernel[(bs,)](seq, last_loc, self.free_pages, out, bs,
                             PAGE=self.page_size, SCAN_BLOCK=SCAN_BLOCK)

    def free(self, indices):
        if indices.numel() == 0:
            return
        if self.page_size == 1:
            self.free_pages = torch.cat((self.free_pages, indices))
        else:
            # Any index frees its whole page; the distinct pages come back ascending.
            self.free_page_ids(torch.unique(indices // self.page_size))

    def free_segment(self, segment):
        """Frees one row segment starting page-aligned: its pages are every page_size-th
        slot, in row order, with no deduplication (and no sync)."""
        if self.page_size == 1:
            self.free(segment)
        else:
            self.free_page_ids(segment[::self.page_size] // self.page_size)

    def free_page_ids(self, page_ids):
        if self.page_size == 1:
            self.free_pages = torch.cat((self.free_pages, page_ids))
        else:
            self.free_pages = torch.cat((page_ids, self.free_pages))


# ---- kvpool through ctypes -----------------------------------------------------------


class PoolConfig(ctypes.Structure):
    _fields_ = [
        ("size", ctypes.c_uint64),
        ("page_size", ctypes.c_uint32),
        ("index_type", ctypes.c_uint32),
        ("backend", ctypes.c_uint32),
        ("device", ctypes.c_int32),
        ("need_sort", ctypes.c_bool),
    ]


KVP_INDEX_TYPE_I64 = 0
KVP_INDEX_TYPE_I32 = 1
KVP_BACKEND_CUDA = 1
KVP_DEBUG_REPLAY_CALLS = 2


class ReqTable(ctypes.Structure):
    """``struct kvp_req_table``: a request-to-token table borrowed for one call."""
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("index_type", ctypes.c_uint32),
        ("rows", ctypes.c_uint64),
        ("row_stride", ctypes.c_uint64),
        ("row_len", ctypes.c_uint64),
    ]

_P = ctypes.c_void_p
_SZ = ctypes.c_size_t
_STATUS = ctypes.c_int
# The functions this script calls, with the C declarations of include/kvpool.h.
SIGNATURES = {
    "kvp_abi_version": (ctypes.c_uint32, []),
    "kvp_version": (ctypes.c_char_p, []),
    "kvp_status_str": (ctypes.c_char_p, [ctypes.c_int32]),
    "kvp_last_error_message": (_SZ, [ctypes.c_char_p, _SZ]),
    "kvp_pool_config_default": (PoolConfig, []),
    "kvp_pool_new": (_STATUS, [ctypes.POINTER(PoolConfig), ctypes.POINTER(_P)]),
    "kvp_pool_free": (None, [_P]),
    "kvp_pool_alloc_extend_async": (_STATUS, [_P, _P, _P, _P, _P, _P, _SZ, _SZ, _P, _SZ, _P]),
    "kvp_pool_alloc_decode_async": (_STATUS, [_P, _P, _P, _P, _SZ, _P, _SZ, _P]),
    "kvp_pool_alloc_extend_rows_async": (
        _STATUS, [_P, ctypes.POINTER(ReqTable), _P, _P, _P, _P, _P, _SZ, _SZ, _P, _SZ, _P]),
    "kvp_pool_alloc_decode_rows_async": (
        _STATUS, [_P, ctypes.POINTER(ReqTable), _P, _P, _P, _SZ, _P, _SZ, _P]),
    "kvp_pool_free_indices_async": (_STATUS, [_P, _P, _SZ, _P]),
    "kvp_pool_free_pages_async": (_STATUS, [_P, _P, _SZ, _P]),
    "kvp_pool_rewind_async": (_STATUS, [_P, _P, _SZ, _P]),
    "kvp_pool_free_segment_async": (_STATUS, [_P, _P, _SZ, _SZ, _SZ, _P]),
    "kvp_pool_clear_async": (_STATUS, [_P, _P]),
    "kvp_pool_check_device": (_STATUS, [_P]),
    "kvp_pool_set_debug": (_STATUS, [_P, ctypes.c_uint32]),
    "kvp_pool_available_size_bound": (
        _STATUS, [_P, ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_bool)]),
}


KVP_STATUS_INVALID_ARGUMENT = 2
KVP_STATUS_DEVICE_FAULT = 63


class KvpoolError(RuntimeError):
    def __init__(self, message, status):
        super().__init__(message)
        self.status = status


class Kvpool:
    def __init__(self, path):
        self.cdll = ctypes.CDLL(os.path.abspath(path))
        for name, (restype, argtypes) in SIGNATURES.items():
            fn = getattr(self.cdll, name)
            fn.restype = restype
            fn.argtypes = argtypes
            setattr(self, name, fn)

    def fail(self, what, status):
        # The thread's last error belongs to the call that just failed: read it first.
        length = self.kvp_last_error_message(None, 0)
        buf = ctypes.create_string_buffer(length + 1)
        self.kvp_last_error_message(buf, length + 1)
        raise KvpoolError(f"{what} returned {status} ({self.kvp_status_str(status).decode()}): "
                          f"{buf.value.decode(errors='replace')}", status)

    def check(self, what, status):
        if status != 0:
            self.fail(what, status)


class KvCall:
    """One kvpool call with its arguments converted once (pointers of tensors that stay
    alive, the stream handle), so a timed call is the ctypes call and its status check."""

    def __init__(self, lib, name, *args):
        self.lib = lib
        self.name = name
        self.fn = getattr(lib, name)
        self.args = args

    def __call__(self):
        status = self.fn(*self.args)
        if status != 0:
            self.lib.fail(self.name, status)


class KvPool:
    def __init__(self, lib, size, page_size, device):
        self.lib = lib
        self.size = size
        self.page_size = page_size
        config = lib.kvp_pool_config_default()
        config.size = size
        config.page_size = page_size
        config.index_type = KVP_INDEX_TYPE_I64
        config.backend = KVP_BACKEND_CUDA
        config.device = device
        handle = ctypes.c_void_p()
        lib.check("kvp_pool_new", lib.kvp_pool_new(ctypes.byref(config), ctypes.byref(handle)))
        self.handle = handle.value
        # The device times replay each captured call: let a replay repeat its call (without
        # this, the turn check faults a captured call that runs twice). A library from before
        # the turn check refuses the flag: its replays repeat their calls anyway (an A/B).
        status = lib.kvp_pool_set_debug(self.handle, KVP_DEBUG_REPLAY_CALLS)
        if status not in (0, KVP_STATUS_INVALID_ARGUMENT):
            lib.check("kvp_pool_set_debug", status)

    def close(self):
        if self.handle:
            self.lib.kvp_pool_free(self.handle)
            self.handle = None

    @staticmethod
    def stream():
        return torch.cuda.current_stream().cuda_stream

    # Each returns the call, ready to run (and to run again).
    def alloc_extend(self, b, out):
        return KvCall(self.lib, "kvp_pool_alloc_extend_async", self.handle,
                      b.prefix_cpu.data_ptr(), b.seq_cpu.data_ptr(), b.prefix.data_ptr(),
                      b.seq.data_ptr(), b.last_loc.data_ptr(), b.bs, b.tokens, out.data_ptr(),
                      out.numel(), self.stream())

    def alloc_decode(self, b, out):
        return KvCall(self.lib, "kvp_pool_alloc_decode_async", self.handle, b.seq_cpu.data_ptr(),
                      b.seq.data_ptr(), b.last_loc.data_ptr(), b.bs, out.data_ptr(), out.numel(),
                      self.stream())

    def alloc_extend_rows(self, desc, rows, b, out):
        """`desc` (a ReqTable) must stay alive as long as the call."""
        return KvCall(self.lib, "kvp_pool_alloc_extend_rows_async", self.handle,
                      ctypes.byref(desc), rows.data_ptr(), b.prefix_cpu.data_ptr(),
                      b.seq_cpu.data_ptr(), b.prefix.data_ptr(), b.seq.data_ptr(), b.bs,
                      b.tokens, out.data_ptr(), out.numel(), self.stream())

    def alloc_decode_rows(self, desc, rows, seq_cpu, seq, out):
        """`desc` (a ReqTable) must stay alive as long as the call."""
        return KvCall(self.lib, "kvp_pool_alloc_decode_rows_async", self.handle,
                      ctypes.byref(desc), rows.data_ptr(), seq_cpu.data_ptr(), seq.data_ptr(),
                      rows.numel(), out.data_ptr(), out.numel(), self.stream())

    def free_indices(self, indices):
        return KvCall(self.lib, "kvp_pool_free_indices_async", self.handle, indices.data_ptr(),
                      indices.numel(), self.stream())

    def free_pages(self, pages):
        return KvCall(self.lib, "kvp_pool_free_pages_async", self.handle, pages.data_ptr(),
                      pages.numel(), self.stream())

    def rewind(self, last_kept):
        return KvCall(self.lib, "kvp_pool_rewind_async", self.handle, last_kept.data_ptr(),
                      last_kept.numel(), self.stream())

    def free_segment(self, row):
        return KvCall(self.lib, "kvp_pool_free_segment_async", self.handle, row.data_ptr(),
                      row.numel(), 0, row.numel(), self.stream())

    def clear(self):
        KvCall(self.lib, "kvp_pool_clear_async", self.handle, self.stream())()

    def check_settled(self, expected_available, what):
        """Drains the stream; no device fault and exactly `expected_available` free slots."""
        torch.cuda.current_stream().synchronize()
        self.lib.check(f"kvp_pool_check_device ({what})",
                       self.lib.kvp_pool_check_device(self.handle))
        available = ctypes.c_uint64()
        exact = ctypes.c_bool()
        self.lib.check("kvp_pool_available_size_bound", self.lib.kvp_pool_available_size_bound(
            self.handle, ctypes.byref(available), ctypes.byref(exact)))
        if not exact.value:
            print(f"warning: {what}: available size still a bound after a sync "
                  f"({available.value})", file=sys.stderr)
        elif available.value != expected_available:
            raise AssertionError(f"{what}: kvpool has {available.value} slots available, "
                                 f"expected {expected_available}")


# ---- workloads ------------------------------------------------------------------------


class Batch:
    """One batch's lengths: host copies (plan the call) and device copies (feed kernels)."""

    def __init__(self, prefix, seq, last_loc):
        self.bs = len(seq)
        self.prefix_cpu = torch.tensor(prefix, dtype=I64)
        self.seq_cpu = torch.tensor(seq, dtype=I64)
        self.prefix = self.prefix_cpu.cuda()
        self.seq = self.seq_cpu.cuda()
        self.last_loc = (last_loc if torch.is_tensor(last_loc)
                         else torch.tensor(last_loc, dtype=I64)).cuda().contiguous()
        self.tokens = int((self.seq_cpu - self.prefix_cpu).sum())

    def baseline_extend(self, alloc):
        return alloc.alloc_extend(self.prefix, self.prefix_cpu, self.seq, self.seq_cpu,
                                  self.last_loc, self.tokens)

    def baseline_decode(self, alloc):
        return alloc.alloc_decode(self.seq, self.seq_cpu, self.last_loc)


def extend_batch(bs, tokens):
    return Batch([0] * bs, [tokens] * bs, [-1] * bs)


def expect_equal(kvpool_out, baseline_out, what):
    """The cross-check: kvpool's indices, copied to the host once, against the baseline's."""
    got = kvpool_out.cpu()
    want = baseline_out.cpu()
    if got.shape != want.shape or not torch.equal(got, want):
        diff = (got != want).nonzero()
        first = int(diff[0]) if got.shape == want.shape and len(diff) else 0
        raise AssertionError(
            f"{what}: kvpool's indices differ from the baseline's: {got.numel()} vs "
            f"{want.numel()} indices, first difference at {first}: "
            f"{got[first:first + 8].tolist()} vs {want[first:first + 8].tolist()}")


# ---- timing ---------------------------------------------------------------------------


def sync():
    torch.cuda.current_stream().synchronize()


def summarize(samples):
    ordered = sorted(samples)
    return {
        "median": statistics.median(ordered),
        "p90": ordered[math.ceil(0.9 * len(ordered)) - 1],
        "samples": len(ordered),
    }


def time_host(cfg, call, prepare=None, after=None):
    """Host time of `call`, one call at a time; `prepare` and `after` run untimed around it
    and must leave the allocator ready for the next round. The collector is off while
    timing so a collection does not land inside a sample."""
    prepare = prepare or (lambda: None)
    after = after or (lambda: None)
    for i in range(cfg.warmup):
        prepare()
        call()
        after()
        if (i + 1) % cfg.sync_every == 0:
            sync()
    sync()
    samples = []
    gc.collect()
    gc.disable()
    try:
        start = time.perf_counter()
        clock = time.perf_counter_ns
        while len(samples) < cfg.max_samples:
            if (len(samples) >= cfg.min_samples
                    and time.perf_counter() - start > cfg.cell_seconds):
                break
            prepare()
            t0 = clock()
            call()
            t1 = clock()
            after()
            samples.append((t1 - t0) / 1000.0)
            if len(samples) % cfg.sync_every == 0:
                sync()
        sync()
    finally:
        gc.enable()
    return summarize(samples)


SPIN_CYCLES = 200_000  # about 0.1 ms at H200 clocks; doubled until it covers the queueing
MAX_SPIN_CYCLES = 1 << 31


def behind_spinner(cycles, enqueue):
    """Queues a spinning kernel, then `enqueue`; returns whether the spinner was still
    running when `enqueue` returned, i.e. whether the GPU found everything queued."""
    spun = torch.cuda.Event()
    torch.cuda._sleep(cycles)
    spun.record()
    enqueue()
    return not spun.query()


def replay_device_us(cfg, graph):
    """Device time per replay of `graph`: rounds of back-to-back replays queued behind a
    spinner, timed with events; median of the rounds."""
    for _ in range(3):
        graph.replay()
    sync()
    per_replay = []
    cycles = SPIN_CYCLES * 10
    while len(per_replay) < cfg.rounds:
        e0 = torch.cuda.Event(enable_timing=True)
        e1 = torch.cuda.Event(enable_timing=True)

        def enqueue():
            e0.record()
            for _ in range(cfg.replays):
                graph.replay()
            e1.record()

        covered = behind_spinner(cycles, enqueue)
        sync()
        if not covered:
            cycles *= 2
            if cycles > MAX_SPIN_CYCLES:
                raise RuntimeError("graph replays could not be queued ahead of the GPU")
            continue
        per_replay.append(e0.elapsed_time(e1) * 1000.0 / cfg.replays)
    return statistics.median(per_replay)


def graph_device_us(cfg, stream, enqueue):
    """Captures `enqueue` (already warmed up: no compile, no allocation inside) into a graph
    on our stream and times its replays."""
    if cfg.host_only:
        return math.nan
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        enqueue()
    result = replay_device_us(cfg, graph)
    del graph
    return result


GRAPH_LAUNCHES = 100  # launches per graph of the per-launch figures (kvpool_bench.cu's shape)


def graph100_device_us(cfg, stream, launch):
    """Device time per launch of `launch` (already warmed up) captured GRAPH_LAUNCHES times
    into one graph: the graph's time per replay over GRAPH_LAUNCHES, so the graph's own launch
    is spread over the launches, as for a kernel captured with an engine's forward pass."""

    def launches():
        for _ in range(GRAPH_LAUNCHES):
            launch()

    return graph_device_us(cfg, stream, launches) / GRAPH_LAUNCHES


def event_device_us(cfg, call, prepare=None, after=None):
    """Device time of `call` by events around it, `prepare` queued untimed before it and
    `after` run untimed once the cycle is drained; each cycle behind a spinner. Mean over
    the cycles (an event pair resolves about 0.5 us; the mean of many is finer)."""
    if cfg.host_only:
        return math.nan
    prepare = prepare or (lambda: None)
    after = after or (lambda: None)
    samples = []
    cycles = SPIN_CYCLES
    done = 0
    while done < cfg.event_warmup + cfg.event_cycles:
        e0 = torch.cuda.Event(enable_timing=True)
        e1 = torch.cuda.Event(enable_timing=True)

        def enqueue():
            prepare()
            e0.record()
            call()
            e1.record()

        covered = behind_spinner(cycles, enqueue)
        sync()
        after()
        if not covered:  # the sample may hold host latency: drop it, spin longer
            cycles *= 2
            if cycles > MAX_SPIN_CYCLES:
                raise RuntimeError("a call could not be queued ahead of the GPU")
            continue
        if done >= cfg.event_warmup:
            samples.append(e0.elapsed_time(e1) * 1000.0)
        done += 1
    return statistics.fmean(samples)


# ---- floors ---------------------------------------------------------------------------


def measure_floors(cfg, stream, lib):
    dummy = torch.zeros(1, dtype=I64, device="cuda")
    tiny = torch.zeros(1, dtype=I64, device="cuda")

    def triton_empty():
        empty_kernel[(1,)](dummy)

    def torch_op():
        tiny.add_(1)

    def ctypes_call():
        lib.kvp_abi_version()

    floors = {}
    floors["triton_host"] = time_host(cfg, triton_empty)
    floors["torch_host"] = time_host(cfg, torch_op)
    floors["ctypes_host"] = time_host(cfg, ctypes_call)
    floors["triton_graph"] = graph_device_us(cfg, stream, triton_empty)
    floors["torch_graph"] = graph_device_us(cfg, stream, torch_op)
    floors["triton_graph100"] = graph100_device_us(cfg, stream, triton_empty)
    floors["triton_events"] = event_device_us(cfg, triton_empty)
    return floors


# ---- the benchmarks -------------------------------------------------------------------


class Bench:
    def __init__(self, cfg, stream, lib, page_size):
        self.cfg = cfg
        self.stream = stream
        self.lib = lib
        self.ps = page_size
        self.base = BaselineAllocator(POOL_SIZE, page_size, "cuda")
        self.kv = KvPool(lib, POOL_SIZE, page_size, torch.cuda.current_device())
        self.rows = []

    def close(self):
        self.kv.close()

    def fresh(self):
        self.base.clear()
        self.kv.clear()

    def cross_check_available(self, what):
        self.kv.check_settled(self.base.available_size(), what)

    def kv_alloc_device_time(self, what, reset, call, undo, verify):
        """kvpool's device time for an allocation: graph replay, unless replaying the
        captured call faults the pool (a kernel that cannot tell a replay of its own call
        from a conflict); then the pool is cleared and the call is timed with events, and
        the row says so. `reset` brings the pool to the state the call expects, `undo` gives
        the call's slots back, `verify` checks the pool and the replayed call's outputs."""
        if self.cfg.host_only:
            return math.nan, "none (--host-only)"
        reset()
        graph_us = graph_device_us(self.cfg, self.stream, call)
        sync()
        try:
            self.lib.check("kvp_pool_check_device",
                           self.lib.kvp_pool_check_device(self.kv.handle))
        except KvpoolError as err:
            if err.status != KVP_STATUS_DEVICE_FAULT:
                raise
            print(f"warning: {what}: replaying the captured call faulted the pool ({err}); "
                  "timed with events instead", file=sys.stderr)
            reset()  # the clear in it recovers the pool
            sync()
            # The first check after a recovery reports the recovered fault once more
            # (documented); the next one must be clean.
            self.lib.kvp_pool_check_device(self.kv.handle)
            self.lib.check("kvp_pool_check_device (after recovery)",
                           self.lib.kvp_pool_check_device(self.kv.handle))
            return event_device_us(self.cfg, call, after=undo), "events (graph replay faulted)"
        verify()
        return graph_us, "graph"

    def row(self, op, bs, base_host, base_dev, kv_host, kv_dev, method, base_dev100=None):
        self.rows.append(dict(op=op, page_size=self.ps, bs=bs, base_host=base_host,
                              base_dev=base_dev, kv_host=kv_host, kv_dev=kv_dev, method=method,
                              base_dev100=base_dev100))

    # alloc_extend: bs requests, empty prefix, 512 (--extend-tokens) new tokens each.
    def extend(self, bs):
        cfg, base, kv = self.cfg, self.base, self.kv
        what = f"alloc_extend page_size {self.ps} bs {bs}"
        b = extend_batch(bs, cfg.extend_tokens)
        out = torch.empty(b.tokens, dtype=I64, device="cuda")

        self.fresh()
        expected = b.baseline_extend(base)
        kv.alloc_extend(b, out)()
        expect_equal(out, expected, what)
        self.cross_check_available(what)
        base.free_segment(expected)
        kv.free_segment(out)()

        held = {}
        base_host = time_host(cfg, lambda: held.__setitem__("out", b.baseline_extend(base)),
                              after=lambda: base.free_segment(held.pop("out")))
        kv_host = time_host(cfg, kv.alloc_extend(b, out), after=kv.free_segment(out))
        kv.check_settled(POOL_SIZE, what + " (host timing)")

        base_dev = base_dev100 = None
        if self.ps > 1:  # the token pool's allocation is a slice: no kernel to time
            scratch = torch.empty_like(out)

            def base_launch():
                base.launch_extend(b.prefix, b.seq, b.last_loc, scratch)

            base_dev = graph_device_us(cfg, self.stream, base_launch)
            base_dev100 = graph100_device_us(cfg, self.stream, base_launch)

        def reset():
            kv.clear()
            out.fill_(-1)

        def verify():
            kv.check_settled(POOL_SIZE - b.tokens, what + " (graph replays)")
            expect_equal(out, expected, what + " after graph replays")

        kv_dev, method = self.kv_alloc_device_time(what, reset, kv.alloc_extend(b, out),
                                                   kv.free_segment(out), verify)
        kv.clear()
        self.row("alloc_extend", bs, base_host, base_dev, kv_host, kv_dev, method, base_dev100)

    def set_up(self, setup, what):
        """Fresh pools and `setup`'s extend on both, compared: (kvpool's output, a device
        buffer, and the baseline's)."""
        self.fresh()
        setup_out = torch.empty(setup.tokens, dtype=I64, device="cuda")
        base_setup = setup.baseline_extend(self.base)
        self.kv.alloc_extend(setup, setup_out)()
        expect_equal(setup_out, base_setup, what + " (setup extend)")
        return setup_out, base_setup

    def decode_lengths(self, bs):
        """The decodes' requests before their step: request i holds i % page_size + 1 tokens
        (its lengths, and the extend that sets them up)."""
        lens = [i % self.ps + 1 for i in range(bs)]
        return lens, Batch([0] * bs, lens, [-1] * bs)

    # alloc_decode on requests of 1..page_size tokens, set up by one extend: request i's new
    # token starts a page iff i % page_size == page_size - 1 (token pool: every request).
    def decode(self, bs):
        cfg, base, kv, ps = self.cfg, self.base, self.kv, self.ps
        what = f"alloc_decode page_size {ps} bs {bs}"
        lens, setup = self.decode_lengths(bs)
        setup_out, base_setup = self.set_up(setup, what)
        ends = torch.tensor(lens, dtype=I64).cumsum(0) - 1
        b = Batch([0] * bs, [n + 1 for n in lens], base_setup[ends.cuda()])
        starters = ((b.seq_cpu - 1) % ps == 0).nonzero().flatten().cuda()
        # The others fill their page further; repeating the step needs those pages rewound
        # (each page remembers how far it is filled, so a stale last_loc is refused).
        continuing_at = b.last_loc[((b.seq_cpu - 1) % ps != 0).nonzero().flatten().cuda()]
        kv_rewind = kv.rewind(continuing_at) if continuing_at.numel() else (lambda: None)
        held = POOL_SIZE - base.available_size()

        out = torch.empty(bs, dtype=I64, device="cuda")
        picked = torch.empty(starters.numel(), dtype=I64, device="cuda")
        pages = torch.empty(starters.numel(), dtype=I64, device="cuda")
        expected = b.baseline_decode(base)
        kv.alloc_decode(b, out)()
        expect_equal(out, expected, what)
        self.cross_check_available(what)

        # Undo: the token pool frees the decode slots; a paged pool gives back exactly the
        # new pages (a free by index would free the pages the other requests continue).
        def base_undo(slots):
            if ps == 1:
                base.free(slots)
            elif starters.numel():
                base.free_page_ids(slots[starters] // ps)

        free_slots = kv.free_indices(out)
        free_new_pages = kv.free_pages(pages)

        def kv_free_new():
            if ps == 1:
                free_slots()
            elif starters.numel():
                torch.index_select(out, 0, starters, out=picked)
                torch.floor_divide(picked, ps, out=pages)
                free_new_pages()

        def kv_undo():
            kv_free_new()
            kv_rewind()

        base_undo(expected)
        kv_undo()

        state = {}
        base_host = time_host(cfg, lambda: state.__setitem__("out", b.baseline_decode(base)),
                              after=lambda: base_undo(state.pop("out")))
        kv_host = time_host(cfg, kv.alloc_decode(b, out), after=kv_undo)
        kv.check_settled(POOL_SIZE - held, what + " (host timing)")

        # kvpool's step below is the decode and a rewind, less the rewind alone; the baseline's
        # kernel is timed the same way (the rewind changes nothing there: the pages are where
        # the setup left them), so both figures are a kernel's cost inside a graph.
        rewind_us = graph_device_us(cfg, self.stream, kv_rewind) if continuing_at.numel() else 0.0
        base_dev = base_dev100 = None
        if ps > 1:
            scratch = torch.empty_like(out)

            def base_launch():
                base.launch_decode(b.seq, b.last_loc, scratch)

            def base_step():
                base_launch()
                kv_rewind()

            base_dev = graph_device_us(cfg, self.stream, base_step) - rewind_us
            # In a graph of 100 the kernel alone: it changes nothing, so no rewind is needed.
            base_dev100 = graph100_device_us(cfg, self.stream, base_launch)

        # Replays start from the state of the first call: a clear and the setup.
        def reset():
            kv.clear()
            kv.alloc_extend(setup, setup_out)()
            out.fill_(-1)

        def verify():
            kv.check_settled(POOL_SIZE - held - starters.numel() * ps,
                             what + " (graph replays)")
            expect_equal(out, expected, what + " after graph replays")

        # A replayed step is the decode and the rewind that makes the next replay a valid
        # continuation; the rewind alone, replayed the same way, is subtracted.
        kv_decode = kv.alloc_decode(b, out)

        def kv_step():
            kv_decode()
            kv_rewind()

        kv_dev, method = self.kv_alloc_device_time(what, reset, kv_step, kv_free_new, verify)
        if method != "graph":
            kv.check_settled(POOL_SIZE - held, what + " (event timing)")
        if continuing_at.numel():
            kv_dev -= rewind_us
            method += " less rewind"
        kv.clear()
        self.row("alloc_decode", bs, base_host, base_dev, kv_host, kv_dev, method, base_dev100)

    def kv_step_row(self, op, bs, what, base_dev, setup, setup_out, table0, kv_table, kv_out,
                    kv_call, kv_rewind, rewind_us, expected, expected_table, available):
        """kvpool's side of a step, and the row: the pool, table and out brought back to
        before the step (a clear and `setup`), the step (`kv_call`, then `kv_rewind`, a
        no-op on the token pool) timed as one graph per replay less `rewind_us`, then the
        pool's free count (`available`), out and the table checked against SGLang's step."""
        kv = self.kv
        kv.clear()
        kv.alloc_extend(setup, setup_out)()
        kv_table.copy_(table0)
        kv_out.fill_(-1)

        def replayed():
            kv_call()
            kv_rewind()

        kv_dev = graph_device_us(self.cfg, self.stream, replayed)
        if not self.cfg.host_only:
            kv.check_settled(available, what + " (graph replays)")
            expect_equal(kv_out, expected, what + " after graph replays")
            if not torch.equal(kv_table, expected_table):
                raise AssertionError(f"{what}: kvpool's table differs after graph replays")
        kv.clear()
        method = "graph per step" + (" less rewind" if self.ps > 1 else "")
        self.row(op, bs, None, base_dev, None, kv_dev - rewind_us, method)

    # A decode step as SGLang's scheduler makes it, with its request-to-token table
    # (mem_cache/common.py alloc_for_decode, 0.5.23), against kvpool's one call by request
    # row, on decode()'s requests (request i holds i % page_size + 1 tokens) kept in an int32
    # req_to_token table (row bs - 1 - i is request i's). SGLang, paged: last_loc =
    # req_to_token[rows, seq_lens - 1], the Triton decode kernel on seq_lens + 1, then
    # req_to_token[rows, seq_lens.clone()] = out.to(int32); token pool: the slots are a slice
    # of the free list (no kernel), then the same write. kvpool: the next lengths (seq_lens +
    # 1, one torch op, into a buffer) and kvp_pool_alloc_decode_rows_async, which reads
    # last_loc from the table and writes the slot into it and into out. Device time per
    # replay of a graph of one step (paged: each side's graph also holds kvpool's rewind of
    # the continued pages, whose graph alone is subtracted, as in decode(); that takes the
    # graph's launch out of both figures, which the token pool's keep);
    # after one step, and again after the replays, kvpool's table and out must be SGLang's.
    # No host time: SGLang's step is Python launching one kernel at a time.
    def decode_step(self, bs):
        cfg, base, kv, ps = self.cfg, self.base, self.kv, self.ps
        what = f"decode_step page_size {ps} bs {bs}"
        lens, setup = self.decode_lengths(bs)
        setup_out, base_setup = self.set_up(setup, what)
        held = POOL_SIZE - base.available_size()

        row_len = ps + 8
        n_rows = bs + 3
        rows = torch.arange(bs - 1, -1, -1, dtype=I64, device="cuda")
        seq_lens = torch.tensor(lens, dtype=I64, device="cuda")  # SGLang's batch.seq_lens
        request = torch.repeat_interleave(torch.arange(bs, device="cuda"), seq_lens)
        first = torch.cumsum(seq_lens, 0) - seq_lens
        position = torch.arange(setup.tokens, device="cuda") - first[request]
        table0 = torch.zeros(n_rows, row_len, dtype=torch.int32, device="cuda")
        table0[rows[request], position] = base_setup.to(torch.int32)
        base_table = table0.clone()
        kv_table = table0.clone()
        desc = ReqTable(kv_table.data_ptr(), KVP_INDEX_TYPE_I32, n_rows, row_len, row_len)

        next_cpu = torch.tensor([n + 1 for n in lens], dtype=I64)
        next_lens = torch.empty(bs, dtype=I64, device="cuda")
        base_out = torch.empty(bs, dtype=I64, device="cuda")
        kv_out = torch.empty(bs, dtype=I64, device="cuda")
        taken = int(((next_cpu - 1) % ps == 0).sum()) if ps > 1 else bs  # new pages (slots)

        def base_step():
            """alloc_for_decode's device work (its host checks: the eager step below)."""
            if ps > 1:
                last_loc = base_table[rows, seq_lens - 1]
                seq_next = seq_lens + 1
                base.launch_decode(seq_next, last_loc, base_out)
                out = base_out
            else:
                out = base.free_pages[:bs]
            locs = seq_lens.clone()
            base_table[rows, locs] = out.to(torch.int32)
            return out

        kv_decode = kv.alloc_decode_rows(desc, rows, next_cpu, next_lens, kv_out)

        def kv_step():
            torch.add(seq_lens, 1, out=next_lens)
            kv_decode()

        # SGLang's free list is left as it is (the host's slicing is no device work): its
        # replays below take the same pages, and its kernel sees the same alignment.
        consumed = taken * ps if ps > 1 else bs
        expected = base_step().clone()
        kv_step()
        expect_equal(kv_out, expected, what)
        if not torch.equal(kv_table, base_table):
            raise AssertionError(f"{what}: kvpool's table differs from SGLang's")
        kv.check_settled(POOL_SIZE - held - consumed, what)
        expected_table = base_table.clone()

        # The continued pages, rewound after each replayed step (see decode()).
        ends = torch.cumsum(seq_lens, 0) - 1
        continuing = ((next_cpu - 1) % ps != 0).nonzero().flatten().cuda()
        continuing_at = base_setup[ends[continuing]] if ps > 1 else base_setup[:0]
        kv_rewind = kv.rewind(continuing_at) if continuing_at.numel() else (lambda: None)

        # SGLang's step is timed with kvpool's rewind in its graph too, less the rewind alone
        # (as in decode()): both figures then hold one graph launch, or both none.
        rewind_us = (graph_device_us(cfg, self.stream, kv_rewind)
                     if continuing_at.numel() else 0.0)

        def base_replayed():
            base_step()
            kv_rewind()

        base_dev = graph_device_us(cfg, self.stream, base_replayed) - rewind_us
        self.kv_step_row("decode_step", bs, what, base_dev, setup, setup_out, table0,
                         kv_table, kv_out, kv_step, kv_rewind, rewind_us, expected,
                         expected_table, POOL_SIZE - held - consumed)

    # An extend as SGLang's scheduler makes it with its request-to-token table
    # (mem_cache/common.py alloc_for_extend and write_cache_indices, 0.5.23), for requests
    # that hold a prefix (a prefix-cache hit or the next chunk of a chunked prefill), against
    # kvpool's one call by request row. Request i holds a prefix of 2 * page_size + 1 tokens
    # (33 on the token pool; a partial last page) in row bs - 1 - i of an int32 table, as the
    # int64 tensor SGLang keeps per request (a view of the setup's output), and gets 512
    # (--extend-tokens) new tokens. SGLang, paged: last_loc = cat(prefix[-1:] of each
    # request), the Triton extend kernel; token pool: a slice of the free list; then the
    # prefix tensors' addresses uploaded (from pinned memory) and the Triton write of each
    # row (prefix and new slots). kvpool: kvp_pool_alloc_extend_rows_async (last_loc from the
    # table, the new slots into it and into out). The lengths' device copies, which both
    # need, are made before. Device time per replay of a graph of one step, as decode_step
    # (paged: with kvpool's rewind of the continued prefix pages on both sides, less the
    # rewind alone); after one step, and again after kvpool's replays, kvpool's table and out
    # must be SGLang's.
    def extend_step(self, bs):
        cfg, base, kv, ps = self.cfg, self.base, self.kv, self.ps
        what = f"extend_step page_size {ps} bs {bs}"
        prefix = 2 * ps + 1 if ps > 1 else 33
        new = cfg.extend_tokens
        setup = extend_batch(bs, prefix)
        setup_out, base_setup = self.set_up(setup, what)
        held = POOL_SIZE - base.available_size()

        row_len = prefix + new + 8
        n_rows = bs + 3
        rows = torch.arange(bs - 1, -1, -1, dtype=I64, device="cuda")
        table0 = torch.zeros(n_rows, row_len, dtype=torch.int32, device="cuda")
        table0[rows, :prefix] = base_setup.view(bs, prefix).to(torch.int32)
        base_table = table0.clone()
        kv_table = table0.clone()
        desc = ReqTable(kv_table.data_ptr(), KVP_INDEX_TYPE_I32, n_rows, row_len, row_len)

        prefix_tensors = [base_setup[i * prefix:(i + 1) * prefix] for i in range(bs)]
        lasts = [t[-1:] for t in prefix_tensors]
        b = Batch([prefix] * bs, [prefix + new] * bs, torch.cat(lasts))
        extend_lens = b.seq - b.prefix
        pointers_host = torch.tensor([t.data_ptr() for t in prefix_tensors],
                                     dtype=torch.uint64).pin_memory()
        pointers = torch.empty(bs, dtype=torch.uint64, device="cuda")
        base_out = torch.empty(b.tokens, dtype=I64, device="cuda")
        kv_out = torch.empty(b.tokens, dtype=I64, device="cuda")
        pages = ((b.seq_cpu + ps - 1) // ps - (b.prefix_cpu + ps - 1) // ps).sum()
        consumed = int(pages) * ps if ps > 1 else b.tokens

        def write_rows(out):
            """write_cache_indices: the prefix tensors' addresses up, then every row."""
            pointers.copy_(pointers_host, non_blocking=True)
            write_rows_kernel[(bs,)](base_table, rows, pointers, b.prefix, b.seq, extend_lens,
                                     out, row_len, BLOCK=WRITE_BLOCK)

        def base_step():
            """alloc_for_extend's device work once the lengths are on the device."""
            if ps > 1:
                last_loc = torch.cat(lasts)
                base.launch_extend(b.prefix, b.seq, last_loc, base_out)
                out = base_out
            else:
                out = base.free_pages[:b.tokens]
            write_rows(out)
            return out

        kv_extend = kv.alloc_extend_rows(desc, rows, b, kv_out)
        expected = base_step().clone()
        kv_extend()
        expect_equal(kv_out, expected, what)
        if not torch.equal(kv_table, base_table):
            raise AssertionError(f"{what}: kvpool's table differs from SGLang's")
        kv.check_settled(POOL_SIZE - held - consumed, what)
        expected_table = base_table.clone()

        # The prefixes' partial pages, continued by the step: rewound after each replay.
        kv_rewind = kv.rewind(b.last_loc) if ps > 1 else (lambda: None)
        rewind_us = graph_device_us(cfg, self.stream, kv_rewind) if ps > 1 else 0.0

        def base_replayed():
            base_step()
            kv_rewind()

        base_dev = graph_device_us(cfg, self.stream, base_replayed) - rewind_us

        # Where SGLang's step spends it: each part alone, per replay of its own graph (the
        # graph's launch included in each).
        parts = {}
        if ps > 1:
            parts["cat of last_loc"] = graph_device_us(cfg, self.stream,
                                                       lambda: torch.cat(lasts))
            parts["extend kernel"] = graph_device_us(
                cfg, self.stream, lambda: base.launch_extend(b.prefix, b.seq, b.last_loc,
                                                             base_out))
        parts["pointer upload + row write"] = graph_device_us(cfg, self.stream,
                                                              lambda: write_rows(expected))
        self.kv_step_row("extend_step", bs, what, base_dev, setup, setup_out, table0,
                         kv_table, kv_out, kv_extend, kv_rewind, rewind_us, expected,
                         expected_table, POOL_SIZE - held - consumed)
        self.rows[-1]["base_parts"] = parts

    # Frees of one extend batch's indices (bs x 512 tokens, or --extend-tokens), by index or
    # as one row segment.
    def free(self, bs, by_index):
        cfg, base, kv, ps = self.cfg, self.base, self.kv, self.ps
        op = "free_indices" if by_index else "free_segment"
        what = f"{op} page_size {ps} bs {bs}"
        b = extend_batch(bs, cfg.extend_tokens)
        out = torch.empty(b.tokens, dtype=I64, device="cuda")
        base_free = base.free if by_index else base.free_segment
        kv_free = kv.free_indices(out) if by_index else kv.free_segment(out)
        kv_alloc = kv.alloc_extend(b, out)

        # The allocation after the free shows the free list's order (paged: the pages are
        # back at the front; token pool: at the tail).
        self.fresh()
        for step in ("before", "after"):
            expected = b.baseline_extend(base)
            kv_alloc()
            expect_equal(out, expected, f"{what} (alloc {step} the free)")
            self.cross_check_available(f"{what} (alloc {step} the free)")
            base_free(expected)
            kv_free()
            sync()
            self.cross_check_available(f"{what} (free)")

        # The allocation before each free is drained untimed, so a free is timed on an idle
        # stream (the baseline's paged free synchronizes; it must not wait for the
        # allocation). A paged kvpool free by index has a count only the device knows: it is
        # drained too, so the next allocation sees the pages.
        state = {}

        def base_prepare():
            state["out"] = b.baseline_extend(base)
            sync()

        def kv_prepare():
            kv_alloc()
            sync()

        base_host = time_host(cfg, lambda: base_free(state.pop("out")), prepare=base_prepare)
        kv_host = time_host(cfg, kv_free, prepare=kv_prepare,
                            after=sync if by_index and ps > 1 else None)
        kv.check_settled(POOL_SIZE, what + " (host timing)")

        base_dev = None
        if not (by_index and ps > 1):  # torch.unique syncs: no device figure
            base_dev = event_device_us(cfg, lambda: base_free(state.pop("out")),
                                       prepare=lambda: state.__setitem__(
                                           "out", b.baseline_extend(base)))
        kv_dev = event_device_us(cfg, kv_free, prepare=kv_alloc)
        kv.check_settled(POOL_SIZE, what + " (event timing)")
        kv.clear()
        self.row(op, bs, base_host, base_dev, kv_host, kv_dev, "events")


# ---- output ---------------------------------------------------------------------------

COLUMNS = [
    ("op", "op"), ("page_size", "page_size"), ("bs", "bs"),
    ("baseline_host_median_us", "baseline host median µs"),
    ("baseline_host_p90_us", "baseline host p90 µs"),
    ("baseline_device_us", "baseline device µs"),
    ("kvpool_host_median_us", "kvpool host median µs"),
    ("kvpool_host_p90_us", "kvpool host p90 µs"),
    ("kvpool_device_us", "kvpool device µs"),
    ("host_speedup", "host speedup (baseline / kvpool)"),
    ("device_speedup", "device speedup"),
    ("floor_host_us", "floor host µs (empty Triton)"),
    ("floor_device_us", "floor device µs (empty Triton)"),
    ("device_method", "device method"),
    ("baseline_device_graph100_us", "baseline device µs per launch in a graph of 100"),
]
# The CSV's last columns (the report gives the floors above its table). New columns go at the
# end of a line, so a reader of the older columns keeps working.
CSV_COLUMNS = COLUMNS + [
    ("floor_device_graph_us", "floor device µs per graph replay (empty Triton)"),
    ("floor_device_graph100_us", "floor device µs per launch in a graph of 100 (empty Triton)"),
]


def flatten(row, floors):
    def ratio(a, b):
        return None if a is None or b is None else a / b

    base_dev, kv_dev = row["base_dev"], row["kv_dev"]
    # The steps' floors: a graph replay, or (less rewind: the launch taken out) a launch in a
    # graph of 100.
    floor_dev = {"graph": floors["triton_graph"],
                 "graph per step": floors["triton_graph"],
                 "graph per step less rewind": floors["triton_graph100"]}.get(
                     row["method"], floors["triton_events"])
    base_host = row["base_host"] or {}  # None: not timed (decode_step)
    kv_host = row["kv_host"] or {}
    return {
        "op": row["op"], "page_size": row["page_size"], "bs": row["bs"],
        "baseline_host_median_us": base_host.get("median"),
        "baseline_host_p90_us": base_host.get("p90"),
        "baseline_device_us": base_dev,
        "kvpool_host_median_us": kv_host.get("median"),
        "kvpool_host_p90_us": kv_host.get("p90"),
        "kvpool_device_us": kv_dev,
        "host_speedup": ratio(base_host.get("median"), kv_host.get("median")),
        "device_speedup": ratio(base_dev, kv_dev),
        "floor_host_us": floors["triton_host"]["median"],
        "floor_device_us": floor_dev,
        "device_method": row["method"],
        "baseline_device_graph100_us": row["base_dev100"],
        "floor_device_graph_us": floors["triton_graph"],
        "floor_device_graph100_us": floors["triton_graph100"],
    }


def fmt(value, digits=2):
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def print_report(rows, floors, cfg, lib):
    f = floors
    print(f"# kvpool {lib.kvp_version().decode()} from Python (ctypes) vs the SGLang-algorithm "
          f"baseline{' (quick run)' if cfg.quick else ''}\n")
    print(f"- GPU: {torch.cuda.get_device_name()}; torch {torch.__version__}, "
          f"triton {triton.__version__}, CUDA {torch.version.cuda}; int64 indices; pool of "
          f"{POOL_SIZE} slots")
    print(f"- host floors (median / p90 µs): empty Triton kernel {f['triton_host']['median']:.2f}"
          f" / {f['triton_host']['p90']:.2f}; one-element torch op "
          f"{f['torch_host']['median']:.2f} / {f['torch_host']['p90']:.2f}; ctypes call "
          f"(kvp_abi_version) {f['ctypes_host']['median']:.2f} / {f['ctypes_host']['p90']:.2f}")
    print(f"- device floors (µs): empty Triton kernel {f['triton_graph']:.3f} per graph replay, "
          f"{f['triton_graph100']:.3f} per launch in a graph of 100, {f['triton_events']:.3f} "
          f"between events; one-element torch op {f['torch_graph']:.3f} per graph replay")
    print("- device method: graph = one call per captured graph, replays back to back behind "
          "a spinner (the baseline: its Triton kernel only; floor: empty Triton kernel per "
          "replay); graph less rewind = a decode and kvpool's rewind of the continued pages "
          "per captured graph, less the rewind alone (the baseline's decode kernel is timed "
          "the same way, so both are a kernel's cost inside a graph, without the graph's "
          "launch: compare with the floor per launch in a graph of 100); events = events around one call behind a spinner (floor: empty Triton "
          "kernel between events), for frees and for a kvpool allocation whose graph replay "
          "faulted the pool. – = no kernel (token-pool baseline allocations are slices) or a "
          "synchronizing call (the baseline's paged free, torch.unique). Baseline per launch "
          "in a graph of 100: its Triton kernel launched 100 times with the same inputs in one "
          "captured graph, per launch (kvpool_bench.cu's shape; floor: empty Triton kernel per "
          "launch in a graph of 100). decode_step / extend_step: SGLang's whole step with its "
          "req_to_token table (decode: gather last_loc, add, Triton kernel, clone, cast, "
          "write; extend: cat last_loc, Triton kernel, pointer upload, Triton row write) "
          "against kvpool's add and alloc_decode_rows / alloc_extend_rows, each one step per "
          "captured graph (paged: with kvpool's rewind, less the rewind alone, on both sides)"
          "\n")
    print("| " + " | ".join(title for _, title in COLUMNS) + " |")
    print("|" + "|".join("---" if key in ("op", "device_method") else "---:"
                         for key, _ in COLUMNS) + "|")
    for row in rows:
        flat = flatten(row, floors)
        print("| " + " | ".join(fmt(flat[key]) for key, _ in COLUMNS) + " |")
    parted = [row for row in rows if row.get("base_parts")]
    if parted:
        print("\nSGLang's extend step by part, µs per replay of a graph of the part alone "
              "(the graph's launch included in each):\n")
        names = list(dict.fromkeys(name for row in parted for name in row["base_parts"]))
        print("| op | page_size | bs | " + " | ".join(names) + " |")
        print("|---|---:|---:|" + "---:|" * len(names))
        for row in parted:
            cells = [fmt(row["base_parts"].get(name)) for name in names]
            print(f"| {row['op']} | {row['page_size']} | {row['bs']} | " + " | ".join(cells)
                  + " |")


def write_csv(path, rows, floors):
    with open(path, "w") as f:
        f.write(",".join(key for key, _ in CSV_COLUMNS) + "\n")
        for row in rows:
            flat = flatten(row, floors)
            f.write(",".join("" if flat[key] is None else
                             (f"{flat[key]:.4f}" if isinstance(flat[key], float) else
                              str(flat[key])) for key, _ in CSV_COLUMNS) + "\n")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lib", default=os.environ.get("KVPOOL_LIB"),
                        help="path of libkvpool.so (default: $KVPOOL_LIB)")
    parser.add_argument("--quick", action="store_true", help="short smoke run")
    parser.add_argument("--csv", help="also write the table as CSV to this path")
    parser.add_argument("--device", type=int, default=0, help="CUDA device ordinal")

    def subset(allowed):
        def parse(text):
            values = [int(v) for v in text.split(",")]
            if not set(values) <= set(allowed):
                raise argparse.ArgumentTypeError(f"allowed: {','.join(map(str, allowed))}")
            return values
        return parse

    parser.add_argument("--page-sizes", type=subset(PAGE_SIZES), default=list(PAGE_SIZES),
                        help="comma-separated subset of 1,16,64 (default all)")
    parser.add_argument("--batch-sizes", type=subset(range(1, MAX_BATCH + 1)),
                        default=list(BATCH_SIZES),
                        help="comma-separated, each 1..4096 (default 1,8,64,256,1024,4096)")
    parser.add_argument("--ops", type=lambda text: text.split(","), default=list(DEFAULT_OPS),
                        help=f"comma-separated operations, of which {','.join(OPS)} have a "
                             "baseline here (others are skipped; default all but "
                             "the steps)")
    parser.add_argument("--extend-tokens", type=int, default=TOKENS_PER_REQUEST,
                        help="new tokens per extend request, 1..16384 and a multiple of "
                             "every page size, at most 4096 x 512 in a batch (default 512: "
                             "SGLang's figures; kvpool_bench.cu takes the same)")
    parser.add_argument("--host-only", action="store_true",
                        help="host timing only (under a profiler that serializes kernels)")
    args = parser.parse_args()
    if not 1 <= args.extend_tokens <= MAX_REQUEST_TOKENS:
        parser.error(f"--extend-tokens must be 1..{MAX_REQUEST_TOKENS}")
    if max(args.batch_sizes) * args.extend_tokens > MAX_BATCH * TOKENS_PER_REQUEST:
        parser.error(f"batch size x --extend-tokens must be at most "
                     f"{MAX_BATCH * TOKENS_PER_REQUEST} (the pool's size)")
    for ps in args.page_sizes:
        # (As kvpool_bench.cu: the free-count checks count an extend's slots as whole pages.)
        if args.extend_tokens % ps:
            parser.error(f"--extend-tokens {args.extend_tokens} is not a multiple of page size "
                         f"{ps}")
    if not args.lib:
        parser.error("--lib (or $KVPOOL_LIB) is required")
    skipped = [op for op in args.ops if op not in OPS]
    if skipped:
        print(f"no baseline here for {','.join(skipped)}: skipped", file=sys.stderr)
    ops = [op for op in OPS if op in args.ops]
    if not ops:
        print("nothing to measure", file=sys.stderr)
        return

    cfg = Settings(args.quick, args.host_only, args.extend_tokens)
    lib = Kvpool(args.lib)
    torch.cuda.set_device(args.device)
    torch.zeros(1, device="cuda")  # the primary context, shared with kvpool
    stream = torch.cuda.Stream()
    rows = []
    with torch.cuda.stream(stream):
        print("measuring floors...", file=sys.stderr)
        floors = measure_floors(cfg, stream, lib)
        for ps in args.page_sizes:
            bench = Bench(cfg, stream, lib, ps)
            try:
                for bs in args.batch_sizes:
                    print(f"page_size {ps} bs {bs}", file=sys.stderr)
                    if "alloc_extend" in ops:
                        bench.extend(bs)
                    if "alloc_decode" in ops:
                        bench.decode(bs)
                    if "free_indices" in ops:
                        bench.free(bs, by_index=True)
                    if "free_segment" in ops:
                        bench.free(bs, by_index=False)
                    if "decode_step" in ops:
                        bench.decode_step(bs)
                    if "extend_step" in ops:
                        bench.extend_step(bs)
            finally:
                sync()
                bench.close()
            rows.extend(bench.rows)
    rows.sort(key=lambda r: OPS.index(r["op"]))  # stable: page size, then bs, within an op
    print_report(rows, floors, cfg, lib)
    if args.csv:
        write_csv(args.csv, rows, floors)


if __name__ == "__main__":
    main()
