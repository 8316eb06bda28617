# triton.sh (kvpool against SGLang's Triton kernels, the README's table) only where the
# machine is an H200, the card the README's table is for: plans source it so that a run
# that happens to get an H200 also refreshes the table (PENDING.md item 0), and one on an
# H100 spends no time on it.
if on_card H200; then
    # shellcheck source=/dev/null
    source scripts/gpu/plans/triton.sh
fi
