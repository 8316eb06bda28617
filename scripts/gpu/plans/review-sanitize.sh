# review-fixes.sh's sanitizers (see review-tests.sh).
step sanitize SANITIZE_OPS="${SANITIZE_OPS:-100}" sanitize
