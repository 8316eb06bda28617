# Extends by row of more than 2,048 requests (gather, ticketed kernel, scatter): the scatter
# kernel's blocks take runs of tokens and stage their requests (one block-wide search)
# instead of each token searching tok_off in global memory. Every GPU test (with
# cuda_rows' large_extends_by_row_match_the_host_backend), an A/B of packed builds
# (AB_VARIANTS, default "P T P T") on extends of 1,024-4,096 requests of 512 and 16 tokens,
# plain and by row, Nsight Compute's time of each of the three kernels (this tree and P),
# both sanitizers with the C++ examples, the Python tests. Tables:
# scripts/gpu/ab_table.py $OUT/bench P T (and $OUT/bench-16).
step tests tests
ab_bench bench "--ops alloc_extend,alloc_extend_rows --page-sizes 1,16,64 --batch-sizes 1024,2049,3001,4096"
ab_bench bench-16 "--ops alloc_extend_rows --page-sizes 16 --batch-sizes 2049,4096 --extend-tokens 16"
step profile BENCH_VARIANTS=P PROFILE_KERNELS="^kvp_(rows|extend)" PROFILE_LAUNCHES=12 \
    PROFILE_ARGS="--ops alloc_extend_rows --page-sizes 16 --batch-sizes 2049" profile
step sanitize SANITIZE_OPS="${SANITIZE_OPS:-100}" sanitize example
step python python
