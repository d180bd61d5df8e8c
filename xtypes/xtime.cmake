# xtime: "clock now plus ns" as a timed wait's deadline, a clock's reading
# in ns (header only).
add_library(xtime INTERFACE)
target_include_directories(xtime INTERFACE ${CMAKE_CURRENT_SOURCE_DIR})
