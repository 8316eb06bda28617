# Sixty-fourth session, third run: two host-only shape choices on the landed kernels
# (3726156). W3 (s64-few-short-to-target.patch): few_shape's 256-token blocks on 128
# threads up to 264 blocks (TARGET_BLOCKS), past one an SM too, before 512-token blocks on
# 256 (run s64-2: W1's grid read 0.97-0.99x the 256-thread kernels at 49-66 k tokens, the
# landed shape 1.00-1.02x). C2 (s64-few-choice2.patch): plain calls of 2-32 requests on
# kvp_extend_few_blocks_128_* wherever few_shape's blocks hold the requests, the spread
# kernel only past them (run s64-1's "M" was this choice's library, C: main's own spread
# kernel at 5-32 requests of 128 tokens is unmeasured). W3C: both. The A/B of M, W3, C2 and
# W3C; then W3C's own tests (packed apart as gpu-artifacts-b, swapped in: s64-long-tests.sh).
#   W3=$(scripts/gpu/patch-variant.sh scripts/gpu/plans/s64-few-short-to-target.patch main)
#   C2=$(scripts/gpu/patch-variant.sh scripts/gpu/plans/s64-few-choice2.patch main)
#   W3C=$(scripts/gpu/patch-variant.sh scripts/gpu/plans/s64-few-choice2-short-to-target.patch main)
#   scripts/gpu/pack.sh --variant W3=$W3 --variant C2=$C2 --variant W3C=$W3C --variant M=.
#   (then W3C's pack as gpu-artifacts-b, as s64-spread-tests.sh's header says)
#   timeout 200 env OUT=$OUT scripts/gpu/steps.sh scripts/gpu/plans/s64-short.sh; rm -rf
#   gpu-artifacts && mv gpu-artifacts-b gpu-artifacts && timeout 300 env OUT=$OUT/b
#   scripts/gpu/steps.sh scripts/gpu/plans/s64-long-tests.sh
# Tables: python3 scripts/gpu/ab_table.py $OUT/ab-mid M W3 C2 W3C (ab-mid8k, ab-choice,
# ab-choice64, ab-short-control).
echo "s64-short.sh: on $(card_name)"
SHORT_AB="M W3 C2 W3C M W3 C2 W3C M W3 C2 W3C"
ab_bench ab-mid "--flat-graph --ops alloc_extend --extend-tokens 16384 --page-sizes 1,16 --batch-sizes 3,4" "$SHORT_AB"
ab_bench ab-mid8k "--flat-graph --ops alloc_extend --extend-tokens 8192 --page-sizes 1,16 --batch-sizes 6,8,16" "$SHORT_AB"
ab_bench ab-choice "--flat-graph --ops alloc_extend --extend-tokens 128 --page-sizes 1,16 --batch-sizes 5,8,16,32" "$SHORT_AB"
ab_bench ab-choice64 "--flat-graph --ops alloc_extend --extend-tokens 64 --page-sizes 16 --batch-sizes 16,32" "M W3 C2 W3C M W3 C2 W3C"
ab_bench ab-short-control "--flat-graph --ops alloc_extend --page-sizes 16 --batch-sizes 2,8,32" "M W3 C2 W3C M W3 C2 W3C"
