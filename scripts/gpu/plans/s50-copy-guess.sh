# Fiftieth session: the tree (branch s50-g, s50-copy-guess.patch on main: extend_block's
# several blocks copy the ring's pages at the head hint and a guessed first page rank into
# shared memory with cp.async ahead of round trip 1; run s50-3's probes put the ring's
# round trip after the scan on their path) against main (M) and against itself with the
# guess always wrong (W, s50-copy-guess-wrong.patch: what a miss costs). Pack with
#   scripts/gpu/pack.sh --variant M=main --variant W=8ea207b2f9c7aeb8dc17b6e12b807a44541686b1 --variant X=.
# then `timeout 560 env OUT=$OUT scripts/gpu/steps.sh scripts/gpu/plans/s50-copy-guess.sh`;
# `python3 scripts/gpu/ab_table.py $OUT/ab-guess M W X` (last column X / W).
ab_bench ab-guess "--ops alloc_extend --page-sizes 1,16,64 --batch-sizes 8,33,64,128,256,1024" "M W X M W X"
step tests tests
step sanitize SANITIZE_OPS=100 sanitize-quick
step python python
