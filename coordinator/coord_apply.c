// SPDX-License-Identifier: MIT
/*
 * Change records applied to the tables (one function per record type, in
 * the table files), and the tables written back out as records.
 */
#define LOG_PREFIX "coord: "
#include "coord_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "msg.h"

#define WHY_LEN MSG_TEXT_MAX

int coord_record_apply(struct coord *c, const struct msg *rec, char *why,
		       size_t why_len)
{
	char dummy[WHY_LEN];

	if (!why) {
		why = dummy;
		why_len = sizeof(dummy);
	}
	why[0] = '\0';
	switch (rec->type) {
	case MSG_T_NODES:
		return coord_apply_node(c, rec, why, why_len);
	case MSG_T_REGION:
		return coord_apply_region(c, rec, why, why_len);
	case MSG_T_REGION_DELETE:
		return coord_apply_region_delete(c, rec, why, why_len);
	case MSG_T_ENDPOINT_PUT:
		return coord_apply_endpoint(c, rec, why, why_len);
	case MSG_T_MR_PUT:
		return coord_apply_mr(c, rec, why, why_len);
	case MSG_T_SCRUB:
		return coord_apply_scrub(c, rec, why, why_len);
	case MSG_T_SCRUB_DONE:
		return coord_apply_scrub_done(c, rec, why, why_len);
	case MSG_T_WRITE_LEASE:
	case MSG_T_WRITE_RELEASE:
		return coord_apply_writer(c, rec, why, why_len);
	case MSG_T_REGION_WRITERS:
	case MSG_T_REGION_READERS:
		return coord_apply_region_acl(c, rec, why, why_len);
	case MSG_T_LEASE_BREAK:
		return coord_apply_lease_break(c, rec, why, why_len);
	case MSG_T_NODE_FORGET:
		return coord_apply_node_forget(c, rec, why, why_len);
	case MSG_T_REPLICA:
		return coord_apply_replica(c, rec, why, why_len);
	default:
		snprintf(why, why_len, "%s is not a change record",
			 msg_type_name(rec->type));
		return -EINVAL;
	}
}

int coord_records_dump(const struct coord *c,
		       int (*emit)(void *arg, const struct msg *rec), void *arg)
{
	int ret;

	/* In the order coord_record_apply() accepts them. */
	ret = coord_nodes_dump(c, emit, arg);
	if (!ret)
		ret = coord_regions_dump(c, emit, arg);
	if (!ret)
		ret = coord_writers_dump(c, emit, arg);
	if (!ret)
		ret = coord_scrubs_dump(c, emit, arg);
	if (!ret)
		ret = coord_endpoints_dump(c, emit, arg);
	return ret;
}
