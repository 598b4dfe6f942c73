// SPDX-License-Identifier: MIT
/*
 * Mapping a region: MAP (the session looks the layout up), its answer
 * with the cache memfd, MAP_FDS (the pool segments under the process's
 * range) and MAP_UFFD (the fault loop serves the mapping from then on).
 */
#define LOG_PREFIX "fsvc: "
#include "fsvc_int.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/pidfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "csess.h"
#include "evl.h"
#include "floops.h"
#include "layout.h"
#include "log.h"
#include "node_env.h"
#include "pool.h"
#include "uffd.h"
#include "util.h"

#ifndef SO_PEERPIDFD
#define SO_PEERPIDFD 77 /* 6.5+; older kernels: ENOPROTOOPT */
#endif

/* MAP: the session thread looks the region up; fsvc_on_lookup() goes on. */
int fsvc_on_map(struct fsvc_conn *c, const struct msg *req)
{
	struct fsvc *fs = c->fs;
	int ret;

	c->token = ++fs->next_token;
	c->flags = req->flags &
		   (MSG_MAP_RDONLY | MSG_LAYOUT_RUNS | MSG_MAP_MOVABLE |
		    MSG_MAP_INCOMING | MSG_MAP_ANON);
	if (c->flags & MSG_MAP_INCOMING)
		c->flags |= MSG_MAP_MOVABLE;
	c->cache_cap = req->size;
	memcpy(c->name, req->name, sizeof(c->name));
	if ((c->flags & MSG_MAP_MOVABLE) && (c->flags & MSG_MAP_RDONLY)) {
		fsvc_reply_error(c, -EINVAL, "a read-only map does not move");
		return -EINVAL;
	}
	if ((c->flags & MSG_MAP_ANON) &&
	    (c->flags & (MSG_MAP_RDONLY | MSG_MAP_MOVABLE))) {
		fsvc_reply_error(c, -EINVAL,
				 "an anonymous map is writable and does not "
				 "move");
		return -EINVAL;
	}
	if ((c->flags & (MSG_MAP_MOVABLE | MSG_MAP_ANON)) &&
	    !fs->env->cache_on) {
		char why[128];

		snprintf(why, sizeof(why),
			 "%s map needs the cache, and this agent serves "
			 "faults by copying (--fault-mode copy)",
			 c->flags & MSG_MAP_ANON ? "an anonymous"
						 : "a movable");
		fsvc_reply_error(c, -EOPNOTSUPP, why);
		return -EOPNOTSUPP;
	}
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
		/* An incoming map takes the lease at its first fault. */
		c->has_lease = !(c->flags & MSG_MAP_INCOMING);
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
 * Replicated region @reg, or a movable map (its runs already in c->layout):
 * they go to the fault loop's layout (c->rruns, states, generation); the
 * process gets one record per chunk, none of them local (node UINT32_MAX),
 * so that it maps nothing from the pool and registers the whole range with
 * its uffd.
 */
static int fsvc_layout_hide(struct fsvc_conn *c, struct msg *reg)
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

/*
 * A map of coherent region @r (docs/design.md, coherent/): writable
 * without a lease, every page through the cache, one such map of a
 * region on this host (the home knows a host by its connection). 0, or
 * -errno after replying.
 */
static int fsvc_map_coherent(struct fsvc_conn *c, const struct msg *r)
{
	struct fsvc *fs = c->fs;
	char why[200];
	int err = 0;

	if (!fs->env->cache_on) {
		err = -EOPNOTSUPP;
		snprintf(why, sizeof(why),
			 "region %s is coherent: its map needs the cache, and "
			 "this agent serves faults by copying (--fault-mode "
			 "copy)",
			 r->name);
	} else if (c->flags & (MSG_MAP_MOVABLE | MSG_MAP_ANON)) {
		err = -EINVAL;
		snprintf(why, sizeof(why),
			 "region %s is coherent: it is not mapped movable or "
			 "anonymous",
			 r->name);
	}
	for (struct fsvc_conn *w = fs->conns; w && !err; w = w->next) {
		if (w != c && (w->flags & MSG_MAP_COHERENT) &&
		    w->state >= FSVC_LAYOUT_SENT &&
		    w->state <= FSVC_RELEASING && !strcmp(w->name, c->name)) {
			err = -EBUSY;
			snprintf(why, sizeof(why),
				 "region %s is coherent and mapped by another "
				 "process on this host already (one coherent "
				 "map a region a host)",
				 r->name);
		}
	}
	if (err) {
		fsvc_reply_error(c, err, why);
		return err;
	}
	c->flags |= MSG_MAP_COHERENT;
	c->lease = 0; /* nothing to give back */
	return 0;
}

/* The lookup of @c is done: the layout and the cache fd, or the error. */
int fsvc_map_reply(struct fsvc_conn *c, struct csess_result *r)
{
	struct fsvc *fs = c->fs;
	int ret;

	if (r->err) {
		fsvc_reply_error(c, r->err, r->text);
		return r->err;
	}
	if (r->region.rflags & MSG_REGION_COHERENT) {
		ret = fsvc_map_coherent(c, &r->region);
		if (ret)
			return ret;
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
	if (r->region.replicas > 1 ||
	    (c->flags & (MSG_MAP_MOVABLE | MSG_MAP_ANON | MSG_MAP_COHERENT))) {
		ret = fsvc_layout_hide(c, &r->region);
		if (ret) {
			fsvc_reply_error(c, ret, "no memory for the layout");
			return ret;
		}
	}
	/* (an incoming map was looked up only: no generation yet, 0) */
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
				MSG_MAP_CACHE | (c->flags & MSG_MAP_COHERENT) |
				/* a coherent map sees writes by WP faults */
				(fs->env->dirty_scan && !(c->flags &
							  (MSG_MAP_RDONLY |
							   MSG_MAP_COHERENT))
					 ? MSG_MAP_WPASYNC | MSG_MAP_SEAL
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
	const char *why;
	uint64_t dropped;
	char more[64] = "";

	/* (a coherent region's writers hold no lease) */
	if (ro == !!(req->flags & MSG_MAP_RDONLY) &&
	    (ro || c->lease || (c->flags & MSG_MAP_COHERENT)))
		return 0;
	why = ro ? "a read-only map asked for a writable uffd"
		 : "a writable map asked for a read-only uffd";
	if (log_limit_take(&limit, evl_now_ms(), &dropped)) {
		if (dropped)
			snprintf(more, sizeof(more),
				 " (and %llu more since the last such line)",
				 (unsigned long long)dropped);
		log_warn("local client pid %d uid %u: %s (region %s, "
			 "MAP_UFFD flags %#llx); refused, connection "
			 "closed%s",
			 (int)c->pid, (unsigned int)c->uid->uid, why, c->name,
			 (unsigned long long)req->flags, more);
	}
	fsvc_reply_error(c, -EPERM, why);
	return -EPERM;
}

/*
 * The cache memfd of a MAP_UFFD into *@cache_fd: the one MAP_LAYOUT sent
 * (taken from @c), or with MSG_MAP_RESUME the dead agent's, *@fd2 (taken).
 * Returns 0 (none asked for: *@cache_fd stays -1) or -EINVAL, answered.
 */
static int fsvc_uffd_cache(struct fsvc_conn *c, const struct msg *req, int *fd2,
			   int *cache_fd)
{
	const char *why = NULL;

	if (!(req->flags & MSG_MAP_CACHE))
		return 0;
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
		else if (*fd2 < 0 || fsvc_cache_adopt(&c->layout, *fd2, !wr))
			why = "map_uffd: no usable cache memfd";
		else {
			*cache_fd = *fd2;
			*fd2 = -1;
		}
	} else if (c->cache_fd < 0) {
		why = "map_uffd: cache mode without a cache";
	} else {
		*cache_fd = c->cache_fd;
		c->cache_fd = -1;
	}
	if (!why)
		return 0;
	log_warn("local client: %s", why);
	fsvc_reply_error(c, -EINVAL, why);
	return -EINVAL;
}

/* The layout a MAP_UFFD's mapping gets (copied into @d): the fault loop
 * looks chunks up in the runs (no per-chunk table). 0 or -ENOMEM. */
static int fsvc_uffd_runs(const struct fsvc_conn *c, struct floop_map_desc *d)
{
	int ret;

	if (c->rruns) {
		ret = layout_runs_copy(c->rruns, c->n_rruns, &d->runs);
		d->n_runs = c->n_rruns;
		d->replicas = c->replicas;
		d->rgen = c->rgen;
		if (!ret && c->n_rs) {
			d->rstates = malloc(c->n_rs * sizeof(*d->rstates));
			if (d->rstates) {
				memcpy(d->rstates, c->rs,
				       c->n_rs * sizeof(*d->rstates));
				d->n_rstates = c->n_rs;
			} else {
				layout_runs_free(d->runs, d->n_runs);
				ret = -ENOMEM;
			}
		}
	} else {
		ret = layout_runs_copy(c->layout.runs, c->layout.n_runs,
				       &d->runs);
		d->n_runs = c->layout.n_runs;
	}
	return ret;
}

int fsvc_on_map_uffd(struct fsvc_conn *c, const struct msg *req, int uffd,
		     int fd2)
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
	/* Which of its pages read as zeroes died with the agent that knew;
	 * and without the cache there is nothing to zero them in. */
	if ((c->flags & MSG_MAP_ANON) &&
	    ((req->flags & MSG_MAP_RESUME) || !(req->flags & MSG_MAP_CACHE))) {
		close(uffd);
		if (fd2 >= 0)
			close(fd2);
		fsvc_reply_error(c, -EINVAL,
				 req->flags & MSG_MAP_RESUME
					 ? "an anonymous map is not handed "
					   "over to another agent"
					 : "an anonymous map needs the cache");
		return -EINVAL;
	}
	d.cache_fd = -1;
	ret = fsvc_uffd_cache(c, req, &fd2, &d.cache_fd);
	if (ret) {
		close(uffd);
		if (fd2 >= 0)
			close(fd2);
		return ret;
	}
	if (fd2 >= 0)
		close(fd2);
	d.lease = c->lease;
	d.wgen = c->wgen;
	ret = fsvc_uffd_runs(c, &d);
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
	/* a coherent map on the first fault loop: the homes know this host
	 * by that loop's connection (one a host) */
	if (c->flags & MSG_MAP_COHERENT)
		while (d.id % floops_n(fs->env->fl))
			d.id = ++fs->next_map_id;
	d.uffd = uffd;
	d.base = req->base;
	d.size = c->layout.size;
	d.chunk_size = c->layout.chunk_size;
	d.n_chunks = fsvc_n_chunks(&c->layout);
	d.features = req->features;
	/* Movable, incoming or anonymous as MAP said, whatever MAP_UFFD
	 * says. */
	d.flags = (req->flags & ~(MSG_MAP_MOVABLE | MSG_MAP_INCOMING |
				  MSG_MAP_ANON | MSG_MAP_COHERENT)) |
		  (c->flags & (MSG_MAP_MOVABLE | MSG_MAP_INCOMING |
			       MSG_MAP_ANON | MSG_MAP_COHERENT));
	d.cache_cap = c->cache_cap / 4096; /* (whole pages) */
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
int fsvc_on_map_fds(struct fsvc_conn *c, const struct msg *req)
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
