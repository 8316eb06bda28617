# The forty-fourth session's A/B of the turn check's cost (run s43-2, H100: allocations
# 1.03-1.14x the device time without it): Q, main before any turn or capture-order check
# (d604b2a); P, main's turn check (64bdfd1); T, its fault paths out of line
# (332f707: raise_fault_at, noinline); U, T with found_writer loaded by each
# block's thread 0 alone. Every GPU test first, on this tree (U). Pack on branch `lean` with
# `scripts/gpu/pack.sh --variant Q=d604b2a --variant P=64bdfd1 --variant T=332f707 --variant U=.`.
step tests tests
ab_bench ab "--ops alloc_extend,alloc_decode --page-sizes 16 --batch-sizes 1,8,64,256,1024" "Q P T U Q P T U"
