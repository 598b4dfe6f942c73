// SPDX-License-Identifier: MIT
/*
 * libFuzzer entry: the coordinator's recovery (coord_create() -> wal_open():
 * snapshot and write-ahead log of a data directory, every record applied
 * through coord_record_apply()) from files the input gives. Raw mode writes
 * input bytes as the files; framed mode wraps payloads from the input in
 * valid headers, magics, lengths and CRCs, so the CBOR decoder and the
 * tables get them. Nothing may crash, leak or hang; coord_check() must
 * agree with recovery (refused exactly when it finds the directory bad)
 * and change nothing; a refusal changes nothing either, and a repairable
 * one starts after coord_check()'s repair; a state recovered once must
 * come back the same (coord_records_dump()) from the log it left (torn
 * tail cut), and again from a snapshot of it.
 *
 * One temporary data directory per process (removed at exit); the wal and
 * snapshot files are rewritten for every input.
 *
 * Input, raw mode (byte 0 bit 0 clear):
 *   byte 0 bit 1     no wal file
 *   bytes 1-2        snapshot length n, big-endian (0: no snapshot file)
 *   then             n bytes of snapshot, the rest is the wal
 * Input, framed mode (byte 0 bit 0 set):
 *   byte 0 bit 1     the snapshot header claims one record more
 *          bit 2     torn write: the wal's last byte is cut off
 *   byte 1 bits 0-3  records that go to the snapshot (the first ones)
 *          bit  4    a snapshot file even with no records
 *          bits 5-6  wal generation: the snapshot's, one less (discarded),
 *                    one more (refused), or no wal file
 *   byte 2           snapshot generation - 1 (bits 0-3), epoch (bits 4-7)
 *   then             records: 2-byte big-endian length, payload
 */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <zlib.h>

#include "coord.h"
#include "coord_int.h"
#include "log.h"
#include "msg.h"
#include "wal.h"

#include "fuzz.h"

#define FUZZ_NOW 1000

/* The process's data directory. */
struct fuzz_env {
	char dir[128];
	char wal[160];
	char snap[160];
};

static struct fuzz_env fuzz_env;

/* A file being put together in memory. */
struct fuzz_buf {
	uint8_t *p;
	size_t len, cap;
};

/* A recovered state: its dump, record by record, and its epoch. */
struct fuzz_state {
	struct fuzz_buf dump;
	uint64_t epoch;
};

static int fuzz_rm_one(const char *path, const struct stat *st, int flag,
		       struct FTW *ftw)
{
	return remove(path);
}

static void fuzz_env_cleanup(void)
{
	nftw(fuzz_env.dir, fuzz_rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	struct fuzz_env *e = &fuzz_env;
	const char *tmp = getenv("TMPDIR");
	struct stat st;

	fuzz_log_init("fuzz_wal");
	/* tmpfs: the log's fsyncs cost nothing there */
	if (!stat("/dev/shm", &st) && S_ISDIR(st.st_mode) &&
	    !access("/dev/shm", W_OK))
		tmp = "/dev/shm";
	else if (!tmp)
		tmp = "/tmp";
	snprintf(e->dir, sizeof(e->dir), "%s/fuzz_wal.XXXXXX", tmp);
	if (!mkdtemp(e->dir)) {
		perror("mkdtemp");
		exit(1);
	}
	atexit(fuzz_env_cleanup);
	snprintf(e->wal, sizeof(e->wal), "%s/wal", e->dir);
	snprintf(e->snap, sizeof(e->snap), "%s/snapshot", e->dir);
	return 0;
}

static void fuzz_buf_put(struct fuzz_buf *b, const void *p, size_t len)
{
	if (b->cap - b->len < len) {
		b->cap = (b->len + len) * 2;
		b->p = realloc(b->p, b->cap);
		if (!b->p)
			abort();
	}
	memcpy(b->p + b->len, p, len);
	b->len += len;
}

static void fuzz_buf_put32(struct fuzz_buf *b, uint32_t v)
{
	uint8_t p[4] = { v >> 24, v >> 16, v >> 8, v };

	fuzz_buf_put(b, p, sizeof(p));
}

static void fuzz_buf_put64(struct fuzz_buf *b, uint64_t v)
{
	fuzz_buf_put32(b, (uint32_t)(v >> 32));
	fuzz_buf_put32(b, (uint32_t)v);
}

static uint32_t fuzz_crc(const uint8_t *p, size_t len)
{
	return (uint32_t)crc32(crc32(0L, Z_NULL, 0), p, (uInt)len);
}

/* A record as wal.h has it: magic, length, CRC, payload. */
static void fuzz_buf_put_rec(struct fuzz_buf *b, const uint8_t *p, size_t len)
{
	fuzz_buf_put32(b, WAL_REC_MAGIC);
	fuzz_buf_put32(b, (uint32_t)len);
	fuzz_buf_put32(b, fuzz_crc(p, len));
	fuzz_buf_put(b, p, len);
}

/* Writes @path with @len bytes of @p, or removes it if @p is NULL. */
static void fuzz_file_put(const char *path, const uint8_t *p, size_t len)
{
	int fd;

	if (unlink(path) && errno != ENOENT)
		FUZZ_CHECK(!"unlink");
	if (!p)
		return;
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	FUZZ_CHECK(fd >= 0);
	FUZZ_CHECK(!len || write(fd, p, len) == (ssize_t)len);
	close(fd);
}

static void fuzz_raw(const uint8_t *data, size_t size)
{
	bool has_wal = !(data[0] & 2);
	size_t n = 0;

	if (size >= 3) {
		n = (size_t)data[1] << 8 | data[2];
		data += 3;
		size -= 3;
	} else {
		data += size;
		size = 0;
	}
	if (n > size)
		n = size;
	fuzz_file_put(fuzz_env.snap, n ? data : NULL, n);
	fuzz_file_put(fuzz_env.wal, has_wal ? data + n : NULL, size - n);
}

static void fuzz_framed(const uint8_t *data, size_t size)
{
	struct fuzz_buf snap = { 0 }, recs = { 0 }, wal = { 0 };
	uint64_t gen = 0, wgen, n_snap = 0;
	uint8_t f0, f1, f2;
	size_t off = 3, len;
	bool has_snap;

	if (size < 3)
		return;
	f0 = data[0];
	f1 = data[1];
	f2 = data[2];
	has_snap = (f1 & 0x1f) != 0;
	if (has_snap)
		gen = 1 + (f2 & 15);
	switch ((f1 >> 5) & 3) {
	case 1:
		wgen = gen - 1; /* without a snapshot: wraps, and is refused */
		break;
	case 2:
		wgen = gen + 1;
		break;
	default:
		wgen = gen;
		break;
	}
	fuzz_buf_put32(&wal, WAL_HDR_MAGIC);
	fuzz_buf_put32(&wal, WAL_VERSION);
	fuzz_buf_put64(&wal, wgen);
	fuzz_buf_put32(&wal, fuzz_crc(wal.p, 16));

	while (size - off >= 2) {
		len = (size_t)data[off] << 8 | data[off + 1];
		off += 2;
		if (len > size - off)
			len = size - off;
		if (has_snap && n_snap < (f1 & 15u)) {
			fuzz_buf_put_rec(&recs, data + off, len);
			n_snap++;
		} else {
			fuzz_buf_put_rec(&wal, data + off, len);
		}
		off += len;
	}
	if (has_snap) {
		fuzz_buf_put32(&snap, WAL_SNAP_MAGIC);
		fuzz_buf_put32(&snap, WAL_VERSION);
		fuzz_buf_put64(&snap, gen);
		fuzz_buf_put64(&snap, f2 >> 4);
		fuzz_buf_put64(&snap, n_snap + (f0 & 2 ? 1 : 0));
		fuzz_buf_put32(&snap, fuzz_crc(snap.p, 32));
		if (recs.len)
			fuzz_buf_put(&snap, recs.p, recs.len);
	}
	if ((f0 & 4) && wal.len > WAL_HDR_LEN)
		wal.len--;
	fuzz_file_put(fuzz_env.snap, has_snap ? snap.p : NULL, snap.len);
	fuzz_file_put(fuzz_env.wal, ((f1 >> 5) & 3) == 3 ? NULL : wal.p,
		      wal.len);
	free(snap.p);
	free(recs.p);
	free(wal.p);
}

static int fuzz_emit(void *arg, const struct msg *rec)
{
	struct fuzz_buf *b = arg;
	uint8_t *p;
	size_t len;
	int ret;

	ret = msg_encode(rec, &p, &len);
	/* what the tables hold must be encodable: snapshots are made so */
	FUZZ_CHECK(!ret);
	fuzz_buf_put_rec(b, p, len);
	free(p);
	return 0;
}

static int fuzz_dump(void *arg, wal_emit_fn emit, void *emit_arg)
{
	return coord_records_dump(arg, emit, emit_arg);
}

/* Recovers the tables from the data directory; *c NULL on failure. */
static int fuzz_open(struct coord **c, struct fuzz_state *st)
{
	struct coord_cfg cfg = { .data_dir = fuzz_env.dir };
	int ret;

	ret = coord_create(&cfg, FUZZ_NOW, c);
	if (ret) {
		*c = NULL;
		return ret;
	}
	FUZZ_CHECK(!coord_records_dump(*c, fuzz_emit, &st->dump));
	st->epoch = (*c)->epoch;
	return 0;
}

/* Reads @path into @b (emptied first); false if there is no such file. */
static bool fuzz_file_get(const char *path, struct fuzz_buf *b)
{
	uint8_t chunk[4096];
	ssize_t n;
	int fd;

	b->len = 0;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		FUZZ_CHECK(errno == ENOENT);
		return false;
	}
	while ((n = read(fd, chunk, sizeof(chunk))) > 0)
		fuzz_buf_put(b, chunk, (size_t)n);
	FUZZ_CHECK(n == 0);
	close(fd);
	return true;
}

/* The wal and snapshot as they are now. */
struct fuzz_files {
	struct fuzz_buf wal, snap;
	bool has_wal, has_snap;
};

static void fuzz_files_get(struct fuzz_files *f)
{
	f->has_wal = fuzz_file_get(fuzz_env.wal, &f->wal);
	f->has_snap = fuzz_file_get(fuzz_env.snap, &f->snap);
}

static bool fuzz_buf_same(const struct fuzz_buf *a, const struct fuzz_buf *b)
{
	return a->len == b->len && (!a->len || !memcmp(a->p, b->p, a->len));
}

/* Fails unless the files are still as @f has them. */
static void fuzz_files_same(const struct fuzz_files *f)
{
	struct fuzz_files now = { 0 };

	fuzz_files_get(&now);
	FUZZ_CHECK(now.has_wal == f->has_wal && now.has_snap == f->has_snap);
	FUZZ_CHECK(fuzz_buf_same(&now.wal, &f->wal));
	FUZZ_CHECK(fuzz_buf_same(&now.snap, &f->snap));
	free(now.wal.p);
	free(now.snap.p);
}

static void fuzz_state_same(const struct fuzz_state *a,
			    const struct fuzz_state *b)
{
	FUZZ_CHECK(a->dump.len == b->dump.len);
	FUZZ_CHECK(!a->dump.len || !memcmp(a->dump.p, b->dump.p, a->dump.len));
	FUZZ_CHECK(a->epoch == b->epoch);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fuzz_state st[3] = { 0 };
	struct fuzz_files files = { 0 };
	struct wal_report rep;
	char cut[256];
	struct coord *c;
	int ret;

	if (!size)
		return 0;
	if (data[0] & 1)
		fuzz_framed(data, size);
	else
		fuzz_raw(data, size);

	/* the check reads as recovery does, and changes nothing */
	fuzz_files_get(&files);
	FUZZ_CHECK(!coord_check(fuzz_env.dir, 0, &rep));
	fuzz_files_same(&files);
	ret = fuzz_open(&c, &st[0]);
	FUZZ_CHECK((ret != 0) == (rep.state == WAL_STATE_BAD));
	if (ret) {
		/* refused: nothing changed; repaired: it starts */
		FUZZ_CHECK(ret == -EBADMSG);
		fuzz_files_same(&files);
		if (!rep.repairable)
			goto out;
		FUZZ_CHECK(!coord_check(fuzz_env.dir, WAL_CHECK_REPAIR, &rep));
		FUZZ_CHECK(rep.cut_name[0]);
		snprintf(cut, sizeof(cut), "%s/%s", fuzz_env.dir, rep.cut_name);
		FUZZ_CHECK(!unlink(cut));
		FUZZ_CHECK(!fuzz_open(&c, &st[0]));
	}
	coord_destroy(c);
	/* the log as recovery left it (bad tail cut off) gives the same */
	FUZZ_CHECK(!fuzz_open(&c, &st[1]));
	fuzz_state_same(&st[0], &st[1]);
	/* and so does a snapshot of that state */
	FUZZ_CHECK(!wal_snapshot(c->wal, c->epoch, fuzz_dump, c));
	coord_destroy(c);
	FUZZ_CHECK(!fuzz_open(&c, &st[2]));
	fuzz_state_same(&st[0], &st[2]);
	coord_destroy(c);
out:
	for (int i = 0; i < 3; i++)
		free(st[i].dump.p);
	free(files.wal.p);
	free(files.snap.p);
	return 0;
}
