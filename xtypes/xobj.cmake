# xobj: fixed-size object pools inside shared memory (xobj.h); its free list
# is an xq.
ac_library(xobj SOURCES xobj.c DEPS xq)
