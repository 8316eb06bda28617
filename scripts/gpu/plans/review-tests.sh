# review-fixes.sh in three device calls of under 10 minutes each (the per-call limit): this
# one, every GPU test; then review-sanitize.sh; then review-ab.sh.
step tests tests
