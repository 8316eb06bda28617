# s61-warp0-narrow.sh's A/B alone (main, V, N; no tests, sanitizers or anatomies), for a
# call short of device budget: which of V and N is worth a full run. Same pack.
#   timeout 200 env OUT=$OUT scripts/gpu/steps.sh scripts/gpu/plans/s61-ab-only.sh
ab_bench ab-few "--flat-graph --ops alloc_extend --page-sizes 1,16,64 --batch-sizes 2,4,8,16,32" "M V N M V N M V N"
ab_bench ab-few-long "--flat-graph --ops alloc_extend --extend-tokens 2048 --page-sizes 16 --batch-sizes 1,2,8" "M V N M V N M V N"
