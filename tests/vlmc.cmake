# vlmc: unit tests of the core (names, split, metadata, NBD protocol), the
# peer through xseg (multi-process), and real NBD clients / end to end
# (shell scripts; exit 77 = skipped when a client binary is missing).
ac_test(test_vlmc SOURCES test_vlmc.c DEPS vlmc_core TIMEOUT 60)
# the store below vlmc with faults vlmc must not trust (short answers,
# failing deletes); a peer, so it goes to bin/ with the others
add_executable(test_vlmc_store test_vlmc_store.c)
target_link_libraries(test_vlmc_store PRIVATE peer Threads::Threads)
set_target_properties(test_vlmc_store PROPERTIES RUNTIME_OUTPUT_DIRECTORY
                      ${CMAKE_BINARY_DIR}/bin)
# TIMEOUT: a hang detector for the whole executable (each test has 240 s).
# On a loaded 2-core box it took 153 s under ASan (75 s of CPU) and 199 s
# under TSan (104 s of CPU): with 300 s, a CI run 1.5x slower than that
# (TSan) or 2x (ASan) would be killed with every test passing (as one was
# in session 16, with the machine overloaded).
ac_test(test_vlmc_peer SOURCES test_vlmc_peer.c
        DEPS test_peer_run xseg_testutil xseg vlmc_core LABELS concurrent
        TIMEOUT 900)
if(TARGET test_vlmc_peer)
  add_dependencies(test_vlmc_peer vlmc noop xsegctl bench_xseg
                   test_vlmc_store cached_testpeer)
endif()

# Real NBD clients and the end-to-end stack: shell scripts driving the
# built programs (xsegctl stack, vlmc, cached, the store). 77 = skipped
# (a client binary such as nbdcopy, qemu-img or fio is missing).
foreach(_t test_nbd_clients test_vlmc_e2e test_vlmc_fua test_nbd_limits test_nbd_total test_nbd_handshake test_nbd_policy test_nbd_reader
           test_nbd_zero test_nbd_stop test_vlmc_wbloss)
  if(EXISTS ${CMAKE_CURRENT_SOURCE_DIR}/${_t}.sh)
    add_test(NAME ${_t}
             COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/${_t}.sh)
    set_tests_properties(${_t} PROPERTIES TIMEOUT 900 SKIP_RETURN_CODE 77
                         LABELS nbd
                         ENVIRONMENT "AC_BIN_DIR=${CMAKE_BINARY_DIR}/bin")
  endif()
endforeach()
