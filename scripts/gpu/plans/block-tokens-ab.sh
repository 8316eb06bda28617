# Extends of 33-256 requests of 257-512 tokens on several blocks of 256 tokens
# (kvp_extend_blocks_*, by row kvp_extend_blocks_rows_*) where one block of 256 threads took
# them (kvp_extend_block_*, two tokens a thread), A/B of builds packed with
# `scripts/gpu/pack.sh --variant P=REV --variant T=.` (C++ benchmark only, alternating
# AB_VARIANTS, default "P T P T"): 33-256 requests of 2-8 tokens at page size 1 (the
# benchmark's tokens a request are a multiple of every page size it runs), and of 16 tokens
# at pages 1 and 16 (528 tokens or more: several blocks in both builds, a control). Tables:
# scripts/gpu/ab_table.py $OUT/bt2 P T (bt4, bt8, bt16). Run s35-4 (BENCHMARKS.md,
# thirty-fifth session).
for tokens in 2 4 8 16; do
    pages=1
    [[ $tokens -ge 16 ]] && pages=1,16
    ab_bench "bt$tokens" "--ops alloc_extend,alloc_extend_rows --page-sizes $pages --batch-sizes 33,64,128,200,256 --extend-tokens $tokens"
done
