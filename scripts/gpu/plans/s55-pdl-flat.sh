# Fifty-fifth session: the flat-graph half of s54-pdl-ab.sh again, after run s55-1 found
# kvpool_bench's flat_copies unable to read the library's kernel nodes through the runtime
# (cudaErrorInvalidDeviceFunction: they come from the library's own module; now read and
# added through the driver). The same packing as s54-pdl-ab.sh (M, W, P); its tests, the
# N check, sanitizers and Python passed in run s55-1.
ab_bench ab-pdl-extend "--flat-graph --ops alloc_extend --page-sizes 16 --batch-sizes 1,8,64,256,1024,4096" "M W P M W P"
ab_bench ab-pdl-decode "--flat-graph --ops alloc_decode --page-sizes 16 --batch-sizes 1,8,64,256,1024,4096" "M W P M W P"
ab_bench ab-pdl-short "--flat-graph --ops alloc,alloc_extend,alloc_extend_rows --extend-tokens 16 --page-sizes 16 --batch-sizes 1,64,256" "M W P M W P"
step triton-flat BENCH_CPP_ARGS=--flat-graph BENCH_ARGS="--ops alloc_extend,alloc_decode --page-sizes 16,64 --batch-sizes 1,8,64,256,1024,4096" bench
