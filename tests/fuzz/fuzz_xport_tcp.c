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
 * Secure (byte 0 bit 6): the connection's handshake is run against a real
 * server state machine (its output fed through the RECV path, the
 * client's taken as SEND completions), and the harness seals the stream's
 * replies as a page server would, one record each (a header, len bytes of
 * data, a tag), optionally changing one byte of one record. Then also:
 * every request the client queued opens with the server's session, in
 * order; a read done with status 0 holds exactly the data of the next
 * reply with data (in clear), which was not changed; a changed one never
 * completes a read with 0. With the opener thread (byte 0 bit 7), reads
 * whose records it opens complete once it has (the harness waits for it
 * after each chunk, then takes what it opened as the eventfd's CQE
 * would); a read of a page, opened inline, may complete before a longer
 * one whose reply came first: the data check then follows two orders,
 * one of each.
 *
 * Input: three config bytes, then the stream.
 *   byte 0 bit  0   HELLO pending: the stream starts with the HELLO reply
 *                   (else the harness feeds a valid one first, and the
 *                   first reads are posted once the peer is UP)
 *          bits 1-2 chunk sizes (up to: all, 1 byte, 31 bytes, 4 KiB + 7)
 *          bit  3   more reads are posted between chunks
 *          bits 4-5 instance the peer expects (0 = any, FUZZ_INSTANCE,
 *                   FUZZ_INSTANCE + 1, 1)
 *          bit  6   secure
 *          bit  7   secure: records of more than a page are opened on
 *                   the opener thread (FARPAGE_TCP_OPENER=on)
 *   byte 1 bits 0-3 reads posted at the start, minus 1
 *          bits 4-5 pages per read at most, minus 1
 *          bit  6   secure: one byte of one record changed
 *          bit  7   secure: the client asks for encryption
 *   byte 2          seed of the chunk sizes and read lengths
 */
#include "../../node/xport/xport_tcp.c"
#include "../../node/xport/xport_tcp_conn.c"
#include "../../node/xport/xport_tcp_send.c"
#include "../../node/xport/xport_tcp_recv.c"
#include "../../node/xport/xport_tcp_grant.c"
#include "../../node/xport/xport_tcp_opener.c"

#include <netinet/in.h>

#include "fuzz.h"

#define FUZZ_INSTANCE 0x1122334455667788ull
#define FUZZ_POSTS    64u
#define FUZZ_RECS     1024u /* reply records sealed at most */

static const uint8_t fuzz_key[AUTH_KEY_LEN] =
	"the pair key of client and owner";

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

/* Secure: a reply with data, as sealed (its data in clear). */
struct fuzz_rec {
	const uint8_t *data;
	uint32_t len;
	bool tampered;
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
	/* the stream fed (secure: sealed) */
	const uint8_t *stream;
	size_t len;
	/* secure: the server's session, the sealed stream, its replies with
	 * data and the next of them a read must get (with the opener, two
	 * orders: a page, opened inline, and more, opened by the opener);
	 * the client's send stream opened so far */
	struct auth_sess *ss;
	uint8_t *sealed;
	struct fuzz_rec *recs;
	unsigned int n_recs, rec_next[2];
	bool opener;
	size_t sent_opened;
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
	snprintf(e->info.name, sizeof(e->info.name), "owner");
	memcpy(e->info.pkey, fuzz_key, sizeof(e->info.pkey));
	e->info.has_pkey = true;
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
	if (run->ss && !status) {
		/* the next reply with data, as the server sealed it */
		unsigned int k = run->opener && post->len > XPORT_TCP_PAGE;
		const struct fuzz_rec *r;

		/* the opener's records complete in order, and those opened
		 * inline do; a page may overtake longer ones */
		while (run->opener && run->rec_next[k] < run->n_recs &&
		       (run->recs[run->rec_next[k]].len > XPORT_TCP_PAGE) != k)
			run->rec_next[k]++;
		FUZZ_CHECK(run->rec_next[k] < run->n_recs);
		r = &run->recs[run->rec_next[k]++];
		FUZZ_CHECK(!r->tampered);
		FUZZ_CHECK(r->len == post->len);
		FUZZ_CHECK(!memcmp(post->dst, r->data, r->len));
	}
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
	if (xport_tcp_from(run->x)->opener) {
		xport_tcp_opener_sync(xport_tcp_from(run->x));
		xport_tcp_opened(xport_tcp_from(run->x));
	}
	/* the HELLO reply came: peer_up() sent the queued reads */
	if (run->was_connecting &&
	    xport_tcp_ops.peer_state(run->p) == XPORT_PEER_UP)
		for (i = 0; i < run->n_posts; i++)
			run->posts[i].sent = true;
	run->was_connecting = false;
	return len;
}

/*
 * Secure: the records the client queued since the last call open with the
 * server's session, in order (its send stream is never sent here: it only
 * grows).
 */
static void fuzz_requests_check(struct fuzz_run *run)
{
	struct xport_tcp_peer *tp = xport_tcp_peer_from(run->p);
	struct xport_tcp_conn *c = tp->conn;
	struct wire_hdr h;
	struct iovec v = { NULL, 0 };

	if (!run->ss || !c || !c->sess)
		return;
	FUZZ_CHECK(!c->dn); /* only reads are posted */
	while (c->slen - run->sent_opened >= WIRE_HDR_LEN + AUTH_TAG_LEN) {
		uint8_t *rec = c->sbuf + run->sent_opened;

		wire_hdr_unpack(rec, &h);
		FUZZ_CHECK(h.op == WIRE_OP_HELLO || h.op == WIRE_OP_READ);
		FUZZ_CHECK(auth_open(run->ss, rec, WIRE_HDR_LEN, &v, 0,
				     rec + WIRE_HDR_LEN) == 0);
		run->sent_opened += WIRE_HDR_LEN + AUTH_TAG_LEN;
	}
}

/* The HELLO reply, sealed if secure. */
static void fuzz_hello_answer(struct fuzz_run *run)
{
	struct wire_hdr h = {
		.version = WIRE_VERSION,
		.op = WIRE_OP_HELLO,
		.tag = 0, /* the client id: none given in cfg */
		.arg = fuzz_env.info.instance ? fuzz_env.info.instance
					      : FUZZ_INSTANCE,
	};
	uint8_t b[WIRE_HDR_LEN + AUTH_TAG_LEN];
	struct iovec v = { NULL, 0 };
	size_t n = WIRE_HDR_LEN;

	wire_hdr_pack(&h, b);
	if (run->ss) {
		FUZZ_CHECK(!auth_seal(run->ss, b, WIRE_HDR_LEN, &v, 0,
				      b + WIRE_HDR_LEN));
		n += AUTH_TAG_LEN;
	}
	fuzz_requests_check(run);
	FUZZ_CHECK(fuzz_recv(run, b, n) == n);
	FUZZ_CHECK(xport_tcp_ops.peer_state(run->p) == XPORT_PEER_UP);
}

static int fuzz_lookup(void *arg, const struct auth_hello *h,
		       uint8_t key[AUTH_KEY_LEN], char *why, size_t why_len)
{
	FUZZ_CHECK(h->role == AUTH_ROLE_PEER);
	FUZZ_CHECK(!strcmp(h->name, "client") && !strcmp(h->target, "owner"));
	memcpy(key, fuzz_key, AUTH_KEY_LEN);
	return AUTH_OK;
}

/*
 * Secure: the connection's handshake against a real server: what the
 * client says is taken as SEND completions, what the server says comes in
 * as RECVs. Then the session is the client's, and the HELLO queued.
 */
static void fuzz_handshake(struct fuzz_run *run)
{
	struct auth_server_cfg scfg = { .lookup = fuzz_lookup };
	struct xport_tcp_peer *tp = xport_tcp_peer_from(run->p);
	struct xport_tcp_conn *c = tp->conn;
	struct auth_hs *s;
	const uint8_t *o;
	size_t n;

	FUZZ_CHECK(c && c->hs && !c->sess && !c->slen);
	FUZZ_CHECK(!auth_hs_server(&scfg, &s));
	for (int i = 0; i < 4 && c->hs; i++) {
		while (c->hs && (n = auth_hs_output(c->hs, &o)) > 0) {
			FUZZ_CHECK(auth_hs_input(s, o, n) == (ssize_t)n);
			tp->refs++;
			xport_tcp_conn_on_send(c, tp, (int)n);
			xport_tcp_peer_put(tp);
		}
		while ((n = auth_hs_output(s, &o)) > 0) {
			FUZZ_CHECK(c->hs && auth_hs_want(c->hs) == n);
			FUZZ_CHECK(fuzz_recv(run, o, n) == n);
			auth_hs_sent(s, n);
		}
	}
	FUZZ_CHECK(auth_hs_done(s) && !c->hs && c->sess);
	FUZZ_CHECK(xport_tcp_ops.peer_state(run->p) == XPORT_PEER_CONNECTING);
	run->ss = auth_hs_take(s);
	FUZZ_CHECK(run->ss);
	auth_hs_free(s);
	/* the HELLO, sealed */
	FUZZ_CHECK(c->slen == WIRE_HDR_LEN + AUTH_TAG_LEN);
}

/*
 * Secure: the stream's replies sealed as the page server seals them, one
 * record each (a header, len bytes of data, a tag); what follows the last
 * whole one stays as it is. With @tamper, one byte of one record changes.
 */
static void fuzz_seal(struct fuzz_run *run, const uint8_t *in, size_t len,
		      bool tamper)
{
	size_t pos = 0, out = 0, at[FUZZ_RECS], total[FUZZ_RECS];
	unsigned int n = 0, k, data_of[FUZZ_RECS];
	struct wire_hdr h;
	struct iovec v;

	run->sealed = malloc(len + FUZZ_RECS * AUTH_TAG_LEN + 1);
	run->recs = calloc(FUZZ_RECS, sizeof(*run->recs));
	if (!run->sealed || !run->recs)
		abort();
	while (len - pos >= WIRE_HDR_LEN && n < FUZZ_RECS) {
		wire_hdr_unpack(in + pos, &h);
		if (len - pos - WIRE_HDR_LEN < h.len)
			break;
		memcpy(run->sealed + out, in + pos, WIRE_HDR_LEN + h.len);
		v.iov_base = run->sealed + out + WIRE_HDR_LEN;
		v.iov_len = h.len;
		FUZZ_CHECK(
			!auth_seal(run->ss, run->sealed + out, WIRE_HDR_LEN, &v,
				   h.len ? 1 : 0,
				   run->sealed + out + WIRE_HDR_LEN + h.len));
		at[n] = out;
		total[n] = WIRE_HDR_LEN + h.len + AUTH_TAG_LEN;
		data_of[n] = UINT32_MAX;
		if (h.len) {
			data_of[n] = run->n_recs;
			run->recs[run->n_recs].data = in + pos + WIRE_HDR_LEN;
			run->recs[run->n_recs++].len = h.len;
		}
		out += total[n++];
		pos += WIRE_HDR_LEN + h.len;
	}
	if (tamper && n) {
		k = fuzz_rng_next(&run->rng) % n;
		run->sealed[at[k] + fuzz_rng_next(&run->rng) % total[k]] ^=
			(uint8_t)(1 + fuzz_rng_next(&run->rng) % 255);
		if (data_of[k] != UINT32_MAX)
			run->recs[data_of[k]].tampered = true;
	}
	memcpy(run->sealed + out, in + pos, len - pos);
	run->stream = run->sealed;
	run->len = out + len - pos;
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
	size_t off = 0, cmax, n;
	unsigned int i, n_start;
	bool hello_pending, secure;

	if (size < 3)
		return 0;
	run = calloc(1, sizeof(*run));
	if (!run)
		abort();
	hello_pending = data[0] & 1;
	cmax = chunk_max[(data[0] >> 1) & 3];
	fuzz_env.info.instance = instances[(data[0] >> 4) & 3];
	secure = data[0] & 0x40;
	n_start = 1 + (data[1] & 15);
	run->max_pages = 1 + ((data[1] >> 4) & 3);
	fuzz_rng_init(&run->rng, data[2]);
	run->stream = data + 3;
	run->len = size - 3;

	cfg = (struct xport_cfg){
		.ring = &fuzz_env.ring,
		.done = fuzz_done,
		.arg = run,
		.insecure = !secure,
		.self_name = "client",
		.auth_flags = data[1] & 0x80 ? AUTH_F_ENCRYPT : 0,
	};
	setenv("FARPAGE_TCP_OPENER", data[0] & 0x80 ? "on" : "off", 1);
	FUZZ_CHECK(!xport_tcp_ops.create(&cfg, &run->x));
	run->opener = xport_tcp_from(run->x)->opener;
	FUZZ_CHECK(run->opener == (secure && (data[0] & 0x80)));
	/* CONNECTING, HELLO queued (secure: the handshake first); the
	 * refused CONNECT is reaped at the end */
	FUZZ_CHECK(!xport_tcp_ops.peer_open(run->x, &fuzz_env.info, &run->p));
	if (secure)
		fuzz_handshake(run);
	if (!hello_pending)
		fuzz_hello_answer(run);
	/* after the HELLO reply: records are sealed in the order sent */
	if (secure)
		fuzz_seal(run, data + 3, size - 3, data[1] & 0x40);
	/* while CONNECTING they wait in the queue, sent once UP */
	for (i = 0; i < n_start; i++)
		FUZZ_CHECK(!fuzz_post(run));

	while (off < run->len && fuzz_peer_is_open(run)) {
		n = fuzz_rng_size(&run->rng, cmax);
		fuzz_requests_check(run);
		off += fuzz_recv(run, run->stream + off,
				 n < run->len - off ? n : run->len - off);
		if ((data[0] & 8) && !(fuzz_rng_next(&run->rng) & 1))
			fuzz_post(run);
	}
	fuzz_requests_check(run);

	xport_tcp_ops.peer_close(run->p);
	xport_tcp_ops.destroy(run->x);
	/* destroy reaped the CONNECT and everything else it posted */
	FUZZ_CHECK(io_uring_peek_cqe(&fuzz_env.ring, &cqe) == -EAGAIN);
	for (i = 0; i < run->n_posts; i++)
		FUZZ_CHECK(run->posts[i].done);
	auth_sess_free(run->ss);
	free(run->sealed);
	free(run->recs);
	free(run);
	return 0;
}
