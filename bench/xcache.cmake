# bench_xcache: hit-path scaling (1 vs 2 threads) and cost at 1K..1M entries.
ac_bench(bench_xcache SOURCES bench_xcache.c DEPS xcache)
