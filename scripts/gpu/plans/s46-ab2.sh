# Run s46-2 (H100): N (68077ab: every kernel's replay check on the mark of the cursor it
# read) took extends of 1 and 8 requests 0.92 and 0.95x main's time (M, 213a2d2), but
# decodes of 64 requests 1.06x (1, 256: 1.02x). N2 (this tree): the decodes keep their
# early load of the written cursor's writer (`written_cursor_writer`), the other kernels
# the mark. Every GPU test (the replay test's decodes now start their pages: a continuing
# one is refused by its page's fill check first, as run s46-2 showed) and the A/B of M, N
# and N2, allocations in graphs and frees behind a spinner. Pack with `scripts/gpu/pack.sh
# --variant M=213a2d2 --variant N=68077ab --variant N2=.`.
step tests tests
ab_bench ab "--ops alloc_extend,alloc_decode --page-sizes 16 --batch-sizes 1,8,64,256,1024" "M N N2 M N N2"
ab_bench ab-free "--ops free_indices,free_segment --page-sizes 16 --batch-sizes 1,64,1024" "M N2 M N2"
