# Fifty-seventh session (PENDING.md item 9): the decodes' repeat detection issued while the
# page words load, instead of after their checks. W (s57-warp-match-early.patch): one warp's
# match_any on the candidates' pages and rows (2-32 requests). WK (s57-decode-early.patch):
# W, and a block's candidates enter the shared tables right after block_rank2's barrier
# (33-1,024 requests); only the requests whose checks pass look up. Same verdicts.
#   W=$(scripts/gpu/patch-variant.sh scripts/gpu/plans/s57-warp-match-early.patch main)
#   WK=$(scripts/gpu/patch-variant.sh scripts/gpu/plans/s57-decode-early.patch main)
#   git checkout --detach $WK && scripts/gpu/pack.sh --variant M=main --variant W=$W --variant WK=.
#   timeout 560 env OUT=$OUT scripts/gpu/steps.sh scripts/gpu/plans/s57-early.sh
# Tables: python3 scripts/gpu/ab_table.py $OUT/ab-warp M W (and M WK), ab-block M WK,
# ab-control M WK.
step tests tests
ab_bench ab-warp "--flat-graph --ops alloc_decode,alloc_decode_rows --page-sizes 1,16,64 --batch-sizes 2,8,16,32" "M W WK M W WK M W WK"
ab_bench ab-block "--flat-graph --ops alloc_decode,alloc_decode_rows --page-sizes 16,64 --batch-sizes 33,64,256,512,1024" "M WK M WK M WK"
ab_bench ab-control "--flat-graph --ops alloc_decode,alloc_extend --page-sizes 1,16 --batch-sizes 1,256,4096" "M WK M WK"
step sanitize SANITIZE_OPS=100 sanitize-quick
step sanitize-rows SANITIZE_OPS=100 sanitize-rows
step python python
# shellcheck source=/dev/null
source scripts/gpu/plans/triton-h200-main.sh
