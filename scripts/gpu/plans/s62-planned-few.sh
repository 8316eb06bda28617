# Sixty-second session (PENDING.md item 10): P (s62-planned-few.patch, on main) against
# main. Run s62-1's anatomy (main's kernels, 32 x 512 tokens on 32 blocks, block 0) put
# warp 0's general write loop after the verdict at ~840 cycles (one block's, whose slots
# are stored before the verdict: 234), while the stagers wait ~850 cycles at the verdict's
# barrier for warp 0's decision. P: in kvp_extend_few_blocks_* / kvp_extend_one_blocks_*
# the stagers plan every live, staged block of narrow offsets (a block within one request
# from that request alone, no search), store its slots before the verdict and only the new
# pages' words after it, as the spread kernel's blocks of several requests do; warp 0
# writes no slot (whether the block was planned comes with the published range). Every GPU
# test on P, the few-blocks A/B and P's anatomy. (Run s62-7 found later that the anatomy's
# 512 tokens a block is not the library's grid for these calls, 256 a block: BENCHMARKS.md.)
#   P=$(scripts/gpu/patch-variant.sh scripts/gpu/plans/s62-planned-few.patch main)
#   git checkout --detach $P && git checkout main -- scripts/gpu/steps.sh scripts/gpu/plans \
#       && git reset -q && scripts/gpu/pack.sh --variant M=main --variant P=. --anatomy P=$P
#   timeout 500 env OUT=$OUT scripts/gpu/steps.sh scripts/gpu/plans/s62-planned-few.sh
# Tables: python3 scripts/gpu/ab_table.py $OUT/ab-few M P (ab-few-long, ab-few-control);
# the phases in $OUT/anatomy-P/anatomy.md.
FEW_AB="M P M P M P"
FEW_AB_CONTROL="M P M P"
# shellcheck source=/dev/null
source scripts/gpu/plans/few-blocks-ab.sh
step anatomy-P ANATOMY_ROOT=gpu-artifacts/anatomy/P anatomy
