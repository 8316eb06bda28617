# The turn check's cost (run s43-2: allocations 1.03-1.14x the device time without it) and
# a leaner build of it: turn-check-lean.patch moves the fault paths out of line (one
# noinline raise_fault_at taking the header and record pointers; the turn check's hot path
# one compare), which takes the one-request decode's SASS from 1,792 instructions back to
# 1,424 (1,280 before the check). Prepare: `git switch -c turn-check-lean && git apply
# scripts/gpu/plans/turn-check-lean.patch && scripts/build-kernels.sh && git commit -am ...`,
# then on that branch `scripts/gpu/pack.sh --variant Q=d604b2a --variant P=main
# --variant T=.`. Then every GPU test and the A/B (Q: no check, P: main's turn check, T: lean).
step tests tests
ab_bench ab "--ops alloc_extend,alloc_decode --page-sizes 16 --batch-sizes 1,8,64,256,1024" "Q P T Q P T"
