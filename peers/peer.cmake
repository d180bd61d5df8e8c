# Peer framework: process plumbing (no libxseg dependency) and the common
# main / dispatch every peer links.
ac_library(peer_util SOURCES peer_util.c DEPS xtime)
target_compile_definitions(peer_util PUBLIC AC_VERSION="${PROJECT_VERSION}")
ac_library(peer SOURCES peer.c DEPS peer_util xseg)
