// SPDX-License-Identifier: MIT
/*
 * fp_repl: the coordinator requests of replicated regions a shell test
 * needs while the CLI may not make them (test_replicas.sh). Authenticates
 * as the CLI does (admin, $FARPAGE_KEY_FILE), or --insecure.
 *
 *   fp_repl [--insecure] create COORD NAME SIZE REPLICAS
 *       REGION_CREATE NAME of SIZE bytes with REPLICAS replicas.
 *   fp_repl [--insecure] state COORD NAME
 *       REGION_GET NAME (wrepl): prints "state: replicas=R rgen=G
 *       missing=N rebuilding=N records=N" and, per replica, "rec: CHUNK
 *       REPLICA NODE OFF STATE".
 * Exit 0, or 1 with the coordinator's error on stderr.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "actl.h"
#include "layout.h"
#include "msg.h"

static int repl_call(const char *coord, bool insecure, const struct msg *req,
		     struct msg *rep)
{
	struct actl_cred cred = { 0 };
	char why[400] = "";
	struct actl a;
	int ret;

	if (insecure)
		cred.insecure = true;
	else if (actl_cred_load(&cred, NULL, AUTH_ROLE_ADMIN, NULL, why,
				sizeof(why))) {
		fprintf(stderr, "fp_repl: %s\n", why);
		return -EPERM;
	}
	ret = actl_connect(coord, &cred, AUTH_ROLE_ADMIN, NULL, 10000, &a, why,
			   sizeof(why));
	if (ret) {
		fprintf(stderr, "fp_repl: %s: %s\n", coord,
			why[0] ? why : strerror(-ret));
		return ret;
	}
	ret = actl_call(&a, req, rep, 10000);
	actl_close(&a);
	if (!ret && rep->type == MSG_T_ERROR) {
		fprintf(stderr, "fp_repl: %s\n", rep->text);
		ret = -(int)(rep->err ? rep->err : EIO);
	}
	return ret;
}

static int repl_create(const char *coord, bool insecure, const char *name,
		       const char *size, const char *replicas)
{
	struct msg req, rep;
	int ret;

	msg_init(&req, MSG_T_REGION_CREATE);
	msg_strset(req.name, sizeof(req.name), name);
	req.size = strtoull(size, NULL, 0);
	req.replicas = strtoull(replicas, NULL, 0);
	ret = repl_call(coord, insecure, &req, &rep);
	msg_fini(&req);
	msg_fini(&rep);
	return ret ? 1 : 0;
}

static int repl_state(const char *coord, bool insecure, const char *name)
{
	uint64_t r, n, missing = 0, rebuilding = 0;
	struct msg req, rep;
	struct msg_chunk *ch = NULL;
	int ret;

	msg_init(&req, MSG_T_REGION_GET);
	msg_strset(req.name, sizeof(req.name), name);
	req.want_repl = 1;
	ret = repl_call(coord, insecure, &req, &rep);
	msg_fini(&req);
	if (!ret)
		ret = layout_msg_to_runs(&rep);
	r = rep.replicas ? rep.replicas : 1;
	n = layout_chunks_of(rep.size, rep.chunk_size) * r;
	if (!ret && n)
		ret = layout_runs_expand(rep.runs, rep.n_runs, rep.chunk_size,
					 (uint32_t)n, &ch);
	if (ret) {
		fprintf(stderr, "fp_repl: region %s: %s\n", name,
			strerror(-ret));
		msg_fini(&rep);
		return 1;
	}
	for (uint32_t i = 0; i < rep.n_rstates; i++) {
		if (rep.rstates[i].state == MSG_RS_MISSING)
			missing++;
		else
			rebuilding++;
	}
	printf("state: replicas=%" PRIu64 " rgen=%" PRIu64 " missing=%" PRIu64
	       " rebuilding=%" PRIu64 " records=%" PRIu64 "\n",
	       r, rep.rgen, missing, rebuilding, n);
	for (uint64_t i = 0; i < n; i++) {
		uint64_t st = MSG_RS_SYNC;

		for (uint32_t k = 0; k < rep.n_rstates; k++)
			if (rep.rstates[k].chunk == i / r &&
			    rep.rstates[k].replica == i % r)
				st = rep.rstates[k].state;
		printf("rec: %" PRIu64 " %" PRIu64 " %" PRIu64 " %#" PRIx64
		       " %" PRIu64 "\n",
		       i / r, i % r, ch[i].node, ch[i].off, st);
	}
	free(ch);
	msg_fini(&rep);
	return 0;
}

int main(int argc, char **argv)
{
	bool insecure = argc > 1 && !strcmp(argv[1], "--insecure");

	argv += insecure;
	argc -= insecure;
	if (argc == 6 && !strcmp(argv[1], "create"))
		return repl_create(argv[2], insecure, argv[3], argv[4],
				   argv[5]);
	if (argc == 4 && !strcmp(argv[1], "state"))
		return repl_state(argv[2], insecure, argv[3]);
	fprintf(stderr, "usage: fp_repl [--insecure] create COORD NAME SIZE "
			"REPLICAS | state COORD NAME\n");
	return 2;
}
