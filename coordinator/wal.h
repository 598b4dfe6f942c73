/* SPDX-License-Identifier: MIT */
/*
 * The coordinator's durable log: a write-ahead log of change records plus a
 * periodic snapshot of the whole state, both in one data directory.
 *
 *   wal       header | record...      (appended, fsync'd before replies)
 *   snapshot  header | record...      (whole state; tmp + rename)
 *
 *   wal header       magic "FPWH" u32 | version u32 | generation u64 |
 *                    crc32 u32 of the previous 16 bytes           (20 bytes)
 *   snapshot header  magic "FPSN" u32 | version u32 | generation u64 |
 *                    epoch u64 | records u64 |
 *                    crc32 u32 of the previous 32 bytes           (36 bytes)
 *   record           magic "FPWR" u32 | payload length u32 |
 *                    crc32 u32 of the payload | payload (msg_encode()d)
 *
 * Integers are big-endian. A snapshot of generation G is continued by the
 * wal of generation G; a wal of an older generation is left over from a
 * crash between the two renames of a snapshot and is discarded.
 */
#ifndef COORDINATOR_WAL_H
#define COORDINATOR_WAL_H

#include <stddef.h>
#include <stdint.h>

#include "metrics.h"
#include "msg.h"

#define WAL_REC_MAGIC	 0x46505752u /* "FPWR" */
#define WAL_HDR_MAGIC	 0x46505748u /* "FPWH" */
#define WAL_SNAP_MAGIC	 0x4650534eu /* "FPSN" */
#define WAL_VERSION	 1u
#define WAL_REC_HDR_LEN	 12u
#define WAL_HDR_LEN	 20u
#define WAL_SNAP_HDR_LEN 36u

struct wal;

/* What wal_open() calls while it recovers the state. */
struct wal_ops {
	/* Applies one recovered record; returns 0 or -errno (@why: reason). */
	int (*apply)(void *arg, const struct msg *rec, char *why,
		     size_t why_len);
	/* The snapshot's records are applied: here is its epoch. */
	void (*snapshot_loaded)(void *arg, uint64_t epoch);
};

/* Hands one record of a snapshot to the log; returns 0 or -errno. */
typedef int (*wal_emit_fn)(void *emit_arg, const struct msg *rec);
/* Emits the whole state as records; returns 0 or the first error. */
typedef int (*wal_dump_fn)(void *arg, wal_emit_fn emit, void *emit_arg);

/*
 * Opens the log in @dir (created with its parents if missing, and locked
 * against a second process), loads the snapshot through ops->apply and
 * reports its epoch through ops->snapshot_loaded (not called without a
 * snapshot), then replays the wal through ops->apply. The
 * first wal record that is short, has a bad magic, length or CRC, does not
 * decode or does not apply ends the log: a warning names its byte offset
 * and the file is truncated there. Returns 0 and the log in *out, -EBADMSG
 * if the snapshot is invalid in any way or older than the wal,
 * -EWOULDBLOCK if @dir is locked by another process, or -errno.
 */
int wal_open(const char *dir, const struct wal_ops *ops, void *arg,
	     struct wal **out);

/* Closes the log (no sync) and releases the lock; NULL is a no-op. */
void wal_close(struct wal *w);

/*
 * Appends one record with @payload (1..FRAME_MAX bytes, a msg_encode()d
 * change) without syncing. Returns 0, -EMSGSIZE, or -errno of the write;
 * after a write or sync failure every later call fails too.
 */
int wal_append(struct wal *w, const uint8_t *payload, size_t len);

/* fsyncs what was appended. Returns 0 or -errno (sticky, as above). */
int wal_sync(struct wal *w);

/* Records in the current wal (since the last snapshot). */
uint64_t wal_records(const struct wal *w);

/* Figures for /metrics; read from any thread. */
struct wal_stats {
	struct metrics_hist append_ns;	     /* wal_append() */
	struct metrics_hist fsync_ns;	     /* wal_sync() */
	atomic_uint_fast64_t snapshots;	     /* written by this process */
	atomic_uint_fast64_t snapshot_bytes; /* size of the last one */
};
const struct wal_stats *wal_stats(const struct wal *w);

/*
 * Writes the state @dump emits as a new snapshot with @epoch: snapshot.tmp,
 * fsync, rename to snapshot, fsync of the directory, then a fresh empty wal
 * of the next generation (same steps). Returns 0 or -errno (sticky).
 */
int wal_snapshot(struct wal *w, uint64_t epoch, wal_dump_fn dump, void *arg);

#endif
