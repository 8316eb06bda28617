#!/usr/bin/env bash
# The GPU check, run on the GPU machine from the repository root after scripts/gpu/pack.sh
# (needs the NVIDIA driver, nvcc, compute-sanitizer, python3 with PyTorch and Triton; no
# Rust, no network). Logs go to $OUT (default ./gpu-out).
#
#   scripts/gpu/run.sh [tests] [sanitize] [python] [tp] [example] [demo] [bench] ...  (default: all)
#   scripts/gpu/run.sh lockstep-soak     (not in the default set; long: see LOCKSTEP_SOAK_*)
#   scripts/gpu/run.sh python-overhead   (not in the default set: Python vs C per call, ~3 min)
#
# tp: the tensor-parallel digest test (tests/tp/tp_digest.py): one rank per GPU (at least
# two; ranks share the GPU, with gloo instead of NCCL, on a one-GPU machine), TP_STEPS steps
# (default 10000) with equal digests, then a perturbed rank caught at its step.
#
# Environment: OUT (logs), OVERHEAD_ARGS (extra python_overhead.py arguments), SANITIZE_OPS (lockstep operations per configuration under the
# sanitizers, default 600), BENCH_PYTHON=0 (C++ benchmark only), BENCH_ARGS, TAIL_LINES,
# BENCH_BEFORE (gpu-artifacts/before, made by `scripts/gpu/pack.sh --before REV`: the C++
# benchmark of that revision, built against its own header and library, runs right after
# this one, for before/after figures from one machine and one run), CXX (the C++ compiler
# for tests/cpp/cuda_release_test.cpp, default c++), LOCKSTEP_SOAK_OPS
# (lockstep-soak: operations in all, split over the 12 configurations, default 10,000,000),
# LOCKSTEP_SOAK_JOBS (parallel processes, default 12: one per configuration), LOCKSTEP_SOAK_SECONDS
# (time limit of each process, default 3600; a stopped one reports its last progress line).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/gpu-out}
LOGS=$(mktemp -d)
mkdir -p "$OUT"
export KVPOOL_LIB=$PWD/gpu-artifacts/lib/libkvpool.so
export LD_LIBRARY_PATH=$PWD/gpu-artifacts/lib:${LD_LIBRARY_PATH:-}
export PYTHONUNBUFFERED=1
BIN=gpu-artifacts/bin
steps=("$@")
[[ ${#steps[@]} -eq 0 ]] && steps=(tests sanitize python tp example demo bench)
failed=()

run() { # name, command...
    local name=$1; shift
    echo "=== $name: $*"
    local start=$SECONDS
    if "$@" > "$LOGS/$name.log" 2>&1; then
        echo "=== $name: ok ($((SECONDS - start)) s)"
    else
        echo "=== $name: FAILED ($((SECONDS - start)) s)"; failed+=("$name")
    fi
    tail -n "${TAIL_LINES:-25}" "$LOGS/$name.log"
}

# One lockstep process per configuration, LOCKSTEP_SOAK_JOBS at a time; fails if any fails
# or did fewer operations than asked.
lockstep_soak() {
    local total=${LOCKSTEP_SOAK_OPS:-10000000} jobs=${LOCKSTEP_SOAK_JOBS:-12}
    local per=$(( (total + 11) / 12 )) dir="$LOGS/lockstep-soak" bad=0 done_ops=0
    mkdir -p "$dir"
    echo "lockstep soak: 12 configurations x $per operations, $jobs at a time"
    for i in $(seq 0 11); do
        while (( $(jobs -rp | wc -l) >= jobs )); do sleep 1; done
        (
            start=$SECONDS
            KVPOOL_LOCKSTEP_CONFIG=$i KVPOOL_LOCKSTEP_OPS=$per \
                timeout "${LOCKSTEP_SOAK_SECONDS:-3600}" "$BIN/cuda_lockstep" --ignored \
                --nocapture > "$dir/config-$i.log" 2>&1
            echo "$? $((SECONDS - start))" > "$dir/config-$i.rc"
        ) &
    done
    wait
    printf 'config\tstatus\tops\tseconds\tresult\n' > "$OUT/lockstep_soak.tsv"
    for i in $(seq 0 11); do
        local rc=missing secs=0 line ops
        if [[ -f "$dir/config-$i.rc" ]]; then read -r rc secs < "$dir/config-$i.rc"; fi
        # The result line (the progress lines say how far a run got that did not finish).
        line=$(grep -m1 "^config *$i: page_size" "$dir/config-$i.log" ||
               grep "^config *$i: [0-9]* ops compared" "$dir/config-$i.log" | tail -n 1 || true)
        ops=$(sed -n 's/.*: \([0-9][0-9]*\) ops[ ,].*/\1/p' <<< "$line")
        ops=${ops:-0}
        if [[ "$rc" != 0 || $ops -lt $per ]]; then
            bad=1
            tail -n 20 "$dir/config-$i.log"
        fi
        done_ops=$((done_ops + ops))
        printf '%s\t%s\t%s\t%s\t%s\n' "$i" "$rc" "$ops" "$secs" "${line:-no result line}" \
            >> "$OUT/lockstep_soak.tsv"
        echo "config $i: exit $rc, $ops operations, $secs s"
    done
    echo "lockstep soak: $done_ops operations compared in all (asked: $total)"
    return $bad
}

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
SANITIZER=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)

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
        run multi-device "$BIN/cuda_multi_device" --ignored --nocapture
        run need-queries "$BIN/need_queries" --ignored --nocapture
        ;;
    lockstep-soak)
        # The lockstep test's 12 configurations in parallel processes (KVPOOL_LOCKSTEP_CONFIG
        # selects one), LOCKSTEP_SOAK_OPS operations in all; one log per configuration (in logs.tar.gz), and a
        # summary (configuration, exit status, operations, seconds) in $OUT/lockstep_soak.tsv.
        run lockstep-soak lockstep_soak
        ;;
    sanitize)
        for tool in memcheck racecheck; do
            KVPOOL_LOCKSTEP_OPS=${SANITIZE_OPS:-600} run "sanitize-$tool" \
                "$SANITIZER" --tool "$tool" --error-exitcode 9 "$BIN/cuda_lockstep" --ignored --nocapture
        done
        run sanitize-memcheck-device "$SANITIZER" --tool memcheck --error-exitcode 9 \
            "$BIN/cuda_device" --ignored --test-threads=1 --skip no_call_waits
        # Stream-ordered release under memcheck: a free under a queued kernel would show as an
        # invalid access. KVPOOL_SANITIZER: kernels may be serialized, so timing is not
        # asserted, and the unordered-streams detection (which needs overlap) is skipped.
        KVPOOL_SANITIZER=1 run sanitize-memcheck-contract "$SANITIZER" --tool memcheck \
            --error-exitcode 9 "$BIN/cuda_contract" --ignored --test-threads=1 \
            --skip stream_order_check_catches
        ;;
    python)
        run python-cuda python3 tests/python/test_cuda.py -v
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
        ;;
    demo)
        run demo "$BIN/demo" --backend cuda
        ;;
    bench)
        run bench-build "$NVCC" -O2 -std=c++17 -arch=sm_90 -Iinclude bench-gpu/kvpool_bench.cu \
            -Lgpu-artifacts/lib -lkvpool -lcuda -Xlinker -rpath -Xlinker "$PWD/gpu-artifacts/lib" -o "$LOGS/kvpool_bench"
        run bench-cpp "$LOGS/kvpool_bench" --csv "$OUT/bench_cpp.csv" ${BENCH_ARGS:-}
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
        if [[ "${BENCH_PYTHON:-1}" != 0 ]]; then
            run bench-python python3 bench-gpu/baseline_bench.py --lib "$KVPOOL_LIB" --csv "$OUT/bench_python.csv" ${BENCH_ARGS:-}
            cp "$LOGS/bench-python.log" "$OUT/bench_python.md"
        fi
        ;;
    python-overhead)
        # What a call costs from Python over the same call from C (benches/python_overhead.py:
        # C timing loops compiled here with cc, the Python package, one process): the device
        # pool's *_async methods, then a host pool. Tables in $OUT/python_overhead_*.md.
        run python-overhead-cuda python3 benches/python_overhead.py --device cuda \
            --lib "$KVPOOL_LIB" --md "$OUT/python_overhead_cuda.md" \
            --csv "$OUT/python_overhead_cuda.csv" ${OVERHEAD_ARGS:-}
        run python-overhead-host python3 benches/python_overhead.py --device cpu \
            --lib "$KVPOOL_LIB" --md "$OUT/python_overhead_host.md" \
            --csv "$OUT/python_overhead_host.csv" ${OVERHEAD_ARGS:-}
        ;;
    *) echo "unknown step $step"; failed+=("$step") ;;
    esac
done

# Every log, in one file (the device tool brings back at most eight).
tar -czf "$OUT/logs.tar.gz" -C "$LOGS" --exclude cuda_batch --exclude kvpool_bench --exclude kvpool_bench_before .
if [[ ${#failed[@]} -gt 0 ]]; then
    echo "GPU check FAILED: ${failed[*]}"
    exit 1
fi
echo "GPU check passed: ${steps[*]}"
