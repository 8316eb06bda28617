#!/usr/bin/env python3
"""What a kvpool call costs from Python over the same call from C, measured in one run.

    python3 benches/python_overhead.py                   # host pool (any machine)
    python3 benches/python_overhead.py --device cuda     # device pool (GPU, PyTorch)
    python3 benches/python_overhead.py --quick           # smoke run, numbers not for reporting

Compiles benches/python_overhead.c (timing loops written in C, `cc -O2 -shared`) and loads it
next to the Python package (python/kvpool), then for each operation, batch size and kind of
host input runs the same call sequence on the same pool, buffers and stream, alternating
rounds: C loop, then the Python method, then C again... Each side times every call on its
own (C: clock_gettime around the call; Python: time.perf_counter_ns around the method
call) after warm-up; the table shows medians over all rounds and the difference.

Operations (page size 16, int64 indices; each timed call is undone untimed, so every call
starts from the same pool state):

- alloc_extend: bs requests, empty prefix (last_loc -1), 16 new tokens each (one page);
  Python passes extend_num_tokens and a preallocated out of the input's kind (what C
  passes); the list row is the plain call (lists in, a list out). Undone by a free.
- alloc_decode: bs requests holding one token each grow by one (no new page); Python
  passes out. Undone by rewind.
- alloc: bs pages (bs * 16 slots) into a preallocated out. Undone by a free.
- free: free_indices of bs pages' slots (bs * 16 indices), after an untimed alloc.
- --device cuda: the *_async methods on a device pool: CUDA tensors for the device arrays
  and out, the host copies of the lengths in the row's kind, stream=None (PyTorch's current
  stream: one of our own, made current; C gets its handle); the stream is drained every 64
  calls and after every timed free, untimed.

Kinds of host input: list, array.array ('q'), memoryview (of an array), numpy (int64, if
numpy is installed), torch (CPU int64 tensor, if torch is installed). Rows "ctypes" call
the library's functions through ctypes functions of the benchmark's own (every pointer
``void *``) with every argument prebuilt (ints): the floor of any ctypes binding (the
package's hot calls now go under it: they are the library's builtins, see
python/kvpool/_native.py).
Rows "(prepared)" make the same call through ``Pool.prepare_*`` (the buffers prepared once,
before the timed loop; then ``prepared(bs[, extend_num_tokens])``). The plain rows of
buffer kinds (array, memoryview, numpy) go through the library's Python entry points
(``lib.python``, src/ffi/python.rs) where the package has them; rows "(general path)" time
the same call with those turned off (``lib.python = None``): the package's pure-Python
conversion, what the plain rows measured before.
Every Python result is compared with the C loop's output of the same call.
"""

import argparse
import array
import ctypes
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from functools import partial
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
# --package DIR: time another copy of the package (e.g. an older revision's python/, for
# before/after figures from one machine); it must be chosen before the import.
if "--package" in sys.argv:
    sys.path.insert(0, os.path.abspath(sys.argv[sys.argv.index("--package") + 1]))
else:
    sys.path.insert(0, os.path.join(ROOT, "python"))

import kvpool  # noqa: E402

try:
    import numpy
except ImportError:
    numpy = None
try:
    import torch
except (ImportError, OSError):
    torch = None

PAGE = 16
TOKENS = 16  # new tokens per request in alloc_extend (one page)
u64 = ctypes.c_uint64
size_t = ctypes.c_size_t
vp = ctypes.c_void_p


class Functions(ctypes.Structure):
    _fields_ = [(name, vp) for name in (
        "alloc", "alloc_extend", "alloc_decode", "free_indices", "rewind", "alloc_async",
        "alloc_extend_async", "alloc_decode_async", "free_indices_async",
        "free_segment_async", "rewind_async", "sync")]


def build_harness(cc, workdir):
    out = os.path.join(workdir, "libpython_overhead.so")
    cmd = [cc, "-O2", "-std=gnu11", "-shared", "-fPIC", "-I", os.path.join(ROOT, "include"),
           os.path.join(HERE, "python_overhead.c"), "-o", out]
    subprocess.run(cmd, check=True)
    return ctypes.CDLL(out)


def address(fn):
    return ctypes.cast(fn, vp).value


# ---- host inputs of each kind -----------------------------------------------------------

def make(kind, values):
    """``values`` (ints) as a host array of ``kind``."""
    if kind == "list":
        return list(values)
    if kind == "array":
        return array.array("q", values)
    if kind == "memoryview":
        return memoryview(array.array("q", values))
    if kind == "numpy":
        return numpy.array(values, dtype=numpy.int64)
    if kind == "torch":
        return torch.tensor(values, dtype=torch.int64)
    raise ValueError(kind)


def empty(kind, n):
    """A preallocated output of ``kind`` (None for lists: the call returns a new list)."""
    if kind == "list":
        return None
    if kind in ("array", "memoryview"):
        buf = array.array("q", [0]) * n
        return buf if kind == "array" else memoryview(buf)
    if kind == "numpy":
        return numpy.zeros(n, dtype=numpy.int64)
    if kind == "torch":
        return torch.zeros(n, dtype=torch.int64)
    raise ValueError(kind)


def as_list(value):
    if hasattr(value, "tolist"):
        return value.tolist()
    return list(value)


def c_address(kind, value):
    """The address of a host array of ``kind`` (for the C loops and the ctypes rows)."""
    if kind == "torch":
        return value.data_ptr()
    if kind == "numpy":
        return value.__array_interface__["data"][0]
    buf = value.obj if kind == "memoryview" else value
    return buf.buffer_info()[0]


# ---- timing -------------------------------------------------------------------------------

class Cell:
    def __init__(self):
        self.c = []
        self.py = []
        self.ctypes = []


def c_loop(fn, args, warmup, reps):
    times = (u64 * reps)()
    status = fn(*args, size_t(warmup), size_t(reps), times)
    if status:
        lib = kvpool.load()
        raise RuntimeError(f"C loop {fn.__name__}: status {status}: {lib.last_error_message()}")
    return list(times)


def py_loop(call, setup, undo, drain, warmup, reps):
    """The Python twin of the C LOOP: setup and undo untimed, drain every 64 iterations.
    ``call`` (a functools.partial, so that no Python frame wraps the method call) is the
    timed region; ``undo(result)`` gets what it returned."""
    clock = time.perf_counter_ns
    times = []
    result = None
    for i in range(warmup + reps):
        if setup is not None:
            setup()
        t0 = clock()
        result = call()
        t1 = clock()
        if i >= warmup:
            times.append(t1 - t0)
        if undo is not None:
            undo(result)
        if drain is not None and i % 64 == 63:
            drain()
    return times, result


def med_us(samples):
    return statistics.median(samples) / 1000 if samples else float("nan")


# ---- the benchmark --------------------------------------------------------------------------

class Bench:
    def __init__(self, args):
        self.args = args
        self.lib = kvpool.load(args.lib) if args.lib else kvpool.load()
        self.workdir = tempfile.mkdtemp(prefix="kvpool-ovh-")
        self.harness = build_harness(args.cc, self.workdir)
        for name in ("ovh_timer", "ovh_alloc", "ovh_alloc_extend", "ovh_alloc_decode",
                     "ovh_free_indices", "ovh_alloc_async", "ovh_alloc_extend_async",
                     "ovh_alloc_decode_async", "ovh_free_async"):
            fn = getattr(self.harness, name)
            fn.restype = ctypes.c_int
        self.fns = Functions()
        for name, _ in Functions._fields_:
            if name != "sync":
                setattr(self.fns, name, address(self.lib.function("kvp_pool_" + name)))
        # The benchmark's own untyped functions (every pointer void *, addresses as ints) for
        # the untimed setup/undo calls and the "ctypes" rows, whatever the package has.
        cdll = ctypes.CDLL(self.lib.path)
        self.fast = type("Fast", (), {})()
        for name, (restype, argtypes) in kvpool.SIGNATURES.items():
            if not hasattr(cdll, name):
                continue
            fn = cdll[name]
            fn.restype = restype
            fn.argtypes = [vp if isinstance(t, type) and issubclass(t, (ctypes._Pointer, vp))
                           else t for t in argtypes]
            setattr(self.fast, name, fn)
        self.device = args.device == "cuda"
        self.rows = []

    def close(self):
        shutil.rmtree(self.workdir, ignore_errors=True)

    def rounds(self, bs):
        reps = self.args.reps
        if bs >= 4096:
            reps = max(reps // 4, 20)
        return self.args.rounds, reps

    def measure(self, c_run, py_run, ctypes_run=None):
        """Alternates the C loop and the Python loop (and the ctypes floor) for the rounds;
        returns the Cell and the last Python result."""
        cell = Cell()
        result = None
        rounds, reps = self.current
        warmup = self.args.warmup
        for _ in range(rounds):
            cell.c += c_run(warmup, reps)
            times, result = py_run(warmup, reps)
            cell.py += times
            if ctypes_run is not None:
                cell.ctypes += ctypes_run(warmup, reps)[0]
        return cell, result

    def has_native(self, kind):
        """Whether the package calls the library's Python entry points (``lib.python``) for
        host arrays of ``kind``: then a "(general path)" row times the same call without
        them."""
        return kind not in ("list", "torch") and getattr(self.lib, "python", None) is not None

    def general(self, py_run):
        """``py_run`` with ``lib.python`` off: the package's general (pure Python) path."""
        def run(warmup, reps):
            native, self.lib.python = self.lib.python, None
            try:
                return py_run(warmup, reps)
            finally:
                self.lib.python = native
        return run

    def row(self, op, bs, kind, cell, note=""):
        c, py = med_us(cell.c), med_us(cell.py)
        self.rows.append(dict(op=op, bs=bs, kind=kind, c=c, py=py, delta=py - c,
                              ratio=py / c if c else float("nan"),
                              ctypes=med_us(cell.ctypes), note=note))
        print(f"  {op:<20} bs={bs:<5} {kind:<22} C {c:9.2f} us  Python {py:9.2f} us  "
              f"delta {py - c:8.2f} us", file=sys.stderr)

    # ---- host pool ----

    def host(self):
        args = self.args
        pool = kvpool.Pool(args.pool_size, page_size=PAGE, lib=self.lib)
        h = pool.handle
        f = ctypes.byref(self.fns)
        H = self.harness
        fast = self.fast
        for bs in args.batch_sizes:
            self.current = self.rounds(bs)
            ext = bs * TOKENS
            base_prefix, base_seq, base_last = [0] * bs, [TOKENS] * bs, [-1] * bs
            c_prefix, c_seq, c_last = (array.array("q", v) for v in
                                       (base_prefix, base_seq, base_last))
            c_out = array.array("q", [0]) * ext
            pa, sa, la, oa = (a.buffer_info()[0] for a in (c_prefix, c_seq, c_last, c_out))
            undo_free = lambda out_addr, n: fast.kvp_pool_free_indices(h, out_addr, n)  # noqa: E731

            # alloc_extend
            for kind in args.kinds:
                prefix, seq, last = (make(kind, v) for v in (base_prefix, base_seq, base_last))
                out = empty(kind, ext)
                if kind == "list":
                    call = partial(pool.alloc_extend, prefix, seq, last, extend_num_tokens=ext)
                else:
                    call = partial(pool.alloc_extend, prefix, seq, last, extend_num_tokens=ext,
                                   out=out)

                def py_run(warmup, reps, call=call, kind=kind):
                    return py_loop(call, None, partial(self.free_result, h, kind), None,
                                   warmup, reps)

                def c_run(warmup, reps):
                    return c_loop(H.ovh_alloc_extend, (f, vp(h), vp(pa), vp(sa), vp(la),
                                                      size_t(bs), size_t(ext), vp(oa),
                                                      size_t(ext)), warmup, reps)

                def ctypes_run(warmup, reps):
                    fn = fast.kvp_pool_alloc_extend
                    return py_loop(partial(fn, h, pa, sa, la, bs, ext, oa, ext), None,
                                   lambda _: undo_free(oa, ext), None, warmup, reps)

                try:
                    cell, result = self.measure(c_run, py_run,
                                                ctypes_run if kind == args.kinds[0] else None)
                except TypeError as e:  # an older package without this kind
                    self.unsupported("alloc_extend", bs, kind, e)
                    continue
                self.check("alloc_extend", bs, kind, result, c_out)
                self.row("alloc_extend", bs, kind, cell)
                if kind == args.kinds[0]:
                    self.row("alloc_extend", bs, "ctypes (prebuilt ints)",
                             _ctypes_cell(cell))
                if self.has_native(kind):
                    cell, result = self.measure(c_run, self.general(py_run))
                    self.check("alloc_extend", bs, kind, result, c_out)
                    self.row("alloc_extend", bs, kind + " (general path)", cell)
                if kind != "list" and hasattr(pool, "prepare_alloc_extend"):
                    prepared = pool.prepare_alloc_extend(prefix, seq, last, out)

                    def py_run_prepared(warmup, reps, call=partial(prepared, bs, ext),
                                        out=out, kind=kind):
                        return py_loop(call, None,
                                       lambda _: self.free_result(h, kind, out), None,
                                       warmup, reps)
                    cell, _ = self.measure(c_run, py_run_prepared)
                    self.check("alloc_extend", bs, kind, out, c_out)
                    self.row("alloc_extend", bs, kind + " (prepared)", cell)
                if args.defaults and kind != "list":
                    def py_run_no_out(warmup, reps, prefix=prefix, seq=seq, last=last,
                                      kind=kind):
                        return py_loop(partial(pool.alloc_extend, prefix, seq, last,
                                               extend_num_tokens=ext), None,
                                       partial(self.free_result, h, kind), None, warmup,
                                       reps)
                    cell, result = self.measure(c_run, py_run_no_out)
                    self.check("alloc_extend", bs, kind, result, c_out)
                    self.row("alloc_extend", bs, kind + " (no out)", cell)

                    def py_run_default(warmup, reps, prefix=prefix, seq=seq, last=last,
                                       kind=kind):
                        return py_loop(partial(pool.alloc_extend, prefix, seq, last), None,
                                       partial(self.free_result, h, kind), None, warmup,
                                       reps)
                    cell, result = self.measure(c_run, py_run_default)
                    self.check("alloc_extend", bs, kind, result, c_out)
                    self.row("alloc_extend", bs, kind + " (no out, no ext)", cell)

            # alloc_decode: bs requests of one token each (slots from one extend), + 1 token
            first = array.array("q", [0]) * bs
            ones = array.array("q", [1] * bs)
            status = fast.kvp_pool_alloc_extend(h, pa, ones.buffer_info()[0], la, bs, bs,
                                                first.buffer_info()[0], bs)
            assert status == 0, self.lib.last_error_message()
            seq2 = array.array("q", [2] * bs)
            s2a, fa = seq2.buffer_info()[0], first.buffer_info()[0]
            d_out = array.array("q", [0]) * bs
            da = d_out.buffer_info()[0]
            for kind in args.kinds:
                seq, last = make(kind, seq2), make(kind, first)
                out = empty(kind, bs)
                if kind == "list":
                    call = partial(pool.alloc_decode, seq, last)
                else:
                    call = partial(pool.alloc_decode, seq, last, out=out)

                def undo(_):
                    fast.kvp_pool_rewind(h, fa, bs)

                def py_run(warmup, reps, call=call):
                    return py_loop(call, None, undo, None, warmup, reps)

                def c_run(warmup, reps):
                    return c_loop(H.ovh_alloc_decode, (f, vp(h), vp(s2a), vp(fa), size_t(bs),
                                                      vp(da), size_t(bs)), warmup, reps)

                def ctypes_run(warmup, reps):
                    fn = fast.kvp_pool_alloc_decode
                    return py_loop(partial(fn, h, s2a, fa, bs, da, bs), None, undo, None,
                                   warmup, reps)

                try:
                    cell, result = self.measure(c_run, py_run,
                                                ctypes_run if kind == args.kinds[0] else None)
                except TypeError as e:
                    self.unsupported("alloc_decode", bs, kind, e)
                    continue
                self.check("alloc_decode", bs, kind, result, d_out)
                self.row("alloc_decode", bs, kind, cell)
                if kind == args.kinds[0]:
                    self.row("alloc_decode", bs, "ctypes (prebuilt ints)", _ctypes_cell(cell))
                if self.has_native(kind):
                    cell, result = self.measure(c_run, self.general(py_run))
                    self.check("alloc_decode", bs, kind, result, d_out)
                    self.row("alloc_decode", bs, kind + " (general path)", cell)
                if kind != "list" and hasattr(pool, "prepare_alloc_decode"):
                    prepared = pool.prepare_alloc_decode(seq, last, out)

                    def py_run_prepared(warmup, reps, call=partial(prepared, bs)):
                        return py_loop(call, None, undo, None, warmup, reps)
                    cell, _ = self.measure(c_run, py_run_prepared)
                    self.check("alloc_decode", bs, kind, out, d_out)
                    self.row("alloc_decode", bs, kind + " (prepared)", cell)
                if args.defaults and kind != "list":
                    def py_run_no_out(warmup, reps, seq=seq, last=last):
                        return py_loop(partial(pool.alloc_decode, seq, last), None, undo, None,
                                       warmup, reps)
                    cell, result = self.measure(c_run, py_run_no_out)
                    self.check("alloc_decode", bs, kind, result, d_out)
                    self.row("alloc_decode", bs, kind + " (no out)", cell)
            undo_free(fa, bs)

            # alloc: bs pages into a preallocated out (no host input: one row per out kind)
            n = bs * PAGE
            a_out = array.array("q", [0]) * n
            aa = a_out.buffer_info()[0]
            for kind in args.kinds:
                out = empty(kind, n)
                call = partial(pool.alloc, n) if kind == "list" else partial(pool.alloc, n,
                                                                              out=out)

                def py_run(warmup, reps, call=call, kind=kind):
                    return py_loop(call, None, partial(self.free_result, h, kind), None,
                                   warmup, reps)

                def c_run(warmup, reps):
                    return c_loop(H.ovh_alloc, (f, vp(h), size_t(n), vp(aa), size_t(n)),
                                  warmup, reps)

                try:
                    cell, result = self.measure(c_run, py_run)
                except TypeError as e:
                    self.unsupported("alloc", bs, kind, e)
                    continue
                self.check("alloc", bs, kind, result, a_out)
                self.row("alloc", bs, "out: " + kind if kind != "list" else "list result",
                         cell)

            # free_indices: the slots of bs pages, after an untimed alloc of them
            for kind in args.kinds:
                # the indices an alloc(n) gives in this state (the same every time: a paged
                # pool's freed pages go back to the front of its free list, ascending)
                assert fast.kvp_pool_alloc(h, n, aa, n) == 0
                undo_free(aa, n)
                assert fast.kvp_pool_alloc(h, n, aa, n) == 0
                undo_free(aa, n)
                indices = make(kind, a_out)
                if kind == "list":
                    target = array.array("q", [0]) * n  # the untimed alloc writes here
                else:
                    target = indices
                ta = c_address(kind, target)

                def setup():
                    status = fast.kvp_pool_alloc(h, n, ta, n)
                    assert status == 0, self.lib.last_error_message()

                def py_run(warmup, reps, indices=indices):
                    return py_loop(partial(pool.free_indices, indices), setup, None, None,
                                   warmup, reps)

                def c_run(warmup, reps):
                    return c_loop(H.ovh_free_indices, (f, vp(h), vp(aa), size_t(n)), warmup,
                                  reps)

                try:
                    cell, _ = self.measure(c_run, py_run)
                except TypeError as e:
                    self.unsupported("free_indices", bs, kind, e)
                    undo_free(ta, n)
                    continue
                if kind == "list":
                    assert list(target) == indices  # the list freed what the alloc gave
                self.row("free_indices", bs, kind, cell)
            assert pool.available_size() == args.pool_size
        pool.close()

    # ---- device pool ----

    def device_pool(self):
        args = self.args
        dev = torch.device("cuda", args.gpu)
        torch.cuda.set_device(dev)
        cuda = ctypes.CDLL("libcuda.so.1")
        self.fns.sync = address(cuda.cuStreamSynchronize)
        pool = kvpool.Pool(args.pool_size, page_size=PAGE, backend="cuda", device=args.gpu,
                           lib=self.lib)
        h = pool.handle
        f = ctypes.byref(self.fns)
        H = self.harness
        fast = self.fast
        # a stream of our own, made PyTorch's current one: what stream=None means
        stream = torch.cuda.Stream(dev)
        torch.cuda.set_stream(stream)
        sh = stream.cuda_stream
        drain = stream.synchronize
        kinds = [k for k in args.kinds if k != "memoryview"] if args.kinds else []

        def d(values):
            return torch.tensor(values, dtype=torch.int64, device=dev)

        for bs in args.batch_sizes:
            self.current = self.rounds(bs)
            ext = bs * TOKENS
            prefix_d, seq_d, last_d = d([0] * bs), d([TOKENS] * bs), d([-1] * bs)
            out_d = torch.zeros(ext, dtype=torch.int64, device=dev)
            c_out_d = torch.zeros(ext, dtype=torch.int64, device=dev)
            ph, sh_ = array.array("q", [0] * bs), array.array("q", [TOKENS] * bs)
            pha, sha = ph.buffer_info()[0], sh_.buffer_info()[0]

            for kind in kinds:
                prefix_h, seq_h = make(kind, ph), make(kind, sh_)

                def py_run(warmup, reps, prefix_h=prefix_h, seq_h=seq_h):
                    return py_loop(
                        partial(pool.alloc_extend_async, prefix_d, seq_d, last_d, out_d,
                                prefix_lens_host=prefix_h, seq_lens_host=seq_h,
                                extend_num_tokens=ext),
                        None,
                        lambda _: fast.kvp_pool_free_segment_async(h, out_d.data_ptr(), ext, 0,
                                                                   ext, sh),
                        drain, warmup, reps)

                def c_run(warmup, reps):
                    return c_loop(H.ovh_alloc_extend_async,
                                  (f, vp(h), vp(pha), vp(sha), vp(prefix_d.data_ptr()),
                                   vp(seq_d.data_ptr()), vp(last_d.data_ptr()), size_t(bs),
                                   size_t(ext), vp(c_out_d.data_ptr()), size_t(ext), vp(sh)),
                                  warmup, reps)

                def ctypes_run(warmup, reps):
                    fn = fast.kvp_pool_alloc_extend_async
                    args_ = (h, pha, sha, prefix_d.data_ptr(), seq_d.data_ptr(),
                             last_d.data_ptr(), bs, ext, out_d.data_ptr(), ext, sh)
                    return py_loop(partial(fn, *args_), None,
                                   lambda _: fast.kvp_pool_free_segment_async(
                                       h, out_d.data_ptr(), ext, 0, ext, sh),
                                   drain, warmup, reps)

                cell, result = self.measure(c_run, py_run,
                                            ctypes_run if kind == kinds[0] else None)
                drain()
                self.check("alloc_extend_async", bs, kind, result, c_out_d)
                self.row("alloc_extend_async", bs, "host copies: " + kind, cell)
                if kind == kinds[0]:
                    self.row("alloc_extend_async", bs, "ctypes (prebuilt ints)",
                             _ctypes_cell(cell))
                if self.has_native(kind):
                    cell, result = self.measure(c_run, self.general(py_run))
                    drain()
                    self.check("alloc_extend_async", bs, kind, result, c_out_d)
                    self.row("alloc_extend_async", bs, "host copies: " + kind +
                             " (general path)", cell)
                if kind != "list" and hasattr(pool, "prepare_alloc_extend_async"):
                    prepared = pool.prepare_alloc_extend_async(
                        prefix_d, seq_d, last_d, out_d, prefix_lens_host=prefix_h,
                        seq_lens_host=seq_h)

                    def py_run_prepared(warmup, reps, call=partial(prepared, bs, ext)):
                        return py_loop(call, None,
                                       lambda _: fast.kvp_pool_free_segment_async(
                                           h, out_d.data_ptr(), ext, 0, ext, sh),
                                       drain, warmup, reps)
                    cell, _ = self.measure(c_run, py_run_prepared)
                    drain()
                    self.check("alloc_extend_async", bs, kind, out_d, c_out_d)
                    self.row("alloc_extend_async", bs, "host copies: " + kind + " (prepared)",
                             cell)

            # decode: bs requests of one token each
            first_d = torch.zeros(bs, dtype=torch.int64, device=dev)
            ones = array.array("q", [1] * bs)
            ones_d = d([1] * bs)
            st = fast.kvp_pool_alloc_extend_async(h, pha, ones.buffer_info()[0],
                                                  prefix_d.data_ptr(), ones_d.data_ptr(),
                                                  last_d.data_ptr(), bs, bs,
                                                  first_d.data_ptr(), bs, sh)
            assert st == 0, self.lib.last_error_message()
            drain()
            seq2_h = array.array("q", [2] * bs)
            seq2_d = d([2] * bs)
            dout_d = torch.zeros(bs, dtype=torch.int64, device=dev)
            c_dout_d = torch.zeros(bs, dtype=torch.int64, device=dev)
            for kind in kinds:
                seq_h = make(kind, seq2_h)

                def py_run(warmup, reps, seq_h=seq_h):
                    return py_loop(
                        partial(pool.alloc_decode_async, seq2_d, first_d, dout_d,
                                seq_lens_host=seq_h),
                        None,
                        lambda _: fast.kvp_pool_rewind_async(h, first_d.data_ptr(), bs, sh),
                        drain, warmup, reps)

                def c_run(warmup, reps):
                    return c_loop(H.ovh_alloc_decode_async,
                                  (f, vp(h), vp(seq2_h.buffer_info()[0]),
                                   vp(seq2_d.data_ptr()), vp(first_d.data_ptr()), size_t(bs),
                                   vp(c_dout_d.data_ptr()), size_t(bs), vp(sh)), warmup, reps)

                cell, result = self.measure(c_run, py_run)
                drain()
                self.check("alloc_decode_async", bs, kind, result, c_dout_d)
                self.row("alloc_decode_async", bs, "host copies: " + kind, cell)
                if self.has_native(kind):
                    cell, result = self.measure(c_run, self.general(py_run))
                    drain()
                    self.check("alloc_decode_async", bs, kind, result, c_dout_d)
                    self.row("alloc_decode_async", bs, "host copies: " + kind +
                             " (general path)", cell)
                if kind != "list" and hasattr(pool, "prepare_alloc_decode_async"):
                    prepared = pool.prepare_alloc_decode_async(seq2_d, first_d, dout_d,
                                                               seq_lens_host=seq_h)

                    def py_run_prepared(warmup, reps, call=partial(prepared, bs)):
                        return py_loop(call, None,
                                       lambda _: fast.kvp_pool_rewind_async(
                                           h, first_d.data_ptr(), bs, sh),
                                       drain, warmup, reps)
                    cell, _ = self.measure(c_run, py_run_prepared)
                    drain()
                    self.check("alloc_decode_async", bs, kind, dout_d, c_dout_d)
                    self.row("alloc_decode_async", bs, "host copies: " + kind + " (prepared)",
                             cell)
            pool.clear_async()  # frees the decode's setup
            drain()

            # alloc_async and free_async: device tensors only
            n = bs * PAGE
            a_d = torch.zeros(n, dtype=torch.int64, device=dev)
            c_a_d = torch.zeros(n, dtype=torch.int64, device=dev)
            cell, result = self.measure(
                lambda warmup, reps: c_loop(H.ovh_alloc_async,
                                            (f, vp(h), size_t(n), vp(c_a_d.data_ptr()),
                                             size_t(n), vp(sh)), warmup, reps),
                lambda warmup, reps: py_loop(
                    partial(pool.alloc_async, n, a_d), None,
                    lambda _: fast.kvp_pool_free_segment_async(h, a_d.data_ptr(), n, 0, n,
                                                               sh),
                    drain, warmup, reps))
            drain()
            self.check("alloc_async", bs, "cuda", result, c_a_d)
            self.row("alloc_async", bs, "out: cuda tensor", cell)

            def setup():
                st = fast.kvp_pool_alloc_async(h, n, a_d.data_ptr(), n, sh)
                assert st == 0, self.lib.last_error_message()

            cell, _ = self.measure(
                lambda warmup, reps: c_loop(H.ovh_free_async,
                                            (f, vp(h), vp(c_a_d.data_ptr()), size_t(n),
                                             vp(sh)), warmup, reps),
                lambda warmup, reps: py_loop(partial(pool.free_async, a_d), setup,
                                             lambda _: drain(), None, warmup, reps))
            drain()
            self.row("free_async", bs, "cuda tensor", cell)
            pool.check_device()
            assert pool.available_size_bound() == (args.pool_size, True), \
                pool.available_size_bound()
        pool.close()

    def unsupported(self, op, bs, kind, error):
        """A kind the package refuses (an older revision): the C loop's slots are freed by
        the loop itself; the row says so."""
        print(f"  {op} bs={bs} {kind}: refused by this package ({error})", file=sys.stderr)
        self.rows.append(dict(op=op, bs=bs, kind=kind, c=float("nan"), py=float("nan"),
                              delta=float("nan"), ratio=float("nan"), ctypes=float("nan"),
                              note="refused"))

    def free_result(self, h, kind, result):
        """Frees the slots of a Python call's result (the untimed undo)."""
        if isinstance(result, list):
            keep = array.array("q", result)
            address_, n = keep.buffer_info()
        elif isinstance(result, memoryview):
            address_, n = result.obj.buffer_info()[0], len(result)
        elif isinstance(result, array.array):
            address_, n = result.buffer_info()
        elif torch is not None and isinstance(result, torch.Tensor):
            address_, n = result.data_ptr(), result.numel()
        else:
            address_, n = result.__array_interface__["data"][0], len(result)
        status = self.fast.kvp_pool_free_indices(h, address_, n)
        assert status == 0, self.lib.last_error_message()

    def check(self, op, bs, kind, result, c_out):
        """The Python call's result equals the C loop's output of the same call."""
        want = as_list(c_out)
        got = as_list(result)
        if got != want:
            raise AssertionError(f"{op} bs={bs} {kind}: Python result differs from C "
                                 f"(first {got[:4]} vs {want[:4]})")

    def timer_floor(self):
        self.current = (self.args.rounds, self.args.reps)
        cell, _ = self.measure(
            lambda warmup, reps: c_loop(self.harness.ovh_timer, (), warmup, reps),
            lambda warmup, reps: py_loop(partial(int), None, None, None, warmup, reps))
        self.row("(timer floor)", 0, "C: nothing; Python: int()", cell)

    def report(self, out):
        args = self.args
        py = sys.version.split()[0]
        libs = [f"Python {py}", f"numpy {numpy.__version__}" if numpy else "no numpy",
                f"torch {torch.__version__}" if torch else "no torch"]
        print(f"kvpool Python overhead, {'device' if self.device else 'host'} pool "
              f"(page size {PAGE}, int64); {', '.join(libs)}; library {self.lib.path}; "
              f"{args.rounds} rounds x {args.reps} calls per side (x1/4 at bs >= 4096), "
              f"medians in us", file=out)
        print(file=out)
        print("| operation | bs | Python input | C µs | Python µs | delta µs | ratio |",
              file=out)
        print("|---|---:|---|---:|---:|---:|---:|", file=out)
        for r in self.rows:
            if r["note"] == "refused":
                print(f"| {r['op']} | {r['bs']} | {r['kind']} | | refused by this package | "
                      "| |", file=out)
                continue
            print(f"| {r['op']} | {r['bs']} | {r['kind']} | {r['c']:.2f} | {r['py']:.2f} | "
                  f"{r['delta']:+.2f} | {r['ratio']:.2f} |", file=out)

    def csv(self, path):
        with open(path, "w", encoding="utf-8") as f:
            f.write("op,bs,kind,c_us,python_us,delta_us,ratio\n")
            for r in self.rows:
                f.write(f"{r['op']},{r['bs']},{r['kind']},{r['c']:.3f},{r['py']:.3f},"
                        f"{r['delta']:.3f},{r['ratio']:.3f}\n")


def _ctypes_cell(cell):
    """The ctypes-floor samples of ``cell`` as a cell of their own (C column unchanged)."""
    floor = Cell()
    floor.c, floor.py = cell.c, cell.ctypes
    return floor


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--lib", help="libkvpool.so (default: as kvpool.load() finds it)")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                   help="cpu: a host pool; cuda: a device pool and its *_async methods")
    p.add_argument("--gpu", type=int, default=0, help="CUDA device ordinal (--device cuda)")
    p.add_argument("--batch-sizes", default="1,64,256,4096")
    p.add_argument("--kinds", default=None,
                   help="host input kinds (default: list,array,memoryview,numpy,torch; "
                        "those installed)")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--reps", type=int, default=400, help="timed calls per round and side")
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--defaults", action="store_true",
                   help="also time the calls without out (rows '(no out)') and alloc_extend "
                        "without out and extend_num_tokens ('(no out, no ext)')")
    p.add_argument("--pool-size", type=int, default=1 << 20)
    p.add_argument("--cc", default=os.environ.get("CC", "cc"))
    p.add_argument("--csv", help="also write the table as CSV here")
    p.add_argument("--md", help="also write the table (markdown) here")
    p.add_argument("--package", help="the directory holding the kvpool package to time "
                   "(default: this tree's python/)")
    p.add_argument("--quick", action="store_true", help="smoke run (2 rounds of 20 calls)")
    args = p.parse_args()
    args.batch_sizes = [int(b) for b in args.batch_sizes.split(",")]
    available = ["list", "array", "memoryview"] + (["numpy"] if numpy else []) + \
        (["torch"] if torch else [])
    args.kinds = available if args.kinds is None else args.kinds.split(",")
    for kind in args.kinds:
        if kind not in available:
            p.error(f"input kind {kind} is not available here (have: {', '.join(available)})")
    if args.quick:
        args.rounds, args.reps, args.warmup = 2, 20, 3
    if args.device == "cuda" and (torch is None or not torch.cuda.is_available()):
        p.error("--device cuda needs PyTorch with a CUDA device")
    if not numpy:
        print("numpy is not installed: no numpy rows", file=sys.stderr)
    if not torch:
        print("torch is not installed: no torch rows", file=sys.stderr)
    bench = Bench(args)
    try:
        bench.timer_floor()
        if bench.device:
            bench.device_pool()
        else:
            bench.host()
    finally:
        bench.close()
    bench.report(sys.stdout)
    if args.md:
        with open(args.md, "w", encoding="utf-8") as f:
            bench.report(f)
    if args.csv:
        bench.csv(args.csv)


if __name__ == "__main__":
    main()
