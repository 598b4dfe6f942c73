// SPDX-License-Identifier: MIT
/*
 * fp_attack: what a hostile host or a hostile member sends, for
 * test_security.sh. Each mode prints one result line and exits 0 when the
 * target held (refused what it should), 1 when it did not, 2 on a usage or
 * local error. Every ADDR is one address (host:port), not a list.
 *
 *   fp_attack plain-read ADDR
 *       page server, no handshake: a plain HELLO and READ of 64 KiB.
 *       "plain-read: got=N" (bytes received; a page is 4096).
 *   fp_attack peer ADDR SELF TARGET
 *       page server, a peer handshake as SELF with a random key.
 *   fp_attack ctl-plain ADDR
 *       coordinator, no handshake: a plain REGION_CREATE frame.
 *   fp_attack ctl-key ADDR KEYFILE
 *       coordinator, the admin handshake with KEYFILE (another cluster's
 *       key, an expired one): refused, with the reason printed.
 *   fp_attack ctl-clear ADDR KEYFILE
 *       coordinator, the admin handshake with KEYFILE (a good key) but
 *       without asking for encryption (frames in clear, as before control
 *       frames were encrypted): refused, with the reason printed.
 *   fp_attack as-node ADDR KEYFILE NAME OTHER_ID
 *       coordinator with node NAME's key: REGION_CREATE, REGION_DELETE,
 *       NODE_JOIN as another name, and HEARTBEAT, MR_PUT, ENDPOINT_PUT
 *       for node OTHER_ID: every one refused with EACCES.
 *   fp_attack lease ADDR KEYFILE NAME REGION
 *       coordinator with node NAME's key, as node NAME itself (its id and
 *       instance from the node list): WRITE_LEASE of REGION (a region
 *       whose writers leave NAME out), REGION_WRITERS naming NAME, and
 *       LEASE_BREAK of REGION: every one refused with EACCES (a lease
 *       wrongly granted is given back).
 *   fp_attack readers ADDR KEYFILE NAME REGION
 *       coordinator with node NAME's key: REGION_GET of REGION (a region
 *       whose readers and writers leave NAME out) asking for grants, and
 *       REGION_READERS naming NAME: both refused with EACCES, the
 *       coordinator's text printed.
 *   fp_attack tamper ADDR KEYFILE N
 *       coordinator, admin key: N frames tampered (a bit of the header,
 *       payload or tag), truncated, reordered or replayed, each on a
 *       fresh authenticated connection. "tamper: sent=N accepted=K".
 *   fp_attack replay ADDR KEYFILE
 *       coordinator: an admin handshake recorded (what the client sent),
 *       then sent again on a new connection: refused.
 *   fp_attack tamper-data ADDR CLUSTER_KEY SELF TARGET N
 *       page server TARGET, as member SELF (its pair key derived from the
 *       cluster key): after the handshake and a genuine HELLO, a READ
 *       request tampered (header or tag), truncated, reordered or a
 *       replayed record, each on a fresh connection. "tamper-data:
 *       sent=N accepted=K" (accepted: page data came back).
 *   fp_attack hold-data ADDR CLUSTER_KEY SELF TARGET N
 *       page server TARGET, as member SELF (its pair key derived from the
 *       cluster key: what SELF's node key gets from the coordinator): N
 *       sessions, each through the handshake and a HELLO answered, all
 *       held. Prints "hold-data: answered=A failed=F alive=L", then every
 *       second opens a session again for each one the server closed
 *       ("hold-data: round=R reopened=K alive=L", L: those still open
 *       from the round before), until killed.
 *   fp_attack flood ADDR N idle|half [SRC,SRC,...]
 *       N connections that send nothing, or half a handshake, each from
 *       the next of the source addresses SRC in turn if given; prints
 *       "flood: open=K" and holds them until killed.
 *   fp_attack hold-node ADDR KEYFILE NAME N
 *       coordinator, node NAME's key: N connections, each through the
 *       handshake and one REGION_LIST, all held. Prints "hold-node:
 *       answered=A failed=F alive=L" (L: not closed by the coordinator
 *       when the last was answered), then holds them until killed.
 *   fp_attack map-fds SOCK REGION SEED rw|ro
 *       a local mapper at the agent's socket SOCK: MAP REGION, then
 *       MAP_FDS for every run of chunks the layout places on the agent.
 *       Every descriptor must be a 2 MiB segment, sealed against
 *       resizing and new seals, read-only for ro (no writable mapping),
 *       holding SEED's pattern at its place in REGION. Then what must be
 *       refused is: MAP_FDS before MAP, of a chunk on another node,
 *       misaligned, past the region, and more than 64 at once.
 *       "map-fds: segs=N expected=N bad=K pages=N mismatches=M
 *       refused=R/5".
 *   fp_attack map-fds-ext SOCK REGION
 *       MAP REGION (its chunks alternate between the agent and another
 *       node) and ask for the agent's first 64 segments at once as
 *       extents: 64 memfds of 2 MiB must come. Then what must be refused
 *       is: extents with a chunk of the other node, descending,
 *       overlapping, not adding up to the size, 65 segments.
 *       "map-fds-ext: segs=N expected=64 bad=K refused=R/5".
 *   fp_attack reopen-rw SOCK REGION EVIL
 *       a read-only mapper: MAP REGION read-only, MAP_FDS of its first
 *       segment on the agent, then /proc/self/fd/N reopened O_RDWR, mapped
 *       writable and EVIL's pattern written to its first page (and by
 *       pwrite to its second). "reopen-rw: uid=U open=yes|ERR
 *       written=N" (pages written).
 *   fp_attack uffd-upgrade SOCK REGION EVIL [resume]
 *       a read-only mapper: MAP REGION read-only (no write lease), its
 *       remote chunks mapped from the cache memfd and registered with WP
 *       as a writable mapping's are, then MAP_UFFD without RDONLY (with
 *       resume: RESUME and a cache memfd of our own holding EVIL's pattern
 *       in the first remote page). If the agent takes it, EVIL's pattern is
 *       written to the first remote page and the region flushed.
 *       "uffd-upgrade: map_uffd=refused|ACCEPTED closed=yes|no
 *       written=N flush=ok|ERR|-"; exit 77 if this kernel lacks minor
 *       faults or write protection on shmem, or the agent gave no cache.
 *   fp_attack hold-sock SOCK N
 *       N connections to the agent's socket SOCK, none sending anything.
 *       A connect waits up to 2 s for room in the listen queue; once one
 *       did not get it (the agent stopped accepting), the rest are not
 *       tried and count as failed. Prints "hold-sock: connected=C
 *       failed=F alive=L" (L: not closed by the agent once all were
 *       made), then holds them until killed.
 *   fp_attack stuff SOCK
 *       a local client that sends AGENT_STATS requests to the agent's
 *       socket SOCK and never reads an answer, until its writes stop
 *       going through. "stuff: sent=N closed|blocked" (closed: the agent
 *       ended the connection), then holds it until killed.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/time.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <openssl/rand.h>

#include "actl.h"
#include "auth.h"
#include "ctl.h"
#include "frame.h"
#include "msg.h"
#include "net.h"
#include "pattern.h"
#include "uffd.h"
#include "wire.h"

#define ATTACK_TIMEOUT_MS 5000

/* Reads until EOF or @ms of silence; returns the bytes received. */
static size_t attack_drain(int fd, int ms)
{
	uint8_t buf[65536];
	size_t total = 0;

	for (;;) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		ssize_t n;

		if (poll(&p, 1, ms) <= 0)
			break;
		n = read(fd, buf, sizeof(buf));
		if (n <= 0)
			break;
		total += (size_t)n;
	}
	return total;
}

static int attack_plain_read(const char *addr)
{
	struct wire_hdr h = { .version = WIRE_VERSION, .op = WIRE_OP_HELLO };
	uint8_t b[2 * WIRE_HDR_LEN];
	size_t got;
	int fd;

	if (net_connect(addr, ATTACK_TIMEOUT_MS, &fd))
		return 2;
	wire_hdr_pack(&h, b);
	h = (struct wire_hdr){ .version = WIRE_VERSION,
			       .op = WIRE_OP_READ,
			       .len = 65536 };
	wire_hdr_pack(&h, b + WIRE_HDR_LEN);
	if (send(fd, b, sizeof(b), MSG_NOSIGNAL) < 0)
		perror("send");
	got = attack_drain(fd, 2000);
	close(fd);
	printf("plain-read: got=%zu\n", got);
	return got >= 4096 ? 1 : 0;
}

static int attack_peer(const char *addr, const char *self, const char *target)
{
	struct auth_client_cfg cc = { .role = AUTH_ROLE_PEER,
				      .name = self,
				      .target = target };
	struct auth_sess *s = NULL;
	char why[256];
	int fd, ret;

	if (net_connect(addr, ATTACK_TIMEOUT_MS, &fd))
		return 2;
	RAND_bytes(cc.key, sizeof(cc.key));
	ret = auth_client_run(fd, &cc, ATTACK_TIMEOUT_MS, &s, why, sizeof(why));
	close(fd);
	auth_sess_free(s);
	printf("peer: %s: %s\n", ret ? "refused" : "ACCEPTED", why);
	return ret ? 0 : 1;
}

static int attack_ctl_plain(const char *addr)
{
	struct msg req, rep;
	int fd, ret;

	if (net_connect(addr, ATTACK_TIMEOUT_MS, &fd))
		return 2;
	msg_init(&req, MSG_T_REGION_CREATE);
	snprintf(req.name, sizeof(req.name), "evil");
	req.size = 2u << 20;
	ret = ctl_call(fd, &req, &rep, ATTACK_TIMEOUT_MS);
	close(fd);
	printf("ctl-plain: %s (%s)\n", !ret ? "ACCEPTED" : "refused",
	       strerror(-ret));
	msg_fini(&rep);
	return !ret ? 1 : 0;
}

static int attack_cred(const char *path, struct actl_cred *c)
{
	char why[400];

	if (auth_key_load(path, &c->key, why, sizeof(why))) {
		fprintf(stderr, "fp_attack: %s: %s\n", path, why);
		return -1;
	}
	c->insecure = false;
	return 0;
}

static int attack_ctl_key(const char *addr, const char *keyfile)
{
	struct actl_cred c = { 0 };
	struct actl a;
	char why[400];
	int ret;

	if (attack_cred(keyfile, &c))
		return 2;
	ret = actl_connect(addr, &c, AUTH_ROLE_ADMIN, NULL, ATTACK_TIMEOUT_MS,
			   &a, why, sizeof(why));
	if (!ret) {
		actl_close(&a);
		printf("ctl-key: ACCEPTED\n");
		return 1;
	}
	printf("ctl-key: refused: %s\n", why);
	return 0;
}

static int attack_ctl_clear(const char *addr, const char *keyfile)
{
	struct actl_cred c = { 0 };
	struct auth_client_cfg cc;
	struct auth_sess *s = NULL;
	char why[400];
	int fd, ret;

	if (attack_cred(keyfile, &c) ||
	    actl_cred_client(&c, AUTH_ROLE_ADMIN, NULL, &cc))
		return 2;
	cc.flags = 0;
	if (net_connect(addr, ATTACK_TIMEOUT_MS, &fd))
		return 2;
	ret = auth_client_run(fd, &cc, ATTACK_TIMEOUT_MS, &s, why, sizeof(why));
	close(fd);
	if (!ret) {
		printf("ctl-clear: ACCEPTED (session %s)\n",
		       auth_sess_encrypts(s) ? "encrypted anyway" : "in clear");
		auth_sess_free(s);
		return 1;
	}
	printf("ctl-clear: refused: %s\n", why);
	return 0;
}

/* One request with node NAME's key; 0 if it was refused with EACCES. */
static int attack_node_req(const char *addr, struct actl_cred *c,
			   const char *name, struct msg *req)
{
	struct actl a;
	struct msg rep;
	char why[400];
	int ret;

	ret = actl_connect(addr, c, AUTH_ROLE_NODE, name, ATTACK_TIMEOUT_MS, &a,
			   why, sizeof(why));
	if (ret) {
		printf("as-node: cannot connect: %s %s\n", strerror(-ret), why);
		return 2;
	}
	ret = actl_call(&a, req, &rep, ATTACK_TIMEOUT_MS);
	actl_close(&a);
	/* ESTALE: a heartbeat for another node's id (join again) */
	ret = ret == -EACCES || ret == -ESTALE ? 0 : 1;
	printf("as-node: %s: %s%s%s\n", msg_type_name(req->type),
	       ret ? "NOT REFUSED" : "refused", rep.text[0] ? ": " : "",
	       rep.text);
	msg_fini(&rep);
	msg_fini(req);
	return ret;
}

static int attack_as_node(const char *addr, const char *keyfile,
			  const char *name, uint64_t other)
{
	struct actl_cred c = { 0 };
	struct msg m;
	int bad = 0;

	if (attack_cred(keyfile, &c))
		return 2;
	msg_init(&m, MSG_T_REGION_CREATE);
	snprintf(m.name, sizeof(m.name), "evil");
	m.size = 2u << 20;
	bad |= attack_node_req(addr, &c, name, &m);
	msg_init(&m, MSG_T_REGION_DELETE);
	snprintf(m.name, sizeof(m.name), "evil");
	bad |= attack_node_req(addr, &c, name, &m);
	msg_init(&m, MSG_T_NODE_JOIN);
	snprintf(m.name, sizeof(m.name), "%s-not", name);
	snprintf(m.data_addr, sizeof(m.data_addr), "127.0.0.1:1");
	m.pool_size = 2u << 20;
	m.instance = 1;
	bad |= attack_node_req(addr, &c, name, &m);
	msg_init(&m, MSG_T_HEARTBEAT);
	m.node = other;
	m.instance = 1;
	bad |= attack_node_req(addr, &c, name, &m);
	msg_init(&m, MSG_T_MR_PUT);
	m.node = other;
	m.mr_addr = 4096;
	m.rkey = 1;
	m.mr_len = 4096;
	bad |= attack_node_req(addr, &c, name, &m);
	msg_init(&m, MSG_T_ENDPOINT_PUT);
	m.node = other;
	m.peer = other;
	m.mtu = 1024;
	bad |= attack_node_req(addr, &c, name, &m);
	return bad ? 1 : 0;
}

/* Node @name's id and instance from the node list on @a (0: absent). */
static void attack_node_find(struct actl *a, const char *name, uint64_t *id,
			     uint64_t *inst)
{
	struct msg req, rep;
	int ret;

	*id = *inst = 0;
	msg_init(&req, MSG_T_NODE_LIST);
	ret = actl_call(a, &req, &rep, ATTACK_TIMEOUT_MS);
	for (uint32_t i = 0; !ret && i < rep.n_nodes; i++) {
		if (!strcmp(rep.nodes[i].name, name)) {
			*id = rep.nodes[i].id;
			*inst = rep.nodes[i].instance;
		}
	}
	msg_fini(&rep);
}

static int attack_lease(const char *addr, const char *keyfile, const char *name,
			const char *region)
{
	struct actl_cred c = { 0 };
	struct msg req, rep;
	uint64_t id, inst, lease;
	char why[400];
	struct actl a;
	int ret, bad = 0;

	if (attack_cred(keyfile, &c))
		return 2;
	ret = actl_connect(addr, &c, AUTH_ROLE_NODE, name, ATTACK_TIMEOUT_MS,
			   &a, why, sizeof(why));
	if (ret) {
		printf("lease: cannot connect: %s %s\n", strerror(-ret), why);
		return 2;
	}
	attack_node_find(&a, name, &id, &inst);
	if (!id) {
		actl_close(&a);
		printf("lease: node %s is not in the node list\n", name);
		return 2;
	}
	if (RAND_bytes((unsigned char *)&lease, sizeof(lease)) != 1) {
		actl_close(&a);
		return 2;
	}
	lease |= 1;
	msg_init(&req, MSG_T_WRITE_LEASE);
	snprintf(req.name, sizeof(req.name), "%s", region);
	req.node = id;
	req.instance = inst;
	req.lease = lease;
	req.wgen = MSG_WGEN_NEW;
	ret = actl_call(&a, &req, &rep, ATTACK_TIMEOUT_MS);
	printf("as-node: %s: %s%s%s\n", msg_type_name(req.type),
	       ret == -EACCES ? "refused" : "NOT REFUSED",
	       rep.text[0] ? ": " : "", rep.text);
	if (ret != -EACCES)
		bad = 1;
	msg_fini(&rep);
	if (!ret) {
		/* Granted: given back, so the cluster goes on. */
		msg_init(&req, MSG_T_WRITE_RELEASE);
		snprintf(req.name, sizeof(req.name), "%s", region);
		req.node = id;
		req.lease = lease;
		actl_call(&a, &req, &rep, ATTACK_TIMEOUT_MS);
		msg_fini(&rep);
	}
	actl_close(&a);

	msg_init(&req, MSG_T_REGION_WRITERS);
	snprintf(req.name, sizeof(req.name), "%s", region);
	req.writers = malloc(sizeof(*req.writers));
	if (!req.writers)
		return 2;
	req.writers[0] = id;
	req.n_writers = 1;
	bad |= attack_node_req(addr, &c, name, &req);
	msg_init(&req, MSG_T_LEASE_BREAK);
	snprintf(req.name, sizeof(req.name), "%s", region);
	bad |= attack_node_req(addr, &c, name, &req);
	return bad ? 1 : 0;
}

static int attack_readers(const char *addr, const char *keyfile,
			  const char *name, const char *region)
{
	struct actl_cred c = { 0 };
	uint64_t id, inst;
	char why[400];
	struct actl a;
	struct msg req;
	int ret, bad = 0;

	if (attack_cred(keyfile, &c))
		return 2;
	ret = actl_connect(addr, &c, AUTH_ROLE_NODE, name, ATTACK_TIMEOUT_MS,
			   &a, why, sizeof(why));
	if (ret) {
		printf("readers: cannot connect: %s %s\n", strerror(-ret), why);
		return 2;
	}
	attack_node_find(&a, name, &id, &inst);
	actl_close(&a);
	if (!id) {
		printf("readers: node %s is not in the node list\n", name);
		return 2;
	}
	msg_init(&req, MSG_T_REGION_GET);
	snprintf(req.name, sizeof(req.name), "%s", region);
	req.want_runs = 1;
	req.want_repl = 1;
	req.want_grants = 1;
	bad |= attack_node_req(addr, &c, name, &req);
	msg_init(&req, MSG_T_REGION_READERS);
	snprintf(req.name, sizeof(req.name), "%s", region);
	req.readers = malloc(sizeof(*req.readers));
	if (!req.readers)
		return 2;
	req.readers[0] = id;
	req.n_readers = 1;
	bad |= attack_node_req(addr, &c, name, &req);
	return bad ? 1 : 0;
}

/* A REGION_LIST sealed on @a, as a whole frame. */
static int attack_frame(struct actl *a, uint8_t **f, size_t *flen)
{
	struct msg m;
	uint8_t *p;
	size_t n;
	int ret;

	msg_init(&m, MSG_T_REGION_LIST);
	ret = msg_encode(&m, &p, &n);
	if (ret)
		return ret;
	ret = actl_seal_frame(a->sess, p, n, f, flen);
	free(p);
	return ret;
}

/* Did the coordinator answer a REGION_LIST (the frame was taken)? */
static int attack_accepted(struct actl *a)
{
	struct msg rep;
	int ret = actl_recv(a, &rep, 2000);
	int ok = !ret && rep.type == MSG_T_REGIONS;

	msg_fini(&rep);
	return ok;
}

static int attack_tamper(const char *addr, const char *keyfile, long n)
{
	struct actl_cred c = { 0 };
	long accepted = 0, sent = 0;
	char why[400];

	if (attack_cred(keyfile, &c))
		return 2;
	for (long i = 0; i < n; i++) {
		uint8_t *f1 = NULL, *f2 = NULL;
		size_t l1, l2;
		struct actl a;
		int mode = (int)(i % 6), ok;
		unsigned int r;

		if (actl_connect(addr, &c, AUTH_ROLE_ADMIN, NULL,
				 ATTACK_TIMEOUT_MS, &a, why, sizeof(why))) {
			printf("tamper: cannot connect: %s\n", why);
			return 2;
		}
		if (attack_frame(&a, &f1, &l1) || attack_frame(&a, &f2, &l2))
			return 2;
		RAND_bytes((uint8_t *)&r, sizeof(r));
		switch (mode) {
		case 0: /* a bit of the length header */
			f1[3] ^= (uint8_t)(1u << (r % 3));
			break;
		case 1: /* a bit of the payload */
			f1[FRAME_HDR_LEN + r % (l1 - FRAME_HDR_LEN - 16)] ^=
				(uint8_t)(1u << (r % 8));
			break;
		case 2: /* a bit of the tag */
			f1[l1 - 1 - r % 16] ^= (uint8_t)(1u << (r % 8));
			break;
		case 3: /* truncated: half, then the end of the stream */
			l1 = 1 + r % (l1 - 1);
			break;
		default:
			break;
		}
		sent++;
		if (mode == 4) { /* reordered: the second record first */
			send(a.fd, f2, l2, MSG_NOSIGNAL);
			ok = attack_accepted(&a);
		} else if (mode == 5) { /* replayed: the same record twice */
			send(a.fd, f1, l1, MSG_NOSIGNAL);
			if (!attack_accepted(&a)) {
				printf("tamper: a genuine frame was refused\n");
				return 1;
			}
			send(a.fd, f1, l1, MSG_NOSIGNAL);
			ok = attack_accepted(&a);
		} else {
			send(a.fd, f1, l1, MSG_NOSIGNAL);
			if (mode == 3)
				shutdown(a.fd, SHUT_WR);
			ok = attack_accepted(&a);
		}
		accepted += ok;
		if (ok)
			printf("tamper: mode %d accepted\n", mode);
		free(f1);
		free(f2);
		actl_close(&a);
	}
	printf("tamper: sent=%ld accepted=%ld\n", sent, accepted);
	return accepted ? 1 : 0;
}

/*
 * Runs a client handshake on @fd, keeping a copy of every byte it sends in
 * @log. Returns 0 once done, -1 if it failed.
 */
static int attack_hs_logged(int fd, const struct auth_client_cfg *cc,
			    uint8_t *log, size_t *log_len)
{
	struct auth_hs *h;
	int ret = -1;

	if (auth_hs_client(cc, &h))
		return -1;
	for (int i = 0; i < 16 && !auth_hs_done(h) && !auth_hs_failed(h); i++) {
		const uint8_t *o;
		uint8_t buf[AUTH_HELLO_LEN];
		size_t n = auth_hs_output(h, &o);
		ssize_t r;

		if (n) {
			if (send(fd, o, n, MSG_NOSIGNAL) != (ssize_t)n)
				break;
			memcpy(log + *log_len, o, n);
			*log_len += n;
			auth_hs_sent(h, n);
			continue;
		}
		r = recv(fd, buf, auth_hs_want(h), MSG_WAITALL);
		if (r <= 0 || auth_hs_input(h, buf, (size_t)r) < 0)
			break;
	}
	if (auth_hs_done(h))
		ret = 0;
	auth_hs_free(h);
	return ret;
}

static int attack_replay(const char *addr, const char *keyfile)
{
	struct actl_cred c = { 0 };
	struct auth_client_cfg cc;
	uint8_t log[512], buf[256];
	size_t log_len = 0;
	ssize_t got = 0;
	int fd;

	if (attack_cred(keyfile, &c) ||
	    actl_cred_client(&c, AUTH_ROLE_ADMIN, NULL, &cc))
		return 2;
	if (net_connect(addr, ATTACK_TIMEOUT_MS, &fd))
		return 2;
	if (attack_hs_logged(fd, &cc, log, &log_len)) {
		printf("replay: the genuine handshake failed\n");
		return 2;
	}
	close(fd);
	/* The recorded HELLO and PROOF on a new connection. */
	if (net_connect(addr, ATTACK_TIMEOUT_MS, &fd))
		return 2;
	send(fd, log, log_len, MSG_NOSIGNAL);
	for (size_t n = 0; n < sizeof(buf);) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		ssize_t r;

		if (poll(&p, 1, 3000) <= 0)
			break;
		r = read(fd, buf + n, sizeof(buf) - n);
		if (r <= 0)
			break;
		n += (size_t)r;
		got = (ssize_t)n;
	}
	close(fd);
	/* CHALL then DONE: DONE's status says whether it passed. */
	if (got >= AUTH_CHALL_LEN + AUTH_DONE_LEN &&
	    buf[AUTH_CHALL_LEN + 5] == AUTH_OK) {
		printf("replay: ACCEPTED\n");
		return 1;
	}
	printf("replay: refused (%zd bytes back, status %d)\n", got,
	       got >= AUTH_CHALL_LEN + AUTH_DONE_LEN ? buf[AUTH_CHALL_LEN + 5]
						     : -1);
	return 0;
}

/* A sealed page-server request: header, tag. */
static int attack_data_rec(struct auth_sess *s, const struct wire_hdr *h,
			   uint8_t out[WIRE_HDR_LEN + AUTH_TAG_LEN])
{
	wire_hdr_pack(h, out);
	return auth_seal(s, out, WIRE_HDR_LEN, NULL, 0, out + WIRE_HDR_LEN);
}

static int attack_tamper_data(const char *addr, const char *keyfile,
			      const char *self, const char *target, long n)
{
	struct auth_client_cfg cc = { .role = AUTH_ROLE_PEER,
				      .name = self,
				      .target = target,
				      .flags = AUTH_F_ENCRYPT };
	struct actl_cred c = { 0 };
	long accepted = 0, sent = 0;
	char why[400];

	if (attack_cred(keyfile, &c) ||
	    auth_pair_key(&c.key, self, target, cc.key))
		return 2;
	for (long i = 0; i < n; i++) {
		struct wire_hdr hello = { .version = WIRE_VERSION,
					  .op = WIRE_OP_HELLO };
		struct wire_hdr rd = { .version = WIRE_VERSION,
				       .op = WIRE_OP_READ,
				       .len = 4096,
				       .tag = 7 };
		uint8_t r1[WIRE_HDR_LEN + AUTH_TAG_LEN];
		uint8_t r2[WIRE_HDR_LEN + AUTH_TAG_LEN], rep[64];
		struct auth_sess *s = NULL;
		int mode = (int)(i % 5), fd;
		size_t got, l1 = sizeof(r1);
		unsigned int r;

		if (net_connect(addr, ATTACK_TIMEOUT_MS, &fd))
			return 2;
		if (auth_client_run(fd, &cc, ATTACK_TIMEOUT_MS, &s, why,
				    sizeof(why))) {
			printf("tamper-data: handshake: %s\n", why);
			return 2;
		}
		if (attack_data_rec(s, &hello, r1) ||
		    send(fd, r1, sizeof(r1), MSG_NOSIGNAL) != sizeof(r1) ||
		    recv(fd, rep, WIRE_HDR_LEN + AUTH_TAG_LEN, MSG_WAITALL) !=
			    WIRE_HDR_LEN + AUTH_TAG_LEN) {
			printf("tamper-data: the genuine HELLO failed\n");
			return 2;
		}
		RAND_bytes((uint8_t *)&r, sizeof(r));
		rd.arg = (uint64_t)(r % 16) * 4096;
		if (mode == 3) { /* replayed: the HELLO record again */
			sent++;
			send(fd, r1, sizeof(r1), MSG_NOSIGNAL);
		} else {
			attack_data_rec(s, &rd, r1);
			attack_data_rec(s, &rd, r2);
			sent++;
			if (mode == 0) /* a bit of the header */
				r1[r % WIRE_HDR_LEN] ^=
					(uint8_t)(1u << (r % 8));
			else if (mode == 1) /* a bit of the tag */
				r1[WIRE_HDR_LEN + r % AUTH_TAG_LEN] ^=
					(uint8_t)(1u << (r % 8));
			else if (mode == 2) /* truncated */
				l1 = 1 + r % (sizeof(r1) - 1);
			if (mode == 4) /* reordered: the second first */
				send(fd, r2, sizeof(r2), MSG_NOSIGNAL);
			else
				send(fd, r1, l1, MSG_NOSIGNAL);
			if (mode == 2)
				shutdown(fd, SHUT_WR);
		}
		got = attack_drain(fd, 1000);
		if (got >= 4096) {
			accepted++;
			printf("tamper-data: mode %d: %zu bytes came back\n",
			       mode, got);
		}
		auth_sess_free(s);
		close(fd);
	}
	printf("tamper-data: sent=%ld accepted=%ld\n", sent, accepted);
	return accepted ? 1 : 0;
}

/*
 * A session with the page server at @addr as @cc says: the handshake and
 * one HELLO answered. Returns the socket, or -1.
 */
static int attack_data_sess(const char *addr, const struct auth_client_cfg *cc)
{
	struct wire_hdr hello = { .version = WIRE_VERSION,
				  .op = WIRE_OP_HELLO };
	uint8_t rec[WIRE_HDR_LEN + AUTH_TAG_LEN];
	struct auth_sess *s = NULL;
	char why[400];
	int fd, ok;

	if (net_connect(addr, ATTACK_TIMEOUT_MS, &fd))
		return -1;
	if (auth_client_run(fd, cc, ATTACK_TIMEOUT_MS, &s, why, sizeof(why))) {
		close(fd);
		return -1;
	}
	ok = !attack_data_rec(s, &hello, rec) &&
	     send(fd, rec, sizeof(rec), MSG_NOSIGNAL) == sizeof(rec) &&
	     recv(fd, rec, sizeof(rec), MSG_WAITALL) == sizeof(rec);
	auth_sess_free(s);
	if (!ok) {
		close(fd);
		return -1;
	}
	return fd;
}

static bool attack_closed(int fd);

static int attack_hold_data(const char *addr, const char *keyfile,
			    const char *self, const char *target, long n)
{
	struct auth_client_cfg cc = { .role = AUTH_ROLE_PEER,
				      .name = self,
				      .target = target,
				      .flags = AUTH_F_ENCRYPT };
	long answered = 0, failed = 0, alive = 0;
	struct actl_cred c = { 0 };
	int *fds;

	if (n <= 0 || attack_cred(keyfile, &c) ||
	    auth_pair_key(&c.key, self, target, cc.key))
		return 2;
	fds = calloc((size_t)n, sizeof(*fds));
	if (!fds)
		return 2;
	for (long i = 0; i < n; i++) {
		fds[i] = attack_data_sess(addr, &cc);
		if (fds[i] < 0)
			failed++;
		else
			answered++;
	}
	for (long i = 0; i < n; i++)
		if (fds[i] >= 0 && !attack_closed(fds[i]))
			alive++;
	printf("hold-data: answered=%ld failed=%ld alive=%ld\n", answered,
	       failed, alive);
	fflush(stdout);
	/* topped up: a slot freed is taken again */
	for (long round = 1;; round++) {
		long reopened = 0;

		poll(NULL, 0, 1000);
		/* what the server let us keep since the last round */
		alive = 0;
		for (long i = 0; i < n; i++) {
			if (fds[i] >= 0 && attack_closed(fds[i])) {
				close(fds[i]);
				fds[i] = -1;
			}
			alive += fds[i] >= 0;
		}
		for (long i = 0; i < n; i++) {
			if (fds[i] >= 0)
				continue;
			fds[i] = attack_data_sess(addr, &cc);
			if (fds[i] >= 0)
				reopened++;
		}
		printf("hold-data: round=%ld reopened=%ld alive=%ld\n", round,
		       reopened, alive);
	}
	return 0;
}

/* A TCP connection to @addr ("a.b.c.d:port") from source address @src. */
static int attack_connect_from(const char *addr, const char *src, int *out)
{
	struct sockaddr_in sa = { .sin_family = AF_INET };
	struct sockaddr_in from = { .sin_family = AF_INET };
	struct pollfd p;
	char host[64], *colon;
	int fd, err = 0;
	socklen_t el = sizeof(err);

	snprintf(host, sizeof(host), "%s", addr);
	colon = strrchr(host, ':');
	if (!colon)
		return -EINVAL;
	*colon = 0;
	sa.sin_port = htons((uint16_t)atoi(colon + 1));
	if (inet_pton(AF_INET, host, &sa.sin_addr) != 1 ||
	    inet_pton(AF_INET, src, &from.sin_addr) != 1)
		return -EINVAL;
	fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (bind(fd, (struct sockaddr *)&from, sizeof(from)) < 0)
		goto out_errno;
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 &&
	    errno != EINPROGRESS)
		goto out_errno;
	p = (struct pollfd){ .fd = fd, .events = POLLOUT };
	if (poll(&p, 1, 1000) != 1 ||
	    getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) < 0 || err) {
		close(fd);
		return -ETIMEDOUT;
	}
	*out = fd;
	return 0;
out_errno:
	err = -errno;
	close(fd);
	return err;
}

static int attack_flood(const char *addr, long n, const char *mode,
			const char *srcs)
{
	uint8_t half[AUTH_HELLO_LEN / 2];
	const char *next = srcs;
	long open = 0;
	int fd, ret;

	memset(half, 0, sizeof(half));
	memcpy(half, AUTH_MAGIC, 4);
	half[4] = AUTH_VERSION; /* a HELLO that has begun well */
	for (long i = 0; i < n; i++) {
		char src[64];
		size_t len;

		if (!srcs) {
			ret = net_connect(addr, 1000, &fd);
		} else {
			if (!*next)
				next = srcs;
			len = strcspn(next, ",");
			snprintf(src, sizeof(src), "%.*s", (int)len, next);
			next += len + (next[len] == ',');
			ret = attack_connect_from(addr, src, &fd);
			if (ret == -EINVAL) {
				fprintf(stderr, "fp_attack: bad source %s\n",
					src);
				return 2;
			}
		}
		if (ret)
			continue;
		if (!strcmp(mode, "half"))
			send(fd, half, sizeof(half), MSG_NOSIGNAL);
		open++; /* kept open, never closed: held until we die */
	}
	printf("flood: open=%ld\n", open);
	fflush(stdout);
	for (;;)
		pause();
	return 0;
}

/* Has the peer closed @fd (EOF or an error waiting)? */
static bool attack_closed(int fd)
{
	struct pollfd p = { .fd = fd, .events = POLLIN | POLLRDHUP };
	uint8_t b;

	if (poll(&p, 1, 0) != 1)
		return false;
	return recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) <= 0;
}

static int attack_hold_node(const char *addr, const char *keyfile,
			    const char *name, long n)
{
	struct actl_cred c = { 0 };
	long answered = 0, failed = 0, alive = 0;
	struct actl *a;
	char why[400];

	if (attack_cred(keyfile, &c) || n <= 0)
		return 2;
	a = calloc((size_t)n, sizeof(*a));
	if (!a)
		return 2;
	for (long i = 0; i < n; i++) {
		struct msg req, rep;

		a[i].fd = -1;
		if (actl_connect(addr, &c, AUTH_ROLE_NODE, name,
				 ATTACK_TIMEOUT_MS, &a[i], why, sizeof(why))) {
			failed++;
			a[i].fd = -1;
			continue;
		}
		msg_init(&req, MSG_T_REGION_LIST);
		if (actl_call(&a[i], &req, &rep, ATTACK_TIMEOUT_MS))
			failed++;
		else
			answered++;
		msg_fini(&rep);
	}
	for (long i = 0; i < n; i++)
		if (a[i].fd >= 0 && !attack_closed(a[i].fd))
			alive++;
	printf("hold-node: answered=%ld failed=%ld alive=%ld\n", answered,
	       failed, alive);
	fflush(stdout);
	for (;;)
		pause();
	return 0;
}

static int attack_hold_sock(const char *sock, long n)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	long connected = 0, failed = 0, alive = 0;
	int *fds;

	if (n <= 0 || strlen(sock) >= sizeof(sa.sun_path))
		return 2;
	memcpy(sa.sun_path, sock, strlen(sock) + 1);
	fds = calloc((size_t)n, sizeof(*fds));
	if (!fds)
		return 2;
	for (long i = 0; i < n; i++) {
		/* a blocking connect waits this long for the listen queue */
		struct timeval tv = { .tv_sec = 2 };

		fds[i] = -1;
		if (!failed)
			fds[i] = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fds[i] >= 0 &&
		    (setsockopt(fds[i], SOL_SOCKET, SO_SNDTIMEO, &tv,
				sizeof(tv)) ||
		     connect(fds[i], (struct sockaddr *)&sa, sizeof(sa)))) {
			close(fds[i]);
			fds[i] = -1;
		}
		if (fds[i] < 0)
			failed++;
		else
			connected++;
	}
	for (long i = 0; i < n; i++)
		if (fds[i] >= 0 && !attack_closed(fds[i]))
			alive++;
	printf("hold-sock: connected=%ld failed=%ld alive=%ld\n", connected,
	       failed, alive);
	fflush(stdout);
	for (;;)
		pause();
	return 0;
}

/* MAP @region on a new connection to @sock; *fd and *l to close/fini. */
static int attack_map(const char *sock, const char *region, int ro, int *fd,
		      struct msg *l)
{
	struct msg req;
	int cache = -1, n = 1, ret;

	ret = net_unix_connect(sock, fd);
	if (ret)
		return ret;
	msg_init(&req, MSG_T_MAP);
	msg_strset(req.name, sizeof(req.name), region);
	req.flags = ro ? MSG_MAP_RDONLY : 0;
	ret = ctl_send(*fd, &req, NULL, 0);
	if (!ret)
		ret = ctl_recv(*fd, l, &cache, &n, ATTACK_TIMEOUT_MS);
	if (!ret && n)
		close(cache);
	if (!ret && l->type != MSG_T_MAP_LAYOUT) {
		fprintf(stderr, "fp_attack: map %s: %s\n", region, l->text);
		ret = -EPROTO;
	}
	if (ret)
		close(*fd);
	return ret;
}

/* MAP_FDS [base, base + size) on @fd: the reply's descriptors, or -errno. */
static int attack_map_fds(int fd, uint64_t base, uint64_t size, int *fds,
			  int *n)
{
	struct msg req, rep;
	int ret;

	msg_init(&req, MSG_T_MAP_FDS);
	req.base = base;
	req.size = size;
	*n = MSG_POOL_SEGS_MAX;
	ret = ctl_send(fd, &req, NULL, 0);
	if (!ret)
		ret = ctl_recv(fd, &rep, fds, n, ATTACK_TIMEOUT_MS);
	if (ret) {
		*n = 0;
		return ret;
	}
	if (rep.type == MSG_T_ERROR)
		ret = -(int)rep.err;
	msg_fini(&rep);
	return ret;
}

/* MAP_FDS of the segments under @ext[0..n_ext) (@size bytes in all). */
static int attack_map_fds_ext(int fd, const struct msg_extent *ext,
			      uint32_t n_ext, uint64_t size, int *fds, int *n)
{
	struct msg req, rep;
	int ret;

	msg_init(&req, MSG_T_MAP_FDS);
	req.base = ext[0].off;
	req.size = size;
	req.extents = (struct msg_extent *)ext;
	req.n_extents = n_ext;
	*n = MSG_POOL_SEGS_MAX;
	ret = ctl_send(fd, &req, NULL, 0);
	if (!ret)
		ret = ctl_recv(fd, &rep, fds, n, ATTACK_TIMEOUT_MS);
	if (ret) {
		*n = 0;
		return ret;
	}
	if (rep.type == MSG_T_ERROR)
		ret = -(int)rep.err;
	msg_fini(&rep);
	return ret;
}

/* 1 if MAP_FDS of @ext is refused, on a connection of its own. */
static int attack_ext_refused(const char *sock, const char *region,
			      const struct msg_extent *ext, uint32_t n_ext,
			      uint64_t size)
{
	int fd, fds[MSG_POOL_SEGS_MAX], n = 0, ret;
	struct msg l;

	if (attack_map(sock, region, 0, &fd, &l))
		return 0;
	msg_fini(&l);
	ret = attack_map_fds_ext(fd, ext, n_ext, size, fds, &n);
	for (int i = 0; i < n; i++)
		close(fds[i]);
	close(fd);
	return ret < 0 && !n;
}

static int attack_map_fds_ext_all(const char *sock, const char *region)
{
	struct msg_extent loc[MSG_POOL_SEGS_MAX + 1], bad2[2];
	uint64_t foreign = UINT64_MAX;
	int fd, fds[MSG_POOL_SEGS_MAX], n = 0, refused = 0, bad = 0, ret;
	uint32_t nl = 0;
	struct msg l;

	ret = attack_map(sock, region, 0, &fd, &l);
	if (ret) {
		fprintf(stderr, "fp_attack: map %s: %s\n", region,
			strerror(-ret));
		return 2;
	}
	for (uint32_t i = 0; i < l.n_chunks && nl <= MSG_POOL_SEGS_MAX; i++) {
		uint64_t c0 = (uint64_t)i * l.chunk_size;

		if (l.chunks[i].node != l.node) {
			if (foreign == UINT64_MAX)
				foreign = c0;
			continue;
		}
		for (uint64_t o = c0;
		     o < c0 + l.chunk_size && nl <= MSG_POOL_SEGS_MAX;
		     o += MSG_POOL_SEG) {
			loc[nl].off = o;
			loc[nl++].len = MSG_POOL_SEG;
		}
	}
	if (nl <= MSG_POOL_SEGS_MAX || foreign == UINT64_MAX ||
	    loc[MSG_POOL_SEGS_MAX - 1].off - loc[0].off <
		    MSG_POOL_SEGS_MAX * MSG_POOL_SEG) {
		fprintf(stderr,
			"fp_attack: %s: needs more than 64 local "
			"segments apart and a chunk elsewhere\n",
			region);
		close(fd);
		msg_fini(&l);
		return 2;
	}
	ret = attack_map_fds_ext(fd, loc, MSG_POOL_SEGS_MAX,
				 MSG_POOL_SEGS_MAX * MSG_POOL_SEG, fds, &n);
	if (ret)
		fprintf(stderr, "fp_attack: map_fds with extents: %s\n",
			strerror(-ret));
	for (int k = 0; k < n; k++) {
		struct stat st;

		bad += fstat(fds[k], &st) ||
		       (uint64_t)st.st_size != MSG_POOL_SEG;
		close(fds[k]);
	}
	close(fd);
	bad2[0] = loc[0];
	bad2[1] = (struct msg_extent){ .off = foreign, .len = MSG_POOL_SEG };
	if (bad2[1].off < bad2[0].off) {
		bad2[1] = bad2[0];
		bad2[0].off = foreign;
	}
	refused += attack_ext_refused(sock, region, bad2, 2, 2 * MSG_POOL_SEG);
	bad2[0] = loc[1];
	bad2[1] = loc[0];
	refused += attack_ext_refused(sock, region, bad2, 2, 2 * MSG_POOL_SEG);
	bad2[0] = loc[0];
	bad2[1] = loc[0];
	refused += attack_ext_refused(sock, region, bad2, 2, 2 * MSG_POOL_SEG);
	refused += attack_ext_refused(sock, region, loc, 2, MSG_POOL_SEG);
	refused += attack_ext_refused(sock, region, loc, MSG_POOL_SEGS_MAX + 1,
				      (MSG_POOL_SEGS_MAX + 1) * MSG_POOL_SEG);
	printf("map-fds-ext: segs=%d expected=%d bad=%d refused=%d/5\n", n,
	       MSG_POOL_SEGS_MAX, bad, refused);
	msg_fini(&l);
	return n == MSG_POOL_SEGS_MAX && !bad && refused == 5 ? 0 : 1;
}

/* One handed segment at region offset @off: 0 if it is what it must be. */
static int attack_seg_check(int fd, uint64_t off, uint64_t seed, int ro,
			    long *pages, long *mism)
{
	unsigned int want = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;
	int seals = fcntl(fd, F_GET_SEALS), acc = fcntl(fd, F_GETFL);
	struct stat st;
	uint8_t *p;
	int bad = 0;

	if (fstat(fd, &st) || (uint64_t)st.st_size != MSG_POOL_SEG)
		bad |= 1;
	if (seals < 0 || ((unsigned int)seals & want) != want)
		bad |= 2;
	if (!ftruncate(fd, 2 * MSG_POOL_SEG) || !ftruncate(fd, 0))
		bad |= 4;
	if (!fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE))
		bad |= 8;
	if ((acc & O_ACCMODE) != (ro ? O_RDONLY : O_RDWR))
		bad |= 16;
	p = mmap(NULL, MSG_POOL_SEG, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (ro && p != MAP_FAILED)
		bad |= 32;
	if (p != MAP_FAILED)
		munmap(p, MSG_POOL_SEG);
	p = mmap(NULL, MSG_POOL_SEG, PROT_READ, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED)
		return bad | 64;
	for (uint64_t i = 0; i < MSG_POOL_SEG / PATTERN_PAGE; i++) {
		(*pages)++;
		*mism += pattern_check(p + i * PATTERN_PAGE, seed,
				       off / PATTERN_PAGE + i) != 0;
	}
	munmap(p, MSG_POOL_SEG);
	if (bad)
		fprintf(stderr, "fp_attack: segment at %#llx: check bits %#x\n",
			(unsigned long long)off, bad);
	return bad;
}

/* A request that must be refused, on a connection of its own. */
static int attack_map_refused(const char *sock, const char *region, int map,
			      int ro, uint64_t base, uint64_t size)
{
	int fd, fds[MSG_POOL_SEGS_MAX], n = 0, ret;
	struct msg l;

	if (map) {
		if (attack_map(sock, region, ro, &fd, &l))
			return 0;
		msg_fini(&l);
	} else if (net_unix_connect(sock, &fd)) {
		return 0;
	}
	ret = attack_map_fds(fd, base, size, fds, &n);
	for (int i = 0; i < n; i++)
		close(fds[i]);
	close(fd);
	return ret < 0 && !n;
}

static int attack_map_fds_all(const char *sock, const char *region,
			      uint64_t seed, int ro)
{
	long segs = 0, expected = 0, bad = 0, pages = 0, mism = 0;
	uint64_t foreign = UINT64_MAX, span, batch;
	int fd, refused = 0, ret;
	struct msg l;

	ret = attack_map(sock, region, ro, &fd, &l);
	if (ret) {
		fprintf(stderr, "fp_attack: map %s: %s\n", region,
			strerror(-ret));
		return 2;
	}
	span = (uint64_t)l.n_chunks * l.chunk_size;
	batch = MSG_POOL_SEGS_MAX * MSG_POOL_SEG;
	for (uint32_t i = 0; i < l.n_chunks; i++) {
		uint64_t c0 = (uint64_t)i * l.chunk_size;

		if (l.chunks[i].node != l.node) {
			if (foreign == UINT64_MAX)
				foreign = c0;
			continue;
		}
		expected += (long)(l.chunk_size / MSG_POOL_SEG);
		for (uint64_t o = c0; o < c0 + l.chunk_size; o += batch) {
			uint64_t len = c0 + l.chunk_size - o;
			int fds[MSG_POOL_SEGS_MAX], n;

			len = len < batch ? len : batch;
			ret = attack_map_fds(fd, o, len, fds, &n);
			if (ret)
				fprintf(stderr,
					"fp_attack: map_fds %#llx: %s\n",
					(unsigned long long)o, strerror(-ret));
			for (int k = 0; k < n; k++) {
				segs++;
				bad += attack_seg_check(
					       fds[k], o + k * MSG_POOL_SEG,
					       seed, ro, &pages, &mism) != 0;
				close(fds[k]);
			}
		}
	}
	close(fd);
	/* What is not the process's to have. */
	refused += attack_map_refused(sock, region, 0, ro, 0, MSG_POOL_SEG);
	refused +=
		foreign == UINT64_MAX ||
		attack_map_refused(sock, region, 1, ro, foreign, MSG_POOL_SEG);
	refused += attack_map_refused(sock, region, 1, ro, PATTERN_PAGE,
				      MSG_POOL_SEG);
	refused += attack_map_refused(sock, region, 1, ro, span, MSG_POOL_SEG);
	refused += attack_map_refused(sock, region, 1, ro, 0,
				      (MSG_POOL_SEGS_MAX + 1) * MSG_POOL_SEG);
	printf("map-fds: segs=%ld expected=%ld bad=%ld pages=%ld "
	       "mismatches=%ld refused=%d/5\n",
	       segs, expected, bad, pages, mism, refused);
	msg_fini(&l);
	return segs == expected && expected && !bad && !mism && refused == 5
		       ? 0
		       : 1;
}

/* The first segment of @l placed on the agent (region offset), or -1. */
static int64_t attack_first_local(const struct msg *l)
{
	for (uint32_t i = 0; i < l->n_chunks; i++)
		if (l->chunks[i].node == l->node)
			return (int64_t)i * (int64_t)l->chunk_size;
	return -1;
}

static int attack_reopen_rw(const char *sock, const char *region, uint64_t evil)
{
	uint8_t page[PATTERN_PAGE];
	int fd, seg, rw = -1, n = 0, written = 0, err = 0;
	char path[64];
	int64_t off;
	struct msg l;
	uint8_t *p;

	if (attack_map(sock, region, 1, &fd, &l))
		return 2;
	off = attack_first_local(&l);
	msg_fini(&l);
	if (off < 0 ||
	    attack_map_fds(fd, (uint64_t)off, MSG_POOL_SEG, &seg, &n) ||
	    n != 1) {
		fprintf(stderr, "fp_attack: no segment of %s handed\n", region);
		close(fd);
		return 2;
	}
	snprintf(path, sizeof(path), "/proc/self/fd/%d", seg);
	rw = open(path, O_RDWR | O_CLOEXEC);
	if (rw < 0)
		err = errno;
	if (rw >= 0) {
		p = mmap(NULL, MSG_POOL_SEG, PROT_READ | PROT_WRITE, MAP_SHARED,
			 rw, 0);
		if (p != MAP_FAILED) {
			pattern_fill(p, evil, (uint64_t)off / PATTERN_PAGE);
			written++;
			munmap(p, MSG_POOL_SEG);
		}
		pattern_fill(page, evil, (uint64_t)off / PATTERN_PAGE + 1);
		if (pwrite(rw, page, sizeof(page), PATTERN_PAGE) ==
		    (ssize_t)sizeof(page))
			written++;
		close(rw);
	}
	close(seg);
	close(fd);
	printf("reopen-rw: uid=%u open=%s written=%d\n", (unsigned int)getuid(),
	       rw >= 0 ? "yes" : strerror(err), written);
	return written ? 1 : 0;
}

/* A cache memfd of our own, sealed as the agent seals its own, @evil's
 * pattern at region offset @off. */
static int attack_own_cache(uint64_t span, uint64_t off, uint64_t evil)
{
	uint8_t page[PATTERN_PAGE];
	int fd = memfd_create("farpage-cache", MFD_CLOEXEC | MFD_ALLOW_SEALING);

	if (fd < 0)
		return -1;
	pattern_fill(page, evil, off / PATTERN_PAGE);
	if (ftruncate(fd, (off_t)span) ||
	    pwrite(fd, page, sizeof(page), (off_t)off) != sizeof(page) ||
	    fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)) {
		close(fd);
		return -1;
	}
	return fd;
}

/* FLUSH @region on a connection of its own: 0 or -errno. */
static int attack_flush(const char *sock, const char *region)
{
	struct msg req, rep;
	int fd, ret;

	ret = net_unix_connect(sock, &fd);
	if (ret)
		return ret;
	msg_init(&req, MSG_T_FLUSH);
	msg_strset(req.name, sizeof(req.name), region);
	ret = ctl_call(fd, &req, &rep, 60000);
	msg_fini(&rep);
	close(fd);
	return ret;
}

/*
 * Maps the chunks of @l not on the agent from @cache at @base, writable,
 * and registers them MISSING|MINOR|WP on @uffd: as libfarpage does for a
 * writable mapping. The first such chunk's region offset in *first.
 */
static int attack_map_remote(const struct msg *l, uint8_t *base, int cache,
			     int uffd, int64_t *first)
{
	uint64_t modes = UFFDIO_REGISTER_MODE_MISSING |
			 UFFDIO_REGISTER_MODE_MINOR | UFFDIO_REGISTER_MODE_WP;

	*first = -1;
	for (uint32_t i = 0; i < l->n_chunks; i++) {
		uint64_t off = (uint64_t)i * l->chunk_size;
		void *p;

		if (l->chunks[i].node == l->node)
			continue;
		if (*first < 0)
			*first = (int64_t)off;
		p = mmap(base + off, l->chunk_size, PROT_READ | PROT_WRITE,
			 MAP_SHARED | MAP_FIXED, cache, (off_t)off);
		if (p == MAP_FAILED ||
		    uffd_range_register_modes(uffd, (uint64_t)(uintptr_t)p,
					      l->chunk_size, modes))
			return -1;
	}
	return *first < 0 ? -1 : 0;
}

static int attack_uffd_upgrade(const char *sock, const char *region,
			       uint64_t evil, int resume)
{
	uint64_t need = UFFD_FEATURE_MINOR_SHMEM | UFFD_FEATURE_MISSING_SHMEM |
			UFFD_FEATURE_WP_HUGETLBFS_SHMEM;
	int fd, cache = -1, n = 1, uffd = -1, own = -1, ret, rc = 2;
	int accepted = 0, closed = 0, written = 0, flush = 1;
	uint64_t supported = 0, span, len;
	struct msg req, rep, l;
	int64_t first;
	uint8_t *base, *r;
	char buf[1], fl[64];

	ret = net_unix_connect(sock, &fd);
	if (ret)
		return 2;
	msg_init(&req, MSG_T_MAP);
	msg_strset(req.name, sizeof(req.name), region);
	req.flags = MSG_MAP_RDONLY;
	if (ctl_send(fd, &req, NULL, 0) ||
	    ctl_recv(fd, &l, &cache, &n, ATTACK_TIMEOUT_MS) ||
	    l.type != MSG_T_MAP_LAYOUT) {
		fprintf(stderr, "fp_attack: read-only map of %s failed\n",
			region);
		close(fd);
		return 2;
	}
	if (!n || cache < 0) {
		printf("uffd-upgrade: the agent gave no cache memfd (cache "
		       "off, or no remote chunk)\n");
		rc = 77;
		goto out;
	}
	if (uffd_features_probe(&supported) || (supported & need) != need) {
		printf("uffd-upgrade: no minor faults or write protection "
		       "on shmem here\n");
		rc = 77;
		goto out;
	}
	span = (uint64_t)l.n_chunks * l.chunk_size;
	len = span + MSG_POOL_SEG;
	r = mmap(NULL, len, PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (r == MAP_FAILED)
		goto out;
	base = (uint8_t *)(((uintptr_t)r + MSG_POOL_SEG - 1) &
			   ~(uintptr_t)(MSG_POOL_SEG - 1));
	if (uffd_open(&uffd) || uffd_api(uffd, need) ||
	    attack_map_remote(&l, base, cache, uffd, &first)) {
		fprintf(stderr, "fp_attack: cannot set the mapping up\n");
		goto out_unmap;
	}
	if (resume) {
		own = attack_own_cache(span, (uint64_t)first, evil);
		if (own < 0)
			goto out_unmap;
	}
	msg_init(&req, MSG_T_MAP_UFFD);
	req.base = (uint64_t)(uintptr_t)base;
	req.features = need; /* no UNMAP events: munmap never waits */
	/* What a writable map sends: no MSG_MAP_RDONLY. */
	req.flags = MSG_MAP_CACHE | (resume ? MSG_MAP_RESUME : 0);
	{
		int fds[2] = { uffd, own };

		ret = ctl_send(fd, &req, fds, resume ? 2 : 1);
	}
	if (!ret)
		ret = ctl_recv(fd, &rep, NULL, NULL, ATTACK_TIMEOUT_MS);
	if (!ret) {
		accepted = rep.type == MSG_T_OK;
		if (!accepted)
			printf("uffd-upgrade: the agent said: %s\n", rep.text);
		msg_fini(&rep);
	}
	if (!accepted) {
		struct pollfd p = { .fd = fd, .events = POLLIN };

		/* The agent must end the connection after its answer. */
		closed = poll(&p, 1, ATTACK_TIMEOUT_MS) == 1 &&
			 recv(fd, buf, sizeof(buf), MSG_DONTWAIT) == 0;
	} else {
		uint8_t *pg = base + first;

		if (!resume)
			pattern_fill(pg, evil, (uint64_t)first / PATTERN_PAGE);
		written = 1;
		flush = attack_flush(sock, region);
	}
	if (!accepted)
		snprintf(fl, sizeof(fl), "-");
	else
		snprintf(fl, sizeof(fl), "%s", flush ? strerror(-flush) : "ok");
	printf("uffd-upgrade: map_uffd=%s closed=%s written=%d flush=%s\n",
	       accepted ? "ACCEPTED" : "refused", closed ? "yes" : "no",
	       written, fl);
	rc = accepted || !closed ? 1 : 0;
out_unmap:
	if (uffd >= 0)
		close(uffd);
	uffd = -1;
	munmap(r, len);
out:
	if (own >= 0)
		close(own);
	if (uffd >= 0)
		close(uffd);
	if (cache >= 0)
		close(cache);
	msg_fini(&l);
	close(fd);
	return rc;
}

static int attack_stuff(const char *sock)
{
	uint8_t *buf, frame[FRAME_HDR_LEN + 64];
	long sent = 0;
	int fd, closed = 0, ret;
	struct msg req;
	size_t len;

	msg_init(&req, MSG_T_AGENT_STATS);
	if (msg_encode(&req, &buf, &len) || len > sizeof(frame) - FRAME_HDR_LEN)
		return 2;
	frame_hdr_put(frame, (uint32_t)len);
	memcpy(frame + FRAME_HDR_LEN, buf, len);
	free(buf);
	len += FRAME_HDR_LEN;
	ret = net_unix_connect(sock, &fd);
	if (ret) {
		fprintf(stderr, "fp_attack: connect %s: %s\n", sock,
			strerror(-ret));
		return 2;
	}
	for (size_t off = 0;;) {
		struct pollfd p = { .fd = fd, .events = POLLOUT };
		ssize_t n = send(fd, frame + off, len - off,
				 MSG_DONTWAIT | MSG_NOSIGNAL);

		if (n > 0) {
			off += (size_t)n;
			if (off == len) {
				off = 0;
				sent++;
			}
			continue;
		}
		if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
			closed = 1; /* EPIPE, ECONNRESET */
			break;
		}
		if (poll(&p, 1, ATTACK_TIMEOUT_MS) <= 0)
			break; /* the agent stopped reading us */
		if (p.revents & (POLLHUP | POLLERR)) {
			closed = 1;
			break;
		}
	}
	printf("stuff: sent=%ld %s\n", sent, closed ? "closed" : "blocked");
	fflush(stdout);
	for (;;)
		pause();
	return 0;
}

int main(int argc, char **argv)
{
	struct rlimit rl;

	setvbuf(stdout, NULL, _IOLBF, 0);
	/* floods: as many descriptors as we may have */
	if (!getrlimit(RLIMIT_NOFILE, &rl) && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
	if (argc == 3 && !strcmp(argv[1], "plain-read"))
		return attack_plain_read(argv[2]);
	if (argc == 5 && !strcmp(argv[1], "peer"))
		return attack_peer(argv[2], argv[3], argv[4]);
	if (argc == 3 && !strcmp(argv[1], "ctl-plain"))
		return attack_ctl_plain(argv[2]);
	if (argc == 4 && !strcmp(argv[1], "ctl-key"))
		return attack_ctl_key(argv[2], argv[3]);
	if (argc == 4 && !strcmp(argv[1], "ctl-clear"))
		return attack_ctl_clear(argv[2], argv[3]);
	if (argc == 6 && !strcmp(argv[1], "as-node"))
		return attack_as_node(argv[2], argv[3], argv[4],
				      strtoull(argv[5], NULL, 10));
	if (argc == 6 && !strcmp(argv[1], "lease"))
		return attack_lease(argv[2], argv[3], argv[4], argv[5]);
	if (argc == 6 && !strcmp(argv[1], "readers"))
		return attack_readers(argv[2], argv[3], argv[4], argv[5]);
	if (argc == 5 && !strcmp(argv[1], "tamper"))
		return attack_tamper(argv[2], argv[3], atol(argv[4]));
	if (argc == 7 && !strcmp(argv[1], "tamper-data"))
		return attack_tamper_data(argv[2], argv[3], argv[4], argv[5],
					  atol(argv[6]));
	if (argc == 4 && !strcmp(argv[1], "replay"))
		return attack_replay(argv[2], argv[3]);
	if (argc == 7 && !strcmp(argv[1], "hold-data"))
		return attack_hold_data(argv[2], argv[3], argv[4], argv[5],
					atol(argv[6]));
	if ((argc == 5 || argc == 6) && !strcmp(argv[1], "flood"))
		return attack_flood(argv[2], atol(argv[3]), argv[4],
				    argc == 6 ? argv[5] : NULL);
	if (argc == 6 && !strcmp(argv[1], "hold-node"))
		return attack_hold_node(argv[2], argv[3], argv[4],
					atol(argv[5]));
	if (argc == 4 && !strcmp(argv[1], "hold-sock"))
		return attack_hold_sock(argv[2], atol(argv[3]));
	if (argc == 3 && !strcmp(argv[1], "stuff"))
		return attack_stuff(argv[2]);
	if (argc == 6 && !strcmp(argv[1], "map-fds"))
		return attack_map_fds_all(argv[2], argv[3],
					  strtoull(argv[4], NULL, 0),
					  !strcmp(argv[5], "ro"));
	if (argc == 4 && !strcmp(argv[1], "map-fds-ext"))
		return attack_map_fds_ext_all(argv[2], argv[3]);
	if (argc == 5 && !strcmp(argv[1], "reopen-rw"))
		return attack_reopen_rw(argv[2], argv[3],
					strtoull(argv[4], NULL, 0));
	if ((argc == 5 || (argc == 6 && !strcmp(argv[5], "resume"))) &&
	    !strcmp(argv[1], "uffd-upgrade"))
		return attack_uffd_upgrade(argv[2], argv[3],
					   strtoull(argv[4], NULL, 0),
					   argc == 6);
	fprintf(stderr,
		"usage: fp_attack plain-read|peer|ctl-plain|ctl-key|ctl-clear|"
		"as-node|lease|readers|tamper|flood|hold-node|hold-data|hold-"
		"sock|map-"
		"fds|"
		"map-fds-ext|"
		"reopen-rw|"
		"uffd-upgrade|stuff ... (see the source)\n");
	return 2;
}
