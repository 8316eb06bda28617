"""ns per call on the H200 host: the library's reads of four CUDA tensors (kvp_python_pool_
alloc_extend_tensors, into a host pool that refuses the async call at once) against the same
entry point given their addresses as ints, and the package's four device_pointer reads."""
import array, statistics, sys, timeit
# python3 scripts/gpu/tensor_reads.py PACKAGE_DIR LIBRARY (this branch's package and library)
pkg, lib = sys.argv[1], sys.argv[2]
sys.path.insert(0, pkg)
import kvpool
import torch
L = kvpool.load(lib)
native = L.python
host = kvpool.Pool(4096, page_size=16, lib=L)
h = host.handle
ts = [torch.zeros(n, dtype=torch.int64, device="cuda:0") for n in (256, 256, 256, 512)]
ph, sh = array.array("q", [0] * 256), array.array("q", [2] * 256)
I64 = kvpool._INT64
I64.torch = torch.int64
dp = kvpool._buffers.device_pointer
ptrs = [t.data_ptr() for t in ts]
cases = {
    "tensors: library reads 4": lambda: native.kvp_python_pool_alloc_extend_tensors(
        h, ph, sh, ts[0], ts[1], ts[2], 512, ts[3], 0, 0, torch.int64, torch.int64),
    "tensors: falls back at the 1st dtype": lambda: native.kvp_python_pool_alloc_extend_tensors(
        h, ph, sh, ts[0], ts[1], ts[2], 512, ts[3], 0, 0, torch.float32, torch.int64),
    "addresses as ints": lambda: native.kvp_python_pool_alloc_extend_async(
        h, ph, sh, ptrs[0], ptrs[1], ptrs[2], 256, 512, ptrs[3], 512, 0),
    "4 x device_pointer (Python)": lambda: (dp(ts[0], I64, "a", 0), dp(ts[1], I64, "b", 0),
                                            dp(ts[2], I64, "c", 0), dp(ts[3], I64, "d", 0)),
}
print("status tensors", cases["tensors: library reads 4"](), "ints", cases["addresses as ints"](),
      "fallback", cases["tensors: falls back at the 1st dtype"]())
n = 100000
for name, f in cases.items():
    r = timeit.repeat(f, number=n, repeat=9)
    print(f"{name:40s} {statistics.median(r) / n * 1e9:8.1f} ns")
