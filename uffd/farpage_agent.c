// SPDX-License-Identifier: MIT
/*
 * libfarpage: a mapping's connection to its agent: asking for the layout,
 * handing over the userfaultfd, and the watchdog thread that resumes with
 * a restarted agent or poisons unfetched pages (SIGBUS) when it is gone.
 */
#define LOG_PREFIX "farpage: "
#include "farpage.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
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

/* The agent's socket: @opts', else $FARPAGE_AGENT_SOCK, else the default. */
const char *farpage_sock_path(const struct farpage_map_opts *opts)
{
	const char *p = opts ? opts->agent_sock : NULL;

	if (!p)
		p = getenv(FARPAGE_AGENT_SOCK_ENV);
	if (!p || !*p)
		p = FARPAGE_AGENT_SOCK_DEFAULT;
	return p;
}

/*
 * Poisons every page not yet fetched, from m->poison_next on. Returns 0 when
 * done, or -EAGAIN when the guest's address space is changing: read its
 * events, then call again (the page was not poisoned: taking that as done
 * would leave its thread waiting forever).
 */
static int farpage_poison_remote(struct farpage_map *m)
{
	uint64_t base = (uint64_t)(uintptr_t)m->base, n, next;
	int ret;

	while (m->poison_next < base + m->span) {
		uint32_t i =
			(uint32_t)((m->poison_next - base) / m->chunk_size);
		uint64_t end = base + (uint64_t)(i + 1) * m->chunk_size;

		if (m->is_local[i]) {
			m->poison_next = end;
			continue;
		}
		ret = uffd_poison(m->uffd, m->poison_next, end - m->poison_next,
				  &n, &next);
		m->poisoned += n;
		if (ret == -EAGAIN) {
			m->poison_next = next;
			return ret;
		}
		if (ret && ret != -ENOENT)
			log_errno(ret, "region %s: poisoning chunk %u", m->name,
				  i);
		m->poison_next = end;
	}
	log_info("region %s: %llu pages poisoned", m->name,
		 (unsigned long long)m->poisoned);
	return 0;
}

/*
 * A page faulted again after poisoning (dropped with MADV_DONTNEED). The
 * list was allocated with the mapping: nothing is allocated here, where
 * the heap may be in a region no agent serves any more (farpage run).
 * When it is full the fault is left: its next event brings it back.
 */
static void farpage_pend_add(struct farpage_map *m, uint64_t addr)
{
	if (m->n_pend < m->cap_pend)
		m->pend[m->n_pend++] = addr;
}

/* Poisons the pending pages; returns how many must wait (-EAGAIN). */
static size_t farpage_pend_run(struct farpage_map *m)
{
	size_t k = 0;

	for (size_t i = 0; i < m->n_pend; i++) {
		if (uffd_poison(m->uffd, m->pend[i], UFFD_PAGE, NULL, NULL) ==
		    -EAGAIN)
			m->pend[k++] = m->pend[i];
	}
	m->n_pend = k;
	return k;
}

/*
 * Step one of mapping, on a fresh agent connection: MAP {flags} ->
 * MAP_LAYOUT, with the cache memfd when the layout's flags say
 * MSG_MAP_CACHE (the pool's segments are asked for next, MAP_FDS). Returns
 * 0 with *layout to msg_fini() and *cache_fd (or -1) to close, the agent's
 * -errno (its text logged), -EBADMSG or -EPROTO.
 */
int farpage_agent_layout(int sock, const char *name, uint64_t flags,
			 uint64_t wgen, uint64_t cache_bytes,
			 struct msg *layout, int *cache_fd)
{
	struct msg req;
	int fds[2], n_fds = 2, ret;

	*cache_fd = -1;
	msg_init(&req, MSG_T_MAP);
	msg_strset(req.name, sizeof(req.name), name);
	req.flags = flags & (MSG_MAP_RDONLY | MSG_LAYOUT_RUNS |
			     MSG_MAP_MOVABLE | MSG_MAP_INCOMING | MSG_MAP_ANON);
	req.wgen = wgen;
	req.size = cache_bytes;
	ret = ctl_send(sock, &req, NULL, 0);
	if (ret)
		return ret;
	ret = ctl_recv(sock, layout, fds, &n_fds, CALL_TIMEOUT_MS);
	if (ret)
		return ret;
	if (layout->type == MSG_T_ERROR) {
		ret = -(int)layout->err;
		if (layout->text[0])
			log_err("map %s: %s", name, layout->text);
	} else if (layout->type != MSG_T_MAP_LAYOUT) {
		ret = -EBADMSG;
	} else if ((ret = layout_msg_to_runs(layout))) {
		log_err("map %s: a bad layout from the agent", name);
	} else if (n_fds != !!(layout->flags & MSG_MAP_CACHE)) {
		/* An agent of another version (one that sent its pool). */
		log_err("map %s: the agent sent %d descriptors with the "
			"layout, not %d: is it of another farpage version?",
			name, n_fds, !!(layout->flags & MSG_MAP_CACHE));
		ret = -EPROTO;
	}
	if (ret) {
		msg_fini(layout);
		for (int i = 0; i < n_fds; i++)
			close(fds[i]);
		return ret;
	}
	if (n_fds)
		*cache_fd = fds[0];
	return 0;
}

/* Step two: MAP_UFFD with our uffd -> OK. Returns 0 or -errno. */
int farpage_agent_hand_uffd(int sock, const struct farpage_map *m,
			    uint64_t flags)
{
	struct msg req, rep;
	int ret;

	int fds[2] = { m->uffd, m->cache_fd };

	msg_init(&req, MSG_T_MAP_UFFD);
	req.base = (uint64_t)(uintptr_t)m->base;
	req.features = m->features;
	req.flags = flags;
	/* The cache memfd goes back to an agent we hand the mapping to. */
	ret = ctl_send(sock, &req, fds,
		       (flags & MSG_MAP_RESUME) && m->cache_fd >= 0 ? 2 : 1);
	if (ret)
		return ret;
	ret = ctl_recv(sock, &rep, NULL, NULL, CALL_TIMEOUT_MS);
	if (ret)
		return ret;
	if (rep.type == MSG_T_ERROR) {
		ret = -(int)rep.err;
		log_err("map %s: the agent refused the userfaultfd: %s",
			m->name, rep.text);
		/* The agent's refusal, not the kernel's: -EPERM here means
		 * userfaultfd itself is not permitted. */
		if (ret == -EPERM)
			ret = -EACCES;
	} else if (rep.type != MSG_T_OK) {
		ret = -EBADMSG;
	}
	msg_fini(&rep);
	return ret;
}

/* Same region as mapped: same size, chunks, owners, offsets, instances,
 * epoch and coordinator tables. */
static int farpage_layout_is_same(const struct farpage_map *m,
				  const struct msg *l)
{
	/* A region deleted and made again under the same name may get the
	 * same chunks: the epoch and the tables' cid tell them apart. */
	if (l->size != m->size || l->chunk_size != m->chunk_size ||
	    l->n_runs != m->n_runs || l->node != m->node ||
	    l->epoch != m->epoch || l->cid != m->cid)
		return 0;
	/* Runs are made the same way from the same chunks. */
	for (uint32_t i = 0; i < m->n_runs; i++) {
		const struct msg_run *a = &l->runs[i], *b = &m->runs[i];

		if (a->n != b->n || a->n_parts != b->n_parts)
			return 0;
		for (uint32_t k = 0; k < a->n_parts; k++)
			if (a->parts[k].node != b->parts[k].node ||
			    a->parts[k].off != b->parts[k].off ||
			    a->parts[k].inst != b->parts[k].inst)
				return 0;
	}
	return 1;
}

/*
 * Hands the uffd to an agent that came back on the same socket: it serves
 * the mapping from now on and wakes the whole range, so threads blocked on
 * faults the old agent (or we) had read fault again. Chunks mapped from
 * the old pool stay as they are. A writable mapping must get its write
 * lease back under the generation it held: -ENOLCK (or -EBUSY) if another
 * mapping held it since, for good. Returns 0 or -errno.
 */
static int farpage_resume(struct farpage_map *m)
{
	struct msg l;
	int fd, cache_fd, ret;

	ret = net_unix_connect(m->sock_path, &fd);
	if (ret)
		return ret;
	/* A writable mapping takes the write lease again, if still its own:
	 * the dead agent's ended with its instance. */
	ret = farpage_agent_layout(fd, m->name, m->flags | MSG_LAYOUT_RUNS,
				   m->wgen, m->cache_bytes, &l, &cache_fd);
	if (!ret) {
		if (cache_fd >= 0)
			close(cache_fd);
		if (!farpage_layout_is_same(m, &l))
			ret = -ESTALE;
		msg_fini(&l);
	}
	if (!ret)
		ret = farpage_agent_hand_uffd(fd, m, m->flags | MSG_MAP_RESUME);
	if (ret) {
		close(fd);
		if (ret == -ESTALE)
			log_err("region %s changed while its agent was away; "
				"not resuming",
				m->name);
		return ret;
	}
	close(m->sock);
	m->sock = fd;
	atomic_fetch_add(&m->handovers, 1);
	atomic_store(&m->state, MAP_LIVE);
	log_warn("region %s: handed over to the restarted agent", m->name);
	return 0;
}

/*
 * With the agent gone this thread reads the uffd itself so that munmap()
 * and madvise() in the guest do not hang on unread events. Meanwhile it
 * tries to hand the mapping to an agent that comes back on the same
 * socket (returns 1 then). Faults stay blocked until the deadline, then
 * every unfetched page is poisoned (returns 0 when told to stop).
 */
/*
 * The mapping's copies must not be read any more: its pages leave the
 * cache memfd (unprotected first: a write-protected page punched would
 * keep a marker poisoning cannot replace), so that every touch of a
 * remote page faults, and is poisoned. Flushes fail from then on.
 */
static void farpage_cache_drop(struct farpage_map *m)
{
	if (m->cache_fd >= 0) {
		for (uint32_t i = 0; i < m->n_chunks; i++) {
			uint64_t a = (uint64_t)(uintptr_t)m->base +
				     (uint64_t)i * m->chunk_size;

			if (!m->is_local[i])
				uffd_wp(m->uffd, a, m->chunk_size, 0, 0);
		}
		if (fallocate(m->cache_fd,
			      FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0,
			      (off_t)m->span))
			log_errno(-errno, "region %s: dropping the cache",
				  m->name);
	}
	/* Said once the pages are gone: a flush that fails now is followed
	 * by SIGBUS on every touch of a remote page, never a quiet write. */
	atomic_store(&m->lease_lost, 1);
}

/* The write lease is lost: what this mapping wrote and did not send home
 * was overwritten by another writer, and must not be read back or sent. */
static void farpage_lease_lose(struct farpage_map *m, int err)
{
	log_err("region %s: the write lease (generation %llu) is lost: %s; "
		"what this mapping wrote and had not flushed is dropped, its "
		"flushes fail, and its remote pages raise SIGBUS",
		m->name, (unsigned long long)m->wgen, log_strerror(err));
	farpage_cache_drop(m);
}

static int farpage_orphan(struct farpage_map *m)
{
	struct uffd_msg msgs[32];
	int64_t deadline, now, retry = 0;
	int ret;

	deadline = (int64_t)evl_now_ms() + m->agent_timeout_ms;
	if (m->layout_flags & MSG_MAP_COHERENT) {
		/* Its homes give its pages to other hosts once this node's
		 * lease ends: not one copy is read from now on. */
		log_err("region %s: the agent closed its socket; this host's "
			"copies of the coherent region are dropped (what it "
			"wrote and had not flushed is lost) and its pages "
			"raise "
			"SIGBUS",
			m->name);
		farpage_cache_drop(m);
		deadline = (int64_t)evl_now_ms();
	} else {
		log_err("region %s: the agent closed its socket; faults wait "
			"up to %u ms, then SIGBUS",
			m->name, m->agent_timeout_ms);
	}
	atomic_store(&m->state, MAP_ORPHAN);
	for (;;) {
		struct pollfd pfd[2] = {
			{ .fd = m->stop_efd, .events = POLLIN },
			{ .fd = m->uffd, .events = POLLIN },
		};
		int timeout = -1, state = atomic_load(&m->state);
		ssize_t n;

		if (state == MAP_ORPHAN) {
			now = (int64_t)evl_now_ms();
			/* Which of its pages read as zeroes died with the
			 * agent: never handed over; nor a coherent map
			 * (its homes dropped this host's copies). */
			if ((m->flags & MSG_MAP_ANON) ||
			    (m->layout_flags & MSG_MAP_COHERENT))
				retry = INT64_MAX;
			if (now >= retry) {
				ret = farpage_resume(m);
				if (!ret)
					return 1;
				retry = now + RESUME_RETRY_MS;
				/* Final: never retried (it would take the
				 * lease back from under its new holder). */
				if (!(m->flags & MSG_MAP_RDONLY) &&
				    (ret == -ENOLCK || ret == -EBUSY)) {
					farpage_lease_lose(m, ret);
					deadline = now;
				}
			}
			if (now >= deadline) {
				if (!(m->features & UFFD_FEATURE_POISON)) {
					log_err("region %s: the kernel cannot "
						"poison pages; aborting rather "
						"than returning zero pages",
						m->name);
					abort();
				}
				/* Said first: the sweep may end early (an
				 * unmap) once a thread got its SIGBUS. */
				log_err("region %s: agent gone for %u ms; "
					"pages "
					"not yet fetched now raise SIGBUS",
					m->name, m->agent_timeout_ms);
				m->poison_next = (uint64_t)(uintptr_t)m->base;
				atomic_store(&m->state, MAP_POISONING);
				continue;
			}
			timeout = (int)((deadline < retry ? deadline : retry) -
					now);
		} else if (state == MAP_POISONING) {
			/* -EAGAIN: an event waits; read it, then go on. */
			if (farpage_poison_remote(m) == -EAGAIN)
				timeout = 1;
			else
				atomic_store(&m->state, MAP_POISONED);
		}
		if (farpage_pend_run(m))
			timeout = 1;
		if (poll(pfd, 2, timeout) < 0 && errno != EINTR)
			return 0;
		if (pfd[0].revents)
			return 0;
		if (!(pfd[1].revents & POLLIN))
			continue;
		n = uffd_read_msgs(m->uffd, msgs, 32);
		for (ssize_t k = 0; k < n; k++) {
			uint64_t a;

			if (msgs[k].event != UFFD_EVENT_PAGEFAULT)
				continue;
			/* A page dropped (MADV_DONTNEED) after it was
			 * poisoned; pages ahead of the sweep it poisons. */
			a = msgs[k].arg.pagefault.address & ~(UFFD_PAGE - 1);
			state = atomic_load(&m->state);
			if (state == MAP_POISONED ||
			    (state == MAP_POISONING && a < m->poison_next))
				farpage_pend_add(m, a);
		}
	}
}

void *farpage_watchdog(void *arg)
{
	struct farpage_map *m = arg;
	struct pollfd pfd[2] = {
		{ .fd = m->stop_efd, .events = POLLIN },
		{ .fd = m->sock, .events = POLLIN },
	};
	char buf[256];

	for (;;) {
		if (poll(pfd, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			return NULL;
		}
		if (pfd[0].revents)
			return NULL;
		if (pfd[1].revents) {
			/* The agent sends nothing unasked: any readable state
			 * other than data is the connection ending. */
			ssize_t n =
				recv(m->sock, buf, sizeof(buf), MSG_DONTWAIT);

			if (n > 0 || (n < 0 && errno == EAGAIN))
				continue;
			if (!farpage_orphan(m))
				return NULL;
			pfd[1].fd = m->sock; /* the restarted agent's */
		}
	}
}

/* Stops the watchdog thread (it reads the mapping); idempotent. */
void farpage_watchdog_stop(struct farpage_map *m)
{
	uint64_t one = 1;
	ssize_t r;

	if (!m->watchdog_started)
		return;
	r = write(m->stop_efd, &one, sizeof(one));
	(void)r;
	pthread_join(m->watchdog, NULL);
	m->watchdog_started = 0;
}

/*
 * UNMAP on the mapping's connection: the agent's answer comes once the
 * mapping is gone there and its write lease given back, the coordinator
 * acknowledging it (a writable map on another host may follow at once).
 * Returns 0 or -errno (the agent gives the lease back later itself).
 */
int farpage_agent_unmap(struct farpage_map *m)
{
	struct msg req, rep;
	int ret;

	msg_init(&req, MSG_T_UNMAP);
	ret = ctl_call(m->sock, &req, &rep, CALL_TIMEOUT_MS);
	if (ret)
		log_err("region %s: unmap: %s", m->name,
			rep.type == MSG_T_ERROR && rep.text[0]
				? rep.text
				: log_strerror(ret));
	msg_fini(&rep);
	return ret;
}
