#!/usr/bin/env bash
# Several scripts/gpu/run.sh invocations in one device call (device time is scarce: a
# machine is started once), each with its own environment and log folder $OUT/NAME. Prints
# each step's summary lines and packs every folder into $OUT/all.tgz (the device tool brings
# back only a few files).
#
#   scripts/gpu/steps.sh PLAN...
#
# Each PLAN is a bash file of `step NAME [VAR=value ...] RUN_STEP ...` lines (run.sh's steps and
# environment) and `ab_bench NAME BENCH_ARGS [VARIANTS]` lines (an A/B benchmark of packed
# builds), e.g. scripts/gpu/plans/kernel-ab.sh: every GPU test, an A/B benchmark of two
# packed builds, both sanitizers and the Python tests, what a kernel change needs.
set -uo pipefail
cd "$(dirname "$0")/../.."
[[ $# -gt 0 ]] || { echo "usage: scripts/gpu/steps.sh PLAN..." >&2; exit 2; }
ROOT=${OUT:-$PWD/gpu-out}
mkdir -p "$ROOT"

step() { # NAME [VAR=value ...] RUN_STEP ...
    local name=$1; shift
    local vars=()
    while [[ $# -gt 0 && $1 == *=* ]]; do vars+=("$1"); shift; done
    mkdir -p "$ROOT/$name"
    env "${vars[@]}" OUT="$ROOT/$name" scripts/gpu/run.sh "$@" 2>&1 |
        grep -E '^=== |GPU check|FAIL|panicked|test result'
    archive
}

# $ROOT/all.tgz, rewritten after every step: a call cut off by the device tool's time limit
# still brings back what its finished steps wrote (the tool returns only a few files, each
# at most 16 MiB: past 15 MiB the steps' raw logs, logs.tar.gz, are left out of it, their
# tables and CSVs kept; run s52-2 lost its all.tgz to that limit).
archive() {
    (
        cd "$ROOT" || exit
        # (No step ran, e.g. a plan whose steps are for another card: nothing to pack.)
        compgen -G '*/' > /dev/null || { echo "=== archive: no step ran"; exit 0; }
        tar -czf all.tgz.part --exclude 'all.tgz*' -- */ || exit
        if (($(stat -c %s all.tgz.part) > 15 * 1024 * 1024)); then
            echo "=== archive: over 15 MiB, the steps' logs.tar.gz left out of all.tgz"
            tar -czf all.tgz.part --exclude 'all.tgz*' --exclude logs.tar.gz -- */ || exit
        fi
        mv all.tgz.part all.tgz
    )
}

# The card this call got (nvidia-smi's name for GPU 0): plans gate card-specific steps with
# `if on_card H200; then ...` (e.g. the README's table, which is an H200's).
card_name() { nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1; }
on_card() { # MODEL
    [[ $(card_name) == *"$1"* ]]
}

# An A/B of the builds packed with `scripts/gpu/pack.sh --variant NAME=REV`: the C++
# benchmark alone with BENCH_ARGS, the builds alternating as AB_VARIANTS lists them (else
# VARIANTS, default "P T P T").
ab_bench() { # NAME BENCH_ARGS [VARIANTS]
    step "$1" BENCH_PYTHON=0 BENCH_VARIANTS="${AB_VARIANTS:-${3:-P T P T}}" BENCH_ARGS="$2" bench
}

# Nsight Compute on a call's kernel and on the baseline's Triton kernel for the same call
# (run.sh profile with PROFILE_TRITON), 10 launches each and one with per-instruction
# counters: KERNELS and TRITON are kernel-name regexes, BENCH_ARGS the calls (page sizes,
# batch sizes) for both benchmarks.
profile_triton() { # NAME KERNELS TRITON BENCH_ARGS
    step "$1" PROFILE_KERNELS="$2" PROFILE_TRITON="$3" PROFILE_SASS=1 PROFILE_SAMPLING=0 \
        PROFILE_LAUNCHES=10 PROFILE_ARGS="$4" profile
}

for plan in "$@"; do
    # shellcheck source=/dev/null
    source "$plan"
done
archive
echo "=== steps: logs in $ROOT/all.tgz"
