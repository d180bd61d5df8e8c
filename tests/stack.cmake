# The stack launcher's supervisor (xsegctl stack supervise): peers killed
# under a running stack come back, data intact (shell script driving the
# built programs; 77 = skipped when nbdcopy is missing).
add_test(NAME test_stack_supervise
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_stack_supervise.sh)
set_tests_properties(test_stack_supervise PROPERTIES TIMEOUT 600
                     SKIP_RETURN_CODE 77 LABELS nbd
                     ENVIRONMENT "AC_BIN_DIR=${CMAKE_BINARY_DIR}/bin")

# stack stop and start never report lost write-back data as a clean stop
# (review9 R9-3): a dead store is restarted so cached can flush; a loss
# makes stop exit 1 and keep the segment; start reports a kept segment's
# losses before replacing it (77 = skipped without nbdcopy or blocker).
add_test(NAME test_stack_stop
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_stack_stop.sh)
set_tests_properties(test_stack_stop PROPERTIES TIMEOUT 300
                     SKIP_RETURN_CODE 77 LABELS nbd
                     ENVIRONMENT "AC_BIN_DIR=${CMAKE_BINARY_DIR}/bin")

# stack start reports a peer that fails its start-up (after binding its
# port: vlmc's NBD port taken, the store's log damaged) as that peer's
# failure with its log, exit 1, nothing left (review11 N-B, N-H); the key
# nbd_total_inflight is checked at parse time and reaches vlmc; a
# segment_size without data room for cached's and vlmc's start is refused
# before anything starts, naming the size needed, which starts.
add_test(NAME test_stack_start
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_stack_start.sh)
set_tests_properties(test_stack_start PROPERTIES TIMEOUT 300
                     SKIP_RETURN_CODE 77 LABELS nbd
                     ENVIRONMENT "AC_BIN_DIR=${CMAKE_BINARY_DIR}/bin")

# restart-peer brings back a peer the supervisor gave up on; the stack
# keys store_segment_size and store_reserve reach the blocker; a peer
# exiting during its start-up fails the start at once with only this
# start's log lines (review11 N-I, N-F; 77 = skipped without nbdcopy or
# blocker).
add_test(NAME test_stack_restart
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_stack_restart.sh)
set_tests_properties(test_stack_restart PROPERTIES TIMEOUT 300
                     SKIP_RETURN_CODE 77 LABELS nbd
                     ENVIRONMENT "AC_BIN_DIR=${CMAKE_BINARY_DIR}/bin")

# Crash at any instant: store, cached and vlmc SIGKILLed at random
# instants (seeded, printed; CHAOS_SEED reproduces) under NBD load from
# two connections on the default write-back stack, with cached unplugged
# and plugged online twice between the kills (a kill during some of
# those); every read and the whole volume at the end (also after a stop
# and start) meet each block's durable floor, never torn, misplaced or
# stale (tests/chaos_client.py; 77 = skipped without python3); 3 rounds
# of snapshot, clone, clone writes and remove at random instants between
# the kills (half with vlmc, the store or cached killed during the
# command) and one after them: an acknowledged snapshot stays listed and
# reads the same, within its bounds, across every kill and a restart; a
# clone reads its own durable writes and the snapshot elsewhere; an
# acknowledged remove's clone is never listed again (CHAOS_VOLOPS, about
# +11 s under ASan).
add_test(NAME test_stack_chaos
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_stack_chaos.sh)
set_tests_properties(test_stack_chaos PROPERTIES TIMEOUT 600
                     SKIP_RETURN_CODE 77 LABELS nbd
                     ENVIRONMENT "AC_BIN_DIR=${CMAKE_BINARY_DIR}/bin;CHAOS_CONNS=2;CHAOS_UNPLUGS=2;CHAOS_VOLOPS=3")

# The same with cached in write-through: nothing acknowledged may be lost
# to any kill (the floor is every acknowledged write), no error reply,
# no write-back loss counted; 6 kills, one unplug and plug; 2 rounds of
# volume operations (a snapshot there holds every write acknowledged
# before it was sent).
add_test(NAME test_stack_chaos_wt
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_stack_chaos.sh)
set_tests_properties(test_stack_chaos_wt PROPERTIES TIMEOUT 600
                     SKIP_RETURN_CODE 77 LABELS nbd
                     ENVIRONMENT "AC_BIN_DIR=${CMAKE_BINARY_DIR}/bin;CHAOS_POLICY=writethrough;CHAOS_CONNS=2;CHAOS_UNPLUGS=1;CHAOS_KILLS=6;CHAOS_VOLOPS=2")

# The shell's /proc/PID/stat parser (scripts/lib_proc_stat.sh, used by the
# testlib's gone() and the benchmarks' CPU times) reads the fields after
# the last ')', whatever the process's name holds (a live process named
# "x) Z y..." is not a zombie).
add_test(NAME test_proc_stat
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_proc_stat.sh)
set_tests_properties(test_proc_stat PROPERTIES TIMEOUT 120
                     ENVIRONMENT "AC_BIN_DIR=${CMAKE_BINARY_DIR}/bin")
