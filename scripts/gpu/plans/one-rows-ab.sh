# Calls by request row of exactly one request (kvp_extend_one_{warp,block,blocks}_rows_*,
# kvp_decode_one_rows_*) against the rows kernels they were built from, A/B of builds packed
# with `scripts/gpu/pack.sh --variant P=REV --variant T=.` (C++ benchmark only, alternating
# AB_VARIANTS, default "P T P T"): one request of 16-2,048 tokens and decodes of one request,
# pages 1, 16 and 64 (16 tokens: 1 and 16); two requests beside them (a control). Tables:
# scripts/gpu/ab_table.py $OUT/rows16 P T (rows64, rows512, rows2048, rows-decode).
for tokens in 16 64 512 2048; do
    pages=1,16,64
    [[ $tokens == 16 ]] && pages=1,16
    ab_bench "rows$tokens" "--ops alloc_extend_rows --page-sizes $pages --batch-sizes 1,2 --extend-tokens $tokens"
done
ab_bench rows-decode "--ops alloc_decode_rows --page-sizes 1,16,64 --batch-sizes 1,2"
