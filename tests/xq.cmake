ac_test(test_xq SOURCES test_xq.c DEPS xq TIMEOUT 120)
ac_test(test_xq_threads SOURCES test_xq_threads.c DEPS xq
        LABELS concurrent TIMEOUT 300)
ac_test(test_xq_procs SOURCES test_xq_procs.c DEPS xq
        LABELS concurrent TIMEOUT 300)
