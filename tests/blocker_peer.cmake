# The blocker peer as real processes (needs the blocker program built, and
# blockerctl for test_reserve_option).
ac_test(test_blocker_peer SOURCES test_blocker_peer.c
        DEPS test_peer_run xseg_testutil xseg TIMEOUT 600
        LABELS concurrent)
if(TARGET test_blocker_peer)
  add_dependencies(test_blocker_peer blocker blockerctl)
endif()
