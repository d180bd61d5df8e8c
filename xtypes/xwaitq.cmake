# xwaitq: conditional job queue (process-local).
ac_library(xwaitq SOURCES xwaitq.c)
