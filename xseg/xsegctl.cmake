# xsegctl: the admin tool (create/destroy segments, list ports, redirects,
# statistics, reaper).
ac_program(xsegctl SOURCES xsegctl.c DEPS xseg peer_util)
