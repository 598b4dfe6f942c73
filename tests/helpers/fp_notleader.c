// SPDX-License-Identifier: MIT
/*
 * fp_notleader: a coordinator that is not the leader, as a client of a
 * coordinator list meets it (test_coord_notleader.sh): plain frames (the
 * cluster runs --insecure), every request answered with the MSG_T_ERROR of
 * COORD_ERR_NOT_LEADER, until killed.
 *
 *   fp_notleader ADDR_FILE
 *       listens on 127.0.0.1, any free port, writes "127.0.0.1:PORT" to
 *       ADDR_FILE and prints "answered: N" after each answer. One
 *       connection at a time (a client of a list hangs up after this
 *       answer); one silent for 2 s is closed. Exit 2 on a local error.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>

#include "ctl.h"
#include "msg.h"
#include "net.h"

#define NOTLEADER_IDLE_MS 2000

/* Answers every request on @fd until the client hangs up or is silent. */
static void notleader_serve(int fd, unsigned long *answered)
{
	struct msg req, rep;

	while (!ctl_recv(fd, &req, NULL, NULL, NOTLEADER_IDLE_MS)) {
		msg_fini(&req);
		msg_error(&rep, -COORD_ERR_NOT_LEADER,
			  "not the leader (no leader yet)");
		if (ctl_send(fd, &rep, NULL, 0))
			break;
		printf("answered: %lu\n", ++*answered);
	}
}

int main(int argc, char **argv)
{
	unsigned long answered = 0;
	char addr[64];
	FILE *f;
	int lfd, fd;

	if (argc != 2) {
		fprintf(stderr, "usage: fp_notleader ADDR_FILE\n");
		return 2;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (net_listen("127.0.0.1:0", 16, &lfd) || net_set_nonblock(lfd, 0) ||
	    net_local_addr(lfd, addr, sizeof(addr))) {
		fprintf(stderr, "fp_notleader: cannot listen: %s\n",
			strerror(errno));
		return 2;
	}
	f = fopen(argv[1], "w");
	if (!f || fprintf(f, "%s\n", addr) < 0 || fclose(f)) {
		fprintf(stderr, "fp_notleader: %s: %s\n", argv[1],
			strerror(errno));
		return 2;
	}
	for (;;) {
		fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			fprintf(stderr, "fp_notleader: accept: %s\n",
				strerror(errno));
			return 2;
		}
		notleader_serve(fd, &answered);
		close(fd);
	}
}
