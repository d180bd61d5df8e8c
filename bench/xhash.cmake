ac_bench(bench_xhash SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/bench_xhash.c
         DEPS xhash)
