# The forty-seventh session's experiments, as first planned (run s47-1 ran them as variant
# libraries instead, s47-main.sh, and run s47-2 tested H with E2, s47-he.sh: H landed as
# bf6e3fa; E was cut down to kvp_decode_32_*, landed as 33ee229; D1 was a diagnostic).
# H (s47-ring-hint.patch, on main 0d58776): the one-block extend kernels (extend_few: 1-32
# requests, up to 512 tokens, kvp_extend_one_* / few{2,4,8}_* / few_*) load the ring's first
# pages at the head the host predicts (Call::head_hint, from Accounting::head_hint) with
# round trip 1, beside the cursor, and use them if the cursor's head is that position (else
# they load them again from the head, as before); warp 0 loads the prefix pages' words only
# when some request has a prefix. An extend of new requests then takes one dependent round
# trip where it took two (SGLang's Triton extend takes two: its free pages' offsets come
# from the lengths). `cuobjdump -sass` (sm_90): every hinted ring load is issued before the
# kernels' first branch, with the cursor and the lengths. E (s47-decode-first.patch): the
# decodes' round trip 1 loaded ahead of the page-size dispatch (PENDING.md item 2's lead;
# kvp_decode_32_i64 issues all its first loads before any branch, 40 instructions fewer).
# D1 (s47-decode-noreplay.patch): diagnostic, not for main: the decodes without the replay
# check's load (what it costs them). M: main.
#
#   git switch -c s47-H main && git apply scripts/gpu/plans/s47-ring-hint.patch &&
#     scripts/build-kernels.sh && git commit -qam "s47 H"
#   E=$(scripts/gpu/patch-variant.sh scripts/gpu/plans/s47-decode-first.patch main)
#   D1=$(scripts/gpu/patch-variant.sh scripts/gpu/plans/s47-decode-noreplay.patch main)
#   scripts/gpu/pack.sh --variant M=main --variant H=. --variant E=$E --variant D1=$D1
#
# then (device tool, carry ["gpu-artifacts"]): timeout 560 env OUT=$OUT scripts/gpu/steps.sh
# scripts/gpu/plans/s47-hint-ab.sh. Every GPU test on H (cuda_device's new
# extends_hand_out_the_same_slots_whatever_the_head_hint: a right, a wrong and no hint give
# the host pool's slots; the lockstep test checks every hint against the cursor), the A/Bs,
# and the short pass of both sanitizers on H.
step tests tests
ab_bench ab-extend "--ops alloc_extend --page-sizes 1,16,64 --batch-sizes 1,2,4,8,32,64" "M H M H M H"
ab_bench ab-decode "--ops alloc_decode --page-sizes 16,64 --batch-sizes 1,8,64,256" "M E D1 M E D1"
step sanitize SANITIZE_OPS=100 sanitize-quick
