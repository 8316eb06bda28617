# The ticketed multi-block kernel (kvp_extend_*: extends of more than 1,024 requests, decodes
# of more than 1,024), A/B as kernel-ab.sh's bench (builds from `scripts/gpu/pack.sh
# --variant`; AB_VARIANTS, default "P T P T"): extends of 512 tokens a request and decodes at
# 300-4,096 requests, then extends of 128, 64 and 16 tokens a request (its two token loops
# part at LONG_REQUEST tokens a request, kernels/extend_grid.cuh). Run s26-4 ran these
# steps with kernel-ab.sh's tests, sanitizers and Python tests. (Since the thirtieth session
# extends of 300 and 1,024 requests run on the wide deciding blocks, not on this kernel.)
step grid BENCH_PYTHON=0 BENCH_VARIANTS="${AB_VARIANTS:-P T P T}" \
    BENCH_ARGS="--ops alloc_extend,alloc_decode --page-sizes 1,16,64 --batch-sizes 300,1024,2048,4096" bench
step grid128 BENCH_PYTHON=0 BENCH_VARIANTS="${AB_VARIANTS:-P T P T}" \
    BENCH_ARGS="--ops alloc_extend --page-sizes 1,16,64 --batch-sizes 1024,4096 --extend-tokens 128" bench
step grid64 BENCH_PYTHON=0 BENCH_VARIANTS="${AB_VARIANTS:-P T P T}" \
    BENCH_ARGS="--ops alloc_extend --page-sizes 1,16,64 --batch-sizes 1024,4096 --extend-tokens 64" bench
step grid16 BENCH_PYTHON=0 BENCH_VARIANTS="${AB_VARIANTS:-P T P T}" \
    BENCH_ARGS="--ops alloc_extend --page-sizes 1,16 --batch-sizes 300,1024,4096 --extend-tokens 16" bench
