// SPDX-License-Identifier: MIT
/*
 * TCP transport: the opener thread: reply records of more than a page opened off the fault loop.
 */
#define LOG_PREFIX "xport_tcp: "
#include "xport_tcp_int.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <liburing.h>

#include "auth.h"
#include "log.h"
#include "wire.h"

/* ---- the opener thread ---- */

static void *xport_tcp_opener_main(void *arg)
{
	struct xport_tcp_opener *w = arg;
	struct xport_tcp_job *j;
	uint64_t one = 1;
	bool wake;

	pthread_mutex_lock(&w->mu);
	for (;;) {
		while (!w->q_head && !w->stop)
			pthread_cond_wait(&w->work, &w->mu);
		if (!w->q_head)
			break;
		j = w->q_head;
		w->q_head = j->next;
		if (!w->q_head)
			w->q_tail = &w->q_head;
		w->busy = true;
		pthread_mutex_unlock(&w->mu);
		j->status =
			auth_opener_open(j->o, j->seq, j->aad, sizeof(j->aad),
					 j->buf, j->len, j->tag);
		pthread_mutex_lock(&w->mu);
		w->busy = false;
		j->next = NULL;
		wake = !w->d_head;
		*w->d_tail = j;
		w->d_tail = &j->next;
		if (!w->q_head)
			pthread_cond_broadcast(&w->idle);
		if (wake) {
			/* a wakeup the loop does not need is harmless */
			pthread_mutex_unlock(&w->mu);
			if (write(w->efd, &one, sizeof(one)) < 0 &&
			    errno != EAGAIN)
				log_errno(-errno, "opener: eventfd");
			pthread_mutex_lock(&w->mu);
		}
	}
	pthread_mutex_unlock(&w->mu);
	return NULL;
}

/* Keeps a READ posted on the opener's eventfd. */
void xport_tcp_opener_arm(struct xport_tcp *x)
{
	struct xport_tcp_opener *w = x->opener;
	struct io_uring_sqe *sqe;

	if (!w || w->posted || x->closing)
		return;
	sqe = xport_tcp_sqe_get(x);
	if (!sqe)
		return; /* tick() tries again */
	io_uring_prep_read(sqe, w->efd, &w->efd_val, sizeof(w->efd_val), 0);
	io_uring_sqe_set_data(sqe, &w->req);
	w->posted = true;
}

/*
 * The opener, with FARPAGE_TCP_OPENER=on in the environment: off by
 * default, because on the machine measured it does not pay (two CPUs
 * shared by both hosts and the guest; docs/bench.md, "Opening on another
 * thread"). Without it records are opened inline, on the fault loop.
 * Returns 0 or -errno.
 */
int xport_tcp_opener_start(struct xport_tcp *x)
{
	const char *env = getenv("FARPAGE_TCP_OPENER");
	struct xport_tcp_opener *w;
	int ret;

	if (x->insecure || !env || strcmp(env, "on"))
		return 0;
	w = calloc(1, sizeof(*w));
	if (!w)
		return -ENOMEM;
	w->q_tail = &w->q_head;
	w->d_tail = &w->d_head;
	w->b_tail = &w->b_head;
	w->req = (struct xport_tcp_req){ { REQ_XPORT },
					 XPORT_TCP_OP_OPENED,
					 NULL };
	w->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (w->efd < 0) {
		ret = -errno;
		free(w);
		return ret;
	}
	pthread_mutex_init(&w->mu, NULL);
	pthread_cond_init(&w->work, NULL);
	pthread_cond_init(&w->idle, NULL);
	ret = -pthread_create(&w->thread, NULL, xport_tcp_opener_main, w);
	if (ret) {
		close(w->efd);
		free(w);
		return ret;
	}
	pthread_setname_np(w->thread, "fp-opener");
	x->opener = w;
	xport_tcp_opener_arm(x);
	return 0;
}

/* Queues the jobs parse made. */
void xport_tcp_opener_push(struct xport_tcp *x)
{
	struct xport_tcp_opener *w = x->opener;

	if (!w || !w->b_head)
		return;
	pthread_mutex_lock(&w->mu);
	*w->q_tail = w->b_head;
	w->q_tail = w->b_tail;
	pthread_cond_signal(&w->work);
	pthread_mutex_unlock(&w->mu);
	w->b_head = NULL;
	w->b_tail = &w->b_head;
}

/* Every job made so far opened: nothing writes into a dst after this. */
void xport_tcp_opener_sync(struct xport_tcp *x)
{
	struct xport_tcp_opener *w = x->opener;

	xport_tcp_opener_push(x);
	pthread_mutex_lock(&w->mu);
	while (w->q_head || w->busy)
		pthread_cond_wait(&w->idle, &w->mu);
	pthread_mutex_unlock(&w->mu);
}

/* After xport_tcp_opener_sync() and with nothing posted on the eventfd. */
void xport_tcp_opener_stop(struct xport_tcp *x)
{
	struct xport_tcp_opener *w = x->opener;

	if (!w)
		return;
	pthread_mutex_lock(&w->mu);
	w->stop = true;
	pthread_cond_signal(&w->work);
	pthread_mutex_unlock(&w->mu);
	pthread_join(w->thread, NULL);
	pthread_cond_destroy(&w->idle);
	pthread_cond_destroy(&w->work);
	pthread_mutex_destroy(&w->mu);
	close(w->efd);
	free(w);
	x->opener = NULL;
}

/* Read @idx's record is in its dst, @tag behind it: a job for the opener
 * (queued once parse ends). */
void xport_tcp_job_make(struct xport_tcp_conn *c, struct xport_tcp_peer *p,
			uint32_t idx, const uint8_t *tag)
{
	struct xport_tcp_opener *w = c->x->opener;
	struct xport_slot *s = &p->slots.v[idx];
	struct xport_tcp_job *j = &c->jobs[idx];

	j->next = NULL;
	j->conn = c;
	j->o = c->opener;
	j->buf = s->buf;
	j->len = s->len;
	j->idx = idx;
	j->gen = s->gen;
	j->status = 0;
	j->seq = c->rseq;
	memcpy(j->aad, c->rhdr, sizeof(j->aad));
	memcpy(j->tag, tag, sizeof(j->tag));
	s->held = true;
	c->opening++;
	c->inflight++;
	*w->b_tail = j;
	w->b_tail = &j->next;
}
