#!/usr/bin/env bash
# Builds kernels/pool.fatbin (embedded into the library by src/cuda/kernels.rs) from
# kernels/*.cu / *.cuh with a pinned nvcc, and records what it was built from in
# kernels/pool.fatbin.sha256.
#
#   scripts/build-kernels.sh            rebuild the fatbin and its stamp
#   scripts/build-kernels.sh --verify   fail if the fatbin is stale: the stamp must match the
#                                       sources, flags and nvcc version, and the fatbin its
#                                       hash; when nvcc is available the fatbin is also
#                                       rebuilt and must be byte-identical (nvcc output is
#                                       deterministic)
#
# nvcc: $NVCC, else nvcc from the pip packages (install them with
#   pip install nvidia-cuda-nvcc==13.0.88 nvidia-cuda-runtime==13.0.96 \
#               nvidia-nvvm==13.0.88 nvidia-cuda-crt==13.0.88
# — pin all four; unpinned, pip mixes in parts of newer releases).
set -euo pipefail
cd "$(dirname "$0")/.."

NVCC_VERSION="13.0.88"
FLAGS=(-fatbin -O3 -std=c++17
       -gencode arch=compute_80,code=sm_80
       -gencode arch=compute_90,code=sm_90
       -gencode arch=compute_90,code=compute_90)
# Every header beside pool.cu (a listed subset left decode_block.cuh and extend_few.cuh out
# of the stamp, so that only the rebuild would have caught a stale fatbin after them).
LC_ALL=C  # the glob's order, as the stamp lists it
SOURCES=(kernels/pool.cu kernels/*.cuh)
OUT=kernels/pool.fatbin
STAMP=kernels/pool.fatbin.sha256

find_nvcc() {
    if [[ -n "${NVCC:-}" ]]; then echo "$NVCC"; return; fi
    local site
    site=$(python3 -c 'import site; print(site.getsitepackages()[0])' 2>/dev/null || true)
    if [[ -n "$site" && -x "$site/nvidia/cu13/bin/nvcc" ]]; then echo "$site/nvidia/cu13/bin/nvcc"; return; fi
    command -v nvcc || true
}

# What the fatbin is built from: each source's hash, the flags, the nvcc release.
inputs() {
    sha256sum "${SOURCES[@]}"
    echo "flags: ${FLAGS[*]}"
    echo "nvcc: $NVCC_VERSION"
}

build() {
    local nvcc=$1 out=$2
    local version
    version=$("$nvcc" --version | sed -n 's/.*release [0-9.]*, V\([0-9.]*\).*/\1/p')
    if [[ "$version" != "$NVCC_VERSION" ]]; then
        echo "error: $nvcc is V$version; kernels are built with nvcc $NVCC_VERSION" >&2
        exit 1
    fi
    (cd kernels && "$nvcc" "${FLAGS[@]}" pool.cu -o "$out")
}

if [[ "${1:-}" == "--verify" ]]; then
    expected=$( { inputs; echo "fatbin: $(sha256sum < "$OUT" | cut -d' ' -f1)"; } )
    if ! diff <(echo "$expected") "$STAMP" >/dev/null; then
        echo "error: $OUT is stale against its sources: run scripts/build-kernels.sh" >&2
        diff <(echo "$expected") "$STAMP" >&2 || true
        exit 1
    fi
    nvcc=$(find_nvcc)
    if [[ -n "$nvcc" ]]; then
        tmp=$(mktemp -d)
        trap 'rm -rf "$tmp"' EXIT
        build "$nvcc" "$tmp/pool.fatbin"
        if ! cmp -s "$tmp/pool.fatbin" "$OUT"; then
            echo "error: rebuilding $OUT with nvcc $NVCC_VERSION gives different bytes" >&2
            exit 1
        fi
        echo "kernels: $OUT matches its sources (stamp and a byte-identical rebuild)"
    else
        echo "kernels: $OUT matches its stamp (no nvcc here, so no rebuild)"
    fi
    exit 0
fi

nvcc=$(find_nvcc)
if [[ -z "$nvcc" ]]; then
    echo "error: no nvcc; see the header of this script" >&2
    exit 1
fi
build "$nvcc" "$(pwd)/$OUT"
{ inputs; echo "fatbin: $(sha256sum < "$OUT" | cut -d' ' -f1)"; } > "$STAMP"
echo "built $OUT ($(stat -c %s "$OUT") bytes) and $STAMP"
