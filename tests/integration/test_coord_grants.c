// SPDX-License-Identifier: MIT
/*
 * The grants a farpage-coordinator process issues on its authenticated
 * sessions, during a key rollover (two cluster keys; nb's agent has the
 * old one, na's and nc's the new): a node's REGION_GET with want_grants
 * gets READ grants of the other nodes' extents (merged), each opening
 * with its owner's grant key under the cluster key that owner's session
 * proved, for the asker, expiring after --grant-ttl-ms; the admin's gets
 * none; a node's WRITE_LEASE gets READ and WRITE grants under the
 * generation granted, another node's (refused) none; heartbeats with
 * want_grants are taken. Restarted, the coordinator seals an owner's
 * grants with the current key until the owner's session proves its own.
 * A rebuild task in a heartbeat's answer comes with a READ grant of its
 * source.
 */
#include <stdint.h>

#include "actl.h"
#include "auth.h"
#include "grant.h"
#include "t_coord.h"

#define MIB	  (UINT64_C(1) << 20)
#define CS	  (2 * MIB)
#define T_TTL_MS  20000u
#define T_NODES	  3
#define T_WAIT_MS 60000u
#define T_KEY_NEW 0
#define T_KEY_OLD 1

struct t_node {
	const char *name, *zone;
	int key; /* T_KEY_*: the cluster key its node key comes from */
	uint64_t id, inst;
	struct actl a;
	uint64_t epoch, cid; /* of its last answer, reported synced */
	int alive;	     /* heartbeats */
};

static struct t_node t_nodes[T_NODES] = {
	{ .name = "na", .zone = "z1", .key = T_KEY_NEW, .inst = 0xa1 },
	{ .name = "nb", .zone = "z2", .key = T_KEY_OLD, .inst = 0xb1 },
	{ .name = "nc", .zone = "z3", .key = T_KEY_NEW, .inst = 0xc1 },
};

static struct auth_key t_keys[2];
static char t_key_path[2][PATH_MAX + 16];

static struct t_node *t_node_of(uint64_t id)
{
	for (int i = 0; i < T_NODES; i++)
		if (t_nodes[i].id == id)
			return &t_nodes[i];
	return NULL;
}

/* An authenticated session of @role (@name for a node) with key @key. */
static int t_sess(const struct t_coord *tc, enum auth_role role,
		  const char *name, int key, struct actl *a)
{
	struct actl_cred cr = { .key = t_keys[key] };
	char why[256] = "";
	int ret;

	snprintf(cr.path, sizeof(cr.path), "%s", t_key_path[key]);
	ret = actl_connect(tc->addr, &cr, role, name, T_CALL_MS, a, why,
			   sizeof(why));
	if (ret)
		fprintf(stderr, "session as %s %s: %s (%s)\n",
			auth_role_name(role), name ? name : "", strerror(-ret),
			why);
	return ret;
}

static int t_start(struct t_coord *tc)
{
	const char *extra[] = { "--key-file",
				t_key_path[T_KEY_NEW],
				"--key-file",
				t_key_path[T_KEY_OLD],
				"--grant-ttl-ms",
				"20000",
				NULL };

	tc->keyed = 1;
	return t_coord_start(tc, extra);
}

/* Node @n's session, joined. */
static int t_node_up(const struct t_coord *tc, struct t_node *n)
{
	struct msg req, rep;
	int ret;

	ret = t_sess(tc, AUTH_ROLE_NODE, n->name, n->key, &n->a);
	if (ret)
		return ret;
	msg_init(&req, MSG_T_NODE_JOIN);
	snprintf(req.name, sizeof(req.name), "%s", n->name);
	snprintf(req.data_addr, sizeof(req.data_addr), "127.0.0.1:%d",
		 7800 + n->name[1]);
	snprintf(req.zone, sizeof(req.zone), "%s", n->zone);
	req.pool_size = 64 * MIB;
	req.instance = n->inst;
	ret = actl_call(&n->a, &req, &rep, T_CALL_MS);
	if (!ret)
		n->id = rep.node;
	msg_fini(&rep);
	n->alive = 1;
	return ret;
}

/* A heartbeat of @n with want_grants, answering checks; the answer in
 * @ack (msg_fini it). */
static int t_beat(struct t_node *n, struct msg *ack)
{
	struct msg req;
	int ret;

	msg_init(&req, MSG_T_HEARTBEAT);
	req.node = n->id;
	req.instance = n->inst;
	req.epoch = n->epoch;
	req.cid = n->cid;
	req.rchk = 1;
	req.want_grants = 1;
	ret = actl_call(&n->a, &req, ack, T_CALL_MS);
	if (!ret && ack->type != MSG_T_HEARTBEAT_ACK)
		ret = -EPROTO;
	if (!ret) {
		n->epoch = ack->epoch;
		n->cid = ack->cid;
	}
	return ret;
}

/* Every live node heartbeats once; an answer with a grant is an error
 * here (no task yet). */
static int t_beat_all(void)
{
	for (int i = 0; i < T_NODES; i++) {
		struct msg ack;
		int ret;

		if (!t_nodes[i].alive)
			continue;
		ret = t_beat(&t_nodes[i], &ack);
		if (!ret && ack.n_grants != ack.n_tasks)
			ret = -EPROTO;
		msg_fini(&ack);
		if (ret) {
			fprintf(stderr, "heartbeat of %s: %s\n",
				t_nodes[i].name, strerror(-ret));
			return ret;
		}
	}
	return 0;
}

/* The grant key of node @n under the cluster key @key. */
static void t_owner_key(const struct t_node *n, int key,
			uint8_t out[AUTH_KEY_LEN])
{
	struct auth_key nk;

	memset(out, 0, AUTH_KEY_LEN);
	if (!auth_key_derive(&t_keys[key], AUTH_ROLE_NODE, n->name, &nk))
		grant_key(&nk, out);
}

/*
 * Grant @mg opens with its owner's grant key under cluster key @key (and
 * not the other's), with that key's id, and says: @rights (@wgen) for
 * @holder of [@off, @off + @len) of the owner, instance @inst, as of
 * @epoch (0: any), expiring T_TTL_MS after a time in [@t0, @t1].
 * Returns 0 or -1 (said why).
 */
static int t_grant_check(const struct msg_grant *mg, int key,
			 const char *holder, unsigned int rights, uint64_t wgen,
			 uint64_t off, uint64_t len, uint64_t inst,
			 uint64_t epoch, uint64_t t0, uint64_t t1)
{
	const struct t_node *o = t_node_of(mg->node);
	uint8_t k[AUTH_KEY_LEN];
	struct grant g;
	int ret;

	if (!o) {
		fprintf(stderr, "a grant of unknown node %llu\n",
			(unsigned long long)mg->node);
		return -1;
	}
	t_owner_key(o, 1 - key, k);
	ret = grant_open(mg->g, k, &g);
	if (ret != -EKEYREJECTED) {
		fprintf(stderr, "grant of %s opens with the other key: %d\n",
			o->name, ret);
		return -1;
	}
	t_owner_key(o, key, k);
	ret = grant_open(mg->g, k, &g);
	if (ret) {
		fprintf(stderr, "grant of %s: %s\n", o->name, strerror(-ret));
		return -1;
	}
	if (memcmp(g.kid, t_keys[key].id, AUTH_ID_LEN) || g.rights != rights ||
	    g.wgen != wgen || strcmp(g.holder, holder) || g.owner != o->id ||
	    g.owner_inst != inst || g.off != off || g.len != len ||
	    (epoch && g.epoch != epoch) || g.expires_ms < t0 + T_TTL_MS ||
	    g.expires_ms > t1 + T_TTL_MS) {
		fprintf(stderr,
			"grant of %s: rights %u wgen %llu holder %s owner "
			"%llu inst %llx [%llu, +%llu) epoch %llu expires "
			"%llu; want %u %llu %s %llu %llx [%llu, +%llu) "
			"%llu, %llu..%llu\n",
			o->name, g.rights, (unsigned long long)g.wgen, g.holder,
			(unsigned long long)g.owner,
			(unsigned long long)g.owner_inst,
			(unsigned long long)g.off, (unsigned long long)g.len,
			(unsigned long long)g.epoch,
			(unsigned long long)g.expires_ms, rights,
			(unsigned long long)wgen, holder,
			(unsigned long long)o->id, (unsigned long long)inst,
			(unsigned long long)off, (unsigned long long)len,
			(unsigned long long)epoch,
			(unsigned long long)(t0 + T_TTL_MS),
			(unsigned long long)(t1 + T_TTL_MS));
		return -1;
	}
	return 0;
}

/*
 * Region r (4 chunks: na@0 nb@0 nc@0 nb@1) seen by na: nb [0, 2 CS)
 * under the key @nb_key, nc [0, CS) under the new one, as the grants
 * of @rep say, @rights (@wgen), made in [@t0, @t1]. 0 or -1.
 */
static int t_grants_of_na(const struct msg *rep, int nb_key,
			  unsigned int rights, uint64_t wgen, uint64_t epoch,
			  uint64_t t0, uint64_t t1)
{
	const struct t_node *nb = &t_nodes[1], *nc = &t_nodes[2];

	if (rep->n_grants != 2) {
		fprintf(stderr, "%u grants, want 2\n", rep->n_grants);
		return -1;
	}
	if (rep->grants[0].node != nb->id || rep->grants[1].node != nc->id ||
	    rep->grants[0].task || rep->grants[1].task) {
		fprintf(stderr, "grants of nodes %llu, %llu\n",
			(unsigned long long)rep->grants[0].node,
			(unsigned long long)rep->grants[1].node);
		return -1;
	}
	if (t_grant_check(&rep->grants[0], nb_key, "na", rights, wgen, 0,
			  2 * CS, nb->inst, epoch, t0, t1) ||
	    t_grant_check(&rep->grants[1], T_KEY_NEW, "na", rights, wgen, 0, CS,
			  nc->inst, epoch, t0, t1))
		return -1;
	return 0;
}

/*
 * As t_grants_of_na(), right after the coordinator restarted, before nb
 * and nc proved their keys again: each extent granted under either key,
 * the current one's first.
 */
static int t_grants_of_na_any(const struct msg *rep, unsigned int rights,
			      uint64_t wgen, uint64_t epoch, uint64_t t0,
			      uint64_t t1)
{
	const struct t_node *nb = &t_nodes[1], *nc = &t_nodes[2];

	if (rep->n_grants != 4) {
		fprintf(stderr, "%u grants, want 4\n", rep->n_grants);
		return -1;
	}
	for (int k = 0; k < 2; k++) {
		int key = k ? T_KEY_OLD : T_KEY_NEW;

		if (rep->grants[k].node != nb->id ||
		    rep->grants[2 + k].node != nc->id ||
		    t_grant_check(&rep->grants[k], key, "na", rights, wgen, 0,
				  2 * CS, nb->inst, epoch, t0, t1) ||
		    t_grant_check(&rep->grants[2 + k], key, "na", rights, wgen,
				  0, CS, nc->inst, epoch, t0, t1))
			return -1;
	}
	return 0;
}

static void t_region_get(struct msg *req, const char *name)
{
	msg_init(req, MSG_T_REGION_GET);
	snprintf(req->name, sizeof(req->name), "%s", name);
	req->want_runs = 1;
	req->want_repl = 1;
	req->want_grants = 1;
}

/*
 * Heartbeats the live nodes until an answer holds a rebuild task; checks
 * that answer's grants: one per task, of its source. 0 or -1.
 */
static int t_task_grants(void)
{
	uint64_t deadline = t_now_ms() + T_WAIT_MS;

	while (t_now_ms() < deadline) {
		for (int i = 0; i < T_NODES; i++) {
			struct t_node *n = &t_nodes[i];
			uint64_t t0 = grant_now_ms(), t1;
			struct msg ack;
			int bad = 0;

			if (!n->alive)
				continue;
			if (t_beat(n, &ack)) {
				fprintf(stderr, "heartbeat of %s\n", n->name);
				msg_fini(&ack);
				return -1;
			}
			t1 = grant_now_ms();
			if (!ack.n_tasks) {
				bad = ack.n_grants != 0;
				msg_fini(&ack);
				if (bad)
					return -1;
				continue;
			}
			bad = ack.n_grants != ack.n_tasks;
			for (uint32_t k = 0; !bad && k < ack.n_tasks; k++) {
				const struct msg_rtask *t = &ack.tasks[k];
				const struct msg_grant *mg = &ack.grants[k];
				const struct t_node *src =
					t_node_of(t->src_node);

				bad = !src || mg->node != t->src_node ||
				      mg->task != t->id ||
				      t_grant_check(mg, src->key, n->name,
						    GRANT_READ, 0, t->src_off,
						    t->len, t->src_inst, 0, t0,
						    t1);
			}
			if (bad)
				fprintf(stderr,
					"%s: %u tasks, %u grants, not one "
					"per task\n",
					n->name, ack.n_tasks, ack.n_grants);
			else
				fprintf(stderr,
					"%s: %u tasks, each with its "
					"grant\n",
					n->name, ack.n_tasks);
			msg_fini(&ack);
			return bad ? -1 : 0;
		}
		t_sleep_ms(200);
	}
	fprintf(stderr, "no task in any answer within %u ms\n", T_WAIT_MS);
	return -1;
}

int main(void)
{
	struct t_coord tc;
	struct actl adm = { .fd = -1 };
	struct msg req, rep;
	uint64_t t0, t1, wgen, x = 0;
	int ret = T_FAIL, r;

	for (int i = 0; i < T_NODES; i++)
		t_nodes[i].a.fd = -1;
	r = t_coord_init(&tc, "test_coord_grants");
	if (r != T_PASS)
		return r;
	for (int k = 0; k < 2; k++) {
		snprintf(t_key_path[k], sizeof(t_key_path[k]), "%s/%s.key",
			 tc.dir, k ? "old" : "new");
		T_CHECK(auth_key_generate(&t_keys[k], 0) == 0, "keygen");
		T_CHECK(auth_key_save(t_key_path[k], &t_keys[k], false) == 0,
			"%s", t_key_path[k]);
	}
	T_CHECK(t_start(&tc) == 0, "start");
	for (int i = 0; i < T_NODES; i++)
		T_CHECK(t_node_up(&tc, &t_nodes[i]) == 0, "join %s",
			t_nodes[i].name);
	T_CHECK(t_beat_all() == 0, "heartbeats with want_grants");
	T_CHECK(t_sess(&tc, AUTH_ROLE_ADMIN, NULL, T_KEY_NEW, &adm) == 0,
		"admin");

	/* r: na@0 nb@0 nc@0 nb@1 */
	msg_init(&req, MSG_T_REGION_CREATE);
	snprintf(req.name, sizeof(req.name), "r");
	req.size = 4 * CS;
	req.owners = calloc(4, sizeof(*req.owners));
	T_CHECK(req.owners, "calloc");
	req.owners[0] = t_nodes[0].id;
	req.owners[1] = req.owners[3] = t_nodes[1].id;
	req.owners[2] = t_nodes[2].id;
	req.n_owners = 4;
	r = actl_call(&adm, &req, &rep, T_CALL_MS);
	msg_fini(&req);
	msg_fini(&rep);
	T_CHECK(r == 0, "create r: %s", strerror(-r));
	T_CHECK(t_beat_all() == 0, "heartbeats");

	/* na's REGION_GET: READ grants of nb's (old key) and nc's
	 * extents */
	t_region_get(&req, "r");
	t0 = grant_now_ms();
	r = actl_call(&t_nodes[0].a, &req, &rep, T_CALL_MS);
	t1 = grant_now_ms();
	msg_fini(&req);
	T_CHECK(r == 0 && rep.type == MSG_T_REGION, "region_get: %s",
		strerror(-r));
	r = t_grants_of_na(&rep, T_KEY_OLD, GRANT_READ, 0, rep.epoch, t0, t1);
	msg_fini(&rep);
	T_CHECK(r == 0, "na's grants of r");

	/* the admin's: the layout, no grant */
	t_region_get(&req, "r");
	r = actl_call(&adm, &req, &rep, T_CALL_MS);
	msg_fini(&req);
	T_CHECK(r == 0 && rep.type == MSG_T_REGION && !rep.n_grants,
		"admin region_get: %s, %u grants", strerror(-r), rep.n_grants);
	msg_fini(&rep);

	/* na's write lease: READ and WRITE under its generation */
	msg_init(&req, MSG_T_WRITE_LEASE);
	snprintf(req.name, sizeof(req.name), "r");
	req.node = t_nodes[0].id;
	req.instance = t_nodes[0].inst;
	req.lease = 5;
	req.wgen = MSG_WGEN_NEW;
	req.want_grants = 1;
	t0 = grant_now_ms();
	r = actl_call(&t_nodes[0].a, &req, &rep, T_CALL_MS);
	t1 = grant_now_ms();
	msg_fini(&req);
	T_CHECK(r == 0 && rep.type == MSG_T_OK && rep.wgen, "write_lease: %s",
		strerror(-r));
	wgen = rep.wgen;
	r = t_grants_of_na(&rep, T_KEY_OLD, GRANT_READ | GRANT_WRITE, wgen, 0,
			   t0, t1);
	msg_fini(&rep);
	T_CHECK(r == 0, "na's write grants of r");
	/* nb's: refused (na holds it), no grant */
	msg_init(&req, MSG_T_WRITE_LEASE);
	snprintf(req.name, sizeof(req.name), "r");
	req.node = t_nodes[1].id;
	req.instance = t_nodes[1].inst;
	req.lease = 6;
	req.wgen = MSG_WGEN_NEW;
	req.want_grants = 1;
	r = actl_call(&t_nodes[1].a, &req, &rep, T_CALL_MS);
	msg_fini(&req);
	T_CHECK(r == -EBUSY && !rep.n_grants, "nb's write_lease: %s",
		strerror(-r));
	msg_fini(&rep);

	/* Restarted: nb's and nc's grants are under each key until their
	 * sessions prove theirs again. */
	for (int i = 0; i < T_NODES; i++)
		actl_close(&t_nodes[i].a);
	actl_close(&adm);
	T_CHECK(t_coord_stop(&tc, SIGTERM) == 0, "stop");
	T_CHECK(t_start(&tc) == 0, "restart");
	T_CHECK(t_sess(&tc, AUTH_ROLE_NODE, "na", T_KEY_NEW, &t_nodes[0].a) ==
			0,
		"na again");
	t_region_get(&req, "r");
	t0 = grant_now_ms();
	r = actl_call(&t_nodes[0].a, &req, &rep, T_CALL_MS);
	t1 = grant_now_ms();
	msg_fini(&req);
	T_CHECK(r == 0, "region_get after the restart: %s", strerror(-r));
	/* (na still holds r's write lease: its lookups get WRITE too) */
	r = t_grants_of_na_any(&rep, GRANT_READ | GRANT_WRITE, wgen, rep.epoch,
			       t0, t1);
	msg_fini(&rep);
	T_CHECK(r == 0, "grants of nb before its session");
	for (int i = 1; i < T_NODES; i++)
		T_CHECK(t_sess(&tc, AUTH_ROLE_NODE, t_nodes[i].name,
			       t_nodes[i].key, &t_nodes[i].a) == 0,
			"%s again", t_nodes[i].name);
	T_CHECK(t_beat_all() == 0, "heartbeats after the restart");
	t_region_get(&req, "r");
	t0 = grant_now_ms();
	r = actl_call(&t_nodes[0].a, &req, &rep, T_CALL_MS);
	t1 = grant_now_ms();
	msg_fini(&req);
	T_CHECK(r == 0, "region_get: %s", strerror(-r));
	r = t_grants_of_na(&rep, T_KEY_OLD, GRANT_READ | GRANT_WRITE, wgen,
			   rep.epoch, t0, t1);
	msg_fini(&rep);
	T_CHECK(r == 0, "grants of nb after its heartbeat");

	/* r2 (2 replicas): the node of chunk 0's first replica falls
	 * silent; its copy is made by another, with a grant of the
	 * source */
	T_CHECK(t_sess(&tc, AUTH_ROLE_ADMIN, NULL, T_KEY_NEW, &adm) == 0,
		"admin again");
	msg_init(&req, MSG_T_REGION_CREATE);
	snprintf(req.name, sizeof(req.name), "r2");
	req.size = 2 * CS;
	req.replicas = 2;
	r = actl_call(&adm, &req, &rep, T_CALL_MS);
	msg_fini(&req);
	if (!r && rep.n_chunks)
		x = rep.chunks[0].node;
	msg_fini(&rep);
	T_CHECK(r == 0 && t_node_of(x), "create r2: %s", strerror(-r));
	t_node_of(x)->alive = 0;
	fprintf(stderr, "%s falls silent\n", t_node_of(x)->name);
	T_CHECK(t_task_grants() == 0, "task grants");
	ret = T_PASS;
out:
	for (int i = 0; i < T_NODES; i++)
		actl_close(&t_nodes[i].a);
	actl_close(&adm);
	t_coord_fini(&tc, ret != T_PASS);
	return ret;
}
