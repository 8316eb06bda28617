# Sixty-eighth session (PENDING.md item 14): the kernels' parameters read before their
# griddepcontrol.wait. Run s62-6's Nsight Compute samples had 18% of kvp_extend_blocks_i64's
# stalls (64 x 512 tokens) and 10% of kvp_extend_few_blocks_i64's (8 x 512) on constant-cache
# misses (imc), none in Triton's top reasons: a kernel's parameters (View, Call, its own;
# ~220 bytes, four 64-byte lines of its constant bank) are read where the code first needs
# them, and in main's SASS (sm_90) only the page-size dispatch's `page_shift` and the line at
# 0x200 are read before ACQBULK, the View's later fields (0x240 line) and the outputs' line
# (0x2c0) after it, each a stall on the way to round trip 1. Every allocation kernel (those
# whose parameters end in `out` or a request table) reads a word of each line before the
# wait and stores it to shared memory nobody reads (volatile):
#   T (s68-touch-params.patch): thread 0 reads them all (uniform loads, ULDC: one miss after
#     another, before the wait);
#   P (s68-touch-warps.patch): word k by lane 0 of warp k (warp 0 past the block's warps),
#     each a predicated LDC (in flight together, also in a one-warp kernel).
# With programmatic dependent launch (a flat graph) the misses land under the wait; in child
# graphs (no early launch) T only moves them, P overlaps them.
#   T=$(scripts/gpu/patch-variant.sh scripts/gpu/plans/s68-touch-params.patch main)
#   P=$(scripts/gpu/patch-variant.sh scripts/gpu/plans/s68-touch-warps.patch main)
#   git checkout -q --detach $P && git checkout main -- scripts/gpu && git reset -q
#   scripts/gpu/pack.sh --variant M=main --variant T=$T --variant P=. && git checkout -q main
#   timeout 560 env OUT=$OUT scripts/gpu/steps.sh scripts/gpu/plans/s68-touch.sh
# Read: python3 scripts/gpu/ab_table.py $OUT/ab-touch-flat M T P (and ab-touch-child); on an
# H200, main's tables first: scripts/gpu/triton_table.py $OUT/triton (and triton-flat). The
# tests run on P's build (the packed tree); T needs its own before it could land.
echo "s68-touch.sh: on $(card_name)"
# shellcheck source=/dev/null
source scripts/gpu/plans/triton-h200-main.sh
ab_bench ab-touch-flat "--flat-graph --ops alloc,alloc_extend,alloc_decode --page-sizes 16 --batch-sizes 1,8,64,256,1024" "M T P M T P M T P"
ab_bench ab-touch-child "--ops alloc_extend,alloc_decode --page-sizes 16 --batch-sizes 1,8,64,256" "M T P M T P"
step tests tests
step sanitize SANITIZE_OPS=100 sanitize-quick
