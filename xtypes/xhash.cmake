# xhash: process-local open-addressing hash table (CPython compact dict).
ac_library(xhash SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/xhash.c)
