# PENDING.md item 8, written in the fifty-fifth session, not yet run: kvpool_bench's floor
# for flat-graph rows, an empty kernel that first awaits its predecessor
# (griddepcontrol.wait), 100 programmatic launches in one graph, as the library launches
# (`scripts/gpu/plans/s55-floor.patch`: bench-gpu/kvpool_bench.cu and triton_table.py only;
# the library is main's). The bench is compiled on the GPU machine from the tree that
# travels, so run from the variant:
#   F=$(scripts/gpu/patch-variant.sh scripts/gpu/plans/s55-floor.patch main)
#   scripts/gpu/pack.sh && git checkout --detach $F
# then `timeout 300 env OUT=$OUT scripts/gpu/steps.sh scripts/gpu/plans/s56-floor.sh`;
# the floors line of `$OUT/floor-flat/bench_cpp.md` ("flat-graph rows' floor"), against
# the plain graph's and the probe's 0.79 us, and `python3 scripts/gpu/triton_table.py
# $OUT/floor-flat`. A second step with KVPOOL_PROGRAMMATIC_LAUNCH=0 must show the floor
# fall back to the plain graph's.
step floor-flat BENCH_CPP_ARGS=--flat-graph BENCH_ARGS="--ops alloc,alloc_extend,alloc_decode --page-sizes 16 --batch-sizes 1,8,64,256,1024,4096" bench
step floor-plain KVPOOL_PROGRAMMATIC_LAUNCH=0 BENCH_PYTHON=0 BENCH_CPP_ARGS=--flat-graph BENCH_ARGS="--ops alloc --page-sizes 16 --batch-sizes 1,64" bench
