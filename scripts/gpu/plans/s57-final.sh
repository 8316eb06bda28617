# Fifty-seventh session's last run, on main's landed kernels (the decode blocks' met-only
# lookups, 3f12f70; one warp's early match_any, 2f8d637): every GPU test on the exact fatbin
# (its kernels passed the sanitizers as G in s57-1 and WK in s57-2; left out here, device
# time being short), then kvpool against SGLang's Triton kernels in one flat graph (issue
# 9's table with programmatic dependent launch; `python3 scripts/gpu/triton_table.py
# $OUT/triton-flat`), and on an H200 the README's table in child graphs (PENDING.md item 0).
#   scripts/gpu/pack.sh && timeout 560 env OUT=$OUT scripts/gpu/steps.sh scripts/gpu/plans/s57-final.sh
step tests tests
# shellcheck source=/dev/null
source scripts/gpu/plans/triton-flat.sh
# shellcheck source=/dev/null
source scripts/gpu/plans/triton-h200.sh
