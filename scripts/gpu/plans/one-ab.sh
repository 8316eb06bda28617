# Extends of exactly one request (kvp_extend_one_*) against the extend_few kernels they were
# built from, A/B of builds packed with `scripts/gpu/pack.sh --variant P=REV --variant T=.`
# (C++ benchmark only, alternating AB_VARIANTS, default "P T P T"): one request of 16-8,192
# tokens at pages 1, 16 and 64, and two requests (the same kernels in both builds: a control).
# Tables: scripts/gpu/ab_table.py $OUT/one16 P T (one64, ..., one8192).
for tokens in 16 64 128 256 512 1024 2048 8192; do
    step "one$tokens" BENCH_PYTHON=0 BENCH_VARIANTS="${AB_VARIANTS:-P T P T}" \
        BENCH_ARGS="--ops alloc_extend --page-sizes 1,16,64 --batch-sizes 1,2 --extend-tokens $tokens" bench
done
