// SPDX-License-Identifier: MIT
/*
 * fp_client: a hand-made local client and network stub for tests of what
 * libfarpage never does.
 *
 *   fp_client badfd SOCK REGION pipe|blocking-uffd|eventfd
 *       MAP REGION on the agent at SOCK, then hand it the wrong kind of
 *       descriptor with MAP_UFFD: the agent must refuse it with an error
 *       naming userfaultfd (exit 0), not read from it.
 *   fp_client discard SOCK REGION
 *       DISCARD of REGION's first page on the agent at SOCK, from a
 *       process that has no mapping of it: the agent must refuse it (exit
 *       0, its reason printed), not zero another process's pages.
 *   fp_client udp-sink ADDR PORT
 *       a DNS server that never answers: receives UDP on ADDR:PORT and
 *       drops it. Prints "udp-sink: ready" once bound.
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/ioctl.h>
#include <unistd.h>
#include <linux/userfaultfd.h>

#include "ctl.h"
#include "msg.h"
#include "net.h"

static int client_bad_fd(const char *kind)
{
	int p[2], fd;

	if (!strcmp(kind, "pipe")) {
		if (pipe2(p, O_CLOEXEC))
			return -1;
		close(p[1]);
		return p[0];
	}
	if (!strcmp(kind, "eventfd"))
		return eventfd(0, EFD_CLOEXEC);
	if (!strcmp(kind, "blocking-uffd")) {
		struct uffdio_api api = { .api = UFFD_API };

		fd = (int)syscall(SYS_userfaultfd, O_CLOEXEC);
		if (fd >= 0 && ioctl(fd, UFFDIO_API, &api)) {
			close(fd);
			return -1;
		}
		return fd;
	}
	return -1;
}

static int client_badfd(const char *sock, const char *region, const char *kind)
{
	struct msg req, rep;
	int fd, bad, pool = -1, n_fds = 1, ret;

	bad = client_bad_fd(kind);
	if (bad < 0) {
		fprintf(stderr, "fp_client: cannot make a %s\n", kind);
		return 1;
	}
	ret = net_unix_connect(sock, &fd);
	if (ret) {
		fprintf(stderr, "fp_client: connect %s: %s\n", sock,
			strerror(-ret));
		return 1;
	}
	msg_init(&req, MSG_T_MAP);
	msg_strset(req.name, sizeof(req.name), region);
	ret = ctl_send(fd, &req, NULL, 0);
	if (!ret)
		ret = ctl_recv(fd, &rep, &pool, &n_fds, 30000);
	if (ret || rep.type != MSG_T_MAP_LAYOUT) {
		fprintf(stderr, "fp_client: no layout for %s: %s\n", region,
			ret ? strerror(-ret) : rep.text);
		return 1;
	}
	if (n_fds == 1)
		close(pool);
	msg_init(&req, MSG_T_MAP_UFFD);
	req.base = 2ull << 30; /* aligned; never used */
	req.features = 0;
	ret = ctl_send(fd, &req, &bad, 1);
	msg_fini(&rep);
	if (!ret)
		ret = ctl_recv(fd, &rep, NULL, NULL, 30000);
	if (ret) {
		fprintf(stderr, "fp_client: %s: no answer to MAP_UFFD: %s\n",
			kind, strerror(-ret));
		return 1;
	}
	if (rep.type != MSG_T_ERROR || !strstr(rep.text, "userfaultfd")) {
		fprintf(stderr,
			"fp_client: %s: the agent accepted it (answer %s)\n",
			kind, msg_type_name(rep.type));
		return 1;
	}
	printf("fp_client: %s refused: %s\n", kind, rep.text);
	msg_fini(&rep);
	close(bad);
	close(fd);
	return 0;
}

static int client_discard(const char *sock, const char *region)
{
	struct msg req, rep;
	int fd, ret;

	ret = net_unix_connect(sock, &fd);
	if (ret) {
		fprintf(stderr, "fp_client: connect %s: %s\n", sock,
			strerror(-ret));
		return 1;
	}
	msg_init(&req, MSG_T_DISCARD);
	msg_strset(req.name, sizeof(req.name), region);
	req.base = 0;
	req.size = 4096;
	ret = ctl_call(fd, &req, &rep, 30000);
	close(fd);
	if (rep.type != MSG_T_ERROR) {
		fprintf(stderr, "fp_client: discard: the agent answered %s\n",
			ret ? strerror(-ret) : msg_type_name(rep.type));
		msg_fini(&rep);
		return 1;
	}
	printf("fp_client: discard refused: %s\n", rep.text);
	msg_fini(&rep);
	return 0;
}

static int client_udp_sink(const char *addr, const char *port)
{
	struct sockaddr_in sa = { .sin_family = AF_INET };
	char buf[2048];
	int fd;

	sa.sin_port = htons((uint16_t)atoi(port));
	if (inet_pton(AF_INET, addr, &sa.sin_addr) != 1)
		return 2;
	fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa))) {
		perror("fp_client: udp-sink");
		return 1;
	}
	printf("udp-sink: ready\n");
	fflush(stdout);
	for (;;)
		if (recv(fd, buf, sizeof(buf), 0) < 0 && errno != EINTR)
			return 1;
}

int main(int argc, char **argv)
{
	if (argc == 5 && !strcmp(argv[1], "badfd"))
		return client_badfd(argv[2], argv[3], argv[4]);
	if (argc == 4 && !strcmp(argv[1], "udp-sink"))
		return client_udp_sink(argv[2], argv[3]);
	if (argc == 4 && !strcmp(argv[1], "discard"))
		return client_discard(argv[2], argv[3]);
	fprintf(stderr, "usage: fp_client badfd SOCK REGION "
			"pipe|blocking-uffd|eventfd | discard SOCK REGION | "
			"udp-sink ADDR PORT\n");
	return 2;
}
