ac_test(test_xhash SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_xhash.c
        DEPS xhash TIMEOUT 120)
ac_test(test_xhash_readers
        SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_xhash_readers.c
        DEPS xhash LABELS concurrent TIMEOUT 120)
# The library's source again, with degenerate hashes that force collisions.
ac_test(test_xhash_collide
        SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_xhash_collide.c
                ${CMAKE_SOURCE_DIR}/xtypes/xhash.c
        TIMEOUT 120)
target_include_directories(test_xhash_collide PRIVATE
                           ${CMAKE_SOURCE_DIR}/xtypes)
target_compile_definitions(test_xhash_collide PRIVATE XHASH_TEST_COLLIDE)
