// SPDX-License-Identifier: MIT
/*
 * libfarpage: maps a region into the calling process. Local chunks come
 * straight from the agent's pool; the rest is registered with userfaultfd
 * and handed to the agent. A watchdog thread per mapping makes sure a dead
 * agent turns into SIGBUS, never into zero-filled pages.
 */
#define LOG_PREFIX "farpage: "
#include "farpage.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "ctl.h"
#include "evl.h"
#include "layout.h"
#include "log.h"
#include "msg.h"
#include "net.h"
#include "uffd.h"

#include "farpage_int.h"

/* fork() cannot be refused from a library; the range is MADV_DONTFORK and
 * the child is told so. Process-wide by nature, hence the one static. */
static atomic_int farpage_live_maps;
static pthread_once_t farpage_atfork_once = PTHREAD_ONCE_INIT;

static void farpage_atfork_child(void)
{
	static const char msg[] =
		"farpage: fork() of a process with mapped farpage regions: "
		"the child does not inherit them (touching them is SIGSEGV)\n";

	if (atomic_load(&farpage_live_maps) > 0) {
		ssize_t r = write(STDERR_FILENO, msg, sizeof(msg) - 1);
		(void)r;
	}
}

static void farpage_atfork_register(void)
{
	pthread_atfork(NULL, NULL, farpage_atfork_child);
}

static unsigned int farpage_agent_timeout(const struct farpage_map_opts *opts)
{
	const char *e = getenv(FARPAGE_AGENT_TIMEOUT_ENV);
	char *end;
	unsigned long v;

	if (opts && opts->agent_timeout_ms)
		return opts->agent_timeout_ms;
	if (e && *e) {
		errno = 0;
		v = strtoul(e, &end, 10);
		if (!errno && !*end && v > 0 && v <= 86400000ul)
			return (unsigned int)v;
		log_warn("%s=%s is not a number of ms (1..86400000); using "
			 "%u",
			 FARPAGE_AGENT_TIMEOUT_ENV, e, AGENT_TIMEOUT_DEF);
	}
	return AGENT_TIMEOUT_DEF;
}

const char *farpage_strerror(int err)
{
	switch (err) {
	case -ENOENT:
		return "no such region (or no agent socket)";
	case -ECONNREFUSED:
		return "no agent listening on the socket";
	case -EPERM:
		return "userfaultfd not permitted (need root or "
		       "vm.unprivileged_userfaultfd=1)";
	case -EACCES:
		return "Permission denied (by the agent or the coordinator: "
		       "the line above says why)";
	case -ENOSYS:
		return "userfaultfd not supported by this kernel";
	case -EBADMSG:
		return "bad reply from the agent";
	default:
		return strerror(err < 0 ? -err : err);
	}
}

/* A part of the layout on this node: all its chunks inside the pool. */
static int farpage_part_check(const struct msg_chunk *c, uint32_t first,
			      uint32_t step, uint32_t count, void *arg)
{
	const struct msg *l = arg;

	(void)first;
	(void)step;
	if (c->node != l->node)
		return 0;
	if (c->off % l->chunk_size || c->off > l->pool_size ||
	    (l->pool_size - c->off) / l->chunk_size < count)
		return -EBADMSG;
	return 0;
}

/* @l is in runs (checked against its size: farpage_agent_layout()). */
static int farpage_layout_check(struct farpage_map *m, const struct msg *l)
{
	(void)m;
	if (!l->size || l->size % UFFD_PAGE || !l->chunk_size ||
	    (l->chunk_size & (l->chunk_size - 1)) || l->chunk_size % MAP_ALIGN)
		return -EBADMSG;
	return layout_parts_walk(l->runs, l->n_runs, farpage_part_check,
				 (void *)l);
}

/*
 * Reserves an address range aligned to MAP_ALIGN, or takes over the one at
 * @at (MAP_FIXED: whatever the caller had mapped there is replaced).
 */
static int farpage_reserve(size_t span, uint8_t *at, uint8_t **out)
{
	size_t len = span + MAP_ALIGN;
	uint8_t *p, *al;

	if (at) {
		p = mmap(at, span, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE |
				 MAP_FIXED,
			 -1, 0);
		if (p == MAP_FAILED)
			return -errno;
		*out = p;
		return 0;
	}
	p = mmap(NULL, len, PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (p == MAP_FAILED)
		return -errno;
	al = (uint8_t *)(((uintptr_t)p + MAP_ALIGN - 1) & ~(MAP_ALIGN - 1));
	if (al > p)
		munmap(p, al - p);
	if (p + len > al + span)
		munmap(al + span, (p + len) - (al + span));
	*out = al;
	return 0;
}

static int farpage_prot(const struct farpage_map *m)
{
	return (m->flags & MSG_MAP_RDONLY) ? PROT_READ : PROT_READ | PROT_WRITE;
}

/* A part of the layout this node holds, its data in the agent's pool now:
 * its chunks are marked in is_local. */
static int farpage_part_mark(const struct msg_chunk *c, uint32_t first,
			     uint32_t step, uint32_t count, void *arg)
{
	struct farpage_map *m = arg;

	/* Placed before the agent restarted: its data is not in this pool.
	 * Left to fault, the agent answers with SIGBUS. */
	if (c->node != m->node ||
	    (c->inst && m->instance && c->inst != m->instance))
		return 0;
	for (uint32_t k = 0; k < count; k++)
		m->is_local[first + (uint64_t)k * step] = 1;
	return 0;
}

/* The first chunk from @i on whose is_local is @v, or n_chunks. */
static uint32_t farpage_next(const struct farpage_map *m, uint32_t i, int v)
{
	const uint8_t *p;

	if (i >= m->n_chunks)
		return m->n_chunks;
	p = memchr(m->is_local + i, v, m->n_chunks - i);
	return p ? (uint32_t)(p - m->is_local) : m->n_chunks;
}

/* A number in a /proc file, or 0. */
static uint64_t farpage_read_u64(const char *path)
{
	unsigned long long v = 0;
	FILE *fp = fopen(path, "re");

	if (fp) {
		if (fscanf(fp, "%llu", &v) != 1)
			v = 0;
		fclose(fp);
	}
	return v;
}

/* Lines of /proc/self/maps: the mappings this process has now. */
static uint64_t farpage_maps_now(void)
{
	char buf[1 << 16];
	uint64_t n = 0;
	ssize_t r;
	int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return 0;
	while ((r = read(fd, buf, sizeof(buf))) > 0)
		for (ssize_t i = 0; i < r; i++)
			n += buf[i] == '\n';
	close(fd);
	return n;
}

/* Headroom beyond the map's own: the process maps other things too. */
#define MAP_COUNT_SLACK 1024
/* Descriptors that must be free: a batch of segments, the cache, a uffd. */
#define FD_SLACK (MSG_POOL_SEGS_MAX + 16)

/*
 * What mapping @m takes of the process's limits, checked before anything
 * is mapped: a mapping per 2 MiB pool segment held here (each is its own
 * memfd) and per run of chunks that fault, against vm.max_map_count; a
 * batch of segment descriptors at a time against the open-files limit.
 * Past either the map fails with the limit and the fix named, never
 * half-way through.
 */
static int farpage_limits_check(const struct farpage_map *m)
{
	uint64_t segs = 0, runs = 0, need, have, max;
	struct rlimit rl;
	uint64_t open_fds = 0;
	DIR *d;

	/* Runs of remote chunks, and the local ones between them. */
	for (uint32_t i = 0, j; i < m->n_chunks; i = j) {
		j = farpage_next(m, i, !m->is_local[i]);
		if (m->is_local[i])
			segs += (uint64_t)(j - i) *
				(m->chunk_size / MSG_POOL_SEG);
		else
			runs++;
	}
	need = segs + runs;
	/* Reading the maps costs a line per mapping: only for maps that
	 * could come near the limit. */
	max = farpage_read_u64("/proc/sys/vm/max_map_count");
	if (max && need + MAP_COUNT_SLACK > max / 4) {
		have = farpage_maps_now();
		if (have + need + MAP_COUNT_SLACK > max) {
			log_err("map %s: it takes %llu memory mappings (one "
				"per 2 MiB of it in this node's pool: %llu "
				"MiB, and one per run of chunks on other "
				"nodes); this process has %llu and "
				"vm.max_map_count is %llu: raise it (sysctl -w "
				"vm.max_map_count=%llu; the farpage package's "
				"60-farpage.conf sets 1048576)",
				m->name, (unsigned long long)need,
				(unsigned long long)(segs * 2),
				(unsigned long long)have,
				(unsigned long long)max,
				(unsigned long long)(have + need +
						     2 * MAP_COUNT_SLACK));
			return -ENOMEM;
		}
	}
	if (!segs || getrlimit(RLIMIT_NOFILE, &rl) ||
	    rl.rlim_cur == RLIM_INFINITY)
		return 0;
	d = opendir("/proc/self/fd");
	for (struct dirent *e; d && (e = readdir(d));)
		open_fds += e->d_name[0] != '.';
	if (d) {
		closedir(d);
		open_fds--; /* the listing's own */
	}
	if (open_fds + FD_SLACK > rl.rlim_cur) {
		log_err("map %s: its pool segments come %d descriptors at a "
			"time; this process has %llu open and its open-files "
			"limit is %llu: raise it (ulimit -n, LimitNOFILE=)",
			m->name, MSG_POOL_SEGS_MAX,
			(unsigned long long)open_fds,
			(unsigned long long)rl.rlim_cur);
		return -EMFILE;
	}
	return 0;
}

/*
 * Asks the agent for the pool segments under the region byte ranges
 * @ext[0..n_ext) (whole segments, ascending, @segs of them in all, at
 * most MSG_POOL_SEGS_MAX) and maps them there. Returns 0, -errno of a
 * segment's mmap() (> 0 if the agent refused or broke the protocol: the
 * map fails).
 */
static int farpage_map_segs(struct farpage_map *m, const struct msg_extent *ext,
			    uint32_t n_ext, uint64_t segs)
{
	int fds[MSG_POOL_SEGS_MAX], n = MSG_POOL_SEGS_MAX, ret;
	struct msg req, rep;
	uint64_t off;
	uint32_t k = 0;

	msg_init(&req, MSG_T_MAP_FDS);
	req.base = ext[0].off;
	req.size = segs * MSG_POOL_SEG;
	/* One range goes as base and size alone. */
	if (n_ext > 1) {
		req.extents = (struct msg_extent *)ext;
		req.n_extents = n_ext;
	}
	ret = ctl_send(m->sock, &req, NULL, 0);
	if (ret)
		return -ret;
	ret = ctl_recv(m->sock, &rep, fds, &n, CALL_TIMEOUT_MS);
	if (ret)
		return -ret;
	if (rep.type == MSG_T_ERROR) {
		log_err("map %s: %s", m->name, rep.text);
		ret = (int)rep.err;
	} else if (rep.type != MSG_T_MAP_FDS || rep.base != req.base ||
		   rep.size != req.size || (uint64_t)n != segs) {
		ret = EBADMSG;
	}
	off = ext[0].off;
	for (int i = 0; !ret && i < n; i++, off += MSG_POOL_SEG) {
		void *p;

		if (off == ext[k].off + ext[k].len)
			off = ext[++k].off;
		p = mmap(m->base + off, MSG_POOL_SEG, farpage_prot(m),
			 MAP_SHARED | MAP_FIXED, fds[i], 0);
		if (p == MAP_FAILED)
			ret = -errno;
	}
	for (int i = 0; i < n; i++)
		close(fds[i]);
	msg_fini(&rep);
	return ret;
}

/* A batch of pool segments to ask for at once, and its chunks. */
struct farpage_batch {
	struct msg_extent ext[MSG_POOL_SEGS_MAX];
	uint32_t n_ext;
	uint64_t segs;
	uint32_t c0, c1; /* first and last chunk in it */
};

/*
 * Maps the batch's segments; chunks of a batch that fails to map (e.g. no
 * free hugepage) are put back as anonymous memory and left to fault: a
 * failed hugetlb MAP_FIXED leaves a hole otherwise.
 */
static int farpage_batch_map(struct farpage_map *m, struct farpage_batch *b)
{
	int ret;

	if (!b->segs)
		return 0;
	ret = farpage_map_segs(m, b->ext, b->n_ext, b->segs);
	if (ret > 0)
		return -ret;
	if (ret) {
		log_warn("region %s chunks %u-%u: pool map failed (%s); "
			 "their pages will be copied on fault",
			 m->name, b->c0, b->c1, strerror(-ret));
		for (uint32_t c = b->c0; c <= b->c1; c++) {
			void *p;

			if (!m->is_local[c])
				continue;
			m->is_local[c] = 0;
			p = mmap(m->base + (size_t)c * m->chunk_size,
				 m->chunk_size, farpage_prot(m),
				 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED |
					 MAP_NORESERVE,
				 -1, 0);
			if (p == MAP_FAILED)
				return -errno;
		}
	}
	b->n_ext = 0;
	b->segs = 0;
	return 0;
}

/*
 * Maps this node's chunks from its pool, their segments asked for
 * MSG_POOL_SEGS_MAX at a time whether the chunks are side by side or
 * not (a region spread over nodes alternates them).
 */
static int farpage_map_local(struct farpage_map *m)
{
	struct farpage_batch b = { .n_ext = 0 };
	int ret;

	for (uint32_t c = farpage_next(m, 0, 1); c < m->n_chunks;
	     c = farpage_next(m, c + 1, 1)) {
		uint64_t o = (uint64_t)c * m->chunk_size;

		for (; m->is_local[c] && o < (uint64_t)(c + 1) * m->chunk_size;
		     o += MSG_POOL_SEG) {
			struct msg_extent *e =
				b.n_ext ? &b.ext[b.n_ext - 1] : NULL;

			if (!b.segs)
				b.c0 = c;
			b.c1 = c;
			if (e && e->off + e->len == o) {
				e->len += MSG_POOL_SEG;
			} else {
				b.ext[b.n_ext].off = o;
				b.ext[b.n_ext++].len = MSG_POOL_SEG;
			}
			if (++b.segs == MSG_POOL_SEGS_MAX) {
				ret = farpage_batch_map(m, &b);
				if (ret)
					return ret;
			}
		}
	}
	return farpage_batch_map(m, &b);
}

/*
 * Maps every maximal run of chunks that are not mapped from the pool (the
 * chunks faults serve) from the cache memfd (cache mode: the file offset is
 * the offset in the region), or leaves it anonymous, read-only for a
 * read-only map; and registers it with the uffd: MISSING, in cache mode
 * also MINOR (pages already in the cache) and, writable, WP (the first
 * write to a page is how the agent learns it is dirty).
 */
static int farpage_register_remote(struct farpage_map *m)
{
	uint64_t modes = UFFDIO_REGISTER_MODE_MISSING;
	uint32_t i = 0;
	int ret;

	if (m->cache_fd >= 0) {
		modes |= UFFDIO_REGISTER_MODE_MINOR;
		if ((m->features & UFFD_FEATURE_WP_HUGETLBFS_SHMEM) &&
		    !(m->flags & MSG_MAP_RDONLY))
			modes |= UFFDIO_REGISTER_MODE_WP;
	}
	while ((i = farpage_next(m, i, 0)) < m->n_chunks) {
		uint8_t *a = m->base + (size_t)i * m->chunk_size;
		uint32_t j = farpage_next(m, i, 1);
		size_t len;
		void *p;

		len = (size_t)(j - i) * m->chunk_size;
		if (m->cache_fd >= 0)
			p = mmap(a, len, farpage_prot(m),
				 MAP_SHARED | MAP_FIXED, m->cache_fd,
				 (off_t)i * (off_t)m->chunk_size);
		else if (m->flags & MSG_MAP_RDONLY)
			p = mprotect(a, len, PROT_READ) ? MAP_FAILED : a;
		else
			p = a;
		if (p == MAP_FAILED)
			return -errno;
		ret = uffd_range_register_modes(m->uffd, (uint64_t)(uintptr_t)a,
						len, modes);
		if (ret)
			return ret;
		i = j;
	}
	return 0;
}

/*
 * Cache mode when the agent offers it and this kernel has MINOR faults on
 * shmem; otherwise its memfd is closed and faults are served by copies.
 */
static void farpage_cache_choose(struct farpage_map *m, uint64_t supported)
{
	uint64_t need = UFFD_FEATURE_MINOR_SHMEM | UFFD_FEATURE_MISSING_SHMEM;

	if (m->cache_fd < 0)
		return;
	/* Writes the agent cannot see would never go home. */
	if (!(m->flags & MSG_MAP_RDONLY))
		need |= UFFD_FEATURE_WP_HUGETLBFS_SHMEM;
	if ((supported & need) == need) {
		m->features |=
			supported & (need | UFFD_FEATURE_WP_HUGETLBFS_SHMEM);
		/* The agent finds written pages by scanning (no fault per
		 * first write): it reads MAP_UFFD's features to know. */
		if ((m->layout_flags & MSG_MAP_WPASYNC) &&
		    !(m->flags & MSG_MAP_RDONLY) &&
		    (supported & UFFD_FEATURE_WP_ASYNC))
			m->features |= UFFD_FEATURE_WP_ASYNC;
		m->flags |= MSG_MAP_CACHE;
		return;
	}
	if (m->flags & MSG_MAP_MOVABLE)
		log_err("region %s: a movable map needs minor faults and write "
			"protection on shmem, which this kernel lacks",
			m->name);
	else
		log_warn("region %s: this kernel has no minor faults (or write "
			 "protection) on shmem; faults are served by copying "
			 "(writes stay here)",
			 m->name);
	close(m->cache_fd);
	m->cache_fd = -1;
}

/*
 * Frees a mapping: the watchdog stops, the agent drops the mapping when
 * the socket closes, then our uffd closes. A range still mapped here (a
 * map that failed half-way, never seen by the caller) goes last: with the
 * uffd closed nobody has to read its UNMAP event.
 */
void farpage_map_free(struct farpage_map *m, int unmapped)
{
	farpage_watchdog_stop(m);
	if (m->sock >= 0)
		close(m->sock);
	if (m->uffd >= 0)
		close(m->uffd);
	if (m->stop_efd >= 0)
		close(m->stop_efd);
	if (m->cache_fd >= 0)
		close(m->cache_fd);
	if (m->discard_sock >= 0)
		close(m->discard_sock);
	pthread_mutex_destroy(&m->discard_lock);
	if (m->base && !unmapped)
		munmap(m->base, m->span);
	layout_runs_free(m->runs, m->n_runs);
	free(m->is_local);
	free(m->pend);
	free(m);
}

/*
 * Connects to the agent at @path (into *@sock: the caller's to close
 * either way) and asks for the layout of @name with MAP @flags (into @rep,
 * and the cache memfd into *@cache_fd), once more without runs for an
 * agent from before them. Returns 0 or -errno.
 */
static int farpage_layout_ask(const char *path, const char *name,
			      uint64_t flags, uint64_t cache_bytes, int *sock,
			      struct msg *rep, int *cache_fd)
{
	uint64_t wgen = flags & MSG_MAP_RDONLY ? 0 : MSG_WGEN_NEW;
	int ret;

	ret = net_unix_connect(path, sock);
	if (ret)
		return ret;
	ret = farpage_agent_layout(*sock, name, flags | MSG_LAYOUT_RUNS, wgen,
				   cache_bytes, rep, cache_fd);
	if (ret == -ECONNRESET || ret == -EPIPE) {
		/* An agent of a version before layouts in runs refuses the
		 * flag and closes: once more, without it. */
		close(*sock);
		*sock = -1;
		ret = net_unix_connect(path, sock);
		if (!ret)
			ret = farpage_agent_layout(*sock, name, flags, wgen,
						   cache_bytes, rep, cache_fd);
		if (!ret)
			log_warn("map %s: the agent closed the connection on a "
				 "MAP asking for its layout in runs: a version "
				 "before them (upgrade it)",
				 name);
	}
	return ret;
}

int farpage_region_size(const char *name, const struct farpage_map_opts *opts,
			uint64_t *size)
{
	struct msg rep;
	int fd = -1, cache_fd, ret;

	if (!msg_name_is_valid(name))
		return -EINVAL;
	/* The layout a read-only map would get; the connection ends
	 * before anything is mapped. */
	ret = farpage_layout_ask(farpage_sock_path(opts), name, MSG_MAP_RDONLY,
				 0, &fd, &rep, &cache_fd);
	if (fd >= 0)
		close(fd);
	if (ret)
		return ret;
	if (cache_fd >= 0)
		close(cache_fd);
	*size = rep.size;
	msg_fini(&rep);
	return 0;
}

/*
 * Takes the agent's MAP_LAYOUT @rep into @m (its runs move over; @rep is
 * finished either way) and checks it fits @at/@at_len if given. Returns 0,
 * -EPROTO, -EINVAL or -ENOMEM.
 */
static int farpage_map_layout_take(struct farpage_map *m, struct msg *rep,
				   void *at, size_t at_len)
{
	const char *name = m->name;
	int ret;

	ret = farpage_layout_check(m, rep);
	if (ret) {
		msg_fini(rep);
		return ret;
	}
	m->layout_flags = rep->flags;
	m->size = rep->size;
	m->chunk_size = rep->chunk_size;
	m->node = rep->node;
	m->instance = rep->instance;
	m->epoch = rep->epoch;
	m->cid = rep->cid;
	m->wgen = rep->wgen;
	/* An incoming map takes its lease at its first fault; a coherent
	 * region's writers take none. */
	if (!(m->flags & (MSG_MAP_RDONLY | MSG_MAP_INCOMING)) &&
	    !(rep->flags & MSG_MAP_COHERENT) && !m->wgen) {
		log_err("map %s: the agent gave no write-lease generation: is "
			"it of another farpage version?",
			name);
		msg_fini(rep);
		return -EPROTO;
	}
	m->n_chunks = (uint32_t)layout_chunks_of(rep->size, rep->chunk_size);
	m->runs = rep->runs; /* ownership moves here */
	m->n_runs = rep->n_runs;
	rep->runs = NULL;
	rep->n_runs = 0;
	msg_fini(rep);
	m->span = (size_t)m->n_chunks * m->chunk_size;
	if (at && at_len != m->span) {
		log_err("region %s: %zu bytes asked for at %p, but it maps as "
			"%zu (%u chunks of %zu)",
			name, at_len, at, m->span, m->n_chunks, m->chunk_size);
		return -EINVAL;
	}
	m->is_local = calloc(m->n_chunks, 1);
	if (!m->is_local)
		return -ENOMEM;
	layout_parts_walk(m->runs, m->n_runs, farpage_part_mark, m);
	return 0;
}

/* The MAP flags of @opts into @m. -EINVAL if they do not go together. */
static int farpage_map_flags(struct farpage_map *m,
			     const struct farpage_map_opts *opts)
{
	static const struct {
		unsigned int opt;
		uint64_t flags;
	} t[] = {
		{ FARPAGE_MAP_PREFETCH, MSG_MAP_PREFETCH },
		{ FARPAGE_MAP_RDONLY, MSG_MAP_RDONLY },
		{ FARPAGE_MAP_MOVABLE, MSG_MAP_MOVABLE },
		{ FARPAGE_MAP_INCOMING, MSG_MAP_MOVABLE | MSG_MAP_INCOMING },
		{ FARPAGE_MAP_ANON, MSG_MAP_ANON },
	};

	if (!opts)
		return 0;
	for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++)
		if (opts->flags & t[i].opt)
			m->flags |= t[i].flags;
	m->cache_bytes = opts->cache_bytes;
	/* Only a writable map moves; an anonymous one is writable and its
	 * own, every page of it through the cache. */
	if ((m->flags & MSG_MAP_RDONLY) && (m->flags & MSG_MAP_MOVABLE))
		return -EINVAL;
	if ((m->flags & MSG_MAP_ANON) &&
	    (m->flags & (MSG_MAP_RDONLY | MSG_MAP_MOVABLE | MSG_MAP_PREFETCH)))
		return -EINVAL;
	return 0;
}

/*
 * The mapping's userfaultfd: one that serves the kernel's accesses too
 * where this process may have one (a read() into a page not fetched yet
 * waits for it, as the process's own touch does). An anonymous map needs
 * it: a program's heap is where read() and recv() put bytes.
 */
static int farpage_uffd_open(struct farpage_map *m)
{
	int ret, user_only;

	ret = uffd_open_full(&m->uffd, &user_only);
	if (ret || !user_only)
		return ret;
	if (m->flags & MSG_MAP_ANON) {
		log_err("region %s: this process may take only its own page "
			"faults (no root, vm.unprivileged_userfaultfd is 0 "
			"and /dev/userfaultfd is not open to it), so a system "
			"call that reads into a page not fetched yet would "
			"fail with EFAULT; an anonymous map needs them all",
			m->name);
		return -EPERM;
	}
	log_warn("region %s: only this process's own page faults are served "
		 "(no root, vm.unprivileged_userfaultfd is 0, no access to "
		 "/dev/userfaultfd): a system call that reads or writes a "
		 "page not fetched yet fails with EFAULT",
		 m->name);
	return 0;
}

static int farpage_map_common(const char *name,
			      const struct farpage_map_opts *opts, void *at,
			      size_t at_len, struct farpage_map **out)
{
	struct farpage_map *m;
	struct msg rep;
	uint64_t supported;
	int ret;

	pthread_once(&farpage_atfork_once, farpage_atfork_register);
	if (!msg_name_is_valid(name))
		return -EINVAL;
	m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	m->sock = m->uffd = m->stop_efd = m->cache_fd = m->discard_sock = -1;
	pthread_mutex_init(&m->discard_lock, NULL);
	snprintf(m->name, sizeof(m->name), "%s", name);
	m->agent_timeout_ms = farpage_agent_timeout(opts);

	if (farpage_map_flags(m, opts)) {
		pthread_mutex_destroy(&m->discard_lock);
		free(m);
		return -EINVAL;
	}
	snprintf(m->sock_path, sizeof(m->sock_path), "%s",
		 farpage_sock_path(opts));
	/* (the socket is @m's either way) */
	ret = farpage_layout_ask(m->sock_path, m->name, m->flags,
				 m->cache_bytes, &m->sock, &rep, &m->cache_fd);
	if (ret)
		goto err;
	ret = farpage_map_layout_take(m, &rep, at, at_len);
	if (ret)
		goto err;

	ret = uffd_features_probe(&supported);
	if (ret)
		goto err;
	m->features = supported & UFFD_WANTED_FEATURES;
	farpage_cache_choose(m, supported);
	/* (the agent refuses one itself when it serves by copying) */
	if ((m->flags & (MSG_MAP_MOVABLE | MSG_MAP_ANON)) &&
	    !(m->flags & MSG_MAP_CACHE)) {
		ret = -EOPNOTSUPP;
		goto err;
	}
	ret = farpage_limits_check(m);
	if (ret)
		goto err;
	ret = farpage_reserve(m->span, at, &m->base);
	if (ret) {
		m->base = NULL;
		goto err;
	}
	ret = farpage_map_local(m);
	if (ret)
		goto err;

	ret = farpage_uffd_open(m);
	if (ret)
		goto err;
	ret = uffd_api(m->uffd, m->features);
	if (ret)
		goto err;
	ret = farpage_register_remote(m);
	if (ret)
		goto err;
	/* After the cache mappings replaced parts of the range. */
	if (madvise(m->base, m->span, MADV_DONTFORK)) {
		ret = -errno;
		goto err;
	}

	ret = farpage_agent_hand_uffd(m->sock, m, m->flags);
	if (ret)
		goto err;

	m->cap_pend = FARPAGE_PEND_MAX;
	m->pend = calloc(m->cap_pend, sizeof(*m->pend));
	if (!m->pend) {
		ret = -ENOMEM;
		goto err;
	}
	m->stop_efd = eventfd(0, EFD_CLOEXEC);
	if (m->stop_efd < 0) {
		ret = -errno;
		goto err;
	}
	ret = -pthread_create(&m->watchdog, NULL, farpage_watchdog, m);
	if (ret)
		goto err;
	m->watchdog_started = 1;
	atomic_fetch_add(&farpage_live_maps, 1);
	*out = m;
	return 0;
err:
	farpage_map_free(m, 0);
	return ret;
}

int farpage_map(const char *name, const struct farpage_map_opts *opts,
		struct farpage_map **out)
{
	return farpage_map_common(name, opts, NULL, 0, out);
}

int farpage_map_at(const char *name, const struct farpage_map_opts *opts,
		   void *addr, size_t len, struct farpage_map **out)
{
	if (!addr || (uintptr_t)addr % MAP_ALIGN)
		return -EINVAL;
	return farpage_map_common(name, opts, addr, len, out);
}

int farpage_unmap(struct farpage_map *m)
{
	int ret = 0, unmapped, sealed = 0;

	if (!m)
		return 0;
	atomic_fetch_sub(&farpage_live_maps, 1);
	/*
	 * An agent that scans for written pages is told the range is
	 * read-only from now (a thread writing to it gets SIGSEGV) and
	 * flushes while the page tables are still there: its scan sees what
	 * was written, and the unmap then makes it send nothing again.
	 */
	if (farpage_is_writeback(m) && (m->layout_flags & MSG_MAP_SEAL) &&
	    !(m->flags & MSG_MAP_ANON)) {
		ret = farpage_flush_final(m);
		if (ret)
			log_errno(ret, "region %s: flush at unmap", m->name);
		sealed = 1;
	}
	/*
	 * Then the range goes: a thread touching it from now on gets
	 * SIGSEGV. Closing the uffd first would turn every page not yet
	 * fetched into a zero page for a thread that touches it in between.
	 * munmap waits until the agent (or, with the agent gone, our
	 * watchdog) has read the UNMAP event, so both still run here.
	 */
	unmapped = !munmap(m->base, m->span);
	if (!unmapped && !ret)
		ret = -errno;
	/* Else nothing can be written any more: what was is sent home now,
	 * while our connection keeps the mapping alive in the agent. */
	/* (an anonymous mapping's bytes end with it: the agent drops them) */
	if (unmapped && farpage_is_writeback(m) && !sealed &&
	    !(m->flags & MSG_MAP_ANON)) {
		ret = farpage_flush(m);
		if (ret)
			log_errno(ret, "region %s: flush at unmap", m->name);
	}
	/* It reads m->base (poisoning) until it is stopped, and the socket:
	 * UNMAP's answer is ours. */
	farpage_watchdog_stop(m);
	if (unmapped && !ret && atomic_load(&m->state) == MAP_LIVE)
		ret = farpage_agent_unmap(m);
	farpage_map_free(m, unmapped);
	return ret;
}

void *farpage_map_addr(const struct farpage_map *m)
{
	return m->base;
}

size_t farpage_map_size(const struct farpage_map *m)
{
	return m->size;
}

size_t farpage_map_chunk_size(const struct farpage_map *m)
{
	return m->chunk_size;
}

uint64_t farpage_map_node(const struct farpage_map *m)
{
	return m->node;
}

uint64_t farpage_map_owner(const struct farpage_map *m, size_t off)
{
	struct msg_chunk c;

	if (off >= m->span || layout_chunk_at(m->runs, m->n_runs, m->chunk_size,
					      off / m->chunk_size, &c))
		return 0;
	return c.node;
}

int farpage_map_is_local(const struct farpage_map *m, size_t off)
{
	if (off >= m->span)
		return 0;
	return m->is_local[off / m->chunk_size];
}

int farpage_map_is_cached(const struct farpage_map *m)
{
	return !!(m->flags & MSG_MAP_CACHE);
}
