# Extends of 2-8 requests on the extend_few kernels built for at most 2, 4 or 8 requests
# (kvp_extend_few{2,4,8}_*) against the kernels for 32 they were built from, A/B of builds
# packed with `scripts/gpu/pack.sh --variant P=REV --variant T=.` (C++ benchmark only,
# alternating AB_VARIANTS, default "P T P T"): 1-9 requests of 16-2,048 tokens each at pages
# 1, 16 and 64 (16 tokens: pages 1 and 16, a multiple of the page size); one request and nine
# run the same kernels in both builds (controls). Tables: scripts/gpu/ab_table.py
# $OUT/bounded16 P T (bounded64, ..., bounded2048). Run s35-1 (BENCHMARKS.md, thirty-fifth
# session).
for tokens in 16 64 256 512 2048; do
    pages=1,16,64
    [[ $tokens == 16 ]] && pages=1,16
    ab_bench "bounded$tokens" "--ops alloc_extend --page-sizes $pages --batch-sizes 1,2,3,4,5,8,9 --extend-tokens $tokens"
done
