// SPDX-License-Identifier: MIT
/*
 * libFuzzer entry: the byte stream a hostile page server sends back to the
 * TCP transport. A transport, a peer and its connection are made by the
 * transport's own functions (create, peer_open) on a ring of the harness,
 * whose CONNECT to a port nobody listens on stays unreaped until the end;
 * the stream is fed in chunks as RECV completions deliver it (copied into
 * the connection's rbuf, then xport_tcp_conn_on_recv(): the reply parser),
 * with reads posted before and between chunks, each into its own malloc'd
 * dst of exactly the read's length. Checks: every read posted completes
 * exactly once (then its dst is freed: a later write to it is a use after
 * free); a reply completes only a read whose request was sent (posted while
 * UP, or queued and the HELLO reply came since); ASan sees any byte
 * written outside a dst. A protocol error takes the peer DOWN: then
 * nothing more is fed. peer_close() and destroy() end every run.
 *
 * Input: three config bytes, then the stream.
 *   byte 0 bit  0   HELLO pending: the stream starts with the HELLO reply
 *                   (else the harness feeds a valid one first, and the
 *                   first reads are posted once the peer is UP)
 *          bits 1-2 chunk sizes (up to: all, 1 byte, 31 bytes, 4 KiB + 7)
 *          bit  3   more reads are posted between chunks
 *          bits 4-5 instance the peer expects (0 = any, FUZZ_INSTANCE,
 *                   FUZZ_INSTANCE + 1, 1)
 *   byte 1 bits 0-3 reads posted at the start, minus 1
 *          bits 4-5 pages per read at most, minus 1
 *   byte 2          seed of the chunk sizes and read lengths
 */
#include "../../node/xport_tcp.c"

#include <netinet/in.h>

#include "fuzz.h"

#define FUZZ_INSTANCE 0x1122334455667788ull
#define FUZZ_POSTS    64u

/* The fault loop's ring and a peer address; one per process. */
struct fuzz_env {
	struct io_uring ring;
	/* bound, never listening: every CONNECT to it is refused */
	int fd;
	struct xport_peer_info info;
};

static struct fuzz_env fuzz_env;

struct fuzz_post {
	uint8_t *dst; /* exactly len bytes; freed when done */
	uint32_t len;
	bool done;
	bool sent; /* its request went out (posted while UP, or UP since) */
};

/* One input's run. */
struct fuzz_run {
	struct xport *x;
	struct xport_peer *p;
	struct fuzz_rng rng;
	unsigned int max_pages;
	bool was_connecting; /* while a chunk is parsed: it was before */
	unsigned int n_posts;
	struct fuzz_post posts[FUZZ_POSTS];
};

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	struct fuzz_env *e = &fuzz_env;
	struct sockaddr_in *sin = (struct sockaddr_in *)&e->info.addr;
	socklen_t len = sizeof(*sin);
	int ret;

	fuzz_log_init("fuzz_xport_tcp");
	ret = io_uring_queue_init(64, &e->ring, 0);
	if (ret) {
		fprintf(stderr, "io_uring_queue_init: %s\n", strerror(-ret));
		/* a host without io_uring cannot run it: skip */
		exit(ret == -ENOSYS || ret == -EPERM ? 77 : 1);
	}
	e->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	sin->sin_family = AF_INET;
	sin->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (e->fd < 0 || bind(e->fd, (struct sockaddr *)sin, len) ||
	    getsockname(e->fd, (struct sockaddr *)sin, &len)) {
		perror("socket on 127.0.0.1");
		exit(1);
	}
	e->info.addrlen = len;
	snprintf(e->info.data_addr, sizeof(e->info.data_addr), "127.0.0.1:%u",
		 ntohs(sin->sin_port));
	e->info.node = 2;
	e->info.flags = XPORT_PEER_LIVE;
	return 0;
}

static void fuzz_done(void *arg, uint64_t tag, int status)
{
	struct fuzz_run *run = arg;
	struct fuzz_post *post;

	FUZZ_CHECK(tag < run->n_posts);
	post = &run->posts[tag];
	FUZZ_CHECK(!post->done); /* exactly once per post */
	post->done = true;
	FUZZ_CHECK(status <= 0);
	if (xport_tcp_ops.peer_state(run->p) == XPORT_PEER_UP) {
		/* a reply: to a request that went out */
		FUZZ_CHECK(post->sent || run->was_connecting);
	} else {
		/* data only from a reply, and replies only while UP */
		FUZZ_CHECK(status);
	}
	free(post->dst);
	post->dst = NULL;
}

static bool fuzz_peer_is_open(const struct fuzz_run *run)
{
	enum xport_peer_state st = xport_tcp_ops.peer_state(run->p);

	return st == XPORT_PEER_CONNECTING || st == XPORT_PEER_UP;
}

/* Posts one read of 1..max_pages pages; returns what read() did. */
static int fuzz_post(struct fuzz_run *run)
{
	struct fuzz_post *post;
	uint32_t len;
	uint64_t off;
	int ret;

	if (run->n_posts == FUZZ_POSTS)
		return -ENOSPC;
	len = (uint32_t)fuzz_rng_size(&run->rng, run->max_pages) *
	      XPORT_TCP_PAGE;
	off = (uint64_t)(fuzz_rng_next(&run->rng) % 64) * XPORT_TCP_PAGE;
	post = &run->posts[run->n_posts];
	post->dst = malloc(len);
	if (!post->dst)
		abort();
	post->len = len;
	post->done = false;
	ret = xport_tcp_ops.read(run->p, off, len, post->dst, run->n_posts);
	if (ret) {
		/* not posted: done is never called for it */
		FUZZ_CHECK(ret == -ENOTCONN || ret == -ESTALE ||
			   ret == -EAGAIN);
		free(post->dst);
		post->dst = NULL;
		return ret;
	}
	post->sent = xport_tcp_ops.peer_state(run->p) == XPORT_PEER_UP;
	run->n_posts++;
	return 0;
}

/*
 * A RECV completion of @len bytes, as xport_tcp_on_cqe() hands it over
 * (holding a peer ref); @len is cut to the room rbuf has. Returns the
 * bytes taken.
 */
static size_t fuzz_recv(struct fuzz_run *run, const uint8_t *p, size_t len)
{
	struct xport_tcp_peer *tp = xport_tcp_peer_from(run->p);
	struct xport_tcp_conn *c = tp->conn;
	unsigned int i;

	FUZZ_CHECK(c && c->rlen < XPORT_TCP_RBUF_SIZE);
	if (len > XPORT_TCP_RBUF_SIZE - c->rlen)
		len = XPORT_TCP_RBUF_SIZE - c->rlen;
	run->was_connecting =
		xport_tcp_ops.peer_state(run->p) == XPORT_PEER_CONNECTING;
	memcpy(c->rbuf + c->rlen, p, len);
	tp->refs++;
	xport_tcp_conn_on_recv(c, tp, (int)len);
	xport_tcp_peer_put(tp);
	/* the HELLO reply came: peer_up() sent the queued reads */
	if (run->was_connecting &&
	    xport_tcp_ops.peer_state(run->p) == XPORT_PEER_UP)
		for (i = 0; i < run->n_posts; i++)
			run->posts[i].sent = true;
	run->was_connecting = false;
	return len;
}

static void fuzz_hello_answer(struct fuzz_run *run)
{
	struct wire_hdr h = {
		.version = WIRE_VERSION,
		.op = WIRE_OP_HELLO,
		.tag = 0, /* the client id: none given in cfg */
		.arg = fuzz_env.info.instance ? fuzz_env.info.instance
					      : FUZZ_INSTANCE,
	};
	uint8_t b[WIRE_HDR_LEN];

	wire_hdr_pack(&h, b);
	FUZZ_CHECK(fuzz_recv(run, b, sizeof(b)) == sizeof(b));
	FUZZ_CHECK(xport_tcp_ops.peer_state(run->p) == XPORT_PEER_UP);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const uint64_t instances[4] = { 0, FUZZ_INSTANCE,
					       FUZZ_INSTANCE + 1, 1 };
	static const size_t chunk_max[4] = { XPORT_TCP_RBUF_SIZE, 1, 31,
					     4096 + 7 };
	struct io_uring_cqe *cqe;
	struct xport_cfg cfg;
	struct fuzz_run *run;
	size_t off = 3, cmax, n;
	unsigned int i, n_start;
	bool hello_pending;

	if (size < 3)
		return 0;
	run = calloc(1, sizeof(*run));
	if (!run)
		abort();
	hello_pending = data[0] & 1;
	cmax = chunk_max[(data[0] >> 1) & 3];
	fuzz_env.info.instance = instances[(data[0] >> 4) & 3];
	n_start = 1 + (data[1] & 15);
	run->max_pages = 1 + ((data[1] >> 4) & 3);
	fuzz_rng_init(&run->rng, data[2]);

	cfg = (struct xport_cfg){
		.ring = &fuzz_env.ring,
		.done = fuzz_done,
		.arg = run,
	};
	FUZZ_CHECK(!xport_tcp_ops.create(&cfg, &run->x));
	/* CONNECTING, HELLO queued; the refused CONNECT is reaped at the end */
	FUZZ_CHECK(!xport_tcp_ops.peer_open(run->x, &fuzz_env.info, &run->p));
	if (!hello_pending)
		fuzz_hello_answer(run);
	/* while CONNECTING they wait in the queue, sent once UP */
	for (i = 0; i < n_start; i++)
		FUZZ_CHECK(!fuzz_post(run));

	while (off < size && fuzz_peer_is_open(run)) {
		n = fuzz_rng_size(&run->rng, cmax);
		off += fuzz_recv(run, data + off,
				 n < size - off ? n : size - off);
		if ((data[0] & 8) && !(fuzz_rng_next(&run->rng) & 1))
			fuzz_post(run);
	}

	xport_tcp_ops.peer_close(run->p);
	xport_tcp_ops.destroy(run->x);
	/* destroy reaped the CONNECT and everything else it posted */
	FUZZ_CHECK(io_uring_peek_cqe(&fuzz_env.ring, &cqe) == -EAGAIN);
	for (i = 0; i < run->n_posts; i++)
		FUZZ_CHECK(run->posts[i].done);
	free(run);
	return 0;
}
