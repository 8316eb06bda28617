# Sixty-third session, third run: the landed build of S (runs s63-1 and s63-2), whose
# fatbin differs from S's by comments and the ABI table's new entry (FEW_GRID_BLOCK; every
# function's SASS is S's), and whose rows path keeps main's grid: every GPU test,
# sanitize-quick and the Python tests.
#   scripts/gpu/pack.sh
#   timeout 300 env OUT=$OUT scripts/gpu/steps.sh scripts/gpu/plans/s63-landed.sh
step tests tests
step sanitize SANITIZE_OPS=100 sanitize-quick
step python python
