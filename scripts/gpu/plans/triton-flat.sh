# triton.sh's table in one flat graph (kvpool_bench --flat-graph: a call's kernels copied 100
# times into one graph, linked as capture links consecutive calls, which keeps programmatic
# dependent launch), with `alloc` beside the extends and decodes. Read with
# scripts/gpu/triton_table.py OUT/triton-flat.
step triton-flat BENCH_CPP_ARGS=--flat-graph BENCH_ARGS="--ops alloc,alloc_extend,alloc_decode --page-sizes 16,64 --batch-sizes 1,8,64,256,1024,4096" bench
