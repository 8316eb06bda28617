# Written in the sixtieth session after run s60-2's anatomy; never run as such: the
# sixty-first session ran V in s61-warp0-narrow.sh (run s61-1) and landed it (PENDING.md item
# 10): in extend_few's several blocks (kvp_extend_few_blocks_*, 2-32 requests past one
# block's tokens; kvp_extend_one_blocks_*, one such request) the verdict's barrier waits for
# warp 0, which after its scan spends ~460 cycles working out the block's page range and
# first request (used only by the writes after the barrier) before it decides. V
# (s60-warp0-range.patch): warp 0 decides straight after its scan; the stagers work the
# range out, one of them publishes it in shared memory with the verdict's barrier, and warp
# 0 reads it after. Only those four kernels' SASS differs from main's (nvcc 13.0, sm_90);
# 64 registers as main's, 48 bytes more shared memory. Expected from run s60-2's probes: the
# barrier bound by the stagers' staging instead, ~170-190 cycles earlier.
#   V=$(scripts/gpu/patch-variant.sh scripts/gpu/plans/s60-warp0-range.patch main)
#   git checkout --detach $V && scripts/gpu/pack.sh --variant M=main --variant V=. \
#       --anatomy M=main --anatomy V=$V
#   timeout 580 env OUT=$OUT scripts/gpu/steps.sh scripts/gpu/plans/s60-warp0-range.sh
# Tables: python3 scripts/gpu/ab_table.py $OUT/ab-few M V (ab-few-long, ab-few-control);
# the phases in $OUT/anatomy-{M,V}/anatomy.md (V's warp 0 no longer records point 1, "in").
FEW_AB="M V M V M V"
FEW_AB_CONTROL="M V M V"
# shellcheck source=/dev/null
source scripts/gpu/plans/few-blocks-ab.sh
step anatomy-M ANATOMY_ROOT=gpu-artifacts/anatomy/M anatomy
step anatomy-V ANATOMY_ROOT=gpu-artifacts/anatomy/V anatomy
# (No H200 tables here: with the two anatomies' builds, ~90 s each on the GPU machine, the
# plan would pass the call's 600 s on an H200; PENDING item 0 has its own plan.)
