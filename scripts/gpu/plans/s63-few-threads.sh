# Sixty-third session (PENDING.md item 10): extend_few's several blocks for at most a
# request a block (kvp_extend_few_blocks_*, kvp_extend_one_blocks_*) on fewer, fuller warps.
# Run s62-4 counted ~393 warp instructions in every warp of main's blocks of 256 threads
# (round trip 1, the shapes, the scan, the end), paid eight times a block for one token a
# thread. H (s63-few128.patch): those kernels on 128 threads (warp 0 and three stager
# warps; the general write loop two tokens a thread), the grid unchanged (span_grid: 256
# tokens a block while they fit one an SM). Q (s63-few64.patch): on 64 threads (one stager
# warp, four tokens a thread). S (s63-few128-span128.patch, on H): H's kernels on blocks of
# 128 tokens while those fit one an SM (one token a thread again, twice the blocks; by row
# and the spread kernel unchanged). Every GPU test on S (H's kernels, S's grids), the
# few-blocks A/B of M, H, Q and S, sanitize-quick and the Python tests on S.
#   H=$(scripts/gpu/patch-variant.sh scripts/gpu/plans/s63-few128.patch main)
#   Q=$(scripts/gpu/patch-variant.sh scripts/gpu/plans/s63-few64.patch main)
#   S=$(scripts/gpu/patch-variant.sh scripts/gpu/plans/s63-few128-span128.patch $H)
#   git checkout --detach $S && git checkout main -- scripts/gpu/steps.sh scripts/gpu/plans \
#       && git reset -q && scripts/gpu/pack.sh --variant M=main --variant H=$H --variant Q=$Q \
#       --variant S=.
#   timeout 560 env OUT=$OUT scripts/gpu/steps.sh scripts/gpu/plans/s63-few-threads.sh
# Tables: python3 scripts/gpu/ab_table.py $OUT/ab-few M H Q S (ab-few-long, ab-few-control).
FEW_AB="M H Q S M H Q S M H Q S"
FEW_AB_CONTROL="M H Q S M H Q S"
# shellcheck source=/dev/null
source scripts/gpu/plans/few-blocks-ab.sh
