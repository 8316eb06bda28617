# Extends of up to 32 requests (extend_few's kernels, or a candidate for them), A/B of builds
# packed with `scripts/gpu/pack.sh --variant P=REV --variant T=.` (C++ benchmark only,
# alternating AB_VARIANTS, default "P T P T"): 1-32 requests of 16-8,192 tokens. Tables:
# scripts/gpu/ab_table.py $OUT/w512 P T (w16, w64, w256, w2048, w8192).
step w512 BENCH_PYTHON=0 BENCH_VARIANTS="${AB_VARIANTS:-P T P T}" \
    BENCH_ARGS="--ops alloc_extend --page-sizes 1,16,64 --batch-sizes 1,2,4,8,16,32 --extend-tokens 512" bench
step w16 BENCH_PYTHON=0 BENCH_VARIANTS="${AB_VARIANTS:-P T P T}" \
    BENCH_ARGS="--ops alloc_extend --page-sizes 16 --batch-sizes 1,2,4,8,16,32 --extend-tokens 16" bench
step w64 BENCH_PYTHON=0 BENCH_VARIANTS="${AB_VARIANTS:-P T P T}" \
    BENCH_ARGS="--ops alloc_extend --page-sizes 1,16 --batch-sizes 1,2,8,32 --extend-tokens 64" bench
step w256 BENCH_PYTHON=0 BENCH_VARIANTS="${AB_VARIANTS:-P T P T}" \
    BENCH_ARGS="--ops alloc_extend --page-sizes 16 --batch-sizes 1,2,8,32 --extend-tokens 256" bench
step w2048 BENCH_PYTHON=0 BENCH_VARIANTS="${AB_VARIANTS:-P T P T}" \
    BENCH_ARGS="--ops alloc_extend --page-sizes 16 --batch-sizes 1,2,8,32 --extend-tokens 2048" bench
step w8192 BENCH_PYTHON=0 BENCH_VARIANTS="${AB_VARIANTS:-P T P T}" \
    BENCH_ARGS="--ops alloc_extend --page-sizes 16 --batch-sizes 1,8 --extend-tokens 8192" bench
