# Fifty-second session, after run s52-4 (O, s52-token-owners.patch: 16 tokens 0.97-0.98x,
# but 64 tokens 1.01-1.02x and 512 tokens 1.01-1.02x main's time; its anatomy: the owners'
# loop over warp starts and the clearing of 512 positions before the barriers cost ~75-375
# cycles). Q = main + s52-start-bits.patch: each request's owner makes three writes, no
# loop (its start's bit in `starts`, its number at its position, an atomicMax of the
# warp's `last`); only 16 words are cleared; a token's request is the highest start bit at
# or below it in its warp, else a warp-wide maximum (`__reduce_max_sync`) over the earlier
# warps' `last`, else `first`. By `cuobjdump -sass` only kvp_extend_blocks_{i32,i64} differ
# from main's. Pack with
#   Q=$(scripts/gpu/patch-variant.sh scripts/gpu/plans/s52-start-bits.patch main)
#   O=refs/variants/s52-token-owners
#   git checkout --detach $Q && scripts/gpu/pack.sh --variant M=main --variant O=$O --variant Q=.
# then `timeout 500 env OUT=$OUT scripts/gpu/steps.sh scripts/gpu/plans/s52-bits.sh`;
# `python3 scripts/gpu/ab_table.py $OUT/NAME M Q O` (last column O / Q). Every GPU test,
# sanitize-quick and the Python suites run on Q. Run s52-5 (H100): all passed; 16 tokens
# 0.95-0.96x, 64 tokens 1.00-1.02x, 512 tokens 1.03-1.04x: not kept (s52-bits2.sh).
ab_bench ab-bits16 "--ops alloc_extend --extend-tokens 16 --page-sizes 1,16 --batch-sizes 33,64,128,256,1024" "M Q O M Q O"
ab_bench ab-bits64 "--ops alloc_extend --extend-tokens 64 --page-sizes 16,64 --batch-sizes 33,64,128,256" "M Q O M Q O"
ab_bench ab-bits512 "--ops alloc_extend --page-sizes 16 --batch-sizes 33,64,256,1024" "M Q O M Q O"
step tests tests
step sanitize SANITIZE_OPS=100 sanitize-quick
step python python
