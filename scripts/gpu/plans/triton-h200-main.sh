# On an H200 only (PENDING.md item 0): the README's table (as triton.sh) and its flat-graph
# form from the library of the packed variant M (main's kernels), for runs whose tests are
# another variant's (`scripts/gpu/pack.sh --variant M=main ...`). Read with
# scripts/gpu/triton_table.py $OUT/triton and $OUT/triton-flat.
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
    step triton LIBRARY_VARIANT=M BENCH_ARGS="--ops alloc_extend,alloc_decode --page-sizes 16,64 --batch-sizes 1,8,64,256,1024,4096" bench
    step triton-flat LIBRARY_VARIANT=M BENCH_CPP_ARGS=--flat-graph BENCH_ARGS="--ops alloc,alloc_extend,alloc_decode --page-sizes 16,64 --batch-sizes 1,8,64,256,1024,4096" bench
fi
