# Main as the forty-seventh session leaves it (the landed kernels of run s47-2, the lockstep
# test's count of head hints compared with the device's cursor, the test hook renamed):
# every GPU test, the Python tests, and kvpool against Triton on issue 9's sizes (replace
# the README's table from it if on an H200). Pack with `scripts/gpu/pack.sh`.
step tests tests
step python python
step triton BENCH_ARGS="--ops alloc_extend,alloc_decode --page-sizes 16,64 --batch-sizes 1,8,64,256,1024,4096" bench
