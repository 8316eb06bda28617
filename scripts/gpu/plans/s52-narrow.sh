# Fifty-second session, after run s52-1 (PENDING.md item 6): W = main + the first request
# published with the stage bounds (s52-publish-first.patch) in the several blocks of 256
# threads only (kvp_extend_blocks_*: 33-256 requests), not the wide blocks of 512-1,024
# threads (257-1,024 requests, 64 registers, spilling), where V took 1.01-1.06x main's time
# at 1,024 requests (run s52-1); by `cuobjdump -sass` only kvp_extend_blocks_{i32,i64}
# differ from main's. Saved as s52-publish-narrow.patch. Pack with W's tree checked out:
#   scripts/gpu/pack.sh --variant M=main --variant W=. --anatomy M=main
# then `timeout 560 env OUT=$OUT scripts/gpu/steps.sh scripts/gpu/plans/s52-narrow.sh
# scripts/gpu/plans/anatomy-ab.sh`; `python3 scripts/gpu/ab_table.py $OUT/NAME M W`;
# phases in $OUT/anatomy-{M,T}/anatomy.md (T: W). Every GPU test, sanitize-quick and the
# Python suites run on W (a winner lands only with them passed). Run s52-2 (H200): all passed,
# 33-256 requests 0.98-0.99x; its all.tgz passed 16 MiB and did not come back (run s52-3, the
# same machine, redid the 16-token A/B, the triton step and the anatomies): landed (00437b9).
ab_bench ab-narrow "--ops alloc_extend --page-sizes 1,16,64 --batch-sizes 33,64,128,256,1024" "M W M W M W"
ab_bench ab-narrow16 "--ops alloc_extend --extend-tokens 16 --page-sizes 16 --batch-sizes 33,64,256,1024" "M W M W M W"
step tests tests
step sanitize SANITIZE_OPS=100 sanitize-quick
step python python
# On an H200 only (PENDING.md item 0): the README's table, kvpool (this tree's library)
# against SGLang's Triton kernels; `python3 scripts/gpu/triton_table.py $OUT/triton`.
source scripts/gpu/plans/triton-h200.sh
