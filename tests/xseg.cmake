# libxseg tests. xseg_testutil: helpers for multi-process tests on private
# segments (also used by the peer framework's tests).
ac_library(xseg_testutil
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/xseg_testutil.c DEPS xseg PkgConfig::CHECK)
ac_test(test_xseg SOURCES test_xseg.c DEPS xseg xseg_testutil TIMEOUT 300)
ac_test(test_xseg_mp SOURCES test_xseg_mp.c DEPS xseg xseg_testutil
  TIMEOUT 600)
ac_test(test_xseg_threads SOURCES test_xseg_threads.c
  DEPS xseg xseg_testutil LABELS concurrent TIMEOUT 600)
