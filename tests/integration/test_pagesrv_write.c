// SPDX-License-Identifier: MIT
/*
 * The page server's WRITE request over real TCP sockets on 127.0.0.1, with
 * raw clients: data lands in the pool and reads back; out-of-range writes
 * (ERANGE, data dropped, stream in step); bad headers close only their
 * connection; a writer gone mid-data gets no reply; order on a connection;
 * back-pressure on a writer that reads no replies; write-lease
 * generations: a write of a generation older than one written to the same
 * 2 MiB segment is refused (ENOLCK), its data dropped; fences
 * (replicated regions): READ and WRITE inside a fenced extent are refused
 * ESTALE (the data dropped, the stream in step), and a WRITE into a
 * rebuild task's range marks its pages before they land, so the task's
 * copy skips them.
 */
#include <errno.h>
#include <poll.h>
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

#include "log.h"
#include "net.h"
#include "pagesrv.h"
#include "pattern.h"
#include "pgfence.h"
#include "t_util.h"
#include "wire.h"

#define T_POOL_SIZE (16ull << 20)
#define T_PAGES	    (T_POOL_SIZE / PATTERN_PAGE)
#define T_SEED	    0x5eedf00dull /* what the pool holds before a test */
#define T_WSEED	    0xa11ce000ull /* what tests write, + a round number */
#define T_INSTANCE  0x1234567890abcdefull
#define T_WAIT_MS   60000u /* only for a test that would otherwise hang */

/* The served pool, and what it must hold (the writes applied in order). */
struct t_pool {
	uint8_t *base;
	uint8_t *expect;
	int fd;
};

static int t_pool_init(struct t_pool *pool)
{
	pool->fd = memfd_create("t_pool", MFD_CLOEXEC);
	if (pool->fd < 0)
		return -errno;
	if (ftruncate(pool->fd, T_POOL_SIZE))
		return -errno;
	pool->base = mmap(NULL, T_POOL_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED,
			  pool->fd, 0);
	if (pool->base == MAP_FAILED)
		return -errno;
	pool->expect = malloc(T_POOL_SIZE);
	if (!pool->expect)
		return -ENOMEM;
	return 0;
}

/* Every test starts from the base pattern. */
static void t_pool_reset(struct t_pool *pool)
{
	uint64_t i;

	for (i = 0; i < T_PAGES; i++)
		pattern_fill(pool->base + i * PATTERN_PAGE, T_SEED, i);
	memcpy(pool->expect, pool->base, T_POOL_SIZE);
}

/*
 * The pool holds exactly what it must. Called once the server is gone: the
 * server thread writes the pool, and only pthread_join() in
 * pagesrv_destroy() orders that before our reads (its replies go out
 * through io_uring, which TSan does not see as synchronisation).
 */
static bool t_pool_is_expected(const struct t_pool *pool)
{
	return !memcmp(pool->base, pool->expect, T_POOL_SIZE);
}

/* Fills @len bytes (whole pages) with round @round's data for @off on. */
static void t_data_fill(uint8_t *dst, uint64_t off, uint32_t len,
			uint64_t round)
{
	uint32_t i;

	for (i = 0; i < len; i += PATTERN_PAGE)
		pattern_fill(dst + i, T_WSEED + round,
			     (off + i) / PATTERN_PAGE);
}

/* True if @len bytes (whole pages) are round @round's data for @off. */
static bool t_data_is(const uint8_t *src, uint64_t off, uint32_t len,
		      uint64_t round)
{
	uint32_t i;

	for (i = 0; i < len; i += PATTERN_PAGE)
		if (pattern_check(src + i, T_WSEED + round,
				  (off + i) / PATTERN_PAGE))
			return false;
	return true;
}

/* The fences of the next server started (NULL: none). */
static struct pgfence *t_fence;

static int t_srv_start(const struct t_pool *pool, struct pagesrv **out,
		       char *addr, size_t addr_len)
{
	struct pagesrv_cfg cfg = {
		.listen_addr = "127.0.0.1:0",
		.pool = pool->base,
		.pool_size = T_POOL_SIZE,
		.instance = T_INSTANCE,
		.insecure = true, /* the plain protocol, raw */
		.fence = t_fence,
	};
	int ret;

	ret = pagesrv_create(&cfg, out);
	if (ret)
		return ret;
	ret = pagesrv_addr(*out, addr, addr_len);
	if (ret)
		return ret;
	return pagesrv_start(*out);
}

static int t_connect(const char *addr)
{
	int fd, ret;

	ret = net_connect(addr, 2000, &fd);
	return ret ? ret : fd;
}

static void t_hdr_pack(uint8_t *b, uint8_t version, uint8_t op, uint32_t len,
		       uint64_t tag, uint64_t off)
{
	struct wire_hdr h = { version, op, 0, len, tag, off };

	wire_hdr_pack(&h, b);
}

/* Blocking send of all of @len bytes, at most @chunk per send(). */
static int t_send_chunked(int fd, const void *buf, size_t len, size_t chunk)
{
	size_t done = 0;
	ssize_t n;

	while (done < len) {
		n = send(fd, (const uint8_t *)buf + done,
			 len - done < chunk ? len - done : chunk, MSG_NOSIGNAL);
		if (n < 0)
			return -errno;
		done += (size_t)n;
	}
	return 0;
}

static int t_send_all(int fd, const void *buf, size_t len)
{
	return t_send_chunked(fd, buf, len, len);
}

static int t_send_hdr(int fd, uint8_t version, uint8_t op, uint32_t len,
		      uint64_t tag, uint64_t off)
{
	uint8_t b[WIRE_HDR_LEN];

	t_hdr_pack(b, version, op, len, tag, off);
	return t_send_all(fd, b, sizeof(b));
}

/* Receives exactly @len bytes (blocking fd; waits for each at most 10 s). */
static int t_recv_all(int fd, void *buf, size_t len)
{
	size_t got = 0;
	ssize_t n;

	while (got < len) {
		struct pollfd pfd = { .fd = fd, .events = POLLIN };

		if (poll(&pfd, 1, 10000) != 1)
			return -ETIMEDOUT;
		n = recv(fd, (uint8_t *)buf + got, len - got, 0);
		if (n <= 0)
			return n ? -errno : -ECONNRESET;
		got += (size_t)n;
	}
	return 0;
}

/* The next reply on @fd must be @op/@status/@tag with no data. */
static int t_expect_reply(int fd, uint8_t op, uint16_t status, uint64_t tag)
{
	uint8_t b[WIRE_HDR_LEN];
	struct wire_hdr h;

	T_CHECK(t_recv_all(fd, b, sizeof(b)) == 0);
	wire_hdr_unpack(b, &h);
	T_CHECK(h.version == WIRE_VERSION && h.op == op);
	T_CHECK(h.flags_status == status && h.len == 0 && h.tag == tag);
	T_CHECK(h.arg == 0);
	return 0;
}

/* WRITE @len bytes of @data at @off, tag @tag; waits for its status 0. */
static int t_write(int fd, uint64_t tag, uint64_t off, const void *data,
		   uint32_t len)
{
	T_CHECK(t_send_hdr(fd, WIRE_VERSION, WIRE_OP_WRITE, len, tag, off) ==
		0);
	T_CHECK(t_send_all(fd, data, len) == 0);
	return t_expect_reply(fd, WIRE_OP_WRITE, 0, tag);
}

/* WRITE of write-lease generation @wgen (WIRE_F_WGEN; the generation
 * sent in its own send() after the header); waits for status @status. */
static int t_write_gen(int fd, uint64_t tag, uint64_t off, const void *data,
		       uint32_t len, uint64_t wgen, uint16_t status)
{
	uint8_t b[WIRE_HDR_LEN], g[WIRE_WGEN_LEN];
	struct wire_hdr h = { WIRE_VERSION, WIRE_OP_WRITE, WIRE_F_WGEN,
			      len,	    tag,	   off };

	wire_hdr_pack(&h, b);
	wire_put64(g, wgen);
	T_CHECK(t_send_all(fd, b, sizeof(b)) == 0);
	T_CHECK(t_send_all(fd, g, sizeof(g)) == 0);
	T_CHECK(t_send_all(fd, data, len) == 0);
	return t_expect_reply(fd, WIRE_OP_WRITE, status, tag);
}

/* READ @len bytes at @off into @dst, tag @tag: status 0 and the data. */
static int t_read(int fd, uint64_t tag, uint64_t off, void *dst, uint32_t len)
{
	uint8_t b[WIRE_HDR_LEN];
	struct wire_hdr h;

	T_CHECK(t_send_hdr(fd, WIRE_VERSION, WIRE_OP_READ, len, tag, off) == 0);
	T_CHECK(t_recv_all(fd, b, sizeof(b)) == 0);
	wire_hdr_unpack(b, &h);
	T_CHECK(h.version == WIRE_VERSION && h.op == WIRE_OP_READ);
	T_CHECK(h.flags_status == 0 && h.len == len && h.tag == tag);
	return t_recv_all(fd, dst, len);
}

/*
 * True once the server closed @fd without sending anything (EOF or reset;
 * waits up to 10 s for it).
 */
static bool t_is_closed_silently(int fd)
{
	struct pollfd pfd = { .fd = fd, .events = POLLIN };
	uint8_t b[64];

	if (poll(&pfd, 1, 10000) != 1)
		return false;
	return recv(fd, b, sizeof(b), MSG_DONTWAIT) <= 0;
}

/*
 * A pipelined exchange on a raw connection: @out is sent while replies
 * are received (a client that sends all first could block forever on a
 * server that stops reading it), each handed in order to @check.
 */
struct t_pipe {
	int fd;
	const uint8_t *out;
	size_t out_len;
	uint64_t nrep; /* replies expected */
	int (*check)(void *arg, uint64_t i, const struct wire_hdr *h,
		     const uint8_t *data);
	void *arg;
};

static int t_pipe_run(const struct t_pipe *p)
{
	uint8_t hdr[WIRE_HDR_LEN], *data;
	size_t sent = 0, hpos = 0, dpos = 0;
	uint64_t got = 0, end = t_now_ms() + T_WAIT_MS;
	struct wire_hdr h = { 0 };
	ssize_t n;
	int ret = -1;

	data = malloc(WIRE_LEN_MAX);
	if (!data)
		return -1;
	if (net_set_nonblock(p->fd, 1))
		goto out;
	while (sent < p->out_len || got < p->nrep) {
		struct pollfd pfd = {
			.fd = p->fd,
			.events = POLLIN | (sent < p->out_len ? POLLOUT : 0),
		};

		if (t_now_ms() > end) {
			fprintf(stderr, "pipe: sent %zu of %zu, %llu replies\n",
				sent, p->out_len, (unsigned long long)got);
			goto out;
		}
		if (poll(&pfd, 1, 1000) < 0)
			goto out;
		if (pfd.revents & POLLOUT) {
			n = send(p->fd, p->out + sent, p->out_len - sent,
				 MSG_NOSIGNAL);
			if (n < 0 && errno != EAGAIN)
				goto out;
			if (n > 0)
				sent += (size_t)n;
		}
		if (!(pfd.revents & (POLLIN | POLLERR | POLLHUP)))
			continue;
		if (hpos < WIRE_HDR_LEN)
			n = recv(p->fd, hdr + hpos, WIRE_HDR_LEN - hpos, 0);
		else
			n = recv(p->fd, data + dpos, h.len - dpos, 0);
		if (n < 0 && errno == EAGAIN)
			continue;
		if (n <= 0) {
			fprintf(stderr, "pipe: connection lost after %llu\n",
				(unsigned long long)got);
			goto out;
		}
		if (hpos < WIRE_HDR_LEN) {
			hpos += (size_t)n;
			if (hpos < WIRE_HDR_LEN)
				continue;
			wire_hdr_unpack(hdr, &h);
			if (h.len > WIRE_LEN_MAX || got >= p->nrep)
				goto out;
		} else {
			dpos += (size_t)n;
		}
		if (dpos < h.len)
			continue;
		if (p->check(p->arg, got, &h, data))
			goto out;
		got++;
		hpos = 0;
		dpos = 0;
	}
	/* nothing more than expected (as far as it came), still open */
	n = recv(p->fd, hdr, 1, MSG_DONTWAIT);
	if (n < 0 && errno == EAGAIN)
		ret = net_set_nonblock(p->fd, 0);
	else
		fprintf(stderr, "pipe: more than %llu replies, or closed\n",
			(unsigned long long)got);
out:
	free(data);
	return ret;
}

/* A reply a pipelined exchange expects. */
struct t_exp {
	uint8_t op;
	uint16_t status;
	uint32_t len;
	uint64_t tag;
	uint64_t off;	    /* READ data: pool offset it is from */
	uint64_t round;	    /* READ data: round of t_data_fill(), or */
	const uint8_t *raw; /* READ data: its bytes */
};

static int t_exp_check(void *arg, uint64_t i, const struct wire_hdr *h,
		       const uint8_t *data)
{
	const struct t_exp *e = (const struct t_exp *)arg + i;

	T_CHECK(h->version == WIRE_VERSION && h->op == e->op);
	T_CHECK(h->flags_status == e->status && h->tag == e->tag);
	T_CHECK(h->len == e->len);
	if (!e->len)
		return 0;
	if (e->raw)
		T_CHECK(!memcmp(data, e->raw, e->len));
	else
		T_CHECK(t_data_is(data, e->off, e->len, e->round));
	return 0;
}

/* A request stream being built. */
struct t_buf {
	uint8_t *p;
	size_t len, cap;
};

/* Makes room for @len more bytes; returns where they go, or NULL. */
static uint8_t *t_buf_room(struct t_buf *b, size_t len)
{
	uint8_t *p;

	if (b->len + len > b->cap) {
		p = realloc(b->p, (b->len + len) * 2);
		if (!p)
			return NULL;
		b->p = p;
		b->cap = (b->len + len) * 2;
	}
	return b->p + b->len;
}

static int t_buf_add(struct t_buf *b, const void *src, size_t len)
{
	uint8_t *p = t_buf_room(b, len);

	if (!p)
		return -1;
	memcpy(p, src, len);
	b->len += len;
	return 0;
}

static int t_buf_hdr(struct t_buf *b, uint8_t op, uint32_t len, uint64_t tag,
		     uint64_t off)
{
	uint8_t h[WIRE_HDR_LEN];

	t_hdr_pack(h, WIRE_VERSION, op, len, tag, off);
	return t_buf_add(b, h, sizeof(h));
}

/*
 * Appends a WRITE of round @round's data for [off, off + len) and applies
 * it to what the pool must hold.
 */
static int t_buf_write(struct t_buf *b, uint64_t tag, uint64_t off,
		       uint32_t len, uint64_t round, struct t_pool *pool)
{
	uint8_t *p;

	if (t_buf_hdr(b, WIRE_OP_WRITE, len, tag, off))
		return -1;
	p = t_buf_room(b, len);
	if (!p)
		return -1;
	/* filled where it is aligned (@off is page-aligned), then copied */
	t_data_fill(pool->expect + off, off, len, round);
	memcpy(p, pool->expect + off, len);
	b->len += len;
	return 0;
}

/*
 * (1) WRITEs of 1 byte to 1 MiB at several offsets, the last page and
 * unaligned ones included, pipelined; every byte reads back and the pool
 * holds exactly what was written.
 */
static int test_pagesrv_write_basic(struct t_pool *pool)
{
	static const struct {
		uint64_t off;
		uint32_t len;
	} w[] = {
		{ 0, 4096 },
		{ 5 * 4096, 65536 },
		{ (1 << 20) + 3 * 4096, WIRE_LEN_MAX },
		{ T_POOL_SIZE - WIRE_LEN_MAX, WIRE_LEN_MAX - 4096 },
		{ T_POOL_SIZE - 4096, 4096 }, /* the last page */
		{ 3 * (1 << 20), 8192 },
	};
	const size_t nw = sizeof(w) / sizeof(w[0]);
	uint8_t odd[100], hdr[WIRE_HDR_LEN], *buf, *dst;
	struct pagesrv_stats ss;
	struct pagesrv *srv;
	uint64_t bytes = 0;
	char addr[64];
	size_t i;
	int fd;

	buf = malloc(WIRE_LEN_MAX);
	dst = malloc(WIRE_LEN_MAX);
	T_CHECK(buf && dst);
	T_CHECK(t_srv_start(pool, &srv, addr, sizeof(addr)) == 0);
	fd = t_connect(addr);
	T_CHECK(fd >= 0);
	T_CHECK(t_send_hdr(fd, WIRE_VERSION, WIRE_OP_HELLO, 0, 1, T_INSTANCE) ==
		0);
	T_CHECK(t_recv_all(fd, hdr, sizeof(hdr)) == 0);
	T_CHECK(hdr[1] == WIRE_OP_HELLO && hdr[2] == 0 && hdr[3] == 0);
	/* all WRITEs first, their replies after: in order, status 0 */
	for (i = 0; i < nw; i++) {
		t_data_fill(buf, w[i].off, w[i].len, i);
		memcpy(pool->expect + w[i].off, buf, w[i].len);
		T_CHECK(t_send_hdr(fd, WIRE_VERSION, WIRE_OP_WRITE, w[i].len,
				   100 + i, w[i].off) == 0);
		/* odd-sized sends: data split anywhere */
		T_CHECK(t_send_chunked(fd, buf, w[i].len,
				       i % 2 ? 4096 + 17 : w[i].len) == 0);
		bytes += w[i].len;
	}
	for (i = 0; i < nw; i++)
		T_CHECK(t_expect_reply(fd, WIRE_OP_WRITE, 0, 100 + i) == 0);
	/* a 100-byte write at an odd offset, header and data split */
	for (i = 0; i < sizeof(odd); i++)
		odd[i] = (uint8_t)(i * 7 + 1);
	t_hdr_pack(hdr, WIRE_VERSION, WIRE_OP_WRITE, sizeof(odd), 200, 12345);
	T_CHECK(t_send_all(fd, hdr, 10) == 0);
	T_CHECK(t_send_all(fd, hdr + 10, sizeof(hdr) - 10) == 0);
	T_CHECK(t_send_chunked(fd, odd, sizeof(odd), 33) == 0);
	T_CHECK(t_expect_reply(fd, WIRE_OP_WRITE, 0, 200) == 0);
	memcpy(pool->expect + 12345, odd, sizeof(odd));
	bytes += sizeof(odd);
	/* what was written reads back, page by page */
	for (i = 0; i < nw; i++) {
		T_CHECK(t_read(fd, 300 + i, w[i].off, dst, w[i].len) == 0);
		T_CHECK(t_data_is(dst, w[i].off, w[i].len, i));
	}
	T_CHECK(t_read(fd, 400, 12288, dst, 4096) == 0);
	T_CHECK(!memcmp(dst, pool->expect + 12288, 4096));
	T_CHECK(!memcmp(dst + 12345 - 12288, odd, sizeof(odd)));
	pagesrv_stats(srv, &ss);
	T_CHECK(ss.writes == nw + 1 && ss.write_bytes == bytes);
	T_CHECK(ss.reads == nw + 1 && ss.errors == 0 && ss.dropped == 0);
	close(fd);
	pagesrv_destroy(srv);
	/* and the pool holds the writes, nothing else changed */
	T_CHECK(t_pool_is_expected(pool));
	free(buf);
	free(dst);
	return 0;
}

/*
 * (2) WRITEs outside the pool: ERANGE, data read and dropped (it is made
 * of valid READ headers: taken as requests they would draw replies), the
 * pool untouched; the connection goes on serving.
 */
static int test_pagesrv_write_range(struct t_pool *pool)
{
	static const struct {
		uint64_t off;
		uint32_t len;
	} w[] = {
		{ T_POOL_SIZE, 4096 },
		{ T_POOL_SIZE - 4096, 8192 },
		{ UINT64_MAX - 4095, 8192 }, /* off + len overflows */
		{ UINT64_MAX, 1 },
		{ T_POOL_SIZE - WIRE_LEN_MAX + 4096, WIRE_LEN_MAX },
		{ 1ull << 62, 4096 },
	};
	const size_t nw = sizeof(w) / sizeof(w[0]);
	struct t_exp exp[sizeof(w) / sizeof(w[0]) + 3];
	struct pagesrv_stats ss;
	struct t_buf b = { 0 };
	struct pagesrv *srv;
	uint8_t *junk;
	char addr[64];
	size_t i, k;
	int fd;

	junk = malloc(WIRE_LEN_MAX);
	T_CHECK(junk);
	for (k = 0; k + WIRE_HDR_LEN <= WIRE_LEN_MAX; k += WIRE_HDR_LEN)
		t_hdr_pack(junk + k, WIRE_VERSION, WIRE_OP_READ, 4096, 0xbad,
			   0);
	T_CHECK(t_srv_start(pool, &srv, addr, sizeof(addr)) == 0);
	fd = t_connect(addr);
	T_CHECK(fd >= 0);
	for (i = 0; i < nw; i++) {
		T_CHECK(t_buf_hdr(&b, WIRE_OP_WRITE, w[i].len, i, w[i].off) ==
			0);
		T_CHECK(t_buf_add(&b, junk, w[i].len) == 0);
		exp[i] = (struct t_exp){ .op = WIRE_OP_WRITE,
					 .status = ERANGE,
					 .tag = i };
	}
	/* the stream is still in step: a READ, a WRITE, a READ of it */
	T_CHECK(t_buf_hdr(&b, WIRE_OP_READ, 4096, 50, 5 * 4096) == 0);
	exp[i++] = (struct t_exp){ .op = WIRE_OP_READ,
				   .len = 4096,
				   .tag = 50,
				   .raw = pool->expect + 5 * 4096 };
	T_CHECK(t_buf_write(&b, 51, 7 * 4096, 4096, 9, pool) == 0);
	exp[i++] = (struct t_exp){ .op = WIRE_OP_WRITE, .tag = 51 };
	T_CHECK(t_buf_hdr(&b, WIRE_OP_READ, 4096, 52, 7 * 4096) == 0);
	exp[i++] = (struct t_exp){ .op = WIRE_OP_READ,
				   .len = 4096,
				   .tag = 52,
				   .off = 7 * 4096,
				   .round = 9 };
	struct t_pipe p = { fd, b.p, b.len, i, t_exp_check, exp };
	T_CHECK(t_pipe_run(&p) == 0);
	pagesrv_stats(srv, &ss);
	T_CHECK(ss.errors == nw && ss.writes == 1 && ss.write_bytes == 4096);
	T_CHECK(ss.reads == 2 && ss.dropped == 0);
	close(fd);
	pagesrv_destroy(srv);
	T_CHECK(t_pool_is_expected(pool));
	free(b.p);
	free(junk);
	return 0;
}

/*
 * (3) A WRITE of len 0 or above WIRE_LEN_MAX, a bad version, an unknown
 * op: that connection is closed without a reply, the pool untouched;
 * another connection goes on writing and reading meanwhile.
 */
static int test_pagesrv_write_bad(struct t_pool *pool)
{
	static const struct {
		uint8_t version, op;
		uint32_t len;
	} bad[] = {
		{ WIRE_VERSION, WIRE_OP_WRITE, 0 },
		{ WIRE_VERSION, WIRE_OP_WRITE, WIRE_LEN_MAX + 1 },
		{ WIRE_VERSION, WIRE_OP_WRITE, 0xffffffff },
		{ WIRE_VERSION + 1, WIRE_OP_WRITE, 4096 },
		{ 0, WIRE_OP_WRITE, 4096 },
		{ WIRE_VERSION, WIRE_OP_WRITE + 1, 4096 },
	};
	const size_t nbad = sizeof(bad) / sizeof(bad[0]);
	/* aligned: patterns are 64-bit words */
	_Alignas(uint64_t) uint8_t req[2 * WIRE_HDR_LEN + 4096];
	_Alignas(uint64_t) uint8_t page[4096];
	uint8_t got[4096];
	struct pagesrv_stats ss;
	struct pagesrv *srv;
	char addr[64];
	size_t i;
	int good, fd;

	T_CHECK(t_srv_start(pool, &srv, addr, sizeof(addr)) == 0);
	good = t_connect(addr);
	T_CHECK(good >= 0);
	for (i = 0; i < nbad; i++) {
		fd = t_connect(addr);
		T_CHECK(fd >= 0);
		/* a page of data, then a READ that must not be answered: one
		 * send, taken whole before the server can have closed */
		t_hdr_pack(req, bad[i].version, bad[i].op, bad[i].len, i, 0);
		t_data_fill(req + WIRE_HDR_LEN, 0, 4096, 50 + i);
		t_hdr_pack(req + WIRE_HDR_LEN + 4096, WIRE_VERSION,
			   WIRE_OP_READ, 4096, 99, 0);
		T_CHECK(send(fd, req, sizeof(req), MSG_NOSIGNAL) ==
			sizeof(req));
		T_CHECK(t_is_closed_silently(fd));
		close(fd);
		/* the good one meanwhile */
		t_data_fill(page, (i + 1) * 4096, sizeof(page), i);
		memcpy(pool->expect + (i + 1) * 4096, page, sizeof(page));
		T_CHECK(t_write(good, i, (i + 1) * 4096, page, sizeof(page)) ==
			0);
		T_CHECK(t_read(good, 1000 + i, (i + 1) * 4096, got,
			       sizeof(got)) == 0);
		T_CHECK(!memcmp(got, page, sizeof(got)));
	}
	pagesrv_stats(srv, &ss);
	T_CHECK(ss.dropped == nbad && ss.writes == nbad && ss.errors == 0);
	T_CHECK(ss.conns == nbad + 1);
	close(good);
	pagesrv_destroy(srv);
	T_CHECK(t_pool_is_expected(pool));
	return 0;
}

/*
 * (4) Writers gone in the middle of a WRITE's data: no reply, ever; the
 * bytes that came are in the pool (the range is partly written, as
 * documented), nothing beyond; the server serves the others.
 */
static int test_pagesrv_write_partial(struct t_pool *pool)
{
	const uint64_t off = 2 << 20, off2 = 4 << 20;
	const uint32_t len = 65536, half = 32768 + 100;
	struct linger lg = { .l_onoff = 1, .l_linger = 0 };
	uint8_t *data, *got;
	struct pagesrv_stats ss;
	struct pagesrv *srv;
	char addr[64];
	int fd, other;
	uint32_t i;

	data = malloc(len);
	got = malloc(len);
	T_CHECK(data && got);
	T_CHECK(t_srv_start(pool, &srv, addr, sizeof(addr)) == 0);
	other = t_connect(addr);
	T_CHECK(other >= 0);
	/* half the data, then EOF: the server takes up to it, then closes */
	fd = t_connect(addr);
	T_CHECK(fd >= 0);
	t_data_fill(data, off, len, 1);
	T_CHECK(t_send_hdr(fd, WIRE_VERSION, WIRE_OP_WRITE, len, 1, off) == 0);
	T_CHECK(t_send_all(fd, data, half) == 0);
	T_CHECK(shutdown(fd, SHUT_WR) == 0);
	T_CHECK(t_is_closed_silently(fd));
	close(fd);
	/* what came is in place, the rest is old */
	memcpy(pool->expect + off, data, half);
	T_CHECK(t_read(other, 1, off, got, len) == 0);
	T_CHECK(!memcmp(got, pool->expect + off, len));
	/* reset in the middle: no reply, and whatever came is in place */
	fd = t_connect(addr);
	T_CHECK(fd >= 0);
	t_data_fill(data, off2, len, 2);
	T_CHECK(t_send_hdr(fd, WIRE_VERSION, WIRE_OP_WRITE, len, 2, off2) == 0);
	T_CHECK(t_send_all(fd, data, half) == 0);
	T_CHECK(setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg)) == 0);
	close(fd);
	/* the other connection is served */
	t_data_fill(got, 4096, 4096, 3);
	memcpy(pool->expect + 4096, got, 4096);
	T_CHECK(t_write(other, 3, 4096, got, 4096) == 0);
	T_CHECK(t_read(other, 4, 4096, got, 4096) == 0);
	T_CHECK(t_data_is(got, 4096, 4096, 3));
	pagesrv_stats(srv, &ss);
	T_CHECK(ss.writes == 1 && ss.write_bytes == 4096);
	T_CHECK(ss.errors == 0 && ss.dropped == 0);
	close(other);
	pagesrv_destroy(srv);
	/* the reset one's range: old bytes or new ones at their place (how
	 * much came before the reset varies), nothing else changed */
	for (i = 0; i < len; i++)
		T_CHECK(pool->base[off2 + i] == pool->expect[off2 + i] ||
			pool->base[off2 + i] == data[i]);
	memcpy(pool->expect + off2, pool->base + off2, len);
	T_CHECK(t_pool_is_expected(pool));
	free(data);
	free(got);
	return 0;
}

/*
 * (5) Order on one connection, all pipelined: a READ after a WRITE of the
 * same range returns the new bytes; READs before it, even with their
 * replies backed up behind a client not reading yet, return the old ones.
 */
static int test_pagesrv_write_order(struct t_pool *pool)
{
	enum { N = 48 };
	const uint64_t off = 6 << 20;
	static struct t_exp exp[2 * N + 8];
	static uint8_t old0[4096];
	struct pagesrv_stats ss;
	struct t_buf b = { 0 };
	struct pagesrv *srv;
	uint64_t n = 0, i;
	uint8_t *old;
	char addr[64];
	int fd;

	old = malloc(WIRE_LEN_MAX);
	T_CHECK(old);
	memcpy(old0, pool->base, sizeof(old0));
	memcpy(old, pool->base + off, WIRE_LEN_MAX);
	T_CHECK(t_srv_start(pool, &srv, addr, sizeof(addr)) == 0);
	fd = t_connect(addr);
	T_CHECK(fd >= 0);
	/* page 0: READ, WRITE, READ, WRITE, READ */
	T_CHECK(t_buf_hdr(&b, WIRE_OP_READ, 4096, n, 0) == 0);
	exp[n] = (struct t_exp){ WIRE_OP_READ, 0, 4096, n, 0, 0, old0 };
	n++;
	T_CHECK(t_buf_write(&b, n, 0, 4096, 1, pool) == 0);
	exp[n] = (struct t_exp){ WIRE_OP_WRITE, 0, 0, n, 0, 0, NULL };
	n++;
	T_CHECK(t_buf_hdr(&b, WIRE_OP_READ, 4096, n, 0) == 0);
	exp[n] = (struct t_exp){ WIRE_OP_READ, 0, 4096, n, 0, 1, NULL };
	n++;
	T_CHECK(t_buf_write(&b, n, 0, 4096, 2, pool) == 0);
	exp[n] = (struct t_exp){ WIRE_OP_WRITE, 0, 0, n, 0, 0, NULL };
	n++;
	T_CHECK(t_buf_hdr(&b, WIRE_OP_READ, 4096, n, 0) == 0);
	exp[n] = (struct t_exp){ WIRE_OP_READ, 0, 4096, n, 0, 2, NULL };
	n++;
	/* N MiB-READs of a range (more than socket buffers hold: their
	 * replies wait while the WRITE behind them comes in), the WRITE,
	 * N READs again */
	for (i = 0; i < N; i++, n++) {
		T_CHECK(t_buf_hdr(&b, WIRE_OP_READ, WIRE_LEN_MAX, n, off) == 0);
		exp[n] = (struct t_exp){ WIRE_OP_READ, 0, WIRE_LEN_MAX, n,
					 off,	       0, old };
	}
	T_CHECK(t_buf_write(&b, n, off, WIRE_LEN_MAX, 3, pool) == 0);
	exp[n] = (struct t_exp){ WIRE_OP_WRITE, 0, 0, n, 0, 0, NULL };
	n++;
	for (i = 0; i < N; i++, n++) {
		T_CHECK(t_buf_hdr(&b, WIRE_OP_READ, WIRE_LEN_MAX, n, off) == 0);
		exp[n] = (struct t_exp){ WIRE_OP_READ, 0, WIRE_LEN_MAX, n,
					 off,	       3, NULL };
	}
	/* all of it sent at once, the replies read as they come */
	struct t_pipe p = { fd, b.p, b.len, n, t_exp_check, exp };
	T_CHECK(t_pipe_run(&p) == 0);
	pagesrv_stats(srv, &ss);
	T_CHECK(ss.writes == 3 && ss.reads == 3 + 2 * N && ss.errors == 0);
	close(fd);
	pagesrv_destroy(srv);
	T_CHECK(t_pool_is_expected(pool));
	free(old);
	free(b.p);
	return 0;
}

#define T_BP_LEN       32768u
#define T_BP_SLOTS     256u /* 8 MiB of the pool from 0 */
#define T_BP_READ_OFF  (8ull << 20)
#define T_BP_READS_MAX 256u

struct t_bp {
	uint64_t nreads;
	const uint8_t *read_data; /* what the READs return */
};

static int t_bp_check(void *arg, uint64_t i, const struct wire_hdr *h,
		      const uint8_t *data)
{
	const struct t_bp *bp = arg;

	T_CHECK(h->version == WIRE_VERSION && h->flags_status == 0);
	if (i < bp->nreads) {
		T_CHECK(h->op == WIRE_OP_READ && h->tag == i);
		T_CHECK(h->len == WIRE_LEN_MAX);
		T_CHECK(!memcmp(data, bp->read_data, WIRE_LEN_MAX));
		return 0;
	}
	T_CHECK(h->op == WIRE_OP_WRITE && h->len == 0);
	T_CHECK(h->tag == i - bp->nreads);
	return 0;
}

/* WRITE @i of the back-pressure test: slot i % T_BP_SLOTS, its round. */
static void t_bp_req(uint8_t *req, uint64_t i)
{
	uint64_t off = (i % T_BP_SLOTS) * T_BP_LEN;

	t_hdr_pack(req, WIRE_VERSION, WIRE_OP_WRITE, T_BP_LEN, i, off);
	t_data_fill(req + WIRE_HDR_LEN, off, T_BP_LEN, i / T_BP_SLOTS);
}

/*
 * MiB-READs whose replies are more than the sockets between server and
 * client can hold: tcp_wmem's maximum (the server's send buffer grows up
 * to it on loopback) and some.
 */
static uint64_t t_bp_nreads(void)
{
	unsigned long long lo, def, max = 4u << 20;
	FILE *f = fopen("/proc/sys/net/ipv4/tcp_wmem", "re");

	if (f) {
		if (fscanf(f, "%llu %llu %llu", &lo, &def, &max) != 3)
			max = 4u << 20;
		fclose(f);
	}
	max = max / WIRE_LEN_MAX + 16;
	return max < T_BP_READS_MAX ? max : T_BP_READS_MAX;
}

/*
 * (6) A client that pipelines WRITEs and reads no replies. With the
 * socket towards it full (it read none of the MiB-READs it sent first:
 * else the 24-byte WRITE replies would take the kernel's several MB of
 * socket buffer first), its replies back up and the server stops reading
 * it (the stall counter says so, no timing involved) instead of taking
 * its data on without bound; another connection is served meanwhile; when
 * the client reads, every request is answered in order and the pool holds
 * the last WRITE of each slot.
 */
static int test_pagesrv_write_backpressure(struct t_pool *pool)
{
	const uint64_t spare = T_POOL_SIZE - 4096;
	const size_t req_len = WIRE_HDR_LEN + T_BP_LEN;
	_Alignas(uint64_t) uint8_t page[4096];
	uint8_t *req, got[4096], rh[WIRE_HDR_LEN];
	struct t_bp bp = { t_bp_nreads(), pool->expect + T_BP_READ_OFF };
	struct pagesrv_stats ss, ss2;
	uint64_t i = 0, end, r, slot;
	struct sockaddr_storage sa;
	struct pagesrv *srv;
	socklen_t sa_len;
	int fd, other, rcv = 4096;
	size_t pos = 0;
	char addr[64];
	ssize_t n;

	req = malloc(req_len);
	T_CHECK(req);
	T_CHECK(t_srv_start(pool, &srv, addr, sizeof(addr)) == 0);
	other = t_connect(addr);
	T_CHECK(other >= 0);
	/* a small receive buffer, set before the connection exists */
	T_CHECK(net_addr_resolve(addr, &sa, &sa_len, 1) == 0);
	fd = socket(sa.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	T_CHECK(fd >= 0);
	T_CHECK(setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcv, sizeof(rcv)) == 0);
	T_CHECK(connect(fd, (struct sockaddr *)&sa, sa_len) == 0);
	for (i = 0; i < bp.nreads; i++) {
		t_hdr_pack(rh, WIRE_VERSION, WIRE_OP_READ, WIRE_LEN_MAX, i,
			   T_BP_READ_OFF);
		T_CHECK(t_send_all(fd, rh, sizeof(rh)) == 0);
	}
	/* WRITEs, as fast as the server takes them, until it takes none */
	T_CHECK(net_set_nonblock(fd, 1) == 0);
	i = 0;
	t_bp_req(req, 0);
	end = t_now_ms() + T_WAIT_MS;
	for (;;) {
		n = send(fd, req + pos, req_len - pos, MSG_NOSIGNAL);
		if (n > 0) {
			pos += (size_t)n;
			if (pos == req_len) {
				t_bp_req(req, ++i);
				pos = 0;
			}
			continue;
		}
		T_CHECK(n < 0 && errno == EAGAIN);
		/* blocked now: because the server stopped reading? */
		pagesrv_stats(srv, &ss);
		if (ss.stalls)
			break;
		T_CHECK(t_now_ms() < end);
		struct pollfd pfd = { .fd = fd, .events = POLLOUT };
		T_CHECK(poll(&pfd, 1, 100) >= 0);
	}
	if (getenv("T_DEBUG"))
		fprintf(stderr, "stalled: %llu writes sent, %llu done\n",
			(unsigned long long)i, (unsigned long long)ss.writes);
	/* many MB sent; what the server holds back is in socket buffers */
	T_CHECK(i * T_BP_LEN >= (4u << 20));
	T_CHECK(ss.writes < i && ss.errors == 0 && ss.dropped == 0);
	/* the other connection is served meanwhile */
	t_data_fill(page, spare, sizeof(page), 7);
	T_CHECK(t_write(other, 1, spare, page, sizeof(page)) == 0);
	T_CHECK(t_read(other, 2, spare, got, sizeof(got)) == 0);
	T_CHECK(!memcmp(got, page, sizeof(got)));
	/* the client reads now and finishes the WRITE in hand: every
	 * request is answered, in order */
	struct t_pipe p = {
		fd, req + pos, req_len - pos, bp.nreads + i + 1, t_bp_check, &bp
	};
	T_CHECK(t_pipe_run(&p) == 0);
	pagesrv_stats(srv, &ss2);
	T_CHECK(ss2.writes == i + 2 && ss2.errors == 0 && ss2.dropped == 0);
	T_CHECK(ss2.reads == bp.nreads + 1);
	/* each slot holds the last round written to it */
	for (slot = 0; slot < T_BP_SLOTS && slot <= i; slot++) {
		r = (i - slot) / T_BP_SLOTS;
		t_data_fill(pool->expect + slot * T_BP_LEN, slot * T_BP_LEN,
			    T_BP_LEN, r);
	}
	memcpy(pool->expect + spare, page, sizeof(page));
	close(fd);
	close(other);
	pagesrv_destroy(srv);
	T_CHECK(t_pool_is_expected(pool));
	free(req);
	return 0;
}

/*
 * (7) Write-lease generations, per 2 MiB segment of the pool and across
 * connections: the newest one written is remembered; an older one (or
 * none: 0) is refused with ENOLCK, its data dropped and the stream in
 * step; the same or a newer one is taken.
 */
static int test_pagesrv_write_wgen(struct t_pool *pool)
{
	const uint64_t seg = 2ull << 20;
	struct pagesrv_stats ss;
	struct pagesrv *srv;
	uint8_t *buf, *dst;
	char addr[64];
	int fd, fd2;

	buf = malloc(2 * 4096);
	dst = malloc(2 * 4096);
	T_CHECK(buf && dst);
	T_CHECK(t_srv_start(pool, &srv, addr, sizeof(addr)) == 0);
	fd = t_connect(addr);
	fd2 = t_connect(addr);
	T_CHECK(fd >= 0 && fd2 >= 0);
	/* generation 5 in segment 0 */
	t_data_fill(buf, 0, 4096, 1);
	T_CHECK(t_write_gen(fd, 1, 0, buf, 4096, 5, 0) == 0);
	memcpy(pool->expect, buf, 4096);
	/* older, or none: refused, nothing written */
	t_data_fill(buf, 4096, 4096, 2);
	T_CHECK(t_write_gen(fd, 2, 4096, buf, 4096, 4, ENOLCK) == 0);
	T_CHECK(t_send_hdr(fd, WIRE_VERSION, WIRE_OP_WRITE, 4096, 3, 8192) ==
		0);
	T_CHECK(t_send_all(fd, buf, 4096) == 0);
	T_CHECK(t_expect_reply(fd, WIRE_OP_WRITE, ENOLCK, 3) == 0);
	/* on another connection too */
	T_CHECK(t_write_gen(fd2, 4, 4096, buf, 4096, 4, ENOLCK) == 0);
	/* the same generation, and a newer one, are taken */
	t_data_fill(buf, 4096, 4096, 3);
	T_CHECK(t_write_gen(fd2, 5, 4096, buf, 4096, 5, 0) == 0);
	memcpy(pool->expect + 4096, buf, 4096);
	t_data_fill(buf, 8192, 4096, 4);
	T_CHECK(t_write_gen(fd, 6, 8192, buf, 4096, 9, 0) == 0);
	memcpy(pool->expect + 8192, buf, 4096);
	T_CHECK(t_write_gen(fd2, 7, 0, buf, 4096, 5, ENOLCK) == 0);
	/* segments are apart: generation 1 in segment 1 */
	t_data_fill(buf, seg, 4096, 5);
	T_CHECK(t_write_gen(fd, 8, seg, buf, 4096, 1, 0) == 0);
	memcpy(pool->expect + seg, buf, 4096);
	/* a write across segments 1 and 2 raises both ... */
	t_data_fill(buf, 2 * seg - 4096, 8192, 6);
	T_CHECK(t_write_gen(fd, 9, 2 * seg - 4096, buf, 8192, 3, 0) == 0);
	memcpy(pool->expect + 2 * seg - 4096, buf, 8192);
	T_CHECK(t_write_gen(fd2, 10, 2 * seg + 4096, buf, 4096, 2, ENOLCK) ==
		0);
	/* ... and is refused whole if either saw a newer one */
	T_CHECK(t_write_gen(fd2, 11, seg - 4096, buf, 8192, 2, ENOLCK) == 0);
	T_CHECK(t_read(fd, 12, 0, dst, 4096) == 0);
	T_CHECK(!memcmp(dst, pool->expect, 4096));
	pagesrv_stats(srv, &ss);
	T_CHECK(ss.writes == 5 && ss.errors == 6);
	close(fd);
	close(fd2);
	pagesrv_destroy(srv);
	T_CHECK(t_pool_is_expected(pool));
	free(buf);
	free(dst);
	return 0;
}

static int test_pagesrv_write_fence(struct t_pool *pool)
{
	const uint64_t fo = 1ull << 20, mo = 4ull << 20, len = 16 * 4096;
	struct pagesrv_stats ss;
	struct pagesrv *srv;
	uint8_t *buf, *dst, *src;
	char addr[64];
	int64_t n;
	int fd;

	buf = malloc(2 * 4096);
	dst = malloc(2 * 4096);
	src = malloc(len);
	t_fence = pgfence_new(T_POOL_SIZE);
	T_CHECK(buf && dst && src && t_fence);
	T_CHECK(pgfence_add(t_fence, fo, len) == 1);
	T_CHECK(pgfence_marks_arm(t_fence, 7, mo, len) == 0);
	T_CHECK(t_srv_start(pool, &srv, addr, sizeof(addr)) == 0);
	fd = t_connect(addr);
	T_CHECK(fd >= 0);
	/* a read inside the fence, and one overlapping it by a page */
	T_CHECK(t_send_hdr(fd, WIRE_VERSION, WIRE_OP_READ, 4096, 1, fo) == 0);
	T_CHECK(t_expect_reply(fd, WIRE_OP_READ, ESTALE, 1) == 0);
	T_CHECK(t_send_hdr(fd, WIRE_VERSION, WIRE_OP_READ, 8192, 2,
			   fo - 4096) == 0);
	T_CHECK(t_expect_reply(fd, WIRE_OP_READ, ESTALE, 2) == 0);
	/* a write there: refused, its data dropped, the stream in step */
	t_data_fill(buf, fo + len - 4096, 4096, 1);
	T_CHECK(t_send_hdr(fd, WIRE_VERSION, WIRE_OP_WRITE, 4096, 3,
			   fo + len - 4096) == 0);
	T_CHECK(t_send_all(fd, buf, 4096) == 0);
	T_CHECK(t_expect_reply(fd, WIRE_OP_WRITE, ESTALE, 3) == 0);
	/* just outside it: served */
	t_data_fill(buf, fo + len, 4096, 2);
	T_CHECK(t_write(fd, 4, fo + len, buf, 4096) == 0);
	memcpy(pool->expect + fo + len, buf, 4096);
	T_CHECK(t_read(fd, 5, fo - 4096, dst, 4096) == 0);
	T_CHECK(!memcmp(dst, pool->expect + fo - 4096, 4096));
	/* a write into the rebuild task's range marks its page (page 2) */
	t_data_fill(buf, mo + 2 * 4096, 4096, 3);
	T_CHECK(t_write(fd, 6, mo + 2 * 4096, buf, 4096) == 0);
	memcpy(pool->expect + mo + 2 * 4096, buf, 4096);
	T_CHECK(pgfence_marked(t_fence, 7) == 1);
	/* the task's copy (an older source's bytes) skips that page */
	t_data_fill(src, mo, (uint32_t)len, 4);
	t_data_fill(pool->expect + mo, mo, 2 * 4096, 4);
	t_data_fill(pool->expect + mo + 3 * 4096, mo + 3 * 4096,
		    (uint32_t)len - 3 * 4096, 4);
	n = pgfence_copy_in(t_fence, 7, pool->base, mo, src, len);
	T_CHECK(n == 15);
	pagesrv_stats(srv, &ss);
	T_CHECK(ss.writes == 2 && ss.errors == 3);
	close(fd);
	pagesrv_destroy(srv);
	T_CHECK(t_pool_is_expected(pool));
	pgfence_free(t_fence);
	t_fence = NULL;
	free(buf);
	free(dst);
	free(src);
	return 0;
}

int main(void)
{
	static const struct {
		const char *name;
		int (*fn)(struct t_pool *pool);
	} tests[] = {
		{ "basic", test_pagesrv_write_basic },
		{ "range", test_pagesrv_write_range },
		{ "bad", test_pagesrv_write_bad },
		{ "partial", test_pagesrv_write_partial },
		{ "order", test_pagesrv_write_order },
		{ "backpressure", test_pagesrv_write_backpressure },
		{ "wgen", test_pagesrv_write_wgen },
		{ "fence", test_pagesrv_write_fence },
	};
	const char *only = getenv("T_ONLY");
	struct io_uring probe;
	struct t_pool pool;
	int ret, failed = 0;
	size_t i;

	log_init("test_pagesrv_write", getenv("T_DEBUG") ? LOG_DBG : LOG_ERR);
	ret = io_uring_queue_init(8, &probe, 0);
	if (ret) {
		fprintf(stderr, "skip: io_uring unavailable: %s\n",
			strerror(-ret));
		return 77;
	}
	io_uring_queue_exit(&probe);
	ret = t_pool_init(&pool);
	if (ret) {
		fprintf(stderr, "pool: %s\n", strerror(-ret));
		return 1;
	}
	for (i = 0; i < sizeof(tests) / sizeof(tests[0]); i++) {
		if (only && strcmp(only, tests[i].name))
			continue;
		t_pool_reset(&pool);
		ret = tests[i].fn(&pool);
		fprintf(stderr, "%s: %s\n", tests[i].name, ret ? "FAIL" : "ok");
		failed |= ret != 0;
	}
	munmap(pool.base, T_POOL_SIZE);
	free(pool.expect);
	close(pool.fd);
	return failed ? 1 : 0;
}
