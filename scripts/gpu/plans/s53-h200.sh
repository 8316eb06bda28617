# Fifty-third session: the README's Triton table (PENDING.md item 0) and 16-token extends
# against Triton, only where the machine is an H200 (on an H100 this plan runs nothing:
# run s53-5 has that card's table). `scripts/gpu/pack.sh` on main, then `timeout 400 env
# OUT=$OUT scripts/gpu/steps.sh scripts/gpu/plans/s53-h200.sh`.
source scripts/gpu/plans/triton-h200.sh
if on_card H200; then
    step triton16 BENCH_ARGS="--ops alloc_extend --extend-tokens 16 --page-sizes 16 --batch-sizes 1,8,64,256,1024,4096" bench
fi
