# Where a small allocation's device time goes (scripts/gpu/steps.sh): bench-gpu/anatomy.cu,
# without and with the kernels' probes (run.sh anatomy; needs no packed library).
step anatomy anatomy
