// SPDX-License-Identifier: MIT
/*
 * Blocking control-message I/O: one frame per message in one sendmsg(), file
 * descriptors as SCM_RIGHTS; receive with a timeout, length checked first.
 */
#define LOG_PREFIX "ctl: "
#include "ctl.h"

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "frame.h"
#include "log.h"
#include "net.h"

/* Descriptors collected while one frame is read. */
struct ctl_fds {
	int *fds;
	int cap;
	int n;
};

static int64_t ctl_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Polls @fd for @events until @deadline (< 0 = none). */
static int ctl_wait(int fd, short events, int64_t deadline)
{
	struct pollfd pfd = { .fd = fd, .events = events };
	int rc, wait;

	for (;;) {
		wait = -1;
		if (deadline >= 0) {
			int64_t left = deadline - ctl_now_ms();

			if (left <= 0)
				return -ETIMEDOUT;
			wait = left > INT_MAX ? INT_MAX : (int)left;
		}
		rc = poll(&pfd, 1, wait);
		if (rc < 0 && errno == EINTR)
			continue;
		if (rc < 0)
			return -errno;
		if (rc > 0)
			return 0;
	}
}

static int ctl_send_frame(int fd, const uint8_t *buf, size_t len,
			  const int *fds, int n_fds, int64_t deadline);

int ctl_send_timed(int fd, const struct msg *m, const int *fds, int n_fds,
		   int timeout_ms)
{
	uint8_t *buf;
	size_t len;
	int ret;

	if (n_fds < 0 || n_fds > CTL_FDS_MAX || (n_fds && !fds))
		return -EINVAL;
	ret = msg_encode(m, &buf, &len);
	if (ret)
		return ret;
	ret = ctl_send_frame(fd, buf, len, fds, n_fds,
			     timeout_ms < 0 ? -1 : ctl_now_ms() + timeout_ms);
	free(buf);
	return ret;
}

int ctl_send(int fd, const struct msg *m, const int *fds, int n_fds)
{
	return ctl_send_timed(fd, m, fds, n_fds, -1);
}

int ctl_send_raw(int fd, const uint8_t *buf, size_t len, const int *fds,
		 int n_fds)
{
	return ctl_send_frame(fd, buf, len, fds, n_fds, -1);
}

static int ctl_send_frame(int fd, const uint8_t *buf, size_t len,
			  const int *fds, int n_fds, int64_t deadline)
{
	union {
		char buf[CMSG_SPACE(sizeof(int) * CTL_FDS_MAX)];
		struct cmsghdr align;
	} cbuf;
	uint8_t hdr[FRAME_HDR_LEN];
	struct iovec iov[2], *v = iov;
	struct msghdr mh = { 0 };
	ssize_t n;
	int iovcnt = 2;

	if (n_fds < 0 || n_fds > CTL_FDS_MAX || (n_fds && !fds))
		return -EINVAL;
	if (!len || len > FRAME_MAX)
		return -EMSGSIZE;
	frame_hdr_put(hdr, (uint32_t)len);
	iov[0] = (struct iovec){ .iov_base = hdr, .iov_len = sizeof(hdr) };
	iov[1] = (struct iovec){ .iov_base = (void *)buf, .iov_len = len };
	if (n_fds) {
		struct cmsghdr *c;

		memset(&cbuf, 0, sizeof(cbuf));
		mh.msg_control = cbuf.buf;
		mh.msg_controllen = CMSG_SPACE(sizeof(int) * n_fds);
		c = CMSG_FIRSTHDR(&mh);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int) * n_fds);
		memcpy(CMSG_DATA(c), fds, sizeof(int) * n_fds);
	}
	while (iovcnt) {
		mh.msg_iov = v;
		mh.msg_iovlen = iovcnt;
		n = sendmsg(fd, &mh, MSG_NOSIGNAL);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK) {
				int ret = ctl_wait(fd, POLLOUT, deadline);

				if (ret)
					return ret;
				continue;
			}
			return -errno;
		}
		/* The descriptors went with the first byte sent. */
		mh.msg_control = NULL;
		mh.msg_controllen = 0;
		while (iovcnt && (size_t)n >= v->iov_len) {
			n -= (ssize_t)v->iov_len;
			v++;
			iovcnt--;
		}
		if (iovcnt) {
			v->iov_base = (char *)v->iov_base + n;
			v->iov_len -= (size_t)n;
		}
	}
	return 0;
}

static void ctl_fds_take(struct ctl_fds *cf, struct msghdr *mh)
{
	for (struct cmsghdr *c = CMSG_FIRSTHDR(mh); c; c = CMSG_NXTHDR(mh, c)) {
		int k, fd;

		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		k = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
		for (int i = 0; i < k; i++) {
			memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(fd));
			if (cf->n < cf->cap)
				cf->fds[cf->n++] = fd;
			else
				close(fd);
		}
	}
}

static void ctl_fds_close(struct ctl_fds *cf)
{
	for (int i = 0; i < cf->n; i++)
		close(cf->fds[i]);
	cf->n = 0;
}

/* Reads exactly @len bytes, collecting descriptors into @cf. */
static int ctl_read(int fd, void *buf, size_t len, int64_t deadline,
		    struct ctl_fds *cf)
{
	union {
		char buf[CMSG_SPACE(sizeof(int) * CTL_FDS_MAX)];
		struct cmsghdr align;
	} cbuf;
	size_t got = 0;
	ssize_t n;
	int ret;

	while (got < len) {
		struct iovec iov = { .iov_base = (char *)buf + got,
				     .iov_len = len - got };
		struct msghdr mh = {
			.msg_iov = &iov,
			.msg_iovlen = 1,
			.msg_control = cbuf.buf,
			.msg_controllen = sizeof(cbuf.buf),
		};

		ret = ctl_wait(fd, POLLIN, deadline);
		if (ret)
			return ret;
		n = recvmsg(fd, &mh, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
		if (n < 0) {
			if (errno == EINTR || errno == EAGAIN ||
			    errno == EWOULDBLOCK)
				continue;
			return -errno;
		}
		ctl_fds_take(cf, &mh);
		if (mh.msg_flags & MSG_CTRUNC)
			log_warn("fd %d: descriptors beyond %d dropped", fd,
				 CTL_FDS_MAX);
		if (n == 0)
			return -ECONNRESET;
		got += (size_t)n;
	}
	return 0;
}

int ctl_recv(int fd, struct msg *m, int *fds, int *n_fds, int timeout_ms)
{
	uint8_t *buf;
	size_t len;
	int ret;

	msg_init(m, MSG_T_NONE);
	ret = ctl_recv_raw(fd, &buf, &len, fds, n_fds, timeout_ms);
	if (ret)
		return ret;
	ret = msg_decode(buf, len, m);
	free(buf);
	if (ret && fds && n_fds) {
		for (int i = 0; i < *n_fds; i++)
			close(fds[i]);
		*n_fds = 0;
	}
	return ret;
}

int ctl_recv_raw(int fd, uint8_t **out, size_t *out_len, int *fds, int *n_fds,
		 int timeout_ms)
{
	int64_t deadline = timeout_ms < 0 ? -1 : ctl_now_ms() + timeout_ms;
	struct ctl_fds cf = { .fds = fds, .cap = (fds && n_fds) ? *n_fds : 0 };
	uint8_t hdr[FRAME_HDR_LEN];
	const uint8_t *payload;
	uint8_t *buf;
	size_t len;
	ssize_t used;
	int ret;

	*out = NULL;
	*out_len = 0;
	if (n_fds)
		*n_fds = 0;
	ret = ctl_read(fd, hdr, sizeof(hdr), deadline, &cf);
	if (ret)
		goto out_close;
	/* Check the length before allocating or waiting for the payload. */
	used = frame_parse(hdr, sizeof(hdr), &payload, &len);
	if (used < 0) {
		ret = (int)used;
		goto out_close;
	}
	len = (size_t)hdr[0] << 24 | (size_t)hdr[1] << 16 |
	      (size_t)hdr[2] << 8 | hdr[3];
	buf = malloc(len);
	if (!buf) {
		ret = -ENOMEM;
		goto out_close;
	}
	ret = ctl_read(fd, buf, len, deadline, &cf);
	if (ret) {
		free(buf);
		goto out_close;
	}
	if (n_fds)
		*n_fds = cf.n;
	*out = buf;
	*out_len = len;
	return 0;
out_close:
	ctl_fds_close(&cf);
	return ret;
}

int ctl_call(int fd, const struct msg *req, struct msg *rep, int timeout_ms)
{
	int ret;

	msg_init(rep, MSG_T_NONE);
	ret = ctl_send(fd, req, NULL, 0);
	if (ret)
		return ret;
	ret = ctl_recv(fd, rep, NULL, NULL, timeout_ms);
	if (ret)
		return ret;
	if (rep->type == MSG_T_ERROR)
		return -(int)rep->err;
	return 0;
}

int ctl_call_addr(const char *addr, const struct msg *req, struct msg *rep,
		  int timeout_ms)
{
	int fd, ret;

	msg_init(rep, MSG_T_NONE);
	ret = net_connect(addr, timeout_ms, &fd);
	if (ret)
		return ret;
	ret = ctl_call(fd, req, rep, timeout_ms);
	close(fd);
	return ret;
}
