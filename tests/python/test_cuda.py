"""Tests of kvpool's device pools (KVP_BACKEND_CUDA) through python/kvpool, with PyTorch.

Run as

    KVPOOL_LIB=/abs/path/libkvpool.so python3 tests/python/test_cuda.py -v

on a machine with an NVIDIA GPU and PyTorch built with CUDA. Without PyTorch or without a
CUDA device every test is skipped, and unittest prints the reason.

The oracle is the host backend: the device pool must give the same slot indices as a host
pool of the same configuration for the same operations (include/kvpool.h). The library
itself never synchronizes; these tests do (torch.cuda.synchronize) before they read a
device output. KVPOOL_CUDA_STEPS sets the operations per lockstep run (default 1000).
"""

import array
import collections
import importlib.util
import os
import random
import sys
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, os.pardir, os.pardir))
sys.path.insert(0, os.path.join(ROOT, "python"))

import kvpool as kvp  # noqa: E402

try:
    import torch
except (ImportError, OSError):  # not installed, or installed without its native libraries
    torch = None

if torch is None:
    SKIP_REASON = "PyTorch is not installed"
elif not torch.cuda.is_available():
    SKIP_REASON = "no CUDA device (torch.cuda.is_available() is False)"
else:
    SKIP_REASON = None

DEVICE = 0  # the pools' device
LIB = None
STEPS = int(os.environ.get("KVPOOL_CUDA_STEPS", "1000"))
SENTINEL = -7  # fills preallocated outputs: what no call wrote keeps it


def setUpModule():
    global LIB
    if SKIP_REASON is not None:
        return  # every test is skipped; nothing to load
    path = os.environ.get("KVPOOL_LIB")
    if not path:
        raise RuntimeError("set KVPOOL_LIB to the path of libkvpool.so")
    LIB = kvp.load(path)


@unittest.skipUnless(SKIP_REASON is None, SKIP_REASON or "")
class CudaTestCase(unittest.TestCase):
    """Each test runs on its own non-default stream of DEVICE, made current (so stream=None
    means it); pools and snapshots are closed after a final synchronize."""

    def setUp(self):
        self.dev = torch.device("cuda", DEVICE)
        self.stream = torch.cuda.Stream(self.dev)
        scope = torch.cuda.stream(self.stream)
        scope.__enter__()
        self.addCleanup(scope.__exit__, None, None, None)

    def device_pool(self, size, page_size=1, index_type=kvp.INDEX_TYPE_I64, need_sort=False):
        pool = kvp.Pool(size, page_size, index_type=index_type, need_sort=need_sort,
                        backend="cuda", device=DEVICE)
        self.keep(pool)
        return pool

    def host_pool(self, size, page_size=1, index_type=kvp.INDEX_TYPE_I64, need_sort=False):
        pool = kvp.Pool(size, page_size, index_type=index_type, need_sort=need_sort)
        self.addCleanup(pool.close)
        return pool

    def keep(self, owner):
        """Closes a pool or snapshot at the end of the test, once the device is idle (cleanups
        run last-in first-out: the synchronize first)."""
        self.addCleanup(owner.close)
        self.addCleanup(torch.cuda.synchronize, self.dev)
        return owner

    def dtype(self, pool):
        return getattr(torch, pool.index_dtype)

    def idx(self, pool, values):
        """A device tensor of the pool's index dtype."""
        return torch.tensor(values, dtype=self.dtype(pool), device=self.dev)

    def i64(self, values):
        return torch.tensor(values, dtype=torch.int64, device=self.dev)

    def empty_out(self, pool, n):
        return torch.full((n,), SENTINEL, dtype=self.dtype(pool), device=self.dev)

    def assertKvpError(self, status_name, call, *args, **kwargs):
        with self.assertRaises(kvp.KvpError) as ctx:
            call(*args, **kwargs)
        err = ctx.exception
        self.assertEqual(err.name, "KVP_STATUS_" + status_name, str(err))
        self.assertTrue(err.message, "empty kvp_last_error_message")
        return err


# ---- (a) lockstep with a host pool ----------------------------------------------------------


class Lockstep:
    """A host pool and a device pool of one configuration, driven by the same random, valid
    operations: batched alloc_extend (new and continuing requests), alloc_decode, alloc,
    frees by index, by page id and by row segment (whole rows and page-aligned tails), free
    groups, merges, snapshots and clears. The device runs several operations back to back;
    at random points the test synchronizes and compares every device output, element by
    element, with the host pool's (including the untouched tail of a preallocated out)."""

    def __init__(self, test, seed, size, page_size, index_type, need_sort):
        self.t = test
        self.rng = random.Random(seed)
        self.ps = page_size
        self.host = test.host_pool(size, page_size, index_type, need_sort)
        self.gpu = test.device_pool(size, page_size, index_type, need_sort)
        self.rows = {}  # request id -> its slots (a req_to_token row), as the host pool gave
        self.next_id = 0
        self.in_group = False
        self.saved = None  # (host snapshot, device snapshot, rows, next_id)
        self.pending = []  # (op number, what, device tensor, expected list)
        self.ops = 0
        self.shortages = 0
        self.history = collections.deque(maxlen=12)  # the last calls, for failure messages
        self.max_grow = max(4, size // 16)
        self.where = (f"page_size {page_size} index {test.dtype(self.gpu)} need_sort "
                      f"{need_sort} seed {seed}")

    def fail(self, message):
        self.t.fail(f"op {self.ops} ({self.where}): {message}\n  last calls:\n    " +
                    "\n    ".join(self.history))

    # ---- plumbing ----

    def stream(self):
        """The test's stream, passed each way the binding takes it."""
        return self.rng.choice([None, self.t.stream, self.t.stream.cuda_stream])

    def host_lengths(self, values):
        """A host copy as a list, a CPU tensor (the package converts both) or an array.array
        (the library reads it: kvp_python_pool_*_async)."""
        pick = self.rng.random()
        if pick < 1 / 3:
            return list(values)
        if pick < 2 / 3:
            return torch.tensor(values)
        return array.array("q", values)

    def out(self, n):
        """None (the call allocates) or a preallocated tensor with spare room."""
        if self.rng.random() < 0.5:
            return None
        return self.t.empty_out(self.gpu, n + self.rng.randint(0, 3))

    def both(self, what, host_call, dev_call):
        """Runs both calls; they must fail alike (only OUT_OF_SLOTS in this workload).
        Returns (host result, device result), None for a failure."""
        self.history.append(f"op {self.ops}: {what}")
        results, errors = [], []
        for call in (host_call, dev_call):
            try:
                results.append(call())
                errors.append(None)
            except kvp.KvpError as e:
                results.append(None)
                errors.append(e)
        names = [None if e is None else e.name for e in errors]
        if names[0] != names[1]:
            self.fail(f"{what}: host {errors[0] or 'OK'}, device {errors[1] or 'OK'}")
        if names[0] not in (None, "KVP_STATUS_OUT_OF_SLOTS"):
            self.fail(f"{what}: unexpected {errors[0]}")
        if names[0] is not None:
            self.shortages += 1
        return results

    def expect(self, what, out, written, tensor):
        """After the next synchronize, `tensor` (the whole out buffer, or the returned view)
        must hold `written` followed by SENTINELs."""
        if tensor is None:
            return
        expected = list(written) + [SENTINEL] * (tensor.numel() - len(written))
        self.pending.append((self.ops, what, tensor, expected))

    def settle(self):
        """Before an allocation: the device pool's free count must be the host's. It is a
        lower bound while a paged free by index is in flight; once the stream has passed it
        (here: after a synchronize) it is exact without any further wait."""
        n, exact = self.gpu.available_size_bound()
        if not exact:
            torch.cuda.synchronize(self.t.dev)
            self.history.append("(synchronize)")
            n, exact = self.gpu.available_size_bound()
            if not exact:
                self.fail(f"available_size_bound is ({n}, exact=False) after a synchronize; "
                          f"host {self.host.available_size()}")
        if n != self.host.available_size():
            self.fail(f"device pool has {n} free slots, host pool "
                      f"{self.host.available_size()}")

    def check_bound(self):
        n, exact = self.gpu.available_size_bound()
        h = self.host.available_size()
        if n > h or (exact and n != h):
            self.fail(f"available_size_bound ({n}, exact={exact}) vs host {h}")

    def flush(self):
        """Synchronizes and compares everything enqueued since the last flush."""
        torch.cuda.synchronize(self.t.dev)
        self.history.append("(synchronize)")
        for op, what, tensor, expected in self.pending:
            got = tensor.tolist()
            if got != expected:
                diff = next(i for i, (g, e) in enumerate(zip(got, expected)) if g != e)
                self.fail(f"op {op} {what}: element {diff} is {got[diff]}, host pool says "
                          f"{expected[diff]}\n  device: {got}\n  host:   {expected}")
        self.pending.clear()
        self.gpu.check_device()
        n, exact = self.gpu.available_size_bound()
        if not exact or n != self.host.available_size():
            self.fail(f"after a synchronize: available_size_bound ({n}, {exact}), host "
                      f"{self.host.available_size()}")
        host_info, dev_info = self.host.info().as_dict(), self.gpu.info().as_dict()
        for key in ("backend", "device"):
            host_info.pop(key)
            dev_info.pop(key)
        if host_info != dev_info:
            self.fail(f"info differs: host {host_info}, device {dev_info}")
        if self.host.stats().pages_in_use != self.gpu.stats().pages_in_use:
            self.fail("stats().pages_in_use differs")

    # ---- operations ----

    def extend(self):
        ids, prefix, seq, last = [], [], [], []
        for _ in range(self.rng.randint(1, 8)):
            grow = self.rng.randint(1, self.max_grow // 4 + 1)
            if self.rows and self.rng.random() < 0.5:
                rid = self.rng.choice(list(self.rows))
                if rid in ids:
                    continue
                row = self.rows[rid]
                ids.append(rid)
                prefix.append(len(row))
                seq.append(len(row) + grow)
                last.append(row[-1] if row else -1)
            else:
                ids.append(None)
                prefix.append(0)
                seq.append(grow)
                last.append(-1)
        total = sum(s - p for s, p in zip(seq, prefix))
        # given (the library's entry point takes buffer host copies only then) or summed
        ext = total if self.rng.random() < 0.5 else None
        self.settle()
        out = self.out(total)
        t = self.t
        host, dev = self.both(
            f"alloc_extend prefix_lens={prefix} seq_lens={seq} last_loc={last}",
            lambda: self.host.alloc_extend(prefix, seq, last),
            lambda: self.gpu.alloc_extend_async(
                t.i64(prefix), t.i64(seq), t.idx(self.gpu, last), out,
                prefix_lens_host=self.host_lengths(prefix),
                seq_lens_host=self.host_lengths(seq), extend_num_tokens=ext,
                stream=self.stream()))
        if host is None:
            self.expect("alloc_extend (refused)", out, [], out)
            return
        self.expect("alloc_extend", out, host, dev if out is None else out)
        pos = 0
        for rid, p, s in zip(ids, prefix, seq):
            slots = host[pos:pos + s - p]
            pos += s - p
            if rid is None:
                rid, self.next_id = self.next_id, self.next_id + 1
                self.rows[rid] = []
            self.rows[rid].extend(slots)

    def decode(self):
        ids = [r for r in self.rows if self.rows[r] and self.rng.random() < 0.6]
        if not ids:
            return
        seq = [len(self.rows[r]) + 1 for r in ids]
        last = [self.rows[r][-1] for r in ids]
        self.settle()
        out = self.out(len(ids))
        t = self.t
        host, dev = self.both(
            f"alloc_decode seq_lens={seq} last_loc={last}",
            lambda: self.host.alloc_decode(seq, last),
            lambda: self.gpu.alloc_decode_async(
                t.i64(seq), t.idx(self.gpu, last), out, seq_lens_host=self.host_lengths(seq),
                stream=self.stream()))
        if host is None:
            self.expect("alloc_decode (refused)", out, [], out)
            return
        self.expect("alloc_decode", out, host, dev if out is None else out)
        for r, slot in zip(ids, host):
            self.rows[r].append(slot)

    def alloc(self):
        n = self.rng.randint(0, self.max_grow // self.ps // 2 + 1) * self.ps
        self.settle()
        out = self.out(n)
        host, dev = self.both(
            f"alloc {n}",
            lambda: self.host.alloc(n),
            lambda: self.gpu.alloc_async(n, out, stream=self.stream()))
        if host is None:
            self.expect("alloc (refused)", out, [], out)
            return
        self.expect("alloc", out, host, dev if out is None else out)
        if host:
            rid, self.next_id = self.next_id, self.next_id + 1
            self.rows[rid] = list(host)

    def finish(self):
        """A request leaves: its whole row is freed, by index, by page id or by segment."""
        if not self.rows:
            return
        rid = self.rng.choice(list(self.rows))
        row = self.rows.pop(rid)
        if not row:
            return
        how = self.rng.random()
        t = self.t
        if how < 0.4:
            self.both(f"free (by index) of {len(row)} slots from {row[0]}",
                      lambda: self.host.free_indices(row),
                      lambda: self.gpu.free_async(t.idx(self.gpu, row), stream=self.stream()))
        elif how < 0.6:
            pages = list(dict.fromkeys(s // self.ps for s in row))  # each page once, in order
            self.both(f"free_pages {pages}", lambda: self.host.free_pages(pages),
                      lambda: self.gpu.free_pages_async(t.idx(self.gpu, pages),
                                                        stream=self.stream()))
        else:
            # the row as a slice of a 2-D req_to_token table, longer than the request
            table = t.empty_out(self.gpu, 2 * (len(row) + 8)).view(2, -1)
            table[1, :len(row)] = t.idx(self.gpu, row)
            self.both(f"free_segment of a {len(row)}-slot row from {row[0]}",
                      lambda: self.host.free_segment(row, 0, len(row)),
                      lambda: self.gpu.free_segment_async(table[1], 0, len(row),
                                                          stream=self.stream()))

    def truncate(self):
        """Frees a page-aligned tail of a row (free_segment with start_pos > 0)."""
        if not self.rows:
            return
        rid = self.rng.choice(list(self.rows))
        row = self.rows[rid]
        if not row:
            return
        start = self.rng.randrange(len(row)) // self.ps * self.ps
        t = self.t
        self.both(f"free_segment row[{start}:{len(row)}] (row from {row[0]})",
                  lambda: self.host.free_segment(row, start, len(row) - start),
                  lambda: self.gpu.free_segment_async(t.idx(self.gpu, row), start,
                                                      len(row) - start, stream=self.stream()))
        del row[start:]

    def group(self):
        if self.in_group:
            self.both("free_group_end", self.host.free_group_end,
                      lambda: self.gpu.free_group_end_async(self.stream()))
        else:
            self.both("free_group_begin", self.host.free_group_begin,
                      self.gpu.free_group_begin)
        self.in_group = not self.in_group

    def merge(self):
        self.both("merge_and_sort_free", self.host.merge_and_sort_free,
                  lambda: self.gpu.merge_and_sort_free_async(self.stream()))

    def snapshot(self):
        """Backs up both pools (outside a free group), or restores the last backup."""
        if self.in_group:
            return
        if self.saved is None or self.rng.random() < 0.5:
            host, dev = self.both("backup_state", self.host.backup_state,
                                  lambda: self.gpu.backup_state_async(self.stream()))
            self.t.addCleanup(host.close)
            self.t.keep(dev)
            self.saved = (host, dev, {r: list(row) for r, row in self.rows.items()},
                          self.next_id)
        else:
            host, dev, rows, next_id = self.saved
            self.both("restore_state", lambda: self.host.restore_state(host),
                      lambda: self.gpu.restore_state_async(dev, self.stream()))
            self.rows = {r: list(row) for r, row in rows.items()}
            self.next_id = max(self.next_id, next_id)

    def clear(self):
        self.both("clear", self.host.clear, lambda: self.gpu.clear_async(self.stream()))
        self.rows = {}
        self.in_group = False

    def step(self):
        x = self.rng.random()
        op = (self.extend if x < 0.3 else self.decode if x < 0.52 else self.finish
              if x < 0.7 else self.truncate if x < 0.76 else self.alloc if x < 0.82
              else self.group if x < 0.9 else self.merge if x < 0.94 else self.snapshot
              if x < 0.99 else self.clear)
        op()
        self.ops += 1
        self.check_bound()
        if self.rng.random() < 0.25:
            self.flush()

    def check_digest(self):
        """The device pool's state digest (digest_async) equals the host pool's."""
        self.flush()
        device = kvp.digest_value(self.gpu.digest_async())
        if device != self.host.digest():
            self.fail(f"state digest: device {device:#x}, host {self.host.digest():#x}")

    def drain(self):
        """Ends an open group, frees every row, and checks the pool is full on both (and the
        two pools' digests before and after)."""
        self.check_digest()
        if self.in_group:
            self.group()
        while self.rows:
            self.finish()
            self.ops += 1
        self.flush()
        if self.host.available_size() != self.host.info().size:
            self.fail("host pool is not full after freeing every row")
        self.check_digest()


class TestLockstep(CudaTestCase):
    def run_configs(self, configs):
        total = shortages = 0
        for page_size, index_type, need_sort, size in configs:
            with self.subTest(page_size=page_size, index_type=index_type, need_sort=need_sort):
                run = Lockstep(self, seed=1000 * page_size + 10 * index_type + need_sort,
                               size=size, page_size=page_size, index_type=index_type,
                               need_sort=need_sort)
                for _ in range(STEPS):
                    run.step()
                run.drain()
                total += run.ops
                shortages += run.shortages
        # the workload must have exercised the shortage path too
        self.assertGreater(shortages, 0)
        return total

    def test_token_pool(self):
        self.run_configs([(1, t, s, 256) for t in (kvp.INDEX_TYPE_I64, kvp.INDEX_TYPE_I32)
                          for s in (False, True)])

    def test_paged_16(self):
        self.run_configs([(16, t, s, 16 * 64) for t in (kvp.INDEX_TYPE_I64, kvp.INDEX_TYPE_I32)
                          for s in (False, True)])

    def test_paged_64(self):
        self.run_configs([(64, t, s, 64 * 48) for t in (kvp.INDEX_TYPE_I64, kvp.INDEX_TYPE_I32)
                          for s in (False, True)])

    def test_info(self):
        pool = self.device_pool(64, 4, index_type=kvp.INDEX_TYPE_I32, need_sort=True)
        self.assertTrue(pool.is_device)
        self.assertEqual(pool.device, DEVICE)
        self.assertEqual(pool.info().as_dict(), {
            "size": 64, "kv_rows": 68, "padding_slot": 0, "page_size": 4, "num_pages": 16,
            "index_type": kvp.INDEX_TYPE_I32, "backend": kvp.BACKEND_CUDA, "device": DEVICE,
            "need_sort": True, "in_free_group": False})
        for device in (f"cuda:{DEVICE}", torch.device("cuda", DEVICE)):
            other = kvp.Pool(64, 4, backend=kvp.BACKEND_CUDA, device=device)
            self.keep(other)
            self.assertEqual(other.device, DEVICE)


# ---- (b) the stream stays PyTorch's -------------------------------------------------------


class TestStreamSharing(CudaTestCase):
    def test_torch_uses_the_slots_in_stream_order(self):
        """kvpool's output feeds PyTorch ops on the same stream with no synchronize in
        between, and the stream (and the device) stays healthy for PyTorch afterwards."""
        pool = self.device_pool(1024, 16)
        host = self.host_pool(1024, 16)
        prefix, seq = [0, 0, 0], [37, 5, 16]
        slots = pool.alloc_extend_async(self.i64(prefix), self.i64(seq),
                                        self.idx(pool, [-1, -1, -1]), prefix_lens_host=prefix,
                                        seq_lens_host=seq)
        kv = torch.zeros(pool.info().kv_rows, dtype=torch.float32, device=self.dev)
        values = torch.arange(1, slots.numel() + 1, dtype=torch.float32, device=self.dev)
        kv.index_put_((slots,), values)  # ordered after kvpool's kernel by the stream
        gathered = kv[slots]
        pool.free_async(slots[37:42])  # the second request's page, behind PyTorch's work
        decode = pool.alloc_decode_async(self.i64([38]), slots[36:37], seq_lens_host=[38])
        kv.index_fill_(0, decode, 100.0)
        # PyTorch work after kvpool's, on the same stream
        x = torch.arange(1000, dtype=torch.int64, device=self.dev)
        total = (x * 2).sum()
        self.assertEqual(torch.cuda.current_stream(self.dev).cuda_stream,
                         self.stream.cuda_stream)
        torch.cuda.synchronize(self.dev)
        expected = host.alloc_extend(prefix, seq, [-1, -1, -1])
        self.assertEqual(slots.tolist(), expected)
        self.assertEqual(gathered.tolist(), [float(v) for v in range(1, 59)])
        host.free_indices(expected[37:42])
        self.assertEqual(decode.tolist(), host.alloc_decode([38], [expected[36]]))
        self.assertEqual(kv[decode].tolist(), [100.0])
        self.assertEqual(total.item(), 999 * 1000)
        pool.check_device()
        # and a fresh PyTorch op on the stream still runs and gives the right answer
        y = torch.full((4096,), 3, dtype=torch.int64, device=self.dev).cumsum(0)
        self.assertEqual(y[-1].item(), 3 * 4096)

    def test_stream_arguments(self):
        """stream=None (the current stream), a torch.cuda.Stream, its raw handle, the
        default stream, and out=None allocated on a stream that is not the current one."""
        pool = self.device_pool(256, 1)
        host = self.host_pool(256, 1)
        side = torch.cuda.Stream(self.dev)
        outs = [pool.alloc_async(3)]
        outs.append(pool.alloc_async(3, stream=self.stream))
        outs.append(pool.alloc_async(3, stream=self.stream.cuda_stream))
        # calls on one pool must be ordered on the device: events order the streams
        ev = torch.cuda.Event()
        ev.record(self.stream)
        side.wait_event(ev)
        outs.append(pool.alloc_async(3, stream=side))  # out allocated on `side`
        outs.append(pool.alloc_async(3, stream=side.cuda_stream))  # ... as an ExternalStream
        ev2 = torch.cuda.Event()
        ev2.record(side)
        default = torch.cuda.default_stream(self.dev)
        default.wait_event(ev2)
        outs.append(pool.alloc_async(3, stream=default))
        outs.append(pool.alloc_async(3, stream=0))  # NULL: the legacy default stream
        torch.cuda.synchronize(self.dev)
        self.assertEqual([o.tolist() for o in outs], [host.alloc(3) for _ in outs])
        with self.assertRaises(TypeError):
            pool.clear_async(stream="current")

    def test_current_stream_follows_torch(self):
        """stream=None is PyTorch's current stream at each call (read through
        torch._C._cuda_getCurrentRawStream after the first call)."""
        pool = self.device_pool(64, 4)
        for _ in range(2):
            self.assertEqual(pool._stream_handle(None), self.stream.cuda_stream)
        side = torch.cuda.Stream(self.dev)
        with torch.cuda.stream(side):
            self.assertEqual(pool._stream_handle(None), side.cuda_stream)
        self.assertEqual(pool._stream_handle(None), self.stream.cuda_stream)

    def test_host_copies_of_every_kind(self):
        """The host copies of the lengths may be lists, array.array, numpy arrays (where
        installed) or CPU tensors: the same slots, with the library's Python entry points
        (which read the buffers: array, numpy) and without them (the general path). An out of
        exactly the written length is returned itself (no slice), a longer one as out[:k]."""
        self.assertIsNotNone(LIB.python, "the library's Python entry points did not load")
        # The general path first: a type's first call in a process takes it (and remembers
        # the type's handler), so the native round sees every buffer kind as the engine's
        # second and later calls do.
        for native in (None, LIB.python):
            with self.subTest(path="native" if native is not None else "general"):
                saved, LIB.python = LIB.python, native
                try:
                    calls = self.spy_native(saved)
                    self.check_host_copies_of_every_kind()
                finally:
                    LIB.python = saved
                buffers = 2 if numpy_installed() else 1  # array (and numpy) kinds
                want = [("kvp_python_pool_alloc_extend_async", 0),
                        ("kvp_python_pool_alloc_decode_async", 0)] * buffers
                self.assertEqual(calls, want if native is not None else [])

    def spy_native(self, native):
        """Wraps the async entry points of ``native`` (LIB.python) for the rest of the test;
        returns the list of (name, status) of every call."""
        calls = []
        for name in ("kvp_python_pool_alloc_extend_async", "kvp_python_pool_alloc_decode_async"):
            original = getattr(native, name)

            def wrapper(*args, _name=name, _original=original):
                status = _original(*args)
                calls.append((_name, status))
                return status

            setattr(native, name, wrapper)
            self.addCleanup(setattr, native, name, original)
        return calls

    def check_host_copies_of_every_kind(self):
        kinds = {"list": list, "array": lambda v: array.array("q", v),
                 "cpu tensor": lambda v: torch.tensor(v, dtype=torch.int64)}
        try:
            import numpy  # noqa: PLC0415
        except ImportError:
            pass
        else:
            kinds["numpy"] = lambda v: numpy.array(v, dtype=numpy.int64)
        host = self.host_pool(4096, 16)
        want_extend = host.alloc_extend([0, 0], [20, 5], [-1, -1])
        want_decode = host.alloc_decode([21, 6], [want_extend[19], want_extend[24]])
        for name, make in kinds.items():
            with self.subTest(kind=name):
                pool = self.device_pool(4096, 16)
                out = self.empty_out(pool, 25)
                got = pool.alloc_extend_async(
                    self.i64([0, 0]), self.i64([20, 5]), self.idx(pool, [-1, -1]), out,
                    prefix_lens_host=make([0, 0]), seq_lens_host=make([20, 5]),
                    extend_num_tokens=25)
                self.assertIs(got, out)
                out2 = self.empty_out(pool, 3)
                got2 = pool.alloc_decode_async(self.i64([21, 6]), out[[19, 24]], out2,
                                               seq_lens_host=make([21, 6]))
                self.assertEqual(got2.data_ptr(), out2.data_ptr())
                self.assertEqual(got2.numel(), 2)
                torch.cuda.synchronize(self.dev)
                self.assertEqual(got.tolist(), want_extend)
                self.assertEqual(got2.tolist(), want_decode)
                self.assertEqual(out2.tolist()[2], SENTINEL)
                pool.check_device()


def numpy_installed():
    return importlib.util.find_spec("numpy") is not None


# ---- (c) faults found on the device -------------------------------------------------------


class TestReqTable(CudaTestCase):
    """SGLang's req_to_token as a CUDA tensor: by-row calls on a device pool give the host
    pool's table, out_cache_loc and FlashInfer page tables (tests/cuda_rows.rs does the
    random workload; this is the PyTorch path)."""

    def test_rows_match_a_host_pool(self):
        for ps, dtype in [(1, torch.int32), (16, torch.int32), (4, torch.int64)]:
            with self.subTest(page_size=ps, table=dtype):
                dev, host = self.device_pool(4096, ps), self.host_pool(4096, ps)
                table_d = torch.zeros((8, 200), dtype=dtype, device=self.dev)
                table_h = torch.zeros((8, 200), dtype=dtype)
                rows, prefix, seq = [5, 2, 7], [0, 0, 0], [37, 1, 16]
                out_h = host.alloc_extend_rows(table_h, rows, prefix, seq)
                out_d = dev.alloc_extend_rows_async(
                    table_d, self.i64(rows), self.i64(prefix), self.i64(seq),
                    prefix_lens_host=prefix, seq_lens_host=seq)
                for step in range(20):
                    seq = [s + 1 for s in seq]
                    host.alloc_decode_rows(table_h, rows, seq, out_cache_loc=False)
                    dev.alloc_decode_rows_async(table_d, self.i64(rows), self.i64(seq),
                                                seq_lens_host=seq, out_cache_loc=False)
                indptr_d = torch.zeros(4, dtype=torch.int32, device=self.dev)
                pages = sum((s + ps - 1) // ps for s in seq)
                indices_d = torch.full((pages,), -1, dtype=torch.int32, device=self.dev)
                last_d = torch.zeros(3, dtype=torch.int32, device=self.dev)
                indptr_c, last_c = dev.page_table_async(
                    table_d, self.i64(rows), self.i64(seq), indptr_d, indices_d, last_d,
                    seq_lens_host=seq)
                indptr_h, indices_h, last_h = host.page_table(table_h, rows, seq)
                torch.cuda.synchronize(self.dev)
                dev.check_device()
                self.assertEqual(out_d.tolist(), list(out_h))
                self.assertTrue(torch.equal(table_d.cpu(), table_h))
                self.assertEqual(indptr_d.tolist(), list(indptr_h))
                self.assertEqual(list(indptr_c), list(indptr_h))
                self.assertEqual(last_d.tolist(), list(last_h))
                self.assertEqual(list(last_c), list(last_h))
                self.assertEqual(indices_d[:len(indices_h)].tolist(), list(indices_h))
                host.free_rows(table_h, rows, [0, 0, 0], seq)
                dev.free_rows_async(table_d, self.i64(rows), self.i64([0, 0, 0]), self.i64(seq),
                                    starts_host=[0, 0, 0], ends_host=seq)
                torch.cuda.synchronize(self.dev)
                dev.check_device()
                self.assertEqual(dev.available_size(), host.available_size())
                self.assertEqual(dev.available_size(), 4096)

    def test_a_repeated_row_faults_and_writes_nothing(self):
        pool = self.device_pool(1024, 4)
        table = torch.zeros((4, 64), dtype=torch.int32, device=self.dev)
        pool.alloc_extend_rows_async(table, self.i64([1, 1]), self.i64([0, 0]),
                                     self.i64([3, 3]), prefix_lens_host=[0, 0],
                                     seq_lens_host=[3, 3])
        torch.cuda.synchronize(self.dev)
        err = self.assertKvpError("DEVICE_FAULT", pool.check_device)
        self.assertIn("repeats", err.message)
        self.assertEqual(int(table.abs().sum()), 0)

    def test_captured_rows_calls_allocate_nothing(self):
        """A free by row inside torch.cuda.graph on a pool whose scratch is too small is
        refused (INVALID_STATE) with the capture intact and the pool unchanged; once
        reserve_scratch_async has sized the scratch, the same captured call frees the rows
        when the graph runs."""
        pool = self.device_pool(4096, 16)
        table = torch.zeros((8, 200), dtype=torch.int32, device=self.dev)
        rows, zeros, seq = [5, 2], [0, 0], [37, 16]
        pool.alloc_extend_rows_async(table, self.i64(rows), self.i64(zeros), self.i64(seq),
                                     prefix_lens_host=zeros, seq_lens_host=seq)
        rows_d, starts_d, ends_d = self.i64(rows), self.i64(zeros), self.i64(seq)
        torch.cuda.synchronize(self.dev)
        used = pool.available_size()
        self.assertEqual(used, 4096 - 4 * 16)

        def free_rows():
            pool.free_rows_async(table, rows_d, starts_d, ends_d, starts_host=zeros,
                                 ends_host=seq)

        refused = torch.cuda.CUDAGraph()
        with torch.cuda.graph(refused, stream=self.stream):
            err = self.assertKvpError("INVALID_STATE", free_rows)
        self.assertIn("being captured", err.message)
        self.assertIn("kvp_pool_reserve_scratch_async", err.message)
        torch.cuda.synchronize(self.dev)
        pool.check_device()
        self.assertEqual(pool.available_size(), used)
        pool.reserve_scratch_async(8, 2, sum(seq))
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=self.stream):
            free_rows()
        self.assertEqual(pool.available_size(), 4096)  # counted when captured
        graph.replay()
        torch.cuda.synchronize(self.dev)
        pool.check_device()
        self.assertEqual(pool.available_size(), 4096)
        self.assertEqual(pool.alloc_async(4096).numel(), 4096)  # every page free again
        torch.cuda.synchronize(self.dev)
        pool.check_device()
        for bad in ((-1, 2, 64), (2, 2.0, 64)):
            with self.assertRaises((OverflowError, TypeError)):
                pool.reserve_scratch_async(*bad)


class TestGraphDecode(CudaTestCase):
    """Decode reservations with torch.cuda.graph (docs/graph-decode.md): replays of one
    captured step give the host pool's reserved steps (which are its plain decodes,
    tests/decode_reservation.rs) and write req_to_token; a replay past the reservation
    writes the padding slot and faults (tests/cuda_reservation.rs does the rest)."""

    def test_captured_step_matches_a_host_pool(self):
        for ps in (1, 16):
            with self.subTest(page_size=ps):
                dev, host = self.device_pool(4096, ps), self.host_pool(4096, ps)
                lens, zeros, none = [0, 5, 16, 17, 3], [0] * 5, [-1] * 5
                out_h = list(host.alloc_extend(zeros, lens, none))
                out_d = dev.alloc_extend_async(self.i64(zeros), self.i64(lens),
                                               self.idx(dev, none), prefix_lens_host=zeros,
                                               seq_lens_host=lens)
                torch.cuda.synchronize(self.dev)
                self.assertEqual(out_d.tolist(), out_h)
                ends = [sum(lens[:i + 1]) for i in range(5)]
                last = [out_h[e - 1] if n else -1 for e, n in zip(ends, lens)]
                steps = 12
                hres = host.reserve_decode(lens, last, steps)
                self.addCleanup(hres.close)
                dres = self.keep(dev.reserve_decode_async(self.i64(lens), self.idx(dev, last),
                                                          steps, lens_host=lens))
                self.assertEqual((dres.steps, dres.batch_size, dres.pages),
                                 (hres.steps, hres.batch_size, hres.pages))
                rows = [4, 3, 2, 1, 0]
                table = torch.zeros((5, 64), dtype=torch.int32, device=self.dev)
                rows_d = self.i64(rows)
                out = self.empty_out(dev, 5)
                torch.cuda.synchronize(self.dev)
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph, stream=self.stream):
                    dres.step_async(out, table=table, rows=rows_d)
                for s in range(steps):
                    graph.replay()
                    want = list(hres.step())
                    torch.cuda.synchronize(self.dev)
                    self.assertEqual(out.tolist(), want, f"step {s}")
                    self.assertEqual([int(table[r, lens[i] + s]) for i, r in enumerate(rows)],
                                     want)
                host.finish_reservation(hres, steps)
                dev.finish_reservation_async(dres, steps)
                digest = dev.digest_async()
                torch.cuda.synchronize(self.dev)
                dev.check_device()
                self.assertEqual(kvp.digest_value(digest), host.digest())
                self.assertEqual(dev.available_size(), host.available_size())
                # one replay too many: the padding slot, no allocation, a fault
                graph.replay()
                torch.cuda.synchronize(self.dev)
                self.assertEqual(out.tolist(), [0] * 5)
                self.assertEqual(dev.available_size(), host.available_size())
                err = self.assertKvpError("DEVICE_FAULT", dev.check_device)
                self.assertIn("overrun", err.message)
                del graph


class TestDeviceFault(CudaTestCase):
    def assert_recovered(self, pool):
        """After a clear/restore (and a synchronize): check_device() reports the old fault
        once more, marked as from before the recovery, and then nothing."""
        try:
            pool.check_device()
        except kvp.KvpError as e:
            self.assertEqual(e.name, "KVP_STATUS_DEVICE_FAULT", str(e))
            self.assertIn("cleared or restored since", e.message)
        pool.check_device()

    def fault(self, pool):
        """Enqueues a double free of slot 37 (token pool); both calls return OK."""
        slots = pool.alloc_async(40)
        self.assertIsNone(pool.free_async(slots[36:37]))
        self.assertIsNone(pool.free_async(slots[36:37]))  # enqueued; the kernel will object
        return slots

    def test_double_free_is_reported_later_and_clear_recovers(self):
        pool = self.device_pool(64, 1)
        self.fault(pool)
        torch.cuda.synchronize(self.dev)
        err = self.assertKvpError("DEVICE_FAULT", pool.check_device)
        self.assertIn("= 37", err.message)  # the message names the element and its value
        # the pool refuses work until it is cleared or restored
        self.assertKvpError("DEVICE_FAULT", pool.alloc_async, 4)
        self.assertKvpError("DEVICE_FAULT", pool.free_async, self.idx(pool, [1]))
        self.assertKvpError("DEVICE_FAULT", pool.alloc_decode_async, self.i64([2]),
                            self.idx(pool, [1]), seq_lens_host=[2])
        self.assertKvpError("DEVICE_FAULT", pool.check_device)
        pool.clear_async()
        out = pool.alloc_async(4)
        torch.cuda.synchronize(self.dev)
        self.assert_recovered(pool)
        self.assertEqual(out.tolist(), [1, 2, 3, 4])
        self.assertEqual(pool.available_size_bound(), (60, True))

    def test_restore_recovers(self):
        pool = self.device_pool(64, 16)
        host = self.host_pool(64, 16)
        first = pool.alloc_async(16)
        host_first = host.alloc(16)
        snap = self.keep(pool.backup_state_async())
        host_snap = host.backup_state()
        self.addCleanup(host_snap.close)
        more = pool.alloc_async(32)
        pool.free_async(more[:1])
        pool.free_async(more[1:2])  # the same page again: a double free on the device
        torch.cuda.synchronize(self.dev)
        self.assertKvpError("DEVICE_FAULT", pool.check_device)
        self.assertKvpError("DEVICE_FAULT", pool.alloc_async, 16)
        pool.restore_state_async(snap)
        after = pool.alloc_async(16)
        host.alloc(32)
        host.restore_state(host_snap)
        torch.cuda.synchronize(self.dev)
        self.assert_recovered(pool)
        self.assertEqual(first.tolist(), host_first)
        self.assertEqual(after.tolist(), host.alloc(16))
        self.assertEqual(pool.available_size_bound(), (host.available_size(), True))

    def test_calls_queued_behind_a_fault_write_the_padding_slot(self):
        """Calls enqueued after the faulting one, before the host can know of it, return OK
        and write slot 0 (the padding slot) to their outputs."""
        pool = self.device_pool(64, 1)
        pool.alloc_async(4)  # warm up (kernels loaded), so nothing below waits for the device
        pool.clear_async()
        torch.cuda.synchronize(self.dev)
        torch.cuda._sleep(int(1e8))  # ~50 ms: the kernels run after the host calls returned
        self.fault(pool)
        out = pool.alloc_async(4)
        torch.cuda.synchronize(self.dev)
        self.assertEqual(out.tolist(), [0, 0, 0, 0])
        self.assertKvpError("DEVICE_FAULT", pool.check_device)
        pool.clear_async()
        torch.cuda.synchronize(self.dev)
        self.assert_recovered(pool)


# ---- (d) wrong streams, wrong backends, bad tensors ------------------------------------------


class TestDigest(CudaTestCase):
    def test_device_digest_is_the_host_digest_and_changes_nothing(self):
        for page_size, need_sort in ((1, False), (16, True)):
            gpu = self.device_pool(64 * page_size, page_size, need_sort=need_sort)
            host = self.host_pool(64 * page_size, page_size, need_sort=need_sort)
            out = torch.full((1,), SENTINEL, dtype=torch.int64, device=self.dev)
            self.assertEqual(gpu.digest_async(out=out).data_ptr(), out.data_ptr())
            self.assertEqual(kvp.digest_value(out), host.digest())
            rows = gpu.alloc_extend_async(self.i64([0, 0]), self.i64([5, 3]), self.idx(gpu, [-1, -1]),
                                          prefix_lens_host=[0, 0], seq_lens_host=[5, 3])
            expected = host.alloc_extend([0, 0], [5, 3], [-1, -1])
            before = gpu.digest_async()   # enqueued between two calls, no sync
            gpu.free_segment_async(rows[5:], 0, 3)   # the second request's row
            after = gpu.digest_async()
            self.assertEqual(rows.tolist(), expected)
            self.assertEqual(kvp.digest_value(before), host.digest())
            host.free_segment(expected[5:], 0, 3)
            self.assertEqual(kvp.digest_value(after), host.digest())
            self.assertNotEqual(kvp.digest_value(before), kvp.digest_value(after))
            # the next allocation is the host's: the digest moved nothing
            self.assertEqual(gpu.alloc_async(page_size).tolist(), host.alloc(page_size))
        self.assertKvpError("WRONG_BACKEND", gpu.digest)
        self.assertKvpError("WRONG_BACKEND", host.digest_async)

    @unittest.skipUnless(SKIP_REASON is None and torch.cuda.device_count() >= 2,
                         "needs a second CUDA device")
    def test_pools_on_two_devices_and_foreign_streams(self):
        pools = [kvp.Pool(256, 16, backend="cuda", device=d) for d in (0, 1)]
        for pool in pools:
            self.keep(pool)
        streams = [torch.cuda.Stream(torch.device("cuda", d)) for d in (0, 1)]
        outs = [pools[d].alloc_async(32, stream=streams[d]) for d in (0, 1)]
        digests = [pools[d].digest_async(stream=streams[d]) for d in (0, 1)]
        for d in (0, 1):
            torch.cuda.synchronize(d)
        self.assertEqual([o.tolist() for o in outs], [list(range(16, 48))] * 2)
        self.assertEqual(kvp.digest_value(digests[0]), kvp.digest_value(digests[1]))
        self.assertKvpError("WRONG_STREAM", pools[0].digest_async, stream=streams[1])
        self.assertKvpError("WRONG_STREAM", pools[1].alloc_async, 16, stream=streams[0])
        again = pools[1].digest_async(stream=streams[1])
        torch.cuda.synchronize(1)
        self.assertEqual(kvp.digest_value(again), kvp.digest_value(digests[1]))


class TestRefusals(CudaTestCase):
    @unittest.skipUnless(SKIP_REASON is None and torch.cuda.device_count() >= 2,
                         "needs a second CUDA device")
    def test_stream_of_another_device(self):
        pool = self.device_pool(64, 1)
        other = torch.cuda.Stream(torch.device("cuda", 1 if DEVICE == 0 else 0))
        out = self.empty_out(pool, 4)
        self.assertKvpError("WRONG_STREAM", pool.alloc_async, 4, out, stream=other)
        self.assertKvpError("WRONG_STREAM", pool.clear_async, other.cuda_stream)
        pool.free_group_begin()  # open, so that only the stream is wrong
        self.assertKvpError("WRONG_STREAM", pool.free_group_end_async, other)
        pool.free_group_end_async()
        torch.cuda.synchronize()
        self.assertEqual(out.tolist(), [SENTINEL] * 4)  # nothing was enqueued
        self.assertEqual(pool.alloc_async(4).tolist(), [1, 2, 3, 4])  # still usable
        # a tensor on the other device is refused before the call
        with self.assertRaises(ValueError):
            pool.alloc_async(4, torch.empty(4, dtype=torch.int64, device=other.device))

    def test_host_calls_on_a_device_pool(self):
        pool = self.device_pool(64, 4)
        for call, args in [
            (pool.alloc, (4,)),
            (pool.alloc_extend, ([0], [4], [-1])),
            (pool.alloc_decode, ([2], [4])),
            (pool.free_indices, ([4],)),
            (pool.free_pages, ([1],)),
            (pool.free_segment, ([4, 5], 0, 2)),
            (pool.merge_and_sort_free, ()),
            (pool.clear, ()),
            (pool.backup_state, ()),
        ]:
            with self.subTest(call=call.__name__):
                self.assertKvpError("WRONG_BACKEND", call, *args)
        with self.keep(pool.backup_state_async()) as snap:
            self.assertKvpError("WRONG_BACKEND", pool.restore_state, snap)
        pool.free_group_begin()  # valid on both backends
        self.assertKvpError("WRONG_BACKEND", pool.free_group_end)
        pool.free_group_end_async()
        # valid on both backends
        self.assertEqual(pool.available_size(), 64)
        self.assertEqual(pool.stats().pages_in_use, 0)
        self.assertFalse(pool.info().in_free_group)

    def test_device_calls_on_a_host_pool(self):
        pool = self.host_pool(64, 4)
        self.assertKvpError("WRONG_BACKEND", pool.alloc_async, 4,
                            torch.empty(4, dtype=torch.int64, device=self.dev))
        self.assertKvpError("WRONG_BACKEND", pool.free_async, self.i64([4]))
        self.assertKvpError("WRONG_BACKEND", pool.clear_async)
        self.assertKvpError("WRONG_BACKEND", pool.clear_async, self.stream)

    def test_bad_tensors_are_refused_before_the_call(self):
        pool = self.device_pool(64, 4)
        pool32 = self.device_pool(64, 4, index_type=kvp.INDEX_TYPE_I32)
        before = pool.stats().as_dict()
        i64, idx = self.i64, (lambda v: self.idx(pool, v))
        cases = [
            (ValueError, f"cuda:{DEVICE}", pool.free_async, (torch.tensor([4]),), {}),
            (TypeError, "torch tensor", pool.free_async, ([4],), {}),
            (TypeError, "torch.int64", pool.free_async,
             (torch.tensor([4], dtype=torch.int32, device=self.dev),), {}),
            (TypeError, "torch.int32", pool32.free_pages_async, (i64([1]),), {}),
            (ValueError, "contiguous", pool.free_async, (idx([4, 0, 5, 0])[::2],), {}),
            (ValueError, "1-D", pool.free_pages_async, (idx([[1]]),), {}),
            (TypeError, "seq_lens_host", pool.alloc_decode_async, (i64([5]), idx([4])), {}),
            (TypeError, "prefix_lens_host", pool.alloc_extend_async,
             (i64([0]), i64([4]), idx([-1])), {"seq_lens_host": [4]}),
            (ValueError, "must be on the CPU", pool.alloc_decode_async, (i64([5]), idx([4])),
             {"seq_lens_host": i64([5])}),
            (ValueError, "one entry per request", pool.alloc_extend_async,
             (i64([0, 0]), i64([4, 4]), idx([-1])),
             {"prefix_lens_host": [0, 0], "seq_lens_host": [4, 4]}),
            (ValueError, "one entry per request", pool.alloc_decode_async,
             (i64([5]), idx([4])), {"seq_lens_host": [5, 6]}),
            (TypeError, "torch.int64", pool.alloc_async,
             (4, torch.empty(4, dtype=torch.int32, device=self.dev)), {}),
            (ValueError, f"cuda:{DEVICE}", pool.alloc_async, (4, torch.empty(4, dtype=torch.int64)),
             {}),
            (TypeError, "stream", pool.alloc_async, (4,), {"stream": 1.5}),
        ]
        for error, needle, call, args, kwargs in cases:
            with self.subTest(call=call.__name__, needle=needle):
                with self.assertRaises(error) as ctx:
                    call(*args, **kwargs)
                self.assertIn(needle, str(ctx.exception))
        torch.cuda.synchronize(self.dev)
        self.assertEqual(pool.stats().as_dict(), before)  # nothing reached the library
        self.assertEqual(pool.available_size_bound(), (64, True))

    def test_library_judges_lengths_and_shortage_at_the_call(self):
        """What the host copies decide is reported by the call itself, not later."""
        pool = self.device_pool(64, 4)
        out = self.empty_out(pool, 8)
        self.assertKvpError("OUT_OF_SLOTS", pool.alloc_async, 68,
                            self.empty_out(pool, 68))
        self.assertKvpError("UNALIGNED", pool.alloc_async, 5, out)
        self.assertKvpError("BUFFER_TOO_SMALL", pool.alloc_async, 12, out)
        self.assertKvpError("INVALID_LENGTHS", pool.alloc_extend_async, self.i64([3]),
                            self.i64([2]), self.idx(pool, [-1]), out, prefix_lens_host=[3],
                            seq_lens_host=[2])
        torch.cuda.synchronize(self.dev)
        self.assertEqual(out.tolist(), [SENTINEL] * 8)
        pool.check_device()

    def test_no_new_output_beyond_the_pool(self):
        """A new output of more slots than the pool has is not made (10**12 indices would
        not fit in device memory, and PyTorch's failed allocation synchronizes): the count
        is refused first, as kvpool.hpp's allocating overloads refuse it."""
        pool = self.device_pool(64, 4)
        before = pool.stats().as_dict()
        for n in (68, 10**12):
            err = self.assertKvpError("OUT_OF_SLOTS", pool.alloc_async, n)
            self.assertIn(f"{n} tokens need more than the pool's 64 slots", err.message)
        # Valid lengths adding up to more than the pool: the same, before a tensor is made.
        lens = [0, 40, 40]
        self.assertKvpError("OUT_OF_SLOTS", pool.alloc_extend_async, self.i64([0] * 3),
                            self.i64(lens), self.idx(pool, [-1] * 3), prefix_lens_host=[0] * 3,
                            seq_lens_host=lens)
        self.assertKvpError("OUT_OF_SLOTS", pool.alloc_extend_async, self.i64([0] * 3),
                            self.i64(lens), self.idx(pool, [-1] * 3), prefix_lens_host=[0] * 3,
                            seq_lens_host=lens, extend_num_tokens=80)
        self.assertEqual(pool.stats().as_dict(), before)  # nothing reached the library
        # A bad length: the library names it (the output made for it is empty).
        self.assertKvpError("INVALID_LENGTHS", pool.alloc_extend_async, self.i64([3, 0]),
                            self.i64([2, 80]), self.idx(pool, [-1, -1]),
                            prefix_lens_host=[3, 0], seq_lens_host=[2, 80],
                            extend_num_tokens=10**12)
        torch.cuda.synchronize(self.dev)
        self.assertEqual(pool.available_size_bound(), (64, True))
        pool.check_device()


# ---- (e) nothing synchronizes ----------------------------------------------------------------


class TestNoSync(CudaTestCase):
    # ~1 s at the H200's ~2 GHz; the kvpool calls below take a few milliseconds
    SLEEP_CYCLES = int(os.environ.get("KVPOOL_CUDA_SLEEP_CYCLES", str(int(2e9))))

    def test_no_call_waits_for_the_stream(self):
        """Behind a long-running kernel, one call of each kind is enqueued; when they have all
        returned, the kernel (an event recorded after it) must still be running. Then the
        outputs are checked against a host pool."""
        ps = 16
        pool = self.device_pool(1024, ps, need_sort=True)
        dtype = self.dtype(pool)
        # every input and output exists before the sleep: creating a tensor from a list
        # copies from pageable memory, which may wait
        prefix, seq, last = self.i64([0, 0]), self.i64([20, 5]), self.idx(pool, [-1, -1])
        seq_dec = self.i64([21, 6])
        pick_last = self.i64([19, 24])
        outs = {name: torch.empty(n, dtype=dtype, device=self.dev)
                for name, n in (("a", 32), ("ext", 25), ("dec", 2), ("a2", 16))}

        def calls():
            a = pool.alloc_async(32, outs["a"])
            ext = pool.alloc_extend_async(prefix, seq, last, outs["ext"],
                                          prefix_lens_host=[0, 0], seq_lens_host=[20, 5])
            last_dec = ext.index_select(0, pick_last)  # PyTorch, on the device
            dec = pool.alloc_decode_async(seq_dec, last_dec, outs["dec"],
                                          seq_lens_host=[21, 6])
            row_a = torch.cat((ext[:20], dec[:1]))
            page_b = torch.div(ext[20:21], ps, rounding_mode="floor")
            pool.free_group_begin()
            pool.free_async(a)
            pool.free_pages_async(page_b)
            pool.free_segment_async(row_a, 0, 21)
            pool.free_group_end_async()
            pool.merge_and_sort_free_async()
            bound = pool.available_size_bound()
            snap = self.keep(pool.backup_state_async())
            a2 = pool.alloc_async(16, outs["a2"])
            pool.restore_state_async(snap)
            pool.clear_async()
            pool.check_device()
            return [a, ext, dec, a2], bound

        def expected():
            host = self.host_pool(1024, ps, need_sort=True)
            a = host.alloc(32)
            ext = host.alloc_extend([0, 0], [20, 5], [-1, -1])
            dec = host.alloc_decode([21, 6], [ext[19], ext[24]])
            with host.free_group():
                host.free_indices(a)
                host.free_pages([ext[20] // ps])
                host.free_segment(ext[:20] + dec[:1], 0, 21)
            host.merge_and_sort_free()
            a2 = host.alloc(16)
            return [a, ext, dec, a2]

        # warm up: loads kvpool's kernels and fills PyTorch's caching allocator
        warm, _ = calls()
        torch.cuda.synchronize(self.dev)
        self.assertEqual([t.tolist() for t in warm], expected())

        torch.cuda._sleep(self.SLEEP_CYCLES)
        sleeping = torch.cuda.Event()
        sleeping.record(self.stream)
        start = time.perf_counter()
        results, bound = calls()
        elapsed = time.perf_counter() - start
        still_running = not sleeping.query()
        torch.cuda.synchronize(self.dev)
        slept = time.perf_counter() - start
        self.assertTrue(still_running,
                        f"the kernel before the kvpool calls finished while they ran: a call "
                        f"waited for the stream (calls took {elapsed * 1e3:.1f} ms, the sleep "
                        f"{slept * 1e3:.1f} ms)")
        self.assertEqual([t.tolist() for t in results], expected())
        self.assertLessEqual(bound[0], 1024)
        pool.check_device()
        self.assertEqual(pool.available_size_bound(), (1024, True))


class TestRelease(CudaTestCase):
    """Stream-ordered release and the stream-order check, from Python (the Rust and C++
    tests: tests/cuda_contract.rs, tests/cpp/cuda_release_test.cpp)."""

    SLEEP_CYCLES = int(os.environ.get("KVPOOL_CUDA_SLEEP_CYCLES", str(int(2e9)))) // 3

    def test_close_while_queued_frees_after_the_stream(self):
        out = torch.full((64,), SENTINEL, dtype=torch.int64, device=self.dev)
        pool = kvp.Pool(4096, 16, backend="cuda", device=DEVICE)
        warm = pool.alloc_async(16)  # loads the kernels
        torch.cuda.synchronize(self.dev)
        self.assertEqual(warm.tolist(), list(range(16, 32)))
        torch.cuda._sleep(self.SLEEP_CYCLES)
        sleeping = torch.cuda.Event()
        sleeping.record(self.stream)
        pool.alloc_async(64, out)
        snap = pool.backup_state_async()
        start = time.perf_counter()
        snap.close()
        pool.close()
        took = time.perf_counter() - start
        still_running = not sleeping.query()
        pending = kvp.device_pending_releases(LIB)
        torch.cuda.synchronize(self.dev)
        self.assertLess(took, 0.05, f"closing took {took * 1e3:.1f} ms")
        self.assertTrue(still_running, "the sleep ended before the close: the test proves nothing")
        self.assertGreaterEqual(pending, 1)
        self.assertEqual(out.tolist(), list(range(32, 96)))  # ran on live memory
        deadline = time.perf_counter() + 5
        while kvp.device_pending_releases(LIB) and time.perf_counter() < deadline:
            time.sleep(0.001)
        self.assertEqual(kvp.device_pending_releases(LIB), 0)

    def test_stream_order_check_reports_unordered_streams(self):
        pool = self.device_pool(4096, 16)
        pool.set_debug(kvp.DEBUG_STREAM_ORDER)
        self.assertEqual(pool.debug_flags(), kvp.DEBUG_STREAM_ORDER)
        other = torch.cuda.Stream(self.dev)
        torch.cuda._sleep(self.SLEEP_CYCLES)
        pool.alloc_async(16)  # on self.stream, behind the sleep
        pool.alloc_async(16, stream=other)  # not ordered with it
        torch.cuda.synchronize(self.dev)
        self.assertKvpError("UNORDERED_STREAMS", pool.check_device)
        pool.clear_async()
        torch.cuda.synchronize(self.dev)
        self.assertKvpError("UNORDERED_STREAMS", pool.check_device)  # once more
        pool.check_device()
        # Ordered by an event: no report.
        torch.cuda._sleep(self.SLEEP_CYCLES)
        pool.alloc_async(16)
        other.wait_stream(self.stream)
        pool.alloc_async(16, stream=other)
        torch.cuda.synchronize(self.dev)
        pool.check_device()


class TestPrepared(CudaTestCase):
    """prepare_alloc_extend_async / prepare_alloc_decode_async: persistent device tensors and
    host copies updated in place between calls give a host pool's slots; a moved tensor is
    refused."""

    def test_prepared_calls_match_a_host_pool(self):
        import array  # noqa: PLC0415
        import random  # noqa: PLC0415

        rng = random.Random(11)
        cap = 64
        for page_size in (1, 16):
            with self.subTest(page_size=page_size):
                host, pool = self.host_pool(1 << 16, page_size), self.device_pool(1 << 16,
                                                                                   page_size)
                prefix_h = torch.zeros(cap, dtype=torch.int64)  # host copies: a CPU tensor
                seq_h = array.array("q", [0]) * cap             # and an array.array
                prefix_d, seq_d = self.i64([0] * cap), self.i64([0] * cap)
                last_d = self.idx(pool, [0] * cap)
                out = self.empty_out(pool, cap * 64)
                extend = pool.prepare_alloc_extend_async(
                    prefix_d, seq_d, last_d, out, prefix_lens_host=prefix_h,
                    seq_lens_host=seq_h)
                decode = pool.prepare_alloc_decode_async(seq_d, last_d, out,
                                                         seq_lens_host=seq_h)
                rows = []
                for _ in range(20):
                    picked = rng.sample(range(len(rows)), min(len(rows), rng.randint(0, 8)))
                    batch = [(i, len(rows[i]), rows[i][-1]) for i in picked]
                    batch += [(None, 0, -1)] * rng.randint(1, 5)
                    lens = [(p, p + rng.randint(1, 40)) for _, p, _ in batch]
                    n = len(batch)
                    for k, (p, q) in enumerate(lens):
                        prefix_h[k], seq_h[k] = p, q
                    prefix_d[:n].copy_(prefix_h[:n])
                    seq_d[:n].copy_(torch.tensor(seq_h[:n], dtype=torch.int64))
                    last_d[:n].copy_(torch.tensor([b[2] for b in batch]))
                    tokens = sum(q - p for p, q in lens)
                    want = host.alloc_extend([p for p, _ in lens], [q for _, q in lens],
                                             [b[2] for b in batch])
                    extend(n, tokens)
                    self.assertEqual(out[:tokens].tolist(), want)  # synchronizes
                    at = 0
                    for (i, _, _), (p, q) in zip(batch, lens):
                        if i is None:
                            rows.append(want[at:at + q - p])
                        else:
                            rows[i].extend(want[at:at + q - p])
                        at += q - p
                    picked = rng.sample(range(len(rows)), min(len(rows), rng.randint(1, cap)))
                    for k, i in enumerate(picked):
                        seq_h[k] = len(rows[i]) + 1
                    seq_d[:len(picked)].copy_(
                        torch.tensor(seq_h[:len(picked)], dtype=torch.int64))
                    last_d[:len(picked)].copy_(torch.tensor([rows[i][-1] for i in picked]))
                    want = host.alloc_decode([len(rows[i]) + 1 for i in picked],
                                             [rows[i][-1] for i in picked])
                    decode(len(picked))
                    self.assertEqual(out[:len(picked)].tolist(), want)
                    for i, slot in zip(picked, want):
                        rows[i].append(slot)
                pool.check_device()

    def test_a_moved_tensor_is_refused(self):
        pool = self.device_pool(4096, 16)
        seq_d, last_d = self.i64([1, 1]), self.idx(pool, [-1, -1])
        out = self.empty_out(pool, 2)
        decode = pool.prepare_alloc_decode_async(seq_d, last_d, out,
                                                 seq_lens_host=torch.tensor([1, 1]))
        out.set_(self.empty_out(pool, 8))
        with self.assertRaisesRegex(ValueError, "memory moved since the preparation"):
            decode(2)
        torch.cuda.synchronize(self.dev)
        self.assertEqual(out.tolist(), [SENTINEL] * 8)
        with self.assertRaisesRegex(TypeError, "a prepared call reads the caller's memory"):
            pool.prepare_alloc_decode_async(seq_d, last_d, out, seq_lens_host=[1, 1])


if __name__ == "__main__":
    if SKIP_REASON is not None:
        print(f"test_cuda.py: every test is skipped: {SKIP_REASON}", file=sys.stderr)
    unittest.main()
