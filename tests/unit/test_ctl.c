// SPDX-License-Identifier: MIT
/*
 * ctl over real sockets: round trips on a socketpair, descriptors passed as
 * SCM_RIGHTS, timeouts, EOF, hostile frame headers, ctl_call over TCP.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "ctl.h"
#include "frame.h"
#include "msg.h"
#include "net.h"

struct t_pair {
	int a, b;
};

static int t_setup(void **state)
{
	struct t_pair *p = malloc(sizeof(*p));
	int sv[2];

	if (!p || socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) {
		free(p);
		return -1;
	}
	p->a = sv[0];
	p->b = sv[1];
	*state = p;
	return 0;
}

static int t_teardown(void **state)
{
	struct t_pair *p = *state;

	if (p->a >= 0)
		close(p->a);
	if (p->b >= 0)
		close(p->b);
	free(p);
	return 0;
}

static int t_fd_is_open(int fd)
{
	return fcntl(fd, F_GETFD) >= 0;
}

static int t_open_fds(void)
{
	int n = 0;

	for (int fd = 0; fd < 1024; fd++)
		n += t_fd_is_open(fd);
	return n;
}

static int64_t t_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void test_ctl_roundtrip(void **state)
{
	struct t_pair *p = *state;
	struct msg m, r;
	int n_fds = CTL_FDS_MAX, fds[CTL_FDS_MAX];

	msg_init(&m, MSG_T_NODE_JOIN);
	strcpy(m.name, "n1");
	strcpy(m.data_addr, "127.0.0.1:7000");
	m.pool_size = 1 << 30;
	m.instance = 99;
	assert_int_equal(ctl_send(p->a, &m, NULL, 0), 0);
	assert_int_equal(ctl_recv(p->b, &r, fds, &n_fds, 1000), 0);
	assert_int_equal(n_fds, 0);
	assert_int_equal(r.type, MSG_T_NODE_JOIN);
	assert_string_equal(r.name, "n1");
	assert_string_equal(r.data_addr, "127.0.0.1:7000");
	assert_int_equal(r.instance, 99);
	msg_fini(&r);

	/* several messages queued back to back arrive one by one */
	for (int i = 1; i <= 3; i++) {
		msg_error(&m, -i, "e%d", i);
		assert_int_equal(ctl_send(p->a, &m, NULL, 0), 0);
	}
	for (int i = 1; i <= 3; i++) {
		assert_int_equal(ctl_recv(p->b, &r, NULL, NULL, 1000), 0);
		assert_int_equal(r.type, MSG_T_ERROR);
		assert_int_equal(r.err, i);
		msg_fini(&r);
	}
	/* an invalid message is not sent */
	msg_init(&m, MSG_T_NONE);
	assert_int_equal(ctl_send(p->a, &m, NULL, 0), -EINVAL);
	msg_init(&m, MSG_T_OK);
	assert_int_equal(ctl_send(p->a, &m, NULL, CTL_FDS_MAX + 1), -EINVAL);
	assert_int_equal(ctl_recv(p->b, &r, NULL, NULL, 0), -ETIMEDOUT);
}

static void test_ctl_fd_passing(void **state)
{
	struct t_pair *p = *state;
	int pipefd[2], fds[CTL_FDS_MAX], n_fds = CTL_FDS_MAX;
	int before = t_open_fds();
	struct msg m, r;
	char c = 0;

	assert_int_equal(pipe2(pipefd, O_CLOEXEC), 0);
	msg_init(&m, MSG_T_MAP_UFFD);
	m.base = 0x7f0000000000;
	m.features = 1;
	assert_int_equal(ctl_send(p->a, &m, &pipefd[0], 1), 0);
	assert_int_equal(ctl_recv(p->b, &r, fds, &n_fds, 1000), 0);
	assert_int_equal(n_fds, 1);
	assert_int_equal(r.base, 0x7f0000000000);
	/* the received fd is the same pipe, close-on-exec */
	assert_true(fds[0] != pipefd[0]);
	assert_int_equal(fcntl(fds[0], F_GETFD) & FD_CLOEXEC, FD_CLOEXEC);
	assert_int_equal(write(pipefd[1], "z", 1), 1);
	assert_int_equal(read(fds[0], &c, 1), 1);
	assert_int_equal(c, 'z');
	close(fds[0]);

	/* more descriptors than the receiver takes: the surplus is closed */
	{
		int four[CTL_FDS_MAX] = { pipefd[0], pipefd[1], pipefd[0],
					  pipefd[1] };
		int one[1];

		n_fds = 1;
		assert_int_equal(ctl_send(p->a, &m, four, CTL_FDS_MAX), 0);
		assert_int_equal(ctl_recv(p->b, &r, one, &n_fds, 1000), 0);
		assert_int_equal(n_fds, 1);
		close(one[0]);
		/* fds = NULL closes them all */
		assert_int_equal(ctl_send(p->a, &m, four, CTL_FDS_MAX), 0);
		assert_int_equal(ctl_recv(p->b, &r, NULL, NULL, 1000), 0);
	}
	close(pipefd[0]);
	close(pipefd[1]);
	assert_int_equal(t_open_fds(), before);
}

static void test_ctl_timeout(void **state)
{
	struct t_pair *p = *state;
	struct msg r;
	int64_t t0 = t_now_ms();
	uint8_t half[2] = { 0, 0 };

	assert_int_equal(ctl_recv(p->b, &r, NULL, NULL, 150), -ETIMEDOUT);
	assert_true(t_now_ms() - t0 >= 140);
	assert_int_equal(r.type, MSG_T_NONE);
	/* half a header, then silence */
	assert_int_equal(write(p->a, half, sizeof(half)), 2);
	assert_int_equal(ctl_recv(p->b, &r, NULL, NULL, 100), -ETIMEDOUT);
}

static void test_ctl_bad_frames(void **state)
{
	struct t_pair *p = *state;
	uint8_t hdr[FRAME_HDR_LEN];
	int pipefd[2], fds[1], n_fds = 1;
	int before = t_open_fds();
	struct msg r;

	/* a header claiming FRAME_MAX + 1 is refused before any payload */
	frame_hdr_put(hdr, FRAME_MAX + 1);
	assert_int_equal(write(p->a, hdr, sizeof(hdr)), sizeof(hdr));
	assert_int_equal(ctl_recv(p->b, &r, NULL, NULL, 1000), -EBADMSG);
	frame_hdr_put(hdr, UINT32_MAX);
	assert_int_equal(write(p->a, hdr, sizeof(hdr)), sizeof(hdr));
	assert_int_equal(ctl_recv(p->b, &r, NULL, NULL, 1000), -EBADMSG);
	/* zero length */
	frame_hdr_put(hdr, 0);
	assert_int_equal(write(p->a, hdr, sizeof(hdr)), sizeof(hdr));
	assert_int_equal(ctl_recv(p->b, &r, NULL, NULL, 1000), -EBADMSG);
	/* a good frame of bad CBOR, with a descriptor that must be closed */
	{
		uint8_t junk[FRAME_HDR_LEN + 3];
		struct msghdr mh = { 0 };
		union {
			char buf[CMSG_SPACE(sizeof(int))];
			struct cmsghdr align;
		} cb;
		struct iovec iov = { junk, sizeof(junk) };
		struct cmsghdr *c;

		assert_int_equal(pipe2(pipefd, O_CLOEXEC), 0);
		frame_hdr_put(junk, 3);
		memcpy(junk + FRAME_HDR_LEN, "\xa1\x61v", 3);
		memset(&cb, 0, sizeof(cb));
		mh.msg_iov = &iov;
		mh.msg_iovlen = 1;
		mh.msg_control = cb.buf;
		mh.msg_controllen = sizeof(cb.buf);
		c = CMSG_FIRSTHDR(&mh);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(c), &pipefd[0], sizeof(int));
		assert_int_equal(sendmsg(p->a, &mh, 0), sizeof(junk));
		close(pipefd[0]);
		close(pipefd[1]);
		assert_int_equal(ctl_recv(p->b, &r, fds, &n_fds, 1000),
				 -EBADMSG);
		assert_int_equal(n_fds, 0);
	}
	assert_int_equal(t_open_fds(), before);
	/* EOF in the middle of a payload, then EOF before a header */
	frame_hdr_put(hdr, 10);
	assert_int_equal(write(p->a, hdr, sizeof(hdr)), sizeof(hdr));
	assert_int_equal(write(p->a, "\xa2", 1), 1);
	close(p->a);
	p->a = -1;
	assert_int_equal(ctl_recv(p->b, &r, NULL, NULL, 1000), -ECONNRESET);
	assert_int_equal(ctl_recv(p->b, &r, NULL, NULL, 1000), -ECONNRESET);
}

static void test_ctl_peer_gone(void **state)
{
	struct t_pair *p = *state;
	struct msg m;

	close(p->b);
	p->b = -1;
	msg_init(&m, MSG_T_OK);
	/* no SIGPIPE: the error comes back */
	assert_int_equal(ctl_send(p->a, &m, NULL, 0), -EPIPE);
}

struct t_big {
	int fd;
	int ret;
};

static void *t_big_send(void *arg)
{
	struct t_big *t = arg;
	struct msg m;

	msg_init(&m, MSG_T_REGION);
	strcpy(m.name, "big");
	m.chunk_size = 2 << 20;
	m.n_chunks = 200000;
	m.chunks = calloc(m.n_chunks, sizeof(*m.chunks));
	for (uint32_t i = 0; m.chunks && i < m.n_chunks; i++) {
		m.chunks[i].node = 1 + i % 7;
		m.chunks[i].off = (uint64_t)i << 21;
	}
	t->ret = m.chunks ? ctl_send(t->fd, &m, NULL, 0) : -ENOMEM;
	msg_fini(&m);
	return NULL;
}

/* A frame far larger than the socket buffer: short writes and reads. */
static void test_ctl_large(void **state)
{
	struct t_pair *p = *state;
	struct t_big t = { .fd = p->a };
	pthread_t th;
	struct msg r;

	assert_int_equal(pthread_create(&th, NULL, t_big_send, &t), 0);
	assert_int_equal(ctl_recv(p->b, &r, NULL, NULL, 10000), 0);
	pthread_join(th, NULL);
	assert_int_equal(t.ret, 0);
	assert_int_equal(r.n_chunks, 200000);
	assert_int_equal(r.chunks[199999].node, 1 + 199999 % 7);
	assert_int_equal(r.chunks[199999].off, (uint64_t)199999 << 21);
	msg_fini(&r);
}

struct t_server {
	int lfd;
	int replies; /* how many requests to serve */
};

/* Answers REGION_GET "r1" with REGION, anything else with ERROR ENOENT. */
static void *t_server_run(void *arg)
{
	struct t_server *s = arg;

	for (int i = 0; i < s->replies; i++) {
		struct msg req, rep;
		int fd;

		net_set_nonblock(s->lfd, 0);
		fd = accept4(s->lfd, NULL, NULL, SOCK_CLOEXEC);
		if (fd < 0)
			return NULL;
		if (ctl_recv(fd, &req, NULL, NULL, 5000) == 0) {
			if (req.type == MSG_T_REGION_GET &&
			    !strcmp(req.name, "r1")) {
				msg_init(&rep, MSG_T_REGION);
				strcpy(rep.name, "r1");
				rep.size = 1 << 30;
				rep.chunk_size = 2 << 20;
				rep.epoch = 3;
			} else {
				msg_error(&rep, -ENOENT, "no region %s",
					  req.name);
			}
			ctl_send(fd, &rep, NULL, 0);
			msg_fini(&req);
		}
		close(fd);
	}
	return NULL;
}

static void test_ctl_call_addr(void **state)
{
	struct t_server s = { .replies = 2 };
	char addr[64];
	struct msg req, rep;
	pthread_t th;

	assert_int_equal(net_listen("127.0.0.1:0", 8, &s.lfd), 0);
	assert_int_equal(net_local_addr(s.lfd, addr, sizeof(addr)), 0);
	assert_int_equal(pthread_create(&th, NULL, t_server_run, &s), 0);

	msg_init(&req, MSG_T_REGION_GET);
	strcpy(req.name, "r1");
	assert_int_equal(ctl_call_addr(addr, &req, &rep, 5000), 0);
	assert_int_equal(rep.type, MSG_T_REGION);
	assert_int_equal(rep.epoch, 3);
	msg_fini(&rep);

	strcpy(req.name, "r2");
	assert_int_equal(ctl_call_addr(addr, &req, &rep, 5000), -ENOENT);
	assert_int_equal(rep.type, MSG_T_ERROR);
	assert_string_equal(rep.text, "no region r2");
	msg_fini(&rep);

	pthread_join(th, NULL);
	close(s.lfd);
	/* nobody listens any more */
	assert_int_equal(ctl_call_addr(addr, &req, &rep, 2000), -ECONNREFUSED);
	assert_int_equal(ctl_call_addr("no-port", &req, &rep, 2000), -EINVAL);
}

static void test_ctl_unix(void **state)
{
	char dir[] = "/tmp/farpage-test-ctl-XXXXXX", path[128], sub[96];
	struct t_server s = { .replies = 1 };
	struct msg req, rep;
	pthread_t th;
	int fd;

	assert_non_null(mkdtemp(dir));
	snprintf(sub, sizeof(sub), "%s/run", dir);
	snprintf(path, sizeof(path), "%s/agent.sock", sub);
	/* the parent directory is created */
	assert_int_equal(net_unix_listen(path, 4, &s.lfd), 0);
	assert_int_equal(pthread_create(&th, NULL, t_server_run, &s), 0);
	assert_int_equal(net_unix_connect(path, &fd), 0);
	msg_init(&req, MSG_T_REGION_GET);
	strcpy(req.name, "r1");
	assert_int_equal(ctl_call(fd, &req, &rep, 5000), 0);
	assert_int_equal(rep.size, 1 << 30);
	msg_fini(&rep);
	close(fd);
	pthread_join(th, NULL);

	/* a live socket is not stolen; a stale one is replaced */
	assert_int_equal(net_unix_listen(path, 4, &fd), -EADDRINUSE);
	close(s.lfd);
	assert_int_equal(net_unix_listen(path, 4, &s.lfd), 0);
	close(s.lfd);
	assert_int_equal(net_unix_connect(path, &fd), -ECONNREFUSED);
	assert_int_equal(unlink(path), 0);
	assert_int_equal(net_unix_connect(path, &fd), -ENOENT);
	assert_int_equal(rmdir(sub), 0);
	assert_int_equal(rmdir(dir), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_ctl_roundtrip, t_setup,
						t_teardown),
		cmocka_unit_test_setup_teardown(test_ctl_fd_passing, t_setup,
						t_teardown),
		cmocka_unit_test_setup_teardown(test_ctl_timeout, t_setup,
						t_teardown),
		cmocka_unit_test_setup_teardown(test_ctl_bad_frames, t_setup,
						t_teardown),
		cmocka_unit_test_setup_teardown(test_ctl_peer_gone, t_setup,
						t_teardown),
		cmocka_unit_test_setup_teardown(test_ctl_large, t_setup,
						t_teardown),
		cmocka_unit_test(test_ctl_call_addr),
		cmocka_unit_test(test_ctl_unix),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
