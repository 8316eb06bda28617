# Run s47-2 (H100, 357 s): every step passed; H and E2 landed on main (bf6e3fa, 33ee229:
# the patches are gone from this folder, the fatbin is the one this run ran). HE = main +
# s47-ring-hint.patch (H) + s47-decode-first-warp.patch (E2: the decodes' round
# trip 1 ahead of the page-size dispatch in kvp_decode_32_* only; by `cuobjdump -sass`,
# sm_90, those functions are E's of run s47-1, every other decode function main's). Run
# s47-1 (H100) A/B'd H and E as libraries on main's tests; this runs every GPU test on HE
# (cuda_device's extends_hand_out_the_same_slots_whatever_the_head_hint among them), the
# A/Bs again with decodes of 1-64 requests by row too, the short pass of both sanitizers,
# and the anatomy of main's and HE's one-block kernels (where the extends' time goes once
# the ring's pages come with round trip 1). Pack on HE with `scripts/gpu/pack.sh --variant
# M=main --variant HE=. --anatomy M=main`.
step tests tests
ab_bench ab-extend "--ops alloc_extend --page-sizes 1,16,64 --batch-sizes 1,2,4,8,16,32" "M HE M HE M HE"
ab_bench ab-decode "--ops alloc_decode,alloc_decode_rows --page-sizes 1,16,64 --batch-sizes 1,2,8,16,32,64" "M HE M HE"
step sanitize SANITIZE_OPS=100 sanitize-quick
step python python
step anatomy-M ANATOMY_ROOT=gpu-artifacts/anatomy/M anatomy
step anatomy-HE anatomy
