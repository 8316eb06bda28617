# Fifty-third session, run s53-4 (H100, BENCHMARKS.md; landed). S = main +
# s53-short-rows.patch: by row, 33-256 requests of up to 256 tokens (ExtendKernel::Block)
# run on a kernel of their own, kvp_extend_block_short_rows_* (extend_block with SHORT: the
# start bits and OwnerLookup, as one or two warps by row since ef6a360), so that
# kvp_extend_block_rows_* keeps extend_few's shapes as they were (the lookup's code cost
# them 1.03-1.04x in run s53-3). By `cuobjdump -sass` every other kernel is main's. Pack with
#   S=$(scripts/gpu/patch-variant.sh scripts/gpu/plans/s53-short-rows.patch main)
#   git checkout --detach $S && scripts/gpu/pack.sh --variant M=main --variant S=.
# then `timeout 540 env OUT=$OUT scripts/gpu/steps.sh scripts/gpu/plans/s53-rows3.sh`;
# `python3 scripts/gpu/ab_table.py $OUT/NAME M S`.
ab_bench ab-short1 "--ops alloc_extend_rows --extend-tokens 1 --page-sizes 1 --batch-sizes 65,128,256" "M S M S M S"
ab_bench ab-short2 "--ops alloc_extend_rows --extend-tokens 2 --page-sizes 1 --batch-sizes 128" "M S M S M S"
# (Run s53-4 asked this row at page sizes 1 and 4 and failed: kvpool_bench takes no page 4.)
ab_bench ab-short4 "--ops alloc_extend_rows --extend-tokens 4 --page-sizes 1 --batch-sizes 48,64" "M S M S M S"
ab_bench ab-short-control "--ops alloc_extend_rows --extend-tokens 16 --page-sizes 16 --batch-sizes 4,16,32" "M S M S"
step tests tests
step sanitize-rows SANITIZE_OPS=100 sanitize-rows
step python python
# On an H200 only (PENDING.md item 0): the README's table with this tree's library, and
# extends of 16-token requests against Triton (no such row yet).
source scripts/gpu/plans/triton-h200.sh
if on_card H200; then
    step triton16 BENCH_ARGS="--ops alloc_extend --extend-tokens 16 --page-sizes 16 --batch-sizes 1,8,64,256,1024,4096" bench
fi
