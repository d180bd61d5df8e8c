ac_test(test_xcache SOURCES test_xcache.c DEPS xcache)
