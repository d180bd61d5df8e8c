# xheap: unit tests, thread stress (also run under TSan), process stress with
# a SIGKILLed participant.
ac_test(test_xheap SOURCES test_xheap.c test_xheap_check.c DEPS xheap
        TIMEOUT 120)
ac_test(test_xheap_stress SOURCES test_xheap_stress.c test_xheap_check.c
        DEPS xheap LABELS concurrent TIMEOUT 120)
ac_test(test_xheap_mp SOURCES test_xheap_mp.c test_xheap_check.c DEPS xheap
        TIMEOUT 120)
# Memory given back across classes (review12 F6): merging, give-back of the
# class caches before ENOMEM, a model of random sizes.
ac_test(test_xheap_merge SOURCES test_xheap_merge.c test_xheap_check.c
        DEPS xheap TIMEOUT 120)
# Processes SIGKILLed while they may hold the general allocator's mutex.
ac_test(test_xheap_crash SOURCES test_xheap_crash.c test_xheap_check.c
        DEPS xheap TIMEOUT 120)
