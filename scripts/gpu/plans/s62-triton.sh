# Sixty-second session, last run (PENDING.md item 0): main's kernels (V, landed in the
# sixty-first session, not yet timed against Triton) against SGLang's Triton kernels on
# whatever card comes: every GPU test on main's landed fatbin, then the README's tables
# (triton.sh: child graphs, per replay and per launch in a graph of 100; triton-flat.sh:
# one flat graph). On an H200 this is s59-h200.sh.
#   scripts/gpu/pack.sh && timeout 400 env OUT=$OUT scripts/gpu/steps.sh scripts/gpu/plans/s62-triton.sh
# Read with scripts/gpu/triton_table.py $OUT/triton and $OUT/triton-flat.
echo "s62-triton.sh: on $(card_name)"
step tests tests
# shellcheck source=/dev/null
source scripts/gpu/plans/triton.sh
# shellcheck source=/dev/null
source scripts/gpu/plans/triton-flat.sh
