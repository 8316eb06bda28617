# The forty-fourth session's second A/B of the turn check's cost. Run s44-1 (H100): T (fault
# paths out of line) was fastest on the decodes of 64-256 requests, U (T, with found_writer
# loaded by thread 0 alone) on the extends of 256-1,024 (0.88-0.89x T's time). V takes
# each kernel's faster one (decodes: every thread; extends and the reserve: thread 0).
# Q: main before any turn check (d604b2a); P: main's turn check (64bdfd1); U: 6fcbfc4;
# V: this tree. Then every GPU test and the sanitizers but the reservation tests (the
# reserve kernel is U's, sanitized in run s44-2). Pack with `scripts/gpu/pack.sh --variant
# Q=d604b2a --variant P=64bdfd1 --variant U=6fcbfc4 --variant V=.`.
step tests tests
ab_bench ab "--ops alloc_extend,alloc_decode --page-sizes 16 --batch-sizes 1,8,64,256,1024" "Q P U V Q P U V"
step sanitize SANITIZE_OPS="${SANITIZE_OPS:-200}" SANITIZE_RESERVATION=0 sanitize
