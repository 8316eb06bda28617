"""ns per expression on a CUDA tensor (what the package's device_pointer reads) and on a CPU
tensor (what _buffers' torch handler reads for a host copy, and what a copy through numpy
would cost instead), medians of 7.

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
c = torch.zeros(256, dtype=torch.int64)
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
    "c.is_cpu": "c.is_cpu",
    "c.stride(0)": "c.stride(0)",
    "c.dim()": "c.dim()",
    "c.numpy()": "c.numpy()",
    "c.__array__()": "c.__array__()",
    "memoryview(c.numpy())": "memoryview(c.numpy())",
    "_from_tensor(c) (the handler)": "ft(c, I64, 'x', False)",
    "_from_ndarray(c.numpy())": "fn(c.numpy(), I64, 'x', False)",
    "_from_ndarray(a) (numpy alone)": "fn(a, I64, 'x', False)",
}
a = c.numpy()
_buffers._handler(c)(c, I64, "x", False)  # the handlers' dtypes set, as after a first call
_buffers._handler(a)(a, I64, "x", False)
g = dict(t=t, c=c, a=a, f=f, U=U, ag=ag, dp=_buffers.device_pointer, I64=I64, raw=raw,
         ft=_buffers._from_tensor, fn=_buffers._from_ndarray)
n = 200000
for name, e in exprs.items():
    try:
        r = timeit.repeat(e, globals=g, number=n, repeat=7)
        print(f"{name:34s} {statistics.median(r) / n * 1e9:8.1f} ns")
    except Exception as ex:
        print(f"{name:34s} error {ex}")
