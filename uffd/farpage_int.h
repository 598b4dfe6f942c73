/* SPDX-License-Identifier: MIT */
/*
 * Inside libfarpage: a mapping's state, shared by the map and unmap code
 * (farpage.c), the agent connection and watchdog (farpage_agent.c) and
 * flushes (farpage_flush.c). Nothing here is exported from the library.
 */
#ifndef UFFD_FARPAGE_INT_H
#define UFFD_FARPAGE_INT_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "farpage.h"
#include "msg.h"

#define MAP_ALIGN	  (2ull << 20) /* hugetlb chunks need 2 MiB alignment */
#define CALL_TIMEOUT_MS	  30000
#define AGENT_TIMEOUT_DEF 5000
#define RESUME_RETRY_MS	  200  /* look for a restarted agent this often */
#define FARPAGE_PEND_MAX  1024 /* faults after poisoning held at once */

enum map_state {
	MAP_LIVE = 0,  /* agent serving faults */
	MAP_ORPHAN,    /* agent gone, faults held until the deadline */
	MAP_POISONING, /* agent gone, poisoning unfetched pages */
	MAP_POISONED,  /* agent gone, unfetched pages poisoned */
};

struct farpage_map {
	char name[MSG_NAME_MAX];
	uint8_t *base;
	size_t size; /* region bytes */
	size_t span; /* mapped bytes: whole chunks */
	size_t chunk_size;
	uint64_t node;
	uint64_t instance; /* the agent's: its pool holds only its chunks */
	uint64_t epoch;	   /* of the region: another one may take its name */
	uint64_t cid;	   /* of the coordinator's tables the layout is from */
	struct msg_run *runs; /* the layout, in runs (common/layout.h) */
	uint32_t n_runs;
	uint32_t n_chunks;
	uint8_t *is_local; /* per chunk: mapped from the pool */
	int cache_fd;	   /* cache mode: the agent's cache memfd, else -1 */
	uint64_t features;
	unsigned int agent_timeout_ms;
	uint64_t flags;	      /* MSG_MAP_* asked for */
	uint64_t cache_bytes; /* its own bound in the agent's cache; 0: none */
	/* MSG_MAP_ANON: the connection DISCARDs go on (-1: not yet), one
	 * at a time */
	pthread_mutex_t discard_lock;
	int discard_sock;
	uint64_t layout_flags; /* MSG_MAP_* of the agent's MAP_LAYOUT */
	uint64_t wgen;	       /* writable: its write lease's generation */
	/* the write lease is lost for good (another mapping took it while
	 * the agent was away): flushes fail, every remote page is poisoned */
	_Atomic int lease_lost;
	char sock_path[108];
	int sock;
	int uffd;
	int stop_efd;
	pthread_t watchdog;
	int watchdog_started;
	_Atomic int state;
	/* hand-overs to a restarted agent so far (a flush cut by the agent's
	 * death waits for the next one) */
	_Atomic unsigned int handovers;
	/* watchdog only: poisoning goes on from here after -EAGAIN */
	uint64_t poison_next;
	uint64_t poisoned;
	/* pages faulted after poisoning, to poison again (-EAGAIN) */
	uint64_t *pend;
	size_t n_pend, cap_pend;
};

#pragma GCC visibility push(hidden)

/* The agent socket: @opts, else $FARPAGE_AGENT_SOCK, else the default. */
const char *farpage_sock_path(const struct farpage_map_opts *opts);

/* Frees a mapping (@unmapped: its range is gone already). */
void farpage_map_free(struct farpage_map *m, int unmapped);

/* MAP of @name on @sock: the layout in *@layout (and the cache memfd in
 * *@cache_fd, if any). Returns 0 or -errno. */
int farpage_agent_layout(int sock, const char *name, uint64_t flags,
			 uint64_t wgen, uint64_t cache_bytes,
			 struct msg *layout, int *cache_fd);

/* Hands the mapping's userfaultfd to the agent. Returns 0 or -errno. */
int farpage_agent_hand_uffd(int sock, const struct farpage_map *m,
			    uint64_t flags);

/* The watchdog thread: turns a dead agent into a resume or SIGBUS. */
void *farpage_watchdog(void *arg);

/* Stops the watchdog thread (it reads the mapping); idempotent. */
void farpage_watchdog_stop(struct farpage_map *m);

/* UNMAP on the mapping's connection. Returns 0 or -errno. */
int farpage_agent_unmap(struct farpage_map *m);

/* A cache-mode writable mapping: written pages go home on flush. */
int farpage_is_writeback(const struct farpage_map *m);

#pragma GCC visibility pop

#endif
