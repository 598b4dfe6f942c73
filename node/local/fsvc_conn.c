// SPDX-License-Identifier: MIT
/*
 * A fault service client's connection: its answers, sent at once or
 * queued and sent as the socket takes them, the pool chunks its layout
 * pins, and its end (what a mapping that ends leaves to drain).
 */
#define LOG_PREFIX "fsvc: "
#include "fsvc_int.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "csess.h"
#include "ctl.h"
#include "evl.h"
#include "floops.h"
#include "frame.h"
#include "layout.h"
#include "log.h"
#include "node_env.h"
#include "pool.h"

struct fsvc_drain **fsvc_drain_find(struct fsvc *fs, const char *name,
				    uint64_t lease)
{
	struct fsvc_drain **p;

	for (p = &fs->draining; *p; p = &(*p)->next)
		if (!strcmp((*p)->name, name) &&
		    (!lease || (*p)->lease == lease))
			break;
	return p;
}

/* A chunk of layout @l that the process maps straight from this pool. */
int fsvc_chunk_is_local(const struct msg *l, const struct msg_chunk *ch)
{
	return ch->node == l->node && (!ch->inst || ch->inst == l->instance);
}

/* Chunks of layout @l (kept in runs: l->n_chunks is 0). */
uint32_t fsvc_n_chunks(const struct msg *l)
{
	return (uint32_t)layout_chunks_of(l->size, l->chunk_size);
}

struct fsvc_pin_walk {
	struct fsvc_conn *c;
	int delta;
};

static int fsvc_pin_part(const struct msg_chunk *part, uint32_t first,
			 uint32_t step, uint32_t count, void *arg)
{
	struct fsvc_pin_walk *w = arg;
	const struct msg *l = &w->c->layout;

	(void)first;
	(void)step;
	if (!fsvc_chunk_is_local(l, part))
		return 0;
	for (uint32_t k = 0; k < count; k++)
		w->c->fs->env->pool_pin(w->c->fs->env->agent,
					part->off + k * l->chunk_size,
					l->chunk_size, w->delta);
	return 0;
}

void fsvc_pins(struct fsvc_conn *c, int delta)
{
	struct fsvc_pin_walk w = { .c = c, .delta = delta };

	layout_parts_walk(c->layout.runs, c->layout.n_runs, fsvc_pin_part, &w);
	c->pinned = delta > 0;
}

static void fsvc_out_pop(struct fsvc_conn *c)
{
	struct fsvc_out *o = c->out;

	c->out = o->next;
	c->out_bytes -= o->len - o->off;
	for (int i = 0; o->own_fds && i < o->n_fds; i++)
		close(o->fds[i]);
	free(o->buf);
	free(o);
}

/*
 * Sends what the socket of @c takes now of the queued answers. Returns 0
 * (done, or the rest waits for EPOLLOUT) or -errno if the client is gone.
 */
int fsvc_out_flush(struct fsvc_conn *c)
{
	union {
		char buf[CMSG_SPACE(sizeof(int) * CTL_FDS_MAX)];
		struct cmsghdr align;
	} cbuf;

	while (c->out) {
		struct fsvc_out *o = c->out;
		struct iovec iov[2];
		struct msghdr mh = { .msg_iov = iov };
		ssize_t n;

		if (o->off < FRAME_HDR_LEN) {
			iov[0].iov_base = o->hdr + o->off;
			iov[0].iov_len = FRAME_HDR_LEN - o->off;
			iov[1].iov_base = o->buf;
			iov[1].iov_len = o->len - FRAME_HDR_LEN;
			mh.msg_iovlen = 2;
		} else {
			iov[0].iov_base = o->buf + (o->off - FRAME_HDR_LEN);
			iov[0].iov_len = o->len - o->off;
			mh.msg_iovlen = 1;
		}

		if (!o->off && o->n_fds) {
			struct cmsghdr *cm;

			memset(&cbuf, 0, sizeof(cbuf));
			mh.msg_control = cbuf.buf;
			mh.msg_controllen =
				CMSG_SPACE(sizeof(int) * (size_t)o->n_fds);
			cm = CMSG_FIRSTHDR(&mh);
			cm->cmsg_level = SOL_SOCKET;
			cm->cmsg_type = SCM_RIGHTS;
			cm->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)o->n_fds);
			memcpy(CMSG_DATA(cm), o->fds,
			       sizeof(int) * (size_t)o->n_fds);
		}
		n = sendmsg(c->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				return 0;
			return -errno;
		}
		if (mh.msg_control) { /* the descriptors went */
			for (int i = 0; o->own_fds && i < o->n_fds; i++)
				close(o->fds[i]);
			o->n_fds = 0;
		}
		o->off += (size_t)n;
		c->out_bytes -= (size_t)n;
		if (o->off == o->len)
			fsvc_out_pop(c);
	}
	return 0;
}

struct fsvc_uid *fsvc_uid_find(struct fsvc *fs, uid_t uid)
{
	struct fsvc_uid *u;

	for (u = fs->uids; u; u = u->next)
		if (u->uid == uid)
			return u;
	return NULL;
}

/*
 * One more client of @uid: its count, made if there is none yet. NULL:
 * no memory.
 */
struct fsvc_uid *fsvc_uid_get(struct fsvc *fs, uid_t uid)
{
	struct fsvc_uid *u = fsvc_uid_find(fs, uid);

	if (u) {
		u->n++;
		return u;
	}
	u = calloc(1, sizeof(*u));
	if (!u)
		return NULL;
	u->uid = uid;
	u->n = 1;
	u->next = fs->uids;
	fs->uids = u;
	return u;
}

/* A client of @u is gone; @u goes with its last one. */
void fsvc_uid_put(struct fsvc *fs, struct fsvc_uid *u)
{
	struct fsvc_uid **p;

	if (!u || --u->n)
		return;
	for (p = &fs->uids; *p != u; p = &(*p)->next)
		;
	*p = u->next;
	free(u);
}

void fsvc_conn_close(struct fsvc_conn *c)
{
	struct fsvc *fs = c->fs;
	struct fsvc_conn **p;

	if (c->state == FSVC_MAPPED)
		floops_map_remove(fs->env->fl, c->map_id);
	if (c->pinned)
		fsvc_pins(c, -1);
	/* A mapping the loop has gives its lease back once what it wrote
	 * is home (FLOOP_DONE_RELEASE); a writable map of the region here
	 * waits for that. After UNMAP the drain owns the lease. */
	if (c->lease && c->state == FSVC_MAPPED) {
		struct fsvc_drain *d = calloc(1, sizeof(*d));

		if (d) {
			memcpy(d->name, c->name, sizeof(d->name));
			d->lease = c->lease;
			d->next = fs->draining;
			fs->draining = d;
		}
	} else if (c->lease && c->state != FSVC_UNMAP_DRAIN &&
		   c->state != FSVC_RELEASING) {
		csess_lease_release(fs->env->cs, 0, c->name, c->lease);
	}
	if (c->cache_fd >= 0)
		close(c->cache_fd);
	for (p = &fs->conns; *p; p = &(*p)->next) {
		if (*p == c) {
			*p = c->next;
			atomic_fetch_sub(fs->env->n_conns, 1);
			break;
		}
	}
	/* A last answer (an error) goes if the socket takes it now. */
	fsvc_out_flush(c);
	while (c->out)
		fsvc_out_pop(c);
	evl_del(fs->env->evl, c->fd);
	close(c->fd);
	if (c->fd_in >= 0)
		close(c->fd_in);
	if (c->fd_in2 >= 0)
		close(c->fd_in2);
	fsvc_uid_put(fs, c->uid);
	free(c->rbuf);
	msg_fini(&c->layout);
	layout_runs_free(c->rruns, c->n_rruns);
	free(c->rs);
	free(c->grants);
	free(c);
}

/* The line about a client that sends without reading, one a second. */
void fsvc_log_unread(void)
{
	static struct log_limit limit = { .burst = 1 };
	uint64_t dropped;

	if (log_limit_take(&limit, evl_now_ms(), &dropped))
		log_warn("a local client sends requests without reading the "
			 "answers; closing it (%llu more since the last such "
			 "line)",
			 (unsigned long long)dropped);
}

/* The one answer to a refused client: it fits, or the client goes. */
int fsvc_send_now(int fd, const struct msg *m)
{
	int ret = ctl_send_timed(fd, m, NULL, 0, FSVC_SEND_MS);

	if (ret == -ETIMEDOUT)
		fsvc_log_unread();
	return ret;
}

/*
 * Every answer to a local client (sockets are non-blocking): sent now as
 * far as the socket takes it, the rest queued for EPOLLOUT (the caller's
 * @fds are dup()ed if they must wait). Returns 0, or -errno if the
 * connection must end.
 */
int fsvc_send(struct fsvc_conn *c, const struct msg *m, const int *fds,
	      int n_fds)
{
	struct fsvc_out *o, **tail;
	uint8_t *payload;
	size_t len;
	int ret;

	if (n_fds < 0 || n_fds > CTL_FDS_MAX || (n_fds && !fds))
		return -EINVAL;
	ret = msg_encode(m, &payload, &len);
	if (ret)
		return ret;
	if (!len || len > FRAME_MAX) {
		free(payload);
		return -EMSGSIZE;
	}
	if (c->out_bytes + FRAME_HDR_LEN + len > FSVC_OUT_MAX) {
		free(payload);
		fsvc_log_unread();
		return -ENOBUFS;
	}
	o = calloc(1, sizeof(*o));
	if (!o) {
		free(payload);
		return -ENOMEM;
	}
	frame_hdr_put(o->hdr, (uint32_t)len);
	o->buf = payload;
	o->len = FRAME_HDR_LEN + len;
	o->n_fds = n_fds;
	if (n_fds)
		memcpy(o->fds, fds, sizeof(int) * (size_t)n_fds);
	for (tail = &c->out; *tail; tail = &(*tail)->next)
		;
	*tail = o;
	c->out_bytes += o->len;
	ret = fsvc_out_flush(c);
	if (ret || !c->out) {
		for (o = c->out; o; o = o->next)
			if (!o->own_fds)
				o->n_fds = 0; /* the caller's: not kept */
		return ret;
	}
	/* Still queued with its descriptors: they must outlive the
	 * caller's (a read-only map's are closed after this). */
	for (o = c->out; o; o = o->next) {
		for (int i = 0; !o->own_fds && i < o->n_fds; i++) {
			int fd = fcntl(o->fds[i], F_DUPFD_CLOEXEC, 0);

			if (fd < 0) {
				ret = -errno;
				for (int k = 0; k < i; k++)
					close(o->fds[k]);
				o->n_fds = 0;
				return ret;
			}
			o->fds[i] = fd;
		}
		o->own_fds = 1;
	}
	return evl_mod(c->fs->env->evl, c->fd, EPOLLIN | EPOLLOUT);
}

int fsvc_reply_error(struct fsvc_conn *c, int err, const char *what)
{
	struct msg rep;

	msg_error(&rep, err, "%s", what);
	return fsvc_send(c, &rep, NULL, 0);
}

int fsvc_lookup(struct fsvc_conn *c)
{
	/* An incoming map is looked up only: its lease comes later. */
	int ret = csess_lookup(c->fs->env->cs, c->token, c->name,
			       c->flags & MSG_MAP_INCOMING ? 0 : c->lease,
			       c->wgen);

	if (ret) {
		fsvc_reply_error(c, ret, "cannot look the region up");
		return ret;
	}
	c->state = FSVC_LOOKUP;
	return 0;
}
