# Sixty-first session (PENDING.md item 10): V (s60-warp0-range.patch, warp 0 decides
# straight after its scan, the stagers publish the block's page range with the verdict's
# barrier) and N (s61-narrow-few.patch on V: the several blocks' general write loop after
# the verdict in 32-bit offsets where the plan allows, as extend_block's several blocks and
# extend_few's one block count; its 64-bit copy stays for wider plans) against main. Run
# s60-2's anatomy put ~900 cycles of warp 0's path in that loop (one block's writes after
# its verdict: 235). Every GPU test on N (V's code with the narrow loop), both anatomies
# (main's and V's kernels).
#   V=$(scripts/gpu/patch-variant.sh scripts/gpu/plans/s60-warp0-range.patch main)
#   N=$(scripts/gpu/patch-variant.sh scripts/gpu/plans/s61-narrow-few.patch $V)
#   git checkout --detach $N && scripts/gpu/pack.sh --variant M=main --variant V=$V \
#       --variant N=. --anatomy M=main --anatomy V=$V
#   timeout 580 env OUT=$OUT scripts/gpu/steps.sh scripts/gpu/plans/s61-warp0-narrow.sh
# Tables: python3 scripts/gpu/ab_table.py $OUT/ab-few M V N (ab-few-long, ab-few-control);
# the phases in $OUT/anatomy-{M,V}/anatomy.md (V's warp 0 no longer records point 1, "in").
FEW_AB="M V N M V N M V N"
FEW_AB_CONTROL="M V N M V N"
# shellcheck source=/dev/null
source scripts/gpu/plans/few-blocks-ab.sh
# (FEW_ANATOMY=0 in the command leaves the anatomies out, ~200 s of an H100's time with
# their builds, for a call short of device budget.)
if [[ ${FEW_ANATOMY:-1} != 0 ]]; then
    step anatomy-M ANATOMY_ROOT=gpu-artifacts/anatomy/M anatomy
    step anatomy-V ANATOMY_ROOT=gpu-artifacts/anatomy/V anatomy
fi
