# Sixty-fifth session, first run's second half (see s65-narrow.sh): every GPU test,
# sanitize-quick and the Python tests on N4 (s65-narrow.patch + s65-narrow-to-target.patch),
# then memcheck on the refusal test of every allocation kernel (page size 16), whose shapes
# reach both kvp_extend_blocks_narrow{128,256}_* kernels, and racecheck on the several
# blocks' random rounds.
echo "s65-narrow-tests.sh: on $(card_name)"
step tests tests
step sanitize SANITIZE_OPS=100 sanitize-quick
step python python
mkdir -p "$ROOT/sanitize-narrow"
for run in every_allocation_kernel_refuses_disagreeing_device_lengths_and_changes_nothing:memcheck \
    long_extends_of_small_batches_decide_alike_in_every_block:racecheck; do
    test=${run%:*} tool=${run#*:}
    KVPOOL_REFUSAL_PAGE_SIZES=16 timeout 80 \
        "$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)" \
        --tool "$tool" --error-exitcode 9 gpu-artifacts/bin/cuda_device --ignored --exact \
        "$test" > "$ROOT/sanitize-narrow/$test-$tool.log" 2>&1
    echo "=== sanitize-narrow $test $tool: rc=$? ($(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|test result' "$ROOT/sanitize-narrow/$test-$tool.log" | tr '\n' ' '))"
done
archive
