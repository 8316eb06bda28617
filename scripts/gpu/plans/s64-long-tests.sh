# Sixty-fourth session, second run's second half (see s64-long.sh): every GPU test,
# sanitize-quick and the Python tests on W2 (s64-few-blocks-256.patch), then memcheck and
# racecheck on the test that reaches its 256-thread kernels
# (extends_of_long_prefills_on_several_blocks_match_the_host; lockstep stays under 33,792
# tokens a call).
echo "s64-long-tests.sh: on $(card_name)"
step tests tests
step sanitize SANITIZE_OPS=100 sanitize-quick
step python python
mkdir -p "$ROOT/sanitize-long"
for tool in memcheck racecheck; do
    timeout 100 "$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)" \
        --tool "$tool" --error-exitcode 9 gpu-artifacts/bin/cuda_device --ignored --exact \
        extends_of_long_prefills_on_several_blocks_match_the_host > "$ROOT/sanitize-long/$tool.log" 2>&1
    echo "=== sanitize-long $tool: rc=$? ($(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|test result' "$ROOT/sanitize-long/$tool.log" | tr '\n' ' '))"
done
archive
