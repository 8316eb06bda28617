"""What each PyTorch tensor accessor the Python package reads costs, per call (best of five
timeit runs), for a CPU and a CUDA int64 tensor: the floor of any binding that checks a
tensor's device, dtype, layout and length before handing its pointer to C.

    python3 bench-gpu/torch_accessors.py        # on a machine with PyTorch and a GPU
"""

import timeit

import torch

EXPRESSIONS = [
    "t.data_ptr()", "t.is_cuda", "t.is_cpu", "t.get_device()", "t.dtype", "t.dtype is i64",
    "t.stride()", "t.stride() == (1,)", "t.is_contiguous()", "t.numel()", "t.shape[0]",
    "len(t)", "t.device", "t.device.index", "t.ndim", "t.dim()",
    "t.untyped_storage().data_ptr()", "t.storage_offset()", "type(t)", "t._version",
    "torch._C._cuda_getCurrentRawStream(0)", "torch.cuda.current_stream().cuda_stream",
    "t.nbytes", "t.itemsize", "t.device == dev", "t.__dlpack_device__()",
    # what _buffers.device_pointer reads of a device tensor, in one expression
    "t.is_cuda and t.dtype is i64 and t.stride() == (1,) and t.get_device() == 0 "
    "and (t.data_ptr(), t.numel())",
]


def main():
    tensors = {"cpu": torch.zeros(4, dtype=torch.int64),
               "cuda": torch.zeros(4, dtype=torch.int64, device="cuda")}
    calls = 200_000
    for name, tensor in tensors.items():
        for expression in EXPRESSIONS:
            scope = {"t": tensor, "i64": torch.int64, "torch": torch,
                     "dev": torch.device(name, 0) if name == "cuda" else torch.device("cpu")}
            best = min(timeit.repeat(expression, globals=scope, number=calls, repeat=5))
            print(f"{name:5} {expression:45} {best / calls * 1e9:7.1f} ns")


if __name__ == "__main__":
    main()
