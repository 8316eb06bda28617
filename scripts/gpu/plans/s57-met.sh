# Written in the fifty-sixth session, not yet run (PENDING.md item 9): decode blocks that run
# their table's lookups and third barrier only where some entrant met another of its key
# (G, scripts/gpu/plans/s56-decode-met.patch: `PageTable::enter_meeting` reports whether
# the page was there already; the barrier that publishes the reports becomes
# `__syncthreads_or(met)` instead of `__syncthreads_or(entered)`, so a block of continuing
# requests on pages of their own decides there). The verdict is the same: of two entrants
# of one page the later meets the earlier, and without a meeting every entrant is the first
# of its key, so the lookups would report nothing. Compiled here (nvcc 13.0, sm_90): only
# the decode kernels' resources change (decode_512_i64 spills 4 bytes; the extend kernels'
# are as main's).
#   G=$(scripts/gpu/patch-variant.sh scripts/gpu/plans/s56-decode-met.patch main)
#   git checkout --detach $G && scripts/gpu/pack.sh --variant M=main --variant G=.
#   timeout 500 env OUT=$OUT scripts/gpu/steps.sh scripts/gpu/plans/s57-met.sh
# Tables: python3 scripts/gpu/ab_table.py $OUT/ab-met M G (the bound, X of run s56-2: 0.85-0.90x
# main), $OUT/ab-met-control M G.
step tests tests
ab_bench ab-met "--flat-graph --ops alloc_decode,alloc_decode_rows --page-sizes 16,64 --batch-sizes 33,64,256,512,1024" "M G M G M G"
ab_bench ab-met-control "--flat-graph --ops alloc_decode,alloc_extend --page-sizes 1,16 --batch-sizes 8,256,4096" "M G M G"
step sanitize SANITIZE_OPS=100 sanitize-quick
step sanitize-rows SANITIZE_OPS=100 sanitize-rows
step python python
# shellcheck source=/dev/null
source scripts/gpu/plans/triton-h200-main.sh
