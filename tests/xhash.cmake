ac_test(test_xhash SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_xhash.c
        DEPS xhash TIMEOUT 120)
