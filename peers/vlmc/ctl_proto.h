/* SPDX-License-Identifier: MIT */
#ifndef VLMC_CTL_PROTO_H
#define VLMC_CTL_PROTO_H
/*
 * The pure parts of vlmc's control socket protocol (docs/vlmc.md,
 * "Control protocol"): splitting a command line into words and reading the
 * sizes its arguments give. vlmc.c reads the line from the socket and
 * runs the command; these need no segment, so unit tests and the fuzz
 * target tests/fuzz/fuzz_vlmc_ctl.c call them directly.
 *
 * A command is one line of at most VLMC_CTL_LINE_MAX - 1 bytes, its '\n'
 * included: "create NAME SIZE [OBJSIZE]", "remove NAME", "resize NAME
 * SIZE", "info NAME", "list", "snapshot SRC DST", "clone SRC DST".
 */
#include <stdint.h>

/* A command line's buffer, its NUL included (vlmc_ctl_main). */
#define VLMC_CTL_LINE_MAX 1024
/* Words kept of a line: one more than the longest command takes, so a
 * line with more words is refused as having the wrong arguments. */
#define VLMC_CTL_MAX_ARGS 5

/*
 * Split line in place into its words (runs of bytes other than space,
 * tab, CR and LF; a NUL ends the line), at most max of them, into argv.
 * Returns how many (0 for a blank line); words past max are not looked
 * at.
 */
int vlmc_ctl_split(char *line, char **argv, int max);

/* A volume's size, SIZE of create and resize: peer_parse_size's syntax
 * (4096, 10G, 1PiB), 1 .. VLMC_MAX_VOLUME_SIZE. 0, -EINVAL or -ERANGE;
 * *size unchanged on error. */
int vlmc_ctl_volume_size(const char *s, uint64_t *size);

/* A volume's object size, OBJSIZE of create: peer_parse_size's syntax,
 * a power of two 4k .. 64M (vlmc_obj_size_valid). 0 or -EINVAL; *osz
 * unchanged on error. */
int vlmc_ctl_obj_size(const char *s, uint64_t *osz);

#endif /* VLMC_CTL_PROTO_H */
