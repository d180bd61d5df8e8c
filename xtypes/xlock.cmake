ac_library(xlock SOURCES xlock.c)
