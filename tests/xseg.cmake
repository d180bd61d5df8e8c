# libxseg tests. xseg_testutil: helpers for multi-process tests on private
# segments (also used by the peer framework's tests).
ac_library(xseg_testutil
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/xseg_testutil.c DEPS xseg PkgConfig::CHECK)
ac_test(test_xseg SOURCES test_xseg.c DEPS xseg xseg_testutil TIMEOUT 300)
ac_test(test_xseg_mp SOURCES test_xseg_mp.c DEPS xseg xseg_testutil
  TIMEOUT 600)
ac_test(test_xseg_threads SOURCES test_xseg_threads.c
  DEPS xseg xseg_testutil LABELS concurrent TIMEOUT 600)
# Kills between the two steps of a request hand-over (review F7) and the
# races of those steps with a reaper, replayed through test hooks compiled
# into a private copy of libxseg (the library itself has no hook), linked
# with its own copy of xseg_testutil.
set(_xseg_dir ${PROJECT_SOURCE_DIR}/xseg)
ac_library(xseg_hooked
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/xseg_testutil.c ${_xseg_dir}/segment.c
          ${_xseg_dir}/port.c ${_xseg_dir}/request.c ${_xseg_dir}/signal.c
          ${_xseg_dir}/reaper.c
  DEPS xq xobj xheap xlock rt PkgConfig::CHECK)
if(TARGET xseg_hooked)
  target_compile_definitions(xseg_hooked PUBLIC XSEG_TEST_HOOKS)
  target_include_directories(xseg_hooked PUBLIC ${_xseg_dir})
endif()
ac_test(test_xseg_race SOURCES test_xseg_race.c DEPS xseg_hooked TIMEOUT 120)
ac_test(test_xseg_kill SOURCES test_xseg_kill.c DEPS xseg_hooked TIMEOUT 300)
# Write-back losses: reclaims of ports whose owner held unflushed data
# (reap, bind over a dead owner, release, unredirect), counted once.
ac_test(test_xseg_wbloss SOURCES test_xseg_wbloss.c DEPS xseg xseg_testutil
  TIMEOUT 300)
# Bind fence (review9 R9-7 part 2): a port whose previous owner's requests
# are still accepted by live ports is not bound until they are answered.
# Linked with the hooked copy: one case stops a bind between its fence and
# its claim (XSEG_TP_BIND_FENCED); the others set no hook.
ac_test(test_xseg_fence SOURCES test_xseg_fence.c DEPS xseg_hooked
  TIMEOUT 300)
ac_test(test_xseg_fence_threads SOURCES test_xseg_fence_threads.c
  DEPS xseg xseg_testutil LABELS concurrent TIMEOUT 300)
# The adaptive spin's preemption check against its own yields, with the
# count of involuntary switches and the yield replaced through the hooks.
ac_test(test_xseg_spin_yield SOURCES test_xseg_spin_yield.c DEPS xseg_hooked
  TIMEOUT 60)
