#!/usr/bin/env bash
# The GPU check, run on the GPU machine from the repository root after scripts/gpu/pack.sh
# (needs the NVIDIA driver, nvcc, compute-sanitizer, python3 with PyTorch and Triton; no
# Rust, no network). Logs go to $OUT (default ./gpu-out).
#
#   scripts/gpu/run.sh [tests] [sanitize] [python] [example] [demo] [bench] ...  (default: all)
#   scripts/gpu/run.sh python-overhead   (not in the default: Python vs C per call, ~3 min)
#
# Environment: OUT (logs), OVERHEAD_ARGS (extra python_overhead.py arguments), SANITIZE_OPS (lockstep operations per configuration under the
# sanitizers, default 600), BENCH_PYTHON=0 (C++ benchmark only), BENCH_ARGS, TAIL_LINES,
# BENCH_BEFORE (gpu-artifacts/before, made by `scripts/gpu/pack.sh --before REV`: the C++
# benchmark of that revision, built against its own header and library, runs right after
# this one, for before/after figures from one machine and one run).
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
[[ ${#steps[@]} -eq 0 ]] && steps=(tests sanitize python example demo bench)
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

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
SANITIZER=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)

for step in "${steps[@]}"; do
    case $step in
    tests)
        run device "$BIN/cuda_device" --ignored --test-threads=1 --nocapture
        run lockstep "$BIN/cuda_lockstep" --ignored --nocapture
        ;;
    sanitize)
        for tool in memcheck racecheck; do
            KVPOOL_LOCKSTEP_OPS=${SANITIZE_OPS:-600} run "sanitize-$tool" \
                "$SANITIZER" --tool "$tool" --error-exitcode 9 "$BIN/cuda_lockstep" --ignored --nocapture
        done
        run sanitize-memcheck-device "$SANITIZER" --tool memcheck --error-exitcode 9 \
            "$BIN/cuda_device" --ignored --test-threads=1 --skip no_call_waits
        ;;
    python)
        run python-cuda python3 tests/python/test_cuda.py -v
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
