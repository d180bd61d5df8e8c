# Helpers that keep every module, test and benchmark a self-contained target,
# so a module's CMake fragment names only its own files.
#
#   ac_library(NAME SOURCES a.c b.c DEPS other_lib PkgConfig::URCU)
#   ac_program(NAME SOURCES main.c DEPS lib...)      installed tool or peer
#   ac_test(NAME SOURCES t.c DEPS lib... [LABELS concurrent] [TIMEOUT s])
#   ac_bench(NAME SOURCES b.c DEPS lib...)
#
# Tests labelled "concurrent" also run under ThreadSanitizer in CI.
#
# A target whose source files do not exist yet (a module being written in a
# shared work tree) is skipped with a warning, so it cannot break everyone
# else's configure; with -DAC_STRICT=ON (CI) that is an error instead.

option(AC_STRICT "Fail configure when a target names a missing source" OFF)

# Sets ${out} to TRUE when every source of target ${name} exists.
function(ac_sources_present out name)
  set(ok TRUE)
  foreach(src ${ARGN})
    if(NOT IS_ABSOLUTE ${src})
      set(src ${CMAKE_CURRENT_SOURCE_DIR}/${src})
    endif()
    if(NOT EXISTS ${src})
      if(AC_STRICT)
        message(FATAL_ERROR "${name}: missing source ${src}")
      endif()
      message(WARNING "${name}: skipped, missing source ${src}")
      set(ok FALSE)
    endif()
  endforeach()
  set(${out} ${ok} PARENT_SCOPE)
endfunction()

function(ac_library name)
  cmake_parse_arguments(A "" "" "SOURCES;DEPS" ${ARGN})
  ac_sources_present(_present ${name} ${A_SOURCES})
  if(NOT _present)
    return()
  endif()
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
  ac_sources_present(_present ${name} ${A_SOURCES})
  if(NOT _present)
    return()
  endif()
  add_executable(${name} ${A_SOURCES})
  target_link_libraries(${name} PRIVATE ${A_DEPS} Threads::Threads)
  ac_link_allocator(${name})
  set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY
                        ${CMAKE_BINARY_DIR}/bin)
endfunction()

function(ac_test name)
  cmake_parse_arguments(A "" "TIMEOUT" "SOURCES;DEPS;LABELS" ${ARGN})
  ac_sources_present(_present ${name} ${A_SOURCES})
  if(NOT _present)
    return()
  endif()
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
  ac_sources_present(_present ${name} ${A_SOURCES})
  if(NOT _present)
    return()
  endif()
  add_executable(${name} ${A_SOURCES})
  target_link_libraries(${name} PRIVATE ${A_DEPS} Threads::Threads)
  # bench_args.h prints it for --version
  target_compile_definitions(${name} PRIVATE AC_VERSION="${PROJECT_VERSION}")
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
