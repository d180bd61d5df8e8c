# libxseg: the shared-memory segment (xseg.h); the contract of every call is
# in the header, the protocol in docs/protocol.md.
ac_library(xseg
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/segment.c
          ${CMAKE_CURRENT_SOURCE_DIR}/port.c
          ${CMAKE_CURRENT_SOURCE_DIR}/request.c
          ${CMAKE_CURRENT_SOURCE_DIR}/signal.c
          ${CMAKE_CURRENT_SOURCE_DIR}/reaper.c
  DEPS xq xobj xheap xlock rt)
