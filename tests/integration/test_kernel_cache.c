// SPDX-License-Identifier: MIT
/*
 * The kernel facts the far-memory cache rests on, checked with two processes
 * as in the real system: a guest child maps a shmem memfd (the cache),
 * registers it MISSING|MINOR|WP and hands its uffd to the parent (the agent)
 * over SCM_RIGHTS; the agent maps the same memfd (its alias), lands page
 * bytes there (TCP recv straight into the alias) and serves the faults.
 *
 * Each fact prints "ok - ", "not ok - ", "skip - " (the kernel lacks it and
 * the design has a fallback) or "info - " (recorded, never fails), then a
 * summary. Exit 0 if every checked fact holds, 1 if one does not, 77 if
 * userfaultfd or MINOR faults on shmem are not available.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <linux/userfaultfd.h>

#include "pattern.h"
#include "t_util.h"

/* Newer than Debian 12's uapi header. */
#ifndef UFFDIO_CONTINUE_MODE_WP
#define UFFDIO_CONTINUE_MODE_WP ((__u64)1 << 1)
#endif
#ifndef UFFD_FEATURE_WP_UNPOPULATED
#define UFFD_FEATURE_WP_UNPOPULATED (1ull << 13)
#endif
#ifndef UFFD_FEATURE_POISON
#define UFFD_FEATURE_POISON (1ull << 14)
#endif
#ifndef UFFD_USER_MODE_ONLY
#define UFFD_USER_MODE_ONLY 1
#endif

#define T_PG	       PATTERN_PAGE
#define T_PAGES	       64u
#define T_SIZE	       ((size_t)T_PAGES * T_PG)
#define T_THREADS      8u
#define T_WAIT_MS      10000
#define T_WHY	       512
#define T_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* The pages each fact uses; all are holes in the memfd at the start. */
#define T_P_MISSING 0u /* facts 1, 3, 4 */
#define T_P_MINOR   1u /* fact 2: 1 and its neighbour 2 */
#define T_P_WINDOW  3u /* fact 3b */
#define T_P_PUNCH   4u /* fact 5: 4..7 */
#define T_N_PUNCH   4u
#define T_P_REMOVE  8u	/* fact 6: 8 dirty, 9 and 10 write-protected */
#define T_P_PMADV   11u /* fact 7: 11 DONTNEED, 12 and 13 PAGEOUT */
#define T_P_COPY    14u /* fact 8: 14, 15 with COPY_MODE_WP */
#define T_P_THREADS 16u /* fact 9: 16..23 */
#define T_P_PREWP   24u /* fact 3c */
#define T_P_COPYX   25u /* fact 8x */

/* Pattern seed per fact and step: a page from another step never verifies. */
#define T_SEED(fact, step) (((uint64_t)(fact) << 8) | (step))
#define T_SEED_ANY	   UINT64_C(0xdead)
/* A word the guest writes. */
#define T_VAL(fact, n) (UINT64_C(0x5757000000000000) | ((fact) << 8) | (n))

/* ------------------------------------------------------------ messages */

enum t_op {
	T_OP_READ = 1, /* copy page out: reply carries it */
	T_OP_WRITE,    /* store val at off */
	T_OP_DONTNEED, /* madvise(MADV_DONTNEED) of n pages */
	T_OP_THREADS,  /* n threads read page + i at once: reply carries n */
	T_OP_READ_BG,  /* a thread reads page; answered once it is started */
	T_OP_JOIN,     /* waits for that thread: reply carries what it read */
};

struct t_cmd {
	uint32_t op;
	uint32_t page;
	uint32_t n;
	uint32_t off;
	uint64_t val;
};

struct t_rep {
	int32_t ret; /* 0 or -errno */
	uint32_t n;  /* pages of data that follow */
};

#define T_REP_MAX (sizeof(struct t_rep) + T_THREADS * T_PG)

enum t_hello_status { T_HELLO_OK, T_HELLO_SKIP, T_HELLO_FAIL };

/* The guest's first message; the uffd rides along (SCM_RIGHTS) if OK. */
struct t_hello {
	uint32_t status;
	uint32_t wp;	  /* registered with MODE_WP */
	uint64_t offered; /* features UFFDIO_API offers */
	uint64_t enabled; /* features the guest enabled */
	uint64_t ioctls;  /* UFFDIO_REGISTER's answer */
	uint64_t base;	  /* guest address of page 0 */
	char why[160];
};

static int t_send_all(int fd, const void *buf, size_t len)
{
	const uint8_t *p = buf;
	ssize_t n;

	while (len) {
		n = send(fd, p, len, MSG_NOSIGNAL);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? -errno : -EPIPE;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

static int t_recv_all(int fd, void *buf, size_t len)
{
	uint8_t *p = buf;
	ssize_t n;

	while (len) {
		n = recv(fd, p, len, MSG_WAITALL);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? -errno : -EPIPE;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

/* ------------------------------------------------------------ the guest */

struct t_gthread {
	pthread_t tid;
	pthread_barrier_t *start;
	const uint8_t *src;
	uint8_t *dst;
};

struct t_guest {
	int sock;
	int uffd; /* kept, as libfarpage keeps its own */
	uint8_t *map;
	uint8_t *buf;	      /* a reply: header + up to T_THREADS pages */
	struct t_gthread *bg; /* T_OP_READ_BG's thread, while it runs */
	uint8_t *bg_page;
};

static void *t_guest_thread(void *arg)
{
	struct t_gthread *t = arg;

	/* All fault at once: the agent sees every fault before it serves. */
	if (t->start)
		pthread_barrier_wait(t->start);
	memcpy(t->dst, t->src, T_PG);
	return NULL;
}

static int t_guest_threads(struct t_guest *gs, uint32_t page, uint32_t n,
			   uint8_t *data)
{
	struct t_gthread t[T_THREADS];
	pthread_barrier_t start;
	int ret;

	if (n == 0 || n > T_THREADS)
		return -EINVAL;
	ret = pthread_barrier_init(&start, NULL, n);
	if (ret)
		return -ret;
	for (uint32_t i = 0; i < n; i++) {
		t[i].start = &start;
		t[i].src = gs->map + (size_t)(page + i) * T_PG;
		t[i].dst = data + (size_t)i * T_PG;
		ret = pthread_create(&t[i].tid, NULL, t_guest_thread, &t[i]);
		if (ret) {
			/* The started ones would wait at the barrier forever. */
			fprintf(stderr, "guest: pthread_create: %s\n",
				strerror(ret));
			_exit(1);
		}
	}
	for (uint32_t i = 0; i < n; i++)
		pthread_join(t[i].tid, NULL);
	pthread_barrier_destroy(&start);
	return 0;
}

/* Starts a thread that reads @src while the guest goes on serving. */
static int t_guest_bg_start(struct t_guest *gs, const uint8_t *src)
{
	int ret;

	if (gs->bg)
		return -EBUSY;
	gs->bg = calloc(1, sizeof(*gs->bg));
	if (!gs->bg)
		return -ENOMEM;
	gs->bg->src = src;
	gs->bg->dst = gs->bg_page;
	ret = pthread_create(&gs->bg->tid, NULL, t_guest_thread, gs->bg);
	if (ret) {
		free(gs->bg);
		gs->bg = NULL;
	}
	return -ret;
}

/* Runs one command of the agent; the fault it raises is the agent's. */
static void t_guest_do(struct t_guest *gs, const struct t_cmd *c,
		       struct t_rep *rep, uint8_t *data)
{
	uint8_t *p = gs->map + (size_t)c->page * T_PG;

	rep->ret = 0;
	rep->n = 0;
	if (c->page >= T_PAGES || c->n > T_PAGES - c->page ||
	    c->off > T_PG - 8 || c->off % 8) {
		rep->ret = -ERANGE;
		return;
	}
	switch (c->op) {
	case T_OP_READ:
		memcpy(data, p, T_PG);
		rep->n = 1;
		break;
	case T_OP_WRITE:
		*(volatile uint64_t *)(void *)(p + c->off) = c->val;
		break;
	case T_OP_DONTNEED:
		if (madvise(p, (size_t)c->n * T_PG, MADV_DONTNEED))
			rep->ret = -errno;
		break;
	case T_OP_THREADS:
		rep->ret = t_guest_threads(gs, c->page, c->n, data);
		if (!rep->ret)
			rep->n = c->n;
		break;
	case T_OP_READ_BG:
		rep->ret = t_guest_bg_start(gs, p);
		break;
	case T_OP_JOIN:
		if (!gs->bg) {
			rep->ret = -EINVAL;
			break;
		}
		pthread_join(gs->bg->tid, NULL);
		memcpy(data, gs->bg_page, T_PG);
		free(gs->bg);
		gs->bg = NULL;
		rep->n = 1;
		break;
	default:
		rep->ret = -EINVAL;
	}
}

static int t_guest_serve(struct t_guest *gs)
{
	struct t_rep *rep = (struct t_rep *)(void *)gs->buf;
	uint8_t *data = gs->buf + sizeof(*rep);
	struct t_cmd c;
	ssize_t n;

	for (;;) {
		n = recv(gs->sock, &c, sizeof(c), 0);
		if (n == 0)
			return 0; /* the agent is done */
		if (n < 0 && errno == EINTR)
			continue;
		if (n != sizeof(c)) {
			fprintf(stderr, "guest: bad command (%zd bytes)\n", n);
			return 1;
		}
		t_guest_do(gs, &c, rep, data);
		if (t_send_all(gs->sock, gs->buf,
			       sizeof(*rep) + rep->n * T_PG) < 0)
			return 1;
	}
}

/*
 * Creates the uffd the way libfarpage does: features probed on a throw-away
 * uffd, then a fresh one with what is needed, the range registered.
 * Fills h (status SKIP when the kernel cannot run the test).
 */
static void t_guest_uffd(struct t_guest *gs, struct t_hello *h)
{
	const uint64_t need = UFFD_FEATURE_MISSING_SHMEM |
			      UFFD_FEATURE_MINOR_SHMEM |
			      UFFD_FEATURE_EVENT_REMOVE;
	struct uffdio_api api = { .api = UFFD_API };
	struct uffdio_register reg;
	int fd, e;

	fd = (int)syscall(SYS_userfaultfd,
			  O_CLOEXEC | O_NONBLOCK | UFFD_USER_MODE_ONLY);
	if (fd < 0) {
		e = errno;
		h->status = (e == EPERM || e == ENOSYS || e == EINVAL)
				    ? T_HELLO_SKIP
				    : T_HELLO_FAIL;
		snprintf(h->why, sizeof(h->why), "userfaultfd: %s",
			 strerror(e));
		return;
	}
	if (ioctl(fd, UFFDIO_API, &api)) {
		snprintf(h->why, sizeof(h->why), "UFFDIO_API probe: %s",
			 strerror(errno));
		h->status = T_HELLO_FAIL;
		close(fd);
		return;
	}
	close(fd);
	h->offered = api.features;
	if ((api.features & need) != need) {
		snprintf(h->why, sizeof(h->why),
			 "kernel lacks uffd features 0x%llx (MISSING_SHMEM, "
			 "MINOR_SHMEM, EVENT_REMOVE), offers 0x%llx",
			 (unsigned long long)(need & ~api.features),
			 (unsigned long long)api.features);
		h->status = T_HELLO_SKIP;
		return;
	}
	h->enabled = need | (api.features & UFFD_FEATURE_WP_HUGETLBFS_SHMEM);
	h->wp = !!(h->enabled & UFFD_FEATURE_WP_HUGETLBFS_SHMEM);

	fd = (int)syscall(SYS_userfaultfd,
			  O_CLOEXEC | O_NONBLOCK | UFFD_USER_MODE_ONLY);
	api = (struct uffdio_api){ .api = UFFD_API, .features = h->enabled };
	if (fd < 0 || ioctl(fd, UFFDIO_API, &api)) {
		snprintf(h->why, sizeof(h->why), "userfaultfd/UFFDIO_API: %s",
			 strerror(errno));
		h->status = T_HELLO_FAIL;
		if (fd >= 0)
			close(fd);
		return;
	}
	reg = (struct uffdio_register){
		.range = { .start = (uintptr_t)gs->map, .len = T_SIZE },
		.mode = UFFDIO_REGISTER_MODE_MISSING |
			UFFDIO_REGISTER_MODE_MINOR |
			(h->wp ? UFFDIO_REGISTER_MODE_WP : 0),
	};
	if (ioctl(fd, UFFDIO_REGISTER, &reg)) {
		snprintf(h->why, sizeof(h->why),
			 "UFFDIO_REGISTER MISSING|MINOR%s: %s",
			 h->wp ? "|WP" : "", strerror(errno));
		h->status = T_HELLO_FAIL;
		close(fd);
		return;
	}
	h->ioctls = reg.ioctls;
	h->status = T_HELLO_OK;
	gs->uffd = fd;
}

static int t_hello_send(int sock, const struct t_hello *h, int uffd)
{
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} u;
	struct iovec iov = { .iov_base = (void *)h, .iov_len = sizeof(*h) };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
	struct cmsghdr *c;

	if (uffd >= 0) {
		memset(&u, 0, sizeof(u));
		mh.msg_control = u.buf;
		mh.msg_controllen = sizeof(u.buf);
		c = CMSG_FIRSTHDR(&mh);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(c), &uffd, sizeof(int));
	}
	return sendmsg(sock, &mh, MSG_NOSIGNAL) == sizeof(*h) ? 0 : -1;
}

static int t_guest_main(int sock, int memfd)
{
	struct t_guest gs = { .sock = sock, .uffd = -1 };
	struct t_hello h;
	int ret = 1;

	memset(&h, 0, sizeof(h));
	gs.buf = malloc(T_REP_MAX);
	gs.bg_page = malloc(T_PG);
	gs.map = mmap(NULL, T_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, memfd,
		      0);
	close(memfd); /* the mapping holds the cache */
	if (!gs.buf || !gs.bg_page || gs.map == MAP_FAILED) {
		h.status = T_HELLO_FAIL;
		snprintf(h.why, sizeof(h.why), "guest setup: %s",
			 strerror(errno));
		gs.map = NULL;
	} else {
		t_guest_uffd(&gs, &h);
		h.base = (uintptr_t)gs.map;
	}
	if (t_hello_send(sock, &h, h.status == T_HELLO_OK ? gs.uffd : -1) == 0)
		ret = h.status == T_HELLO_OK ? t_guest_serve(&gs) : 0;
	if (gs.bg) /* its fault was never served: exit ends it */
		return 1;
	if (gs.uffd >= 0)
		close(gs.uffd);
	if (gs.map)
		munmap(gs.map, T_SIZE);
	free(gs.bg_page);
	free(gs.buf);
	close(sock);
	return ret;
}

/* ------------------------------------------------------------ the agent */

enum t_res { T_FAIL = -1, T_OK = 0, T_SKIP = 1, T_INFO = 2 };
enum t_ev { T_EV_MSG = 1, T_EV_REP = 2 };

struct t_agent {
	pid_t guest;
	int pidfd;
	int sock; /* commands to the guest, its answers */
	int uffd; /* the guest's, received */
	int memfd;
	int tx, rx; /* loopback TCP: page bytes "from the network" */
	uint8_t *alias;
	uint64_t base; /* guest address of page 0 */
	uint64_t offered, enabled, ioctls;
	bool wp;     /* the range is registered WP */
	int cont_wp; /* CONTINUE_MODE_WP: 1 works, 0 EINVAL, -1 untried */
	int pending; /* commands sent, not answered */
	bool lost;   /* guest gone or stuck: facts left are not run */
	int failed;
	long long blocks[2]; /* fact 5: st_blocks before, after the punch */
	bool punched;
	struct t_rep *rep;
	uint8_t *rep_data;
	char why[T_WHY];
	char lost_why[T_WHY];
	char log[T_WHY];   /* events t_touch() served */
	char sum[4][160];  /* ids per result */
	uint8_t exp[T_PG]; /* the page a check expects */
	uint8_t tmp[T_PG];
};

static int t_err(struct t_agent *ag, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static int t_note(struct t_agent *ag, int res, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static int t_lose(struct t_agent *ag, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* Sets the failed check's reason; returns T_FAIL (-1). */
static int t_err(struct t_agent *ag, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(ag->why, sizeof(ag->why), fmt, ap);
	va_end(ap);
	return T_FAIL;
}

/* Sets the detail of a result (skip, info); returns @res. */
static int t_note(struct t_agent *ag, int res, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(ag->why, sizeof(ag->why), fmt, ap);
	va_end(ap);
	return res;
}

/* The guest cannot be driven any more; returns -1. */
static int t_lose(struct t_agent *ag, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(ag->lost_why, sizeof(ag->lost_why), fmt, ap);
	va_end(ap);
	ag->lost = true;
	snprintf(ag->why, sizeof(ag->why), "%s", ag->lost_why);
	return -1;
}

/* Puts @prefix before the reason already in ag->why; returns T_FAIL. */
static int t_err_prefix(struct t_agent *ag, const char *prefix)
{
	char w[T_WHY];

	snprintf(w, sizeof(w), "%s", ag->why);
	return t_err(ag, "%s: %.400s", prefix, w);
}

static const char *t_flag_name(uint64_t flags)
{
	static const char *const names[] = {
		"MISSING", "MISSING|WRITE", "WP",	"WP|WRITE",
		"MINOR",   "MINOR|WRITE",   "MINOR|WP", "MINOR|WP|WRITE",
	};

	return names[flags & 7];
}

static long long t_msg_page(const struct t_agent *ag, const struct uffd_msg *m)
{
	uint64_t a = m->arg.pagefault.address & ~(uint64_t)(T_PG - 1);

	if (a < ag->base || a >= ag->base + T_SIZE)
		return -1;
	return (long long)((a - ag->base) / T_PG);
}

static void t_msg_str(const struct t_agent *ag, const struct uffd_msg *m,
		      char *buf, size_t len)
{
	switch (m->event) {
	case UFFD_EVENT_PAGEFAULT:
		snprintf(buf, len, "%s fault (flags 0x%llx) on page %lld",
			 t_flag_name(m->arg.pagefault.flags),
			 (unsigned long long)m->arg.pagefault.flags,
			 t_msg_page(ag, m));
		break;
	case UFFD_EVENT_REMOVE:
		snprintf(buf, len, "REMOVE of pages [%lld, %lld)",
			 (long long)(m->arg.remove.start - ag->base) / T_PG,
			 (long long)(m->arg.remove.end - ag->base) / T_PG);
		break;
	default:
		snprintf(buf, len, "event 0x%x", m->event);
	}
}

static int t_wp(struct t_agent *ag, uint32_t page, uint32_t n, bool on)
{
	struct uffdio_writeprotect w = {
		.range = { .start = ag->base + (uint64_t)page * T_PG,
			   .len = (uint64_t)n * T_PG },
		.mode = on ? UFFDIO_WRITEPROTECT_MODE_WP : 0, /* off wakes */
	};

	return ioctl(ag->uffd, UFFDIO_WRITEPROTECT, &w) ? -errno : 0;
}

/*
 * Maps pages that are in the memfd into the guest and wakes it; @wp: mapped
 * write-protected (the first write raises a WP fault). Uses
 * UFFDIO_CONTINUE_MODE_WP where the kernel has it, else the fallback: map
 * without waking, protect, then wake, so that no woken thread finds the page
 * writable.
 */
static int t_continue(struct t_agent *ag, uint32_t page, uint32_t n, bool wp)
{
	struct uffdio_continue c = {
		.range = { .start = ag->base + (uint64_t)page * T_PG,
			   .len = (uint64_t)n * T_PG },
	};
	struct uffdio_range r = c.range;
	int ret;

	wp = wp && ag->wp;
	if (wp && ag->cont_wp != 0) {
		c.mode = UFFDIO_CONTINUE_MODE_WP;
		if (ioctl(ag->uffd, UFFDIO_CONTINUE, &c) == 0) {
			ag->cont_wp = 1;
			return 0;
		}
		if (errno != EINVAL || ag->cont_wp == 1)
			return -errno;
		ag->cont_wp = 0; /* an unknown mode: the kernel predates it */
	}
	c.mode = wp ? UFFDIO_CONTINUE_MODE_DONTWAKE : 0;
	if (ioctl(ag->uffd, UFFDIO_CONTINUE, &c))
		return -errno;
	if (!wp)
		return 0;
	ret = t_wp(ag, page, n, true);
	if (ret)
		return ret;
	return ioctl(ag->uffd, UFFDIO_WAKE, &r) ? -errno : 0;
}

/*
 * Lands page @page's bytes for @seed in the memfd as a fetch from a peer
 * does: sent over loopback TCP and received straight into the alias.
 */
static int t_land(struct t_agent *ag, uint32_t page, uint64_t seed)
{
	int ret;

	pattern_fill(ag->tmp, seed, page);
	ret = t_send_all(ag->tx, ag->tmp, T_PG);
	if (ret)
		return ret;
	return t_recv_all(ag->rx, ag->alias + (size_t)page * T_PG, T_PG);
}

/*
 * The standard policy: MISSING: land @seed, CONTINUE (WP); MINOR: CONTINUE
 * (WP); WP: un-protect (wakes). Other events need only have been read.
 */
static int t_serve(struct t_agent *ag, const struct uffd_msg *m, uint64_t seed)
{
	long long pg;
	uint64_t fl;
	int ret;

	if (m->event != UFFD_EVENT_PAGEFAULT)
		return 0;
	pg = t_msg_page(ag, m);
	if (pg < 0)
		return -ERANGE;
	fl = m->arg.pagefault.flags;
	if (fl & UFFD_PAGEFAULT_FLAG_WP)
		return t_wp(ag, (uint32_t)pg, 1, false);
	if (!(fl & UFFD_PAGEFAULT_FLAG_MINOR)) {
		ret = t_land(ag, (uint32_t)pg, seed);
		if (ret)
			return ret;
	}
	return t_continue(ag, (uint32_t)pg, 1, true);
}

static int t_cmd(struct t_agent *ag, uint32_t op, uint32_t page, uint32_t n,
		 uint32_t off, uint64_t val)
{
	struct t_cmd c = {
		.op = op, .page = page, .n = n, .off = off, .val = val
	};

	if (send(ag->sock, &c, sizeof(c), MSG_NOSIGNAL) != sizeof(c))
		return t_lose(ag, "sending a command to the guest: %s",
			      strerror(errno));
	ag->pending++;
	return 0;
}

/*
 * Waits for the next uffd message (read into *m) or the guest's answer
 * (in ag->rep). Returns T_EV_MSG, T_EV_REP, or -1: the guest is lost.
 */
static int t_wait(struct t_agent *ag, struct uffd_msg *m)
{
	uint64_t deadline = t_now_ms() + T_WAIT_MS, now;
	struct pollfd p[2];
	ssize_t n;
	int ret;

	for (;;) {
		now = t_now_ms();
		if (now >= deadline)
			return t_lose(
				ag,
				"nothing from the guest or its uffd for %d ms",
				T_WAIT_MS);
		p[0] = (struct pollfd){ .fd = ag->uffd, .events = POLLIN };
		p[1] = (struct pollfd){ .fd = ag->sock, .events = POLLIN };
		ret = poll(p, 2, (int)(deadline - now));
		if (ret < 0 && errno != EINTR)
			return t_lose(ag, "poll: %s", strerror(errno));
		if (ret <= 0)
			continue;
		if (p[0].revents & POLLIN) {
			n = read(ag->uffd, m, sizeof(*m));
			if (n == sizeof(*m))
				return T_EV_MSG;
			if (n < 0 && (errno == EAGAIN || errno == EINTR))
				continue;
			return t_lose(ag, "reading the uffd: %s",
				      n < 0 ? strerror(errno) : "short read");
		}
		if (p[0].revents)
			return t_lose(ag, "uffd poll revents 0x%x",
				      p[0].revents);
		if (!p[1].revents)
			continue;
		n = recv(ag->sock, ag->rep, T_REP_MAX, 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return t_lose(ag, "the guest is gone (%s)",
				      n < 0 ? strerror(errno) : "EOF");
		if ((size_t)n < sizeof(*ag->rep) ||
		    (size_t)n != sizeof(*ag->rep) + ag->rep->n * T_PG ||
		    ag->pending <= 0)
			return t_lose(ag, "a bad or unasked-for answer (%zd B)",
				      n);
		ag->pending--;
		return T_EV_REP;
	}
}

/* Waits for the guest's fault on @page. Returns 0, or -1 (ag->why). */
static int t_fault_wait(struct t_agent *ag, uint32_t page, struct uffd_msg *m)
{
	char s[96];
	int ev;

	ev = t_wait(ag, m);
	if (ev < 0)
		return -1;
	if (ev == T_EV_REP)
		return t_err(ag, "no fault: the guest's access completed (%s)",
			     strerror(-ag->rep->ret));
	if (m->event == UFFD_EVENT_PAGEFAULT && t_msg_page(ag, m) == page)
		return 0;
	t_msg_str(ag, m, s, sizeof(s));
	t_serve(ag, m, T_SEED_ANY); /* read, so it must be served */
	return t_err(ag, "%s instead of a fault on page %u", s, page);
}

/*
 * Waits for the guest's answer; any event before it is unexpected, served
 * by the standard policy and named. Returns 0, or -1 (ag->why).
 */
static int t_reply_wait(struct t_agent *ag)
{
	struct uffd_msg m;
	char s[96];
	int ev, bad = 0;

	for (;;) {
		ev = t_wait(ag, &m);
		if (ev < 0)
			return -1;
		if (ev == T_EV_REP)
			break;
		if (!bad++) {
			t_msg_str(ag, &m, s, sizeof(s));
			t_err(ag, "unexpected %s before the guest's answer", s);
		}
		t_serve(ag, &m, T_SEED_ANY);
	}
	if (bad)
		return -1;
	if (ag->rep->ret)
		return t_err(ag, "the guest's operation failed: %s",
			     strerror(-ag->rep->ret));
	return 0;
}

/*
 * Sends a command and serves whatever it raises by the standard policy
 * (@seed for MISSING pages) until the answer; the events, in order, are in
 * ag->log. Returns 0, or -1 (ag->why).
 */
static int t_touch(struct t_agent *ag, uint32_t op, uint32_t page, uint32_t n,
		   uint32_t off, uint64_t val, uint64_t seed)
{
	struct uffd_msg m;
	size_t len = 0;
	char s[96];
	int ev, ret;

	ag->log[0] = '\0';
	if (t_cmd(ag, op, page, n, off, val))
		return -1;
	for (;;) {
		ev = t_wait(ag, &m);
		if (ev < 0)
			return -1;
		if (ev == T_EV_REP)
			break;
		t_msg_str(ag, &m, s, sizeof(s));
		if (len < sizeof(ag->log))
			len += (size_t)snprintf(ag->log + len,
						sizeof(ag->log) - len, "%s%s",
						len ? ", " : "", s);
		ret = t_serve(ag, &m, seed);
		if (ret)
			return t_err(ag, "serving %s: %s", s, strerror(-ret));
	}
	if (!ag->log[0])
		snprintf(ag->log, sizeof(ag->log), "no event");
	if (ag->rep->ret)
		return t_err(ag, "the guest's operation failed: %s",
			     strerror(-ag->rep->ret));
	return 0;
}

/* Compares @got with ag->exp. Returns 0, or -1 (ag->why). */
static int t_page_cmp(struct t_agent *ag, const uint8_t *got, const char *what)
{
	size_t bad = 0, first = 0, zero = 0;
	uint64_t g, w;

	for (size_t i = 0; i < T_PG; i += 8) {
		memcpy(&g, got + i, 8);
		memcpy(&w, ag->exp + i, 8);
		zero += g == 0;
		if (g != w && !bad++)
			first = i;
	}
	if (!bad)
		return 0;
	memcpy(&g, got + first, 8);
	memcpy(&w, ag->exp + first, 8);
	return t_err(ag,
		     "%s: %zu of %u words differ, first at byte %zu (0x%llx, "
		     "want 0x%llx)%s",
		     what, bad, T_PG / 8, first, (unsigned long long)g,
		     (unsigned long long)w,
		     zero == T_PG / 8 ? ": a zero page" : "");
}

static void t_exp_set(struct t_agent *ag, uint64_t seed, uint32_t page)
{
	pattern_fill(ag->exp, seed, page);
}

static void t_exp_put(struct t_agent *ag, uint32_t off, uint64_t val)
{
	memcpy(ag->exp + off, &val, 8);
}

/* Reads the page from the memfd itself (a hole reads as zeroes). */
static int t_pread(struct t_agent *ag, uint32_t page, uint8_t *buf)
{
	ssize_t n = pread(ag->memfd, buf, T_PG, (off_t)page * T_PG);

	if (n != T_PG)
		return t_err(ag, "pread of page %u: %s", page,
			     n < 0 ? strerror(errno) : "short");
	return 0;
}

/* Brings @page into the guest (a read, served): checks its bytes. */
static int t_bring(struct t_agent *ag, uint32_t page, uint64_t seed)
{
	if (t_touch(ag, T_OP_READ, page, 0, 0, 0, seed))
		return -1;
	t_exp_set(ag, seed, page);
	return t_page_cmp(ag, ag->rep_data, "bringing the page in");
}

static bool t_is_zero(const uint8_t *p)
{
	for (size_t i = 0; i < T_PG; i++)
		if (p[i])
			return false;
	return true;
}

/* Serves what a failed check left: pending answers, events not read. */
static void t_settle(struct t_agent *ag)
{
	struct uffdio_range all = { .start = ag->base, .len = T_SIZE };
	struct uffd_msg m;

	/*
	 * A fault read but left unresolved stays asleep: wake everything, a
	 * page still not there faults again and is served.
	 */
	if (!ag->lost && ag->pending > 0)
		ioctl(ag->uffd, UFFDIO_WAKE, &all);
	while (!ag->lost && ag->pending > 0)
		if (t_wait(ag, &m) == T_EV_MSG)
			t_serve(ag, &m, T_SEED_ANY);
	while (!ag->lost && read(ag->uffd, &m, sizeof(m)) == sizeof(m))
		t_serve(ag, &m, T_SEED_ANY);
}

/* ------------------------------------------------------------ facts */

static int t_skip_no_wp(struct t_agent *ag)
{
	return t_note(ag, T_SKIP,
		      "the kernel has no WP on shmem "
		      "(UFFD_FEATURE_WP_HUGETLBFS_SHMEM)");
}

/* 1: MISSING fault, bytes received into the alias, CONTINUE. */
static int t_fact_missing(struct t_agent *ag)
{
	const uint32_t pg = T_P_MISSING;
	struct uffd_msg m;
	int ret;

	if (t_cmd(ag, T_OP_READ, pg, 0, 0, 0) || t_fault_wait(ag, pg, &m))
		return T_FAIL;
	if (m.arg.pagefault.flags)
		return t_err(ag, "fault flags %s (0x%llx), not a MISSING read",
			     t_flag_name(m.arg.pagefault.flags),
			     (unsigned long long)m.arg.pagefault.flags);
	ret = t_land(ag, pg, T_SEED(1, 0));
	if (ret)
		return t_err(ag, "receiving into the alias: %s",
			     strerror(-ret));
	ret = t_continue(ag, pg, 1, true);
	if (ret)
		return t_err(ag, "UFFDIO_CONTINUE: %s", strerror(-ret));
	if (t_reply_wait(ag))
		return T_FAIL;
	t_exp_set(ag, T_SEED(1, 0), pg);
	return t_page_cmp(ag, ag->rep_data, "the guest read");
}

/* 1w: is UFFDIO_CONTINUE_MODE_WP there (fact 1 tried it)? */
static int t_fact_cont_wp(struct t_agent *ag)
{
	if (!ag->wp)
		return t_skip_no_wp(ag);
	if (ag->cont_wp == 1)
		return T_OK;
	if (ag->cont_wp < 0)
		return t_err(ag, "not tried: fact 1 stopped before CONTINUE");
	return t_note(ag, T_SKIP,
		      "UFFDIO_CONTINUE with UFFDIO_CONTINUE_MODE_WP: EINVAL; "
		      "the fallback CONTINUE(DONTWAKE) + WRITEPROTECT(WP) + "
		      "WAKE is used below");
}

/* 2: a page in the memfd, not mapped: MINOR; the neighbour too. */
static int t_fact_minor(struct t_agent *ag)
{
	struct uffd_msg m;
	int ret;

	for (uint32_t pg = T_P_MINOR; pg < T_P_MINOR + 2; pg++)
		pattern_fill(ag->alias + (size_t)pg * T_PG, T_SEED(2, 0), pg);
	for (uint32_t pg = T_P_MINOR; pg < T_P_MINOR + 2; pg++) {
		if (t_cmd(ag, T_OP_READ, pg, 0, 0, 0) ||
		    t_fault_wait(ag, pg, &m))
			return T_FAIL;
		if (m.arg.pagefault.flags != UFFD_PAGEFAULT_FLAG_MINOR)
			return t_err(
				ag,
				"page %u: fault flags %s (0x%llx), not MINOR",
				pg, t_flag_name(m.arg.pagefault.flags),
				(unsigned long long)m.arg.pagefault.flags);
		ret = t_continue(ag, pg, 1, true);
		if (ret)
			return t_err(ag, "page %u: UFFDIO_CONTINUE: %s", pg,
				     strerror(-ret));
		if (t_reply_wait(ag))
			return T_FAIL;
		t_exp_set(ag, T_SEED(2, 0), pg);
		if (t_page_cmp(ag, ag->rep_data, "the guest read"))
			return T_FAIL;
	}
	return T_OK;
}

/* Waits for a WP fault of a write on @page. Returns 0 or -1 (ag->why). */
static int t_wp_fault_wait(struct t_agent *ag, uint32_t page)
{
	const uint64_t want =
		UFFD_PAGEFAULT_FLAG_WP | UFFD_PAGEFAULT_FLAG_WRITE;
	struct uffd_msg m;

	if (t_fault_wait(ag, page, &m))
		return -1;
	if (m.arg.pagefault.flags != want) {
		t_serve(ag, &m, T_SEED_ANY);
		return t_err(ag, "fault flags %s (0x%llx), not WP|WRITE",
			     t_flag_name(m.arg.pagefault.flags),
			     (unsigned long long)m.arg.pagefault.flags);
	}
	return 0;
}

/* 3: the first write faults WP; un-protecting wakes; then no faults. */
static int t_fact_wp_first_write(struct t_agent *ag)
{
	const uint32_t pg = T_P_MISSING;
	int ret;

	if (!ag->wp)
		return t_skip_no_wp(ag);
	if (t_cmd(ag, T_OP_WRITE, pg, 0, 8, T_VAL(3, 1)))
		return T_FAIL;
	if (t_wp_fault_wait(ag, pg))
		return T_FAIL;
	ret = t_wp(ag, pg, 1, false);
	if (ret)
		return t_err(ag, "UFFDIO_WRITEPROTECT mode 0: %s",
			     strerror(-ret));
	if (t_reply_wait(ag))
		return T_FAIL;
	if (t_cmd(ag, T_OP_WRITE, pg, 0, 16, T_VAL(3, 2)))
		return T_FAIL;
	if (t_reply_wait(ag))
		return t_err_prefix(ag, "the second write");
	t_exp_set(ag, T_SEED(1, 0), pg);
	t_exp_put(ag, 8, T_VAL(3, 1));
	t_exp_put(ag, 16, T_VAL(3, 2));
	return t_page_cmp(ag, ag->alias + (size_t)pg * T_PG, "the alias");
}

/*
 * 3b: while a fault is being resolved (the faulting thread not woken yet),
 * another thread's write to the page raises a WP fault: no write escapes
 * dirty tracking between mapping the page and protecting it.
 */
static int t_fact_window(struct t_agent *ag)
{
	const uint32_t pg = T_P_WINDOW;
	struct uffdio_continue c = {
		.range = { .start = ag->base + (uint64_t)pg * T_PG,
			   .len = T_PG },
	};
	bool started = false, faulted = false, escaped;
	struct uffd_msg m;
	uint64_t w, v = T_VAL(3, 5);
	char s[96];
	int ev, ret;

	if (!ag->wp)
		return t_skip_no_wp(ag);
	if (ag->cont_wp < 0)
		return t_err(ag,
			     "not run: fact 1 did not try CONTINUE_MODE_WP");
	if (t_cmd(ag, T_OP_READ_BG, pg, 0, 0, 0))
		return T_FAIL;
	while (!started || !faulted) {
		ev = t_wait(ag, &m);
		if (ev < 0)
			return T_FAIL;
		if (ev == T_EV_REP) {
			if (ag->rep->ret)
				return t_err(ag, "starting the reader: %s",
					     strerror(-ag->rep->ret));
			started = true;
			continue;
		}
		if (m.event != UFFD_EVENT_PAGEFAULT ||
		    t_msg_page(ag, &m) != pg || m.arg.pagefault.flags) {
			t_msg_str(ag, &m, s, sizeof(s));
			return t_err(ag, "%s, not the reader's MISSING fault",
				     s);
		}
		faulted = true;
	}
	ret = t_land(ag, pg, T_SEED(3, 4));
	if (ret)
		return t_err(ag, "landing: %s", strerror(-ret));
	/* Mapped, the reader still asleep: the fallback's window. */
	c.mode = UFFDIO_CONTINUE_MODE_DONTWAKE |
		 (ag->cont_wp == 1 ? UFFDIO_CONTINUE_MODE_WP : 0);
	if (ioctl(ag->uffd, UFFDIO_CONTINUE, &c))
		return t_err(ag, "UFFDIO_CONTINUE: %s", strerror(errno));
	if (t_cmd(ag, T_OP_WRITE, pg, 0, 8, v))
		return T_FAIL;
	ev = t_wait(ag, &m);
	if (ev < 0)
		return T_FAIL;
	escaped = ev == T_EV_REP;
	if (!escaped &&
	    (m.event != UFFD_EVENT_PAGEFAULT || t_msg_page(ag, &m) != pg ||
	     m.arg.pagefault.flags !=
		     (UFFD_PAGEFAULT_FLAG_WP | UFFD_PAGEFAULT_FLAG_WRITE))) {
		t_msg_str(ag, &m, s, sizeof(s));
		return t_err(ag, "the write raised %s, not WP|WRITE", s);
	}
	if (escaped) {
		/* The fallback's second half: protect, wake the reader. */
		ret = t_wp(ag, pg, 1, true);
		if (!ret && ioctl(ag->uffd, UFFDIO_WAKE, &c.range))
			ret = -errno;
	} else {
		ret = t_wp(ag, pg, 1, false); /* wakes writer and reader */
		if (!ret && t_reply_wait(ag))
			return T_FAIL;
	}
	if (ret)
		return t_err(ag, "protecting/waking: %s", strerror(-ret));
	if (t_cmd(ag, T_OP_JOIN, pg, 0, 0, 0) || t_reply_wait(ag))
		return T_FAIL;
	/* The reader ran after or before the write: either word is right. */
	t_exp_set(ag, T_SEED(3, 4), pg);
	memcpy(&w, ag->rep_data + 8, 8);
	if (w == v)
		t_exp_put(ag, 8, v);
	if (t_page_cmp(ag, ag->rep_data, "the reader's page"))
		return T_FAIL;
	if (ag->cont_wp == 1)
		return escaped ? t_err(ag, "the write went through, no fault")
			       : T_OK;
	return t_note(ag, T_SKIP,
		      "no UFFDIO_CONTINUE_MODE_WP, and with the fallback %s",
		      escaped ? "a write between CONTINUE(DONTWAKE) and "
				"WRITEPROTECT went through WITHOUT a fault: it "
				"escapes dirty tracking"
			      : "the write still faulted");
}

/* 3c: WRITEPROTECT of a page not mapped yet, then CONTINUE without WP. */
static int t_fact_wp_then_continue(struct t_agent *ag)
{
	const uint32_t pg = T_P_PREWP;
	struct uffdio_continue c = {
		.range = { .start = ag->base + (uint64_t)pg * T_PG,
			   .len = T_PG },
	};
	struct uffd_msg m;
	uint64_t fl;
	char s[96] = "no fault";
	int ev, ret;

	if (!ag->wp)
		return t_skip_no_wp(ag);
	pattern_fill(ag->alias + (size_t)pg * T_PG, T_SEED(3, 6), pg);
	ret = t_wp(ag, pg, 1, true);
	if (ret)
		return t_note(ag, T_INFO,
			      "WRITEPROTECT of the unmapped page: %s",
			      strerror(-ret));
	if (t_cmd(ag, T_OP_READ, pg, 0, 0, 0) || t_fault_wait(ag, pg, &m))
		return T_FAIL;
	fl = m.arg.pagefault.flags;
	if (ioctl(ag->uffd, UFFDIO_CONTINUE, &c))
		return t_err(ag, "UFFDIO_CONTINUE: %s", strerror(errno));
	if (t_reply_wait(ag))
		return T_FAIL;
	if (t_cmd(ag, T_OP_WRITE, pg, 0, 8, T_VAL(3, 7)))
		return T_FAIL;
	ev = t_wait(ag, &m);
	if (ev < 0)
		return T_FAIL;
	if (ev == T_EV_MSG) {
		t_msg_str(ag, &m, s, sizeof(s));
		t_serve(ag, &m, T_SEED_ANY);
		if (t_reply_wait(ag))
			return T_FAIL;
	}
	return t_note(ag, T_INFO,
		      "the read raised a %s fault (0x%llx); after CONTINUE(0) "
		      "the first write raised: %s",
		      t_flag_name(fl), (unsigned long long)fl, s);
}

/* 4: re-protecting a dirty page: a write during its write-back faults. */
static int t_fact_reprotect(struct t_agent *ag)
{
	const uint32_t pg = T_P_MISSING;
	int ret;

	if (!ag->wp)
		return t_skip_no_wp(ag);
	ret = t_wp(ag, pg, 1, true);
	if (ret)
		return t_err(ag, "UFFDIO_WRITEPROTECT mode WP: %s",
			     strerror(-ret));
	if (t_cmd(ag, T_OP_WRITE, pg, 0, 24, T_VAL(4, 1)) ||
	    t_wp_fault_wait(ag, pg))
		return T_FAIL;
	/* The write-back reads the alias while the writer waits. */
	t_exp_set(ag, T_SEED(1, 0), pg);
	t_exp_put(ag, 8, T_VAL(3, 1));
	t_exp_put(ag, 16, T_VAL(3, 2));
	ret = t_send_all(ag->tx, ag->alias + (size_t)pg * T_PG, T_PG);
	if (!ret)
		ret = t_recv_all(ag->rx, ag->tmp, T_PG);
	if (ret)
		return t_err(ag, "sending the page: %s", strerror(-ret));
	if (t_page_cmp(ag, ag->tmp, "the page sent while the write waited"))
		return T_FAIL;
	ret = t_wp(ag, pg, 1, false);
	if (ret)
		return t_err(ag, "UFFDIO_WRITEPROTECT mode 0: %s",
			     strerror(-ret));
	if (t_reply_wait(ag))
		return T_FAIL;
	t_exp_put(ag, 24, T_VAL(4, 1));
	return t_page_cmp(ag, ag->alias + (size_t)pg * T_PG,
			  "the alias after the write");
}

static int t_blocks(struct t_agent *ag, long long *out)
{
	struct stat st;

	if (fstat(ag->memfd, &st))
		return t_err(ag, "fstat of the memfd: %s", strerror(errno));
	*out = (long long)st.st_blocks;
	return 0;
}

/* 5: a punched hole leaves the guest's mapping: MISSING, new bytes. */
static int t_fact_punch(struct t_agent *ag)
{
	const uint32_t p0 = T_P_PUNCH;
	struct uffd_msg m;
	off_t data;
	int ret;

	for (uint32_t pg = p0; pg < p0 + T_N_PUNCH; pg++)
		if (t_bring(ag, pg, T_SEED(5, 0)))
			return t_err_prefix(ag, "setup");
	/* p0 + 1 dirty (writable), the others clean (write-protected) */
	if (t_touch(ag, T_OP_WRITE, p0 + 1, 0, 8, T_VAL(5, 1), T_SEED_ANY))
		return t_err_prefix(ag, "setup");
	if (t_blocks(ag, &ag->blocks[0]))
		return T_FAIL;
	if (fallocate(ag->memfd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
		      (off_t)p0 * T_PG, (off_t)T_N_PUNCH * T_PG))
		return t_err(ag, "fallocate(PUNCH_HOLE): %s", strerror(errno));
	if (t_blocks(ag, &ag->blocks[1]))
		return T_FAIL;
	ag->punched = true;
	for (uint32_t pg = p0; pg < p0 + 2; pg++) {
		const char *state = pg == p0 ? "clean" : "dirty";

		if (t_cmd(ag, T_OP_READ, pg, 0, 0, 0) ||
		    t_fault_wait(ag, pg, &m))
			return T_FAIL;
		if (m.arg.pagefault.flags)
			return t_err(ag,
				     "%s page %u: fault flags %s (0x%llx), not "
				     "MISSING",
				     state, pg,
				     t_flag_name(m.arg.pagefault.flags),
				     (unsigned long long)m.arg.pagefault.flags);
		/* While the guest waits, the memfd has a hole there. */
		if (t_pread(ag, pg, ag->tmp))
			return T_FAIL;
		data = lseek(ag->memfd, (off_t)pg * T_PG, SEEK_DATA);
		if (!t_is_zero(ag->tmp) || data == (off_t)pg * T_PG)
			return t_err(ag,
				     "%s page %u: the memfd still holds data "
				     "after the punch",
				     state, pg);
		ret = t_land(ag, pg, T_SEED(5, 2));
		if (!ret)
			ret = t_continue(ag, pg, 1, true);
		if (ret)
			return t_err(ag, "resolving page %u: %s", pg,
				     strerror(-ret));
		if (t_reply_wait(ag))
			return T_FAIL;
		t_exp_set(ag, T_SEED(5, 2), pg);
		if (t_page_cmp(ag, ag->rep_data, state))
			return T_FAIL;
	}
	return T_OK;
}

/* 5b: st_blocks of the memfd drops by the punched pages. */
static int t_fact_punch_blocks(struct t_agent *ag)
{
	const long long want = (long long)T_N_PUNCH * T_PG / 512;
	long long drop = ag->blocks[0] - ag->blocks[1];

	if (!ag->punched)
		return t_err(ag, "not measured: fact 5 stopped before");
	if (drop != want)
		return t_err(ag, "st_blocks %lld -> %lld: -%lld, want -%lld",
			     ag->blocks[0], ag->blocks[1], drop, want);
	return t_note(ag, T_OK, "st_blocks %lld -> %lld", ag->blocks[0],
		      ag->blocks[1]);
}

/* 5i: a write as the first touch of a punched, write-protected page. */
static int t_fact_punch_write(struct t_agent *ag)
{
	const uint32_t pg = T_P_PUNCH + 2;
	bool same;

	if (!ag->punched)
		return t_err(ag, "not run: fact 5 stopped before the punch");
	if (t_touch(ag, T_OP_WRITE, pg, 0, 8, T_VAL(5, 3), T_SEED(5, 3)))
		return T_FAIL;
	t_exp_set(ag, T_SEED(5, 3), pg);
	t_exp_put(ag, 8, T_VAL(5, 3));
	same = !memcmp(ag->alias + (size_t)pg * T_PG, ag->exp, T_PG);
	return t_note(ag, T_INFO, "%s; the memfd then holds %s", ag->log,
		      same ? "the new bytes and the write" : "OTHER bytes");
}

/*
 * The system call the guest (one thread here) sleeps in, once it sleeps.
 * Returns 0 with it in *nr, or -1 (ag->why).
 */
static int t_guest_syscall(struct t_agent *ag, long *nr)
{
	uint64_t deadline = t_now_ms() + T_WAIT_MS;
	char path[64], line[256];
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "/proc/%d/syscall", (int)ag->guest);
	for (;;) {
		fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			return t_err(ag, "%s: %s", path, strerror(errno));
		n = read(fd, line, sizeof(line) - 1);
		close(fd);
		if (n <= 0)
			return t_err(ag, "reading %s: %s", path,
				     n < 0 ? strerror(errno) : "empty");
		line[n] = '\0';
		if (strncmp(line, "running", 7)) {
			*nr = strtol(line, NULL, 10);
			return 0;
		}
		if (t_now_ms() >= deadline)
			return t_err(ag, "%s: still running", path);
		sched_yield();
	}
}

/* 6: the guest's DONTNEED: REMOVE (it waits), page kept, MINOR. */
static int t_fact_remove(struct t_agent *ag)
{
	const uint32_t pg = T_P_REMOVE;
	const uint64_t at = ag->base + (uint64_t)pg * T_PG;
	struct pollfd p[2];
	struct uffd_msg m;
	char s[96];
	off_t data;
	long nr = -1;
	int ret;

	if (t_bring(ag, pg, T_SEED(6, 0)) ||
	    t_touch(ag, T_OP_WRITE, pg, 0, 32, T_VAL(6, 1), T_SEED_ANY))
		return t_err_prefix(ag, "setup");
	if (t_cmd(ag, T_OP_DONTNEED, pg, 1, 0, 0))
		return T_FAIL;
	p[0] = (struct pollfd){ .fd = ag->uffd, .events = POLLIN };
	p[1] = (struct pollfd){ .fd = ag->sock, .events = POLLIN };
	ret = poll(p, 2, T_WAIT_MS);
	if (ret <= 0)
		return t_lose(ag, "no REMOVE event and no answer in %d ms",
			      T_WAIT_MS);
	if (p[1].revents)
		return t_err(ag,
			     "madvise returned before its REMOVE event was "
			     "read (event %s)",
			     p[0].revents ? "pending" : "absent");
	if (t_guest_syscall(ag, &nr))
		return T_FAIL;
	if (nr != SYS_madvise)
		return t_err(ag,
			     "with the REMOVE unread the guest sleeps in "
			     "syscall %ld, not madvise (%d)",
			     nr, SYS_madvise);
	if (poll(&p[1], 1, 0) != 0)
		return t_err(ag,
			     "the guest answered before the REMOVE was read");
	ret = t_wait(ag, &m);
	if (ret < 0)
		return T_FAIL;
	if (ret == T_EV_REP)
		return t_err(ag, "an answer instead of the REMOVE");
	if (m.event != UFFD_EVENT_REMOVE || m.arg.remove.start != at ||
	    m.arg.remove.end != at + T_PG) {
		t_msg_str(ag, &m, s, sizeof(s));
		return t_err(ag, "%s, not REMOVE of page %u", s, pg);
	}
	if (t_reply_wait(ag))
		return T_FAIL;
	/* Still in the memfd, with the guest's write. */
	t_exp_set(ag, T_SEED(6, 0), pg);
	t_exp_put(ag, 32, T_VAL(6, 1));
	if (t_pread(ag, pg, ag->tmp) ||
	    t_page_cmp(ag, ag->tmp, "pread of the memfd after DONTNEED") ||
	    t_page_cmp(ag, ag->alias + (size_t)pg * T_PG, "the alias"))
		return T_FAIL;
	data = lseek(ag->memfd, (off_t)pg * T_PG, SEEK_DATA);
	if (data != (off_t)pg * T_PG)
		return t_err(ag, "lseek(SEEK_DATA) of page %u: %lld (%s)", pg,
			     (long long)data, strerror(errno));
	if (t_cmd(ag, T_OP_READ, pg, 0, 0, 0) || t_fault_wait(ag, pg, &m))
		return T_FAIL;
	if (m.arg.pagefault.flags != UFFD_PAGEFAULT_FLAG_MINOR)
		return t_err(ag, "next read: %s fault (0x%llx), not MINOR",
			     t_flag_name(m.arg.pagefault.flags),
			     (unsigned long long)m.arg.pagefault.flags);
	ret = t_continue(ag, pg, 1, true);
	if (ret)
		return t_err(ag, "UFFDIO_CONTINUE: %s", strerror(-ret));
	if (t_reply_wait(ag))
		return T_FAIL;
	return t_page_cmp(ag, ag->rep_data, "the guest's read after MINOR");
}

/* 6w: DONTNEED of a write-protected page, MINOR, CONTINUE(WP), write. */
static int t_fact_remove_wp(struct t_agent *ag)
{
	const uint32_t pg = T_P_REMOVE + 1;
	struct uffd_msg m;
	int ret;

	if (!ag->wp)
		return t_skip_no_wp(ag);
	if (t_bring(ag, pg, T_SEED(6, 2)))
		return t_err_prefix(ag, "setup");
	if (t_touch(ag, T_OP_DONTNEED, pg, 1, 0, 0, T_SEED_ANY))
		return T_FAIL;
	if (strncmp(ag->log, "REMOVE", 6))
		return t_err(ag, "DONTNEED raised %s, not REMOVE", ag->log);
	if (t_cmd(ag, T_OP_READ, pg, 0, 0, 0) || t_fault_wait(ag, pg, &m))
		return T_FAIL;
	if (m.arg.pagefault.flags != UFFD_PAGEFAULT_FLAG_MINOR)
		return t_err(ag, "next read: %s fault (0x%llx), not MINOR",
			     t_flag_name(m.arg.pagefault.flags),
			     (unsigned long long)m.arg.pagefault.flags);
	ret = t_continue(ag, pg, 1, true);
	if (ret)
		return t_err(ag, "UFFDIO_CONTINUE: %s", strerror(-ret));
	if (t_reply_wait(ag))
		return T_FAIL;
	t_exp_set(ag, T_SEED(6, 2), pg);
	if (t_page_cmp(ag, ag->rep_data, "the guest's read after MINOR"))
		return T_FAIL;
	if (t_cmd(ag, T_OP_WRITE, pg, 0, 40, T_VAL(6, 3)) ||
	    t_wp_fault_wait(ag, pg))
		return t_err_prefix(ag, "the write after the re-fault");
	ret = t_wp(ag, pg, 1, false);
	if (ret)
		return t_err(ag, "UFFDIO_WRITEPROTECT mode 0: %s",
			     strerror(-ret));
	return t_reply_wait(ag) ? T_FAIL : T_OK;
}

/* 6i: a write as the first touch after DONTNEED of a protected page. */
static int t_fact_remove_write(struct t_agent *ag)
{
	const uint32_t pg = T_P_REMOVE + 2;
	bool same;

	if (t_bring(ag, pg, T_SEED(6, 4)) ||
	    t_touch(ag, T_OP_DONTNEED, pg, 1, 0, 0, T_SEED_ANY))
		return t_err_prefix(ag, "setup");
	if (t_touch(ag, T_OP_WRITE, pg, 0, 8, T_VAL(6, 5), T_SEED(6, 6)))
		return T_FAIL;
	t_exp_set(ag, T_SEED(6, 4), pg);
	t_exp_put(ag, 8, T_VAL(6, 5));
	same = !memcmp(ag->alias + (size_t)pg * T_PG, ag->exp, T_PG);
	return t_note(ag, T_INFO, "%s; the memfd then holds %s", ag->log,
		      same ? "the old bytes and the write" : "OTHER bytes");
}

static const char *t_errname(int e)
{
	const char *n = strerrorname_np(e);

	return n ? n : "?";
}

/*
 * process_madvise(pidfd of the guest, @advice) of page @pg, called by a
 * helper process: if the kernel takes it, the caller waits in it until the
 * REMOVE event is read, which must not be the fault loop's own thread.
 * Events meanwhile are served and named in ag->log. Returns 0 with the
 * call's result (or -errno) in *res, or -1 (ag->why).
 */
static int t_pmadvise(struct t_agent *ag, uint32_t pg, int advice, long *res)
{
	uint64_t deadline = t_now_ms() + T_WAIT_MS, now;
	struct pollfd p[2];
	struct uffd_msg m;
	bool got = false;
	int pfd[2], st, ret = 0;
	size_t len = 0;
	char s[96];
	pid_t pid;

	ag->log[0] = '\0';
	if (pipe2(pfd, O_CLOEXEC))
		return t_err(ag, "pipe2: %s", strerror(errno));
	fflush(NULL);
	pid = fork();
	if (pid < 0) {
		ret = t_err(ag, "fork: %s", strerror(errno));
		close(pfd[0]);
		close(pfd[1]);
		return ret;
	}
	if (pid == 0) {
		struct iovec iov = {
			.iov_base = (void *)(uintptr_t)(ag->base +
							(uint64_t)pg * T_PG),
			.iov_len = T_PG,
		};
		long r = syscall(SYS_process_madvise, ag->pidfd, &iov, 1,
				 advice, 0);
		long out = r < 0 ? -errno : r;

		_exit(write(pfd[1], &out, sizeof(out)) == sizeof(out) ? 0 : 1);
	}
	close(pfd[1]);
	while (!got && !ret) {
		now = t_now_ms();
		if (now >= deadline) {
			ret = t_err(ag, "process_madvise did not return");
			kill(pid, SIGKILL);
			break;
		}
		p[0] = (struct pollfd){ .fd = pfd[0], .events = POLLIN };
		p[1] = (struct pollfd){ .fd = ag->uffd, .events = POLLIN };
		if (poll(p, 2, (int)(deadline - now)) <= 0)
			continue;
		if ((p[1].revents & POLLIN) &&
		    read(ag->uffd, &m, sizeof(m)) == sizeof(m)) {
			t_msg_str(ag, &m, s, sizeof(s));
			if (len < sizeof(ag->log))
				len += (size_t)snprintf(
					ag->log + len, sizeof(ag->log) - len,
					"%s%s", len ? ", " : "", s);
			t_serve(ag, &m, T_SEED_ANY);
			continue;
		}
		if (p[0].revents) {
			got = read(pfd[0], res, sizeof(*res)) == sizeof(*res);
			if (!got)
				ret = t_err(ag, "the helper died");
		}
	}
	close(pfd[0]);
	waitpid(pid, &st, 0);
	if (!ag->log[0])
		snprintf(ag->log, sizeof(ag->log), "none");
	return ret;
}

/*
 * 7, 7p, 7q: process_madvise of a guest page from the agent (recorded);
 * @unalias: the agent's alias drops its own PTE of the page first, so that
 * only the guest maps it.
 */
static int t_fact_pmadv(struct t_agent *ag, uint32_t pg, int advice,
			bool unalias)
{
	char events[T_WHY], res_s[64];
	long res;
	bool same;

	if (ag->pidfd < 0)
		return t_note(ag, T_INFO, "no pidfd of the guest");
	if (t_bring(ag, pg, T_SEED(7, 0)))
		return t_err_prefix(ag, "setup");
	if (unalias &&
	    madvise(ag->alias + (size_t)pg * T_PG, T_PG, MADV_DONTNEED))
		return t_err(ag, "madvise(MADV_DONTNEED) of the alias: %s",
			     strerror(errno));
	if (t_pmadvise(ag, pg, advice, &res))
		return T_FAIL;
	snprintf(events, sizeof(events), "%s", ag->log);
	if (res < 0)
		snprintf(res_s, sizeof(res_s), "-1 %s (%s)",
			 t_errname((int)-res), strerror((int)-res));
	else
		snprintf(res_s, sizeof(res_s), "%ld", res);
	if (t_touch(ag, T_OP_READ, pg, 0, 0, 0, T_SEED(7, 1)))
		return T_FAIL;
	t_exp_set(ag, T_SEED(7, 0), pg);
	same = !memcmp(ag->rep_data, ag->exp, T_PG);
	/* 7q: the cache samples access this way (floop_cache.c). */
	if (unalias && !same)
		return t_err(ag,
			     "returned %s; the guest's next read: %s, OTHER "
			     "bytes",
			     res_s, ag->log);
	if (unalias)
		return t_note(ag,
			      res == T_PG && strstr(ag->log, "MINOR") ? T_OK
								      : T_SKIP,
			      "returned %s; events meanwhile: %s; the guest's "
			      "next read: %s, same bytes%s",
			      res_s, events, ag->log,
			      res == T_PG && strstr(ag->log, "MINOR")
				      ? ""
				      : " (the clock then sees first touches "
					"only)");
	return t_note(ag, T_INFO,
		      "returned %s; events meanwhile: %s; the guest's next "
		      "read: %s, %s",
		      res_s, events, ag->log,
		      same ? "same bytes" : "OTHER bytes");
}

static int t_fact_pmadv_dontneed(struct t_agent *ag)
{
	return t_fact_pmadv(ag, T_P_PMADV, MADV_DONTNEED, false);
}

static int t_fact_pmadv_pageout(struct t_agent *ag)
{
	return t_fact_pmadv(ag, T_P_PMADV + 1, MADV_PAGEOUT, false);
}

static int t_fact_pmadv_pageout_unaliased(struct t_agent *ag)
{
	return t_fact_pmadv(ag, T_P_PMADV + 2, MADV_PAGEOUT, true);
}

static int t_copy(struct t_agent *ag, uint32_t pg, uint64_t seed, bool wp)
{
	struct uffdio_copy c = {
		.dst = ag->base + (uint64_t)pg * T_PG,
		.src = (uintptr_t)ag->tmp,
		.len = T_PG,
		.mode = wp ? UFFDIO_COPY_MODE_WP : 0,
	};

	pattern_fill(ag->tmp, seed, pg);
	if (ioctl(ag->uffd, UFFDIO_COPY, &c))
		return -errno;
	return c.copy == T_PG ? 0 : -EIO;
}

/* A MISSING read fault on @pg resolved by UFFDIO_COPY of @seed. */
static int t_copy_read(struct t_agent *ag, uint32_t pg, uint64_t seed, bool wp)
{
	struct uffd_msg m;
	int ret;

	if (t_cmd(ag, T_OP_READ, pg, 0, 0, 0) || t_fault_wait(ag, pg, &m))
		return T_FAIL;
	if (m.arg.pagefault.flags)
		return t_err(ag, "fault flags %s (0x%llx), not MISSING",
			     t_flag_name(m.arg.pagefault.flags),
			     (unsigned long long)m.arg.pagefault.flags);
	ret = t_copy(ag, pg, seed, wp);
	if (ret)
		return t_err(ag, "UFFDIO_COPY%s: %s", wp ? " (MODE_WP)" : "",
			     strerror(-ret));
	if (t_reply_wait(ag))
		return T_FAIL;
	t_exp_set(ag, seed, pg);
	if (t_page_cmp(ag, ag->rep_data, "the guest read") ||
	    t_page_cmp(ag, ag->alias + (size_t)pg * T_PG, "the alias") ||
	    t_pread(ag, pg, ag->tmp) ||
	    t_page_cmp(ag, ag->tmp, "pread of the memfd"))
		return T_FAIL;
	return T_OK;
}

/* 8: UFFDIO_COPY into the shmem range registered MISSING. */
static int t_fact_copy(struct t_agent *ag)
{
	return t_copy_read(ag, T_P_COPY, T_SEED(8, 0), false);
}

/* 8w: UFFDIO_COPY_MODE_WP: the first write raises a WP fault. */
static int t_fact_copy_wp(struct t_agent *ag)
{
	const uint32_t pg = T_P_COPY + 1;
	int ret;

	if (!ag->wp)
		return t_skip_no_wp(ag);
	if (t_copy_read(ag, pg, T_SEED(8, 1), true))
		return T_FAIL;
	if (t_cmd(ag, T_OP_WRITE, pg, 0, 8, T_VAL(8, 2)) ||
	    t_wp_fault_wait(ag, pg))
		return T_FAIL;
	ret = t_wp(ag, pg, 1, false);
	if (ret)
		return t_err(ag, "UFFDIO_WRITEPROTECT mode 0: %s",
			     strerror(-ret));
	if (t_reply_wait(ag))
		return T_FAIL;
	t_exp_put(ag, 8, T_VAL(8, 2));
	return t_page_cmp(ag, ag->alias + (size_t)pg * T_PG, "the alias");
}

/* 8x: UFFDIO_COPY onto a page the memfd holds (unmapped) fails with
 * EEXIST and leaves its bytes: the cache then writes the run's rest into
 * the memfd and maps it with CONTINUE. */
static int t_fact_copy_exists(struct t_agent *ag)
{
	const uint32_t pg = T_P_COPYX;
	int ret;

	pattern_fill(ag->tmp, T_SEED(8, 3), pg);
	if (pwrite(ag->memfd, ag->tmp, T_PG, (off_t)pg * T_PG) != T_PG)
		return t_err(ag, "pwrite: %s", strerror(errno));
	ret = t_copy(ag, pg, T_SEED(8, 4), false);
	if (ret != -EEXIST)
		return t_err(ag, "UFFDIO_COPY gave %s, not EEXIST",
			     ret ? strerror(-ret) : "success");
	t_exp_set(ag, T_SEED(8, 3), pg);
	if (t_pread(ag, pg, ag->tmp) ||
	    t_page_cmp(ag, ag->tmp, "pread of the memfd"))
		return T_FAIL;
	return T_OK;
}

/* 9: threads blocked on MISSING faults, each woken with its own page. */
static int t_fact_threads(struct t_agent *ag)
{
	const uint32_t p0 = T_P_THREADS;
	uint32_t seen = 0, nseen = 0, dups = 0;
	struct uffd_msg m;
	long long pg;
	char s[96];
	int ret;

	if (t_cmd(ag, T_OP_THREADS, p0, T_THREADS, 0, 0))
		return T_FAIL;
	/* Every thread's fault is read before any is resolved. */
	while (nseen < T_THREADS) {
		ret = t_wait(ag, &m);
		if (ret < 0)
			return T_FAIL;
		if (ret == T_EV_REP)
			return t_err(ag, "the guest answered after %u faults",
				     nseen);
		pg = m.event == UFFD_EVENT_PAGEFAULT ? t_msg_page(ag, &m) : -1;
		if (pg < p0 || pg >= p0 + T_THREADS || m.arg.pagefault.flags) {
			t_msg_str(ag, &m, s, sizeof(s));
			return t_err(ag, "%s among the threads' faults", s);
		}
		if (seen & (1u << (pg - p0))) {
			dups++;
			continue;
		}
		seen |= 1u << (pg - p0);
		nseen++;
	}
	for (uint32_t i = T_THREADS; i-- > 0;) {
		ret = t_land(ag, p0 + i, T_SEED(9, 0));
		if (!ret)
			ret = t_continue(ag, p0 + i, 1, true);
		if (ret)
			return t_err(ag, "resolving page %u: %s", p0 + i,
				     strerror(-ret));
	}
	if (t_reply_wait(ag))
		return T_FAIL;
	if (ag->rep->n != T_THREADS)
		return t_err(ag, "%u pages in the answer", ag->rep->n);
	for (uint32_t i = 0; i < T_THREADS; i++) {
		t_exp_set(ag, T_SEED(9, 0), p0 + i);
		snprintf(s, sizeof(s), "thread %u (page %u)", i, p0 + i);
		if (t_page_cmp(ag, ag->rep_data + (size_t)i * T_PG, s))
			return T_FAIL;
	}
	if (dups)
		return t_note(ag, T_OK, "%u duplicate faults", dups);
	return T_OK;
}

struct t_fact {
	const char *id;
	const char *text;
	int (*run)(struct t_agent *ag);
};

static const struct t_fact t_facts[] = {
	{ "1",
	  "a guest read of a page absent from the memfd raises a MISSING "
	  "fault; bytes recv()'d from TCP straight into the alias, then "
	  "UFFDIO_CONTINUE, give the guest that page",
	  t_fact_missing },
	{ "1w", "UFFDIO_CONTINUE_MODE_WP is accepted", t_fact_cont_wp },
	{ "2",
	  "a page in the memfd (written through the alias) but not mapped "
	  "raises a MINOR fault, CONTINUE alone maps it; so does its "
	  "neighbour (no fault-around)",
	  t_fact_minor },
	{ "3",
	  "after CONTINUE with WP the first write raises a WP|WRITE fault; "
	  "WRITEPROTECT mode 0 resolves and wakes; a second write does not "
	  "fault; the alias sees both",
	  t_fact_wp_first_write },
	{ "3b",
	  "while a fault is resolved (CONTINUE with DONTWAKE, the faulting "
	  "thread still asleep), another thread's write to the page raises a "
	  "WP fault: no write escapes dirty tracking",
	  t_fact_window },
	{ "3c",
	  "UFFDIO_WRITEPROTECT of a page not mapped yet, then a MINOR fault "
	  "resolved by CONTINUE without MODE_WP; the first write then raises",
	  t_fact_wp_then_continue },
	{ "4",
	  "re-protecting a dirty page (WRITEPROTECT mode WP): a write "
	  "during its write-back faults and waits, the bytes sent are the "
	  "protected ones, the write lands after",
	  t_fact_reprotect },
	{ "5",
	  "fallocate(PUNCH_HOLE) of pages mapped in the guest (clean and "
	  "dirty) unmaps them: the next read raises a MISSING fault, not "
	  "MINOR, and gets the new bytes",
	  t_fact_punch },
	{ "5b", "the memfd's st_blocks drops by exactly the punched pages",
	  t_fact_punch_blocks },
	{ "5i",
	  "a write as the first touch of a punched write-protected page "
	  "raises",
	  t_fact_punch_write },
	{ "6",
	  "the guest's MADV_DONTNEED of its MAP_SHARED page raises "
	  "UFFD_EVENT_REMOVE and waits in madvise until it is read; the page "
	  "stays in the memfd; the next read raises a MINOR fault",
	  t_fact_remove },
	{ "6w",
	  "DONTNEED of a write-protected page: the MINOR re-fault's "
	  "CONTINUE with WP, then a write, raises a WP fault",
	  t_fact_remove_wp },
	{ "6i",
	  "a write as the first touch after DONTNEED of a write-protected "
	  "page raises",
	  t_fact_remove_write },
	{ "7",
	  "process_madvise(pidfd of the guest, MADV_DONTNEED) from the "
	  "agent",
	  t_fact_pmadv_dontneed },
	{ "7p",
	  "process_madvise(pidfd of the guest, MADV_PAGEOUT) from the agent, "
	  "of a page the alias maps too",
	  t_fact_pmadv_pageout },
	{ "7q",
	  "the same MADV_PAGEOUT of a page only the guest maps (the alias "
	  "dropped its PTE with MADV_DONTNEED first) unmaps it: the next "
	  "read is a MINOR fault and gets the same bytes (the cache samples "
	  "access so)",
	  t_fact_pmadv_pageout_unaliased },
	{ "8",
	  "UFFDIO_COPY into the MAP_SHARED shmem range registered MISSING "
	  "(how the cache lands a fetched page and maps it in one step): "
	  "the guest reads the bytes, they are in the memfd",
	  t_fact_copy },
	{ "8w", "UFFDIO_COPY_MODE_WP there: the first write raises a WP fault",
	  t_fact_copy_wp },
	{ "8x",
	  "UFFDIO_COPY onto a page the memfd holds gives EEXIST and leaves "
	  "its bytes (the cache then writes and CONTINUEs the rest)",
	  t_fact_copy_exists },
	{ "9",
	  "8 guest threads blocked at once on MISSING faults of distinct "
	  "pages, resolved in reverse by landing + CONTINUE, each get their "
	  "own page",
	  t_fact_threads },
};

static void t_report(struct t_agent *ag, int res, const struct t_fact *f)
{
	static const char *const tag[] = { "not ok", "ok", "skip", "info" };
	int i = res + 1;
	char *sum = ag->sum[i];
	size_t len = strlen(sum);

	if (ag->why[0])
		printf("%s - %s. %s: %s\n", tag[i], f->id, f->text, ag->why);
	else
		printf("%s - %s. %s\n", tag[i], f->id, f->text);
	snprintf(sum + len, sizeof(ag->sum[i]) - len, "%s%s", len ? " " : "",
		 f->id);
	if (res == T_FAIL)
		ag->failed++;
}

/* ------------------------------------------------------------ setup */

static int t_hello_recv(struct t_agent *ag, struct t_hello *h)
{
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} u;
	struct iovec iov = { .iov_base = h, .iov_len = sizeof(*h) };
	struct msghdr mh = {
		.msg_iov = &iov,
		.msg_iovlen = 1,
		.msg_control = u.buf,
		.msg_controllen = sizeof(u.buf),
	};
	struct cmsghdr *c;
	ssize_t n;

	n = recvmsg(ag->sock, &mh, MSG_CMSG_CLOEXEC);
	if (n != sizeof(*h)) {
		fprintf(stderr, "FAIL: no hello from the guest (%s)\n",
			n < 0 ? strerror(errno) : "EOF or short");
		return -1;
	}
	for (c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c))
		if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS)
			memcpy(&ag->uffd, CMSG_DATA(c), sizeof(int));
	h->why[sizeof(h->why) - 1] = '\0';
	return 0;
}

/* A loopback TCP connection: bytes sent on tx arrive on rx. */
static int t_tcp_pair(struct t_agent *ag)
{
	struct sockaddr_in a = {
		.sin_family = AF_INET,
		.sin_addr.s_addr = htonl(INADDR_LOOPBACK),
	};
	socklen_t alen = sizeof(a);
	int l, ret = 0;

	l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (l < 0)
		return -errno;
	if (bind(l, (struct sockaddr *)&a, sizeof(a)) || listen(l, 1) ||
	    getsockname(l, (struct sockaddr *)&a, &alen)) {
		ret = -errno;
		goto out_close;
	}
	ag->tx = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (ag->tx < 0 || connect(ag->tx, (struct sockaddr *)&a, sizeof(a))) {
		ret = -errno;
		goto out_close;
	}
	ag->rx = accept4(l, NULL, NULL, SOCK_CLOEXEC);
	if (ag->rx < 0)
		ret = -errno;
out_close:
	close(l);
	return ret;
}

static void t_print_env(const struct t_agent *ag)
{
	char thp[128] = "?";
	struct utsname u;
	ssize_t n;
	int fd;

	fd = open("/sys/kernel/mm/transparent_hugepage/shmem_enabled",
		  O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		n = read(fd, thp, sizeof(thp) - 1);
		thp[n > 0 ? n : 0] = '\0';
		thp[strcspn(thp, "\n")] = '\0';
		close(fd);
	}
	uname(&u);
	printf("# kernel %s; shmem THP: %s\n", u.release, thp);
	printf("# uffd features offered 0x%llx (WP_HUGETLBFS_SHMEM %s, "
	       "WP_UNPOPULATED %s, POISON %s), enabled 0x%llx\n",
	       (unsigned long long)ag->offered,
	       ag->offered & UFFD_FEATURE_WP_HUGETLBFS_SHMEM ? "yes" : "no",
	       ag->offered & UFFD_FEATURE_WP_UNPOPULATED ? "yes" : "no",
	       ag->offered & UFFD_FEATURE_POISON ? "yes" : "no",
	       (unsigned long long)ag->enabled);
	printf("# registered MISSING|MINOR%s, range ioctls 0x%llx (COPY %s, "
	       "CONTINUE %s, WRITEPROTECT %s)\n",
	       ag->wp ? "|WP" : "", (unsigned long long)ag->ioctls,
	       ag->ioctls & (1ull << _UFFDIO_COPY) ? "yes" : "no",
	       ag->ioctls & (1ull << _UFFDIO_CONTINUE) ? "yes" : "no",
	       ag->ioctls & (1ull << _UFFDIO_WRITEPROTECT) ? "yes" : "no");
}

/*
 * Ends the guest: it exits when its socket closes; killed if it cannot
 * (lost in a fault). Returns 0 if it exited 0 by itself.
 */
static int t_guest_stop(struct t_agent *ag)
{
	struct pollfd p = { .fd = ag->pidfd, .events = POLLIN };
	bool killed = false;
	int st = 0;

	if (ag->sock >= 0)
		close(ag->sock);
	ag->sock = -1;
	if (ag->lost || (ag->pidfd >= 0 && poll(&p, 1, T_WAIT_MS) <= 0)) {
		kill(ag->guest, SIGKILL);
		killed = true;
	}
	if (waitpid(ag->guest, &st, 0) < 0)
		return -1;
	if (killed)
		return -1;
	if (!WIFEXITED(st) || WEXITSTATUS(st)) {
		fprintf(stderr, "the guest ended with status 0x%x\n", st);
		return -1;
	}
	return 0;
}

static void t_agent_free(struct t_agent *ag)
{
	if (ag->alias && ag->alias != MAP_FAILED)
		munmap(ag->alias, T_SIZE);
	if (ag->tx >= 0)
		close(ag->tx);
	if (ag->rx >= 0)
		close(ag->rx);
	if (ag->uffd >= 0)
		close(ag->uffd);
	if (ag->pidfd >= 0)
		close(ag->pidfd);
	if (ag->memfd >= 0)
		close(ag->memfd);
	free(ag->rep);
	free(ag);
}

static int t_run(struct t_agent *ag)
{
	struct t_hello h;
	int res, ret;

	memset(&h, 0, sizeof(h));
	if (t_hello_recv(ag, &h))
		return 1;
	if (h.status == T_HELLO_SKIP) {
		printf("SKIP: %s\n", h.why);
		return 77;
	}
	if (h.status != T_HELLO_OK || ag->uffd < 0) {
		fprintf(stderr, "FAIL: guest setup: %s\n",
			h.why[0] ? h.why : "no uffd");
		return 1;
	}
	ag->base = h.base;
	ag->offered = h.offered;
	ag->enabled = h.enabled;
	ag->ioctls = h.ioctls;
	ag->wp = h.wp;
	t_print_env(ag);
	ag->alias = mmap(NULL, T_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED,
			 ag->memfd, 0);
	if (ag->alias == MAP_FAILED) {
		fprintf(stderr, "FAIL: mmap of the alias: %s\n",
			strerror(errno));
		return 1;
	}
	ret = t_tcp_pair(ag);
	if (ret) {
		fprintf(stderr, "FAIL: loopback TCP connection: %s\n",
			strerror(-ret));
		return 1;
	}
	for (size_t i = 0; i < T_ARRAY_LEN(t_facts); i++) {
		const struct t_fact *f = &t_facts[i];

		if (!ag->lost)
			t_settle(ag);
		if (ag->lost) {
			t_note(ag, T_FAIL, "not run: %s", ag->lost_why);
			t_report(ag, T_FAIL, f);
			continue;
		}
		ag->why[0] = '\0';
		res = f->run(ag);
		if (ag->lost)
			res = T_FAIL;
		t_report(ag, res, f);
	}
	if (!ag->lost)
		t_settle(ag);
	return ag->failed ? 1 : 0;
}

int main(void)
{
	struct t_agent *ag;
	int sv[2], memfd, ret;
	struct utsname u;

	setvbuf(stdout, NULL, _IOLBF, 0);
	ag = calloc(1, sizeof(*ag));
	if (!ag)
		return 1;
	ag->sock = ag->uffd = ag->memfd = ag->tx = ag->rx = ag->pidfd = -1;
	ag->cont_wp = -1;
	ag->rep = malloc(T_REP_MAX);
	ag->memfd = memfd_create("farpage-cache", MFD_CLOEXEC);
	if (!ag->rep || ag->memfd < 0 || ftruncate(ag->memfd, T_SIZE) ||
	    socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv)) {
		fprintf(stderr, "FAIL: setup: %s\n", strerror(errno));
		t_agent_free(ag);
		return 1;
	}
	ag->rep_data = (uint8_t *)ag->rep + sizeof(*ag->rep);
	fflush(NULL);
	ag->guest = fork();
	if (ag->guest < 0) {
		fprintf(stderr, "FAIL: fork: %s\n", strerror(errno));
		close(sv[0]);
		close(sv[1]);
		t_agent_free(ag);
		return 1;
	}
	if (ag->guest == 0) {
		memfd = ag->memfd;
		ag->memfd = -1;
		close(sv[0]);
		t_agent_free(ag);
		exit(t_guest_main(sv[1], memfd));
	}
	close(sv[1]);
	ag->sock = sv[0];
	ag->pidfd = (int)syscall(SYS_pidfd_open, ag->guest, 0);

	ret = t_run(ag);
	if (t_guest_stop(ag) && ret != 77) {
		fprintf(stderr, "FAIL: the guest did not end cleanly\n");
		ret = 1;
	}
	if (ret != 77) {
		uname(&u);
		printf("# summary (kernel %s): hold: %s; do not hold: %s; "
		       "skipped: %s; info: %s\n",
		       u.release, ag->sum[1][0] ? ag->sum[1] : "-",
		       ag->sum[0][0] ? ag->sum[0] : "-",
		       ag->sum[2][0] ? ag->sum[2] : "-",
		       ag->sum[3][0] ? ag->sum[3] : "-");
		printf("%s\n", ret ? "FAIL" : "PASS");
	}
	t_agent_free(ag);
	return ret;
}
