/* SPDX-License-Identifier: MIT */
/*
 * Private to the log's files: struct wal and what each file offers those
 * above it. wal_file.c (byte order, files written whole, the data
 * directory opened and locked) is below wal_read.c (every on-disk version
 * read: headers, records, the snapshot, the log), which is below
 * wal_recover.c (wal_open(), wal_check()); wal.c (appends, syncs,
 * snapshots written) uses wal_file.c only.
 */
#ifndef COORDINATOR_WAL_INT_H
#define COORDINATOR_WAL_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <zlib.h>

#include "wal.h"

#define WAL_FILE      "wal"
#define WAL_TMP_FILE  "wal.tmp"
#define SNAP_FILE     "snapshot"
#define SNAP_TMP_FILE "snapshot.tmp"

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

/* Big-endian fields and the CRC of headers and records. */
static inline void wal_put32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)(v >> 24);
	p[1] = (uint8_t)(v >> 16);
	p[2] = (uint8_t)(v >> 8);
	p[3] = (uint8_t)v;
}

static inline void wal_put64(uint8_t *p, uint64_t v)
{
	wal_put32(p, (uint32_t)(v >> 32));
	wal_put32(p + 4, (uint32_t)v);
}

static inline uint32_t wal_get32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 |
	       (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

static inline uint64_t wal_get64(const uint8_t *p)
{
	return (uint64_t)wal_get32(p) << 32 | wal_get32(p + 4);
}

static inline uint32_t wal_crc(const uint8_t *p, size_t len)
{
	return (uint32_t)crc32(crc32(0L, Z_NULL, 0), p, (uInt)len);
}

/* ---- wal_file.c ---- */

/* Reads exactly @len bytes at @off; -ENODATA if the file ends first. */
int wal_pread_full(int fd, void *buf, size_t len, uint64_t off);
/* Writes all @len bytes. Returns 0 or -errno. */
int wal_write_full(int fd, const void *buf, size_t len);
/* Encodes a record header for @payload into hdr. */
void wal_rec_hdr_put(uint8_t hdr[WAL_REC_HDR_LEN], const uint8_t *payload,
		     size_t len);
/*
 * Replaces the wal with an empty one of generation @gen (tmp file, fsync,
 * rename, directory fsync) and opens it for appending. 0 or -errno
 * (logged).
 */
int wal_file_reset(struct wal *w, uint64_t gen);
/*
 * The log object for @dir, locked: its directory opened (created first if
 * @create) and flock()ed. Returns 0 and *out, or -errno (logged).
 */
int wal_dir_open(const char *dir, bool create, struct wal **out);

/* ---- wal_read.c ---- */

/*
 * Loads the snapshot if there is one: it must be valid to its last byte.
 * Fills @rep's snapshot fields and, if it is invalid, its problem. Sets
 * *gen (0 without a snapshot). Returns 0 (@rep says how it read) or
 * -errno of a read (logged).
 */
int wal_snap_read(struct wal *w, const struct wal_ops *ops, void *arg,
		  struct wal_report *rep, uint64_t *gen);
/*
 * Reads the wal open as @fd against the snapshot's generation @gen: its
 * header, then (unless it is stale) every record through @ops, up to the
 * first that does not load. Fills @rep's wal fields and, if the wal does
 * not read to its end, its state and problem. Returns 0 (@rep says how it
 * read) or -errno of a read (logged).
 */
int wal_log_read(struct wal *w, int fd, uint64_t gen, const struct wal_ops *ops,
		 void *arg, struct wal_report *rep);

#endif
