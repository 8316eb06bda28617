# Fifty-first session, after run s51-1 (PENDING.md items 0 and 6): where the time of
# extend_block's several blocks goes with the ring's pages loaded after round trip 1
# (s51-ring-after-rt1.patch, anatomy-X) against main's (anatomy-T): in run s51-1 the variant
# took main's time although its scan no longer waits for anything but the lengths (SASS:
# the ring loads' scoreboard is first waited on after the stage-bound barrier). On an H200
# only, the README's Triton table on main's kernels (item 0). Pack on main with
#   X=$(scripts/gpu/patch-variant.sh scripts/gpu/plans/s51-ring-after-rt1.patch HEAD)
#   scripts/gpu/pack.sh --anatomy X=$X
# then `timeout 400 env OUT=$OUT scripts/gpu/steps.sh scripts/gpu/plans/anatomy-ab.sh
# scripts/gpu/plans/s51-anatomy.sh`; phases in $OUT/anatomy-{X,T}/anatomy.md, the table by
# `python3 scripts/gpu/triton_table.py $OUT/triton`.
source scripts/gpu/plans/triton-h200.sh
