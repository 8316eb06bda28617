# Sixty-sixth session (no machine lent: written, not run). L (s66-device-lane.patch, Python
# only): a device pool's alloc_extend_async / alloc_decode_async on CUDA tensors with an out,
# on the current stream, check the tensors inline (no device_pointer call a tensor) and take
# CPU-tensor host copies inline, buffer host copies through the library's entry point; with
# tests in test_cuda.py (TestTensorLane); alloc_async / free_async check their tensor inline
# too. M: main, whose host pool's CPU-tensor lane
# (ab4638c, measured on the CPU VM only) is timed here against the package before it (P).
#   L=$(scripts/gpu/patch-variant.sh scripts/gpu/plans/s66-device-lane.patch main)
#   scripts/gpu/pack.sh --variant P=0a8b96d --variant L=$L --variant M=.
#   timeout 480 env OUT=$OUT scripts/gpu/steps.sh scripts/gpu/plans/s66-device-lane.sh
# Tables: python3 scripts/gpu/overhead_table.py $OUT/overhead-cuda M L --pool cuda;
# python3 scripts/gpu/overhead_table.py $OUT/overhead-host P M --pool host.
# Land L if its tests pass and its device rows read lower than M's (every other row within
# the runs' spread).
echo "s66-device-lane.sh: on $(card_name)"
# L's package and tests in this copy of the tree (the device machine's copy; undone below).
if git apply scripts/gpu/plans/s66-device-lane.patch 2>/dev/null ||
    patch -p1 --forward --quiet < scripts/gpu/plans/s66-device-lane.patch; then
    step python-lane python
    git apply -R scripts/gpu/plans/s66-device-lane.patch 2>/dev/null ||
        patch -p1 -R --quiet < scripts/gpu/plans/s66-device-lane.patch
else
    echo "=== python-lane: s66-device-lane.patch did not apply to this tree"
fi
KINDS="--batch-sizes 1,256 --rounds 3 --kinds array,numpy,torch"
step overhead-cuda OVERHEAD_POOLS=cuda OVERHEAD_VARIANTS="M L M L" OVERHEAD_ARGS="$KINDS" python-overhead
step overhead-host OVERHEAD_POOLS=cpu OVERHEAD_VARIANTS="P M P M" OVERHEAD_ARGS="$KINDS" python-overhead
