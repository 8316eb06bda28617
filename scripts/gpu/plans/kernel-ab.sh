# What a kernel change needs before it lands (scripts/gpu/steps.sh): every GPU test, an A/B
# of two builds packed with `scripts/gpu/pack.sh --variant P=REV --variant T=.` (the C++
# benchmark only, alternating AB_VARIANTS, default "P T P T"; operations and sizes in
# AB_ARGS), both sanitizers with the C++ examples, and the Python tests. The A/B table:
# scripts/gpu/ab_table.py $OUT/bench P T.
step tests tests
ab_bench bench "${AB_ARGS:---ops alloc_extend,alloc_decode --page-sizes 16 --batch-sizes 1,8,64,256}"
step sanitize SANITIZE_OPS="${SANITIZE_OPS:-200}" sanitize example
step python python
