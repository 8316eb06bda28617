# Fifty-second session, after run s52-5 (Q, s52-start-bits.patch: 16 tokens 0.95-0.96x,
# 64 tokens 1.00-1.02x, but 512 tokens 1.03-1.04x main's time: a block within one request
# starting at its first token still made the three writes, two of them shared atomics,
# before the stage-bound barrier). Q2 = main + s52-start-bits-after-first.patch: Q, with
# no write for a request starting at the block's first token (that request is `first`,
# which the lookup falls back to), so a block within one request writes nothing. By
# `cuobjdump -sass` only kvp_extend_blocks_{i32,i64} differ from main's. Pack with
#   Q2=$(scripts/gpu/patch-variant.sh scripts/gpu/plans/s52-start-bits-after-first.patch main)
#   git checkout --detach $Q2 && scripts/gpu/pack.sh --variant M=main
#   --variant Q=refs/variants/s52-start-bits --variant Q2=.
# then `timeout 450 env OUT=$OUT scripts/gpu/steps.sh scripts/gpu/plans/s52-bits2.sh`;
# `python3 scripts/gpu/ab_table.py $OUT/NAME M Q2 Q` (last column Q / Q2). Every GPU test,
# sanitize-quick and the Python suites run on Q2. Run s52-6 (H100): all passed; 16 tokens
# 0.94-0.95x, 64 tokens 0.99-1.00x, 512 tokens 1.00-1.01x: landed (0b1fcba).
ab_bench ab-bits2-16 "--ops alloc_extend --extend-tokens 16 --page-sizes 1,16 --batch-sizes 33,64,256,1024" "M Q2 Q M Q2 Q"
ab_bench ab-bits2-64 "--ops alloc_extend --extend-tokens 64 --page-sizes 16,64 --batch-sizes 33,64,128,256" "M Q2 Q M Q2 Q"
ab_bench ab-bits2-512 "--ops alloc_extend --page-sizes 1,16,64 --batch-sizes 33,64,128,256,1024" "M Q2 Q M Q2 Q"
step tests tests
step sanitize SANITIZE_OPS=100 sanitize-quick
step python python
