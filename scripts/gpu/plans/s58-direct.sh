# Fifty-eighth session (PENDING.md items 6-7): extend_block's several blocks of 256 threads
# (kvp_extend_blocks_*, 33-256 requests past one block's tokens) decide the call at the
# stage-bound barrier (the checks before it), and a block whose tokens all lie in one
# request loads its tokens' new pages from the ring per thread and writes them, with no
# staging and no barrier after the ring's round trip (D, s58-direct.patch). D2
# (s58-direct-all.patch): every block of a call that takes effect so, its tokens planned
# after the verdict (ranks from the call's first page), not while the ring's pages load.
# The other kernels' PTX is main's (nvcc 13.0, sm_90). Tests and sanitizers on D2 (whose
# direct path holds D's).
#   D=$(scripts/gpu/patch-variant.sh scripts/gpu/plans/s58-direct.patch main)
#   D2=$(scripts/gpu/patch-variant.sh scripts/gpu/plans/s58-direct-all.patch main)
#   git checkout --detach $D2 && scripts/gpu/pack.sh --variant M=main --variant D=$D --variant D2=.
#   timeout 570 env OUT=$OUT scripts/gpu/steps.sh scripts/gpu/plans/s58-direct.sh
# Tables: python3 scripts/gpu/ab_table.py $OUT/ab-direct M D D2 (ab-direct16, ab-direct64;
# ab-direct-control M D2).
step tests tests
ab_bench ab-direct "--flat-graph --ops alloc_extend --page-sizes 1,16,64 --batch-sizes 33,64,128,256" "M D D2 M D D2 M D D2"
ab_bench ab-direct16 "--flat-graph --ops alloc_extend --extend-tokens 16 --page-sizes 1,16 --batch-sizes 33,64,256" "M D D2 M D D2 M D D2"
ab_bench ab-direct64 "--flat-graph --ops alloc_extend --extend-tokens 64 --page-sizes 16,64 --batch-sizes 33,128,256" "M D D2 M D D2"
ab_bench ab-direct-control "--flat-graph --ops alloc_extend,alloc_extend_rows --page-sizes 16 --batch-sizes 8,1024" "M D2 M D2"
step sanitize SANITIZE_OPS=100 sanitize-quick
step python python
# shellcheck source=/dev/null
source scripts/gpu/plans/triton-h200-main.sh
