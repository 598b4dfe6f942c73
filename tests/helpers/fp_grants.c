// SPDX-License-Identifier: MIT
/*
 * fp_grants: what a member that holds a pair key sends to another node's
 * page server without the coordinator's grant (test_grants.sh).
 *
 *   fp_grants ADDR CLUSTER_KEY SELF TARGET POOL
 *       page server TARGET at ADDR, as member SELF (its pair key derived
 *       from the cluster key, as the coordinator hands it to SELF):
 *         1. a WRITE of one zero page with write-lease generation
 *            2^64-1 at the start of every 2 MiB segment of the POOL
 *            bytes (what poisoned a pool for good before grants);
 *         2. three GRANTs made up by SELF: sealed with a random key,
 *            with SELF's own grant key (from its node key), and one
 *            whose MAC bytes are copied from nowhere (zeros), each READ
 *            and WRITE of the whole pool;
 *         3. a READ of the first page of every segment.
 *       Prints "grants: writes=N taken=K grants=G taken=T reads=R
 *       got=B" and exits 0 when nothing was taken and no byte read, 1
 *       otherwise, 2 on a usage or local error.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <openssl/rand.h>

#include "actl.h"
#include "auth.h"
#include "grant.h"
#include "net.h"
#include "wire.h"

#define GRANTS_TIMEOUT_MS 10000
#define GRANTS_SEG	  (UINT64_C(2) << 20)
#define GRANTS_PAGE	  4096u

struct conn {
	int fd;
	struct auth_sess *s;
};

/* Sends one sealed request: header (+ @aad_extra), body @body of @len. */
static int req_send(struct conn *c, const struct wire_hdr *h,
		    const uint8_t *extra, size_t extra_len, uint8_t *body,
		    uint32_t len)
{
	uint8_t aad[WIRE_HDR_LEN + WIRE_WGEN_LEN], tag[AUTH_TAG_LEN];
	struct iovec v = { body, len }, out[3];
	size_t alen = WIRE_HDR_LEN + extra_len;
	struct msghdr m = { .msg_iov = out };

	wire_hdr_pack(h, aad);
	if (extra_len)
		memcpy(aad + WIRE_HDR_LEN, extra, extra_len);
	if (auth_seal(c->s, aad, alen, &v, len ? 1 : 0, tag))
		return -EIO;
	out[0] = (struct iovec){ aad, alen };
	m.msg_iovlen = 1;
	if (len)
		out[m.msg_iovlen++] = v;
	out[m.msg_iovlen++] = (struct iovec){ tag, sizeof(tag) };
	return sendmsg(c->fd, &m, MSG_NOSIGNAL) ==
			       (ssize_t)(alen + len + AUTH_TAG_LEN)
		       ? 0
		       : -EIO;
}

/* One reply, opened: its header in @h, data (if any) into @buf. */
static int rep_recv(struct conn *c, struct wire_hdr *h, uint8_t *buf,
		    uint32_t cap)
{
	uint8_t hdr[WIRE_HDR_LEN], tag[AUTH_TAG_LEN];
	struct iovec v;

	if (recv(c->fd, hdr, sizeof(hdr), MSG_WAITALL) != sizeof(hdr))
		return -EIO;
	wire_hdr_unpack(hdr, h);
	if (h->len > cap)
		return -EPROTO;
	v = (struct iovec){ buf, h->len };
	if (h->len && recv(c->fd, buf, h->len, MSG_WAITALL) != (ssize_t)h->len)
		return -EIO;
	if (recv(c->fd, tag, sizeof(tag), MSG_WAITALL) != sizeof(tag))
		return -EIO;
	return auth_open(c->s, hdr, sizeof(hdr), &v, h->len ? 1 : 0, tag);
}

static int conn_open(const char *addr, const struct auth_client_cfg *cc,
		     struct conn *c, uint64_t *inst)
{
	struct wire_hdr h = { .version = WIRE_VERSION, .op = WIRE_OP_HELLO };
	char why[400];

	if (net_connect(addr, GRANTS_TIMEOUT_MS, &c->fd))
		return -1;
	if (auth_client_run(c->fd, cc, GRANTS_TIMEOUT_MS, &c->s, why,
			    sizeof(why))) {
		fprintf(stderr, "fp_grants: handshake: %s\n", why);
		return -1;
	}
	if (req_send(c, &h, NULL, 0, NULL, 0) || rep_recv(c, &h, NULL, 0) ||
	    h.op != WIRE_OP_HELLO || h.flags_status) {
		fprintf(stderr, "fp_grants: HELLO failed\n");
		return -1;
	}
	*inst = h.arg;
	return 0;
}

int main(int argc, char **argv)
{
	static uint8_t page[GRANTS_PAGE];
	uint64_t pool, inst, writes = 0, wtaken = 0, reads = 0, got = 0;
	uint64_t grants = 0, gtaken = 0;
	struct auth_client_cfg cc = { .role = AUTH_ROLE_PEER,
				      .flags = AUTH_F_ENCRYPT };
	struct actl_cred cr = { 0 };
	struct auth_key own;
	struct conn c = { .fd = -1 };
	uint8_t wgen[WIRE_WGEN_LEN];
	char why[400];

	if (argc != 6) {
		fprintf(stderr,
			"usage: fp_grants ADDR CLUSTER_KEY SELF TARGET POOL\n");
		return 2;
	}
	pool = strtoull(argv[5], NULL, 0);
	cc.name = argv[3];
	cc.target = argv[4];
	if (!pool || pool % GRANTS_SEG ||
	    auth_key_load(argv[2], &cr.key, why, sizeof(why)) ||
	    auth_pair_key(&cr.key, argv[3], argv[4], cc.key) ||
	    auth_key_derive(&cr.key, AUTH_ROLE_NODE, argv[3], &own)) {
		fprintf(stderr, "fp_grants: bad arguments or key\n");
		return 2;
	}
	if (conn_open(argv[1], &cc, &c, &inst))
		return 2;

	/* 1. the highest generation there is, into every segment */
	wire_put64(wgen, UINT64_MAX);
	for (uint64_t off = 0; off < pool; off += GRANTS_SEG) {
		struct wire_hdr h = { .version = WIRE_VERSION,
				      .op = WIRE_OP_WRITE,
				      .flags_status = WIRE_F_WGEN,
				      .len = GRANTS_PAGE,
				      .tag = off,
				      .arg = off };

		memset(page, 0, sizeof(page));
		if (req_send(&c, &h, wgen, sizeof(wgen), page, GRANTS_PAGE) ||
		    rep_recv(&c, &h, NULL, 0)) {
			fprintf(stderr,
				"fp_grants: WRITE at %#" PRIx64
				": connection lost\n",
				off);
			return 2;
		}
		writes++;
		wtaken += !h.flags_status;
	}

	/* 2. grants the coordinator never made */
	for (int k = 0; k < 3; k++) {
		struct grant g = { .rights = GRANT_READ | GRANT_WRITE,
				   .owner = 1,
				   .owner_inst = inst,
				   .off = 0,
				   .len = pool,
				   .wgen = UINT64_MAX,
				   .epoch = UINT64_MAX,
				   .expires_ms = grant_now_ms() + 600000 };
		uint8_t key[AUTH_KEY_LEN], b[GRANT_LEN];
		struct wire_hdr h = { .version = WIRE_VERSION,
				      .op = WIRE_OP_GRANT,
				      .len = GRANT_LEN,
				      .tag = 1 };

		memcpy(g.kid, cr.key.id, sizeof(g.kid));
		snprintf(g.holder, sizeof(g.holder), "%s", argv[3]);
		if (k == 0)
			RAND_bytes(key, sizeof(key));
		else if (grant_key(&own, key))
			return 2;
		if (grant_seal(&g, key, b))
			return 2;
		if (k == 2)
			memset(b + GRANT_MAC_OFF, 0, GRANT_LEN - GRANT_MAC_OFF);
		if (req_send(&c, &h, NULL, 0, b, GRANT_LEN) ||
		    rep_recv(&c, &h, NULL, 0)) {
			fprintf(stderr, "fp_grants: GRANT: connection lost\n");
			return 2;
		}
		grants++;
		gtaken += !h.flags_status;
	}

	/* 3. reads */
	for (uint64_t off = 0; off < pool; off += GRANTS_SEG) {
		struct wire_hdr h = { .version = WIRE_VERSION,
				      .op = WIRE_OP_READ,
				      .len = GRANTS_PAGE,
				      .tag = off,
				      .arg = off };

		if (req_send(&c, &h, NULL, 0, NULL, 0) ||
		    rep_recv(&c, &h, page, sizeof(page))) {
			fprintf(stderr,
				"fp_grants: READ at %#" PRIx64
				": connection lost\n",
				off);
			return 2;
		}
		reads++;
		if (!h.flags_status)
			got += h.len;
	}
	auth_sess_free(c.s);
	close(c.fd);
	printf("grants: writes=%" PRIu64 " taken=%" PRIu64 " grants=%" PRIu64
	       " taken=%" PRIu64 " reads=%" PRIu64 " got=%" PRIu64 "\n",
	       writes, wtaken, grants, gtaken, reads, got);
	return wtaken || gtaken || got ? 1 : 0;
}
