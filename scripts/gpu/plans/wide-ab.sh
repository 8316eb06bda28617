# Extends of 257-1,024 requests on blocks of 512 or 1,024 threads that each decide the call
# (kvp_extend_blocks{512,1024}_*; the ticketed kernel before): every GPU test, an A/B of
# packed builds (AB_VARIANTS, default "P T P T") on extends of 256-1,025 requests of 512
# tokens (pages 1, 16, 64) and of 16 and 128 tokens (page 16), both sanitizers with the C++
# examples, the Python tests, and SGLang's Triton kernels beside this build. Tables:
# scripts/gpu/ab_table.py $OUT/bench P T (and $OUT/bench-16, $OUT/bench-128),
# scripts/gpu/triton_table.py $OUT/triton.
step tests tests
ab_bench bench "--ops alloc_extend --page-sizes 1,16,64 --batch-sizes 256,257,384,512,768,1024,1025"
ab_bench bench-16 "--ops alloc_extend --page-sizes 16 --batch-sizes 257,512,1024 --extend-tokens 16"
ab_bench bench-128 "--ops alloc_extend --page-sizes 16 --batch-sizes 257,512,1024 --extend-tokens 128"
step sanitize SANITIZE_OPS="${SANITIZE_OPS:-100}" sanitize example
step python python
step triton BENCH_ARGS="--ops alloc_extend --page-sizes 16,64 --batch-sizes 256,512,1024" bench
