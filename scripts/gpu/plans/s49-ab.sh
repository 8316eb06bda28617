# Forty-ninth session: PENDING.md item 6's two variants (P, V: see s48-plan-blocks.sh) and
# item 5's pairs kernel at the host's head hint (H = main + s49-pairs-hint.patch:
# kvp_extend_pairs_*, 33-64 requests of up to 512 tokens in one block, load the ring's first
# pages at Call::head_hint with round trip 1, as the one-block extend_few kernels do since
# bf6e3fa, and warp 0 loads the prefix pages' words only when some request has a prefix; by
# `cuobjdump -sass -arch sm_90` only kvp_extend_pairs_* differ from main's). Pack on main:
#   P=$(scripts/gpu/patch-variant.sh scripts/gpu/plans/s48-plan-blocks.patch main)
#   V=$(scripts/gpu/patch-variant.sh scripts/gpu/plans/s48-vote-at-verdict.patch main)
#   H=$(scripts/gpu/patch-variant.sh scripts/gpu/plans/s49-pairs-hint.patch main)
#   scripts/gpu/pack.sh --variant M=. --variant P=$P --variant V=$V --variant H=$H
# then `timeout 560 env OUT=$OUT scripts/gpu/steps.sh scripts/gpu/plans/s49-ab.sh`; tables
# `python3 scripts/gpu/ab_table.py $OUT/NAME M P V` (ab-extend, ab-extend-long) and
# `... $OUT/ab-pairs M H`. Pairs at page size 1 (33 requests of 16 tokens pass 512 tokens:
# the benchmark's tokens a request are a multiple of every page size it runs); 32 and 65
# requests are controls (kvp_extend_few_* and kvp_extend_block_* in both).
ab_bench ab-extend "--ops alloc_extend --page-sizes 1,16,64 --batch-sizes 1,2,4,8,16,32" "M P V M P V M P V"
ab_bench ab-extend-long "--ops alloc_extend --page-sizes 16 --batch-sizes 1,2,8 --extend-tokens 2048" "M P V M P V"
ab_bench ab-pairs "--ops alloc_extend --page-sizes 1 --batch-sizes 32,33,48,64,65 --extend-tokens 8" "M H M H M H"
ab_bench ab-pairs1 "--ops alloc_extend --page-sizes 1 --batch-sizes 33,64 --extend-tokens 1" "M H M H"
# Main (the packed tree): PENDING.md item 0 on an H200 (the README's Triton table from
# `python3 scripts/gpu/triton_table.py $OUT/triton` if the machine is an H200).
step sanitize SANITIZE_OPS=100 sanitize-quick
step triton BENCH_ARGS="--ops alloc_extend,alloc_decode --page-sizes 16,64 --batch-sizes 1,8,64,256,1024,4096" bench
