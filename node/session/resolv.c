// SPDX-License-Identifier: MIT
/* Peer address resolution off the fault loop and the coordinator session. */
#define LOG_PREFIX "resolv: "
#include "resolv.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "evl.h"
#include "floops.h"
#include "log.h"
#include "msg.h"
#include "net.h"

struct resolv_job {
	uint64_t node;
	char addr[MSG_ADDR_MAX];
	uint64_t due_ms; /* not before */
	bool failed;	 /* logged once */
	struct resolv_job *next;
};

struct resolv {
	struct floops *fl;
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool stopping;
	struct resolv_job *jobs;
};

static struct resolv_job *resolv_find(struct resolv *r, uint64_t node)
{
	for (struct resolv_job *j = r->jobs; j; j = j->next)
		if (j->node == node)
			return j;
	return NULL;
}

static void resolv_unlink(struct resolv *r, struct resolv_job *j)
{
	for (struct resolv_job **p = &r->jobs; *p; p = &(*p)->next) {
		if (*p == j) {
			*p = j->next;
			return;
		}
	}
}

/* The job due first, or NULL; *wait_ms is how long until one is due. */
static struct resolv_job *resolv_due(struct resolv *r, uint64_t now,
				     uint64_t *wait_ms)
{
	struct resolv_job *first = NULL;

	for (struct resolv_job *j = r->jobs; j; j = j->next)
		if (!first || j->due_ms < first->due_ms)
			first = j;
	if (!first) {
		*wait_ms = UINT64_MAX;
		return NULL;
	}
	if (first->due_ms > now) {
		*wait_ms = first->due_ms - now;
		return NULL;
	}
	return first;
}

static void resolv_wait(struct resolv *r, uint64_t ms)
{
	struct timespec ts;

	if (ms == UINT64_MAX) {
		pthread_cond_wait(&r->cond, &r->lock);
		return;
	}
	clock_gettime(CLOCK_MONOTONIC, &ts);
	ts.tv_sec += (time_t)(ms / 1000);
	ts.tv_nsec += (long)(ms % 1000) * 1000000;
	if (ts.tv_nsec >= 1000000000) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000;
	}
	pthread_cond_timedwait(&r->cond, &r->lock, &ts);
}

static void *resolv_run(void *arg)
{
	struct resolv *r = arg;
	struct sockaddr_storage ss;
	struct resolv_job *j;
	char addr[MSG_ADDR_MAX];
	uint64_t node, wait;
	uint32_t len;
	int ret;

	pthread_mutex_lock(&r->lock);
	while (!r->stopping) {
		j = resolv_due(r, evl_now_ms(), &wait);
		if (!j) {
			resolv_wait(r, wait);
			continue;
		}
		node = j->node;
		memcpy(addr, j->addr, sizeof(addr));
		pthread_mutex_unlock(&r->lock);
		ret = net_addr_resolve(addr, &ss, &len, 0);
		pthread_mutex_lock(&r->lock);
		/* Replaced while we looked it up: the newer one is due. */
		j = resolv_find(r, node);
		if (!j || strcmp(j->addr, addr))
			continue;
		if (!ret) {
			if (j->failed)
				log_info("node %llu: %s resolved",
					 (unsigned long long)node, addr);
			resolv_unlink(r, j);
			free(j);
			floops_peer_addr_set(r->fl, node, addr, &ss, len);
			continue;
		}
		if (!j->failed)
			log_warn("node %llu: cannot resolve %s: %s; trying "
				 "again every %u ms",
				 (unsigned long long)node, addr,
				 log_strerror(ret), RESOLV_RETRY_MS);
		j->failed = true;
		j->due_ms = evl_now_ms() + RESOLV_RETRY_MS;
	}
	pthread_mutex_unlock(&r->lock);
	return NULL;
}

int resolv_create(struct floops *fl, struct resolv **out)
{
	pthread_condattr_t ca;
	struct resolv *r;
	int ret;

	r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	r->fl = fl;
	pthread_mutex_init(&r->lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&r->cond, &ca);
	pthread_condattr_destroy(&ca);
	ret = -pthread_create(&r->thread, NULL, resolv_run, r);
	if (ret) {
		pthread_cond_destroy(&r->cond);
		pthread_mutex_destroy(&r->lock);
		free(r);
		return ret;
	}
	*out = r;
	return 0;
}

void resolv_destroy(struct resolv *r)
{
	struct resolv_job *j;

	if (!r)
		return;
	pthread_mutex_lock(&r->lock);
	r->stopping = true;
	pthread_cond_signal(&r->cond);
	pthread_mutex_unlock(&r->lock);
	pthread_join(r->thread, NULL);
	while ((j = r->jobs)) {
		r->jobs = j->next;
		free(j);
	}
	pthread_cond_destroy(&r->cond);
	pthread_mutex_destroy(&r->lock);
	free(r);
}

int resolv_request(struct resolv *r, uint64_t node, const char *data_addr)
{
	struct sockaddr_storage ss;
	struct resolv_job *j;
	uint32_t len;

	/* An address (the usual case) needs no lookup: at once, and never
	 * behind a name that takes long. */
	if (!net_addr_resolve(data_addr, &ss, &len, 1)) {
		pthread_mutex_lock(&r->lock);
		j = resolv_find(r, node);
		if (j) {
			resolv_unlink(r, j);
			free(j);
		}
		pthread_mutex_unlock(&r->lock);
		return floops_peer_addr_set(r->fl, node, data_addr, &ss, len);
	}
	pthread_mutex_lock(&r->lock);
	j = resolv_find(r, node);
	if (!j) {
		j = calloc(1, sizeof(*j));
		if (!j) {
			pthread_mutex_unlock(&r->lock);
			return -ENOMEM;
		}
		j->node = node;
		j->next = r->jobs;
		r->jobs = j;
	}
	snprintf(j->addr, sizeof(j->addr), "%s", data_addr);
	j->due_ms = 0;
	j->failed = false;
	pthread_cond_signal(&r->cond);
	pthread_mutex_unlock(&r->lock);
	return 0;
}
