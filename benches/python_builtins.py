#!/usr/bin/env python3
"""The Python package's call mechanism alone: the library's builtins (what the package calls
now, python/kvpool/_native.py) against ctypes functions of the same symbols (what it called
before), in one process on one pool, alternating.

    python3 benches/python_builtins.py [--lib PATH] [--rounds 15] [--number 2000]

Each sample is a pair of host-pool calls that leaves the pool as it was (an allocation, then
the free of its slots), timed with timeit (best of 3 repeats of --number pairs); the table
gives the median and the fastest of --rounds samples, in ns per pair:

- "entry points": ``kvp_python_pool_alloc`` / ``kvp_python_pool_alloc_extend`` then
  ``kvp_python_pool_free_indices`` on array.array buffers (objects in; ``ctypes.PyDLL``
  functions with ``py_object`` argtypes against the builtins);
- "lib.fast": ``kvp_pool_alloc`` / ``kvp_pool_alloc_extend`` then ``kvp_pool_free_indices``
  with every argument an int (``ctypes.CDLL`` functions with ``void *`` / ``size_t``
  argtypes against the builtins).
"""
import argparse
import array
import ctypes
import os
import statistics
import sys
import timeit

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python"))

import kvpool  # noqa: E402


def ctypes_function(dll, name, argtypes):
    function = dll[name]
    function.argtypes = argtypes
    function.restype = ctypes.c_int32
    return function


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--lib", help="libkvpool.so (default: as kvpool.load() finds it)")
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--number", type=int, default=2000)
    args = p.parse_args()
    lib = kvpool.load(args.lib)
    if lib.python is None:
        sys.exit("the library's builtins did not load (KVPOOL_PYTHON_NATIVE=0?)")
    pool = kvpool.Pool(1 << 16, 16, lib=lib)
    h = pool.handle
    obj, size, addr = ctypes.py_object, ctypes.c_size_t, ctypes.c_void_p
    pydll, cdll = ctypes.PyDLL(lib.path), ctypes.CDLL(lib.path)
    old = {
        "alloc": ctypes_function(pydll, "kvp_python_pool_alloc", [addr, size, obj]),
        "extend": ctypes_function(pydll, "kvp_python_pool_alloc_extend",
                                  [addr, obj, obj, obj, size, obj]),
        "free": ctypes_function(pydll, "kvp_python_pool_free_indices", [addr, obj]),
        "fast_alloc": ctypes_function(cdll, "kvp_pool_alloc", [addr, size, addr, size]),
        "fast_extend": ctypes_function(cdll, "kvp_pool_alloc_extend",
                                       [addr, addr, addr, addr, size, size, addr, size]),
        "fast_free": ctypes_function(cdll, "kvp_pool_free_indices", [addr, addr, size]),
    }
    native = lib.python
    new = {
        "alloc": native.kvp_python_pool_alloc, "extend": native.kvp_python_pool_alloc_extend,
        "free": native.kvp_python_pool_free_indices, "fast_alloc": native.kvp_pool_alloc,
        "fast_extend": native.kvp_pool_alloc_extend, "fast_free": native.kvp_pool_free_indices,
    }
    out = array.array("q", [0] * 16)
    prefix, seq, last = array.array("q", [0]), array.array("q", [16]), array.array("q", [-1])
    o, pa, sa, la = (a.buffer_info()[0] for a in (out, prefix, seq, last))

    def pairs(f):
        return {
            "entry points: alloc + free_indices": lambda: (f["alloc"](h, 16, out),
                                                           f["free"](h, out)),
            "entry points: alloc_extend + free_indices": lambda: (
                f["extend"](h, prefix, seq, last, 16, out), f["free"](h, out)),
            "lib.fast: alloc + free_indices": lambda: (f["fast_alloc"](h, 16, o, 16),
                                                       f["fast_free"](h, o, 16)),
            "lib.fast: alloc_extend + free_indices": lambda: (
                f["fast_extend"](h, pa, sa, la, 1, 16, o, 16), f["fast_free"](h, o, 16)),
        }

    cases = {}
    for label, f in (("ctypes", old), ("builtins", new)):
        for name, run in pairs(f).items():
            if run() != (0, 0):
                sys.exit(f"{label} {name}: a call failed")
            cases[(name, label)] = run
    samples = {key: [] for key in cases}
    for _ in range(args.rounds):
        for key, run in cases.items():
            best = min(timeit.repeat(run, number=args.number, repeat=3))
            samples[key].append(best / args.number * 1e9)
    print(f"Python {sys.version.split()[0]}; {lib.path}; {args.rounds} rounds, ns per pair "
          "of calls: median [fastest]\n")
    print("| pair | ctypes | builtins | builtins / ctypes |")
    print("|---|---:|---:|---:|")
    for name in pairs(old):
        a, b = samples[(name, "ctypes")], samples[(name, "builtins")]
        print(f"| {name} | {statistics.median(a):.0f} [{min(a):.0f}] | "
              f"{statistics.median(b):.0f} [{min(b):.0f}] | "
              f"{statistics.median(b) / statistics.median(a):.2f} |")


if __name__ == "__main__":
    main()
