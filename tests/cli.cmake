# Every built program answers --help and --version (exit 0) and refuses an
# unknown option with exit 2 before doing anything (the README's promise;
# the micro-benchmarks once ran when asked for --help).
add_test(NAME test_cli
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_cli.sh)
set_tests_properties(test_cli PROPERTIES TIMEOUT 300
                     ENVIRONMENT "AC_BIN_DIR=${CMAKE_BINARY_DIR}/bin")

# bench_spin_probe refuses to measure a getrusage that fails and never
# prints nan into its JSON (an LD_PRELOAD shim injects both faults; 77 =
# skipped where the shim does not take effect, e.g. clang's static ASan).
add_library(spin_probe_fault MODULE spin_probe_fault.c)
target_link_libraries(spin_probe_fault PRIVATE ${CMAKE_DL_LIBS})
add_test(NAME test_bench_spin_probe
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_bench_spin_probe.sh)
set_tests_properties(test_bench_spin_probe PROPERTIES TIMEOUT 120
                     SKIP_RETURN_CODE 77
                     ENVIRONMENT "AC_BIN_DIR=${CMAKE_BINARY_DIR}/bin;SPIN_PROBE_SHIM=$<TARGET_FILE:spin_probe_fault>")
