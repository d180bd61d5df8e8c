ac_test(test_xcache SOURCES test_xcache.c DEPS xcache)
ac_test(test_xcache_stress SOURCES test_xcache_stress.c DEPS xcache
        LABELS concurrent TIMEOUT 400)
# The preempted-hit race, replayed through a test hook compiled into a
# private copy of xcache.c (the library itself has no hook).
ac_test(test_xcache_race
        SOURCES test_xcache_race.c ${PROJECT_SOURCE_DIR}/xtypes/xcache.c
        DEPS PkgConfig::URCU PkgConfig::URCU_CDS)
if(TARGET test_xcache_race)
  target_compile_definitions(test_xcache_race PRIVATE XCACHE_TEST_HOOKS)
  target_include_directories(test_xcache_race PRIVATE
                             ${PROJECT_SOURCE_DIR}/xtypes)
endif()
