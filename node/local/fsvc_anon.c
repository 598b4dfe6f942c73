// SPDX-License-Identifier: MIT
/*
 * Anonymous mappings (MSG_MAP_ANON, `farpage run`): DISCARD.
 *
 *   DISCARD name, base (offset), size
 *     the asker's own anonymous mapping of the region here (the same
 *     pid, as each connection's SO_PEERCRED said at accept)
 *     -> floops_discard() (FSVC_DISCARD): the pages leave its cache and
 *        read as zeroes (floop_anon.c)
 *     -> OK; the connection takes the next DISCARD
 *
 * Another process's mapping is never touched: a DISCARD names no mapping,
 * only the region, and is served only for the asker's own.
 */
#define LOG_PREFIX "fsvc: "
#include "fsvc_int.h"

#include <errno.h>
#include <string.h>

#include "floops.h"
#include "log.h"
#include "node_env.h"

/* DISCARD fails: "region NAME: @why". */
static int fsvc_discard_fail(struct fsvc_conn *c, int err, const char *why)
{
	struct msg rep;

	c->state = FSVC_NEW;
	msg_error(&rep, err, "region %s: %s", c->name, why);
	return fsvc_send(c, &rep, NULL, 0);
}

int fsvc_on_discard(struct fsvc_conn *c, const struct msg *req)
{
	struct fsvc *fs = c->fs;
	struct fsvc_conn *w;
	int ret;

	memcpy(c->name, req->name, sizeof(c->name));
	for (w = fs->conns; w; w = w->next)
		if (w->state == FSVC_MAPPED && (w->flags & MSG_MAP_ANON) &&
		    c->pid > 0 && w->pid == c->pid && !strcmp(w->name, c->name))
			break;
	if (!w)
		return fsvc_discard_fail(c, -ENOENT,
					 "no anonymous mapping of it here by "
					 "this process");
	c->token = ++fs->next_token;
	ret = floops_discard(fs->env->fl, w->map_id, req->base, req->size,
			     c->token);
	if (ret)
		return fsvc_discard_fail(c, ret, "cannot queue the discard");
	c->state = FSVC_DISCARD;
	return 0;
}

int fsvc_anon_done(struct fsvc *fs, const struct floop_done *d)
{
	struct fsvc_conn *c;
	struct msg rep;

	if (d->kind != FLOOP_DONE_DISCARD)
		return 0;
	for (c = fs->conns; c; c = c->next)
		if (c->state == FSVC_DISCARD && c->token == d->cookie)
			break;
	if (!c)
		return 1; /* the client went away */
	if (d->err) {
		if (fsvc_discard_fail(c, d->err,
				      d->text[0] ? d->text
						 : log_strerror(d->err)))
			fsvc_conn_close(c);
		return 1;
	}
	c->state = FSVC_NEW;
	msg_init(&rep, MSG_T_OK);
	if (fsvc_send(c, &rep, NULL, 0))
		fsvc_conn_close(c);
	return 1;
}
