// SPDX-License-Identifier: MIT
/*
 * libFuzzer entry: the home of coherent pages (node/pagesrv/pagesrv_coh.c)
 * under two honest hosts and two hostile ones, all on connections of an
 * insecure page server (no sockets: replies and pushes are read straight
 * from each connection's reply queue).
 *
 * The honest hosts are node/coherent/coh.h's host machine, a page each of
 * FUZZ_PAGES: they read, write (with a GETM's run of the pages after, as
 * a host walking its pages asks) and give pages back as the input says, and
 * take the home's replies and pushes in order, answering as a fault loop
 * does. The hostile hosts send whatever the input says (any COH type, any
 * page, made-up bytes, messages pagesrv_coh_check() refuses), read their
 * queues or not, drop their connection and connect again; node lists
 * show them down or restarted now and then (pagesrv_coh_members()).
 *
 * Checked after every step: the home never closes an honest host's
 * connection nor refuses its message; no two honest hosts hold a page
 * modified, and none holds a copy to read while another holds it
 * modified; at the end, with the hostile hosts gone (a node list shows
 * them down), the honest hosts' requests are all answered, and a page an
 * honest host wrote reads its value at the home or at its owner. ASan and
 * UBSan see every byte; leaks fail the run.
 *
 * Input: a step a byte or two: bits 0-1 the host, bits 2-4 what, then
 * (most steps) a byte: bits 0-2 the page, bits 3-7 data (a hostile
 * message's: bits 3-5 its run, 6-7 its type's low bits).
 */
#include "../../node/pagesrv/pagesrv.c"
#include "../../node/pagesrv/pagesrv_hs.c"
#include "../../node/pagesrv/pagesrv_conn.c"
#include "../../node/pagesrv/pagesrv_coh.c"
#include "../../node/pagesrv/pagesrv_write.c"
#include "../../node/pagesrv/pagesrv_grant.c"
#include "../../node/pagesrv/pagesrv_base.c"

#include "fuzz.h"

#define FUZZ_PAGES  8
#define FUZZ_HOSTS  4 /* 0 and 1 honest, 2 and 3 hostile */
#define FUZZ_HONEST 2
#define FUZZ_CLIENT 100
#define FUZZ_APART  1000 /* between two hosts' instances */
#define FUZZ_RUN    3	 /* an honest GETM's run, at most */

static uint8_t fuzz_pool[FUZZ_PAGES * WIRE_COH_PAGE];

struct fuzz_host {
	struct pagesrv_conn *c;
	struct coh_host h[FUZZ_PAGES];
	unsigned int run[FUZZ_PAGES]; /* a GETM's run asked, per page */
	unsigned int gen;	      /* connections made */
};

struct fuzz_run {
	struct pagesrv *s;
	struct fuzz_host host[FUZZ_HOSTS];
	uint64_t next_value; /* what an honest write writes */
};

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	fuzz_log_init("fuzz_coh");
	return 0;
}

/* pagesrv_coh_up.close: as pagesrv_conn_close() does for the directory. */
static void fuzz_close(struct pagesrv_conn *c)
{
	if (c->closing)
		return;
	pagesrv_coh_conn_gone(c);
	c->closing = true;
}

static void fuzz_kick(struct pagesrv_conn *c)
{
	(void)c;
}

static struct pagesrv_conn *fuzz_conn(struct pagesrv *s, unsigned int k,
				      uint64_t born)
{
	struct pagesrv_conn *c = calloc(1, sizeof(*c));

	if (!c)
		abort();
	c->s = s;
	c->fd = -1;
	c->client = FUZZ_CLIENT + (uint64_t)k * FUZZ_APART;
	c->born_ms = born;
	snprintf(c->name, sizeof(c->name), "fuzz host %u", k);
	return c;
}

/* The oldest reply of @c off its queue, into @h and @page (len 0: none;
 * room for a page and a GETM's run); false if the queue is empty. */
static bool fuzz_take(struct pagesrv_conn *c, struct wire_hdr *h, uint8_t *page)
{
	struct pagesrv_reply *r;

	if (!c->q_n)
		return false;
	r = &c->q[c->q_head];
	wire_hdr_unpack(r->hdr, h);
	FUZZ_CHECK(h->len % WIRE_COH_PAGE == 0 &&
		   h->len <= (1 + WIRE_COH_RUN_MAX) * WIRE_COH_PAGE);
	if (h->len)
		memcpy(page, r->data, h->len);
	if (r->own) {
		FUZZ_CHECK(c->q_bytes >= r->len);
		c->q_bytes -= r->len;
		bufpool_put(&c->s->bufs, r->own, r->len);
		r->own = NULL;
	}
	c->q_head = (c->q_head + 1) % PAGESRV_REPLY_CAP;
	c->q_n--;
	return true;
}

static void fuzz_drop_all(struct pagesrv_conn *c)
{
	static uint8_t page[(1 + WIRE_COH_RUN_MAX) * WIRE_COH_PAGE];
	struct wire_hdr h;

	while (fuzz_take(c, &h, page))
		;
}

/* Host @k sends @type for page @pg (@data: its page's first word; a
 * GETM's run in @type's bits 8-15). */
static int fuzz_send(struct fuzz_run *run, unsigned int k, uint16_t type,
		     unsigned int pg, uint64_t data, uint64_t tag)
{
	struct pagesrv_conn *c = run->host[k].c;
	uint8_t page[WIRE_COH_PAGE] = { 0 };
	struct wire_hdr h = {
		.version = WIRE_VERSION,
		.op = WIRE_OP_COH,
		.flags_status = type,
		.tag = tag,
		.arg = (uint64_t)pg * WIRE_COH_PAGE,
	};
	int ret;

	if (type == WIRE_COH_PUTM || type == WIRE_COH_RECALL_ACK ||
	    type == WIRE_COH_WB)
		h.len = WIRE_COH_PAGE;
	memcpy(page, &data, sizeof(data));
	ret = pagesrv_coh_check(run->s, &h);
	if (ret)
		return ret < 0 ? ret : 0; /* answered an errno, or closed */
	return pagesrv_coh_on(c, &h, h.len ? page : NULL);
}

static uint8_t fuzz_wire_type(enum coh_msg_type t)
{
	switch (t) {
	case COH_GETS:
		return WIRE_COH_GETS;
	case COH_GETM:
		return WIRE_COH_GETM;
	case COH_PUTM:
		return WIRE_COH_PUTM;
	case COH_PUTS:
		return WIRE_COH_PUTS;
	case COH_INV_ACK:
		return WIRE_COH_INV_ACK;
	case COH_RECALL_ACK:
		return WIRE_COH_RECALL_ACK;
	case COH_WB:
		return WIRE_COH_WB;
	default:
		return 0;
	}
}

/* An honest host's messages @out for page @pg: the home takes each. */
static void fuzz_honest_out(struct fuzz_run *run, unsigned int k,
			    unsigned int pg, const struct coh_out *out)
{
	for (unsigned int i = 0; i < out->n; i++) {
		uint8_t t = fuzz_wire_type(out->m[i].type);

		if (!t)
			continue;
		FUZZ_CHECK(fuzz_send(run, k, t, pg, out->m[i].data, pg) == 0);
		FUZZ_CHECK(!run->host[k].c->closing);
	}
}

/* The run of honest host @k's GETM of page @pg, answered with @len bytes:
 * the pages that came are granted modified (a GETM of their own
 * answered), the rest are the home's still. */
static void fuzz_honest_run(struct fuzz_run *run, unsigned int k,
			    unsigned int pg, const uint8_t *page, uint32_t len)
{
	struct fuzz_host *fh = &run->host[k];
	unsigned int got = len / WIRE_COH_PAGE - 1;

	FUZZ_CHECK(got <= fh->run[pg]);
	for (unsigned int j = 1; j <= fh->run[pg]; j++) {
		struct coh_host *h = &fh->h[pg + j];
		struct coh_msg in = { .type = COH_DATA_M, .has_data = 1 };
		struct coh_out out = { .n = 0 };
		int granted;

		FUZZ_CHECK(h->state == COH_IM_D);
		if (j > got) {
			h->state = COH_I;
			continue;
		}
		memcpy(&in.data, page + j * WIRE_COH_PAGE, sizeof(in.data));
		FUZZ_CHECK(coh_host_on(h, 0, &in, &out, &granted) == COH_OK);
		FUZZ_CHECK(!out.n && h->state == COH_M);
	}
	fh->run[pg] = 0;
}

/* Honest host @k takes every reply and push the home queued for it. */
static void fuzz_honest_recv(struct fuzz_run *run, unsigned int k)
{
	struct fuzz_host *fh = &run->host[k];
	static uint8_t page[(1 + WIRE_COH_RUN_MAX) * WIRE_COH_PAGE];
	struct wire_hdr h;

	while (fuzz_take(fh->c, &h, page)) {
		struct coh_msg in = { .from = 0 };
		struct coh_out out = { .n = 0 };
		unsigned int pg;
		int granted;

		if (h.op == WIRE_OP_COH) {
			FUZZ_CHECK(h.flags_status == 0);
			if (h.arg == WIRE_COH_ACK)
				continue;
			FUZZ_CHECK(h.tag < FUZZ_PAGES);
			pg = (unsigned int)h.tag;
			if (h.arg == WIRE_COH_PUT_ACK) {
				in.type = COH_PUT_ACK;
			} else {
				FUZZ_CHECK(h.arg == WIRE_COH_DATA_S ||
					   h.arg == WIRE_COH_DATA_M);
				FUZZ_CHECK(h.len == WIRE_COH_PAGE ||
					   (h.arg == WIRE_COH_DATA_M &&
					    h.len <= (1 + fh->run[pg]) *
							     WIRE_COH_PAGE));
				if (h.arg == WIRE_COH_DATA_M && fh->run[pg])
					fuzz_honest_run(run, k, pg, page,
							h.len);
				in.type = h.arg == WIRE_COH_DATA_S ? COH_DATA_S
								   : COH_DATA_M;
				in.has_data = 1;
				memcpy(&in.data, page, sizeof(in.data));
			}
		} else {
			FUZZ_CHECK(h.op == WIRE_OP_COH_PUSH);
			FUZZ_CHECK(h.arg % WIRE_COH_PAGE == 0 &&
				   h.arg / WIRE_COH_PAGE < FUZZ_PAGES);
			pg = (unsigned int)(h.arg / WIRE_COH_PAGE);
			in.type = h.flags_status == WIRE_COH_INV ? COH_INV
				  : h.flags_status == WIRE_COH_RECALL_S
					  ? COH_RECALL_S
					  : COH_RECALL_M;
		}
		FUZZ_CHECK(coh_host_on(&fh->h[pg], 0, &in, &out, &granted) ==
			   COH_OK);
		fuzz_honest_out(run, k, pg, &out);
	}
}

/* No two honest hosts hold page @pg modified; none holds a copy to read
 * while another holds it modified. */
static void fuzz_honest_check(const struct fuzz_run *run)
{
	for (unsigned int pg = 0; pg < FUZZ_PAGES; pg++) {
		unsigned int m = 0, s = 0;

		for (unsigned int k = 0; k < FUZZ_HONEST; k++) {
			enum coh_host_state st = run->host[k].h[pg].state;

			m += st == COH_M;
			s += st == COH_S || st == COH_SM_D;
		}
		FUZZ_CHECK(m <= 1 && (!m || !s));
	}
}

/* A node list, asked for now: hostile host @k down (@restart: another
 * instance), the others up. */
static void fuzz_members(struct fuzz_run *run, unsigned int k, bool restart)
{
	struct pagesrv_member m[FUZZ_HOSTS];

	for (unsigned int i = 0; i < FUZZ_HOSTS; i++)
		m[i] = (struct pagesrv_member){
			.name = "",
			.instance = FUZZ_CLIENT + (uint64_t)i * FUZZ_APART,
			.up = true,
		};
	if (restart)
		m[k].instance = 1;
	else
		m[k].up = false;
	FUZZ_CHECK(pagesrv_coh_members(run->s, m, FUZZ_HOSTS, UINT64_MAX) == 0);
	pagesrv_coh_members_run(run->s);
}

/* Honest host @k writes page @pg walking its pages: its GETM asks for
 * the pages after it it holds nothing of too (a run of up to FUZZ_RUN),
 * which wait for it as for GETMs of their own. */
static void fuzz_honest_walk(struct fuzz_run *run, unsigned int k,
			     unsigned int pg)
{
	struct fuzz_host *fh = &run->host[k];
	struct coh_out out = { .n = 0 };
	uint64_t v = run->next_value++;
	unsigned int n = 0;

	if (coh_host_access(&fh->h[pg], 0, 1, &v, &out) != COH_MISS)
		return;
	FUZZ_CHECK(out.n == 1 && out.m[0].type == COH_GETM);
	while (n < FUZZ_RUN && pg + 1 + n < FUZZ_PAGES &&
	       fh->h[pg + 1 + n].state == COH_I) {
		struct coh_out o = { .n = 0 };
		struct coh_host *x = &fh->h[pg + 1 + n];
		uint64_t w = 0;

		FUZZ_CHECK(coh_host_access(x, 0, 1, &w, &o) == COH_MISS);
		x->pend_write = 0;
		n++;
	}
	fh->run[pg] = n;
	FUZZ_CHECK(
		fuzz_send(run, k,
			  (uint16_t)(WIRE_COH_GETM | n << WIRE_COH_RUN_SHIFT),
			  pg, 0, pg) == 0);
	FUZZ_CHECK(!fh->c->closing);
}

static void fuzz_honest_step(struct fuzz_run *run, unsigned int k,
			     unsigned int what, unsigned int pg)
{
	struct coh_host *h = &run->host[k].h[pg];
	struct coh_out out = { .n = 0 };
	uint64_t v = run->next_value;

	switch (what) {
	case 0:
	case 1: /* a read, a write */
		if (what)
			run->next_value++;
		coh_host_access(h, 0, (int)what, &v, &out);
		break;
	case 2: /* gives the page back */
		coh_host_evict(h, 0, &out);
		break;
	case 3: /* writes it back, keeps it */
		coh_host_wb(h, 0, &out);
		break;
	case 4: /* a write walking its pages: a GETM with a run */
		fuzz_honest_walk(run, k, pg);
		break;
	default: /* reads its replies */
		break;
	}
	fuzz_honest_out(run, k, pg, &out);
	fuzz_honest_recv(run, k);
}

static void fuzz_hostile_step(struct fuzz_run *run, unsigned int k,
			      unsigned int what, uint8_t arg)
{
	struct fuzz_host *fh = &run->host[k];
	int ret = 0;

	switch (what) {
	case 0:
	case 1:
	case 2:
	case 3: /* a message: any type (0..15), any run (0..7), any page,
		 * made-up data */
		if (!fh->c->closing)
			ret = fuzz_send(run, k,
					(uint16_t)((what << 2) | (arg >> 6) |
						   ((arg >> 3) &
						    7u) << WIRE_COH_RUN_SHIFT),
					arg & 7, arg, arg);
		break;
	case 4: /* reads its queue */
		fuzz_drop_all(fh->c);
		break;
	case 5: /* its connection ends; a new one */
		fuzz_close(fh->c);
		fuzz_drop_all(fh->c);
		free(fh->c);
		fh->c = fuzz_conn(run->s, k, ++fh->gen);
		break;
	default: /* its node down or restarted */
		fuzz_members(run, k, arg & 1);
		break;
	}
	if (ret < 0)
		fuzz_close(fh->c);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct pagesrv_coh_up up = { .close = fuzz_close, .kick = fuzz_kick };
	struct fuzz_run run = { .next_value = 1 };
	struct pagesrv *s = calloc(1, sizeof(*s));
	size_t i = 0;

	if (!s)
		abort();
	memset(fuzz_pool, 0, sizeof(fuzz_pool));
	s->pool = fuzz_pool;
	s->pool_size = sizeof(fuzz_pool);
	s->efd = -1;
	bufpool_init(&s->bufs, 1u << 20);
	/* (as pagesrv_start(): the directory reads the grant floors) */
	s->floors = pggrant_floors_new(s->pool_size);
	if (!s->floors || pagesrv_coh_init(s, &up))
		abort();
	run.s = s;
	for (unsigned int k = 0; k < FUZZ_HOSTS; k++) {
		run.host[k].c = fuzz_conn(s, k, 0);
		for (unsigned int pg = 0; pg < FUZZ_PAGES; pg++)
			coh_host_init(&run.host[k].h[pg], k);
	}
	while (i < size) {
		unsigned int k = data[i] & 3, what = (data[i] >> 2) & 7;
		uint8_t arg = i + 1 < size ? data[i + 1] : 0;

		i += 2;
		if (k < FUZZ_HONEST)
			fuzz_honest_step(&run, k, what, arg & 7);
		else
			fuzz_hostile_step(&run, k, what, arg);
		for (unsigned int j = 0; j < FUZZ_HONEST; j++) {
			FUZZ_CHECK(!run.host[j].c->closing);
			fuzz_honest_recv(&run, j);
		}
		fuzz_honest_check(&run);
	}
	/* the hostile hosts go (their nodes down); every honest request is
	 * answered then */
	for (unsigned int k = FUZZ_HONEST; k < FUZZ_HOSTS; k++) {
		fuzz_close(run.host[k].c);
		fuzz_members(&run, k, false);
	}
	while (run.host[0].c->q_n || run.host[1].c->q_n)
		for (unsigned int j = 0; j < FUZZ_HONEST; j++)
			fuzz_honest_recv(&run, j);
	for (unsigned int j = 0; j < FUZZ_HONEST; j++) {
		for (unsigned int pg = 0; pg < FUZZ_PAGES; pg++) {
			enum coh_host_state st = run.host[j].h[pg].state;

			FUZZ_CHECK(st == COH_I || st == COH_S || st == COH_M);
		}
	}
	fuzz_honest_check(&run);
	pagesrv_coh_fini(s);
	for (unsigned int k = 0; k < FUZZ_HOSTS; k++) {
		fuzz_drop_all(run.host[k].c);
		free(run.host[k].c);
	}
	bufpool_fini(&s->bufs);
	pggrant_floors_free(s->floors);
	free(s);
	return 0;
}
