# Where kvpool's time goes against SGLang's Triton kernels (scripts/gpu/steps.sh): Nsight
# Compute on the kernel each call runs and on the baseline's kernel for the same call, page 16
# (scripts/gpu/run.sh profile with PROFILE_TRITON; per-instruction counters with
# PROFILE_SASS). Read with scripts/gpu/ncu_summary.py */profile-this.csv */profile-triton.csv
# and scripts/gpu/sass_summary.py */profile-*-sass.csv.
profile_triton extend-1 '^kvp_extend_few_256_i64$' '^extend_kernel$' \
    "--ops alloc_extend --page-sizes 16 --batch-sizes 1"
profile_triton extend-64 '^kvp_extend_blocks_i64$' '^extend_kernel$' \
    "--ops alloc_extend --page-sizes 16 --batch-sizes 64"
profile_triton decode-1 '^kvp_decode_32_i64$' '^decode_kernel$' \
    "--ops alloc_decode --page-sizes 16 --batch-sizes 1"
