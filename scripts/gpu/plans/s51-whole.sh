# Fifty-first session, after run s51-5 (G: extend_block's several blocks plan the first
# request's tokens without a search, token by token: 0.98-0.99x at 33-1,024 requests of 512
# tokens, 1.01-1.02x at 33-256 of 16). W (the tree): a block whose tokens all lie in its
# first request plans them without a search (one uniform branch); other blocks as main.
# Branch s51-g holds both commits. Pack with
#   G=$(scripts/gpu/patch-variant.sh scripts/gpu/plans/s51-grid-first-request.patch main)
#   W=$(scripts/gpu/patch-variant.sh scripts/gpu/plans/s51-whole-block.patch main)
#   git checkout --detach $W && scripts/gpu/pack.sh --variant M=main --variant G=$G --variant W=.
# then `timeout 500 env OUT=$OUT scripts/gpu/steps.sh scripts/gpu/plans/s51-whole.sh`;
# `python3 scripts/gpu/ab_table.py $OUT/NAME M G W` (last column W / G).
ab_bench ab-whole "--ops alloc_extend --page-sizes 1,16,64 --batch-sizes 33,64,128,256,1024" "M G W M G W"
ab_bench ab-whole16 "--ops alloc_extend --extend-tokens 16 --page-sizes 16 --batch-sizes 33,64,256,1024" "M G W M G W"
step tests tests
step sanitize SANITIZE_OPS=100 sanitize-quick
step python python
