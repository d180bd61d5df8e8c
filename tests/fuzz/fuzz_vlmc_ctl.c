/* SPDX-License-Identifier: MIT */
/*
 * Fuzz target: vlmc's control line protocol, the parts that need no
 * segment (peers/vlmc/ctl_proto.c): the split of a command line into
 * words, and the readers of what the words give, volume names
 * (vlmc_name_valid), volume and object sizes (vlmc_ctl_volume_size,
 * vlmc_ctl_obj_size, over peer_parse_size) and plain numbers
 * (peer_parse_u64). Any local user who may open the socket sends such
 * lines; so do scripts through `xsegctl volume`.
 *
 * Input: the bytes a client sends. As vlmc_ctl_read_line takes them, the
 * line is what comes before the first '\n' (which it keeps), or all of it
 * when the client closes first; one without a '\n' in its first
 * VLMC_CTL_LINE_MAX - 1 bytes is refused before any parsing.
 *
 * Invariants, each checked against a reference written here from the
 * documentation (ctl_proto.h, peer_util.h, volume.h), not from the code:
 *   - the words are exactly the line's first VLMC_CTL_MAX_ARGS runs of
 *     bytes other than space, tab, CR and LF before any NUL, in order,
 *     non-empty, inside the line;
 *   - a name is accepted exactly when it has 1 .. VLMC_NAME_MAX bytes,
 *     each from [A-Za-z0-9._@+=-];
 *   - a number or size is a decimal, or 0x and hex digits; a size then
 *     takes an optional k, m, g, t, p or e (times 2^10 .. 2^60) then an
 *     optional i then an optional b (each letter in either case: 4kb,
 *     4KIB, 4Ki), or a lone b or B. It is
 *     accepted with exactly the value the reference computes, refused
 *     with -ERANGE when that value does not fit 64 bits (never wrapped),
 *     and refused when malformed; a volume size must be 1 .. 1P, an
 *     object size a power of two 4k .. 64M;
 *   - an accepted size reads back the same printed in bytes and printed
 *     with its largest exact suffix (what error messages and `volume
 *     info` print).
 */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctl_proto.h"
#include "peer_util.h"
#include "volume.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The reference reading of a number or size: its value (saturated at
 * 2^64, "overflow" then set) or malformed. */
struct ref_num {
	bool ok;       /* the syntax is right */
	bool overflow; /* and the value does not fit 64 bits */
	uint64_t value;
};

static int hex_digit(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* The leading number of s; *end past it. False if there is none. */
static bool ref_prefix(const char *s, struct ref_num *n, const char **end)
{
	unsigned base = 10;
	unsigned __int128 v = 0;
	const char *p = s;

	n->overflow = false;
	if (!(*p >= '0' && *p <= '9'))
		return false;
	if (p[0] == '0' && (p[1] == 'x' || p[1] == 'X') && hex_digit(p[2]) >= 0)
		base = 16, p += 2;
	for (; *p; p++) {
		int d = hex_digit(*p);

		if (d < 0 || (unsigned)d >= base)
			break;
		v = v * base + (unsigned)d;
		if (v > UINT64_MAX) {
			n->overflow = true;
			v = (unsigned __int128)UINT64_MAX + 1; /* saturate */
		}
	}
	n->value = (uint64_t)v;
	*end = p;
	return true;
}

static struct ref_num ref_u64(const char *s)
{
	struct ref_num n = {0};
	const char *end;

	n.ok = ref_prefix(s, &n, &end) && !*end;
	return n;
}

static struct ref_num ref_size(const char *s)
{
	static const char letters[] = "kmgtpe";
	struct ref_num n = {0};
	const char *end, *l;

	if (!ref_prefix(s, &n, &end))
		return n;
	if (!*end) {
		n.ok = true;
		return n;
	}
	if ((*end == 'b' || *end == 'B') && !end[1]) {
		n.ok = true;
		return n;
	}
	l = strchr(letters, tolower((unsigned char)*end));
	if (!l)
		return n; /* not a suffix letter of either case */
	/* then an optional i and an optional b, either case, and nothing */
	end++;
	end += *end == 'i' || *end == 'I';
	end += *end == 'b' || *end == 'B';
	if (*end)
		return n;
	n.ok = true;
	unsigned shift = 10 * (unsigned)(l - letters + 1);
	if (!n.overflow && n.value > (UINT64_MAX >> shift))
		n.overflow = true;
	if (!n.overflow)
		n.value <<= shift;
	return n;
}

/* A parser's answer against the reference: accepted with its value,
 * -ERANGE for a value past 64 bits, refused when malformed. */
static void check_number(const char *what, const struct ref_num *ref, int rc,
			 uint64_t got, bool in_range)
{
	(void)what;
	if (!ref->ok) {
		/* malformed; a number that overflows before the junk may
		 * be refused for either reason */
		if (rc != -EINVAL && rc != -ERANGE)
			abort();
		return;
	}
	if (ref->overflow) {
		if (rc != -ERANGE)
			abort();
		return;
	}
	if (!in_range) {
		if (!rc)
			abort();
		return;
	}
	if (rc || got != ref->value)
		abort();
}

/* An accepted size printed in bytes, and with its largest exact suffix,
 * reads back the same through parse. */
static void size_round_trip(uint64_t v, int (*parse)(const char *, uint64_t *))
{
	static const char suffix[] = "KMGTPE";
	char buf[32];
	uint64_t again = ~v;

	snprintf(buf, sizeof(buf), "%" PRIu64, v);
	if (parse(buf, &again) || again != v)
		abort();
	for (int i = 5; i >= 0; i--) {
		unsigned shift = 10 * (unsigned)(i + 1);

		if (v && !(v & ((1ULL << shift) - 1))) {
			snprintf(buf, sizeof(buf), "%" PRIu64 "%c", v >> shift,
				 suffix[i]);
			again = ~v;
			if (parse(buf, &again) || again != v)
				abort();
			break;
		}
	}
}

static int parse_size(const char *s, uint64_t *v)
{
	return peer_parse_size(s, v);
}

static bool ref_name_ok(const char *w)
{
	size_t n = strlen(w);

	if (n < 1 || n > VLMC_NAME_MAX)
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = w[i];

		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
		      (c >= '0' && c <= '9') || strchr("._@+=-", c)))
			return false;
	}
	return true;
}

static void check_word(const char *w)
{
	struct ref_num ref;
	uint64_t v, got;
	int rc;

	if (vlmc_name_valid(w, strlen(w)) != ref_name_ok(w))
		abort();

	ref = ref_u64(w);
	got = 0;
	rc = peer_parse_u64(w, &got);
	check_number("u64", &ref, rc, got, true);

	ref = ref_size(w);
	got = 0;
	rc = peer_parse_size(w, &got);
	check_number("size", &ref, rc, got, true);
	if (!rc)
		size_round_trip(got, parse_size);

	/* SIZE of create and resize: 1 .. 1P */
	v = ref.value;
	got = 0;
	rc = vlmc_ctl_volume_size(w, &got);
	check_number("volume size", &ref, rc, got,
		     v >= 1 && v <= VLMC_MAX_VOLUME_SIZE);
	if (!rc)
		size_round_trip(got, vlmc_ctl_volume_size);

	/* OBJSIZE of create: a power of two 4k .. 64M */
	got = 0;
	rc = vlmc_ctl_obj_size(w, &got);
	if (!rc && (!ref.ok || ref.overflow || got != v || (got & (got - 1)) ||
		    got < 4096 || got > (64u << 20)))
		abort();
	if (rc && ref.ok && !ref.overflow && !(v & (v - 1)) && v >= 4096 &&
	    v <= (64u << 20))
		abort();
}

static bool is_sep(char c)
{
	return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const uint8_t *nl = memchr(data, '\n', size);
	size_t len = nl ? (size_t)(nl - data) + 1 : size;
	char *line, *copy, *argv[VLMC_CTL_MAX_ARGS];
	int argc, want = 0;

	/* refused by vlmc_ctl_read_line (EMSGSIZE), never split: it must
	 * find the '\n' with a byte of the buffer left for the NUL */
	if (len > VLMC_CTL_LINE_MAX - 1 ||
	    (!nl && len == VLMC_CTL_LINE_MAX - 1))
		return 0;
	/* heap copies of exactly the line: ASan sees a read past it */
	line = malloc(len + 1);
	copy = malloc(len + 1);
	if (!line || !copy)
		abort();
	memcpy(line, data, len);
	line[len] = 0;
	memcpy(copy, line, len + 1);

	argc = vlmc_ctl_split(line, argv, VLMC_CTL_MAX_ARGS);
	if (argc < 0 || argc > VLMC_CTL_MAX_ARGS)
		abort();
	/* the reference split of the untouched copy, word by word */
	for (size_t i = 0; copy[i];) {
		size_t j = i;

		if (is_sep(copy[i])) {
			i++;
			continue;
		}
		while (copy[j] && !is_sep(copy[j]))
			j++;
		if (want < argc) {
			/* the same word, at the same place, non-empty */
			if (argv[want] != line + i ||
			    strlen(argv[want]) != j - i ||
			    memcmp(argv[want], copy + i, j - i))
				abort();
		}
		char saved = copy[j];

		copy[j] = 0;
		check_word(copy + i);
		copy[j] = saved;
		want++;
		i = j;
	}
	if (argc != (want < VLMC_CTL_MAX_ARGS ? want : VLMC_CTL_MAX_ARGS))
		abort();
	free(copy);
	free(line);
	return 0;
}
