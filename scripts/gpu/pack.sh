#!/usr/bin/env bash
# Builds, on a machine with the Rust toolchain, everything the GPU check needs, into the
# git-ignored gpu-artifacts/ (the GPU machine has no Rust): the release library (lib/), the
# GPU test binaries (compressed: gpu-artifacts/bin.tar.xz) and the library with the test-only
# `testing` feature (testing/, for the Python tests). Other builds of the library to
# benchmark against go in var/NAME/libkvpool.so.0.1 (BENCH_VARIANTS). The libraries travel
# compressed together (gpu-artifacts/libs.tar.xz), and scripts/gpu/run.sh unpacks them on
# the GPU machine, with gpu-artifacts/ carried along (the device tool: carry
# ["gpu-artifacts"]).
#
#   scripts/gpu/pack.sh [--before REV] [--variant NAME=REV]... [--anatomy NAME=REV]...
#
# --before REV also packs revision REV's library, header and C++ benchmark into
# gpu-artifacts/before/ (built in a temporary worktree), for BENCH_BEFORE=gpu-artifacts/before
# scripts/gpu/run.sh bench: before/after figures from one GPU run.
# --variant NAME=REV packs revision REV's library (built in a temporary worktree; REV `.`:
# this tree's, as just built) as gpu-artifacts/var/NAME/libkvpool.so.0.1, for
# BENCH_VARIANTS="NAME ..." (this tree's C++ benchmark against that library: an A/B of two
# builds that alternate in one run, e.g. --variant P=main --variant T=.), and its Python
# package as gpu-artifacts/var/NAME/python/kvpool, for OVERHEAD_VARIANTS="NAME ..." (run.sh
# python-overhead: that package on that library).
# --anatomy NAME=REV exports revision REV's kernel sources and bench-gpu/anatomy.cu into
# gpu-artifacts/anatomy/NAME, for ANATOMY_ROOT=gpu-artifacts/anatomy/NAME scripts/gpu/run.sh
# anatomy (the phases of an earlier revision's kernels in the same run).
set -euo pipefail
cd "$(dirname "$0")/../.."
BEFORE_REV=""
VARIANTS=()
ANATOMIES=()
while [[ $# -gt 0 ]]; do
    case "$1" in
        --before) BEFORE_REV=${2:?--before needs a revision}; shift 2 ;;
        --variant)
            [[ "${2:-}" =~ ^[A-Za-z0-9_-]+=.+$ ]] || { echo "--variant needs NAME=REV" >&2; exit 2; }
            VARIANTS+=("$2"); shift 2 ;;
        --anatomy)
            [[ "${2:-}" =~ ^[A-Za-z0-9_-]+=.+$ ]] || { echo "--anatomy needs NAME=REV" >&2; exit 2; }
            ANATOMIES+=("$2"); shift 2 ;;
        *) echo "unknown argument: $1" >&2; exit 2 ;;
    esac
done

# Builds revision $2's library in a temporary worktree (target dir $1) and echoes its path.
build_revision() {
    local target=$1 rev=$2 tree
    tree=$(mktemp -d)
    git worktree add --quiet --detach "$tree" "$rev" >&2
    (cd "$tree" && CARGO_TARGET_DIR="$OLDPWD/$target" cargo build --release --lib >&2) ||
        { git worktree remove --force "$tree"; return 1; }
    echo "$tree"
}

scripts/build-kernels.sh --verify
# A cdylib's file name carries no hash: another tree built into this target directory
# (CARGO_TARGET_DIR=.../target) leaves its library here while this tree's build still reads
# as fresh, and that library would be packed (run s64-2's main: a variant's host code on
# main's kernels, every launch refused). Without them cargo builds this tree's again.
rm -f target/release/libkvpool.so target/release/deps/libkvpool.so
cargo build --release --lib --example demo
# Variants and a before-build of an earlier pack would travel with this one: gone.
rm -rf gpu-artifacts/bin gpu-artifacts/lib gpu-artifacts/var gpu-artifacts/var.tar.xz \
    gpu-artifacts/libs.tar.xz gpu-artifacts/before
mkdir -p gpu-artifacts/bin gpu-artifacts/lib
cp target/release/libkvpool.so gpu-artifacts/lib/
# Programs linked with -lkvpool record the SONAME; a copy, since links may not travel.
cp target/release/libkvpool.so gpu-artifacts/lib/libkvpool.so.0.1
cp target/release/examples/demo gpu-artifacts/bin/demo
# The test binaries, by name (cargo prints their paths as JSON).
cargo test --release --no-run --test cuda_lockstep --test cuda_device --test cuda_multi_device --test cuda_contract \
    --test need_queries --test cuda_rows --test cuda_reservation \
    --message-format=json 2>/dev/null |
    python3 -c '
import json, shutil, sys
for line in sys.stdin:
    msg = json.loads(line)
    exe = msg.get("executable")
    if msg.get("reason") == "compiler-artifact" and exe and msg["target"]["kind"] == ["test"]:
        shutil.copy(exe, "gpu-artifacts/bin/" + msg["target"]["name"])
        print("packed", msg["target"]["name"])
'
# Debug info is not needed there and would crowd the 64 MiB the device tool carries.
strip --strip-debug gpu-artifacts/bin/* gpu-artifacts/lib/*
ls -la gpu-artifacts/bin gpu-artifacts/lib
# The binaries each embed the same kernels: with a window that spans them all, xz keeps one
# copy (about 4 MB for the eight, 120 MB unpacked; xz's default 8 MiB window kept every copy,
# 27 MB). run.sh unpacks them (and makes libkvpool.so from libkvpool.so.0.1) on every call,
# so a warm machine never runs a previous pack's binaries.
tar -cf - -C gpu-artifacts bin | xz -T1 --lzma2=preset=6,dict=192MiB >gpu-artifacts/bin.tar.xz
rm -rf gpu-artifacts/bin gpu-artifacts/lib/libkvpool.so
du -sh gpu-artifacts/bin.tar.xz

# The library with the test-only `testing` feature, for the Python binding's tests
# (tests/python/test_kvpool.py: run.sh python), built apart so target/release keeps the
# release library.
rm -rf gpu-artifacts/testing
mkdir -p gpu-artifacts/testing
CARGO_TARGET_DIR=target/testing cargo build --release --lib --features testing
cp target/testing/release/libkvpool.so gpu-artifacts/testing/libkvpool.so
strip --strip-debug gpu-artifacts/testing/libkvpool.so

if [[ -n "$BEFORE_REV" ]]; then
    tree=$(build_revision target/before "$BEFORE_REV")
    rm -rf gpu-artifacts/before
    mkdir -p gpu-artifacts/before/lib gpu-artifacts/before/include
    cp target/before/release/libkvpool.so gpu-artifacts/before/lib/libkvpool.so.0.1
    cp "$tree"/include/kvpool.h gpu-artifacts/before/include/
    cp "$tree"/bench-gpu/kvpool_bench.cu gpu-artifacts/before/
    # (and the headers it includes beside it, in revisions that have them)
    cp "$tree"/bench-gpu/*.cuh gpu-artifacts/before/ 2>/dev/null || true
    strip --strip-debug gpu-artifacts/before/lib/*
    git worktree remove --force "$tree"
    echo "packed revision $BEFORE_REV into gpu-artifacts/before"
fi

for variant in ${VARIANTS[@]+"${VARIANTS[@]}"}; do
    name=${variant%%=*} rev=${variant#*=}
    rm -rf "gpu-artifacts/var/$name"
    mkdir -p "gpu-artifacts/var/$name"
    mkdir -p "gpu-artifacts/var/$name/python"
    if [[ "$rev" == "." ]]; then
        # (A link, not a copy: the device tool carries at most 64 MiB.)
        ln -s ../../lib/libkvpool.so.0.1 "gpu-artifacts/var/$name/libkvpool.so.0.1"
        cp -r python/kvpool "gpu-artifacts/var/$name/python/"
    else
        tree=$(build_revision "target/var-$name" "$rev")
        cp -r "$tree/python/kvpool" "gpu-artifacts/var/$name/python/"
        git worktree remove --force "$tree"
        cp "target/var-$name/release/libkvpool.so" "gpu-artifacts/var/$name/libkvpool.so.0.1"
        strip --strip-debug "gpu-artifacts/var/$name/libkvpool.so.0.1"
    fi
    echo "packed $rev's library as gpu-artifacts/var/$name (BENCH_VARIANTS)"
done

# The builds share most of their bytes (the kernels, 16 MB a library): one xz window over
# the release library, the `testing` build and the variants keeps them all within the
# 64 MiB the device tool carries (uncompressed, the two libraries and four variants of run
# s44-1 came to 47 MB beside 20 MB of tracked files). run.sh unpacks them.
(cd gpu-artifacts && tar -cf - lib testing $([[ -d var ]] && echo var)) |
    xz -T1 --lzma2=preset=6,dict=192MiB >gpu-artifacts/libs.tar.xz
rm -rf gpu-artifacts/lib gpu-artifacts/testing gpu-artifacts/var
du -sh gpu-artifacts/libs.tar.xz

rm -rf gpu-artifacts/anatomy
for anatomy in ${ANATOMIES[@]+"${ANATOMIES[@]}"}; do
    name=${anatomy%%=*} rev=${anatomy#*=}
    mkdir -p "gpu-artifacts/anatomy/$name"
    # (The sources only: the fatbin is not needed to compile them in.)
    git archive "$rev" bench-gpu/anatomy.cu bench-gpu/spin.cuh \
        $(git ls-tree --name-only "$rev" kernels/ | grep -E '\.cuh?$') |
        tar -x -C "gpu-artifacts/anatomy/$name"
    echo "packed $rev's kernel sources as gpu-artifacts/anatomy/$name (ANATOMY_ROOT)"
done
