# The phases of two revisions' kernels in one run (scripts/gpu/steps.sh; bench-gpu/anatomy.cu,
# run.sh anatomy): P's sources, packed by `scripts/gpu/pack.sh --anatomy P=REV`, then this
# tree's. Tables in $OUT/anatomy-P/anatomy.md and $OUT/anatomy-T/anatomy.md.
step anatomy-P ANATOMY_ROOT=gpu-artifacts/anatomy/P anatomy
step anatomy-T anatomy
