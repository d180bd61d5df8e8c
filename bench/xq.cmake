ac_bench(bench_xq SOURCES bench_xq.c DEPS xq)
ac_bench(bench_xlock SOURCES bench_xlock.c DEPS xlock)
