# The store on a real small file system (review11 N-E, N-F): a tmpfs in a
# private mount namespace; exit 77 (skipped) where mounting is not allowed.
# Runs blockerctl (AC_BIN_DIR). The GC-thread case makes it concurrent.
ac_test(test_blocker_full SOURCES test_blocker_full.c
        DEPS blocker_store test_tmp LABELS concurrent TIMEOUT 300)
if(TARGET test_blocker_full)
  set_tests_properties(test_blocker_full PROPERTIES SKIP_RETURN_CODE 77)
  add_dependencies(test_blocker_full blockerctl)
endif()
