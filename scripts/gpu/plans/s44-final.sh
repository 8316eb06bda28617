# The forty-fourth session's last turn-check build. Run s44-3 (H100): V (each kernel's faster
# found_writer, the faults out of line) took 0.92-1.01x P's time on extends but 1.04-1.06x on
# rewinds; W keeps the rewind's faults inline (its SASS is P's, instruction for instruction;
# every other kernel is V's). P: main's turn check (64bdfd1); V: 326dff4; W: this tree. Every
# GPU test, the A/B, the sanitizers but the reservation tests (the reserve kernel is U's,
# sanitized in run s44-2). Pack with
# `scripts/gpu/pack.sh --variant P=64bdfd1 --variant V=326dff4 --variant W=.` (run s44-4: W
# took V's time on rewinds too; reverted).
step tests tests
ab_bench ab "--ops alloc_extend,alloc_decode --page-sizes 16 --batch-sizes 1,8,64,256,1024" "P V W P V W"
step sanitize SANITIZE_OPS="${SANITIZE_OPS:-200}" SANITIZE_RESERVATION=0 sanitize
