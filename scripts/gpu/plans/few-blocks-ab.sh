# extend_few's several blocks (kvp_extend_few_blocks_*, kvp_extend_one_blocks_*) against
# main, as runs s59-1 and s60-1 measured them, for a plan that sets the builds' run order:
# FEW_AB for the two A/B steps (e.g. "M V M V M V"), FEW_AB_CONTROL for the controls
# (e.g. "M V M V"). Every GPU test on the checked-out variant; 2-32 requests of 512 tokens
# (pages 1, 16, 64) and 1-8 of 2,048 (page 16) in a flat graph; sanitize-quick; the Python
# tests; then extends, decodes and rewinds of 1, 64 and 256 requests (page 16), whose
# kernels the variants leave alone. Tables: python3 scripts/gpu/ab_table.py $OUT/ab-few
# BUILDS... (likewise ab-few-long, ab-few-control).
: "${FEW_AB:?few-blocks-ab.sh: set FEW_AB, the builds in run order}"
: "${FEW_AB_CONTROL:?few-blocks-ab.sh: set FEW_AB_CONTROL, the builds of the controls in run order}"
step tests tests
ab_bench ab-few "--flat-graph --ops alloc_extend --page-sizes 1,16,64 --batch-sizes 2,4,8,16,32" "$FEW_AB"
ab_bench ab-few-long "--flat-graph --ops alloc_extend --extend-tokens 2048 --page-sizes 16 --batch-sizes 1,2,8" "$FEW_AB"
step sanitize SANITIZE_OPS=100 sanitize-quick
step python python
ab_bench ab-few-control "--flat-graph --ops alloc_extend,alloc_decode --page-sizes 16 --batch-sizes 1,64,256" "$FEW_AB_CONTROL"
