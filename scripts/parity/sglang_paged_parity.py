#!/usr/bin/env python3
"""Parity check: kvpool's paged pool against SGLang's own PagedTokenToKVPoolAllocator.

Drives both with the same random, valid operation sequences — batched alloc_extend (new and
continuing requests, so all three parts of the index math run), alloc_decode, alloc, frees
by index and by row segment, free groups, need_sort merges — and requires identical results
after every operation: the same slot indices (or both out of slots) and the same available
size. SGLang runs its real code: its Triton kernels on the GPU.

Needs torch, triton, a CUDA GPU, kvpool's Python package (python/) with KVPOOL_LIB pointing at
libkvpool.so, and SGLang's allocator on PYTHONPATH: the modules
sglang.srt.mem_cache.allocator.paged (+ .base), sglang.kernels.ops.memory.allocator and
sglang.srt.utils (get_num_new_pages, next_power_of_2, get_bool_env_var). This repository does
not ship SGLang's code; point PYTHONPATH at an SGLang checkout's python/ directory (or at a
directory holding just those modules).

Usage: sglang_paged_parity.py [steps_per_config]
"""
import random
import sys

import torch

import kvpool
from sglang.srt.mem_cache.allocator.paged import PagedTokenToKVPoolAllocator


def cuda_i64(values):
    return torch.tensor(values, dtype=torch.int64, device="cuda")


class Run:
    def __init__(self, seed, page_size, need_sort, num_pages):
        self.rng = random.Random(seed)
        self.ps = page_size
        size = num_pages * page_size
        self.ref = PagedTokenToKVPoolAllocator(size, page_size, torch.int64, "cuda", None,
                                               need_sort)
        self.ours = kvpool.Pool(size, page_size=page_size, need_sort=need_sort)
        self.rows = {}  # request id -> its slots (a req_to_token row)
        self.next_id = 0
        self.in_group = False
        self.ops = 0
        self.oom = 0
        self.where = f"page_size {page_size} need_sort {need_sort} seed {seed}"
        self.max_grow = max(4, size // 16)

    def fail(self, what, ref, ours):
        raise AssertionError(f"{what} differs at op {self.ops} ({self.where}):\n"
                             f"  sglang: {ref}\n  kvpool: {ours}")

    def ours_or_oom(self, call, *args):
        try:
            return call(*args)
        except kvpool.KvpError as e:
            if e.name != "KVP_STATUS_OUT_OF_SLOTS":
                raise
            return None

    # ---- operations -------------------------------------------------------------------

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
        ours = self.ours_or_oom(self.ours.alloc_extend, prefix, seq, last)
        if ours is None:
            # Both agree it does not fit; SGLang's kernel would read past its free list, so
            # only its merge (which happens first, on its over-estimate) is replayed.
            if total // self.ps + len(seq) + 1 > len(self.ref.free_pages):
                self.ref.merge_and_sort_free()
            exact = sum(-(-s // self.ps) + (p // -self.ps) for s, p in zip(seq, prefix))
            if exact <= len(self.ref.free_pages):
                self.fail("alloc_extend shortage", "fits", "OUT_OF_SLOTS")
            self.oom += 1
            return
        out = self.ref.alloc_extend(cuda_i64(prefix), torch.tensor(prefix), cuda_i64(seq),
                                    torch.tensor(seq), cuda_i64(last), total)
        ref = None if out is None else out.tolist()
        if ref != ours:
            self.fail("alloc_extend", ref, ours)
        pos = 0
        for rid, p, s in zip(ids, prefix, seq):
            slots = ours[pos:pos + s - p]
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
        ours = self.ours_or_oom(self.ours.alloc_decode, seq, last)
        if ours is None:
            if len(seq) > len(self.ref.free_pages):
                self.ref.merge_and_sort_free()
            self.oom += 1
            return
        out = self.ref.alloc_decode(cuda_i64(seq), torch.tensor(seq), cuda_i64(last))
        ref = None if out is None else out.tolist()
        if ref != ours:
            self.fail("alloc_decode", ref, ours)
        for r, slot in zip(ids, ours):
            self.rows[r].append(slot)

    def alloc(self):
        n = self.rng.randint(0, self.max_grow // self.ps // 2 + 1) * self.ps
        out = self.ref.alloc(n)
        ref = None if out is None else out.tolist()
        ours = self.ours_or_oom(self.ours.alloc, n)
        if ref != ours:
            self.fail("alloc", ref, ours)
        if ours:
            rid, self.next_id = self.next_id, self.next_id + 1
            self.rows[rid] = list(ours)

    def finish(self):
        if not self.rows:
            return
        rid = self.rng.choice(list(self.rows))
        row = self.rows.pop(rid)
        if not row:
            return
        if self.rng.random() < 0.5:
            self.ref.free(cuda_i64(row))
            self.ours.free_indices(row)
        else:
            self.ref.free_segment(cuda_i64(row), start_pos=0)
            self.ours.free_segment(row, 0, len(row))

    def truncate(self):
        if not self.rows:
            return
        rid = self.rng.choice(list(self.rows))
        row = self.rows[rid]
        if not row:
            return
        start = self.rng.randrange(len(row)) // self.ps * self.ps
        self.ref.free_segment(cuda_i64(row[start:]), start_pos=start)
        self.ours.free_segment(row, start, len(row) - start)
        del row[start:]

    def group(self):
        if self.in_group:
            self.ref.free_group_end()
            self.ours.free_group_end()
        else:
            self.ref.free_group_begin()
            self.ours.free_group_begin()
        self.in_group = not self.in_group

    def merge(self):
        self.ref.merge_and_sort_free()
        self.ours.merge_and_sort_free()

    def step(self):
        x = self.rng.random()
        op = (self.extend if x < 0.35 else self.decode if x < 0.6 else self.finish
              if x < 0.78 else self.truncate if x < 0.84 else self.alloc if x < 0.9
              else self.group if x < 0.96 else self.merge)
        op()
        self.ops += 1
        ref, ours = self.ref.available_size(), self.ours.available_size()
        if ref != ours:
            self.fail("available_size", ref, ours)


def main():
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 1500
    total = oom = 0
    for page_size in (2, 4, 16, 64):
        for need_sort in (False, True):
            for seed, num_pages in ((1, 48), (2, 300)):
                run = Run(seed * 1000 + page_size, page_size, need_sort, num_pages)
                for _ in range(steps):
                    run.step()
                if run.in_group:
                    run.group()
                while run.rows:
                    run.finish()
                    run.ops += 1
                assert run.ours.available_size() == run.ref.available_size() == \
                    num_pages * page_size, run.where
                total += run.ops
                oom += run.oom
                print(f"{run.where}: {run.ops} operations identical "
                      f"({run.oom} shortages agreed)", flush=True)
    print(f"PARITY OK: {total} operations, {oom} shortages, 16 configurations")


if __name__ == "__main__":
    main()
