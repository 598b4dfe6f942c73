// SPDX-License-Identifier: MIT
/* The coherence state machines of a page's home and of a host's copy
 * (coh.h). */
#include "coh.h"

#include <string.h>

static void coh_emit(struct coh_out *out, enum coh_msg_type t, uint32_t from,
		     uint32_t to, int has_data, uint64_t data)
{
	struct coh_msg *m;

	if (out->n == COH_OUT_MAX)
		return; /* cannot be: one message per host, and one more */
	m = &out->m[out->n++];
	memset(m, 0, sizeof(*m));
	m->type = t;
	m->from = from;
	m->to = to;
	m->has_data = has_data;
	m->data = data;
}

static uint64_t coh_bit(uint32_t host)
{
	return UINT64_C(1) << (host % COH_HOSTS_MAX);
}

void coh_dir_init(struct coh_dir *d, uint64_t data)
{
	memset(d, 0, sizeof(*d));
	d->state = COH_DIR_UNOWNED;
	d->data = data;
}

void coh_host_init(struct coh_host *h, uint32_t id)
{
	memset(h, 0, sizeof(*h));
	h->id = id;
	h->state = COH_I;
}

/* The request of d->req is answered: the page goes to it, shared or
 * modified, with the home's copy (the latest: a recall brought it back). */
static void coh_home_grant(struct coh_dir *d, uint32_t home,
			   struct coh_out *out)
{
	if (d->req_type == COH_GETS && !d->req_m) {
		if (d->state != COH_DIR_SHARED)
			d->sharers = 0;
		d->state = COH_DIR_SHARED;
		d->sharers |= coh_bit(d->req);
		coh_emit(out, COH_DATA_S, home, d->req, 1, d->data);
	} else {
		d->state = COH_DIR_MODIFIED;
		d->owner = d->req;
		d->sharers = 0;
		d->last_writer = d->req;
		d->has_writer = 1;
		coh_emit(out, COH_DATA_M, home, d->req, 1, d->data);
	}
	d->busy = 0;
	d->acks = 0;
	d->req_m = 0;
}

/* GETS or GETM of @r, the home not busy. */
static int coh_home_request(struct coh_dir *d, uint32_t home, uint32_t r,
			    enum coh_msg_type t, struct coh_out *out)
{
	uint64_t others;

	d->req = r;
	d->req_type = t;
	/* a read miss on a migratory page is granted modified, unless
	 * others share it (read-mostly again) */
	d->req_m = t == COH_GETS && d->migratory && d->state != COH_DIR_SHARED;
	switch (d->state) {
	case COH_DIR_UNOWNED:
		coh_home_grant(d, home, out);
		return COH_OK;
	case COH_DIR_SHARED:
		others = d->sharers & ~coh_bit(r);
		/* read, then written, where another host wrote it last:
		 * migratory */
		if (t == COH_GETM && (d->sharers & coh_bit(r)) &&
		    d->has_writer && d->last_writer != r &&
		    others == coh_bit(d->last_writer))
			d->migratory = 1;
		if (t == COH_GETS || !others) {
			coh_home_grant(d, home, out);
			return COH_OK;
		}
		/* Every other copy goes before the writer may write. */
		d->busy = 1;
		for (uint32_t h = 0; h < COH_HOSTS_MAX; h++) {
			if (others & coh_bit(h)) {
				coh_emit(out, COH_INV, home, h, 0, 0);
				d->acks++;
			}
		}
		return COH_OK;
	case COH_DIR_MODIFIED:
		/* (FIFO: the owner's PUTM would have come first) */
		if (d->owner == r)
			return COH_EPROTO;
		d->busy = 1;
		d->acks = 1;
		coh_emit(out,
			 t == COH_GETS && !d->req_m ? COH_RECALL_S
						    : COH_RECALL_M,
			 home, d->owner, 0, 0);
		return COH_OK;
	}
	return COH_EPROTO;
}

int coh_home_on(struct coh_dir *d, uint32_t home, const struct coh_msg *in,
		struct coh_out *out)
{
	int kept;

	switch (in->type) {
	case COH_GETS:
	case COH_GETM:
		if (d->busy)
			return COH_DEFER;
		return coh_home_request(d, home, in->from, in->type, out);
	case COH_PUTM:
		/* Busy with a recall of this very owner: it answers that
		 * with the page all the same; its PUTM is stale after. */
		if (d->busy)
			return COH_DEFER;
		if (d->state == COH_DIR_MODIFIED && d->owner == in->from) {
			if (!in->has_data)
				return COH_EPROTO;
			d->data = in->data;
			d->state = COH_DIR_UNOWNED;
		}
		coh_emit(out, COH_PUT_ACK, home, in->from, 0, 0);
		return COH_OK;
	case COH_PUTS:
		if (d->busy)
			return COH_DEFER;
		d->sharers &= ~coh_bit(in->from);
		if (d->state == COH_DIR_SHARED && !d->sharers)
			d->state = COH_DIR_UNOWNED;
		return COH_OK;
	case COH_WB:
		/* The owner's bytes (a recall of it may be under way: its
		 * answer comes after, newer); from another, stale. Never
		 * kept: nothing waits on it. */
		if (!in->has_data)
			return COH_EPROTO;
		if (d->state == COH_DIR_MODIFIED && d->owner == in->from)
			d->data = in->data;
		return COH_OK;
	case COH_INV_ACK:
		if (!d->busy || d->req_type != COH_GETM ||
		    d->state != COH_DIR_SHARED || !d->acks)
			return COH_EPROTO;
		if (!--d->acks)
			coh_home_grant(d, home, out);
		return COH_OK;
	case COH_RECALL_ACK:
		if (!d->busy || d->state != COH_DIR_MODIFIED ||
		    in->from != d->owner || !in->has_data)
			return COH_EPROTO;
		/* The old owner keeps a shared copy of a RECALL_S (or is
		 * leaving: a stale bit, whose INV it acknowledges); a
		 * RECALL_M's it dropped. */
		kept = d->req_type == COH_GETS && !d->req_m;
		/* A migratory page back unchanged: its holder only read
		 * it; readers share it again. */
		if (d->req_m && in->data == d->data) {
			d->migratory = 0;
			d->req_m = 0;
		}
		d->data = in->data;
		d->state = COH_DIR_SHARED;
		d->sharers = kept ? coh_bit(in->from) : 0;
		coh_home_grant(d, home, out);
		return COH_OK;
	default:
		return COH_EPROTO;
	}
}

int coh_host_access(struct coh_host *h, uint32_t home, int write,
		    uint64_t *value, struct coh_out *out)
{
	switch (h->state) {
	case COH_M:
		if (write)
			h->data = *value;
		else
			*value = h->data;
		return COH_OK;
	case COH_S:
	case COH_SM_D: /* its copy is good until an INV comes */
		if (!write) {
			*value = h->data;
			return COH_OK;
		}
		if (h->state == COH_SM_D)
			return COH_WAIT;
		h->state = COH_SM_D;
		break;
	case COH_I:
		h->state = write ? COH_IM_D : COH_IS_D;
		break;
	default:
		return COH_WAIT;
	}
	h->pend_write = write;
	h->pend_value = write ? *value : 0;
	coh_emit(out, write ? COH_GETM : COH_GETS, h->id, home, 0, 0);
	return COH_MISS;
}

/* DATA_S or DATA_M for the request of @h. */
static int coh_host_data(struct coh_host *h, const struct coh_msg *in,
			 int *granted)
{
	if (!in->has_data)
		return COH_EPROTO;
	if (in->type == COH_DATA_S && h->state == COH_IS_D) {
		h->state = COH_S;
	} else if (in->type == COH_DATA_M &&
		   (h->state == COH_IM_D || h->state == COH_SM_D ||
		    h->state == COH_IS_D)) {
		/* (a read miss granted modified: migratory) */
		h->state = COH_M;
	} else {
		return COH_EPROTO;
	}
	h->data = in->data;
	if (h->pend_write)
		h->data = h->pend_value;
	h->pend_write = 0;
	*granted = 1;
	return COH_OK;
}

int coh_host_on(struct coh_host *h, uint32_t home, const struct coh_msg *in,
		struct coh_out *out, int *granted)
{
	*granted = 0;
	switch (in->type) {
	case COH_DATA_S:
	case COH_DATA_M:
		return coh_host_data(h, in, granted);
	case COH_INV:
		if (h->state == COH_M)
			return COH_EPROTO;
		if (h->state == COH_S)
			h->state = COH_I;
		else if (h->state == COH_SM_D)
			h->state = COH_IM_D;
		/* (I, IS_D, IM_D, MI_A: a stale sharer bit) */
		coh_emit(out, COH_INV_ACK, h->id, home, 0, 0);
		return COH_OK;
	case COH_RECALL_S:
	case COH_RECALL_M:
		if (h->state != COH_M && h->state != COH_MI_A)
			return COH_EPROTO;
		coh_emit(out, COH_RECALL_ACK, h->id, home, 1, h->data);
		if (h->state == COH_M)
			h->state = in->type == COH_RECALL_S ? COH_S : COH_I;
		return COH_OK;
	case COH_PUT_ACK:
		if (h->state != COH_MI_A)
			return COH_EPROTO;
		h->state = COH_I;
		return COH_OK;
	default:
		return COH_EPROTO;
	}
}

int coh_host_evict(struct coh_host *h, uint32_t home, struct coh_out *out)
{
	switch (h->state) {
	case COH_I:
		return COH_OK;
	case COH_S:
		coh_emit(out, COH_PUTS, h->id, home, 0, 0);
		h->state = COH_I;
		return COH_OK;
	case COH_M:
		coh_emit(out, COH_PUTM, h->id, home, 1, h->data);
		h->state = COH_MI_A;
		return COH_OK;
	default:
		return COH_WAIT;
	}
}

int coh_host_wb(struct coh_host *h, uint32_t home, struct coh_out *out)
{
	if (h->state == COH_M)
		coh_emit(out, COH_WB, h->id, home, 1, h->data);
	return COH_OK;
}

const char *coh_msg_name(enum coh_msg_type t)
{
	static const char *const n[] = {
		[COH_GETS] = "GETS",
		[COH_GETM] = "GETM",
		[COH_PUTM] = "PUTM",
		[COH_PUTS] = "PUTS",
		[COH_INV_ACK] = "INV_ACK",
		[COH_RECALL_ACK] = "RECALL_ACK",
		[COH_WB] = "WB",
		[COH_DATA_S] = "DATA_S",
		[COH_DATA_M] = "DATA_M",
		[COH_INV] = "INV",
		[COH_RECALL_S] = "RECALL_S",
		[COH_RECALL_M] = "RECALL_M",
		[COH_PUT_ACK] = "PUT_ACK",
	};

	return (unsigned int)t < sizeof(n) / sizeof(n[0]) && n[t] ? n[t] : "?";
}

const char *coh_host_state_name(enum coh_host_state s)
{
	static const char *const n[] = {
		[COH_I] = "I",	     [COH_S] = "S",	  [COH_M] = "M",
		[COH_IS_D] = "IS_D", [COH_IM_D] = "IM_D", [COH_SM_D] = "SM_D",
		[COH_MI_A] = "MI_A",
	};

	return (unsigned int)s < sizeof(n) / sizeof(n[0]) && n[s] ? n[s] : "?";
}
