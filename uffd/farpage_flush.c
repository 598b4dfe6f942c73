// SPDX-License-Identifier: MIT
/*
 * libfarpage: flushes (written pages sent home through the agent) and the
 * agent's statistics.
 */
#define LOG_PREFIX "farpage: "
#include "farpage.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "ctl.h"
#include "evl.h"
#include "layout.h"
#include "log.h"
#include "msg.h"
#include "net.h"
#include "uffd.h"

#include "farpage_int.h"

int farpage_is_writeback(const struct farpage_map *m)
{
	return (m->flags & MSG_MAP_CACHE) && !(m->flags & MSG_MAP_RDONLY);
}

/*
 * @type (FLUSH, FLUSH_SEAL, FLUSH_DROP, HANDOVER) of @name through the agent at
 * @sock_path. Returns 0 or -errno; *@gone (if not NULL) tells an agent
 * that could not be reached or went away before it answered (its socket
 * refused, missing or cut) from one that answered an error.
 */
static int farpage_name_call(const char *sock_path, enum msg_type type,
			     const char *name, int *gone)
{
	struct msg req, rep;
	int fd, ret;

	if (gone)
		*gone = 0;
	ret = net_unix_connect(sock_path, &fd);
	if (ret) {
		if (gone)
			*gone = 1;
		return ret;
	}
	msg_init(&req, type);
	msg_strset(req.name, sizeof(req.name), name);
	/* As long as it takes: the agent answers an error itself when the
	 * pages cannot go home within its fault timeout. */
	ret = ctl_call(fd, &req, &rep, -1);
	close(fd);
	if (ret && rep.type == MSG_T_ERROR && rep.text[0])
		log_err("region %s: %s: %s", name, msg_type_name(type),
			rep.text);
	else if (ret && gone)
		*gone = 1;
	msg_fini(&rep);
	return ret;
}

/*
 * After a flush whose agent went away before it answered: waits until the
 * watchdog has seen the agent go (the mapping leaves MAP_LIVE) or the
 * mapping was handed to a restarted agent since @handovers. Returns 1 if
 * the mapping may have a new agent to ask (the caller waits for the
 * hand-over as for any orphan), 0 if the agent still serves the mapping
 * after the agent timeout (the flush's own connection failed: its error
 * stands).
 */
static int farpage_flush_lost(struct farpage_map *m, unsigned int handovers)
{
	uint64_t end = evl_now_ms() + m->agent_timeout_ms;

	for (;;) {
		if (atomic_load(&m->state) != MAP_LIVE ||
		    atomic_load(&m->handovers) != handovers)
			return 1;
		if (evl_now_ms() >= end)
			return 0;
		nanosleep(&(struct timespec){ .tv_nsec = 10000000 }, NULL);
	}
}

/* farpage_flush(), the request being @type (FLUSH, FLUSH_SEAL). */
static int farpage_flush_type(struct farpage_map *m, enum msg_type type)
{
	if (m->flags & MSG_MAP_RDONLY)
		return 0;
	if (!(m->flags & MSG_MAP_CACHE))
		return -EOPNOTSUPP;
	if (atomic_load(&m->lease_lost)) {
		log_err("region %s: flush: the write lease was lost; what "
			"this mapping wrote is not home",
			m->name);
		return -ENOLCK;
	}
	for (;;) {
		unsigned int handovers;
		int ret, gone;

		/* Agent gone: what was written waits in the cache for the
		 * mapping to be handed to a restarted agent (an agent there
		 * before that has no mapping of ours to flush); the
		 * watchdog ends the wait. */
		while (atomic_load(&m->state) == MAP_ORPHAN &&
		       !atomic_load(&m->lease_lost))
			nanosleep(&(struct timespec){ .tv_nsec = 10000000 },
				  NULL);
		if (atomic_load(&m->lease_lost)) {
			log_err("region %s: flush: the write lease was lost; "
				"what this mapping wrote is not home",
				m->name);
			return -ENOLCK;
		}
		if (atomic_load(&m->state) != MAP_LIVE) {
			log_err("region %s: flush: the agent is gone and no "
				"agent came back within %u ms; written pages "
				"are not home",
				m->name, m->agent_timeout_ms);
			return -ENOTCONN;
		}
		handovers = atomic_load(&m->handovers);
		ret = farpage_name_call(m->sock_path, type, m->name, &gone);
		/* The agent died under the flush: the pages wait in the
		 * cache; the mapping's next agent flushes them. */
		if (!ret || !gone || !farpage_flush_lost(m, handovers))
			return ret;
		log_warn("region %s: flush: the agent went away (%s); "
			 "waiting for the mapping to be handed to a restarted "
			 "one",
			 m->name, log_strerror(ret));
	}
}

int farpage_flush(struct farpage_map *m)
{
	return farpage_flush_type(m, MSG_T_FLUSH);
}

int farpage_flush_final(struct farpage_map *m)
{
	if (!farpage_is_writeback(m))
		return farpage_flush(m);
	/* No write from now on: the agent's scan for this flush is the
	 * last one that can find any. */
	if (mprotect(m->base, m->span, PROT_READ))
		return -errno;
	return farpage_flush_type(m, (m->layout_flags & MSG_MAP_SEAL)
					     ? MSG_T_FLUSH_SEAL
					     : MSG_T_FLUSH);
}

int farpage_agent_flush(const char *agent_sock, const char *name)
{
	struct farpage_map_opts o = { .agent_sock = agent_sock };

	if (!msg_name_is_valid(name))
		return -EINVAL;
	return farpage_name_call(farpage_sock_path(&o), MSG_T_FLUSH, name,
				 NULL);
}

int farpage_agent_stats(const char *agent_sock, struct farpage_stats *st)
{
	struct farpage_map_opts o = { .agent_sock = agent_sock };
	struct msg req, rep;
	int fd, ret;

	ret = net_unix_connect(farpage_sock_path(&o), &fd);
	if (ret)
		return ret;
	msg_init(&req, MSG_T_AGENT_STATS);
	ret = ctl_call(fd, &req, &rep, CALL_TIMEOUT_MS);
	close(fd);
	if (ret)
		return ret;
	if (rep.type != MSG_T_AGENT_STAT) {
		msg_fini(&rep);
		return -EBADMSG;
	}
	st->faults = rep.faults;
	st->remote = rep.remote;
	st->local = rep.local;
	st->errors = rep.errors;
	st->poisoned = rep.poisoned;
	{
		uint64_t *dst[MSG_CACHE__MAX] = {
			[MSG_CACHE_LIMIT] = &st->cache_limit,
			[MSG_CACHE_RESIDENT] = &st->cache_resident,
			[MSG_CACHE_RESIDENT_MAX] = &st->cache_resident_max,
			[MSG_CACHE_DIRTY] = &st->cache_dirty,
			[MSG_CACHE_HITS] = &st->cache_hits,
			[MSG_CACHE_MISSES] = &st->cache_misses,
			[MSG_CACHE_EVICTIONS] = &st->cache_evictions,
			[MSG_CACHE_WRITEBACKS] = &st->cache_writebacks,
			[MSG_CACHE_WB_ERRORS] = &st->cache_wb_errors,
			[MSG_CACHE_WP_FAULTS] = &st->cache_wp_faults,
			[MSG_CACHE_FILE_MAX] = &st->cache_file_max,
		};

		for (uint32_t i = 0; i < MSG_CACHE__MAX; i++)
			*dst[i] = i < rep.n_cache ? rep.cache[i] : 0;
	}
	msg_fini(&rep);
	return 0;
}

/*
 * @type of @name through the agent at @agent_sock; *@pages (if not NULL):
 * how much the agent's counter at byte @ctr of struct farpage_stats grew
 * meanwhile (0 if it could not be read).
 */
static int farpage_agent_counted(const char *agent_sock, enum msg_type type,
				 const char *name, size_t ctr, uint64_t *pages)
{
	struct farpage_map_opts o = { .agent_sock = agent_sock };
	struct farpage_stats s0, s1;
	int ret, st;

	if (!msg_name_is_valid(name))
		return -EINVAL;
	st = farpage_agent_stats(agent_sock, &s0);
	ret = farpage_name_call(farpage_sock_path(&o), type, name, NULL);
	if (pages) {
		uint64_t a, b;

		*pages = 0;
		if (!ret && !st && !farpage_agent_stats(agent_sock, &s1)) {
			memcpy(&a, (const char *)&s0 + ctr, sizeof(a));
			memcpy(&b, (const char *)&s1 + ctr, sizeof(b));
			*pages = b - a;
		}
	}
	return ret;
}

int farpage_agent_flush_drop(const char *agent_sock, const char *name,
			     uint64_t *pages)
{
	return farpage_agent_counted(
		agent_sock, MSG_T_FLUSH_DROP, name,
		offsetof(struct farpage_stats, cache_evictions), pages);
}

int farpage_agent_handover(const char *agent_sock, const char *name,
			   uint64_t *pages)
{
	return farpage_agent_counted(
		agent_sock, MSG_T_HANDOVER, name,
		offsetof(struct farpage_stats, cache_writebacks), pages);
}

int farpage_discard(struct farpage_map *m, void *addr, size_t len)
{
	uintptr_t a = (uintptr_t)addr, b = (uintptr_t)m->base;
	struct msg req, rep;
	int ret = 0;

	if (!(m->flags & MSG_MAP_ANON) || a % UFFD_PAGE || len % UFFD_PAGE ||
	    a < b || a - b > m->span || len > m->span - (a - b))
		return -EINVAL;
	if (!len)
		return 0;
	pthread_mutex_lock(&m->discard_lock);
	/* Its own connection: the mapping's is the watchdog's to read. The
	 * agent finds the mapping by the pid both come from. */
	if (m->discard_sock < 0)
		ret = net_unix_connect(m->sock_path, &m->discard_sock);
	if (!ret) {
		msg_init(&req, MSG_T_DISCARD);
		msg_strset(req.name, sizeof(req.name), m->name);
		req.base = a - b;
		req.size = len;
		ret = ctl_call(m->discard_sock, &req, &rep, CALL_TIMEOUT_MS);
		if (ret && rep.type == MSG_T_ERROR && rep.text[0]) {
			log_err("region %s: discard: %s", m->name, rep.text);
		} else if (ret) {
			/* the agent went away: the next one dials again */
			close(m->discard_sock);
			m->discard_sock = -1;
		}
		msg_fini(&rep);
	}
	pthread_mutex_unlock(&m->discard_lock);
	return ret;
}
