// SPDX-License-Identifier: MIT
/*
 * Rebuild tasks (in memory only) and the REPLICA records the rebuild
 * logic builds.
 */
#define LOG_PREFIX "coord: "
#include "coord_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "msg.h"

_Static_assert(COORD_TASKS_PER_NODE <= MSG_TASKS_MAX,
	       "a heartbeat's answer lists every task of its node");

void coord_rrec_init(struct coord_rrec *x, const struct coord *c,
		     const struct coord_region *r)
{
	msg_init(&x->m, MSG_T_REPLICA);
	memcpy(x->m.name, r->name, sizeof(x->m.name));
	x->m.rgen = r->rgen + 1;
	x->m.epoch = c->epoch + 1;
	x->cap = 0;
}

/* Adds replica @idx (ascending) with @state at @ch. */
int coord_rrec_add(struct coord_rrec *x, const struct coord_region *r,
		   uint32_t idx, uint8_t state, const struct msg_chunk *ch)
{
	if (x->m.n_rstates == x->cap) {
		uint32_t cap = x->cap ? x->cap * 2 : 16;
		void *a = realloc(x->m.rstates, cap * sizeof(*x->m.rstates));

		if (!a)
			return -ENOMEM;
		x->m.rstates = a;
		a = realloc(x->m.chunks, cap * sizeof(*x->m.chunks));
		if (!a)
			return -ENOMEM;
		x->m.chunks = a;
		x->cap = cap;
	}
	x->m.rstates[x->m.n_rstates].chunk = idx / r->replicas;
	x->m.rstates[x->m.n_rstates].replica = idx % r->replicas;
	x->m.rstates[x->m.n_rstates].state = state;
	x->m.chunks[x->m.n_rstates] = *ch;
	x->m.n_rstates++;
	x->m.n_chunks = x->m.n_rstates;
	return 0;
}

/* Applies and logs it (nothing if empty); frees it. */
int coord_rrec_commit(struct coord *c, struct coord_rrec *x, int *fatal)
{
	struct msg rep;
	int ret = 0;

	if (x->m.n_rstates) {
		msg_init(&rep, MSG_T_NONE);
		ret = coord_change(c, &x->m, &rep, fatal);
		if (ret && !*fatal)
			log_err("replica change of '%s': %s", x->m.name,
				rep.text);
		msg_fini(&rep);
	}
	msg_fini(&x->m);
	return ret;
}

/* One replica's change in a record of its own. */
int coord_rrec_one(struct coord *c, const struct coord_region *r, uint32_t idx,
		   uint8_t state, const struct msg_chunk *ch, int *fatal)
{
	struct coord_rrec x;
	int ret;

	coord_rrec_init(&x, c, r);
	ret = coord_rrec_add(&x, r, idx, state, ch);
	if (ret) {
		msg_fini(&x.m);
		return ret;
	}
	return coord_rrec_commit(c, &x, fatal);
}

struct coord_task *coord_task_find(struct coord *c, uint32_t node, uint64_t id)
{
	for (uint32_t i = 0; i < c->n_tasks; i++)
		if (c->tasks[i].id == id && c->tasks[i].node == node)
			return &c->tasks[i];
	return NULL;
}

int coord_task_of(const struct coord *c, const char *region, uint32_t rec)
{
	for (uint32_t i = 0; i < c->n_tasks; i++)
		if (c->tasks[i].rec == rec &&
		    !strcmp(c->tasks[i].region, region))
			return 1;
	return 0;
}

/* Tasks node @node runs (copies); one being checked is copied. */
uint32_t coord_tasks_on(const struct coord *c, uint32_t node)
{
	uint32_t k = 0;

	for (uint32_t i = 0; i < c->n_tasks; i++)
		k += c->tasks[i].node == node && !c->tasks[i].checking;
	return k;
}

/* Ends task @t; an untaken one's extent is freed (a taken one's replica
 * record holds it). */
void coord_task_drop(struct coord *c, struct coord_task *t)
{
	if (!t->taken) {
		struct coord_node *n = coord_node_find(c, t->node);

		if (n)
			coord_ext_remove(n, t->dst_off);
	}
	*t = c->tasks[--c->n_tasks];
}

void coord_repl_region_gone(struct coord *c, const char *name)
{
	for (uint32_t i = 0; i < c->n_tasks;) {
		if (!strcmp(c->tasks[i].region, name))
			coord_task_drop(c, &c->tasks[i]);
		else
			i++;
	}
}
