# Fifty-first session, after run s51-4: the tree (G) = main + the first request's tokens
# planned without a search in extend_block's several blocks only (plan_block_tokens' GRID;
# run s51-4's P did it in every extend_block kernel: 1.01-1.02x the time at 33-256
# requests of 16 tokens). By `cuobjdump -sass -arch sm_90` only kvp_extend_blocks*_*
# (not by row) differ from main's. Pack with
#   G=$(scripts/gpu/patch-variant.sh scripts/gpu/plans/s51-grid-first-request.patch main)
#   git checkout --detach $G && scripts/gpu/pack.sh --variant M=main --variant G=.
# then `timeout 560 env OUT=$OUT scripts/gpu/steps.sh scripts/gpu/plans/s51-grid-plan.sh`;
# `python3 scripts/gpu/ab_table.py $OUT/NAME M G`.
ab_bench ab-grid "--ops alloc_extend --page-sizes 1,16,64 --batch-sizes 33,64,128,256,1024,4096" "M G M G M G"
ab_bench ab-grid16 "--ops alloc_extend --extend-tokens 16 --page-sizes 16 --batch-sizes 33,256,1024,4096" "M G M G"
step tests tests
step sanitize SANITIZE_OPS=100 sanitize-quick
step python python
