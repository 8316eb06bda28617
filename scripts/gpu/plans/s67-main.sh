# Sixty-seventh session: main after c600b11 (CPU tensors take a host pool's alloc_extend
# lane without extend_num_tokens; kvp_pool_extend_need a lib.fast builtin, which the device
# pool's alloc_extend_async uses for its default count too): both Python suites, and the
# overhead with the defaults, the package before (P = d8f0cb5) against main (M), both pools.
# On an H200 also every GPU test and the README's two tables (PENDING.md item 0).
#   scripts/gpu/pack.sh --variant P=d8f0cb5 --variant M=.
#   timeout 560 env OUT=$OUT scripts/gpu/steps.sh scripts/gpu/plans/s67-main.sh
# Tables: python3 scripts/gpu/overhead_table.py $OUT/overhead P M --pool cuda (and
# --pool host); python3 scripts/gpu/triton_table.py $OUT/triton (and $OUT/triton-flat).
echo "s67-main.sh: on $(card_name)"
step python python
step overhead OVERHEAD_VARIANTS="P M P M" \
    OVERHEAD_ARGS="--batch-sizes 1,256 --rounds 3 --kinds array,numpy,torch --defaults" \
    python-overhead
if on_card H200; then
    # shellcheck source=/dev/null
    source scripts/gpu/plans/triton.sh
    # shellcheck source=/dev/null
    source scripts/gpu/plans/triton-flat.sh
    step tests tests
else
    echo "s67-main.sh: not an H200 ($(card_name)): the README's tables and the tests not run"
fi
