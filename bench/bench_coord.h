/* SPDX-License-Identifier: MIT */
/*
 * bench_coord's load on a coordinator (bench_coord_load.c): simulated
 * nodes that join and heartbeat from threads of their own, region creates
 * and changes, each a control call as an agent or the CLI makes it
 * (--insecure coordinators, no handshake); a process's CPU time.
 */
#ifndef BENCH_BENCH_COORD_H
#define BENCH_BENCH_COORD_H

#include <stdint.h>
#include <sys/types.h>

#define BENCH_COORD_POOL (UINT64_C(1) << 40)
/* two chunks: one on each node a region is placed on */
#define BENCH_COORD_REGION  (UINT64_C(4) << 20)
#define BENCH_COORD_THR_MAX 16

/* A simulated node: what it joined as, and the tables it says it has
 * synced (the last heartbeat answer's epoch and cid, as a healthy agent
 * would report them). */
struct bench_coord_node {
	uint64_t id;
	uint64_t inst;
	uint64_t epoch;
	uint64_t cid;
};

/*
 * Joins node @name as n->inst on @fd, its data address 127.0.0.1:@port;
 * its id into n->id. Returns 0 or -errno (said on stderr).
 */
int bench_coord_join(int fd, const char *name, unsigned int port,
		     struct bench_coord_node *n);

/*
 * Creates region @name of BENCH_COORD_REGION bytes on @fd, placed on
 * @place (@n_place nodes; 0: where the coordinator places it). Returns 0
 * or -errno (said on stderr).
 */
int bench_coord_create(int fd, const char *name, const uint64_t *place,
		       uint32_t n_place);

/* A heartbeat of @n on @fd, which then says it synced what the answer
 * names. Returns 0, -EPROTO for another answer, or -errno. */
int bench_coord_heartbeat(int fd, struct bench_coord_node *n);

/*
 * MSG_T_MR_PUT of node @node to @addr, once, on a connection of its own
 * (as a client that moves between coordinators calls): 0, or -errno
 * (-COORD_ERR_NOT_LEADER from a follower, a connect error from a dead
 * one).
 */
int bench_coord_change_once(const char *addr, uint64_t node, uint64_t rkey);

/* CPU time (user + system) of process @pid so far, in ns; 0 if unknown. */
uint64_t bench_coord_cpu_ns(pid_t pid);

/* A heartbeat run: @n nodes over @conns connections, each node once per
 * @period_ns (0: as fast as the answers come), for at least @secs and
 * until @work (if set) returns; the coordinator is @pid. */
struct bench_coord_hbrun {
	const char *addr;
	uint64_t n, conns, period_ns;
	double secs;
	pid_t pid;
	int (*work)(void *arg); /* 0 or -1; runs while they heartbeat */
	void *arg;
	/* results */
	double rate;	 /* heartbeats acknowledged per second */
	double secs_run; /* from the start to the end of the heartbeats */
	double join_secs;
	uint64_t cpu_ns; /* @pid's CPU time over secs_run */
};

/* Runs @r: its nodes join (not timed), then heartbeat; the results into
 * @r. Returns 0 or -1 (said on stderr). */
int bench_coord_hb_drive(struct bench_coord_hbrun *r);

#endif
