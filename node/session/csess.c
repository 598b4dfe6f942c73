// SPDX-License-Identifier: MIT
/*
 * The agent's coordinator session: one thread that owns the connection to
 * the coordinator and every call on it (see csess.h for the heartbeat);
 * here the thread, and the lookups and write leases it runs for the
 * control thread.
 */
#define LOG_PREFIX "agent: "
#include "csess_int.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "actl.h"
#include "evl.h"
#include "layout.h"
#include "lcache.h"
#include "log.h"
#include "node_env.h"
#include "util.h"

/* ---- lookups ---- */

static void csess_result_push(struct csess *s, struct csess_result *r)
{
	r->next = NULL;
	pthread_mutex_lock(&s->lock);
	*s->results_tail = r;
	s->results_tail = &r->next;
	pthread_mutex_unlock(&s->lock);
	csess_efd_signal(s->efd_results);
}

/* Answers from the cache; returns 0, or -ENOENT if nothing is cached. */
static int csess_lookup_cached(struct csess *s, struct csess_result *r,
			       const char *name, int why)
{
	const struct msg *l = lcache_get(&s->cache, name);

	if (!l)
		return -ENOENT;
	if (lcache_region_copy(l, &r->region))
		return -ENOMEM;
	r->cid = s->cid;
	log_warn("coordinator %s unreachable (%s): mapping region %s from "
		 "its layout cached here (epoch %llu)",
		 csess_coord_addr(s), csess_strerror(s, why), name,
		 (unsigned long long)r->region.epoch);
	return 0;
}

/* A writable map: the region's write lease, or the error in @r. */
static void csess_lease_take(struct csess *s, const struct csess_job *j,
			     struct csess_result *r)
{
	struct msg req, rep;
	int ret;

	for (int tries = 0;; tries++) {
		msg_init(&req, MSG_T_WRITE_LEASE);
		msg_strset(req.name, sizeof(req.name), j->name);
		req.node = atomic_load(s->env->node_id);
		req.instance = s->env->instance;
		req.lease = j->lease;
		req.wgen = j->wgen ? j->wgen : MSG_WGEN_NEW;
		req.flags = j->iffree ? MSG_LEASE_IFFREE : 0;
		req.want_grants = !s->env->cred->insecure;
		ret = csess_call_want(s, &req, &rep, MSG_T_OK);
		/*
		 * Not up with our instance: our lease at the coordinator
		 * lapsed (this host stalled, or the link did) and the next
		 * heartbeat would join again. Join now and ask once more,
		 * so that a map right after the stall is not refused; a
		 * lease taken by another meanwhile stays lost (the
		 * generation says so).
		 */
		if (ret != -ESTALE || tries)
			break;
		log_warn("region %s: write lease: %s; joining again", j->name,
			 rep.text);
		msg_fini(&rep);
		ret = csess_join(s);
		if (ret) {
			msg_init(&rep, MSG_T_OK);
			break;
		}
	}
	if (!ret && !rep.wgen)
		ret = -EPROTO; /* a coordinator without lease generations */
	if (!ret) {
		r->wgen = rep.wgen;
		/* read and write grants, in place of the lookup's read ones */
		if (rep.n_grants) {
			free(r->region.grants);
			r->region.grants = rep.grants;
			r->region.n_grants = rep.n_grants;
			rep.grants = NULL;
			rep.n_grants = 0;
		}
		msg_fini(&rep);
		return;
	}
	r->err = csess_err_is_link(ret) ? -EHOSTUNREACH : ret;
	snprintf(r->text, sizeof(r->text), "region %s: write lease: %s",
		 j->name,
		 rep.type == MSG_T_ERROR && rep.text[0]
			 ? rep.text
			 : csess_strerror(s, ret));
	msg_fini(&rep);
	msg_fini(&r->region);
}

/* A release someone waits for (its token): how it went, told once. */
static void csess_release_tell(struct csess *s, struct csess_job *j, int err)
{
	struct csess_result *r;

	if (!j->token)
		return;
	r = calloc(1, sizeof(*r));
	if (!r)
		return; /* the client waits until it gives up */
	r->token = j->token;
	r->err = err;
	if (err && csess_err_is_link(err))
		snprintf(r->text, sizeof(r->text),
			 "region %s: the write lease was not given back: "
			 "coordinator %s unreachable (%s); the agent retries "
			 "until it answers, and the lease ends with this "
			 "node's",
			 j->name, csess_coord_addr(s), csess_strerror(s, err));
	else if (err)
		snprintf(r->text, sizeof(r->text),
			 "region %s: the write lease was not given back: "
			 "coordinator %s: %s",
			 j->name, csess_coord_addr(s), csess_strerror(s, err));
	j->token = 0;
	csess_result_push(s, r);
}

/*
 * Gives back the write leases of mappings that ended. One the coordinator
 * did not hear of stays queued; it also ends with this node's lease.
 */
static void csess_releases_run(struct csess *s)
{
	struct csess_job **p = &s->releases, *j;
	struct msg req, rep;
	int ret;

	while ((j = *p)) {
		msg_init(&req, MSG_T_WRITE_RELEASE);
		msg_strset(req.name, sizeof(req.name), j->name);
		req.node = atomic_load(s->env->node_id);
		req.lease = j->lease;
		ret = csess_call_want(s, &req, &rep, MSG_T_OK);
		msg_fini(&rep);
		if (csess_err_is_link(ret)) {
			csess_release_tell(s, j, -EHOSTUNREACH);
			return;
		}
		if (ret)
			log_errno(ret, "region %s: giving the write lease back",
				  j->name);
		csess_release_tell(s, j, ret);
		*p = j->next;
		free(j);
	}
}

static void csess_lookup_run(struct csess *s, const struct csess_job *j)
{
	struct csess_result *r = calloc(1, sizeof(*r));
	int ret;

	if (!r)
		return; /* the client waits until it gives up */
	r->token = j->token;
	/* Known down: do not make every MAP wait for a timeout first. */
	if (!s->coord_ok && !j->lease &&
	    !csess_lookup_cached(s, r, j->name, s->last_err))
		goto out;
	ret = csess_region_get(s, j->name, &r->region);
	if (!ret) {
		lcache_put(&s->cache, &r->region);
		csess_nodes_ensure(s, &r->region);
		r->cid = s->cid;
		/* a coherent region's writers take no lease */
		if (j->lease && !(r->region.rflags & MSG_REGION_COHERENT))
			csess_lease_take(s, j, r);
		goto out;
	}
	if (r->region.type == MSG_T_ERROR) {
		/* The coordinator's answer, e.g. no such region. */
		snprintf(r->text, sizeof(r->text), "region %s: %s", j->name,
			 r->region.text[0] ? r->region.text
					   : log_strerror(ret));
		/* Gone, or no longer ours to read: a coordinator outage
		 * must not map it from the cache either. */
		if (ret == -ENOENT || ret == -EACCES)
			lcache_drop(&s->cache, j->name);
		msg_fini(&r->region);
		r->err = ret;
		goto out;
	}
	msg_fini(&r->region);
	if (csess_err_is_link(ret) && !j->lease &&
	    !csess_lookup_cached(s, r, j->name, ret))
		goto out;
	r->err = csess_err_is_link(ret) ? -EHOSTUNREACH : ret;
	snprintf(r->text, sizeof(r->text),
		 "region %s: %scoordinator %s %s (%s)%s", j->name,
		 j->lease ? "a writable map needs the region's write lease, "
			    "and "
			  : "",
		 csess_coord_addr(s),
		 csess_err_is_link(ret) ? "unreachable" : "failed",
		 csess_strerror(s, ret),
		 j->lease ? "; map it read-only"
			  : ", and this host has no layout of it cached "
			    "(never mapped here)");
out:
	csess_result_push(s, r);
}

/* Is write lease @j->lease of generation @j->wgen still ours? The
 * answer in a result: 0, -ENOLCK or -EBUSY (lost), or a link error. */
static void csess_check_run(struct csess *s, const struct csess_job *j)
{
	struct csess_result *r = calloc(1, sizeof(*r));

	if (!r)
		return; /* the client waits until it gives up */
	r->token = j->token;
	/* Known down: the flush is not held up by a timeout first. */
	if (!s->coord_ok) {
		r->err = -EHOSTUNREACH;
		snprintf(r->text, sizeof(r->text), "coordinator %s: %s",
			 csess_coord_addr(s),
			 csess_strerror(s, s->last_err ? s->last_err
						       : -EHOSTUNREACH));
	} else {
		csess_lease_take(s, j, r);
	}
	csess_result_push(s, r);
}

static void csess_jobs_run(struct csess *s)
{
	struct csess_job *j, *next;

	pthread_mutex_lock(&s->lock);
	j = s->jobs;
	s->jobs = NULL;
	s->jobs_tail = &s->jobs;
	pthread_mutex_unlock(&s->lock);
	for (; j; j = next) {
		next = j->next;
		if (j->release) {
			/* In order: a map after this release takes the lease
			 * the release gave back. */
			struct csess_job **tail = &s->releases;

			while (*tail)
				tail = &(*tail)->next;
			j->next = NULL;
			*tail = j;
			if (!csess_is_stopping(s))
				csess_releases_run(s);
			continue;
		}
		if (!csess_is_stopping(s)) {
			if (j->check)
				csess_check_run(s, j);
			else
				csess_lookup_run(s, j);
		}
		free(j);
	}
	if (s->releases && !csess_is_stopping(s))
		csess_releases_run(s);
}

/* ---- the thread ---- */

/* How long the thread may sleep at @now: to the next heartbeat, and not
 * past the moment replicated write-back is held, nor (held and answered)
 * much past the layout sync that lets it go on. */
static uint64_t csess_wait_ms(const struct csess *s, uint64_t now)
{
	uint64_t wait = s->next_hb_ms > now ? s->next_hb_ms - now : 0,
		 until = csess_wb_until(s);

	if (until && !s->wb_held && until > now && until - now < wait)
		wait = until - now;
	if (s->wb_held && s->resync_set && wait > CSESS_SYNC_POLL_MS)
		wait = CSESS_SYNC_POLL_MS;
	return wait;
}

static void *csess_run(void *arg)
{
	struct csess *s = arg;
	struct pollfd pfd = { .fd = s->efd_jobs, .events = POLLIN };
	uint64_t period = s->env->heartbeat_ms, now;

	s->next_hb_ms = evl_now_ms();
	while (!csess_is_stopping(s)) {
		now = evl_now_ms();
		if (atomic_exchange(&s->hb_now, 0))
			s->next_hb_ms = now;
		if (now >= s->next_hb_ms) {
			uint64_t p = period;

			csess_heartbeat(s);
			if (p > CSESS_TASK_HB_MS && csess_tasks_waiting(s))
				p = CSESS_TASK_HB_MS;
			s->next_hb_ms += p;
			now = evl_now_ms();
			if (s->next_hb_ms < now || s->next_hb_ms > now + p)
				s->next_hb_ms = now + p;
		}
		csess_wb_gate(s);
		now = evl_now_ms();
		if (poll(&pfd, 1, (int)csess_wait_ms(s, now)) > 0)
			csess_efd_drain(s->efd_jobs);
		csess_jobs_run(s);
	}
	return NULL;
}

/* FARPAGE_TEST_RELAYOUT_DELAY_MS=N, FARPAGE_TEST_REBUILD_NOCOPY=1 (tests
 * only, docs/testing.md). */
static void csess_test_hooks(struct csess *s)
{
	const char *e = getenv("FARPAGE_TEST_REBUILD_NOCOPY");
	uint64_t v;

	if (e && !strcmp(e, "1")) {
		s->test_nocopy = 1;
		log_warn("test hook: rebuild tasks are reported rebuilt "
			 "without copying");
	}
	e = getenv("FARPAGE_TEST_RELAYOUT_DELAY_MS");
	if (!e || util_u64_parse(e, &v) || !v || v > 600000)
		return;
	s->test_relayout_ms = v;
	log_warn("test hook: layouts are fetched %llu ms after a new node "
		 "list",
		 (unsigned long long)v);
}

int csess_create(const struct node_env *env, struct csess **out)
{
	struct csess *s;
	int ret;

	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->env = env;
	s->coord.fd = -1;
	s->coord_ok = 1;
	s->jobs_tail = &s->jobs;
	s->results_tail = &s->results;
	csess_test_hooks(s);
	pthread_mutex_init(&s->lock, NULL);
	lcache_init(&s->cache, 0, 0);
	s->efd_jobs = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	s->efd_results = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (s->efd_jobs < 0 || s->efd_results < 0) {
		ret = -errno;
		csess_destroy(s);
		return ret;
	}
	*out = s;
	return 0;
}

int csess_start(struct csess *s)
{
	int ret = pthread_create(&s->thread, NULL, csess_run, s);

	if (ret)
		return -ret;
	s->started = 1;
	return 0;
}

void csess_destroy(struct csess *s)
{
	struct csess_job *j;
	struct csess_result *r;

	if (!s)
		return;
	if (s->started) {
		atomic_store(&s->stopping, 1);
		csess_efd_signal(s->efd_jobs);
		pthread_join(s->thread, NULL);
	}
	while ((j = s->jobs)) {
		s->jobs = j->next;
		free(j);
	}
	while ((j = s->releases)) {
		s->releases = j->next;
		free(j);
	}
	while ((r = s->results)) {
		s->results = r->next;
		csess_result_free(r);
	}
	lcache_fini(&s->cache);
	msg_fini(&s->nodes);
	free(s->cleared);
	free(s->sums);
	free(s->tasks);
	free(s->grefs);
	actl_close(&s->coord);
	if (s->efd_jobs >= 0)
		close(s->efd_jobs);
	if (s->efd_results >= 0)
		close(s->efd_results);
	pthread_mutex_destroy(&s->lock);
	free(s);
}

static int csess_job_push(struct csess *s, uint64_t token, const char *name,
			  uint64_t lease, uint64_t wgen,
			  enum csess_job_kind kind)
{
	struct csess_job *j = calloc(1, sizeof(*j));

	if (!j)
		return -ENOMEM;
	j->token = token;
	snprintf(j->name, sizeof(j->name), "%s", name);
	j->lease = lease;
	j->wgen = wgen;
	j->release = kind == CSESS_JOB_RELEASE;
	j->check = kind == CSESS_JOB_CHECK || kind == CSESS_JOB_TAKE_FREE;
	j->iffree = kind == CSESS_JOB_TAKE_FREE;
	pthread_mutex_lock(&s->lock);
	*s->jobs_tail = j;
	s->jobs_tail = &j->next;
	pthread_mutex_unlock(&s->lock);
	csess_efd_signal(s->efd_jobs);
	return 0;
}

int csess_lookup(struct csess *s, uint64_t token, const char *name,
		 uint64_t lease, uint64_t wgen)
{
	return csess_job_push(s, token, name, lease, wgen, CSESS_JOB_LOOKUP);
}

int csess_lease_release(struct csess *s, uint64_t token, const char *name,
			uint64_t lease)
{
	return csess_job_push(s, token, name, lease, 0, CSESS_JOB_RELEASE);
}

int csess_lease_check(struct csess *s, uint64_t token, const char *name,
		      uint64_t lease, uint64_t wgen)
{
	return csess_job_push(s, token, name, lease, wgen, CSESS_JOB_CHECK);
}

int csess_lease_take_free(struct csess *s, uint64_t token, const char *name,
			  uint64_t lease, uint64_t wgen)
{
	return csess_job_push(s, token, name, lease, wgen, CSESS_JOB_TAKE_FREE);
}

int csess_event_fd(const struct csess *s)
{
	return s->efd_results;
}

struct csess_result *csess_results_take(struct csess *s)
{
	struct csess_result *r;

	csess_efd_drain(s->efd_results);
	pthread_mutex_lock(&s->lock);
	r = s->results;
	s->results = NULL;
	s->results_tail = &s->results;
	pthread_mutex_unlock(&s->lock);
	return r;
}

void csess_result_free(struct csess_result *r)
{
	if (!r)
		return;
	msg_fini(&r->region);
	free(r);
}

void csess_nodes_due(struct csess *s)
{
	atomic_store(&s->want_nodes, 1);
}
