# Fuzz targets (tests/fuzz/fuzz_NAME.c, libFuzzer's LLVMFuzzerTestOneInput;
# docs/fuzzing.md). Each is built one of two ways:
#   AC_FUZZ=ON (clang): linked with -fsanitize=fuzzer, coverage-guided
#     search for as long as asked (scripts/fuzz.sh; CI runs it);
#   otherwise: linked with tests/fuzz/fuzz_driver.c and run by ctest with a
#     fixed seed and number of runs (the same inputs every time), after the
#     files in tests/fuzz/corpus/NAME/ (inputs worth keeping: seeds, and
#     every crash libFuzzer ever found, once fixed).
#
#   ac_fuzz(NAME RUNS N DEPS lib...)
function(ac_fuzz name)
  cmake_parse_arguments(A "" "RUNS" "DEPS" ${ARGN})
  set(_src ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/${name}.c)
  ac_sources_present(_present ${name} ${_src})
  if(NOT _present)
    return()
  endif()
  add_executable(${name} ${_src})
  target_include_directories(${name} PRIVATE ${CMAKE_SOURCE_DIR}/tests)
  target_link_libraries(${name} PRIVATE ${A_DEPS} Threads::Threads)
  set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY
                        ${CMAKE_BINARY_DIR}/fuzz)
  if(AC_FUZZ)
    target_link_options(${name} PRIVATE -fsanitize=fuzzer)
    return()
  endif()
  target_sources(${name} PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/fuzz_driver.c)
  set(_corpus ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/corpus/${name})
  set(_args --runs ${A_RUNS} --seed 1)
  if(EXISTS ${_corpus})
    list(APPEND _args ${_corpus})
  endif()
  add_test(NAME ${name} COMMAND ${name} ${_args})
  # the input of a failure is saved in the build tree (fuzz-crash-NAME);
  # scratch files (the blocker target's store) on tmpfs: an input must not
  # wait for the disk's flushes
  set_tests_properties(${name} PROPERTIES TIMEOUT 600 LABELS fuzz
                       WORKING_DIRECTORY ${CMAKE_BINARY_DIR}/fuzz
                       ENVIRONMENT "TMPDIR=/dev/shm")
endfunction()

# RUNS: 4-45 s each under ASan+UBSan on one core of this 2-core VM
# (fuzz_blocker_gc: its 19 seeds and 20 mutations, 10-25 s: an input
# writes, collects, copies and recovers stores of several MiB).
ac_fuzz(fuzz_nbd_proto RUNS 1000000 DEPS vlmc_core)
ac_fuzz(fuzz_xseg_request RUNS 500000 DEPS xseg xseg_testutil)
ac_fuzz(fuzz_blocker_record RUNS 500000 DEPS blocker_store)
ac_fuzz(fuzz_blocker_log RUNS 1500 DEPS blocker_store test_tmp)
ac_fuzz(fuzz_blocker_gc RUNS 20 DEPS blocker_store test_tmp)
ac_fuzz(fuzz_vlmc_meta RUNS 500000 DEPS vlmc_core)
ac_fuzz(fuzz_stack_conf RUNS 500000 DEPS xsegctl_stack_conf peer_util)
ac_fuzz(fuzz_vlmc_ctl RUNS 2000000 DEPS vlmc_core peer_util)
