# Sixty-second session (PENDING.md item 10): run s62-4 counted the several few-blocks'
# instructions against their variants; this counts main's against SGLang's Triton kernel for
# the same call (as run s16-2 did, forty-six sessions of kernel changes ago): 8 requests of
# 512 tokens (kvp_extend_few_blocks_i64) and 64 (kvp_extend_blocks_i64), page 16,
# per-instruction counters of one launch each.
#   scripts/gpu/pack.sh && timeout 280 env OUT=$OUT scripts/gpu/steps.sh scripts/gpu/plans/s62-profile-triton.sh
# Read with scripts/gpu/ncu_summary.py OUT/*/profile-this.csv OUT/*/profile-triton.csv and
# scripts/gpu/sass_summary.py on each profile-*-sass.csv (in each step's logs.tar.gz).
# (Run s62-6 ran it with each step written out; steps.sh's profile_triton passes run.sh the
# same environment, checked with a stub run.sh, not on a GPU.)
profile_triton extend-8 '^kvp_extend_few_blocks_i64$' '^extend_kernel$' \
    "--ops alloc_extend --page-sizes 16 --batch-sizes 8"
profile_triton extend-64 '^kvp_extend_blocks_i64$' '^extend_kernel$' \
    "--ops alloc_extend --page-sizes 16 --batch-sizes 64"
