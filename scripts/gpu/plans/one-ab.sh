# Calls of exactly one request (kvp_extend_one_*, kvp_decode_one_*) against the kernels they
# were built from, A/B of builds packed with `scripts/gpu/pack.sh --variant P=REV --variant
# T=.` (C++ benchmark only, alternating AB_VARIANTS, default "P T P T"): one request of
# 16-8,192 tokens at pages 1, 16 and 64 (16 tokens: pages 1 and 16, a multiple of the page
# size), and decodes of one request; two requests beside them (the same kernels in both
# builds: a control). Tables: scripts/gpu/ab_table.py $OUT/one16 P T (one64, ..., one8192,
# decode). Runs s34-3 and s34-4 (BENCHMARKS.md, thirty-fourth session).
for tokens in 16 64 128 256 512 1024 2048 8192; do
    pages=1,16,64
    [[ $tokens == 16 ]] && pages=1,16
    ab_bench "one$tokens" "--ops alloc_extend --page-sizes $pages --batch-sizes 1,2 --extend-tokens $tokens"
done
ab_bench decode "--ops alloc_decode --page-sizes 1,16,64 --batch-sizes 1,2"
