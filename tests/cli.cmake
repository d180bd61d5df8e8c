# Every built program answers --help and --version (exit 0) and refuses an
# unknown option with exit 2 before doing anything (the README's promise;
# the micro-benchmarks once ran when asked for --help).
add_test(NAME test_cli
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_cli.sh)
set_tests_properties(test_cli PROPERTIES TIMEOUT 300
                     ENVIRONMENT "AC_BIN_DIR=${CMAKE_BINARY_DIR}/bin")
