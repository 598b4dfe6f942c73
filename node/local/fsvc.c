// SPDX-License-Identifier: MIT
/*
 * Fault service: the agent's Unix socket. A process maps a region in two
 * steps on one connection, which then stays open for the mapping's life:
 *
 *   MAP {name}            -> (lookup by the session thread: the
 *                             coordinator, or the cached layout)
 *                         -> MAP_LAYOUT {...} [+ cache memfd]
 *   MAP_FDS {base, size}  -> MAP_FDS + the pool segments (2 MiB memfds)
 *                            under those bytes of the region, repeated
 *                            for every run of chunks held here
 *   MAP_UFFD {base, feat} + uffd -> OK      (the fault loop serves it)
 *   UNMAP                 -> OK once what it wrote is home and its write
 *                            lease given back (coordinator acknowledged)
 *   EOF (exit)            -> the mapping is dropped; its write lease goes
 *                            back once what it wrote is home, unwaited
 *
 * AGENT_STATS may be sent on any connection and never waits for the
 * coordinator. The pool chunks a layout lets the process map are pinned
 * until the connection ends: a deleted region's extent is not cleared
 * under a process that still maps it.
 */
#define LOG_PREFIX "fsvc: "
#include "fsvc_int.h"

#include <assert.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "csess.h"
#include "ctl.h"
#include "evl.h"
#include "floops.h"
#include "frame.h"
#include "log.h"
#include "net.h"
#include "node_env.h"
#include "sockauth.h"
#include "uffd.h"
#include "wire.h"

static int fsvc_on_stats(struct fsvc_conn *c)
{
	struct floop_counters sum, *ctr = &sum;
	struct msg rep;
	int ret;

	floops_counters(c->fs->env->fl, &sum);
	msg_init(&rep, MSG_T_AGENT_STAT);
	rep.node = atomic_load(c->fs->env->node_id);
	rep.faults = atomic_load(&ctr->faults);
	rep.remote = atomic_load(&ctr->remote);
	rep.local = atomic_load(&ctr->local);
	rep.errors = atomic_load(&ctr->errors);
	rep.poisoned = atomic_load(&ctr->poisoned);
	floops_peer_stats(c->fs->env->fl, &rep.peers, &rep.n_peers);
	rep.cache = calloc(MSG_CACHE__MAX, sizeof(*rep.cache));
	if (rep.cache) {
		rep.n_cache = MSG_CACHE__MAX;
		rep.cache[MSG_CACHE_LIMIT] =
			c->fs->env->cache_on ? c->fs->env->cache_size : 0;
		rep.cache[MSG_CACHE_RESIDENT] =
			atomic_load(&ctr->cache_resident) * 4096;
		rep.cache[MSG_CACHE_RESIDENT_MAX] =
			atomic_load(&ctr->cache_resident_max) * 4096;
		rep.cache[MSG_CACHE_DIRTY] =
			atomic_load(&ctr->cache_dirty) * 4096;
		rep.cache[MSG_CACHE_HITS] = atomic_load(&ctr->cache_hits);
		rep.cache[MSG_CACHE_MISSES] = atomic_load(&ctr->cache_misses);
		rep.cache[MSG_CACHE_EVICTIONS] =
			atomic_load(&ctr->cache_evictions);
		rep.cache[MSG_CACHE_WRITEBACKS] =
			atomic_load(&ctr->cache_writebacks);
		rep.cache[MSG_CACHE_WB_ERRORS] =
			atomic_load(&ctr->cache_wb_errors);
		rep.cache[MSG_CACHE_WP_FAULTS] =
			atomic_load(&ctr->cache_wp_faults);
		rep.cache[MSG_CACHE_FILE_MAX] =
			atomic_load(&ctr->cache_file_max);
	}
	ret = fsvc_send(c, &rep, NULL, 0);
	msg_fini(&rep);
	return ret;
}

/* Serves one request; returns non-zero if the connection must end. */
static int fsvc_dispatch(struct fsvc_conn *c, const struct msg *req, int *fd)
{
	int ret;

	if (req->type == MSG_T_MAP && c->state == FSVC_NEW) {
		ret = fsvc_on_map(c, req);
	} else if (req->type == MSG_T_MAP_FDS && c->state == FSVC_LAYOUT_SENT) {
		ret = fsvc_on_map_fds(c, req);
	} else if (req->type == MSG_T_MAP_UFFD &&
		   c->state == FSVC_LAYOUT_SENT) {
		ret = fsvc_on_map_uffd(c, req, *fd, c->fd_in2);
		*fd = -1;
		c->fd_in2 = -1;
	} else if ((req->type == MSG_T_FLUSH || req->type == MSG_T_FLUSH_SEAL ||
		    req->type == MSG_T_FLUSH_DROP) &&
		   c->state == FSVC_NEW) {
		c->token = ++c->fs->next_token;
		memcpy(c->name, req->name, sizeof(c->name));
		if (!fsvc_name_is_here(c->fs, c->name)) {
			ret = csess_lookup(c->fs->env->cs, c->token, c->name, 0,
					   0);
			if (ret) {
				fsvc_reply_error(c, ret,
						 "cannot look the region up");
				return 1;
			}
			c->state = FSVC_FLUSH_LOOKUP;
			return 0;
		}
		if (req->type == MSG_T_FLUSH_SEAL)
			fsvc_flush_seal(c);
		ret = floops_flush(c->fs->env->fl, req->name, c->token,
				   req->type == MSG_T_FLUSH_DROP);
		if (ret) {
			fsvc_reply_error(c, ret, "cannot queue the flush");
			return 1;
		}
		c->state = FSVC_FLUSH;
	} else if (req->type == MSG_T_HANDOVER && c->state == FSVC_NEW) {
		return fsvc_on_handover(c, req) != 0;
	} else if (req->type == MSG_T_DISCARD && c->state == FSVC_NEW) {
		return fsvc_on_discard(c, req) != 0;
	} else if (req->type == MSG_T_UNMAP && c->state == FSVC_MAPPED) {
		ret = fsvc_on_unmap(c);
		return ret != 0;
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
			else if (c->fd_in2 < 0)
				c->fd_in2 = fd;
			else
				close(fd);
		}
	}
	return (mh->msg_flags & MSG_CTRUNC) ? -EBADMSG : 0;
}

/*
 * Room in c->rbuf for what waits on the socket now (FIONREAD), at least a
 * byte. Returns 0 or -ENOMEM.
 */
static int fsvc_rbuf_room(struct fsvc_conn *c)
{
	int avail = 0;
	size_t want;
	uint8_t *p;

	if (ioctl(c->fd, FIONREAD, &avail) < 0 || avail < 1)
		avail = 1;
	want = c->rlen + (size_t)avail;
	if (want < FSVC_RBUF_MIN)
		want = FSVC_RBUF_MIN;
	if (want > FSVC_RBUF_MAX)
		want = FSVC_RBUF_MAX;
	if (want <= c->rcap)
		return 0;
	p = realloc(c->rbuf, want);
	if (!p)
		return -ENOMEM;
	c->rbuf = p;
	c->rcap = want;
	return 0;
}

/*
 * Reads what the client sent so far and serves every complete frame. A
 * partial frame just waits in rbuf: a slow or stuck client never holds up
 * the control thread (heartbeats, other clients).
 */
static int fsvc_conn_recv(struct fsvc_conn *c)
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
		ret = fsvc_rbuf_room(c);
		if (ret)
			return ret;
		/* a full buffer holds a whole frame: parsed below */
		assert(c->rlen < c->rcap);
		iov.iov_base = c->rbuf + c->rlen;
		iov.iov_len = c->rcap - c->rlen;
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
			/* A request while an answer is still unsent: this
			 * client sends without reading. */
			if (c->out) {
				fsvc_log_unread();
				return -EPROTO;
			}
			ret = msg_decode(payload, plen, &req);
			if (ret)
				return ret;
			ret = fsvc_dispatch(c, &req, &c->fd_in);
			msg_fini(&req);
			if (c->fd_in >= 0) {
				close(c->fd_in); /* a descriptor nobody wanted */
				c->fd_in = -1;
			}
			if (c->fd_in2 >= 0) {
				close(c->fd_in2);
				c->fd_in2 = -1;
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

/* fsvc_conn_recv(); the buffer goes back once nothing is partly in it. */
static int fsvc_conn_read(struct fsvc_conn *c)
{
	int ret = fsvc_conn_recv(c);

	if (!c->rlen) {
		free(c->rbuf);
		c->rbuf = NULL;
		c->rcap = 0;
	}
	return ret;
}

static void fsvc_on_conn(struct evl *l, int fd, uint32_t events, void *arg)
{
	struct fsvc_conn *c = arg;
	int ret = 0;

	if (events & EPOLLOUT) {
		ret = fsvc_out_flush(c);
		if (!ret && !c->out)
			ret = evl_mod(l, c->fd, EPOLLIN);
	}
	if (!ret && (events & (EPOLLIN | EPOLLHUP | EPOLLERR)))
		ret = fsvc_conn_read(c);
	if (!ret)
		return;
	if (ret != -ECONNRESET && ret != -EPROTO)
		log_warn("local client: %s; closing it", log_strerror(ret));
	fsvc_conn_close(c);
}

/* A refused client's connection ends (its slot: @i). */
static void fsvc_refused_close(struct fsvc *fs, unsigned int i)
{
	int fd = fs->refused[i];

	fs->refused[i] = -1;
	evl_del(fs->env->evl, fd);
	close(fd);
}

/* Its request (or its end) came: it has the reply before it. */
static void fsvc_on_refused(struct evl *l, int fd, uint32_t events, void *arg)
{
	struct fsvc *fs = arg;

	for (unsigned int i = 0; i < FSVC_REFUSED_MAX; i++)
		if (fs->refused[i] == fd)
			fsvc_refused_close(fs, i);
}

/*
 * The warning about a refused client, at most one a second: a flood of
 * them cannot fill the log. The next line says how many were not told.
 */
static void fsvc_refused_log(struct fsvc *fs, const struct ucred *cr, int err,
			     enum agent_sock_refusal why, unsigned int n)
{
	uint64_t dropped;
	char more[64] = "";

	if (!log_limit_take(&fs->refused_log, evl_now_ms(), &dropped))
		return;
	if (dropped)
		snprintf(more, sizeof(more),
			 " (and %llu more since the last such line)",
			 (unsigned long long)dropped);
	if (err)
		log_warn("refused a local client whose credentials cannot be "
			 "read (%s)%s",
			 log_strerror(err), more);
	else if (why == AGENT_SOCK_UID_CAP)
		log_warn("refused local client pid %d uid %u gid %u: uid %u "
			 "has %u connections, its cap "
			 "(--sock-clients-per-uid)%s",
			 (int)cr->pid, (unsigned int)cr->uid,
			 (unsigned int)cr->gid, (unsigned int)cr->uid, n, more);
	else if (why == AGENT_SOCK_TOTAL_CAP)
		log_warn("refused local client pid %d uid %u gid %u: all %u "
			 "places taken (--sock-clients, or the descriptors "
			 "left)%s",
			 (int)cr->pid, (unsigned int)cr->uid,
			 (unsigned int)cr->gid, n, more);
	else
		log_warn("refused local client pid %d uid %u gid %u: not "
			 "allowed by --allow-uid/--allow-gid%s",
			 (int)cr->pid, (unsigned int)cr->uid,
			 (unsigned int)cr->gid, more);
}

/*
 * A client that may not use the agent gets one reply: EACCES, or EUSERS
 * past a cap (@n: the cap). Its connection is closed once its request
 * arrives, not at once: the client writes first, and a write to a closed
 * socket fails (EPIPE) before it reads why. FSVC_REFUSED_MAX wait at
 * once; beyond them the oldest goes.
 */
static void fsvc_refuse(struct fsvc *fs, int fd, const struct ucred *cr,
			int err, enum agent_sock_refusal why, unsigned int n)
{
	unsigned int i = fs->refused_next++ % FSVC_REFUSED_MAX;
	struct msg rep;

	atomic_fetch_add_explicit(&fs->env->sock_refused[why], 1,
				  memory_order_relaxed);
	fsvc_refused_log(fs, cr, err, why, n);
	if (err)
		msg_error(&rep, -EACCES,
			  "the agent cannot read this client's credentials");
	else if (why == AGENT_SOCK_UID_CAP)
		msg_error(&rep, -EUSERS,
			  "uid %u has %u connections to this agent, its cap "
			  "(--sock-clients-per-uid)",
			  (unsigned int)cr->uid, n);
	else if (why == AGENT_SOCK_TOTAL_CAP)
		msg_error(&rep, -EUSERS,
			  "this agent serves %u local clients, its cap "
			  "(--sock-clients)",
			  n);
	else
		msg_error(&rep, -EACCES,
			  "uid %u is not allowed to use this agent "
			  "(--allow-uid/--allow-gid)",
			  (unsigned int)cr->uid);
	if (fsvc_send_now(fd, &rep)) {
		close(fd);
		return;
	}
	if (fs->refused[i] >= 0)
		fsvc_refused_close(fs, i);
	if (evl_add(fs->env->evl, fd, EPOLLIN, fsvc_on_refused, fs)) {
		close(fd);
		return;
	}
	fs->refused[i] = fd;
}

static void fsvc_on_accept(struct evl *l, int fd, uint32_t events, void *arg)
{
	struct fsvc *fs = arg;
	struct fsvc_uid *u;
	struct fsvc_conn *c;
	struct ucred cr;
	int cfd, ret;

	cfd = accept4(fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
	if (cfd < 0)
		return;
	/* Whoever maps a region reads and writes its pages (its part of
	 * the pool): the local users given, nobody else. */
	ret = sockauth_peer_check(fs->env->allow, cfd, &cr);
	if (ret <= 0) {
		fsvc_refuse(fs, cfd, &cr, ret, AGENT_SOCK_NOT_ALLOWED, 0);
		return;
	}
	u = fsvc_uid_find(fs, cr.uid);
	if (u && u->n >= fs->clients_uid) {
		fsvc_refuse(fs, cfd, &cr, 0, AGENT_SOCK_UID_CAP, u->n);
		return;
	}
	if (atomic_load(fs->env->n_conns) >= fs->sock_max) {
		fsvc_refuse(fs, cfd, &cr, 0, AGENT_SOCK_TOTAL_CAP,
			    fs->sock_max);
		return;
	}
	c = calloc(1, sizeof(*c));
	if (!c) {
		close(cfd);
		return;
	}
	c->uid = fsvc_uid_get(fs, cr.uid);
	if (!c->uid) {
		close(cfd);
		free(c);
		return;
	}
	c->fs = fs;
	c->fd = cfd;
	c->pid = cr.pid;
	c->fd_in = c->fd_in2 = -1;
	c->cache_fd = -1;
	if (evl_add(fs->env->evl, cfd, EPOLLIN, fsvc_on_conn, c)) {
		fsvc_uid_put(fs, c->uid);
		close(cfd);
		free(c);
		return;
	}
	c->next = fs->conns;
	fs->conns = c;
	atomic_fetch_add(fs->env->n_conns, 1);
}

/*
 * The socket file: mode 0660 whatever the umask, in the group given (the
 * group --allow-gid allows by default), so the file system lets in no more
 * than the agent's user and that group. A client that connects before the
 * chmod is checked all the same. A group it cannot give (no CAP_CHOWN, not
 * a member) is a warning: the socket keeps the agent's group.
 */
static int fsvc_sock_mode(struct fsvc *fs)
{
	const char *path = fs->env->sock_path;
	int ret;

	if (fs->env->sock_gid != (gid_t)-1 &&
	    lchown(path, (uid_t)-1, fs->env->sock_gid) < 0) {
		ret = -errno;
		log_warn("cannot give %s to group %u (%s): it keeps the "
			 "agent's group; the agent needs CAP_CHOWN or to be "
			 "in group %u (under its unit: SupplementaryGroups= in "
			 "a drop-in)",
			 path, (unsigned int)fs->env->sock_gid,
			 log_strerror(ret), (unsigned int)fs->env->sock_gid);
	}
	if (chmod(path, 0660) < 0) {
		ret = -errno;
		log_errno(ret, "chmod 0660 %s", path);
		return ret;
	}
	return 0;
}

/* Descriptors this process has open now; 0 if they cannot be counted. */
static unsigned int fsvc_fds_open(void)
{
	DIR *d = opendir("/proc/self/fd");
	unsigned int n = 0;
	struct dirent *e;

	if (!d)
		return 0;
	while ((e = readdir(d)))
		n += e->d_name[0] != '.';
	closedir(d);
	return n;
}

/*
 * Local clients in all: --sock-clients, lowered to what the open-files
 * limit leaves once the descriptors open now (the pool's segments among
 * them), the page server's connections and the agent's own are counted.
 */
static void fsvc_clients_max(struct fsvc *fs)
{
	uint64_t want = fs->env->sock_clients ? fs->env->sock_clients
					      : FSVC_CLIENTS_DEFAULT;
	uint64_t used, left = want;
	struct rlimit rl;

	if (!fs->clients_uid)
		fs->clients_uid = FSVC_CLIENTS_UID_DEFAULT;
	used = (uint64_t)fsvc_fds_open() + fs->env->data_conns +
	       FSVC_FD_RESERVE;
	if (!getrlimit(RLIMIT_NOFILE, &rl) && rl.rlim_cur != RLIM_INFINITY)
		left = rl.rlim_cur > used
			       ? (rl.rlim_cur - used) / FSVC_CLIENT_FDS
			       : 0;
	if (left < 16)
		left = 16;
	fs->sock_max = (unsigned int)(left < want ? left : want);
	if (fs->sock_max < want)
		log_warn("local clients capped at %u, not %llu: the open-files "
			 "limit (%llu) leaves that many after the pool, the "
			 "page server's connections and the agent's own "
			 "(raise LimitNOFILE= in the unit, ulimit -n)",
			 fs->sock_max, (unsigned long long)want,
			 (unsigned long long)rl.rlim_cur);
}

static int fsvc_listen(struct fsvc *fs)
{
	int ret;

	ret = net_unix_listen(fs->env->sock_path, 128, &fs->usock);
	if (ret) {
		log_errno(ret, "listen on %s", fs->env->sock_path);
		return ret;
	}
	ret = fsvc_sock_mode(fs);
	if (ret)
		return ret;
	ret = evl_add(fs->env->evl, fs->usock, EPOLLIN, fsvc_on_accept, fs);
	if (ret) {
		log_errno(ret, "watch %s", fs->env->sock_path);
		return ret;
	}
	ret = evl_add(fs->env->evl, csess_event_fd(fs->env->cs), EPOLLIN,
		      fsvc_on_lookups, fs);
	if (ret) {
		log_errno(ret, "watch lookups");
		return ret;
	}
	ret = evl_add(fs->env->evl, floops_done_fd(fs->env->fl), EPOLLIN,
		      fsvc_on_dones, fs);
	if (ret)
		log_errno(ret, "watch the fault loop");
	return ret;
}

int fsvc_create(const struct node_env *env, struct fsvc **out)
{
	struct fsvc *fs;
	int ret;

	fs = calloc(1, sizeof(*fs));
	if (!fs)
		return -ENOMEM;
	fs->env = env;
	fs->usock = -1;
	for (unsigned int i = 0; i < FSVC_REFUSED_MAX; i++)
		fs->refused[i] = -1;
	fs->clients_uid = env->sock_clients_uid;
	fs->refused_log.burst = 1;
	fsvc_clients_max(fs);
	ret = fsvc_listen(fs);
	if (ret) {
		fsvc_destroy(fs);
		return ret;
	}
	*out = fs;
	return 0;
}

void fsvc_destroy(struct fsvc *fs)
{
	if (!fs)
		return;
	if (fs->env->cs)
		evl_del(fs->env->evl, csess_event_fd(fs->env->cs));
	if (fs->env->fl)
		evl_del(fs->env->evl, floops_done_fd(fs->env->fl));
	while (fs->conns)
		fsvc_conn_close(fs->conns);
	for (unsigned int i = 0; i < FSVC_REFUSED_MAX; i++)
		if (fs->refused[i] >= 0)
			fsvc_refused_close(fs, i);
	while (fs->draining) {
		struct fsvc_drain *d = fs->draining;

		fs->draining = d->next;
		free(d);
	}
	if (fs->usock >= 0) {
		close(fs->usock);
		unlink(fs->env->sock_path);
	}
	free(fs);
}
