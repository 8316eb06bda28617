# Fifty-fourth session: s54-pdl-ab.sh cut to what fits the device time left (the same
# packing): every GPU test and the contract test of N, the flat-graph A/B of extends and
# decodes, the short sanitizer pass, the Python tests, then the Triton table.
step tests tests
source scripts/gpu/plans/s54-pdl-neg.sh
ab_bench ab-pdl-extend "--flat-graph --ops alloc_extend --page-sizes 16 --batch-sizes 1,8,64,256,1024" "M W P M W P"
ab_bench ab-pdl-decode "--flat-graph --ops alloc_decode --page-sizes 16 --batch-sizes 1,8,64,256,1024" "M W P M W P"
step sanitize SANITIZE_OPS=100 sanitize-quick
step python python
step triton-flat BENCH_CPP_ARGS=--flat-graph BENCH_ARGS="--ops alloc_extend,alloc_decode --page-sizes 16 --batch-sizes 1,8,64,256,1024,4096" bench
