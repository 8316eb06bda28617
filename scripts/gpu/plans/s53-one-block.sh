# Written in the fifty-second session; run s53-1 (H100, BENCHMARKS.md: 0.86-0.91x at
# 65-256 requests of 1-2 tokens, landed). R = main +
# s53-one-block-owners.patch: the one-block extend kernels that plan their tokens
# (`kvp_extend_block_*`: 65-256 requests of up to 256 tokens, one token a thread;
# `kvp_extend_block64_*`) find each token's request from where the requests start
# (TokenOwners, as 0b1fcba's several blocks; position 0 marked too, since request 0 may be
# empty), instead of a galloping search from request 0 (up to ~16 dependent shared loads
# for a thread whose token lies 255 requests on: e.g. a verify extend of 1-3 draft tokens
# for each of 65-256 requests). Compiles (sm_90); by `cuobjdump -sass` only
# kvp_extend_block{,64}_{i32,i64} differ from main's (0b1fcba; kvp_extend_blocks_* are
# identical). Pack with
#   R=$(scripts/gpu/patch-variant.sh scripts/gpu/plans/s53-one-block-owners.patch main)
#   git checkout --detach $R && scripts/gpu/pack.sh --variant M=main --variant R=.
# then `timeout 500 env OUT=$OUT scripts/gpu/steps.sh scripts/gpu/plans/s53-one-block.sh`;
# `python3 scripts/gpu/ab_table.py $OUT/NAME M R`. A winner lands only with every GPU test,
# sanitize-quick and the Python suites passed on it (this plan runs them on R).
ab_bench ab-one1 "--ops alloc_extend --extend-tokens 1 --page-sizes 1 --batch-sizes 65,128,256" "M R M R M R"
ab_bench ab-one2 "--ops alloc_extend --extend-tokens 2 --page-sizes 1 --batch-sizes 65,128" "M R M R M R"
ab_bench ab-one-control "--ops alloc_extend --extend-tokens 16 --page-sizes 16 --batch-sizes 33,256" "M R M R"
step tests tests
step sanitize SANITIZE_OPS=100 sanitize-quick
step python python
# On an H200 only (PENDING.md item 0): the README's table with this tree's library.
source scripts/gpu/plans/triton-h200.sh
