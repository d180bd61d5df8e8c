ac_test(test_xhash SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_xhash.c
        DEPS xhash TIMEOUT 120)
ac_test(test_xhash_readers
        SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_xhash_readers.c
        DEPS xhash LABELS concurrent TIMEOUT 120)
