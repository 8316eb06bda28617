# PENDING.md item 0 on an H200 only, the README's two tables first (they are what the
# README lacks), then every GPU test on main's build; on any other card nothing runs.
#   scripts/gpu/pack.sh && timeout 540 env OUT=$OUT scripts/gpu/steps.sh scripts/gpu/plans/s67-h200-tables.sh
# Read with scripts/gpu/triton_table.py $OUT/triton and $OUT/triton-flat.
if on_card H200; then
    # shellcheck source=/dev/null
    source scripts/gpu/plans/triton.sh
    # shellcheck source=/dev/null
    source scripts/gpu/plans/triton-flat.sh
    step tests tests
else
    echo "s67-h200-tables.sh: not an H200 ($(card_name)): nothing run"
fi
