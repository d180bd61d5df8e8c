# Power-loss crash consistency of the blocker store
# (tests/test_blocker_powerloss.c, docs/testing-powerloss.md): the store's
# file syscalls are wrapped at link time and fed to a model of what a
# power cut keeps (tests/powerloss_fs.c).
ac_test(test_blocker_powerloss
        SOURCES test_blocker_powerloss.c powerloss_fs.c
        DEPS blocker_store TIMEOUT 300)
# every file-changing call the store (or the test) can make; a symbol
# nothing references is harmless
set(_pl_wrapped open openat creat close dup write writev pwrite pwritev
    ftruncate truncate fallocate fsync fdatasync sync_file_range rename
    renameat renameat2 unlink unlinkat mkdir mkdirat rmdir link linkat
    symlink symlinkat)
list(TRANSFORM _pl_wrapped PREPEND "LINKER:--wrap=")
if(TARGET test_blocker_powerloss)
  target_link_options(test_blocker_powerloss PRIVATE ${_pl_wrapped})
endif()

# The same workload with the store's background threads on (sync every
# 2 ms, checkpoints every 192 KiB, GC): cuts also come from those threads,
# so a seed does not replay exactly; threads, hence also under TSan.
ac_test(test_blocker_powerloss_bg
        SOURCES test_blocker_powerloss.c powerloss_fs.c
        DEPS blocker_store LABELS concurrent TIMEOUT 300)
if(TARGET test_blocker_powerloss_bg)
  target_compile_definitions(test_blocker_powerloss_bg PRIVATE PL_BACKGROUND)
  target_link_options(test_blocker_powerloss_bg PRIVATE ${_pl_wrapped})
endif()
