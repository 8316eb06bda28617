# PENDING.md item 0, on an H200 only: every GPU test on main's landed fatbin, then the
# README's table (triton.sh: child graphs, per replay and per launch in a graph of 100) and
# its flat-graph form (triton-flat.sh). On any other card nothing runs (it says so): the
# README's H100 table is run s58-1's, on the same kernels.
#   scripts/gpu/pack.sh && timeout 500 env OUT=$OUT scripts/gpu/steps.sh scripts/gpu/plans/s59-h200.sh
# Read with scripts/gpu/triton_table.py $OUT/triton and $OUT/triton-flat.
if on_card H200; then
    step tests tests
    # shellcheck source=/dev/null
    source scripts/gpu/plans/triton.sh
    # shellcheck source=/dev/null
    source scripts/gpu/plans/triton-flat.sh
else
    echo "s59-h200.sh: not an H200 ($(card_name)): nothing run"
fi
