// SPDX-License-Identifier: MIT
/* Recovery (wal_open()) and checking (wal_check()) of a data directory:
 * the snapshot loaded, the wal replayed, a torn tail cut, a bad one
 * refused or, on request, cut with a copy kept. */
#define LOG_PREFIX "wal: "
#include "wal_int.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"

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
