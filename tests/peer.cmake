# Peer framework, noop, bench_xseg and xsegctl.
ac_test(test_bench_xseg_util SOURCES test_bench_xseg_util.c
        DEPS bench_xseg_util TIMEOUT 120)
ac_test(test_peer_util SOURCES test_peer_util.c DEPS peer_util TIMEOUT 60)
