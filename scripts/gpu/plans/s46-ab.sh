# Run s46-1 (H100) passed every step of s46-verify.sh but two: the new replay test's first
# check read the previous shape's fault, reported once more after the clear (the test, not
# the kernels: fixed to read `fault()`), and the A/B asked the benchmark for a `rewind` op it
# does not have. Every GPU test again and the A/B (Q = d604b2a, before any turn check; M =
# 213a2d2, main before the change; N = this tree). Pack with `scripts/gpu/pack.sh --variant
# Q=d604b2a --variant M=213a2d2 --variant N=.`.
step tests tests
ab_bench ab "--ops alloc_extend,alloc_decode --page-sizes 16 --batch-sizes 1,8,64,256,1024" "Q M N Q M N"
