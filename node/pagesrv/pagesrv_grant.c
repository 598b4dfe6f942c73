// SPDX-License-Identifier: MIT
/*
 * The page server: grants a client presents, taken or refused, and the check of each
 * request against them.
 */
#define LOG_PREFIX "pagesrv: "
#include "pagesrv_int.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/uio.h>

#include "auth.h"
#include "grant.h"
#include "pggrant.h"
#include "wire.h"

/* True if requests of @c are checked against its grants. */
bool pagesrv_conn_is_checked(const struct pagesrv_conn *c)
{
	return c->s->grant_on && c->sess;
}

/*
 * A READ (@need PGGRANT_READ), a WRITE of generation @wgen (PGGRANT_WRITE;
 * @has_wgen: one was sent) or a coherence message (PGGRANT_COH_READ, and
 * _WRITE for one that takes or gives back a page to write) of [off, off +
 * len), inside
 * the pool: true if the grants of @c cover it, else counted and logged
 * (EACCES). Inside the gate.
 */
bool pagesrv_conn_is_granted(struct pagesrv_conn *c, enum pggrant_need need,
			     uint64_t off, uint32_t len, bool has_wgen,
			     uint64_t wgen)
{
	struct pagesrv *s = c->s;
	char why[200];

	if ((need != PGGRANT_WRITE || has_wgen) &&
	    pggrant_tab_covers(&c->grants, s->floors, off, len, need, wgen,
			       grant_now_ms()))
		return true;
	pagesrv_count(&s->st_grant_refusals, 1);
	if (need == PGGRANT_READ)
		snprintf(why, sizeof(why),
			 "read of %u bytes at %#" PRIx64 " refused: not "
			 "inside this session's read grants (grants held: %u)",
			 len, off, c->grants.n);
	else if (need == PGGRANT_COH_READ || need == PGGRANT_COH_WRITE)
		snprintf(why, sizeof(why),
			 "coherence message for the page at %#" PRIx64
			 " refused: not inside this session's grants of a "
			 "coherent region%s (grants held: %u)",
			 off, need == PGGRANT_COH_WRITE ? " to write" : "",
			 c->grants.n);
	else if (!has_wgen)
		snprintf(why, sizeof(why),
			 "write of %u bytes at %#" PRIx64 " refused: it "
			 "carries no lease generation",
			 len, off);
	else
		snprintf(why, sizeof(why),
			 "write of %u bytes at %#" PRIx64 " of generation "
			 "%" PRIu64 " refused: not inside this session's "
			 "write grants of that generation (grants held: %u)",
			 len, off, wgen, c->grants.n);
	pagesrv_refusal_log(s, c->name, why);
	return false;
}

/*
 * The grants of the active GRANT, opened: each taken (or, with
 * WIRE_F_GRANT_DROP, given back) into the session's table on its own.
 * Returns 0, or the errno of the first refused; a grant under another
 * cluster key (EXDEV inside) or for another instance of this owner is
 * skipped, not refused, unless no grant of the record was taken.
 */
static uint16_t pagesrv_conn_grants_take(struct pagesrv_conn *c)
{
	struct pagesrv *s = c->s;
	uint32_t n = c->wr_len / WIRE_GRANT_LEN;
	uint64_t now = grant_now_ms();
	/* the header as it came (the record's additional data) */
	bool drop = wire_get(c->wr_hdr + 2, 2) & WIRE_F_GRANT_DROP;
	char why[160], swhy[160], what[240];
	uint32_t taken = 0, skipped = 0;
	int ret, first = 0, skip = 0;

	pggrant_tab_prune(&c->grants, now);
	for (uint32_t i = 0; i < n; i++) {
		const uint8_t *g = c->stage + (size_t)i * WIRE_GRANT_LEN;

		if (drop)
			ret = pggrant_drop(&c->grants, &s->gown,
					   pagesrv_conn_peer(c), g, why,
					   sizeof(why));
		else
			ret = pggrant_take(&c->grants, &s->gown,
					   pagesrv_conn_peer(c), g, now, why,
					   sizeof(why));
		if (!ret) {
			taken++;
			continue;
		}
		/* for another key or instance of ours: not this session's
		 * doing (a coordinator that does not know our key yet, an
		 * agent still holding a mapping of our last instance) */
		if (ret == -EXDEV || ret == -ESTALE) {
			if (!skipped++) {
				skip = ret == -EXDEV ? -EKEYREJECTED : ret;
				memcpy(swhy, why, sizeof(swhy));
			}
			continue;
		}
		pagesrv_count(&s->st_grant_refusals, 1);
		snprintf(what, sizeof(what), "grant %u of %u refused: %s",
			 i + 1, n, why);
		pagesrv_refusal_log(s, c->name, what);
		if (!first)
			first = ret;
	}
	if (!first && skipped && !taken) {
		pagesrv_count(&s->st_grant_refusals, 1);
		snprintf(what, sizeof(what), "%u grants refused: %s", skipped,
			 swhy);
		pagesrv_refusal_log(s, c->name, what);
		first = skip;
	}
	return (uint16_t)-first;
}

/*
 * The active GRANT's grants (and tag) are in: secure, its record opens
 * (else -EBADMSG: the connection ends, nothing taken) and, checking, they
 * are taken; insecure, or not checking, they were dropped unseen. Its
 * reply is queued. Returns 0 or -errno.
 */
int pagesrv_conn_grant_end(struct pagesrv_conn *c)
{
	struct pagesrv *s = c->s;
	struct iovec v = { c->stage, c->wr_len };
	uint16_t st = 0;

	if (c->sess && auth_open(c->sess, c->wr_hdr, c->wr_aad_len, &v, 1,
				 c->stage + c->wr_len)) {
		pagesrv_conn_record_fail(c, "GRANT");
		return -EBADMSG;
	}
	c->wr_active = false;
	if (pagesrv_conn_is_checked(c))
		st = pagesrv_conn_grants_take(c);
	if (st)
		pagesrv_count(&s->st_errors, 1);
	return pagesrv_conn_reply(c, WIRE_OP_GRANT, st, 0, c->wr_tag, 0, NULL,
				  NULL);
}

int pagesrv_grant_floor(struct pagesrv *s, uint64_t off, uint64_t len,
			uint64_t epoch)
{
	return pggrant_floors_raise(s->floors, off, len, epoch);
}
