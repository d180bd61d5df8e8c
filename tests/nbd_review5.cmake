# vlmc review 5 cases, shell tests driving vlmc over test_vlmc_store:
# a zeroing NBD command over more objects than vlmc's submission window
# with failing DELETEs is answered (R5-1); vlmc stops while a reader
# waits for a slot that a lost reply holds (R5-2).
foreach(_t test_nbd_zero_window test_nbd_stop_slotwait)
  add_test(NAME ${_t} COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/${_t}.sh)
  set_tests_properties(${_t} PROPERTIES TIMEOUT 600 LABELS nbd
                       SKIP_RETURN_CODE 77
                       ENVIRONMENT "AC_BIN_DIR=${CMAKE_BINARY_DIR}/bin")
endforeach()
