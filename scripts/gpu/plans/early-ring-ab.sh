# Extends of 33-256 requests of at most 256 tokens on one block (kvp_extend_block_*,
# kvp_extend_block64_*) whose ring pages are loaded with the prefix pages' words, from the
# cursor alone, against the same kernels loading them after the requests' scan: A/B of builds
# packed with `scripts/gpu/pack.sh --variant P=REV --variant T=.` (C++ benchmark only,
# alternating AB_VARIANTS, default "P T P T"), 33-256 requests of 1 and 2 tokens at page
# size 1 (the benchmark's tokens a request are a multiple of every page size it runs; 256 x 2
# runs on several blocks in both builds, a control). Tables: scripts/gpu/ab_table.py
# $OUT/early1 P T (early2). Run s35-9 (BENCHMARKS.md, thirty-fifth session).
for tokens in 1 2; do
    ab_bench "early$tokens" "--ops alloc_extend --page-sizes 1 --batch-sizes 33,64,128,200,256 --extend-tokens $tokens"
done
