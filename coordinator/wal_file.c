// SPDX-License-Identifier: MIT
/* The log's files: read and written whole, a fresh wal, the data
 * directory opened, locked and closed. */
#define LOG_PREFIX "wal: "
#include "wal_int.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log.h"

/* Reads exactly @len bytes at @off; -ENODATA if the file ends first. */
int wal_pread_full(int fd, void *buf, size_t len, uint64_t off)
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

int wal_write_full(int fd, const void *buf, size_t len)
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
void wal_rec_hdr_put(uint8_t hdr[WAL_REC_HDR_LEN], const uint8_t *payload,
		     size_t len)
{
	wal_put32(hdr, WAL_REC_MAGIC);
	wal_put32(hdr + 4, (uint32_t)len);
	wal_put32(hdr + 8, wal_crc(payload, len));
}

/*
 * Replaces the wal with an empty one of generation @gen (tmp file, fsync,
 * rename, directory fsync) and opens it for appending.
 */
int wal_file_reset(struct wal *w, uint64_t gen)
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
 * The log object for @dir, locked: its directory opened (created first if
 * @create) and flock()ed. Returns 0 and *out, or -errno (logged).
 */
int wal_dir_open(const char *dir, bool create, struct wal **out)
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
