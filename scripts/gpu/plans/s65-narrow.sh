# Sixty-fifth session, first run: the several blocks of 33-256 requests
# (kvp_extend_blocks_*, 256 threads, a request a thread, on span_grid's blocks) on 128
# threads, as the sixty-third session's 128-thread blocks for at most a request a block
# (0.94-0.98x). N2 (s65-narrow.patch, on main): kvp_extend_blocks_narrow{128,256}_*
# (FEW_GRID_BLOCK threads, one or two requests a thread) on few_shape's blocks wherever
# few_shape gives 128 threads (128-token blocks while they fit one an SM, then 256-token
# blocks up to one an SM), 33-128 requests on narrow128, 129-256 on narrow256; 512-token
# blocks stay on kvp_extend_blocks_*. N1 (s65-narrow-per2.patch, host only, on N2): every
# such call on narrow256 (two requests a thread even for 33-128). N4
# (s65-narrow-to-target.patch, host only, on N2): N2, and 256-token blocks on 128 threads
# up to 264 blocks (TARGET_BLOCKS: 128 x 512 tokens) before 512-token blocks on 256. The
# A/B of M, N2 and N4 (N1 packed too); then N4's own tests (packed apart as gpu-artifacts-b, swapped
# in: s65-narrow-tests.sh; N4 reaches both narrow kernels on the most shapes).
#   N2=$(scripts/gpu/patch-variant.sh scripts/gpu/plans/s65-narrow.patch main)
#   N1=$(scripts/gpu/patch-variant.sh scripts/gpu/plans/s65-narrow-per2.patch $N2)
#   N4=$(scripts/gpu/patch-variant.sh scripts/gpu/plans/s65-narrow-to-target.patch $N2)
#   scripts/gpu/pack.sh --variant N1=$N1 --variant N2=$N2 --variant N4=$N4 --variant M=.
#   (then N4's pack as gpu-artifacts-b, as s64-spread-tests.sh's header says)
#   timeout 120 env OUT=$OUT scripts/gpu/steps.sh scripts/gpu/plans/s65-narrow.sh; rm -rf
#   gpu-artifacts && mv gpu-artifacts-b gpu-artifacts && timeout 250 env OUT=$OUT/b
#   scripts/gpu/steps.sh scripts/gpu/plans/s65-narrow-tests.sh
# Tables: python3 scripts/gpu/ab_table.py $OUT/ab-narrow512 M N2 N4 (ab-narrow16,
# ab-narrow-control).
echo "s65-narrow.sh: on $(card_name)"
# (N1 is packed but left out of the rounds, to fit the device time the failed starts left.)
NARROW_AB="M N2 N4 M N2 N4 M N2 N4"
ab_bench ab-narrow512 "--flat-graph --ops alloc_extend --page-sizes 1,16 --batch-sizes 33,64,128,256" "$NARROW_AB"
ab_bench ab-narrow16 "--flat-graph --ops alloc_extend --extend-tokens 16 --page-sizes 16 --batch-sizes 40,64,256" "$NARROW_AB"
ab_bench ab-narrow-control "--flat-graph --ops alloc_extend --page-sizes 16 --batch-sizes 8,1024" "M N2 N4 M N2 N4"
