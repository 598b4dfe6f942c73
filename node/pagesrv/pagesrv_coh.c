// SPDX-License-Identifier: MIT
/*
 * The page server: the home of coherent regions' pages in this node's
 * pool. COH requests of hosts (wire.h) drive each page's directory entry
 * (node/coherent/coh.h, coh_home_on()); what it emits goes out as replies
 * (DATA_S, DATA_M, PUT_ACK) and pushes (INV, RECALL_S, RECALL_M) on the
 * hosts' connections. The home's copy of a page is the pool itself.
 *
 * A host is a participant: its connection, known by its peer and client.
 * A participant whose connection ends keeps what the directory says it
 * holds (its copies may still be in use there: nothing is granted past
 * them) until a newer connection of the same peer sends its first COH:
 * that one's host dropped every copy it had before it connected again, so
 * the home resets the participant then (its modified pages are the home's
 * copy again, the last the host wrote back; acknowledgements it owed are
 * taken as given) and the new connection takes its place.
 *
 * A host that never connects again is reset by the node list
 * (pagesrv_coh_members()): once its node is down, or runs another
 * instance, as a list asked for after its connection came says. Its
 * agent gave its copies up before its lease could end (or it died with
 * them), so nothing it holds is granted past it.
 */
#define LOG_PREFIX "pagesrv: "
#include "pagesrv_int.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bufpool.h"
#include "coh.h"
#include "log.h"
#include "pgfence.h"
#include "wire.h"

#define PCOH_HOME     UINT32_MAX /* the home's id in coh_home_on() */
#define PCOH_BUCKETS0 1024u

/* A request the home keeps while the page's entry is busy. */
struct pcoh_def {
	struct pcoh_def *next;
	uint32_t part;
	struct pagesrv_conn *c; /* it came on (dropped if no longer the
				   participant's) */
	uint8_t type;		/* WIRE_COH_* */
	uint64_t tag;
	uint8_t *page; /* PUTM: the page, WIRE_COH_PAGE bytes */
};

struct pcoh_ent {
	struct pcoh_ent *hnext;
	uint64_t off;
	/* the grant floor of its pool segment when it was made: one that
	 * rose since (the extent cleared after a delete) ends the entry */
	uint64_t floor;
	struct coh_dir d;
	/* the GETS or GETM being served (d.req): its tag and connection */
	uint64_t req_tag;
	struct pagesrv_conn *req_c;
	/* participants an INV or RECALL went to, not acknowledged yet */
	uint64_t owe;
	struct pcoh_def *dq, **dq_tail;
};

struct pcoh_part {
	bool used;
	struct pagesrv_conn *c; /* NULL: its connection ended */
	uint64_t client;
	uint64_t born_ms; /* its (last) connection's accept */
	char peer[AUTH_NAME_MAX];
};

/* A node list of pagesrv_coh_members(), queued for the server thread. */
struct pcoh_list {
	struct pcoh_list *next;
	uint64_t asked_ms;
	uint32_t n;
	struct {
		char name[AUTH_NAME_MAX];
		uint64_t instance;
		bool up;
	} m[];
};

struct pagesrv_coh {
	struct pcoh_ent **tab;
	uint64_t nb, n;
	struct pcoh_part part[COH_HOSTS_MAX];
	struct pagesrv_coh_up up;
	const struct pggrant_floors *floors;
	/* node lists from other threads, oldest first */
	pthread_mutex_t lists_mu;
	struct pcoh_list *lists, **lists_tail;
};

static uint64_t pcoh_bit(uint32_t part)
{
	return UINT64_C(1) << part;
}

static uint64_t pcoh_hash(uint64_t off, uint64_t nb)
{
	return ((off / WIRE_COH_PAGE) * UINT64_C(0x9E3779B97F4A7C15)) >> 20 &
	       (nb - 1);
}

int pagesrv_coh_init(struct pagesrv *s, const struct pagesrv_coh_up *up)
{
	struct pagesrv_coh *h = calloc(1, sizeof(*h));

	if (!h)
		return -ENOMEM;
	h->nb = PCOH_BUCKETS0;
	h->tab = calloc(h->nb, sizeof(*h->tab));
	if (!h->tab) {
		free(h);
		return -ENOMEM;
	}
	h->up = *up;
	h->floors = s->floors;
	pthread_mutex_init(&h->lists_mu, NULL);
	h->lists_tail = &h->lists;
	s->coh = h;
	return 0;
}

static void pcoh_def_free(struct pcoh_def *q)
{
	free(q->page);
	free(q);
}

void pagesrv_coh_fini(struct pagesrv *s)
{
	struct pagesrv_coh *h = s->coh;

	if (!h)
		return;
	for (uint64_t b = 0; b < h->nb; b++) {
		struct pcoh_ent *e = h->tab[b], *en;

		for (; e; e = en) {
			struct pcoh_def *q = e->dq, *qn;

			en = e->hnext;
			for (; q; q = qn) {
				qn = q->next;
				pcoh_def_free(q);
			}
			free(e);
		}
	}
	while (h->lists) {
		struct pcoh_list *l = h->lists;

		h->lists = l->next;
		free(l);
	}
	pthread_mutex_destroy(&h->lists_mu);
	free(h->tab);
	free(h);
	s->coh = NULL;
}

static int pcoh_grow(struct pagesrv_coh *h)
{
	uint64_t nb = h->nb * 2;
	struct pcoh_ent **t = calloc(nb, sizeof(*t));

	if (!t)
		return -ENOMEM;
	for (uint64_t b = 0; b < h->nb; b++) {
		struct pcoh_ent *e = h->tab[b], *en;

		for (; e; e = en) {
			uint64_t i = pcoh_hash(e->off, nb);

			en = e->hnext;
			e->hnext = t[i];
			t[i] = e;
		}
	}
	free(h->tab);
	h->tab = t;
	h->nb = nb;
	return 0;
}

/* The entry of the page at @off; a fresh one (UNOWNED) if @make. */
static struct pcoh_ent *pcoh_ent_get(struct pagesrv_coh *h, uint64_t off,
				     bool make)
{
	struct pcoh_ent *e;
	uint64_t i = pcoh_hash(off, h->nb);

	for (e = h->tab[i]; e; e = e->hnext)
		if (e->off == off)
			return e;
	if (!make)
		return NULL;
	if (h->n >= h->nb && !pcoh_grow(h))
		i = pcoh_hash(off, h->nb);
	e = calloc(1, sizeof(*e));
	if (!e)
		return NULL;
	e->off = off;
	e->floor = pggrant_floor_at(h->floors, off);
	coh_dir_init(&e->d, 0);
	e->dq_tail = &e->dq;
	e->hnext = h->tab[i];
	h->tab[i] = e;
	h->n++;
	return e;
}

/* Whether @e says no more than a fresh entry: the page is the home's
 * alone, nothing out, nothing waiting. */
static bool pcoh_ent_is_idle(const struct pcoh_ent *e)
{
	return e->d.state == COH_DIR_UNOWNED && !e->d.busy && !e->dq && !e->owe;
}

/* @e leaves the table and is freed (its requests kept are the caller's). */
static void pcoh_ent_free(struct pagesrv_coh *h, struct pcoh_ent *e)
{
	struct pcoh_ent **pp = &h->tab[pcoh_hash(e->off, h->nb)];

	for (; *pp; pp = &(*pp)->hnext) {
		if (*pp == e) {
			*pp = e->hnext;
			h->n--;
			free(e);
			return;
		}
	}
}

/* An idle entry goes. */
static void pcoh_ent_trim(struct pagesrv_coh *h, struct pcoh_ent *e)
{
	if (pcoh_ent_is_idle(e))
		pcoh_ent_free(h, e);
}

/* A message to @c could not be queued (-@err): @self's own failure is
 * its caller's to end it with; any other connection ends here. */
static int pcoh_fail(struct pagesrv *s, struct pagesrv_conn *self,
		     struct pagesrv_conn *c, int err)
{
	if (c == self)
		return err;
	s->coh->up.close(c);
	return 0;
}

/*
 * A reply or push to participant @part's connection. One it has no room
 * for ends that connection (the host reads what we send, or it is gone).
 * Returns 0, or -errno if it was @self's own (its caller ends it).
 */
static int pcoh_send_n(struct pagesrv *s, struct pagesrv_conn *self,
		       uint32_t part, uint8_t op, uint16_t status, uint64_t tag,
		       uint64_t aux, uint64_t page_off, uint32_t pages)
{
	struct pagesrv_conn *c = s->coh->part[part].c;
	uint32_t len = page_off != UINT64_MAX ? pages * WIRE_COH_PAGE : 0;
	uint8_t *own = NULL;
	int ret;

	if (!c || c->closing)
		return 0; /* settled when the participant resets */
	if (c->q_n >= PAGESRV_REPLY_CAP) {
		log_err("%s: coherence: no room for a message to it, closing",
			c->name);
		return pcoh_fail(s, self, c, -ENOBUFS);
	}
	if (len) {
		/* a copy of its own: the pool may change before it is sent */
		own = bufpool_get(&s->bufs, len);
		if (!own) {
			log_err("%s: coherence: no memory for a page, closing",
				c->name);
			return pcoh_fail(s, self, c, -ENOMEM);
		}
		if (!c->sess)
			memcpy(own, s->pool + page_off, len);
	}
	ret = pagesrv_conn_reply(c, op, status, len, tag, aux,
				 c->sess ? s->pool + page_off : own, own);
	if (ret)
		return pcoh_fail(s, self, c, ret);
	if (c != self)
		s->coh->up.kick(c);
	return 0;
}

/* The same, with the page at @page_off (UINT64_MAX: none). */
static int pcoh_send(struct pagesrv *s, struct pagesrv_conn *self,
		     uint32_t part, uint8_t op, uint16_t status, uint64_t tag,
		     uint64_t aux, uint64_t page_off)
{
	return pcoh_send_n(s, self, part, op, status, tag, aux, page_off, 1);
}

static enum coh_msg_type pcoh_type_in(uint8_t t)
{
	switch (t) {
	case WIRE_COH_GETS:
		return COH_GETS;
	case WIRE_COH_GETM:
		return COH_GETM;
	case WIRE_COH_PUTM:
		return COH_PUTM;
	case WIRE_COH_PUTS:
		return COH_PUTS;
	case WIRE_COH_INV_ACK:
		return COH_INV_ACK;
	case WIRE_COH_WB:
		return COH_WB;
	default:
		return COH_RECALL_ACK;
	}
}

/* What coh_home_on() emitted for page @e, sent. */
static int pcoh_emit(struct pagesrv *s, struct pagesrv_conn *self,
		     struct pcoh_ent *e, const struct coh_out *out,
		     uint64_t cur_tag)
{
	struct pagesrv_coh *h = s->coh;
	int ret = 0;

	for (unsigned int i = 0; i < out->n && !ret; i++) {
		const struct coh_msg *m = &out->m[i];
		uint32_t to = m->to;

		if (to >= COH_HOSTS_MAX)
			continue;
		switch (m->type) {
		case COH_DATA_S:
		case COH_DATA_M:
			if (!e->req_c || h->part[to].c != e->req_c) {
				/* granted to a connection that is gone:
				 * never had; its next one starts afresh */
				if (m->type == COH_DATA_M)
					e->d.state = COH_DIR_UNOWNED;
				e->d.sharers &= ~pcoh_bit(to);
				if (e->d.state == COH_DIR_SHARED &&
				    !e->d.sharers)
					e->d.state = COH_DIR_UNOWNED;
				break;
			}
			pagesrv_count(&s->st_coh_grants, 1);
			if (m->type == COH_DATA_M && e->d.req_type == COH_GETS)
				pagesrv_count(&s->st_coh_mig, 1);
			ret = pcoh_send(s, self, to, WIRE_OP_COH, 0, e->req_tag,
					m->type == COH_DATA_S ? WIRE_COH_DATA_S
							      : WIRE_COH_DATA_M,
					e->off);
			break;
		case COH_PUT_ACK:
			ret = pcoh_send(s, self, to, WIRE_OP_COH, 0, cur_tag,
					WIRE_COH_PUT_ACK, UINT64_MAX);
			break;
		case COH_INV:
		case COH_RECALL_S:
		case COH_RECALL_M:
			log_dbg("coherence: %s of page %#" PRIx64 " to host %u",
				coh_msg_name(m->type), e->off, to);
			e->owe |= pcoh_bit(to);
			pagesrv_count(m->type == COH_INV ? &s->st_coh_invs
							 : &s->st_coh_recalls,
				      1);
			ret = pcoh_send(s, self, to, WIRE_OP_COH_PUSH,
					m->type == COH_INV ? WIRE_COH_INV
					: m->type == COH_RECALL_S
						? WIRE_COH_RECALL_S
						: WIRE_COH_RECALL_M,
					0, e->off, UINT64_MAX);
			break;
		default:
			break;
		}
	}
	return ret;
}

/*
 * One message of participant @part (on connection @c, NULL: made up for
 * a participant that reset) for page @e: @type, @tag, @page (the page's
 * bytes, or NULL: none or made up), taken while connection @self's
 * requests are parsed (its replies go out after the parse; any other
 * connection's at once). Returns COH_OK, COH_DEFER (nothing changed),
 * COH_EPROTO (a message its state cannot take: nothing changed), or
 * -errno from a reply to @self.
 */
static int pcoh_step(struct pagesrv *s, struct pagesrv_conn *self,
		     struct pagesrv_conn *c, struct pcoh_ent *e, uint32_t part,
		     uint8_t type, uint64_t tag, const uint8_t *page)
{
	struct pagesrv_coh *h = s->coh;
	struct coh_msg in = {
		.type = pcoh_type_in(type),
		.from = part,
		.has_data = type == WIRE_COH_PUTM ||
			    type == WIRE_COH_RECALL_ACK || type == WIRE_COH_WB,
	};
	struct coh_out out = { .n = 0 };
	uint64_t saved_tag = e->req_tag;
	struct pagesrv_conn *saved_c = e->req_c;
	bool took = false, ack = false;
	int ret;

	if (type == WIRE_COH_INV_ACK || type == WIRE_COH_RECALL_ACK) {
		if (!(e->owe & pcoh_bit(part)))
			return COH_EPROTO;
		ack = true;
	}
	if (type == WIRE_COH_PUTM)
		took = !e->d.busy && e->d.state == COH_DIR_MODIFIED &&
		       e->d.owner == part;
	else if (type == WIRE_COH_RECALL_ACK)
		took = e->d.busy && e->d.state == COH_DIR_MODIFIED &&
		       e->d.owner == part;
	else if (type == WIRE_COH_WB)
		took = e->d.state == COH_DIR_MODIFIED && e->d.owner == part;
	/* The model's copy is a version: here 0, the pool's bytes; a page
	 * that comes back changed is 1 for the step (a migratory page back
	 * unchanged is shared again), and the pool again after. */
	if (took && page)
		in.data = memcmp(page, s->pool + e->off, WIRE_COH_PAGE) != 0;
	if (type == WIRE_COH_GETS || type == WIRE_COH_GETM) {
		e->req_tag = tag;
		e->req_c = c;
	}
	ret = coh_home_on(&e->d, PCOH_HOME, &in, &out);
	e->d.data = 0;
	if (ret != COH_OK) {
		e->req_tag = saved_tag;
		e->req_c = saved_c;
		return ret;
	}
	if (ack)
		e->owe &= ~pcoh_bit(part);
	if (took && page)
		pgfence_pool_write(s->fence, s->pool, e->off, page,
				   WIRE_COH_PAGE);
	if (c && h->part[part].c == c &&
	    (type == WIRE_COH_PUTS || type == WIRE_COH_INV_ACK ||
	     type == WIRE_COH_RECALL_ACK || type == WIRE_COH_WB)) {
		ret = pcoh_send(s, self, part, WIRE_OP_COH, 0, tag,
				WIRE_COH_ACK, UINT64_MAX);
		if (ret)
			return ret;
	}
	return pcoh_emit(s, self, e, &out, tag);
}

/* Requests @e kept while it was busy, served in order while it is not. */
static int pcoh_replay(struct pagesrv *s, struct pagesrv_conn *self,
		       struct pcoh_ent *e)
{
	struct pagesrv_coh *h = s->coh;
	struct pcoh_def *q;
	int ret = 0;

	while (!e->d.busy && (q = e->dq)) {
		e->dq = q->next;
		if (!e->dq)
			e->dq_tail = &e->dq;
		/* one whose connection is no longer its participant's: its
		 * host dropped what it asked for */
		if (h->part[q->part].c == q->c && q->c && !q->c->closing) {
			ret = pcoh_step(s, self, q->c, e, q->part, q->type,
					q->tag, q->page);
			if (ret == COH_EPROTO) {
				log_err("%s: coherence: %s of page %#" PRIx64
					" does not fit its state, closing",
					q->c->name,
					coh_msg_name(pcoh_type_in(q->type)),
					e->off);
				/* (COH_EPROTO is -1: another connection's
				 * failure is not @self's) */
				if (q->c != self) {
					h->up.close(q->c);
					ret = 0;
				} else {
					ret = -EPROTO;
				}
			}
		}
		pcoh_def_free(q);
		if (ret < 0)
			return ret;
		ret = 0;
	}
	return 0;
}

/* Keeps a request of @c for when @e is no longer busy. */
static int pcoh_defer(struct pcoh_ent *e, struct pagesrv_conn *c, uint32_t part,
		      uint8_t type, uint64_t tag, const uint8_t *page)
{
	struct pcoh_def *q = calloc(1, sizeof(*q));

	if (!q)
		return -ENOMEM;
	if (page) {
		q->page = malloc(WIRE_COH_PAGE);
		if (!q->page) {
			free(q);
			return -ENOMEM;
		}
		memcpy(q->page, page, WIRE_COH_PAGE);
	}
	q->part = part;
	q->c = c;
	q->type = type;
	q->tag = tag;
	*e->dq_tail = q;
	e->dq_tail = &q->next;
	return 0;
}

/*
 * The entry of the page at @off for a message on @self, made if @make
 * (NULL: none, or no memory). One made before its segment's grant floor
 * rose is of a region deleted since, whose extent was cleared
 * (csess_scrub()): the copies it lists and the acknowledgements it waits
 * for are of mappings that are gone. It goes; the request it served and
 * those it kept are refused (EACCES, as a request without a grant is).
 * *@ret: 0, or -errno if @self could not take its refusal.
 */
static struct pcoh_ent *pcoh_ent_find(struct pagesrv *s,
				      struct pagesrv_conn *self, uint64_t off,
				      bool make, int *ret)
{
	struct pagesrv_coh *h = s->coh;
	struct pcoh_ent *e = pcoh_ent_get(h, off, false);
	struct pcoh_def *q;

	*ret = 0;
	if (e && e->floor < pggrant_floor_at(h->floors, off)) {
		log_dbg("coherence: page %#" PRIx64 ": its entry is of a "
			"deleted region, dropped",
			off);
		pagesrv_count(&s->st_coh_stale, 1);
		if (e->d.busy && e->req_c && h->part[e->d.req].c == e->req_c)
			*ret = pcoh_send(s, self, e->d.req, WIRE_OP_COH, EACCES,
					 e->req_tag, WIRE_COH_ACK, UINT64_MAX);
		while ((q = e->dq)) {
			e->dq = q->next;
			if (!*ret && q->c && h->part[q->part].c == q->c)
				*ret = pcoh_send(s, self, q->part, WIRE_OP_COH,
						 EACCES, q->tag, WIRE_COH_ACK,
						 UINT64_MAX);
			pcoh_def_free(q);
		}
		pcoh_ent_free(h, e);
		e = NULL;
	}
	return e || !make || *ret ? e : pcoh_ent_get(h, off, true);
}

/*
 * Participant @p reset: its host holds no copy. What it held is the
 * home's again; what it owed is taken as acknowledged (a recall: with the
 * home's copy, the last it wrote back); what it had asked for and not got
 * is dropped (the requests it kept) or given back (a grant on its way).
 */
static int pcoh_part_reset(struct pagesrv *s, struct pagesrv_conn *self,
			   uint32_t p)
{
	struct pagesrv_coh *h = s->coh;
	uint64_t bit = pcoh_bit(p);
	int ret = 0;

	for (uint64_t b = 0; b < h->nb && !ret; b++) {
		struct pcoh_ent *e = h->tab[b], *en;

		for (; e && !ret; e = en) {
			struct pcoh_def **qq = &e->dq, *q;

			en = e->hnext;
			e->dq_tail = &e->dq;
			while ((q = *qq)) {
				if (q->part == p) {
					*qq = q->next;
					pcoh_def_free(q);
					continue;
				}
				e->dq_tail = &q->next;
				qq = &q->next;
			}
			if (e->owe & bit) {
				uint8_t t = e->d.state == COH_DIR_MODIFIED
						    ? WIRE_COH_RECALL_ACK
						    : WIRE_COH_INV_ACK;

				ret = pcoh_step(s, self, NULL, e, p, t, 0,
						NULL);
				if (ret == COH_EPROTO) {
					log_err("coherence: page %#" PRIx64
						": an acknowledgement of a "
						"host that reset does not fit",
						e->off);
					e->owe &= ~bit;
					ret = 0;
				}
				if (ret > 0)
					ret = 0;
			}
			if (!e->d.busy) {
				if (e->d.state == COH_DIR_MODIFIED &&
				    e->d.owner == p)
					e->d.state = COH_DIR_UNOWNED;
				e->d.sharers &= ~bit;
				if (e->d.state == COH_DIR_SHARED &&
				    !e->d.sharers)
					e->d.state = COH_DIR_UNOWNED;
			} else if (e->d.req == p) {
				/* its grant, once made, is given back */
				e->req_c = NULL;
			}
			if (!ret)
				ret = pcoh_replay(s, self, e);
			pcoh_ent_trim(h, e);
		}
	}
	return ret;
}

/*
 * The participant of @c: its own, or one whose connection ended or was
 * superseded (the same peer; reset first), or a new one. Returns its
 * index, or -errno.
 */
static int pcoh_part_of(struct pagesrv *s, struct pagesrv_conn *c)
{
	struct pagesrv_coh *h = s->coh;
	const char *peer = pagesrv_conn_peer(c);
	int free_i = -1, ret;

	if (c->coh_part)
		return c->coh_part - 1;
	for (uint32_t i = 0; i < COH_HOSTS_MAX; i++) {
		struct pcoh_part *p = &h->part[i];
		struct pagesrv_conn *o = p->c;

		if (!p->used) {
			if (free_i < 0)
				free_i = (int)i;
			continue;
		}
		if (strcmp(p->peer, peer) ||
		    (!c->sess && p->client != c->client))
			continue;
		/* a connection of the same peer still up and not
		 * superseded by a newer one of its client: another host of
		 * that peer (not served: one coherent connection a peer),
		 * or one whose end we have not seen yet (tried again) */
		if (o && !o->closing && !o->fenced) {
			log_err("%s: coherence: already a host on %s, closing",
				c->name, o->name);
			return -EBUSY;
		}
		log_info("%s: coherence: the host of %s again: what it held "
			 "before is the home's",
			 c->name, o ? o->name : "a connection that ended");
		p->c = NULL;
		if (o) {
			o->coh_part = 0;
			h->up.close(o);
		}
		ret = pcoh_part_reset(s, c, i);
		if (ret)
			return ret;
		p->c = c;
		p->client = c->client;
		p->born_ms = c->born_ms;
		c->coh_part = (int)i + 1;
		return (int)i;
	}
	if (free_i < 0) {
		log_err("%s: coherence: %u hosts already, closing", c->name,
			COH_HOSTS_MAX);
		return -EUSERS;
	}
	h->part[free_i].used = true;
	h->part[free_i].c = c;
	h->part[free_i].client = c->client;
	h->part[free_i].born_ms = c->born_ms;
	snprintf(h->part[free_i].peer, sizeof(h->part[free_i].peer), "%s",
		 peer);
	c->coh_part = free_i + 1;
	return free_i;
}

void pagesrv_coh_conn_gone(struct pagesrv_conn *c)
{
	struct pagesrv_coh *h = c->s->coh;

	if (!h || !c->coh_part)
		return;
	if (h->part[c->coh_part - 1].c == c)
		h->part[c->coh_part - 1].c = NULL;
	c->coh_part = 0;
}

int pagesrv_coh_members(struct pagesrv *s, const struct pagesrv_member *m,
			uint32_t n, uint64_t asked_ms)
{
	struct pagesrv_coh *h = s->coh;
	struct pcoh_list *l;
	uint64_t one = 1;

	if (!h)
		return 0;
	l = calloc(1, sizeof(*l) + (size_t)n * sizeof(l->m[0]));
	if (!l)
		return -ENOMEM;
	l->asked_ms = asked_ms;
	l->n = n;
	for (uint32_t i = 0; i < n; i++) {
		snprintf(l->m[i].name, sizeof(l->m[i].name), "%s",
			 m[i].name ? m[i].name : "");
		l->m[i].instance = m[i].instance;
		l->m[i].up = m[i].up;
	}
	pthread_mutex_lock(&h->lists_mu);
	*h->lists_tail = l;
	h->lists_tail = &l->next;
	pthread_mutex_unlock(&h->lists_mu);
	if (write(s->efd, &one, sizeof(one)) != sizeof(one))
		log_errno(errno, "coherence: waking the server thread");
	return 0;
}

static bool pcoh_is_of(uint64_t client, uint64_t instance)
{
	return client >= instance && client - instance < PAGESRV_MEMBER_CLIENTS;
}

/* Why participant @p's host is gone by list @l, or NULL. One the list
 * does not name is not judged: a coordinator with other tables lists
 * nodes as they join it again. */
static const char *pcoh_gone_why(const struct pcoh_part *p,
				 const struct pcoh_list *l)
{
	for (uint32_t i = 0; i < l->n; i++) {
		bool named = p->peer[0] && !strcmp(p->peer, l->m[i].name);

		if (!named &&
		    (p->peer[0] || !pcoh_is_of(p->client, l->m[i].instance)))
			continue;
		if (!pcoh_is_of(p->client, l->m[i].instance))
			return "runs another instance";
		return l->m[i].up ? NULL : "is down";
	}
	return NULL;
}

/* The lists of pagesrv_coh_members(), taken in order. */
void pagesrv_coh_members_run(struct pagesrv *s)
{
	struct pagesrv_coh *h = s->coh;
	struct pcoh_list *l;

	if (!h)
		return;
	pthread_mutex_lock(&h->lists_mu);
	l = h->lists;
	h->lists = NULL;
	h->lists_tail = &h->lists;
	pthread_mutex_unlock(&h->lists_mu);
	while (l) {
		struct pcoh_list *next = l->next;

		for (uint32_t i = 0; i < COH_HOSTS_MAX; i++) {
			struct pcoh_part *p = &h->part[i];
			struct pagesrv_conn *o = p->c;
			const char *why;

			/* a connection newer than the list may be of a host
			 * that came back after it was made */
			if (!p->used || !p->client || p->born_ms >= l->asked_ms)
				continue;
			why = pcoh_gone_why(p, l);
			if (!why)
				continue;
			log_warn("coherence: the host of %s (client %#" PRIx64
				 "): its node %s: what it held is the home's",
				 p->peer[0] ? p->peer : "an insecure peer",
				 p->client, why);
			pagesrv_count(&s->st_coh_resets, 1);
			p->c = NULL;
			if (o) {
				o->coh_part = 0;
				h->up.close(o);
			}
			pcoh_part_reset(s, NULL, i);
			memset(p, 0, sizeof(*p));
		}
		free(l);
		l = next;
	}
}

/*
 * A GETM of participant @part on @c with a run of @run pages after its
 * page: when the page is the home's alone (its entry idle), it and the
 * pages of the run the home holds alone too (in order, up to the first
 * that is not, within the pool) are granted modified at once, each as the
 * directory grants a GETM, in one DATA_M. Returns 1 if so (0 or -errno in
 * *@ret), 0 if the page is not free (the GETM goes the usual way, its run
 * dropped).
 */
static int pcoh_run(struct pagesrv *s, struct pagesrv_conn *c, uint32_t part,
		    const struct wire_hdr *hd, unsigned int run, int *ret)
{
	struct coh_msg in = { .type = COH_GETM, .from = part };
	uint32_t n = 0; /* granted */

	for (; n <= run; n++) {
		uint64_t off = hd->arg + (uint64_t)n * WIRE_COH_PAGE;
		struct coh_out out = { .n = 0 };
		struct pcoh_ent *e;

		if (off + WIRE_COH_PAGE > s->pool_size)
			break;
		/* (a fresh one is idle) */
		e = pcoh_ent_find(s, c, off, true, ret);
		if (*ret)
			return 1;
		if (e && !pcoh_ent_is_idle(e))
			break;
		if (!e || coh_home_on(&e->d, PCOH_HOME, &in, &out) != COH_OK ||
		    out.n != 1 || out.m[0].type != COH_DATA_M) {
			/* (cannot be but for memory: it was idle) the pages
			 * granted so far are the run */
			if (!n) {
				log_err("%s: coherence: page %#" PRIx64
					": cannot grant it, closing",
					c->name, hd->arg);
				*ret = -ENOMEM;
				return 1;
			}
			break;
		}
		e->d.data = 0;
	}
	if (!n)
		return 0;
	pagesrv_count(&s->st_coh_grants, n);
	*ret = pcoh_send_n(s, c, part, WIRE_OP_COH, 0, hd->tag, WIRE_COH_DATA_M,
			   hd->arg, n);
	return 1;
}

int pagesrv_coh_on(struct pagesrv_conn *c, const struct wire_hdr *hd,
		   const uint8_t *page)
{
	struct pagesrv *s = c->s;
	struct pagesrv_coh *h = s->coh;
	uint8_t type = (uint8_t)WIRE_COH_TYPE(hd->flags_status);
	unsigned int run = WIRE_COH_RUN(hd->flags_status);
	struct pcoh_ent *e;
	int part, ret;

	if (!h)
		return -EPROTO;
	part = pcoh_part_of(s, c);
	if (part < 0)
		return part;
	pagesrv_count(&s->st_coh_msgs, 1);
	log_dbg("%s: coherence: %s of page %#" PRIx64 " from host %d", c->name,
		coh_msg_name(pcoh_type_in(type)), hd->arg, part);
	if (run && pcoh_run(s, c, (uint32_t)part, hd, run, &ret))
		return ret;
	e = pcoh_ent_find(s, c, hd->arg, false, &ret);
	if (ret)
		return ret;
	/* An acknowledgement without an entry, in a segment a region was
	 * deleted from: of an entry dropped above, or one trimmed since;
	 * nothing waits for it. (Where no region was deleted, nobody asked
	 * for it: the step below refuses it.) */
	if (!e && type == WIRE_COH_INV_ACK &&
	    pggrant_floor_at(h->floors, hd->arg))
		return pcoh_send(s, c, (uint32_t)part, WIRE_OP_COH, 0, hd->tag,
				 WIRE_COH_ACK, UINT64_MAX);
	if (!e)
		e = pcoh_ent_get(h, hd->arg, true);
	if (!e) {
		log_err("%s: coherence: no memory for a page's entry, closing",
			c->name);
		return -ENOMEM;
	}
	ret = pcoh_step(s, c, c, e, (uint32_t)part, type, hd->tag, page);
	if (ret == COH_DEFER) {
		ret = pcoh_defer(e, c, (uint32_t)part, type, hd->tag, page);
	} else if (ret == COH_EPROTO) {
		char why[128];

		snprintf(why, sizeof(why),
			 "coherence: %s of page %#" PRIx64
			 " does not fit its state, closing",
			 coh_msg_name(pcoh_type_in(type)), e->off);
		pagesrv_refusal_log(s, c->name, why);
		ret = -EPROTO;
	} else if (ret == COH_OK) {
		ret = pcoh_replay(s, c, e);
	}
	pcoh_ent_trim(h, e);
	return ret;
}

/* The checks of a COH header: its type, its len for the type, its page
 * inside the pool. 0, or the errno its reply carries (-EPROTO: a len the
 * stream cannot be trusted after). */
int pagesrv_coh_check(const struct pagesrv *s, const struct wire_hdr *h)
{
	unsigned int t = WIRE_COH_TYPE(h->flags_status),
		     run = WIRE_COH_RUN(h->flags_status);
	bool data = t == WIRE_COH_PUTM || t == WIRE_COH_RECALL_ACK ||
		    t == WIRE_COH_WB;

	if (h->len != (data ? WIRE_COH_PAGE : 0))
		return -EPROTO;
	if (((t < WIRE_COH_GETS || t > WIRE_COH_RECALL_ACK) &&
	     t != WIRE_COH_WB) ||
	    (run && (t != WIRE_COH_GETM || run > WIRE_COH_RUN_MAX)))
		return EINVAL;
	if (h->arg % WIRE_COH_PAGE || h->arg >= s->pool_size)
		return ERANGE;
	return 0;
}

bool pagesrv_coh_is_give_up(const struct wire_hdr *h)
{
	unsigned int t = WIRE_COH_TYPE(h->flags_status);

	return t == WIRE_COH_PUTS || t == WIRE_COH_INV_ACK;
}

bool pagesrv_coh_is_write(const struct wire_hdr *h)
{
	unsigned int t = WIRE_COH_TYPE(h->flags_status);

	return t == WIRE_COH_GETM || t == WIRE_COH_PUTM ||
	       t == WIRE_COH_RECALL_ACK || t == WIRE_COH_WB;
}
