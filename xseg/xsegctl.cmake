# xsegctl: the admin tool (create/destroy segments, list ports, redirects,
# statistics, reaper).
# The stack's config parser and printer on their own: the fuzz target
# fuzz_stack_conf links them without the rest of xsegctl.
ac_library(xsegctl_stack_conf SOURCES xsegctl_stack_conf.c
           DEPS xseg peer_util)
# volume.h only, for VLMC_TABLE_MAX (vlmc's first read, in stack_check)
target_include_directories(xsegctl_stack_conf PRIVATE
                           ${CMAKE_SOURCE_DIR}/peers/vlmc)
ac_program(xsegctl SOURCES xsegctl.c xsegctl_stack.c xsegctl_supervise.c
                           xsegctl_volume.c
           DEPS xseg peer_util xsegctl_stack_conf)
# volume.h only, for VLMC_TABLE_MAX (the stack's smallest object_size)
target_include_directories(xsegctl PRIVATE ${CMAKE_SOURCE_DIR}/peers/vlmc)
