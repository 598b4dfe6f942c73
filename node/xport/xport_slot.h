/* SPDX-License-Identifier: MIT */
/*
 * A transport peer's request slots, the same for every transport: a fixed
 * table with a free list, the FIFO of requests accepted while the peer
 * connects, completion exactly once (statistics, then the done callback)
 * and failing every outstanding request once.
 *
 *   FREE --take--> TAKEN --queue--> QUEUED --dequeue, sent--> SENT
 *     ^              |  \----------------sent-----------------^ |
 *     +-----put------+                                          |
 *     +---------finish (done once) <-- QUEUED, SENT, FAILING <--+
 *                                            (fail marks them FAILING)
 *
 * A slot index and its generation make the request's wire tag (tcp) or
 * work request id (verbs): generation << 32 | index.
 */
#ifndef NODE_XPORT_SLOT_H
#define NODE_XPORT_SLOT_H

#include <stdbool.h>
#include <stdint.h>

#include "xport.h"

#define XPORT_SLOT_NIL UINT32_MAX

enum xport_slot_op {
	XPORT_SLOT_READ = 0,
	XPORT_SLOT_WRITE,
	/* a coherence message (tcp, xport_ops.coh): not counted in the
	 * stats, and so never awaited by the stall watch (a home answers a
	 * request once other hosts gave their copies up) */
	XPORT_SLOT_COH,
};

enum xport_slot_state {
	XPORT_SLOT_FREE = 0,
	XPORT_SLOT_TAKEN,   /* by the caller, neither queued nor sent yet */
	XPORT_SLOT_QUEUED,  /* accepted while CONNECTING, not sent yet */
	XPORT_SLOT_SENT,    /* on the wire / posted: its answer is awaited */
	XPORT_SLOT_FAILING, /* marked by xport_slots_fail(), not done yet */
};

struct xport_slot {
	enum xport_slot_state state;
	enum xport_slot_op op;
	bool sent; /* was sent: counts in the totals (failed too) */
	bool held; /* answered; the transport holds its done back */
	uint32_t len;
	uint32_t gen;  /* high half of the tag: catches stray answers */
	uint32_t next; /* free list or queue link */
	int status;    /* while FAILING or held */
	uint64_t off;
	uint64_t tag;  /* the caller's */
	uint64_t wgen; /* a write's write-lease generation (TCP sends it) */
	uint8_t coh;   /* XPORT_SLOT_COH: its type (wire.h WIRE_COH_*) */
	void *buf;     /* a read's dst, a write's src */
	uint64_t aux;  /* the transport's own */
};

struct xport_slots {
	xport_done_fn done;
	void *arg;
	/* called for a slot whose aux is not 0 as it is freed (the
	 * transport's per-request resources), before done; NULL: none */
	void (*release)(struct xport_slot *s);
	/* totals shared by several peers (relaxed atomics), or NULL */
	struct xport_stats *tot;
	uint32_t depth;
	uint32_t free_head;
	uint32_t q_head, q_tail; /* QUEUED slots, FIFO */
	struct xport_stats st;
	struct xport_slot *v;
};

/*
 * Allocates @depth free slots whose requests complete through
 * @done(@arg, ...), counted in the slots' own stats and, if @tot is not
 * NULL, in *@tot too. Returns 0, -EINVAL for a @depth of 0 or not below
 * XPORT_SLOT_NIL, or -ENOMEM.
 */
int xport_slots_init(struct xport_slots *ss, uint32_t depth, xport_done_fn done,
		     void *arg, struct xport_stats *tot);
/* Frees the table; outstanding requests are forgotten (done is not
 * called): fail them first. */
void xport_slots_fini(struct xport_slots *ss);

/* What read() and write() answer for their arguments: -EINVAL unless @len
 * is a multiple of XPORT_PAGE in (0, XPORT_LEN_MAX] and @buf is set. */
int xport_slots_check_len(uint32_t len, const void *buf);
/* ... and for the peer, before taking a slot: -ENOTCONN if it is closed or
 * DOWN, -ESTALE if it is STALE, 0 (CONNECTING or UP). */
int xport_slots_check_peer(enum xport_peer_state st, bool closed);

/*
 * Takes a free slot for a request (a new generation) and returns its
 * index, or XPORT_SLOT_NIL if every slot is busy. The caller queues it,
 * marks it sent or puts it back before anything else touches the slots.
 */
uint32_t xport_slots_take(struct xport_slots *ss, enum xport_slot_op op,
			  uint64_t off, uint32_t len, void *buf, uint64_t tag);
/* Gives back a slot that was taken and then not accepted: no done. */
void xport_slots_put(struct xport_slots *ss, uint32_t idx);
/* Accepts a taken slot while the peer connects: it joins the FIFO. */
void xport_slots_queue(struct xport_slots *ss, uint32_t idx);
/* The oldest queued slot, off the FIFO (still QUEUED: the caller sends or
 * finishes it), or XPORT_SLOT_NIL. */
uint32_t xport_slots_dequeue(struct xport_slots *ss);
/* A taken (then accepted) or dequeued slot went out on the wire. */
void xport_slots_sent(struct xport_slots *ss, uint32_t idx);

/*
 * Frees slot @idx, counts it and calls done with @status, exactly once.
 * done may post new requests or fail the rest: whatever holds @ss (the
 * peer) must stay alive across the call.
 */
void xport_slots_finish(struct xport_slots *ss, uint32_t idx, int status);

/*
 * Fails every outstanding request exactly once: queued ones with
 * @queued_status, sent ones with @sent_status (0: they are left alone).
 * Slots are marked first, so requests posted by the done callbacks are
 * not touched; the queue is emptied. As with finish, the holder of @ss
 * stays alive across the callbacks.
 */
void xport_slots_fail(struct xport_slots *ss, int queued_status,
		      int sent_status);

/* True if a slot is queued. */
bool xport_slots_have_queued(const struct xport_slots *ss);

#endif
