# Fiftieth session, after run s50-2 (PENDING.md items 0 and 6): where extend_block's
# several blocks (kvp_extend_blocks_*, 33-256 requests of 512 tokens, 1.44-1.52x Triton's
# time on an H100 in run s50-2) spend their time now that they vote at the verdict
# (bench-gpu/anatomy.cu's several-block cases, compiled from the tree's kernels), and the
# README's Triton table on main's kernels. Pack with `scripts/gpu/pack.sh` (the anatomy
# needs no library), then `timeout 400 env OUT=$OUT scripts/gpu/steps.sh
# scripts/gpu/plans/s50-anatomy.sh`; `python3 scripts/gpu/triton_table.py $OUT/triton`,
# phases in $OUT/anatomy/anatomy.md.
step anatomy anatomy
step triton BENCH_ARGS="--ops alloc_extend,alloc_decode --page-sizes 16,64 --batch-sizes 1,8,64,256,1024,4096" bench
