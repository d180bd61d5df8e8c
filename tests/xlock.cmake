ac_test(test_xlock SOURCES test_xlock.c DEPS xlock LABELS concurrent
        TIMEOUT 300)
