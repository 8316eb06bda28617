# The replay check's early load as a plain (weak) load. Run s45-6 (H100) found the turn
# check's cost at 1-8 requests in that load: without it (diagnostic X1) extends of 1 and 8
# requests took 0.92x main's time (2.03 / 2.75 us against 2.20 / 2.97; Q, no check: 2.01 /
# 2.68). The load was ld.relaxed.gpu (LDG.E.STRONG.GPU, past L1); W loads it weak (through
# L1, beside the cursor's own plain loads), still where it stands in the source. Every GPU
# test, the A/B (Q = d604b2a, M = main 54c4f1f, X1 = the diagnostic 7015eb8, W = 5e57b9e,
# the tree this ran from, not on main: its kernel diff is s45-weak.patch) and a short pass
# of both sanitizers. Pack with `scripts/gpu/pack.sh --variant Q=d604b2a --variant
# M=54c4f1f --variant X1=7015eb8 --variant W=.` on W. Run s45-7 (H100): every test and the
# sanitizers passed on W, but W took M's time to 0.01 us (extends of 1 and 8 requests 2.18
# / 2.86, X1 2.01 / 2.70): the load's kind is not the cost. Not kept.
step tests tests
ab_bench ab "--ops alloc_extend,alloc_decode --page-sizes 16 --batch-sizes 1,8,64,256,1024" "Q M X1 W Q M X1 W"
step sanitize SANITIZE_OPS=100 sanitize-quick
