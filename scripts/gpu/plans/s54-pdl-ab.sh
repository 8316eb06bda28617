# Fifty-fourth session: programmatic dependent launch (PDL). P = every entry point waits for
# its predecessors first (`await_predecessors`: griddepcontrol.wait, sm_90) and the library
# launches with the PDL attribute (`Kernels::launch_shared`); W = P's kernels launched
# without the attribute (s54-pdl-off.patch: what the wait alone costs); M = main. Device
# time per call in a flat graph of 100 copies (kvpool_bench --flat-graph: the calls'
# kernels linked as a capture of consecutive calls links them) and in child graphs (PDL
# cannot help there). P landed in the fifty-fifth session (its patch, s54-pdl.patch, is
# gone: P is main since then; run s55-1). Pack with
#   P=main   # (before: $(scripts/gpu/patch-variant.sh scripts/gpu/plans/s54-pdl.patch main))
#   W=$(scripts/gpu/patch-variant.sh scripts/gpu/plans/s54-pdl-off.patch $P)
#   git checkout --detach $P && scripts/gpu/pack.sh --variant M=main --variant W=$W --variant P=.
# and N's cuda_contract test binary as gpu-artifacts/neg.tar.xz (PENDING.md).
# then `timeout 560 env OUT=$OUT scripts/gpu/steps.sh scripts/gpu/plans/s54-pdl-ab.sh`;
# `python3 scripts/gpu/ab_table.py $OUT/NAME M W P`, the Triton table with
# `python3 scripts/gpu/triton_table.py $OUT/triton-flat`.
step tests tests
source scripts/gpu/plans/s54-pdl-neg.sh
ab_bench ab-pdl-extend "--flat-graph --ops alloc_extend --page-sizes 16 --batch-sizes 1,8,64,256,1024,4096" "M W P M W P"
ab_bench ab-pdl-decode "--flat-graph --ops alloc_decode --page-sizes 16 --batch-sizes 1,8,64,256,1024,4096" "M W P M W P"
step sanitize SANITIZE_OPS=100 sanitize-quick
step python python
step triton-flat BENCH_CPP_ARGS=--flat-graph BENCH_ARGS="--ops alloc_extend,alloc_decode --page-sizes 16,64 --batch-sizes 1,8,64,256,1024,4096" bench
ab_bench ab-pdl-short "--flat-graph --ops alloc,alloc_extend,alloc_extend_rows --extend-tokens 16 --page-sizes 16 --batch-sizes 1,64,256" "M W P M W P"
ab_bench ab-pdl-child "--ops alloc_extend,alloc_decode --page-sizes 16 --batch-sizes 1,64,1024" "M W P M W P"
