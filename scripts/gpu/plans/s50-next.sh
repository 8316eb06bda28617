# Written in the forty-ninth session, not yet run (PENDING.md items 6 and 7).
# B = main + s49-block-vote.patch: extend_block's several blocks (kvp_extend_blocks*_*, also
# by row: 33-256 requests past one block's tokens, and the 512/1,024/2,048-thread shapes
# above) vote on the fault flag at the verdict's barrier, as extend_few's do since a0b765a
# (run s49-1: 0.98x there), not in a barrier of their own right after round trip 1. Until
# the vote such a block writes only shared memory. By `cuobjdump -sass -arch sm_90` only
# the GRID instantiations of extend_block differ from main's (kvp_extend_blocks*_*,
# kvp_extend_one_blocks_rows_*). The tree carries s49-hint-test.patch (item 7), so `tests`
# runs the head-hint test's pairs class. Pack on main:
#   git apply scripts/gpu/plans/s49-hint-test.patch
#   B=$(scripts/gpu/patch-variant.sh scripts/gpu/plans/s49-block-vote.patch main)
#   scripts/gpu/pack.sh --variant M=. --variant B=$B
# then `timeout 560 env OUT=$OUT scripts/gpu/steps.sh scripts/gpu/plans/s50-next.sh`;
# tables `python3 scripts/gpu/ab_table.py $OUT/NAME M B`. A winner needs every GPU test,
# sanitize-quick and the Python tests on it (pack it as the tree), as V and H had in run s49-2.
step tests tests
ab_bench ab-blocks "--ops alloc_extend --page-sizes 1,16,64 --batch-sizes 32,33,64,128,256,1024" "M B M B M B"
ab_bench ab-blocks-rows "--ops alloc_extend_rows --page-sizes 16 --batch-sizes 64,256,1024" "M B M B"
