# Run s48-1 (H100, 147 s; BENCHMARKS.md): G not kept — 1.07-1.08x main's time at 2-32
# requests of 512 tokens, 1.03-1.07x at 64-256 (1 request: the same kernel, 1.00). Every
# GPU test, the short sanitizer pass (0 errors, 0 hazards) and the Python tests passed on G
# but the new test's count check (its first version freed one row a round: 33 extends at
# page size 1, every slot right; fixed on main, run by s48-main.sh). The patch is kept:
# `scripts/gpu/patch-variant.sh scripts/gpu/plans/s48-grid-hint.patch` rebuilds G.
# G = main + s48-grid-hint.patch: the several-block extend kernels load a window of the
# ring around each block's tokens at the host's head hint with round trip 1, where they
# loaded their pages once the requests' scan gave their ranks (a round trip later): extend_few's
# (kvp_extend_few_blocks_* / few_spread_* / one_blocks_*: up to 32 requests past 512
# tokens) and extend_block's of 256 threads (kvp_extend_blocks_*: 33-256 requests past one
# block's tokens). By `cuobjdump -sass` (sm_90) every other function is main's instruction
# for instruction. Every GPU test on G (cuda_device's
# extends_hand_out_the_same_slots_whatever_the_head_hint now covers calls of up to 96
# requests and 3,000 tokens, on both several-block kernels), the A/B against main, the short
# pass of both sanitizers, the Python tests and kvpool against Triton. Pack on G with
# `scripts/gpu/pack.sh --variant M=main --variant G=.`; print the A/B with
# `python3 scripts/gpu/ab_table.py $OUT/ab-extend M G`.
step tests tests
ab_bench ab-extend "--ops alloc_extend --page-sizes 1,16,64 --batch-sizes 1,2,8,32,64,128,256" "M G M G M G"
step sanitize SANITIZE_OPS=100 sanitize-quick
step python python
step triton BENCH_ARGS="--ops alloc_extend,alloc_decode --page-sizes 16,64 --batch-sizes 1,8,64,256,1024,4096" bench
