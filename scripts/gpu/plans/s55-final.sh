# Fifty-fifth session, after programmatic dependent launch landed (runs s55-1, s55-2): the
# full sanitizer step on it (s55-1 ran the short one), and on an H200 the README's table,
# in child graphs and in one flat graph (PENDING.md item 0). The packing of s54-pdl-ab.sh
# (lib/ is P's, main's since 21827fa). `timeout 560 env OUT=$OUT scripts/gpu/steps.sh
# scripts/gpu/plans/s55-final.sh`; `python3 scripts/gpu/triton_table.py $OUT/triton` and
# `$OUT/triton-flat`.
step sanitize SANITIZE_OPS=150 sanitize
if on_card H200; then
    # shellcheck source=/dev/null
    source scripts/gpu/plans/triton.sh
    step triton-flat BENCH_CPP_ARGS=--flat-graph BENCH_ARGS="--ops alloc_extend,alloc_decode --page-sizes 16,64 --batch-sizes 1,8,64,256,1024,4096" bench
fi
