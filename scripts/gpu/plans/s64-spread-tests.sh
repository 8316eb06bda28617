# Sixty-fourth session, first run's second half: every GPU test, sanitize-quick and the
# Python tests on variant B (s64-spread128.patch: extend_few's spread kernel on
# FEW_GRID_BLOCK threads over few_grid's blocks), packed apart and swapped in after
# s64-spread.sh, so that the call that measures B also tests it:
#   (after s64-spread.sh's pack) mv gpu-artifacts gpu-artifacts-main
#   git checkout --detach $B && git checkout main -- scripts/gpu/steps.sh scripts/gpu/plans \
#       && git reset -q && scripts/gpu/pack.sh
#   git checkout -f main && mv gpu-artifacts gpu-artifacts-b && mv gpu-artifacts-main gpu-artifacts
#   carry ["gpu-artifacts", "gpu-artifacts-b"]:
#   timeout 560 env OUT=$OUT scripts/gpu/steps.sh scripts/gpu/plans/s64-spread.sh;
#   rm -rf gpu-artifacts && mv gpu-artifacts-b gpu-artifacts &&
#   timeout 240 env OUT=$OUT/b scripts/gpu/steps.sh scripts/gpu/plans/s64-spread-tests.sh
echo "s64-spread-tests.sh: on $(card_name)"
step tests tests
step sanitize SANITIZE_OPS=100 sanitize-quick
step python python
