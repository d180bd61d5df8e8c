# xobj: unit tests, thread stress (also run under TSan), process stress with
# SIGKILLed participants.
ac_test(test_xobj SOURCES test_xobj.c DEPS xobj TIMEOUT 120)
ac_test(test_xobj_stress SOURCES test_xobj_stress.c DEPS xobj
        LABELS concurrent TIMEOUT 120)
ac_test(test_xobj_mp SOURCES test_xobj_mp.c DEPS xobj TIMEOUT 120)
