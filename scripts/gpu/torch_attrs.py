"""ns per expression on a CUDA tensor: what the package's device_pointer reads (medians of 7).

    python3 scripts/gpu/torch_attrs.py   (on the GPU machine, from the repository root)
"""
import operator
import statistics
import sys
import timeit

sys.path.insert(0, "python")
import torch
from kvpool import _buffers
import kvpool
t = torch.zeros(256, dtype=torch.int64, device="cuda:0")
I64 = kvpool._INT64
_ = _buffers.device_pointer(t, I64, "x", 0)
raw = torch._C._cuda_getCurrentRawStream
ag = operator.attrgetter("is_cuda", "dtype")
def f(x): return x
U = (1,)
exprs = {
    "f(t) (a Python call)": "f(t)",
    "t.is_cuda": "t.is_cuda",
    "t.dtype": "t.dtype",
    "t.stride()": "t.stride()",
    "t.stride() == U": "t.stride() == U",
    "t.get_device()": "t.get_device()",
    "t.data_ptr()": "t.data_ptr()",
    "t.numel()": "t.numel()",
    "t.is_contiguous()": "t.is_contiguous()",
    "t.ndim": "t.ndim",
    "t.shape": "t.shape",
    "t.device": "t.device",
    "attrgetter(is_cuda,dtype)(t)": "ag(t)",
    "device_pointer(t)": "dp(t, I64, 'x', 0)",
    "raw(0)": "raw(0)",
    "t._version": "t._version",
}
g = dict(t=t, f=f, U=U, ag=ag, dp=_buffers.device_pointer, I64=I64, raw=raw)
n = 200000
for name, e in exprs.items():
    try:
        r = timeit.repeat(e, globals=g, number=n, repeat=7)
        print(f"{name:34s} {statistics.median(r) / n * 1e9:8.1f} ns")
    except Exception as ex:
        print(f"{name:34s} error {ex}")
