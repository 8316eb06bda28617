# Branch s39-live-exact alone against main, after s39-kernels-2.sh ran out of time (run
# s39-2): the A/B of its two-warp extends (two-warp-ab.sh's rows, "P L P L"), then the
# sanitizers on the kernels it changes, from the packed test binaries (T: s39-both, whose
# two-warp kernels are L's), one tool and test set at a time, each printing its exit status
# (9: the tool found errors). Pack as s39-kernels.sh says.
AB_VARIANTS=${AB_VARIANTS:-"P L P L"}
ab_bench early1 "--ops alloc_extend --page-sizes 1 --batch-sizes 1,2,4,8,32,33,64 --extend-tokens 1"
ab_bench early16 "--ops alloc_extend --page-sizes 16 --batch-sizes 1,2,4 --extend-tokens 16"
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
san() { # NAME TOOL ENV... -- BINARY ARGS...
    local name=$1 tool=$2 start=$SECONDS; shift 2
    local vars=()
    while [[ $1 != -- ]]; do vars+=("$1"); shift; done
    shift
    mkdir -p "$ROOT/$name"
    env "${vars[@]}" "$SAN" --tool "$tool" --error-exitcode 9 "$@" >"$ROOT/$name/log" 2>&1
    echo "=== $name: rc=$? ($((SECONDS - start)) s)"
    grep -E "ERROR SUMMARY|RACECHECK SUMMARY|hazard|test result" "$ROOT/$name/log" | tail -3
    archive
}
FEW=(extends_of_a_few_requests_name_the_hosts_first_bad_request
     a_two_warp_extend_short_of_its_plan_changes_no_page
     every_allocation_kernel_refuses_disagreeing_device_lengths_and_changes_nothing)
san memcheck-few memcheck KVPOOL_EXTEND_ROUNDS=1 KVPOOL_REFUSAL_PAGE_SIZES=16 -- \
    gpu-artifacts/bin/cuda_device --ignored --test-threads=1 --exact "${FEW[@]}"
san racecheck-few racecheck KVPOOL_EXTEND_ROUNDS=1 KVPOOL_REFUSAL_PAGE_SIZES=16 -- \
    gpu-artifacts/bin/cuda_device --ignored --test-threads=1 --exact "${FEW[@]}"
san memcheck-lockstep memcheck KVPOOL_LOCKSTEP_OPS=100 -- gpu-artifacts/bin/cuda_lockstep --ignored
san racecheck-lockstep racecheck KVPOOL_LOCKSTEP_OPS=100 -- gpu-artifacts/bin/cuda_lockstep --ignored
