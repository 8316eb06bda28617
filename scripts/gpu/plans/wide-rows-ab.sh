# Extends by request row of 257-1,024 requests in one kernel (kvp_extend_blocks{512,1024}_rows_*;
# before, three: the rows gather, the allocation kernel, the scatter): every GPU test, an A/B of
# packed builds (AB_VARIANTS, default "O P T O P T") on alloc_extend_rows and alloc_extend of
# 256-1,025 requests of 512 and 64 tokens (pages 16, 64), both sanitizers with the C++
# examples, the Python tests. Tables: scripts/gpu/ab_table.py $OUT/bench O P T (and
# $OUT/bench-64).
step tests tests
ab_bench bench "--ops alloc_extend,alloc_extend_rows --page-sizes 16,64 --batch-sizes 64,256,257,512,1024,1025" "O P T O P T"
ab_bench bench-64 "--ops alloc_extend_rows --page-sizes 16 --batch-sizes 257,512,1024 --extend-tokens 64" "O P T O P T"
step sanitize SANITIZE_OPS="${SANITIZE_OPS:-100}" sanitize example
step python python
