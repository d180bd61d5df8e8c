# Every external dependency is found with pkg-config; a missing one stops
# configure with the Debian package that provides it.
find_package(PkgConfig)
if(NOT PKG_CONFIG_FOUND)
  message(FATAL_ERROR "pkg-config not found: apt-get install pkg-config "
                      "(or run scripts/install-deps.sh)")
endif()

function(ac_require_pkg var module debian_pkg)
  pkg_check_modules(${var} IMPORTED_TARGET ${module})
  if(NOT ${var}_FOUND)
    message(FATAL_ERROR "missing dependency ${module}: apt-get install "
                        "${debian_pkg} (or run scripts/install-deps.sh)")
  endif()
endfunction()

ac_require_pkg(URCU liburcu liburcu-dev)
ac_require_pkg(URCU_CDS liburcu-cds liburcu-dev)
ac_require_pkg(JEMALLOC jemalloc libjemalloc-dev)
ac_require_pkg(URING liburing liburing-dev)
ac_require_pkg(CHECK check check)
ac_require_pkg(CRYPTO libcrypto libssl-dev)

find_package(Threads REQUIRED)
