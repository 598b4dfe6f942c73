// SPDX-License-Identifier: MIT
/*
 * The coordinator's write-ahead log and snapshot: recovery from a log cut at
 * every byte (a torn last record is cut, and logged), corruption in the
 * middle of the log and records that do not apply (refused, naming the
 * offset, the files untouched), snapshot + log replay, stale logs, invalid
 * snapshots, versions, and the check and repair of a data directory.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <dirent.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <zlib.h>

#include "coord.h"
#include "coord_int.h"
#include "frame.h"
#include "log.h"
#include "msg.h"
#include "wal.h"

#define MIB	  (UINT64_C(1) << 20)
#define T_NOW	  1000
#define T_CHANGES 19

struct t_buf {
	uint8_t *p;
	size_t len;
};

struct t_wal {
	char *dir;			    /* temporary, removed in teardown */
	struct t_buf expect[T_CHANGES + 1]; /* state after k changes */
	uint64_t ends[T_CHANGES + 1];	    /* wal size after k changes */
};

static int t_rm_one(const char *path, const struct stat *st, int flag,
		    struct FTW *ftw)
{
	return remove(path);
}

static void t_rmrf(const char *path)
{
	nftw(path, t_rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

static char *t_path(const char *dir, const char *name)
{
	char *p;

	assert_true(asprintf(&p, "%s/%s", dir, name) > 0);
	return p;
}

static struct t_buf t_file_read(const char *path)
{
	struct t_buf b = { 0 };
	struct stat st;
	int fd;

	fd = open(path, O_RDONLY);
	assert_true(fd >= 0);
	assert_int_equal(fstat(fd, &st), 0);
	b.len = (size_t)st.st_size;
	b.p = malloc(b.len + 1);
	assert_non_null(b.p);
	assert_int_equal(read(fd, b.p, b.len), (ssize_t)b.len);
	close(fd);
	return b;
}

static void t_file_write(const char *path, const uint8_t *p, size_t len)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);

	assert_true(fd >= 0);
	assert_int_equal(write(fd, p, len), (ssize_t)len);
	close(fd);
}

static uint64_t t_file_size(const char *path)
{
	struct stat st;

	assert_int_equal(stat(path, &st), 0);
	return (uint64_t)st.st_size;
}

static int t_file_exists(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0;
}

/* Points stderr at /dev/null; *saved keeps the old one. */
static void t_stderr_mute(int *saved)
{
	int null = open("/dev/null", O_WRONLY);

	assert_true(null >= 0);
	fflush(stderr);
	*saved = dup(2);
	assert_true(*saved >= 0);
	dup2(null, 2);
	close(null);
}

static void t_stderr_restore(int saved)
{
	fflush(stderr);
	dup2(saved, 2);
	close(saved);
}

/* Sends stderr (the log) to a temporary file until t_capture_end(). */
struct t_capture {
	int saved;
	FILE *f;
};

static void t_capture_begin(struct t_capture *cap)
{
	cap->f = tmpfile();
	assert_non_null(cap->f);
	fflush(stderr);
	cap->saved = dup(2);
	assert_true(cap->saved >= 0);
	assert_true(dup2(fileno(cap->f), 2) == 2);
}

/* Restores stderr; returns what was logged (free() it). */
static char *t_capture_end(struct t_capture *cap)
{
	long len;
	char *text;

	t_stderr_restore(cap->saved);
	assert_int_equal(fseek(cap->f, 0, SEEK_END), 0);
	len = ftell(cap->f);
	assert_true(len >= 0);
	rewind(cap->f);
	text = calloc(1, (size_t)len + 1);
	assert_non_null(text);
	assert_int_equal(fread(text, 1, (size_t)len, cap->f), (size_t)len);
	fclose(cap->f);
	return text;
}

/* Fails unless @text holds the line part @needle. */
static void t_log_expect(const char *text, const char *needle, const char *what,
			 uint64_t arg)
{
	if (!strstr(text, needle))
		fail_msg("%s %llu: no '%s' in the log:\n%s", what,
			 (unsigned long long)arg, needle, text);
}

/* Entries in @dir (besides . and ..). */
static int t_dir_entries(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	int n = 0;

	assert_non_null(d);
	while ((e = readdir(d)))
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
			n++;
	closedir(d);
	return n;
}

static uint64_t *t_ids(uint32_t n, ...)
{
	uint64_t *ids = malloc(n * sizeof(*ids));
	va_list ap;

	assert_non_null(ids);
	va_start(ap, n);
	for (uint32_t i = 0; i < n; i++)
		ids[i] = va_arg(ap, uint64_t);
	va_end(ap);
	return ids;
}

static void t_join_req(struct msg *m, const char *name, uint64_t pool,
		       uint64_t instance)
{
	msg_init(m, MSG_T_NODE_JOIN);
	strcpy(m->name, name);
	snprintf(m->data_addr, sizeof(m->data_addr), "10.0.0.%d:7800", name[0]);
	m->pool_size = pool;
	m->instance = instance;
}

static void t_create_req(struct msg *m, const char *name, uint64_t size,
			 uint64_t chunk_size)
{
	msg_init(m, MSG_T_REGION_CREATE);
	strcpy(m->name, name);
	m->size = size;
	m->chunk_size = chunk_size;
}

static void t_endpoint_req(struct msg *m, uint64_t node, uint64_t peer,
			   uint64_t qpn)
{
	msg_init(m, MSG_T_ENDPOINT_PUT);
	m->node = node;
	m->peer = peer;
	m->qpn = qpn;
	m->lid = 3;
	m->gid_index = 1;
	m->psn = qpn * 7;
	m->mtu = 1024;
	for (int i = 0; i < MSG_GID_LEN; i++)
		m->gid[i] = (uint8_t)(qpn + (uint64_t)i);
}

static void t_mr_req(struct msg *m, uint64_t node)
{
	msg_init(m, MSG_T_MR_PUT);
	m->node = node;
	m->mr_addr = 0x7f0000000000 + (node << 32);
	m->rkey = 0xabc0 + node;
	m->mr_len = 64 * MIB;
}

/* Change @i of the test sequence; every one of them writes one record. */
static void t_change(int i, struct msg *m)
{
	switch (i) {
	case 0:
		t_join_req(m, "a", 64 * MIB, 11);
		return;
	case 1:
		t_join_req(m, "b", 64 * MIB, 22);
		return;
	case 2:
		t_join_req(m, "c", 64 * MIB, 33);
		return;
	case 3:
		t_create_req(m, "r1", 10 * MIB, 0);
		return;
	case 4:
		t_create_req(m, "r2", 4 * MIB, 0);
		m->place = t_ids(1, 2);
		m->n_place = 1;
		return;
	case 5:
		t_create_req(m, "r3", 6 * MIB - 4096, 0);
		m->owners = t_ids(3, 3, 1, 2);
		m->n_owners = 3;
		return;
	case 6:
		t_endpoint_req(m, 1, 2, 0x101);
		return;
	case 7:
		t_endpoint_req(m, 2, 1, 0x201);
		return;
	case 8:
		t_mr_req(m, 1);
		return;
	case 9:
		t_mr_req(m, 2);
		return;
	case 10:
		msg_init(m, MSG_T_REGION_DELETE);
		strcpy(m->name, "r2");
		return;
	case 11:
		t_create_req(m, "r4", 8 * MIB, 4 * MIB);
		m->place = t_ids(2, 2, 3);
		m->n_place = 2;
		return;
	case 12: /* b restarted */
		t_join_req(m, "b", 32 * MIB, 23);
		return;
	case 13:
		t_endpoint_req(m, 2, 3, 0x203);
		return;
	case 14:
		t_mr_req(m, 3);
		return;
	case 15:
		t_join_req(m, "d", 8 * MIB, 44);
		return;
	case 16:
		t_create_req(m, "r5", 2 * MIB, 0);
		return;
	case 17:
		msg_init(m, MSG_T_REGION_DELETE);
		strcpy(m->name, "r1");
		return;
	case 18:
		t_endpoint_req(m, 1, 2, 0x102);
		return;
	}
	fail_msg("no change %d", i);
}

static void t_apply(struct coord *c, int i)
{
	struct msg req, rep;

	t_change(i, &req);
	assert_int_equal(coord_handle(c, &req, &rep, T_NOW), 0);
	if (rep.type == MSG_T_ERROR)
		fail_msg("change %d: error %llu: %s", i,
			 (unsigned long long)rep.err, rep.text);
	msg_fini(&req);
	msg_fini(&rep);
	assert_int_equal(coord_sync(c), 0);
}

static int t_dump_emit(void *arg, const struct msg *rec)
{
	struct t_buf *b = arg;
	uint8_t *p;
	size_t len;
	int ret;

	ret = msg_encode(rec, &p, &len);
	if (ret)
		return ret;
	b->p = realloc(b->p, b->len + sizeof(len) + len);
	assert_non_null(b->p);
	memcpy(b->p + b->len, &len, sizeof(len));
	memcpy(b->p + b->len + sizeof(len), p, len);
	b->len += sizeof(len) + len;
	free(p);
	return 0;
}

/* The durable state of @c as bytes: every table row, then the epoch. */
static struct t_buf t_state(const struct coord *c)
{
	struct t_buf b = { 0 };

	assert_int_equal(coord_records_dump(c, t_dump_emit, &b), 0);
	b.p = realloc(b.p, b.len + sizeof(c->epoch));
	assert_non_null(b.p);
	memcpy(b.p + b.len, &c->epoch, sizeof(c->epoch));
	b.len += sizeof(c->epoch);
	return b;
}

static void t_state_expect(const struct coord *c, const struct t_buf *want,
			   const char *what, uint64_t arg)
{
	struct t_buf got = t_state(c);

	if (got.len != want->len || memcmp(got.p, want->p, got.len))
		fail_msg("%s %llu: recovered state differs (%zu vs %zu bytes)",
			 what, (unsigned long long)arg, got.len, want->len);
	free(got.p);
}

static struct coord *t_open(const char *data_dir, uint64_t snapshot_every)
{
	struct coord_cfg cfg = { .data_dir = data_dir,
				 .snapshot_every = snapshot_every };
	struct coord *c = NULL;
	int ret;

	ret = coord_create(&cfg, T_NOW, &c);
	if (ret)
		fail_msg("coord_create(%s): %s", data_dir, strerror(-ret));
	return c;
}

static int t_open_err(const char *data_dir)
{
	struct coord_cfg cfg = { .data_dir = data_dir };
	struct coord *c = NULL;
	int ret;

	ret = coord_create(&cfg, T_NOW, &c);
	coord_destroy(c);
	return ret;
}

/* Fills @t: the state after each prefix of the changes (in memory) and
 * the wal size after each change of a logged run in t->dir/base. */
static int t_setup(void **state)
{
	const char *tmp = getenv("TMPDIR");
	struct coord_cfg mem = { 0 };
	struct t_wal *t;
	struct coord *c;
	char *base, *wal;

	log_init("test_wal", LOG_ERR);
	t = calloc(1, sizeof(*t));
	assert_non_null(t);
	assert_true(asprintf(&t->dir, "%s/test_wal.XXXXXX",
			     tmp && *tmp ? tmp : "/tmp") > 0);
	assert_non_null(mkdtemp(t->dir));

	for (int k = 0; k <= T_CHANGES; k++) {
		assert_int_equal(coord_create(&mem, T_NOW, &c), 0);
		for (int i = 0; i < k; i++)
			t_apply(c, i);
		t->expect[k] = t_state(c);
		coord_destroy(c);
	}

	base = t_path(t->dir, "base");
	wal = t_path(base, "wal");
	c = t_open(base, 1000000);
	t->ends[0] = t_file_size(wal);
	assert_int_equal(t->ends[0], WAL_HDR_LEN);
	for (int i = 0; i < T_CHANGES; i++) {
		t_apply(c, i);
		t->ends[i + 1] = t_file_size(wal);
		assert_true(t->ends[i + 1] > t->ends[i]);
	}
	t_state_expect(c, &t->expect[T_CHANGES], "live after", T_CHANGES);
	coord_destroy(c);
	free(wal);
	free(base);
	*state = t;
	return 0;
}

static int t_teardown(void **state)
{
	struct t_wal *t = *state;

	t_rmrf(t->dir);
	for (int k = 0; k <= T_CHANGES; k++)
		free(t->expect[k].p);
	free(t->dir);
	free(t);
	return 0;
}

/* Changes whose records lie wholly in the first @len bytes of the wal. */
static int t_complete(const struct t_wal *t, uint64_t len)
{
	int k = 0;

	while (k < T_CHANGES && t->ends[k + 1] <= len)
		k++;
	return k;
}

/* Recovers a data dir whose wal is @wal; expects @k changes and a wal of
 * @size bytes afterwards. */
static void t_recover_expect(const struct t_wal *t, const char *dir,
			     const uint8_t *wal, size_t wal_len, int k,
			     uint64_t size, const char *what, uint64_t arg)
{
	struct coord_cfg cfg = { .data_dir = dir, .snapshot_every = 1000000 };
	char *path = t_path(dir, "wal");
	struct t_capture cap;
	char *logged, line[512];
	struct coord *c;
	int ret;

	mkdir(dir, 0700);
	t_file_write(path, wal, wal_len);
	t_capture_begin(&cap);
	log_level_cur = LOG_WARN;
	ret = coord_create(&cfg, T_NOW, &c);
	log_level_cur = LOG_ERR;
	logged = t_capture_end(&cap);
	if (ret)
		fail_msg("%s %llu: not recovered (%s):\n%s", what,
			 (unsigned long long)arg, strerror(-ret), logged);
	t_state_expect(c, &t->expect[k], what, arg);
	coord_destroy(c);
	/* A cut is logged with its offset and size. */
	if (size < wal_len) {
		snprintf(line, sizeof(line),
			 "%s: torn last record at byte %llu: ", path,
			 (unsigned long long)size);
		t_log_expect(logged, line, what, arg);
		snprintf(line, sizeof(line), "; cutting %llu bytes",
			 (unsigned long long)(wal_len - size));
		t_log_expect(logged, line, what, arg);
	} else if (strstr(logged, "torn")) {
		fail_msg("%s %llu: nothing to cut, but: %s", what,
			 (unsigned long long)arg, logged);
	}
	free(logged);
	if (t_file_size(path) != size)
		fail_msg("%s %llu: wal is %llu bytes, want %llu", what,
			 (unsigned long long)arg,
			 (unsigned long long)t_file_size(path),
			 (unsigned long long)size);
	/* Idempotent: a second recovery changes nothing. */
	c = t_open(dir, 1000000);
	t_state_expect(c, &t->expect[k], what, arg);
	coord_destroy(c);
	assert_int_equal(t_file_size(path), size);
	free(path);
}

/*
 * Recovers a data dir whose wal is @wal: expects a refusal (-EBADMSG)
 * logged as "<dir>/<file> is invalid at byte <off>: ", and every file as
 * it was (twice: a refusal changes nothing).
 */
static void t_refusal_expect(const char *dir, const char *file,
			     const uint8_t *wal, size_t wal_len, uint64_t off,
			     const char *what, uint64_t arg)
{
	char *path = t_path(dir, "wal");
	char *bad = t_path(dir, file);
	struct t_capture cap;
	char *logged, line[512];
	struct t_buf after;
	int entries, ret;

	mkdir(dir, 0700);
	t_file_write(path, wal, wal_len);
	entries = t_dir_entries(dir);
	for (int i = 0; i < 2; i++) {
		t_capture_begin(&cap);
		ret = t_open_err(dir);
		logged = t_capture_end(&cap);
		if (ret != -EBADMSG)
			fail_msg("%s %llu: not refused (%s):\n%s", what,
				 (unsigned long long)arg, strerror(-ret),
				 logged);
		snprintf(line, sizeof(line),
			 "%s is invalid at byte %llu: ", bad,
			 (unsigned long long)off);
		t_log_expect(logged, line, what, arg);
		t_log_expect(logged, "refusing to start", what, arg);
		free(logged);
		after = t_file_read(path);
		if (after.len != wal_len || memcmp(after.p, wal, wal_len))
			fail_msg("%s %llu: refused, but the wal changed", what,
				 (unsigned long long)arg);
		free(after.p);
		/* No file made or removed either. */
		assert_int_equal(t_dir_entries(dir), entries);
	}
	free(bad);
	free(path);
}

static void test_wal_every_truncation(void **state)
{
	struct t_wal *t = *state;
	char *base = t_path(t->dir, "base");
	char *path = t_path(base, "wal");
	char *dir = t_path(t->dir, "cut");
	struct t_buf wal = t_file_read(path);
	struct coord *c;

	assert_int_equal(wal.len, t->ends[T_CHANGES]);
	for (size_t len = 0; len <= wal.len; len++) {
		int k = t_complete(t, len);

		/* Written whole (tmp + rename): a short header is damage. */
		if (len < WAL_HDR_LEN)
			t_refusal_expect(dir, "wal", wal.p, len, 0, "length",
					 len);
		else
			t_recover_expect(t, dir, wal.p, len, k, t->ends[k],
					 "length", len);
	}
	/* No wal file at all: an empty log. */
	free(path);
	path = t_path(dir, "wal");
	assert_int_equal(unlink(path), 0);
	c = t_open(dir, 1000000);
	t_state_expect(c, &t->expect[0], "no wal", 0);
	coord_destroy(c);
	assert_int_equal(t_file_size(path), WAL_HDR_LEN);
	free(wal.p);
	free(dir);
	free(path);
	free(base);
}

static void test_wal_corruption_mid_log(void **state)
{
	struct t_wal *t = *state;
	char *base = t_path(t->dir, "base");
	char *path = t_path(base, "wal");
	char *dir = t_path(t->dir, "bad");
	struct t_buf wal = t_file_read(path);
	uint8_t *copy = malloc(wal.len + 8192);
	const int last = T_CHANGES - 1;
	uint64_t zero_to;
	int kz;

	assert_non_null(copy);
	/*
	 * A payload byte of every record in turn, then the CRC field: each
	 * is refused at the bad record's offset, the last record's too (it
	 * is whole in the file: a changed byte, not a torn write).
	 */
	for (int k = 0; k < T_CHANGES; k++) {
		uint64_t rec = t->ends[k];
		uint64_t plen = t->ends[k + 1] - rec - WAL_REC_HDR_LEN;

		for (int crc = 0; crc < 2; crc++) {
			memcpy(copy, wal.p, wal.len);
			if (crc)
				copy[rec + 9] ^= 0x01;
			else
				copy[rec + WAL_REC_HDR_LEN + plen / 2] ^= 0x20;
			t_refusal_expect(dir, "wal", copy, wal.len, rec,
					 "record flip", (uint64_t)k);
		}
	}
	/*
	 * Every byte of the last record in turn: refused, but for a length
	 * grown past the end of the file, which is what a record cut short
	 * looks like (the header has no CRC of its own).
	 */
	for (uint64_t i = t->ends[last]; i < wal.len; i++) {
		uint32_t len;

		memcpy(copy, wal.p, wal.len);
		copy[i] ^= 0x80;
		len = (uint32_t)copy[t->ends[last] + 4] << 24 |
		      (uint32_t)copy[t->ends[last] + 5] << 16 |
		      (uint32_t)copy[t->ends[last] + 6] << 8 |
		      copy[t->ends[last] + 7];
		if (copy[i] == 0)
			continue; /* zeros may be a sector never written */
		if (len <= FRAME_MAX &&
		    t->ends[last] + WAL_REC_HDR_LEN + len > wal.len)
			t_recover_expect(t, dir, copy, wal.len, last,
					 t->ends[last], "last length grown",
					 i - t->ends[last]);
		else
			t_refusal_expect(dir, "wal", copy, wal.len,
					 t->ends[last], "last record flip",
					 i - t->ends[last]);
	}
	/* Bad magic in the middle. */
	memcpy(copy, wal.p, wal.len);
	copy[t->ends[8]] ^= 0xff;
	t_refusal_expect(dir, "wal", copy, wal.len, t->ends[8], "magic", 8);
	/* A length beyond FRAME_MAX, one of zero, one past the file end. */
	memcpy(copy, wal.p, wal.len);
	memset(copy + t->ends[3] + 4, 0xff, 4);
	t_refusal_expect(dir, "wal", copy, wal.len, t->ends[3], "length", 3);
	memcpy(copy, wal.p, wal.len);
	memset(copy + t->ends[4] + 4, 0, 4);
	t_refusal_expect(dir, "wal", copy, wal.len, t->ends[4], "zero length",
			 4);
	memcpy(copy, wal.p, wal.len);
	copy[t->ends[5] + 5] = 0x7f;
	t_refusal_expect(dir, "wal", copy, wal.len, t->ends[5], "long length",
			 5);
	/* A bad wal header: refused, never discarded. */
	memcpy(copy, wal.p, wal.len);
	copy[2] ^= 0x01;
	t_refusal_expect(dir, "wal", copy, wal.len, 0, "header magic", 0);
	memcpy(copy, wal.p, wal.len);
	copy[17] ^= 0x01;
	t_refusal_expect(dir, "wal", copy, wal.len, 0, "header crc", 0);

	/* Torn tails: zeros after the log (blocks never written)... */
	memcpy(copy, wal.p, wal.len);
	memset(copy + wal.len, 0, 8192);
	t_recover_expect(t, dir, copy, wal.len + 8192, T_CHANGES, wal.len,
			 "zero tail", 0);
	/* ...the last record's first sector never written... */
	memcpy(copy, wal.p, wal.len);
	zero_to = (t->ends[last] / 512 + 1) * 512;
	memset(copy + t->ends[last], 0,
	       (zero_to < wal.len ? zero_to : wal.len) - t->ends[last]);
	t_recover_expect(t, dir, copy, wal.len, last, t->ends[last],
			 "torn first sector", 0);
	/* ...zeros from a sector inside one record over the ones after... */
	for (kz = last - 1; kz > 0; kz--) {
		zero_to = (t->ends[kz] + WAL_REC_HDR_LEN) / 512 * 512 + 512;
		if (zero_to < t->ends[kz + 1])
			break;
	}
	assert_true(kz > 0); /* the log spans more than a sector */
	memcpy(copy, wal.p, wal.len);
	memset(copy + zero_to, 0, wal.len - zero_to);
	t_recover_expect(t, dir, copy, wal.len, kz, t->ends[kz],
			 "zeros over two", (uint64_t)kz);
	/* ...but a changed byte with the start of one more after it is
	 * damage, and so are bytes that do not start a record. */
	memcpy(copy, wal.p, wal.len);
	copy[t->ends[last - 1] + WAL_REC_HDR_LEN + 1] ^= 0x40;
	t_refusal_expect(dir, "wal", copy, t->ends[last] + 5, t->ends[last - 1],
			 "flip, then a torn start", 0);
	memcpy(copy, wal.p, wal.len);
	copy[t->ends[last]] ^= 0x40;
	t_refusal_expect(dir, "wal", copy, t->ends[last] + 3, t->ends[last],
			 "no record start", 0);
	/* An intact record after zeros is no torn tail. */
	memcpy(copy, wal.p, t->ends[last]);
	memset(copy + t->ends[last], 0, 100);
	memcpy(copy + t->ends[last] + 100, wal.p + t->ends[last],
	       wal.len - t->ends[last]);
	t_refusal_expect(dir, "wal", copy, wal.len + 100, t->ends[last],
			 "zeros then a record", 0);
	free(copy);
	free(wal.p);
	free(dir);
	free(path);
	free(base);
}

/* Appends a record with the encoding of @m to @b, CRC and all. */
static void t_record_append(struct t_buf *b, const struct msg *m)
{
	uint8_t *p;
	size_t len;
	uint32_t crc, v[3];

	assert_int_equal(msg_encode(m, &p, &len), 0);
	crc = (uint32_t)crc32(crc32(0L, Z_NULL, 0), p, (uInt)len);
	v[0] = htobe32(WAL_REC_MAGIC);
	v[1] = htobe32((uint32_t)len);
	v[2] = htobe32(crc);
	b->p = realloc(b->p, b->len + sizeof(v) + len);
	assert_non_null(b->p);
	memcpy(b->p + b->len, v, sizeof(v));
	memcpy(b->p + b->len + sizeof(v), p, len);
	b->len += sizeof(v) + len;
	free(p);
}

static void test_wal_record_not_applicable(void **state)
{
	struct t_wal *t = *state;
	char *base = t_path(t->dir, "base");
	char *path = t_path(base, "wal");
	char *dir = t_path(t->dir, "noapply");
	struct t_buf wal = t_file_read(path);
	struct msg_chunk chunk = { .node = 99, .off = 0 };
	struct msg m;

	/* Well-formed, CRC-correct, but names a node that does not exist. */
	msg_init(&m, MSG_T_REGION);
	strcpy(m.name, "ghost");
	m.size = 2 * MIB;
	m.chunk_size = 2 * MIB;
	m.epoch = 100;
	m.chunks = &chunk;
	m.n_chunks = 1;
	t_record_append(&wal, &m);
	/* Intact, so written whole: refused even as the last record. */
	t_refusal_expect(dir, "wal", wal.p, wal.len, t->ends[T_CHANGES],
			 "not applicable, last", 0);
	t_endpoint_req(&m, 3, 1, 0x301);
	t_record_append(&wal, &m);
	t_refusal_expect(dir, "wal", wal.p, wal.len, t->ends[T_CHANGES],
			 "not applicable", 0);

	/* A record type that is no change at all. */
	wal.len = t->ends[T_CHANGES];
	msg_init(&m, MSG_T_NODE_LIST);
	t_record_append(&wal, &m);
	t_refusal_expect(dir, "wal", wal.p, wal.len, t->ends[T_CHANGES],
			 "no change", 0);
	free(wal.p);
	free(dir);
	free(path);
	free(base);
}

static void test_wal_snapshot_replay(void **state)
{
	struct t_wal *t = *state;
	char *dir = t_path(t->dir, "snap");
	char *snap = t_path(dir, "snapshot");
	char *wal = t_path(dir, "wal");
	struct t_buf live, extra;
	struct coord *c;
	struct msg req, rep;

	c = t_open(dir, 4);
	for (int i = 0; i < T_CHANGES; i++) {
		t_apply(c, i);
		/* Every 4th record moves the log into a snapshot. */
		assert_int_equal(t_file_exists(snap), i >= 3);
		assert_int_equal(wal_records(c->wal), (uint64_t)(i + 1) % 4);
		if ((i + 1) % 4 == 0)
			assert_int_equal(t_file_size(wal), WAL_HDR_LEN);
	}
	assert_true(t_file_exists(wal));
	live = t_state(c);
	coord_destroy(c);

	/* Snapshot (16 changes) + wal (3 records) = the live state. */
	c = t_open(dir, 4);
	t_state_expect(c, &live, "snapshot + wal", 0);
	t_state_expect(c, &t->expect[T_CHANGES], "snapshot + wal", 1);
	/* Keep going on the recovered state, across another snapshot. */
	t_create_req(&req, "r6", 4 * MIB, 0);
	assert_int_equal(coord_handle(c, &req, &rep, T_NOW), 0);
	assert_int_equal(rep.type, MSG_T_REGION);
	assert_int_equal(coord_sync(c), 0);
	msg_fini(&req);
	msg_fini(&rep);
	assert_int_equal(t_file_size(wal), WAL_HDR_LEN);
	extra = t_state(c);
	coord_destroy(c);
	c = t_open(dir, 4);
	t_state_expect(c, &extra, "second snapshot", 0);
	coord_destroy(c);

	/* The snapshot's epoch survives even if no region carries it. */
	c = t_open(dir, 1);
	msg_init(&req, MSG_T_REGION_DELETE);
	strcpy(req.name, "r6");
	assert_int_equal(coord_handle(c, &req, &rep, T_NOW), 0);
	assert_int_equal(rep.type, MSG_T_OK);
	assert_int_equal(coord_sync(c), 0);
	msg_fini(&rep);
	strcpy(req.name, "r5");
	assert_int_equal(coord_handle(c, &req, &rep, T_NOW), 0);
	assert_int_equal(coord_sync(c), 0);
	msg_fini(&rep);
	free(extra.p);
	extra = t_state(c);
	coord_destroy(c);
	c = t_open(dir, 1);
	t_state_expect(c, &extra, "epoch after deletes", 0);
	coord_destroy(c);

	free(extra.p);
	free(live.p);
	free(wal);
	free(snap);
	free(dir);
}

/* Handles @req on @c (a fresh data dir's tables) and syncs; returns rep. */
static void t_handle(struct coord *c, struct msg *req, struct msg *rep)
{
	assert_int_equal(coord_handle(c, req, rep, T_NOW), 0);
	assert_int_equal(coord_sync(c), 0);
	msg_fini(req);
}

/* Serves @req, expects a reply of @type, drops it. */
static void t_handle_want(struct coord *c, struct msg *req, enum msg_type type)
{
	struct msg rep;

	t_handle(c, req, &rep);
	assert_int_equal(rep.type, type);
	msg_fini(&rep);
}

/*
 * A heartbeat of node 1 (instance 7) that has synced @c's epoch, with the
 * extents @ack asked to clear (taken from it) when not NULL.
 */
static void t_heartbeat_req(struct msg *req, const struct coord *c,
			    struct msg *ack)
{
	msg_init(req, MSG_T_HEARTBEAT);
	req->node = 1;
	req->instance = 7;
	req->epoch = c->epoch;
	req->cid = c->cid;
	if (!ack)
		return;
	req->extents = ack->extents;
	req->n_extents = ack->n_extents;
	ack->extents = NULL;
	ack->n_extents = 0;
	msg_fini(ack);
}

/*
 * A deleted region's extents stay taken across restarts (wal and snapshot)
 * until their owner reports them cleared; that report is durable too.
 */
static void test_wal_scrub_durable(void **state)
{
	struct t_wal *t = *state;
	char *dir = t_path(t->dir, "scrub");
	struct msg req, rep, ack;
	struct coord *c;

	for (int snap = 0; snap < 2; snap++) {
		t_rmrf(dir);
		/* snapshot_every 1: every change goes through a snapshot */
		c = t_open(dir, snap ? 1 : 1000);
		t_join_req(&req, "a", 4 * MIB, 7);
		t_handle_want(c, &req, MSG_T_NODE_JOINED);
		t_create_req(&req, "r", 4 * MIB, 0);
		t_handle_want(c, &req, MSG_T_REGION);
		msg_init(&req, MSG_T_REGION_DELETE);
		strcpy(req.name, "r");
		t_handle(c, &req, &rep);
		msg_fini(&rep);
		coord_destroy(c);

		c = t_open(dir, snap ? 1 : 1000);
		t_create_req(&req, "s", 4 * MIB, 0);
		t_handle(c, &req, &rep);
		assert_int_equal(rep.type, MSG_T_ERROR);
		assert_int_equal(rep.err, EAGAIN);
		msg_fini(&rep);
		/* a syncs the delete, is asked to clear, reports it done. */
		t_heartbeat_req(&req, c, NULL);
		t_handle(c, &req, &ack);
		assert_int_equal(ack.type, MSG_T_HEARTBEAT_ACK);
		assert_int_equal(ack.n_extents, 2);
		t_heartbeat_req(&req, c, &ack);
		t_handle(c, &req, &rep);
		msg_fini(&rep);
		coord_destroy(c);

		c = t_open(dir, snap ? 1 : 1000);
		t_create_req(&req, "s", 4 * MIB, 0);
		t_handle(c, &req, &rep);
		assert_int_equal(rep.type, MSG_T_REGION);
		msg_fini(&rep);
		coord_destroy(c);
	}
	t_rmrf(dir);
	free(dir);
}

static void t_wlease_req(struct msg *m, enum msg_type type, uint64_t node,
			 uint64_t inst, uint64_t lease)
{
	msg_init(m, type);
	strcpy(m->name, "r");
	m->node = node;
	m->instance = type == MSG_T_WRITE_LEASE ? inst : 0;
	m->lease = lease;
}

/* A region's write lease and its release survive restarts (wal, snapshot). */
static void test_wal_write_lease_durable(void **state)
{
	struct t_wal *t = *state;
	char *dir = t_path(t->dir, "wlease");
	struct msg req, rep;
	struct coord *c;

	for (int snap = 0; snap < 2; snap++) {
		t_rmrf(dir);
		c = t_open(dir, snap ? 1 : 1000);
		t_join_req(&req, "a", 4 * MIB, 7);
		t_handle_want(c, &req, MSG_T_NODE_JOINED);
		t_join_req(&req, "b", 4 * MIB, 8);
		t_handle_want(c, &req, MSG_T_NODE_JOINED);
		t_create_req(&req, "r", 4 * MIB, 0);
		t_handle_want(c, &req, MSG_T_REGION);
		t_wlease_req(&req, MSG_T_WRITE_LEASE, 1, 7, 77);
		t_handle_want(c, &req, MSG_T_OK);
		coord_destroy(c);

		c = t_open(dir, snap ? 1 : 1000);
		t_wlease_req(&req, MSG_T_WRITE_LEASE, 2, 8, 88);
		t_handle(c, &req, &rep);
		assert_int_equal(rep.type, MSG_T_ERROR);
		assert_int_equal(rep.err, EBUSY);
		msg_fini(&rep);
		t_wlease_req(&req, MSG_T_WRITE_RELEASE, 1, 7, 77);
		t_handle_want(c, &req, MSG_T_OK);
		coord_destroy(c);

		c = t_open(dir, snap ? 1 : 1000);
		assert_int_equal(c->regions[0]->writer.lease, 0);
		t_wlease_req(&req, MSG_T_WRITE_LEASE, 2, 8, 88);
		t_handle_want(c, &req, MSG_T_OK);
		coord_destroy(c);
	}
	t_rmrf(dir);
	free(dir);
}

/* Serves WRITE_LEASE @req; expects OK and returns its generation. */
static uint64_t t_wlease_gen(struct coord *c, struct msg *req)
{
	struct msg rep;
	uint64_t g;

	if (!req->wgen)
		req->wgen = MSG_WGEN_NEW;
	t_handle(c, req, &rep);
	if (rep.type != MSG_T_OK)
		fail_msg("write lease: %s", rep.text);
	g = rep.wgen;
	msg_fini(&rep);
	return g;
}

/*
 * A write lease's generation survives restarts (wal, snapshot) with and
 * without a holder: a mapping resumed after its agent restarted gets the
 * lease back only while nobody held it since, also across a coordinator
 * restart. A log of an older version (its WRITE_LEASE records have no
 * generation: 0) is read as before.
 */
static void test_wal_write_lease_gen(void **state)
{
	struct t_wal *t = *state;
	char *dir = t_path(t->dir, "wgen");
	uint64_t g1, g2;
	struct msg req, rep;
	struct coord *c;
	uint8_t *buf;
	size_t len;

	for (int snap = 0; snap < 2; snap++) {
		t_rmrf(dir);
		c = t_open(dir, snap ? 1 : 1000);
		t_join_req(&req, "a", 4 * MIB, 7);
		t_handle_want(c, &req, MSG_T_NODE_JOINED);
		t_join_req(&req, "b", 4 * MIB, 8);
		t_handle_want(c, &req, MSG_T_NODE_JOINED);
		t_create_req(&req, "r", 4 * MIB, 0);
		t_handle_want(c, &req, MSG_T_REGION);
		t_wlease_req(&req, MSG_T_WRITE_LEASE, 1, 7, 77);
		g1 = t_wlease_gen(c, &req);
		assert_true(g1 > 0);
		coord_destroy(c);

		/* a's agent restarted (instance 9): its mapping resumes */
		c = t_open(dir, snap ? 1 : 1000);
		assert_int_equal(c->regions[0]->wgen, g1);
		t_join_req(&req, "a", 4 * MIB, 9);
		t_handle_want(c, &req, MSG_T_NODE_JOINED);
		t_wlease_req(&req, MSG_T_WRITE_LEASE, 1, 9, 78);
		req.wgen = g1;
		assert_int_equal(t_wlease_gen(c, &req), g1);
		coord_destroy(c);

		/* it restarts again; b takes the lease and gives it back */
		c = t_open(dir, snap ? 1 : 1000);
		assert_int_equal(c->regions[0]->writer.lease, 78);
		t_join_req(&req, "a", 4 * MIB, 10);
		t_handle_want(c, &req, MSG_T_NODE_JOINED);
		t_wlease_req(&req, MSG_T_WRITE_LEASE, 2, 8, 88);
		g2 = t_wlease_gen(c, &req);
		assert_true(g2 > g1);
		t_wlease_req(&req, MSG_T_WRITE_RELEASE, 2, 8, 88);
		t_handle_want(c, &req, MSG_T_OK);
		coord_destroy(c);

		c = t_open(dir, snap ? 1 : 1000);
		assert_int_equal(c->regions[0]->writer.lease, 0);
		t_wlease_req(&req, MSG_T_WRITE_LEASE, 1, 10, 79);
		req.wgen = g1;
		t_handle(c, &req, &rep);
		assert_int_equal(rep.type, MSG_T_ERROR);
		assert_int_equal(rep.err, ENOLCK);
		msg_fini(&rep);
		t_wlease_req(&req, MSG_T_WRITE_LEASE, 1, 10, 79);
		assert_true(t_wlease_gen(c, &req) > g2);
		coord_destroy(c);
	}

	/* An older version's record: no generation on the wire at all. */
	t_rmrf(dir);
	c = t_open(dir, 1000);
	t_join_req(&req, "a", 4 * MIB, 7);
	t_handle_want(c, &req, MSG_T_NODE_JOINED);
	t_join_req(&req, "b", 4 * MIB, 8);
	t_handle_want(c, &req, MSG_T_NODE_JOINED);
	t_create_req(&req, "r", 4 * MIB, 0);
	t_handle_want(c, &req, MSG_T_REGION);
	t_wlease_req(&req, MSG_T_WRITE_LEASE, 1, 7, 77);
	assert_int_equal(msg_encode(&req, &buf, &len), 0);
	assert_null(memmem(buf, len, "wgen", 4));
	assert_int_equal(wal_append(c->wal, buf, len), 0);
	assert_int_equal(wal_sync(c->wal), 0);
	free(buf);
	msg_fini(&req);
	coord_destroy(c);
	for (int snap = 0; snap < 2; snap++) {
		c = t_open(dir, snap ? 1 : 1000);
		assert_int_equal(c->regions[0]->writer.lease, 77);
		assert_int_equal(c->regions[0]->wgen, 0);
		/* held: b is refused; its release lets b in, generation > 0 */
		t_wlease_req(&req, MSG_T_WRITE_LEASE, 2, 8, 88);
		t_handle(c, &req, &rep);
		assert_int_equal(rep.type, MSG_T_ERROR);
		assert_int_equal(rep.err, EBUSY);
		msg_fini(&rep);
		coord_destroy(c);
	}
	c = t_open(dir, 1);
	t_wlease_req(&req, MSG_T_WRITE_RELEASE, 1, 7, 77);
	t_handle_want(c, &req, MSG_T_OK);
	t_wlease_req(&req, MSG_T_WRITE_LEASE, 2, 8, 88);
	assert_true(t_wlease_gen(c, &req) > 0);
	coord_destroy(c);
	t_rmrf(dir);
	free(dir);
}

/* Serves a request that must be refused with @err; its text in @text. */
static void t_handle_err(struct coord *c, struct msg *req, uint64_t err,
			 char *text, size_t text_len)
{
	struct msg rep;

	t_handle(c, req, &rep);
	if (rep.type != MSG_T_ERROR || rep.err != err)
		fail_msg("want error %llu, got type %d err %llu: %s",
			 (unsigned long long)err, rep.type,
			 (unsigned long long)rep.err, rep.text);
	if (text)
		snprintf(text, text_len, "%s", rep.text);
	msg_fini(&rep);
}

static void t_writers_req(struct msg *m, enum msg_type type,
			  const uint64_t *ids, uint32_t n)
{
	msg_init(m, type);
	strcpy(m->name, "r");
	if (n) {
		m->writers = malloc(n * sizeof(*m->writers));
		assert_non_null(m->writers);
		memcpy(m->writers, ids, n * sizeof(*ids));
		m->n_writers = n;
	}
}

/*
 * A region's writers: only they get its write lease (EACCES naming them
 * for anyone else), durable in the wal and the snapshot, changed by
 * REGION_WRITERS (a holder no longer allowed loses the lease); the admin's
 * LEASE_BREAK ends a lease at once and its holder's check (a resume under
 * its generation, as at a flush) finds it lost. Node keys may do neither.
 * A region logged without writers (older logs and snapshots) is any
 * node's.
 */
static void test_wal_writers(void **state)
{
	static const uint64_t only_a[] = { 1 }, only_b[] = { 2 };
	struct t_wal *t = *state;
	char *dir = t_path(t->dir, "writers");
	uint64_t g1, g2;
	struct msg req, rep;
	struct t_buf b;
	char text[MSG_TEXT_MAX];
	struct coord *c;

	for (int snap = 0; snap < 2; snap++) {
		t_rmrf(dir);
		c = t_open(dir, snap ? 1 : 1000);
		t_join_req(&req, "a", 4 * MIB, 7);
		t_handle_want(c, &req, MSG_T_NODE_JOINED);
		t_join_req(&req, "b", 4 * MIB, 8);
		t_handle_want(c, &req, MSG_T_NODE_JOINED);
		t_writers_req(&req, MSG_T_REGION_CREATE, only_a, 1);
		req.size = 4 * MIB;
		t_handle(c, &req, &rep);
		assert_int_equal(rep.type, MSG_T_REGION);
		assert_int_equal(rep.n_writers, 1);
		assert_int_equal(rep.writers[0], 1);
		msg_fini(&rep);
		/* an unknown node cannot be a writer */
		t_writers_req(&req, MSG_T_REGION_WRITERS, (uint64_t[]){ 3 }, 1);
		t_handle_err(c, &req, ENOENT, NULL, 0);
		t_wlease_req(&req, MSG_T_WRITE_LEASE, 2, 8, 88);
		req.wgen = MSG_WGEN_NEW;
		t_handle_err(c, &req, EACCES, text, sizeof(text));
		assert_non_null(strstr(text, "writers: a (1)"));
		t_wlease_req(&req, MSG_T_WRITE_LEASE, 1, 7, 77);
		g1 = t_wlease_gen(c, &req);
		coord_destroy(c);

		c = t_open(dir, snap ? 1 : 1000);
		assert_int_equal(c->regions[0]->n_writers, 1);
		assert_int_equal(c->regions[0]->writers[0], 1);
		assert_int_equal(c->regions[0]->writer.lease, 77);
		/* REGION_GET carries the writers */
		msg_init(&req, MSG_T_REGION_GET);
		strcpy(req.name, "r");
		t_handle(c, &req, &rep);
		assert_int_equal(rep.type, MSG_T_REGION);
		assert_int_equal(rep.n_writers, 1);
		msg_fini(&rep);
		/* node keys may not break leases or change writers */
		t_writers_req(&req, MSG_T_LEASE_BREAK, NULL, 0);
		assert_int_equal(
			coord_authorize(c, COORD_ROLE_NODE, "a", &req, &rep),
			-EACCES);
		msg_fini(&rep);
		assert_int_equal(
			coord_authorize(c, COORD_ROLE_ADMIN, "", &req, &rep),
			0);
		msg_fini(&rep);
		t_handle(c, &req, &rep);
		assert_int_equal(rep.type, MSG_T_OK);
		g2 = rep.wgen;
		assert_true(g2 > g1);
		msg_fini(&rep);
		assert_int_equal(c->regions[0]->writer.lease, 0);
		/* the holder's flush-time check: lost */
		t_wlease_req(&req, MSG_T_WRITE_LEASE, 1, 7, 77);
		req.wgen = g1;
		t_handle_err(c, &req, ENOLCK, NULL, 0);
		coord_destroy(c);

		c = t_open(dir, snap ? 1 : 1000);
		assert_int_equal(c->regions[0]->writer.lease, 0);
		assert_int_equal(c->regions[0]->wgen, g2); /* also snapshot */
		t_wlease_req(&req, MSG_T_WRITE_LEASE, 1, 7, 77);
		req.wgen = g1;
		t_handle_err(c, &req, ENOLCK, NULL, 0);
		/* a takes it anew; then only b may write: a loses it */
		t_wlease_req(&req, MSG_T_WRITE_LEASE, 1, 7, 78);
		assert_true(t_wlease_gen(c, &req) > g2);
		t_writers_req(&req, MSG_T_REGION_WRITERS, only_b, 1);
		assert_int_equal(
			coord_authorize(c, COORD_ROLE_NODE, "b", &req, &rep),
			-EACCES);
		msg_fini(&rep);
		t_handle_want(c, &req, MSG_T_OK);
		assert_int_equal(c->regions[0]->writer.lease, 0);
		coord_destroy(c);

		c = t_open(dir, snap ? 1 : 1000);
		assert_int_equal(c->regions[0]->n_writers, 1);
		assert_int_equal(c->regions[0]->writers[0], 2);
		assert_int_equal(c->regions[0]->writer.lease, 0);
		t_wlease_req(&req, MSG_T_WRITE_LEASE, 1, 7, 79);
		req.wgen = MSG_WGEN_NEW;
		t_handle_err(c, &req, EACCES, NULL, 0);
		t_wlease_req(&req, MSG_T_WRITE_LEASE, 2, 8, 89);
		t_wlease_gen(c, &req);
		t_wlease_req(&req, MSG_T_WRITE_RELEASE, 2, 8, 89);
		t_handle_want(c, &req, MSG_T_OK);
		/* any node again */
		t_writers_req(&req, MSG_T_REGION_WRITERS, NULL, 0);
		t_handle_want(c, &req, MSG_T_OK);
		coord_destroy(c);

		c = t_open(dir, snap ? 1 : 1000);
		assert_int_equal(c->regions[0]->n_writers, 0);
		t_wlease_req(&req, MSG_T_WRITE_LEASE, 1, 7, 80);
		t_wlease_gen(c, &req);
		coord_destroy(c);
	}

	/* Written without writers (as every older version did): the log
	 * and the snapshot have no such field, and any node may write. */
	for (int snap = 0; snap < 2; snap++) {
		t_rmrf(dir);
		c = t_open(dir, snap ? 1 : 1000);
		t_join_req(&req, "a", 4 * MIB, 7);
		t_handle_want(c, &req, MSG_T_NODE_JOINED);
		t_join_req(&req, "b", 4 * MIB, 8);
		t_handle_want(c, &req, MSG_T_NODE_JOINED);
		t_create_req(&req, "r", 4 * MIB, 0);
		t_handle_want(c, &req, MSG_T_REGION);
		coord_destroy(c);
		{
			char *f = t_path(dir, snap ? "snapshot" : "wal");

			b = t_file_read(f);
			assert_true(b.len > WAL_HDR_LEN);
			assert_null(memmem(b.p, b.len, "writers", 7));
			free(b.p);
			free(f);
		}
		c = t_open(dir, 1000);
		assert_int_equal(c->regions[0]->n_writers, 0);
		t_wlease_req(&req, MSG_T_WRITE_LEASE, 2, 8, 88);
		t_wlease_gen(c, &req);
		t_wlease_req(&req, MSG_T_WRITE_RELEASE, 2, 8, 88);
		t_handle_want(c, &req, MSG_T_OK);
		t_wlease_req(&req, MSG_T_WRITE_LEASE, 1, 7, 77);
		t_wlease_gen(c, &req);
		coord_destroy(c);
	}
	t_rmrf(dir);
	free(dir);
}

static void test_wal_stale_generation(void **state)
{
	struct t_wal *t = *state;
	char *dir = t_path(t->dir, "stale");
	char *wal = t_path(dir, "wal");
	char *snap = t_path(dir, "snapshot");
	struct t_buf old;
	struct coord *c;

	c = t_open(dir, 3);
	t_apply(c, 0);
	t_apply(c, 1);
	old = t_file_read(wal); /* generation 0, 2 records */
	t_apply(c, 2);		/* snapshot of generation 1 */
	assert_true(t_file_exists(snap));
	coord_destroy(c);

	/* As if we crashed between the snapshot's rename and the wal's. */
	t_file_write(wal, old.p, old.len);
	c = t_open(dir, 3);
	t_state_expect(c, &t->expect[3], "stale wal", 0);
	coord_destroy(c);
	assert_int_equal(t_file_size(wal), WAL_HDR_LEN);

	/* A wal newer than the snapshot: the snapshot went missing. */
	c = t_open(dir, 3);
	t_apply(c, 3);
	t_apply(c, 4);
	t_apply(c, 5); /* generation 2 */
	coord_destroy(c);
	free(old.p);
	old = t_file_read(snap);
	unlink(snap);
	assert_int_equal(t_open_err(dir), -EBADMSG);
	t_file_write(snap, old.p, old.len);
	c = t_open(dir, 3);
	t_state_expect(c, &t->expect[6], "restored snapshot", 0);
	coord_destroy(c);
	free(old.p);
	free(snap);
	free(wal);
	free(dir);
}

static void test_wal_snapshot_corrupt_refuses(void **state)
{
	struct t_wal *t = *state;
	char *dir = t_path(t->dir, "badsnap");
	char *snap = t_path(dir, "snapshot");
	char *wal = t_path(dir, "wal");
	struct t_buf good, w;
	uint8_t *copy;
	struct coord *c;
	int saved;

	c = t_open(dir, 4);
	for (int i = 0; i < 8; i++)
		t_apply(c, i);
	coord_destroy(c);
	good = t_file_read(snap);
	w = t_file_read(wal);
	copy = malloc(good.len + 1);
	assert_non_null(copy);

	/* Thousands of refusals follow: keep their log lines out. */
	t_stderr_mute(&saved);
	/* Any one flipped byte, header or record, and we do not start. */
	for (size_t i = 0; i < good.len; i++) {
		memcpy(copy, good.p, good.len);
		copy[i] ^= 0x04;
		t_file_write(snap, copy, good.len);
		if (t_open_err(dir) != -EBADMSG)
			fail_msg("snapshot with byte %zu flipped accepted", i);
	}
	/* Cut anywhere, or with a byte added. */
	for (size_t len = 0; len < good.len; len++) {
		t_file_write(snap, good.p, len);
		if (t_open_err(dir) != -EBADMSG)
			fail_msg("snapshot cut to %zu bytes accepted", len);
	}
	memcpy(copy, good.p, good.len);
	copy[good.len] = 0;
	t_file_write(snap, copy, good.len + 1);
	assert_int_equal(t_open_err(dir), -EBADMSG);
	t_stderr_restore(saved);
	/* Refusing left the wal alone. */
	free(copy);
	copy = t_file_read(wal).p;
	assert_memory_equal(copy, w.p, w.len);
	assert_int_equal(t_file_size(wal), w.len);

	t_file_write(snap, good.p, good.len);
	c = t_open(dir, 4);
	t_state_expect(c, &t->expect[8], "good snapshot", 0);
	coord_destroy(c);
	free(copy);
	free(w.p);
	free(good.p);
	free(wal);
	free(snap);
	free(dir);
}

static void test_wal_lock(void **state)
{
	struct t_wal *t = *state;
	char *dir = t_path(t->dir, "lock/deeper/still");
	struct coord *c;

	c = t_open(dir, 4); /* parents created */
	assert_int_equal(t_open_err(dir), -EWOULDBLOCK);
	coord_destroy(c);
	c = t_open(dir, 4);
	coord_destroy(c);
	free(dir);
}

static int t_dump(void *arg, wal_emit_fn emit, void *emit_arg)
{
	return coord_records_dump(arg, emit, emit_arg);
}

/* Sets the version of the wal or snapshot header @p (@hdr_len bytes). */
static void t_hdr_version_set(uint8_t *p, size_t hdr_len, uint32_t version)
{
	uint32_t v = htobe32(version), crc;

	memcpy(p + 4, &v, 4);
	crc = htobe32(
		(uint32_t)crc32(crc32(0L, Z_NULL, 0), p, (uInt)(hdr_len - 4)));
	memcpy(p + hdr_len - 4, &crc, 4);
}

/* coord_check() on @dir, which must succeed. */
static void t_check(const char *dir, unsigned int flags, struct wal_report *rep)
{
	int saved, ret;

	t_stderr_mute(&saved);
	ret = coord_check(dir, flags, rep);
	t_stderr_restore(saved);
	if (ret)
		fail_msg("coord_check(%s): %s", dir, strerror(-ret));
}

/*
 * --check reports without changing anything; --repair cuts at the first
 * bad record and keeps what it cut beside the wal; a clean log stays as
 * it is; a running coordinator's directory is not checked.
 */
static void test_wal_check_repair(void **state)
{
	struct t_wal *t = *state;
	char *base = t_path(t->dir, "base");
	char *dir = t_path(t->dir, "check");
	char *path = t_path(dir, "wal");
	struct t_buf wal, orig, cut;
	struct wal_report rep;
	char *name, *missing;
	struct coord *c;
	int entries;

	t_rmrf(dir);
	mkdir(dir, 0700);
	free(path);
	path = t_path(base, "wal");
	wal = t_file_read(path);
	free(path);
	path = t_path(dir, "wal");

	/* Clean. */
	t_file_write(path, wal.p, wal.len);
	t_check(dir, 0, &rep);
	assert_int_equal(rep.state, WAL_STATE_CLEAN);
	assert_true(rep.wal_found);
	assert_false(rep.snap_found);
	assert_int_equal(rep.wal_version, WAL_VERSION);
	assert_int_equal(rep.wal_records, T_CHANGES);
	assert_int_equal(rep.wal_end, wal.len);
	assert_int_equal(rep.wal_size, wal.len);
	t_check(dir, WAL_CHECK_REPAIR, &rep);
	assert_int_equal(rep.state, WAL_STATE_CLEAN);
	assert_string_equal(rep.cut_name, "");
	assert_int_equal(t_dir_entries(dir), 1);

	/* Record 6 damaged: refused, and --check says where. */
	orig = t_file_read(path);
	orig.p[t->ends[6] + WAL_REC_HDR_LEN + 3] ^= 0x10;
	t_file_write(path, orig.p, orig.len);
	name = t_path(dir, "snapshot.tmp");
	t_file_write(name, wal.p, 1);
	free(name);
	entries = t_dir_entries(dir);
	t_check(dir, 0, &rep);
	assert_int_equal(rep.state, WAL_STATE_BAD);
	assert_false(rep.bad_in_snap);
	assert_true(rep.repairable);
	assert_true(rep.tmp_left);
	assert_int_equal(rep.bad_off, t->ends[6]);
	assert_int_equal(rep.wal_records, 6);
	assert_int_equal(rep.wal_end, t->ends[6]);
	assert_non_null(strstr(rep.why, "CRC mismatch, and an intact record "
					"follows at byte"));
	/* Nothing changed: not the wal, not the leftover. */
	cut = t_file_read(path);
	assert_int_equal(cut.len, orig.len);
	assert_memory_equal(cut.p, orig.p, orig.len);
	free(cut.p);
	assert_int_equal(t_dir_entries(dir), entries);

	/* --repair: a copy of the cut bytes first, then the cut. */
	t_check(dir, WAL_CHECK_REPAIR, &rep);
	assert_int_equal(rep.state, WAL_STATE_BAD);
	assert_int_equal(rep.cut_off, t->ends[6]);
	assert_int_equal(rep.cut_bytes, orig.len - t->ends[6]);
	assert_true(asprintf(&name, "wal.0.cut-%llu",
			     (unsigned long long)t->ends[6]) > 0);
	assert_string_equal(rep.cut_name, name);
	free(name);
	name = t_path(dir, rep.cut_name);
	cut = t_file_read(name);
	assert_int_equal(cut.len, orig.len - t->ends[6]);
	assert_memory_equal(cut.p, orig.p + t->ends[6], cut.len);
	free(cut.p);
	assert_int_equal(t_file_size(path), t->ends[6]);
	cut = t_file_read(path);
	assert_memory_equal(cut.p, orig.p, t->ends[6]);
	free(cut.p);
	t_check(dir, 0, &rep);
	assert_int_equal(rep.state, WAL_STATE_CLEAN);
	c = t_open(dir, 1000000);
	t_state_expect(c, &t->expect[6], "repaired", 6);
	/* A running coordinator's directory is not checked. */
	assert_int_equal(coord_check(dir, 0, &rep), -EWOULDBLOCK);
	coord_destroy(c);
	unlink(name);
	free(name);

	/* A torn tail: reported as such, cut by --repair with a copy too. */
	t_file_write(path, wal.p, t->ends[9] + 7);
	t_check(dir, 0, &rep);
	assert_int_equal(rep.state, WAL_STATE_TORN);
	assert_int_equal(rep.bad_off, t->ends[9]);
	assert_int_equal(t_file_size(path), t->ends[9] + 7);
	t_check(dir, WAL_CHECK_REPAIR, &rep);
	assert_int_equal(rep.cut_bytes, 7);
	name = t_path(dir, rep.cut_name);
	cut = t_file_read(name);
	assert_int_equal(cut.len, 7);
	assert_memory_equal(cut.p, wal.p + t->ends[9], 7);
	free(cut.p);
	assert_int_equal(t_file_size(path), t->ends[9]);
	/* Cut at the same offset again: the first copy is kept. */
	t_file_write(path, wal.p, t->ends[9] + 9);
	t_check(dir, WAL_CHECK_REPAIR, &rep);
	assert_int_equal(rep.cut_bytes, 9);
	assert_string_not_equal(rep.cut_name, strrchr(name, '/') + 1);
	assert_int_equal(t_file_size(name), 7);
	unlink(name);
	free(name);
	name = t_path(dir, rep.cut_name);
	assert_int_equal(t_file_size(name), 9);
	unlink(name);
	free(name);

	/* A bad header: the whole wal is kept, an empty one replaces it. */
	memcpy(orig.p, wal.p, wal.len);
	orig.p[0] ^= 0x01;
	t_file_write(path, orig.p, orig.len);
	t_check(dir, WAL_CHECK_REPAIR, &rep);
	assert_int_equal(rep.bad_off, 0);
	assert_string_equal(rep.cut_name, "wal.0.cut-0");
	name = t_path(dir, rep.cut_name);
	cut = t_file_read(name);
	assert_int_equal(cut.len, orig.len);
	assert_memory_equal(cut.p, orig.p, orig.len);
	free(cut.p);
	assert_int_equal(t_file_size(path), WAL_HDR_LEN);
	c = t_open(dir, 1000000);
	t_state_expect(c, &t->expect[0], "header repaired", 0);
	coord_destroy(c);
	free(name);

	/* No such directory: not created. */
	missing = t_path(t->dir, "missing");
	assert_int_equal(coord_check(missing, 0, &rep), -ENOENT);
	assert_false(t_file_exists(missing));
	free(missing);
	free(orig.p);
	free(wal.p);
	free(path);
	free(dir);
	free(base);
}

/*
 * Versions: a wal or snapshot of a version newer than this binary reads is
 * refused (never discarded) and --repair leaves it alone; an unknown older
 * one is refused too; the version this binary writes is read back.
 */
static void test_wal_versions(void **state)
{
	struct t_wal *t = *state;
	char *base = t_path(t->dir, "base");
	char *dir = t_path(t->dir, "version");
	char *path = t_path(base, "wal");
	char *snap = t_path(dir, "snapshot");
	struct t_buf wal = t_file_read(path), s, after;
	struct wal_report rep;
	struct coord *c;

	t_rmrf(dir);
	free(path);
	path = t_path(dir, "wal");
	assert_int_equal(be32toh(*(uint32_t *)(wal.p + 4)), WAL_VERSION);

	t_hdr_version_set(wal.p, WAL_HDR_LEN, WAL_VERSION + 1);
	t_refusal_expect(dir, "wal", wal.p, wal.len, 0, "newer wal", 0);
	t_check(dir, WAL_CHECK_REPAIR, &rep);
	assert_int_equal(rep.state, WAL_STATE_BAD);
	assert_false(rep.repairable);
	assert_string_equal(rep.cut_name, "");
	assert_non_null(strstr(rep.why, "newer version"));
	after = t_file_read(path);
	assert_int_equal(after.len, wal.len);
	assert_memory_equal(after.p, wal.p, wal.len);
	free(after.p);

	t_hdr_version_set(wal.p, WAL_HDR_LEN, 0);
	t_refusal_expect(dir, "wal", wal.p, wal.len, 0, "version 0", 0);
	t_check(dir, 0, &rep);
	assert_non_null(strstr(rep.why, "unknown version 0"));
	assert_true(rep.repairable);

	t_hdr_version_set(wal.p, WAL_HDR_LEN, WAL_VERSION);
	t_recover_expect(t, dir, wal.p, wal.len, T_CHANGES, wal.len,
			 "current version", 0);

	/* A snapshot of a newer version. */
	c = t_open(dir, 1000000);
	assert_int_equal(wal_snapshot(c->wal, c->epoch, t_dump, c), 0);
	coord_destroy(c);
	s = t_file_read(snap);
	t_hdr_version_set(s.p, WAL_SNAP_HDR_LEN, WAL_VERSION + 1);
	t_file_write(snap, s.p, s.len);
	assert_int_equal(t_open_err(dir), -EBADMSG);
	t_check(dir, WAL_CHECK_REPAIR, &rep);
	assert_int_equal(rep.state, WAL_STATE_BAD);
	assert_true(rep.bad_in_snap);
	assert_false(rep.repairable);
	assert_string_equal(rep.cut_name, "");
	assert_non_null(strstr(rep.why, "newer version"));
	t_hdr_version_set(s.p, WAL_SNAP_HDR_LEN, WAL_VERSION);
	t_file_write(snap, s.p, s.len);
	c = t_open(dir, 1000000);
	t_state_expect(c, &t->expect[T_CHANGES], "snapshot", 0);
	coord_destroy(c);
	free(s.p);
	free(wal.p);
	free(snap);
	free(path);
	free(dir);
	free(base);
}

/* NODE_FORGET of @name at @now: @err 0 wants OK; the text in @text. */
static void t_forget(struct coord *c, const char *name, uint64_t now,
		     uint64_t err, char *text, size_t text_len)
{
	struct msg req, rep;

	msg_init(&req, MSG_T_NODE_FORGET);
	strcpy(req.name, name);
	assert_int_equal(coord_handle(c, &req, &rep, now), 0);
	assert_int_equal(coord_sync(c), 0);
	if (rep.type != (err ? MSG_T_ERROR : MSG_T_OK) || rep.err != err)
		fail_msg("forget %s: want error %llu, got type %d err %llu: %s",
			 name, (unsigned long long)err, rep.type,
			 (unsigned long long)rep.err, rep.text);
	if (text)
		snprintf(text, text_len, "%s", rep.text);
	msg_fini(&rep);
}

/*
 * A node forgotten: refused while it owns chunks, is a writer or is up;
 * then its endpoints (both ways) are gone, its id is dead for its key and
 * never given again, its name is free; all durable in the wal and the
 * snapshot.
 */
static void test_wal_node_forget(void **state)
{
	struct t_wal *t = *state;
	char *dir = t_path(t->dir, "forget");
	const uint64_t late = T_NOW + 3600 * 1000;
	char text[MSG_TEXT_MAX];
	struct msg req, rep;
	struct coord *c;

	for (int snap = 0; snap < 2; snap++) {
		t_rmrf(dir);
		c = t_open(dir, snap ? 1 : 1000);
		t_join_req(&req, "a", 4 * MIB, 7);
		t_handle_want(c, &req, MSG_T_NODE_JOINED);
		t_join_req(&req, "b", 4 * MIB, 8);
		t_handle_want(c, &req, MSG_T_NODE_JOINED);
		t_endpoint_req(&req, 1, 2, 0x101);
		t_handle_want(c, &req, MSG_T_OK);
		t_endpoint_req(&req, 2, 1, 0x102);
		t_handle_want(c, &req, MSG_T_OK);
		t_create_req(&req, "r", 4 * MIB, 0);
		req.owners = t_ids(2, 2, 1);
		req.n_owners = 2;
		t_handle_want(c, &req, MSG_T_REGION);
		t_create_req(&req, "w", 2 * MIB, 0);
		req.owners = t_ids(1, 1);
		req.n_owners = 1;
		req.writers = t_ids(1, 2);
		req.n_writers = 1;
		t_handle_want(c, &req, MSG_T_REGION);
		t_forget(c, "b", late, EBUSY, text, sizeof(text));
		assert_non_null(strstr(text, "owns chunks of 'r'"));
		msg_init(&req, MSG_T_REGION_DELETE);
		strcpy(req.name, "r");
		t_handle_want(c, &req, MSG_T_OK);
		t_forget(c, "b", late, EBUSY, text, sizeof(text));
		assert_non_null(strstr(text, "is a writer of 'w'"));
		t_writers_req(&req, MSG_T_REGION_WRITERS, (uint64_t[]){ 1 }, 1);
		strcpy(req.name, "w");
		t_handle_want(c, &req, MSG_T_OK);
		t_forget(c, "b", T_NOW, EBUSY, text, sizeof(text));
		assert_non_null(strstr(text, "is up"));
		t_forget(c, "nosuch", late, ENOENT, NULL, 0);
		/* a node key may not */
		msg_init(&req, MSG_T_NODE_FORGET);
		strcpy(req.name, "b");
		assert_int_equal(
			coord_authorize(c, COORD_ROLE_NODE, "a", &req, &rep),
			-EACCES);
		msg_fini(&rep);
		msg_fini(&req);
		t_forget(c, "b", late, 0, NULL, 0);
		assert_null(coord_node_find(c, 2));
		assert_null(coord_endpoint_find(c, 1, 2));
		assert_null(coord_endpoint_find(c, 2, 1));
		t_forget(c, "b", late, ENOENT, NULL, 0);
		coord_destroy(c);

		/* after a restart (wal, or snapshot): still gone */
		c = t_open(dir, snap ? 1 : 1000);
		assert_int_equal(c->n_nodes, 2);
		assert_true(c->nodes[1].gone);
		assert_null(coord_node_find(c, 2));
		assert_int_equal(c->n_eps, 0);
		/* b's key cannot act for the old id */
		msg_init(&req, MSG_T_HEARTBEAT);
		req.node = 2;
		req.instance = 8;
		assert_int_equal(
			coord_authorize(c, COORD_ROLE_NODE, "b", &req, &rep),
			-ESTALE);
		msg_fini(&rep);
		msg_fini(&req);
		t_mr_req(&req, 2);
		assert_int_equal(
			coord_authorize(c, COORD_ROLE_NODE, "b", &req, &rep),
			-EACCES);
		assert_non_null(strstr(rep.text, "was forgotten"));
		msg_fini(&rep);
		msg_fini(&req);
		/* the name is free: a new node, a new id */
		t_join_req(&req, "b", 4 * MIB, 9);
		t_handle(c, &req, &rep);
		assert_int_equal(rep.type, MSG_T_NODE_JOINED);
		assert_int_equal(rep.node, 3);
		msg_fini(&rep);
		msg_init(&req, MSG_T_NODE_LIST);
		t_handle(c, &req, &rep);
		assert_int_equal(rep.n_nodes, 2);
		assert_int_equal(rep.n_gone, 1);
		assert_int_equal(rep.gone[0].id, 2);
		assert_string_equal(rep.gone[0].name, "b");
		msg_fini(&rep);
		coord_destroy(c);

		c = t_open(dir, snap ? 1 : 1000);
		assert_int_equal(c->n_nodes, 3);
		assert_true(c->nodes[1].gone);
		assert_false(c->nodes[2].gone);
		assert_string_equal(c->nodes[2].name, "b");
		coord_destroy(c);
	}
	free(dir);
}

static void t_forget(struct coord *c, const char *name, uint64_t now,
		     uint64_t err, char *text, size_t text_len);

static void t_readers_req(struct msg *m, enum msg_type type,
			  const uint64_t *ids, uint32_t n)
{
	msg_init(m, type);
	strcpy(m->name, "r");
	if (n) {
		m->readers = malloc(n * sizeof(*m->readers));
		assert_non_null(m->readers);
		memcpy(m->readers, ids, n * sizeof(*ids));
		m->n_readers = n;
	}
}

/*
 * May node key @name look region r up? 0, or -EACCES with the refusal's
 * text in @text.
 */
static int t_read_authorize(struct coord *c, enum coord_role role,
			    const char *name, char *text, size_t text_len)
{
	struct msg req, rep;
	int ret;

	msg_init(&req, MSG_T_REGION_GET);
	strcpy(req.name, "r");
	req.want_grants = 1;
	ret = coord_authorize(c, role, name, &req, &rep);
	if (text)
		snprintf(text, text_len, "%s", rep.text);
	msg_fini(&rep);
	msg_fini(&req);
	return ret;
}

/*
 * A region's readers: a node key outside them (and the writers) may not
 * look it up (EACCES naming them), so it gets no layout and no grants,
 * nor its write lease while no writers are named; the admin key reads
 * every layout. They are durable in the wal and the snapshot (and
 * --check reads them), changed by REGION_READERS (a lease holder that may
 * no longer read loses the lease), and keep their nodes from being
 * forgotten. A region logged without readers (older logs and snapshots)
 * is any node's to read.
 */
static void test_wal_readers(void **state)
{
	struct t_wal *t = *state;
	char *dir = t_path(t->dir, "readers");
	const uint64_t late = T_NOW + 3600 * 1000;
	char text[MSG_TEXT_MAX];
	struct wal_report wr;
	struct msg req, rep;
	struct t_buf b;
	struct coord *c;

	for (int snap = 0; snap < 2; snap++) {
		t_rmrf(dir);
		c = t_open(dir, snap ? 1 : 1000);
		t_join_req(&req, "a", 4 * MIB, 7);
		t_handle_want(c, &req, MSG_T_NODE_JOINED);
		t_join_req(&req, "b", 4 * MIB, 8);
		t_handle_want(c, &req, MSG_T_NODE_JOINED);
		t_join_req(&req, "c", 4 * MIB, 9);
		t_handle_want(c, &req, MSG_T_NODE_JOINED);
		/* b owns every chunk; only a may read */
		t_readers_req(&req, MSG_T_REGION_CREATE, (uint64_t[]){ 1, 1 },
			      2);
		req.size = 4 * MIB;
		req.owners = t_ids(2, 2, 2);
		req.n_owners = 2;
		t_handle(c, &req, &rep);
		assert_int_equal(rep.type, MSG_T_REGION);
		assert_int_equal(rep.n_readers, 1);
		assert_int_equal(rep.readers[0], 1);
		msg_fini(&rep);
		/* an unknown node cannot be a reader */
		t_readers_req(&req, MSG_T_REGION_READERS, (uint64_t[]){ 9 }, 1);
		t_handle_err(c, &req, ENOENT, text, sizeof(text));
		assert_non_null(strstr(text, "readers: unknown node 9"));
		/* c's key: refused, the readers named; a's and the admin's
		 * are let through */
		assert_int_equal(t_read_authorize(c, COORD_ROLE_NODE, "c", text,
						  sizeof(text)),
				 -EACCES);
		assert_non_null(strstr(text, "region 'r': node 3 (c) may not "
					     "read it; its readers: a (1)"));
		assert_int_equal(
			t_read_authorize(c, COORD_ROLE_NODE, "a", NULL, 0), 0);
		assert_int_equal(
			t_read_authorize(c, COORD_ROLE_ADMIN, "", NULL, 0), 0);
		assert_int_equal(
			t_read_authorize(c, COORD_ROLE_NODE, "nosuch", NULL, 0),
			-EACCES);
		/* no writers named: only a reader may write */
		t_wlease_req(&req, MSG_T_WRITE_LEASE, 3, 9, 99);
		req.wgen = MSG_WGEN_NEW;
		t_handle_err(c, &req, EACCES, text, sizeof(text));
		assert_non_null(strstr(text, "its readers: a (1)"));
		t_wlease_req(&req, MSG_T_WRITE_LEASE, 1, 7, 77);
		t_wlease_gen(c, &req);
		/* node keys may not change the readers */
		t_readers_req(&req, MSG_T_REGION_READERS, (uint64_t[]){ 3 }, 1);
		assert_int_equal(
			coord_authorize(c, COORD_ROLE_NODE, "c", &req, &rep),
			-EACCES);
		assert_non_null(strstr(rep.text, "needs the admin key"));
		msg_fini(&rep);
		msg_fini(&req);
		/* a reader is not forgotten */
		t_forget(c, "a", late, EBUSY, text, sizeof(text));
		assert_non_null(strstr(text, "is a reader of 'r'"));
		coord_destroy(c);

		c = t_open(dir, snap ? 1 : 1000);
		assert_int_equal(c->regions[0]->n_readers, 1);
		assert_int_equal(c->regions[0]->readers[0], 1);
		assert_int_equal(c->regions[0]->writer.lease, 77);
		assert_int_equal(
			t_read_authorize(c, COORD_ROLE_NODE, "c", NULL, 0),
			-EACCES);
		/* REGION_GET carries the readers */
		msg_init(&req, MSG_T_REGION_GET);
		strcpy(req.name, "r");
		t_handle(c, &req, &rep);
		assert_int_equal(rep.type, MSG_T_REGION);
		assert_int_equal(rep.n_readers, 1);
		assert_int_equal(rep.readers[0], 1);
		msg_fini(&rep);
		/* only b reads now: a, the holder, loses the lease */
		t_readers_req(&req, MSG_T_REGION_READERS, (uint64_t[]){ 2 }, 1);
		t_handle_want(c, &req, MSG_T_OK);
		assert_int_equal(c->regions[0]->writer.lease, 0);
		assert_int_equal(
			t_read_authorize(c, COORD_ROLE_NODE, "a", NULL, 0),
			-EACCES);
		assert_int_equal(
			t_read_authorize(c, COORD_ROLE_NODE, "b", NULL, 0), 0);
		/* writers named (c) may read too */
		t_writers_req(&req, MSG_T_REGION_WRITERS, (uint64_t[]){ 3 }, 1);
		t_handle_want(c, &req, MSG_T_OK);
		assert_int_equal(
			t_read_authorize(c, COORD_ROLE_NODE, "c", NULL, 0), 0);
		assert_int_equal(t_read_authorize(c, COORD_ROLE_NODE, "a", text,
						  sizeof(text)),
				 -EACCES);
		assert_non_null(strstr(text, "its readers: b (2); its writers: "
					     "c (3)"));
		coord_destroy(c);

		/* --check reads the REGION_READERS record */
		t_check(dir, 0, &wr);
		assert_int_equal(wr.state, WAL_STATE_CLEAN);

		c = t_open(dir, snap ? 1 : 1000);
		assert_int_equal(c->regions[0]->n_readers, 1);
		assert_int_equal(c->regions[0]->readers[0], 2);
		assert_int_equal(c->regions[0]->n_writers, 1);
		assert_int_equal(c->regions[0]->writer.lease, 0);
		assert_int_equal(
			t_read_authorize(c, COORD_ROLE_NODE, "c", NULL, 0), 0);
		assert_int_equal(
			t_read_authorize(c, COORD_ROLE_NODE, "a", NULL, 0),
			-EACCES);
		/* any node again */
		t_readers_req(&req, MSG_T_REGION_READERS, NULL, 0);
		t_handle_want(c, &req, MSG_T_OK);
		coord_destroy(c);

		c = t_open(dir, snap ? 1 : 1000);
		assert_int_equal(c->regions[0]->n_readers, 0);
		assert_int_equal(
			t_read_authorize(c, COORD_ROLE_NODE, "a", NULL, 0), 0);
		coord_destroy(c);
	}

	/* Written without readers (as every older version did): the log
	 * and the snapshot have no such field, and any node may read. */
	for (int snap = 0; snap < 2; snap++) {
		t_rmrf(dir);
		c = t_open(dir, snap ? 1 : 1000);
		t_join_req(&req, "a", 4 * MIB, 7);
		t_handle_want(c, &req, MSG_T_NODE_JOINED);
		t_join_req(&req, "b", 4 * MIB, 8);
		t_handle_want(c, &req, MSG_T_NODE_JOINED);
		t_create_req(&req, "r", 4 * MIB, 0);
		t_handle_want(c, &req, MSG_T_REGION);
		coord_destroy(c);
		{
			char *f = t_path(dir, snap ? "snapshot" : "wal");

			b = t_file_read(f);
			assert_true(b.len > WAL_HDR_LEN);
			assert_null(memmem(b.p, b.len, "readers", 7));
			free(b.p);
			free(f);
		}
		c = t_open(dir, 1000);
		assert_int_equal(c->regions[0]->n_readers, 0);
		assert_int_equal(
			t_read_authorize(c, COORD_ROLE_NODE, "b", NULL, 0), 0);
		t_wlease_req(&req, MSG_T_WRITE_LEASE, 2, 8, 88);
		t_wlease_gen(c, &req);
		coord_destroy(c);
	}
	t_rmrf(dir);
	free(dir);
}

/* Digests a node's last answer asked for (checks), by node id: sent in
 * its next heartbeat, the same for every node (every copy matches). */
#define T_NODES_MAX 8
static struct t_pend {
	struct msg_rsum s[MSG_TASKS_MAX];
	uint32_t n;
} t_pend[T_NODES_MAX];

/* A heartbeat of node @node (@inst) at @now; the answer in @ack. */
static void t_hb_at(struct coord *c, uint64_t node, uint64_t inst, uint64_t now,
		    uint64_t taken, uint64_t rebuilt, struct msg *ack)
{
	struct t_pend *p = &t_pend[node % T_NODES_MAX];
	struct msg req;

	msg_init(&req, MSG_T_HEARTBEAT);
	req.node = node;
	req.instance = inst;
	req.rchk = 1;
	if (p->n) {
		req.sums = p->s; /* ours */
		req.n_sums = p->n;
	}
	if (taken) {
		req.taken = &taken;
		req.n_taken = 1;
	}
	if (rebuilt) {
		req.rebuilt = &rebuilt;
		req.n_rebuilt = 1;
	}
	assert_int_equal(coord_handle(c, &req, ack, now), 0);
	assert_int_equal(coord_sync(c), 0);
	assert_int_equal(ack->type, MSG_T_HEARTBEAT_ACK);
	p->n = 0;
	for (uint32_t i = 0; i < ack->n_checks; i++) {
		struct msg_rsum *s = &p->s[p->n++];

		s->id = ack->checks[i].id;
		s->nonce = ack->checks[i].nonce;
		memset(s->sum, (int)(s->nonce & 0xff), MSG_SUM_LEN);
	}
}

/* The copy of task reported rebuilt by @copier checked: the source's
 * node @src is asked and answers, then the copier answers. */
static void t_hb_check(struct coord *c, uint64_t copier, uint64_t cinst,
		       uint64_t src, uint64_t sinst, uint64_t now)
{
	struct msg ack;

	t_hb_at(c, src, sinst, now, 0, 0, &ack);
	assert_int_equal(ack.n_checks, 1);
	msg_fini(&ack);
	t_hb_at(c, src, sinst, now, 0, 0, &ack);
	msg_fini(&ack);
	t_hb_at(c, copier, cinst, now, 0, 0, &ack);
	msg_fini(&ack);
}

/* Reopens @dir and checks the recovered state is @c's. */
static struct coord *t_reopen_same(struct coord *c, const char *dir,
				   uint64_t every, const char *what)
{
	struct t_buf want = t_state(c);

	coord_destroy(c);
	c = t_open(dir, every);
	t_state_expect(c, &want, what, every);
	free(want.p);
	return c;
}

/*
 * Replicas: the region record with replicas and rgen, every replica state
 * change (MISSING with its extent fenced, REBUILDING, SYNC) survive a
 * restart through the wal and through snapshots; a region of one replica
 * is written as before (no replica field: older logs read as one replica).
 */
static void test_wal_replicas(void **state)
{
	struct t_wal *t = *state;
	char *dir = t_path(t->dir, "replicas");
	const uint64_t L = COORD_LEASE_MS_DEFAULT;
	struct msg req, rep, ack;
	struct t_buf b;
	struct coord *c;

	for (int snap = 0; snap < 2; snap++) {
		uint64_t every = snap ? 1 : 1000, task = 0, on = 0;

		t_rmrf(dir);
		c = t_open(dir, every);
		for (int i = 0; i < 3; i++) {
			char name[2] = { (char)('a' + i), 0 };

			t_join_req(&req, name, 8 * MIB, 7 + (uint64_t)i);
			snprintf(req.zone, sizeof(req.zone), "z%d", i);
			t_handle_want(c, &req, MSG_T_NODE_JOINED);
		}
		t_create_req(&req, "o", 2 * MIB, 0);
		t_handle_want(c, &req, MSG_T_REGION);
		/* one replica: the records carry nothing new */
		b = t_state(c);
		assert_null(memmem(b.p, b.len, "replicas", 8));
		assert_null(memmem(b.p, b.len, "rgen", 4));
		free(b.p);
		t_create_req(&req, "r", 4 * MIB, 0);
		req.replicas = 2;
		t_handle(c, &req, &rep);
		assert_int_equal(rep.type, MSG_T_REGION);
		assert_int_equal(rep.n_chunks, 4);
		/* chunk 0 on a and b, chunk 1 on b and c */
		assert_int_equal(rep.chunks[0].node, 1);
		msg_fini(&rep);
		c = t_reopen_same(c, dir, every, "created");
		msg_init(&req, MSG_T_REGION_GET);
		strcpy(req.name, "r");
		t_handle(c, &req, &rep);
		assert_int_equal(rep.type, MSG_T_ERROR);
		assert_int_equal(rep.err, EPROTONOSUPPORT);
		msg_fini(&rep);

		/* a falls silent: its replica leaves the set */
		t_hb_at(c, 2, 8, T_NOW + L - 1, 0, 0, &ack);
		msg_fini(&ack);
		t_hb_at(c, 3, 9, T_NOW + L - 1, 0, 0, &ack);
		msg_fini(&ack);
		assert_int_equal(coord_lease_check(c, T_NOW + L + 1), 0);
		assert_int_equal(coord_sync(c), 0);
		msg_init(&req, MSG_T_REGION_GET);
		strcpy(req.name, "r");
		req.want_repl = 1;
		t_handle(c, &req, &rep);
		assert_int_equal(rep.rgen, 2);
		assert_int_equal(rep.n_rstates, 1);
		assert_int_equal(rep.rstates[0].chunk, 0);
		assert_int_equal(rep.rstates[0].state, MSG_RS_MISSING);
		msg_fini(&rep);
		c = t_reopen_same(c, dir, every, "missing");
		/* the extent stays fenced across the restart */
		t_hb_at(c, 1, 7, T_NOW, 0, 0, &ack);
		assert_int_equal(ack.n_fence, 1);
		assert_int_equal(ack.fence[0].len, 2 * MIB);
		msg_fini(&ack);

		/* the task (on c: b holds the other replica), taken; a
		 * restarted coordinator gives one only to a node whose
		 * heartbeat said it answers checks */
		t_hb_at(c, 3, 9, T_NOW + 1, 0, 0, &ack);
		msg_fini(&ack);
		assert_int_equal(coord_lease_check(c, T_NOW + 1), 0);
		t_hb_at(c, 3, 9, T_NOW + 1, 0, 0, &ack);
		assert_int_equal(ack.n_tasks, 1);
		task = ack.tasks[0].id;
		on = 3;
		assert_int_equal(ack.tasks[0].src_node, 2);
		msg_fini(&ack);
		t_hb_at(c, on, 9, T_NOW + 2, task, 0, &ack);
		msg_fini(&ack);
		msg_init(&req, MSG_T_REGION_GET);
		strcpy(req.name, "r");
		req.want_repl = 1;
		t_handle(c, &req, &rep);
		assert_int_equal(rep.rgen, 3);
		assert_int_equal(rep.n_rstates, 1);
		assert_int_equal(rep.rstates[0].state, MSG_RS_REBUILDING);
		assert_int_equal(rep.chunks[0].node, 3);
		msg_fini(&rep);
		c = t_reopen_same(c, dir, every, "rebuilding");

		/* the restarted coordinator hands the copy out again (tasks
		 * are not logged; ids of the last run mean nothing now) */
		t_hb_at(c, on, 9, T_NOW + 3, 0, task, &ack);
		assert_int_equal(ack.n_tasks, 1);
		assert_int_not_equal(ack.tasks[0].id, task);
		assert_int_equal(ack.tasks[0].src_node, 2);
		task = ack.tasks[0].id;
		msg_fini(&ack);
		msg_init(&req, MSG_T_REGION_GET);
		strcpy(req.name, "r");
		req.want_repl = 1;
		t_handle(c, &req, &rep);
		assert_int_equal(rep.n_rstates, 1);
		assert_int_equal(rep.rgen, 3);
		msg_fini(&rep);
		t_hb_at(c, on, 9, T_NOW + 4, 0, task, &ack);
		assert_int_equal(ack.n_tasks, 0);
		assert_int_equal(ack.n_checks, 1);
		msg_fini(&ack);
		t_hb_check(c, on, 9, 2, 8, T_NOW + 4);
		c = t_reopen_same(c, dir, every, "rebuilt");
		msg_init(&req, MSG_T_REGION_GET);
		strcpy(req.name, "r");
		req.want_repl = 1;
		t_handle(c, &req, &rep);
		assert_int_equal(rep.n_rstates, 0);
		assert_int_equal(rep.rgen, 4);
		msg_fini(&rep);
		coord_destroy(c);
	}
	t_rmrf(dir);
	free(dir);
}

/* taken and rebuilt in one coordinator's life: SYNC, durable. */
static void test_wal_replicas_rebuilt(void **state)
{
	struct t_wal *t = *state;
	char *dir = t_path(t->dir, "replicas2");
	const uint64_t L = COORD_LEASE_MS_DEFAULT;
	struct msg req, rep, ack;
	struct coord *c;
	uint64_t task;

	t_rmrf(dir);
	c = t_open(dir, 1000);
	for (int i = 0; i < 3; i++) {
		char name[2] = { (char)('a' + i), 0 };

		t_join_req(&req, name, 8 * MIB, 7 + (uint64_t)i);
		t_handle_want(c, &req, MSG_T_NODE_JOINED);
	}
	t_create_req(&req, "r", 4 * MIB, 0);
	req.replicas = 2;
	t_handle_want(c, &req, MSG_T_REGION);
	t_hb_at(c, 2, 8, T_NOW + L - 1, 0, 0, &ack);
	msg_fini(&ack);
	t_hb_at(c, 3, 9, T_NOW + L - 1, 0, 0, &ack);
	msg_fini(&ack);
	assert_int_equal(coord_lease_check(c, T_NOW + L + 1), 0);
	t_hb_at(c, 3, 9, T_NOW + L + 2, 0, 0, &ack);
	assert_int_equal(ack.n_tasks, 1);
	task = ack.tasks[0].id;
	msg_fini(&ack);
	t_hb_at(c, 3, 9, T_NOW + L + 3, task, 0, &ack);
	msg_fini(&ack);
	t_hb_at(c, 3, 9, T_NOW + L + 4, 0, task, &ack);
	assert_int_equal(ack.n_tasks, 0);
	msg_fini(&ack);
	t_hb_check(c, 3, 9, 2, 8, T_NOW + L + 4);
	c = t_reopen_same(c, dir, 1000, "rebuilt");
	msg_init(&req, MSG_T_REGION_GET);
	strcpy(req.name, "r");
	req.want_repl = 1;
	t_handle(c, &req, &rep);
	assert_int_equal(rep.n_rstates, 0);
	assert_int_equal(rep.rgen, 4);
	assert_int_equal(rep.chunks[0].node, 3);
	msg_fini(&rep);
	coord_destroy(c);
	/* and through a snapshot */
	c = t_open(dir, 1);
	c = t_reopen_same(c, dir, 1, "rebuilt, snapshot");
	/* b falls silent: its replicas are MISSING and it holds nothing, so
	 * it may be forgotten; the records still naming it load again */
	t_hb_at(c, 1, 7, T_NOW + L - 1, 0, 0, &ack);
	msg_fini(&ack);
	t_hb_at(c, 3, 9, T_NOW + L - 1, 0, 0, &ack);
	msg_fini(&ack);
	assert_int_equal(coord_lease_check(c, T_NOW + L + 1), 0);
	assert_int_equal(coord_sync(c), 0);
	t_forget(c, "b", T_NOW + L + 2, 0, NULL, 0);
	c = t_reopen_same(c, dir, 1, "forgotten, snapshot");
	coord_destroy(c);
	t_rmrf(dir);
	free(dir);
}

/* Pacing: a node gets at most COORD_TASKS_PER_NODE rebuild tasks at once;
 * another follows in the very answer to the heartbeat that reports one
 * done (not a lease check later). */
static void test_wal_replicas_paced(void **state)
{
	struct t_wal *t = *state;
	char *dir = t_path(t->dir, "replicas3");
	const uint64_t L = COORD_LEASE_MS_DEFAULT;
	/* K + 1 replicas of a to rebuild on each of b and c */
	const uint64_t K = COORD_TASKS_PER_NODE, chunks = 3 * (K + 1);
	struct msg req, ack;
	struct coord *c;
	uint64_t id;

	t_rmrf(dir);
	c = t_open(dir, 1000);
	for (int i = 0; i < 3; i++) {
		char name[2] = { (char)('a' + i), 0 };

		t_join_req(&req, name, 2 * chunks * 2 * MIB, 7 + (uint64_t)i);
		t_handle_want(c, &req, MSG_T_NODE_JOINED);
	}
	/* 3(K + 1) chunks of 2 MiB: a holds 2(K + 1) replicas, K + 1 to
	 * rebuild on b, K + 1 on c */
	t_create_req(&req, "r", chunks * 2 * MIB, 0);
	req.replicas = 2;
	t_handle_want(c, &req, MSG_T_REGION);
	t_hb_at(c, 2, 8, T_NOW + L - 1, 0, 0, &ack);
	msg_fini(&ack);
	t_hb_at(c, 3, 9, T_NOW + L - 1, 0, 0, &ack);
	msg_fini(&ack);
	assert_int_equal(coord_lease_check(c, T_NOW + L + 1), 0);
	assert_int_equal(coord_lease_check(c, T_NOW + L + 2), 0);
	for (uint64_t n = 2; n <= 3; n++) {
		t_hb_at(c, n, 6 + n, T_NOW + L + 3, 0, 0, &ack);
		assert_int_equal(ack.n_tasks, COORD_TASKS_PER_NODE);
		id = ack.tasks[0].id;
		msg_fini(&ack);
		/* one done: the answer already holds the last */
		t_hb_at(c, n, 6 + n, T_NOW + L + 4, 0, id, &ack);
		assert_int_equal(ack.n_tasks, COORD_TASKS_PER_NODE);
		for (uint32_t i = 0; i < ack.n_tasks; i++)
			assert_int_not_equal(ack.tasks[i].id, id);
		id = ack.tasks[0].id;
		msg_fini(&ack);
		/* another done: none is left to give */
		t_hb_at(c, n, 6 + n, T_NOW + L + 5, 0, id, &ack);
		assert_int_equal(ack.n_tasks, COORD_TASKS_PER_NODE - 1);
		msg_fini(&ack);
	}
	coord_destroy(c);
	t_rmrf(dir);
	free(dir);
}

/* A heartbeat reports a row per peer and transport: two for a peer that
 * has a TCP connection beside its verbs one (writes to a replica it
 * rebuilds), so up to twice COORD_NODES_MAX rows are taken, no more. */
static void test_wal_peer_rows(void **state)
{
	struct t_wal *t = *state;
	char *dir = t_path(t->dir, "peerrows");
	const uint32_t max = 2 * COORD_NODES_MAX;
	struct msg_peer *rows = calloc(max + 1, sizeof(*rows));
	struct msg req, rep;
	struct coord *c;

	assert_non_null(rows);
	t_rmrf(dir);
	c = t_open(dir, 1000);
	t_join_req(&req, "a", 64 * MIB, 7);
	t_handle_want(c, &req, MSG_T_NODE_JOINED);
	for (uint32_t i = 0; i <= max; i++) {
		rows[i].node = 100 + i / 2;
		strcpy(rows[i].transport, i % 2 ? "tcp" : "verbs");
	}
	for (int over = 0; over <= 1; over++) {
		msg_init(&req, MSG_T_HEARTBEAT);
		req.node = 1;
		req.instance = 7;
		req.peers = rows;
		req.n_peers = max + (uint32_t)over;
		assert_int_equal(coord_handle(c, &req, &rep, T_NOW), 0);
		if (!over) {
			assert_int_equal(rep.type, MSG_T_HEARTBEAT_ACK);
		} else {
			assert_int_equal(rep.type, MSG_T_ERROR);
			assert_int_equal(rep.err, EINVAL);
			assert_non_null(strstr(rep.text, "peer rows"));
		}
		msg_fini(&rep);
	}
	coord_destroy(c);
	free(rows);
	t_rmrf(dir);
	free(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_wal_every_truncation),
		cmocka_unit_test(test_wal_corruption_mid_log),
		cmocka_unit_test(test_wal_record_not_applicable),
		cmocka_unit_test(test_wal_snapshot_replay),
		cmocka_unit_test(test_wal_scrub_durable),
		cmocka_unit_test(test_wal_write_lease_durable),
		cmocka_unit_test(test_wal_write_lease_gen),
		cmocka_unit_test(test_wal_writers),
		cmocka_unit_test(test_wal_node_forget),
		cmocka_unit_test(test_wal_readers),
		cmocka_unit_test(test_wal_replicas),
		cmocka_unit_test(test_wal_replicas_rebuilt),
		cmocka_unit_test(test_wal_replicas_paced),
		cmocka_unit_test(test_wal_peer_rows),
		cmocka_unit_test(test_wal_stale_generation),
		cmocka_unit_test(test_wal_snapshot_corrupt_refuses),
		cmocka_unit_test(test_wal_lock),
		cmocka_unit_test(test_wal_check_repair),
		cmocka_unit_test(test_wal_versions),
	};

	return cmocka_run_group_tests(tests, t_setup, t_teardown);
}
