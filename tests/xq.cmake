ac_test(test_xq SOURCES test_xq.c DEPS xq TIMEOUT 120)
