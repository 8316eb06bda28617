# Sixty-fourth session, first run. Every GPU test, sanitize-quick and the Python tests on
# main (the sixty-third session's landed few_grid build, which had no GPU run of its own, and
# this session's host-only DeviceShapes::by_row refactor). Then PENDING.md item 10's open
# points: (1) extend_few's spread kernel (more requests than blocks) on FEW_GRID_BLOCK
# threads over few_grid's blocks, as kvp_extend_few_blocks_* since run s63-2: B
# (s64-spread128.patch: the spread kernel where the requests outnumber few_grid's blocks,
# else FewBlocks), A (s64-spread128-span-choice.patch: B's kernels, the spread kernel where
# they outnumber span_grid's blocks, as main chooses), C (s64-few-choice.patch: main's
# kernels, FewBlocks wherever few_grid's blocks hold the requests, the spread kernel on 256
# threads and span_grid otherwise); (2) past 33,792 tokens (132 SMs) kvp_extend_few_blocks_*
# and kvp_extend_one_blocks_* run 512-token blocks on 128 threads: main (M) against O, main
# before 9790b3c (256 threads there). Last, the README's flat-graph Triton table on main, and
# on an H200 its child-graph table too (triton-h200.sh).
#   B=$(scripts/gpu/patch-variant.sh scripts/gpu/plans/s64-spread128.patch main)
#   A=$(scripts/gpu/patch-variant.sh scripts/gpu/plans/s64-spread128-span-choice.patch main)
#   C=$(scripts/gpu/patch-variant.sh scripts/gpu/plans/s64-few-choice.patch main)
#   scripts/gpu/pack.sh --variant O=9790b3c~1 --variant B=$B --variant A=$A --variant C=$C --variant M=.
#   timeout 560 env OUT=$OUT scripts/gpu/steps.sh scripts/gpu/plans/s64-spread.sh
# Tables: python3 scripts/gpu/ab_table.py $OUT/ab-spread M B A C (ab-spread64, ab-spread32,
# ab-spread-control); $OUT/ab-long M O (ab-long8k); scripts/gpu/triton_table.py
# $OUT/triton-flat (and $OUT/triton).
echo "s64-spread.sh: on $(card_name)"
step tests tests
SPREAD_AB="M B A C M B A C M B A C"
ab_bench ab-spread "--flat-graph --ops alloc_extend --extend-tokens 128 --page-sizes 1,16 --batch-sizes 5,8,16,32" "$SPREAD_AB"
ab_bench ab-spread64 "--flat-graph --ops alloc_extend --extend-tokens 64 --page-sizes 16 --batch-sizes 9,16,32" "$SPREAD_AB"
ab_bench ab-spread32 "--flat-graph --ops alloc_extend --extend-tokens 32 --page-sizes 16 --batch-sizes 17,32" "$SPREAD_AB"
ab_bench ab-spread-control "--flat-graph --ops alloc_extend --page-sizes 16 --batch-sizes 1,2,8,32" "M B A C M B A C"
ab_bench ab-long "--flat-graph --ops alloc_extend --extend-tokens 16384 --page-sizes 16 --batch-sizes 1,2,4" "M O M O M O"
ab_bench ab-long8k "--flat-graph --ops alloc_extend --extend-tokens 8192 --page-sizes 1,16 --batch-sizes 8,16" "M O M O M O"
step sanitize SANITIZE_OPS=100 sanitize-quick
step python python
# shellcheck source=/dev/null
source scripts/gpu/plans/triton-flat.sh
# shellcheck source=/dev/null
source scripts/gpu/plans/triton-h200.sh
