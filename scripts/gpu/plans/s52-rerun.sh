# Run s52-3 (fifty-second session): what run s52-2 measured but could not bring back (its
# all.tgz passed the device tool's 16 MiB a file), on the same warm H200 and packing (W's
# tree; `scripts/gpu/pack.sh --variant M=main --variant W=. --anatomy M=main`):
# `timeout 500 env OUT=$OUT scripts/gpu/steps.sh scripts/gpu/plans/s52-rerun.sh
# scripts/gpu/plans/anatomy-ab.sh` (the run itself then tarred $OUT without the logs by hand;
# steps.sh now does so past 15 MiB). The triton step runs on any GPU here; the README's
# table wants an H200.
ab_bench ab-narrow16 "--ops alloc_extend --extend-tokens 16 --page-sizes 16 --batch-sizes 33,64,256,1024" "M W M W M W"
step triton BENCH_ARGS="--ops alloc_extend,alloc_decode --page-sizes 16,64 --batch-sizes 1,8,64,256,1024,4096" bench
