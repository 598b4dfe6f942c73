// SPDX-License-Identifier: MIT
/*
 * RDMA transport on a real verbs device (SoftRoCE in the test VM): two
 * contexts exchange endpoints directly, every page of a 16 MiB pool is read
 * and verified both ways, every page written with RDMA WRITEs and read
 * back, then errors: bounds, full queue, a corrupted rkey (remote access
 * error, peer DOWN, re-exchange, reads verify again), a revoked peer (its
 * READs on the old QP fail, a new exchange with a fresh PSN heals it), a
 * restarted owner (STALE), close and destroy with READs in flight.
 * Throughout, the session side's verbs calls (ibv_create_cq/create_qp/
 * modify_qp/query_qp, wrapped at link time) are checked to be made without
 * the context lock the fault loop posts under.
 * Exits 77 when there is no RDMA device.
 *
 * env: FARPAGE_RDMA_DEVS=rxe0,rxe1 (default: the first two devices, or the
 *      first one twice), FARPAGE_RDMA_DATA_IPS=10.0.0.1,10.0.0.2 (RoCE v2
 *      GID by address), FARPAGE_RDMA_DEPTH (default 128), T_DEBUG=1,
 *      T_CASES=connect,close (only these cases, in their usual order;
 *      connect sets up what the others use).
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/verbs.h>
#include <liburing.h>

#include "log.h"
#include "msg.h"
#include "pattern.h"
#include "req.h"
#include "xport.h"
#include "xport_rdma.h"
#include "xport_rdma_int.h"

#define T_POOL_SIZE (16ull << 20)
#define T_PAGES	    (T_POOL_SIZE / PATTERN_PAGE)
#define T_TAGS	    (T_PAGES + 64)
#define T_NODE_A    1
#define T_NODE_B    2
#define T_WAIT_MS   60000u
#define T_WSEED	    0x77e1735eedull /* what writes put in a pool */

#include "t_xport.h"

/* One node: pool, landing area, verbs context, its fault loop. */
struct t_side {
	const char *name;
	char dev[IBV_SYSFS_NAME_MAX];
	const char *data_ip;
	uint64_t node;
	uint64_t seed;
	uint64_t instance; /* published with the MR */
	uint8_t *pool;
	int pool_fd;
	uint8_t *land;
	struct xport_rdma_ctx *ctx;
	struct t_drv d;
	struct xport_peer *p; /* towards the other side */
	unsigned int depth;   /* READs in flight per QP */
};

static int t_side_start(struct t_side *s);

/*
 * The session thread's QP calls must not hold ctx->lock (the fault loop
 * takes it to post every READ): the session entry points and the verbs
 * calls they make are wrapped (-Wl,--wrap, see tests/CMakeLists.txt); a
 * verbs call made inside a session call while this thread owns the lock
 * of a context is counted.
 */
static struct t_side *t_watch[2];
static __thread int t_in_session;
static unsigned long t_sess_verbs, t_sess_verbs_locked;

static void t_verbs_probe(const char *what)
{
	int me = (int)syscall(SYS_gettid);

	if (!t_in_session)
		return;
	__atomic_fetch_add(&t_sess_verbs, 1, __ATOMIC_RELAXED);
	for (int i = 0; i < 2; i++) {
		struct xport_rdma_ctx *c = t_watch[i] ? t_watch[i]->ctx : NULL;

		/* glibc: the owner's TID of a locked normal mutex */
		if (c && __atomic_load_n(&c->lock.__data.__owner,
					 __ATOMIC_RELAXED) == me) {
			__atomic_fetch_add(&t_sess_verbs_locked, 1,
					   __ATOMIC_RELAXED);
			fprintf(stderr, "  %s with ctx->lock held\n", what);
		}
	}
}

struct ibv_cq *__real_ibv_create_cq(struct ibv_context *c, int cqe,
				    void *cq_ctx, struct ibv_comp_channel *ch,
				    int vec);
struct ibv_cq *__wrap_ibv_create_cq(struct ibv_context *c, int cqe,
				    void *cq_ctx, struct ibv_comp_channel *ch,
				    int vec);
struct ibv_cq *__wrap_ibv_create_cq(struct ibv_context *c, int cqe,
				    void *cq_ctx, struct ibv_comp_channel *ch,
				    int vec)
{
	t_verbs_probe("ibv_create_cq");
	return __real_ibv_create_cq(c, cqe, cq_ctx, ch, vec);
}

struct ibv_qp *__real_ibv_create_qp(struct ibv_pd *pd,
				    struct ibv_qp_init_attr *a);
struct ibv_qp *__wrap_ibv_create_qp(struct ibv_pd *pd,
				    struct ibv_qp_init_attr *a);
struct ibv_qp *__wrap_ibv_create_qp(struct ibv_pd *pd,
				    struct ibv_qp_init_attr *a)
{
	t_verbs_probe("ibv_create_qp");
	return __real_ibv_create_qp(pd, a);
}

int __real_ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *a, int mask);
int __wrap_ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *a, int mask);
int __wrap_ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *a, int mask)
{
	t_verbs_probe("ibv_modify_qp");
	return __real_ibv_modify_qp(qp, a, mask);
}

int __real_ibv_query_qp(struct ibv_qp *qp, struct ibv_qp_attr *a, int mask,
			struct ibv_qp_init_attr *ia);
int __wrap_ibv_query_qp(struct ibv_qp *qp, struct ibv_qp_attr *a, int mask,
			struct ibv_qp_init_attr *ia);
int __wrap_ibv_query_qp(struct ibv_qp *qp, struct ibv_qp_attr *a, int mask,
			struct ibv_qp_init_attr *ia)
{
	t_verbs_probe("ibv_query_qp");
	return __real_ibv_query_qp(qp, a, mask, ia);
}

#define T_SESSION_WRAP(ret_t, name, params, args) \
	ret_t __real_##name params;               \
	ret_t __wrap_##name params;               \
	ret_t __wrap_##name params                \
	{                                         \
		ret_t ret_;                       \
		t_in_session++;                   \
		ret_ = __real_##name args;        \
		t_in_session--;                   \
		return ret_;                      \
	}

T_SESSION_WRAP(int, xport_rdma_peer_prepare,
	       (struct xport_rdma_ctx * ctx, uint64_t peer,
		struct xport_rdma_ep *local),
	       (ctx, peer, local))
T_SESSION_WRAP(int, xport_rdma_peer_connect,
	       (struct xport_rdma_ctx * ctx, uint64_t peer,
		const struct xport_rdma_remote *r),
	       (ctx, peer, r))
T_SESSION_WRAP(int, xport_rdma_peer_needs_exchange,
	       (struct xport_rdma_ctx * ctx, uint64_t peer), (ctx, peer))
T_SESSION_WRAP(int, xport_rdma_peer_revoke,
	       (struct xport_rdma_ctx * ctx, uint64_t peer), (ctx, peer))

static int t_side_init(struct t_side *s)
{
	uint64_t i;
	int ret;

	s->pool_fd = memfd_create("t_rdma_pool", MFD_CLOEXEC);
	if (s->pool_fd < 0 || ftruncate(s->pool_fd, T_POOL_SIZE))
		return -errno;
	s->pool = mmap(NULL, T_POOL_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED,
		       s->pool_fd, 0);
	s->land = mmap(NULL, T_POOL_SIZE, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (s->pool == MAP_FAILED || s->land == MAP_FAILED)
		return -errno;
	for (i = 0; i < T_PAGES; i++)
		pattern_fill(s->pool + i * PATTERN_PAGE, s->seed, i);
	ret = t_drv_alloc(&s->d, &xport_rdma_ops, REQ_XPORT_VERBS);
	if (ret)
		return ret;
	return t_side_start(s);
}

/* The agent's part: verbs context on the pool, transport on its loop. */
static int t_side_start(struct t_side *s)
{
	struct xport_rdma_cfg rc = {
		.device = s->dev,
		.gid_index = -1,
		.data_ip = s->data_ip,
		.depth = s->depth,
	};
	struct xport_cfg xc = { 0 };
	int ret;

	rc.pool = s->pool;
	rc.pool_len = T_POOL_SIZE;
	ret = xport_rdma_ctx_create(&rc, &s->ctx);
	if (ret)
		return ret;
	xc.ring = &s->d.ring;
	xc.done = t_done;
	xc.arg = &s->d;
	xc.land = s->land;
	xc.land_len = T_POOL_SIZE;
	xc.ctx = s->ctx;
	return s->d.ops->create(&xc, &s->d.x);
}

static void t_side_fini(struct t_side *s)
{
	if (s->d.x)
		s->d.ops->destroy(s->d.x);
	xport_rdma_ctx_destroy(s->ctx);
	t_drv_free(&s->d);
	munmap(s->pool, T_POOL_SIZE);
	munmap(s->land, T_POOL_SIZE);
	close(s->pool_fd);
}

static int t_open(struct t_side *s, uint64_t node, uint64_t instance)
{
	struct xport_peer_info info = { .node = node, .instance = instance };

	snprintf(info.data_addr, sizeof(info.data_addr), "verbs");
	return s->d.ops->peer_open(s->d.x, &info, &s->p);
}

/* What the coordinator relays: the endpoint through a CBOR round trip. */
static int t_ep_relay(const struct xport_rdma_ep *in, uint64_t node,
		      uint64_t peer, struct xport_rdma_ep *out)
{
	struct msg m, d;
	uint8_t *buf;
	size_t len;
	int ret;

	msg_init(&m, MSG_T_ENDPOINT_PUT);
	m.node = node;
	m.peer = peer;
	xport_rdma_ep_to_msg(in, &m);
	ret = msg_encode(&m, &buf, &len);
	msg_fini(&m);
	if (ret)
		return ret;
	ret = msg_decode(buf, len, &d);
	free(buf);
	if (ret)
		return ret;
	ret = xport_rdma_ep_from_msg(&d, out);
	msg_fini(&d);
	return ret;
}

/* Polls both loops a little: drains after errors need the fault loop. */
static void t_poll_both(struct t_side *a, struct t_side *b)
{
	t_drv_poll(&a->d, 5);
	t_drv_poll(&b->d, 5);
}

/* @s's view of @o: o's endpoint (through a message) and pool MR. */
static int t_remote(struct t_side *o, struct t_side *s,
		    const struct xport_rdma_ep *ep, struct xport_rdma_remote *r)
{
	memset(r, 0, sizeof(*r));
	T_CHECK(t_ep_relay(ep, o->node, s->node, &r->ep) == 0);
	xport_rdma_mr_get(o->ctx, &r->mr_addr, &r->rkey, &r->mr_len);
	r->instance = o->instance;
	return 0;
}

/*
 * The agent's control step for both nodes: re-prepare what needs it,
 * publish, connect to what the other published. @rkey_xor corrupts the
 * rkey a learns for b.
 */
static int t_exchange(struct t_side *a, struct t_side *b, uint32_t rkey_xor)
{
	struct xport_rdma_ep ea, eb;
	struct xport_rdma_remote ra, rb;
	uint64_t end = t_now_ms() + T_WAIT_MS;
	int ret;

	if (xport_rdma_peer_needs_exchange(a->ctx, b->node))
		fprintf(stderr, "  %s: QP to %s needs a new exchange\n",
			a->name, b->name);
	if (xport_rdma_peer_needs_exchange(b->ctx, a->node))
		fprintf(stderr, "  %s: QP to %s needs a new exchange\n",
			b->name, a->name);
	while ((ret = xport_rdma_peer_prepare(a->ctx, b->node, &ea)) ==
		       -EBUSY &&
	       t_now_ms() < end)
		t_poll_both(a, b);
	T_CHECK(ret == 0);
	while ((ret = xport_rdma_peer_prepare(b->ctx, a->node, &eb)) ==
		       -EBUSY &&
	       t_now_ms() < end)
		t_poll_both(a, b);
	T_CHECK(ret == 0);
	T_CHECK(t_remote(b, a, &eb, &rb) == 0);
	T_CHECK(t_remote(a, b, &ea, &ra) == 0);
	rb.rkey ^= rkey_xor;
	while ((ret = xport_rdma_peer_connect(a->ctx, b->node, &rb)) ==
		       -EBUSY &&
	       t_now_ms() < end)
		t_poll_both(a, b);
	T_CHECK(ret == 0);
	while ((ret = xport_rdma_peer_connect(b->ctx, a->node, &ra)) ==
		       -EBUSY &&
	       t_now_ms() < end)
		t_poll_both(a, b);
	T_CHECK(ret == 0);
	T_CHECK(xport_rdma_peer_is_connected_to(a->ctx, b->node, &rb.ep));
	T_CHECK(xport_rdma_peer_is_connected_to(b->ctx, a->node, &ra.ep));
	T_CHECK(!xport_rdma_peer_needs_exchange(a->ctx, b->node));
	T_CHECK(!xport_rdma_peer_needs_exchange(b->ctx, a->node));
	return 0;
}

/* A read into (or write from) @buf of @len bytes at the other side's @off. */
static int t_post(struct t_side *s, bool write, uint64_t off, uint32_t len,
		  uint8_t *buf, uint64_t tag)
{
	if (write)
		return s->d.ops->write(s->p, off, len, buf, 0, tag);
	return s->d.ops->read(s->p, off, len, buf, tag);
}

/*
 * Reads (or writes) @n chunks of @len bytes of the other side's pool from
 * offset 0 on, chunk i at s->land + i * len, up to @window in flight; each
 * is done once, with status 0.
 */
static int t_xfer_all(struct t_side *s, bool write, uint64_t n, uint32_t len,
		      unsigned int window)
{
	struct t_drv *d = &s->d;
	uint64_t next = 0, i, end = t_now_ms() + T_WAIT_MS;
	int ret;

	T_CHECK(n * len <= T_POOL_SIZE && n <= T_TAGS);
	t_drv_reset(d);
	while (d->ndone < n) {
		while (next < n && next - d->ndone < window) {
			ret = t_post(s, write, next * len, len,
				     s->land + next * len, next);
			if (ret == -EAGAIN)
				break;
			T_CHECK(ret == 0);
			next++;
		}
		T_CHECK(t_now_ms() < end);
		T_CHECK(t_drv_poll(d, 100) == 0);
	}
	T_CHECK(d->ndone == n && d->nfail == 0 && d->bad_tags == 0);
	for (i = 0; i < n; i++)
		T_CHECK(d->calls[i] == 1 && d->status[i] == 0);
	return 0;
}

/* t_xfer_all() reads; every byte verified as @seed's pattern. */
static int t_read_all_seed(struct t_side *s, uint64_t n, uint32_t len,
			   unsigned int window, uint64_t seed)
{
	uint64_t i;

	memset(s->land, 0, n * len);
	T_CHECK(t_xfer_all(s, false, n, len, window) == 0);
	for (i = 0; i < n * len; i += PATTERN_PAGE)
		T_CHECK(pattern_check(s->land + i, seed, i / PATTERN_PAGE) ==
			0);
	return 0;
}

/* Reads @o's pool as t_xfer_all() does and verifies every byte. */
static int t_read_all(struct t_side *s, struct t_side *o, uint64_t n,
		      uint32_t len, unsigned int window)
{
	return t_read_all_seed(s, n, len, window, o->seed);
}

/* @seed's pattern for the first @n pages of a pool into @buf. */
static void t_fill(uint8_t *buf, uint64_t n, uint64_t seed)
{
	uint64_t i;

	for (i = 0; i < n; i++)
		pattern_fill(buf + i * PATTERN_PAGE, seed, i);
}

/* True if the first @n pages of @pool hold @seed's pattern. */
static bool t_pool_holds(const uint8_t *pool, uint64_t n, uint64_t seed)
{
	uint64_t i;

	for (i = 0; i < n; i++)
		if (pattern_check(pool + i * PATTERN_PAGE, seed, i))
			return false;
	return true;
}

/*
 * Since @st0, @n reads (or writes) were posted and done with 0, moving
 * @bytes, and none failed.
 */
static int t_counted(const struct xport_stats *st,
		     const struct xport_stats *st0, bool write, uint64_t n,
		     uint64_t bytes)
{
	if (write) {
		T_CHECK(st->wposted - st0->wposted == n);
		T_CHECK(st->wcompleted - st0->wcompleted == n);
		T_CHECK(st->wfailed == st0->wfailed);
		T_CHECK(st->wbytes - st0->wbytes == bytes);
		return 0;
	}
	T_CHECK(st->posted - st0->posted == n);
	T_CHECK(st->completed - st0->completed == n);
	T_CHECK(st->failed == st0->failed);
	T_CHECK(st->bytes - st0->bytes == bytes);
	return 0;
}

/* Reads posted while CONNECTING wait for the QP, then complete. */
static int test_xport_rdma_connect(struct t_side *a, struct t_side *b)
{
	struct t_drv *d = &a->d;
	uint32_t i;

	T_CHECK(xport_rdma_peer_needs_exchange(a->ctx, b->node) == 1);
	T_CHECK(t_open(a, b->node, 0) == 0);
	T_CHECK(d->ops->peer_state(a->p) == XPORT_PEER_CONNECTING);
	t_drv_reset(d);
	for (i = 0; i < 8; i++)
		T_CHECK(d->ops->read(a->p, (uint64_t)i * 4096, 4096,
				     a->land + i * 4096, i) == 0);
	/* queued reads are bounds-checked when posted: done(-ERANGE) */
	T_CHECK(d->ops->read(a->p, T_POOL_SIZE, 4096, a->land + 8 * 4096, 8) ==
		0);
	t_drv_poll(d, 10);
	T_CHECK(d->ndone == 0);
	T_CHECK(t_exchange(a, b, 0) == 0);
	T_CHECK(t_wait_done(d, 9, T_WAIT_MS));
	T_CHECK(d->ops->peer_state(a->p) == XPORT_PEER_UP);
	for (i = 0; i < 8; i++) {
		T_CHECK(d->calls[i] == 1 && d->status[i] == 0);
		T_CHECK(pattern_check(a->land + i * 4096, b->seed, i) == 0);
	}
	T_CHECK(d->calls[8] == 1 && d->status[8] == -ERANGE);
	return 0;
}

static int test_xport_rdma_bulk(struct t_side *a, struct t_side *b)
{
	struct xport_stats st0, st, c0, c;

	a->d.ops->peer_stats(a->p, &st0);
	xport_rdma_ctx_stats(a->ctx, &c0);
	T_CHECK(t_read_all(a, b, T_PAGES, 4096, a->depth) == 0);
	/* multi-packet READs too */
	T_CHECK(t_read_all(a, b, T_POOL_SIZE / (256 << 10), 256 << 10, 16) ==
		0);
	a->d.ops->peer_stats(a->p, &st);
	T_CHECK(t_counted(&st, &st0, false, T_PAGES + 64, 2 * T_POOL_SIZE) ==
		0);
	xport_rdma_ctx_stats(a->ctx, &c);
	T_CHECK(t_counted(&c, &c0, false, T_PAGES + 64, 2 * T_POOL_SIZE) == 0);
	return 0;
}

/*
 * RDMA WRITEs from the landing area into the owner's pool: every page, in
 * 4 KiB and in 256 KiB work requests, each done once; the owner's pool
 * holds them and RDMA READs bring them back, page by page; the last pass
 * puts the pool back as it was. (Bad arguments: the errors case.)
 */
/*
 * @n READs of 4 KiB of the other side's pool, up to a->depth in flight,
 * page i into @dst + i * 4096: with read_direct (a registration per READ)
 * or read (into the landing area, registered once). Every byte verified.
 */
static int t_read_timed(struct t_side *a, struct t_side *b, bool direct,
			uint8_t *dst, uint32_t n, uint64_t *ms)
{
	struct t_drv *d = &a->d;
	uint64_t t0 = t_now_ms(), end = t0 + T_WAIT_MS;
	uint32_t next = 0, i;
	int ret;

	t_drv_reset(d);
	memset(dst, 0, (size_t)n * 4096);
	while (d->ndone < n) {
		while (next < n && next - d->ndone < a->depth) {
			ret = direct ? d->ops->read_direct(
					       a->p, (uint64_t)next * 4096,
					       4096,
					       dst + (uint64_t)next * 4096,
					       next)
				     : d->ops->read(a->p, (uint64_t)next * 4096,
						    4096,
						    dst + (uint64_t)next * 4096,
						    next);
			if (ret == -EAGAIN)
				break;
			T_CHECK(ret == 0);
			next++;
		}
		T_CHECK(t_now_ms() < end);
		T_CHECK(t_drv_poll(d, 100) == 0);
	}
	*ms = t_now_ms() - t0;
	T_CHECK(d->ndone == n && d->nfail == 0);
	for (i = 0; i < n; i++)
		T_CHECK(pattern_check(dst + (uint64_t)i * 4096, b->seed, i) ==
			0);
	return 0;
}

/*
 * READs straight into a memfd mapping (a cache's alias) against READs into
 * the pre-registered landing area: the registrations each way and READs
 * per second (under TCG the rates only compare the two ways). Without
 * on-demand paging the direct way registers once per READ.
 */
static int test_xport_rdma_direct(struct t_side *a, struct t_side *b)
{
	const uint32_t n = 1024;
	uint64_t r0, r1, r2, ms_direct, ms_land;
	uint8_t *alias;
	int fd;

	fd = memfd_create("t_rdma_cache", MFD_CLOEXEC);
	T_CHECK(fd >= 0 && ftruncate(fd, (off_t)n * 4096) == 0);
	alias = mmap(NULL, (size_t)n * 4096, PROT_READ | PROT_WRITE, MAP_SHARED,
		     fd, 0);
	close(fd);
	T_CHECK(alias != MAP_FAILED);
	r0 = xport_rdma_ctx_mr_registrations(a->ctx);
	T_CHECK(t_read_timed(a, b, true, alias, n, &ms_direct) == 0);
	r1 = xport_rdma_ctx_mr_registrations(a->ctx);
	T_CHECK(t_read_timed(a, b, false, a->land, n, &ms_land) == 0);
	r2 = xport_rdma_ctx_mr_registrations(a->ctx);
	munmap(alias, (size_t)n * 4096);
	fprintf(stderr,
		"  direct (read_direct into a memfd mapping): %u READs, %llu "
		"registrations (%.2f per READ), %llu ms, %.0f READs/s\n"
		"  landing (read into the area registered once): %u READs, "
		"%llu registrations, %llu ms, %.0f READs/s\n",
		n, (unsigned long long)(r1 - r0), (double)(r1 - r0) / n,
		(unsigned long long)ms_direct,
		ms_direct ? n * 1000.0 / (double)ms_direct : 0.0, n,
		(unsigned long long)(r2 - r1), (unsigned long long)ms_land,
		ms_land ? n * 1000.0 / (double)ms_land : 0.0);
	T_CHECK(r1 - r0 == n);
	T_CHECK(r2 == r1);
	return 0;
}

/*
 * @cnt READs of 4 KiB with read_direct, pool page first + i into @alias at
 * the same page; every byte verified if @verify, else 1 is returned if
 * any page does not hold what it should (the stale case below).
 */
static int t_read_alias(struct t_side *a, struct t_side *b, uint8_t *alias,
			uint32_t first, uint32_t cnt, bool verify)
{
	struct t_drv *d = &a->d;
	uint64_t end = t_now_ms() + T_WAIT_MS;
	uint32_t next = 0, i;
	int ret, bad = 0;

	t_drv_reset(d);
	while (d->ndone < cnt) {
		while (next < cnt && next - d->ndone < a->depth) {
			uint64_t pg = (uint64_t)first + next;

			ret = d->ops->read_direct(a->p, pg * 4096, 4096,
						  alias + pg * 4096, next);
			if (ret == -EAGAIN)
				break;
			T_CHECK(ret == 0);
			next++;
		}
		T_CHECK(t_now_ms() < end);
		T_CHECK(t_drv_poll(d, 100) == 0);
	}
	T_CHECK(d->ndone == cnt && d->nfail == 0);
	for (i = 0; i < cnt; i++) {
		uint64_t pg = (uint64_t)first + i;

		if (pattern_check(alias + pg * 4096, b->seed, pg)) {
			T_CHECK(!verify);
			bad = 1;
		}
	}
	return bad;
}

/*
 * The MR cache of a cache alias (no on-demand paging: rxe): mem_add, then
 * READs into it register one window of 16 pages each (64 window
 * registrations for 1024 READs, and one of the first READ's own pages:
 * 65, not 1024), nothing left allocated ahead once every page
 * was READ into. A window whose page leaves the memfd (eviction: the test
 * punches it as the cache does) is invalidated first (mem_inval gives its
 * range back) and registered again by the next READ into it: the pages
 * verify. Without the invalidation a READ through the stale window lands
 * in the page the memfd no longer has (shown: the alias does not get the
 * bytes), which is why the cache calls it before every punch. Fails with
 * FARPAGE_RDMA_MR=read (a registration per READ).
 */
static int test_xport_rdma_mrcache(struct t_side *a, struct t_side *b)
{
	const uint32_t n = 1024, wp = 16;
	const struct xport_ops *o = a->d.ops;
	uint64_t r0, r1, r2, i0, w0, lo = 1, hi = 0, t0, ms;
	uint8_t *alias;
	int fd;

	fd = memfd_create("t_rdma_mrcache", MFD_CLOEXEC);
	T_CHECK(fd >= 0 && ftruncate(fd, (off_t)n * 4096) == 0);
	alias = mmap(NULL, (size_t)n * 4096, PROT_READ | PROT_WRITE, MAP_SHARED,
		     fd, 0);
	T_CHECK(alias != MAP_FAILED);
	T_CHECK(o->mem_add(a->d.x, alias, (size_t)n * 4096, 0) == 0);
	r0 = xport_rdma_ctx_mr_registrations(a->ctx);
	i0 = xport_rdma_ctx_mr_invalidations(a->ctx);
	w0 = xport_rdma_ctx_mr_window_registrations(a->ctx);
	t0 = t_now_ms();
	T_CHECK(t_read_alias(a, b, alias, 0, n, true) == 0);
	ms = t_now_ms() - t0;
	r1 = xport_rdma_ctx_mr_registrations(a->ctx);
	fprintf(stderr,
		"  windows (read_direct into a memfd mapping given to "
		"mem_add): %u READs, %llu registrations (%.3f per READ), "
		"%llu ms, %.0f READs/s\n",
		n, (unsigned long long)(r1 - r0), (double)(r1 - r0) / n,
		(unsigned long long)ms, ms ? n * 1000.0 / (double)ms : 0.0);
	/* (the very first READ, with no stream yet, registers its own) */
	T_CHECK(r1 - r0 == n / wp + 1);
	T_CHECK(xport_rdma_ctx_mr_window_registrations(a->ctx) - w0 == n / wp);
	T_CHECK(xport_rdma_ctx_mr_ahead(a->ctx) == 0);
	/* again: every window is still valid, nothing is registered */
	T_CHECK(t_read_alias(a, b, alias, 0, n, true) == 0);
	T_CHECK(xport_rdma_ctx_mr_registrations(a->ctx) == r1);

	/* stale: page 16 punched without telling the transport */
	T_CHECK(fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
			  16 * 4096, 4096) == 0);
	T_CHECK(t_read_alias(a, b, alias, 16, 1, false) == 1);
	/* eviction done right: invalidate, punch, READ again */
	T_CHECK(o->mem_inval(a->d.x, alias, 16 * 4096, 4096, &lo, &hi) == 1);
	T_CHECK(lo == 16 * 4096 && hi == 32 * 4096);
	T_CHECK(o->mem_inval(a->d.x, alias, 16 * 4096, 4096, &lo, &hi) == 0);
	T_CHECK(o->mem_inval(a->d.x, alias, 0, 4096, &lo, &hi) == 1);
	T_CHECK(lo == 0 && hi == 16 * 4096);
	T_CHECK(fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0,
			  32 * 4096) == 0);
	T_CHECK(xport_rdma_ctx_mr_invalidations(a->ctx) - i0 == 2);
	/* pages 0 and 1: the first READ (no stream lately) registers its
	 * own page, the second window 0, whose other 14 pages are then
	 * allocated ahead */
	T_CHECK(t_read_alias(a, b, alias, 0, 1, true) == 0);
	T_CHECK(t_read_alias(a, b, alias, 1, 1, true) == 0);
	T_CHECK(xport_rdma_ctx_mr_ahead(a->ctx) == wp - 2);
	/* window 1 follows the stream */
	T_CHECK(t_read_alias(a, b, alias, 0, 32, true) == 0);
	r2 = xport_rdma_ctx_mr_registrations(a->ctx);
	T_CHECK(r2 - r1 == 3);
	T_CHECK(xport_rdma_ctx_mr_window_registrations(a->ctx) - w0 ==
		n / wp + 2);
	T_CHECK(xport_rdma_ctx_mr_ahead(a->ctx) == 0);
	T_CHECK(t_read_alias(a, b, alias, 0, n, true) == 0);
	T_CHECK(xport_rdma_ctx_mr_registrations(a->ctx) == r2);
	o->mem_del(a->d.x, alias);
	munmap(alias, (size_t)n * 4096);
	close(fd);
	return 0;
}

static int test_xport_rdma_write(struct t_side *a, struct t_side *b)
{
	struct xport_stats st0, st, c0, c;
	struct t_drv *d = &a->d;

	d->ops->peer_stats(a->p, &st0);
	xport_rdma_ctx_stats(a->ctx, &c0);
	t_fill(a->land, T_PAGES, T_WSEED);
	T_CHECK(t_xfer_all(a, true, T_PAGES, 4096, a->depth) == 0);
	/* done(0): the bytes are in the owner's pool */
	T_CHECK(t_pool_holds(b->pool, T_PAGES, T_WSEED));
	T_CHECK(t_read_all_seed(a, T_PAGES, 4096, a->depth, T_WSEED) == 0);
	/* multi-packet WRITEs put the pool back */
	t_fill(a->land, T_PAGES, b->seed);
	T_CHECK(t_xfer_all(a, true, T_POOL_SIZE / (256 << 10), 256 << 10, 16) ==
		0);
	T_CHECK(t_pool_holds(b->pool, T_PAGES, b->seed));
	T_CHECK(t_read_all(a, b, T_PAGES, 4096, a->depth) == 0);
	d->ops->peer_stats(a->p, &st);
	T_CHECK(t_counted(&st, &st0, true, T_PAGES + 64, 2 * T_POOL_SIZE) == 0);
	T_CHECK(t_counted(&st, &st0, false, 2 * T_PAGES, 2 * T_POOL_SIZE) == 0);
	xport_rdma_ctx_stats(a->ctx, &c);
	T_CHECK(t_counted(&c, &c0, true, T_PAGES + 64, 2 * T_POOL_SIZE) == 0);
	return 0;
}

/* The agent's control thread: keeps both QPs connected, fixes errors. */
struct t_ctl {
	struct t_side *a, *b;
	int stop;	     /* atomic */
	int bad;	     /* connect a with a bad rkey until its QP fails */
	uint64_t steps;	     /* atomic */
	uint64_t prepares;   /* re-prepares after errors */
	uint64_t reconnects; /* connects that changed something */
	int err;
};

/* One control step for s -> o; -EBUSY is "later", like an agent tick. */
static int t_ctl_side(struct t_ctl *c, struct t_side *s, struct t_side *o,
		      uint32_t rkey_xor)
{
	struct xport_rdma_remote r;
	struct xport_rdma_ep es, eo;
	int ret;

	if (xport_rdma_peer_needs_exchange(s->ctx, o->node)) {
		c->prepares++;
		if (s == c->a)
			c->bad = 0;
	}
	ret = xport_rdma_peer_prepare(s->ctx, o->node, &es);
	if (!ret)
		ret = xport_rdma_peer_prepare(o->ctx, s->node, &eo);
	if (ret)
		return ret == -EBUSY ? 0 : ret;
	memset(&r, 0, sizeof(r));
	r.ep = eo;
	xport_rdma_mr_get(o->ctx, &r.mr_addr, &r.rkey, &r.mr_len);
	r.rkey ^= rkey_xor;
	r.instance = o->instance;
	if (!xport_rdma_peer_is_connected_to(s->ctx, o->node, &eo))
		c->reconnects++;
	ret = xport_rdma_peer_connect(s->ctx, o->node, &r);
	return ret == -EBUSY || ret == -ENOTCONN ? 0 : ret;
}

static void *t_ctl_run(void *arg)
{
	struct t_ctl *c = arg;
	struct timespec nap = { 0, 1000000 };
	struct xport_stats st;
	int ret;

	while (!__atomic_load_n(&c->stop, __ATOMIC_ACQUIRE)) {
		ret = t_ctl_side(c, c->a, c->b, c->bad ? 0x77 : 0);
		if (!ret)
			ret = t_ctl_side(c, c->b, c->a, 0);
		if (ret && !c->err)
			c->err = ret;
		xport_rdma_ctx_stats(c->a->ctx, &st);
		__atomic_fetch_add(&c->steps, 1, __ATOMIC_RELEASE);
		nanosleep(&nap, NULL);
	}
	return NULL;
}

/*
 * Two threads as in the agent: the control thread keeps exchanging (and
 * once connects with a bad rkey) while the fault loop reads every page,
 * posting failed reads again until each one verifies.
 */
static int test_xport_rdma_threads(struct t_side *a, struct t_side *b)
{
	struct t_ctl c = { .a = a, .b = b, .bad = 1 };
	uint32_t *todo, ntodo = 0, k, inflight = 0;
	uint64_t i, verified = 0, end = t_now_ms() + T_WAIT_MS;
	struct t_drv *d = &a->d;
	pthread_t th;
	int ret;

	todo = calloc(T_PAGES, sizeof(*todo));
	d->retry = calloc(T_TAGS, sizeof(*d->retry));
	T_CHECK(todo && d->retry);
	d->nretry = 0;
	for (i = 0; i < T_PAGES; i++)
		todo[ntodo++] = (uint32_t)(T_PAGES - 1 - i);
	t_drv_reset(d);
	memset(a->land, 0, T_POOL_SIZE);
	T_CHECK(pthread_create(&th, NULL, t_ctl_run, &c) == 0);
	/* the bad rkey is in place before the first read */
	while (!__atomic_load_n(&c.steps, __ATOMIC_ACQUIRE))
		sched_yield();
	while (verified < T_PAGES && t_now_ms() < end) {
		while (ntodo && inflight < a->depth) {
			k = todo[ntodo - 1];
			ret = d->ops->read(a->p, (uint64_t)k * 4096, 4096,
					   a->land + (uint64_t)k * 4096, k);
			if (ret == -ENOTCONN || ret == -EAGAIN)
				break; /* the fault loop retries later */
			T_CHECK(ret == 0);
			ntodo--;
			inflight++;
		}
		d->ndone = 0;
		T_CHECK(t_drv_poll(d, 10) == 0);
		inflight -= (uint32_t)d->ndone;
		verified += d->ndone - d->nretry;
		while (d->nretry)
			todo[ntodo++] = d->retry[--d->nretry];
	}
	__atomic_store_n(&c.stop, 1, __ATOMIC_RELEASE);
	pthread_join(th, NULL);
	fprintf(stderr,
		"  control steps %llu, re-prepares %llu, reconnects %llu, "
		"failed reads %llu\n",
		(unsigned long long)c.steps, (unsigned long long)c.prepares,
		(unsigned long long)c.reconnects, (unsigned long long)d->nfail);
	free(d->retry);
	d->retry = NULL;
	free(todo);
	T_CHECK(c.err == 0);
	T_CHECK(verified == T_PAGES && inflight == 0);
	T_CHECK(d->nfail > 0 && c.prepares > 0 && !c.bad); /* it bit */
	for (i = 0; i < T_PAGES; i++)
		T_CHECK(d->status[i] == 0 &&
			pattern_check(a->land + i * 4096, b->seed, i) == 0);
	return 0;
}

/* The other way round: b reads every page of a's pool. */
static int test_xport_rdma_reverse(struct t_side *a, struct t_side *b)
{
	T_CHECK(t_open(b, a->node, 0) == 0);
	T_CHECK(t_wait_state(&b->d, b->p, XPORT_PEER_UP, T_WAIT_MS));
	T_CHECK(t_read_all(b, a, T_PAGES, 4096, a->depth) == 0);
	return 0;
}

static int test_xport_rdma_errors(struct t_side *a, struct t_side *b)
{
	static uint8_t outside[4096];
	struct t_drv *d = &a->d;
	uint32_t i;

	/* reads and writes alike are refused before anything is posted; done
	 * is not called */
	t_drv_reset(d);
	for (int w = 0; w < 2; w++) {
		T_CHECK(t_post(a, w, 0, 0, a->land, 0) == -EINVAL);
		T_CHECK(t_post(a, w, 0, 100, a->land, 0) == -EINVAL);
		T_CHECK(t_post(a, w, 0, 2u << 20, a->land, 0) == -EINVAL);
		T_CHECK(t_post(a, w, 0, 4096, outside, 0) == -EINVAL);
		T_CHECK(t_post(a, w, 0, 8192, a->land + T_POOL_SIZE - 4096,
			       0) == -EINVAL);
		T_CHECK(t_post(a, w, T_POOL_SIZE, 4096, a->land, 0) == -ERANGE);
		T_CHECK(t_post(a, w, T_POOL_SIZE - 4096, 8192, a->land, 0) ==
			-ERANGE);
		T_CHECK(t_post(a, w, UINT64_MAX - 4095, 4096, a->land, 0) ==
			-ERANGE);
	}
	T_CHECK(d->ndone == 0);
	/* depth reads in flight: the next one, read or write, is -EAGAIN */
	for (i = 0; i < a->depth; i++)
		T_CHECK(d->ops->read(a->p, (uint64_t)i * 4096, 4096,
				     a->land + (uint64_t)i * 4096, i) == 0);
	T_CHECK(d->ops->read(a->p, 0, 4096, a->land, a->depth) == -EAGAIN);
	T_CHECK(d->ops->write(a->p, 0, 4096, a->land, 0, a->depth) == -EAGAIN);
	T_CHECK(t_wait_done(d, a->depth, T_WAIT_MS));
	T_CHECK(d->nfail == 0 && d->bad_tags == 0);
	for (i = 0; i < a->depth; i++)
		T_CHECK(d->calls[i] == 1 &&
			pattern_check(a->land + (uint64_t)i * 4096, b->seed,
				      i) == 0);
	return 0;
}

/* A corrupted rkey: remote access error, peer DOWN, re-exchange, good. */
static int test_xport_rdma_bad_rkey(struct t_side *a, struct t_side *b)
{
	const uint32_t n = a->depth < 32 ? a->depth : 32;
	struct xport_stats c0, c;
	struct t_drv *d = &a->d;
	uint64_t end;
	uint32_t i, eio = 0;

	xport_rdma_ctx_stats(a->ctx, &c0);
	/* same endpoints, another rkey: only the MR is updated */
	T_CHECK(t_exchange(a, b, 0x5a5a5a5a) == 0);
	T_CHECK(d->ops->peer_state(a->p) == XPORT_PEER_UP);
	t_drv_reset(d);
	for (i = 0; i < n; i++)
		T_CHECK(d->ops->read(a->p, (uint64_t)i * 4096, 4096,
				     a->land + (uint64_t)i * 4096, i) == 0);
	T_CHECK(t_wait_done(d, n, T_WAIT_MS));
	T_CHECK(d->ndone == n && d->nfail == n && d->bad_tags == 0);
	for (i = 0; i < n; i++) {
		T_CHECK(d->calls[i] == 1);
		T_CHECK(d->status[i] == -EIO || d->status[i] == -ECONNRESET);
		eio += d->status[i] == -EIO;
	}
	T_CHECK(eio >= 1); /* the remote access error itself */
	T_CHECK(d->ops->peer_state(a->p) == XPORT_PEER_DOWN);
	T_CHECK(d->ops->read(a->p, 0, 4096, a->land, 0) == -ENOTCONN);
	end = t_now_ms() + T_WAIT_MS;
	while (!xport_rdma_peer_needs_exchange(a->ctx, b->node) &&
	       t_now_ms() < end)
		t_poll_both(a, b);
	T_CHECK(xport_rdma_peer_needs_exchange(a->ctx, b->node));
	xport_rdma_ctx_stats(a->ctx, &c);
	T_CHECK(c.posted - c0.posted == n && c.failed - c0.failed == n);
	T_CHECK(c.completed == c0.completed);
	/* still DOWN until the control step; then UP and good again */
	for (i = 0; i < 10; i++)
		t_drv_poll(d, 10);
	T_CHECK(d->ops->peer_state(a->p) == XPORT_PEER_DOWN);
	T_CHECK(t_exchange(a, b, 0) == 0);
	T_CHECK(t_wait_state(d, a->p, XPORT_PEER_UP, T_WAIT_MS));
	T_CHECK(t_read_all(a, b, T_PAGES, 4096, a->depth) == 0);
	/* and the other direction survived (or was healed by) it */
	T_CHECK(t_wait_state(&b->d, b->p, XPORT_PEER_UP, T_WAIT_MS));
	T_CHECK(t_read_all(b, a, 1024, 4096, a->depth) == 0);
	return 0;
}

#define T_BIG (256u << 10)

/* True if the @len bytes at @p hold @seed's pattern from page @first on. */
static bool t_pages_hold(const uint8_t *p, size_t len, uint64_t seed,
			 uint64_t first)
{
	for (size_t i = 0; i < len / PATTERN_PAGE; i++)
		if (pattern_check(p + i * PATTERN_PAGE, seed, first + i))
			return false;
	return true;
}

/* True if @len bytes at @p are all zero: nothing landed there. */
static bool t_zero(const uint8_t *p, size_t len)
{
	for (size_t i = 0; i < len; i++)
		if (p[i])
			return false;
	return true;
}

/*
 * B revokes A (A's lease expired): B's QP to A goes to the error state.
 * B's own READs of A's pool in flight then either completed before (and
 * verify) or complete flushed: failures, never other bytes. A, which knows
 * nothing of it, posts READs on its old QP with B's rkey: every one fails
 * with an error completion and lands nothing. After a new exchange (B's
 * QP with a fresh PSN) both directions read fine again.
 */
static int test_xport_rdma_revoke(struct t_side *a, struct t_side *b)
{
	const uint32_t n = a->depth < 32 ? a->depth : 32;
	struct xport_rdma_ep eb0, eb1;
	struct xport_stats c0, c;
	uint32_t i, flushed = 0;
	uint64_t end;

	/* in RTS, prepare only tells the endpoint B published */
	T_CHECK(xport_rdma_peer_prepare(b->ctx, a->node, &eb0) == 0);
	T_CHECK(xport_rdma_peer_revoke(b->ctx, a->node + 100) == 0);
	/* 256 KiB READs: likelier to be in flight when the QP goes */
	t_drv_reset(&b->d);
	memset(b->land, 0, (size_t)n * T_BIG);
	for (i = 0; i < n; i++)
		T_CHECK(b->d.ops->read(b->p, (uint64_t)i * T_BIG, T_BIG,
				       b->land + (uint64_t)i * T_BIG, i) == 0);
	T_CHECK(xport_rdma_peer_revoke(b->ctx, a->node) == 1);
	T_CHECK(xport_rdma_peer_revoke(b->ctx, a->node) == 0);
	T_CHECK(t_wait_done(&b->d, n, T_WAIT_MS));
	T_CHECK(b->d.ndone == n && b->d.bad_tags == 0);
	for (i = 0; i < n; i++) {
		T_CHECK(b->d.calls[i] == 1);
		if (b->d.status[i] == 0)
			T_CHECK(t_pages_hold(b->land + (uint64_t)i * T_BIG,
					     T_BIG, a->seed,
					     (uint64_t)i * T_BIG / 4096));
		else
			T_CHECK(b->d.status[i] == -ECONNRESET);
		flushed += b->d.status[i] != 0;
	}
	fprintf(stderr, "  B: %u of %u READs in flight flushed by the revoke\n",
		flushed, n);
	T_CHECK(t_wait_state(&b->d, b->p, XPORT_PEER_DOWN, T_WAIT_MS));
	T_CHECK(b->d.ops->read(b->p, 0, 4096, b->land, 0) == -ENOTCONN);
	/* still revoked: not prepared again behind the caller's back */
	T_CHECK(xport_rdma_peer_revoke(b->ctx, a->node) == 0);

	/* A's old QP, B's rkey: every READ fails, nothing lands */
	T_CHECK(a->d.ops->peer_state(a->p) == XPORT_PEER_UP);
	xport_rdma_ctx_stats(a->ctx, &c0);
	t_drv_reset(&a->d);
	memset(a->land, 0, (size_t)n * 4096);
	for (i = 0; i < n; i++)
		T_CHECK(a->d.ops->read(a->p, (uint64_t)i * 4096, 4096,
				       a->land + (uint64_t)i * 4096, i) == 0);
	T_CHECK(t_wait_done(&a->d, n, T_WAIT_MS));
	T_CHECK(a->d.ndone == n && a->d.nfail == n && a->d.bad_tags == 0);
	for (i = 0; i < n; i++)
		T_CHECK(a->d.calls[i] == 1 && a->d.status[i] < 0);
	T_CHECK(t_zero(a->land, (size_t)n * 4096));
	xport_rdma_ctx_stats(a->ctx, &c);
	T_CHECK(c.posted - c0.posted == n && c.failed - c0.failed == n);
	T_CHECK(c.completed == c0.completed);
	T_CHECK(a->d.ops->peer_state(a->p) == XPORT_PEER_DOWN);

	/* both sides exchange again; B's QP comes back with a fresh PSN */
	end = t_now_ms() + T_WAIT_MS;
	while ((!xport_rdma_peer_needs_exchange(a->ctx, b->node) ||
		!xport_rdma_peer_needs_exchange(b->ctx, a->node)) &&
	       t_now_ms() < end)
		t_poll_both(a, b);
	T_CHECK(xport_rdma_peer_needs_exchange(b->ctx, a->node));
	T_CHECK(xport_rdma_peer_needs_exchange(a->ctx, b->node));
	T_CHECK(t_exchange(a, b, 0) == 0);
	T_CHECK(xport_rdma_peer_prepare(b->ctx, a->node, &eb1) == 0);
	T_CHECK(eb1.qpn == eb0.qpn && eb1.psn != eb0.psn);
	fprintf(stderr, "  B: QP %u PSN %#x -> %#x\n", eb1.qpn, eb0.psn,
		eb1.psn);
	T_CHECK(t_wait_state(&a->d, a->p, XPORT_PEER_UP, T_WAIT_MS));
	T_CHECK(t_wait_state(&b->d, b->p, XPORT_PEER_UP, T_WAIT_MS));
	T_CHECK(t_read_all(a, b, 1024, 4096, a->depth) == 0);
	T_CHECK(t_read_all(b, a, 1024, 4096, a->depth) == 0);
	return 0;
}

/* The owner restarted: a peer expecting the old instance is STALE. */
static int test_xport_rdma_stale(struct t_side *a, struct t_side *b)
{
	uint64_t inst = b->instance;
	uint32_t i;

	a->d.ops->peer_close(a->p);
	b->instance = inst + 2;
	T_CHECK(t_exchange(a, b, 0) == 0); /* same QPs: MR/instance only */
	T_CHECK(t_open(a, b->node, inst) == 0);
	T_CHECK(a->d.ops->peer_state(a->p) == XPORT_PEER_STALE);
	T_CHECK(a->d.ops->read(a->p, 0, 4096, a->land, 0) == -ESTALE);
	for (i = 0; i < 10; i++)
		t_drv_poll(&a->d, 10);
	T_CHECK(a->d.ops->peer_state(a->p) == XPORT_PEER_STALE);
	a->d.ops->peer_close(a->p);
	T_CHECK(t_open(a, b->node, inst + 2) == 0);
	T_CHECK(a->d.ops->peer_state(a->p) == XPORT_PEER_UP);
	T_CHECK(t_read_all(a, b, 256, 4096, 64) == 0);
	return 0;
}

/*
 * peer_close with READs in flight: the close does not wait for the NIC
 * (nothing posted is done when it returns); each READ fails -ECANCELED,
 * once, as the loop reaps its flushed completion.
 */
static int test_xport_rdma_close(struct t_side *a, struct t_side *b)
{
	const uint32_t n = a->depth < 64 ? a->depth : 64;
	struct t_drv *d = &a->d;
	struct xport_stats c;
	uint32_t i;

	t_drv_reset(d);
	for (i = 0; i < a->depth; i++)
		T_CHECK(d->ops->read(a->p, (uint64_t)i * 4096, 4096,
				     a->land + (uint64_t)i * 4096, i) == 0);
	d->ops->peer_close(a->p);
	a->p = NULL;
	if (d->ndone)
		fprintf(stderr,
			"  peer_close returned with %llu of %u posted "
			"READs done: it waited for the drain\n",
			(unsigned long long)d->ndone, a->depth);
	T_CHECK(d->ndone == 0);
	T_CHECK(t_wait_done(d, a->depth, T_WAIT_MS));
	T_CHECK(d->ndone == a->depth && d->bad_tags == 0);
	for (i = 0; i < a->depth; i++)
		T_CHECK(d->calls[i] == 1 && d->status[i] == -ECANCELED);
	for (i = 0; i < 10; i++)
		t_drv_poll(d, 10);
	T_CHECK(d->ndone == a->depth);
	xport_rdma_ctx_stats(a->ctx, &c);
	T_CHECK(c.posted == c.completed + c.failed);
	/* the flushed QP is exchanged again; a new peer reads fine */
	T_CHECK(t_exchange(a, b, 0) == 0);
	T_CHECK(t_open(a, b->node, 0) == 0);
	T_CHECK(t_read_all(a, b, 1024, 4096, a->depth) == 0);

	/* closed from a done callback in the middle of a CQ batch */
	t_drv_reset(d);
	for (i = 0; i < n; i++)
		T_CHECK(d->ops->read(a->p, (uint64_t)i * 4096, 4096,
				     a->land + (uint64_t)i * 4096, i) == 0);
	d->close_on_done = a->p;
	T_CHECK(t_wait_done(d, n, T_WAIT_MS));
	T_CHECK(d->ndone == n && !d->close_on_done && d->bad_tags == 0);
	for (i = 0; i < n; i++) {
		T_CHECK(d->calls[i] == 1);
		T_CHECK(d->status[i] == 0 || d->status[i] == -ECANCELED);
	}
	a->p = NULL;
	T_CHECK(t_exchange(a, b, 0) == 0);
	T_CHECK(t_open(a, b->node, 0) == 0);
	T_CHECK(t_wait_state(d, a->p, XPORT_PEER_UP, T_WAIT_MS));
	T_CHECK(t_read_all(a, b, 512, 4096, a->depth) == 0);
	return 0;
}

/*
 * The owner goes away (its QP with it): READs time out (retry exceeded),
 * the peer is DOWN; the owner comes back with a new QP and MR, endpoints
 * are exchanged again and reads verify.
 */
static int test_xport_rdma_owner_restart(struct t_side *a, struct t_side *b)
{
	const uint32_t n = a->depth < 8 ? a->depth : 8;
	struct t_drv *d = &a->d;
	uint32_t i, reset = 0;
	uint64_t end;

	if (b->p)
		b->d.ops->peer_close(b->p);
	b->p = NULL;
	b->d.ops->destroy(b->d.x);
	b->d.x = NULL;
	xport_rdma_ctx_destroy(b->ctx);
	b->ctx = NULL;
	t_drv_reset(d);
	for (i = 0; i < n; i++)
		T_CHECK(d->ops->read(a->p, (uint64_t)i * 4096, 4096,
				     a->land + (uint64_t)i * 4096, i) == 0);
	T_CHECK(t_wait_done(d, n, T_WAIT_MS));
	for (i = 0; i < n; i++) {
		T_CHECK(d->calls[i] == 1 && d->status[i] < 0);
		reset += d->status[i] == -ECONNRESET;
	}
	T_CHECK(reset == n);
	T_CHECK(d->ops->peer_state(a->p) == XPORT_PEER_DOWN);
	T_CHECK(d->ops->read(a->p, 0, 4096, a->land, 0) == -ENOTCONN);
	end = t_now_ms() + T_WAIT_MS;
	while (!xport_rdma_peer_needs_exchange(a->ctx, b->node) &&
	       t_now_ms() < end)
		t_drv_poll(d, 10);
	T_CHECK(xport_rdma_peer_needs_exchange(a->ctx, b->node));
	/* same pool, new context: new QP, new rkey */
	T_CHECK(t_side_start(b) == 0);
	T_CHECK(t_exchange(a, b, 0) == 0);
	T_CHECK(t_wait_state(d, a->p, XPORT_PEER_UP, T_WAIT_MS));
	T_CHECK(t_read_all(a, b, 1024, 4096, a->depth) == 0);
	T_CHECK(t_open(b, a->node, 0) == 0);
	T_CHECK(t_wait_state(&b->d, b->p, XPORT_PEER_UP, T_WAIT_MS));
	T_CHECK(t_read_all(b, a, 1024, 4096, a->depth) == 0);
	return 0;
}

/* destroy() with READs in flight on a shared ring; another CQE survives. */
static int test_xport_rdma_destroy(struct t_side *a, struct t_side *b)
{
	const uint32_t n = a->depth < 32 ? a->depth : 32;
	struct req foreign = { REQ_TIMER };
	struct t_drv *d = &a->d;
	struct io_uring_sqe *sqe;
	struct io_uring_cqe *cqe;
	struct xport_stats c;
	unsigned int head, seen, mine = 0;
	uint64_t end;
	uint32_t i;

	t_drv_reset(d);
	sqe = io_uring_get_sqe(&d->ring);
	T_CHECK(sqe);
	io_uring_prep_nop(sqe);
	io_uring_sqe_set_data(sqe, &foreign);
	for (i = 0; i < n; i++)
		T_CHECK(d->ops->read(a->p, (uint64_t)i * 4096, 4096,
				     a->land + (uint64_t)i * 4096, i) == 0);
	d->ops->destroy(d->x);
	d->x = NULL;
	a->p = NULL;
	T_CHECK(d->ndone == n);
	for (i = 0; i < n; i++)
		T_CHECK(d->calls[i] == 1 && d->status[i] == -ECANCELED);
	end = t_now_ms() + 300;
	while (t_now_ms() < end) {
		struct __kernel_timespec ts = { .tv_nsec = 20000000 };

		io_uring_submit_and_wait_timeout(&d->ring, &cqe, 1, &ts, NULL);
		seen = 0;
		io_uring_for_each_cqe(&d->ring, head, cqe) {
			seen++;
			T_CHECK(io_uring_cqe_get_data(cqe) == &foreign);
			T_CHECK(cqe->res == 0);
			mine++;
		}
		io_uring_cq_advance(&d->ring, seen);
	}
	T_CHECK(mine == 1);
	xport_rdma_ctx_stats(a->ctx, &c);
	T_CHECK(c.posted == c.completed + c.failed);
	return 0;
}

static void t_hw_counters(const char *dev)
{
	static const char *const names[] = {
		"sent_pkts",	"rcvd_pkts",	      "duplicate_request",
		"rcvd_seq_err", "retry_exceeded_err", "send_err"
	};
	char path[256];
	unsigned long long v;
	size_t i;
	FILE *f;

	fprintf(stderr, "  %s hw_counters:", dev);
	for (i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		snprintf(path, sizeof(path),
			 "/sys/class/infiniband/%s/ports/1/hw_counters/%s", dev,
			 names[i]);
		f = fopen(path, "r");
		if (!f)
			continue;
		if (fscanf(f, "%llu", &v) == 1)
			fprintf(stderr, " %s=%llu", names[i], v);
		fclose(f);
	}
	fprintf(stderr, "\n");
}

static int t_devs(struct t_side *a, struct t_side *b)
{
	const char *env = getenv("FARPAGE_RDMA_DEVS");
	struct ibv_device **list;
	const char *comma;
	int n = 0;

	list = ibv_get_device_list(&n);
	if (!list || n <= 0) {
		if (list)
			ibv_free_device_list(list);
		return -ENODEV;
	}
	snprintf(a->dev, sizeof(a->dev), "%s", ibv_get_device_name(list[0]));
	snprintf(b->dev, sizeof(b->dev), "%s",
		 ibv_get_device_name(list[n > 1 ? 1 : 0]));
	ibv_free_device_list(list);
	if (env && *env) {
		comma = strchr(env, ',');
		snprintf(a->dev, sizeof(a->dev), "%.*s",
			 comma ? (int)(comma - env) : (int)strlen(env), env);
		snprintf(b->dev, sizeof(b->dev), "%s", comma ? comma + 1 : env);
	}
	return 0;
}

int main(void)
{
	static const struct {
		const char *name;
		int (*fn)(struct t_side *a, struct t_side *b);
	} tests[] = {
		{ "connect", test_xport_rdma_connect },
		{ "bulk", test_xport_rdma_bulk },
		{ "direct", test_xport_rdma_direct },
		{ "mrcache", test_xport_rdma_mrcache },
		{ "reverse", test_xport_rdma_reverse },
		{ "errors", test_xport_rdma_errors },
		{ "write", test_xport_rdma_write },
		{ "threads", test_xport_rdma_threads },
		{ "bad_rkey", test_xport_rdma_bad_rkey },
		{ "revoke", test_xport_rdma_revoke },
		{ "stale", test_xport_rdma_stale },
		{ "close", test_xport_rdma_close },
		{ "owner_restart", test_xport_rdma_owner_restart },
		{ "destroy", test_xport_rdma_destroy },
	};
	static struct t_side a = { .name = "A",
				   .node = T_NODE_A,
				   .seed = 0xa11ce,
				   .instance = 0x1001,
				   .pool_fd = -1 };
	static struct t_side b = { .name = "B",
				   .node = T_NODE_B,
				   .seed = 0xb0b,
				   .instance = 0x2001,
				   .pool_fd = -1 };
	const char *ips = getenv("FARPAGE_RDMA_DATA_IPS");
	char ipbuf[128], *comma;
	struct xport_stats ca, cb;
	unsigned int depth = 128;
	int ret, failed = 0;
	size_t i;

	log_init("test_xport_rdma", getenv("T_DEBUG") ? LOG_DBG : LOG_INFO);
	if (t_devs(&a, &b)) {
		fprintf(stderr, "skip: no RDMA device (ibv_get_device_list "
				"found none)\n");
		return 77;
	}
	if (t_uring_or_skip())
		return 77;
	if (getenv("FARPAGE_RDMA_DEPTH"))
		depth = (unsigned int)strtoul(getenv("FARPAGE_RDMA_DEPTH"),
					      NULL, 0);
	if (!depth || depth > 1024)
		depth = 128;
	a.depth = b.depth = depth;
	t_watch[0] = &a;
	t_watch[1] = &b;
	if (ips && *ips) {
		snprintf(ipbuf, sizeof(ipbuf), "%s", ips);
		comma = strchr(ipbuf, ',');
		a.data_ip = ipbuf;
		if (comma) {
			*comma = '\0';
			b.data_ip = comma + 1;
		}
	}
	fprintf(stderr, "A on %s%s%s, B on %s%s%s, depth %u, pool %llu MiB\n",
		a.dev, a.data_ip ? " " : "", a.data_ip ? a.data_ip : "", b.dev,
		b.data_ip ? " " : "", b.data_ip ? b.data_ip : "", depth,
		T_POOL_SIZE >> 20);
	ret = t_side_init(&a);
	if (!ret)
		ret = t_side_init(&b);
	if (ret) {
		fprintf(stderr, "setup: %s\n", strerror(-ret));
		return 1;
	}
	for (i = 0; i < sizeof(tests) / sizeof(tests[0]); i++) {
		uint64_t t0 = t_now_ms();
		const char *only = getenv("T_CASES");
		char want[64];

		snprintf(want, sizeof(want), ",%s,", tests[i].name);
		if (only && *only) {
			char list[256];

			snprintf(list, sizeof(list), ",%s,", only);
			if (!strstr(list, want))
				continue;
		}

		ret = tests[i].fn(&a, &b);
		fprintf(stderr, "%s: %s (%llu ms)\n", tests[i].name,
			ret ? "FAIL" : "ok",
			(unsigned long long)(t_now_ms() - t0));
		if (ret) {
			failed = 1;
			break; /* later cases build on the earlier ones */
		}
	}
	memset(&ca, 0, sizeof(ca));
	memset(&cb, 0, sizeof(cb));
	if (a.ctx)
		xport_rdma_ctx_stats(a.ctx, &ca);
	if (b.ctx)
		xport_rdma_ctx_stats(b.ctx, &cb);
	fprintf(stderr,
		"ctx A: posted %llu completed %llu failed %llu bytes %llu\n"
		"ctx B: posted %llu completed %llu failed %llu bytes %llu\n"
		"ctx A writes: posted %llu completed %llu failed %llu bytes "
		"%llu\n",
		(unsigned long long)ca.posted, (unsigned long long)ca.completed,
		(unsigned long long)ca.failed, (unsigned long long)ca.bytes,
		(unsigned long long)cb.posted, (unsigned long long)cb.completed,
		(unsigned long long)cb.failed, (unsigned long long)cb.bytes,
		(unsigned long long)ca.wposted,
		(unsigned long long)ca.wcompleted,
		(unsigned long long)ca.wfailed, (unsigned long long)ca.wbytes);
	/* (a subset of the cases need not have read both ways, or written) */
	if (ca.posted != ca.completed + ca.failed ||
	    cb.posted != cb.completed + cb.failed ||
	    ca.wposted != ca.wcompleted + ca.wfailed ||
	    (!getenv("T_CASES") &&
	     (!ca.completed || !cb.completed || !ca.wcompleted))) {
		fprintf(stderr, "counters: posted != completed + failed\n");
		failed = 1;
	}
	fprintf(stderr, "session verbs calls: %lu, with ctx->lock held: %lu\n",
		t_sess_verbs, t_sess_verbs_locked);
	if (!t_sess_verbs || t_sess_verbs_locked) {
		fprintf(stderr, "the session side held ctx->lock across verbs "
				"calls (or none was seen)\n");
		failed = 1;
	}
	t_hw_counters(a.dev);
	if (strcmp(a.dev, b.dev))
		t_hw_counters(b.dev);
	if (b.p)
		b.d.ops->peer_close(b.p);
	if (a.p && a.d.x)
		a.d.ops->peer_close(a.p);
	t_side_fini(&a);
	t_side_fini(&b);
	return failed;
}
