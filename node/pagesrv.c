// SPDX-License-Identifier: MIT
/*
 * The owner's TCP page server: one thread, one io_uring; replies are
 * gathered with SENDMSG straight from the pool, WRITE data is received
 * straight into it (no copy of page data).
 */
#define LOG_PREFIX "pagesrv: "
#include "pagesrv.h"

#include <assert.h>
#include <errno.h>
#include <netdb.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <liburing.h>

#include "log.h"
#include "msg.h"
#include "net.h"
#include "wire.h"

#define PAGESRV_RING_ENTRIES	  256u
#define PAGESRV_BACKLOG		  128
#define PAGESRV_MAX_CONNS_DEFAULT 256u
/* Requests are 24 bytes: 16 KiB holds ~680 of them. */
#define PAGESRV_RBUF_SIZE (16u << 10)
/* Replies queued per connection; parsing stops when full. */
#define PAGESRV_REPLY_CAP 1024u
/* Back-pressure: no RECV is posted while this many replies wait. */
#define PAGESRV_REPLY_HIGH (PAGESRV_REPLY_CAP / 2)
/* iovecs per SENDMSG (header + data per reply), below IOV_MAX */
#define PAGESRV_IOV_MAX	 512u
#define PAGESRV_NAME_MAX 80
#define PAGESRV_CLIENTS	 256 /* clients whose newest connection we know */
#define PAGESRV_RETRY_NS (100 * 1000000ll)

enum pagesrv_op {
	PAGESRV_OP_ACCEPT = 1,
	PAGESRV_OP_WAKE,  /* eventfd: pagesrv_destroy() wants us to stop */
	PAGESRV_OP_TIMER, /* accept retry after e.g. EMFILE */
	PAGESRV_OP_STOP,  /* the cancel-everything of a stop */
	PAGESRV_OP_RECV,
	PAGESRV_OP_SEND,
	PAGESRV_OP_CANCEL, /* a connection's cancel on close */
};

struct pagesrv_conn;

/* user_data of every SQE of the server's ring */
struct pagesrv_req {
	enum pagesrv_op op;
	struct pagesrv_conn *conn;
};

struct pagesrv_reply {
	uint8_t hdr[WIRE_HDR_LEN];
	uint32_t len;
	const uint8_t *data; /* into the pool, len bytes */
};

/*
 * A client connection. Closing shuts the socket down and cancels; the
 * memory goes once the last CQE is reaped (inflight reaches 0).
 *
 * Receiving, per request:
 *
 *   header --HELLO/READ--> reply queued, next header
 *     |
 *     +--WRITE, bad len--> connection closed
 *     +--WRITE, a queued READ reply sends from its range--> wr_wait:
 *     |       header left in rbuf, nothing received until that reply
 *     |       went out (the WRITE must not change what it reads)
 *     +--WRITE--> wr_active: wr_left data bytes, from what rbuf holds,
 *             then RECVs straight into the pool (or rbuf, to be dropped,
 *             wr_status != 0); reply queued when the last one is in
 */
struct pagesrv_conn {
	struct pagesrv *s;
	struct pagesrv_conn *prev, *next;
	int fd;
	unsigned int inflight;
	bool closing;
	bool recv_busy;
	bool recv_pool; /* the posted RECV is into the pool, not rbuf */
	bool send_busy;
	bool stalled; /* no RECV for backed-up replies, counted once */
	bool writer;  /* last request a WRITE: RECV one header at a time */
	bool wr_wait;
	bool wr_active;
	uint16_t wr_status; /* 0: data into the pool, else dropped */
	/* HELLO: the client's id and this connection's generation of it; a
	 * newer connection of the same client fences this one (its writes
	 * are refused: they may be older than the newer one's) */
	uint64_t client;
	uint32_t gen;
	bool fenced;
	bool said_hello;
	uint32_t wr_len, wr_left;
	uint64_t wr_tag, wr_off;
	char name[PAGESRV_NAME_MAX];
	struct pagesrv_req recv_req;
	struct pagesrv_req send_req;
	struct pagesrv_req cancel_req;
	size_t rlen;
	/* reply ring: q_n entries from q_head; the posted SENDMSG covers a
	 * prefix of them, the first one from byte head_off on */
	uint32_t q_head, q_n;
	size_t head_off;
	struct msghdr msg;
	struct iovec iov[PAGESRV_IOV_MAX];
	struct pagesrv_reply q[PAGESRV_REPLY_CAP];
	uint8_t rbuf[PAGESRV_RBUF_SIZE];
};

struct pagesrv {
	struct io_uring ring;
	bool ring_ok;
	int lfd;
	int efd;
	uint8_t *pool;
	uint64_t pool_size;
	uint64_t instance;
	unsigned int max_conns;
	char addr[MSG_ADDR_MAX];
	pthread_t thread;
	bool started;
	/* server thread only */
	bool stopping;
	bool accept_busy;
	bool wake_busy;
	bool timer_busy;
	bool stop_busy;
	bool cap_logged;
	bool accept_logged;
	struct pagesrv_req accept_req;
	struct pagesrv_req wake_req;
	struct pagesrv_req timer_req;
	struct pagesrv_req stop_req;
	struct sockaddr_storage acc_addr;
	socklen_t acc_len;
	uint64_t wake_val;
	struct __kernel_timespec retry_ts;
	struct pagesrv_conn *conns;
	unsigned int nconns;
	/* newest connection generation seen per client id */
	struct {
		uint64_t client;
		uint32_t gen;
	} gens[PAGESRV_CLIENTS];
	unsigned int gens_next;
	_Atomic uint64_t st_conns;
	_Atomic uint64_t st_reads;
	_Atomic uint64_t st_bytes;
	_Atomic uint64_t st_writes;
	_Atomic uint64_t st_write_bytes;
	_Atomic uint64_t st_errors;
	_Atomic uint64_t st_dropped;
	_Atomic uint64_t st_stalls;
};

static void pagesrv_count(_Atomic uint64_t *c, uint64_t n)
{
	atomic_fetch_add_explicit(c, n, memory_order_relaxed);
}

static struct io_uring_sqe *pagesrv_sqe_get(struct pagesrv *s)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&s->ring);

	if (!sqe) {
		io_uring_submit(&s->ring);
		sqe = io_uring_get_sqe(&s->ring);
	}
	return sqe;
}

static void pagesrv_waiters_wake(struct pagesrv *s);

static void pagesrv_conn_free(struct pagesrv_conn *c)
{
	struct pagesrv *s = c->s;
	bool fenced = c->fenced;

	if (c->prev)
		c->prev->next = c->next;
	else
		s->conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	s->nconns--;
	close(c->fd);
	free(c);
	if (fenced)
		pagesrv_waiters_wake(s);
}

static void pagesrv_conn_close(struct pagesrv_conn *c)
{
	struct io_uring_sqe *sqe;

	if (c->closing)
		return;
	c->closing = true;
	if (!c->inflight) {
		pagesrv_conn_free(c);
		return;
	}
	/* completes a pending RECV/SENDMSG; the cancel is for good measure */
	shutdown(c->fd, SHUT_RDWR);
	sqe = pagesrv_sqe_get(c->s);
	if (!sqe)
		return;
	io_uring_prep_cancel_fd(sqe, c->fd, IORING_ASYNC_CANCEL_ALL);
	io_uring_sqe_set_data(sqe, &c->cancel_req);
	c->inflight++;
}

static void pagesrv_conn_put(struct pagesrv_conn *c)
{
	if (!--c->inflight && c->closing)
		pagesrv_conn_free(c);
}

static void pagesrv_conn_reply(struct pagesrv_conn *c, uint8_t op,
			       uint16_t status, uint32_t len, uint64_t tag,
			       uint64_t aux, const uint8_t *data)
{
	struct pagesrv_reply *r;
	struct wire_hdr h = {
		.version = WIRE_VERSION,
		.op = op,
		.flags_status = status,
		.len = len,
		.tag = tag,
		.arg = aux,
	};

	/* callers check for room before they take a request */
	assert(c->q_n < PAGESRV_REPLY_CAP);
	r = &c->q[(c->q_head + c->q_n) % PAGESRV_REPLY_CAP];
	wire_hdr_pack(&h, r->hdr);
	r->len = len;
	r->data = data;
	c->q_n++;
}

/*
 * A client (tag = its id) says which connection of its this is (len =
 * generation). Writes of its older connections are refused from now on:
 * one the client gave up on may still have writes in our buffers, older
 * than what it sends again on this one.
 */
static void pagesrv_conn_fence(struct pagesrv_conn *c, uint64_t client,
			       uint32_t gen)
{
	struct pagesrv *s = c->s;
	unsigned int i;

	/* The first HELLO of a connection says whose it is, once. */
	if (c->said_hello)
		return;
	c->said_hello = true;
	c->client = client;
	c->gen = gen;
	if (!client || !gen)
		return;
	for (i = 0; i < PAGESRV_CLIENTS; i++)
		if (s->gens[i].client == client)
			break;
	if (i == PAGESRV_CLIENTS) {
		i = s->gens_next++ % PAGESRV_CLIENTS;
		s->gens[i].client = client;
		s->gens[i].gen = 0;
	}
	if (gen < s->gens[i].gen) {
		c->fenced = true;
		return;
	}
	s->gens[i].gen = gen;
	for (struct pagesrv_conn *o = s->conns; o; o = o->next) {
		if (o != c && o->client == client && o->gen < gen &&
		    !o->fenced) {
			log_dbg("%s: superseded by %s", o->name, c->name);
			o->fenced = true;
		}
	}
}

/* True while a fenced connection of @c's client still writes the pool: a
 * write of @c waits for it, so the newer bytes land last. */
static bool pagesrv_conn_fenced_writing(const struct pagesrv_conn *c)
{
	for (const struct pagesrv_conn *o = c->s->conns; o; o = o->next)
		if (o != c && c->client && o->client == c->client &&
		    o->fenced &&
		    ((o->wr_active && !o->wr_status && !o->closing) ||
		     (o->recv_busy && o->recv_pool)))
			return true;
	return false;
}

static void pagesrv_conn_on_hello(struct pagesrv_conn *c,
				  const struct wire_hdr *h)
{
	struct pagesrv *s = c->s;

	pagesrv_conn_fence(c, h->tag, h->len);
	/* off = the instance the client expects, 0 = any */
	if (h->arg && h->arg != s->instance) {
		log_dbg("%s: expects instance %#llx, we are %#llx", c->name,
			(unsigned long long)h->arg,
			(unsigned long long)s->instance);
		pagesrv_count(&s->st_errors, 1);
		pagesrv_conn_reply(c, WIRE_OP_HELLO, ESTALE, 0, h->tag,
				   s->instance, NULL);
		return;
	}
	pagesrv_conn_reply(c, WIRE_OP_HELLO, 0, 0, h->tag, s->instance, NULL);
}

static void pagesrv_conn_on_read(struct pagesrv_conn *c,
				 const struct wire_hdr *h)
{
	struct pagesrv *s = c->s;

	/* written so that off + len cannot overflow */
	if (!h->len || h->len > WIRE_LEN_MAX || h->arg > s->pool_size ||
	    h->len > s->pool_size - h->arg) {
		log_dbg("%s: read of %u bytes at %#llx is outside the pool",
			c->name, h->len, (unsigned long long)h->arg);
		pagesrv_count(&s->st_errors, 1);
		pagesrv_conn_reply(c, WIRE_OP_READ, ERANGE, 0, h->tag, 0, NULL);
		return;
	}
	pagesrv_count(&s->st_reads, 1);
	pagesrv_count(&s->st_bytes, h->len);
	pagesrv_conn_reply(c, WIRE_OP_READ, 0, h->len, h->tag, 0,
			   s->pool + h->arg);
}

/* True if a queued reply, not all sent yet, sends from [p, p + len). */
static bool pagesrv_conn_is_sending(const struct pagesrv_conn *c,
				    const uint8_t *p, uint32_t len)
{
	const struct pagesrv_reply *r;
	uint32_t i;

	for (i = 0; i < c->q_n; i++) {
		r = &c->q[(c->q_head + i) % PAGESRV_REPLY_CAP];
		if (r->len && r->data < p + len && p < r->data + r->len)
			return true;
	}
	return false;
}

/*
 * A WRITE header: its len data bytes follow, for the pool or to be
 * dropped. Returns 0 (header taken, c->wr_active), 1 if it has to wait
 * for queued READ replies from its range to go out first, or -EPROTO for
 * a len that says nothing trustworthy about where the next header is.
 */
static int pagesrv_conn_on_write(struct pagesrv_conn *c,
				 const struct wire_hdr *h)
{
	struct pagesrv *s = c->s;

	if (!h->len || h->len > WIRE_LEN_MAX) {
		log_warn("%s: write of %u bytes (1..%u), closing", c->name,
			 h->len, WIRE_LEN_MAX);
		return -EPROTO;
	}
	c->writer = true;
	c->wr_status = 0;
	if (c->fenced) {
		log_dbg("%s: write on a superseded connection refused",
			c->name);
		c->wr_status = EPIPE;
	} else if (pagesrv_conn_fenced_writing(c)) {
		return 1;
		/* written so that off + len cannot overflow */
	} else if (h->arg > s->pool_size || h->len > s->pool_size - h->arg) {
		log_dbg("%s: write of %u bytes at %#llx is outside the pool",
			c->name, h->len, (unsigned long long)h->arg);
		c->wr_status = ERANGE;
	} else if (pagesrv_conn_is_sending(c, s->pool + h->arg, h->len)) {
		return 1;
	}
	c->wr_active = true;
	c->wr_tag = h->tag;
	c->wr_off = h->arg;
	c->wr_len = h->len;
	c->wr_left = h->len;
	return 0;
}

/* The active WRITE's data is all in the pool (or dropped): its reply. */
static void pagesrv_conn_write_end(struct pagesrv_conn *c)
{
	struct pagesrv *s = c->s;

	c->wr_active = false;
	if (c->wr_status) {
		pagesrv_count(&s->st_errors, 1);
	} else {
		pagesrv_count(&s->st_writes, 1);
		pagesrv_count(&s->st_write_bytes, c->wr_len);
	}
	pagesrv_conn_reply(c, WIRE_OP_WRITE, c->wr_status, 0, c->wr_tag, 0,
			   NULL);
	if (c->fenced)
		pagesrv_waiters_wake(s);
}

/*
 * Turns complete requests into replies while there is room for them;
 * WRITE data that came into rbuf behind its header is copied to the pool
 * (a client switching from reads to writes; see pagesrv_conn_recv_room()).
 */
static int pagesrv_conn_parse(struct pagesrv_conn *c)
{
	struct pagesrv *s = c->s;
	struct wire_hdr h;
	size_t pos = 0, n;
	int ret = 0;

	c->wr_wait = false;
	for (;;) {
		if (c->wr_active) {
			n = c->rlen - pos;
			if (n > c->wr_left)
				n = c->wr_left;
			if (n && !c->wr_status)
				memcpy(s->pool + c->wr_off + c->wr_len -
					       c->wr_left,
				       c->rbuf + pos, n);
			pos += n;
			c->wr_left -= (uint32_t)n;
			if (c->wr_left)
				break;
			pagesrv_conn_write_end(c);
			continue;
		}
		if (c->rlen - pos < WIRE_HDR_LEN || c->q_n >= PAGESRV_REPLY_CAP)
			break;
		wire_hdr_unpack(c->rbuf + pos, &h);
		if (h.version != WIRE_VERSION) {
			log_warn("%s: bad wire version %u, closing", c->name,
				 h.version);
			ret = -EPROTO;
			break;
		}
		if (h.op == WIRE_OP_HELLO) {
			c->writer = false;
			pagesrv_conn_on_hello(c, &h);
		} else if (h.op == WIRE_OP_READ) {
			c->writer = false;
			pagesrv_conn_on_read(c, &h);
		} else if (h.op == WIRE_OP_WRITE) {
			ret = pagesrv_conn_on_write(c, &h);
			if (ret > 0) {
				c->wr_wait = true;
				ret = 0;
			}
			if (ret || c->wr_wait)
				break;
		} else {
			log_warn("%s: unknown op %u, closing", c->name, h.op);
			ret = -EPROTO;
			break;
		}
		pos += WIRE_HDR_LEN;
	}
	memmove(c->rbuf, c->rbuf + pos, c->rlen - pos);
	c->rlen -= pos;
	return ret;
}

/* One SENDMSG for everything queued (up to PAGESRV_IOV_MAX iovecs). */
static void pagesrv_conn_send(struct pagesrv_conn *c)
{
	struct io_uring_sqe *sqe;
	struct pagesrv_reply *r;
	size_t skip = c->head_off;
	unsigned int n = 0;
	uint32_t i;

	if (c->closing || c->send_busy || !c->q_n)
		return;
	for (i = 0; i < c->q_n && n + 2 <= PAGESRV_IOV_MAX; i++) {
		r = &c->q[(c->q_head + i) % PAGESRV_REPLY_CAP];
		if (skip < WIRE_HDR_LEN) {
			c->iov[n].iov_base = r->hdr + skip;
			c->iov[n].iov_len = WIRE_HDR_LEN - skip;
			n++;
			skip = 0;
		} else {
			skip -= WIRE_HDR_LEN;
		}
		if (r->len) {
			/* a reply only reads the pool: iovec just lacks const */
			c->iov[n].iov_base =
				(void *)(uintptr_t)(r->data + skip);
			c->iov[n].iov_len = r->len - skip;
			n++;
		}
		skip = 0;
	}
	sqe = pagesrv_sqe_get(c->s);
	if (!sqe) {
		pagesrv_conn_close(c);
		return;
	}
	memset(&c->msg, 0, sizeof(c->msg));
	c->msg.msg_iov = c->iov;
	c->msg.msg_iovlen = n;
	io_uring_prep_sendmsg(sqe, c->fd, &c->msg, MSG_NOSIGNAL);
	io_uring_sqe_set_data(sqe, &c->send_req);
	c->send_busy = true;
	c->inflight++;
}

/*
 * Where the next RECV goes: an accepted WRITE's data straight into the
 * pool, anything else into rbuf. A client that writes gets its rbuf RECVs
 * cut at the end of the next header (or of data to drop), so that the
 * data behind a header is not received into rbuf and copied. Returns the
 * bytes the RECV may take, with *buf and *pool set, or 0 for no RECV now:
 * replies backed up (back-pressure), a WRITE waiting, rbuf full.
 */
static size_t pagesrv_conn_recv_room(struct pagesrv_conn *c, uint8_t **buf,
				     bool *pool)
{
	size_t room = PAGESRV_RBUF_SIZE - c->rlen;

	*pool = false;
	if (c->q_n >= PAGESRV_REPLY_HIGH || c->wr_wait)
		return 0;
	if (c->wr_active && !c->wr_status && !c->rlen) {
		*buf = c->s->pool + c->wr_off + c->wr_len - c->wr_left;
		*pool = true;
		return c->wr_left;
	}
	*buf = c->rbuf + c->rlen;
	if (c->writer) {
		if (c->wr_active && c->wr_left < room)
			room = c->wr_left;
		else if (!c->wr_active && c->rlen < WIRE_HDR_LEN)
			room = WIRE_HDR_LEN - c->rlen;
	}
	return room;
}

/* @n bytes came in where pagesrv_conn_recv_room() said (@pool). */
static void pagesrv_conn_received(struct pagesrv_conn *c, size_t n, bool pool)
{
	if (pool)
		c->wr_left -= (uint32_t)n;
	else
		c->rlen += n;
}

static void pagesrv_conn_recv(struct pagesrv_conn *c)
{
	struct io_uring_sqe *sqe;
	uint8_t *buf;
	size_t room;
	bool pool;

	if (c->closing || c->recv_busy)
		return;
	room = pagesrv_conn_recv_room(c, &buf, &pool);
	if (!room) {
		if (c->q_n >= PAGESRV_REPLY_HIGH && !c->stalled) {
			c->stalled = true;
			pagesrv_count(&c->s->st_stalls, 1);
		}
		return;
	}
	c->stalled = false;
	sqe = pagesrv_sqe_get(c->s);
	if (!sqe) {
		pagesrv_conn_close(c);
		return;
	}
	io_uring_prep_recv(sqe, c->fd, buf, room, 0);
	io_uring_sqe_set_data(sqe, &c->recv_req);
	c->recv_busy = true;
	c->recv_pool = pool;
	c->inflight++;
}

static void pagesrv_conn_serve(struct pagesrv_conn *c);

/* Writes that waited for a superseded connection of their client go on. */
static void pagesrv_waiters_wake(struct pagesrv *s)
{
	struct pagesrv_conn *c, *next;

	for (c = s->conns; c; c = next) {
		next = c->next;
		if (c->wr_wait && !c->closing)
			pagesrv_conn_serve(c);
	}
}

/* Parses what is buffered, sends, reads more unless backlogged. */
static void pagesrv_conn_serve(struct pagesrv_conn *c)
{
	/* a posted RECV writes behind rlen: rbuf must not move under it
	 * (and it was posted only once nothing parseable was left) */
	if (!c->recv_busy && pagesrv_conn_parse(c) < 0) {
		pagesrv_count(&c->s->st_dropped, 1);
		pagesrv_conn_close(c);
		return;
	}
	pagesrv_conn_send(c);
	pagesrv_conn_recv(c);
}

static void pagesrv_conn_on_recv(struct pagesrv_conn *c, int res)
{
	if (res == -EINTR || res == -EAGAIN) {
		pagesrv_conn_recv(c);
		return;
	}
	if (res <= 0) {
		if (res < 0 && res != -ECONNRESET)
			log_dbg("%s: recv: %s", c->name, log_strerror(res));
		/* no reply: the writer sends the whole range again */
		if (c->wr_active && !c->wr_status)
			log_info("%s: gone mid-write at %#llx (%u/%u bytes)",
				 c->name, (unsigned long long)c->wr_off,
				 c->wr_len - c->wr_left, c->wr_len);
		pagesrv_conn_close(c);
		return;
	}
	pagesrv_conn_received(c, (size_t)res, c->recv_pool);
	pagesrv_conn_serve(c);
}

static void pagesrv_conn_on_send(struct pagesrv_conn *c, int res)
{
	struct pagesrv_reply *r;
	size_t left = res > 0 ? (size_t)res : 0, rest;

	if (res == -EINTR || res == -EAGAIN) {
		pagesrv_conn_send(c);
		return;
	}
	if (res <= 0) {
		if (res < 0 && res != -EPIPE && res != -ECONNRESET)
			log_dbg("%s: sendmsg: %s", c->name, log_strerror(res));
		pagesrv_conn_close(c);
		return;
	}
	/* drop what went out; a short send leaves head_off into a reply */
	while (left && c->q_n) {
		r = &c->q[c->q_head];
		rest = WIRE_HDR_LEN + r->len - c->head_off;
		if (left < rest) {
			c->head_off += left;
			break;
		}
		left -= rest;
		c->head_off = 0;
		c->q_head = (c->q_head + 1) % PAGESRV_REPLY_CAP;
		c->q_n--;
	}
	pagesrv_conn_serve(c);
}

static void pagesrv_conn_create(struct pagesrv *s, int fd)
{
	char host[64], port[8]; /* numeric */
	struct pagesrv_conn *c;
	int ret;

	c = calloc(1, sizeof(*c));
	if (!c) {
		log_err("no memory for a connection, closing it");
		close(fd);
		return;
	}
	c->s = s;
	c->fd = fd;
	c->recv_req = (struct pagesrv_req){ PAGESRV_OP_RECV, c };
	c->send_req = (struct pagesrv_req){ PAGESRV_OP_SEND, c };
	c->cancel_req = (struct pagesrv_req){ PAGESRV_OP_CANCEL, c };
	ret = getnameinfo((struct sockaddr *)&s->acc_addr, s->acc_len, host,
			  sizeof(host), port, sizeof(port),
			  NI_NUMERICHOST | NI_NUMERICSERV);
	if (ret)
		snprintf(c->name, sizeof(c->name), "client fd %d", fd);
	else
		snprintf(c->name, sizeof(c->name), "%s:%s", host, port);
	ret = net_set_nodelay(fd);
	if (ret)
		log_dbg("%s: TCP_NODELAY: %s", c->name, log_strerror(ret));
	c->next = s->conns;
	if (s->conns)
		s->conns->prev = c;
	s->conns = c;
	s->nconns++;
	pagesrv_count(&s->st_conns, 1);
	log_dbg("%s: connected", c->name);
	pagesrv_conn_recv(c);
}

static void pagesrv_accept_arm(struct pagesrv *s)
{
	struct io_uring_sqe *sqe;

	if (s->stopping || s->accept_busy)
		return;
	sqe = pagesrv_sqe_get(s);
	if (!sqe) {
		log_err("no SQE to accept with");
		return;
	}
	s->acc_len = sizeof(s->acc_addr);
	io_uring_prep_accept(sqe, s->lfd, (struct sockaddr *)&s->acc_addr,
			     &s->acc_len, SOCK_CLOEXEC);
	io_uring_sqe_set_data(sqe, &s->accept_req);
	s->accept_busy = true;
}

/* Accept failed for want of resources: try again in a while. */
static void pagesrv_accept_retry(struct pagesrv *s)
{
	struct io_uring_sqe *sqe;

	if (s->stopping || s->timer_busy)
		return;
	sqe = pagesrv_sqe_get(s);
	if (!sqe)
		return;
	s->retry_ts.tv_sec = 0;
	s->retry_ts.tv_nsec = PAGESRV_RETRY_NS;
	io_uring_prep_timeout(sqe, &s->retry_ts, 0, 0);
	io_uring_sqe_set_data(sqe, &s->timer_req);
	s->timer_busy = true;
}

static void pagesrv_on_accept(struct pagesrv *s, int res)
{
	if (res < 0) {
		if (s->stopping)
			return;
		if (res == -EINTR || res == -EAGAIN || res == -ECONNABORTED) {
			pagesrv_accept_arm(s);
			return;
		}
		if (!s->accept_logged)
			log_errno(res, "accept on %s", s->addr);
		s->accept_logged = true;
		pagesrv_accept_retry(s);
		return;
	}
	s->accept_logged = false;
	if (s->stopping) {
		close(res);
		return;
	}
	if (s->nconns >= s->max_conns) {
		if (!s->cap_logged)
			log_warn("connection cap %u reached, closing new ones",
				 s->max_conns);
		s->cap_logged = true;
		pagesrv_count(&s->st_dropped, 1);
		close(res);
		pagesrv_accept_arm(s);
		return;
	}
	s->cap_logged = false;
	pagesrv_conn_create(s, res);
	pagesrv_accept_arm(s);
}

static void pagesrv_wake_arm(struct pagesrv *s)
{
	struct io_uring_sqe *sqe = pagesrv_sqe_get(s);

	if (!sqe)
		return;
	io_uring_prep_read(sqe, s->efd, &s->wake_val, sizeof(s->wake_val), 0);
	io_uring_sqe_set_data(sqe, &s->wake_req);
	s->wake_busy = true;
}

static void pagesrv_stop(struct pagesrv *s)
{
	struct io_uring_sqe *sqe;
	struct pagesrv_conn *c, *next;

	s->stopping = true;
	for (c = s->conns; c; c = next) {
		next = c->next;
		pagesrv_conn_close(c);
	}
	if (!s->accept_busy && !s->timer_busy)
		return;
	sqe = pagesrv_sqe_get(s);
	if (!sqe)
		return;
	/* everything still armed: accept, retry timer, connections */
	io_uring_prep_cancel64(sqe, 0, IORING_ASYNC_CANCEL_ANY);
	io_uring_sqe_set_data(sqe, &s->stop_req);
	s->stop_busy = true;
}

static void pagesrv_on_cqe(struct pagesrv *s, struct io_uring_cqe *cqe)
{
	struct pagesrv_req *r = io_uring_cqe_get_data(cqe);
	struct pagesrv_conn *c = r->conn;

	switch (r->op) {
	case PAGESRV_OP_ACCEPT:
		s->accept_busy = false;
		pagesrv_on_accept(s, cqe->res);
		return;
	case PAGESRV_OP_WAKE:
		s->wake_busy = false;
		if (cqe->res == -EINTR || cqe->res == -EAGAIN)
			pagesrv_wake_arm(s);
		else
			pagesrv_stop(s);
		return;
	case PAGESRV_OP_TIMER:
		s->timer_busy = false;
		pagesrv_accept_arm(s);
		return;
	case PAGESRV_OP_STOP:
		s->stop_busy = false;
		return;
	case PAGESRV_OP_RECV:
		c->recv_busy = false;
		if (!c->closing)
			pagesrv_conn_on_recv(c, cqe->res);
		/* the RECV that may have written the pool is over */
		if (c->fenced)
			pagesrv_waiters_wake(s);
		break;
	case PAGESRV_OP_SEND:
		c->send_busy = false;
		if (!c->closing)
			pagesrv_conn_on_send(c, cqe->res);
		break;
	case PAGESRV_OP_CANCEL:
		break;
	}
	/* the CQE's count kept @c alive through the handler */
	pagesrv_conn_put(c);
}

static bool pagesrv_is_done(const struct pagesrv *s)
{
	return s->stopping && !s->accept_busy && !s->wake_busy &&
	       !s->timer_busy && !s->stop_busy && !s->conns;
}

static void *pagesrv_thread(void *arg)
{
	struct pagesrv *s = arg;
	struct io_uring_cqe *cqe;
	unsigned int head, seen;
	int ret;

	pagesrv_wake_arm(s);
	pagesrv_accept_arm(s);
	while (!pagesrv_is_done(s)) {
		ret = io_uring_submit_and_wait(&s->ring, 1);
		if (ret < 0 && ret != -EINTR && ret != -EBUSY &&
		    ret != -EAGAIN) {
			log_errno(
				ret,
				"io_uring_submit_and_wait, server on %s stops",
				s->addr);
			break;
		}
		seen = 0;
		io_uring_for_each_cqe(&s->ring, head, cqe) {
			seen++;
			pagesrv_on_cqe(s, cqe);
		}
		io_uring_cq_advance(&s->ring, seen);
	}
	return NULL;
}

int pagesrv_create(const struct pagesrv_cfg *cfg, struct pagesrv **out)
{
	struct pagesrv *s;
	int ret;

	if (!cfg || !cfg->listen_addr || (!cfg->pool && cfg->pool_size))
		return -EINVAL;
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->lfd = -1;
	s->efd = -1;
	s->pool = cfg->pool;
	s->pool_size = cfg->pool_size;
	s->instance = cfg->instance;
	s->max_conns =
		cfg->max_conns ? cfg->max_conns : PAGESRV_MAX_CONNS_DEFAULT;
	s->accept_req = (struct pagesrv_req){ PAGESRV_OP_ACCEPT, NULL };
	s->wake_req = (struct pagesrv_req){ PAGESRV_OP_WAKE, NULL };
	s->timer_req = (struct pagesrv_req){ PAGESRV_OP_TIMER, NULL };
	s->stop_req = (struct pagesrv_req){ PAGESRV_OP_STOP, NULL };
	ret = net_listen(cfg->listen_addr, PAGESRV_BACKLOG, &s->lfd);
	if (ret) {
		log_errno(ret, "listen on %s", cfg->listen_addr);
		goto err;
	}
	ret = net_local_addr(s->lfd, s->addr, sizeof(s->addr));
	if (ret)
		goto err;
	s->efd = eventfd(0, EFD_CLOEXEC);
	if (s->efd < 0) {
		ret = -errno;
		goto err;
	}
	ret = io_uring_queue_init(PAGESRV_RING_ENTRIES, &s->ring, 0);
	if (ret) {
		log_errno(ret, "io_uring_queue_init");
		goto err;
	}
	s->ring_ok = true;
	*out = s;
	return 0;
err:
	pagesrv_destroy(s);
	return ret;
}

int pagesrv_addr(const struct pagesrv *s, char *buf, size_t len)
{
	size_t n = strlen(s->addr);

	if (n >= len)
		return -ENOSPC;
	memcpy(buf, s->addr, n + 1);
	return 0;
}

int pagesrv_start(struct pagesrv *s)
{
	int ret;

	if (s->started)
		return -EALREADY;
	/* written before the thread exists: it shares a word with its flags */
	s->started = true;
	ret = pthread_create(&s->thread, NULL, pagesrv_thread, s);
	if (ret) {
		s->started = false;
		return -ret;
	}
	pthread_setname_np(s->thread, "fp-pagesrv");
	log_info("serving pages on %s", s->addr);
	return 0;
}

void pagesrv_destroy(struct pagesrv *s)
{
	struct pagesrv_conn *c;
	uint64_t one = 1;

	if (!s)
		return;
	if (s->started) {
		if (write(s->efd, &one, sizeof(one)) != sizeof(one))
			log_errno(errno, "waking the server thread");
		pthread_join(s->thread, NULL);
	}
	/* tearing the ring down ends whatever a failed thread left armed */
	if (s->ring_ok)
		io_uring_queue_exit(&s->ring);
	while ((c = s->conns)) {
		c->inflight = 0;
		pagesrv_conn_free(c);
	}
	if (s->efd >= 0)
		close(s->efd);
	if (s->lfd >= 0)
		close(s->lfd);
	free(s);
}

void pagesrv_stats(const struct pagesrv *s, struct pagesrv_stats *st)
{
	st->conns = atomic_load_explicit(&s->st_conns, memory_order_relaxed);
	st->reads = atomic_load_explicit(&s->st_reads, memory_order_relaxed);
	st->bytes = atomic_load_explicit(&s->st_bytes, memory_order_relaxed);
	st->writes = atomic_load_explicit(&s->st_writes, memory_order_relaxed);
	st->write_bytes =
		atomic_load_explicit(&s->st_write_bytes, memory_order_relaxed);
	st->errors = atomic_load_explicit(&s->st_errors, memory_order_relaxed);
	st->dropped =
		atomic_load_explicit(&s->st_dropped, memory_order_relaxed);
	st->stalls = atomic_load_explicit(&s->st_stalls, memory_order_relaxed);
}
