// SPDX-License-Identifier: MIT
/*
 * Write-ahead log and snapshot of the coordinator's state (format: wal.h):
 * records appended and synced, snapshots written. Reading and recovery:
 * wal_read.c, wal_recover.c.
 */
#define LOG_PREFIX "wal: "
#include "wal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "frame.h"
#include "log.h"
#include "metrics.h"
#include "wal_int.h"

#define SNAP_BUF_MAX (1u << 20) /* flush the snapshot writer at this size */

/* Accumulates a snapshot file; flushed with write() when large. */
struct wal_snap_writer {
	int fd;
	uint8_t *buf;
	size_t len, cap;
	uint64_t n_records;
	uint64_t bytes; /* written, header included */
	int err;
};

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
