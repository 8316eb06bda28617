# Sixty-seventh session: the grid of kvp_extend_blocks_* (33-256 requests past one block's
# tokens, the README table's worst rows: 64 and 256 x 512 tokens at 1.30-1.32x Triton's time
# in a flat graph, run s67-4), host code only (the same fatbin). Every block decides the
# whole call, so fewer blocks mean less deciding in all, more tokens each to write.
#   S (s67-blocks-one-an-sm.patch): span_grid's blocks, at most one an SM (256 x 512 tokens:
#     132 blocks of ~993 tokens instead of 256 of 512; 33-128 requests unchanged);
#   T (s67-blocks-span512.patch): blocks of 512 tokens at every size (64 x 512: 64 blocks
#     instead of 128 of 256; 256 x 512 unchanged).
#   S=$(scripts/gpu/patch-variant.sh scripts/gpu/plans/s67-blocks-one-an-sm.patch)
#   T=$(scripts/gpu/patch-variant.sh scripts/gpu/plans/s67-blocks-span512.patch)
#   scripts/gpu/pack.sh --variant M=. --variant S=$S --variant T=$T
#   timeout 400 env OUT=$OUT scripts/gpu/steps.sh scripts/gpu/plans/s67-blocks.sh
# Read: python3 scripts/gpu/ab_table.py $OUT/ab-blocks512 M S T (and ab-blocks16,
# ab-blocks-control). A shape that reads faster needs every GPU test on its own build
# before it lands (the tests link the library statically: pack from its tree).
echo "s67-blocks.sh: on $(card_name)"
BLOCKS_AB="M S T M S T M S T"
ab_bench ab-blocks512 "--flat-graph --ops alloc_extend --page-sizes 1,16 --batch-sizes 33,64,128,200,256" "$BLOCKS_AB"
ab_bench ab-blocks16 "--flat-graph --ops alloc_extend --extend-tokens 16 --page-sizes 16 --batch-sizes 64,256" "$BLOCKS_AB"
ab_bench ab-blocks-control "--flat-graph --ops alloc_extend --page-sizes 16 --batch-sizes 8,1024" "M S T M S T"
