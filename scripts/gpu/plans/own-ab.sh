# Extends of 33-256 short requests on kvp_extend_block_own_* (one block, each thread writing
# its own request's tokens) against the kernels they ran on (kvp_extend_block_* up to 512
# tokens, kvp_extend_blocks_* past them), A/B of builds packed with `scripts/gpu/pack.sh
# --variant P=REV --variant T=.` (C++ benchmark only, alternating AB_VARIANTS, default "P T P
# T"): 2-32 tokens a request (pages whose size divides it), and 64 tokens, past
# OWN_AVERAGE_TOKENS (the same kernel in both builds: a control). Tables:
# scripts/gpu/ab_table.py $OUT/own2 P T (own4, ..., own64). Run s35-3 (BENCHMARKS.md,
# thirty-fifth session).
for tokens in 2 4 8 16 32 64; do
    pages=1
    [[ $tokens -ge 16 ]] && pages=1,16
    [[ $tokens -ge 64 ]] && pages=1,16,64
    step "own$tokens" BENCH_PYTHON=0 BENCH_VARIANTS="${AB_VARIANTS:-P T P T}" \
        BENCH_ARGS="--ops alloc_extend --page-sizes $pages --batch-sizes 33,64,128,200,256 --extend-tokens $tokens" bench
done
