// SPDX-License-Identifier: MIT
/* net: address parsing, TCP over IPv4/IPv6 with port 0, connect timeouts. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <cmocka.h>

#include "net.h"

static void test_net_addr_split(void **state)
{
	char host[64], port[8];

	assert_int_equal(net_addr_split("127.0.0.1:7000", host, sizeof(host),
					port, sizeof(port)),
			 0);
	assert_string_equal(host, "127.0.0.1");
	assert_string_equal(port, "7000");
	assert_int_equal(net_addr_split("[::1]:0", host, sizeof(host), port,
					sizeof(port)),
			 0);
	assert_string_equal(host, "::1");
	assert_string_equal(port, "0");
	assert_int_equal(net_addr_split("node-1.example:65535", host,
					sizeof(host), port, sizeof(port)),
			 0);
	assert_string_equal(host, "node-1.example");
	assert_int_equal(
		net_addr_split(":80", host, sizeof(host), port, sizeof(port)),
		0);
	assert_string_equal(host, "");

	static const char *const bad[] = {
		"",	    "host",    "host:", "host:http", "host:65536",
		"::1:80",   "[::1]80", "[::1]", "[]:80",     "h:-1",
		"h:123456", "[::1:80", "h:80 ",
	};
	for (unsigned int i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		assert_int_equal(net_addr_split(bad[i], host, sizeof(host),
						port, sizeof(port)),
				 -EINVAL);
	/* parts that do not fit */
	assert_int_equal(
		net_addr_split("abcdef:1", host, 6, port, sizeof(port)),
		-EINVAL);
	assert_int_equal(net_addr_split("a:12345", host, sizeof(host), port, 5),
			 -EINVAL);
}

static void t_connect_pair(const char *listen_addr, const char *prefix)
{
	char addr[80];
	int lfd, cfd, sfd = -1, one = 0;
	socklen_t sl = sizeof(one);

	assert_int_equal(net_listen(listen_addr, 8, &lfd), 0);
	assert_int_equal(fcntl(lfd, F_GETFD) & FD_CLOEXEC, FD_CLOEXEC);
	assert_true(fcntl(lfd, F_GETFL) & O_NONBLOCK);
	assert_int_equal(net_local_addr(lfd, addr, sizeof(addr)), 0);
	assert_int_equal(strncmp(addr, prefix, strlen(prefix)), 0);
	assert_string_not_equal(addr + strlen(prefix), "0");

	assert_int_equal(net_connect(addr, 2000, &cfd), 0);
	/* blocking, close-on-exec, no Nagle */
	assert_false(fcntl(cfd, F_GETFL) & O_NONBLOCK);
	assert_int_equal(fcntl(cfd, F_GETFD) & FD_CLOEXEC, FD_CLOEXEC);
	assert_int_equal(getsockopt(cfd, IPPROTO_TCP, TCP_NODELAY, &one, &sl),
			 0);
	assert_int_equal(one, 1);
	for (int i = 0; i < 100 && sfd < 0; i++) {
		sfd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
		if (sfd < 0)
			usleep(10000);
	}
	assert_true(sfd >= 0);
	assert_int_equal(write(cfd, "ping", 4), 4);
	{
		char buf[4];

		assert_int_equal(read(sfd, buf, 4), 4);
		assert_memory_equal(buf, "ping", 4);
	}
	close(sfd);
	close(cfd);
	close(lfd);
}

static void test_net_tcp_v4(void **state)
{
	t_connect_pair("127.0.0.1:0", "127.0.0.1:");
}

static void test_net_tcp_v6(void **state)
{
	int fd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in6 sin6 = { .sin6_family = AF_INET6,
				     .sin6_addr = IN6ADDR_LOOPBACK_INIT };

	if (fd < 0 || bind(fd, (struct sockaddr *)&sin6, sizeof(sin6)) < 0) {
		if (fd >= 0)
			close(fd);
		skip(); /* no IPv6 loopback here */
	}
	close(fd);
	t_connect_pair("[::1]:0", "[::1]:");
}

static void test_net_connect_errors(void **state)
{
	char addr[64];
	int lfd, fd;

	/* a port nobody listens on */
	assert_int_equal(net_listen("127.0.0.1:0", 1, &lfd), 0);
	assert_int_equal(net_local_addr(lfd, addr, sizeof(addr)), 0);
	close(lfd);
	assert_int_equal(net_connect(addr, 1000, &fd), -ECONNREFUSED);
	assert_int_equal(net_connect("127.0.0.1", 1000, &fd), -EINVAL);
	assert_int_equal(net_listen("127.0.0.1:http", 1, &fd), -EINVAL);
	/* the same port twice */
	assert_int_equal(net_listen("127.0.0.1:0", 1, &lfd), 0);
	assert_int_equal(net_local_addr(lfd, addr, sizeof(addr)), 0);
	assert_int_equal(net_listen(addr, 1, &fd), -EADDRINUSE);
	close(lfd);
}

/*
 * A listener that never accepts, with its queue full, drops further SYNs:
 * the next connect must give up after its timeout.
 */
static void test_net_connect_timeout(void **state)
{
	struct timespec t0, t1;
	int lfd, fds[8], n = 0, ret = 0;
	char addr[64];
	long ms;

	assert_int_equal(net_listen("127.0.0.1:0", 0, &lfd), 0);
	assert_int_equal(net_local_addr(lfd, addr, sizeof(addr)), 0);
	for (; n < 8; n++) {
		clock_gettime(CLOCK_MONOTONIC, &t0);
		ret = net_connect(addr, 200, &fds[n]);
		clock_gettime(CLOCK_MONOTONIC, &t1);
		if (ret)
			break;
	}
	for (int i = 0; i < n; i++)
		close(fds[i]);
	close(lfd);
	if (ret != -ETIMEDOUT)
		skip(); /* this kernel kept accepting: nothing to time out */
	ms = (t1.tv_sec - t0.tv_sec) * 1000 +
	     (t1.tv_nsec - t0.tv_nsec) / 1000000;
	assert_true(ms >= 190 && ms < 2000);
}

static void test_net_options(void **state)
{
	int sv[2];

	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv),
			 0);
	assert_int_equal(net_set_nonblock(sv[0], 1), 0);
	assert_true(fcntl(sv[0], F_GETFL) & O_NONBLOCK);
	assert_int_equal(net_set_nonblock(sv[0], 0), 0);
	assert_false(fcntl(sv[0], F_GETFL) & O_NONBLOCK);
	/* not TCP */
	assert_true(net_set_nodelay(sv[0]) < 0);
	{
		char buf[64];

		assert_int_equal(net_local_addr(sv[0], buf, sizeof(buf)),
				 -EAFNOSUPPORT);
	}
	close(sv[0]);
	close(sv[1]);
	assert_int_equal(net_set_nonblock(-1, 1), -EBADF);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_net_addr_split),
		cmocka_unit_test(test_net_tcp_v4),
		cmocka_unit_test(test_net_tcp_v6),
		cmocka_unit_test(test_net_connect_errors),
		cmocka_unit_test(test_net_connect_timeout),
		cmocka_unit_test(test_net_options),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
