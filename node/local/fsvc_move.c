// SPDX-License-Identifier: MIT
/*
 * Movable mappings: HANDOVER (the giver's side of a VM's migration) and
 * the write leases that mappings waiting for one take (the taker's side,
 * and a giver that runs on). The fault loop's side is in floop_move.c.
 *
 *   HANDOVER name
 *     FLUSH of the region (FSVC_FLUSH, then FSVC_FLUSH_CHECK: the lease
 *     is still the mapping's)
 *     -> floops_handover(): its cache is emptied, its faults wait
 *        (FSVC_HANDOVER)
 *     -> the lease is given back (FSVC_HO_RELEASING)
 *     -> OK
 *
 * An error before the lease goes back leaves everything as it was: the
 * mapping keeps its lease and runs on.
 */
#define LOG_PREFIX "fsvc: "
#include "fsvc_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "csess.h"
#include "floops.h"
#include "log.h"
#include "node_env.h"

struct fsvc_conn *fsvc_lease_holder(struct fsvc *fs, const char *name,
				    int *waiting)
{
	struct fsvc_conn *w, *found = NULL;

	if (waiting)
		*waiting = 0;
	for (w = fs->conns; w; w = w->next) {
		if (w->state != FSVC_MAPPED || !w->lease ||
		    strcmp(w->name, name))
			continue;
		if (w->has_lease)
			found = w;
		else if (waiting)
			*waiting = 1;
	}
	return found;
}

/* The mapping @id served here, or NULL. */
static struct fsvc_conn *fsvc_mapping(struct fsvc *fs, uint64_t id)
{
	struct fsvc_conn *c;

	for (c = fs->conns; c; c = c->next)
		if (c->state == FSVC_MAPPED && c->map_id == id)
			return c;
	return NULL;
}

/* HANDOVER fails: "region NAME: @why", nothing changed. */
static int fsvc_ho_fail(struct fsvc_conn *c, int err, const char *why)
{
	struct msg rep;

	c->state = FSVC_NEW;
	c->ho = 0;
	msg_error(&rep, err, "region %s: %s", c->name, why);
	return fsvc_send(c, &rep, NULL, 0);
}

int fsvc_on_handover(struct fsvc_conn *c, const struct msg *req)
{
	struct fsvc *fs = c->fs;
	struct fsvc_conn *w;
	int waiting, ret;

	memcpy(c->name, req->name, sizeof(c->name));
	w = fsvc_lease_holder(fs, c->name, &waiting);
	if (!w)
		return fsvc_ho_fail(c, waiting ? -EALREADY : -ENOENT,
				    waiting ? "its mapping here does not hold "
					      "the write lease (handed over "
					      "already, or incoming)"
					    : "no writable mapping of it here");
	/* Only its own user (or root) stops a mapping's writes. */
	if (c->uid && w->uid && c->uid->uid && c->uid->uid != w->uid->uid)
		return fsvc_ho_fail(c, -EPERM,
				    "its mapping here is another user's");
	if (!(w->flags & MSG_MAP_MOVABLE))
		return fsvc_ho_fail(c, -EOPNOTSUPP,
				    "its mapping here is not movable (map it "
				    "with FARPAGE_MAP_MOVABLE; farpage vm "
				    "does)");
	c->token = ++fs->next_token;
	c->ho = 1;
	c->ho_map = w->map_id;
	ret = floops_flush(fs->env->fl, c->name, c->token, 0);
	if (ret)
		return fsvc_ho_fail(c, ret, "cannot queue the flush");
	c->state = FSVC_FLUSH;
	return 0;
}

void fsvc_handover_flushed(struct fsvc_conn *c)
{
	struct fsvc *fs = c->fs;
	int ret;

	c->token = ++fs->next_token;
	ret = floops_handover(fs->env->fl, c->ho_map, c->token);
	if (ret) {
		if (fsvc_ho_fail(c, ret, "cannot queue the hand-over"))
			fsvc_conn_close(c);
		return;
	}
	c->state = FSVC_HANDOVER;
}

/* The fault loop emptied the mapping's cache (or could not): the lease
 * goes back. */
static void fsvc_handover_done(struct fsvc *fs, const struct floop_done *d)
{
	struct fsvc_conn *c, *w;

	for (c = fs->conns; c; c = c->next)
		if (c->state == FSVC_HANDOVER && c->token == d->cookie)
			break;
	if (!c)
		return;
	if (d->err) {
		if (fsvc_ho_fail(c, d->err,
				 d->text[0] ? d->text : log_strerror(d->err)))
			fsvc_conn_close(c);
		return;
	}
	w = fsvc_mapping(fs, c->ho_map);
	if (w)
		w->has_lease = 0;
	c->token = ++fs->next_token;
	if (csess_lease_release(fs->env->cs, c->token, d->name, d->lease)) {
		/* It stays the mapping's until this node's lease ends; the
		 * mapping's next fault takes it again. */
		if (fsvc_ho_fail(c, -ENOMEM,
				 "no memory to give the lease back"))
			fsvc_conn_close(c);
		return;
	}
	log_info("region %s: map %llu handed over (generation %llu); its "
		 "write lease goes back",
		 d->name, (unsigned long long)c->ho_map,
		 (unsigned long long)d->wgen);
	c->state = FSVC_HO_RELEASING;
}

/* A mapping waits for its lease: the session takes it if it is free. */
static void fsvc_lease_want(struct fsvc *fs, const struct floop_done *d)
{
	struct fsvc_conn *c = fsvc_mapping(fs, d->cookie);

	if (!c)
		return; /* the mapping is gone: nobody waits */
	c->lw_token = ++fs->next_token;
	if (csess_lease_take_free(fs->env->cs, c->lw_token, d->name, d->lease,
				  d->wgen))
		floops_map_lease(fs->env->fl, c->map_id, -ENOMEM, 0, NULL, 0);
}

int fsvc_move_done(struct fsvc *fs, const struct floop_done *d)
{
	if (d->kind == FLOOP_DONE_HANDOVER)
		fsvc_handover_done(fs, d);
	else if (d->kind == FLOOP_DONE_LEASE)
		fsvc_lease_want(fs, d);
	else
		return 0;
	return 1;
}

int fsvc_move_result(struct fsvc *fs, const struct csess_result *r)
{
	struct fsvc_conn *c;
	struct msg rep;

	for (c = fs->conns; c; c = c->next) {
		if (c->lw_token && c->lw_token == r->token)
			break;
		if (c->state == FSVC_HO_RELEASING && c->token == r->token)
			break;
	}
	if (!c)
		return 0;
	if (c->state == FSVC_HO_RELEASING) {
		c->state = FSVC_NEW;
		c->ho = 0;
		if (r->err) {
			msg_error(&rep, r->err, "%s", r->text);
		} else {
			msg_init(&rep, MSG_T_OK);
		}
		if (fsvc_send(c, &rep, NULL, 0))
			fsvc_conn_close(c);
		return 1;
	}
	c->lw_token = 0;
	if (c->state != FSVC_MAPPED) {
		/* Unmapped meanwhile: a lease it took goes back at once. */
		if (!r->err)
			csess_lease_release(fs->env->cs, 0, c->name, c->lease);
		return 1;
	}
	if (!r->err) {
		c->has_lease = 1;
		c->wgen = r->wgen;
		log_info("region %s: map %llu took the write lease "
			 "(generation %llu)",
			 c->name, (unsigned long long)c->map_id,
			 (unsigned long long)r->wgen);
	} else if (r->err == -ENOLCK) {
		log_err("region %s: map %llu: %s; its faults raise SIGBUS",
			c->name, (unsigned long long)c->map_id, r->text);
	}
	if (floops_map_lease(fs->env->fl, c->map_id, r->err, r->wgen,
			     r->region.grants, r->region.n_grants))
		log_err("region %s: map %llu: no memory to hand the fault "
			"loop its lease; its faults wait for the next try",
			c->name, (unsigned long long)c->map_id);
	return 1;
}
