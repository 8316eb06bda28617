#!/usr/bin/env bash
# Where the allocation kernels spend their time: Nsight Compute over bench-gpu/profile_calls.cu
# (one extend and one decode launch per configuration), on the GPU machine after
# scripts/gpu/pack.sh. Writes $OUT/profile.txt (and the kernels' SASS to $OUT/sass.txt).
#
#   OUT=out PROFILE_CONFIGS="16:1 16:64 16:256 16:4096" scripts/gpu/profile.sh
#
# Each configuration is page_size:batch_size; extend takes PROFILE_TOKENS (default 512) new
# tokens a request, decode continues the same requests by one.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1 || echo ncu)
BUILD=$(mktemp -d)
# pack.sh compresses the libraries and leaves out the link name (see run.sh).
[[ -d gpu-artifacts/lib ]] || tar -xJf gpu-artifacts/libs.tar.xz -C gpu-artifacts lib
[[ -f gpu-artifacts/lib/libkvpool.so ]] || cp gpu-artifacts/lib/libkvpool.so.0.1 gpu-artifacts/lib/libkvpool.so
"$NVCC" -O2 -std=c++17 -arch=sm_90 -Iinclude bench-gpu/profile_calls.cu -Lgpu-artifacts/lib \
    -lkvpool -Xlinker -rpath -Xlinker "$PWD/gpu-artifacts/lib" -o "$BUILD/profile_calls" || exit 1
cuobjdump --dump-sass --function kvp_extend_i64 kernels/pool.fatbin > "$OUT/sass.txt" 2>&1 || true
: > "$OUT/profile.txt"
for config in ${PROFILE_CONFIGS:-16:1 16:64 16:256 16:4096}; do
    ps=${config%%:*}; bs=${config##*:}
    echo "##### page_size $ps batch $bs (launch 40 = extend, 41 = decode)" | tee -a "$OUT/profile.txt"
    "$NCU" --clock-control none --kernel-name "regex:kvp_(extend|decode)" --launch-skip 40 --launch-count 2 \
        --section SpeedOfLight --section LaunchStats --section Occupancy --section WarpStateStats \
        --section SchedulerStats --section SourceCounters --section MemoryWorkloadAnalysis \
        "$BUILD/profile_calls" --page-size "$ps" --bs "$bs" --tokens "${PROFILE_TOKENS:-512}" \
        --iterations 60 >> "$OUT/profile.txt" 2>&1
    grep -E 'Duration|Warp Cycles Per Issued|Stall|Block Limit|Registers Per' "$OUT/profile.txt" | tail -n 30
done
