/* SPDX-License-Identifier: MIT */
/*
 * The request handlers coord_handle() (coord.c) dispatches to, one file
 * per concern. Each sets @rep to the answer or an ERROR and returns 0 or
 * -errno; a log write failure also sets *@fatal (then @rep must not be
 * sent). coord_on_node.c and coord_on_region.c call coord_on_lease.c
 * (coord_lease_break()); nothing here calls coord.c.
 */
#ifndef COORDINATOR_COORD_ON_H
#define COORDINATOR_COORD_ON_H

#include <stdint.h>

#include "msg.h"

struct coord;
struct coord_region;

/* ---- coord_on_node.c: a node's own requests, node leases ---- */

int coord_on_join(struct coord *c, const struct msg *req, struct msg *rep,
		  uint64_t now, int *fatal);
int coord_on_heartbeat(struct coord *c, const struct msg *req, struct msg *rep,
		       uint64_t now, int *fatal);
int coord_on_node_list(struct coord *c, struct msg *rep, uint64_t now);
/* The admin forgets a node that is gone for good (EBUSY while it owns a
 * chunk, is a region's writer or reader, or its lease holds). */
int coord_on_node_forget(struct coord *c, const struct msg *req,
			 struct msg *rep, uint64_t now, int *fatal);

/* ---- coord_on_region.c: regions ---- */

int coord_on_region_create(struct coord *c, const struct msg *req,
			   struct msg *rep, uint64_t now, int *fatal);
void coord_on_region_get(struct coord *c, const struct msg *req,
			 struct msg *rep);
void coord_on_region_list(struct coord *c, struct msg *rep);
int coord_on_region_delete(struct coord *c, const struct msg *req,
			   struct msg *rep, int *fatal);
/* REGION_WRITERS and REGION_READERS: a holder of the write lease that
 * may no longer write loses it at once. */
int coord_on_region_acl(struct coord *c, const struct msg *req, struct msg *rep,
			int *fatal);
/* Starts rebuilding every MISSING replica of the region now. */
void coord_on_region_rebuild(struct coord *c, const struct msg *req,
			     struct msg *rep, uint64_t now, int *fatal);

/* ---- coord_on_lease.c: write leases ---- */

int coord_on_write_lease(struct coord *c, const struct msg *req,
			 struct msg *rep, uint64_t now, int *fatal);
int coord_on_write_release(struct coord *c, const struct msg *req,
			   struct msg *rep, int *fatal);
int coord_on_lease_break(struct coord *c, const struct msg *req,
			 struct msg *rep, int *fatal);
/*
 * Ends region @r's write lease (a LEASE_BREAK record; @why for the log):
 * the generation moves on, to *@wgen, so the holder's next check (a
 * flush) finds it lost. Returns 0 or coord_change()'s error.
 */
int coord_lease_break(struct coord *c, const struct coord_region *r,
		      const char *why, struct msg *rep, int *fatal,
		      uint64_t *wgen);

/* ---- coord_on_endpoint.c: endpoints and pool MRs ---- */

int coord_on_endpoint_put(struct coord *c, const struct msg *req,
			  struct msg *rep, int *fatal);
void coord_on_endpoint_get(struct coord *c, const struct msg *req,
			   struct msg *rep);
int coord_on_mr_put(struct coord *c, const struct msg *req, struct msg *rep,
		    int *fatal);

#endif
