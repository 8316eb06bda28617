# Fifty-third session, run s53-6 (H100, BENCHMARKS.md; its plain half landed). B = main + s53-block512.patch: one block of 256 threads takes 65-256
# requests of up to 512 tokens (BLOCK_TOKENS 256 -> 512, two tokens a thread), where
# 257-512 tokens have gone to the several-block kernel since the thirty-fifth session
# (0.85-0.89x then, when one block planned its tokens by a galloping search; it now looks
# them up from where the requests start, since 385b82f); by row the SHORT kernel looks up
# the second token too. Pack with
#   B=$(scripts/gpu/patch-variant.sh scripts/gpu/plans/s53-block512.patch main)
#   git checkout --detach $B && scripts/gpu/pack.sh --variant M=main --variant B=.
# then `timeout 540 env OUT=$OUT scripts/gpu/steps.sh scripts/gpu/plans/s53-block512.sh`;
# `python3 scripts/gpu/ab_table.py $OUT/NAME M B`.
ab_bench ab-b512-2 "--ops alloc_extend,alloc_extend_rows --extend-tokens 2 --page-sizes 1 --batch-sizes 129,200,256" "M B M B M B"
ab_bench ab-b512-4 "--ops alloc_extend,alloc_extend_rows --extend-tokens 4 --page-sizes 1 --batch-sizes 65,100,128" "M B M B M B"
ab_bench ab-b512-control "--ops alloc_extend,alloc_extend_rows --extend-tokens 1 --page-sizes 1 --batch-sizes 65,256" "M B M B"
step tests tests
step sanitize SANITIZE_OPS=100 sanitize-quick
step sanitize-rows SANITIZE_OPS=100 sanitize-rows
step python python
