# Branches s39-check-tail (the continued request's checks as one helper) and s39-live-exact
# (two-warp extends live only when the device totals are the plan's), each on main, and
# s39-both (the two together). Pack on a checkout of s39-both with
#   scripts/gpu/pack.sh --variant P=main --variant C=s39-check-tail --variant L=s39-live-exact --variant T=.
# then: every GPU test and the Python tests on T (both changes), and A/B of the four builds
# alternating (AB_VARIANTS, default "P C L T P C L T") on check-tail-ab.sh's and
# two-warp-ab.sh's rows, in two calls of under ten minutes (this plan, then
# s39-kernels-2.sh). The sanitizers on T are review-sanitize.sh, a call of their own.
# Tables: scripts/gpu/ab_table.py $OUT/NAME P C (P L, P T).
AB_VARIANTS=${AB_VARIANTS:-"P C L T P C L T"}
step tests tests
step python python
ab_bench ct_long "--ops alloc_extend --page-sizes 16 --batch-sizes 1,8 --extend-tokens 512"
