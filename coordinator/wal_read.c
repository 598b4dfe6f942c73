// SPDX-License-Identifier: MIT
/* Reading the log and the snapshot, in every on-disk version this binary
 * knows: headers, records (checked, decoded, applied), where a bad record
 * is and whether it is a torn write. */
#define LOG_PREFIX "wal: "
#include "wal_int.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "frame.h"
#include "log.h"
#include "msg.h"

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
int wal_snap_read(struct wal *w, const struct wal_ops *ops, void *arg,
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
int wal_log_read(struct wal *w, int fd, uint64_t gen, const struct wal_ops *ops,
		 void *arg, struct wal_report *rep)
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
