/* SPDX-License-Identifier: MIT */
/*
 * Page-granular coherence for regions that several hosts write at once: the
 * state machines of a page's home (its directory) and of a host's copy, as
 * pure functions (coh.c). No socket, uffd or memfd: a caller feeds them the
 * messages it receives and sends the ones they emit; tests/unit/test_coh.c
 * runs them against each other with every delivery order it draws and
 * checks that at most one host may write a page, that none may read it
 * then, and that every read sees the last write. Not wired to a region yet
 * (docs/design.md, "Coherent regions").
 *
 * The protocol is MSI with a blocking home: a page's home serves one
 * request at a time; one that comes while it waits for acknowledgements is
 * kept (coh_home_on() says COH_DEFER) and given again once it is done.
 * Channels are FIFO per pair of hosts (TCP).
 *
 * Migratory pages: a page one host reads and then writes after another
 * host wrote it (the upgrade of a copy whose only other holder is its
 * last writer) is marked migratory, and a read miss on it is granted
 * modified (DATA_M to a GETS: the owner's copy recalled with RECALL_M),
 * so that a page that moves from host to host, read then written there,
 * moves once a turn instead of twice. A recall that brings the page back
 * unchanged (its holder only read it) unmarks it: readers share it again.
 *
 *   host -> home   GETS (read miss), GETM (write miss or upgrade from S),
 *                  PUTM (eviction of M: the data), PUTS (eviction of S),
 *                  INV_ACK, RECALL_ACK (the data, if it had it), WB
 *                  (a write-back of M: the data; it keeps M)
 *   home -> host   DATA_S, DATA_M (the page, granted shared or
 *                  modified), INV (drop a shared copy), RECALL_S and
 *                  RECALL_M (give the page back, keep it shared / drop
 *                  it), PUT_ACK
 */
#ifndef NODE_COHERENT_COH_H
#define NODE_COHERENT_COH_H

#include <stdint.h>

#define COH_HOSTS_MAX 64 /* sharers are a bit mask */

/* A host's copy of a page: stable states, and the transient ones while a
 * request of its own is answered (the letters: from, to, waiting for
 * Data / Acks). */
enum coh_host_state {
	COH_I,	  /* no copy */
	COH_S,	  /* a copy it may read */
	COH_M,	  /* the only copy; it may read and write */
	COH_IS_D, /* GETS sent, waits for DATA_S (or DATA_M: migratory) */
	COH_IM_D, /* GETM sent, waits for DATA_M */
	COH_SM_D, /* GETM sent from S (still readable), waits for DATA_M */
	COH_MI_A, /* PUTM sent, waits for PUT_ACK */
};

enum coh_msg_type {
	COH_GETS,
	COH_GETM,
	COH_PUTM,
	COH_PUTS,
	COH_INV_ACK,
	COH_RECALL_ACK,
	COH_WB,
	COH_DATA_S,
	COH_DATA_M,
	COH_INV,
	COH_RECALL_S,
	COH_RECALL_M,
	COH_PUT_ACK,
};

struct coh_msg {
	enum coh_msg_type type;
	uint32_t from, to; /* host ids, < COH_HOSTS_MAX */
	int has_data;
	uint64_t data; /* the page's bytes, in a model: a version */
};

/* What one step emits: at most one message per host, and one more. */
#define COH_OUT_MAX (COH_HOSTS_MAX + 1)
struct coh_out {
	struct coh_msg m[COH_OUT_MAX];
	unsigned int n;
};

/* The home's directory entry of a page. */
enum coh_dir_state {
	COH_DIR_UNOWNED, /* the home's copy is the page */
	COH_DIR_SHARED,	 /* read-only copies at the sharers */
	COH_DIR_MODIFIED /* the owner's copy is the page */
};
struct coh_dir {
	enum coh_dir_state state;
	uint64_t sharers; /* bit per host (SHARED; a stale bit is harmless) */
	uint32_t owner;	  /* MODIFIED */
	uint64_t data;	  /* the home's copy */
	/* busy: a request of host req (GETS or GETM) waits for acks */
	int busy;
	enum coh_msg_type req_type;
	uint32_t req;
	unsigned int acks;
	/* migratory (see above); the host granted it modified last
	 * (has_writer); the request served is a GETS granted modified */
	int migratory, has_writer, req_m;
	uint32_t last_writer;
};

/* A host's copy of a page. */
struct coh_host {
	uint32_t id;
	enum coh_host_state state;
	uint64_t data;
	/* a write waiting for its DATA_M: done when it comes */
	int pend_write;
	uint64_t pend_value;
};

/* The results of the calls below. */
#define COH_OK	   0
#define COH_DEFER  1  /* home busy: give this request again later */
#define COH_MISS   2  /* access: a request was emitted, wait for it */
#define COH_WAIT   3  /* access: a request of its own is pending */
#define COH_EPROTO -1 /* a message the state cannot take */

/* A fresh page at @home: the home's copy holds @data. */
void coh_dir_init(struct coh_dir *d, uint64_t data);
void coh_host_init(struct coh_host *h, uint32_t id);

/*
 * The home takes message @in (sent to it; @home is its host id). Emits its
 * answers into @out (appended). Returns COH_OK, COH_DEFER (a request while
 * busy: nothing changed) or COH_EPROTO.
 */
int coh_home_on(struct coh_dir *d, uint32_t home, const struct coh_msg *in,
		struct coh_out *out);

/*
 * Host @h reads (@write 0) or writes @value (@write 1) the page. COH_OK:
 * done (*@value holds what was read); COH_MISS: a GETS or GETM to @home
 * is in @out, the access completes when its data comes (coh_host_on()
 * says so); COH_WAIT: a request of its own is pending, try later.
 */
int coh_host_access(struct coh_host *h, uint32_t home, int write,
		    uint64_t *value, struct coh_out *out);

/*
 * Host @h takes message @in. Emits its answers into @out. Returns COH_OK,
 * or COH_EPROTO. *@granted is set when a request of its own was answered
 * (it may now read, or write if in M).
 */
int coh_host_on(struct coh_host *h, uint32_t home, const struct coh_msg *in,
		struct coh_out *out, int *granted);

/* Host @h drops its copy (cache pressure): PUTM with the data from M,
 * PUTS from S. COH_OK (also when it had none), or COH_WAIT. */
int coh_host_evict(struct coh_host *h, uint32_t home, struct coh_out *out);

/* Host @h writes its modified copy back and keeps it (WB with the data;
 * nothing in any other state). COH_OK. */
int coh_host_wb(struct coh_host *h, uint32_t home, struct coh_out *out);

const char *coh_msg_name(enum coh_msg_type t);
const char *coh_host_state_name(enum coh_host_state s);

#endif
