# The forty-third session's turn check and reservation epochs in one device call (machines
# were scarce): every GPU test, an A/B in graph replay of main before the capture-order
# check (Q, d604b2a), main with it (P, c1ff7b2: a captured call publishes its number) and
# this tree (T: the turn check, no publishing), then both sanitizers over the lockstep test
# (200 operations a configuration), rows, reservations, the device tests and the contract
# tests. Pack with
# `scripts/gpu/pack.sh --variant Q=d604b2a --variant P=c1ff7b2 --variant T=.`.
step tests tests
ab_bench ab "--ops alloc_extend,alloc_decode --page-sizes 16 --batch-sizes 1,64,1024" "Q P T Q P T"
step sanitize SANITIZE_OPS="${SANITIZE_OPS:-200}" sanitize
