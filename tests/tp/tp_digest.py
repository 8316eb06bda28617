#!/usr/bin/env python3
"""Tensor parallelism: identical kvpool state on every rank, checked by state digests.

One process per rank (torch.distributed). Each rank creates its own pool (a device pool on
``cuda:rank``, or a host pool with ``--backend host``) and its own scheduler, and drives the
same seeded engine workload (arrivals, prefill chunks, decode, retractions, finishes) from
rank-local inputs: every rank draws from its own generator with the same seed, so the inputs
agree by construction, as they do in a TP engine where every rank sees the same requests.
After every step each rank computes its pool digest (``Pool.digest_async`` on the device,
on the stream the workload runs on; ``Pool.digest`` on the host) and its scheduler digest,
and the ranks all-gather them: they must be equal for ``--steps`` steps.

Then a perturbed run: rank ``--perturb-rank`` does one extra operation at step
``--perturb-step`` (it keeps one page more), and the all-gather must report divergence at
exactly that step.

Collectives: NCCL when every rank has its own GPU; gloo when ranks share a GPU (a dry run
of two ranks on one GPU) or with ``--backend host`` (no GPU needed). The backend used is
printed.

    python3 tests/tp/tp_digest.py                  # ranks = GPUs (at least 2), both runs
    python3 tests/tp/tp_digest.py --nproc 2        # two ranks (sharing a GPU if only one)
    python3 tests/tp/tp_digest.py --backend host --steps 2000   # CPU only
    torchrun --nproc_per_node=2 tests/tp/tp_digest.py           # also works

Needs torch and the library (``$KVPOOL_LIB`` or a release build in this tree).
"""
import argparse
import datetime
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))

import kvpool  # noqa: E402

MASK64 = (1 << 64) - 1


def signed64(x):
    return x - (1 << 64) if x >= 1 << 63 else x


class Rng:
    """splitmix64, as the Rust tests use: the same numbers in every rank."""

    def __init__(self, seed):
        self.state = seed & MASK64

    def next(self):
        self.state = (self.state + 0x9E3779B97F4A7C15) & MASK64
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
        return z ^ (z >> 31)

    def below(self, n):
        return self.next() % max(n, 1)

    def range(self, lo, hi):
        return lo + self.below(hi - lo + 1)

    def chance(self, percent):
        return self.below(100) < percent


class Engine:
    """One rank's engine: a scheduler and a pool, the KV rows of its requests, and a
    workload drawn from ``seed``. Rows live where the pool's indices live (device tensors
    for a device pool, lists for a host pool); the engine never reads device memory."""

    def __init__(self, args, rank, device):
        self.args = args
        self.ps = args.page_size
        self.device = device
        self.on_device = device is not None
        size = args.pages * self.ps
        if self.on_device:
            import torch
            self.torch = torch
            self.pool = kvpool.Pool(size, page_size=self.ps, backend="cuda", device=device)
            self.minus_one = torch.full((1,), -1, dtype=torch.int64, device=f"cuda:{device}")
        else:
            self.pool = kvpool.Pool(size, page_size=self.ps)
        # Not attached: every rank passes its pool's available size explicitly (exact on
        # both backends here: rows are freed with free_segment, whose count the host knows).
        self.sched = kvpool.Scheduler(capacity=size, page_size=self.ps,
                                      chunked_prefill_size=512, max_prefill_tokens=1024)
        self.rng = Rng(args.seed)
        self.next_id = 1
        self.rows = {}     # id -> list of index chunks (device tensors or lists)
        self.lens = {}     # id -> tokens in its row
        self.output = {}   # id -> output tokens so far
        self.target = {}   # id -> output length at which it finishes
        self.leaked = []   # the perturbation's extra pages (kept, never freed)

    # ---- rows ----

    def _row(self, rid):
        chunks = self.rows[rid]
        if self.on_device:
            return self.torch.cat(chunks) if len(chunks) > 1 else chunks[0]
        return [x for c in chunks for x in c]

    def _last(self, rid):
        chunks = self.rows.get(rid)
        if not chunks:
            return self.minus_one if self.on_device else -1
        return chunks[-1][-1:] if self.on_device else chunks[-1][-1]

    def free_row(self, rid):
        n = self.lens.get(rid, 0)
        if n:
            row = self._row(rid)
            if self.on_device:
                self.pool.free_segment_async(row, 0, n)
            else:
                self.pool.free_segment(row, 0, n)
        self.rows[rid] = []
        self.lens[rid] = 0

    def drop(self, rid):
        for table in (self.rows, self.lens, self.output, self.target):
            table.pop(rid, None)

    # ---- one step ----

    def step(self):
        rng = self.rng
        if rng.chance(40):
            for _ in range(rng.range(1, 3)):
                rid = self.next_id
                self.next_id += 1
                input_len = rng.range(1, 700)
                max_new = rng.range(1, 80)
                target = rng.range(1, max_new)
                if self.sched.submit(rid, input_len=input_len, max_new_tokens=max_new).queued:
                    self.rows[rid], self.lens[rid] = [], 0
                    self.output[rid], self.target[rid] = 0, target
        plan = self.sched.step(self.pool.available_size(), 0, True)
        for e in list(plan.retracted) + list(plan.preempted):
            self.free_row(e.id)
        for e in plan.aborted:
            self.free_row(e.id)
            self.drop(e.id)
        if plan.prefill:
            prefix = [e.prefix_len for e in plan.prefill]
            seq = [e.prefix_len + e.extend_len for e in plan.prefill]
            for e in plan.prefill:
                assert self.lens[e.id] == e.prefix_len, (e, self.lens[e.id])
            if self.on_device:
                t = self.torch
                dev = f"cuda:{self.device}"
                last = t.cat([self._last(e.id) for e in plan.prefill])
                out = self.pool.alloc_extend_async(
                    t.tensor(prefix, dtype=t.int64, device=dev),
                    t.tensor(seq, dtype=t.int64, device=dev), last,
                    prefix_lens_host=prefix, seq_lens_host=seq)
            else:
                out = self.pool.alloc_extend(prefix, seq, [self._last(e.id) for e in plan.prefill])
            pos = 0
            for e in plan.prefill:
                self.rows[e.id].append(out[pos:pos + e.extend_len])
                self.lens[e.id] += e.extend_len
                pos += e.extend_len
                if not e.chunked:
                    self.output[e.id] += 1
        if plan.decode:
            seq = [self.lens[rid] + 1 for rid in plan.decode]
            if self.on_device:
                t = self.torch
                last = t.cat([self._last(rid) for rid in plan.decode])
                out = self.pool.alloc_decode_async(
                    t.tensor(seq, dtype=t.int64, device=f"cuda:{self.device}"), last,
                    seq_lens_host=seq)
            else:
                out = self.pool.alloc_decode(seq, [self._last(rid) for rid in plan.decode])
            for i, rid in enumerate(plan.decode):
                self.rows[rid].append(out[i:i + 1])
                self.lens[rid] += 1
                self.output[rid] += 1
        for rid in [r for r in self.output if self.output[r] >= self.target[r]]:
            if self.sched.request(rid).phase == kvpool.PHASE_RUNNING:
                self.sched.finish(rid)
                self.free_row(rid)
                self.drop(rid)
        return plan

    def perturb(self):
        """The deliberate divergence: one page more, kept."""
        if self.on_device:
            self.leaked.append(self.pool.alloc_async(self.ps))
        else:
            self.leaked.append(self.pool.alloc(self.ps))


def run(args, rank, world, perturb):
    """One run; returns (first divergent step or None, steps run, stats)."""
    import torch
    import torch.distributed as dist

    device = None
    if args.backend == "cuda":
        device = rank % torch.cuda.device_count()
        torch.cuda.set_device(device)
    engine = Engine(args, rank, device)
    nccl = dist.get_backend() == "nccl"
    if nccl:
        mine = torch.empty(2, dtype=torch.int64, device=f"cuda:{device}")
    else:
        mine = torch.empty(2, dtype=torch.int64)
    gathered = [torch.empty_like(mine) for _ in range(world)]
    first = None
    step = 0
    stats = {"prefill": 0, "decode": 0}
    started = time.time()
    for step in range(1, args.steps + 1):
        plan = engine.step()
        stats["prefill"] += bool(plan.prefill)
        stats["decode"] += bool(plan.decode)
        if perturb is not None and perturb == (rank, step):
            engine.perturb()
        sched_digest = signed64(engine.sched.digest())
        if engine.on_device:
            if nccl:
                engine.pool.digest_async(out=mine[0:1])   # on the current stream, no sync
                mine[1:2].fill_(sched_digest)
            else:
                d = engine.pool.digest_async()             # gloo gathers CPU tensors
                mine[0] = d.cpu()[0]
                mine[1] = sched_digest
        else:
            mine[0] = signed64(engine.pool.digest())
            mine[1] = sched_digest
        dist.all_gather(gathered, mine)
        rows = [g.cpu().tolist() for g in gathered]
        if any(r != rows[0] for r in rows):
            first = step
            if rank == 0:
                print(f"  step {step}: digests diverge: " + ", ".join(
                    f"rank {i}: pool {r[0] & MASK64:#018x} sched {r[1] & MASK64:#018x}"
                    for i, r in enumerate(rows)), flush=True)
            break
        if rank == 0 and step % args.report_every == 0:
            print(f"  step {step}: {world} ranks agree (pool {rows[0][0] & MASK64:#018x}, "
                  f"sched {rows[0][1] & MASK64:#018x}; {time.time() - started:.1f} s)",
                  flush=True)
    if engine.on_device:
        torch.cuda.synchronize(device)
        engine.pool.check_device()
    s = engine.sched.stats()
    stats.update(finished=s.finished, retractions=s.retractions, admitted=s.admitted)
    return first, step, stats


def run_in_process(args, world, perturb):
    """All ranks' engines in this process, compared after every step (host pools, no
    torch): the workload and the detection logic without collectives."""
    engines = [Engine(args, rank, None) for rank in range(world)]
    for step in range(1, args.steps + 1):
        for rank, engine in enumerate(engines):
            engine.step()
            if perturb == (rank, step):
                engine.perturb()
        rows = [(e.pool.digest(), e.sched.digest()) for e in engines]
        if any(r != rows[0] for r in rows):
            return step, engines[0].sched.stats()
    return None, engines[0].sched.stats()


def main_in_process(args, world):
    print(f"tp_digest: {world} ranks in one process (no collectives), host pools, "
          f"page_size {args.page_size}, {args.pages} pages, seed {args.seed}", flush=True)
    first, stats = run_in_process(args, world, None)
    print(f"equal run: {args.steps} steps, first divergence: {first}; finished "
          f"{stats.finished}, retractions {stats.retractions}", flush=True)
    assert first is None, f"ranks diverged at step {first} without a perturbation"
    assert stats.finished >= min(100, args.steps // 20), "the workload exercised too little"
    r = args.perturb_rank if args.perturb_rank is not None else world - 1
    s = args.perturb_step if args.perturb_step is not None else max(1, args.steps * 3 // 5)
    pargs = argparse.Namespace(**vars(args))
    pargs.steps = s + 50
    first, _ = run_in_process(pargs, world, (r, s))
    print(f"perturbed run (rank {r}, step {s}): divergence detected at step {first}")
    assert first == s, f"perturbation at rank {r} step {s} detected at step {first}"
    print("tp_digest: passed")


def worker(rank, world, args):
    import torch
    import torch.distributed as dist

    if "MASTER_ADDR" not in os.environ:
        os.environ["MASTER_ADDR"] = "127.0.0.1"
        os.environ["MASTER_PORT"] = str(args.port)
    ngpu = torch.cuda.device_count() if args.backend == "cuda" else 0
    backend = "nccl" if args.backend == "cuda" and ngpu >= world and not args.gloo else "gloo"
    if backend == "nccl":
        torch.cuda.set_device(rank)
    dist.init_process_group(backend, rank=rank, world_size=world,
                            timeout=datetime.timedelta(minutes=10))
    if rank == 0:
        where = (f"pools on cuda:0..{min(world, ngpu) - 1}" if args.backend == "cuda"
                 else "host pools")
        share = " (ranks share GPUs: dry run)" if args.backend == "cuda" and ngpu < world else ""
        print(f"tp_digest: {world} ranks, collectives: {backend}, {where}{share}, "
              f"page_size {args.page_size}, {args.pages} pages, seed {args.seed}", flush=True)
    failures = []
    if args.mode in ("both", "equal"):
        first, steps, stats = run(args, rank, world, None)
        if rank == 0:
            print(f"equal run: {steps} steps, first divergence: {first}; {stats}", flush=True)
        if first is not None:
            failures.append(f"ranks diverged at step {first} without a perturbation")
        elif min(stats["prefill"], stats["decode"], stats["finished"]) < min(100, steps // 20):
            failures.append(f"the workload exercised too little: {stats}")
    if args.mode in ("both", "perturb"):
        r = args.perturb_rank if args.perturb_rank is not None else world - 1
        s = args.perturb_step if args.perturb_step is not None else max(1, min(args.steps, 10000) * 3 // 5)
        pargs = argparse.Namespace(**vars(args))
        pargs.steps = s + 50
        first, steps, _ = run(pargs, rank, world, (r, s))
        if rank == 0:
            print(f"perturbed run (rank {r}, step {s}): divergence detected at step {first}",
                  flush=True)
        if first != s:
            failures.append(f"perturbation at rank {r} step {s} detected at step {first}")
    dist.barrier()
    dist.destroy_process_group()
    if failures:
        raise SystemExit(f"rank {rank}: FAILED: " + "; ".join(failures))
    if rank == 0:
        print("tp_digest: passed", flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nproc", type=int, default=None,
                   help="ranks to spawn (default: GPUs, at least 2; ignored under torchrun)")
    p.add_argument("--steps", type=int, default=10000)
    p.add_argument("--page-size", type=int, default=16)
    p.add_argument("--pages", type=int, default=256)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--backend", choices=["cuda", "host"], default="cuda",
                   help="pool backend (host: no GPU needed, gloo)")
    p.add_argument("--gloo", action="store_true", help="gloo even when NCCL would work")
    p.add_argument("--mode", choices=["both", "equal", "perturb"], default="both")
    p.add_argument("--perturb-rank", type=int, default=None)
    p.add_argument("--perturb-step", type=int, default=None)
    p.add_argument("--report-every", type=int, default=1000)
    p.add_argument("--port", type=int, default=29517)
    p.add_argument("--in-process", action="store_true",
                   help="all ranks in this process with host pools (no torch needed)")
    args = p.parse_args()
    if args.in_process:
        main_in_process(args, args.nproc or 2)
        return
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:  # torchrun
        worker(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), args)
        return
    import torch
    import torch.multiprocessing as mp

    world = args.nproc
    if world is None:
        world = max(2, torch.cuda.device_count() if args.backend == "cuda" else 2)
    if args.backend == "cuda" and not torch.cuda.is_available():
        raise SystemExit("tp_digest: no CUDA device (use --backend host for a CPU run)")
    mp.spawn(worker, args=(world, args), nprocs=world, join=True)


if __name__ == "__main__":
    main()
