# Decodes of more than one block's requests (kvp_decode_cluster{4,8}_* where the device runs
# clusters, the ticketed kernel beyond): every GPU test, an A/B of packed builds on decodes of
# 1,024-4,096 requests (AB_VARIANTS, default "P T P T"), both sanitizers with the C++
# examples, the Python tests, and SGLang's Triton kernels beside this build (run s28-2,
# BENCHMARKS.md, twenty-eighth session). Tables: scripts/gpu/ab_table.py $OUT/bench P T,
# scripts/gpu/triton_table.py $OUT/triton.
step tests tests
ab_bench bench "--ops alloc_decode --page-sizes 1,16,64 --batch-sizes 1024,1025,2048,2049,3000,4096"
step sanitize SANITIZE_OPS="${SANITIZE_OPS:-100}" sanitize example
step python python
step triton BENCH_ARGS="--ops alloc_decode --page-sizes 16,64 --batch-sizes 1024,2048,4096" bench
