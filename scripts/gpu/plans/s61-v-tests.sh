# V's own build (s60-warp0-range.patch, which run s61-1 measured at 0.97-0.98x main's time
# but tested only as N, V with the narrow write loop): every GPU test, sanitize-quick and
# the Python tests, what landing it needs.
#   V=$(scripts/gpu/patch-variant.sh scripts/gpu/plans/s60-warp0-range.patch main)
#   git checkout --detach $V && scripts/gpu/pack.sh
#   timeout 260 env OUT=$OUT scripts/gpu/steps.sh scripts/gpu/plans/s61-v-tests.sh
step tests tests
step sanitize SANITIZE_OPS=100 sanitize-quick
step python python
