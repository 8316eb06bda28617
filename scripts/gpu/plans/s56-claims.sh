# Fifty-sixth session: decode blocks (33-1,024 requests, not by row) that find two requests
# continuing one page by exchanging the page's fill word for a mark, the shared table only
# when a mark is read (E, scripts/gpu/plans/s56-decode-claims.patch), against main (M) and
# the upper bound without any table (X, s56-decode-notable.patch: a measurement only).
#   X=$(scripts/gpu/patch-variant.sh scripts/gpu/plans/s56-decode-notable.patch main)
#   E=$(scripts/gpu/patch-variant.sh scripts/gpu/plans/s56-decode-claims.patch main)
#   git checkout --detach $E && scripts/gpu/pack.sh --variant M=main --variant X=$X --variant E=.
#   timeout 590 env OUT=$OUT scripts/gpu/steps.sh scripts/gpu/plans/s56-claims.sh
# Tables: python3 scripts/gpu/ab_table.py $OUT/ab-claims M X E (and ab-claims-control M E).
step tests tests
ab_bench ab-claims "--flat-graph --ops alloc_decode --page-sizes 16,64 --batch-sizes 33,64,256,512,1024" "M X E M X E M X E"
ab_bench ab-claims-control "--flat-graph --ops alloc_decode,alloc_decode_rows --page-sizes 1,16 --batch-sizes 8,256,4096" "M E M E"
step sanitize SANITIZE_OPS=100 sanitize-quick
step python python
if on_card H200; then
    # shellcheck source=/dev/null
    source scripts/gpu/plans/triton.sh
    step triton-flat BENCH_CPP_ARGS=--flat-graph BENCH_ARGS="--ops alloc,alloc_extend,alloc_decode --page-sizes 16,64 --batch-sizes 1,8,64,256,1024,4096" bench
fi
