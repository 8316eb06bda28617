# The forty-fifth session's changes of the device path: a captured call allocates no device
# memory, kvp_pool_reserve_scratch_async, device memory allocated in relaxed capture mode
# (host side), and the reservation step's owner check (ResHeader::owner, ERR_RES_REUSED: a
# kernel change). Every GPU test (the new ones: cuda_contract
# a_captured_backup_allocates_nothing and an_allocation_beside_a_capture_leaves_it_intact;
# cuda_reservation a_reservation_inside_a_capture_allocates_nothing and
# a_step_graph_replayed_after_its_memory_is_reused_faults), the Python tests on the device
# (test_cuda.py test_captured_rows_calls_allocate_nothing), both C++ examples (the graph
# decode example times a step replay) under memcheck, the short memcheck pass for a
# host-side change, and both sanitizers over the reservation tests. Pack with
# `scripts/gpu/pack.sh`.
step tests tests
step python python
step example example
step sanitize-host SANITIZE_OPS=100 sanitize-host-path
step sanitize-res sanitize-reservation
