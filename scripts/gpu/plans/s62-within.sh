# Sixty-second session, second run (PENDING.md item 10). Run s62-2 read P
# (s62-planned-few.patch) at 1.01-1.03x main's time in the flat graph, while its anatomy
# (plain launches in a graph, no programmatic edges) read 0.95-0.99x. W
# (s62-planned-within.patch, on main): P's planning only for a block whose tokens all lie in
# one request (no token search; other blocks keep the general loop after the verdict). Every
# GPU test on W; the few-blocks A/B of M, P and W in the flat graph and in a graph of child
# graphs (no programmatic edges, as the anatomy launches), and W's anatomy. G
# (s60-guess-ring-early.patch, unchanged, on main): run s62-1's anatomy of main has the
# stager warp that loads the block's ring pages (warp 1: 32 pages, one a lane) staging
# them ~270 cycles after warp 0 has decided, its loads issued only once its page range is
# worked out after the scan; G has the stagers load them at the host's head hint and the
# block's first token over the page size with round trip 1 (run s60-1, before V made warp
# 0 decide sooner: 1.01-1.05x). G's anatomy too.
#   P=$(scripts/gpu/patch-variant.sh scripts/gpu/plans/s62-planned-few.patch main)
#   W=$(scripts/gpu/patch-variant.sh scripts/gpu/plans/s62-planned-within.patch main)
#   G=$(scripts/gpu/patch-variant.sh scripts/gpu/plans/s60-guess-ring-early.patch main)
#   git checkout --detach $W && git checkout main -- scripts/gpu/steps.sh scripts/gpu/plans \
#       && git reset -q && scripts/gpu/pack.sh --variant M=main --variant P=$P --variant W=. \
#       --variant G=$G --anatomy W=$W --anatomy G=$G
# (Run s62-3's pack was that without G, to which G's library and sources were added by
# hand, as pack.sh's variant and anatomy loops add them.)
#   timeout 520 env OUT=$OUT scripts/gpu/steps.sh scripts/gpu/plans/s62-within.sh
# Tables: python3 scripts/gpu/ab_table.py $OUT/ab-few M P W G (ab-few-long, ab-few-control,
# ab-few-graph); the phases in $OUT/anatomy-{W,G}/anatomy.md.
FEW_AB="M P W G M P W G M P W G"
FEW_AB_CONTROL="M W G M W G"
# shellcheck source=/dev/null
source scripts/gpu/plans/few-blocks-ab.sh
ab_bench ab-few-graph "--ops alloc_extend --page-sizes 16 --batch-sizes 2,8,32" "$FEW_AB"
step anatomy-W ANATOMY_ROOT=gpu-artifacts/anatomy/W anatomy
step anatomy-G ANATOMY_ROOT=gpu-artifacts/anatomy/G anatomy
