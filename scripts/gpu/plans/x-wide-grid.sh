# The grid caps of x-wide.sh's kernels (KVPOOL_X_WIDE_GRID): see there.
X_RUNS="off:KVPOOL_X_WIDE=off"
for g in 66 132; do X_RUNS+=" xdg$g:KVPOOL_X_WIDE=xd,KVPOOL_X_WIDE_FROM=33,KVPOOL_X_WIDE_GRID=$g"; done
X_RUNS+=" x2g132:KVPOOL_X_WIDE=x2,KVPOOL_X_WIDE_GRID=132"
for g in 66 100 132 200; do X_RUNS+=" x512g$g:KVPOOL_X_WIDE=x512,KVPOOL_X_WIDE_GRID=$g"; done
for g in 66 100 132; do X_RUNS+=" x1024g$g:KVPOOL_X_WIDE=x1024,KVPOOL_X_WIDE_GRID=$g"; done
X_RUNS+=" off:KVPOOL_X_WIDE=off"
step bench BENCH_PYTHON=0 BENCH_ENV_RUNS="$X_RUNS" \
    BENCH_ARGS="--ops alloc_extend --page-sizes 1,16,64 --batch-sizes 128,256,257,384,512,768,1024" bench
step bench-128 BENCH_PYTHON=0 BENCH_ENV_RUNS="$X_RUNS" \
    BENCH_ARGS="--ops alloc_extend --page-sizes 16 --batch-sizes 128,256,257,512,1024 --extend-tokens 128" bench
step bench-short BENCH_PYTHON=0 BENCH_ENV_RUNS="$X_RUNS" \
    BENCH_ARGS="--ops alloc_extend --page-sizes 16 --batch-sizes 257,512,1024 --extend-tokens 16" bench
