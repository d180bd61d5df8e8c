# bench_xheap: xobj and xheap alloc+free pairs/s against the process
# allocator (jemalloc via ac_bench) in the same run.
ac_bench(bench_xheap SOURCES bench_xheap.c DEPS xheap xobj)
