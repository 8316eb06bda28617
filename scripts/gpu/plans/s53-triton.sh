# Fifty-third session: kvpool (main's library, the kernels of 176aadc) against SGLang's
# Triton kernels on whatever card comes: the README's table (PENDING.md item 0; the README
# takes it only from an H200) and extends of 16-token requests (no such row before).
# `scripts/gpu/pack.sh` on main, then `timeout 540 env OUT=$OUT scripts/gpu/steps.sh
# scripts/gpu/plans/s53-triton.sh`; `python3 scripts/gpu/triton_table.py $OUT/triton` (and
# $OUT/triton16).
# shellcheck source=/dev/null
source scripts/gpu/plans/triton.sh
step triton16 BENCH_ARGS="--ops alloc_extend --extend-tokens 16 --page-sizes 16 --batch-sizes 1,8,64,256,1024,4096" bench
