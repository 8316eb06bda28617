# The forty-fifth session's host-side change of the device path (be75810: a captured call
# allocates no device memory; kvp_pool_reserve_scratch_async): every GPU test (the new ones:
# cuda_contract a_captured_backup_allocates_nothing, cuda_reservation
# a_reservation_inside_a_capture_allocates_nothing), the Python tests on the device
# (test_cuda.py test_captured_rows_calls_allocate_nothing) and the short memcheck pass for a
# host-side change. Pack with `scripts/gpu/pack.sh`.
step tests tests
step python python
step sanitize-host SANITIZE_OPS=100 sanitize-host-path
