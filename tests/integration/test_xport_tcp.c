// SPDX-License-Identifier: MIT
/*
 * TCP transport against the page server on 127.0.0.1: bulk pipelined reads
 * verified page by page, errors (ERANGE, STALE, full queue), server loss
 * and reconnect, bad clients, connection cap, close/destroy with reads in
 * flight on a shared ring; writes read back, out of range, lost with the
 * server, and answered before their data was read (a raw server). The
 * tests between the transport and the page server run insecure, then
 * authenticated (records MAC'd only, then encrypted); those with a raw
 * end speak the plain protocol (insecure only).
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <liburing.h>

#include "auth.h"
#include "log.h"
#include "net.h"
#include "pagesrv.h"
#include "pattern.h"
#include "req.h"
#include "wire.h"
#include "xport.h"

#define T_POOL_SIZE (64ull << 20)
#define T_PAGES	    (T_POOL_SIZE / PATTERN_PAGE)
#define T_SEED	    0x5eedf00dull
#define T_WSEED	    0x77e1735eedull /* what writes put in the pool */
#define T_INSTANCE  0x1234567890abcdefull
#define T_TAGS	    (T_PAGES + 64)
#define T_DEPTH	    256u /* xport_tcp's default slots per peer */
#define T_WAIT_MS   10000u

#include "t_xport.h"

struct t_pool {
	uint8_t *base;
	int fd;
};

/* The run's mode: insecure (< 0), else the AUTH_F_* both ends ask for. */
static int t_auth = -1;
/* xport_cfg.stall_ms of the next t_drv_init() (0: never), and its count */
static unsigned int t_stall_ms;
static atomic_uint_fast64_t t_stalls;
static const uint8_t t_key[AUTH_KEY_LEN] = "0123456789abcdef0123456789abcde";

/* The server's pair keys: ours for "client", none for anyone else. */
static int t_pair_key(void *arg, const char *peer, uint8_t key[32])
{
	if (strcmp(peer, "client"))
		return AUTH_E_PEER;
	memcpy(key, t_key, AUTH_KEY_LEN);
	return AUTH_OK;
}

static int t_drv_init(struct t_drv *d)
{
	struct xport_cfg cfg = {
		.done = t_done,
		.arg = d,
		.insecure = t_auth < 0,
		.self_name = "client",
		.auth_flags = t_auth < 0 ? 0 : (unsigned int)t_auth,
		.stall_ms = t_stall_ms,
		.stalls = &t_stalls,
	};
	int ret;

	ret = t_drv_alloc(d, &xport_tcp_ops, REQ_XPORT);
	if (ret)
		return ret;
	cfg.ring = &d->ring;
	return d->ops->create(&cfg, &d->x);
}

static void t_drv_fini(struct t_drv *d)
{
	d->ops->destroy(d->x);
	t_drv_free(d);
}

static int t_open(struct t_drv *d, const char *addr, uint64_t instance,
		  struct xport_peer **out)
{
	struct xport_peer_info info = { .node = 7, .instance = instance };

	int ret;

	snprintf(info.name, sizeof(info.name), "owner");
	memcpy(info.pkey, t_key, sizeof(info.pkey));
	info.has_pkey = true;
	snprintf(info.data_addr, sizeof(info.data_addr), "%s", addr);
	ret = net_addr_resolve(addr, &info.addr, &info.addrlen, 0);
	if (ret)
		return ret;
	return d->ops->peer_open(d->x, &info, out);
}

static int t_pool_init(struct t_pool *pool)
{
	uint64_t i;

	pool->fd = memfd_create("t_pool", MFD_CLOEXEC);
	if (pool->fd < 0)
		return -errno;
	if (ftruncate(pool->fd, T_POOL_SIZE))
		return -errno;
	pool->base = mmap(NULL, T_POOL_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED,
			  pool->fd, 0);
	if (pool->base == MAP_FAILED)
		return -errno;
	for (i = 0; i < T_PAGES; i++)
		pattern_fill(pool->base + i * PATTERN_PAGE, T_SEED, i);
	return 0;
}

static int t_srv_start(const struct t_pool *pool, const char *listen,
		       unsigned int max_conns, struct pagesrv **out, char *addr,
		       size_t addr_len)
{
	struct pagesrv_cfg cfg = {
		.listen_addr = listen,
		.pool = pool->base,
		.pool_size = T_POOL_SIZE,
		.instance = T_INSTANCE,
		.max_conns = max_conns,
		.insecure = t_auth < 0,
		.self_name = "owner",
		.auth_flags = t_auth < 0 ? 0 : (unsigned int)t_auth,
		.pair_key = t_pair_key,
	};
	int ret;

	ret = pagesrv_create(&cfg, out);
	if (ret)
		return ret;
	if (addr) {
		ret = pagesrv_addr(*out, addr, addr_len);
		if (ret)
			return ret;
	}
	return pagesrv_start(*out);
}

/* Verifies the @len bytes at @buf as @seed's pattern of pool offset @off. */
static int t_verify_seed(const uint8_t *buf, uint64_t off, uint32_t len,
			 uint64_t seed)
{
	uint32_t i;

	for (i = 0; i < len; i += PATTERN_PAGE)
		if (pattern_check(buf + i, seed, (off + i) / PATTERN_PAGE))
			return -1;
	return 0;
}

/* Verifies the @len bytes read into @buf from pool offset @off. */
static int t_verify(const uint8_t *buf, uint64_t off, uint32_t len)
{
	return t_verify_seed(buf, off, len, T_SEED);
}

/* @seed's pattern of pool offset @off into @len bytes at @buf. */
static void t_fill(uint8_t *buf, uint64_t off, uint64_t len, uint64_t seed)
{
	uint64_t i;

	for (i = 0; i < len; i += PATTERN_PAGE)
		pattern_fill(buf + i, seed, (off + i) / PATTERN_PAGE);
}

/*
 * True if @n pool pages from @page on hold @seed's pattern. Only once the
 * server that wrote them is gone: pthread_join() in pagesrv_destroy()
 * orders its writes before our reads (its replies go out through io_uring,
 * which TSan does not see as synchronisation).
 */
static bool t_pool_holds(const struct t_pool *pool, uint64_t page, uint64_t n,
			 uint64_t seed)
{
	return t_verify_seed(pool->base + page * PATTERN_PAGE,
			     page * PATTERN_PAGE, n * PATTERN_PAGE, seed) == 0;
}

/* A read into (or write from) @buf of @len bytes at pool offset @off. */
static int t_post(struct t_drv *d, struct xport_peer *p, bool write,
		  uint64_t off, uint32_t len, uint8_t *buf, uint64_t tag)
{
	if (write)
		return d->ops->write(p, off, len, buf, 0, tag);
	return d->ops->read(p, off, len, buf, tag);
}

/*
 * Reads (or writes) @n chunks of @len bytes from (to) pool offset @off on,
 * tag i at buf + i * len, keeping up to @window in flight; each is done
 * once, with status 0.
 */
static int t_xfer_range(struct t_drv *d, struct xport_peer *p, bool write,
			uint64_t off, uint64_t n, uint32_t len,
			unsigned int window, uint8_t *buf)
{
	uint64_t next = 0, i, end = t_now_ms() + 60000;
	int ret;

	t_drv_reset(d);
	while (d->ndone < n) {
		while (next < n && next - d->ndone < window) {
			ret = t_post(d, p, write, off + next * len, len,
				     buf + next * len, next);
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

/* t_xfer_range() reads, every byte verified as @seed's pattern. */
static int t_read_range_seed(struct t_drv *d, struct xport_peer *p,
			     uint64_t off, uint64_t n, uint32_t len,
			     unsigned int window, uint8_t *dst, uint64_t seed)
{
	uint64_t i;

	T_CHECK(t_xfer_range(d, p, false, off, n, len, window, dst) == 0);
	for (i = 0; i < n; i++)
		T_CHECK(t_verify_seed(dst + i * len, off + i * len, len,
				      seed) == 0);
	return 0;
}

static int t_read_range(struct t_drv *d, struct xport_peer *p, uint64_t off,
			uint64_t n, uint32_t len, unsigned int window,
			uint8_t *dst)
{
	return t_read_range_seed(d, p, off, n, len, window, dst, T_SEED);
}

static int test_xport_tcp_bulk(const struct t_pool *pool)
{
	struct xport_stats st;
	struct pagesrv_stats ss;
	struct xport_peer *p;
	struct pagesrv *srv;
	char addr[64];
	struct t_drv d;
	uint8_t *dst;

	dst = malloc(T_POOL_SIZE);
	T_CHECK(dst);
	T_CHECK(t_srv_start(pool, "127.0.0.1:0", 0, &srv, addr, sizeof(addr)) ==
		0);
	T_CHECK(t_drv_init(&d) == 0);
	/* reads posted while CONNECTING are queued and go out once UP */
	T_CHECK(t_open(&d, addr, T_INSTANCE, &p) == 0);
	T_CHECK(d.ops->peer_state(p) == XPORT_PEER_CONNECTING);
	T_CHECK(t_read_range(&d, p, 0, T_PAGES, 4096, 128, dst) == 0);
	T_CHECK(d.ops->peer_state(p) == XPORT_PEER_UP);
	memset(dst, 0, T_POOL_SIZE);
	T_CHECK(t_read_range(&d, p, 0, T_POOL_SIZE / 65536, 65536, 64, dst) ==
		0);
	memset(dst, 0, T_POOL_SIZE);
	T_CHECK(t_read_range(&d, p, 0, T_POOL_SIZE / WIRE_LEN_MAX, WIRE_LEN_MAX,
			     64, dst) == 0);
	d.ops->peer_stats(p, &st);
	T_CHECK(st.posted ==
		T_PAGES + T_POOL_SIZE / 65536 + T_POOL_SIZE / WIRE_LEN_MAX);
	T_CHECK(st.completed == st.posted && st.failed == 0);
	T_CHECK(st.bytes == 3 * T_POOL_SIZE);
	pagesrv_stats(srv, &ss);
	T_CHECK(ss.reads == st.posted && ss.bytes == 3 * T_POOL_SIZE);
	T_CHECK(ss.conns == 1 && ss.errors == 0 && ss.dropped == 0);
	d.ops->peer_close(p);
	t_drv_fini(&d);
	pagesrv_destroy(srv);
	free(dst);
	return 0;
}

/*
 * read_direct, cache mode's read into the agent's mapping of the cache
 * memfd: refused (-EOPNOTSUPP, nothing posted) unless FARPAGE_TCP_DIRECT=on
 * and the memory lies whole in what mem_add named read-only; then the
 * reply is opened (insecure: copied) straight into it, and the memfd holds
 * the pool's bytes, every one verified through the file.
 */
static int test_xport_tcp_direct(const struct t_pool *pool)
{
	static uint8_t plain[4096];
	const size_t len = 1u << 20, piece = 16384;
	struct xport_peer *p;
	struct pagesrv *srv;
	uint8_t *alias, *wr, *back;
	char addr[64];
	struct t_drv d;
	uint64_t i, n = len / piece, end;
	int cfd;

	cfd = memfd_create("t_cache", MFD_CLOEXEC);
	T_CHECK(cfd >= 0 && ftruncate(cfd, (off_t)len) == 0);
	alias = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, cfd, 0);
	wr = mmap(NULL, 4 * 4096, PROT_READ | PROT_WRITE,
		  MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	back = malloc(len);
	T_CHECK(alias != MAP_FAILED && wr != MAP_FAILED && back);
	T_CHECK(t_srv_start(pool, "127.0.0.1:0", 0, &srv, addr, sizeof(addr)) ==
		0);
	/* off by default */
	unsetenv("FARPAGE_TCP_DIRECT");
	T_CHECK(t_drv_init(&d) == 0);
	T_CHECK(d.ops->read_direct && d.ops->mem_add && d.ops->mem_del);
	T_CHECK(t_open(&d, addr, T_INSTANCE, &p) == 0);
	T_CHECK(d.ops->mem_add(d.x, alias, len, 0) == 0);
	T_CHECK(d.ops->read_direct(p, 0, 4096, alias, 1) == -EOPNOTSUPP);
	d.ops->mem_del(d.x, alias);
	d.ops->peer_close(p);
	t_drv_fini(&d);

	setenv("FARPAGE_TCP_DIRECT", "on", 1);
	T_CHECK(t_drv_init(&d) == 0);
	unsetenv("FARPAGE_TCP_DIRECT");
	T_CHECK(t_open(&d, addr, T_INSTANCE, &p) == 0);
	T_CHECK(d.ops->mem_add(d.x, alias, len, 0) == 0);
	T_CHECK(d.ops->mem_add(d.x, wr, 4 * 4096, XPORT_MEM_WRITABLE) == 0);
	/* a writable mapping's memory, memory never added, a read running
	 * past the alias's end: refused */
	T_CHECK(d.ops->read_direct(p, 0, 4096, wr, 1) == -EOPNOTSUPP);
	T_CHECK(d.ops->read_direct(p, 0, 4096, plain, 1) == -EOPNOTSUPP);
	T_CHECK(d.ops->read_direct(p, 0, 8192, alias + len - 4096, 1) ==
		-EOPNOTSUPP);
	t_drv_reset(&d);
	for (i = 0; i < n; i++)
		T_CHECK(d.ops->read_direct(p, i * piece, (uint32_t)piece,
					   alias + i * piece, i) == 0);
	end = t_now_ms() + 60000;
	while (d.ndone < n) {
		T_CHECK(t_now_ms() < end);
		T_CHECK(t_drv_poll(&d, 100) == 0);
	}
	T_CHECK(d.ndone == n && d.nfail == 0 && d.bad_tags == 0);
	for (i = 0; i < n; i++)
		T_CHECK(d.calls[i] == 1 && d.status[i] == 0);
	T_CHECK(pread(cfd, back, len, 0) == (ssize_t)len);
	T_CHECK(t_verify(back, 0, (uint32_t)len) == 0);
	d.ops->mem_del(d.x, alias);
	d.ops->mem_del(d.x, wr);
	d.ops->peer_close(p);
	t_drv_fini(&d);
	pagesrv_destroy(srv);
	munmap(alias, len);
	munmap(wr, 4 * 4096);
	close(cfd);
	free(back);
	return 0;
}

static int test_xport_tcp_errors(const struct t_pool *pool)
{
	static uint8_t buf[T_DEPTH + 1][4096];
	struct xport_peer *p;
	struct pagesrv *srv;
	char addr[64];
	struct t_drv d;
	uint32_t i;

	T_CHECK(t_srv_start(pool, "127.0.0.1:0", 0, &srv, addr, sizeof(addr)) ==
		0);
	T_CHECK(t_drv_init(&d) == 0);
	T_CHECK(t_open(&d, addr, 0, &p) == 0);
	T_CHECK(t_wait_state(&d, p, XPORT_PEER_UP, T_WAIT_MS));
	/* bad arguments are refused before anything is queued */
	T_CHECK(d.ops->read(p, 0, 0, buf[0], 0) == -EINVAL);
	T_CHECK(d.ops->read(p, 0, 100, buf[0], 0) == -EINVAL);
	T_CHECK(d.ops->read(p, 0, 2 * WIRE_LEN_MAX, buf[0], 0) == -EINVAL);
	/* out of the pool: -ERANGE, the connection stays */
	t_drv_reset(&d);
	T_CHECK(d.ops->read(p, T_POOL_SIZE, 4096, buf[0], 0) == 0);
	T_CHECK(d.ops->read(p, T_POOL_SIZE - 4096, 8192, buf[1], 1) == 0);
	T_CHECK(d.ops->read(p, UINT64_MAX - 4095, 8192, buf[2], 2) == 0);
	T_CHECK(d.ops->read(p, 4096 * 5, 4096, buf[3], 3) == 0);
	T_CHECK(t_wait_done(&d, 4, T_WAIT_MS));
	T_CHECK(d.status[0] == -ERANGE && d.status[1] == -ERANGE &&
		d.status[2] == -ERANGE && d.status[3] == 0);
	T_CHECK(pattern_check(buf[3], T_SEED, 5) == 0);
	T_CHECK(d.ops->peer_state(p) == XPORT_PEER_UP);
	/* the queue holds T_DEPTH reads, the next one is -EAGAIN */
	t_drv_reset(&d);
	for (i = 0; i < T_DEPTH; i++)
		T_CHECK(d.ops->read(p, (uint64_t)i * 4096, 4096, buf[i], i) ==
			0);
	T_CHECK(d.ops->read(p, 0, 4096, buf[T_DEPTH], T_DEPTH) == -EAGAIN);
	T_CHECK(t_wait_done(&d, T_DEPTH, T_WAIT_MS));
	for (i = 0; i < T_DEPTH; i++)
		T_CHECK(d.calls[i] == 1 && d.status[i] == 0 &&
			pattern_check(buf[i], T_SEED, i) == 0);
	T_CHECK(d.calls[T_DEPTH] == 0);
	/* peer_close fails what is in flight with -ECANCELED, once each */
	t_drv_reset(&d);
	for (i = 0; i < 64; i++)
		T_CHECK(d.ops->read(p, (uint64_t)i * 4096, 4096, buf[i], i) ==
			0);
	d.ops->peer_close(p);
	T_CHECK(d.ndone == 64);
	for (i = 0; i < 64; i++)
		T_CHECK(d.calls[i] == 1 && d.status[i] == -ECANCELED);
	/* a done callback closing its own peer: the rest still once each */
	T_CHECK(t_open(&d, addr, T_INSTANCE, &p) == 0);
	T_CHECK(t_wait_state(&d, p, XPORT_PEER_UP, T_WAIT_MS));
	t_drv_reset(&d);
	for (i = 0; i < 64; i++)
		T_CHECK(d.ops->read(p, (uint64_t)i * 4096, 4096, buf[i], i) ==
			0);
	d.close_on_done = p;
	T_CHECK(t_wait_done(&d, 64, T_WAIT_MS));
	T_CHECK(d.ndone == 64 && !d.close_on_done);
	for (i = 0; i < 64; i++)
		T_CHECK(d.calls[i] == 1);
	T_CHECK(d.nfail >= 63);
	t_drv_fini(&d);
	pagesrv_destroy(srv);
	return 0;
}

static int test_xport_tcp_stale(const struct t_pool *pool)
{
	static uint8_t buf[8][4096];
	struct xport_peer *p, *good;
	struct pagesrv *srv;
	char addr[64];
	struct t_drv d;
	uint32_t i;

	T_CHECK(t_srv_start(pool, "127.0.0.1:0", 0, &srv, addr, sizeof(addr)) ==
		0);
	T_CHECK(t_drv_init(&d) == 0);
	T_CHECK(t_open(&d, addr, T_INSTANCE + 2, &p) == 0);
	T_CHECK(t_open(&d, addr, T_INSTANCE, &good) == 0);
	t_drv_reset(&d);
	for (i = 0; i < 8; i++)
		T_CHECK(d.ops->read(p, i * 4096, 4096, buf[i], i) == 0);
	T_CHECK(t_wait_state(&d, p, XPORT_PEER_STALE, T_WAIT_MS));
	T_CHECK(d.ndone == 8);
	for (i = 0; i < 8; i++)
		T_CHECK(d.calls[i] == 1 && d.status[i] == -ESTALE);
	T_CHECK(d.ops->read(p, 0, 4096, buf[0], 0) == -ESTALE);
	/* STALE is final: ticks do not reconnect it */
	for (i = 0; i < 30; i++)
		t_drv_poll(&d, 10);
	T_CHECK(d.ops->peer_state(p) == XPORT_PEER_STALE);
	T_CHECK(t_wait_state(&d, good, XPORT_PEER_UP, T_WAIT_MS));
	T_CHECK(t_read_range(&d, good, 0, 8, 4096, 8, buf[0]) == 0);
	d.ops->peer_close(p);
	d.ops->peer_close(good);
	t_drv_fini(&d);
	pagesrv_destroy(srv);
	return 0;
}

/*
 * The server goes with 64 MiB of reads (or writes) in flight: each is done
 * once, those done with 0 with their data (in the pool); the peer is DOWN
 * and stays so while nobody listens. Once the server is back on the same
 * port, requests go through again (writes put the pool back).
 */
static int t_server_lost(const struct t_pool *pool, bool write)
{
	const uint32_t n = 64, len = WIRE_LEN_MAX;
	struct pagesrv *srv;
	struct xport_peer *p;
	struct t_drv d;
	char addr[64];
	uint64_t ok = 0;
	uint8_t *buf;
	uint32_t i;

	T_CHECK((uint64_t)n * len <= T_POOL_SIZE);
	buf = malloc((size_t)n * len);
	T_CHECK(buf);
	t_fill(buf, 0, (uint64_t)n * len, T_WSEED);
	T_CHECK(t_srv_start(pool, "127.0.0.1:0", 0, &srv, addr, sizeof(addr)) ==
		0);
	T_CHECK(t_drv_init(&d) == 0);
	T_CHECK(t_open(&d, addr, T_INSTANCE, &p) == 0);
	T_CHECK(t_wait_state(&d, p, XPORT_PEER_UP, T_WAIT_MS));
	t_drv_reset(&d);
	for (i = 0; i < n; i++)
		T_CHECK(t_post(&d, p, write, (uint64_t)i * len, len,
			       buf + (size_t)i * len, i) == 0);
	/* 64 MiB cannot fit in socket buffers: most are lost */
	pagesrv_destroy(srv);
	T_CHECK(t_wait_done(&d, n, T_WAIT_MS));
	for (i = 0; i < n; i++) {
		T_CHECK(d.calls[i] == 1 && d.status[i] <= 0);
		if (d.status[i])
			continue;
		if (write)
			T_CHECK(t_pool_holds(pool, (uint64_t)i * len / 4096,
					     len / 4096, T_WSEED));
		else
			T_CHECK(t_verify(buf + (size_t)i * len,
					 (uint64_t)i * len, len) == 0);
		ok++;
	}
	T_CHECK(d.nfail > 0 && d.nfail + ok == n);
	T_CHECK(d.ops->peer_state(p) == XPORT_PEER_DOWN);
	T_CHECK(t_post(&d, p, write, 0, 4096, buf, 0) == -ENOTCONN);
	/* nobody listening: reconnects fail, the peer stays DOWN */
	for (i = 0; i < 40; i++)
		t_drv_poll(&d, 10);
	T_CHECK(d.ops->peer_state(p) != XPORT_PEER_UP);
	T_CHECK(t_srv_start(pool, addr, 0, &srv, NULL, 0) == 0);
	T_CHECK(t_wait_state(&d, p, XPORT_PEER_UP, T_WAIT_MS));
	if (write) {
		t_fill(buf, 0, (uint64_t)n * len, T_SEED);
		T_CHECK(t_xfer_range(&d, p, true, 0, n, len, 8, buf) == 0);
	}
	T_CHECK(t_read_range(&d, p, 0, 1024, 4096, 64, buf) == 0);
	d.ops->peer_close(p);
	t_drv_fini(&d);
	pagesrv_destroy(srv);
	T_CHECK(t_pool_holds(pool, 0, T_PAGES, T_SEED));
	free(buf);
	return 0;
}

/* Server gone with reads in flight, then back on the same port. */
static int test_xport_tcp_restart(const struct t_pool *pool)
{
	return t_server_lost(pool, false);
}

static int t_raw_connect(const char *addr)
{
	int fd, ret;

	ret = net_connect(addr, 2000, &fd);
	return ret ? ret : fd;
}

static int t_raw_send_hdr(int fd, uint8_t version, uint8_t op, uint32_t len,
			  uint64_t tag, uint64_t off)
{
	struct wire_hdr h = { version, op, 0, len, tag, off };
	uint8_t b[WIRE_HDR_LEN];

	wire_hdr_pack(&h, b);
	return send(fd, b, sizeof(b), MSG_NOSIGNAL) == sizeof(b) ? 0 : -1;
}

/*
 * Receives exactly @len bytes (into @buf, or dropped if NULL), at most
 * @chunk per recv(). With @d, the client's loop runs meanwhile (@fd is
 * non-blocking, 60 s in all); without, each recv() waits up to 5 s.
 */
static int t_raw_recv_drv(struct t_drv *d, int fd, void *buf, size_t len,
			  size_t chunk)
{
	static uint8_t sink[1 << 20];
	uint64_t end = t_now_ms() + 60000;
	size_t got = 0, want;
	ssize_t n;

	while (got < len) {
		struct pollfd pfd = { .fd = fd, .events = POLLIN };

		want = len - got < chunk ? len - got : chunk;
		if (!buf && want > sizeof(sink))
			want = sizeof(sink);
		if (d) {
			if (t_now_ms() >= end || t_drv_poll(d, 1))
				return -ETIMEDOUT;
		} else if (poll(&pfd, 1, 5000) != 1) {
			return -ETIMEDOUT;
		}
		n = recv(fd, buf ? (uint8_t *)buf + got : sink, want,
			 d ? MSG_DONTWAIT : 0);
		if (n < 0 && d && (errno == EAGAIN || errno == EWOULDBLOCK))
			continue;
		if (n <= 0)
			return n ? -errno : -ECONNRESET;
		got += (size_t)n;
	}
	return 0;
}

/* Receives exactly @len bytes, at most @chunk per recv(). */
static int t_raw_recv_chunked(int fd, void *buf, size_t len, size_t chunk)
{
	return t_raw_recv_drv(NULL, fd, buf, len, chunk);
}

static int t_raw_recv_all(int fd, void *buf, size_t len)
{
	return t_raw_recv_chunked(fd, buf, len, len);
}

/* True once the server has closed @fd (EOF or reset). */
static bool t_raw_is_closed(int fd)
{
	struct pollfd pfd = { .fd = fd, .events = POLLIN };
	uint8_t b[64];

	if (poll(&pfd, 1, 5000) != 1)
		return false;
	return recv(fd, b, sizeof(b), MSG_DONTWAIT) <= 0;
}

static int test_xport_tcp_bad_clients(const struct t_pool *pool)
{
	uint8_t hdr[WIRE_HDR_LEN], *dst;
	int bad_ver = -1, bad_op = -1, lenient = -1;
	struct pagesrv_stats ss;
	struct xport_peer *p;
	struct pagesrv *srv;
	struct wire_hdr h;
	struct t_drv d;
	char addr[64];
	uint64_t next = 0, i, n = T_PAGES / 4;
	static uint8_t page[4096];

	dst = malloc(n * 4096);
	T_CHECK(dst);
	T_CHECK(t_srv_start(pool, "127.0.0.1:0", 0, &srv, addr, sizeof(addr)) ==
		0);
	T_CHECK(t_drv_init(&d) == 0);
	T_CHECK(t_open(&d, addr, T_INSTANCE, &p) == 0);
	t_drv_reset(&d);
	/* a good client keeps reading while bad ones come and go */
	while (d.ndone < n) {
		while (next < n && next - d.ndone < 64) {
			T_CHECK(d.ops->read(p, next * 4096, 4096,
					    dst + next * 4096, next) == 0);
			next++;
		}
		if (next >= n / 2 && lenient < 0) {
			bad_ver = t_raw_connect(addr);
			bad_op = t_raw_connect(addr);
			lenient = t_raw_connect(addr);
			T_CHECK(bad_ver >= 0 && bad_op >= 0 && lenient >= 0);
			T_CHECK(t_raw_send_hdr(bad_ver, 9, WIRE_OP_READ, 4096,
					       1, 0) == 0);
			T_CHECK(t_raw_send_hdr(bad_op, WIRE_VERSION, 77, 4096,
					       1, 0) == 0);
			/* len 0 and len > max are ERANGE, not fatal */
			T_CHECK(t_raw_send_hdr(lenient, WIRE_VERSION,
					       WIRE_OP_READ, 0, 5, 0) == 0);
			T_CHECK(t_raw_send_hdr(lenient, WIRE_VERSION,
					       WIRE_OP_READ, 0xffffffff, 6,
					       0) == 0);
			T_CHECK(t_raw_send_hdr(lenient, WIRE_VERSION,
					       WIRE_OP_READ, 4096, 7,
					       9 * 4096) == 0);
		}
		T_CHECK(t_drv_poll(&d, 100) == 0);
	}
	T_CHECK(d.nfail == 0);
	for (i = 0; i < n; i++)
		T_CHECK(d.calls[i] == 1 &&
			pattern_check(dst + i * 4096, T_SEED, i) == 0);
	T_CHECK(t_raw_is_closed(bad_ver));
	T_CHECK(t_raw_is_closed(bad_op));
	for (i = 5; i <= 6; i++) {
		T_CHECK(t_raw_recv_all(lenient, hdr, sizeof(hdr)) == 0);
		wire_hdr_unpack(hdr, &h);
		T_CHECK(h.version == WIRE_VERSION && h.op == WIRE_OP_READ);
		T_CHECK(h.flags_status == ERANGE && h.len == 0 && h.tag == i);
	}
	T_CHECK(t_raw_recv_all(lenient, hdr, sizeof(hdr)) == 0);
	wire_hdr_unpack(hdr, &h);
	T_CHECK(h.flags_status == 0 && h.len == 4096 && h.tag == 7);
	T_CHECK(t_raw_recv_all(lenient, page, sizeof(page)) == 0);
	T_CHECK(pattern_check(page, T_SEED, 9) == 0);
	/* a HELLO expecting another instance: ESTALE, aux = ours */
	T_CHECK(t_raw_send_hdr(lenient, WIRE_VERSION, WIRE_OP_HELLO, 0, 0,
			       T_INSTANCE ^ 1) == 0);
	T_CHECK(t_raw_recv_all(lenient, hdr, sizeof(hdr)) == 0);
	wire_hdr_unpack(hdr, &h);
	T_CHECK(h.op == WIRE_OP_HELLO && h.flags_status == ESTALE &&
		h.arg == T_INSTANCE);
	pagesrv_stats(srv, &ss);
	T_CHECK(ss.dropped == 2 && ss.errors == 3 && ss.conns == 4);
	close(bad_ver);
	close(bad_op);
	close(lenient);
	T_CHECK(d.ops->peer_state(p) == XPORT_PEER_UP);
	d.ops->peer_close(p);
	t_drv_fini(&d);
	pagesrv_destroy(srv);
	free(dst);
	return 0;
}

/*
 * A client that sends requests and reads nothing: the server stops reading
 * it (its sends end up blocked) and serves the others meanwhile; its
 * replies, read later in odd-sized bits, are whole and in order.
 */
static int test_xport_tcp_backpressure(const struct t_pool *pool)
{
	enum { BATCH = 1024, CHECK = 300, LEN = 65536 };
	static uint8_t reqs[BATCH * WIRE_HDR_LEN], payload[LEN];
	const uint64_t max_reqs = 4u << 20;
	uint64_t sent = 0, base = (uint64_t)-1, i, off;
	uint8_t hdr[WIRE_HDR_LEN], *dst;
	struct pagesrv_stats ss;
	struct xport_peer *p;
	struct pagesrv *srv;
	bool blocked = false;
	struct wire_hdr h;
	struct t_drv d;
	char addr[64];
	ssize_t n;
	int raw;

	dst = malloc(2048 * 4096);
	T_CHECK(dst);
	T_CHECK(t_srv_start(pool, "127.0.0.1:0", 0, &srv, addr, sizeof(addr)) ==
		0);
	raw = t_raw_connect(addr);
	T_CHECK(raw >= 0);
	T_CHECK(net_set_nonblock(raw, 1) == 0);
	while (sent / WIRE_HDR_LEN < max_reqs) {
		if (sent / sizeof(reqs) != base) {
			base = sent / sizeof(reqs);
			for (i = 0; i < BATCH; i++) {
				struct wire_hdr r = { WIRE_VERSION,
						      WIRE_OP_READ,
						      0,
						      LEN,
						      base * BATCH + i,
						      (i % 1024) * LEN };

				wire_hdr_pack(&r, reqs + i * WIRE_HDR_LEN);
			}
		}
		n = send(raw, reqs + sent % sizeof(reqs),
			 sizeof(reqs) - sent % sizeof(reqs), MSG_NOSIGNAL);
		if (n > 0) {
			sent += (uint64_t)n;
			continue;
		}
		T_CHECK(n < 0 && errno == EAGAIN);
		struct pollfd pfd = { .fd = raw, .events = POLLOUT };
		if (poll(&pfd, 1, 500) == 0) {
			blocked = true;
			break;
		}
	}
	T_CHECK(blocked);
	/* parsing stopped at the reply cap, not at the end of the input */
	pagesrv_stats(srv, &ss);
	if (getenv("T_DEBUG"))
		fprintf(stderr, "requests sent %llu, parsed %llu\n",
			(unsigned long long)(sent / WIRE_HDR_LEN),
			(unsigned long long)ss.reads);
	T_CHECK(ss.reads < 4096 && ss.reads < sent / WIRE_HDR_LEN / 4);
	/* others are served while that one is stuck */
	T_CHECK(t_drv_init(&d) == 0);
	T_CHECK(t_open(&d, addr, T_INSTANCE, &p) == 0);
	T_CHECK(t_read_range(&d, p, 0, 2048, 4096, 64, dst) == 0);
	d.ops->peer_close(p);
	t_drv_fini(&d);
	/* the stuck one's replies: whole, in order, by odd-sized recv()s */
	T_CHECK(net_set_nonblock(raw, 0) == 0);
	for (i = 0; i < CHECK; i++) {
		T_CHECK(t_raw_recv_chunked(raw, hdr, sizeof(hdr), 7) == 0);
		wire_hdr_unpack(hdr, &h);
		T_CHECK(h.version == WIRE_VERSION && h.op == WIRE_OP_READ);
		T_CHECK(h.flags_status == 0 && h.len == LEN && h.tag == i);
		T_CHECK(t_raw_recv_chunked(raw, payload, LEN, 7919) == 0);
		off = (i % 1024) * LEN;
		T_CHECK(t_verify(payload, off, LEN) == 0);
	}
	close(raw);
	pagesrv_stats(srv, &ss);
	T_CHECK(ss.dropped == 0 && ss.errors == 0);
	pagesrv_destroy(srv);
	free(dst);
	return 0;
}

/* Many peers (one connection each) reading at once; the server's cap. */
static int test_xport_tcp_many(const struct t_pool *pool)
{
	enum { NPEERS = 32, PER = T_PAGES / NPEERS, WINDOW = 16 };
	struct xport_peer *p[NPEERS];
	uint64_t next[NPEERS] = { 0 }, i, end;
	struct pagesrv_stats ss;
	struct xport_stats st;
	struct pagesrv *srv;
	struct t_drv d;
	char addr[64];
	unsigned int k, up;
	uint8_t *dst;

	dst = malloc(T_POOL_SIZE);
	T_CHECK(dst);
	T_CHECK(t_srv_start(pool, "127.0.0.1:0", 0, &srv, addr, sizeof(addr)) ==
		0);
	T_CHECK(t_drv_init(&d) == 0);
	for (k = 0; k < NPEERS; k++)
		T_CHECK(t_open(&d, addr, T_INSTANCE, &p[k]) == 0);
	/* secure: more handshakes at once from one address than the server
	 * lets be (PAGESRV_HS_PER_SRC): some are closed, and come back */
	for (k = 0; t_auth >= 0 && k < NPEERS; k++)
		T_CHECK(t_wait_state(&d, p[k], XPORT_PEER_UP, T_WAIT_MS));
	t_drv_reset(&d);
	end = t_now_ms() + 60000;
	while (d.ndone < T_PAGES) {
		for (k = 0; k < NPEERS; k++) {
			d.ops->peer_stats(p[k], &st);
			while (next[k] < PER &&
			       st.posted - st.completed - st.failed < WINDOW) {
				i = (uint64_t)k * PER + next[k];
				T_CHECK(d.ops->read(p[k], i * 4096, 4096,
						    dst + i * 4096, i) == 0);
				next[k]++;
				st.posted++;
			}
		}
		T_CHECK(t_now_ms() < end);
		T_CHECK(t_drv_poll(&d, 100) == 0);
	}
	T_CHECK(d.nfail == 0);
	for (i = 0; i < T_PAGES; i++)
		T_CHECK(d.calls[i] == 1 &&
			pattern_check(dst + i * 4096, T_SEED, i) == 0);
	for (k = 0; k < NPEERS; k++)
		d.ops->peer_close(p[k]);
	t_drv_fini(&d);
	pagesrv_destroy(srv);
	/* secure: past the cap a connection in its handshake makes room */
	if (t_auth >= 0) {
		free(dst);
		return 0;
	}

	/* cap of 4: the 5th and 6th are closed and stay DOWN meanwhile */
	T_CHECK(t_srv_start(pool, "127.0.0.1:0", 4, &srv, addr, sizeof(addr)) ==
		0);
	T_CHECK(t_drv_init(&d) == 0);
	for (k = 0; k < 6; k++)
		T_CHECK(t_open(&d, addr, T_INSTANCE, &p[k]) == 0);
	end = t_now_ms() + 600;
	while (t_now_ms() < end)
		t_drv_poll(&d, 10);
	for (k = 0, up = 0; k < 6; k++)
		up += d.ops->peer_state(p[k]) == XPORT_PEER_UP;
	T_CHECK(up == 4);
	pagesrv_stats(srv, &ss);
	T_CHECK(ss.dropped >= 2 && ss.conns == 4);
	/* room again: the others get in on their next retry */
	for (k = 0; k < 6; k++) {
		if (d.ops->peer_state(p[k]) == XPORT_PEER_UP) {
			d.ops->peer_close(p[k]);
			p[k] = NULL;
			if (++up == 6)
				break;
		}
	}
	for (k = 0; k < 6; k++) {
		if (!p[k])
			continue;
		T_CHECK(t_wait_state(&d, p[k], XPORT_PEER_UP, T_WAIT_MS));
		T_CHECK(t_read_range(&d, p[k], 4096 * k, 4, 4096, 4, dst) == 0);
	}
	t_drv_fini(&d); /* closes the remaining peers */
	pagesrv_destroy(srv);
	free(dst);
	return 0;
}

/*
 * destroy() on a shared ring with reads in flight: they fail with
 * -ECANCELED, our CQEs are reaped, another owner's CQE survives.
 */
static int test_xport_tcp_destroy(const struct t_pool *pool)
{
	static uint8_t buf[32][4096];
	struct req foreign = { REQ_TIMER };
	struct io_uring_sqe *sqe;
	struct io_uring_cqe *cqe;
	struct xport_peer *p;
	struct pagesrv *srv;
	struct t_drv d;
	char addr[64];
	unsigned int head, seen, mine;
	uint64_t end;
	uint32_t i;

	T_CHECK(t_srv_start(pool, "127.0.0.1:0", 0, &srv, addr, sizeof(addr)) ==
		0);
	T_CHECK(t_drv_init(&d) == 0);
	T_CHECK(t_open(&d, addr, T_INSTANCE, &p) == 0);
	T_CHECK(t_wait_state(&d, p, XPORT_PEER_UP, T_WAIT_MS));
	t_drv_reset(&d);
	sqe = io_uring_get_sqe(&d.ring);
	T_CHECK(sqe);
	io_uring_prep_nop(sqe);
	io_uring_sqe_set_data(sqe, &foreign);
	for (i = 0; i < 32; i++)
		T_CHECK(d.ops->read(p, i * 4096, 4096, buf[i], i) == 0);
	d.ops->destroy(d.x);
	d.x = NULL;
	T_CHECK(d.ndone == 32);
	for (i = 0; i < 32; i++)
		T_CHECK(d.calls[i] == 1 && d.status[i] == -ECANCELED);
	/* only the foreign CQE may be left, and it must be */
	mine = 0;
	end = t_now_ms() + 300;
	while (t_now_ms() < end) {
		struct __kernel_timespec ts = { .tv_nsec = 20000000 };

		io_uring_wait_cqe_timeout(&d.ring, &cqe, &ts);
		seen = 0;
		io_uring_for_each_cqe(&d.ring, head, cqe) {
			seen++;
			T_CHECK(io_uring_cqe_get_data(cqe) == &foreign);
			T_CHECK(cqe->res == 0);
			mine++;
		}
		io_uring_cq_advance(&d.ring, seen);
	}
	T_CHECK(mine == 1);
	t_drv_fini(&d);
	pagesrv_destroy(srv);
	return 0;
}

/*
 * Writes land in the owner's pool and read back, queued while CONNECTING
 * or pipelined with reads; a write out of the pool is answered -ERANGE,
 * writes nothing, and the connection stays. The pool itself is looked at
 * with the server stopped (t_pool_holds()).
 */
static int test_xport_tcp_write(const struct t_pool *pool)
{
	const uint64_t first = 256, n = 1024; /* pages */
	struct pagesrv_stats ss;
	struct xport_stats st;
	struct xport_peer *p;
	struct pagesrv *srv;
	uint8_t *src, *dst;
	char addr[64];
	struct t_drv d;
	uint32_t i;

	src = malloc(T_POOL_SIZE);
	dst = malloc(T_POOL_SIZE);
	T_CHECK(src && dst);
	T_CHECK(t_srv_start(pool, "127.0.0.1:0", 0, &srv, addr, sizeof(addr)) ==
		0);
	T_CHECK(t_drv_init(&d) == 0);
	/* posted while CONNECTING: queued, sent once UP */
	T_CHECK(t_open(&d, addr, T_INSTANCE, &p) == 0);
	T_CHECK(d.ops->peer_state(p) == XPORT_PEER_CONNECTING);
	t_fill(src, first * 4096, n * 4096, T_WSEED);
	T_CHECK(t_xfer_range(&d, p, true, first * 4096, n, 4096, 128, src) ==
		0);
	T_CHECK(d.ops->peer_state(p) == XPORT_PEER_UP);
	T_CHECK(t_read_range_seed(&d, p, first * 4096, n, 4096, 64, dst,
				  T_WSEED) == 0);
	/* done(0): the bytes are in the owner's pool, and only those */
	pagesrv_destroy(srv);
	T_CHECK(t_pool_holds(pool, first, n, T_WSEED));
	T_CHECK(t_pool_holds(pool, 0, first, T_SEED));
	T_CHECK(t_pool_holds(pool, first + n, T_PAGES - first - n, T_SEED));
	T_CHECK(t_wait_state(&d, p, XPORT_PEER_DOWN, T_WAIT_MS));
	T_CHECK(t_srv_start(pool, addr, 0, &srv, NULL, 0) == 0);
	T_CHECK(t_wait_state(&d, p, XPORT_PEER_UP, T_WAIT_MS));
	/* 1 MiB writes put the whole pool back; 64 KiB reads check it */
	t_fill(src, 0, T_POOL_SIZE, T_SEED);
	T_CHECK(t_xfer_range(&d, p, true, 0, T_POOL_SIZE / WIRE_LEN_MAX,
			     WIRE_LEN_MAX, 16, src) == 0);
	T_CHECK(t_read_range(&d, p, 0, T_POOL_SIZE / 65536, 65536, 64, dst) ==
		0);
	d.ops->peer_stats(p, &st);
	T_CHECK(st.wposted == n + T_POOL_SIZE / WIRE_LEN_MAX);
	T_CHECK(st.wcompleted == st.wposted && st.wfailed == 0);
	T_CHECK(st.wbytes == n * 4096 + T_POOL_SIZE);
	T_CHECK(st.posted == n + T_POOL_SIZE / 65536 &&
		st.completed == st.posted);
	pagesrv_stats(srv, &ss); /* the server since its restart */
	T_CHECK(ss.writes == T_POOL_SIZE / WIRE_LEN_MAX &&
		ss.write_bytes == T_POOL_SIZE);
	T_CHECK(ss.errors == 0 && ss.dropped == 0);

	/* bad arguments are refused before anything is queued */
	T_CHECK(d.ops->write(p, 0, 0, src, 0, 0) == -EINVAL);
	T_CHECK(d.ops->write(p, 0, 100, src, 0, 0) == -EINVAL);
	T_CHECK(d.ops->write(p, 0, 2 * WIRE_LEN_MAX, src, 0, 0) == -EINVAL);
	T_CHECK(d.ops->write(p, 0, 4096, NULL, 0, 0) == -EINVAL);
	/* out of the pool: -ERANGE, nothing written; the connection stays */
	t_fill(src, 5 * 4096, 4096, T_WSEED);
	t_drv_reset(&d);
	T_CHECK(d.ops->write(p, T_POOL_SIZE, 4096, src, 0, 0) == 0);
	T_CHECK(d.ops->write(p, T_POOL_SIZE - 4096, 8192, src, 0, 1) == 0);
	T_CHECK(d.ops->write(p, UINT64_MAX - 4095, 8192, src, 0, 2) == 0);
	T_CHECK(d.ops->write(p, 5 * 4096, 4096, src, 0, 3) == 0);
	T_CHECK(d.ops->read(p, 5 * 4096, 4096, dst, 4) == 0);
	T_CHECK(t_wait_done(&d, 5, T_WAIT_MS));
	T_CHECK(d.status[0] == -ERANGE && d.status[1] == -ERANGE &&
		d.status[2] == -ERANGE && d.status[3] == 0 && d.status[4] == 0);
	/* requests on one connection are served in order */
	T_CHECK(pattern_check(dst, T_WSEED, 5) == 0);
	T_CHECK(d.ops->peer_state(p) == XPORT_PEER_UP);
	t_fill(src, 5 * 4096, 4096, T_SEED);
	T_CHECK(t_xfer_range(&d, p, true, 5 * 4096, 1, 4096, 1, src) == 0);
	d.ops->peer_stats(p, &st);
	T_CHECK(st.wfailed == 3);
	pagesrv_stats(srv, &ss);
	T_CHECK(ss.errors == 3 && ss.dropped == 0 && ss.conns == 1);
	/* reads and writes share the T_DEPTH slots */
	t_drv_reset(&d);
	for (i = 0; i < T_DEPTH; i++) {
		if (i % 2)
			T_CHECK(d.ops->write(p, (uint64_t)i * 4096, 4096,
					     src + (uint64_t)i * 4096, 0,
					     i) == 0);
		else
			T_CHECK(d.ops->read(p, (uint64_t)i * 4096, 4096,
					    dst + (uint64_t)i * 4096, i) == 0);
	}
	T_CHECK(d.ops->write(p, 0, 4096, src, 0, T_DEPTH) == -EAGAIN);
	T_CHECK(t_wait_done(&d, T_DEPTH, T_WAIT_MS));
	for (i = 0; i < T_DEPTH; i++)
		T_CHECK(d.calls[i] == 1 && d.status[i] == 0);
	d.ops->peer_close(p);
	t_drv_fini(&d);
	pagesrv_destroy(srv);
	/* as it was: also the last page, which the -ERANGE writes spared */
	T_CHECK(t_pool_holds(pool, 0, T_PAGES, T_SEED));
	free(src);
	free(dst);
	return 0;
}

/* The same with writes: those done with 0 are in the pool. */
static int test_xport_tcp_write_loss(const struct t_pool *pool)
{
	return t_server_lost(pool, true);
}

/* A raw server's end of one connection: accepted within 5 s. */
static int t_raw_accept(int lfd)
{
	struct pollfd pfd = { .fd = lfd, .events = POLLIN };

	if (poll(&pfd, 1, 5000) != 1)
		return -ETIMEDOUT;
	return accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
}

/*
 * A server that answers writes before it has read their data (as an
 * error reply may): the client's kernel may still be sending from each
 * write's buffer, so done waits until the data of that write has gone
 * out; then every write is done once with the server's status.
 */
static int test_xport_tcp_write_early(const struct t_pool *pool)
{
	/* far more than socket buffers hold: the last writes' data cannot
	 * leave before the server reads */
	const uint32_t n = 64, len = WIRE_LEN_MAX;
	uint8_t hdr[WIRE_HDR_LEN], *src;
	struct xport_stats st;
	struct xport_peer *p;
	struct wire_hdr h;
	struct t_drv d;
	int lfd, fd;
	char addr[64];
	uint32_t i;

	src = calloc(n, len);
	T_CHECK(src);
	T_CHECK(net_listen("127.0.0.1:0", 4, &lfd) == 0);
	T_CHECK(net_local_addr(lfd, addr, sizeof(addr)) == 0);
	T_CHECK(t_drv_init(&d) == 0);
	T_CHECK(t_open(&d, addr, 0, &p) == 0);
	fd = t_raw_accept(lfd);
	T_CHECK(fd >= 0);
	T_CHECK(net_set_nonblock(fd, 1) == 0);
	T_CHECK(t_raw_recv_drv(&d, fd, hdr, sizeof(hdr), sizeof(hdr)) == 0);
	wire_hdr_unpack(hdr, &h);
	T_CHECK(h.op == WIRE_OP_HELLO);
	h = (struct wire_hdr){ WIRE_VERSION, WIRE_OP_HELLO, 0, 0, h.tag, 1 };
	wire_hdr_pack(&h, hdr);
	T_CHECK(send(fd, hdr, sizeof(hdr), MSG_NOSIGNAL) == sizeof(hdr));
	T_CHECK(t_wait_state(&d, p, XPORT_PEER_UP, T_WAIT_MS));
	t_drv_reset(&d);
	for (i = 0; i < n; i++)
		T_CHECK(d.ops->write(p, (uint64_t)i * len, len,
				     src + (size_t)i * len, 0, i) == 0);
	/* ERANGE to all of them, before reading any data. The wire tag is
	 * generation << 32 | slot (docs/transport.md): a new peer's
	 * requests take slots 0, 1, ... in their first generation. */
	for (i = 0; i < n; i++) {
		h = (struct wire_hdr){ WIRE_VERSION,   WIRE_OP_WRITE,
				       ERANGE,	       0,
				       1ull << 32 | i, 0 };
		wire_hdr_pack(&h, hdr);
		T_CHECK(send(fd, hdr, sizeof(hdr), MSG_NOSIGNAL) ==
			sizeof(hdr));
	}
	for (i = 0; i < 50; i++)
		T_CHECK(t_drv_poll(&d, 2) == 0);
	/* those whose data went out are done, the others wait for it */
	if (getenv("T_DEBUG"))
		fprintf(stderr,
			"writes done before their data was read: %llu\n",
			(unsigned long long)d.ndone);
	T_CHECK(d.ndone < n && d.nfail == d.ndone);
	T_CHECK(d.ops->peer_state(p) == XPORT_PEER_UP);
	/* the server reads it all: each write is done once, -ERANGE */
	T_CHECK(t_raw_recv_drv(&d, fd, NULL, (size_t)n * (WIRE_HDR_LEN + len),
			       SIZE_MAX) == 0);
	T_CHECK(t_wait_done(&d, n, T_WAIT_MS));
	for (i = 0; i < n; i++)
		T_CHECK(d.calls[i] == 1 && d.status[i] == -ERANGE);
	T_CHECK(d.bad_tags == 0 && d.ops->peer_state(p) == XPORT_PEER_UP);
	d.ops->peer_stats(p, &st);
	T_CHECK(st.wposted == n && st.wfailed == n && st.wcompleted == 0);
	d.ops->peer_close(p);
	t_drv_fini(&d);
	close(fd);
	close(lfd);
	free(src);
	return 0;
}

/*
 * Waits for the reads of @n pages from pool page 0 on into @buf (tag i:
 * page i; d->status[i] 1 while posted), posting again, as the fault loop
 * does, each one that fails, until all are done with their data and
 * verified (0), or T_WAIT_MS passed (-1).
 */
static int t_read_retry(struct t_drv *d, struct xport_peer *p, uint32_t n,
			uint8_t *buf)
{
	uint64_t end = t_now_ms() + T_WAIT_MS;
	uint32_t i, ok;
	int ret;

	for (;;) {
		for (i = 0, ok = 0; i < n; i++) {
			if (d->status[i] == 0 && d->calls[i]) {
				ok++;
				continue;
			}
			if (d->status[i] == 1)
				continue; /* in flight */
			ret = d->ops->read(p, (uint64_t)i * 4096, 4096,
					   buf + (size_t)i * 4096, i);
			if (!ret)
				d->status[i] = 1;
			else if (ret != -ENOTCONN && ret != -EAGAIN)
				return -1;
		}
		if (ok == n)
			break;
		if (t_now_ms() >= end)
			return -1;
		T_CHECK(t_drv_poll(d, 10) == 0);
	}
	return t_verify(buf, 0, n * 4096);
}

/*
 * For the stall cases: a driver with a stall watch of @stall_ms, and a
 * peer up on a raw server that answered HELLO and does nothing else yet
 * (its listening socket in *@lfd, its address in @addr if not NULL, the
 * accepted connection, non-blocking, in *@fd). Returns 0 or -1.
 */
static int t_stall_raw_up(struct t_drv *d, unsigned int stall_ms, int *lfd,
			  char *addr, size_t addr_len, int *fd,
			  struct xport_peer **p)
{
	uint8_t hdr[WIRE_HDR_LEN];
	struct wire_hdr h;
	char a[64];

	T_CHECK(net_listen("127.0.0.1:0", 4, lfd) == 0);
	T_CHECK(net_local_addr(*lfd, a, sizeof(a)) == 0);
	if (addr)
		snprintf(addr, addr_len, "%s", a);
	t_stall_ms = stall_ms;
	T_CHECK(t_drv_init(d) == 0);
	t_stall_ms = 0;
	atomic_store(&t_stalls, 0);
	T_CHECK(t_open(d, a, 0, p) == 0);
	*fd = t_raw_accept(*lfd);
	T_CHECK(*fd >= 0);
	T_CHECK(net_set_nonblock(*fd, 1) == 0);
	T_CHECK(t_raw_recv_drv(d, *fd, hdr, sizeof(hdr), sizeof(hdr)) == 0);
	wire_hdr_unpack(hdr, &h);
	T_CHECK(h.op == WIRE_OP_HELLO);
	h = (struct wire_hdr){ WIRE_VERSION, WIRE_OP_HELLO, 0, 0, h.tag, 1 };
	wire_hdr_pack(&h, hdr);
	T_CHECK(send(*fd, hdr, sizeof(hdr), MSG_NOSIGNAL) == sizeof(hdr));
	T_CHECK(t_wait_state(d, *p, XPORT_PEER_UP, T_WAIT_MS));
	return 0;
}

/*
 * An owner that stops answering while its kernel still takes our bytes (a
 * request changed on the path that its server now waits on for bytes that
 * never come): a raw server answers HELLO, reads 8 READs and stays silent,
 * its connection open; a page server then listens on the port. The
 * connection is closed after stall_ms of silence and dialed again; the
 * reads, posted again as they fail, are all answered with their data.
 * Then the connection, idle (nothing awaited), is left alone: no stall is
 * counted while nothing is awaited.
 */
static int test_xport_tcp_stall(const struct t_pool *pool)
{
	static uint8_t buf[8 * 4096];
	struct pagesrv *srv;
	struct xport_peer *p;
	struct t_drv d;
	uint64_t stalls, end;
	int lfd, fd;
	char addr[64];
	uint32_t i;

	T_CHECK(t_stall_raw_up(&d, 300, &lfd, addr, sizeof(addr), &fd, &p) ==
		0);
	t_drv_reset(&d);
	for (i = 0; i < 8; i++) {
		T_CHECK(d.ops->read(p, (uint64_t)i * 4096, 4096,
				    buf + (size_t)i * 4096, i) == 0);
		d.status[i] = 1;
	}
	/* the silent server has them all, and answers nothing */
	T_CHECK(t_raw_recv_drv(&d, fd, NULL, 8 * WIRE_HDR_LEN, SIZE_MAX) == 0);
	close(lfd);
	T_CHECK(t_srv_start(pool, addr, 0, &srv, NULL, 0) == 0);
	T_CHECK(t_read_retry(&d, p, 8, buf) == 0);
	stalls = atomic_load(&t_stalls);
	if (getenv("T_DEBUG"))
		fprintf(stderr, "stalls: %llu\n", (unsigned long long)stalls);
	T_CHECK(stalls >= 1);
	/* the silent connection was closed by us */
	T_CHECK(t_raw_is_closed(fd));
	/* idle, well past stall_ms: left alone */
	end = t_now_ms() + 10 * 300;
	while (t_now_ms() < end)
		T_CHECK(t_drv_poll(&d, 10) == 0);
	T_CHECK(atomic_load(&t_stalls) == stalls);
	T_CHECK(d.ops->peer_state(p) == XPORT_PEER_UP);
	T_CHECK(t_read_range(&d, p, 0, 8, 4096, 8, buf) == 0);
	T_CHECK(atomic_load(&t_stalls) == stalls);
	d.ops->peer_close(p);
	t_drv_fini(&d);
	pagesrv_destroy(srv);
	close(fd);
	return 0;
}

/*
 * A proxy that goes mute: it joins each connection accepted on lfd to
 * one to srv, one at a time; on the first it passes on only @budget bytes
 * of what the server sends and swallows the rest (the server sends on,
 * the client gets nothing more), on the next ones everything.
 */
struct t_mute {
	int lfd;
	char srv[64];
	uint64_t budget;
	atomic_bool stop;
	atomic_uint conns;
};

/* Passes bytes between @cfd and @sfd until either end closes. */
static void t_mute_pump(struct t_mute *m, int cfd, int sfd, uint64_t budget)
{
	static uint8_t b[256 << 10];
	struct pollfd pfd[2] = { { .fd = cfd, .events = POLLIN },
				 { .fd = sfd, .events = POLLIN } };
	ssize_t n, k;

	while (!atomic_load(&m->stop)) {
		if (poll(pfd, 2, 20) <= 0)
			continue;
		if (pfd[0].revents) {
			n = recv(cfd, b, sizeof(b), 0);
			if (n <= 0 ||
			    send(sfd, b, (size_t)n, MSG_NOSIGNAL) != n)
				return;
		}
		if (pfd[1].revents) {
			n = recv(sfd, b, sizeof(b), 0);
			if (n <= 0)
				return;
			k = (uint64_t)n < budget ? n : (ssize_t)budget;
			budget -= (uint64_t)k;
			if (k && send(cfd, b, (size_t)k, MSG_NOSIGNAL) != k)
				return;
		}
	}
}

static void *t_mute_main(void *arg)
{
	struct t_mute *m = arg;
	struct pollfd pfd = { .fd = m->lfd, .events = POLLIN };
	int cfd, sfd;

	while (!atomic_load(&m->stop)) {
		if (poll(&pfd, 1, 20) != 1)
			continue;
		cfd = accept4(m->lfd, NULL, NULL, SOCK_CLOEXEC);
		if (cfd < 0)
			continue;
		if (net_connect(m->srv, 2000, &sfd)) {
			close(cfd);
			continue;
		}
		t_mute_pump(m, cfd, sfd,
			    atomic_fetch_add(&m->conns, 1) ? UINT64_MAX
							   : m->budget);
		close(sfd);
		close(cfd);
	}
	return NULL;
}

/*
 * The owner's replies stop in the middle of a read's data (a proxy that
 * goes mute on the path; the server's kernel, and the proxy, still take
 * everything): 8 reads of 1 MiB (with the opener thread, records it
 * opens: part of the first already copied into its dst when the silence
 * starts). The connection is closed after stall_ms, the reads fail
 * (after the opener is done with their dsts) and, posted again, come back
 * verified on the next connection.
 */
static int test_xport_tcp_stall_mute(const struct t_pool *pool)
{
	const uint32_t n = 8, len = WIRE_LEN_MAX;
	struct t_mute m = { .budget = 0 };
	uint64_t end, handshake;
	struct pagesrv *srv;
	struct xport_peer *p;
	struct t_drv d;
	pthread_t th;
	char addr[64];
	uint8_t *buf;
	uint32_t i, ok;
	int ret;

	buf = malloc((size_t)n * len);
	T_CHECK(buf);
	T_CHECK(t_srv_start(pool, "127.0.0.1:0", 0, &srv, m.srv,
			    sizeof(m.srv)) == 0);
	T_CHECK(net_listen("127.0.0.1:0", 4, &m.lfd) == 0);
	T_CHECK(net_local_addr(m.lfd, addr, sizeof(addr)) == 0);
	/* the handshake's CHALL and DONE and the HELLO reply, then half of
	 * the first read's data */
	handshake = t_auth < 0 ? WIRE_HDR_LEN
			       : AUTH_CHALL_LEN + AUTH_DONE_LEN + WIRE_HDR_LEN +
					 AUTH_TAG_LEN;
	m.budget = handshake + WIRE_HDR_LEN + len / 2;
	T_CHECK(pthread_create(&th, NULL, t_mute_main, &m) == 0);
	t_stall_ms = 300;
	T_CHECK(t_drv_init(&d) == 0);
	t_stall_ms = 0;
	atomic_store(&t_stalls, 0);
	T_CHECK(t_open(&d, addr, T_INSTANCE, &p) == 0);
	T_CHECK(t_wait_state(&d, p, XPORT_PEER_UP, T_WAIT_MS));
	t_drv_reset(&d);
	for (i = 0; i < n; i++) {
		T_CHECK(d.ops->read(p, (uint64_t)i * len, len,
				    buf + (size_t)i * len, i) == 0);
		d.status[i] = 1;
	}
	end = t_now_ms() + T_WAIT_MS;
	for (;;) {
		for (i = 0, ok = 0; i < n; i++) {
			if (d.status[i] == 0 && d.calls[i]) {
				ok++;
				continue;
			}
			if (d.status[i] == 1)
				continue;
			/* failed: never with its data marked good */
			T_CHECK(d.status[i] == -ECONNRESET ||
				d.status[i] == -ENOTCONN);
			ret = d.ops->read(p, (uint64_t)i * len, len,
					  buf + (size_t)i * len, i);
			T_CHECK(ret == 0 || ret == -ENOTCONN);
			if (!ret)
				d.status[i] = 1;
		}
		if (ok == n || t_now_ms() >= end)
			break;
		T_CHECK(t_drv_poll(&d, 10) == 0);
	}
	T_CHECK(ok == n);
	T_CHECK(t_verify(buf, 0, n * len) == 0);
	T_CHECK(atomic_load(&t_stalls) >= 1);
	T_CHECK(atomic_load(&m.conns) >= 2);
	d.ops->peer_close(p);
	t_drv_fini(&d);
	atomic_store(&m.stop, true);
	pthread_join(th, NULL);
	close(m.lfd);
	pagesrv_destroy(srv);
	free(buf);
	return 0;
}

/*
 * A slow reply that keeps coming is not a stall: a raw server sends a
 * READ's reply in 64 pieces about 50 ms apart, more than three times
 * stall_ms in all; the read is done with its data, no stall counted, on
 * the one connection.
 */
static int test_xport_tcp_stall_slow(const struct t_pool *pool)
{
	static uint8_t buf[4096];
	uint8_t hdr[WIRE_HDR_LEN];
	const uint8_t *page = pool->base + 4096;
	struct xport_peer *p;
	struct wire_hdr h;
	struct t_drv d;
	int lfd, fd, i;

	T_CHECK(t_stall_raw_up(&d, 1000, &lfd, NULL, 0, &fd, &p) == 0);
	t_drv_reset(&d);
	T_CHECK(d.ops->read(p, 4096, 4096, buf, 0) == 0);
	T_CHECK(t_raw_recv_drv(&d, fd, hdr, sizeof(hdr), sizeof(hdr)) == 0);
	wire_hdr_unpack(hdr, &h);
	T_CHECK(h.op == WIRE_OP_READ && h.len == 4096 && h.arg == 4096);
	h = (struct wire_hdr){ WIRE_VERSION, WIRE_OP_READ, 0, 4096, h.tag, 0 };
	wire_hdr_pack(&h, hdr);
	T_CHECK(send(fd, hdr, sizeof(hdr), MSG_NOSIGNAL) == sizeof(hdr));
	for (i = 0; i < 64; i++) {
		uint64_t end = t_now_ms() + 50;

		while (t_now_ms() < end)
			T_CHECK(t_drv_poll(&d, 10) == 0);
		T_CHECK(d.ndone == 0);
		T_CHECK(send(fd, page + i * 64, 64, MSG_NOSIGNAL) == 64);
	}
	T_CHECK(t_wait_done(&d, 1, T_WAIT_MS));
	T_CHECK(d.calls[0] == 1 && d.status[0] == 0);
	T_CHECK(t_verify(buf, 4096, 4096) == 0);
	T_CHECK(atomic_load(&t_stalls) == 0);
	T_CHECK(d.ops->peer_state(p) == XPORT_PEER_UP);
	d.ops->peer_close(p);
	t_drv_fini(&d);
	close(fd);
	close(lfd);
	return 0;
}

int main(void)
{
	static const struct {
		const char *name;
		int (*fn)(const struct t_pool *pool);
		bool plain; /* a raw end: insecure only */
	} tests[] = {
		{ "bulk", test_xport_tcp_bulk, false },
		{ "errors", test_xport_tcp_errors, false },
		{ "direct", test_xport_tcp_direct, false },
		{ "stale", test_xport_tcp_stale, false },
		{ "restart", test_xport_tcp_restart, false },
		{ "bad_clients", test_xport_tcp_bad_clients, true },
		{ "backpressure", test_xport_tcp_backpressure, true },
		{ "many", test_xport_tcp_many, false },
		{ "destroy", test_xport_tcp_destroy, false },
		{ "write", test_xport_tcp_write, false },
		{ "write_loss", test_xport_tcp_write_loss, false },
		{ "write_early", test_xport_tcp_write_early, true },
		{ "stall", test_xport_tcp_stall, true },
		{ "stall_slow", test_xport_tcp_stall_slow, true },
		{ "stall_mute", test_xport_tcp_stall_mute, false },
	};
	/* the last two: records of more than a page opened on the opener
	 * thread (FARPAGE_TCP_OPENER=on) */
	static const int modes[] = { -1, 0, AUTH_F_ENCRYPT, 0, AUTH_F_ENCRYPT };
	static const char *const mode_names[] = { "insecure", "mac", "encrypt",
						  "mac+opener",
						  "encrypt+opener" };
	const char *only = getenv("T_ONLY"), *only_mode = getenv("T_MODE");
	struct t_pool pool;
	int ret, failed = 0;
	size_t i, m;

	log_init("test_xport_tcp", getenv("T_DEBUG") ? LOG_DBG : LOG_ERR);
	if (t_uring_or_skip())
		return 77;
	ret = t_pool_init(&pool);
	if (ret) {
		fprintf(stderr, "pool: %s\n", strerror(-ret));
		return 1;
	}
	for (m = 0; m < sizeof(modes) / sizeof(modes[0]); m++) {
		if (only_mode && strcmp(only_mode, mode_names[m]))
			continue;
		t_auth = modes[m];
		setenv("FARPAGE_TCP_OPENER", m >= 3 ? "on" : "off", 1);
		for (i = 0; i < sizeof(tests) / sizeof(tests[0]); i++) {
			if ((only && strcmp(only, tests[i].name)) ||
			    (tests[i].plain && t_auth >= 0))
				continue;
			ret = tests[i].fn(&pool);
			fprintf(stderr, "%s (%s): %s\n", tests[i].name,
				mode_names[m], ret ? "FAIL" : "ok");
			failed |= ret != 0;
		}
	}
	munmap(pool.base, T_POOL_SIZE);
	close(pool.fd);
	return failed ? 1 : 0;
}
