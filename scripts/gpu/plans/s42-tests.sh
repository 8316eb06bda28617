# The forty-second session's second call: every GPU test again (the out-of-order capture
# test fixed after run s42-1) and the short sanitizer pass over the host-side changes
# (no kernel changed). Pack with `scripts/gpu/pack.sh`.
step tests tests
step sanitize sanitize-host-path
