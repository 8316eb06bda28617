# The several-block extend kernels' grid (src/cuda/pool.rs: span_grid), A/B of builds packed
# with `scripts/gpu/pack.sh --variant P=REV --variant T=.` (C++ benchmark only, alternating
# AB_VARIANTS, default "P T P T"): 1-256 requests of 512 tokens, plain and by row; 33-256
# requests of 16 tokens, plain and by row; 1-8 requests of 2,048 and 8,192 tokens (long
# prefill chunks). Tables: scripts/gpu/ab_table.py $OUT/ab512 P T (ab16, abl2048, abl8192).
# Run s33-8 (BENCHMARKS.md, thirty-third session).
ab_bench ab512 "--ops alloc_extend,alloc_extend_rows --page-sizes 16 --batch-sizes 1,2,4,8,16,32,33,64,128,256 --extend-tokens 512"
ab_bench ab16 "--ops alloc_extend,alloc_extend_rows --page-sizes 1,16 --batch-sizes 33,64,128,256 --extend-tokens 16"
ab_bench abl2048 "--ops alloc_extend --page-sizes 16,64 --batch-sizes 1,2,8 --extend-tokens 2048"
ab_bench abl8192 "--ops alloc_extend --page-sizes 16,64 --batch-sizes 1,2,8 --extend-tokens 8192"
