# The full sanitizer step on an H200 for main's kernels (the turn check, run s44-2 sanitized
# it on an H100 only), at 200 lockstep operations a configuration, without the reservation
# tests (memcheck ran them in s45-verify.sh's host-path pass; one device call holds at most
# 600 s). Same pack as s45-verify.sh.
step sanitize SANITIZE_OPS="${SANITIZE_OPS:-200}" SANITIZE_RESERVATION=0 sanitize
