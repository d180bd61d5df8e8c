/* SPDX-License-Identifier: MIT */
/*
 * Helpers of the blocker tests that show an open or a check changed
 * nothing on disk (a digest of every file of the store) and that run
 * blockerctl. Include after <check.h> and "store_int.h" (blocker_crc32c).
 */
#ifndef TEST_BLOCKER_FILES_H
#define TEST_BLOCKER_FILES_H
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "test_blocker_util.h"

/* run a shell command, its stdout into out; the exit status */
static inline int tb_run_cmd(const char *cmd, char *out, size_t len)
{
	FILE *f = popen(cmd, "r");
	size_t n;

	ck_assert_ptr_nonnull(f);
	n = fread(out, 1, len - 1, f);
	out[n] = 0;
	int st = pclose(f);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* Every file of the store dir: name, size and CRC, one line each, sorted
 * (malloc'd), to show that an open or a check changed nothing. */
static inline char *tb_dir_digest(const char *dir)
{
	struct dirent **de;
	size_t cap = 4096, len = 0;
	char *out = malloc(cap);
	int n = scandir(dir, &de, NULL, alphasort);

	ck_assert_ptr_nonnull(out);
	ck_assert_int_ge(n, 0);
	out[0] = 0;
	for (int i = 0; i < n; i++) {
		char p[512];
		uint8_t buf[65536];
		uint32_t crc = 0;
		uint64_t size = 0;
		struct stat st;
		ssize_t k;
		int fd;

		/* "." and "..": no files of the store (read gives EISDIR) */
		if (de[i]->d_name[0] == '.' &&
		    (!de[i]->d_name[1] ||
		     (de[i]->d_name[1] == '.' && !de[i]->d_name[2]))) {
			free(de[i]);
			continue;
		}
		snprintf(p, sizeof(p), "%s/%s", dir, de[i]->d_name);
		fd = open(p, O_RDONLY);
		ck_assert_int_ge(fd, 0);
		ck_assert_int_eq(fstat(fd, &st), 0);
		/* a directory where a file belongs (a test's way to make an
		 * unlink fail): named as one, not read */
		k = S_ISDIR(st.st_mode) ? 0 : 1;
		while (k && (k = read(fd, buf, sizeof(buf))) > 0) {
			crc = blocker_crc32c(crc, buf, (size_t)k);
			size += (uint64_t)k;
		}
		/* the end of the file, not a read error taken for it */
		ck_assert_msg(k == 0, "%s: read: %s", p, strerror(errno));
		close(fd);
		if (cap - len < 600) {
			cap *= 2;
			out = realloc(out, cap);
			ck_assert_ptr_nonnull(out);
		}
		len += (size_t)snprintf(out + len, cap - len,
					"%s %s%llu %08x\n", de[i]->d_name,
					S_ISDIR(st.st_mode) ? "dir " : "",
					(unsigned long long)size, crc);
		free(de[i]);
	}
	free(de);
	return out;
}

/*
 * blockerctl check DIR, if blockerctl was built (else -1, *text NULL):
 * its exit status, and its whole output (stdout and stderr) in *text
 * (malloc'd). The report goes into a file beside the store: it may be
 * long, and a reader that stops early gets the command killed by SIGPIPE.
 */
static inline int tb_ctl_check(const char *dir, char **text)
{
	char cmd[1024], out[64], outp[300];
	FILE *f;
	long len;
	int st;

	*text = NULL;
	if (!tb_ctl_dir())
		return -1;
	snprintf(outp, sizeof(outp), "%s.check", dir);
	snprintf(cmd, sizeof(cmd), "%s/blockerctl check %s >%s 2>&1",
		 tb_ctl_dir(), dir, outp);
	st = tb_run_cmd(cmd, out, sizeof(out));
	f = fopen(outp, "r");
	ck_assert_ptr_nonnull(f);
	ck_assert_int_eq(fseek(f, 0, SEEK_END), 0);
	len = ftell(f);
	rewind(f);
	*text = calloc(1, (size_t)len + 1);
	ck_assert_ptr_nonnull(*text);
	ck_assert_int_eq(fread(*text, 1, (size_t)len, f), (size_t)len);
	fclose(f);
	unlink(outp);
	return st;
}
#endif
