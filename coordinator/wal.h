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
 *
 * Versions: every header starts magic u32 | version u32 in every version,
 * so a binary can tell which version a file is before it parses the rest.
 * WAL_VERSION is what is written; wal_read.c keeps a table of the versions it
 * reads (today only 1), and a newer format adds its entry there without
 * removing the older ones, so a newer binary reads an older one's data
 * directory. A version above WAL_VERSION is refused, never discarded.
 *
 * Recovery (wal_open()): the snapshot must read to its last byte. In the
 * wal, only a torn last record is cut: with no intact record (magic,
 * length, CRC) anywhere after it, a record header or payload that the end
 * of the file cuts short (a header's present bytes starting as a header
 * does), or a bad record a part of whose 512-byte sectors reads as zeros
 * to the sector's or the file's end (never written). Everything else (a
 * bad record with an intact one after it; a last record whole in the file
 * with no zeroed sector that fails its CRC or magic, a changed byte; an
 * intact record that does not decode or apply; a bad wal header, an
 * unknown version, a wal newer than the snapshot, a bad snapshot) is
 * refused with the file and byte offset: nothing that was acknowledged is
 * dropped behind the operator's back.
 * wal_check() reports the same without changing anything, and repairs on
 * request, keeping a copy of what it cuts.
 */
#ifndef COORDINATOR_WAL_H
#define COORDINATOR_WAL_H

#include <stdbool.h>
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
#define WAL_WHY_MAX	 (MSG_TEXT_MAX + 192) /* a problem's description */

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
 * snapshot), then replays the wal through ops->apply. A torn last record
 * (see above) is cut off with a warning naming its byte offset and size;
 * anything else wrong is logged as an error naming the file and offset.
 * Returns 0 and the log in *out, -EBADMSG if the data directory is refused
 * (nothing in it changed), -EWOULDBLOCK if @dir is locked by another
 * process, or -errno.
 */
int wal_open(const char *dir, const struct wal_ops *ops, void *arg,
	     struct wal **out);

/* How a data directory reads. */
enum wal_state {
	WAL_STATE_CLEAN = 0, /* wal_open() changes nothing */
	WAL_STATE_TORN,	     /* a torn last record: wal_open() cuts it */
	WAL_STATE_BAD,	     /* wal_open() refuses the directory */
};

/* What wal_check() found (and did). */
struct wal_report {
	enum wal_state state;
	bool tmp_left; /* snapshot.tmp or wal.tmp: wal_open() removes them */
	/* The snapshot: found, and its header's figures once they read. */
	bool snap_found;
	uint32_t snap_version;
	uint64_t snap_gen, snap_epoch, snap_records, snap_size;
	/* The wal (read only when the snapshot reads). */
	bool wal_found;
	bool wal_stale; /* older generation: wal_open() discards it */
	uint32_t wal_version;
	uint64_t wal_gen, wal_size;
	uint64_t wal_records; /* records that read and apply */
	uint64_t wal_end;     /* byte offset after the last of them */
	/* The first problem (state not CLEAN). */
	bool bad_in_snap; /* in the snapshot, else in the wal */
	bool repairable;  /* WAL_CHECK_REPAIR cuts the wal at bad_off */
	uint64_t bad_off; /* byte offset in that file */
	char why[WAL_WHY_MAX];
	/* What WAL_CHECK_REPAIR cut (cut_name "" if nothing). */
	uint64_t cut_off, cut_bytes;
	char cut_name[64]; /* the copy of the cut bytes, in the directory */
};

#define WAL_CHECK_REPAIR 1u

/*
 * Reads the data directory @dir as wal_open() would (locked against a
 * coordinator meanwhile; records applied through @ops) and fills @rep,
 * changing nothing: the directory is not created, leftovers are not
 * removed, a torn tail is not cut. With WAL_CHECK_REPAIR in @flags, a
 * repairable problem (torn tail, bad record or bad header of the wal) is
 * repaired: the bytes from rep->bad_off to the end of the wal are first
 * copied to "wal.<generation>.cut-<offset>" beside it (synced), then the
 * wal is cut there (a bad header: replaced by an empty wal). Returns 0
 * (@rep says what was found), -ENOENT if @dir does not exist,
 * -EWOULDBLOCK if it is locked, or -errno.
 */
int wal_check(const char *dir, unsigned int flags, const struct wal_ops *ops,
	      void *arg, struct wal_report *rep);

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
