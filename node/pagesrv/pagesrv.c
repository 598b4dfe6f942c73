// SPDX-License-Identifier: MIT
/*
 * The owner's TCP page server: one thread, one io_uring. A connection
 * starts with the peer handshake (auth.h); then every request and reply is
 * a sealed record (docs/protocol.md, section 3). Insecure: the plain
 * protocol, replies gathered with SENDMSG straight from the pool and WRITE
 * data received straight into it (no copy of page data).
 *
 * This file: the thread, its ring and its completions, accepting, the
 * tick; the rest in pagesrv_*.c, declared in pagesrv_int.h.
 */
#define LOG_PREFIX "pagesrv: "
#include "pagesrv_int.h"

#include <errno.h>
#include <netdb.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <liburing.h>

#include "auth.h"
#include "bufpool.h"
#include "evl.h"
#include "log.h"
#include "net.h"
#include "pggrant.h"

/*
 * Connections not done with their handshake in time are closed, and
 * sessions idle past what their peer keeps.
 */
static void pagesrv_on_tick(struct pagesrv *s)
{
	uint64_t now = evl_now_ms();
	struct pagesrv_conn *c, *next;
	char what[80];

	for (c = s->conns; c; c = next) {
		next = c->next;
		if (!c->in_hs || now < c->hs_deadline)
			continue;
		pagesrv_count(&s->st_hs_timeouts, 1);
		pagesrv_count(&s->st_dropped, 1);
		snprintf(what, sizeof(what),
			 "no handshake within %u ms, closing",
			 s->hs_timeout_ms);
		pagesrv_refusal_log(s, c->name, what);
		/* in its handshake, never fenced: frees nothing else */
		pagesrv_conn_close(c);
	}
	pagesrv_idle_reap(s, now);
	pagesrv_tick_arm(s);
}

static void pagesrv_conn_create(struct pagesrv *s, int fd)
{
	struct auth_server_cfg acfg = {
		.lookup = pagesrv_hs_lookup,
		.arg = s,
		.flags = s->auth_flags,
	};
	char host[64], port[8]; /* numeric */
	struct pagesrv_conn *c;
	int ret;

	c = calloc(1, sizeof(*c));
	if (!c) {
		log_err("no memory for a connection, closing it");
		close(fd);
		return;
	}
	c->s = s;
	c->fd = fd;
	c->born_ms = evl_now_ms();
	c->recv_req = (struct pagesrv_req){ PAGESRV_OP_RECV, c };
	c->send_req = (struct pagesrv_req){ PAGESRV_OP_SEND, c };
	c->cancel_req = (struct pagesrv_req){ PAGESRV_OP_CANCEL, c };
	ret = getnameinfo((struct sockaddr *)&s->acc_addr, s->acc_len, host,
			  sizeof(host), port, sizeof(port),
			  NI_NUMERICHOST | NI_NUMERICSERV);
	if (ret)
		snprintf(c->addr, sizeof(c->addr), "client fd %d", fd);
	else
		snprintf(c->addr, sizeof(c->addr), "%s:%s", host, port);
	memcpy(c->name, c->addr, sizeof(c->addr));
	pagesrv_src_get(&s->acc_addr, c->src, &c->src_len);
	if (!s->insecure && auth_hs_server(&acfg, &c->hs)) {
		log_err("%s: no memory for a handshake, closing it", c->name);
		close(fd);
		free(c);
		return;
	}
	ret = net_set_nodelay(fd);
	if (ret)
		log_dbg("%s: TCP_NODELAY: %s", c->name, log_strerror(ret));
	c->next = s->conns;
	if (s->conns)
		s->conns->prev = c;
	s->conns = c;
	s->nconns++;
	s->nlive++;
	pagesrv_count(&s->st_conns, 1);
	log_dbg("%s: connected", c->name);
	if (!c->hs) {
		pagesrv_conn_recv(c);
		return;
	}
	c->in_hs = true;
	s->nhs++;
	c->hs_deadline = evl_now_ms() + s->hs_timeout_ms;
	pagesrv_tick_arm(s);
	pagesrv_conn_hs_io(c);
}

static void pagesrv_accept_arm(struct pagesrv *s)
{
	struct io_uring_sqe *sqe;

	if (s->stopping || s->accept_busy)
		return;
	sqe = pagesrv_sqe_get(s);
	if (!sqe) {
		log_err("no SQE to accept with");
		return;
	}
	s->acc_len = sizeof(s->acc_addr);
	io_uring_prep_accept(sqe, s->lfd, (struct sockaddr *)&s->acc_addr,
			     &s->acc_len, SOCK_CLOEXEC);
	io_uring_sqe_set_data(sqe, &s->accept_req);
	s->accept_busy = true;
}

/* Accept failed for want of resources: try again in a while. */
static void pagesrv_accept_retry(struct pagesrv *s)
{
	struct io_uring_sqe *sqe;

	if (s->stopping || s->timer_busy)
		return;
	sqe = pagesrv_sqe_get(s);
	if (!sqe)
		return;
	s->retry_ts.tv_sec = 0;
	s->retry_ts.tv_nsec = PAGESRV_RETRY_NS;
	io_uring_prep_timeout(sqe, &s->retry_ts, 0, 0);
	io_uring_sqe_set_data(sqe, &s->timer_req);
	s->timer_busy = true;
}

static void pagesrv_on_accept(struct pagesrv *s, int res)
{
	struct pagesrv_conn *old;
	uint8_t src[16], src_len;
	unsigned int n;

	if (res < 0) {
		if (s->stopping)
			return;
		if (res == -EINTR || res == -EAGAIN || res == -ECONNABORTED) {
			pagesrv_accept_arm(s);
			return;
		}
		if (!s->accept_logged)
			log_errno(res, "accept on %s", s->addr);
		s->accept_logged = true;
		pagesrv_accept_retry(s);
		return;
	}
	s->accept_logged = false;
	if (s->stopping) {
		close(res);
		return;
	}
	if (!s->insecure) {
		pagesrv_src_get(&s->acc_addr, src, &src_len);
		pagesrv_hs_room(s, src, src_len);
	}
	/* at the cap, one still in its handshake makes room if there is */
	old = s->insecure ? NULL : pagesrv_hs_oldest(s, NULL, 0, &n);
	if (s->nlive >= s->max_conns && old) {
		pagesrv_hs_evict(old, "closed: connection cap reached");
	} else if (s->nlive >= s->max_conns) {
		if (!s->cap_logged)
			log_warn("connection cap %u reached, closing new ones",
				 s->max_conns);
		s->cap_logged = true;
		pagesrv_count(&s->st_dropped, 1);
		pagesrv_count(&s->st_refused, 1);
		close(res);
		pagesrv_accept_arm(s);
		return;
	}
	s->cap_logged = false;
	pagesrv_conn_create(s, res);
	pagesrv_accept_arm(s);
}

static void pagesrv_wake_arm(struct pagesrv *s)
{
	struct io_uring_sqe *sqe = pagesrv_sqe_get(s);

	if (!sqe)
		return;
	io_uring_prep_read(sqe, s->efd, &s->wake_val, sizeof(s->wake_val), 0);
	io_uring_sqe_set_data(sqe, &s->wake_req);
	s->wake_busy = true;
}

static void pagesrv_stop(struct pagesrv *s)
{
	struct io_uring_sqe *sqe;
	struct pagesrv_conn *c, *next;

	s->stopping = true;
	for (c = s->conns; c; c = next) {
		next = c->next;
		pagesrv_conn_close(c);
	}
	if (!s->accept_busy && !s->timer_busy && !s->tick_busy)
		return;
	sqe = pagesrv_sqe_get(s);
	if (!sqe)
		return;
	/* everything still armed: accept, timers, connections */
	io_uring_prep_cancel64(sqe, 0, IORING_ASYNC_CANCEL_ANY);
	io_uring_sqe_set_data(sqe, &s->stop_req);
	s->stop_busy = true;
}

static void pagesrv_on_cqe(struct pagesrv *s, struct io_uring_cqe *cqe)
{
	struct pagesrv_req *r = io_uring_cqe_get_data(cqe);
	struct pagesrv_conn *c = r->conn;

	switch (r->op) {
	case PAGESRV_OP_ACCEPT:
		s->accept_busy = false;
		pagesrv_on_accept(s, cqe->res);
		return;
	case PAGESRV_OP_WAKE:
		s->wake_busy = false;
		if (cqe->res < 0 && cqe->res != -EINTR && cqe->res != -EAGAIN) {
			pagesrv_stop(s);
			return;
		}
		if (atomic_load(&s->stop_asked)) {
			pagesrv_stop(s);
			return;
		}
		pagesrv_coh_members_run(s);
		pagesrv_wake_arm(s);
		return;
	case PAGESRV_OP_TIMER:
		s->timer_busy = false;
		pagesrv_accept_arm(s);
		return;
	case PAGESRV_OP_STOP:
		s->stop_busy = false;
		return;
	case PAGESRV_OP_TICK:
		s->tick_busy = false;
		if (!s->stopping)
			pagesrv_on_tick(s);
		return;
	case PAGESRV_OP_RECV:
		c->recv_busy = false;
		if (!c->closing && c->hs)
			pagesrv_conn_hs_on_recv(c, cqe->res);
		else if (!c->closing)
			pagesrv_conn_on_recv(c, cqe->res);
		/* the RECV that may have written the pool is over */
		if (c->fenced)
			pagesrv_waiters_wake(s);
		break;
	case PAGESRV_OP_SEND:
		c->send_busy = false;
		if (!c->closing && c->hs)
			pagesrv_conn_hs_on_send(c, cqe->res);
		else if (!c->closing)
			pagesrv_conn_on_send(c, cqe->res);
		break;
	case PAGESRV_OP_CANCEL:
		break;
	}
	/* the CQE's count kept @c alive through the handler */
	pagesrv_conn_put(c);
}

static bool pagesrv_is_done(const struct pagesrv *s)
{
	return s->stopping && !s->accept_busy && !s->wake_busy &&
	       !s->timer_busy && !s->stop_busy && !s->tick_busy && !s->conns;
}

static void *pagesrv_thread(void *arg)
{
	struct pagesrv *s = arg;
	struct io_uring_cqe *cqe;
	unsigned int head, seen;
	int ret;

	pagesrv_wake_arm(s);
	pagesrv_accept_arm(s);
	while (!pagesrv_is_done(s)) {
		ret = io_uring_submit_and_wait(&s->ring, 1);
		if (ret < 0 && ret != -EINTR && ret != -EBUSY &&
		    ret != -EAGAIN) {
			log_errno(
				ret,
				"io_uring_submit_and_wait, server on %s stops",
				s->addr);
			break;
		}
		seen = 0;
		io_uring_for_each_cqe(&s->ring, head, cqe) {
			seen++;
			pagesrv_on_cqe(s, cqe);
		}
		io_uring_cq_advance(&s->ring, seen);
	}
	return NULL;
}

int pagesrv_create(const struct pagesrv_cfg *cfg, struct pagesrv **out)
{
	struct pagesrv *s;
	int ret;

	if (!cfg || !cfg->listen_addr || (!cfg->pool && cfg->pool_size))
		return -EINVAL;
	if (!cfg->insecure &&
	    (!cfg->self_name || !cfg->self_name[0] || !cfg->pair_key ||
	     strlen(cfg->self_name) >= AUTH_NAME_MAX))
		return -EINVAL;
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->lfd = -1;
	s->efd = -1;
	s->pool = cfg->pool;
	s->pool_size = cfg->pool_size;
	s->fence = cfg->fence;
	s->n_wgens = (cfg->pool_size + MSG_POOL_SEG - 1) / MSG_POOL_SEG;
	s->wgens = calloc(s->n_wgens ? s->n_wgens : 1, sizeof(*s->wgens));
	s->floors = pggrant_floors_new(cfg->pool_size);
	if (!s->wgens || !s->floors ||
	    (cfg->coherent &&
	     pagesrv_coh_init(s, &(const struct pagesrv_coh_up){
					 .close = pagesrv_conn_close,
					 .kick = pagesrv_conn_send_kick,
				 }))) {
		pagesrv_coh_fini(s);
		pggrant_floors_free(s->floors);
		free(s->wgens);
		free(s);
		return -ENOMEM;
	}
	s->instance = cfg->instance;
	/* sessions only: an insecure server checks nothing */
	s->grant_on = cfg->grant_check && !cfg->insecure;
	memcpy(s->gown.key, cfg->grant_key, sizeof(s->gown.key));
	memcpy(s->gown.kid, cfg->grant_kid, sizeof(s->gown.kid));
	s->gown.instance = cfg->instance;
	s->gown.pool_size = cfg->pool_size;
	s->max_conns =
		cfg->max_conns ? cfg->max_conns : PAGESRV_MAX_CONNS_DEFAULT;
	s->insecure = cfg->insecure;
	s->refusals.burst = 1;
	s->sessions.burst = PAGESRV_SESSION_LOG_BURST;
	if (!s->insecure)
		snprintf(s->self_name, sizeof(s->self_name), "%s",
			 cfg->self_name);
	s->auth_flags = cfg->auth_flags;
	s->pair_key = cfg->pair_key;
	s->pair_key_arg = cfg->pair_key_arg;
	s->hs_timeout_ms =
		cfg->hs_timeout_ms ? cfg->hs_timeout_ms : PAGESRV_HS_TIMEOUT_MS;
	/* at most a quarter of the connections: the rest stay for peers */
	s->hs_max = s->max_conns / 4 ? s->max_conns / 4 : 1;
	if (s->hs_max > PAGESRV_HS_MAX)
		s->hs_max = PAGESRV_HS_MAX;
	s->hs_per_src =
		s->hs_max < PAGESRV_HS_PER_SRC ? s->hs_max : PAGESRV_HS_PER_SRC;
	/* the rest: a new connection finds room for its handshake */
	s->sess_max = s->max_conns > s->hs_max ? s->max_conns - s->hs_max : 1;
	s->peer_max = cfg->peer_max ? cfg->peer_max : PAGESRV_PEER_MAX_DEFAULT;
	s->peer_keep = cfg->peer_keep ? cfg->peer_keep : PAGESRV_PEER_KEEP;
	s->idle_ms = cfg->idle_ms ? cfg->idle_ms : PAGESRV_IDLE_MS_DEFAULT;
	s->limits.burst = 1;
	s->accept_req = (struct pagesrv_req){ PAGESRV_OP_ACCEPT, NULL };
	s->wake_req = (struct pagesrv_req){ PAGESRV_OP_WAKE, NULL };
	s->timer_req = (struct pagesrv_req){ PAGESRV_OP_TIMER, NULL };
	s->stop_req = (struct pagesrv_req){ PAGESRV_OP_STOP, NULL };
	s->tick_req = (struct pagesrv_req){ PAGESRV_OP_TICK, NULL };
	bufpool_init(&s->bufs, PAGESRV_BUF_CACHE);
	/* A port held for a moment is waited for, a little: the listening
	 * socket of the instance before this one is released only when the
	 * kernel tears down that process's io_uring (an accept was posted on
	 * it), which may be after the process is gone. */
	for (int i = 0; (ret = net_listen(cfg->listen_addr, PAGESRV_BACKLOG,
					  &s->lfd)) == -EADDRINUSE &&
			i < PAGESRV_LISTEN_TRIES;
	     i++) {
		if (!i)
			log_warn("%s is in use; trying again for %u ms",
				 cfg->listen_addr,
				 PAGESRV_LISTEN_TRIES * PAGESRV_LISTEN_GAP_MS);
		usleep(PAGESRV_LISTEN_GAP_MS * 1000);
	}
	if (ret) {
		net_listen_fail_log(ret, "the page server", cfg->listen_addr);
		goto err;
	}
	ret = net_local_addr(s->lfd, s->addr, sizeof(s->addr));
	if (ret)
		goto err;
	s->efd = eventfd(0, EFD_CLOEXEC);
	if (s->efd < 0) {
		ret = -errno;
		goto err;
	}
	ret = io_uring_queue_init(PAGESRV_RING_ENTRIES, &s->ring, 0);
	if (ret) {
		log_errno(ret, "io_uring_queue_init");
		goto err;
	}
	s->ring_ok = true;
	*out = s;
	return 0;
err:
	pagesrv_destroy(s);
	return ret;
}

int pagesrv_addr(const struct pagesrv *s, char *buf, size_t len)
{
	size_t n = strlen(s->addr);

	if (n >= len)
		return -ENOSPC;
	memcpy(buf, s->addr, n + 1);
	return 0;
}

int pagesrv_start(struct pagesrv *s)
{
	int ret;

	if (s->started)
		return -EALREADY;
	/* written before the thread exists: it shares a word with its flags */
	s->started = true;
	ret = pthread_create(&s->thread, NULL, pagesrv_thread, s);
	if (ret) {
		s->started = false;
		return -ret;
	}
	pthread_setname_np(s->thread, "fp-pagesrv");
	log_info("serving pages on %s (%s%s)", s->addr,
		 s->insecure ? "insecure: no authentication"
		 : s->auth_flags & AUTH_F_ENCRYPT
			 ? "peers authenticated, page data encrypted"
			 : "peers authenticated, page data authenticated",
		 s->grant_on   ? ", grants checked"
		 : s->insecure ? ""
			       : ", grants not checked");
	return 0;
}

void pagesrv_destroy(struct pagesrv *s)
{
	struct pagesrv_conn *c;
	uint64_t one = 1;

	if (!s)
		return;
	if (s->started) {
		atomic_store(&s->stop_asked, 1);
		if (write(s->efd, &one, sizeof(one)) != sizeof(one))
			log_errno(errno, "waking the server thread");
		pthread_join(s->thread, NULL);
	}
	/* tearing the ring down ends whatever a failed thread left armed */
	if (s->ring_ok)
		io_uring_queue_exit(&s->ring);
	while ((c = s->conns)) {
		c->inflight = 0;
		pagesrv_conn_free(c);
	}
	pagesrv_coh_fini(s);
	bufpool_fini(&s->bufs);
	free(s->wgens);
	pggrant_floors_free(s->floors);
	/* the grant key lived here */
	explicit_bzero(&s->gown, sizeof(s->gown));
	if (s->efd >= 0)
		close(s->efd);
	if (s->lfd >= 0)
		close(s->lfd);
	free(s);
}

void pagesrv_stats(const struct pagesrv *s, struct pagesrv_stats *st)
{
	st->conns = atomic_load_explicit(&s->st_conns, memory_order_relaxed);
	st->reads = atomic_load_explicit(&s->st_reads, memory_order_relaxed);
	st->bytes = atomic_load_explicit(&s->st_bytes, memory_order_relaxed);
	st->writes = atomic_load_explicit(&s->st_writes, memory_order_relaxed);
	st->write_bytes =
		atomic_load_explicit(&s->st_write_bytes, memory_order_relaxed);
	st->errors = atomic_load_explicit(&s->st_errors, memory_order_relaxed);
	st->dropped =
		atomic_load_explicit(&s->st_dropped, memory_order_relaxed);
	st->stalls = atomic_load_explicit(&s->st_stalls, memory_order_relaxed);
	st->auth_failures = atomic_load_explicit(&s->st_auth_failures,
						 memory_order_relaxed);
	st->hs_timeouts =
		atomic_load_explicit(&s->st_hs_timeouts, memory_order_relaxed);
	st->refused =
		atomic_load_explicit(&s->st_refused, memory_order_relaxed);
	st->grant_refusals = atomic_load_explicit(&s->st_grant_refusals,
						  memory_order_relaxed);
	for (int i = 0; i < PAGESRV_CLOSED_N; i++)
		st->closed[i] = atomic_load_explicit(&s->st_closed[i],
						     memory_order_relaxed);
	st->coh_msgs =
		atomic_load_explicit(&s->st_coh_msgs, memory_order_relaxed);
	st->coh_grants =
		atomic_load_explicit(&s->st_coh_grants, memory_order_relaxed);
	st->coh_invs =
		atomic_load_explicit(&s->st_coh_invs, memory_order_relaxed);
	st->coh_recalls =
		atomic_load_explicit(&s->st_coh_recalls, memory_order_relaxed);
	st->coh_resets =
		atomic_load_explicit(&s->st_coh_resets, memory_order_relaxed);
	st->coh_mig =
		atomic_load_explicit(&s->st_coh_mig, memory_order_relaxed);
	st->coh_stale =
		atomic_load_explicit(&s->st_coh_stale, memory_order_relaxed);
}

const char *pagesrv_closed_name(enum pagesrv_closed why)
{
	static const char *const names[PAGESRV_CLOSED_N] = {
		[PAGESRV_CLOSED_PEER_CAP] = "peer_cap",
		[PAGESRV_CLOSED_TOTAL_CAP] = "total_cap",
		[PAGESRV_CLOSED_IDLE] = "idle",
	};

	return (unsigned int)why < PAGESRV_CLOSED_N ? names[why] : "?";
}
