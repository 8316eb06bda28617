# The host side of a device call (scripts/gpu/steps.sh): what each driver call on the path
# costs (bench-gpu/host_calls.cu, no library), then the whole call's host time of two packed
# builds (`scripts/gpu/pack.sh --variant P=REV --variant T=.`) alternating HOST_AB_VARIANTS
# (default "P T P T P T") at the sizes where planning costs most. Host time only
# (`--host-only`): no graph replays. Table: scripts/gpu/ab_table.py $OUT/host P T --host.
step host-calls host-calls
step host BENCH_PYTHON=0 BENCH_VARIANTS="${HOST_AB_VARIANTS:-P T P T P T}" \
    BENCH_ARGS="${HOST_AB_ARGS:---ops alloc_extend,alloc_decode --page-sizes 1,16,64 --batch-sizes 1,256,4096 --host-only}" bench
