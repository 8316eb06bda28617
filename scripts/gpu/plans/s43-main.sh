# The forty-third session's turn check (kernels: every cursor carries its writer's turn and
# number; commit faults a call out of turn or run twice). Pack with
# `scripts/gpu/pack.sh --variant P=c1ff7b2 --variant T=.`: every GPU test (cuda_contract's
# turn-check tests), an A/B of main before the change (P) and this tree (T) in graph replay
# (the benchmark sets KVP_DEBUG_REPLAY_CALLS in T; P's captured calls published their number),
# then the Python tests and the C++ examples. The sanitizers: review-sanitize.sh, a call of
# its own.
step tests tests
ab_bench ab "--ops alloc_extend,alloc_decode --page-sizes 16 --batch-sizes 1,64,1024"
step python python
step example example
