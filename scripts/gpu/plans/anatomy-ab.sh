# The phases of several revisions' kernels in one run (scripts/gpu/steps.sh; bench-gpu/anatomy.cu,
# run.sh anatomy): each revision's sources packed by `scripts/gpu/pack.sh --anatomy NAME=REV`
# (step anatomy-NAME), then this tree's (anatomy-T). Tables in $OUT/anatomy-NAME/anatomy.md.
for root in gpu-artifacts/anatomy/*/; do
    [[ -d $root ]] || continue
    name=$(basename "$root")
    step "anatomy-$name" ANATOMY_ROOT="${root%/}" anatomy
done
step anatomy-T anatomy
