# review-fixes.sh's A/B of the changed kernels (see review-tests.sh; pack with
# `scripts/gpu/pack.sh --variant P=6e8aef2 --variant T=.`).
ab_bench grid8 "--ops alloc_extend --page-sizes 16 --batch-sizes 1,8 --extend-tokens 512"
ab_bench grid32 "--ops alloc_extend --page-sizes 16 --batch-sizes 32,128,256 --extend-tokens 64"
ab_bench one4096 "--ops alloc_extend --page-sizes 16 --batch-sizes 1 --extend-tokens 4096"
ab_bench wide "--ops alloc_extend --page-sizes 16 --batch-sizes 400,1000 --extend-tokens 16"
ab_bench frees "--ops free_segment --page-sizes 16,64 --batch-sizes 1,64,256"
