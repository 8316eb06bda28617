# Fifty-fourth session (PENDING.md item 7). K = main + s54-block1k.patch: one block of 256
# threads plans four tokens a thread (PLAN_PER 4, its owners' span 1,024) and takes 33-256
# requests of up to 1,024 tokens (BLOCK_TOKENS 512 -> 1,024), where 513-1,024 tokens have
# gone to the several-block kernel (64 requests of 16 tokens: 1.45x Triton, run s53-5).
# F = K + s54-block1k-few.patch's host part: 2-32 requests of 513-1,024 tokens on that
# block too (not extend_few's several blocks). Pack with
#   K=$(scripts/gpu/patch-variant.sh scripts/gpu/plans/s54-block1k.patch main)
#   F=$(scripts/gpu/patch-variant.sh scripts/gpu/plans/s54-block1k-few.patch main)
#   git checkout --detach $F && scripts/gpu/pack.sh --variant M=main --variant K=$K --variant F=.
# then `timeout 540 env OUT=$OUT scripts/gpu/steps.sh scripts/gpu/plans/s54-block1k.sh`;
# `python3 scripts/gpu/ab_table.py $OUT/NAME M K F`. On an H200 also the README's table.
source scripts/gpu/plans/triton-h200.sh
ab_bench ab-k-16 "--ops alloc_extend --extend-tokens 16 --page-sizes 1,16 --batch-sizes 33,64" "M K F M K F M K F"
ab_bench ab-k-8 "--ops alloc_extend --extend-tokens 8 --page-sizes 1 --batch-sizes 65,100,128" "M K F M K F M K F"
ab_bench ab-k-4 "--ops alloc_extend --extend-tokens 4 --page-sizes 1 --batch-sizes 129,200,256" "M K F M K F M K F"
ab_bench ab-k-few "--ops alloc_extend --extend-tokens 64 --page-sizes 1,16,64 --batch-sizes 9,16" "M K F M K F M K F"
ab_bench ab-k-few2 "--ops alloc_extend --extend-tokens 256 --page-sizes 1,16,64 --batch-sizes 3,4" "M K F M K F M K F"
ab_bench ab-k-control "--ops alloc_extend --extend-tokens 2 --page-sizes 1 --batch-sizes 65,256" "M K F M K F"
ab_bench ab-k-control16 "--ops alloc_extend --extend-tokens 16 --page-sizes 16 --batch-sizes 8,256" "M K F M K F"
step tests tests
step sanitize SANITIZE_OPS=100 sanitize-quick
step python python
