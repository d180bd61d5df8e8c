# xcache: bounded named-entry cache with lock-free hits (process-local).
ac_library(xcache SOURCES xcache.c DEPS PkgConfig::URCU PkgConfig::URCU_CDS)
