// SPDX-License-Identifier: MIT
/*
 * The coordinator's store in a data directory: the write-ahead log and
 * snapshot of wal.h behind struct coord_store_ops (coord_int.h). The
 * records it recovers go to the tables through coord_record_apply(), a
 * snapshot takes them from coord_records_dump().
 */
#define LOG_PREFIX "coord: "
#include "coord_int.h"

#include "frame.h"
#include "wal.h"

static int coord_wal_apply(void *arg, const struct msg *rec, char *why,
			   size_t why_len)
{
	return coord_record_apply(arg, rec, why, why_len);
}

static void coord_wal_snapshot_loaded(void *arg, uint64_t epoch)
{
	struct coord *c = arg;

	if (epoch > c->epoch)
		c->epoch = epoch;
}

static int coord_wal_dump(void *arg, wal_emit_fn emit, void *emit_arg)
{
	return coord_records_dump(arg, emit, emit_arg);
}

static const struct wal_ops coord_wal_ops = {
	.apply = coord_wal_apply,
	.snapshot_loaded = coord_wal_snapshot_loaded,
};

static int coord_store_wal_open(struct coord *c, const struct coord_cfg *cfg)
{
	int ret;

	ret = wal_open(cfg->data_dir, &coord_wal_ops, c, &c->wal);
	if (!ret)
		c->store_arg = c->wal;
	return ret;
}

static int coord_store_wal_append(void *arg, const uint8_t *rec, size_t len)
{
	return wal_append(arg, rec, len);
}

static int coord_store_wal_sync(void *arg)
{
	return wal_sync(arg);
}

static uint64_t coord_store_wal_records(const void *arg)
{
	return wal_records(arg);
}

static int coord_store_wal_snapshot(void *arg, struct coord *c)
{
	return wal_snapshot(arg, c->epoch, coord_wal_dump, c);
}

static void coord_store_wal_close(void *arg)
{
	wal_close(arg);
}

static int coord_store_wal_check(struct coord *c, const struct coord_cfg *cfg,
				 unsigned int flags, void *rep)
{
	return wal_check(cfg->data_dir, flags, &coord_wal_ops, c, rep);
}

static const struct wal_stats *coord_store_wal_stats(const void *arg)
{
	return wal_stats(arg);
}

const struct coord_store_ops coord_store_wal = {
	.name = "wal",
	.rec_max = FRAME_MAX,
	.open = coord_store_wal_open,
	.append = coord_store_wal_append,
	.sync = coord_store_wal_sync,
	.records = coord_store_wal_records,
	.snapshot = coord_store_wal_snapshot,
	.close = coord_store_wal_close,
	.check = coord_store_wal_check,
	.stats = coord_store_wal_stats,
};
