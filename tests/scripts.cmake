# scripts/install-deps.sh finds libFuzzer's runtime by clang's own name for
# it (any architecture, either runtime layout) and installs its package
# only when it is missing; apt-get is a stub (77 = skipped without clang).
add_test(NAME test_install_deps
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_install_deps.sh)
set_tests_properties(test_install_deps PROPERTIES TIMEOUT 120
                     SKIP_RETURN_CODE 77
                     ENVIRONMENT "AC_BIN_DIR=${CMAKE_BINARY_DIR}/bin")
