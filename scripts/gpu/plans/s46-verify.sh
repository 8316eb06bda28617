# The forty-sixth session's kernel change: the replay check without a load of its own. Every
# committing kernel marks the cursor it read as consumed (its writer word becomes the call's
# number, `mark_consumed` in kernels/pool.cu), and a call that finds its own number in the
# cursor it read has run already; before, the allocation kernels loaded the written cursor's
# writer for that (`found_writer`), which run s45-6 found costs extends of 1 and 8 requests
# 0.17-0.22 us. Every GPU test (the new cuda_device
# every_allocation_kernel_faults_when_its_graph_is_replayed_at_once: a graph of each
# allocation kernel family launched once passes, launched again faults), the A/B (Q =
# d604b2a, before any turn check; M = main before the change, 213a2d2; N = this tree), the
# Python tests on the device, both C++ examples under memcheck, and the short pass of both
# sanitizers. Pack with `scripts/gpu/pack.sh --variant Q=d604b2a --variant M=213a2d2
# --variant N=.`.
step tests tests
ab_bench ab "--ops alloc_extend,alloc_decode --page-sizes 16 --batch-sizes 1,8,64,256,1024" "Q M N Q M N"
step python python
step example example
step sanitize SANITIZE_OPS=100 sanitize-quick
