# Peer framework, noop, bench_xseg and xsegctl. The multi-process tests run
# the built programs from $AC_BIN_DIR: they depend on those targets.
ac_test(test_bench_xseg_util SOURCES test_bench_xseg_util.c
        DEPS bench_xseg_util TIMEOUT 120)
ac_test(test_peer_util SOURCES test_peer_util.c DEPS peer_util test_tmp
        TIMEOUT 60)

ac_library(test_peer_run SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_peer_run.c
           DEPS xseg xseg_testutil test_tmp)
ac_test(test_peer SOURCES test_peer.c DEPS test_peer_run xseg_testutil xseg
        LABELS concurrent TIMEOUT 300)
add_dependencies(test_peer noop xsegctl)
ac_test(test_bench_xseg SOURCES test_bench_xseg.c
        DEPS test_peer_run xseg_testutil xseg LABELS concurrent TIMEOUT 600)
add_dependencies(test_bench_xseg noop bench_xseg)
ac_test(test_xsegctl SOURCES test_xsegctl.c
        DEPS test_peer_run xseg_testutil xseg TIMEOUT 300)
add_dependencies(test_xsegctl xsegctl noop bench_xseg)
ac_test(test_peer_threads SOURCES test_peer_threads.c
        DEPS peer test_peer_run xseg_testutil xseg LABELS concurrent TIMEOUT 300)
# The adaptive spin's back-off policy (xseg_spin) as a pure function, and
# the bad input of the *_spin waits; the waits' counts are in
# test_xseg_threads.
ac_test(test_xseg_spin SOURCES test_xseg_spin.c DEPS xseg xseg_testutil
        TIMEOUT 60)
# A peer restarted on a port that is draining (its predecessor's request
# still held by a live server) waits and then binds; SIGTERM ends the wait.
ac_test(test_peer_fence SOURCES test_peer_fence.c
        DEPS test_peer_run xseg_testutil xseg TIMEOUT 300)
add_dependencies(test_peer_fence noop)
