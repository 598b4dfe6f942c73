// SPDX-License-Identifier: MIT
/*
 * RDMA transport: the memory direct reads land in (mem_add: a cache
 * alias, an MR each with on-demand paging) and the MR a slot's aux names
 * (a mapping's, a window of the MR cache, or the read's own).
 */
#define LOG_PREFIX "xport_rdma: "
#include "xport_rdma_int.h"

#include <errno.h>
#include <stdlib.h>

#include "log.h"

uint32_t xport_rdma_aux_lkey(uint64_t aux)
{
	void *p = (void *)(uintptr_t)(aux & ~(uint64_t)XPORT_RDMA_MR_BITS);

	if (aux & XPORT_RDMA_MR_WIN)
		return ((struct xport_rdma_win *)p)->mr->lkey;
	return ((struct ibv_mr *)p)->lkey;
}

/* A direct read's own MR goes with it; a window loses a reference. */
void xport_rdma_aux_release(uint64_t aux, uint32_t len)
{
	void *p = (void *)(uintptr_t)(aux & ~(uint64_t)XPORT_RDMA_MR_BITS);
	int ret;

	if (aux & XPORT_RDMA_MR_SHARED)
		return;
	if (aux & XPORT_RDMA_MR_WIN) {
		xport_rdma_mrc_put(p);
		return;
	}
	ret = ibv_dereg_mr(p);
	if (ret)
		log_errno(-ret, "ibv_dereg_mr of a direct read's %u bytes",
			  len);
}

/* The mapping (mem_add) holding [d, d + len), or NULL. */
struct xport_rdma_mem *xport_rdma_mem_find(const struct xport_rdma *x,
					   uintptr_t d, uint32_t len)
{
	for (struct xport_rdma_mem *m = x->mems; m; m = m->next)
		if (d >= m->base && d - m->base <= m->len &&
		    len <= m->len - (d - m->base))
			return m;
	return NULL;
}

/*
 * With on-demand paging: one MR over a mapping's cache alias for its whole
 * life. It pins nothing; the NIC faults pages in as READs land, and a page
 * punched out of the memfd leaves the MR with it (MMU notifier). Without:
 * the alias is remembered; read_direct registers windows of it.
 */
int xport_rdma_mem_add(struct xport *xx, void *base, size_t len,
		       unsigned int flags)
{
	struct xport_rdma *x = xport_rdma_from(xx);
	struct xport_rdma_mem *m;
	int ret;

	/* (windows allocate pages ahead: not in a file a guest writes) */
	if (!base || !len ||
	    (!x->ctx->odp && (x->mrc.per_read || (flags & XPORT_MEM_WRITABLE))))
		return 0;
	m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	m->base = (uintptr_t)base;
	m->len = len;
	if (!x->ctx->odp) {
		m->next = x->mems;
		x->mems = m;
		return 0;
	}
	m->mr = ibv_reg_mr(x->ctx->pd, base, len,
			   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ON_DEMAND);
	if (!m->mr) {
		ret = errno ? -errno : -ENOMEM;
		log_errno(ret,
			  "%s: registering a %zu-byte cache mapping "
			  "(on-demand paging); its READs register per READ",
			  x->ctx->name, len);
		free(m);
		return ret;
	}
	__atomic_fetch_add(&x->ctx->mr_regs, 1, __ATOMIC_RELAXED);
	m->next = x->mems;
	x->mems = m;
	return 0;
}

void xport_rdma_mem_free(struct xport_rdma *x, struct xport_rdma_mem *m)
{
	int ret = m->mr ? ibv_dereg_mr(m->mr) : 0;

	if (ret)
		log_errno(ret, "%s: ibv_dereg_mr (a cache mapping)",
			  x->ctx->name);
	xport_rdma_mrc_drop_mem(&x->mrc, m);
	free(m);
}

int xport_rdma_mem_inval(struct xport *xx, void *base, uint64_t off,
			 uint64_t len, uint64_t *lo, uint64_t *hi)
{
	struct xport_rdma *x = xport_rdma_from(xx);

	for (struct xport_rdma_mem *m = x->mems; m; m = m->next)
		if (m->base == (uintptr_t)base)
			return m->mr ? 0
				     : xport_rdma_mrc_inval(&x->mrc, m, off,
							    len, lo, hi);
	return 0;
}

void xport_rdma_mem_del(struct xport *xx, void *base)
{
	struct xport_rdma *x = xport_rdma_from(xx);
	struct xport_rdma_mem **pm, *m;

	for (pm = &x->mems; (m = *pm); pm = &m->next) {
		if (m->base == (uintptr_t)base) {
			*pm = m->next;
			xport_rdma_mem_free(x, m);
			return;
		}
	}
}
