# vlmc's NBD budget over all connections is fair: a command larger than a
# connection's share is served while other clients keep the total full
# (test_nbd_fair.sh drives vlmc over test_vlmc_store; 77 = no python3).
add_test(NAME test_nbd_fair
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_nbd_fair.sh)
set_tests_properties(test_nbd_fair PROPERTIES TIMEOUT 600 SKIP_RETURN_CODE 77
                     LABELS nbd
                     ENVIRONMENT "AC_BIN_DIR=${CMAKE_BINARY_DIR}/bin")
