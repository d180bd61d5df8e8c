# xobj: unit tests, thread stress (also run under TSan), process stress with
# SIGKILLed participants.
ac_test(test_xobj SOURCES test_xobj.c DEPS xobj TIMEOUT 120)
