// SPDX-License-Identifier: MIT
/*
 * fp_guest: a guest process for tests of libfarpage behaviour the CLI does
 * not exercise.
 *
 *   fp_guest fork REGION SEED   map, verify a local and a remote page, fork:
 *                               the child must not see the range (SIGSEGV),
 *                               the parent must keep working.
 *   fp_guest events REGION SEED write a remote page (private), MADV_DONTNEED
 *                               it (REMOVE): it faults again and holds the
 *                               owner's data; munmap a remote chunk (UNMAP):
 *                               every other page still verifies.
 *   fp_guest garbage SOCK       bad frames to the agent's socket: each such
 *                               client is disconnected, the agent stays up.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "farpage.h"
#include "pattern.h"

static int guest_find(struct farpage_map *m, int local, size_t *off)
{
	for (size_t o = 0; o < farpage_map_size(m); o += PATTERN_PAGE) {
		if (farpage_map_is_local(m, o) == local) {
			*off = o;
			return 0;
		}
	}
	return -1;
}

static int guest_fork(const char *region, uint64_t seed)
{
	struct farpage_map *m;
	size_t loc, rem;
	uint8_t *base;
	pid_t pid;
	int st, ret;

	ret = farpage_map(region, NULL, &m);
	if (ret) {
		fprintf(stderr, "fp_guest: map %s: %s\n", region,
			farpage_strerror(ret));
		return 1;
	}
	base = farpage_map_addr(m);
	if (guest_find(m, 1, &loc) || guest_find(m, 0, &rem)) {
		fprintf(stderr,
			"fp_guest: region needs local and remote pages\n");
		return 1;
	}
	if (pattern_check(base + loc, seed, loc / PATTERN_PAGE) ||
	    pattern_check(base + rem, seed, rem / PATTERN_PAGE)) {
		fprintf(stderr, "fp_guest: pages did not verify before fork\n");
		return 1;
	}
	pid = fork();
	if (pid < 0)
		return 1;
	if (pid == 0) {
		/* Must fault with SIGSEGV: the range is not inherited. The
		 * default action, not a sanitizer's handler, must see it. */
		volatile uint8_t v;

		signal(SIGSEGV, SIG_DFL);
		v = base[rem + PATTERN_PAGE];
		(void)v;
		_exit(0);
	}
	if (waitpid(pid, &st, 0) != pid)
		return 1;
	if (!WIFSIGNALED(st) || WTERMSIG(st) != SIGSEGV) {
		fprintf(stderr,
			"fp_guest: child was not refused the range "
			"(status %#x)\n",
			st);
		return 1;
	}
	/* The parent's mapping still works after the fork. */
	for (size_t o = 0; o < farpage_map_size(m); o += PATTERN_PAGE) {
		if (pattern_check(base + o, seed, o / PATTERN_PAGE)) {
			fprintf(stderr, "fp_guest: page %zu wrong after fork\n",
				o / PATTERN_PAGE);
			return 1;
		}
	}
	printf("fp_guest: fork refused in the child (SIGSEGV), parent verified "
	       "%zu pages\n",
	       farpage_map_size(m) / PATTERN_PAGE);
	farpage_unmap(m);
	return 0;
}

static int guest_verify_all(struct farpage_map *m, uint64_t seed, size_t hole,
			    size_t hole_len)
{
	uint8_t *base = farpage_map_addr(m);

	for (size_t o = 0; o < farpage_map_size(m); o += PATTERN_PAGE) {
		if (o >= hole && o < hole + hole_len)
			continue;
		if (pattern_check(base + o, seed, o / PATTERN_PAGE)) {
			fprintf(stderr, "fp_guest: page %zu wrong\n",
				o / PATTERN_PAGE);
			return 1;
		}
	}
	return 0;
}

static int guest_events(const char *region, uint64_t seed)
{
	struct farpage_map *m;
	size_t rem, cs;
	uint8_t *base;
	int ret;

	ret = farpage_map(region, NULL, &m);
	if (ret) {
		fprintf(stderr, "fp_guest: map %s: %s\n", region,
			farpage_strerror(ret));
		return 1;
	}
	base = farpage_map_addr(m);
	cs = farpage_map_chunk_size(m);
	if (guest_find(m, 0, &rem)) {
		fprintf(stderr, "fp_guest: region needs remote pages\n");
		return 1;
	}
	/* REMOVE: a private write to a remote page is dropped by DONTNEED and
	 * the next touch faults the owner's page in again. */
	memset(base + rem, 0xa5, PATTERN_PAGE);
	if (madvise(base + rem, PATTERN_PAGE, MADV_DONTNEED)) {
		perror("fp_guest: madvise");
		return 1;
	}
	if (pattern_check(base + rem, seed, rem / PATTERN_PAGE)) {
		fprintf(stderr,
			"fp_guest: page not refetched after DONTNEED\n");
		return 1;
	}
	/* UNMAP of one remote chunk: the agent is told, the rest works. */
	if (munmap(base + rem, cs)) {
		perror("fp_guest: munmap");
		return 1;
	}
	if (guest_verify_all(m, seed, rem, cs))
		return 1;
	printf("fp_guest: DONTNEED refetched the owner's page; after "
	       "unmapping one chunk the other %zu pages verified\n",
	       (farpage_map_size(m) - cs) / PATTERN_PAGE);
	farpage_unmap(m);
	return 0;
}

/* Sends @len bytes to the agent and expects it to hang up on us. */
static int guest_garbage_one(const char *sock, const void *buf, size_t len,
			     const char *what)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct timeval tv = { .tv_sec = 10 };
	char rep[4096];
	ssize_t n;
	int fd;

	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", sock);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa))) {
		perror("fp_guest: connect");
		return 1;
	}
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	if (send(fd, buf, len, MSG_NOSIGNAL) != (ssize_t)len) {
		perror("fp_guest: send");
		close(fd);
		return 1;
	}
	/* An error reply may come first; then EOF. */
	do {
		n = recv(fd, rep, sizeof(rep), 0);
	} while (n > 0);
	close(fd);
	if (n < 0 && errno != ECONNRESET) {
		fprintf(stderr, "fp_guest: %s: the agent kept the connection\n",
			what);
		return 1;
	}
	return 0;
}

static int guest_garbage(const char *sock)
{
	static const uint8_t huge[4] = { 0xff, 0xff, 0xff, 0xff };
	static const uint8_t cbor_junk[] = { 0, 0, 0, 3, 0xff, 0xff, 0xff };
	/* a well-formed map of an unknown message type: {"v":1,"t":999} */
	static const uint8_t unknown[] = { 0,	 0,    0,    9,	   0xa2,
					   0x61, 'v',  0x01, 0x61, 't',
					   0x19, 0x03, 0xe7 };
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct farpage_stats st;
	char noise[512];
	int stall, ret;

	/* A client that sends half a frame and then sits there. */
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", sock);
	stall = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (stall < 0 || connect(stall, (struct sockaddr *)&sa, sizeof(sa)) ||
	    send(stall, "\0\0", 2, MSG_NOSIGNAL) != 2) {
		perror("fp_guest: stalled client");
		return 1;
	}
	for (size_t i = 0; i < sizeof(noise); i++)
		noise[i] = (char)(i * 131 + 7);
	if (guest_garbage_one(sock, huge, sizeof(huge), "4 GiB frame") ||
	    guest_garbage_one(sock, cbor_junk, sizeof(cbor_junk), "bad CBOR") ||
	    guest_garbage_one(sock, unknown, sizeof(unknown), "unknown type") ||
	    guest_garbage_one(sock, noise, sizeof(noise), "noise"))
		return 1;
	/* ... and the agent answers others while it sits there. */
	ret = farpage_agent_stats(sock, &st);
	close(stall);
	if (ret) {
		fprintf(stderr,
			"fp_guest: agent stats beside a stalled client: "
			"%s\n",
			farpage_strerror(ret));
		return 1;
	}
	printf("fp_guest: 4 bad clients disconnected; served beside a stalled "
	       "one\n");
	return 0;
}

int main(int argc, char **argv)
{
	if (argc == 4 && !strcmp(argv[1], "fork"))
		return guest_fork(argv[2], strtoull(argv[3], NULL, 0));
	if (argc == 4 && !strcmp(argv[1], "events"))
		return guest_events(argv[2], strtoull(argv[3], NULL, 0));
	if (argc == 3 && !strcmp(argv[1], "garbage"))
		return guest_garbage(argv[2]);
	fprintf(stderr,
		"usage: fp_guest fork|events REGION SEED | garbage SOCK\n");
	return 2;
}
