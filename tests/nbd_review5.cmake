# vlmc review 5 cases, shell tests driving vlmc over test_vlmc_store:
# a zeroing NBD command over more objects than vlmc's submission window
# with failing DELETEs is answered (R5-1); vlmc stops while a reader
# waits for a slot that a lost reply holds (R5-2: test_nbd_stop.sh with
# NBD_STOP_SLOT_WAIT=1).
add_test(NAME test_nbd_zero_window
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_nbd_zero_window.sh)
add_test(NAME test_nbd_stop_slotwait
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_nbd_stop.sh)
set_tests_properties(test_nbd_zero_window PROPERTIES TIMEOUT 600 LABELS nbd
                     ENVIRONMENT "AC_BIN_DIR=${CMAKE_BINARY_DIR}/bin")
set_tests_properties(test_nbd_stop_slotwait PROPERTIES TIMEOUT 600 LABELS nbd
                     SKIP_RETURN_CODE 77
                     ENVIRONMENT "AC_BIN_DIR=${CMAKE_BINARY_DIR}/bin;NBD_STOP_SLOT_WAIT=1")
