# The fixes of the thirty-seventh session's review, none run on a GPU yet: free_known's
# release_fits, the reservation finish's page count, rows_segments' int32 entries, the
# several-block extends' vote on the fault flag (1990f8e), snapshots taken while faulted
# (17757aa), the new snapshot buffer zeroed on the backup's stream, call numbers past 2^31,
# restore inside a faulted free group. Every GPU test, with the new ones
# (every_allocation_kernel{,_by_row}_refuses_disagreeing_device_lengths_and_changes_nothing,
# a_free_of_more_pages_than_are_allocated_changes_nothing,
# a_free_by_row_of_entries_an_int32_pool_cannot_hold_frees_nothing,
# a_restore_recovers_a_fault_inside_an_open_free_group,
# a_snapshot_taken_while_faulted_is_not_restored,
# a_finish_refuses_device_lengths_that_moved_pages_to_other_steps; from the thirty-eighth
# session a_call_only_partly_enqueued_blocks_the_pool_until_recovered and (cuda_rows; the
# segment kernel's empty segments, 4 functions' SASS changed)
# an_empty_segment_starting_mid_page_frees_nothing_on_either_backend; the lockstep test now
# reads the pool back after every refused call), both sanitizers (with
# sanitize-racecheck-refusals), then A/B of the kernels whose SASS changed, packed with
# `scripts/gpu/pack.sh --variant P=6e8aef2 --variant T=.` (P: before the fixes):
# several-block extends (8 x 512 tokens: few_blocks, 1 x 512 beside it unchanged; 32 x 64:
# few_spread; 1 x 4,096: one_blocks; 128 and 256 x 64: blocks; 400 and 1,000 x 8:
# blocks512/1024) and the known-count frees (free_segment at pages 16 and 64). Tables:
# scripts/gpu/ab_table.py $OUT/NAME P T. (The new tests on the old kernels need test
# binaries built from 6e8aef2 with ed190e4..HEAD's tests/ and DevicePool::debug_extend_kernel
# cherry-picked: the binaries embed the fatbin, whose ABI table the library checks.)
step tests tests
step sanitize SANITIZE_OPS="${SANITIZE_OPS:-200}" sanitize
ab_bench grid8 "--ops alloc_extend --page-sizes 16 --batch-sizes 1,8 --extend-tokens 512"
ab_bench grid32 "--ops alloc_extend --page-sizes 16 --batch-sizes 32,128,256 --extend-tokens 64"
ab_bench one4096 "--ops alloc_extend --page-sizes 16 --batch-sizes 1 --extend-tokens 4096"
ab_bench wide "--ops alloc_extend --page-sizes 16 --batch-sizes 400,1000 --extend-tokens 16"
ab_bench frees "--ops free_segment --page-sizes 16,64 --batch-sizes 1,64,256"
