# The programmatic-launch contract test's sensitivity, sourced by s54-pdl-ab.sh and
# s54-pdl-lean.sh: N = P with `await_predecessors` empty (s54-pdl-nowait.patch; its
# cuda_contract test binary packed as gpu-artifacts/neg.tar.xz, PENDING.md): the test must
# fail there.
mkdir -p "$ROOT/neg" /tmp/neg
if tar -xJf gpu-artifacts/neg.tar.xz -C /tmp/neg; then
    /tmp/neg/cuda_contract --ignored --exact calls_behind_a_programmatic_predecessor_wait_for_its_writes \
        > "$ROOT/neg/log.txt" 2>&1
    echo "=== neg (N, no wait; must fail): rc=$?" | tee -a "$ROOT/neg/log.txt"
    grep -E "panicked|test result" "$ROOT/neg/log.txt" | head -5
fi
archive
