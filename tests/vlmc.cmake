# vlmc: unit tests of the core (names, split, metadata, NBD protocol), the
# peer through xseg (multi-process), and real NBD clients / end to end
# (shell scripts; exit 77 = skipped when a client binary is missing).
ac_test(test_vlmc SOURCES test_vlmc.c DEPS vlmc_core TIMEOUT 60)
ac_test(test_vlmc_peer SOURCES test_vlmc_peer.c
        DEPS test_peer_run xseg_testutil xseg LABELS concurrent TIMEOUT 300)
if(TARGET test_vlmc_peer)
  add_dependencies(test_vlmc_peer vlmc noop xsegctl bench_xseg)
endif()
