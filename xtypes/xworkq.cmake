# xworkq: serial job queue (process-local), on liburcu's wfcqueue.
ac_library(xworkq SOURCES xworkq.c DEPS PkgConfig::URCU)
