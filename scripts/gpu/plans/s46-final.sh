# The forty-sixth session's kernels as they land (N3): the replay check ON_READ (the mark of
# the cursor read) in every kernel but the decodes, which keep it ON_WRITTEN without a mark.
# By `cuobjdump -sass` (sm_90) every kvp_decode_* function is main's (213a2d2) instruction
# for instruction and every other function N2's (47976f6, run s46-3 and the full sanitizer
# step s46-4). Every GPU test, kvpool against SGLang's Triton kernels on issue 9's sizes
# (the README's table), the short pass of both sanitizers and the Python tests. Pack with
# `scripts/gpu/pack.sh`.
step tests tests
step triton BENCH_ARGS="--ops alloc_extend,alloc_decode --page-sizes 16,64 --batch-sizes 1,8,64,256,1024,4096" bench
step sanitize SANITIZE_OPS=100 sanitize-quick
step python python
