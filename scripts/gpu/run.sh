#!/usr/bin/env bash
# The GPU check, run on the GPU machine from the repository root after scripts/gpu/pack.sh
# (needs the NVIDIA driver, nvcc, compute-sanitizer, python3 with PyTorch and Triton; no
# Rust, no network). Logs go to $OUT (default ./gpu-out).
#
#   scripts/gpu/run.sh [tests] [sanitize] [python] [tp] [example] [demo] [bench] ...  (default: all)
#   scripts/gpu/run.sh lockstep-soak     (not in the default set; long: see LOCKSTEP_SOAK_*)
#   scripts/gpu/run.sh python-overhead   (not in the default set: Python vs C per call, ~3 min)
#   scripts/gpu/run.sh python-builtins   (not in the default set: builtins vs ctypes, ~1 min)
#   scripts/gpu/run.sh anatomy           (not in the default set: phases of the small kernels)
#   scripts/gpu/run.sh host-calls        (not in the default set: the host path's driver calls)
#   scripts/gpu/run.sh engine-steps      (not in the default set: SGLang's decode and extend
#                                         steps with their req_to_token table vs kvpool's
#                                         by-row calls)
#   scripts/gpu/run.sh profile           (not in the default set: Nsight Compute, see below)
#   scripts/gpu/run.sh sanitize-host-path (not in the default set: a short memcheck pass for
#                                         a host-side change of the device path)
#   scripts/gpu/run.sh sanitize-reservation (not in the default set: memcheck and racecheck
#                                         over the reservation tests alone)
#   scripts/gpu/run.sh sanitize-quick    (not in the default set: a short pass of both
#                                         sanitizers for a small kernel change)
#   scripts/gpu/run.sh sanitize-rows     (not in the default set: both sanitizers over the
#                                         by-row tests, SANITIZE_OPS operations, default 100)
#
# tp: the tensor-parallel digest test (tests/tp/tp_digest.py): one rank per GPU (at least
# two; ranks share the GPU, with gloo instead of NCCL, on a one-GPU machine), TP_STEPS steps
# (default 10000) with equal digests, then a perturbed rank caught at its step.
#
# Environment: OUT (logs), STEP_TIMEOUT (seconds a step may run, default 480: a hung step
# fails instead of holding the machine; the lockstep soak has LOCKSTEP_SOAK_SECONDS),
# OVERHEAD_ARGS (extra python_overhead.py arguments), EXAMPLE_VARIANTS (see example below), OVERHEAD_POOLS (python-overhead's
# pools, default "cuda cpu"), HOST_CALLS_ARGS (host_calls' arguments), OVERHEAD_VARIANTS
# (see python-overhead below), STEP_ARGS (engine-steps' baseline_bench.py arguments), SANITIZE_OPS (lockstep operations per configuration under the
# sanitizers, default 600), SANITIZE_RESERVATION=0 (sanitize without the reservation tests, about
# half its time at 200 operations: for a change that leaves the reservation kernels alone), BENCH_PYTHON=0 (C++ benchmark only), BENCH_ARGS, BENCH_CPP_ARGS (the C++ benchmark's alone, e.g. --flat-graph), TAIL_LINES,
# BENCH_BEFORE (gpu-artifacts/before, made by `scripts/gpu/pack.sh --before REV`: the C++
# benchmark of that revision, built against its own header and library, runs right after
# this one, for before/after figures from one machine and one run), CXX (the C++ compiler
# for tests/cpp/cuda_release_test.cpp, default c++), BENCH_VARIANTS (names of other builds
# of the library in gpu-artifacts/var/NAME/, made by `scripts/gpu/pack.sh --variant
# NAME=REV`, each run by this tree's C++ benchmark after it; a name may repeat, so that
# "P T P" alternates two builds), LOCKSTEP_SOAK_OPS
# (lockstep-soak: operations in all, split over the 12 configurations, default 10,000,000),
# LIBRARY_VARIANT (see below), LOCKSTEP_SOAK_SEEDS (runs of each configuration, default 4),
# LOCKSTEP_SOAK_JOBS (runs at once, as threads of one process, default 16),
# LOCKSTEP_SOAK_SECONDS (each run stops after this, default 3600, and says how far it got),
# LOCKSTEP_SOAK_FIRST_ROUND (seed round of the first run, default 0: a soak split over
# several calls gives each call other seeds).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/gpu-out}
LOGS=$(mktemp -d)
mkdir -p "$OUT"
# What pack.sh left compressed or out: the test binaries (bin) and the libraries (libs: lib/,
# testing/, var/; var: a variant pack of before the forty-fourth session), unpacked afresh
# on every call (a warm machine keeps the previous call's files), and each library's link
# name.
for packed in bin libs var; do
    [[ -f gpu-artifacts/$packed.tar.xz ]] || continue
    case $packed in
        libs) rm -rf gpu-artifacts/lib gpu-artifacts/testing gpu-artifacts/var ;;
        *) rm -rf "gpu-artifacts/$packed" ;;
    esac
    python3 -c 'import sys, tarfile
with tarfile.open(sys.argv[1]) as t:
    try:
        t.extractall("gpu-artifacts", filter="data")
    except TypeError:  # Python without extraction filters
        t.extractall("gpu-artifacts")' "gpu-artifacts/$packed.tar.xz" ||
        echo "could not unpack gpu-artifacts/$packed.tar.xz"
done
for lib in gpu-artifacts/lib gpu-artifacts/before/lib gpu-artifacts/var/*; do
    [[ -f $lib/libkvpool.so.0.1 ]] && cp "$lib/libkvpool.so.0.1" "$lib/libkvpool.so"
done
# LIBRARY_VARIANT=NAME: what loads the shared library (the benchmarks, Python, the C++
# test; not the Rust test binaries, which hold this tree's code) loads
# gpu-artifacts/var/NAME's in place of this tree's, e.g. the README's table from main's
# kernels in a run whose tests are a variant's (same ABI: built from the same header).
LIBDIR=$PWD/gpu-artifacts/lib
if [[ -n ${LIBRARY_VARIANT:-} ]]; then
    LIBDIR=$PWD/gpu-artifacts/var/$LIBRARY_VARIANT
    [[ -f $LIBDIR/libkvpool.so ]] || { echo "LIBRARY_VARIANT: no library in $LIBDIR" >&2; exit 2; }
fi
export KVPOOL_LIB=$LIBDIR/libkvpool.so
export LD_LIBRARY_PATH=$LIBDIR:${LD_LIBRARY_PATH:-}
export PYTHONUNBUFFERED=1
BIN=gpu-artifacts/bin
steps=("$@")
[[ ${#steps[@]} -eq 0 ]] && steps=(tests sanitize python tp example demo bench)
failed=()

# Every log so far, in one file (the device tool brings back at most eight), rewritten after
# each step: a call cut short (a hung kernel, the tool's time limit) still brings back the
# logs of the steps that ran.
save_logs() {
    tar -czf "$OUT/logs.tar.gz" -C "$LOGS" --exclude cuda_batch --exclude cuda_graph_decode \
        --exclude kvpool_bench --exclude kvpool_bench_before --exclude '*.ncu-rep' .
}

run() { # name, command...
    local name=$1; shift
    echo "=== $name: $*"
    local start=$SECONDS rc
    if [[ $(type -t "$1") == function ]]; then
        "$@" > "$LOGS/$name.log" 2>&1
        rc=$?
    else
        # A step that hangs (a kernel that never finishes) fails after STEP_TIMEOUT seconds
        # (default 480) instead of holding the GPU machine until the call's limit.
        timeout --kill-after=10 "${STEP_TIMEOUT:-480}" "$@" > "$LOGS/$name.log" 2>&1
        rc=$?
    fi
    if [[ $rc == 0 ]]; then
        echo "=== $name: ok ($((SECONDS - start)) s)"
    elif [[ $rc == 124 || $rc == 137 ]]; then
        echo "=== $name: FAILED: timed out after ${STEP_TIMEOUT:-480} s"; failed+=("$name")
    else
        echo "=== $name: FAILED ($((SECONDS - start)) s)"; failed+=("$name")
    fi
    tail -n "${TAIL_LINES:-25}" "$LOGS/$name.log"
    save_logs
}

# The 12 lockstep configurations, LOCKSTEP_SOAK_SEEDS runs of each (different seeds), as
# threads of one process, LOCKSTEP_SOAK_JOBS at a time (one CUDA context: kernels of
# different runs overlap instead of time-slicing between processes); each run stops at
# LOCKSTEP_SOAK_SECONDS with its final census. Fails if a run disagreed or did fewer
# operations than asked.
lockstep_soak() {
    local total=${LOCKSTEP_SOAK_OPS:-10000000} jobs=${LOCKSTEP_SOAK_JOBS:-16}
    local seeds=${LOCKSTEP_SOAK_SEEDS:-4} log="$OUT/lockstep_soak.log" bad=0 rc
    local runs=$((12 * seeds)) per done_ops finished short
    per=$(( (total + runs - 1) / runs ))
    echo "lockstep soak: $runs runs (12 configurations x $seeds seeds) x $per operations, $jobs threads, ${LOCKSTEP_SOAK_SECONDS:-3600} s each at most"
    KVPOOL_LOCKSTEP_OPS=$per KVPOOL_LOCKSTEP_THREADS=$jobs KVPOOL_LOCKSTEP_SEEDS=$seeds \
        KVPOOL_LOCKSTEP_FIRST_ROUND=${LOCKSTEP_SOAK_FIRST_ROUND:-0} \
        KVPOOL_LOCKSTEP_SECONDS=${LOCKSTEP_SOAK_SECONDS:-3600} \
        "$BIN/cuda_lockstep" --ignored --nocapture > "$log" 2>&1
    rc=$?
    # One result line per finished run: "config i seed s: page_size ...: N ops, ...".
    grep "^config .* seed .*: page_size" "$log" |
        sed 's/^config *\([0-9]*\) seed *\([0-9]*\): .*: \([0-9]*\) ops,.*/\1\t\2\t\3/' \
        > "$OUT/lockstep_soak.tsv"
    finished=$(wc -l < "$OUT/lockstep_soak.tsv")
    done_ops=$(awk -F'\t' '{s += $3} END {print s + 0}' "$OUT/lockstep_soak.tsv")
    short=$(awk -F'\t' -v per="$per" '$3 < per' "$OUT/lockstep_soak.tsv" | wc -l)
    echo "test exit status $rc; $finished of $runs runs finished, $short stopped short of $per operations"
    grep "^lockstep:" "$log"
    if [[ $rc != 0 || $finished -ne $runs || $short -ne 0 ]]; then bad=1; tail -n 30 "$log"; fi
    echo "lockstep soak: $done_ops operations compared in all (asked: $total)"
    return $bad
}

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
SANITIZER=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)

# The sanitizer passes the sanitize steps share, each one or more `run`s of its own name.
sanitize_lockstep() { # OPS TOOL...: the lockstep test (every kernel), OPS operations a configuration
    local ops=$1 tool
    shift
    for tool in "$@"; do
        KVPOOL_LOCKSTEP_OPS=$ops run "sanitize-$tool" \
            "$SANITIZER" --tool "$tool" --error-exitcode 9 "$BIN/cuda_lockstep" --ignored --nocapture
    done
}
sanitize_reservation() { # TOOL...
    local tool
    for tool in "$@"; do
        run "sanitize-$tool-reservation" "$SANITIZER" --tool "$tool" \
            --error-exitcode 9 "$BIN/cuda_reservation" --ignored --test-threads=1
    done
}
# The partly-enqueued calls: their test hook makes cuLaunchKernel fail on purpose
# (CUDA_ERROR_INVALID_VALUE), which compute-sanitizer reports as an API error and counts
# toward --error-exitcode; so on their own, with API errors not reported.
sanitize_partial() {
    run sanitize-memcheck-partial "$SANITIZER" --tool memcheck --report-api-errors no \
        --error-exitcode 9 "$BIN/cuda_device" --ignored --test-threads=1 --exact \
        a_call_only_partly_enqueued_blocks_the_pool_until_recovered \
        a_reservation_only_partly_enqueued_blocks_the_pool_until_recovered
}
# The decode and few-request extend kernels with repeats and refusals (lockstep has none),
# under racecheck. One test at a time (run s11-5: the two side by side under racecheck ran
# past 150 s, where they had taken 8-10 s).
sanitize_decode_races() {
    KVPOOL_DECODE_ROUNDS=1 KVPOOL_EXTEND_ROUNDS=1 run sanitize-racecheck-decode "$SANITIZER" \
        --tool racecheck --error-exitcode 9 "$BIN/cuda_device" --ignored --test-threads=1 --exact \
        decode_kernels_of_every_size_name_the_hosts_first_bad_request \
        extends_of_a_few_requests_name_the_hosts_first_bad_request
}
# The by-row lockstep tests (every rows kernel against the host backend) under TOOL...,
# OPS operations a configuration.
sanitize_rows() { # OPS TOOL...
    local ops=$1 tool
    shift
    for tool in "$@"; do
        KVPOOL_ROWS_OPS=$ops run "sanitize-$tool-rows" "$SANITIZER" --tool "$tool" \
            --error-exitcode 9 "$BIN/cuda_rows" --ignored --test-threads=1
    done
}
# The contract tests under memcheck, stream-ordered release among them: a free under a queued
# kernel would show as an invalid access. KVPOOL_SANITIZER: kernels may be serialized, so
# timing is not asserted, and the unordered-streams detection (which needs overlap) is
# skipped.
sanitize_contract() {
    KVPOOL_SANITIZER=1 run sanitize-memcheck-contract "$SANITIZER" --tool memcheck \
        --error-exitcode 9 "$BIN/cuda_contract" --ignored --test-threads=1 \
        --skip stream_order_check_catches
}

for step in "${steps[@]}"; do
    case $step in
    tests)
        run device "$BIN/cuda_device" --ignored --test-threads=1 --nocapture
        run contract "$BIN/cuda_contract" --ignored --test-threads=1 --nocapture
        run release-cpp-build "${CXX:-c++}" -std=c++17 -O1 -Wall -Wextra -Werror -Iinclude \
            tests/cpp/cuda_release_test.cpp -Lgpu-artifacts/lib -lkvpool -ldl -pthread \
            -Wl,-rpath,"$PWD/gpu-artifacts/lib" -o "$LOGS/cuda_release_test"
        run release-cpp "$LOGS/cuda_release_test" --require-gpu
        run lockstep "$BIN/cuda_lockstep" --ignored --nocapture
        run rows "$BIN/cuda_rows" --ignored --test-threads=1 --nocapture
        run reservation "$BIN/cuda_reservation" --ignored --test-threads=1 --nocapture
        run multi-device "$BIN/cuda_multi_device" --ignored --nocapture
        run need-queries "$BIN/need_queries" --ignored --nocapture
        ;;
    lockstep-soak)
        # The lockstep test's 12 configurations as threads of one process, LOCKSTEP_SOAK_OPS
        # operations in all; the log in $OUT/lockstep_soak.log, a summary (configuration,
        # seed, operations) in $OUT/lockstep_soak.tsv.
        run lockstep-soak lockstep_soak
        ;;
    sanitize-host-path)
        # A short sanitizer pass for a change to the host side of the device path (no kernel
        # changed): memcheck over the lockstep test (every kernel, SANITIZE_OPS operations
        # a configuration, default 100), the contract tests, the reservations and the partly
        # enqueued calls.
        sanitize_lockstep "${SANITIZE_OPS:-100}" memcheck
        sanitize_contract
        sanitize_reservation memcheck
        sanitize_partial
        ;;
    sanitize-quick)
        # A short pass of both sanitizers for a small kernel change, when the full step does
        # not fit the device time left: memcheck and racecheck over the lockstep test
        # (SANITIZE_OPS operations a configuration, default 100), racecheck over the
        # decode and few-request extend refusals, memcheck over the contract tests.
        sanitize_lockstep "${SANITIZE_OPS:-100}" memcheck racecheck
        sanitize_decode_races
        sanitize_contract
        ;;
    sanitize-rows)
        # Both sanitizers over the by-row tests, for a change to the rows kernels.
        sanitize_rows "${SANITIZE_OPS:-100}" memcheck racecheck
        ;;
    sanitize-reservation)
        # Both sanitizers over the reservation tests alone (a change to the reservation
        # kernels; the full step below runs them too unless SANITIZE_RESERVATION=0).
        sanitize_reservation memcheck racecheck
        ;;
    sanitize)
        sanitize_lockstep "${SANITIZE_OPS:-600}" memcheck racecheck
        sanitize_rows "${SANITIZE_OPS:-600}" memcheck racecheck
        if [[ ${SANITIZE_RESERVATION:-1} != 0 ]]; then
            sanitize_reservation memcheck racecheck
        else
            echo "=== sanitize-*-reservation: skipped (SANITIZE_RESERVATION=0)"
        fi
        # (Not the partly-enqueued tests: they run on their own, sanitize_partial. Not
        # a_by_row_call_refused_for_its_scratch: it takes nearly all device memory, which the
        # sanitizer needs too.)
        KVPOOL_DECODE_ROUNDS=1 KVPOOL_EXTEND_ROUNDS=1 KVPOOL_WIDE_SEEDS=4 KVPOOL_REFUSAL_PAGE_SIZES=16 \
            run sanitize-memcheck-device "$SANITIZER" \
            --tool memcheck --error-exitcode 9 "$BIN/cuda_device" --ignored --test-threads=1 \
            --skip no_call_waits --skip a_call_only_partly_enqueued \
            --skip a_reservation_only_partly_enqueued --skip a_by_row_call_refused_for_its_scratch
        sanitize_partial
        sanitize_decode_races
        # Every allocation kernel, plain and by row, refusing device lengths that disagree with
        # the plan after a call of the same shape (its undo paths; page size 16).
        KVPOOL_REFUSAL_PAGE_SIZES=16 run sanitize-racecheck-refusals "$SANITIZER" --tool racecheck \
            --error-exitcode 9 "$BIN/cuda_device" --ignored --test-threads=1 --exact \
            every_allocation_kernel_refuses_disagreeing_device_lengths_and_changes_nothing \
            every_allocation_kernel_by_row_refuses_disagreeing_device_lengths_and_changes_nothing
        # Extends of more than 256 requests (blocks of 512 and 1,024 threads that each decide
        # the call up to 1,024, the ticketed kernel past it), with empty requests on continued
        # pages and refusals (two seeds a page size).
        KVPOOL_WIDE_SEEDS=2 run sanitize-racecheck-wide "$SANITIZER" --tool racecheck \
            --error-exitcode 9 "$BIN/cuda_device" --ignored --exact \
            wide_extends_decide_alike_in_every_block
        # Segment frees of several passes of the grid, with faults (the lockstep test's
        # segments fit in one pass).
        run sanitize-racecheck-segments "$SANITIZER" --tool racecheck --error-exitcode 9 \
            "$BIN/cuda_device" --ignored --exact segment_frees_longer_than_the_grid_match_the_host
        sanitize_contract
        ;;
    python)
        run python-cuda python3 tests/python/test_cuda.py -v
        # The binding's host tests, here with numpy and PyTorch installed (CI has neither),
        # against the library built with the `testing` feature (pack.sh).
        if [[ -f gpu-artifacts/testing/libkvpool.so ]]; then
            KVPOOL_LIB=$PWD/gpu-artifacts/testing/libkvpool.so run python-host \
                python3 tests/python/test_kvpool.py -v
        else
            echo "python-host: skipped (no gpu-artifacts/testing/libkvpool.so: scripts/gpu/pack.sh)"
        fi
        ;;
    tp)
        gpus=$(nvidia-smi --query-gpu=index --format=csv,noheader | wc -l)
        ranks=$(( gpus < 2 ? 2 : gpus ))
        run tp python3 tests/tp/tp_digest.py --nproc "$ranks" --steps "${TP_STEPS:-10000}"
        cp "$LOGS/tp.log" "$OUT/tp.log"
        ;;
    example)
        run example-build "$NVCC" -O2 -std=c++17 -arch=sm_90 -Iinclude cpp-examples/cuda_batch.cu \
            -Lgpu-artifacts/lib -lkvpool -Xlinker -rpath -Xlinker "$PWD/gpu-artifacts/lib" -o "$LOGS/cuda_batch"
        run example "$LOGS/cuda_batch"
        run sanitize-example "$SANITIZER" --tool memcheck --error-exitcode 9 "$LOGS/cuda_batch"
        run graph-example-build "$NVCC" -O2 -std=c++17 -arch=sm_90 -Iinclude cpp-examples/cuda_graph_decode.cu \
            -Lgpu-artifacts/lib -lkvpool -Xlinker -rpath -Xlinker "$PWD/gpu-artifacts/lib" -o "$LOGS/cuda_graph_decode"
        run graph-example "$LOGS/cuda_graph_decode"
        run sanitize-graph-example "$SANITIZER" --tool memcheck --error-exitcode 9 "$LOGS/cuda_graph_decode"
        # EXAMPLE_VARIANTS="B M B M": the graph decode example (its step replay timed against
        # a plain decode) on each named build of pack.sh --variant in turn, for before/after
        # figures of the reservation kernels from one run.
        i=0
        for variant in ${EXAMPLE_VARIANTS:-}; do
            i=$((i + 1))
            run "graph-example-var$i-$variant" env LD_LIBRARY_PATH="$PWD/gpu-artifacts/var/$variant" \
                "$LOGS/cuda_graph_decode"
        done
        ;;
    demo)
        run demo "$BIN/demo" --backend cuda
        ;;
    bench)
        run bench-build "$NVCC" -O2 -std=c++17 -arch=sm_90 -Iinclude bench-gpu/kvpool_bench.cu \
            -Lgpu-artifacts/lib -lkvpool -lcuda -Xlinker -rpath -Xlinker "$PWD/gpu-artifacts/lib" -Xlinker -z -Xlinker lazy -o "$LOGS/kvpool_bench"
        run bench-cpp "$LOGS/kvpool_bench" --csv "$OUT/bench_cpp.csv" ${BENCH_ARGS:-} ${BENCH_CPP_ARGS:-}
        cp "$LOGS/bench-cpp.log" "$OUT/bench_cpp.md"
        if [[ -n "${BENCH_BEFORE:-}" ]]; then
            BEFORE=$(cd "$BENCH_BEFORE" && pwd)
            run bench-build-before "$NVCC" -O2 -std=c++17 -arch=sm_90 -I"$BEFORE/include" \
                "$BEFORE/kvpool_bench.cu" -L"$BEFORE/lib" -lkvpool -lcuda -Xlinker -rpath \
                -Xlinker "$BEFORE/lib" -o "$LOGS/kvpool_bench_before"
            run bench-cpp-before env LD_LIBRARY_PATH="$BEFORE/lib" "$LOGS/kvpool_bench_before" \
                --csv "$OUT/bench_cpp_before.csv" ${BENCH_ARGS:-}
            cp "$LOGS/bench-cpp-before.log" "$OUT/bench_cpp_before.md"
        fi
        # Other builds of this tree's library (kernel experiments), by the same benchmark
        # binary (bound lazily, so an older library of the same ABI serves the operations it
        # has): gpu-artifacts/var/NAME/ holds libkvpool.so.0.1 (the name the benchmark was
        # linked against; a copy of libkvpool.so would only take room). A name may
        # repeat (alternating runs show the run-to-run spread): run i of NAME writes
        # bench_cpp_var<i>_NAME.csv.
        i=0
        for variant in ${BENCH_VARIANTS:-}; do
            i=$((i + 1))
            run "bench-cpp-var$i-$variant" env LD_LIBRARY_PATH="$PWD/gpu-artifacts/var/$variant" \
                "$LOGS/kvpool_bench" --csv "$OUT/bench_cpp_var${i}_$variant.csv" ${BENCH_ARGS:-} \
                ${BENCH_CPP_ARGS:-}
        done
        if [[ "${BENCH_PYTHON:-1}" != 0 ]]; then
            run bench-python python3 bench-gpu/baseline_bench.py --lib "$KVPOOL_LIB" --csv "$OUT/bench_python.csv" ${BENCH_ARGS:-}
            cp "$LOGS/bench-python.log" "$OUT/bench_python.md"
        fi
        ;;
    profile)
        # Nsight Compute on the C++ benchmark: the first PROFILE_LAUNCHES (default 20)
        # launches of the kernels whose names match PROFILE_KERNELS (a regex, default the
        # multi-block extend), with the benchmark given PROFILE_ARGS, for this tree's library,
        # and each BENCH_VARIANTS build (a variant may be an older library of the same ABI,
        # if the operations profiled need nothing newer), the benchmark run with --host-only
        # (Nsight Compute serializes kernels: no device timing). Clocks and caches left alone
        # (a cold cache is not what an engine sees). One CSV per build in the logs
        # (profile-NAME.csv: ncu --page details). PROFILE_METRICS: more metrics (comma-
        # separated), with their instances (e.g. sass__inst_executed_per_opcode).
        # PROFILE_SASS=1: also one launch (the sixth) per build with per-instruction counters,
        # exported as profile-NAME-sass.csv (ncu --page source --print-source sass), for
        # scripts/gpu/sass_summary.py: which machine code ran, how often, where warps waited
        # (PROFILE_SAMPLING: ncu's --warp-sampling-interval, 0 the finest, for a kernel of a
        # few microseconds, which the default samples a handful of times).
        [[ -x "$LOGS/kvpool_bench" ]] ||
            run bench-build "$NVCC" -O2 -std=c++17 -arch=sm_90 -Iinclude bench-gpu/kvpool_bench.cu \
                -Lgpu-artifacts/lib -lkvpool -lcuda -Xlinker -rpath -Xlinker "$PWD/gpu-artifacts/lib" -Xlinker -z -Xlinker lazy -o "$LOGS/kvpool_bench"
        NCU=${NCU:-$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -n 1)}
        ncu_run() { # name, library dir, kernel regex, command...
            local name=$1 lib=$2 kernels=$3; shift 3
            run "profile-$name" env LD_LIBRARY_PATH="$lib" "$NCU" --clock-control none \
                --cache-control none --kernel-name "regex:$kernels" \
                --launch-count "${PROFILE_LAUNCHES:-20}" --section SpeedOfLight \
                --section LaunchStats --section Occupancy --section WarpStateStats \
                --section InstructionStats ${PROFILE_METRICS:+--metrics "$PROFILE_METRICS" \
                --print-metric-instances values} --csv --page details "$@"
            cp "$LOGS/profile-$name.log" "$LOGS/profile-$name.csv"
            [[ -n "${PROFILE_SASS:-}" ]] || return 0
            run "profile-sass-$name" env LD_LIBRARY_PATH="$lib" "$NCU" --clock-control none \
                --cache-control none --kernel-name "regex:$kernels" \
                --launch-skip 5 --launch-count 1 --section SourceCounters \
                --warp-sampling-interval "${PROFILE_SAMPLING:-auto}" \
                --section WarpStateStats --section InstructionStats -f \
                -o "$LOGS/profile-$name" "$@"
            "$NCU" -i "$LOGS/profile-$name.ncu-rep" --page source --print-source sass --csv \
                > "$LOGS/profile-$name-sass.csv"
        }
        kernels=${PROFILE_KERNELS:-^kvp_extend_i64$}
        ncu_run this "$PWD/gpu-artifacts/lib" "$kernels" "$LOGS/kvpool_bench" --host-only ${PROFILE_ARGS:-}
        for variant in $(printf '%s\n' ${BENCH_VARIANTS:-} | sort -u); do
            ncu_run "$variant" "$PWD/gpu-artifacts/var/$variant" "$kernels" "$LOGS/kvpool_bench" \
                --host-only ${PROFILE_ARGS:-}
        done
        # PROFILE_TRITON (a regex of the baseline's Triton kernels, e.g. ^extend_kernel$): the
        # same counters for SGLang's algorithm, bench-gpu/baseline_bench.py --quick given
        # PROFILE_ARGS (profile-triton*.csv), to set kvpool's kernel against it launch for launch.
        if [[ -n "${PROFILE_TRITON:-}" ]]; then
            ncu_run triton "$PWD/gpu-artifacts/lib" "$PROFILE_TRITON" python3 \
                bench-gpu/baseline_bench.py --lib "$KVPOOL_LIB" --quick --host-only ${PROFILE_ARGS:-}
        fi
        ;;
    anatomy)
        # Where a small allocation's device time goes (bench-gpu/anatomy.cu: kvpool's one-block
        # kernels compiled in, beside CUDA kernels of SGLang's algorithm; no library): per
        # launch in a graph of 100, then the same built with KVP_PROBES, each phase's SM
        # cycles. Tables in $OUT/anatomy.md. ANATOMY_ROOT: the source tree to build it from
        # (default this one; `scripts/gpu/pack.sh --anatomy NAME=REV` puts a revision's in
        # gpu-artifacts/anatomy/NAME).
        anatomy_src="${ANATOMY_ROOT:-.}/bench-gpu/anatomy.cu"
        # (Both builds at once: each compiles every kernel, about 30 s.)
        run anatomy-build bash -c "'$NVCC' -O2 -std=c++17 -arch=sm_90 -o '$LOGS/anatomy' \
            '$anatomy_src' & plain=\$!; '$NVCC' -O2 -std=c++17 -arch=sm_90 -DKVP_PROBES \
            -o '$LOGS/anatomy_probed' '$anatomy_src' && wait \$plain"
        run anatomy bash -c "'$LOGS/anatomy' && '$LOGS/anatomy_probed' && '$LOGS/anatomy'"
        cp "$LOGS/anatomy.log" "$OUT/anatomy.md"
        ;;
    host-calls)
        # What each driver call on a device pool's host path costs, one at a time, beside the
        # empty-kernel launch kvpool_bench takes as its host floor (bench-gpu/host_calls.cu; no
        # library). Table in $OUT/host_calls.md.
        run host-calls-build "$NVCC" -O2 -std=c++17 -arch=sm_90 -o "$LOGS/host_calls" \
            bench-gpu/host_calls.cu -lcuda
        run host-calls bash -c "'$LOGS/host_calls' ${HOST_CALLS_ARGS:-} | tee '$OUT/host_calls.md'"
        ;;
    engine-steps)
        # A decode and an extend as SGLang's scheduler makes them with its req_to_token
        # table (gathers, Triton kernels, writes back) against kvpool's alloc_decode_rows
        # and alloc_extend_rows, device time per step (bench-gpu/baseline_bench.py --ops
        # decode_step,extend_step; STEP_ARGS: more of its arguments, e.g. --page-sizes 16
        # --batch-sizes 1,256). Table in $OUT/engine_steps.md.
        run engine-steps python3 bench-gpu/baseline_bench.py --lib "$KVPOOL_LIB" \
            --ops decode_step,extend_step --csv "$OUT/engine_steps.csv" ${STEP_ARGS:-}
        cp "$LOGS/engine-steps.log" "$OUT/engine_steps.md"
        ;;
    python-builtins)
        # The package's call mechanism alone: the library's builtins against ctypes
        # functions of the same symbols, one process (benches/python_builtins.py).
        run python-builtins bash -c "python3 benches/python_builtins.py --lib '$KVPOOL_LIB' \
            | tee '$OUT/python_builtins.md'"
        ;;
    python-overhead)
        # What a call costs from Python over the same call from C (benches/python_overhead.py:
        # C timing loops compiled here with cc, the Python package, one process): the device
        # pool's *_async methods, then a host pool. Tables in $OUT/python_overhead_*.md. With
        # OVERHEAD_VARIANTS="P T P T": each named build (pack.sh --variant: its package on its
        # library) in turn, both pools each time, tables python_overhead_{cuda,host}_N_NAME.md.
        pools=${OVERHEAD_POOLS:-cuda cpu}
        if [[ -z "${OVERHEAD_VARIANTS:-}" ]]; then
            for pool in $pools; do
                tag=${pool/cpu/host}
                run "python-overhead-$tag" python3 benches/python_overhead.py --device "$pool" \
                    --lib "$KVPOOL_LIB" --md "$OUT/python_overhead_$tag.md" \
                    --csv "$OUT/python_overhead_$tag.csv" ${OVERHEAD_ARGS:-}
            done
        else
            n=0
            for name in $OVERHEAD_VARIANTS; do
                n=$((n + 1))
                var=gpu-artifacts/var/$name
                for pool in $pools; do
                    tag=${pool/cpu/host}_${n}_$name
                    run "python-overhead-$tag" python3 benches/python_overhead.py \
                        --device "$pool" --lib "$PWD/$var/libkvpool.so" \
                        --package "$var/python" --md "$OUT/python_overhead_$tag.md" \
                        --csv "$OUT/python_overhead_$tag.csv" ${OVERHEAD_ARGS:-}
                done
            done
        fi
        ;;
    *) echo "unknown step $step"; failed+=("$step") ;;
    esac
done

save_logs
if [[ ${#failed[@]} -gt 0 ]]; then
    echo "GPU check FAILED: ${failed[*]}"
    exit 1
fi
echo "GPU check passed: ${steps[*]}"
