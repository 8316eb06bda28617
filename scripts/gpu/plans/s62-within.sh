# Sixty-second session, second run (PENDING.md item 10). Run s62-2 read P
# (s62-planned-few.patch) at 1.01-1.03x main's time in the flat graph, while its anatomy
# (plain launches in a graph, no programmatic edges) read 0.95-0.99x. W
# (s62-planned-within.patch, on main): P's planning only for a block whose tokens all lie in
# one request (no token search; other blocks keep the general loop after the verdict). Every
# GPU test on W; the few-blocks A/B of M, P and W in the flat graph and in a graph of child
# graphs (no programmatic edges, as the anatomy launches), and W's anatomy.
#   P=$(scripts/gpu/patch-variant.sh scripts/gpu/plans/s62-planned-few.patch main)
#   W=$(scripts/gpu/patch-variant.sh scripts/gpu/plans/s62-planned-within.patch main)
#   git checkout --detach $W && git checkout main -- scripts/gpu/steps.sh scripts/gpu/plans \
#       && git reset -q && scripts/gpu/pack.sh --variant M=main --variant P=$P --variant W=. \
#       --anatomy W=$W
#   timeout 520 env OUT=$OUT scripts/gpu/steps.sh scripts/gpu/plans/s62-within.sh
# Tables: python3 scripts/gpu/ab_table.py $OUT/ab-few M P W (ab-few-long, ab-few-control,
# ab-few-graph); the phases in $OUT/anatomy-W/anatomy.md.
FEW_AB="M P W M P W M P W"
FEW_AB_CONTROL="M W M W"
# shellcheck source=/dev/null
source scripts/gpu/plans/few-blocks-ab.sh
ab_bench ab-few-graph "--ops alloc_extend --page-sizes 16 --batch-sizes 2,8,32" "$FEW_AB"
step anatomy-W ANATOMY_ROOT=gpu-artifacts/anatomy/W anatomy
