// The spinner the GPU benchmarks time behind (kvpool_bench.cu, anatomy.cu, host_calls.cu).
#pragma once

// Holds the stream busy so that what is queued behind it is in the queue before the GPU gets
// to it: the events around it then time the GPU alone, not the host's launch latency.
__global__ void spin_kernel(unsigned long long ns) {
  unsigned long long start, now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (now - start < ns);
}
