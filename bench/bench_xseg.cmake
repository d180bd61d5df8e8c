# bench_xseg: load generator for any xseg port (a user tool, installed in
# bin/ like the peers). Its building blocks are a library so tests link them.
ac_library(bench_xseg_util SOURCES bench_xseg_util.c)
ac_program(bench_xseg SOURCES bench_xseg.c DEPS bench_xseg_util peer)
