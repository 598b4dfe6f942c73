// SPDX-License-Identifier: MIT
/*
 * Fault service: the agent's Unix socket. A process maps a region in two
 * steps on one connection, which then stays open for the mapping's life:
 *
 *   MAP {name}            -> (lookup by the session thread: the
 *                             coordinator, or the cached layout)
 *                         -> MAP_LAYOUT {...} + pool memfd
 *   MAP_UFFD {base, feat} + uffd -> OK      (the fault loop serves it)
 *   EOF (unmap or exit)   -> the mapping is dropped
 *
 * AGENT_STATS may be sent on any connection and never waits for the
 * coordinator. The pool chunks a layout lets the process map are pinned
 * until the connection ends: a deleted region's extent is not cleared
 * under a process that still maps it.
 */
#define LOG_PREFIX "fsvc: "
#include "agent.h"

#include <errno.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "csess.h"
#include "ctl.h"
#include "evl.h"
#include "floop.h"
#include "frame.h"
#include "log.h"
#include "net.h"
#include "uffd.h"
#include "util.h"
#include "wire.h"
#include "xport.h"

/* Requests are a few hundred bytes; a larger declared frame is refused. */
#define FSVC_FRAME_MAX (64u << 10)
#define FSVC_MAP_ALIGN (2ull << 20)

enum fsvc_state {
	FSVC_NEW = 0,
	FSVC_LOOKUP, /* the session thread looks the region up */
	FSVC_LAYOUT_SENT,
	FSVC_MAPPED,
};

struct fsvc_conn {
	struct node_agent *a;
	int fd;
	enum fsvc_state state;
	uint64_t token; /* of the lookup */
	uint64_t map_id;
	uint64_t flags;	   /* MSG_MAP_* of the MAP request */
	uint64_t lease;	   /* write lease id of a writable map; 0: none */
	int cache_fd;	   /* the mapping's cache memfd, -1: none */
	struct msg layout; /* MAP_LAYOUT as sent */
	int pinned;	   /* layout's local chunks pinned */
	int fd_in;	   /* descriptor that came with the frame being read */
	size_t rlen;
	uint8_t rbuf[FRAME_HDR_LEN + FSVC_FRAME_MAX];
	struct fsvc_conn *next;
};

/* The chunks of the layout this node maps straight from its pool. */
static void fsvc_pins(struct fsvc_conn *c, int delta)
{
	const struct msg *l = &c->layout;

	for (uint32_t i = 0; i < l->n_chunks; i++)
		if (l->chunks[i].node == l->node &&
		    (!l->chunks[i].inst || l->chunks[i].inst == l->instance))
			agent_pool_pin(c->a, l->chunks[i].off, l->chunk_size,
				       delta);
	c->pinned = delta > 0;
}

static void fsvc_conn_close(struct fsvc_conn *c)
{
	struct node_agent *a = c->a;
	struct fsvc_conn **p;

	if (c->state == FSVC_MAPPED)
		floop_map_remove(a->fl, c->map_id);
	if (c->pinned)
		fsvc_pins(c, -1);
	if (c->lease)
		csess_lease_release(a->cs, c->layout.name, c->lease);
	if (c->cache_fd >= 0)
		close(c->cache_fd);
	for (p = &a->conns; *p; p = &(*p)->next) {
		if (*p == c) {
			*p = c->next;
			break;
		}
	}
	evl_del(a->evl, c->fd);
	close(c->fd);
	if (c->fd_in >= 0)
		close(c->fd_in);
	msg_fini(&c->layout);
	free(c);
}

static int fsvc_reply_error(struct fsvc_conn *c, int err, const char *what)
{
	struct msg rep;

	msg_error(&rep, err, "%s", what);
	return ctl_send(c->fd, &rep, NULL, 0);
}

/* MAP: the session thread looks the region up; fsvc_on_lookup() goes on. */
static int fsvc_on_map(struct fsvc_conn *c, const struct msg *req)
{
	struct node_agent *a = c->a;
	int ret;

	c->token = ++a->next_token;
	c->flags = req->flags & MSG_MAP_RDONLY;
	/* A writable map holds the region's write lease under its own id. */
	if (!(c->flags & MSG_MAP_RDONLY)) {
		ret = util_random_u64(&c->lease);
		if (ret) {
			fsvc_reply_error(c, ret, "no random lease id");
			return ret;
		}
	}
	ret = csess_lookup(a->cs, c->token, req->name, c->lease);
	if (ret) {
		fsvc_reply_error(c, ret, "cannot look the region up");
		return ret;
	}
	c->state = FSVC_LOOKUP;
	return 0;
}

/* The lookup of @c is done: the layout and the pool fd, or the error. */
static int fsvc_map_reply(struct fsvc_conn *c, struct csess_result *r)
{
	struct node_agent *a = c->a;
	int ret;

	if (r->err) {
		fsvc_reply_error(c, r->err, r->text);
		return r->err;
	}
	msg_init(&c->layout, MSG_T_MAP_LAYOUT);
	msg_strset(c->layout.name, sizeof(c->layout.name), r->region.name);
	c->layout.node = atomic_load(&a->node_id);
	c->layout.size = r->region.size;
	c->layout.chunk_size = r->region.chunk_size;
	c->layout.epoch = r->region.epoch;
	c->layout.cid = r->cid;
	c->layout.pool_size = a->pool.size;
	c->layout.instance = a->instance;
	c->layout.chunks = r->region.chunks;
	c->layout.n_chunks = r->region.n_chunks;
	r->region.chunks = NULL;
	r->region.n_chunks = 0;
	/* Pinned before the pool fd leaves: the process may map at once. */
	fsvc_pins(c, 1);
	ret = ctl_send(c->fd, &c->layout, &a->pool.fd, 1);
	if (!ret)
		c->state = FSVC_LAYOUT_SENT;
	return ret;
}

/* Finished lookups: each goes to its connection if it is still there. */
static void fsvc_on_lookups(struct evl *l, int fd, uint32_t events, void *arg)
{
	struct node_agent *a = arg;
	struct csess_result *r = csess_results_take(a->cs), *next;

	for (; r; r = next) {
		struct fsvc_conn *c;

		next = r->next;
		for (c = a->conns; c; c = c->next)
			if (c->state == FSVC_LOOKUP && c->token == r->token)
				break;
		/* A failed map ends the connection. */
		if (c && fsvc_map_reply(c, r))
			fsvc_conn_close(c);
		csess_result_free(r);
	}
}

static int fsvc_on_map_uffd(struct fsvc_conn *c, const struct msg *req,
			    int uffd)
{
	struct node_agent *a = c->a;
	struct floop_map_desc d = { 0 };
	struct msg ok;
	size_t clen;
	int ret;

	if (uffd < 0 || req->base % FSVC_MAP_ALIGN || !req->base) {
		if (uffd >= 0)
			close(uffd);
		fsvc_reply_error(c, -EINVAL,
				 "map_uffd needs an aligned base "
				 "and the uffd");
		return -EINVAL;
	}
	/* Anything else (a pipe, a blocking uffd) would stall the fault loop
	 * and every guest of this host on its first read. */
	if (!uffd_fd_is_uffd(uffd)) {
		close(uffd);
		log_warn("local client handed a descriptor that is not a "
			 "non-blocking userfaultfd; refused");
		fsvc_reply_error(c, -EBADF,
				 "map_uffd: the descriptor is not a "
				 "non-blocking userfaultfd");
		return -EBADF;
	}
	clen = (size_t)c->layout.n_chunks * sizeof(*d.chunks);
	d.chunks = malloc(clen ? clen : 1);
	if (!d.chunks) {
		close(uffd);
		return -ENOMEM;
	}
	memcpy(d.chunks, c->layout.chunks, clen);
	d.id = ++a->next_map_id;
	d.uffd = uffd;
	d.base = req->base;
	d.size = c->layout.size;
	d.chunk_size = c->layout.chunk_size;
	d.n_chunks = c->layout.n_chunks;
	d.features = req->features;
	d.flags = req->flags;
	d.epoch = c->layout.epoch;
	d.cid = c->layout.cid;
	memcpy(d.name, c->layout.name, sizeof(d.name));
	ret = floop_map_add(a->fl, &d);
	if (ret)
		return ret;
	c->map_id = d.id;
	c->state = FSVC_MAPPED;
	log_info("process %s region %s (map %llu, %s poisoning)",
		 d.flags & MSG_MAP_RESUME ? "handed over" : "mapped", d.name,
		 (unsigned long long)d.id,
		 d.features & UFFD_FEATURE_POISON ? "with" : "WITHOUT");
	msg_init(&ok, MSG_T_OK);
	return ctl_send(c->fd, &ok, NULL, 0);
}

static int fsvc_on_stats(struct fsvc_conn *c)
{
	struct floop_counters *ctr = floop_counters(c->a->fl);
	struct msg rep;
	int ret;

	msg_init(&rep, MSG_T_AGENT_STAT);
	rep.node = atomic_load(&c->a->node_id);
	rep.faults = atomic_load(&ctr->faults);
	rep.remote = atomic_load(&ctr->remote);
	rep.local = atomic_load(&ctr->local);
	rep.errors = atomic_load(&ctr->errors);
	rep.poisoned = atomic_load(&ctr->poisoned);
	floop_peer_stats(c->a->fl, &rep.peers, &rep.n_peers);
	ret = ctl_send(c->fd, &rep, NULL, 0);
	msg_fini(&rep);
	return ret;
}

/* Serves one request; returns non-zero if the connection must end. */
static int fsvc_dispatch(struct fsvc_conn *c, const struct msg *req, int *fd)
{
	int ret;

	if (req->type == MSG_T_MAP && c->state == FSVC_NEW) {
		ret = fsvc_on_map(c, req);
	} else if (req->type == MSG_T_MAP_UFFD &&
		   c->state == FSVC_LAYOUT_SENT) {
		ret = fsvc_on_map_uffd(c, req, *fd);
		*fd = -1;
	} else if (req->type == MSG_T_AGENT_STATS) {
		ret = fsvc_on_stats(c);
	} else {
		log_warn("local client sent %s out of turn; closing it",
			 msg_type_name(req->type));
		fsvc_reply_error(c, -EPROTO, "unexpected request");
		return 1;
	}
	/* A failed map ends the connection; a served one keeps it open. */
	return ret && c->state != FSVC_MAPPED;
}

/* Keeps the first descriptor of a frame; closes any others. */
static int fsvc_take_fds(struct fsvc_conn *c, struct msghdr *mh)
{
	for (struct cmsghdr *cm = CMSG_FIRSTHDR(mh); cm;
	     cm = CMSG_NXTHDR(mh, cm)) {
		size_t n;

		if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
			continue;
		n = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (size_t i = 0; i < n; i++) {
			int fd;

			memcpy(&fd, CMSG_DATA(cm) + i * sizeof(int),
			       sizeof(fd));
			if (c->fd_in < 0)
				c->fd_in = fd;
			else
				close(fd);
		}
	}
	return (mh->msg_flags & MSG_CTRUNC) ? -EBADMSG : 0;
}

/*
 * Reads what the client sent so far and serves every complete frame. A
 * partial frame just waits in rbuf: a slow or stuck client never holds up
 * the control thread (heartbeats, other clients).
 */
static int fsvc_conn_read(struct fsvc_conn *c)
{
	union {
		char buf[CMSG_SPACE(CTL_FDS_MAX * sizeof(int))];
		struct cmsghdr align;
	} cbuf;
	const uint8_t *payload;
	struct msghdr mh;
	struct iovec iov;
	struct msg req;
	size_t plen;
	ssize_t n, used;
	int ret;

	for (;;) {
		iov.iov_base = c->rbuf + c->rlen;
		iov.iov_len = sizeof(c->rbuf) - c->rlen;
		memset(&mh, 0, sizeof(mh));
		mh.msg_iov = &iov;
		mh.msg_iovlen = 1;
		mh.msg_control = cbuf.buf;
		mh.msg_controllen = sizeof(cbuf.buf);
		n = recvmsg(c->fd, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return errno == EAGAIN ? 0 : -errno;
		}
		if (n == 0)
			return -ECONNRESET;
		ret = fsvc_take_fds(c, &mh);
		if (ret)
			return ret;
		c->rlen += (size_t)n;
		while ((used = frame_parse(c->rbuf, c->rlen, &payload, &plen)) >
		       0) {
			ret = msg_decode(payload, plen, &req);
			if (ret)
				return ret;
			ret = fsvc_dispatch(c, &req, &c->fd_in);
			msg_fini(&req);
			if (c->fd_in >= 0) {
				close(c->fd_in); /* a descriptor nobody wanted */
				c->fd_in = -1;
			}
			if (ret)
				return -EPROTO;
			memmove(c->rbuf, c->rbuf + used,
				c->rlen - (size_t)used);
			c->rlen -= (size_t)used;
		}
		if (used < 0)
			return (int)used;
		/* Refuse an oversized frame before waiting for it. */
		if (c->rlen >= FRAME_HDR_LEN &&
		    wire_get(c->rbuf, FRAME_HDR_LEN) > FSVC_FRAME_MAX)
			return -EBADMSG;
	}
}

static void fsvc_on_conn(struct evl *l, int fd, uint32_t events, void *arg)
{
	struct fsvc_conn *c = arg;
	int ret;

	ret = fsvc_conn_read(c);
	if (!ret)
		return;
	if (ret != -ECONNRESET && ret != -EPROTO)
		log_warn("local client: %s; closing it", log_strerror(ret));
	fsvc_conn_close(c);
}

static void fsvc_on_accept(struct evl *l, int fd, uint32_t events, void *arg)
{
	struct node_agent *a = arg;
	struct fsvc_conn *c;
	int cfd;

	cfd = accept4(fd, NULL, NULL, SOCK_CLOEXEC);
	if (cfd < 0)
		return;
	c = calloc(1, sizeof(*c));
	if (!c) {
		close(cfd);
		return;
	}
	c->a = a;
	c->fd = cfd;
	c->fd_in = -1;
	c->cache_fd = -1;
	if (evl_add(a->evl, cfd, EPOLLIN, fsvc_on_conn, c)) {
		close(cfd);
		free(c);
		return;
	}
	c->next = a->conns;
	a->conns = c;
}

int fsvc_init(struct node_agent *a)
{
	int ret;

	ret = net_unix_listen(a->cfg.sock_path, 128, &a->usock);
	if (ret) {
		log_errno(ret, "listen on %s", a->cfg.sock_path);
		return ret;
	}
	chmod(a->cfg.sock_path, 0660);
	ret = evl_add(a->evl, a->usock, EPOLLIN, fsvc_on_accept, a);
	if (ret) {
		log_errno(ret, "watch %s", a->cfg.sock_path);
		return ret;
	}
	ret = evl_add(a->evl, csess_event_fd(a->cs), EPOLLIN, fsvc_on_lookups,
		      a);
	if (ret)
		log_errno(ret, "watch lookups");
	return ret;
}

void fsvc_fini(struct node_agent *a)
{
	if (a->cs)
		evl_del(a->evl, csess_event_fd(a->cs));
	while (a->conns)
		fsvc_conn_close(a->conns);
	if (a->usock >= 0) {
		close(a->usock);
		unlink(a->cfg.sock_path);
	}
	a->usock = -1;
}
