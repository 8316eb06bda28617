# Fifty-third session, run s53-3 (H100; N landed), after run s53-2 (BENCHMARKS.md: W, the by-row owners in every one-block
# rows kernel, took 0.83-0.95x at 8-256 short requests but 1.04-1.08x at 2 x 64 and 16 x 16
# tokens on 256 threads, whose spills grew). G = main + s53-row-owners-gated.patch: the
# warp and two-warp rows kernels always, 256 threads only for more than 32 requests, and a
# second token's lookup only on one warp. N = main + s53-row-owners-warps.patch: the warp
# and two-warp rows kernels only. Pack with
#   G=$(scripts/gpu/patch-variant.sh scripts/gpu/plans/s53-row-owners-gated.patch main)
#   N=$(scripts/gpu/patch-variant.sh scripts/gpu/plans/s53-row-owners-warps.patch main)
#   git checkout --detach $G && scripts/gpu/pack.sh --variant M=main --variant G=. --variant N=$N
# then `timeout 540 env OUT=$OUT scripts/gpu/steps.sh scripts/gpu/plans/s53-rows2.sh`;
# `python3 scripts/gpu/ab_table.py $OUT/NAME M G N`. The tests run on G (the tree).
ab_bench ab-rows1 "--ops alloc_extend_rows --extend-tokens 1 --page-sizes 1 --batch-sizes 8,32,64,128,256" "M G N M G N M G N"
ab_bench ab-rows2 "--ops alloc_extend_rows --extend-tokens 2 --page-sizes 1 --batch-sizes 32,128" "M G N M G N M G N"
ab_bench ab-rows16 "--ops alloc_extend_rows --extend-tokens 16 --page-sizes 16 --batch-sizes 4,16,32" "M G N M G N M G N"
ab_bench ab-rows64 "--ops alloc_extend_rows --extend-tokens 64 --page-sizes 16,64 --batch-sizes 2,8" "M G N M G N"
step tests tests
step sanitize-rows SANITIZE_OPS=100 sanitize-rows
step python python
# On an H200 only (PENDING.md item 0): the README's table with this tree's library, and
# extends of 16-token requests against Triton (no such row yet).
source scripts/gpu/plans/triton-h200.sh
if on_card H200; then
    step triton16 BENCH_ARGS="--ops alloc_extend --extend-tokens 16 --page-sizes 16 --batch-sizes 1,8,64,256,1024,4096" bench
fi
