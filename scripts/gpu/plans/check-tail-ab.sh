# The continued request's checks as one helper (branch s38-check-tail, not on main: its
# SASS differs in 192 of 297 functions, so it lands only if the A/B shows no loss). Pack on a
# checkout of that branch with `scripts/gpu/pack.sh --variant P=main --variant T=.`; every
# GPU test on T, then A/B (AB_VARIANTS, default "P T P T") on each kernel family whose code
# changed: extend_few and its one-request/2/4/8 kernels (1-32 requests), extend_pairs (33,
# 64), extend_block (128, 256), the several-block kernels (8 x 512 tokens), decode_block and
# the cluster decodes (1-4,096 requests), at pages 1 and 16. kvpool_bench's extends have
# empty prefixes (the checks do not run, the code around them changed); its decodes continue
# every request (the checks run for each). Tables: scripts/gpu/ab_table.py $OUT/NAME P T.
step tests tests
ab_bench ct_extend1 "--ops alloc_extend --page-sizes 1 --batch-sizes 1,2,8,32,33,64,128,256 --extend-tokens 4"
ab_bench ct_extend16 "--ops alloc_extend --page-sizes 16 --batch-sizes 1,2,8,32,33,64,128,256 --extend-tokens 16"
ab_bench ct_long "--ops alloc_extend --page-sizes 16 --batch-sizes 1,8 --extend-tokens 512"
ab_bench ct_decode "--ops alloc_decode --page-sizes 1,16 --batch-sizes 1,32,256,1024,4096"
