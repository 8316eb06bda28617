# The second half of s39-kernels.sh's A/B (see there).
AB_VARIANTS=${AB_VARIANTS:-"P C L T P C L T"}
# (kvpool_bench's extends take a multiple of the page size: 4 tokens at page 1, 16 at 16.)
ab_bench ct_extend1 "--ops alloc_extend --page-sizes 1 --batch-sizes 1,2,8,32,33,64,128,256 --extend-tokens 4"
ab_bench ct_extend16 "--ops alloc_extend --page-sizes 16 --batch-sizes 1,2,8,32,33,64,128,256 --extend-tokens 16"
ab_bench ct_decode "--ops alloc_decode --page-sizes 1,16 --batch-sizes 1,32,256,1024,4096"
ab_bench early1 "--ops alloc_extend --page-sizes 1 --batch-sizes 1,2,4,8,32,33,64 --extend-tokens 1"
ab_bench early16 "--ops alloc_extend --page-sizes 16 --batch-sizes 1,2,4 --extend-tokens 16"
