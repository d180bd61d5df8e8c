# test_tmp: every scratch file of a test program under one root that the
# runner removes whatever the tests' outcome (test_tmp.h; Check _exits a
# failing test's child before its cleanup runs).
ac_library(test_tmp SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_tmp.c)
