# The two-warp extend kernels (kvp_extend_{few,one,few2,few4,few8,pairs}_64_*) of two builds:
# every GPU test (with a_two_warp_extend_short_of_its_plan_changes_no_page), then A/B of
# builds packed with `scripts/gpu/pack.sh --variant P=REV --variant T=.` (C++ benchmark only,
# alternating AB_VARIANTS, default "P T P T"): 1-64 requests of one token at page size 1 (8,
# 33 and 64 requests: few8's and the pairs' kernels) and 1-4 requests of 16 tokens at page 16.
# Run s36-5 (BENCHMARKS.md, thirty-sixth session): P=2b47bd3, T=46b41b6 (the fix on main). For
# the cheaper form on branch s36-live-exact: P=46b41b6, T=s36-live-exact.
# Tables: scripts/gpu/ab_table.py $OUT/early1 P T (early16).
step tests tests
ab_bench early1 "--ops alloc_extend --page-sizes 1 --batch-sizes 1,2,4,8,32,33,64 --extend-tokens 1"
ab_bench early16 "--ops alloc_extend --page-sizes 16 --batch-sizes 1,2,4 --extend-tokens 16"
