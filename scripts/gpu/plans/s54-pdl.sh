# Fifty-fourth session: what programmatic dependent launch saves between dependent kernels
# in a graph (bench-gpu/pdl_probe.cu, two runs), and, where the machine is an H200, the
# README's Triton table with main's kernels and the 16-token extends (PENDING.md item 0).
# `scripts/gpu/pack.sh` on main, then `timeout 500 env OUT=$OUT scripts/gpu/steps.sh
# scripts/gpu/plans/s54-pdl.sh`.
mkdir -p "$ROOT/pdl"
{
    card_name
    nvcc -O3 -std=c++17 -arch=sm_90 bench-gpu/pdl_probe.cu -o "$ROOT/pdl/pdl_probe" &&
        "$ROOT/pdl/pdl_probe" && "$ROOT/pdl/pdl_probe"
    echo "pdl_probe rc=$?"
} > "$ROOT/pdl/probe.md" 2>&1
rm -f "$ROOT/pdl/pdl_probe"
cat "$ROOT/pdl/probe.md"
archive
source scripts/gpu/plans/s53-h200.sh
