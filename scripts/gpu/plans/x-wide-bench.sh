# The benchmark half of x-wide.sh (no tests): see there.
X_RUNS="off:KVPOOL_X_WIDE=off xd:KVPOOL_X_WIDE=xd,KVPOOL_X_WIDE_FROM=33 w4:KVPOOL_X_WIDE=w4 x2:KVPOOL_X_WIDE=x2 x512:KVPOOL_X_WIDE=x512 x1024:KVPOOL_X_WIDE=x1024 x512g:KVPOOL_X_WIDE=x512,KVPOOL_X_WIDE_GRID=132 x1024g:KVPOOL_X_WIDE=x1024,KVPOOL_X_WIDE_GRID=132 off:KVPOOL_X_WIDE=off"
step bench BENCH_PYTHON=0 BENCH_ENV_RUNS="$X_RUNS" \
    BENCH_ARGS="--ops alloc_extend --page-sizes 16 --batch-sizes 128,256,257,384,512,768,1024" bench
step bench-short BENCH_PYTHON=0 BENCH_ENV_RUNS="$X_RUNS" \
    BENCH_ARGS="--ops alloc_extend --page-sizes 16 --batch-sizes 257,512,1024 --extend-tokens 16" bench
