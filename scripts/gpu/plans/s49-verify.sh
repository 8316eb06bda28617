# Forty-ninth session: the tree (V + H of run s49-1 on main: extend_few's several blocks vote
# on the fault flag at the verdict's barrier, s48-vote-at-verdict.patch; the pairs kernel
# loads the ring's first pages at the host's head hint, s49-pairs-hint.patch) verified
# before it lands: every GPU test, the Python tests, the short pass of both sanitizers, an
# A/B against main (M) on every shape the change touches and on controls, and kvpool
# against Triton (the README's table, if an H200). Pack with
#   scripts/gpu/pack.sh --variant M=main --variant X=.
# then `timeout 560 env OUT=$OUT scripts/gpu/steps.sh scripts/gpu/plans/s49-verify.sh`;
# tables `python3 scripts/gpu/ab_table.py $OUT/NAME M X`, `scripts/gpu/triton_table.py
# $OUT/triton`.
step tests tests
step python python
step sanitize SANITIZE_OPS=100 sanitize-quick
ab_bench ab-extend "--ops alloc_extend --page-sizes 1,16,64 --batch-sizes 1,2,8,32,64,256" "M X M X M X"
ab_bench ab-pairs "--ops alloc_extend --page-sizes 1 --batch-sizes 32,33,48,64,65 --extend-tokens 8" "M X M X"
ab_bench ab-decode "--ops alloc_decode --page-sizes 16 --batch-sizes 1,8,64" "M X M X"
step triton BENCH_ARGS="--ops alloc_extend,alloc_decode --page-sizes 16,64 --batch-sizes 1,8,64,256,1024,4096" bench
