# Sixty-seventh session: s66-device-lane.patch again after run s67-1 (H100), where L's
# TestTensorLane expected the general path of alloc_async / free_async given a stream (they
# check their tensor inline whatever the stream) and L's decode lane called the library's
# entry point for a list host copy (a fallback, one call too many); its lanes now decide the
# host copies' route by type first (CPU tensors, or buffers when the entry points are
# loaded), so the general path (no entry points) no longer pays the CUDA tensors' checks.
#   L=$(scripts/gpu/patch-variant.sh scripts/gpu/plans/s66-device-lane.patch main)
#   scripts/gpu/pack.sh --variant L=$L --variant M=.
#   timeout 540 env OUT=$OUT scripts/gpu/steps.sh scripts/gpu/plans/s67-device-lane.sh
# Table: python3 scripts/gpu/overhead_table.py $OUT/overhead-cuda M L --pool cuda.
# Land L if its tests pass and its device rows read lower than M's relative to the
# unchanged "ctypes (prebuilt ints)" rows of the same runs.
echo "s67-device-lane.sh: on $(card_name)"
if git apply scripts/gpu/plans/s66-device-lane.patch 2>/dev/null ||
    patch -p1 --forward --quiet < scripts/gpu/plans/s66-device-lane.patch; then
    step python-lane python
    git apply -R scripts/gpu/plans/s66-device-lane.patch 2>/dev/null ||
        patch -p1 -R --quiet < scripts/gpu/plans/s66-device-lane.patch
else
    echo "=== python-lane: s66-device-lane.patch did not apply to this tree"
fi
step overhead-cuda OVERHEAD_POOLS=cuda OVERHEAD_VARIANTS="M L M L M L" \
    OVERHEAD_ARGS="--batch-sizes 1,256 --rounds 3 --kinds array,numpy,torch" python-overhead
