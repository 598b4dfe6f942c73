// SPDX-License-Identifier: MIT
/*
 * The page server: WRITE requests: data received (straight into the pool, or staged
 * until it opens), write-lease generations, fences of superseded
 * connections.
 */
#define LOG_PREFIX "pagesrv: "
#include "pagesrv_int.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "pgfence.h"
#include "wire.h"

/*
 * A client (tag = its id) says which connection of its this is (len =
 * generation). Writes of its older connections are refused from now on:
 * one the client gave up on may still have writes in our buffers, older
 * than what it sends again on this one. Secure, a client is its id and
 * the peer it authenticated as.
 */
void pagesrv_conn_fence(struct pagesrv_conn *c, uint64_t client, uint32_t gen)
{
	struct pagesrv *s = c->s;
	const char *peer = pagesrv_conn_peer(c);
	unsigned int i;

	/* The first HELLO of a connection says whose it is, once. */
	if (c->said_hello)
		return;
	c->said_hello = true;
	c->client = client;
	c->gen = gen;
	if (!client || !gen)
		return;
	for (i = 0; i < PAGESRV_CLIENTS; i++)
		if (s->gens[i].client == client &&
		    !strcmp(s->gens[i].peer, peer))
			break;
	if (i == PAGESRV_CLIENTS) {
		i = s->gens_next++ % PAGESRV_CLIENTS;
		s->gens[i].client = client;
		s->gens[i].gen = 0;
		snprintf(s->gens[i].peer, sizeof(s->gens[i].peer), "%s", peer);
	}
	if (gen < s->gens[i].gen) {
		c->fenced = true;
		return;
	}
	s->gens[i].gen = gen;
	for (struct pagesrv_conn *o = s->conns; o; o = o->next) {
		if (o != c && pagesrv_conn_is_same_client(o, c) &&
		    o->gen < gen && !o->fenced) {
			log_dbg("%s: superseded by %s", o->name, c->name);
			o->fenced = true;
		}
	}
}

/* True if the active request's data goes straight into the pool: an
 * insecure WRITE taken at its header (not a GRANT, nor data dropped). */
bool pagesrv_conn_is_to_pool(const struct pagesrv_conn *c)
{
	return c->wr_active && !c->sess && c->wr_op == WIRE_OP_WRITE &&
	       !c->wr_status;
}

/* True while a fenced connection of @c's client still writes the pool: a
 * write of @c waits for it, so the newer bytes land last. */
static bool pagesrv_conn_fenced_writing(const struct pagesrv_conn *c)
{
	for (const struct pagesrv_conn *o = c->s->conns; o; o = o->next)
		if (o != c && c->client && pagesrv_conn_is_same_client(o, c) &&
		    o->fenced && !o->sess &&
		    ((pagesrv_conn_is_to_pool(o) && !o->closing) ||
		     (o->recv_busy && o->recv_to == PAGESRV_TO_POOL)))
			return true;
	return false;
}

/* True if a queued reply, not all sent yet, sends from [p, p + len). */
static bool pagesrv_conn_is_sending(const struct pagesrv_conn *c,
				    const uint8_t *p, uint32_t len)
{
	const struct pagesrv_reply *r;
	uint32_t i;

	for (i = 0; i < c->q_n; i++) {
		r = &c->q[(c->q_head + i) % PAGESRV_REPLY_CAP];
		if (r->len && !r->own && r->data < p + len &&
		    p < r->data + r->len)
			return true;
	}
	return false;
}

/*
 * A write of generation @wgen to [off, off + len) (inside the pool): 0 if
 * no segment under it saw a newer generation (they remember this one),
 * else ENOLCK: the write lease it was made under was taken over.
 */
static uint16_t pagesrv_wgen_check(struct pagesrv *s, const char *who,
				   uint64_t off, uint32_t len, uint64_t wgen)
{
	uint64_t first = off / MSG_POOL_SEG,
		 last = (off + len - 1) / MSG_POOL_SEG;

	if (last >= s->n_wgens)
		return 0;
	for (uint64_t i = first; i <= last; i++) {
		if (s->wgens[i] > wgen) {
			char why[160];

			snprintf(why, sizeof(why),
				 "write at %#" PRIx64 " of lease generation "
				 "%" PRIu64 " refused: generation %" PRIu64
				 " wrote there since",
				 off, wgen, s->wgens[i]);
			pagesrv_refusal_log(s, who, why);
			return ENOLCK;
		}
	}
	for (uint64_t i = first; i <= last; i++)
		s->wgens[i] = wgen;
	return 0;
}

/* True if the active request's body is staged: secure, or a COH's page
 * (it goes to the pool only if the directory takes it). */
bool pagesrv_conn_is_staged(const struct pagesrv_conn *c)
{
	return c->wr_active && (c->sess || c->wr_op == WIRE_OP_COH);
}

/* Where the staged body's next byte goes. */
uint8_t *pagesrv_conn_stage_at(struct pagesrv_conn *c)
{
	return c->stage + c->wr_len + (c->sess ? AUTH_TAG_LEN : 0) - c->wr_left;
}

/*
 * Secure: a WRITE, GRANT or COH header (and a WRITE's generation, @g:
 * WIRE_WGEN_LEN bytes, or NULL); its body and tag are staged. Nothing but
 * its len is looked at before the record opens (pagesrv_conn_write_open(),
 * pagesrv_conn_grant_end()). Insecure, a COH's page alike, without a tag.
 * Returns 0 or -ENOMEM.
 */
int pagesrv_conn_stage(struct pagesrv_conn *c, const struct wire_hdr *h,
		       const uint8_t *g)
{
	uint32_t need = h->len + (c->sess ? AUTH_TAG_LEN : 0);
	uint8_t *p;

	if (c->stage_cap < need) {
		p = realloc(c->stage, need);
		if (!p) {
			log_err("%s: no memory to stage a write of %u bytes, "
				"closing",
				c->name, h->len);
			return -ENOMEM;
		}
		c->stage = p;
		c->stage_cap = need;
	}
	wire_hdr_pack(h, c->wr_hdr);
	c->wr_aad_len = WIRE_HDR_LEN;
	if (g) {
		memcpy(c->wr_hdr + WIRE_HDR_LEN, g, WIRE_WGEN_LEN);
		c->wr_aad_len += WIRE_WGEN_LEN;
	}
	c->wr_active = true;
	c->wr_op = h->op;
	c->wr_status = 0;
	c->wr_tag = h->tag;
	c->wr_off = h->arg;
	c->wr_len = h->len;
	c->wr_left = need;
	return 0;
}

/*
 * A WRITE header (and its generation, @g, or NULL): its len data bytes
 * follow, for the pool or to be dropped. Returns 0 (header taken,
 * c->wr_active), 1 if it has to wait for queued READ replies from its
 * range to go out first, -EPROTO for a len that says nothing trustworthy
 * about where the next header is, or -ENOMEM.
 */
int pagesrv_conn_on_write(struct pagesrv_conn *c, const struct wire_hdr *h,
			  const uint8_t *g)
{
	struct pagesrv *s = c->s;

	if (!h->len || h->len > WIRE_LEN_MAX) {
		char why[64];

		snprintf(why, sizeof(why), "write of %u bytes (1..%u), closing",
			 h->len, WIRE_LEN_MAX);
		pagesrv_refusal_log(s, c->name, why);
		return -EPROTO;
	}
	c->writer = true;
	if (c->sess)
		return pagesrv_conn_stage(c, h, g);
	c->wr_op = WIRE_OP_WRITE;
	c->wr_status = 0;
	if (c->fenced) {
		log_dbg("%s: write on a superseded connection refused",
			c->name);
		c->wr_status = EPIPE;
	} else if (pagesrv_conn_fenced_writing(c)) {
		return 1;
		/* written so that off + len cannot overflow */
	} else if (h->arg > s->pool_size || h->len > s->pool_size - h->arg) {
		log_dbg("%s: write of %u bytes at %#llx is outside the pool",
			c->name, h->len, (unsigned long long)h->arg);
		c->wr_status = ERANGE;
	} else if (pagesrv_conn_is_sending(c, s->pool + h->arg, h->len)) {
		return 1;
	} else if (pgfence_hit(s->fence, h->arg, h->len)) {
		log_dbg("%s: write at %#llx refused: a fenced replica", c->name,
			(unsigned long long)h->arg);
		c->wr_status = ESTALE;
	} else {
		c->wr_status =
			pagesrv_wgen_check(s, c->name, h->arg, h->len,
					   g ? wire_get(g, WIRE_WGEN_LEN) : 0);
		if (!c->wr_status)
			pgfence_note_write(s->fence, h->arg, h->len);
	}
	c->wr_active = true;
	c->wr_tag = h->tag;
	c->wr_off = h->arg;
	c->wr_len = h->len;
	c->wr_left = h->len;
	return 0;
}

/*
 * Secure: the active WRITE, its record opened, inside the gate when
 * @checked: its status, and its data into the pool if that is 0.
 */
uint16_t pagesrv_conn_write_apply(struct pagesrv_conn *c, bool checked)
{
	struct pagesrv *s = c->s;
	bool has_wgen = c->wr_aad_len > WIRE_HDR_LEN;
	uint64_t wgen =
		has_wgen ? wire_get(c->wr_hdr + WIRE_HDR_LEN, WIRE_WGEN_LEN)
			 : 0;
	uint16_t st;

	if (c->fenced) {
		log_dbg("%s: write on a superseded connection refused",
			c->name);
		return EPIPE;
	}
	/* written so that off + len cannot overflow */
	if (c->wr_off > s->pool_size || c->wr_len > s->pool_size - c->wr_off) {
		log_dbg("%s: write of %u bytes at %#llx is outside the pool",
			c->name, c->wr_len, (unsigned long long)c->wr_off);
		return ERANGE;
	}
	if (checked && !pagesrv_conn_is_granted(c, PGGRANT_WRITE, c->wr_off,
						c->wr_len, has_wgen, wgen))
		return EACCES;
	if (pgfence_hit(s->fence, c->wr_off, c->wr_len)) {
		log_dbg("%s: write at %#llx refused: a fenced replica", c->name,
			(unsigned long long)c->wr_off);
		return ESTALE;
	}
	/* A coherent region's page written to a replica of it (generation
	 * 1: such a region has no lease, docs/design.md "Coherent regions of
	 * two replicas"): no lease generation to hold against it, nor to
	 * leave behind (leases are numbered from the wall clock in ms, so
	 * 1 is no lease's; checked: under the region's coherent grants). */
	if (has_wgen && wgen == 1 &&
	    (!checked ||
	     pagesrv_conn_is_granted(c, PGGRANT_COH_WRITE, c->wr_off, c->wr_len,
				     false, 0)))
		st = 0;
	else /* checked: a generation only a grant carried */
		st = pagesrv_wgen_check(s, c->name, c->wr_off, c->wr_len, wgen);
	if (!st)
		pgfence_pool_write(s->fence, s->pool, c->wr_off, c->stage,
				   c->wr_len);
	return st;
}
