ac_bench(bench_xq SOURCES bench_xq.c DEPS xq)
