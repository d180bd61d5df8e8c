# xheap: unit tests, thread stress (also run under TSan), process stress with
# a SIGKILLed participant.
ac_test(test_xheap SOURCES test_xheap.c test_xheap_check.c DEPS xheap
        TIMEOUT 120)
