# Fifty-third session, run s53-2 (H100, BENCHMARKS.md). W = main + s53-row-owners.patch: one block by row
# (`kvp_extend_{warp,block64,block}_rows_*`: alloc_extend_rows of 2-256 requests of up to
# 512 tokens, up to two tokens a thread) marks where its requests start (TokenOwners, as the
# one-block extends since 385b82f, published by the verdict's barrier) and each thread takes
# its first two tokens' requests from it after the verdict, instead of write_slots'
# galloping search from request 0 (dependent shared loads after the verdict, up to ~16 for a
# token 255 requests on). By `cuobjdump -sass` only those six kernels differ from main's.
# The patch also gives cuda_rows a workload of up to 256 requests of 0-3 new tokens (SHORT).
# Pack with
#   W=$(scripts/gpu/patch-variant.sh scripts/gpu/plans/s53-row-owners.patch main)
#   git checkout --detach $W && scripts/gpu/pack.sh --variant M=main --variant W=.
# then `timeout 540 env OUT=$OUT scripts/gpu/steps.sh scripts/gpu/plans/s53-rows.sh`;
# `python3 scripts/gpu/ab_table.py $OUT/NAME M W`, `scripts/gpu/triton_table.py $OUT/triton`
# (and triton16) on an H200.
ab_bench ab-rows1 "--ops alloc_extend_rows --extend-tokens 1 --page-sizes 1 --batch-sizes 8,32,64,128,256" "M W M W M W"
ab_bench ab-rows2 "--ops alloc_extend_rows --extend-tokens 2 --page-sizes 1 --batch-sizes 32,128" "M W M W M W"
ab_bench ab-rows16 "--ops alloc_extend_rows --extend-tokens 16 --page-sizes 16 --batch-sizes 4,16,32" "M W M W M W"
ab_bench ab-rows64 "--ops alloc_extend_rows --extend-tokens 64 --page-sizes 16,64 --batch-sizes 2,8" "M W M W"
ab_bench ab-rows-control "--ops alloc_extend_rows --extend-tokens 512 --page-sizes 16 --batch-sizes 64" "M W M W"
step tests tests
step sanitize SANITIZE_OPS=100 sanitize-quick
step sanitize-rows SANITIZE_OPS=100 sanitize-rows
step python python
# On an H200 only (PENDING.md item 0): the README's table with this tree's library, and
# extends of 16-token requests against Triton (no such row yet).
source scripts/gpu/plans/triton-h200.sh
if on_card H200; then
    step triton16 BENCH_ARGS="--ops alloc_extend --extend-tokens 16 --page-sizes 16 --batch-sizes 1,8,64,256,1024,4096" bench
fi
