# The stack launcher's supervisor (xsegctl stack supervise): peers killed
# under a running stack come back, data intact (shell script driving the
# built programs; 77 = skipped when nbdcopy is missing).
add_test(NAME test_stack_supervise
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_stack_supervise.sh)
set_tests_properties(test_stack_supervise PROPERTIES TIMEOUT 600
                     SKIP_RETURN_CODE 77 LABELS nbd
                     ENVIRONMENT "AC_BIN_DIR=${CMAKE_BINARY_DIR}/bin")
