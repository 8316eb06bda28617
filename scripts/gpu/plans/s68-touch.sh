# Sixty-eighth session (PENDING.md item 14): what stands between a kernel's wait
# (griddepcontrol.wait, ACQBULK) and its round trip 1.
# 1. Its parameters' constant-bank lines. Run s62-6's Nsight Compute samples had 18% of
#    kvp_extend_blocks_i64's stalls (64 x 512 tokens) and 10% of kvp_extend_few_blocks_i64's
#    (8 x 512) on constant-cache misses (imc), none in Triton's top reasons. A kernel's
#    parameters (View, Call, its own; ~220 bytes, four 64-byte lines) are read where the code
#    first needs them; in main's SASS (sm_90) the View's later fields (the 0x240 line) and
#    mostly the outputs' line (0x2c0) are first read after the wait, each a stall on the way
#    to round trip 1. P (s68-touch-warps.patch): every allocation kernel (parameters ending in
#    `out` or a request table) reads word k of them by lane 0 of warp k (warp 0 past the
#    block's warps) before the wait, a predicated LDC each (in flight together), stored to
#    shared memory nobody reads (volatile). (T, s68-touch-params.patch, thread 0 reading them
#    all as uniform loads, one miss after another, is the first form: not in these rounds.)
# 2. The shared set-up. In the decode blocks and extend_block's kernels 62-95 instructions
#    (the claims tables' clears) lie between the wait and the first load. R
#    (s68-loads-first.patch): round trip 1's loads issued first, the set-up made while they
#    are in flight: 8-14 instructions (the cluster decode keeps its order: its set-up comes
#    before its cluster barrier's release arrival).
# PR: both. With programmatic dependent launch (a flat graph) P's misses land under the wait;
# in child graphs they overlap; R applies to both.
#   P=$(scripts/gpu/patch-variant.sh scripts/gpu/plans/s68-touch-warps.patch main)
#   R=$(scripts/gpu/patch-variant.sh scripts/gpu/plans/s68-loads-first.patch main)
#   PR=$(scripts/gpu/patch-variant.sh scripts/gpu/plans/s68-loads-first.patch $P)
#   git checkout -q --detach $PR && git checkout main -- scripts/gpu && git reset -q
#   scripts/gpu/pack.sh --variant M=main --variant P=$P --variant R=$R --variant PR=. \
#       && git checkout -q main
#   timeout 580 env OUT=$OUT scripts/gpu/steps.sh scripts/gpu/plans/s68-touch.sh
# Read: python3 scripts/gpu/ab_table.py $OUT/ab-touch-flat M P R PR (and ab-touch-child); on
# an H200, main's tables first: scripts/gpu/triton_table.py $OUT/triton (and triton-flat).
# The tests run on PR's build (the packed tree); P or R alone needs its own before it lands.
echo "s68-touch.sh: on $(card_name)"
# shellcheck source=/dev/null
source scripts/gpu/plans/triton-h200-main.sh
ab_bench ab-touch-flat "--flat-graph --ops alloc,alloc_extend,alloc_decode --page-sizes 16 --batch-sizes 1,8,64,256,1024" "M P R PR M P R PR M P R PR"
ab_bench ab-touch-child "--ops alloc_extend,alloc_decode --page-sizes 16 --batch-sizes 1,8,64,256" "M P R PR M P R PR"
step tests tests
step sanitize SANITIZE_OPS=100 sanitize-quick
