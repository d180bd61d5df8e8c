# xq needs no lock: it is lock-free on its own.
ac_library(xq SOURCES xq.c)
