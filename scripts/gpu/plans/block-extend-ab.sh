# Extends of 33-256 requests on extend_block's kernels, A/B as kernel-ab.sh's bench (builds P
# and T from `scripts/gpu/pack.sh --variant`): 4 tokens a request at 33 and 64 requests (132
# and 256 tokens: kvp_extend_block64_*), 16 tokens at 33, 64 and 256 (528 and 1,024 tokens:
# one block of 256 threads, kvp_extend_block_*; 4,096: several, kvp_extend_blocks_*).
step block4 BENCH_PYTHON=0 BENCH_VARIANTS="${AB_VARIANTS:-P T P T}" \
    BENCH_ARGS="--ops alloc_extend --page-sizes 1 --batch-sizes 33,64 --extend-tokens 4" bench
step block16 BENCH_PYTHON=0 BENCH_VARIANTS="${AB_VARIANTS:-P T P T}" \
    BENCH_ARGS="--ops alloc_extend --page-sizes 1,16 --batch-sizes 33,64,256 --extend-tokens 16" bench
