# On an H200 only (PENDING.md item 0): the README's table (triton.sh) and its flat-graph
# form (triton-flat.sh) from the library of the packed variant M (main's kernels), for runs
# whose tests are another variant's (`scripts/gpu/pack.sh --variant M=main ...`). Read with
# scripts/gpu/triton_table.py $OUT/triton and $OUT/triton-flat.
if on_card H200; then
    export LIBRARY_VARIANT=M
    # shellcheck source=/dev/null
    source scripts/gpu/plans/triton.sh
    # shellcheck source=/dev/null
    source scripts/gpu/plans/triton-flat.sh
    unset LIBRARY_VARIANT
fi
