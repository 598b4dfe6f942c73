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

#define MAP_ALIGN	  (2ull << 20) /* hugetlb chunks need 2 MiB alignment */
#define CALL_TIMEOUT_MS	  30000
#define AGENT_TIMEOUT_DEF 5000
#define RESUME_RETRY_MS	  200 /* look for a restarted agent this often */

enum map_state {
	MAP_LIVE = 0,  /* agent serving faults */
	MAP_ORPHAN,    /* agent gone, faults held until the deadline */
	MAP_POISONING, /* agent gone, poisoning unfetched pages */
	MAP_POISONED,  /* agent gone, unfetched pages poisoned */
};

struct farpage_map {
	char name[MSG_NAME_MAX];
	uint8_t *base;
	size_t size; /* region bytes */
	size_t span; /* mapped bytes: whole chunks */
	size_t chunk_size;
	uint64_t node;
	uint64_t instance; /* the agent's: its pool holds only its chunks */
	uint64_t epoch;	   /* of the region: another one may take its name */
	uint64_t cid;	   /* of the coordinator's tables the layout is from */
	struct msg_run *runs; /* the layout, in runs (common/layout.h) */
	uint32_t n_runs;
	uint32_t n_chunks;
	uint8_t *is_local; /* per chunk: mapped from the pool */
	int cache_fd;	   /* cache mode: the agent's cache memfd, else -1 */
	uint64_t features;
	unsigned int agent_timeout_ms;
	uint64_t flags;	       /* MSG_MAP_* asked for */
	uint64_t layout_flags; /* MSG_MAP_* of the agent's MAP_LAYOUT */
	uint64_t wgen;	       /* writable: its write lease's generation */
	/* the write lease is lost for good (another mapping took it while
	 * the agent was away): flushes fail, every remote page is poisoned */
	_Atomic int lease_lost;
	char sock_path[108];
	int sock;
	int uffd;
	int stop_efd;
	pthread_t watchdog;
	int watchdog_started;
	_Atomic int state;
	/* hand-overs to a restarted agent so far (a flush cut by the agent's
	 * death waits for the next one) */
	_Atomic unsigned int handovers;
	/* watchdog only: poisoning goes on from here after -EAGAIN */
	uint64_t poison_next;
	uint64_t poisoned;
	/* pages faulted after poisoning, to poison again (-EAGAIN) */
	uint64_t *pend;
	size_t n_pend, cap_pend;
};

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

static const char *farpage_sock_path(const struct farpage_map_opts *opts)
{
	const char *p = opts ? opts->agent_sock : NULL;

	if (!p)
		p = getenv(FARPAGE_AGENT_SOCK_ENV);
	if (!p || !*p)
		p = FARPAGE_AGENT_SOCK_DEFAULT;
	return p;
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
	log_warn("region %s: this kernel has no minor faults (or write "
		 "protection) on shmem; faults are served by copying (writes "
		 "stay here)",
		 m->name);
	close(m->cache_fd);
	m->cache_fd = -1;
}

/*
 * Poisons every page not yet fetched, from m->poison_next on. Returns 0 when
 * done, or -EAGAIN when the guest's address space is changing: read its
 * events, then call again (the page was not poisoned: taking that as done
 * would leave its thread waiting forever).
 */
static int farpage_poison_remote(struct farpage_map *m)
{
	uint64_t base = (uint64_t)(uintptr_t)m->base, n, next;
	int ret;

	while (m->poison_next < base + m->span) {
		uint32_t i =
			(uint32_t)((m->poison_next - base) / m->chunk_size);
		uint64_t end = base + (uint64_t)(i + 1) * m->chunk_size;

		if (m->is_local[i]) {
			m->poison_next = end;
			continue;
		}
		ret = uffd_poison(m->uffd, m->poison_next, end - m->poison_next,
				  &n, &next);
		m->poisoned += n;
		if (ret == -EAGAIN) {
			m->poison_next = next;
			return ret;
		}
		if (ret && ret != -ENOENT)
			log_errno(ret, "region %s: poisoning chunk %u", m->name,
				  i);
		m->poison_next = end;
	}
	log_info("region %s: %llu pages poisoned", m->name,
		 (unsigned long long)m->poisoned);
	return 0;
}

/* A page faulted again after poisoning (dropped with MADV_DONTNEED). */
static void farpage_pend_add(struct farpage_map *m, uint64_t addr)
{
	uint64_t *p;

	if (m->n_pend == m->cap_pend) {
		size_t cap = m->cap_pend ? 2 * m->cap_pend : 16;

		p = realloc(m->pend, cap * sizeof(*p));
		if (!p)
			return; /* its next fault event brings it back */
		m->pend = p;
		m->cap_pend = cap;
	}
	m->pend[m->n_pend++] = addr;
}

/* Poisons the pending pages; returns how many must wait (-EAGAIN). */
static size_t farpage_pend_run(struct farpage_map *m)
{
	size_t k = 0;

	for (size_t i = 0; i < m->n_pend; i++) {
		if (uffd_poison(m->uffd, m->pend[i], UFFD_PAGE, NULL, NULL) ==
		    -EAGAIN)
			m->pend[k++] = m->pend[i];
	}
	m->n_pend = k;
	return k;
}

/*
 * Step one of mapping, on a fresh agent connection: MAP {flags} ->
 * MAP_LAYOUT, with the cache memfd when the layout's flags say
 * MSG_MAP_CACHE (the pool's segments are asked for next, MAP_FDS). Returns
 * 0 with *layout to msg_fini() and *cache_fd (or -1) to close, the agent's
 * -errno (its text logged), -EBADMSG or -EPROTO.
 */
static int farpage_agent_layout(int sock, const char *name, uint64_t flags,
				uint64_t wgen, struct msg *layout,
				int *cache_fd)
{
	struct msg req;
	int fds[2], n_fds = 2, ret;

	*cache_fd = -1;
	msg_init(&req, MSG_T_MAP);
	msg_strset(req.name, sizeof(req.name), name);
	req.flags = flags & (MSG_MAP_RDONLY | MSG_LAYOUT_RUNS);
	req.wgen = wgen;
	ret = ctl_send(sock, &req, NULL, 0);
	if (ret)
		return ret;
	ret = ctl_recv(sock, layout, fds, &n_fds, CALL_TIMEOUT_MS);
	if (ret)
		return ret;
	if (layout->type == MSG_T_ERROR) {
		ret = -(int)layout->err;
		if (layout->text[0])
			log_err("map %s: %s", name, layout->text);
	} else if (layout->type != MSG_T_MAP_LAYOUT) {
		ret = -EBADMSG;
	} else if ((ret = layout_msg_to_runs(layout))) {
		log_err("map %s: a bad layout from the agent", name);
	} else if (n_fds != !!(layout->flags & MSG_MAP_CACHE)) {
		/* An agent of another version (one that sent its pool). */
		log_err("map %s: the agent sent %d descriptors with the "
			"layout, not %d: is it of another farpage version?",
			name, n_fds, !!(layout->flags & MSG_MAP_CACHE));
		ret = -EPROTO;
	}
	if (ret) {
		msg_fini(layout);
		for (int i = 0; i < n_fds; i++)
			close(fds[i]);
		return ret;
	}
	if (n_fds)
		*cache_fd = fds[0];
	return 0;
}

/* Step two: MAP_UFFD with our uffd -> OK. Returns 0 or -errno. */
static int farpage_agent_hand_uffd(int sock, const struct farpage_map *m,
				   uint64_t flags)
{
	struct msg req, rep;
	int ret;

	int fds[2] = { m->uffd, m->cache_fd };

	msg_init(&req, MSG_T_MAP_UFFD);
	req.base = (uint64_t)(uintptr_t)m->base;
	req.features = m->features;
	req.flags = flags;
	/* The cache memfd goes back to an agent we hand the mapping to. */
	ret = ctl_send(sock, &req, fds,
		       (flags & MSG_MAP_RESUME) && m->cache_fd >= 0 ? 2 : 1);
	if (ret)
		return ret;
	ret = ctl_recv(sock, &rep, NULL, NULL, CALL_TIMEOUT_MS);
	if (ret)
		return ret;
	if (rep.type == MSG_T_ERROR) {
		ret = -(int)rep.err;
		log_err("map %s: the agent refused the userfaultfd: %s",
			m->name, rep.text);
		/* The agent's refusal, not the kernel's: -EPERM here means
		 * userfaultfd itself is not permitted. */
		if (ret == -EPERM)
			ret = -EACCES;
	} else if (rep.type != MSG_T_OK) {
		ret = -EBADMSG;
	}
	msg_fini(&rep);
	return ret;
}

/* Same region as mapped: same size, chunks, owners, offsets, instances,
 * epoch and coordinator tables. */
static int farpage_layout_is_same(const struct farpage_map *m,
				  const struct msg *l)
{
	/* A region deleted and made again under the same name may get the
	 * same chunks: the epoch and the tables' cid tell them apart. */
	if (l->size != m->size || l->chunk_size != m->chunk_size ||
	    l->n_runs != m->n_runs || l->node != m->node ||
	    l->epoch != m->epoch || l->cid != m->cid)
		return 0;
	/* Runs are made the same way from the same chunks. */
	for (uint32_t i = 0; i < m->n_runs; i++) {
		const struct msg_run *a = &l->runs[i], *b = &m->runs[i];

		if (a->n != b->n || a->n_parts != b->n_parts)
			return 0;
		for (uint32_t k = 0; k < a->n_parts; k++)
			if (a->parts[k].node != b->parts[k].node ||
			    a->parts[k].off != b->parts[k].off ||
			    a->parts[k].inst != b->parts[k].inst)
				return 0;
	}
	return 1;
}

/*
 * Hands the uffd to an agent that came back on the same socket: it serves
 * the mapping from now on and wakes the whole range, so threads blocked on
 * faults the old agent (or we) had read fault again. Chunks mapped from
 * the old pool stay as they are. A writable mapping must get its write
 * lease back under the generation it held: -ENOLCK (or -EBUSY) if another
 * mapping held it since, for good. Returns 0 or -errno.
 */
static int farpage_resume(struct farpage_map *m)
{
	struct msg l;
	int fd, cache_fd, ret;

	ret = net_unix_connect(m->sock_path, &fd);
	if (ret)
		return ret;
	/* A writable mapping takes the write lease again, if still its own:
	 * the dead agent's ended with its instance. */
	ret = farpage_agent_layout(fd, m->name, m->flags | MSG_LAYOUT_RUNS,
				   m->wgen, &l, &cache_fd);
	if (!ret) {
		if (cache_fd >= 0)
			close(cache_fd);
		if (!farpage_layout_is_same(m, &l))
			ret = -ESTALE;
		msg_fini(&l);
	}
	if (!ret)
		ret = farpage_agent_hand_uffd(fd, m, m->flags | MSG_MAP_RESUME);
	if (ret) {
		close(fd);
		if (ret == -ESTALE)
			log_err("region %s changed while its agent was away; "
				"not resuming",
				m->name);
		return ret;
	}
	close(m->sock);
	m->sock = fd;
	atomic_fetch_add(&m->handovers, 1);
	atomic_store(&m->state, MAP_LIVE);
	log_warn("region %s: handed over to the restarted agent", m->name);
	return 0;
}

/*
 * With the agent gone this thread reads the uffd itself so that munmap()
 * and madvise() in the guest do not hang on unread events. Meanwhile it
 * tries to hand the mapping to an agent that comes back on the same
 * socket (returns 1 then). Faults stay blocked until the deadline, then
 * every unfetched page is poisoned (returns 0 when told to stop).
 */
/*
 * The write lease is lost: what this mapping wrote and did not send home
 * was overwritten by another writer, and must not be read back or sent.
 * Its pages leave the cache memfd (unprotected first: a write-protected
 * page punched would keep a marker poisoning cannot replace), so that
 * every touch of a remote page faults, and is poisoned.
 */
static void farpage_lease_lose(struct farpage_map *m, int err)
{
	log_err("region %s: the write lease (generation %llu) is lost: %s; "
		"what this mapping wrote and had not flushed is dropped, its "
		"flushes fail, and its remote pages raise SIGBUS",
		m->name, (unsigned long long)m->wgen, log_strerror(err));
	if (m->cache_fd >= 0) {
		for (uint32_t i = 0; i < m->n_chunks; i++) {
			uint64_t a = (uint64_t)(uintptr_t)m->base +
				     (uint64_t)i * m->chunk_size;

			if (!m->is_local[i])
				uffd_wp(m->uffd, a, m->chunk_size, 0, 0);
		}
		if (fallocate(m->cache_fd,
			      FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0,
			      (off_t)m->span))
			log_errno(-errno, "region %s: dropping the cache",
				  m->name);
	}
	/* Said once the pages are gone: a flush that fails now is followed
	 * by SIGBUS on every touch of a remote page, never a quiet write. */
	atomic_store(&m->lease_lost, 1);
}

static int farpage_orphan(struct farpage_map *m)
{
	struct uffd_msg msgs[32];
	int64_t deadline, now, retry = 0;
	int ret;

	deadline = (int64_t)evl_now_ms() + m->agent_timeout_ms;
	log_err("region %s: the agent closed its socket; faults wait up to "
		"%u ms, then SIGBUS",
		m->name, m->agent_timeout_ms);
	atomic_store(&m->state, MAP_ORPHAN);
	for (;;) {
		struct pollfd pfd[2] = {
			{ .fd = m->stop_efd, .events = POLLIN },
			{ .fd = m->uffd, .events = POLLIN },
		};
		int timeout = -1, state = atomic_load(&m->state);
		ssize_t n;

		if (state == MAP_ORPHAN) {
			now = (int64_t)evl_now_ms();
			if (now >= retry) {
				ret = farpage_resume(m);
				if (!ret)
					return 1;
				retry = now + RESUME_RETRY_MS;
				/* Final: never retried (it would take the
				 * lease back from under its new holder). */
				if (!(m->flags & MSG_MAP_RDONLY) &&
				    (ret == -ENOLCK || ret == -EBUSY)) {
					farpage_lease_lose(m, ret);
					deadline = now;
				}
			}
			if (now >= deadline) {
				if (!(m->features & UFFD_FEATURE_POISON)) {
					log_err("region %s: the kernel cannot "
						"poison pages; aborting rather "
						"than returning zero pages",
						m->name);
					abort();
				}
				/* Said first: the sweep may end early (an
				 * unmap) once a thread got its SIGBUS. */
				log_err("region %s: agent gone for %u ms; "
					"pages "
					"not yet fetched now raise SIGBUS",
					m->name, m->agent_timeout_ms);
				m->poison_next = (uint64_t)(uintptr_t)m->base;
				atomic_store(&m->state, MAP_POISONING);
				continue;
			}
			timeout = (int)((deadline < retry ? deadline : retry) -
					now);
		} else if (state == MAP_POISONING) {
			/* -EAGAIN: an event waits; read it, then go on. */
			if (farpage_poison_remote(m) == -EAGAIN)
				timeout = 1;
			else
				atomic_store(&m->state, MAP_POISONED);
		}
		if (farpage_pend_run(m))
			timeout = 1;
		if (poll(pfd, 2, timeout) < 0 && errno != EINTR)
			return 0;
		if (pfd[0].revents)
			return 0;
		if (!(pfd[1].revents & POLLIN))
			continue;
		n = uffd_read_msgs(m->uffd, msgs, 32);
		for (ssize_t k = 0; k < n; k++) {
			uint64_t a;

			if (msgs[k].event != UFFD_EVENT_PAGEFAULT)
				continue;
			/* A page dropped (MADV_DONTNEED) after it was
			 * poisoned; pages ahead of the sweep it poisons. */
			a = msgs[k].arg.pagefault.address & ~(UFFD_PAGE - 1);
			state = atomic_load(&m->state);
			if (state == MAP_POISONED ||
			    (state == MAP_POISONING && a < m->poison_next))
				farpage_pend_add(m, a);
		}
	}
}

static void *farpage_watchdog(void *arg)
{
	struct farpage_map *m = arg;
	struct pollfd pfd[2] = {
		{ .fd = m->stop_efd, .events = POLLIN },
		{ .fd = m->sock, .events = POLLIN },
	};
	char buf[256];

	for (;;) {
		if (poll(pfd, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			return NULL;
		}
		if (pfd[0].revents)
			return NULL;
		if (pfd[1].revents) {
			/* The agent sends nothing unasked: any readable state
			 * other than data is the connection ending. */
			ssize_t n =
				recv(m->sock, buf, sizeof(buf), MSG_DONTWAIT);

			if (n > 0 || (n < 0 && errno == EAGAIN))
				continue;
			if (!farpage_orphan(m))
				return NULL;
			pfd[1].fd = m->sock; /* the restarted agent's */
		}
	}
}

/* Stops the watchdog thread (it reads the mapping); idempotent. */
static void farpage_watchdog_stop(struct farpage_map *m)
{
	uint64_t one = 1;
	ssize_t r;

	if (!m->watchdog_started)
		return;
	r = write(m->stop_efd, &one, sizeof(one));
	(void)r;
	pthread_join(m->watchdog, NULL);
	m->watchdog_started = 0;
}

/*
 * Frees a mapping: the watchdog stops, the agent drops the mapping when
 * the socket closes, then our uffd closes. A range still mapped here (a
 * map that failed half-way, never seen by the caller) goes last: with the
 * uffd closed nobody has to read its UNMAP event.
 */
static void farpage_map_free(struct farpage_map *m, int unmapped)
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
	if (m->base && !unmapped)
		munmap(m->base, m->span);
	layout_runs_free(m->runs, m->n_runs);
	free(m->is_local);
	free(m->pend);
	free(m);
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
	m->sock = m->uffd = m->stop_efd = m->cache_fd = -1;
	snprintf(m->name, sizeof(m->name), "%s", name);
	m->agent_timeout_ms = farpage_agent_timeout(opts);

	if (opts && (opts->flags & FARPAGE_MAP_PREFETCH))
		m->flags |= MSG_MAP_PREFETCH;
	if (opts && (opts->flags & FARPAGE_MAP_RDONLY))
		m->flags |= MSG_MAP_RDONLY;
	snprintf(m->sock_path, sizeof(m->sock_path), "%s",
		 farpage_sock_path(opts));
	ret = net_unix_connect(m->sock_path, &m->sock);
	if (ret)
		goto err;
	ret = farpage_agent_layout(m->sock, name, m->flags | MSG_LAYOUT_RUNS,
				   m->flags & MSG_MAP_RDONLY ? 0 : MSG_WGEN_NEW,
				   &rep, &m->cache_fd);
	if (ret == -ECONNRESET || ret == -EPIPE) {
		/* An agent of a version before layouts in runs refuses the
		 * flag and closes: once more, without it. */
		close(m->sock);
		m->sock = -1;
		ret = net_unix_connect(m->sock_path, &m->sock);
		if (!ret)
			ret = farpage_agent_layout(
				m->sock, name, m->flags,
				m->flags & MSG_MAP_RDONLY ? 0 : MSG_WGEN_NEW,
				&rep, &m->cache_fd);
		if (!ret)
			log_warn("map %s: the agent closed the connection on a "
				 "MAP asking for its layout in runs: a version "
				 "before them (upgrade it)",
				 name);
	}
	if (ret)
		goto err;
	ret = farpage_layout_check(m, &rep);
	if (ret) {
		msg_fini(&rep);
		goto err;
	}
	m->layout_flags = rep.flags;
	m->size = rep.size;
	m->chunk_size = rep.chunk_size;
	m->node = rep.node;
	m->instance = rep.instance;
	m->epoch = rep.epoch;
	m->cid = rep.cid;
	m->wgen = rep.wgen;
	if (!(m->flags & MSG_MAP_RDONLY) && !m->wgen) {
		log_err("map %s: the agent gave no write-lease generation: is "
			"it of another farpage version?",
			name);
		msg_fini(&rep);
		ret = -EPROTO;
		goto err;
	}
	m->n_chunks = (uint32_t)layout_chunks_of(rep.size, rep.chunk_size);
	m->runs = rep.runs; /* ownership moves here */
	m->n_runs = rep.n_runs;
	rep.runs = NULL;
	rep.n_runs = 0;
	msg_fini(&rep);
	m->span = (size_t)m->n_chunks * m->chunk_size;
	if (at && at_len != m->span) {
		log_err("region %s: %zu bytes asked for at %p, but it maps as "
			"%zu (%u chunks of %zu)",
			name, at_len, at, m->span, m->n_chunks, m->chunk_size);
		ret = -EINVAL;
		goto err;
	}
	m->is_local = calloc(m->n_chunks, 1);
	if (!m->is_local) {
		ret = -ENOMEM;
		goto err;
	}
	layout_parts_walk(m->runs, m->n_runs, farpage_part_mark, m);

	ret = uffd_features_probe(&supported);
	if (ret)
		goto err;
	m->features = supported & UFFD_WANTED_FEATURES;
	farpage_cache_choose(m, supported);
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

	ret = uffd_open(&m->uffd);
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

static int farpage_is_writeback(const struct farpage_map *m);
static int farpage_agent_unmap(struct farpage_map *m);

int farpage_unmap(struct farpage_map *m)
{
	int ret = 0, unmapped;

	if (!m)
		return 0;
	atomic_fetch_sub(&farpage_live_maps, 1);
	/*
	 * The range goes first: a thread touching it from now on gets
	 * SIGSEGV. Closing the uffd first would turn every page not yet
	 * fetched into a zero page for a thread that touches it in between.
	 * munmap waits until the agent (or, with the agent gone, our
	 * watchdog) has read the UNMAP event, so both still run here.
	 */
	unmapped = !munmap(m->base, m->span);
	if (!unmapped)
		ret = -errno;
	/* Nothing can be written any more: what was is sent home now, while
	 * our connection keeps the mapping alive in the agent. */
	if (unmapped && farpage_is_writeback(m)) {
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

/*
 * UNMAP on the mapping's connection: the agent's answer comes once the
 * mapping is gone there and its write lease given back, the coordinator
 * acknowledging it (a writable map on another host may follow at once).
 * Returns 0 or -errno (the agent gives the lease back later itself).
 */
static int farpage_agent_unmap(struct farpage_map *m)
{
	struct msg req, rep;
	int ret;

	msg_init(&req, MSG_T_UNMAP);
	ret = ctl_call(m->sock, &req, &rep, CALL_TIMEOUT_MS);
	if (ret)
		log_err("region %s: unmap: %s", m->name,
			rep.type == MSG_T_ERROR && rep.text[0]
				? rep.text
				: log_strerror(ret));
	msg_fini(&rep);
	return ret;
}

static int farpage_is_writeback(const struct farpage_map *m)
{
	return (m->flags & MSG_MAP_CACHE) && !(m->flags & MSG_MAP_RDONLY);
}

/*
 * FLUSH of @name through the agent at @sock_path. Returns 0 or -errno;
 * *@gone (if not NULL) tells an agent that could not be reached or went
 * away before it answered (its socket refused, missing or cut) from one
 * that answered an error.
 */
static int farpage_flush_at(const char *sock_path, const char *name, int *gone)
{
	struct msg req, rep;
	int fd, ret;

	if (gone)
		*gone = 0;
	ret = net_unix_connect(sock_path, &fd);
	if (ret) {
		if (gone)
			*gone = 1;
		return ret;
	}
	msg_init(&req, MSG_T_FLUSH);
	msg_strset(req.name, sizeof(req.name), name);
	/* As long as it takes: the agent answers an error itself when the
	 * pages cannot go home within its fault timeout. */
	ret = ctl_call(fd, &req, &rep, -1);
	close(fd);
	if (ret && rep.type == MSG_T_ERROR && rep.text[0])
		log_err("region %s: flush: %s", name, rep.text);
	else if (ret && gone)
		*gone = 1;
	msg_fini(&rep);
	return ret;
}

/*
 * After a flush whose agent went away before it answered: waits until the
 * watchdog has seen the agent go (the mapping leaves MAP_LIVE) or the
 * mapping was handed to a restarted agent since @handovers. Returns 1 if
 * the mapping may have a new agent to ask (the caller waits for the
 * hand-over as for any orphan), 0 if the agent still serves the mapping
 * after the agent timeout (the flush's own connection failed: its error
 * stands).
 */
static int farpage_flush_lost(struct farpage_map *m, unsigned int handovers)
{
	uint64_t end = evl_now_ms() + m->agent_timeout_ms;

	for (;;) {
		if (atomic_load(&m->state) != MAP_LIVE ||
		    atomic_load(&m->handovers) != handovers)
			return 1;
		if (evl_now_ms() >= end)
			return 0;
		nanosleep(&(struct timespec){ .tv_nsec = 10000000 }, NULL);
	}
}

int farpage_flush(struct farpage_map *m)
{
	if (m->flags & MSG_MAP_RDONLY)
		return 0;
	if (!(m->flags & MSG_MAP_CACHE))
		return -EOPNOTSUPP;
	if (atomic_load(&m->lease_lost)) {
		log_err("region %s: flush: the write lease was lost; what "
			"this mapping wrote is not home",
			m->name);
		return -ENOLCK;
	}
	for (;;) {
		unsigned int handovers;
		int ret, gone;

		/* Agent gone: what was written waits in the cache for the
		 * mapping to be handed to a restarted agent (an agent there
		 * before that has no mapping of ours to flush); the
		 * watchdog ends the wait. */
		while (atomic_load(&m->state) == MAP_ORPHAN &&
		       !atomic_load(&m->lease_lost))
			nanosleep(&(struct timespec){ .tv_nsec = 10000000 },
				  NULL);
		if (atomic_load(&m->lease_lost)) {
			log_err("region %s: flush: the write lease was lost; "
				"what this mapping wrote is not home",
				m->name);
			return -ENOLCK;
		}
		if (atomic_load(&m->state) != MAP_LIVE) {
			log_err("region %s: flush: the agent is gone and no "
				"agent came back within %u ms; written pages "
				"are not home",
				m->name, m->agent_timeout_ms);
			return -ENOTCONN;
		}
		handovers = atomic_load(&m->handovers);
		ret = farpage_flush_at(m->sock_path, m->name, &gone);
		/* The agent died under the flush: the pages wait in the
		 * cache; the mapping's next agent flushes them. */
		if (!ret || !gone || !farpage_flush_lost(m, handovers))
			return ret;
		log_warn("region %s: flush: the agent went away (%s); "
			 "waiting for the mapping to be handed to a restarted "
			 "one",
			 m->name, log_strerror(ret));
	}
}

int farpage_agent_flush(const char *agent_sock, const char *name)
{
	struct farpage_map_opts o = { .agent_sock = agent_sock };

	if (!msg_name_is_valid(name))
		return -EINVAL;
	return farpage_flush_at(farpage_sock_path(&o), name, NULL);
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

int farpage_agent_stats(const char *agent_sock, struct farpage_stats *st)
{
	struct farpage_map_opts o = { .agent_sock = agent_sock };
	struct msg req, rep;
	int fd, ret;

	ret = net_unix_connect(farpage_sock_path(&o), &fd);
	if (ret)
		return ret;
	msg_init(&req, MSG_T_AGENT_STATS);
	ret = ctl_call(fd, &req, &rep, CALL_TIMEOUT_MS);
	close(fd);
	if (ret)
		return ret;
	if (rep.type != MSG_T_AGENT_STAT) {
		msg_fini(&rep);
		return -EBADMSG;
	}
	st->faults = rep.faults;
	st->remote = rep.remote;
	st->local = rep.local;
	st->errors = rep.errors;
	st->poisoned = rep.poisoned;
	{
		uint64_t *dst[MSG_CACHE__MAX] = {
			[MSG_CACHE_LIMIT] = &st->cache_limit,
			[MSG_CACHE_RESIDENT] = &st->cache_resident,
			[MSG_CACHE_RESIDENT_MAX] = &st->cache_resident_max,
			[MSG_CACHE_DIRTY] = &st->cache_dirty,
			[MSG_CACHE_HITS] = &st->cache_hits,
			[MSG_CACHE_MISSES] = &st->cache_misses,
			[MSG_CACHE_EVICTIONS] = &st->cache_evictions,
			[MSG_CACHE_WRITEBACKS] = &st->cache_writebacks,
			[MSG_CACHE_WB_ERRORS] = &st->cache_wb_errors,
			[MSG_CACHE_WP_FAULTS] = &st->cache_wp_faults,
			[MSG_CACHE_FILE_MAX] = &st->cache_file_max,
		};

		for (uint32_t i = 0; i < MSG_CACHE__MAX; i++)
			*dst[i] = i < rep.n_cache ? rep.cache[i] : 0;
	}
	msg_fini(&rep);
	return 0;
}
