# Where the turn check's cost at 1-8 requests goes (run s45-1, H200: extends of 1 and 8
# requests 1.11x, decodes of 8 1.12x the kernels without it). Diagnostic builds, not for
# main (each drops a part of the check): X1 = main without the replay check's early load
# (`found_writer` returns 0), X2 = main whose turn check gates nothing (`dead_call` reads the
# fault flag alone; commit still faults a call out of turn), X12 = both. Q = d604b2a (no turn
# check), M = main. The diffs: scripts/gpu/plans/s45-diag.patch. Pack with
# `scripts/gpu/pack.sh --variant Q=d604b2a --variant M=. --variant X1=REV1 --variant
# X2=REV2 --variant X12=REV12` (REVs: the diagnostic commits, made off main).
ab_bench ab "--ops alloc_extend,alloc_decode --page-sizes 16 --batch-sizes 1,8,64,256" "Q M X1 X2 X12 Q M X1 X2 X12"
