# xsegctl: the admin tool (create/destroy segments, list ports, redirects,
# statistics, reaper).
ac_program(xsegctl SOURCES xsegctl.c xsegctl_stack.c xsegctl_supervise.c
                           xsegctl_volume.c
           DEPS xseg peer_util)
