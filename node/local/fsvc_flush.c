// SPDX-License-Identifier: MIT
/*
 * FLUSH and UNMAP, and what comes back to the control thread for them:
 * the fault loops' reports (flushes done, rebuilds done, mappings gone)
 * and the session's results (lookups, write leases checked or given
 * back).
 */
#define LOG_PREFIX "fsvc: "
#include "fsvc_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "csess.h"
#include "floops.h"
#include "log.h"
#include "node_env.h"

void fsvc_flush_seal(struct fsvc_conn *c)
{
	struct fsvc_conn *w = fsvc_lease_holder(c->fs, c->name, NULL);

	if (!w || !(w->layout.flags & MSG_MAP_SEAL) || c->pid <= 0 ||
	    w->pid != c->pid) {
		log_dbg("region %s: FLUSH_SEAL from pid %d, whose writable "
			"mapping is not here: a plain flush",
			c->name, (int)c->pid);
		return;
	}
	if (floops_map_seal(c->fs->env->fl, w->map_id))
		log_warn("region %s: no memory to seal map %llu: its unmap "
			 "sends every page it holds home again",
			 c->name, (unsigned long long)w->map_id);
}

/*
 * A flush of @c's region is done: if a writable mapping of it here holds
 * the write lease, the coordinator is asked whether it still does before
 * the client is told (fsvc_flush_checked()). An owner refuses write-backs
 * of a generation older than one it has seen, but it may not have seen
 * the newer one yet, and an RDMA WRITE carries none. Returns 1 if the
 * check is under way.
 */
static int fsvc_flush_check(struct fsvc_conn *c)
{
	struct fsvc *fs = c->fs;
	struct fsvc_conn *w;

	/* (one without its lease now has nothing written to confirm) */
	w = fsvc_lease_holder(fs, c->name, NULL);
	if (!w)
		return 0;
	c->token = ++fs->next_token;
	c->map_id = w->map_id;
	if (csess_lease_check(fs->env->cs, c->token, w->name, w->lease,
			      w->wgen))
		return 0;
	c->state = FSVC_FLUSH_CHECK;
	return 1;
}

/*
 * The coordinator's word on the write lease of a flushed mapping. Lost:
 * the fault loop marks the mapping so, then the flush runs again there,
 * after it, and fails: the client hears of it only once every fault of
 * the mapping raises SIGBUS.
 */
static void fsvc_flush_checked(struct fsvc_conn *c,
			       const struct csess_result *r)
{
	struct fsvc *fs = c->fs;
	struct msg rep;

	c->state = FSVC_NEW;
	if (r->err == -ENOLCK || r->err == -EBUSY) {
		log_err("region %s: the coordinator says the write lease of "
			"map %llu is lost: %s",
			c->name, (unsigned long long)c->map_id, r->text);
		c->token = ++fs->next_token;
		if (!floops_map_lost(fs->env->fl, c->map_id) &&
		    !floops_flush(fs->env->fl, c->name, c->token, 0)) {
			c->state = FSVC_FLUSH;
			return;
		}
		msg_error(&rep, -ENOLCK, "region %s: %s", c->name, r->text);
	} else if (c->ho && r->err) {
		/* A hand-over moves a lease it knows to be its own. */
		msg_error(&rep, r->err,
			  "region %s: flushed, but the write lease could not "
			  "be confirmed, so it is not handed over: %s",
			  c->name, r->text);
	} else {
		/* Home, but not confirmed (no coordinator): said so. */
		if (r->err)
			log_warn(
				"region %s: flushed; the write lease could not "
				"be confirmed: %s",
				c->name, r->text);
		if (c->ho) {
			fsvc_handover_flushed(c);
			return;
		}
		msg_init(&rep, MSG_T_OK);
	}
	c->ho = 0;
	if (fsvc_send(c, &rep, NULL, 0))
		fsvc_conn_close(c);
}

/*
 * FLUSH of a region no mapping here has: nothing to send, unless the
 * region does not exist at all (a typo is an error, not "every page is
 * home"). A coordinator that cannot say leaves it at nothing to send.
 */
static void fsvc_flush_looked_up(struct fsvc_conn *c,
				 const struct csess_result *r)
{
	struct msg rep;

	c->state = FSVC_NEW;
	if (r->err == -ENOENT)
		msg_error(&rep, -ENOENT, "%s", r->text);
	else
		msg_init(&rep, MSG_T_OK);
	if (fsvc_send(c, &rep, NULL, 0))
		fsvc_conn_close(c);
}

/* 1 if a mapping of region @name is served here, or still sends pages
 * home. */
int fsvc_name_is_here(struct fsvc *fs, const char *name)
{
	for (struct fsvc_conn *c = fs->conns; c; c = c->next)
		if ((c->state == FSVC_MAPPED || c->state == FSVC_UNMAP_DRAIN ||
		     c->state == FSVC_RELEASING) &&
		    !strcmp(c->name, name))
			return 1;
	return *fsvc_drain_find(fs, name, 0) != NULL;
}

/* What the fault loop reports: flushes done, leases to give back. */
void fsvc_on_dones(struct evl *l, int fd, uint32_t events, void *arg)
{
	struct fsvc *fs = arg;
	struct floop_done *d = floops_done_take(fs->env->fl), *next;

	for (; d; d = next) {
		struct fsvc_conn *c;
		struct msg rep;

		next = d->next;
		if (fsvc_move_done(fs, d) || fsvc_anon_done(fs, d)) {
			free(d);
			continue;
		}
		if (d->kind == FLOOP_DONE_REBUILD) {
			csess_rebuild_done(fs->env->cs, d->cookie, d->err);
			free(d);
			continue;
		}
		if (d->kind == FLOOP_DONE_RELEASE) {
			struct fsvc_drain **p =
				fsvc_drain_find(fs, d->name, d->lease);
			struct fsvc_conn *w, *wn;
			uint64_t token = 0;

			/* An UNMAP waits for the coordinator's answer. */
			for (w = fs->conns; w; w = w->next) {
				if (w->state == FSVC_UNMAP_DRAIN &&
				    w->lease == d->lease &&
				    !strcmp(w->name, d->name)) {
					w->state = FSVC_RELEASING;
					w->token = ++fs->next_token;
					token = w->token;
					break;
				}
			}
			if (csess_lease_release(fs->env->cs, token, d->name,
						d->lease) &&
			    w) {
				w->state = FSVC_UNMAPPED;
				if (fsvc_reply_error(w, -ENOMEM,
						     "cannot queue the lease's "
						     "release"))
					fsvc_conn_close(w);
			}
			if (*p) {
				struct fsvc_drain *g = *p;

				*p = g->next;
				free(g);
			}
			/* Maps that waited for it: looked up after the
			 * release, in the session's order. */
			for (w = fs->conns; w; w = wn) {
				wn = w->next;
				if (w->state == FSVC_DRAIN_WAIT &&
				    !*fsvc_drain_find(fs, w->name, 0) &&
				    fsvc_lookup(w))
					fsvc_conn_close(w);
			}
			free(d);
			continue;
		}
		for (c = fs->conns; c; c = c->next)
			if (c->state == FSVC_FLUSH && c->token == d->cookie)
				break;
		if (c && !d->err && fsvc_flush_check(c)) {
			free(d);
			continue;
		}
		if (c && c->ho && !d->err) {
			/* (a mapping here holds the lease: checked first) */
			fsvc_handover_flushed(c);
		} else if (c) {
			c->ho = 0;
			if (d->err)
				msg_error(&rep, d->err, "%s",
					  d->text[0] ? d->text
						     : log_strerror(d->err));
			else
				msg_init(&rep, MSG_T_OK);
			c->state = FSVC_NEW;
			if (fsvc_send(c, &rep, NULL, 0))
				fsvc_conn_close(c);
		}
		free(d);
	}
}

/* UNMAP's answer: its lease was given back, or why not. */
static void fsvc_unmap_reply(struct fsvc_conn *c, const struct csess_result *r)
{
	struct msg rep;

	c->state = FSVC_UNMAPPED;
	c->lease = 0;
	if (r->err)
		msg_error(&rep, r->err, "%s", r->text);
	else
		msg_init(&rep, MSG_T_OK);
	if (fsvc_send(c, &rep, NULL, 0))
		fsvc_conn_close(c);
}

/*
 * UNMAP: the process unmapped the range (and flushed). The mapping ends
 * here; a writable one's lease goes back once what it wrote is home
 * (FLOOP_DONE_RELEASE), and the answer waits for the coordinator's.
 */
int fsvc_on_unmap(struct fsvc_conn *c)
{
	struct fsvc *fs = c->fs;
	struct fsvc_drain *d;
	struct msg ok;
	int ret;

	ret = floops_map_remove(fs->env->fl, c->map_id);
	if (ret) {
		fsvc_reply_error(c, ret, "cannot drop the mapping");
		return ret;
	}
	if (c->pinned)
		fsvc_pins(c, -1);
	if (!c->lease) {
		c->state = FSVC_UNMAPPED;
		msg_init(&ok, MSG_T_OK);
		return fsvc_send(c, &ok, NULL, 0);
	}
	d = calloc(1, sizeof(*d));
	if (!d) {
		/* The lease goes back once the mapping is gone, unwaited. */
		c->state = FSVC_UNMAPPED;
		c->lease = 0;
		fsvc_reply_error(c, -ENOMEM, "no memory to wait for the lease");
		return -ENOMEM;
	}
	memcpy(d->name, c->name, sizeof(d->name));
	d->lease = c->lease;
	d->next = fs->draining;
	fs->draining = d;
	c->state = FSVC_UNMAP_DRAIN;
	return 0;
}

/* Finished lookups: each goes to its connection if it is still there. */
void fsvc_on_lookups(struct evl *l, int fd, uint32_t events, void *arg)
{
	struct fsvc *fs = arg;
	struct csess_result *r = csess_results_take(fs->env->cs), *next;

	for (; r; r = next) {
		struct fsvc_conn *c;

		next = r->next;
		if (fsvc_move_result(fs, r)) {
			csess_result_free(r);
			continue;
		}
		for (c = fs->conns; c; c = c->next)
			if ((c->state == FSVC_LOOKUP ||
			     c->state == FSVC_RELEASING ||
			     c->state == FSVC_FLUSH_CHECK ||
			     c->state == FSVC_FLUSH_LOOKUP) &&
			    c->token == r->token)
				break;
		if (c && c->state == FSVC_RELEASING) {
			fsvc_unmap_reply(c, r);
		} else if (c && c->state == FSVC_FLUSH_LOOKUP) {
			fsvc_flush_looked_up(c, r);
		} else if (c && c->state == FSVC_FLUSH_CHECK) {
			fsvc_flush_checked(c, r);
		} else if (c && fsvc_map_reply(c, r)) {
			/* A failed map ends the connection. */
			fsvc_conn_close(c);
		}
		csess_result_free(r);
	}
}
