# The blocker peer: serves the store on an xseg port.
ac_program(blocker SOURCES blocker.c DEPS blocker_store peer)
