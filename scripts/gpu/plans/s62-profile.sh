# Sixty-second session, third run (PENDING.md item 10): why P and W (s62-planned-few.patch,
# s62-planned-within.patch), whose anatomy put block 0's warps at the end 0.1 us sooner,
# took 1.01-1.03x main's time in kvpool_bench (flat graph and child graphs alike, run
# s62-3), and G (s60-guess-ring-early.patch) 1.04-1.05x, its stagers starting extend_few
# ~650 cycles after warp 0. Nsight Compute on kvp_extend_few_blocks_i64, 8 requests of 512
# tokens at page 16: per-instruction counters of one launch per build (which code ran, how
# many distinct instructions, where the warps waited: `no_instruction` is the instruction
# fetch), for the packed build (W) and M, P, G.
#   the pack of s62-within.sh (W checked out; var M, P, W, G)
#   timeout 300 env OUT=$OUT scripts/gpu/steps.sh scripts/gpu/plans/s62-profile.sh
# Then: python3 scripts/gpu/sass_summary.py OUT/profile/profile-{M,P,this,G}-sass.csv
step profile BENCH_VARIANTS="M P G" PROFILE_SASS=1 PROFILE_SAMPLING=0 \
    PROFILE_KERNELS='^kvp_extend_few_blocks_i64$' \
    PROFILE_ARGS="--ops alloc_extend --page-sizes 16 --batch-sizes 8" profile
