# Sixty-fourth session, second run. Run s64-1 (H100) read main's 128-thread blocks of 512
# tokens (kvp_extend_{few,one}_blocks_* past 33,792 tokens on 132 SMs, since 9790b3c) at up
# to 1.14x the time of O, main before 9790b3c (256 threads there): 8 x 8,192 tokens at page
# size 1. W2 (s64-few-blocks-256.patch, on main): those calls back on 256 threads
# (kvp_extend_{few,one}_blocks_256_*, the same code as O's kernels), 128 threads kept for
# blocks of up to 256 tokens. W1 (s64-few-short-past-sms.patch, host only): main's kernels on
# blocks of 256 tokens up to 264 blocks (TARGET_BLOCKS), before blocks of 512. The A/B of M,
# O, W1 and W2 on 1-4 requests of 16,384 tokens and 5-32 of 8,192, controls at 2-32 x 512
# and 1-8 x 2,048. W2's own tests (packed apart, swapped in: s64-long-tests.sh).
#   W2=$(scripts/gpu/patch-variant.sh scripts/gpu/plans/s64-few-blocks-256.patch main)
#   W1=$(scripts/gpu/patch-variant.sh scripts/gpu/plans/s64-few-short-past-sms.patch main)
#   scripts/gpu/pack.sh --variant O=9790b3c~1 --variant W1=$W1 --variant W2=$W2 --variant M=.
#   (then W2's pack as gpu-artifacts-b, as s64-spread-tests.sh's header says)
#   timeout 300 env OUT=$OUT scripts/gpu/steps.sh scripts/gpu/plans/s64-long.sh; rm -rf
#   gpu-artifacts && mv gpu-artifacts-b gpu-artifacts && timeout 280 env OUT=$OUT/b
#   scripts/gpu/steps.sh scripts/gpu/plans/s64-long-tests.sh
# Tables: python3 scripts/gpu/ab_table.py $OUT/ab-long M O W1 W2 (ab-long8k, ab-long-control).
echo "s64-long.sh: on $(card_name)"
LONG_AB="M O W1 W2 M O W1 W2 M O W1 W2"
ab_bench ab-long "--flat-graph --ops alloc_extend --extend-tokens 16384 --page-sizes 1,16 --batch-sizes 1,2,3,4" "$LONG_AB"
ab_bench ab-long8k "--flat-graph --ops alloc_extend --extend-tokens 8192 --page-sizes 1,16,64 --batch-sizes 5,8,16,32" "$LONG_AB"
ab_bench ab-long-control "--flat-graph --ops alloc_extend --page-sizes 16 --batch-sizes 2,8,32" "M O W1 W2 M O W1 W2"
ab_bench ab-long-control2k "--flat-graph --ops alloc_extend --extend-tokens 2048 --page-sizes 16 --batch-sizes 1,8" "M O W1 W2 M O W1 W2"
