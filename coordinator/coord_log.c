// SPDX-License-Identifier: MIT
/*
 * Every change through the write-ahead log: applied, then logged
 * (coord_change()); synced and snapshotted (coord_sync()); the wal's
 * ops for recovery.
 */
#define LOG_PREFIX "coord: "
#include "coord_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frame.h"
#include "log.h"
#include "msg.h"
#include "wal.h"

#define WHY_LEN MSG_TEXT_MAX

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

const struct wal_ops coord_wal_ops = {
	.apply = coord_wal_apply,
	.snapshot_loaded = coord_wal_snapshot_loaded,
};

int coord_sync(struct coord *c)
{
	int ret;

	if (!c->wal || !c->dirty)
		return 0;
	ret = wal_sync(c->wal);
	if (ret)
		return ret;
	c->dirty = 0;
	if (wal_records(c->wal) >= c->snapshot_every)
		return wal_snapshot(c->wal, c->epoch, coord_wal_dump, c);
	return 0;
}

/*
 * Applies and logs the change @rec. Returns 0; or the apply error with
 * @rep set to MSG_T_ERROR; or, with c->fatal set, the log's write error.
 */
int coord_change(struct coord *c, const struct msg *rec, struct msg *rep,
		 int *fatal)
{
	char why[WHY_LEN] = "";
	uint8_t *buf = NULL;
	size_t len = 0;
	int ret;

	if (c->wal) {
		/* Encode first: once applied, only the write may fail. */
		ret = msg_encode(rec, &buf, &len);
		if (ret) {
			msg_error(rep, ret, "cannot encode the %s change",
				  msg_type_name(rec->type));
			return ret;
		}
		if (len > FRAME_MAX) {
			free(buf);
			msg_error(rep, -E2BIG,
				  "change of %zu bytes is too large to log",
				  len);
			return -E2BIG;
		}
	}
	ret = coord_record_apply(c, rec, why, sizeof(why));
	if (ret) {
		free(buf);
		msg_error(rep, ret, "%s", why[0] ? why : log_strerror(ret));
		return ret;
	}
	if (c->wal) {
		ret = wal_append(c->wal, buf, len);
		free(buf);
		if (ret) {
			*fatal = ret;
			return ret;
		}
		c->dirty = 1;
	}
	return 0;
}

const struct wal_stats *coord_wal_stats(const struct coord *c)
{
	return c->wal ? wal_stats(c->wal) : NULL;
}
