// SPDX-License-Identifier: MIT
/*
 * Every change through the store (struct coord_store_ops: the write-ahead
 * log, coord_store_wal.c): applied, then logged (coord_change()); synced
 * and snapshotted (coord_sync()).
 */
#define LOG_PREFIX "coord: "
#include "coord_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "msg.h"

#define WHY_LEN MSG_TEXT_MAX

int coord_sync(struct coord *c)
{
	int ret;

	if (!c->store || !c->dirty)
		return 0;
	ret = c->store->sync(c->store_arg);
	if (ret)
		return ret;
	c->dirty = 0;
	if (c->store->records(c->store_arg) >= c->snapshot_every)
		return c->store->snapshot(c->store_arg, c);
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

	if (c->store) {
		/* Encode first: once applied, only the write may fail. */
		ret = msg_encode(rec, &buf, &len);
		if (ret) {
			msg_error(rep, ret, "cannot encode the %s change",
				  msg_type_name(rec->type));
			return ret;
		}
		if (len > c->store->rec_max) {
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
	if (c->store) {
		ret = c->store->append(c->store_arg, buf, len);
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
	if (!c->store || !c->store->stats)
		return NULL;
	return c->store->stats(c->store_arg);
}
