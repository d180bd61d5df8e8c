/* SPDX-License-Identifier: MIT */
/* vlmc's control line protocol, the pure parts (ctl_proto.h). */
#include <errno.h>
#include <string.h>

#include "ctl_proto.h"
#include "peer_util.h"
#include "volume.h"

int vlmc_ctl_split(char *line, char **argv, int max)
{
	char *save;
	int argc = 0;

	for (char *t = strtok_r(line, " \t\r\n", &save); t && argc < max;
	     t = strtok_r(NULL, " \t\r\n", &save))
		argv[argc++] = t;
	return argc;
}

int vlmc_ctl_volume_size(const char *s, uint64_t *size)
{
	uint64_t x;
	int rc = peer_parse_size(s, &x);

	if (rc)
		return rc;
	if (x == 0 || x > VLMC_MAX_VOLUME_SIZE)
		return -ERANGE;
	*size = x;
	return 0;
}

int vlmc_ctl_obj_size(const char *s, uint64_t *osz)
{
	uint64_t x;

	if (peer_parse_size(s, &x) || !vlmc_obj_size_valid(x))
		return -EINVAL;
	*osz = x;
	return 0;
}
