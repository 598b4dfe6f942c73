// SPDX-License-Identifier: MIT
/* Write-ahead log and snapshot of the coordinator's state (format: wal.h). */
#define LOG_PREFIX "wal: "
#include "wal.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
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

/* ---- reading: every version this binary knows ---- */

/* A header as read (the fields every version has, parsed). */
struct wal_hdr {
	const struct wal_fmt *fmt;
	uint64_t gen;
	uint64_t epoch;	  /* snapshot only */
	uint64_t records; /* snapshot only */
};

/*
 * One on-disk version this binary reads (wal.h: "Versions"). To add a
 * version: a new entry first in wal_fmts[] with its header and record
 * parsers, WAL_VERSION moved to it, and the older entries kept. Replay
 * appends to the wal it read, in the current framing: a version whose
 * records differ must not append to an older version's wal, but write a
 * snapshot and a fresh wal of its own version after replaying it.
 */
struct wal_fmt {
	uint32_t version;
	uint32_t hdr_len;      /* wal header */
	uint32_t snap_hdr_len; /* snapshot header */
	uint32_t rec_hdr_len;  /* record header */
	uint32_t rec_magic;    /* a record header's first 4 bytes */
	/* Checks and parses a header whose magic and version are read (@p:
	 * hdr_len or snap_hdr_len bytes). Returns 0 or -EBADMSG (@why). */
	int (*hdr_parse)(const uint8_t *p, bool snap, struct wal_hdr *h,
			 char *why, size_t why_len);
	/* Checks and parses a record header (@p: rec_hdr_len bytes): payload
	 * length and CRC. Returns 0 or -EBADMSG (@why). */
	int (*rec_hdr_parse)(const uint8_t *p, uint32_t *len, uint32_t *crc,
			     char *why, size_t why_len);
};

static int wal_v1_hdr_parse(const uint8_t *p, bool snap, struct wal_hdr *h,
			    char *why, size_t why_len)
{
	size_t crc_at = snap ? 32 : 16;

	if (wal_get32(p + crc_at) != wal_crc(p, crc_at)) {
		snprintf(why, why_len, "header CRC mismatch");
		return -EBADMSG;
	}
	h->gen = wal_get64(p + 8);
	if (snap) {
		h->epoch = wal_get64(p + 16);
		h->records = wal_get64(p + 24);
	}
	return 0;
}

static int wal_v1_rec_hdr_parse(const uint8_t *p, uint32_t *len, uint32_t *crc,
				char *why, size_t why_len)
{
	uint32_t magic = wal_get32(p);

	if (magic != WAL_REC_MAGIC) {
		snprintf(why, why_len, "bad record magic 0x%08x", magic);
		return -EBADMSG;
	}
	*len = wal_get32(p + 4);
	if (*len == 0 || *len > FRAME_MAX) {
		snprintf(why, why_len, "bad record length %u", *len);
		return -EBADMSG;
	}
	*crc = wal_get32(p + 8);
	return 0;
}

/* Newest first; the first entry is WAL_VERSION, what is written. */
static const struct wal_fmt wal_fmts[] = {
	{
		.version = 1,
		.hdr_len = WAL_HDR_LEN,
		.snap_hdr_len = WAL_SNAP_HDR_LEN,
		.rec_hdr_len = WAL_REC_HDR_LEN,
		.rec_magic = WAL_REC_MAGIC,
		.hdr_parse = wal_v1_hdr_parse,
		.rec_hdr_parse = wal_v1_rec_hdr_parse,
	},
};

#define WAL_FMTS	   (sizeof(wal_fmts) / sizeof(wal_fmts[0]))
#define WAL_HDR_BUF	   64 /* the longest header of any version */
#define WAL_REC_HDR_BUF	   32 /* the longest record header */
#define WAL_VERSION_OLDEST (wal_fmts[WAL_FMTS - 1].version)

_Static_assert(WAL_SNAP_HDR_LEN <= WAL_HDR_BUF && WAL_HDR_LEN <= WAL_HDR_BUF &&
		       WAL_REC_HDR_LEN <= WAL_REC_HDR_BUF,
	       "header buffers");
/* Whoever adds version 2 reads struct wal_fmt's comment first. */
_Static_assert(WAL_VERSION == 1, "see struct wal_fmt: appending to an older "
				 "version's wal");

static const struct wal_fmt *wal_fmt_find(uint32_t version)
{
	for (size_t i = 0; i < WAL_FMTS; i++)
		if (wal_fmts[i].version == version)
			return &wal_fmts[i];
	return NULL;
}

/*
 * Reads the header of the wal (@snap false) or snapshot open as @fd, @size
 * bytes, in whichever version it is. Returns 0, -EBADMSG (@why; *@newer
 * set if it is of a version newer than this binary reads), or -errno.
 */
static int wal_hdr_read(int fd, uint64_t size, bool snap, struct wal_hdr *h,
			bool *newer, char *why, size_t why_len)
{
	uint32_t magic = snap ? WAL_SNAP_MAGIC : WAL_HDR_MAGIC;
	uint8_t p[WAL_HDR_BUF];
	const struct wal_fmt *fmt;
	uint32_t version, len;
	int ret;

	*newer = false;
	if (size < 8) {
		snprintf(why, why_len, "short header (%llu bytes)",
			 (unsigned long long)size);
		return -EBADMSG;
	}
	ret = wal_pread_full(fd, p, 8, 0);
	if (ret)
		return ret == -ENODATA ? -EIO : ret;
	if (wal_get32(p) != magic) {
		snprintf(why, why_len, "bad header magic 0x%08x", wal_get32(p));
		return -EBADMSG;
	}
	version = wal_get32(p + 4);
	fmt = wal_fmt_find(version);
	if (!fmt) {
		*newer = version > WAL_VERSION;
		snprintf(why, why_len,
			 "%s version %u (this farpage-coordinator reads "
			 "versions %u to %u)",
			 *newer ? "newer" : "unknown", version,
			 WAL_VERSION_OLDEST, WAL_VERSION);
		return -EBADMSG;
	}
	len = snap ? fmt->snap_hdr_len : fmt->hdr_len;
	if (size < len) {
		snprintf(why, why_len, "short header (%llu of %u bytes)",
			 (unsigned long long)size, len);
		return -EBADMSG;
	}
	ret = wal_pread_full(fd, p, len, 0);
	if (ret)
		return ret == -ENODATA ? -EIO : ret;
	h->fmt = fmt;
	return fmt->hdr_parse(p, snap, h, why, why_len);
}

/*
 * Reads, checks, decodes and applies the record at @off of a file of @size
 * bytes. Returns its total length; -EBADMSG with a reason in @why and
 * *@intact false if the record itself is short or bad (magic, length,
 * CRC), true if it is intact but does not decode or apply; or -errno of
 * the read.
 */
static ssize_t wal_rec_load(const struct wal_fmt *fmt, int fd, uint64_t off,
			    uint64_t size, uint8_t **buf, size_t *cap,
			    const struct wal_ops *ops, void *arg, bool *intact,
			    char *why, size_t why_len)
{
	uint8_t hdr[WAL_REC_HDR_BUF];
	char reason[MSG_TEXT_MAX] = "";
	uint32_t len, crc;
	struct msg m;
	int ret;

	*intact = false;
	if (size - off < fmt->rec_hdr_len) {
		snprintf(why, why_len, "short record header (%llu bytes)",
			 (unsigned long long)(size - off));
		return -EBADMSG;
	}
	ret = wal_pread_full(fd, hdr, fmt->rec_hdr_len, off);
	if (ret)
		return ret == -ENODATA ? -EIO : ret;
	ret = fmt->rec_hdr_parse(hdr, &len, &crc, why, why_len);
	if (ret)
		return ret;
	if (size - off - fmt->rec_hdr_len < len) {
		snprintf(why, why_len, "short record (%llu of %u bytes)",
			 (unsigned long long)(size - off - fmt->rec_hdr_len),
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
	ret = wal_pread_full(fd, *buf, len, off + fmt->rec_hdr_len);
	if (ret)
		return ret == -ENODATA ? -EIO : ret;
	if (wal_crc(*buf, len) != crc) {
		snprintf(why, why_len, "CRC mismatch");
		return -EBADMSG;
	}
	*intact = true;
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
	return (ssize_t)(fmt->rec_hdr_len + len);
}

/*
 * Looks for an intact record (header checks and payload CRC) starting at
 * any byte in [@from, @size) of @fd: what tells a torn last record from
 * a bad record in the middle of the log. Returns 1 with its offset in
 * *@at, 0 if there is none, or -errno.
 */
static int wal_intact_find(const struct wal_fmt *fmt, int fd, uint64_t from,
			   uint64_t size, uint64_t *at)
{
	char why[WAL_WHY_MAX];
	const uint8_t *m, *p;
	uint8_t magic[4];
	uint32_t len, crc;
	int found = 0;

	if (from >= size || size - from < fmt->rec_hdr_len)
		return 0;
	if (size > SIZE_MAX)
		return -EFBIG;
	m = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, 0);
	if (m == MAP_FAILED)
		return -errno;
	wal_put32(magic, fmt->rec_magic);
	for (p = m + from; (size_t)(m + size - p) >= fmt->rec_hdr_len; p++) {
		p = memmem(p, (size_t)(m + size - p), magic, sizeof(magic));
		if (!p || (size_t)(m + size - p) < fmt->rec_hdr_len)
			break;
		if (fmt->rec_hdr_parse(p, &len, &crc, why, sizeof(why)))
			continue;
		if ((size_t)(m + size - p) - fmt->rec_hdr_len < len)
			continue;
		if (wal_crc(p + fmt->rec_hdr_len, len) == crc) {
			*at = (uint64_t)(p - m);
			found = 1;
			break;
		}
	}
	munmap((void *)m, (size_t)size);
	return found;
}

#define WAL_SECTOR 512u /* the smallest unit a disk writes whole */

/*
 * Whether the bad record at @off, the last thing in a file of @size bytes
 * (no intact record follows), is what a crash leaves of an append that
 * never reached fsync. Only two things are: bytes the end of the file cuts
 * short (a header whose present bytes start as a header does, or a record
 * running past the end), and sectors never written, which read as zeros: a
 * part of a 512-byte sector, from @off or the sector's start to the end of
 * the sector or of the file, all zero within the record. A record complete
 * in the file with no such sector that fails its checks was damaged after
 * it was written (a changed byte): it may have been acknowledged. Returns
 * 1 (torn, the evidence appended to @why), 0 (damage, said in @why) or
 * -errno.
 */
static int wal_tail_is_torn(const struct wal_fmt *fmt, int fd, uint64_t off,
			    uint64_t size, char *why, size_t why_len)
{
	size_t n = strlen(why);
	uint64_t end, s, from, to;
	char dummy[WAL_WHY_MAX];
	uint8_t magic[4];
	const uint8_t *m;
	bool parsed = false;
	uint32_t len, crc;
	int torn = 0;

	if (off >= size)
		return 1;
	if (size > SIZE_MAX)
		return -EFBIG;
	m = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, 0);
	if (m == MAP_FAILED)
		return -errno;
	end = off + fmt->rec_hdr_len;
	if (size - off >= fmt->rec_hdr_len &&
	    !fmt->rec_hdr_parse(m + off, &len, &crc, dummy, sizeof(dummy))) {
		parsed = true;
		end += len;
	}
	/* A sector never written, within what the record spans. */
	for (s = off - off % WAL_SECTOR; s < end && s < size; s += WAL_SECTOR) {
		from = s > off ? s : off;
		to = s + WAL_SECTOR < size ? s + WAL_SECTOR : size;
		if (from < end && m[from] == 0 &&
		    !memcmp(m + from, m + from + 1, to - from - 1)) {
			snprintf(why + n, why_len - n,
				 "; bytes %llu to %llu read as zeros (a sector "
				 "never written)",
				 (unsigned long long)from,
				 (unsigned long long)to - 1);
			torn = 1;
			goto out;
		}
	}
	/* Cut short by the end of the file. */
	wal_put32(magic, fmt->rec_magic);
	if (end > size &&
	    (parsed || (size - off < fmt->rec_hdr_len &&
			!memcmp(m + off, magic,
				size - off < sizeof(magic) ? size - off
							   : sizeof(magic))))) {
		torn = 1;
		goto out;
	}
	snprintf(why + n, why_len - n, "%s",
		 end > size ? " (not the start of a record)"
			    : " in the last record: damage, not a torn "
			      "write (the file does not end inside it "
			      "and no sector of it reads as zeros)");
out:
	munmap((void *)m, (size_t)size);
	return torn;
}

/* Records the first problem in @rep. */
static void __attribute__((format(printf, 5, 6)))
wal_bad(struct wal_report *rep, enum wal_state state, bool in_snap,
	uint64_t off, const char *fmt, ...)
{
	va_list ap;

	rep->state = state;
	rep->bad_in_snap = in_snap;
	rep->bad_off = off;
	va_start(ap, fmt);
	vsnprintf(rep->why, sizeof(rep->why), fmt, ap);
	va_end(ap);
}

/*
 * Loads the snapshot if there is one: it must be valid to its last byte.
 * Fills @rep's snapshot fields and, if it is invalid, its problem. Sets
 * *gen (0 without a snapshot). Returns 0 (@rep says how it read) or
 * -errno of a read (logged).
 */
static int wal_snap_read(struct wal *w, const struct wal_ops *ops, void *arg,
			 struct wal_report *rep, uint64_t *gen)
{
	char why[WAL_WHY_MAX] = "";
	uint64_t off = 0, i, size;
	struct wal_hdr h = { 0 };
	uint8_t *buf = NULL;
	ssize_t used = 0;
	bool newer, intact = false;
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
	rep->snap_found = true;
	size = rep->snap_size = (uint64_t)st.st_size;
	ret = wal_hdr_read(fd, size, true, &h, &newer, why, sizeof(why));
	if (ret == -EBADMSG) {
		wal_bad(rep, WAL_STATE_BAD, true, 0, "%s", why);
		ret = 0;
		goto out_close;
	}
	if (ret) {
		log_errno(ret, "cannot read %s", w->snap_path);
		goto out_close;
	}
	rep->snap_version = h.fmt->version;
	rep->snap_gen = h.gen;
	rep->snap_epoch = h.epoch;
	rep->snap_records = h.records;
	off = h.fmt->snap_hdr_len;
	for (i = 0; i < h.records; i++) {
		used = wal_rec_load(h.fmt, fd, off, size, &buf, &cap, ops, arg,
				    &intact, why, sizeof(why));
		if (used < 0)
			break;
		off += (uint64_t)used;
	}
	if (i < h.records && used != -EBADMSG) {
		ret = (int)used;
		log_errno(ret, "cannot load %s", w->snap_path);
		goto out_close;
	}
	/* Only ever renamed into place whole: nothing in it is a torn write. */
	if (i < h.records)
		wal_bad(rep, WAL_STATE_BAD, true, off, "%s", why);
	else if (off != size)
		wal_bad(rep, WAL_STATE_BAD, true, off,
			"%llu bytes after the last record",
			(unsigned long long)(size - off));
	else
		*gen = h.gen;
	ret = 0;
	if (rep->state == WAL_STATE_CLEAN)
		ops->snapshot_loaded(arg, h.epoch);
out_close:
	free(buf);
	close(fd);
	return ret;
}

/*
 * Reads the wal open as @fd against the snapshot's generation @gen: its
 * header, then (unless it is stale) every record through @ops, up to the
 * first that does not load. Fills @rep's wal fields and, if the wal does
 * not read to its end, its state and problem. Returns 0 (@rep says how it
 * read) or -errno of a read (logged).
 */
static int wal_log_read(struct wal *w, int fd, uint64_t gen,
			const struct wal_ops *ops, void *arg,
			struct wal_report *rep)
{
	char why[WAL_WHY_MAX] = "";
	struct wal_hdr h = { 0 };
	uint64_t off, size, at = 0;
	uint8_t *buf = NULL;
	bool newer, intact = false;
	ssize_t used = 0;
	size_t cap = 0;
	struct stat st;
	int ret;

	if (fstat(fd, &st) < 0) {
		ret = -errno;
		log_errno(ret, "cannot stat %s", w->wal_path);
		return ret;
	}
	rep->wal_found = true;
	size = rep->wal_size = (uint64_t)st.st_size;
	ret = wal_hdr_read(fd, size, false, &h, &newer, why, sizeof(why));
	if (ret == -EBADMSG) {
		/* Written whole (tmp file + rename): no torn write either. */
		wal_bad(rep, WAL_STATE_BAD, false, 0, "%s", why);
		rep->repairable = !newer;
		return 0;
	}
	if (ret) {
		log_errno(ret, "cannot read %s", w->wal_path);
		return ret;
	}
	rep->wal_version = h.fmt->version;
	rep->wal_gen = h.gen;
	rep->wal_end = h.fmt->hdr_len;
	if (h.gen < gen) {
		/* Crash between the snapshot's rename and the new wal's. */
		rep->wal_stale = true;
		return 0;
	}
	if (h.gen > gen) {
		wal_bad(rep, WAL_STATE_BAD, false, 0,
			"generation %llu, but the snapshot's is %llu: the "
			"snapshot is missing or old",
			(unsigned long long)h.gen, (unsigned long long)gen);
		return 0;
	}
	for (off = h.fmt->hdr_len; off < size; off += (uint64_t)used) {
		used = wal_rec_load(h.fmt, fd, off, size, &buf, &cap, ops, arg,
				    &intact, why, sizeof(why));
		if (used < 0)
			break;
		rep->wal_records++;
	}
	free(buf);
	rep->wal_end = off;
	if (used >= 0)
		return 0;
	if (used != -EBADMSG) {
		log_errno((int)used, "cannot replay %s", w->wal_path);
		return (int)used;
	}
	rep->repairable = true;
	if (intact) {
		/* Written whole and then refused: not a torn write. */
		wal_bad(rep, WAL_STATE_BAD, false, off, "%s", why);
		return 0;
	}
	ret = wal_intact_find(h.fmt, fd, off + 1, size, &at);
	if (ret < 0) {
		log_errno(ret, "cannot read %s", w->wal_path);
		return ret;
	}
	if (ret) {
		wal_bad(rep, WAL_STATE_BAD, false, off,
			"%s, and an intact record follows at byte %llu", why,
			(unsigned long long)at);
		return 0;
	}
	ret = wal_tail_is_torn(h.fmt, fd, off, size, why, sizeof(why));
	if (ret < 0) {
		log_errno(ret, "cannot read %s", w->wal_path);
		return ret;
	}
	wal_bad(rep, ret ? WAL_STATE_TORN : WAL_STATE_BAD, false, off, "%s",
		why);
	return 0;
}

/* Logs why wal_open() refuses the data directory (@rep). */
static void wal_refusal_log(const struct wal *w, const struct wal_report *rep)
{
	if (rep->bad_in_snap) {
		log_err("snapshot %s is invalid at byte %llu: %s", w->snap_path,
			(unsigned long long)rep->bad_off, rep->why);
		log_err("refusing to start: restore %s from a backup",
			w->snap_path);
		log_err("(or move %s away to start with no state)", w->dir);
		return;
	}
	log_err("%s is invalid at byte %llu: %s", w->wal_path,
		(unsigned long long)rep->bad_off, rep->why);
	if (rep->repairable)
		log_err("refusing to start: 'farpage-coordinator --check %s' "
			"reports; '--check --repair %s' cuts the log there "
			"(%llu bytes, kept in a copy beside it)",
			w->dir, w->dir,
			(unsigned long long)(rep->wal_size - rep->bad_off));
	else
		log_err("refusing to start: restore %s from a backup", w->dir);
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

/* Opens the wal of generation @gen and replays it, cutting a torn tail. */
static int wal_replay(struct wal *w, uint64_t gen, const struct wal_ops *ops,
		      void *arg, struct wal_report *rep)
{
	int fd, ret;

	fd = openat(w->dfd, WAL_FILE, O_RDWR | O_CLOEXEC);
	if (fd < 0) {
		ret = -errno;
		if (ret == -ENOENT)
			return wal_file_reset(w, gen);
		log_errno(ret, "cannot open %s", w->wal_path);
		return ret;
	}
	ret = wal_log_read(w, fd, gen, ops, arg, rep);
	if (!ret && rep->state == WAL_STATE_BAD) {
		wal_refusal_log(w, rep);
		ret = -EBADMSG;
	}
	if (ret) {
		close(fd);
		return ret;
	}
	if (rep->wal_stale) {
		log_info("%s: generation %llu < snapshot's %llu; discarded",
			 w->wal_path, (unsigned long long)rep->wal_gen,
			 (unsigned long long)gen);
		close(fd);
		return wal_file_reset(w, gen);
	}
	w->fd = fd; /* wal_close() closes it from here on */
	w->gen = gen;
	w->n_records = rep->wal_records;
	w->end = rep->wal_end;
	if (rep->state == WAL_STATE_TORN) {
		/* Never acknowledged: an append the crash cut short. */
		log_warn("%s: torn last record at byte %llu: %s; cutting "
			 "%llu bytes",
			 w->wal_path, (unsigned long long)rep->bad_off,
			 rep->why,
			 (unsigned long long)(rep->wal_size - rep->bad_off));
		if (ftruncate(fd, (off_t)w->end) < 0 || fsync(fd) < 0) {
			ret = -errno;
			log_errno(ret, "cannot truncate %s", w->wal_path);
			return ret;
		}
	}
	log_info("replayed %llu records from %s (generation %llu)",
		 (unsigned long long)w->n_records, w->wal_path,
		 (unsigned long long)gen);
	return 0;
}

/*
 * The log object for @dir, locked: its directory opened (created first if
 * @create) and flock()ed. Returns 0 and *out, or -errno (logged).
 */
static int wal_dir_open(const char *dir, bool create, struct wal **out)
{
	struct wal *w;
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
	if (create) {
		ret = wal_mkdir_p(dir);
		if (ret) {
			log_errno(ret, "cannot create data directory %s", dir);
			goto err;
		}
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
	*out = w;
	return 0;
err:
	wal_close(w);
	return ret;
}

int wal_open(const char *dir, const struct wal_ops *ops, void *arg,
	     struct wal **out)
{
	struct wal_report rep = { 0 };
	struct wal *w;
	uint64_t gen;
	int ret;

	ret = wal_dir_open(dir, true, &w);
	if (ret)
		return ret;
	/* Leftovers of a crash in the middle of a snapshot. */
	if (unlinkat(w->dfd, SNAP_TMP_FILE, 0) == 0)
		log_info("removed unfinished %s.tmp", w->snap_path);
	if (unlinkat(w->dfd, WAL_TMP_FILE, 0) == 0)
		log_info("removed unfinished %s.tmp", w->wal_path);

	ret = wal_snap_read(w, ops, arg, &rep, &gen);
	if (ret)
		goto err;
	if (rep.state == WAL_STATE_BAD) {
		wal_refusal_log(w, &rep);
		ret = -EBADMSG;
		goto err;
	}
	if (rep.snap_found)
		log_info("loaded %s: generation %llu, %llu records, epoch %llu",
			 w->snap_path, (unsigned long long)gen,
			 (unsigned long long)rep.snap_records,
			 (unsigned long long)rep.snap_epoch);
	ret = wal_replay(w, gen, ops, arg, &rep);
	if (ret)
		goto err;
	*out = w;
	return 0;
err:
	wal_close(w);
	return ret;
}

/* Copies [@off, @size) of @fd to a new file @name in @dfd and syncs it. */
static int wal_copy_out(int dfd, const char *name, int fd, uint64_t off,
			uint64_t size)
{
	uint8_t buf[65536];
	int out, ret = 0;

	out = openat(dfd, name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (out < 0)
		return -errno;
	while (!ret && off < size) {
		size_t n = size - off < sizeof(buf) ? (size_t)(size - off)
						    : sizeof(buf);

		ret = wal_pread_full(fd, buf, n, off);
		if (ret == -ENODATA)
			ret = -EIO;
		if (!ret)
			ret = wal_write_full(out, buf, n);
		off += n;
	}
	if (!ret && fsync(out) < 0)
		ret = -errno;
	close(out);
	if (!ret && fsync(dfd) < 0)
		ret = -errno;
	if (ret)
		unlinkat(dfd, name, 0);
	return ret;
}

/*
 * Cuts the wal open as @fd (generation @gen) at rep->bad_off after
 * copying what goes to "wal.<gen>.cut-<offset>" (a name not taken yet).
 */
static int wal_cut(struct wal *w, int fd, uint64_t gen, struct wal_report *rep)
{
	uint64_t off = rep->bad_off;
	char name[sizeof(rep->cut_name)];
	int ret = -EEXIST;

	for (unsigned int i = 0; ret == -EEXIST && i < 100; i++) {
		if (i)
			snprintf(name, sizeof(name),
				 WAL_FILE ".%llu.cut-%llu.%u",
				 (unsigned long long)gen,
				 (unsigned long long)off, i);
		else
			snprintf(name, sizeof(name), WAL_FILE ".%llu.cut-%llu",
				 (unsigned long long)gen,
				 (unsigned long long)off);
		ret = wal_copy_out(w->dfd, name, fd, off, rep->wal_size);
	}
	if (ret) {
		log_errno(ret, "cannot keep a copy of %s from byte %llu",
			  w->wal_path, (unsigned long long)off);
		return ret;
	}
	if (off == 0) {
		/* The header itself: an empty wal of the snapshot's. */
		ret = wal_file_reset(w, gen);
	} else if (ftruncate(fd, (off_t)off) < 0 || fsync(fd) < 0) {
		ret = -errno;
		log_errno(ret, "cannot truncate %s", w->wal_path);
	}
	if (ret)
		return ret;
	rep->cut_off = off;
	rep->cut_bytes = rep->wal_size - off;
	memcpy(rep->cut_name, name, sizeof(name));
	return 0;
}

int wal_check(const char *dir, unsigned int flags, const struct wal_ops *ops,
	      void *arg, struct wal_report *rep)
{
	bool repair = flags & WAL_CHECK_REPAIR;
	struct wal *w;
	uint64_t gen;
	int fd, ret;

	memset(rep, 0, sizeof(*rep));
	ret = wal_dir_open(dir, false, &w);
	if (ret)
		return ret;
	rep->tmp_left = !faccessat(w->dfd, SNAP_TMP_FILE, F_OK, 0) ||
			!faccessat(w->dfd, WAL_TMP_FILE, F_OK, 0);
	ret = wal_snap_read(w, ops, arg, rep, &gen);
	if (ret || rep->state != WAL_STATE_CLEAN)
		goto out;
	fd = openat(w->dfd, WAL_FILE, (repair ? O_RDWR : O_RDONLY) | O_CLOEXEC);
	if (fd < 0) {
		ret = -errno;
		if (ret == -ENOENT)
			ret = 0;
		else
			log_errno(ret, "cannot open %s", w->wal_path);
		goto out;
	}
	ret = wal_log_read(w, fd, gen, ops, arg, rep);
	if (!ret && repair && rep->state != WAL_STATE_CLEAN && rep->repairable)
		ret = wal_cut(w, fd, gen, rep);
	close(fd);
out:
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
