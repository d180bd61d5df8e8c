/* SPDX-License-Identifier: MIT */
/*
 * Crash test: a child process writes, deletes and copies objects (content
 * derived from a seed), flushing now and then, and records in shared
 * memory what it was about to do and what was flushed. The parent kills it
 * with SIGKILL at a random moment, reopens the store and requires that the
 * store equals the state after some prefix of the issued operations that
 * includes every flushed one: flushed data reads back exactly, and
 * nothing else reads back as anything but old or new content.
 * Small segments, a short sync interval and frequent checkpoints put the
 * kill inside segment switches and checkpoints too; every fourth child
 * runs on a fault-injecting disk that fills up mid-record, leaving a torn
 * record for recovery to cut; a third use the io_uring backend, a fifth
 * read through mappings of the log.
 * FUA writes and flushes make the store zero-fill the log ahead of its
 * tail, so most kills leave a zero tail, which recovery must take as the
 * clean end (no torn tail reported, nothing lost); the test counts them
 * and requires that it saw some.
 */
#include <check.h>
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "store.h"
#include "test_blocker_util.h"

#define NOBJ	   4
#define OBJ_MAX	   (96 * 1024)
#define MAXOPS	   20000
#define ITERATIONS 50 /* BLOCKER_CRASH_ITERATIONS overrides */

enum op_kind { OP_WRITE, OP_FUA_WRITE, OP_DELETE, OP_COPY, OP_FLUSH };

struct op {
	uint8_t kind, obj, obj2;
	uint32_t off, len;
	uint64_t seed; /* 0: zeros */
};

struct shared {
	uint64_t issued;  /* ops[0..issued) may have happened */
	uint64_t flushed; /* ops[0..flushed) are durable */
	struct op ops[MAXOPS];
};

struct model {
	bool exists[NOBJ];
	uint64_t size[NOBJ];
	uint8_t data[NOBJ][OBJ_MAX];
};

static char dir[256];
static struct shared *sh;
static struct model *base, *cur, *seen;
static pid_t child = -1;

static const char *oname(int i)
{
	static const char *n[NOBJ] = {"vol_a.0001", "vol_a.0002", "snap:b",
				      "c@x"};
	return n[i];
}

static uint64_t rnd(uint64_t *st)
{
	*st ^= *st << 13;
	*st ^= *st >> 7;
	*st ^= *st << 17;
	return *st;
}

static void content(uint8_t *buf, const struct op *op)
{
	if (op->seed == 0)
		memset(buf, 0, op->len);
	else
		tb_fill(buf, op->len, op->seed, op->off);
}

static void apply(struct model *m, const struct op *op)
{
	switch (op->kind) {
	case OP_WRITE:
	case OP_FUA_WRITE:
		content(m->data[op->obj] + op->off, op);
		if (!m->exists[op->obj])
			m->size[op->obj] = 0;
		m->exists[op->obj] = true;
		if (op->off + op->len > m->size[op->obj])
			m->size[op->obj] = op->off + op->len;
		break;
	case OP_DELETE:
		if (m->exists[op->obj]) {
			m->exists[op->obj] = false;
			memset(m->data[op->obj], 0, OBJ_MAX);
		}
		break;
	case OP_COPY:
		if (m->exists[op->obj]) {
			m->exists[op->obj2] = true;
			m->size[op->obj2] = m->size[op->obj];
			memcpy(m->data[op->obj2], m->data[op->obj], OBJ_MAX);
		}
		break;
	}
}

static void store_opts(struct blocker_opts *o)
{
	blocker_opts_init(o);
	o->sync_interval_ms = 20;
	o->checkpoint_bytes = 512 * 1024;
	o->log = tb_log_fn;
	o->log_arg = NULL;
}

static void quiet_log(void *arg, enum blocker_log_level l, const char *m)
{
	(void)arg;
	(void)l;
	(void)m;
}

/*
 * fault_budget >= 0: the disk "fills up" after that many bytes, cutting a
 * record short (a torn write) and degrading the store; the child then
 * waits for its SIGKILL.
 */
static void child_main(uint64_t seed, int64_t fault_budget)
{
	struct blocker_opts o;
	struct blocker_store *s;
	struct blocker_io_fault f;
	static uint8_t buf[OBJ_MAX];

	store_opts(&o);
	o.log = quiet_log;
	if (seed % 3 == 0)
		o.io = &blocker_io_uring; /* a third of the children */
	o.mmap_reads = seed % 5 == 1;	  /* a fifth read through mappings */
	if (fault_budget >= 0) {
		blocker_io_fault_init(&f, NULL, NULL);
		blocker_io_fault_arm(&f, fault_budget, ENOSPC, 0);
		o.io = &blocker_io_fault_ops;
		o.io_ctx = &f;
	}
	if (blocker_open(dir, &o, &s))
		_exit(3);
	for (uint64_t i = 0; i < MAXOPS; i++) {
		struct op op = {0};
		uint64_t r = rnd(&seed) % 100;
		int e = 0;

		op.obj = rnd(&seed) % NOBJ;
		if (r < 4)
			op.kind = OP_DELETE;
		else if (r < 8)
			op.kind = OP_COPY;
		else if (r < 16)
			op.kind = OP_FLUSH;
		else
			op.kind = r < 26 ? OP_FUA_WRITE : OP_WRITE;
		op.obj2 = (op.obj + 1 + rnd(&seed) % (NOBJ - 1)) % NOBJ;
		op.len = 1 + rnd(&seed) % (r & 1 ? 1500 : 20000);
		op.off = rnd(&seed) % (OBJ_MAX - op.len + 1);
		if (rnd(&seed) % 4 == 0)
			op.off &= ~511u; /* chunk aligned: dedup chances */
		r = rnd(&seed) % 10;
		op.seed = r == 0 ? 0 : r < 4 ? r : seed | 16;
		sh->ops[i] = op;
		__atomic_store_n(&sh->issued, i + 1, __ATOMIC_RELEASE);
		switch (op.kind) {
		case OP_WRITE:
		case OP_FUA_WRITE:
			content(buf, &op);
			e = blocker_write(
			    s, oname(op.obj), strlen(oname(op.obj)), op.off,
			    op.len, buf,
			    op.kind == OP_FUA_WRITE ? BLOCKER_FUA : 0);
			break;
		case OP_DELETE:
			e = blocker_delete(s, oname(op.obj),
					   strlen(oname(op.obj)));
			if (e == -ENOENT)
				e = 0;
			break;
		case OP_COPY:
			e = blocker_copy(s, oname(op.obj),
					 strlen(oname(op.obj)), oname(op.obj2),
					 strlen(oname(op.obj2)));
			if (e == -ENOENT)
				e = 0;
			break;
		case OP_FLUSH:
			e = blocker_flush(s);
			break;
		}
		if (e && fault_budget >= 0)
			for (;;)
				pause();
		if (e)
			_exit(4);
		if (op.kind == OP_FLUSH || op.kind == OP_FUA_WRITE)
			__atomic_store_n(&sh->flushed, i + 1, __ATOMIC_RELEASE);
	}
	blocker_close(s);
	_exit(0);
}

/* size and number of the last segment file log.NNNNNN */
static off_t last_segment_size(int *last)
{
	char path[512];
	struct stat st;
	off_t size = -1;

	for (int i = 0;; i++) {
		snprintf(path, sizeof(path), "%s/log.%06d", dir, i);
		if (stat(path, &st) < 0)
			return size;
		size = st.st_size;
		*last = i;
	}
}

static void read_store(struct blocker_store *s, struct model *m)
{
	for (int i = 0; i < NOBJ; i++) {
		const char *n = oname(i);
		int r = blocker_info(s, n, strlen(n), &m->size[i]);

		ck_assert(r == 0 || r == -ENOENT);
		m->exists[i] = r == 0;
		memset(m->data[i], 0, OBJ_MAX);
		if (!m->exists[i])
			continue;
		ck_assert_uint_le(m->size[i], OBJ_MAX);
		ck_assert_int_eq(
		    blocker_read(s, n, strlen(n), 0, OBJ_MAX, m->data[i]), 0);
	}
}

static bool same(const struct model *a, const struct model *b)
{
	for (int i = 0; i < NOBJ; i++) {
		if (a->exists[i] != b->exists[i])
			return false;
		if (a->exists[i] && a->size[i] != b->size[i])
			return false;
		if (memcmp(a->data[i], b->data[i], OBJ_MAX))
			return false;
	}
	return true;
}

static void setup(void)
{
	ttmp_mkdtemp(dir, sizeof(dir), "store");
	sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE,
		  MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	ck_assert_ptr_ne(sh, MAP_FAILED);
	base = calloc(1, sizeof(*base));
	cur = calloc(1, sizeof(*cur));
	seen = calloc(1, sizeof(*seen));
}

static void teardown(void)
{
	if (child > 0) {
		kill(child, SIGKILL);
		waitpid(child, NULL, 0);
	}
	ttmp_rmtree(dir);
	munmap(sh, sizeof(*sh));
	free(base);
	free(cur);
	free(seen);
}

START_TEST(test_crash_loop)
{
	struct blocker_opts o;
	struct blocker_store *s;
	uint64_t seed = (uint64_t)time(NULL) * 2654435761u | 1, problems = 1;
	unsigned total_ops = 0, total_flushed = 0, kills_mid = 0,
		 zero_tails = 0;
	const char *env = getenv("BLOCKER_CRASH_ITERATIONS");
	int iterations = env ? atoi(env) : ITERATIONS;
	struct tb_log lg;

	printf("crash test seed %llu\n", (unsigned long long)seed);
	store_opts(&o);
	o.chunk_size = 512;
	o.segment_size = 1u << 20;
	o.log_arg = &lg;
	ck_assert_int_eq(blocker_create(dir, &o), 0);
	for (int it = 0; it < iterations; it++) {
		uint64_t cseed = rnd(&seed) | 1;
		int st;

		memset(sh, 0, sizeof(*sh));
		child = fork();
		ck_assert_int_ge(child, 0);
		if (child == 0)
			child_main(cseed, it % 4 == 3 ? (int64_t)(rnd(&seed) %
								  (256 * 1024))
						      : -1);
		usleep(20000 + rnd(&seed) % 300000);
		kill(child, SIGKILL);
		ck_assert_int_eq(waitpid(child, &st, 0), child);
		child = -1;
		/* killed, or (rarely) finished all its work */
		ck_assert(WIFSIGNALED(st) ||
			  (WIFEXITED(st) && WEXITSTATUS(st) == 0));

		uint64_t issued =
		    __atomic_load_n(&sh->issued, __ATOMIC_ACQUIRE);
		uint64_t flushed = sh->flushed;
		int last = 0;
		off_t file_size = last_segment_size(&last);
		struct blocker_stats bst;
		memset(&lg, 0, sizeof(lg));
		ck_assert_int_eq(blocker_open(dir, &o, &s), 0);
		read_store(s, seen);
		blocker_get_stats(s, &bst);
		/* the last segment extends past the recovered end: either a
		 * torn tail was cut (and reported) or it was all zeros */
		ck_assert_int_ge(file_size, 0);
		if ((uint64_t)last * o.segment_size + file_size >
			bst.log_bytes &&
		    !strstr(lg.text, "torn tail")) {
			ck_assert_uint_eq(bst.truncated_bytes, 0);
			zero_tails++;
		}

		*cur = *base;
		for (uint64_t k = 0; k < flushed; k++)
			apply(cur, &sh->ops[k]);
		uint64_t k = flushed;
		bool ok = same(cur, seen);
		while (!ok && k < issued) {
			apply(cur, &sh->ops[k++]);
			ok = same(cur, seen);
		}
		if (!ok)
			ck_abort_msg("iteration %d: store matches no prefix of "
				     "ops %llu..%llu (seed %llu)",
				     it, (unsigned long long)flushed,
				     (unsigned long long)issued,
				     (unsigned long long)cseed);
		if (strstr(lg.text, "torn tail"))
			kills_mid++;
		total_ops += issued;
		total_flushed += flushed;
		*base = *seen;
		ck_assert_int_eq(blocker_close(s), 0);
	}
	printf("crash test: %d kills (every 4th on a disk that fills up), %u "
	       "ops issued, %u flushed, %u torn tails cut, %u zero tails "
	       "taken as the end\n",
	       iterations, total_ops, total_flushed, kills_mid, zero_tails);
	ck_assert_uint_gt(total_flushed, 0);
	ck_assert_uint_gt(zero_tails, 0);
	ck_assert_int_eq(blocker_check(dir, NULL, NULL, NULL, &problems), 0);
	ck_assert_uint_eq(problems, 0);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("blocker_crash");
	TCase *tc = tcase_create("core");
	SRunner *sr;
	int failed;

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 500);
	tcase_add_test(tc, test_crash_loop);
	suite_add_tcase(s, tc);
	sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
