# Main (20a838c: the forty-sixth session's kernels, 2a09571's fatbin, never run on a GPU
# before; the host's head prediction of 0d58776, which main's lockstep test checks against
# the device's cursor) and the forty-seventh session's variants as libraries beside it (see
# s47-hint-ab.sh: H, E, D1). Pack on main with
#   H=$(scripts/gpu/patch-variant.sh scripts/gpu/plans/s47-ring-hint.patch main)
#   E=$(scripts/gpu/patch-variant.sh scripts/gpu/plans/s47-decode-first.patch main)
#   D1=$(scripts/gpu/patch-variant.sh scripts/gpu/plans/s47-decode-noreplay.patch main)
#   scripts/gpu/pack.sh --variant M=. --variant H=$H --variant E=$E --variant D1=$D1
# Every GPU test on main (PENDING.md item 0), the A/Bs of the variants against it, the short
# pass of both sanitizers, the Python tests, and kvpool against Triton on issue 9's sizes.
step tests tests
ab_bench ab-extend "--ops alloc_extend --page-sizes 1,16,64 --batch-sizes 1,2,4,8,32,64" "M H M H M H"
ab_bench ab-decode "--ops alloc_decode --page-sizes 16,64 --batch-sizes 1,8,64,256" "M E D1 M E D1"
step sanitize SANITIZE_OPS=100 sanitize-quick
step python python
step triton BENCH_ARGS="--ops alloc_extend,alloc_decode --page-sizes 16,64 --batch-sizes 1,8,64,256,1024,4096" bench
