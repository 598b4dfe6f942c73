/* SPDX-License-Identifier: MIT */
/*
 * The coordinator's control server: a TCP listener and its connections on
 * one event loop, each connection a stream of framed CBOR requests answered
 * in order by coord_handle().
 */
#ifndef COORDINATOR_SERVER_H
#define COORDINATOR_SERVER_H

#include <stdbool.h>

#include "auth.h"

struct coord;
struct gkeys;
struct server;

#define SERVER_CONNS_MAX 1024u

struct server_cfg {
	const char *listen_addr; /* "host:port"; port 0 picks a free one */
	const char *addr_file;	 /* NULL, or where to write the bound addr */
	unsigned int max_conns;	 /* 0: SERVER_CONNS_MAX */
	/* a connection holding half a frame this long is closed; 0: 10000 */
	unsigned int frame_timeout_ms;
	/* serve Prometheus /metrics here ("host:port"); NULL: off. Its
	 * bound address goes on a second line of addr_file
	 * ("metrics host:port"). */
	const char *metrics_listen;
	const char *metrics_token_file; /* its bearer token; NULL: none */
	/* a node's data address other than the one it connects from is
	 * refused (else taken, logged) */
	bool data_addr_strict;
	/*
	 * Every connection proves a key derived from one of these cluster
	 * keys (two during a rollover; the first is the current one, which
	 * pair keys are derived from), unless insecure.
	 */
	const struct auth_key *keys;
	unsigned int n_keys;
	bool insecure;
	/* the keyring @c seals grants with (coord_cfg.grant_key_arg):
	 * told which key each node's own session proves; NULL: none */
	struct gkeys *gkeys;
	/* a connection still in its handshake this long is closed; 0: 5000 */
	unsigned int hs_timeout_ms;
	/* an authenticated connection silent this long is closed; 0: 600000 */
	unsigned int idle_timeout_ms;
};

/*
 * Listens on cfg->listen_addr and, once it does, writes the bound
 * "host:port" and a newline to cfg->addr_file. @c stays the caller's and
 * must outlive the server. SIGINT and SIGTERM must already be blocked in
 * the calling thread: the server takes them from a signalfd. Returns 0 and
 * the server in *out, or -errno (logged).
 */
int server_create(const struct server_cfg *cfg, struct coord *c,
		  struct server **out);

/* Closes the listener and every connection; NULL is a no-op. */
void server_destroy(struct server *s);

/*
 * Serves until SIGINT or SIGTERM arrives. Returns 0 then, or -errno if the
 * event loop fails. A failure to write or sync the log ends the process
 * with exit status 1 before any reply for the lost change is sent.
 */
int server_run(struct server *s);

#endif
