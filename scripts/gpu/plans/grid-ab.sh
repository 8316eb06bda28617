# The ticketed multi-block kernel (kvp_extend_*: extends of more than 1,024 requests, decodes
# of more than 1,024), A/B as kernel-ab.sh's bench (builds from `scripts/gpu/pack.sh
# --variant`; AB_VARIANTS, default "P T P T"): extends of 512 tokens a request and decodes at
# 300-4,096 requests, then extends of 128, 64 and 16 tokens a request (its two token loops
# part at LONG_REQUEST tokens a request, kernels/extend_grid.cuh). Run s26-4 ran these
# steps with kernel-ab.sh's tests, sanitizers and Python tests. (Since the thirtieth session
# extends of 300 and 1,024 requests run on the wide deciding blocks, not on this kernel.)
ab_bench grid "--ops alloc_extend,alloc_decode --page-sizes 1,16,64 --batch-sizes 300,1024,2048,4096"
ab_bench grid128 "--ops alloc_extend --page-sizes 1,16,64 --batch-sizes 1024,4096 --extend-tokens 128"
ab_bench grid64 "--ops alloc_extend --page-sizes 1,16,64 --batch-sizes 1024,4096 --extend-tokens 64"
ab_bench grid16 "--ops alloc_extend --page-sizes 1,16 --batch-sizes 300,1024,4096 --extend-tokens 16"
