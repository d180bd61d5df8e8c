# blocker store benchmark: prints one JSON object with its references.
ac_bench(bench_blocker SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/bench_blocker.c
         DEPS blocker_store PkgConfig::CRYPTO)
