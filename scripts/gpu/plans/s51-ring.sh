# Fifty-first session (PENDING.md item 6): the tree = main + s51-ring-after-rt1.patch:
# extend_block's several blocks (kvp_extend_blocks*_*, not by row) load the ring's pages at
# the cursor's head and a guessed first page rank (the block's first token over the page
# size) with the prefix pages' words, once round trip 1 has brought the cursor, before the
# scan; the scan confirms the guess, else they are loaded again after it as on main. Unlike
# s48-grid-hint and s50-copy-guess, nothing goes ahead of round trip 1. Against main (M) and
# against itself with the guess always wrong (W, s51-ring-after-rt1-wrong.patch: what a miss
# costs). Pack with
#   X=$(scripts/gpu/patch-variant.sh scripts/gpu/plans/s51-ring-after-rt1.patch main)
#   W=$(scripts/gpu/patch-variant.sh scripts/gpu/plans/s51-ring-after-rt1-wrong.patch main)
#   git checkout --detach $X && scripts/gpu/pack.sh --variant M=main --variant W=$W --variant X=.
# then `timeout 560 env OUT=$OUT scripts/gpu/steps.sh scripts/gpu/plans/s51-ring.sh`;
# `python3 scripts/gpu/ab_table.py $OUT/ab-ring M W X` (last column X / W).
ab_bench ab-ring "--ops alloc_extend --page-sizes 1,16,64 --batch-sizes 32,33,64,128,256,1024,4096" "M W X M W X"
step tests tests
step sanitize SANITIZE_OPS=100 sanitize-quick
step python python
