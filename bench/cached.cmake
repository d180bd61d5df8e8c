# bench_cached: cached's hit path (bench_xseg -> cached -> noop --store)
# next to memcpy bandwidth, and the cold/warm first pass with and without
# pre-faulted cache memory. Needs the programs it starts.
ac_bench(bench_cached SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/bench_cached.c
         DEPS cached_core)
add_dependencies(bench_cached cached noop bench_xseg xsegctl)
