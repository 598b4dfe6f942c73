// SPDX-License-Identifier: MIT
/*
 * fp_rdma_peer: a verbs peer that plays an expelled node, for the SoftRoCE
 * VM test (tests/vm/revoke.sh). It joins as a node with its node key,
 * publishes a small pool MR and exchanges queue-pair endpoints with one
 * target agent through the coordinator exactly as an agent does
 * (xport_rdma_peer_prepare/connect), then reads a page of a region the
 * target owns with RDMA READ over that QP with the target's rkey (the
 * agent's verbs transport on a ring of its own). Driven by commands on
 * stdin, one per line; each prints one result line on stdout:
 *
 *   connect [fresh]  exchange until our QP is connected to the target's
 *                    published endpoint ("fresh": to another one than the
 *                    last: the target prepared its QP again)
 *                    -> "connected: node=N qpn=Q psn=P target=T
 *                        target_qpn=Q target_psn=P"
 *   read             one 4 KiB RDMA READ on the current QP, whatever the
 *                    target did meanwhile
 *                    -> "read: ok verified ..." or
 *                       "read: failed status=-E (error completion) landed=N"
 *                       (bytes of the landing page that are not zero) or
 *                       "read: refused status=-E" (nothing posted)
 *   stop             stop heartbeating (the lease runs out)
 *   start            publish a new endpoint if our QP needs one, then
 *                    heartbeat again
 *   quit
 *
 *   fp_rdma_peer --coordinator ADDR --name NAME --key-file FILE
 *                --target NAME --region NAME --seed N --device DEV
 *                [--data-ip IP] [--gid-index N] [--heartbeat-ms MS]
 *
 * --coordinator takes one address (host:port), not a list: the peer
 * stands for an agent of one coordinator.
 *
 * Exit status 0 after quit, 1 if a command failed in a way the test did
 * not ask for (timeout), 2 on a usage or setup error. A failed heartbeat
 * is logged once, not fatal: the coordinator may have been replaced.
 */
#define LOG_PREFIX "fp_rdma_peer: "
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <unistd.h>

#include "actl.h"
#include "log.h"
#include "msg.h"
#include "pattern.h"
#include "req.h"
#include "xport.h"
#include "xport_rdma.h"

#define T_TAGS 1
#include "t_xport.h"

#define RPEER_POOL	 (2u << 20) /* what we publish: one 2 MiB unit */
#define RPEER_CALL_MS	 5000
#define RPEER_WAIT_MS	 60000u
#define RPEER_READ_MS	 30000u
#define RPEER_CONNECT_MS 120000u

struct rpeer {
	const char *coord, *name, *target_name, *region, *device, *data_ip;
	int gid_index;
	uint64_t seed;
	unsigned int hb_ms;
	struct actl ac;
	uint64_t self, instance;
	/* the coordinator's tables and region epoch as last answered: an
	 * honest member with no mapping has synced them at once (a node
	 * that never reports its epoch is counted down) */
	uint64_t cid, epoch;
	bool beating;
	bool hb_failed; /* a heartbeat failed (said once; it goes on) */
	uint64_t next_hb;
	/* the target as last listed */
	uint64_t target;
	struct xport_rdma_remote remote;
	bool have_remote;
	/* the page read: target pool offset, region page index */
	uint64_t off, page;
	bool page_known;
	uint8_t *pool, *land;
	struct xport_rdma_ctx *ctx;
	struct t_drv d;
	struct xport_peer *p;
};

static int rpeer_call(struct rpeer *r, struct msg *req, struct msg *rep,
		      enum msg_type want)
{
	int ret = actl_call(&r->ac, req, rep, RPEER_CALL_MS);

	if (!ret && rep->type != want)
		ret = -EBADMSG;
	if (ret && ret != -ENOENT)
		log_err("%s: %s%s%s", msg_type_name(req->type),
			log_strerror(ret), rep->text[0] ? ": " : "", rep->text);
	return ret;
}

static int rpeer_heartbeat(struct rpeer *r)
{
	struct msg req, rep;
	bool again;
	int ret;

	/* A second beat at once when the answer names another epoch: it
	 * is synced (nothing mapped here) and said so without waiting. */
	for (int i = 0; i < 2; i++) {
		msg_init(&req, MSG_T_HEARTBEAT);
		req.node = r->self;
		req.instance = r->instance;
		req.cid = r->cid;
		req.epoch = r->epoch;
		ret = rpeer_call(r, &req, &rep, MSG_T_HEARTBEAT_ACK);
		again = !ret && (rep.cid != r->cid || rep.epoch != r->epoch);
		if (!ret) {
			r->cid = rep.cid;
			r->epoch = rep.epoch;
		}
		msg_fini(&rep);
		if (!again)
			break;
	}
	r->next_hb = t_now_ms() + r->hb_ms;
	return ret;
}

/*
 * Heartbeats if one is due (and we beat at all). A failed one is said
 * once and is no reason to stop: the coordinator may have gone (its
 * successor does not know us), and the QP is what the test looks at.
 */
static int rpeer_tick(struct rpeer *r)
{
	if (!r->beating || t_now_ms() < r->next_hb)
		return 0;
	if (rpeer_heartbeat(r) && !r->hb_failed) {
		r->hb_failed = true;
		log_warn("heartbeat failed; going on without");
	}
	return 0;
}

static int rpeer_join(struct rpeer *r)
{
	struct msg req, rep;
	uint64_t addr, len;
	uint32_t rkey;
	int ret;

	if (getrandom(&r->instance, sizeof(r->instance), 0) !=
	    sizeof(r->instance))
		return -EIO;
	r->instance |= 1;
	msg_init(&req, MSG_T_NODE_JOIN);
	msg_strset(req.name, sizeof(req.name), r->name);
	/* nobody fetches pages from us: a port nothing listens on */
	snprintf(req.data_addr, sizeof(req.data_addr), "%s:9",
		 r->data_ip ? r->data_ip : "127.0.0.1");
	req.pool_size = RPEER_POOL;
	req.instance = r->instance;
	ret = rpeer_call(r, &req, &rep, MSG_T_NODE_JOINED);
	r->self = rep.node;
	r->cid = rep.cid;
	msg_fini(&rep);
	if (ret)
		return ret;
	xport_rdma_mr_get(r->ctx, &addr, &rkey, &len);
	msg_init(&req, MSG_T_MR_PUT);
	req.node = r->self;
	req.mr_addr = addr;
	req.rkey = rkey;
	req.mr_len = len;
	ret = rpeer_call(r, &req, &rep, MSG_T_OK);
	msg_fini(&rep);
	r->beating = true;
	r->next_hb = t_now_ms() + r->hb_ms;
	return ret;
}

/* The target's row of the node list: id, MR, instance. 0, -EAGAIN if it is
 * not listed (or has no MR) yet, or -errno. */
static int rpeer_target_find(struct rpeer *r)
{
	struct msg req, rep;
	int ret;

	msg_init(&req, MSG_T_NODE_LIST);
	ret = rpeer_call(r, &req, &rep, MSG_T_NODES);
	if (ret) {
		msg_fini(&rep);
		return ret;
	}
	ret = -EAGAIN;
	for (uint32_t i = 0; i < rep.n_nodes; i++) {
		const struct msg_node *n = &rep.nodes[i];

		if (strcmp(n->name, r->target_name) || !n->mr_addr)
			continue;
		r->target = n->id;
		r->remote.mr_addr = n->mr_addr;
		r->remote.rkey = (uint32_t)n->rkey;
		r->remote.mr_len = n->mr_len;
		r->remote.instance = n->instance;
		ret = 0;
	}
	msg_fini(&rep);
	return ret;
}

/* The first page of the first chunk of the region the target owns. */
static int rpeer_page_find(struct rpeer *r)
{
	struct msg req, rep;
	int ret;

	msg_init(&req, MSG_T_REGION_GET);
	msg_strset(req.name, sizeof(req.name), r->region);
	ret = rpeer_call(r, &req, &rep, MSG_T_REGION);
	if (ret) {
		msg_fini(&rep);
		return ret;
	}
	ret = -ENOENT;
	for (uint32_t i = 0; i < rep.n_chunks; i++) {
		if (rep.chunks[i].node != r->target)
			continue;
		r->off = rep.chunks[i].off;
		r->page = (uint64_t)i * (rep.chunk_size / PATTERN_PAGE);
		r->page_known = true;
		ret = 0;
		break;
	}
	msg_fini(&rep);
	if (ret)
		log_err("region %s has no chunk on node %" PRIu64, r->region,
			r->target);
	return ret;
}

/* Publishes our endpoint for the target if our QP needs an exchange. */
static int rpeer_publish(struct rpeer *r)
{
	struct xport_rdma_ep local;
	struct msg req, rep;
	int ret;

	if (!xport_rdma_peer_needs_exchange(r->ctx, r->target))
		return 0;
	ret = xport_rdma_peer_prepare(r->ctx, r->target, &local);
	if (ret)
		return ret;
	msg_init(&req, MSG_T_ENDPOINT_PUT);
	xport_rdma_ep_to_msg(&local, &req);
	req.node = r->self;
	req.peer = r->target;
	ret = rpeer_call(r, &req, &rep, MSG_T_OK);
	msg_fini(&rep);
	if (!ret)
		log_info("published QP %u PSN %#x for node %" PRIu64, local.qpn,
			 local.psn, r->target);
	return ret;
}

/* The target's endpoint for us: 0, -ENOENT (not published yet), -errno. */
static int rpeer_remote_get(struct rpeer *r, struct xport_rdma_ep *ep)
{
	struct msg req, rep;
	int ret;

	msg_init(&req, MSG_T_ENDPOINT_GET);
	req.node = r->target;
	req.peer = r->self;
	ret = rpeer_call(r, &req, &rep, MSG_T_ENDPOINT);
	if (!ret)
		ret = xport_rdma_ep_from_msg(&rep, ep);
	msg_fini(&rep);
	return ret;
}

/* One round of the agent's exchange; 1 once connected to @ep. */
static int rpeer_exchange(struct rpeer *r, bool fresh)
{
	struct xport_rdma_remote rm;
	int ret;

	ret = rpeer_target_find(r);
	if (ret)
		return ret == -EAGAIN ? 0 : ret;
	ret = rpeer_publish(r);
	if (ret)
		return ret == -EBUSY ? 0 : ret;
	rm = r->remote;
	ret = rpeer_remote_get(r, &rm.ep);
	if (ret)
		return ret == -ENOENT ? 0 : ret;
	if (fresh && r->have_remote && rm.ep.psn == r->remote.ep.psn)
		return 0; /* the target has not prepared its QP again yet */
	if (!xport_rdma_peer_is_connected_to(r->ctx, r->target, &rm.ep)) {
		ret = xport_rdma_peer_connect(r->ctx, r->target, &rm);
		if (ret)
			return ret == -EBUSY ? 0 : ret;
	}
	r->remote = rm;
	r->have_remote = true;
	return 1;
}

static int rpeer_connect(struct rpeer *r, bool fresh)
{
	uint64_t end = t_now_ms() + RPEER_CONNECT_MS;
	struct xport_peer_info info = { 0 };
	struct xport_rdma_ep local;
	int ret;

	while ((ret = rpeer_exchange(r, fresh)) == 0) {
		if (t_now_ms() >= end) {
			log_err("not connected to %s after %u ms",
				r->target_name, RPEER_CONNECT_MS);
			return -ETIMEDOUT;
		}
		if (rpeer_tick(r))
			return -EIO;
		t_drv_poll(&r->d, 50);
	}
	if (ret < 0)
		return ret;
	if (!r->p) {
		info.node = r->target;
		info.instance = r->remote.instance;
		info.flags = XPORT_PEER_VERBS;
		snprintf(info.name, sizeof(info.name), "%s", r->target_name);
		ret = r->d.ops->peer_open(r->d.x, &info, &r->p);
		if (ret)
			return ret;
		if (!r->page_known)
			ret = rpeer_page_find(r);
		if (ret)
			return ret;
	}
	if (!t_wait_state(&r->d, r->p, XPORT_PEER_UP, RPEER_WAIT_MS)) {
		log_err("QP to %s connected, but the transport is not up",
			r->target_name);
		return -ETIMEDOUT;
	}
	/* in RTS prepare only tells what we published */
	ret = xport_rdma_peer_prepare(r->ctx, r->target, &local);
	if (ret)
		return ret;
	printf("connected: node=%" PRIu64 " qpn=%u psn=%#x target=%" PRIu64
	       " target_qpn=%u target_psn=%#x\n",
	       r->self, local.qpn, local.psn, r->target, r->remote.ep.qpn,
	       r->remote.ep.psn);
	return 0;
}

static size_t rpeer_nonzero(const uint8_t *p, size_t len)
{
	size_t n = 0;

	for (size_t i = 0; i < len; i++)
		n += p[i] != 0;
	return n;
}

static int rpeer_read(struct rpeer *r)
{
	struct xport_stats c0, c;
	size_t bad;
	int ret;

	if (!r->p) {
		printf("read: refused status=%d (not connected)\n", -ENOTCONN);
		return 0;
	}
	memset(r->land, 0, PATTERN_PAGE);
	xport_rdma_ctx_stats(r->ctx, &c0);
	t_drv_reset(&r->d);
	ret = r->d.ops->read(r->p, r->off, PATTERN_PAGE, r->land, 0);
	if (ret) {
		printf("read: refused status=%d (%s)\n", ret,
		       log_strerror(ret));
		return 0;
	}
	if (!t_wait_done(&r->d, 1, RPEER_READ_MS)) {
		log_err("the READ did not complete in %u ms", RPEER_READ_MS);
		return -ETIMEDOUT;
	}
	xport_rdma_ctx_stats(r->ctx, &c);
	if (r->d.status[0]) {
		printf("read: failed status=%d (%s, error completion) "
		       "landed=%zu posted=%" PRIu64 " failed=%" PRIu64
		       " rkey=%#x off=%#" PRIx64 "\n",
		       r->d.status[0], log_strerror(r->d.status[0]),
		       rpeer_nonzero(r->land, PATTERN_PAGE),
		       c.posted - c0.posted, c.failed - c0.failed,
		       r->remote.rkey, r->off);
		return 0;
	}
	bad = pattern_check(r->land, r->seed, r->page);
	printf("read: %s posted=%" PRIu64 " completed=%" PRIu64
	       " rkey=%#x off=%#" PRIx64 " page=%" PRIu64 "\n",
	       bad ? "DATA NOT VERIFIED" : "ok verified", c.posted - c0.posted,
	       c.completed - c0.completed, r->remote.rkey, r->off, r->page);
	return 0;
}

/* Commands until quit (or EOF); heartbeats while waiting for them. */
static int rpeer_run(struct rpeer *r)
{
	char line[128];
	size_t used = 0;
	int ret = 0;

	for (;;) {
		struct pollfd pfd = { .fd = STDIN_FILENO, .events = POLLIN };
		char *nl;
		ssize_t n;

		if (rpeer_tick(r))
			return 1;
		if (poll(&pfd, 1, (int)r->hb_ms / 2) <= 0)
			continue;
		n = read(STDIN_FILENO, line + used, sizeof(line) - 1 - used);
		if (n <= 0)
			return 0;
		used += (size_t)n;
		line[used] = '\0';
		while ((nl = strchr(line, '\n'))) {
			*nl = '\0';
			if (!strcmp(line, "connect") ||
			    !strcmp(line, "connect fresh")) {
				ret = rpeer_connect(r, line[7] == ' ');
			} else if (!strcmp(line, "read")) {
				ret = rpeer_read(r);
			} else if (!strcmp(line, "stop")) {
				r->beating = false;
				printf("heartbeats stopped\n");
			} else if (!strcmp(line, "start")) {
				ret = rpeer_publish(r);
				if (!ret)
					ret = rpeer_heartbeat(r);
				r->beating = true;
				printf("heartbeats resumed\n");
			} else if (!strcmp(line, "quit")) {
				return 0;
			} else {
				log_err("unknown command '%s'", line);
				return 1;
			}
			if (ret) {
				printf("%s: error %d (%s)\n", line, ret,
				       log_strerror(ret));
				return 1;
			}
			used -= (size_t)(nl + 1 - line);
			memmove(line, nl + 1, used + 1);
		}
		if (used == sizeof(line) - 1)
			return 1;
	}
}

static int rpeer_setup(struct rpeer *r, const char *key_file)
{
	struct xport_rdma_cfg rc = { 0 };
	struct xport_cfg xc = { 0 };
	struct actl_cred cred = { 0 };
	char why[400];
	int ret;

	ret = actl_cred_load(&cred, key_file, AUTH_ROLE_NODE, r->name, why,
			     sizeof(why));
	if (ret) {
		log_err("%s", why);
		return ret;
	}
	ret = actl_connect(r->coord, &cred, AUTH_ROLE_NODE, r->name,
			   RPEER_CALL_MS, &r->ac, why, sizeof(why));
	if (ret) {
		log_err("coordinator %s: %s", r->coord, why);
		return ret;
	}
	r->pool = mmap(NULL, RPEER_POOL, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	r->land = mmap(NULL, RPEER_POOL, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (r->pool == MAP_FAILED || r->land == MAP_FAILED)
		return -ENOMEM;
	rc.device = r->device;
	rc.gid_index = r->gid_index;
	rc.data_ip = r->data_ip;
	rc.pool = r->pool;
	rc.pool_len = RPEER_POOL;
	ret = xport_rdma_ctx_create(&rc, &r->ctx);
	if (ret)
		return ret;
	ret = t_drv_alloc(&r->d, &xport_rdma_ops, REQ_XPORT_VERBS);
	if (ret)
		return ret;
	xc.ring = &r->d.ring;
	xc.done = t_done;
	xc.arg = &r->d;
	xc.land = r->land;
	xc.land_len = RPEER_POOL;
	xc.ctx = r->ctx;
	ret = r->d.ops->create(&xc, &r->d.x);
	if (ret)
		return ret;
	ret = rpeer_join(r);
	if (ret)
		return ret;
	printf("joined: node=%" PRIu64 " name=%s\n", r->self, r->name);
	return 0;
}

static void rpeer_fini(struct rpeer *r)
{
	if (r->p)
		r->d.ops->peer_close(r->p);
	if (r->d.x)
		r->d.ops->destroy(r->d.x);
	if (r->d.status)
		t_drv_free(&r->d);
	xport_rdma_ctx_destroy(r->ctx);
	if (r->ac.fd >= 0)
		actl_close(&r->ac);
}

static void rpeer_usage(void)
{
	fprintf(stderr,
		"usage: fp_rdma_peer --coordinator HOST:PORT --name NAME "
		"--key-file FILE --target NAME\n"
		"                    --region NAME --seed N --device DEV "
		"[--data-ip IP]\n"
		"                    [--gid-index N] [--heartbeat-ms MS]\n"
		"then commands on stdin: connect [fresh], read, stop, start, "
		"quit\n");
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "coordinator", required_argument, NULL, 'c' },
		{ "name", required_argument, NULL, 'n' },
		{ "key-file", required_argument, NULL, 'k' },
		{ "target", required_argument, NULL, 't' },
		{ "region", required_argument, NULL, 'r' },
		{ "seed", required_argument, NULL, 's' },
		{ "device", required_argument, NULL, 'd' },
		{ "data-ip", required_argument, NULL, 'i' },
		{ "gid-index", required_argument, NULL, 'g' },
		{ "heartbeat-ms", required_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct rpeer r = { .gid_index = -1, .hb_ms = 200, .ac = { .fd = -1 } };
	const char *key_file = NULL;
	int c, ret;

	setvbuf(stdout, NULL, _IOLBF, 0);
	log_init("fp_rdma_peer", LOG_INFO);
	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case 'c':
			r.coord = optarg;
			break;
		case 'n':
			r.name = optarg;
			break;
		case 'k':
			key_file = optarg;
			break;
		case 't':
			r.target_name = optarg;
			break;
		case 'r':
			r.region = optarg;
			break;
		case 's':
			r.seed = strtoull(optarg, NULL, 0);
			break;
		case 'd':
			r.device = optarg;
			break;
		case 'i':
			r.data_ip = optarg;
			break;
		case 'g':
			r.gid_index = atoi(optarg);
			break;
		case 'h':
			r.hb_ms = (unsigned int)strtoul(optarg, NULL, 0);
			break;
		default:
			rpeer_usage();
			return 2;
		}
	}
	if (!r.coord || !r.name || !key_file || !r.target_name || !r.region ||
	    !r.device || optind != argc || r.hb_ms < 10) {
		rpeer_usage();
		return 2;
	}
	ret = rpeer_setup(&r, key_file);
	if (ret) {
		log_errno(ret, "setup");
		rpeer_fini(&r);
		return 2;
	}
	ret = rpeer_run(&r);
	rpeer_fini(&r);
	return ret;
}
