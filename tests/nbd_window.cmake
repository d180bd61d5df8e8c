# A zeroing NBD command over more objects than vlmc's submission window
# with failing DELETEs is answered (review 5, R5-1). Shell test driving
# vlmc over test_vlmc_store.
add_test(NAME test_nbd_zero_window
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_nbd_zero_window.sh)
set_tests_properties(test_nbd_zero_window PROPERTIES TIMEOUT 600 LABELS nbd
                     ENVIRONMENT "AC_BIN_DIR=${CMAKE_BINARY_DIR}/bin")
