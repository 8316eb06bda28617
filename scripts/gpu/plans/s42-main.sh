# The forty-second session's fixes on the device (no kernel changed; pack with
# `scripts/gpu/pack.sh --variant P=d604b2a --variant T=.`): every GPU test (with the new
# capture-order, partly enqueued reservation and by-row scratch tests), an A/B of main (P)
# and this tree (T): a captured call now publishes its number (CALL_MIRROR), which the
# benchmark's graph-replay device times include; the host times show the per-call cost.
# Then the Python tests (test_cuda.py, test_kvpool.py with PyTorch) and the C++ example.
step tests tests
ab_bench ab "--ops alloc_extend,alloc_decode --page-sizes 16 --batch-sizes 1,64,1024"
step python python
step example example
