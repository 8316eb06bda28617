# kvpool against SGLang's Triton kernels (scripts/gpu/steps.sh): the C++ benchmark and
# bench-gpu/baseline_bench.py on the sizes of issue 9's table; TRITON_ARGS replaces them.
# Read with scripts/gpu/triton_table.py OUT/triton (per replay of a one-call graph and per
# launch in a graph of 100).
step triton BENCH_ARGS="${TRITON_ARGS:---ops alloc_extend,alloc_decode --page-sizes 16,64 --batch-sizes 1,8,64,256,1024,4096}" bench
