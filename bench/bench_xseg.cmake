# bench_xseg: load generator for any xseg port (a user tool, installed in
# bin/ like the peers). Its building blocks are a library so tests link them.
ac_library(bench_xseg_util SOURCES bench_xseg_util.c)
ac_program(bench_xseg SOURCES bench_xseg.c DEPS bench_xseg_util peer)
# The floor a cross-process round trip can reach on this machine (shared
# word ping-pong, polling and futex), compared with in run_xseg_bench.sh.
ac_bench(bench_xseg_floor SOURCES bench_xseg_floor.c
         DEPS bench_xseg_util peer_util)
# The cost of the adaptive spin's preemption check (getrusage per spinning
# wait, two per yield) against a null syscall and the vDSO clock.
ac_bench(bench_spin_probe SOURCES bench_spin_probe.c)
