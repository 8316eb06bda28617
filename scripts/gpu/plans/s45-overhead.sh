# What a call costs from Python over the same call from C on the GPU machine (issue 9's
# 5 us): the device pool's *_async methods and a host pool, batch sizes 1, 256 and 4,096.
step overhead OVERHEAD_ARGS="--batch-sizes 1,256,4096 --rounds 3" python-overhead
