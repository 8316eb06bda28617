# The forty-fifth session's first H200 run: main's kernels (the turn check, its fault paths
# out of line) had been measured on H100s only. Every GPU test; kvpool against SGLang's
# Triton kernels on issue 9's sizes (the README's table); what the turn check costs on an
# H200 (Q: main before any turn check, d604b2a; M: this tree); the C++ examples under
# memcheck; the Python tests on the device. Pack with
# `scripts/gpu/pack.sh --variant Q=d604b2a --variant M=.`.
step tests tests
step triton BENCH_ARGS="--ops alloc_extend,alloc_decode --page-sizes 16,64 --batch-sizes 1,8,64,256,1024,4096" bench
ab_bench ab "--ops alloc_extend,alloc_decode --page-sizes 16 --batch-sizes 1,8,64,256,1024" "Q M Q M"
step example example
step python python
