# Extends of 33-64 requests of at most 512 tokens on extend_few's one-block shapes with two
# requests a lane (kvp_extend_pairs_*) against the request-a-thread kernels that served them
# (kvp_extend_block64_*, kvp_extend_block_*, kvp_extend_blocks_*): A/B of builds packed with
# `scripts/gpu/pack.sh --variant P=REV --variant T=.` (C++ benchmark only, alternating
# AB_VARIANTS, default "P T P T"). Page size 1 (the benchmark's tokens a request are a
# multiple of every page size it runs, and a request of 16 tokens or more passes 512 tokens
# at 33 requests): 1-8 tokens a request at 32 (a control: kvp_extend_few_* in both), 33, 48
# and 64 requests, and 65 (a control: kvp_extend_block_* in both); by row, which keeps the
# request-a-thread kernels, a control. Tables: scripts/gpu/ab_table.py $OUT/pairsN P T.
for tokens in 1 2 4 8; do
    ab_bench "pairs$tokens" "--ops alloc_extend,alloc_extend_rows --page-sizes 1 --batch-sizes 32,33,48,64,65 --extend-tokens $tokens"
done
