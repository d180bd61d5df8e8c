# Helpers that keep every module, test and benchmark a self-contained target,
# so a module's CMake fragment names only its own files.
#
#   ac_library(NAME SOURCES a.c b.c DEPS other_lib PkgConfig::URCU)
#   ac_program(NAME SOURCES main.c DEPS lib...)      installed tool or peer
#   ac_test(NAME SOURCES t.c DEPS lib... [LABELS concurrent] [TIMEOUT s])
#   ac_bench(NAME SOURCES b.c DEPS lib...)
#
# Tests labelled "concurrent" also run under ThreadSanitizer in CI.

function(ac_library name)
  cmake_parse_arguments(A "" "" "SOURCES;DEPS" ${ARGN})
  add_library(${name} STATIC ${A_SOURCES})
  target_include_directories(${name} PUBLIC ${CMAKE_CURRENT_SOURCE_DIR})
  target_link_libraries(${name} PUBLIC ${A_DEPS} Threads::Threads)
endfunction()

# Programs link jemalloc as their allocator, except under the sanitizers.
function(ac_link_allocator target)
  if(NOT AC_SANITIZED)
    target_link_libraries(${target} PRIVATE PkgConfig::JEMALLOC)
  endif()
endfunction()

function(ac_program name)
  cmake_parse_arguments(A "" "" "SOURCES;DEPS" ${ARGN})
  add_executable(${name} ${A_SOURCES})
  target_link_libraries(${name} PRIVATE ${A_DEPS} Threads::Threads)
  ac_link_allocator(${name})
  set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY
                        ${CMAKE_BINARY_DIR}/bin)
endfunction()

function(ac_test name)
  cmake_parse_arguments(A "" "TIMEOUT" "SOURCES;DEPS;LABELS" ${ARGN})
  add_executable(${name} ${A_SOURCES})
  target_include_directories(${name} PRIVATE ${CMAKE_SOURCE_DIR}/tests)
  target_link_libraries(${name} PRIVATE ${A_DEPS} PkgConfig::CHECK
                        Threads::Threads)
  set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY
                        ${CMAKE_BINARY_DIR}/tests)
  add_test(NAME ${name} COMMAND ${name})
  if(NOT A_TIMEOUT)
    set(A_TIMEOUT 600)
  endif()
  set_tests_properties(${name} PROPERTIES TIMEOUT ${A_TIMEOUT}
                       LABELS "${A_LABELS}"
                       ENVIRONMENT "AC_BIN_DIR=${CMAKE_BINARY_DIR}/bin")
endfunction()

function(ac_bench name)
  cmake_parse_arguments(A "" "" "SOURCES;DEPS" ${ARGN})
  add_executable(${name} ${A_SOURCES})
  target_link_libraries(${name} PRIVATE ${A_DEPS} Threads::Threads)
  ac_link_allocator(${name})
  set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY
                        ${CMAKE_BINARY_DIR}/bin)
endfunction()

# Each folder includes its modules' fragments (<module>.cmake), one file per
# module, so adding a module never edits a shared list.
macro(ac_include_fragments)
  file(GLOB _ac_fragments CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/*.cmake)
  list(SORT _ac_fragments)
  foreach(_f ${_ac_fragments})
    include(${_f})
  endforeach()
endmacro()
