# Run s60-2 (H100, 202 s; BENCHMARKS.md) ran anatomy-ab.sh alone on this pack (the device
# budget left no room for this file's H200 part, and the machine was an H100): the
# verdict's barrier waits for warp 0, not the ring's pages; next was V
# (s60-warp0-range.patch), run in s61-warp0-narrow.sh and landed.
# Sixtieth session, after run s60-1 (PENDING.md item 10): where the time of extend_few's
# several blocks goes with the ring's pages loaded at a guessed rank right after round trip
# 1 (R, s60-guess-ring.patch: 1.03-1.06x main's time) against main's (anatomy-T):
# bench-gpu/anatomy.cu's rows of kvp_extend_few_blocks_i64 (1 x 512 on one block, 1 x 1,024
# and 2 x 512 on two, 32 x 512 on 32), whose probes give each warp's scan ("scanned"), its
# pages staged ("decided" for the stagers), the verdict's barrier, the writes and the end.
# Run s51-3 saw extend_block's early ring loads move its scan later (~216 cycles). On an
# H200 only, also s59-h200.sh (every GPU test on main, the README's tables: PENDING item 0).
# Pack on main with
#   scripts/gpu/pack.sh --anatomy R=$(git rev-parse refs/variants/s60-guess-ring)
# then `timeout 580 env OUT=$OUT scripts/gpu/steps.sh scripts/gpu/plans/anatomy-ab.sh
# scripts/gpu/plans/s60-anatomy.sh`; phases in $OUT/anatomy-{R,T}/anatomy.md.
# shellcheck source=/dev/null
source scripts/gpu/plans/s59-h200.sh
