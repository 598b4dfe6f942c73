// SPDX-License-Identifier: MIT
/* Request slots of a transport peer: free list, connect queue, done once. */
#include "xport_slot.h"

#include <errno.h>
#include <stdlib.h>

#include "wire.h"

static void xport_slot_stat_add(uint64_t *v, uint64_t n)
{
	__atomic_fetch_add(v, n, __ATOMIC_RELAXED);
}

int xport_slots_init(struct xport_slots *ss, uint32_t depth, xport_done_fn done,
		     void *arg, struct xport_stats *tot)
{
	uint32_t i;

	if (!depth || depth >= XPORT_SLOT_NIL)
		return -EINVAL;
	ss->v = calloc(depth, sizeof(*ss->v));
	if (!ss->v)
		return -ENOMEM;
	ss->done = done;
	ss->arg = arg;
	ss->release = NULL;
	ss->tot = tot;
	ss->depth = depth;
	ss->free_head = 0;
	ss->q_head = ss->q_tail = XPORT_SLOT_NIL;
	for (i = 0; i < depth; i++)
		ss->v[i].next = i + 1 < depth ? i + 1 : XPORT_SLOT_NIL;
	return 0;
}

void xport_slots_fini(struct xport_slots *ss)
{
	free(ss->v);
	ss->v = NULL;
}

int xport_slots_check_len(uint32_t len, const void *buf)
{
	if (!len || len % XPORT_PAGE || len > XPORT_LEN_MAX || !buf)
		return -EINVAL;
	return 0;
}

int xport_slots_check_peer(enum xport_peer_state st, bool closed)
{
	if (closed)
		return -ENOTCONN;
	switch (st) {
	case XPORT_PEER_DOWN:
		return -ENOTCONN;
	case XPORT_PEER_STALE:
		return -ESTALE;
	case XPORT_PEER_CONNECTING:
	case XPORT_PEER_UP:
		break;
	}
	return 0;
}

uint32_t xport_slots_take(struct xport_slots *ss, enum xport_slot_op op,
			  uint64_t off, uint32_t len, void *buf, uint64_t tag)
{
	uint32_t idx = ss->free_head;
	struct xport_slot *s;

	if (idx == XPORT_SLOT_NIL)
		return XPORT_SLOT_NIL;
	s = &ss->v[idx];
	ss->free_head = s->next;
	s->state = XPORT_SLOT_TAKEN;
	s->op = op;
	s->off = off;
	s->len = len;
	s->buf = buf;
	s->tag = tag;
	s->gen++;
	s->next = XPORT_SLOT_NIL;
	return idx;
}

static void xport_slot_free(struct xport_slots *ss, uint32_t idx)
{
	struct xport_slot *s = &ss->v[idx];

	if (s->aux && ss->release)
		ss->release(s);
	s->aux = 0;
	s->state = XPORT_SLOT_FREE;
	s->sent = false;
	s->held = false;
	s->buf = NULL;
	s->next = ss->free_head;
	ss->free_head = idx;
}

void xport_slots_put(struct xport_slots *ss, uint32_t idx)
{
	xport_slot_free(ss, idx);
}

/* Counts a request the peer accepted: done will be called for it. */
static void xport_slot_accept(struct xport_slots *ss, struct xport_slot *s)
{
	if (s->op == XPORT_SLOT_COH)
		return;
	if (s->op == XPORT_SLOT_WRITE)
		ss->st.wposted++;
	else
		ss->st.posted++;
}

void xport_slots_queue(struct xport_slots *ss, uint32_t idx)
{
	struct xport_slot *s = &ss->v[idx];

	xport_slot_accept(ss, s);
	s->state = XPORT_SLOT_QUEUED;
	s->next = XPORT_SLOT_NIL;
	if (ss->q_tail == XPORT_SLOT_NIL)
		ss->q_head = idx;
	else
		ss->v[ss->q_tail].next = idx;
	ss->q_tail = idx;
}

uint32_t xport_slots_dequeue(struct xport_slots *ss)
{
	uint32_t idx = ss->q_head;

	if (idx == XPORT_SLOT_NIL)
		return idx;
	ss->q_head = ss->v[idx].next;
	if (ss->q_head == XPORT_SLOT_NIL)
		ss->q_tail = XPORT_SLOT_NIL;
	ss->v[idx].next = XPORT_SLOT_NIL;
	return idx;
}

bool xport_slots_have_queued(const struct xport_slots *ss)
{
	return ss->q_head != XPORT_SLOT_NIL;
}

void xport_slots_sent(struct xport_slots *ss, uint32_t idx)
{
	struct xport_slot *s = &ss->v[idx];

	if (s->state == XPORT_SLOT_TAKEN)
		xport_slot_accept(ss, s);
	s->state = XPORT_SLOT_SENT;
	s->sent = true;
	if (ss->tot && s->op != XPORT_SLOT_COH)
		xport_slot_stat_add(s->op == XPORT_SLOT_WRITE
					    ? &ss->tot->wposted
					    : &ss->tot->posted,
				    1);
}

/* Counts a request's end in @st (and, if @atomic, with atomics). */
static void xport_slot_count(struct xport_stats *st, const struct xport_slot *s,
			     int status, bool atomic)
{
	bool w = s->op == XPORT_SLOT_WRITE;
	uint64_t *ok = w ? &st->wcompleted : &st->completed;
	uint64_t *bytes = w ? &st->wbytes : &st->bytes;
	uint64_t *failed = w ? &st->wfailed : &st->failed;

	if (s->op == XPORT_SLOT_COH)
		return;
	if (!atomic) {
		if (status == 0) {
			(*ok)++;
			*bytes += s->len;
		} else {
			(*failed)++;
		}
		return;
	}
	if (status == 0) {
		xport_slot_stat_add(ok, 1);
		xport_slot_stat_add(bytes, s->len);
	} else if (s->sent) {
		/* the totals count what went out */
		xport_slot_stat_add(failed, 1);
	}
}

void xport_slots_finish(struct xport_slots *ss, uint32_t idx, int status)
{
	struct xport_slot *s = &ss->v[idx];
	uint64_t tag = s->tag;

	/* granted modified: the pages that came (xport_ops.coh) */
	if (!status && s->op == XPORT_SLOT_COH &&
	    (s->coh == WIRE_COH_DATA_M || s->coh == WIRE_COH_GETM))
		status = (int)(s->len / WIRE_COH_PAGE);
	xport_slot_count(&ss->st, s, status, false);
	if (ss->tot)
		xport_slot_count(ss->tot, s, status, true);
	xport_slot_free(ss, idx);
	ss->done(ss->arg, tag, status);
}

void xport_slots_fail(struct xport_slots *ss, int queued_status,
		      int sent_status)
{
	struct xport_slot *s;
	uint32_t i;

	for (i = 0; i < ss->depth; i++) {
		s = &ss->v[i];
		if (s->state == XPORT_SLOT_QUEUED)
			s->status = queued_status;
		else if (s->state == XPORT_SLOT_SENT && sent_status)
			s->status = sent_status;
		else
			continue;
		s->state = XPORT_SLOT_FAILING;
	}
	ss->q_head = ss->q_tail = XPORT_SLOT_NIL;
	for (i = 0; i < ss->depth; i++) {
		s = &ss->v[i];
		if (s->state == XPORT_SLOT_FAILING)
			xport_slots_finish(ss, i, s->status);
	}
}
