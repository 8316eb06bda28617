# Fiftieth session: the tree verified before it lands: main + s49-block-vote.patch
# (extend_block's several blocks vote on the fault flag at the verdict's barrier; run s50-1,
# H100: 0.97-0.99x at 33-1,024 requests of 512 tokens) + s50-alloc-hint.patch (alloc takes
# the host's head hint for each thread's first page, loaded with the cursor), with the
# head-hint test's allocs and kvpool_bench's 'alloc' row. Every GPU test, the Python tests,
# the short pass of both sanitizers, A/Bs (M main, X the vote alone = 3984ce9801bd842ba0c260933c9beb992f96049d, A the
# tree), and kvpool against Triton (the README's table, if an H200). Pack with
#   scripts/gpu/pack.sh --variant M=main --variant X=3984ce9801bd842ba0c260933c9beb992f96049d --variant A=.
# then `timeout 570 env OUT=$OUT scripts/gpu/steps.sh scripts/gpu/plans/s50-verify.sh`;
# tables `python3 scripts/gpu/ab_table.py $OUT/NAME M X A` (the last column is A / X),
# `scripts/gpu/triton_table.py $OUT/triton`.
step tests tests
step python python
step sanitize SANITIZE_OPS=100 sanitize-quick
ab_bench ab-alloc "--ops alloc --page-sizes 1,16,64 --batch-sizes 1,8,64,256,1024,4096" "X A X A X A"
ab_bench ab-blocks "--ops alloc_extend --page-sizes 1,16,64 --batch-sizes 8,33,64,128,256,1024" "M X A M X A"
ab_bench ab-decode "--ops alloc_decode --page-sizes 16 --batch-sizes 1,64" "M A M A"
step triton BENCH_ARGS="--ops alloc_extend,alloc_decode --page-sizes 16,64 --batch-sizes 1,8,64,256,1024,4096" bench
