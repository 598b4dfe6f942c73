/* SPDX-License-Identifier: MIT */
/*
 * TCP page-server wire format: fixed 24-byte big-endian headers with a
 * version byte. Packed and unpacked field by field, never as host structs.
 *
 *   request  0 version | 1 op | 2-3 flags | 4-7 len | 8-15 tag | 16-23 off
 *   reply    0 version | 1 op | 2-3 status| 4-7 len | 8-15 tag | 16-23 aux
 *
 * HELLO: the client sends off = the owner instance it expects (0 = any),
 *        tag = its own id (its agent instance; 0 = none) and len = the
 *        generation of this connection of that client (1, 2, ...; 0 =
 *        none); the server replies status 0, tag echoed and aux = its
 *        instance, or ESTALE. A connection of a client with a newer
 *        generation fences its older ones: their WRITEs get EPIPE (they
 *        may carry bytes older than what the client sends again on the
 *        newer one), and the newer one's WRITEs wait for a WRITE still
 *        landing from an older one.
 * READ:  len bytes (1..WIRE_LEN_MAX) at pool offset off; the reply carries
 *        status 0 and len bytes of data, or a status errno and no data.
 * WRITE: len bytes (1..WIRE_LEN_MAX) of data follow the header, for pool
 *        offset off; the reply (len 0) carries status 0 once the bytes are
 *        in the owner's pool, or a status errno (nothing was written; the
 *        data bytes were read and dropped, the stream stays in step).
 *        With flag WIRE_F_WGEN an 8-byte big-endian write-lease generation
 *        comes between the header and the data (not counted in len;
 *        secure: authenticated with the header, as its additional data);
 *        without it the generation is 0. The owner remembers the newest
 *        generation written to each 2 MiB segment of its pool and refuses
 *        an older one with ENOLCK: the writer's lease was taken over.
 * GRANT: len bytes (a multiple of WIRE_GRANT_LEN, 1..WIRE_LEN_MAX) of
 *        sealed grants follow (common/auth/grant.h); the reply (len 0)
 *        carries status 0 once every one was taken for this connection, or
 *        the errno of the first refused (each is taken on its own). An
 *        owner that checks grants answers READ and WRITE outside this
 *        connection's grants EACCES; a WRITE must carry the generation of
 *        a write grant covering it.
 * COH:   a message of the coherence protocol of a coherent region's page
 *        (node/coherent/coh.h) from a host to the page's home (this
 *        owner): flags = its type (WIRE_COH_GETS ... WIRE_COH_RECALL_ACK,
 *        WIRE_COH_WB; a GETM's bits 8-15: the run, below), off = the
 *        page's pool offset, len = WIRE_COH_PAGE
 *        for the types that carry the page (PUTM, RECALL_ACK, WB) and 0
 *        for the others; the page follows the header as a WRITE's data
 *        does. One reply each, when the home has taken it (a request the
 *        home keeps while it waits for other hosts is answered later,
 *        replies are matched by tag): status 0 or errno, aux = the
 *        reply's type (WIRE_COH_DATA_S or WIRE_COH_DATA_M with the page,
 *        len WIRE_COH_PAGE; PUT_ACK or ACK, len 0). A GETM with a run of
 *        n (1..WIRE_COH_RUN_MAX) asks for the n pages after the page too,
 *        as far as the home holds them alone: its DATA_M carries the page
 *        and the first k of them it granted (len (1 + k) pages, 0 <= k
 *        <= n; the rest stay the home's). A host is its
 *        connection (the first COH on a connection makes it one): its
 *        copies go with it, and a newer connection of the same peer and
 *        client resets what the home had for the older one.
 * COH_PUSH: home -> host only, on the connection the host's COH came on,
 *        tag 0, len 0, status = WIRE_COH_INV, WIRE_COH_RECALL_S or
 *        WIRE_COH_RECALL_M, aux = the page's pool offset; answered with a
 *        COH INV_ACK or RECALL_ACK request.
 */
#ifndef COMMON_WIRE_H
#define COMMON_WIRE_H

#include <stdint.h>

/* 2: grants (GRANT; READ and WRITE need one when the owner checks) */
#define WIRE_VERSION 2
#define WIRE_HDR_LEN 24
#define WIRE_LEN_MAX (1u << 20)

enum wire_op {
	WIRE_OP_HELLO = 1,
	WIRE_OP_READ = 2,
	WIRE_OP_WRITE = 3,
	WIRE_OP_GRANT = 4,
	WIRE_OP_COH = 5,
	WIRE_OP_COH_PUSH = 6,
};

/* COH types (host -> home: flags of a request; home -> host: aux of a
 * reply, status of a push) */
enum wire_coh {
	WIRE_COH_GETS = 1,
	WIRE_COH_GETM = 2,
	WIRE_COH_PUTM = 3, /* the page follows */
	WIRE_COH_PUTS = 4,
	WIRE_COH_INV_ACK = 5,
	WIRE_COH_RECALL_ACK = 6, /* the page follows */
	WIRE_COH_DATA_S = 7,	 /* reply: the page follows */
	WIRE_COH_DATA_M = 8,	 /* reply: the page follows */
	WIRE_COH_PUT_ACK = 9,	 /* reply */
	WIRE_COH_ACK = 10,	 /* reply to PUTS, INV_ACK, RECALL_ACK */
	WIRE_COH_INV = 11,	 /* push */
	WIRE_COH_RECALL_S = 12,	 /* push */
	WIRE_COH_RECALL_M = 13,	 /* push */
	WIRE_COH_WB = 14, /* host -> home: the page follows; it keeps it */
};
#define WIRE_COH_PAGE 4096u
/* COH GETM: flags bits 8-15, the pages after it asked for too (a run) */
#define WIRE_COH_RUN_SHIFT   8
#define WIRE_COH_RUN_MAX     63u
#define WIRE_COH_TYPE(flags) ((unsigned int)(flags)&0xffu)
#define WIRE_COH_RUN(flags)  ((unsigned int)(flags) >> WIRE_COH_RUN_SHIFT)

/* GRANT flags: the grants are given back (dropped from the session) */
#define WIRE_F_GRANT_DROP 0x1u
/* GRANT: len is a multiple of this (the sealed grants, grant.h) */
#define WIRE_GRANT_LEN 168u

/* WRITE flags */
#define WIRE_F_WGEN   0x1u /* a write-lease generation follows the header */
#define WIRE_WGEN_LEN 8u

struct wire_hdr {
	uint8_t version;
	uint8_t op;
	uint16_t flags_status; /* flags in requests, status in replies */
	uint32_t len;
	uint64_t tag;
	uint64_t arg; /* off in requests, aux in replies */
};

static inline void wire_put16(uint8_t *p, uint16_t v)
{
	p[0] = v >> 8;
	p[1] = v;
}

static inline void wire_put32(uint8_t *p, uint32_t v)
{
	for (int i = 3; i >= 0; i--, v >>= 8)
		p[i] = v;
}

static inline void wire_put64(uint8_t *p, uint64_t v)
{
	for (int i = 7; i >= 0; i--, v >>= 8)
		p[i] = v;
}

static inline uint64_t wire_get(const uint8_t *p, int n)
{
	uint64_t v = 0;

	for (int i = 0; i < n; i++)
		v = (v << 8) | p[i];
	return v;
}

static inline void wire_hdr_pack(const struct wire_hdr *h,
				 uint8_t b[WIRE_HDR_LEN])
{
	b[0] = h->version;
	b[1] = h->op;
	wire_put16(b + 2, h->flags_status);
	wire_put32(b + 4, h->len);
	wire_put64(b + 8, h->tag);
	wire_put64(b + 16, h->arg);
}

static inline void wire_hdr_unpack(const uint8_t b[WIRE_HDR_LEN],
				   struct wire_hdr *h)
{
	h->version = b[0];
	h->op = b[1];
	h->flags_status = (uint16_t)wire_get(b + 2, 2);
	h->len = (uint32_t)wire_get(b + 4, 4);
	h->tag = wire_get(b + 8, 8);
	h->arg = wire_get(b + 16, 8);
}

#endif
