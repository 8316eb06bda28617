# Short extends, A/B as kernel-ab.sh's bench (builds P and T from `scripts/gpu/pack.sh
# --variant`): one block of extend_few takes up to 512 tokens in all, so these reach its
# one-block shapes (32 and 256 threads; 64 threads too in revisions before the twentieth
# session). 64 tokens a request at pages 1, 16, 64,
# and 16 at pages 1, 16 (the token count must be a multiple of each page size).
ab_bench short64 "--ops alloc_extend --page-sizes 1,16,64 --batch-sizes 1,2,4,8 --extend-tokens 64"
ab_bench short16 "--ops alloc_extend --page-sizes 1,16 --batch-sizes 1,2,4,8,16,32 --extend-tokens 16"
