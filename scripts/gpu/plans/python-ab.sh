# A change to the Python binding (scripts/gpu/steps.sh): the Python tests on this tree (CUDA
# tensors and torch, test_cuda.py and test_kvpool.py), then benches/python_overhead.py on two
# packed builds, each its own package on its own library, alternating
# (`scripts/gpu/pack.sh --variant P=REV --variant T=.`; OVERHEAD_AB_VARIANTS, default
# "P T P T"; OVERHEAD_ARGS, default bs 1 and 256, five rounds), device pool then host pool;
# and the call mechanism alone (benches/python_builtins.py).
step python python
step builtins python-builtins
step overhead OVERHEAD_VARIANTS="${OVERHEAD_AB_VARIANTS:-P T P T}" \
    OVERHEAD_ARGS="${OVERHEAD_ARGS:---batch-sizes 1,256 --rounds 5}" python-overhead
