# The reservation step's owner check (f645766) before / after: the graph decode example
# (a decode step of 64 requests: the replayed step and a plain decode, device time between
# events and host time, median of 512) on B (f645766^, before the check) and M (this tree),
# alternating. Pack with `scripts/gpu/pack.sh --variant B=f645766^ --variant M=.`.
step step-ab EXAMPLE_VARIANTS="B M B M B M" example
