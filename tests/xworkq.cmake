ac_test(test_xworkq SOURCES test_xworkq.c DEPS xworkq)
ac_test(test_xworkq_stress SOURCES test_xworkq_stress.c DEPS xworkq
        LABELS concurrent TIMEOUT 400)
