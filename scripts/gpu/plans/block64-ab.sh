# Extends of 33-64 requests of at most 128 tokens on one block of 256 threads
# (kvp_extend_block_*, by row kvp_extend_block_rows_*) where two warps took them
# (kvp_extend_block64_*), A/B of builds packed with `scripts/gpu/pack.sh --variant P=REV
# --variant T=.` (C++ benchmark only, alternating AB_VARIANTS, default "P T P T"): 33, 48 and
# 64 requests of 1-3 tokens at page size 1 (the benchmark's tokens a request are a multiple
# of every page size it runs; 3 x 48 and 3 x 64 pass 128 tokens: the same kernel in both
# builds, a control). Tables: scripts/gpu/ab_table.py $OUT/b64_1 P T (b64_2, b64_3). Run
# s35-7 (BENCHMARKS.md, thirty-fifth session).
for tokens in 1 2 3; do
    ab_bench "b64_$tokens" "--ops alloc_extend,alloc_extend_rows --page-sizes 1 --batch-sizes 33,48,64 --extend-tokens $tokens"
done
