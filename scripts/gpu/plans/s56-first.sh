# Fifty-sixth session's first run (run s56-1, PENDING.md items 0 and 8), from the tree of
# s55-floor.patch (kvpool_bench's flat-graph floor, since landed: 709869e) on main's
# library: `scripts/gpu/pack.sh`, then
#   timeout 540 env OUT=$OUT scripts/gpu/steps.sh scripts/gpu/plans/s56-first.sh
# On an H200: the README's table in child graphs (triton) and in one flat graph
# (triton-flat, which also prints the new floor); on any card: the floor with programmatic
# launch off (it must fall back to the plain graph's).
if on_card H200; then
    # shellcheck source=/dev/null
    source scripts/gpu/plans/triton.sh
    step triton-flat BENCH_CPP_ARGS=--flat-graph BENCH_ARGS="--ops alloc,alloc_extend,alloc_decode --page-sizes 16,64 --batch-sizes 1,8,64,256,1024,4096" bench
else
    step floor-flat BENCH_CPP_ARGS=--flat-graph BENCH_ARGS="--ops alloc,alloc_extend,alloc_decode --page-sizes 16 --batch-sizes 1,8,64,256,1024,4096" bench
fi
step floor-plain KVPOOL_PROGRAMMATIC_LAUNCH=0 BENCH_PYTHON=0 BENCH_CPP_ARGS=--flat-graph BENCH_ARGS="--ops alloc --page-sizes 16 --batch-sizes 1,64" bench
