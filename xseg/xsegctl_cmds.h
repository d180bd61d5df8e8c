/* SPDX-License-Identifier: MIT */
#ifndef XSEGCTL_CMDS_H
#define XSEGCTL_CMDS_H
/*
 * Commands of xsegctl that live in their own files: `xsegctl volume ...`
 * (xsegctl_volume.c: talks to vlmc's control socket) and `xsegctl stack
 * ...` (xsegctl_stack.c: starts, stops and inspects a whole stack).
 * Each *_main takes argv starting at the command word ("volume"/"stack")
 * and returns the process exit status: 0 success, 1 the operation failed
 * (one-line reason on stderr), 2 bad usage.
 */
#include <stddef.h>
#include <stdio.h>

int xsegctl_volume_main(int argc, char **argv);
int xsegctl_stack_main(int argc, char **argv);

/* Default data directory of a stack (relative to the current directory). */
#define XSEGCTL_STACK_DIR "./archcache-data"

/*
 * Send one command line to vlmc's control socket at path and copy the
 * answer's data lines to out (may be NULL). Returns 0 when vlmc answered
 * "ok", the positive errno vlmc reported (its message in err), or a
 * negative errno when the socket could not be reached (message in err;
 * -ENOENT or -ECONNREFUSED: nobody listens there). timeout_s > 0 bounds
 * each wait for the answer (-ETIMEDOUT: vlmc busy with a long command,
 * e.g. a remove); 0 waits as long as vlmc takes.
 */
int xsegctl_vlmc_command(const char *path, const char *line, FILE *out,
			 char *err, size_t errlen, unsigned timeout_s);

#endif /* XSEGCTL_CMDS_H */
