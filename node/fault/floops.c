// SPDX-License-Identifier: MIT
/* The agent's fault loops: fan-out of control calls, join of reports. */
#define LOG_PREFIX "agent: "
#include "floops.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "layout.h"
#include "log.h"

#define FLOOPS_DEFAULT_MAX 8

/* A flush sent to every loop, waiting for their parts. */
struct floops_join {
	uint64_t cookie;
	unsigned int left; /* loops yet to report */
	int err;
	char text[MSG_TEXT_MAX];
	struct floops_join *next;
};

struct floops {
	unsigned int n;
	struct floop *l[FLOOPS_MAX];
	int epfd; /* over the loops' done eventfds */
	/* the control thread's flushes, the session thread's tickets */
	pthread_mutex_t mu;
	struct floops_join *joins;
	int64_t seq;		  /* the last group ticket handed out */
	int64_t last[FLOOPS_MAX]; /* each loop's ticket for it */
	int64_t seq_done;	  /* known done */
};

unsigned int floops_default(void)
{
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	long n = cpus / 4;

	if (n < 1)
		return 1;
	return n > FLOOPS_DEFAULT_MAX ? FLOOPS_DEFAULT_MAX : (unsigned int)n;
}

int floops_create(const struct floop_cfg *cfg, unsigned int n,
		  struct floops **out)
{
	struct floop_cfg lc = *cfg;
	struct floops *g;
	int ret;

	if (n < 1 || n > FLOOPS_MAX)
		return -EINVAL;
	g = calloc(1, sizeof(*g));
	if (!g)
		return -ENOMEM;
	g->n = n;
	pthread_mutex_init(&g->mu, NULL);
	g->epfd = epoll_create1(EPOLL_CLOEXEC);
	if (g->epfd < 0) {
		ret = -errno;
		goto err;
	}
	/* The budgets, split: 0 stays "unbounded" (cache) or "default". */
	if (lc.cache_pages) {
		lc.cache_pages /= n;
		if (!lc.cache_pages)
			lc.cache_pages = 1;
	}
	if (n > 1) {
		lc.slots = (lc.slots ? lc.slots : 512) / n;
		if (lc.slots < 16)
			lc.slots = 16;
	}
	for (unsigned int i = 0; i < n; i++) {
		struct epoll_event ev = { .events = EPOLLIN };

		/* Owners fence a client's older connections by its id: each
		 * loop is a client of its own (loop 0 keeps the instance). */
		lc.client_id = cfg->instance + i;
		if (!lc.client_id)
			lc.client_id = 1;
		lc.index = i;
		ret = floop_create(&lc, &g->l[i]);
		if (ret)
			goto err;
		if (epoll_ctl(g->epfd, EPOLL_CTL_ADD, floop_done_fd(g->l[i]),
			      &ev)) {
			ret = -errno;
			goto err;
		}
	}
	*out = g;
	return 0;
err:
	floops_destroy(g);
	return ret;
}

int floops_start(struct floops *g)
{
	for (unsigned int i = 0; i < g->n; i++) {
		int ret = floop_start(g->l[i]);

		if (ret)
			return ret;
	}
	return 0;
}

void floops_destroy(struct floops *g)
{
	if (!g)
		return;
	for (unsigned int i = 0; i < g->n; i++)
		floop_destroy(g->l[i]);
	if (g->epfd >= 0)
		close(g->epfd);
	while (g->joins) {
		struct floops_join *j = g->joins;

		g->joins = j->next;
		free(j);
	}
	pthread_mutex_destroy(&g->mu);
	free(g);
}

unsigned int floops_n(const struct floops *g)
{
	return g->n;
}

struct floop_counters *floops_loop_counters(struct floops *g, unsigned int i)
{
	return floop_counters(g->l[i]);
}

unsigned int floops_of_map(const struct floops *g, uint64_t id)
{
	return (unsigned int)(id % g->n);
}

int floops_map_add(struct floops *g, struct floop_map_desc *d)
{
	return floop_map_add(g->l[floops_of_map(g, d->id)], d);
}

int floops_map_remove(struct floops *g, uint64_t id)
{
	return floop_map_remove(g->l[floops_of_map(g, id)], id);
}

int floops_map_lost(struct floops *g, uint64_t id)
{
	return floop_map_lost(g->l[floops_of_map(g, id)], id);
}

int floops_map_seal(struct floops *g, uint64_t id)
{
	return floop_map_seal(g->l[floops_of_map(g, id)], id);
}

int floops_map_lease(struct floops *g, uint64_t id, int err, uint64_t wgen,
		     const struct msg_grant *grants, uint32_t n_grants)
{
	return floop_map_lease(g->l[floops_of_map(g, id)], id, err, wgen,
			       grants, n_grants);
}

int floops_handover(struct floops *g, uint64_t id, uint64_t cookie)
{
	return floop_handover(g->l[floops_of_map(g, id)], id, cookie);
}

int floops_discard(struct floops *g, uint64_t id, uint64_t off, uint64_t len,
		   uint64_t cookie)
{
	return floop_discard(g->l[floops_of_map(g, id)], id, off, len, cookie);
}

int floops_peers_set(struct floops *g, const struct xport_peer_info *peers,
		     uint32_t n)
{
	int ret = 0;

	for (unsigned int i = 0; i < g->n; i++) {
		int r = floop_peers_set(g->l[i], peers, n);

		if (r && !ret)
			ret = r;
	}
	return ret;
}

int floops_peer_addr_set(struct floops *g, uint64_t node, const char *data_addr,
			 const void *addr, uint32_t addrlen)
{
	int ret = 0;

	for (unsigned int i = 0; i < g->n; i++) {
		int r = floop_peer_addr_set(g->l[i], node, data_addr, addr,
					    addrlen);

		if (r && !ret)
			ret = r;
	}
	return ret;
}

void floops_wb_until(struct floops *g, uint64_t until_ms, uint64_t close_ms)
{
	for (unsigned int i = 0; i < g->n; i++)
		floop_wb_until(g->l[i], until_ms, close_ms);
}

void floops_coh_synced(struct floops *g, uint64_t synced, uint64_t epoch)
{
	for (unsigned int i = 0; i < g->n; i++)
		floop_coh_synced(g->l[i], synced, epoch);
}

int floops_coh_settling(struct floops *g)
{
	for (unsigned int i = 0; i < g->n; i++)
		if (floop_coh_settling(g->l[i]))
			return 1;
	return 0;
}

int floops_self_set(struct floops *g, uint64_t self)
{
	int ret = 0;

	for (unsigned int i = 0; i < g->n; i++) {
		int r = floop_self_set(g->l[i], self);

		if (r && !ret)
			ret = r;
	}
	return ret;
}

int64_t floops_regions_set(struct floops *g, const struct floop_region *regions,
			   uint32_t n, uint64_t epoch, uint64_t cid)
{
	int64_t t[FLOOPS_MAX], seq;

	for (unsigned int i = 0; i < g->n; i++) {
		t[i] = floop_regions_set(g->l[i], regions, n, epoch, cid);
		if (t[i] < 0)
			return t[i]; /* the caller sends it all again */
	}
	pthread_mutex_lock(&g->mu);
	seq = ++g->seq;
	memcpy(g->last, t, g->n * sizeof(t[0]));
	pthread_mutex_unlock(&g->mu);
	return seq;
}

int floops_map_relayout(struct floops *g, const char *name, uint64_t epoch,
			const struct msg_run *runs, uint32_t n_runs,
			uint32_t replicas, const struct msg_rstate *rs,
			uint32_t n_rs, uint64_t rgen)
{
	for (unsigned int i = 0; i < g->n; i++) {
		struct msg_run *r = NULL;
		struct msg_rstate *c = NULL;
		int64_t t;

		if (layout_runs_copy(runs, n_runs, &r))
			return -ENOMEM;
		if (n_rs && !(c = malloc(n_rs * sizeof(*c)))) {
			layout_runs_free(r, n_runs);
			return -ENOMEM;
		}
		if (n_rs)
			memcpy(c, rs, n_rs * sizeof(*c));
		t = floop_map_relayout(g->l[i], name, epoch, r, n_runs,
				       replicas, c, n_rs, rgen);
		if (t < 0)
			return (int)t;
	}
	return 0;
}

int floops_map_grants(struct floops *g, const char *name, uint64_t epoch,
		      const struct msg_grant *gr, uint32_t n)
{
	for (unsigned int i = 0; i < g->n; i++) {
		int64_t t = floop_map_grants(g->l[i], name, epoch, gr, n);

		if (t < 0)
			return (int)t;
	}
	return 0;
}

int floops_rebuild(struct floops *g, const struct floop_rtask *t)
{
	return floop_rebuild(g->l[0], t);
}

/*
 * Each loop carries its commands out in order, so once every loop is done
 * with its part of the last group ticket, every earlier one is done too.
 * An earlier ticket asked for while the last is not done waits for it
 * (a little later than need be, never too early).
 */
int floops_ticket_done(struct floops *g, int64_t ticket)
{
	int done = 1;

	pthread_mutex_lock(&g->mu);
	if (ticket > g->seq_done) {
		for (unsigned int i = 0; done && i < g->n; i++)
			done = floop_ticket_done(g->l[i], g->last[i]);
		if (done)
			g->seq_done = g->seq;
		done = done && ticket <= g->seq;
	}
	pthread_mutex_unlock(&g->mu);
	return done;
}

int floops_flush(struct floops *g, const char *name, uint64_t cookie, int drop)
{
	struct floops_join *j;
	unsigned int sent = 0;

	if (g->n == 1) /* its report needs no join */
		return floop_flush(g->l[0], name, cookie, drop);
	j = calloc(1, sizeof(*j));
	if (!j)
		return -ENOMEM;
	j->cookie = cookie;
	pthread_mutex_lock(&g->mu);
	j->next = g->joins;
	g->joins = j;
	/* Counted before they are sent: a loop may answer at once. */
	j->left = g->n;
	for (unsigned int i = 0; i < g->n; i++) {
		if (floop_flush(g->l[i], name, cookie, drop))
			break;
		sent++;
	}
	if (sent < g->n) {
		j->left = sent;
		j->err = -ENOMEM;
		snprintf(j->text, sizeof(j->text),
			 "region %s: no memory to flush it in every fault "
			 "loop",
			 name);
	}
	if (!sent) {
		g->joins = j->next;
		free(j);
	}
	pthread_mutex_unlock(&g->mu);
	return sent ? 0 : -ENOMEM;
}

int floops_done_fd(const struct floops *g)
{
	return g->epfd;
}

/* Folds loop report @d into its join; 1 if @d was taken (freed). */
static int floops_join_part(struct floops *g, struct floop_done *d,
			    struct floop_done **outp)
{
	struct floops_join **p, *j;

	for (p = &g->joins; *p && (*p)->cookie != d->cookie; p = &(*p)->next)
		;
	j = *p;
	if (!j)
		return 0; /* not ours: as it came */
	if (d->err &&
	    (!j->err || (j->err == -ETIMEDOUT && d->err != -ETIMEDOUT))) {
		j->err = d->err;
		memcpy(j->text, d->text, sizeof(j->text));
	}
	if (--j->left) {
		free(d);
		return 1;
	}
	/* The last part: it carries the joined answer. */
	d->err = j->err;
	memcpy(d->text, j->text, sizeof(d->text));
	*p = j->next;
	free(j);
	*outp = d;
	return 1;
}

struct floop_done *floops_done_take(struct floops *g)
{
	struct floop_done *head = NULL, **tail = &head;

	if (g->n == 1)
		return floop_done_take(g->l[0]);
	pthread_mutex_lock(&g->mu);
	for (unsigned int i = 0; i < g->n; i++) {
		struct floop_done *d = floop_done_take(g->l[i]), *next;

		for (; d; d = next) {
			struct floop_done *out = NULL;

			next = d->next;
			d->next = NULL;
			if (d->kind == FLOOP_DONE_FLUSH &&
			    floops_join_part(g, d, &out)) {
				if (!out)
					continue;
				d = out;
			}
			*tail = d;
			tail = &d->next;
		}
	}
	pthread_mutex_unlock(&g->mu);
	return head;
}

/*
 * Every member of struct floop_counters is an atomic_uint_fast64_t (the
 * histogram's too): the loops' counters are summed member by member as an
 * array, so a counter added there is summed without a line here.
 */
_Static_assert(sizeof(struct floop_counters) % sizeof(atomic_uint_fast64_t) ==
		       0,
	       "struct floop_counters holds only atomic_uint_fast64_t");

void floops_counters(struct floops *g, struct floop_counters *sum)
{
	enum { N = sizeof(*sum) / sizeof(atomic_uint_fast64_t) };
	atomic_uint_fast64_t *s = (atomic_uint_fast64_t *)sum;

	memset(sum, 0, sizeof(*sum));
	for (unsigned int i = 0; i < g->n; i++) {
		atomic_uint_fast64_t *c =
			(atomic_uint_fast64_t *)floop_counters(g->l[i]);

		for (size_t k = 0; k < N; k++)
			atomic_store_explicit(
				&s[k],
				atomic_load_explicit(&s[k],
						     memory_order_relaxed) +
					atomic_load_explicit(
						&c[k], memory_order_relaxed),
				memory_order_relaxed);
	}
}

int floops_peer_stats(struct floops *g, struct msg_peer **out, uint32_t *n)
{
	struct msg_peer *all = NULL, *st;
	uint32_t n_all = 0, k;
	int ret;

	if (g->n == 1)
		return floop_peer_stats(g->l[0], out, n);
	for (unsigned int i = 0; i < g->n; i++) {
		struct msg_peer *grown;

		ret = floop_peer_stats(g->l[i], &st, &k);
		if (ret) {
			free(all);
			return ret;
		}
		grown = realloc(all, ((size_t)n_all + k + 1) * sizeof(*all));
		if (!grown) {
			free(st);
			free(all);
			return -ENOMEM;
		}
		all = grown;
		for (uint32_t s = 0; s < k; s++) {
			struct msg_peer *m = &st[s], *p;
			uint32_t j;

			for (j = 0; j < n_all; j++)
				if (all[j].node == m->node &&
				    !strcmp(all[j].transport, m->transport))
					break;
			if (j == n_all) {
				all[n_all++] = *m;
				continue;
			}
			p = &all[j];
			p->posted += m->posted;
			p->reads += m->reads;
			p->bytes += m->bytes;
			p->errors += m->errors;
			p->writes += m->writes;
			p->wbytes += m->wbytes;
			p->werrors += m->werrors;
			p->up |= m->up;
			if (!p->qp_state)
				p->qp_state = m->qp_state;
		}
		free(st);
	}
	if (!all) {
		all = calloc(1, sizeof(*all));
		if (!all)
			return -ENOMEM;
	}
	*out = all;
	*n = n_all;
	return 0;
}

int floops_unreach(struct floops *g, struct msg_unreach **out, uint32_t *n)
{
	struct msg_unreach *all = NULL, *u;
	uint32_t n_all = 0, k;
	int ret;

	for (unsigned int i = 0; i < g->n; i++) {
		struct msg_unreach *grown;

		ret = floop_unreach(g->l[i], &u, &k);
		if (ret) {
			free(all);
			return ret;
		}
		if (k > MSG_UNREACH_MAX - n_all)
			k = MSG_UNREACH_MAX - n_all;
		if (!k) {
			free(u);
			continue;
		}
		grown = realloc(all, ((size_t)n_all + k) * sizeof(*all));
		if (!grown) {
			free(u);
			free(all);
			return -ENOMEM;
		}
		all = grown;
		memcpy(all + n_all, u, k * sizeof(*u));
		n_all += k;
		free(u);
	}
	*out = all;
	*n = n_all;
	return 0;
}
