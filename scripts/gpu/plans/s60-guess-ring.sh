# Run s60-1 (H100, 138 s; BENCHMARKS.md): R and Q not kept, R 1.03-1.05x main's time at
# 2-32 requests of 512 tokens and 1.05-1.06x at 1-8 of 2,048, Q 1.03-1.05x and 1.01-1.05x
# (controls 1.00x); every GPU test, sanitize-quick and the Python tests passed on R. The
# H200 steps did not run (an H100).
# Sixtieth session (PENDING.md items 6 and 10): extend_few's several blocks
# (kvp_extend_few_blocks_*, 2-32 requests past one block's tokens; kvp_extend_one_blocks_*,
# one such request) load the ring's pages of their tokens at the host's head hint and a
# guessed first page rank (the block's first token over the page size: exact at page size
# 1 and for new, page-aligned requests) right after round trip 1's loads, and stage them
# after the scan when the cursor and the scan confirm the guess; else as main, a round trip
# after the scan (R, s60-guess-ring.patch). In the SASS (sm_90) the loads issue once round
# trip 1 is in (the fault flag and cursor feed a predicate ahead of the page-size dispatch),
# before the scan; 64 -> 74 registers in kvp_extend_few_blocks_i64. Q
# (s60-guess-ring-early.patch): the same loads issued ahead of the page-size dispatch and
# round trip 1, by the stagers alone (warp 0 branches past them), for power-of-two page
# sizes; 74 registers. In both the other 147 kernels' SASS is main's. The tests, sanitizers
# and Python run on R.
#   R=$(scripts/gpu/patch-variant.sh scripts/gpu/plans/s60-guess-ring.patch main)
#   Q=$(scripts/gpu/patch-variant.sh scripts/gpu/plans/s60-guess-ring-early.patch main)
#   git checkout --detach $R && scripts/gpu/pack.sh --variant M=main --variant R=. --variant Q=$Q
#   timeout 580 env OUT=$OUT scripts/gpu/steps.sh scripts/gpu/plans/s60-guess-ring.sh
# Tables: python3 scripts/gpu/ab_table.py $OUT/ab-few M R Q (ab-few-long, ab-few-control);
# on an H200 also main's README tables (triton_table.py $OUT/triton, $OUT/triton-flat).
FEW_AB="M R Q M R Q M R Q"
FEW_AB_CONTROL="M R Q M R Q"
# shellcheck source=/dev/null
source scripts/gpu/plans/few-blocks-ab.sh
# shellcheck source=/dev/null
source scripts/gpu/plans/triton-h200-main.sh
