ac_test(test_xwaitq SOURCES test_xwaitq.c DEPS xwaitq)
ac_test(test_xwaitq_stress SOURCES test_xwaitq_stress.c DEPS xwaitq
        LABELS concurrent TIMEOUT 400)
