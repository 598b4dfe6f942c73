// SPDX-License-Identifier: MIT
/*
 * fp_tamper: a host on the path between an agent and a page server that
 * changes one bit, for test_data_stall.sh.
 *
 *   fp_tamper proxy LISTEN TARGET_FILE READY NTH
 *       Listens on LISTEN (host:port, port 0: any free one) and writes the
 *       address it got to READY. Each connection accepted is joined to a
 *       new one to the address on the first line of TARGET_FILE (read at
 *       each accept), and the bytes are passed on both ways as they come.
 *       Once in its life it flips one bit: bit 0 of the op byte of the
 *       NTH READ request (counted over all connections) that a client
 *       sends, which makes it a WRITE header: the page server then waits
 *       for that many data bytes (and a tag) that never come, while the
 *       client waits for its reply. The stream of requests is followed
 *       as the client frames it: a peer handshake (HELLO and PROOF,
 *       AUTH_HELLO_LEN and AUTH_PROOF_LEN bytes, when it starts with
 *       AUTH_MAGIC), then records (header 24, a
 *       WRITE's generation 8 and data, a tag 16 when secure). Prints
 *       "flipped: conn=N read=NTH len=L tag=T" when it did, and
 *       "conn: N" for each connection accepted. Runs until killed.
 */
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "auth.h"

#define TP_HDR 24u
#define TP_TAG 16u
/* HELLO and PROOF, client to server, in the handshake this build speaks */
#define TP_HS_UP    (AUTH_HELLO_LEN + AUTH_PROOF_LEN)
#define TP_OP_READ  2u
#define TP_OP_WRITE 3u
#define TP_OP_GRANT 4u /* sealed grants follow, len bytes */
#define TP_F_WGEN   0x1u
#define TP_WGEN	    8u

/* The proxy: what every connection shares. */
struct tp {
	const char *target_file;
	unsigned long nth;
	atomic_ulong reads; /* READ requests seen */
	atomic_uint conns;
};

/* One direction of one connection: bytes from @from to @to. */
struct tp_dir {
	struct tp *t;
	int from, to;
	unsigned int conn;
	bool up; /* client to server: followed, and maybe tampered */
	/* the client's framing (up only) */
	bool started, secure;
	uint64_t skip; /* bytes of the handshake or a record's body left */
	uint8_t hdr[TP_HDR];
	unsigned int hlen;
	bool flip_here; /* the header coming in is the one flipped */
};

static int tp_addr(const char *addr, bool passive, struct addrinfo **out)
{
	char host[256], *port;
	struct addrinfo hints = { .ai_family = AF_UNSPEC,
				  .ai_socktype = SOCK_STREAM,
				  .ai_flags = passive ? AI_PASSIVE : 0 };

	snprintf(host, sizeof(host), "%s", addr);
	port = strrchr(host, ':');
	if (!port)
		return -1;
	*port++ = '\0';
	return getaddrinfo(host, port, &hints, out) ? -1 : 0;
}

static int tp_connect(const char *target_file)
{
	char addr[256] = "";
	struct addrinfo *ai;
	FILE *f;
	int fd, one = 1;

	f = fopen(target_file, "r");
	if (!f || !fgets(addr, sizeof(addr), f)) {
		if (f)
			fclose(f);
		return -1;
	}
	fclose(f);
	addr[strcspn(addr, "\r\n")] = '\0';
	if (tp_addr(addr, false, &ai))
		return -1;
	fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd >= 0 && connect(fd, ai->ai_addr, ai->ai_addrlen)) {
		close(fd);
		fd = -1;
	}
	freeaddrinfo(ai);
	if (fd >= 0)
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	return fd;
}

static uint32_t tp_be32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 |
	       (uint32_t)p[2] << 8 | p[3];
}

static uint64_t tp_be64(const uint8_t *p)
{
	return (uint64_t)tp_be32(p) << 32 | tp_be32(p + 4);
}

/* A header is complete (as the client sent it): its body and tag next. */
static void tp_hdr_done(struct tp_dir *d)
{
	uint32_t len = tp_be32(d->hdr + 4);
	uint16_t flags = (uint16_t)(d->hdr[2] << 8 | d->hdr[3]);

	d->skip = d->secure ? TP_TAG : 0;
	if (d->hdr[1] == TP_OP_WRITE)
		d->skip += len + (flags & TP_F_WGEN ? TP_WGEN : 0);
	else if (d->hdr[1] == TP_OP_GRANT)
		d->skip += len;
	d->hlen = 0;
}

/* Follows the client's requests in @b (@n bytes, about to be sent on)
 * and flips the one bit, once. */
static void tp_follow(struct tp_dir *d, uint8_t *b, size_t n)
{
	struct tp *t = d->t;
	size_t i = 0, k;

	if (!d->started && n) {
		d->started = true;
		d->secure = n >= 1 && b[0] == 'F';
		d->skip = d->secure ? TP_HS_UP : 0;
	}
	while (i < n) {
		if (d->skip) {
			k = n - i < d->skip ? n - i : (size_t)d->skip;
			d->skip -= k;
			i += k;
			continue;
		}
		d->hdr[d->hlen++] = b[i];
		if (d->hlen == 2 && b[i] == TP_OP_READ &&
		    atomic_fetch_add(&t->reads, 1) + 1 == t->nth) {
			/* the client's framing stays READ (hdr); the
			 * server gets WRITE */
			b[i] ^= 1;
			d->flip_here = true;
		}
		i++;
		if (d->hlen < TP_HDR)
			continue;
		if (d->flip_here) {
			printf("flipped: conn=%u read=%lu len=%u tag=%#llx\n",
			       d->conn, t->nth, tp_be32(d->hdr + 4),
			       (unsigned long long)tp_be64(d->hdr + 8));
			fflush(stdout);
			d->flip_here = false;
		}
		tp_hdr_done(d);
	}
}

static void *tp_pump(void *arg)
{
	struct tp_dir *d = arg;
	uint8_t buf[64 << 10];
	ssize_t n, w, off;

	for (;;) {
		n = recv(d->from, buf, sizeof(buf), 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		if (d->up)
			tp_follow(d, buf, (size_t)n);
		for (off = 0; off < n; off += w) {
			w = send(d->to, buf + off, (size_t)(n - off),
				 MSG_NOSIGNAL);
			if (w < 0 && errno == EINTR) {
				w = 0;
				continue;
			}
			if (w <= 0)
				goto out;
		}
	}
out:
	/* either end gone: both go, and the other direction ends too */
	shutdown(d->from, SHUT_RDWR);
	shutdown(d->to, SHUT_RDWR);
	return NULL;
}

/* Both directions of one connection; closes its two sockets after. */
static void *tp_conn(void *arg)
{
	struct tp_dir *up = arg, *down = up + 1;
	pthread_t th;

	if (pthread_create(&th, NULL, tp_pump, down)) {
		close(up->from);
		close(up->to);
		free(up);
		return NULL;
	}
	tp_pump(up);
	pthread_join(th, NULL);
	close(up->from);
	close(up->to);
	free(up);
	return NULL;
}

static int tp_proxy(const char *listen_addr, const char *target_file,
		    const char *ready, unsigned long nth)
{
	struct tp t = { .target_file = target_file, .nth = nth };
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	char host[NI_MAXHOST], port[NI_MAXSERV];
	struct addrinfo *ai;
	int lfd, cfd, sfd, one = 1;
	pthread_t th;
	FILE *f;

	if (tp_addr(listen_addr, true, &ai))
		return 2;
	lfd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (lfd < 0 ||
	    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) ||
	    bind(lfd, ai->ai_addr, ai->ai_addrlen) || listen(lfd, 64) ||
	    getsockname(lfd, (struct sockaddr *)&ss, &sl) ||
	    getnameinfo((struct sockaddr *)&ss, sl, host, sizeof(host), port,
			sizeof(port), NI_NUMERICHOST | NI_NUMERICSERV)) {
		perror("fp_tamper: listen");
		return 2;
	}
	freeaddrinfo(ai);
	f = fopen(ready, "w");
	if (!f || fprintf(f, "%s:%s\n", host, port) < 0 || fclose(f)) {
		perror("fp_tamper: ready file");
		return 2;
	}
	for (;;) {
		struct tp_dir *d;

		cfd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
		if (cfd < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			perror("fp_tamper: accept");
			return 2;
		}
		setsockopt(cfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		sfd = tp_connect(target_file);
		d = calloc(2, sizeof(*d));
		if (sfd < 0 || !d) {
			fprintf(stderr, "fp_tamper: cannot reach the target\n");
			if (sfd >= 0)
				close(sfd);
			close(cfd);
			free(d);
			continue;
		}
		d[0] = (struct tp_dir){ .t = &t,
					.from = cfd,
					.to = sfd,
					.conn = atomic_fetch_add(&t.conns, 1) +
						1,
					.up = true };
		d[1] = (struct tp_dir){
			.t = &t, .from = sfd, .to = cfd, .conn = d[0].conn
		};
		printf("conn: %u\n", d[0].conn);
		fflush(stdout);
		if (pthread_create(&th, NULL, tp_conn, d)) {
			close(cfd);
			close(sfd);
			free(d);
			continue;
		}
		pthread_detach(th);
	}
}

int main(int argc, char **argv)
{
	char *end;
	unsigned long nth;

	if (argc == 6 && !strcmp(argv[1], "proxy")) {
		nth = strtoul(argv[5], &end, 10);
		if (*end || !nth) {
			fprintf(stderr, "fp_tamper: NTH: a number from 1\n");
			return 2;
		}
		return tp_proxy(argv[2], argv[3], argv[4], nth);
	}
	fprintf(stderr,
		"usage: fp_tamper proxy LISTEN TARGET_FILE READY NTH\n");
	return 2;
}
