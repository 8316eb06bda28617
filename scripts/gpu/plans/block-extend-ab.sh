# Extends of 33-256 requests on extend_block's kernels, A/B as kernel-ab.sh's bench (builds P
# and T from `scripts/gpu/pack.sh --variant`): 4 tokens a request at 33 and 64 requests (132
# and 256 tokens), 16 tokens at 33, 64 and 256 (528, 1,024 and 4,096 tokens). Since the
# twentieth session's caps (src/cuda/pool.rs) the 4-token rows run on one block of 256
# threads (kvp_extend_block_*) and the 16-token rows on several (kvp_extend_blocks_*); before
# them, two warps (kvp_extend_block64_*) and one block up to 1,024 tokens.
ab_bench block4 "--ops alloc_extend --page-sizes 1 --batch-sizes 33,64 --extend-tokens 4"
ab_bench block16 "--ops alloc_extend --page-sizes 1,16 --batch-sizes 33,64,256 --extend-tokens 16"
