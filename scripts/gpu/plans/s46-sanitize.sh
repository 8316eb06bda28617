# The full sanitizer step on the forty-sixth session's kernels (the replay check without a
# load of its own changes every committing kernel's end: allocations, frees, merges, free
# groups, backups, reservations): memcheck and racecheck over lockstep (SANITIZE_OPS
# operations a configuration), rows and reservations, memcheck over cuda_device (the new
# replay test among them) and the contract tests, racecheck over the refusals, wide extends
# and segment frees. Pack with `scripts/gpu/pack.sh`.
step sanitize sanitize
