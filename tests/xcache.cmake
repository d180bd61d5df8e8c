ac_test(test_xcache SOURCES test_xcache.c DEPS xcache)
ac_test(test_xcache_stress SOURCES test_xcache_stress.c DEPS xcache
        LABELS concurrent TIMEOUT 400)
