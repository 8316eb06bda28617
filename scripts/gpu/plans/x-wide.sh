# Experiment (branch s30-blocks-wider): extends of 257-1,024 requests on several blocks that
# each decide the call, in one build, the kernel picked by KVPOOL_X_WIDE (src/cuda/pool.rs,
# x_wide): correctness with each kernel (deciding-block tests, lockstep, sanitizers on the
# wide test), then the benchmark with each, main's kernels ("off") twice. Tables:
# scripts/gpu/ab_table.py $OUT/bench off xd w4 x2 x512 x1024 (and $OUT/bench-short).
step x-tests x-wide-tests
X_RUNS="off:KVPOOL_X_WIDE=off xd:KVPOOL_X_WIDE=xd,KVPOOL_X_WIDE_FROM=33 w4:KVPOOL_X_WIDE=w4 x2:KVPOOL_X_WIDE=x2 x512:KVPOOL_X_WIDE=x512 x1024:KVPOOL_X_WIDE=x1024 x512g:KVPOOL_X_WIDE=x512,KVPOOL_X_WIDE_GRID=132 x1024g:KVPOOL_X_WIDE=x1024,KVPOOL_X_WIDE_GRID=132 off:KVPOOL_X_WIDE=off"
step bench BENCH_PYTHON=0 BENCH_ENV_RUNS="$X_RUNS" \
    BENCH_ARGS="--ops alloc_extend --page-sizes 16 --batch-sizes 128,256,257,384,512,768,1024" bench
step bench-short BENCH_PYTHON=0 BENCH_ENV_RUNS="$X_RUNS" \
    BENCH_ARGS="--ops alloc_extend --page-sizes 16 --batch-sizes 257,512,1024 --extend-tokens 16" bench
step triton BENCH_ARGS="--ops alloc_extend --page-sizes 16 --batch-sizes 256,512,1024" bench
