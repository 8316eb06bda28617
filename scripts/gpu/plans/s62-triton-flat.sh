# s62-triton.sh's flat-graph table alone (the README's H100 table), for a call short of
# device budget: main's kernels (V) against SGLang's Triton kernels in one flat graph.
#   scripts/gpu/pack.sh && timeout 300 env OUT=$OUT scripts/gpu/steps.sh scripts/gpu/plans/s62-triton-flat.sh
# Read with scripts/gpu/triton_table.py $OUT/triton-flat.
echo "s62-triton-flat.sh: on $(card_name)"
# shellcheck source=/dev/null
source scripts/gpu/plans/triton-flat.sh
