# Sixty-eighth session: the kernels' parameters read before their griddepcontrol.wait (T,
# s68-touch-params.patch). Run s62-6's Nsight Compute samples had 18% of
# kvp_extend_blocks_i64's stalls (64 x 512 tokens) and 10% of kvp_extend_few_blocks_i64's
# (8 x 512) on constant-cache misses (imc), none in Triton's top reasons: a kernel's
# parameters (View, Call, its own; ~220 bytes, four 64-byte lines of its constant bank) are
# read where the code first needs them, and in main's SASS (sm_90) only the page-size
# dispatch's `page_shift` and the line at 0x200 are read before ACQBULK, the View's later
# fields (0x240 line) and the outputs' line (0x2c0) after it, each a stall on the way to
# round trip 1. T: thread 0 of every allocation kernel (those ending in `out` or a request
# table) reads a word of each line before the wait and stores their XOR to shared memory
# (volatile: nobody reads it). With programmatic dependent launch (a flat graph) the misses
# land under the wait; in child graphs (no early launch) they only move.
#   T=$(scripts/gpu/patch-variant.sh scripts/gpu/plans/s68-touch-params.patch main)
#   git checkout -q --detach $T && git checkout main -- scripts/gpu && git reset -q
#   scripts/gpu/pack.sh --variant M=main --variant T=. && git checkout -q main
#   timeout 560 env OUT=$OUT scripts/gpu/steps.sh scripts/gpu/plans/s68-touch.sh
# Read: python3 scripts/gpu/ab_table.py $OUT/ab-touch-flat M T (and ab-touch-child); on an
# H200, main's tables first: scripts/gpu/triton_table.py $OUT/triton (and triton-flat).
echo "s68-touch.sh: on $(card_name)"
# shellcheck source=/dev/null
source scripts/gpu/plans/triton-h200-main.sh
ab_bench ab-touch-flat "--flat-graph --ops alloc,alloc_extend,alloc_decode --page-sizes 16 --batch-sizes 1,8,64,256,1024" "M T M T M T"
ab_bench ab-touch-child "--ops alloc_extend,alloc_decode --page-sizes 16 --batch-sizes 1,8,64,256" "M T M T"
step tests tests
step sanitize SANITIZE_OPS=100 sanitize-quick
