// SPDX-License-Identifier: MIT
/*
 * Bad input closes only the connection it came on: random bytes, a frame
 * of invalid CBOR, a frame header claiming 4 GiB, a zero-length frame, a
 * message of a type the coordinator does not serve. Meanwhile another
 * client, connected before and after, keeps getting correct answers, also
 * for pipelined requests, and the coordinator stays up.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdint.h>
#include <sys/socket.h>

#include "frame.h"
#include "t_coord.h"

#define MIB (UINT64_C(1) << 20)

/* Sends all of @buf; a reset by the peer half-way is fine. */
static int t_send_raw(int fd, const void *buf, size_t len)
{
	const uint8_t *p = buf;

	while (len) {
		ssize_t n = send(fd, p, len, MSG_NOSIGNAL);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EPIPE || errno == ECONNRESET)
				return 0;
			return -errno;
		}
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

/* Client B's check: the node list holds "bee", its id is 1. */
static int t_b_check(int fd)
{
	struct msg req, rep;
	int ret;

	msg_init(&req, MSG_T_NODE_LIST);
	ret = t_call(fd, &req, &rep);
	if (!ret && (rep.type != MSG_T_NODES || rep.n_nodes < 1 ||
		     strcmp(rep.nodes[0].name, "bee") || rep.nodes[0].id != 1))
		ret = -EPROTO;
	msg_fini(&rep);
	if (ret)
		fprintf(stderr, "client B: %s\n", strerror(-ret));
	return ret;
}

/* One bad client: connects, sends @buf, must be disconnected. */
static int t_bad_client(struct t_coord *tc, const char *what, const void *buf,
			size_t len)
{
	int fd = t_connect(tc);
	int ret = -1;

	T_CHECK(fd >= 0, "%s: connect", what);
	T_CHECK(t_send_raw(fd, buf, len) == 0, "%s: send", what);
	T_CHECK(t_wait_closed(fd, 5000) == 0, "%s: still connected", what);
	T_CHECK(t_coord_is_running(tc), "%s: coordinator died", what);
	ret = 0;
out:
	if (fd >= 0)
		close(fd);
	return ret;
}

/* A well-formed message of @type, framed. */
static int t_frame_msg(const struct msg *m, uint8_t **out, size_t *len)
{
	uint8_t *p;
	size_t n;
	int ret;

	ret = msg_encode(m, &p, &n);
	if (ret)
		return ret;
	*out = malloc(FRAME_HDR_LEN + n);
	if (!*out) {
		free(p);
		return -ENOMEM;
	}
	frame_hdr_put(*out, (uint32_t)n);
	memcpy(*out + FRAME_HDR_LEN, p, n);
	*len = FRAME_HDR_LEN + n;
	free(p);
	return 0;
}

/* Three requests in one write; three replies, in order. */
static int t_pipelined(int fd)
{
	struct msg reqs[3], rep;
	uint8_t *all = NULL, *one;
	size_t len = 0, n;
	int ret = -1;

	msg_init(&reqs[0], MSG_T_NODE_LIST);
	msg_init(&reqs[1], MSG_T_REGION_GET);
	strcpy(reqs[1].name, "no-such-region");
	msg_init(&reqs[2], MSG_T_REGION_LIST);
	for (int i = 0; i < 3; i++) {
		T_CHECK(t_frame_msg(&reqs[i], &one, &n) == 0, "encode");
		all = realloc(all, len + n);
		T_CHECK(all, "realloc");
		memcpy(all + len, one, n);
		len += n;
		free(one);
	}
	T_CHECK(t_send_raw(fd, all, len) == 0, "send");
	T_CHECK(ctl_recv(fd, &rep, NULL, NULL, T_CALL_MS) == 0, "recv");
	T_CHECK(rep.type == MSG_T_NODES, "reply 1 is %s",
		msg_type_name(rep.type));
	msg_fini(&rep);
	T_CHECK(ctl_recv(fd, &rep, NULL, NULL, T_CALL_MS) == 0, "recv");
	T_CHECK(rep.type == MSG_T_ERROR && rep.err == ENOENT, "reply 2 is %s",
		msg_type_name(rep.type));
	msg_fini(&rep);
	T_CHECK(ctl_recv(fd, &rep, NULL, NULL, T_CALL_MS) == 0, "recv");
	T_CHECK(rep.type == MSG_T_REGIONS, "reply 3 is %s",
		msg_type_name(rep.type));
	msg_fini(&rep);
	ret = 0;
out:
	free(all);
	return ret;
}

/*
 * Bytes of replies the coordinator has handed to the kernel on the
 * connection whose client end is @fd and that @fd has not read yet: the
 * send queue of the coordinator's end plus the receive queue of ours, as
 * /proc/net/tcp shows them. It stops changing once both are full.
 * Returns the count, or -1 if the connection is not found.
 */
static long long t_conn_queued(int fd)
{
	struct sockaddr_in me, peer;
	socklen_t len = sizeof(me);
	unsigned int la, lp, ra, rp;
	unsigned long tx, rx;
	long long coord_tx = -1, our_rx = -1;
	char line[512];
	FILE *f;

	if (getsockname(fd, (struct sockaddr *)&me, &len) ||
	    me.sin_family != AF_INET)
		return -1;
	len = sizeof(peer);
	if (getpeername(fd, (struct sockaddr *)&peer, &len))
		return -1;
	f = fopen("/proc/net/tcp", "r");
	if (!f) {
		fprintf(stderr, "/proc/net/tcp: %s\n", strerror(errno));
		return -1;
	}
	/* "sl local rem st tx_queue:rx_queue ...", addresses as the kernel
	 * holds them (network order, printed as a host integer). */
	while (fgets(line, sizeof(line), f)) {
		if (sscanf(line, " %*u: %X:%X %X:%X %*X %lX:%lX", &la, &lp, &ra,
			   &rp, &tx, &rx) != 6)
			continue;
		if (la == peer.sin_addr.s_addr && lp == ntohs(peer.sin_port) &&
		    ra == me.sin_addr.s_addr && rp == ntohs(me.sin_port))
			coord_tx = (long long)tx;
		if (la == me.sin_addr.s_addr && lp == ntohs(me.sin_port) &&
		    ra == peer.sin_addr.s_addr && rp == ntohs(peer.sin_port))
			our_rx = (long long)rx;
	}
	fclose(f);
	if (coord_tx < 0 || our_rx < 0) {
		fprintf(stderr, "connection not in /proc/net/tcp\n");
		return -1;
	}
	return coord_tx + our_rx;
}

/*
 * A client that pipelines far more output than the coordinator buffers
 * (200 replies of ~90 KiB) and reads only afterwards: it gets everything,
 * in order, while the coordinator keeps serving client @b.
 */
static int t_flood(struct t_coord *tc, int b)
{
	const unsigned int n_req = 200;
	uint8_t *one = NULL, *all = NULL;
	struct msg req, rep;
	uint64_t big = 0, deadline;
	long long queued = 0, prev;
	size_t len;
	int fd = -1, ret = -1;

	fd = t_connect(tc);
	T_CHECK(fd >= 0, "connect");
	T_CHECK(t_join(fd, "big", UINT64_C(1) << 40, 0xb16, &big) == 0, "join");
	msg_init(&req, MSG_T_REGION_CREATE);
	strcpy(req.name, "wide");
	req.size = UINT64_C(8) << 30;
	req.place = malloc(sizeof(*req.place));
	T_CHECK(req.place, "malloc");
	req.place[0] = big;
	req.n_place = 1;
	ret = t_call(fd, &req, &rep);
	msg_fini(&req);
	T_CHECK(ret == 0 && rep.n_chunks == 4096, "create: %s", strerror(-ret));
	ret = -1;
	msg_fini(&rep);

	msg_init(&req, MSG_T_REGION_GET);
	strcpy(req.name, "wide");
	T_CHECK(t_frame_msg(&req, &one, &len) == 0, "encode");
	all = malloc(len * n_req);
	T_CHECK(all, "malloc");
	for (unsigned int i = 0; i < n_req; i++)
		memcpy(all + i * len, one, len);
	T_CHECK(t_send_raw(fd, all, len * n_req) == 0, "send");
	/*
	 * Its replies pile up unread; others are served regardless. B asks
	 * until they have piled up: the kernel holds replies for the flood
	 * client and takes no more while B is answered twice in a row. The
	 * coordinator is one event loop, so each answer to B is a turn in
	 * which it would have written to the flood client if it could; the
	 * rest of the ~18 MiB now waits in the coordinator, and B is answered
	 * all the same. A coordinator that blocked on the full socket would
	 * never answer B (that check fails after T_CALL_MS); the deadline
	 * only bounds a hang.
	 */
	deadline = t_now_ms() + 20000;
	for (int same = 0; same < 2;) {
		T_CHECK(t_now_ms() < deadline,
			"the flood's replies never piled up (%lld bytes)",
			queued);
		T_CHECK(t_b_check(b) == 0, "B during the flood");
		prev = queued;
		queued = t_conn_queued(fd);
		T_CHECK(queued >= 0, "flood connection");
		same = queued > 0 && queued == prev ? same + 1 : 0;
	}
	for (unsigned int i = 0; i < n_req; i++) {
		T_CHECK(ctl_recv(fd, &rep, NULL, NULL, T_CALL_MS) == 0,
			"reply %u", i);
		T_CHECK(rep.type == MSG_T_REGION && rep.n_chunks == 4096 &&
				rep.chunks[4095].off == UINT64_C(4095) << 21,
			"reply %u is wrong", i);
		msg_fini(&rep);
	}
	ret = 0;
out:
	free(one);
	free(all);
	if (fd >= 0)
		close(fd);
	return ret;
}

static int t_run(struct t_coord *tc)
{
	uint8_t buf[8192], *framed = NULL, *big = NULL;
	struct msg req, rep;
	unsigned int seed = 12345;
	size_t len;
	int b = -1, c = -1, ret = -1;

	/* Its nodes never heartbeat nor report an epoch synced: a lease and
	 * a sync bound far longer than the test keep them up however slowly
	 * it runs (over 10 s under TSan on a loaded machine, and the last
	 * region create needs an up node). */
	static const char *const args[] = {
		"--frame-timeout-ms", "500",	"--lease-ms", "600000",
		"--sync-timeout-ms",  "600000", NULL
	};

	T_CHECK(t_coord_start(tc, args) == 0, "start");
	b = t_connect(tc);
	T_CHECK(b >= 0, "connect B");
	T_CHECK(t_join(b, "bee", 64 * MIB, 0xbee, NULL) == 0, "join");
	T_CHECK(t_b_check(b) == 0, "B before");

	/* Random bytes; the first one makes the declared length > FRAME_MAX
	 * (a random small length would just wait for more bytes). */
	for (size_t i = 0; i < sizeof(buf); i++)
		buf[i] = (uint8_t)rand_r(&seed);
	buf[0] |= 0x80;
	T_CHECK(t_bad_client(tc, "random bytes", buf, sizeof(buf)) == 0,
		"random");
	T_CHECK(t_b_check(b) == 0, "B after random bytes");

	/* A valid frame of random bytes: not CBOR, or not a message. */
	frame_hdr_put(buf, 1000);
	T_CHECK(t_bad_client(tc, "random payload", buf, 1004) == 0, "payload");
	T_CHECK(t_b_check(b) == 0, "B after random payload");

	/* A valid frame with invalid CBOR (0xff: a stray "break"). */
	frame_hdr_put(buf, 5);
	memset(buf + 4, 0xff, 5);
	T_CHECK(t_bad_client(tc, "invalid cbor", buf, 9) == 0, "cbor");
	T_CHECK(t_b_check(b) == 0, "B after invalid CBOR");

	/* A CBOR map that is no message: {"v": 1} without a type. */
	frame_hdr_put(buf, 4);
	memcpy(buf + 4, "\xa1\x61v\x01", 4);
	T_CHECK(t_bad_client(tc, "no type", buf, 8) == 0, "no type");

	/* A header claiming 4 GiB - 1, with a little payload behind it. */
	memset(buf, 0xff, 4);
	memset(buf + 4, 0, 64);
	T_CHECK(t_bad_client(tc, "4 GiB header", buf, 68) == 0, "4 GiB");
	T_CHECK(t_b_check(b) == 0, "B after 4 GiB header");

	/* Just past FRAME_MAX, and zero. */
	frame_hdr_put(buf, FRAME_MAX + 1);
	T_CHECK(t_bad_client(tc, "FRAME_MAX + 1", buf, 4) == 0, "max + 1");
	frame_hdr_put(buf, 0);
	T_CHECK(t_bad_client(tc, "zero length", buf, 4) == 0, "zero");

	/* A 1 MiB frame of zeros: buffered in full, then rejected. */
	big = calloc(1, FRAME_HDR_LEN + MIB);
	T_CHECK(big, "calloc");
	frame_hdr_put(big, (uint32_t)MIB);
	T_CHECK(t_bad_client(tc, "1 MiB of zeros", big, FRAME_HDR_LEN + MIB) ==
			0,
		"big");
	T_CHECK(t_b_check(b) == 0, "B after 1 MiB frame");

	/* Valid messages of types the coordinator does not serve. */
	msg_init(&req, MSG_T_AGENT_STATS);
	T_CHECK(t_frame_msg(&req, &framed, &len) == 0, "encode");
	T_CHECK(t_bad_client(tc, "agent_stats", framed, len) == 0, "stats");
	free(framed);
	framed = NULL;
	msg_init(&req, MSG_T_NODE_JOINED);
	req.node = 1;
	req.lease_ms = 1;
	T_CHECK(t_frame_msg(&req, &framed, &len) == 0, "encode");
	T_CHECK(t_bad_client(tc, "a reply type", framed, len) == 0, "reply");
	free(framed);
	framed = NULL;
	msg_init(&req, MSG_T_MAP);
	strcpy(req.name, "x");
	T_CHECK(t_frame_msg(&req, &framed, &len) == 0, "encode");
	/* After a good request on the same connection. */
	{
		uint8_t *two;
		uint8_t *good;
		size_t glen;
		struct msg list;

		msg_init(&list, MSG_T_NODE_LIST);
		T_CHECK(t_frame_msg(&list, &good, &glen) == 0, "encode");
		two = malloc(glen + len);
		T_CHECK(two, "malloc");
		memcpy(two, good, glen);
		memcpy(two + glen, framed, len);
		free(good);
		ret = t_bad_client(tc, "good then map", two, glen + len);
		free(two);
		T_CHECK(ret == 0, "good then bad");
		ret = -1;
	}
	free(framed);
	framed = NULL;
	T_CHECK(t_b_check(b) == 0, "B after unserved types");

	/* Half a frame, then nothing: cut off after --frame-timeout-ms. */
	frame_hdr_put(buf, 100);
	T_CHECK(t_bad_client(tc, "stalled half frame", buf, 50) == 0,
		"stalled");
	T_CHECK(t_log_count(tc, "half a frame") >= 1, "stall not logged");
	T_CHECK(t_b_check(b) == 0, "B after a stalled client");

	/* Half a frame, then the client goes away. */
	c = t_connect(tc);
	T_CHECK(c >= 0, "connect");
	frame_hdr_put(buf, 100);
	T_CHECK(t_send_raw(c, buf, 50) == 0, "send");
	close(c);
	c = -1;

	/* Handler errors keep the connection; pipelining works. */
	msg_init(&req, MSG_T_REGION_DELETE);
	strcpy(req.name, "absent");
	T_CHECK(t_call(b, &req, &rep) == -ENOENT, "delete absent");
	T_CHECK(rep.text[0], "error without text");
	msg_fini(&rep);
	T_CHECK(t_pipelined(b) == 0, "pipelined");
	T_CHECK(t_b_check(b) == 0, "B at the end");

	T_CHECK(t_flood(tc, b) == 0, "flood");

	/* A client connected after all that is served normally. */
	c = t_connect(tc);
	T_CHECK(c >= 0, "connect C");
	T_CHECK(t_b_check(c) == 0, "C");
	msg_init(&req, MSG_T_REGION_CREATE);
	strcpy(req.name, "after-garbage");
	req.size = 4 * MIB;
	T_CHECK(t_call(c, &req, &rep) == 0 && rep.type == MSG_T_REGION &&
			rep.n_chunks == 2,
		"create after garbage");
	msg_fini(&rep);
	T_CHECK(t_coord_is_running(tc), "coordinator died");
	T_CHECK(t_log_count(tc, "closing") >= 10, "bad clients not logged (%d)",
		t_log_count(tc, "closing"));
	T_CHECK(t_coord_stop(tc, SIGTERM) == 0, "clean exit on SIGTERM");
	ret = 0;
out:
	free(framed);
	free(big);
	if (b >= 0)
		close(b);
	if (c >= 0)
		close(c);
	return ret;
}

int main(void)
{
	struct t_coord tc;
	int ret;

	ret = t_coord_init(&tc, "test_coord_garbage");
	if (ret != T_PASS) {
		t_coord_fini(&tc, 0);
		return ret;
	}
	ret = t_run(&tc) ? T_FAIL : T_PASS;
	t_coord_fini(&tc, ret != T_PASS);
	return ret;
}
