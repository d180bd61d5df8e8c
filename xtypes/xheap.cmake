# xheap: power-of-two size-class allocator inside shared memory (xheap.h).
ac_library(xheap SOURCES xheap.c)
