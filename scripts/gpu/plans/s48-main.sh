# Run s48-2 (H200, 140 s; BENCHMARKS.md): every step passed on main cd403ec.
# Main with cuda_device's extends_hand_out_the_same_slots_whatever_the_head_hint widened
# (calls of 1-96 requests and up to 3,000 tokens: one block and several; a free round frees
# rows until the pool has room for any call, where run s48-1's first version freed one row
# a round and made only 33 extends at page size 1): every GPU test and the Python tests
# (no kernel changed since run s47-2's sanitizers). Pack with `scripts/gpu/pack.sh`.
step tests tests
step python python
# The phases of the several-block extends against one block (bench-gpu/anatomy.cu's
# several-block cases: what 2-32 requests of 512 tokens wait for beyond one request).
step anatomy anatomy
