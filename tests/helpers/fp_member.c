// SPDX-License-Identifier: MIT
/*
 * fp_member: a member that says less than an agent does, for the tests of
 * what the coordinator takes on a node's word (test_silent_member.sh).
 *
 *   fp_member silent ADDR KEYFILE NAME POOL
 *       with node NAME's key (KEYFILE, or a cluster key): joins as NAME
 *       with a pool of POOL bytes (a data address nobody serves), prints
 *       "silent: node N", then heartbeats every 100 ms without ever
 *       reporting a region epoch synced, until killed. Exits 1 if a
 *       heartbeat is refused or the connection breaks, 2 on a usage or
 *       local error. ADDR is one coordinator (host:port), not a list.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <openssl/crypto.h>
#include <openssl/rand.h>

#include "actl.h"
#include "msg.h"

#define MEMBER_TIMEOUT_MS 5000

static int member_silent(const char *addr, const char *keyfile,
			 const char *name, uint64_t pool)
{
	struct timespec beat = { .tv_nsec = 100 * 1000000L };
	struct actl_cred cr = { 0 };
	struct msg req, rep;
	uint64_t id, inst;
	char why[400];
	struct actl a;
	int ret;

	if (actl_cred_load(&cr, keyfile, AUTH_ROLE_NODE, name, why,
			   sizeof(why))) {
		fprintf(stderr, "fp_member: %s\n", why);
		return 2;
	}
	ret = actl_connect(addr, &cr, AUTH_ROLE_NODE, name, MEMBER_TIMEOUT_MS,
			   &a, why, sizeof(why));
	OPENSSL_cleanse(&cr, sizeof(cr));
	if (ret) {
		fprintf(stderr, "fp_member: connect %s: %s %s\n", addr,
			strerror(-ret), why);
		return 2;
	}
	if (RAND_bytes((unsigned char *)&inst, sizeof(inst)) != 1) {
		actl_close(&a);
		return 2;
	}
	msg_init(&req, MSG_T_NODE_JOIN);
	snprintf(req.name, sizeof(req.name), "%s", name);
	snprintf(req.data_addr, sizeof(req.data_addr), "127.0.0.1:9");
	req.pool_size = pool;
	req.instance = inst;
	ret = actl_call(&a, &req, &rep, MEMBER_TIMEOUT_MS);
	if (ret || rep.type != MSG_T_NODE_JOINED) {
		fprintf(stderr, "fp_member: join: %s %s\n", strerror(-ret),
			rep.text);
		msg_fini(&rep);
		actl_close(&a);
		return 2;
	}
	id = rep.node;
	msg_fini(&rep);
	printf("silent: node %llu\n", (unsigned long long)id);
	fflush(stdout);
	for (;;) {
		msg_init(&req, MSG_T_HEARTBEAT);
		req.node = id;
		req.instance = inst;
		ret = actl_call(&a, &req, &rep, MEMBER_TIMEOUT_MS);
		if (ret || rep.type != MSG_T_HEARTBEAT_ACK) {
			printf("silent: heartbeat: %s %s\n", strerror(-ret),
			       rep.text);
			msg_fini(&rep);
			actl_close(&a);
			return 1;
		}
		msg_fini(&rep);
		nanosleep(&beat, NULL);
	}
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc == 6 && !strcmp(argv[1], "silent"))
		return member_silent(argv[2], argv[3], argv[4],
				     strtoull(argv[5], NULL, 0));
	fprintf(stderr, "usage: fp_member silent ADDR KEYFILE NAME POOL\n");
	return 2;
}
