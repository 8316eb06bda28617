# Fifty-sixth session (run s56-3): decode blocks that enter their tables as soon as last_loc
# (and by row, the row) is in and read them after block_rank2's barrier. R =
# s56-decode-early-tables.patch (both), T = R's change to the blocks not by row alone (the
# same patch without the ROWS part: `row_enters` entered late as before), against main (M);
# every test and sanitizer on R.
# (Run s56-2 measured E, s56-decode-claims.patch, the fill word exchanged for a mark:
# 1.04-1.16x M, not kept; and X, no table at all: 0.85-0.90x M, the bound.)
#   T=1432b0d (refs/variants/s56-decode-early-table, this checkout only)
#   R=$(scripts/gpu/patch-variant.sh scripts/gpu/plans/s56-decode-early-tables.patch main)
#   git checkout --detach $R && scripts/gpu/pack.sh --variant M=main --variant T=$T --variant R=.
#   timeout 590 env OUT=$OUT scripts/gpu/steps.sh scripts/gpu/plans/s56-early-tables.sh
# Tables: python3 scripts/gpu/ab_table.py $OUT/ab-early M T R, $OUT/ab-early-rows M R,
# $OUT/ab-early-control M R.
step tests tests
ab_bench ab-early "--flat-graph --ops alloc_decode --page-sizes 16,64 --batch-sizes 33,64,256,512,1024" "M T R M T R M T R"
ab_bench ab-early-rows "--flat-graph --ops alloc_decode_rows --page-sizes 1,16,64 --batch-sizes 33,256,1024" "M R M R M R"
ab_bench ab-early-control "--flat-graph --ops alloc_decode,alloc_extend --page-sizes 1,16 --batch-sizes 8,256,4096" "M R M R"
step sanitize SANITIZE_OPS=100 sanitize-quick
step sanitize-rows SANITIZE_OPS=100 sanitize-rows
step python python
