/* SPDX-License-Identifier: MIT */
/*
 * A stand-alone driver for the fuzz targets (tests/fuzz/fuzz_*.c), for
 * builds without libFuzzer (gcc: the ASan+UBSan test build and CI's ctest).
 * With clang, the same targets link with -fsanitize=fuzzer instead and get
 * coverage-guided search (scripts/fuzz.sh); this driver gives every build a
 * deterministic, repeatable run of the same entry point, so a target that
 * breaks, or a parser that crashes on an input once found, fails ctest.
 *
 * usage: fuzz_NAME [--runs N] [--seed S] [--max-len L] [FILE|DIR ...]
 *
 * Runs every FILE (and every regular file in each DIR, a corpus or crash
 * files saved by libFuzzer) through LLVMFuzzerTestOneInput once, then N
 * more inputs made from them, or from nothing, by seeded mutations: fresh
 * random bytes, bit flips, bytes set to boundary values, inserted, deleted
 * or duplicated ranges, splices of two inputs, truncation. The same seed
 * gives the same inputs. Half of the inputs start from one of the files,
 * the others from any input so far (kept in a bounded pool), so the walk
 * stays near the well-formed inputs and can also grow away from them step
 * by step (no coverage feedback: that is libFuzzer's job).
 *
 * A target reports a broken invariant by abort() (or the sanitizer does,
 * with abort_on_error=1): the driver's signal handler then writes the
 * input being run to ./fuzz-crash-NAME (async-signal-safe write(2)) and
 * re-raises, so the failure is reproduced by `fuzz_NAME ./fuzz-crash-NAME`
 * under any build. Exit status 0: every input ran; 2: usage error.
 * Prints one JSON line at the end: target, seed, files, runs.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
#define FUZZ_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FUZZ_SANITIZED 1
#endif
#endif
#ifdef FUZZ_SANITIZED
#include <sanitizer/common_interface_defs.h>
#endif

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define POOL_MAX 256

struct input {
	uint8_t *data;
	size_t len;
};

static struct input pool[POOL_MAX];
static unsigned pool_n;
static unsigned pool_pinned; /* the given files: never replaced */
static const char *prog_name = "fuzz";
/* the input being run, for the crash handler */
static const uint8_t *volatile cur_data;
static volatile size_t cur_len;
static char crash_path[4096];

static uint64_t rng_state;

/* xorshift64*: small, seedable, good enough to pick mutations */
static uint64_t rnd(void)
{
	rng_state ^= rng_state >> 12;
	rng_state ^= rng_state << 25;
	rng_state ^= rng_state >> 27;
	return rng_state * 2685821657736338717ULL;
}

static size_t rnd_below(size_t n)
{
	return n ? (size_t)(rnd() % n) : 0;
}

/* Write the input being run to crash_path: async-signal-safe. Nothing
 * when no input runs (a leak reported at exit belongs to none). */
static void save_input(void)
{
	int fd;

	if (!cur_data)
		return;
	fd = open(crash_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	if (fd >= 0) {
		const uint8_t *p = cur_data;
		size_t left = cur_len;

		while (left) {
			ssize_t n = write(fd, p, left);
			if (n <= 0)
				break;
			p += n;
			left -= (size_t)n;
		}
		close(fd);
		static const char msg[] = "fuzz_driver: input saved to ";
		(void)!write(2, msg, sizeof(msg) - 1);
		(void)!write(2, crash_path, strlen(crash_path));
		(void)!write(2, "\n", 1);
	}
}

static void on_crash(int sig)
{
	save_input();
	signal(sig, SIG_DFL);
	raise(sig);
}

static void run_one(const uint8_t *data, size_t len)
{
	cur_data = data;
	cur_len = len;
	LLVMFuzzerTestOneInput(data, len);
	cur_data = NULL;
	cur_len = 0;
}

static void pool_add(uint8_t *data, size_t len)
{
	if (pool_n < POOL_MAX) {
		pool[pool_n].data = data;
		pool[pool_n++].len = len;
		return;
	}
	size_t i = pool_pinned + rnd_below(POOL_MAX - pool_pinned);
	free(pool[i].data);
	pool[i].data = data;
	pool[i].len = len;
}

static int run_file(const char *path, size_t max_len)
{
	struct stat sb;
	uint8_t *buf;
	size_t got = 0;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0 || fstat(fd, &sb)) {
		fprintf(stderr, "%s: %s: %s\n", prog_name, path,
			strerror(errno));
		if (fd >= 0)
			close(fd);
		return -1;
	}
	size_t want =
	    (size_t)sb.st_size < max_len ? (size_t)sb.st_size : max_len;
	buf = malloc(want ? want : 1);
	if (!buf) {
		close(fd);
		return -1;
	}
	while (got < want) {
		ssize_t n = read(fd, buf + got, want - got);
		if (n <= 0)
			break;
		got += (size_t)n;
	}
	close(fd);
	run_one(buf, got);
	pool_add(buf, got);
	return 0;
}

static int run_path(const char *path, size_t max_len, unsigned *files)
{
	struct stat sb;

	if (stat(path, &sb)) {
		fprintf(stderr, "%s: %s: %s\n", prog_name, path,
			strerror(errno));
		return -1;
	}
	if (!S_ISDIR(sb.st_mode)) {
		(*files)++;
		return run_file(path, max_len);
	}
	struct dirent **ents;
	int n = scandir(path, &ents, NULL, alphasort); /* a fixed order */
	if (n < 0) {
		fprintf(stderr, "%s: %s: %s\n", prog_name, path,
			strerror(errno));
		return -1;
	}
	int rc = 0;
	for (int i = 0; i < n; i++) {
		char sub[4096];

		snprintf(sub, sizeof(sub), "%s/%s", path, ents[i]->d_name);
		if (ents[i]->d_name[0] != '.' && !stat(sub, &sb) &&
		    S_ISREG(sb.st_mode)) {
			(*files)++;
			if (run_file(sub, max_len))
				rc = -1;
		}
		free(ents[i]);
	}
	free(ents);
	return rc;
}

/* One mutation of buf (length *len, capacity cap) in place. */
static void mutate_once(uint8_t *buf, size_t *len, size_t cap)
{
	static const uint8_t interesting[] = {0,    1,	  0x7f, 0x80,
					      0xff, 0x10, 0x40, 0xfe};
	size_t n = *len;

	switch (rnd_below(8)) {
	case 0: /* flip one bit */
		if (n)
			buf[rnd_below(n)] ^= (uint8_t)(1u << rnd_below(8));
		break;
	case 1: /* a boundary value */
		if (n)
			buf[rnd_below(n)] =
			    interesting[rnd_below(sizeof(interesting))];
		break;
	case 2: /* a random byte */
		if (n)
			buf[rnd_below(n)] = (uint8_t)rnd();
		break;
	case 3: { /* insert random bytes */
		size_t k = 1 + rnd_below(16), at = rnd_below(n + 1);
		if (n + k > cap)
			break;
		memmove(buf + at + k, buf + at, n - at);
		for (size_t i = 0; i < k; i++)
			buf[at + i] = (uint8_t)rnd();
		*len = n + k;
		break;
	}
	case 4: { /* delete a range */
		if (!n)
			break;
		size_t at = rnd_below(n), k = 1 + rnd_below(n - at);
		memmove(buf + at, buf + at + k, n - at - k);
		*len = n - k;
		break;
	}
	case 5: { /* duplicate a range */
		if (!n)
			break;
		size_t at = rnd_below(n), k = 1 + rnd_below(n - at);
		if (n + k > cap)
			break;
		memmove(buf + at + k, buf + at, n - at);
		*len = n + k;
		break;
	}
	case 6: { /* splice in the head of another pool input */
		const struct input *o = &pool[rnd_below(pool_n)];
		size_t at = rnd_below(n + 1);
		size_t k = o->len < cap - at ? o->len : cap - at;
		memcpy(buf + at, o->data, k);
		*len = at + k > n ? at + k : n;
		break;
	}
	default: /* truncate */
		*len = rnd_below(n + 1);
		break;
	}
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: %s [--runs N] [--seed S] [--max-len L] [FILE|DIR ...]\n"
		"Run each FILE (each file of DIR) through the fuzz target, "
		"then N inputs\nmutated from them with seed S (default: "
		"--runs 0 --seed 1 --max-len 4096).\n",
		prog_name);
}

static int parse_u64(const char *s, uint64_t *out)
{
	char *end;

	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno || end == s || *end || *s == '-')
		return -1;
	*out = v;
	return 0;
}

int main(int argc, char **argv)
{
	uint64_t runs = 0, seed = 1, max_len = 4096;
	unsigned files = 0;
	int i;

	prog_name = strrchr(argv[0], '/') ? strrchr(argv[0], '/') + 1 : argv[0];
	for (i = 1; i < argc; i++) {
		uint64_t *dst = NULL;

		if (!strcmp(argv[i], "--help")) {
			usage(stdout);
			return 0;
		}
		if (!strcmp(argv[i], "--version")) {
			printf("%s (fuzz driver) 1.0.0\n", prog_name);
			return 0;
		}
		if (!strcmp(argv[i], "--runs"))
			dst = &runs;
		else if (!strcmp(argv[i], "--seed"))
			dst = &seed;
		else if (!strcmp(argv[i], "--max-len"))
			dst = &max_len;
		else if (!strcmp(argv[i], "--"))
			break;
		else if (argv[i][0] == '-' && argv[i][1])
			goto bad;
		else
			continue; /* a FILE or DIR: taken below */
		if (i + 1 >= argc || parse_u64(argv[i + 1], dst))
			goto bad;
		argv[i] = argv[i + 1] = NULL;
		i++;
	}
	if (!max_len || max_len > (64u << 20)) {
		fprintf(stderr, "%s: --max-len must be 1 .. 67108864\n",
			prog_name);
		return 2;
	}
	snprintf(crash_path, sizeof(crash_path), "fuzz-crash-%s", prog_name);
	/* a target's own abort() */
	signal(SIGABRT, on_crash);
#ifdef FUZZ_SANITIZED
	/* the sanitizers report faults themselves (their SIGSEGV handler
	 * must stay), and call this before the process dies */
	__sanitizer_set_death_callback(save_input);
#else
	{
		/* its own stack: a stack overflow must still save */
		static char alt[1 << 16];
		stack_t ss = {.ss_sp = alt, .ss_size = sizeof(alt)};
		struct sigaction sa = {.sa_handler = on_crash,
				       .sa_flags = SA_ONSTACK};
		static const int sigs[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE};

		sigaltstack(&ss, NULL);
		for (unsigned k = 0; k < sizeof(sigs) / sizeof(sigs[0]); k++)
			sigaction(sigs[k], &sa, NULL);
	}
#endif
	rng_state = seed * 0x9e3779b97f4a7c15ULL + 1;

	for (int j = 1; j < argc; j++)
		if (argv[j] && strcmp(argv[j], "--") &&
		    run_path(argv[j], (size_t)max_len, &files))
			return 1;
	/* the files stay in the pool; a mutation starts from one of them
	 * or from an input generated since */
	pool_pinned = pool_n < POOL_MAX / 2 ? pool_n : POOL_MAX / 2;
	if (!pool_n)
		pool_add(calloc(1, 1), 0);

	uint8_t *buf = malloc((size_t)max_len);
	if (!buf)
		return 1;
	for (uint64_t r = 0; r < runs; r++) {
		size_t len;

		if (rnd_below(16) == 0) { /* now and then, fresh random bytes */
			len = rnd_below((size_t)max_len + 1);
			for (size_t k = 0; k < len; k++)
				buf[k] = (uint8_t)rnd();
		} else {
			/* half the time one of the files: without coverage
			 * feedback a walk drifts away from the well-formed
			 * inputs, and most cases worth finding lie a mutation
			 * or two from one */
			const struct input *base =
			    pool_pinned && rnd_below(2)
				? &pool[rnd_below(pool_pinned)]
				: &pool[rnd_below(pool_n)];
			len = base->len;
			memcpy(buf, base->data, len);
			for (unsigned m = 1 + rnd_below(4); m; m--)
				mutate_once(buf, &len, (size_t)max_len);
		}
		run_one(buf, len);
		uint8_t *keep = malloc(len ? len : 1);
		if (keep) {
			memcpy(keep, buf, len);
			pool_add(keep, len);
		}
	}
	free(buf);
	for (unsigned k = 0; k < pool_n; k++)
		free(pool[k].data);
	printf("{\"target\":\"%s\",\"seed\":%llu,\"files\":%u,\"runs\":%llu}\n",
	       prog_name, (unsigned long long)seed, files,
	       (unsigned long long)runs);
	return 0;
bad:
	fprintf(stderr, "%s: bad option '%s'\n", prog_name, argv[i]);
	usage(stderr);
	return 2;
}
