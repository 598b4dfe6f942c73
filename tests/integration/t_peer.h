/* SPDX-License-Identifier: MIT */
/*
 * A peer of the page server on raw sockets, for its tests: connect (from
 * a given source address), the client handshake, sealed records sent
 * (tampered if asked) and received, a close seen.
 */
#ifndef TESTS_T_PEER_H
#define TESTS_T_PEER_H

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "auth.h"
#include "net.h"
#include "wire.h"

/* A TCP connection to @addr from @src ("127.0.0.2"; NULL: any). */
static inline int t_connect_from(const char *addr, const char *src)
{
	struct sockaddr_in sin = { .sin_family = AF_INET }, from = sin;
	const char *colon = strrchr(addr, ':');
	int fd;

	if (!src) {
		int ret = net_connect(addr, 2000, &fd);

		return ret ? ret : fd;
	}
	if (!colon)
		return -EINVAL;
	sin.sin_port = htons((uint16_t)atoi(colon + 1));
	sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (inet_pton(AF_INET, src, &from.sin_addr) != 1)
		return -EINVAL;
	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (bind(fd, (struct sockaddr *)&from, sizeof(from)) ||
	    connect(fd, (struct sockaddr *)&sin, sizeof(sin))) {
		int e = errno;

		close(fd);
		return -e;
	}
	return fd;
}

/* Connects and runs the client handshake. Returns 0 or -errno. */
static inline int t_client(const char *addr, const char *src, const char *name,
			   const char *target, const uint8_t *key,
			   unsigned int flags, int *fd, struct auth_sess **sess,
			   char *why, size_t why_len)
{
	struct auth_client_cfg cfg = {
		.role = AUTH_ROLE_PEER,
		.name = name,
		.target = target,
		.flags = flags,
	};
	int ret;

	memcpy(cfg.key, key, sizeof(cfg.key));
	*fd = t_connect_from(addr, src);
	if (*fd < 0)
		return *fd;
	ret = auth_client_run(*fd, &cfg, 5000, sess, why, why_len);
	if (ret) {
		close(*fd);
		*fd = -1;
	}
	return ret;
}

static inline int t_send_all(int fd, const void *buf, size_t len)
{
	const uint8_t *p = buf;
	ssize_t n;

	while (len) {
		n = send(fd, p, len, MSG_NOSIGNAL);
		if (n <= 0)
			return n ? -errno : -EPIPE;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

/* Exactly @len bytes within 5 s; -ECONNRESET at EOF (*got: how many). */
static inline int t_recv_all(int fd, void *buf, size_t len, size_t *got)
{
	size_t n0 = 0;
	ssize_t n;

	if (!got)
		got = &n0;
	*got = 0;
	while (*got < len) {
		struct pollfd pfd = { .fd = fd, .events = POLLIN };

		if (poll(&pfd, 1, 5000) != 1)
			return -ETIMEDOUT;
		n = recv(fd, (uint8_t *)buf + *got, len - *got, 0);
		if (n <= 0)
			return n ? -errno : -ECONNRESET;
		*got += (size_t)n;
	}
	return 0;
}

/* True once the server closed @fd without sending a byte more. */
static inline bool t_is_closed_silently(int fd, unsigned int ms)
{
	struct pollfd pfd = { .fd = fd, .events = POLLIN };
	uint8_t b[64];

	if (poll(&pfd, 1, (int)ms) != 1)
		return false;
	return recv(fd, b, sizeof(b), 0) <= 0;
}

/*
 * One sealed request: header, @len bytes of @data, tag; byte @tamper of
 * what goes out (header, data, tag in a row) flipped if not negative.
 */
static inline int t_send_rec(int fd, struct auth_sess *sess, uint8_t op,
			     uint32_t len, uint64_t tag, uint64_t off,
			     const void *data, long tamper)
{
	struct wire_hdr h = { WIRE_VERSION, op, 0, len, tag, off };
	size_t dlen = op == WIRE_OP_WRITE ? len : 0;
	uint8_t *rec = malloc(WIRE_HDR_LEN + dlen + AUTH_TAG_LEN);
	struct iovec v;
	int ret;

	if (!rec)
		return -ENOMEM;
	wire_hdr_pack(&h, rec);
	if (dlen)
		memcpy(rec + WIRE_HDR_LEN, data, dlen);
	v.iov_base = rec + WIRE_HDR_LEN;
	v.iov_len = dlen;
	ret = auth_seal(sess, rec, WIRE_HDR_LEN, &v, dlen ? 1 : 0,
			rec + WIRE_HDR_LEN + dlen);
	if (!ret && tamper >= 0)
		rec[tamper] ^= 0x20;
	if (!ret)
		ret = t_send_all(fd, rec, WIRE_HDR_LEN + dlen + AUTH_TAG_LEN);
	free(rec);
	return ret;
}

/*
 * One sealed record into *h and its data (a reply's len bytes; of a
 * request, a WRITE's) into @data of @max bytes; opened. Returns 0 or
 * -errno (-EBADMSG: it does not verify).
 */
static inline int t_recv_rec(int fd, struct auth_sess *sess, bool request,
			     struct wire_hdr *h, uint8_t *data, size_t max)
{
	uint8_t hdr[WIRE_HDR_LEN], tag[AUTH_TAG_LEN];
	struct iovec v = { data, 0 };
	int ret;

	ret = t_recv_all(fd, hdr, sizeof(hdr), NULL);
	if (ret)
		return ret;
	wire_hdr_unpack(hdr, h);
	v.iov_len = !request || h->op == WIRE_OP_WRITE ? h->len : 0;
	if (v.iov_len > max)
		return -EPROTO;
	if (v.iov_len && (ret = t_recv_all(fd, data, v.iov_len, NULL)))
		return ret;
	ret = t_recv_all(fd, tag, sizeof(tag), NULL);
	if (ret)
		return ret;
	return auth_open(sess, hdr, WIRE_HDR_LEN, &v, v.iov_len ? 1 : 0, tag);
}

#endif
