ab_bench wide "--ops alloc_extend --page-sizes 16 --batch-sizes 400,1000 --extend-tokens 16"
