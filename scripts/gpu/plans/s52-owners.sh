# Fifty-second session, after run s52-3 (PENDING.md item 6): its anatomy (H200) showed a
# block of many short requests (33 x 16 tokens on 2 blocks) planning its tokens ~1,850
# cycles after the stage-bound barrier against ~470 for a block within one request: each
# token's galloping search (request_of), dependent shared loads token after token.
# O = main + s52-token-owners.patch: in kvp_extend_blocks_* (several blocks of 256 threads)
# each request's owner also publishes, with the stage bounds, the request that starts at
# each of the block's positions and the one holding each warp's first position
# (TokenOwners); a token's request is then one ballot and one shuffle over its warp's
# positions (else its warp's first position's), no search. By `cuobjdump -sass` only
# kvp_extend_blocks_{i32,i64} differ from main's. Pack with
#   O=$(scripts/gpu/patch-variant.sh scripts/gpu/plans/s52-token-owners.patch main)
#   git checkout --detach $O && scripts/gpu/pack.sh --variant M=main --variant O=. --anatomy M=main
# then `timeout 560 env OUT=$OUT scripts/gpu/steps.sh scripts/gpu/plans/s52-owners.sh
# scripts/gpu/plans/anatomy-ab.sh`; `python3 scripts/gpu/ab_table.py $OUT/NAME M O`; phases
# in $OUT/anatomy-{M,T}/anatomy.md (T: O). Every GPU test, sanitize-quick and the Python
# suites run on O (a winner lands only with them passed). Run s52-4 (H100): all passed; 16
# tokens 0.97-0.98x, 64 and 512 tokens 1.01-1.02x main's time: not kept (s52-bits.sh).
ab_bench ab-own16 "--ops alloc_extend --extend-tokens 16 --page-sizes 1,16 --batch-sizes 33,64,128,256,1024" "M O M O M O"
ab_bench ab-own64 "--ops alloc_extend --extend-tokens 64 --page-sizes 16,64 --batch-sizes 33,64,128,256" "M O M O M O"
ab_bench ab-own512 "--ops alloc_extend --page-sizes 16 --batch-sizes 33,64,256,1024" "M O M O M O"
step tests tests
step sanitize SANITIZE_OPS=100 sanitize-quick
step python python
