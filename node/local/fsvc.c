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
#include "fsvc.h"

#include <assert.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/pidfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "csess.h"
#include "ctl.h"
#include "evl.h"
#include "floops.h"
#include "frame.h"
#include "layout.h"
#include "log.h"
#include "net.h"
#include "node_env.h"
#include "pool.h"
#include "sockauth.h"
#include "uffd.h"
#include "util.h"
#include "wire.h"
#include "xport.h"

#ifndef SO_PEERPIDFD
#define SO_PEERPIDFD 77 /* 6.5+; older kernels: ENOPROTOOPT */
#endif

/* Requests are a few hundred bytes; a larger declared frame is refused. */
#define FSVC_FRAME_MAX (64u << 10)
/*
 * A client's receive buffer is allocated when bytes come, as large as
 * what waits on its socket (at least FSVC_RBUF_MIN), and given back once
 * no frame is partly in it: an idle client holds none.
 */
#define FSVC_RBUF_MIN 512u
#define FSVC_RBUF_MAX (FRAME_HDR_LEN + FSVC_FRAME_MAX)
/*
 * Clients in all and per uid, by default. Each may hold up to
 * FSVC_CLIENT_FDS descriptors (its socket, its userfaultfd, its cache
 * memfd); clients in all are lowered to what the open-files limit leaves
 * once the descriptors open at start, the page server's connections and
 * FSVC_FD_RESERVE for the agent's own (peers, coordinator, /metrics,
 * segments passed to mappers) are counted: the page server can always
 * accept.
 */
#define FSVC_CLIENTS_DEFAULT	 4096u
#define FSVC_CLIENTS_UID_DEFAULT 1024u
#define FSVC_CLIENT_FDS		 3u
#define FSVC_FD_RESERVE		 1024u
/*
 * Every client waits for each answer before its next request. An answer
 * that does not fit the socket's buffer at once (the layout of a big
 * region) is queued and sent in parts as the socket becomes writable: the
 * control thread never waits on a client. A client that sends a new
 * request while an answer to it is still queued unsent sends without
 * reading: it loses its connection. So does one whose queued answers would
 * exceed FSVC_OUT_MAX bytes.
 */
#define FSVC_SEND_MS   0
#define FSVC_OUT_MAX   (2 * (size_t)(FRAME_HDR_LEN + FRAME_MAX))
#define FSVC_MAP_ALIGN (2ull << 20)

enum fsvc_state {
	FSVC_NEW = 0,
	FSVC_DRAIN_WAIT, /* a writable map waits for a mapping here that
			    goes, to take the lease it gives back */
	FSVC_LOOKUP,	 /* the session thread looks the region up */
	FSVC_LAYOUT_SENT,
	FSVC_MAPPED,
	FSVC_FLUSH,	   /* the fault loop sends pages home */
	FSVC_FLUSH_CHECK,  /* ... they are: is the write lease still ours? */
	FSVC_UNMAP_DRAIN,  /* UNMAP: what the mapping wrote goes home */
	FSVC_RELEASING,	   /* UNMAP: its write lease goes back */
	FSVC_UNMAPPED,	   /* UNMAP answered: nothing more but stats */
	FSVC_FLUSH_LOOKUP, /* FLUSH of a region not mapped here: does it
			      exist at all? */
};

/* An answer queued for a client: a whole frame, sent from @off on. */
struct fsvc_out {
	struct fsvc_out *next;
	uint8_t hdr[FRAME_HDR_LEN];
	uint8_t *buf; /* the payload */
	size_t len;   /* of header and payload */
	size_t off;
	int fds[CTL_FDS_MAX]; /* go with the frame's first byte */
	int n_fds;
	int own_fds; /* fds[] are ours to close (dup()s) */
};

struct fsvc_conn {
	struct fsvc *fs;
	int fd;
	enum fsvc_state state;
	uint64_t token; /* of the lookup */
	uint64_t map_id;
	uint64_t flags;		 /* MSG_MAP_* of the MAP request */
	uint64_t lease;		 /* write lease id of a writable map; 0: none */
	uint64_t wgen;		 /* its generation (MAP: the one to resume) */
	int wgen_asked;		 /* MAP carried wgen: MAP_LAYOUT carries it */
	char name[MSG_NAME_MAX]; /* of the region asked for */
	int cache_fd;		 /* the mapping's cache memfd, -1: none */
	struct msg layout;	 /* MAP_LAYOUT as sent */
	/* replicated regions: the process is sent no chunk as local (a
	 * write straight to this pool would reach no other replica); the
	 * fault loop gets the real layout, n_chunks * replicas records */
	uint32_t replicas; /* 0: not replicated */
	struct msg_run *rruns;
	uint32_t n_rruns;
	struct msg_rstate *rs;
	uint32_t n_rs;
	uint64_t rgen;
	/* the grants the fault loop presents at the owners for it */
	struct msg_grant *grants;
	uint32_t n_grants;
	int pinned; /* layout's local chunks pinned */
	int fd_in;  /* descriptor that came with the frame being read */
	int fd_in2; /* ... and a second one (a resumed cache memfd) */
	struct fsvc_out *out; /* answers not yet sent, oldest first */
	size_t out_bytes;     /* their bytes left to send */
	size_t rlen;
	size_t rcap;	      /* of rbuf; 0: none (nothing partly received) */
	uint8_t *rbuf;	      /* FSVC_RBUF_MIN..FSVC_RBUF_MAX bytes */
	struct fsvc_uid *uid; /* its uid's count */
	struct fsvc_conn *next;
};

/* Local clients of one uid connected now. */
struct fsvc_uid {
	struct fsvc_uid *next;
	uid_t uid;
	unsigned int n;
};

/* A writable mapping that ended, still sending home what it wrote. */
struct fsvc_drain {
	char name[MSG_NAME_MAX];
	uint64_t lease;
	struct fsvc_drain *next;
};

/* Refused clients waiting to be closed. */
#define FSVC_REFUSED_MAX 16

struct fsvc {
	const struct node_env *env; /* what the agent lends us */
	int usock;
	struct fsvc_conn *conns;
	/*
	 * Refused clients: each connection stays until its request (or its
	 * end) comes, so the client reads why and not EPIPE; a few at once,
	 * the oldest goes first. -1: a free place. And the warning about
	 * them, at most one a second.
	 */
	int refused[FSVC_REFUSED_MAX];
	unsigned int refused_next;
	struct log_limit refused_log;
	uint64_t next_map_id;
	uint64_t next_token;
	/* writable mappings whose process is gone and whose written pages
	 * are still going home: their leases, given back when that is done */
	struct fsvc_drain *draining;
	/* Local clients per uid, at most clients_uid each, and the most in
	 * all: the descriptors the pool, the page server and the agent's
	 * own leave */
	struct fsvc_uid *uids;
	unsigned int clients_uid;
	unsigned int sock_max;
};

static struct fsvc_drain **fsvc_drain_find(struct fsvc *fs, const char *name,
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
static int fsvc_chunk_is_local(const struct msg *l, const struct msg_chunk *ch)
{
	return ch->node == l->node && (!ch->inst || ch->inst == l->instance);
}

/* Chunks of layout @l (kept in runs: l->n_chunks is 0). */
static uint32_t fsvc_n_chunks(const struct msg *l)
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

static void fsvc_pins(struct fsvc_conn *c, int delta)
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
static int fsvc_out_flush(struct fsvc_conn *c)
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

static struct fsvc_uid *fsvc_uid_find(struct fsvc *fs, uid_t uid)
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
static struct fsvc_uid *fsvc_uid_get(struct fsvc *fs, uid_t uid)
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
static void fsvc_uid_put(struct fsvc *fs, struct fsvc_uid *u)
{
	struct fsvc_uid **p;

	if (!u || --u->n)
		return;
	for (p = &fs->uids; *p != u; p = &(*p)->next)
		;
	*p = u->next;
	free(u);
}

static void fsvc_conn_close(struct fsvc_conn *c)
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
static void fsvc_log_unread(void)
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
static int fsvc_send_now(int fd, const struct msg *m)
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
static int fsvc_send(struct fsvc_conn *c, const struct msg *m, const int *fds,
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

static int fsvc_reply_error(struct fsvc_conn *c, int err, const char *what)
{
	struct msg rep;

	msg_error(&rep, err, "%s", what);
	return fsvc_send(c, &rep, NULL, 0);
}

static int fsvc_lookup(struct fsvc_conn *c)
{
	int ret = csess_lookup(c->fs->env->cs, c->token, c->name, c->lease,
			       c->wgen);

	if (ret) {
		fsvc_reply_error(c, ret, "cannot look the region up");
		return ret;
	}
	c->state = FSVC_LOOKUP;
	return 0;
}

/* MAP: the session thread looks the region up; fsvc_on_lookup() goes on. */
static int fsvc_on_map(struct fsvc_conn *c, const struct msg *req)
{
	struct fsvc *fs = c->fs;
	int ret;

	c->token = ++fs->next_token;
	c->flags = req->flags & (MSG_MAP_RDONLY | MSG_LAYOUT_RUNS);
	memcpy(c->name, req->name, sizeof(c->name));
	/* A writable map holds the region's write lease under its own id. */
	if (!(c->flags & MSG_MAP_RDONLY)) {
		ret = util_random_u64(&c->lease);
		if (ret) {
			fsvc_reply_error(c, ret, "no random lease id");
			return ret;
		}
		/* A mapping handed over after its agent died: the lease of
		 * that generation, or none (lost). A library of an older
		 * version sends no wgen, and must get none back. */
		c->wgen = req->wgen == MSG_WGEN_NEW ? 0 : req->wgen;
		c->wgen_asked = req->wgen != 0;
	}
	/* An unmap here that is still sending pages home: its lease comes
	 * back first (unmap, map again must work). */
	if (c->lease && *fsvc_drain_find(fs, c->name, 0)) {
		c->state = FSVC_DRAIN_WAIT;
		return 0;
	}
	return fsvc_lookup(c);
}

static int fsvc_part_is_remote(const struct msg_chunk *part, uint32_t first,
			       uint32_t step, uint32_t count, void *arg)
{
	const struct msg *l = arg;

	(void)first;
	(void)step;
	(void)count;
	return part->node != l->node;
}

/* True if a layout has chunks this node does not own (they fault). */
static int fsvc_has_remote(const struct msg *l)
{
	return layout_parts_walk(l->runs, l->n_runs, fsvc_part_is_remote,
				 (void *)l);
}

/* How a cache memfd is sealed: the process cannot resize it under us. */
#define FSVC_CACHE_SEALS (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)

/*
 * The cache memfd of a mapping: as large as the region (sparse), sealed so
 * that the process cannot shrink it under the agent's reads and writes of
 * it, nor grow it.
 */
static int fsvc_cache_create(const struct msg *l, int *out)
{
	uint64_t span = (uint64_t)fsvc_n_chunks(l) * l->chunk_size;
	int fd, ret;

	fd = memfd_create("farpage-cache", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0)
		return -errno;
	if (ftruncate(fd, (off_t)span) ||
	    fcntl(fd, F_ADD_SEALS, FSVC_CACHE_SEALS)) {
		ret = -errno;
		close(fd);
		return ret;
	}
	*out = fd;
	return 0;
}

/* The [selected] word of a THP setting in @path, or NULL. */
static const char *fsvc_thp_sel(const char *path, char *buf, size_t len)
{
	FILE *fp = fopen(path, "re");
	char *sel = NULL, *end;

	if (!fp)
		return NULL;
	if (fgets(buf, (int)len, fp) && (sel = strchr(buf, '[')) &&
	    (end = strchr(sel, ']')))
		*end = '\0';
	else
		sel = NULL;
	fclose(fp);
	return sel ? sel + 1 : NULL;
}

/*
 * 1 if a page in a cache memfd is one the agent wrote whole: a page
 * enters it by one pwrite() of the whole page, but where shmem may
 * allocate huge pages for it, that write brings in zeroed pages around
 * it, there as well.
 */
static int fsvc_cache_pages_whole(void)
{
	static const char top[] = "/sys/kernel/mm/transparent_hugepage";
	char path[320], buf[128];
	const char *sel;
	struct dirent *e;
	DIR *dir;
	int ok = 1;

	/* [never], [deny] or [advise] (no huge page without a VMA that
	 * asks: the agent writes by offset), per size [never], [advise] or
	 * [inherit] (then the top level's). No THP at all: fine. */
	snprintf(path, sizeof(path), "%s/shmem_enabled", top);
	if ((sel = fsvc_thp_sel(path, buf, sizeof(buf))))
		ok = !strcmp(sel, "never") || !strcmp(sel, "deny") ||
		     !strcmp(sel, "advise");
	dir = opendir(top);
	while (ok && dir && (e = readdir(dir))) {
		if (strncmp(e->d_name, "hugepages-", 10))
			continue;
		snprintf(path, sizeof(path), "%s/%s/shmem_enabled", top,
			 e->d_name);
		if ((sel = fsvc_thp_sel(path, buf, sizeof(buf))))
			ok = !strcmp(sel, "never") || !strcmp(sel, "advise") ||
			     !strcmp(sel, "inherit");
	}
	if (dir)
		closedir(dir);
	return ok;
}

/*
 * A cache memfd a process hands back when it resumes a mapping with us
 * (its agent died): ours only if sealed as we seal and of the right size.
 * With @empty its pages are dropped (a read-only mapping fetches them
 * again); else they stay, every one of them whole (fsvc_cache_pages_whole()).
 */
static int fsvc_cache_adopt(const struct msg *l, int fd, int empty)
{
	uint64_t span = (uint64_t)fsvc_n_chunks(l) * l->chunk_size;
	struct stat st;

	if (fcntl(fd, F_GET_SEALS) != FSVC_CACHE_SEALS || fstat(fd, &st) ||
	    (uint64_t)st.st_size != span)
		return -EBADF;
	if (empty && fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
			       0, (off_t)span))
		return -errno;
	return 0;
}

/*
 * MAP_LAYOUT as c->layout has it (in runs) to a process that takes them
 * (MSG_LAYOUT_RUNS in its MAP), one record per chunk to one of a version
 * before them.
 */
static int fsvc_layout_send(struct fsvc_conn *c)
{
	struct msg l = c->layout;
	int ret;

	if (c->flags & MSG_LAYOUT_RUNS)
		return fsvc_send(c, &l, &c->cache_fd, c->cache_fd >= 0);
	ret = layout_runs_expand(l.runs, l.n_runs, l.chunk_size,
				 fsvc_n_chunks(&l), &l.chunks);
	if (ret)
		return ret;
	l.n_chunks = fsvc_n_chunks(&l);
	l.runs = NULL;
	l.n_runs = 0;
	ret = fsvc_send(c, &l, &c->cache_fd, c->cache_fd >= 0);
	free(l.chunks);
	return ret;
}

/*
 * Replicated region @reg (its runs already in c->layout): they go to the
 * fault loop's layout (c->rruns, states, generation); the process gets
 * one record per chunk, none of them local (node UINT32_MAX), so that it maps
 * nothing from the pool and registers the whole range with its uffd.
 */
static int fsvc_repl_take(struct fsvc_conn *c, struct msg *reg)
{
	uint32_t n = fsvc_n_chunks(&c->layout);
	struct msg_chunk *ch = calloc(n ? n : 1, sizeof(*ch));
	int ret;

	if (!ch)
		return -ENOMEM;
	if (reg->n_rstates) {
		c->rs = malloc(reg->n_rstates * sizeof(*c->rs));
		if (!c->rs) {
			free(ch);
			return -ENOMEM;
		}
	}
	if (reg->n_rstates)
		memcpy(c->rs, reg->rstates, reg->n_rstates * sizeof(*c->rs));
	c->n_rs = reg->n_rstates;
	/* the wire takes no node 0: UINT32_MAX, a node id never given */
	for (uint32_t i = 0; i < n; i++) {
		ch[i].node = UINT32_MAX;
		ch[i].off = (uint64_t)i * c->layout.chunk_size;
	}
	c->rruns = c->layout.runs;
	c->n_rruns = c->layout.n_runs;
	c->layout.runs = NULL;
	c->layout.n_runs = 0;
	ret = layout_runs_make(ch, n, c->layout.chunk_size, &c->layout.runs,
			       &c->layout.n_runs);
	free(ch);
	if (ret)
		return ret;
	c->replicas = (uint32_t)reg->replicas;
	c->rgen = reg->rgen;
	return 0;
}

/* The lookup of @c is done: the layout and the cache fd, or the error. */
static int fsvc_map_reply(struct fsvc_conn *c, struct csess_result *r)
{
	struct fsvc *fs = c->fs;
	int ret;

	if (r->err) {
		fsvc_reply_error(c, r->err, r->text);
		return r->err;
	}
	msg_init(&c->layout, MSG_T_MAP_LAYOUT);
	msg_strset(c->layout.name, sizeof(c->layout.name), r->region.name);
	c->layout.node = atomic_load(fs->env->node_id);
	c->layout.size = r->region.size;
	c->layout.chunk_size = r->region.chunk_size;
	c->layout.epoch = r->region.epoch;
	c->layout.cid = r->cid;
	c->layout.pool_size = fs->env->pool->size;
	c->layout.instance = fs->env->instance;
	/* In runs (csess_region_get()): the layout costs its runs here. */
	c->layout.runs = r->region.runs;
	c->layout.n_runs = r->region.n_runs;
	if (r->region.replicas > 1) {
		ret = fsvc_repl_take(c, &r->region);
		if (ret) {
			fsvc_reply_error(c, ret,
					 "no memory for a replicated layout");
			return ret;
		}
	}
	if (c->lease) {
		c->wgen = r->wgen;
		c->layout.wgen = c->wgen_asked ? r->wgen : 0;
	}
	r->region.runs = NULL;
	r->region.n_runs = 0;
	free(c->grants);
	c->grants = r->region.grants;
	c->n_grants = r->region.n_grants;
	r->region.grants = NULL;
	r->region.n_grants = 0;
	/* Pinned before the layout leaves: the process may map at once. */
	fsvc_pins(c, 1);
	if (fs->env->cache_on && fsvc_has_remote(&c->layout)) {
		ret = fsvc_cache_create(&c->layout, &c->cache_fd);
		if (ret)
			log_errno(ret,
				  "region %s: cache memfd; faults are "
				  "served by copying",
				  c->layout.name);
		else
			c->layout.flags =
				MSG_MAP_CACHE |
				(fs->env->dirty_scan &&
						 !(c->flags & MSG_MAP_RDONLY)
					 ? MSG_MAP_WPASYNC
					 : 0);
	}
	ret = fsvc_layout_send(c);
	if (!ret)
		c->state = FSVC_LAYOUT_SENT;
	else
		log_errno(ret, "region %s: cannot send its layout",
			  c->layout.name);
	return ret;
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

	for (w = fs->conns; w; w = w->next)
		if (w->state == FSVC_MAPPED && w->lease &&
		    !strcmp(w->name, c->name))
			break;
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
		    !floops_flush(fs->env->fl, c->name, c->token)) {
			c->state = FSVC_FLUSH;
			return;
		}
		msg_error(&rep, -ENOLCK, "region %s: %s", c->name, r->text);
	} else {
		/* Home, but not confirmed (no coordinator): said so. */
		if (r->err)
			log_warn(
				"region %s: flushed; the write lease could not "
				"be confirmed: %s",
				c->name, r->text);
		msg_init(&rep, MSG_T_OK);
	}
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
static int fsvc_name_is_here(struct fsvc *fs, const char *name)
{
	for (struct fsvc_conn *c = fs->conns; c; c = c->next)
		if ((c->state == FSVC_MAPPED || c->state == FSVC_UNMAP_DRAIN ||
		     c->state == FSVC_RELEASING) &&
		    !strcmp(c->name, name))
			return 1;
	return *fsvc_drain_find(fs, name, 0) != NULL;
}

/* What the fault loop reports: flushes done, leases to give back. */
static void fsvc_on_dones(struct evl *l, int fd, uint32_t events, void *arg)
{
	struct fsvc *fs = arg;
	struct floop_done *d = floops_done_take(fs->env->fl), *next;

	for (; d; d = next) {
		struct fsvc_conn *c;
		struct msg rep;

		next = d->next;
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
		if (c) {
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
static int fsvc_on_unmap(struct fsvc_conn *c)
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
static void fsvc_on_lookups(struct evl *l, int fd, uint32_t events, void *arg)
{
	struct fsvc *fs = arg;
	struct csess_result *r = csess_results_take(fs->env->cs), *next;

	for (; r; r = next) {
		struct fsvc_conn *c;

		next = r->next;
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

/*
 * A pidfd of the process at the other end of @sock (the guest), or -1:
 * the cache samples its access by dropping its page mappings
 * (process_madvise). SO_PEERPIDFD (6.5+) names the process that connected,
 * race-free; before it, the pid it had then.
 */
static int fsvc_peer_pidfd(int sock)
{
	struct ucred cr;
	socklen_t len = sizeof(int);
	int fd = -1;

	if (!getsockopt(sock, SOL_SOCKET, SO_PEERPIDFD, &fd, &len) && fd >= 0)
		return fd;
	len = sizeof(cr);
	if (getsockopt(sock, SOL_SOCKET, SO_PEERCRED, &cr, &len) || cr.pid <= 0)
		return -1;
	return pidfd_open(cr.pid, 0);
}

/*
 * MAP_UFFD asks for what MAP granted, nothing more: a read-only map (no
 * write lease) stays read-only, whatever the flags say (a writable uffd
 * would have its pages written home, as resuming one would its cache's);
 * a writable map says so again. Anything else is refused, logged (at most
 * FSVC_GRANT_LOG_BURST lines a second) and ends the connection.
 */
#define FSVC_GRANT_LOG_BURST 10

static int fsvc_grant_check(struct fsvc_conn *c, const struct msg *req)
{
	static struct log_limit limit = { .burst = FSVC_GRANT_LOG_BURST };
	int ro = !!(c->flags & MSG_MAP_RDONLY);
	struct ucred cr = { .pid = 0, .uid = (uid_t)-1 };
	socklen_t len = sizeof(cr);
	const char *why;
	uint64_t dropped;
	char more[64] = "";

	if (ro == !!(req->flags & MSG_MAP_RDONLY) && (ro || c->lease))
		return 0;
	why = ro ? "a read-only map asked for a writable uffd"
		 : "a writable map asked for a read-only uffd";
	if (log_limit_take(&limit, evl_now_ms(), &dropped)) {
		if (dropped)
			snprintf(more, sizeof(more),
				 " (and %llu more since the last such line)",
				 (unsigned long long)dropped);
		getsockopt(c->fd, SOL_SOCKET, SO_PEERCRED, &cr, &len);
		log_warn("local client pid %d uid %u: %s (region %s, "
			 "MAP_UFFD flags %#llx); refused, connection "
			 "closed%s",
			 (int)cr.pid, (unsigned int)cr.uid, why, c->name,
			 (unsigned long long)req->flags, more);
	}
	fsvc_reply_error(c, -EPERM, why);
	return -EPERM;
}

static int fsvc_on_map_uffd(struct fsvc_conn *c, const struct msg *req,
			    int uffd, int fd2)
{
	struct fsvc *fs = c->fs;
	struct floop_map_desc d = { 0 };
	struct msg ok;
	int ret;

	ret = fsvc_grant_check(c, req);
	if (ret) {
		if (uffd >= 0)
			close(uffd);
		if (fd2 >= 0)
			close(fd2);
		return ret;
	}
	if (uffd < 0 || req->base % FSVC_MAP_ALIGN || !req->base) {
		if (uffd >= 0)
			close(uffd);
		if (fd2 >= 0)
			close(fd2);
		fsvc_reply_error(c, -EINVAL,
				 "map_uffd needs an aligned base "
				 "and the uffd");
		return -EINVAL;
	}
	/* Anything else (a pipe, a blocking uffd) would stall the fault loop
	 * and every guest of this host on its first read. */
	if (!uffd_fd_is_uffd(uffd)) {
		close(uffd);
		if (fd2 >= 0)
			close(fd2);
		log_warn("local client handed a descriptor that is not a "
			 "non-blocking userfaultfd; refused");
		fsvc_reply_error(c, -EBADF,
				 "map_uffd: the descriptor is not a "
				 "non-blocking userfaultfd");
		return -EBADF;
	}
	d.cache_fd = -1;
	if (req->flags & MSG_MAP_CACHE) {
		const char *why = NULL;

		if (req->flags & MSG_MAP_RESUME) {
			int wr = !(req->flags & MSG_MAP_RDONLY);

			/* Which pages the dead agent's cache held clean is
			 * not known: a read-only mapping's cache is emptied;
			 * a writable one's pages are all taken as written
			 * (floop_cache_map_init()), which needs every page
			 * in it whole. */
			if (wr && !fsvc_cache_pages_whole())
				why = "a writable mapping of a dead agent's "
				      "cache is not resumed: shmem may use "
				      "huge "
				      "pages here "
				      "(transparent_hugepage/shmem_enabled), "
				      "so a page in the cache may not be one "
				      "the agent wrote whole";
			else if (fd2 < 0 ||
				 fsvc_cache_adopt(&c->layout, fd2, !wr))
				why = "map_uffd: no usable cache memfd";
			else {
				d.cache_fd = fd2;
				fd2 = -1;
			}
		} else if (c->cache_fd < 0) {
			why = "map_uffd: cache mode without a cache";
		} else {
			d.cache_fd = c->cache_fd;
			c->cache_fd = -1;
		}
		if (why) {
			close(uffd);
			if (fd2 >= 0)
				close(fd2);
			log_warn("local client: %s", why);
			fsvc_reply_error(c, -EINVAL, why);
			return -EINVAL;
		}
	}
	if (fd2 >= 0)
		close(fd2);
	d.lease = c->lease;
	d.wgen = c->wgen;
	/* The fault loop looks chunks up in the runs (no per-chunk table). */
	if (c->replicas > 1) {
		ret = layout_runs_copy(c->rruns, c->n_rruns, &d.runs);
		d.n_runs = c->n_rruns;
		d.replicas = c->replicas;
		d.rgen = c->rgen;
		if (!ret && c->n_rs) {
			d.rstates = malloc(c->n_rs * sizeof(*d.rstates));
			if (d.rstates) {
				memcpy(d.rstates, c->rs,
				       c->n_rs * sizeof(*d.rstates));
				d.n_rstates = c->n_rs;
			} else {
				layout_runs_free(d.runs, d.n_runs);
				ret = -ENOMEM;
			}
		}
	} else {
		ret = layout_runs_copy(c->layout.runs, c->layout.n_runs,
				       &d.runs);
		d.n_runs = c->layout.n_runs;
	}
	if (ret) {
		close(uffd);
		if (d.cache_fd >= 0)
			close(d.cache_fd);
		return ret;
	}
	d.grants = c->grants;
	d.n_grants = c->n_grants;
	c->grants = NULL;
	c->n_grants = 0;
	d.id = ++fs->next_map_id;
	d.uffd = uffd;
	d.base = req->base;
	d.size = c->layout.size;
	d.chunk_size = c->layout.chunk_size;
	d.n_chunks = fsvc_n_chunks(&c->layout);
	d.features = req->features;
	d.flags = req->flags;
	d.epoch = c->layout.epoch;
	d.cid = c->layout.cid;
	d.pidfd = d.cache_fd >= 0 ? fsvc_peer_pidfd(c->fd) : -1;
	memcpy(d.name, c->layout.name, sizeof(d.name));
	ret = floops_map_add(fs->env->fl, &d);
	if (ret)
		return ret;
	c->map_id = d.id;
	c->state = FSVC_MAPPED;
	log_info("process %s region %s (map %llu, %s poisoning; layout of "
		 "%u chunks in %u runs of %u parts)",
		 d.flags & MSG_MAP_RESUME ? "handed over" : "mapped", d.name,
		 (unsigned long long)d.id,
		 d.features & UFFD_FEATURE_POISON ? "with" : "WITHOUT",
		 d.n_chunks, c->layout.n_runs,
		 layout_runs_parts(c->layout.runs, c->layout.n_runs));
	msg_init(&ok, MSG_T_OK);
	return fsvc_send(c, &ok, NULL, 0);
}

/*
 * The byte ranges of a MAP_FDS: its extents, or [base, base + size). Each
 * of whole segments inside the region, ascending and apart, base the first
 * one's offset and size their total, at most MSG_POOL_SEGS_MAX segments.
 */
static int fsvc_map_fds_ranges(const struct msg *req, uint64_t span,
			       struct msg_extent *one,
			       const struct msg_extent **ext, uint32_t *n_ext)
{
	uint64_t total = 0, next = 0;

	*ext = req->extents;
	*n_ext = req->n_extents;
	if (!*n_ext) {
		one->off = req->base;
		one->len = req->size;
		*ext = one;
		*n_ext = 1;
	}
	if (*n_ext > MSG_POOL_SEGS_MAX || (*ext)[0].off != req->base)
		return -EINVAL;
	for (uint32_t i = 0; i < *n_ext; i++) {
		const struct msg_extent *e = &(*ext)[i];

		if (e->off % MSG_POOL_SEG || e->len % MSG_POOL_SEG || !e->len ||
		    e->len / MSG_POOL_SEG > MSG_POOL_SEGS_MAX ||
		    e->off > span || e->len > span - e->off ||
		    (i && e->off < next))
			return -EINVAL;
		next = e->off + e->len;
		total += e->len;
		if (total / MSG_POOL_SEG > MSG_POOL_SEGS_MAX)
			return -EINVAL;
	}
	return total == req->size ? 0 : -EINVAL;
}

/*
 * The pool segments under region bytes [base, base + size) of the layout
 * sent, or under the extents given (a batch of chunks apart): each one in
 * a chunk placed here, so a process gets its region's part of the pool
 * and nothing else. A read-only map gets each segment
 * opened read-only (its mapping can never be made writable).
 */
static int fsvc_on_map_fds(struct fsvc_conn *c, const struct msg *req)
{
	const struct msg *l = &c->layout;
	uint64_t span = (uint64_t)fsvc_n_chunks(l) * l->chunk_size;
	int fds[MSG_POOL_SEGS_MAX], n = 0, ro, ret = 0;
	const struct msg_extent *ext;
	struct msg_extent one;
	const char *why = NULL;
	uint32_t n_ext, k = 0;
	struct msg rep;

	ro = !!(c->flags & MSG_MAP_RDONLY);
	if (fsvc_map_fds_ranges(req, span, &one, &ext, &n_ext)) {
		fsvc_reply_error(c, -EINVAL,
				 "map_fds: not a run of whole segments of the "
				 "region");
		return -EINVAL;
	}
	for (uint64_t o = ext[0].off, s = 0;
	     s < req->size / MSG_POOL_SEG && !why; s++, o += MSG_POOL_SEG) {
		struct msg_chunk chunk, *ch = &chunk;
		char path[64];
		int fd;

		if (o == ext[k].off + ext[k].len)
			o = ext[++k].off; /* the next range */
		if (layout_chunk_at(l->runs, l->n_runs, l->chunk_size,
				    o / l->chunk_size, ch)) {
			why = "map_fds: past the region";
			ret = -EINVAL;
			break;
		}

		if (!fsvc_chunk_is_local(l, ch)) {
			why = "map_fds: a chunk this node does not hold";
			ret = -EINVAL;
			break;
		}
		fd = pool_seg_fd(c->fs->env->pool, ch->off + o % l->chunk_size);
		if (fd < 0) {
			why = "map_fds: a chunk outside this node's pool";
			ret = -ERANGE;
			break;
		}
		if (ro) {
			snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
			fd = open(path, O_RDONLY | O_CLOEXEC);
			if (fd < 0) {
				ret = -errno;
				why = "map_fds: cannot open a segment "
				      "read-only";
				break;
			}
		}
		fds[n++] = fd;
	}
	if (why) {
		fsvc_reply_error(c, ret, why);
	} else {
		msg_init(&rep, MSG_T_MAP_FDS);
		rep.base = req->base;
		rep.size = req->size;
		ret = fsvc_send(c, &rep, fds, n);
	}
	for (int i = 0; ro && i < n; i++)
		close(fds[i]);
	return ret;
}

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
	} else if (req->type == MSG_T_FLUSH && c->state == FSVC_NEW) {
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
		ret = floops_flush(c->fs->env->fl, req->name, c->token);
		if (ret) {
			fsvc_reply_error(c, ret, "cannot queue the flush");
			return 1;
		}
		c->state = FSVC_FLUSH;
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
