# Not yet run (PENDING.md item 6, its first two steps). P = main + s48-plan-blocks.patch: the
# several-block extends of 2-32 requests all go to kvp_extend_few_spread_* (the host sent
# calls of no more requests than blocks to kvp_extend_few_blocks_*), and its blocks plan
# their tokens while the ring's pages are in flight and store their slots before the
# verdict whether their tokens are one request's or several's (the one-request blocks ran
# the general write loop after the barrier: ~975 cycles against ~530 planned, run s48-2's
# anatomy). By `cuobjdump -sass -arch sm_90` only kvp_extend_few_spread_{i32,i64} differ
# from main's (5feaec3). Run s27-1 measured planning a one-request block at 1.07-1.10x, on
# the kernels of then. V = main + s48-vote-at-verdict.patch: extend_few's several blocks
# vote on the fault flag at the verdict's barrier (`__syncthreads_or` there), not in a
# barrier of its own right after round trip 1 (+375 cycles before the scan in run s48-2's
# probes); a block whose warps read the flag differently has stored only slots (padded
# over after the vote) and staged pages by then. Only kvp_extend_{few_blocks,few_spread,
# one_blocks}_* differ from main's SASS. Pack on main with
#   P=$(scripts/gpu/patch-variant.sh scripts/gpu/plans/s48-plan-blocks.patch main)
#   V=$(scripts/gpu/patch-variant.sh scripts/gpu/plans/s48-vote-at-verdict.patch main)
#   scripts/gpu/pack.sh --variant M=. --variant P=$P --variant V=$V
# then `timeout 300 env OUT=$OUT scripts/gpu/steps.sh scripts/gpu/plans/s48-plan-blocks.sh`
# and `python3 scripts/gpu/ab_table.py $OUT/ab-extend M P V` (and ab-extend-long). A
# winner needs every GPU test, sanitize-quick and the Python tests on it (pack on it), and
# the two together an A/B of their own.
ab_bench ab-extend "--ops alloc_extend --page-sizes 1,16,64 --batch-sizes 1,2,4,8,16,32" "M P V M P V M P V"
ab_bench ab-extend-long "--ops alloc_extend --page-sizes 16 --batch-sizes 1,2,8 --extend-tokens 2048" "M P V M P V"
# On main (the packed tree, "."): what is left of PENDING.md item 0 on an H200 — the short
# pass of both sanitizers and kvpool against Triton (replace the README's table from it if
# the machine is an H200: `python3 scripts/gpu/triton_table.py $OUT/triton`).
step sanitize SANITIZE_OPS=100 sanitize-quick
step triton BENCH_ARGS="--ops alloc_extend,alloc_decode --page-sizes 16,64 --batch-sizes 1,8,64,256,1024,4096" bench
