# Extends of 1,025-2,048 requests on blocks of 1,024 threads of two requests each that each
# decide the call (kvp_extend_blocks2048_*, also by row; the ticketed kernel before, by row its
# three kernels): every GPU test, an A/B of packed builds (AB_VARIANTS, default "P T P T") on
# alloc_extend and alloc_extend_rows of 64-2,049 requests of 512 tokens and 1,025-2,048 of 64
# (page 16, 64), both sanitizers with the C++ examples, the Python tests. Tables:
# scripts/gpu/ab_table.py $OUT/bench P T (and $OUT/bench-64).
step tests tests
ab_bench bench "--ops alloc_extend,alloc_extend_rows --page-sizes 16,64 --batch-sizes 64,256,1024,1025,1536,2048,2049"
ab_bench bench-64 "--ops alloc_extend,alloc_extend_rows --page-sizes 16 --batch-sizes 1025,2048 --extend-tokens 64"
step sanitize SANITIZE_OPS="${SANITIZE_OPS:-100}" sanitize example
step python python
