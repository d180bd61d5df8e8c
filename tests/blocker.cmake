# blocker store tests (see peers/blocker/store.h)
ac_test(test_blocker_format SOURCES test_blocker_format.c
        DEPS blocker_store test_tmp TIMEOUT 120)
ac_test(test_blocker_store SOURCES test_blocker_store.c
        DEPS blocker_store test_tmp TIMEOUT 300)
ac_test(test_blocker_crash SOURCES test_blocker_crash.c
        DEPS blocker_store test_tmp TIMEOUT 600)
ac_test(test_blocker_concurrent SOURCES test_blocker_concurrent.c
        DEPS blocker_store test_tmp LABELS concurrent TIMEOUT 300)
ac_test(test_blocker_fsync SOURCES test_blocker_fsync.c
        DEPS blocker_store test_tmp LABELS concurrent TIMEOUT 120)
ac_test(test_blocker_recover SOURCES test_blocker_recover.c
        DEPS blocker_store test_tmp TIMEOUT 120)
# garbage collection (store.h blocker_gc; gc.c)
# (threads: a held reader against a pass, the background GC thread)
ac_test(test_blocker_gc SOURCES test_blocker_gc.c
        DEPS blocker_store test_tmp LABELS concurrent TIMEOUT 300)
ac_test(test_blocker_gc_concurrent SOURCES test_blocker_gc_concurrent.c
        DEPS blocker_store test_tmp LABELS concurrent TIMEOUT 300)
ac_test(test_blocker_gc_crash SOURCES test_blocker_gc_crash.c
        DEPS blocker_store test_tmp TIMEOUT 300)
# reads through mappings: SIGBUS from a truncated segment becomes -EIO
# (mapread.c); one case runs readers in threads
ac_test(test_blocker_mmap SOURCES test_blocker_mmap.c
        DEPS blocker_store test_tmp LABELS concurrent TIMEOUT 120)
# GC on a full disk: DIR/reserve, deletes and GC while degraded by ENOSPC
# (a model disk on the fault I/O layer; reserve.c)
ac_test(test_blocker_gc_full SOURCES test_blocker_gc_full.c
        DEPS blocker_store test_tmp LABELS concurrent TIMEOUT 120)
# a segment switch taken back after ENOSPC while a flush ran in the window
# (review7 R7-3; forked child crashes, the parent reopens)
ac_test(test_blocker_unswitch SOURCES test_blocker_unswitch.c
        DEPS blocker_store test_tmp LABELS concurrent TIMEOUT 120)
