// SPDX-License-Identifier: MIT
/* Write-ahead log and snapshot of the coordinator's state (format: wal.h). */
#define LOG_PREFIX "wal: "
#include "wal.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <zlib.h>

#include "frame.h"
#include "log.h"
#include "metrics.h"

#define WAL_FILE      "wal"
#define WAL_TMP_FILE  "wal.tmp"
#define SNAP_FILE     "snapshot"
#define SNAP_TMP_FILE "snapshot.tmp"
#define SNAP_BUF_MAX  (1u << 20) /* flush the snapshot writer at this size */

struct wal {
	char *dir;
	char *wal_path; /* dir/wal and dir/snapshot, for messages */
	char *snap_path;
	int dfd;	    /* the data directory: lock and fsync */
	int fd;		    /* the wal file, O_RDWR */
	uint64_t gen;	    /* generation of the current wal */
	uint64_t end;	    /* byte offset of the next record */
	uint64_t n_records; /* records in the current wal */
	int err;	    /* first write/sync failure; sticky */
	struct wal_stats st;
};

/* Accumulates a snapshot file; flushed with write() when large. */
struct wal_snap_writer {
	int fd;
	uint8_t *buf;
	size_t len, cap;
	uint64_t n_records;
	uint64_t bytes; /* written, header included */
	int err;
};

static void wal_put32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)(v >> 24);
	p[1] = (uint8_t)(v >> 16);
	p[2] = (uint8_t)(v >> 8);
	p[3] = (uint8_t)v;
}

static void wal_put64(uint8_t *p, uint64_t v)
{
	wal_put32(p, (uint32_t)(v >> 32));
	wal_put32(p + 4, (uint32_t)v);
}

static uint32_t wal_get32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 |
	       (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

static uint64_t wal_get64(const uint8_t *p)
{
	return (uint64_t)wal_get32(p) << 32 | wal_get32(p + 4);
}

static uint32_t wal_crc(const uint8_t *p, size_t len)
{
	return (uint32_t)crc32(crc32(0L, Z_NULL, 0), p, (uInt)len);
}

/* Reads exactly @len bytes at @off; -ENODATA if the file ends first. */
static int wal_pread_full(int fd, void *buf, size_t len, uint64_t off)
{
	uint8_t *p = buf;

	while (len) {
		ssize_t n = pread(fd, p, len, (off_t)off);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (n == 0)
			return -ENODATA;
		p += n;
		len -= (size_t)n;
		off += (uint64_t)n;
	}
	return 0;
}

static int wal_write_full(int fd, const void *buf, size_t len)
{
	const uint8_t *p = buf;

	while (len) {
		ssize_t n = write(fd, p, len);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

static int wal_mkdir_p(const char *dir)
{
	char *path = strdup(dir);
	int ret = 0;

	if (!path)
		return -ENOMEM;
	for (char *p = path + 1;; p++) {
		if (*p != '/' && *p != '\0')
			continue;
		char c = *p;

		*p = '\0';
		if (mkdir(path, 0700) < 0 && errno != EEXIST) {
			ret = -errno;
			break;
		}
		*p = c;
		if (!c)
			break;
	}
	free(path);
	return ret;
}

/* Encodes a record header for @payload into hdr. */
static void wal_rec_hdr_put(uint8_t hdr[WAL_REC_HDR_LEN],
			    const uint8_t *payload, size_t len)
{
	wal_put32(hdr, WAL_REC_MAGIC);
	wal_put32(hdr + 4, (uint32_t)len);
	wal_put32(hdr + 8, wal_crc(payload, len));
}

/*
 * Reads, checks, decodes and applies the record at @off of a file of @size
 * bytes. Returns its total length, or -EBADMSG with a reason in @why (any
 * problem of the record itself), or -errno of the read.
 */
static ssize_t wal_rec_load(int fd, uint64_t off, uint64_t size, uint8_t **buf,
			    size_t *cap, const struct wal_ops *ops, void *arg,
			    char *why, size_t why_len)
{
	uint8_t hdr[WAL_REC_HDR_LEN];
	char reason[MSG_TEXT_MAX] = "";
	uint32_t magic, len;
	struct msg m;
	int ret;

	if (size - off < WAL_REC_HDR_LEN) {
		snprintf(why, why_len, "short record header (%llu bytes)",
			 (unsigned long long)(size - off));
		return -EBADMSG;
	}
	ret = wal_pread_full(fd, hdr, sizeof(hdr), off);
	if (ret)
		return ret == -ENODATA ? -EIO : ret;
	magic = wal_get32(hdr);
	len = wal_get32(hdr + 4);
	if (magic != WAL_REC_MAGIC) {
		snprintf(why, why_len, "bad record magic 0x%08x", magic);
		return -EBADMSG;
	}
	if (len == 0 || len > FRAME_MAX) {
		snprintf(why, why_len, "bad record length %u", len);
		return -EBADMSG;
	}
	if (size - off - WAL_REC_HDR_LEN < len) {
		snprintf(why, why_len, "short record (%llu of %u bytes)",
			 (unsigned long long)(size - off - WAL_REC_HDR_LEN),
			 len);
		return -EBADMSG;
	}
	if (*cap < len) {
		uint8_t *nb = realloc(*buf, len);

		if (!nb)
			return -ENOMEM;
		*buf = nb;
		*cap = len;
	}
	ret = wal_pread_full(fd, *buf, len, off + WAL_REC_HDR_LEN);
	if (ret)
		return ret == -ENODATA ? -EIO : ret;
	if (wal_crc(*buf, len) != wal_get32(hdr + 8)) {
		snprintf(why, why_len, "CRC mismatch");
		return -EBADMSG;
	}
	ret = msg_decode(*buf, len, &m);
	if (ret == -ENOMEM)
		return ret;
	if (ret) {
		snprintf(why, why_len, "undecodable record");
		return -EBADMSG;
	}
	ret = ops->apply(arg, &m, reason, sizeof(reason));
	if (ret) {
		snprintf(why, why_len, "%s record does not apply: %s",
			 msg_type_name(m.type),
			 reason[0] ? reason : log_strerror(ret));
		msg_fini(&m);
		return ret == -ENOMEM ? ret : -EBADMSG;
	}
	msg_fini(&m);
	return (ssize_t)(WAL_REC_HDR_LEN + len);
}

/*
 * Loads the snapshot if there is one: it must be valid to its last byte.
 * Sets *gen (0 without a snapshot).
 */
static int wal_snap_load(struct wal *w, const struct wal_ops *ops, void *arg,
			 uint64_t *gen)
{
	uint8_t hdr[WAL_SNAP_HDR_LEN];
	char why[MSG_TEXT_MAX + 64] = "";
	uint64_t off = 0, n, i, size;
	uint8_t *buf = NULL;
	ssize_t used = 0;
	size_t cap = 0;
	struct stat st;
	int fd, ret;

	*gen = 0;
	fd = openat(w->dfd, SNAP_FILE, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		ret = -errno;
		if (ret == -ENOENT)
			return 0;
		log_errno(ret, "cannot open %s", w->snap_path);
		return ret;
	}
	if (fstat(fd, &st) < 0) {
		ret = -errno;
		log_errno(ret, "cannot stat %s", w->snap_path);
		goto out_close;
	}
	size = (uint64_t)st.st_size;
	ret = -EBADMSG;
	if (size < WAL_SNAP_HDR_LEN) {
		snprintf(why, sizeof(why), "short header (%llu bytes)",
			 (unsigned long long)size);
		goto out_bad;
	}
	ret = wal_pread_full(fd, hdr, sizeof(hdr), 0);
	if (ret) {
		log_errno(ret, "cannot read %s", w->snap_path);
		goto out_close;
	}
	ret = -EBADMSG;
	if (wal_get32(hdr) != WAL_SNAP_MAGIC ||
	    wal_get32(hdr + 4) != WAL_VERSION ||
	    wal_get32(hdr + 32) != wal_crc(hdr, 32)) {
		snprintf(why, sizeof(why),
			 "bad header (magic, version or CRC)");
		goto out_bad;
	}
	n = wal_get64(hdr + 24);
	off = WAL_SNAP_HDR_LEN;
	for (i = 0; i < n; i++) {
		used = wal_rec_load(fd, off, size, &buf, &cap, ops, arg, why,
				    sizeof(why));
		if (used < 0)
			break;
		off += (uint64_t)used;
	}
	if (i < n && used != -EBADMSG) {
		ret = (int)used;
		log_errno(ret, "cannot load %s", w->snap_path);
		goto out_close;
	}
	if (i < n)
		goto out_bad;
	if (off != size) {
		snprintf(why, sizeof(why), "%llu bytes after the last record",
			 (unsigned long long)(size - off));
		goto out_bad;
	}
	*gen = wal_get64(hdr + 8);
	ops->snapshot_loaded(arg, wal_get64(hdr + 16));
	log_info("loaded %s: generation %llu, %llu records, epoch %llu",
		 w->snap_path, (unsigned long long)*gen, (unsigned long long)n,
		 (unsigned long long)wal_get64(hdr + 16));
	ret = 0;
	goto out_close;
out_bad:
	/* Only ever renamed into place whole: this is no torn write. */
	log_err("snapshot %s is invalid at byte %llu: %s", w->snap_path,
		(unsigned long long)off, why);
	log_err("refusing to start: restore %s from a backup", w->snap_path);
	log_err("(or move %s away to start with no state)", w->dir);
out_close:
	free(buf);
	close(fd);
	return ret;
}

/*
 * Replaces the wal with an empty one of generation @gen (tmp file, fsync,
 * rename, directory fsync) and opens it for appending.
 */
static int wal_file_reset(struct wal *w, uint64_t gen)
{
	uint8_t hdr[WAL_HDR_LEN];
	int fd, ret;

	wal_put32(hdr, WAL_HDR_MAGIC);
	wal_put32(hdr + 4, WAL_VERSION);
	wal_put64(hdr + 8, gen);
	wal_put32(hdr + 16, wal_crc(hdr, 16));

	fd = openat(w->dfd, WAL_TMP_FILE,
		    O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0) {
		ret = -errno;
		log_errno(ret, "cannot create %s.tmp", w->wal_path);
		return ret;
	}
	ret = wal_write_full(fd, hdr, sizeof(hdr));
	if (!ret && fsync(fd) < 0)
		ret = -errno;
	if (!ret && renameat(w->dfd, WAL_TMP_FILE, w->dfd, WAL_FILE) < 0)
		ret = -errno;
	if (!ret && fsync(w->dfd) < 0)
		ret = -errno;
	if (ret) {
		log_errno(ret, "cannot write a new %s", w->wal_path);
		close(fd);
		return ret;
	}
	if (w->fd >= 0)
		close(w->fd);
	w->fd = fd;
	w->gen = gen;
	w->end = WAL_HDR_LEN;
	w->n_records = 0;
	return 0;
}

/*
 * Checks the header of the wal open as @fd (@size bytes) against the
 * snapshot's generation @gen. Returns 0 to replay it, 1 to start an empty
 * log instead (logged), or -EBADMSG if the wal is newer than the snapshot.
 */
static int wal_hdr_check(struct wal *w, int fd, uint64_t size, uint64_t gen)
{
	uint8_t hdr[WAL_HDR_LEN];
	uint64_t hgen;
	int ret;

	if (size < WAL_HDR_LEN) {
		log_warn("%s: short header (%llu bytes); starting an empty log",
			 w->wal_path, (unsigned long long)size);
		return 1;
	}
	ret = wal_pread_full(fd, hdr, sizeof(hdr), 0);
	if (ret) {
		log_errno(ret, "cannot read %s", w->wal_path);
		return ret;
	}
	if (wal_get32(hdr) != WAL_HDR_MAGIC ||
	    wal_get32(hdr + 4) != WAL_VERSION ||
	    wal_get32(hdr + 16) != wal_crc(hdr, 16)) {
		log_warn("%s: bad header at byte 0; discarding %llu bytes",
			 w->wal_path, (unsigned long long)size);
		return 1;
	}
	hgen = wal_get64(hdr + 8);
	if (hgen < gen) {
		/* Crash between the snapshot's rename and the new wal's. */
		log_info("%s: generation %llu < snapshot's %llu; discarded",
			 w->wal_path, (unsigned long long)hgen,
			 (unsigned long long)gen);
		return 1;
	}
	if (hgen > gen) {
		log_err("%s: generation %llu, but the snapshot's is %llu",
			w->wal_path, (unsigned long long)hgen,
			(unsigned long long)gen);
		log_err("the snapshot is missing or old: refusing to start");
		return -EBADMSG;
	}
	return 0;
}

/* Opens the wal of generation @gen and replays it, truncating a bad tail. */
static int wal_replay(struct wal *w, uint64_t gen, const struct wal_ops *ops,
		      void *arg)
{
	char why[MSG_TEXT_MAX + 64] = "";
	uint64_t off, size;
	uint8_t *buf = NULL;
	ssize_t used = 0;
	size_t cap = 0;
	struct stat st;
	int fd, ret;

	fd = openat(w->dfd, WAL_FILE, O_RDWR | O_CLOEXEC);
	if (fd < 0) {
		ret = -errno;
		if (ret == -ENOENT)
			return wal_file_reset(w, gen);
		log_errno(ret, "cannot open %s", w->wal_path);
		return ret;
	}
	if (fstat(fd, &st) < 0) {
		ret = -errno;
		log_errno(ret, "cannot stat %s", w->wal_path);
		close(fd);
		return ret;
	}
	size = (uint64_t)st.st_size;
	ret = wal_hdr_check(w, fd, size, gen);
	if (ret) {
		close(fd);
		return ret > 0 ? wal_file_reset(w, gen) : ret;
	}

	w->fd = fd; /* wal_close() closes it from here on */
	w->gen = gen;
	w->n_records = 0;
	for (off = WAL_HDR_LEN; off < size; off += (uint64_t)used) {
		used = wal_rec_load(fd, off, size, &buf, &cap, ops, arg, why,
				    sizeof(why));
		if (used < 0)
			break;
		w->n_records++;
	}
	free(buf);
	if (used < 0 && used != -EBADMSG) {
		log_errno((int)used, "cannot replay %s", w->wal_path);
		return (int)used;
	}
	if (used == -EBADMSG) {
		/* A write that was never acknowledged, or corruption. */
		log_warn("%s: log ends at byte %llu: %s; truncating %llu bytes",
			 w->wal_path, (unsigned long long)off, why,
			 (unsigned long long)(size - off));
		if (ftruncate(fd, (off_t)off) < 0 || fsync(fd) < 0) {
			ret = -errno;
			log_errno(ret, "cannot truncate %s", w->wal_path);
			return ret;
		}
	}
	w->end = off;
	log_info("replayed %llu records from %s (generation %llu)",
		 (unsigned long long)w->n_records, w->wal_path,
		 (unsigned long long)gen);
	return 0;
}

int wal_open(const char *dir, const struct wal_ops *ops, void *arg,
	     struct wal **out)
{
	struct wal *w;
	uint64_t gen;
	int ret;

	w = calloc(1, sizeof(*w));
	if (!w)
		return -ENOMEM;
	w->dfd = -1;
	w->fd = -1;
	w->dir = strdup(dir);
	if (!w->dir || asprintf(&w->wal_path, "%s/" WAL_FILE, dir) < 0 ||
	    asprintf(&w->snap_path, "%s/" SNAP_FILE, dir) < 0) {
		w->wal_path = w->snap_path = NULL; /* undefined on failure */
		ret = -ENOMEM;
		goto err;
	}
	ret = wal_mkdir_p(dir);
	if (ret) {
		log_errno(ret, "cannot create data directory %s", dir);
		goto err;
	}
	w->dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (w->dfd < 0) {
		ret = -errno;
		log_errno(ret, "cannot open data directory %s", dir);
		goto err;
	}
	if (flock(w->dfd, LOCK_EX | LOCK_NB) < 0) {
		ret = -errno;
		if (ret == -EWOULDBLOCK)
			log_err("data dir %s is locked by another process",
				dir);
		else
			log_errno(ret, "cannot lock data directory %s", dir);
		goto err;
	}
	/* Leftovers of a crash in the middle of a snapshot. */
	if (unlinkat(w->dfd, SNAP_TMP_FILE, 0) == 0)
		log_info("removed unfinished %s.tmp", w->snap_path);
	if (unlinkat(w->dfd, WAL_TMP_FILE, 0) == 0)
		log_info("removed unfinished %s.tmp", w->wal_path);

	ret = wal_snap_load(w, ops, arg, &gen);
	if (ret)
		goto err;
	ret = wal_replay(w, gen, ops, arg);
	if (ret)
		goto err;
	*out = w;
	return 0;
err:
	wal_close(w);
	return ret;
}

void wal_close(struct wal *w)
{
	if (!w)
		return;
	if (w->fd >= 0)
		close(w->fd);
	if (w->dfd >= 0)
		close(w->dfd); /* releases the lock */
	free(w->snap_path);
	free(w->wal_path);
	free(w->dir);
	free(w);
}

static int wal_fail(struct wal *w, int err, const char *what)
{
	log_errno(err, "%s %s", what, w->wal_path);
	w->err = err;
	return err;
}

int wal_append(struct wal *w, const uint8_t *payload, size_t len)
{
	uint64_t t0 = metrics_now_ns();
	uint8_t hdr[WAL_REC_HDR_LEN];
	struct iovec iov[2];
	uint64_t off;
	size_t left;

	if (w->err)
		return w->err;
	if (len == 0 || len > FRAME_MAX)
		return -EMSGSIZE;
	wal_rec_hdr_put(hdr, payload, len);
	iov[0].iov_base = hdr;
	iov[0].iov_len = sizeof(hdr);
	iov[1].iov_base = (void *)payload;
	iov[1].iov_len = len;
	off = w->end;
	left = sizeof(hdr) + len;
	while (left) {
		ssize_t n = pwritev(w->fd, iov, 2, (off_t)off);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return wal_fail(w, -errno, "cannot write to");
		}
		off += (uint64_t)n;
		left -= (size_t)n;
		/* Short write: step the vector past what went out. */
		for (int i = 0; i < 2; i++) {
			size_t k = (size_t)n < iov[i].iov_len ? (size_t)n
							      : iov[i].iov_len;

			iov[i].iov_base = (uint8_t *)iov[i].iov_base + k;
			iov[i].iov_len -= k;
			n -= (ssize_t)k;
		}
	}
	w->end = off;
	w->n_records++;
	metrics_hist_observe(&w->st.append_ns, metrics_now_ns() - t0);
	return 0;
}

int wal_sync(struct wal *w)
{
	uint64_t t0 = metrics_now_ns();

	if (w->err)
		return w->err;
	if (fsync(w->fd) < 0)
		return wal_fail(w, -errno, "cannot sync");
	metrics_hist_observe(&w->st.fsync_ns, metrics_now_ns() - t0);
	return 0;
}

const struct wal_stats *wal_stats(const struct wal *w)
{
	return &w->st;
}

uint64_t wal_records(const struct wal *w)
{
	return w->n_records;
}

static int wal_snap_flush(struct wal_snap_writer *sw)
{
	int ret;

	if (sw->err)
		return sw->err;
	ret = wal_write_full(sw->fd, sw->buf, sw->len);
	if (ret)
		sw->err = ret;
	sw->bytes += sw->len;
	sw->len = 0;
	return ret;
}

static int wal_snap_emit(void *emit_arg, const struct msg *rec)
{
	struct wal_snap_writer *sw = emit_arg;
	uint8_t *payload;
	size_t len;
	int ret;

	if (sw->err)
		return sw->err;
	ret = msg_encode(rec, &payload, &len);
	if (ret)
		goto out_err;
	if (len > FRAME_MAX) {
		ret = -EMSGSIZE;
		goto out_free;
	}
	if (sw->cap - sw->len < WAL_REC_HDR_LEN + len) {
		size_t need = sw->len + WAL_REC_HDR_LEN + len;
		uint8_t *nb;

		if (sw->len) {
			ret = wal_snap_flush(sw);
			if (ret)
				goto out_free;
			need = WAL_REC_HDR_LEN + len;
		}
		if (sw->cap < need) {
			nb = realloc(sw->buf, need);
			if (!nb) {
				ret = -ENOMEM;
				goto out_free;
			}
			sw->buf = nb;
			sw->cap = need;
		}
	}
	wal_rec_hdr_put(sw->buf + sw->len, payload, len);
	memcpy(sw->buf + sw->len + WAL_REC_HDR_LEN, payload, len);
	sw->len += WAL_REC_HDR_LEN + len;
	sw->n_records++;
	free(payload);
	if (sw->len >= SNAP_BUF_MAX)
		return wal_snap_flush(sw);
	return 0;
out_free:
	free(payload);
out_err:
	sw->err = ret;
	return ret;
}

int wal_snapshot(struct wal *w, uint64_t epoch, wal_dump_fn dump, void *arg)
{
	struct wal_snap_writer sw = { .fd = -1 };
	uint8_t hdr[WAL_SNAP_HDR_LEN] = { 0 };
	uint64_t gen = w->gen + 1;
	int ret;

	if (w->err)
		return w->err;
	sw.fd = openat(w->dfd, SNAP_TMP_FILE,
		       O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (sw.fd < 0) {
		ret = -errno;
		goto out_fail;
	}
	/* Header last: it carries the record count. */
	ret = wal_write_full(sw.fd, hdr, sizeof(hdr));
	if (ret)
		goto out_close;
	sw.bytes = sizeof(hdr);
	ret = dump(arg, wal_snap_emit, &sw);
	if (!ret)
		ret = wal_snap_flush(&sw);
	if (ret)
		goto out_close;
	wal_put32(hdr, WAL_SNAP_MAGIC);
	wal_put32(hdr + 4, WAL_VERSION);
	wal_put64(hdr + 8, gen);
	wal_put64(hdr + 16, epoch);
	wal_put64(hdr + 24, sw.n_records);
	wal_put32(hdr + 32, wal_crc(hdr, 32));
	errno = EIO; /* a short pwrite() leaves errno alone */
	if (pwrite(sw.fd, hdr, sizeof(hdr), 0) != (ssize_t)sizeof(hdr)) {
		ret = -errno;
		goto out_close;
	}
	if (fsync(sw.fd) < 0) {
		ret = -errno;
		goto out_close;
	}
	close(sw.fd);
	sw.fd = -1;
	if (renameat(w->dfd, SNAP_TMP_FILE, w->dfd, SNAP_FILE) < 0 ||
	    fsync(w->dfd) < 0) {
		ret = -errno;
		goto out_fail;
	}
	free(sw.buf);
	ret = wal_file_reset(w, gen);
	if (ret) {
		w->err = ret;
		return ret;
	}
	atomic_fetch_add(&w->st.snapshots, 1);
	atomic_store(&w->st.snapshot_bytes, sw.bytes);
	log_info("wrote %s: generation %llu, %llu records, epoch %llu",
		 w->snap_path, (unsigned long long)gen,
		 (unsigned long long)sw.n_records, (unsigned long long)epoch);
	return 0;
out_close:
	close(sw.fd);
out_fail:
	free(sw.buf);
	log_errno(ret, "cannot write snapshot %s.tmp", w->snap_path);
	w->err = ret;
	return ret;
}
