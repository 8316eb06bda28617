# Written in the fifty-first session, not yet run (PENDING.md item 6): V = main +
# s52-publish-first.patch: in extend_block's several blocks the thread that finds the
# request holding the block's first token (the stage bounds' loop) also publishes, before
# the stage-bound barrier, that request's offsets and whether the block's tokens all lie
# in it (`FirstRequest`); plan_block_tokens takes them instead of reading
# `tok_off[first + 1]` and the offsets after the barrier (a load that depends on `first`).
# Aim: keep 4a4b301's 0.96-1.00x at 33-1,024 requests of 512 tokens and lose its 1.01x at
# 33-256 requests of 16 tokens (run s51-6). Run s52-1 (H100): 33-256 requests 0.98-1.00x,
# 1,024 requests 1.01-1.06x (the wide blocks spill); landed for blocks of 256 threads only
# (s52-narrow.sh). Pack with
#   V=$(scripts/gpu/patch-variant.sh scripts/gpu/plans/s52-publish-first.patch main)
#   git checkout --detach $V && scripts/gpu/pack.sh --variant M=main --variant V=.
# then `timeout 500 env OUT=$OUT scripts/gpu/steps.sh scripts/gpu/plans/s52-publish.sh`;
# `python3 scripts/gpu/ab_table.py $OUT/NAME M V`. A winner lands only with every GPU test,
# sanitize-quick and the Python suites passed on it (this plan runs them on V).
ab_bench ab-publish "--ops alloc_extend --page-sizes 1,16,64 --batch-sizes 33,64,128,256,1024" "M V M V M V"
ab_bench ab-publish16 "--ops alloc_extend --extend-tokens 16 --page-sizes 16 --batch-sizes 33,64,256,1024" "M V M V M V"
step tests tests
step sanitize SANITIZE_OPS=100 sanitize-quick
step python python
# On an H200 only (PENDING.md item 0): the README's table, kvpool (this tree's library)
# against SGLang's Triton kernels; `python3 scripts/gpu/triton_table.py $OUT/triton`.
source scripts/gpu/plans/triton-h200.sh
