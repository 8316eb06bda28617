# Fifty-first session, after run s51-2's probes (PENDING.md item 6): in extend_block's
# several blocks the tokens' planning (plan_block_tokens, two tokens a thread) took ~775
# cycles between the stage-bound barrier and the staging, the ring's round trip hidden
# under it. P = main + s51-first-request.patch: the request holding the block's first token
# is read once with its end, and its tokens are planned without a search (each token's
# search and its request's offsets were dependent shared loads, token after token). PX = P
# + s51-ring-after-rt1.patch (the ring loaded after round trip 1, run s51-1), in case the
# ring's round trip is on the path once planning is shorter. The tree is P. Pack with
#   P=$(scripts/gpu/patch-variant.sh scripts/gpu/plans/s51-first-request.patch main)
#   cp scripts/gpu/plans/s51-ring-after-rt1.patch /tmp/s51-px.patch
#   PX=$(scripts/gpu/patch-variant.sh /tmp/s51-px.patch $P)
#   git checkout --detach $P && scripts/gpu/pack.sh --variant M=main --variant PX=$PX --variant P=.
# then `timeout 560 env OUT=$OUT scripts/gpu/steps.sh scripts/gpu/plans/s51-plan.sh`;
# `python3 scripts/gpu/ab_table.py $OUT/ab-plan M PX P` (columns P / M: P's own ratio
# needs the M P pair), phases in $OUT/anatomy/anatomy.md.
ab_bench ab-plan "--ops alloc_extend --page-sizes 1,16,64 --batch-sizes 33,64,128,256,1024" "M P PX M P PX"
ab_bench ab-plan16 "--ops alloc_extend --extend-tokens 16 --page-sizes 16 --batch-sizes 33,64,128,256" "M P PX M P PX"
step tests tests
step anatomy anatomy
step sanitize SANITIZE_OPS=100 sanitize-quick
step python python
