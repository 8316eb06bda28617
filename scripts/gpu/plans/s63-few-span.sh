# Sixty-third session, second run (PENDING.md item 10). Run s63-1 (H200) read H (128
# threads, main's grid) at 1.00-1.01x main's time at 2-32 requests of 512 tokens and 1.04x
# at one of 2,048, and S (H's kernels on blocks of 128 tokens while they fit one an SM) at
# 0.94-0.97x: the gain is the shorter blocks, not the fewer warps (Q, s63-few64.patch,
# failed to launch: its host still launched 128 threads on kernels built for 64, refused
# with CUDA_ERROR_INVALID_VALUE). U (s63-span128.patch, on main): main's kernels (256
# threads) on S's grid. T (s63-few64-span64.patch, on main): those kernels on 64 threads,
# host fixed, on blocks of 64 tokens while they fit one an SM, else of 128, else main's
# grid. (U's and T's patches leave the shape tests' expectations as they were: variants
# to measure, not to land.) Every GPU test on T; the few-blocks A/B of M, S, U and T, plus
# by row (alloc_extend_rows, whose several-block calls S, U and T send on the same grids).
#   T=$(scripts/gpu/patch-variant.sh scripts/gpu/plans/s63-few64-span64.patch main)
#   U=$(scripts/gpu/patch-variant.sh scripts/gpu/plans/s63-span128.patch main)
#   git checkout --detach $T && git checkout main -- scripts/gpu/steps.sh scripts/gpu/plans \
#       && git reset -q && scripts/gpu/pack.sh --variant M=main --variant S=refs/variants/s63-few128-span128 \
#       --variant U=$U --variant T=.
#   timeout 400 env OUT=$OUT scripts/gpu/steps.sh scripts/gpu/plans/s63-few-span.sh
# Tables: python3 scripts/gpu/ab_table.py $OUT/ab-few M S U T (ab-few-long, ab-few-rows,
# ab-few-control).
FEW_AB="M S U T M S U T M S U T"
FEW_AB_CONTROL="M S U T M S U T"
# shellcheck source=/dev/null
source scripts/gpu/plans/few-blocks-ab.sh
ab_bench ab-few-rows "--flat-graph --ops alloc_extend_rows --page-sizes 16 --batch-sizes 2,8,32 --extend-tokens 512" "$FEW_AB"
