# A change to the ticketed kernel (kvp_extend_*: extends of more than 1,024 requests, decodes
# past one block or cluster): every GPU test, an A/B of packed builds (AB_VARIANTS, default
# "P T P T") on its extends (pages 1, 16, 64; kvpool_bench stops at 4,096 requests, so its
# decodes, past 4,096 on an H200, are not timed), both sanitizers with the C++ examples, and
# the Python tests. Table: scripts/gpu/ab_table.py $OUT/bench P T.
step tests tests
ab_bench bench "--ops alloc_extend --page-sizes 1,16,64 --batch-sizes 1025,2048,4096"
step sanitize SANITIZE_OPS="${SANITIZE_OPS:-100}" sanitize example
step python python
