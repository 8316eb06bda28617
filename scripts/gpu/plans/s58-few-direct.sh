# Run s59-1 (H100, 182 s; BENCHMARKS.md): F not kept, 1.02-1.04x main's time at 2-32
# requests of 512 tokens, 1.04-1.07x at 1-8 of 2,048 (controls 1.00x); every GPU test,
# sanitize-quick and the Python tests passed on F. The H200 steps did not run (an H100).
# Fifty-eighth session (PENDING.md item 6): extend_few's several blocks (kvp_extend_few_blocks_*,
# 2-32 requests past one block's tokens; kvp_extend_one_blocks_*, one such request) whose
# tokens all lie in one request plan them from that request's offsets and load their new
# pages from the ring per thread before the verdict, then store the slots from registers
# after it: no staging, no search or shared loads after the barrier (F,
# s58-few-direct.patch). The other kernels' PTX is main's (nvcc 13.0, sm_90).
#   F=$(scripts/gpu/patch-variant.sh scripts/gpu/plans/s58-few-direct.patch main)
#   git checkout --detach $F && scripts/gpu/pack.sh --variant M=main --variant F=.
#   timeout 560 env OUT=$OUT scripts/gpu/steps.sh scripts/gpu/plans/s58-few-direct.sh
# Tables: python3 scripts/gpu/ab_table.py $OUT/ab-few M F (ab-few-long, ab-few-control).
FEW_AB="M F M F M F"
FEW_AB_CONTROL="M F M F"
# shellcheck source=/dev/null
source scripts/gpu/plans/few-blocks-ab.sh
# shellcheck source=/dev/null
source scripts/gpu/plans/triton-h200-main.sh
