# The full sanitizer step on an H200 for main's kernels (the turn check, run s44-2 sanitized
# it on an H100 only), at 200 lockstep operations a configuration, without the reservation
# tests (memcheck ran them in s45-verify.sh's host-path pass; one device call holds at most
# 600 s). Same pack as s45-verify.sh.
step sanitize SANITIZE_OPS="${SANITIZE_OPS:-200}" SANITIZE_RESERVATION=0 sanitize
# Then what a call costs from Python over C on this machine (issue 9's 5 us; the device
# pool's *_async methods and a host pool), batch sizes 1, 256 and 4,096.
step overhead OVERHEAD_ARGS="--batch-sizes 1,256,4096 --rounds 3" python-overhead
