# xsegctl: the admin tool (create/destroy segments, list ports, redirects,
# statistics, reaper).
ac_program(xsegctl SOURCES xsegctl.c xsegctl_stack.c xsegctl_supervise.c
                           xsegctl_volume.c
           DEPS xseg peer_util)
# volume.h only, for VLMC_TABLE_MAX (the stack's smallest object_size)
target_include_directories(xsegctl PRIVATE ${CMAKE_SOURCE_DIR}/peers/vlmc)
