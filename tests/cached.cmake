# cached: unit tests of the state machine (fake I/O), the fault-injecting
# test store, and multi-process tests through real peers.
# test_cached takes 14-30 s under ASan, more on a loaded 2-core machine
# (60 s was hit once in five runs): 180 s. The full/failing-store cases
# run apart, as test_cached_fullstore (same executable, argument
# "fullstore"; no argument runs the other cases).
ac_test(test_cached SOURCES test_cached.c DEPS cached_core TIMEOUT 180)
if(TARGET test_cached)
  add_test(NAME test_cached_fullstore COMMAND test_cached fullstore)
  set_tests_properties(test_cached_fullstore PROPERTIES TIMEOUT 180)
endif()
add_executable(cached_testpeer cached_testpeer.c)
target_link_libraries(cached_testpeer PRIVATE peer Threads::Threads)
set_target_properties(cached_testpeer PROPERTIES RUNTIME_OUTPUT_DIRECTORY
                      ${CMAKE_BINARY_DIR}/bin)
ac_test(test_cached_mp SOURCES test_cached_mp.c DEPS xseg xseg_testutil
        LABELS concurrent TIMEOUT 900)
add_dependencies(test_cached_mp cached cached_testpeer bench_xseg)
# The segment's stage stamps on cached's hit path (hitpath6, issue 6):
# servers stamp only requests whose client stamped.
ac_test(test_xseg_stamps SOURCES test_xseg_stamps.c DEPS xseg xseg_testutil
        TIMEOUT 60)
