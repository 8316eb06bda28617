# The forty-third session's turn check and reservation epochs in one device call (machines
# were scarce): every GPU test, the A/B of main before the change (P, c1ff7b2) and this tree
# (T) in graph replay, then both sanitizers over the lockstep test (200 operations a
# configuration), rows, reservations, the device tests and the contract tests. Pack with
# `scripts/gpu/pack.sh --variant P=c1ff7b2 --variant T=.`.
step tests tests
ab_bench ab "--ops alloc_extend,alloc_decode --page-sizes 16 --batch-sizes 1,64,1024"
step sanitize SANITIZE_OPS="${SANITIZE_OPS:-200}" sanitize
