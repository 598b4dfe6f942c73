// SPDX-License-Identifier: MIT
/*
 * The coordinator's server (server.h): its event loop, listening socket
 * and signals, the lease tick (node leases, handshake, idle and half-frame
 * timeouts, the figures for /metrics), made and torn down. Connections:
 * server_int.h.
 */
#define LOG_PREFIX "coord: "
#include "server.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <openssl/crypto.h>

#include "coord.h"
#include "evl.h"
#include "log.h"
#include "metrics.h"
#include "net.h"
#include "server_int.h"

static void on_signal(struct evl *l, int fd, uint32_t events, void *arg)
{
	struct signalfd_siginfo si;

	if (read(fd, &si, sizeof(si)) == (ssize_t)sizeof(si))
		log_info("signal %u: shutting down", si.ssi_signo);
	evl_stop(l);
}

static void on_lease_tick(struct evl *l, void *arg)
{
	struct server *s = arg;
	uint64_t now = evl_now_ms();
	struct server_conn *cn, *next;
	unsigned int hs_ms;
	int ret;

	coord_lead_tick(s->coord, s->addr, now);
	/* The timed work is the leader's. */
	ret = coord_leads(s->coord) ? coord_lease_check(s->coord, now) : 0;
	if (!ret)
		ret = coord_sync(s->coord);
	if (ret && coord_store_failed(s->coord, ret))
		server_fatal(ret);
	server_figures(s);
	/* Under pressure (the pool more than half full) a quarter of it. */
	hs_ms = s->n_hs > s->hs_max / 2 ? s->hs_timeout_ms / 4
					: s->hs_timeout_ms;
	if (!hs_ms)
		hs_ms = 1;
	for (cn = s->conns; cn; cn = next) {
		next = cn->next;
		/* Only time spent waiting on the peer counts, not time we
		 * stopped reading it (too much of its output queued). */
		if (cn->paused && cn->partial_ms)
			cn->partial_ms = now;
		if (cn->hs && now - cn->since_ms >= hs_ms) {
			atomic_fetch_add(&s->m[SERVER_M_AUTH_FAILED], 1);
			server_log_limited(&s->refusals,
					   "peer %s: no handshake within %u "
					   "ms; closing",
					   cn->peer, hs_ms);
			server_conn_close(cn);
			continue;
		}
		if (!cn->hs && !cn->partial_ms && !cn->paused &&
		    !server_conn_pending(cn) &&
		    now - cn->since_ms >= s->idle_timeout_ms) {
			log_dbg("peer %s: idle for %u ms; closing", cn->peer,
				s->idle_timeout_ms);
			server_conn_close(cn);
			continue;
		}
		if (!cn->partial_ms ||
		    now - cn->partial_ms < s->frame_timeout_ms)
			continue;
		atomic_fetch_add(&s->m[SERVER_M_REFUSED], 1);
		log_warn("peer %s: half a frame (%zu bytes) for %u ms; closing",
			 cn->peer, cn->rlen, s->frame_timeout_ms);
		server_conn_close(cn);
	}
}

int server_create(const struct server_cfg *cfg, struct coord *c,
		  struct server **out)
{
	unsigned int reserve;
	struct server *s;
	sigset_t mask;
	int ret;

	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->coord = c;
	s->lfd = -1;
	s->sfd = -1;
	s->max_conns = cfg->max_conns ? cfg->max_conns : SERVER_CONNS_MAX;
	s->frame_timeout_ms = cfg->frame_timeout_ms ? cfg->frame_timeout_ms
						    : SERVER_FRAME_TIMEOUT_MS;
	s->hs_timeout_ms =
		cfg->hs_timeout_ms ? cfg->hs_timeout_ms : SERVER_HS_TIMEOUT_MS;
	s->idle_timeout_ms = cfg->idle_timeout_ms ? cfg->idle_timeout_ms
						  : SERVER_IDLE_TIMEOUT_MS;
	/* A quarter in the handshake, 1/32 kept for admins, nodes the rest. */
	s->hs_max = s->max_conns / 4 ? s->max_conns / 4 : 1;
	reserve = s->max_conns / 32 ? s->max_conns / 32 : 1;
	s->nodes_max = s->max_conns > s->hs_max + reserve
			       ? s->max_conns - s->hs_max - reserve
			       : 1;
	s->insecure = cfg->insecure;
	s->refusals.burst = SERVER_LOG_BURST;
	s->sessions.burst = SERVER_SESS_BURST;
	s->capped.burst = SERVER_LOG_BURST;
	s->addrs.burst = SERVER_LOG_BURST;
	s->data_addr_strict = cfg->data_addr_strict;
	if (!s->insecure && (!cfg->n_keys || cfg->n_keys > AUTH_KEYS_MAX)) {
		log_err("no cluster key (or more than %d)", AUTH_KEYS_MAX);
		ret = -EINVAL;
		goto err;
	}
	s->n_keys = s->insecure ? 0 : cfg->n_keys;
	s->gkeys = s->insecure ? NULL : cfg->gkeys;
	if (s->n_keys)
		memcpy(s->keys, cfg->keys, s->n_keys * sizeof(s->keys[0]));
	ret = evl_create(&s->evl);
	if (ret) {
		log_errno(ret, "cannot create the event loop");
		goto err;
	}
	sigemptyset(&mask);
	sigaddset(&mask, SIGINT);
	sigaddset(&mask, SIGTERM);
	s->sfd = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
	if (s->sfd < 0) {
		ret = -errno;
		log_errno(ret, "cannot create a signalfd");
		goto err;
	}
	ret = evl_add(s->evl, s->sfd, EPOLLIN, on_signal, s);
	if (ret)
		goto err;
	ret = net_listen(cfg->listen_addr, SERVER_BACKLOG, &s->lfd);
	if (ret) {
		net_listen_fail_log(ret, "the coordinator", cfg->listen_addr);
		goto err;
	}
	ret = net_local_addr(s->lfd, s->addr, sizeof(s->addr));
	if (ret) {
		log_errno(ret, "cannot get the address of %s",
			  cfg->listen_addr);
		goto err;
	}
	ret = evl_add(s->evl, s->lfd, EPOLLIN, server_on_accept, s);
	if (ret)
		goto err;
	ret = evl_timer_add(s->evl, SERVER_LEASE_TICK, on_lease_tick, s);
	if (ret < 0)
		goto err;
	/* With several coordinators: stand at once, so that the only one
	 * leads before its first request. */
	coord_lead_tick(c, s->addr, evl_now_ms());
	server_figures(s);
	if (cfg->metrics_listen) {
		ret = metrics_srv_start(cfg->metrics_listen,
					cfg->metrics_token_file, "coordinator",
					server_metrics_render, s, &s->metrics);
		if (ret) {
			log_errno(ret, "cannot serve /metrics on %s",
				  cfg->metrics_listen);
			goto err;
		}
	}
	if (cfg->addr_file) {
		ret = metrics_srv_addr_file(s->metrics, cfg->addr_file,
					    s->addr);
		if (ret) {
			log_errno(ret, "cannot write %s", cfg->addr_file);
			goto err;
		}
	}
	log_info("listening on %s", s->addr);
	*out = s;
	return 0;
err:
	server_destroy(s);
	return ret;
}

void server_destroy(struct server *s)
{
	if (!s)
		return;
	/* Its thread reads the figures and the log's. */
	metrics_srv_stop(s->metrics);
	while (s->conns)
		server_conn_close(s->conns);
	if (s->lfd >= 0)
		close(s->lfd);
	if (s->sfd >= 0)
		close(s->sfd);
	evl_destroy(s->evl);
	OPENSSL_cleanse(s, sizeof(*s));
	free(s);
}

int server_run(struct server *s)
{
	int ret = evl_run(s->evl);

	if (ret)
		log_errno(ret, "event loop");
	return ret;
}
