# Fiftieth session: the tree (main + s49-block-vote.patch: extend_block's several blocks vote
# on the fault flag at the verdict's barrier; run s50-1, H100: 0.97-0.99x at 33-1,024
# requests of 512 tokens) verified before it lands: every GPU test, the Python tests, the
# short pass of both sanitizers, an A/B against main (M) on the shapes it touches and on
# controls, and kvpool against Triton (the README's table, if an H200). Pack with
#   scripts/gpu/pack.sh --variant M=main --variant X=.
# then `timeout 560 env OUT=$OUT scripts/gpu/steps.sh scripts/gpu/plans/s50-verify.sh`;
# tables `python3 scripts/gpu/ab_table.py $OUT/NAME M X`, `scripts/gpu/triton_table.py
# $OUT/triton`.
step tests tests
step python python
step sanitize SANITIZE_OPS=100 sanitize-quick
ab_bench ab-blocks "--ops alloc_extend --page-sizes 1,16,64 --batch-sizes 8,33,64,128,256,1024" "M X M X M X"
ab_bench ab-rows "--ops alloc_extend_rows --page-sizes 16 --batch-sizes 64,256" "M X M X"
ab_bench ab-decode "--ops alloc_decode --page-sizes 16 --batch-sizes 1,64" "M X M X"
step triton BENCH_ARGS="--ops alloc_extend,alloc_decode --page-sizes 16,64 --batch-sizes 1,8,64,256,1024,4096" bench
