// SPDX-License-Identifier: MIT
/*
 * A control connection's buffers: output queued (sealed frames) and
 * flushed, the epoll interest its state needs, closing it; rate-limited
 * logging of what peers do wrong.
 */
#define LOG_PREFIX "coord: "
#include "server_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "actl.h"
#include "evl.h"
#include "log.h"
#include "msg.h"

void server_log_limited(struct log_limit *l, const char *fmt, ...)
{
	uint64_t dropped;
	char line[512];
	va_list ap;

	if (!log_limit_take(l, evl_now_ms(), &dropped))
		return;
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	if (dropped)
		log_warn("%s (and %llu more not logged)", line,
			 (unsigned long long)dropped);
	else
		log_warn("%s", line);
}

uint32_t server_frame_len(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 |
	       (uint32_t)p[2] << 8 | p[3];
}

void server_conn_close(struct server_conn *cn)
{
	struct server *s = cn->srv;
	uint8_t sink[4096];

	evl_del(s->evl, cn->fd);
	/* Unread input would turn our FIN into a RST: drain a little. */
	for (int i = 0; i < 16; i++)
		if (read(cn->fd, sink, sizeof(sink)) <= 0)
			break;
	close(cn->fd);
	if (cn->prev)
		cn->prev->next = cn->next;
	else
		s->conns = cn->next;
	if (cn->next)
		cn->next->prev = cn->prev;
	s->n_conns--;
	log_dbg("peer %s: closed", cn->peer);
	if (cn->hs)
		s->n_hs--;
	auth_hs_free(cn->hs);
	auth_sess_free(cn->sess);
	free(cn->rbuf);
	free(cn->wbuf);
	free(cn);
}

size_t server_conn_pending(const struct server_conn *cn)
{
	return cn->wlen - cn->wpos;
}

/*
 * Watches what the state needs: input unless paused or done; output if
 * queued, or if paused at all: a paused connection whose output is already
 * gone then wakes up at once to serve the frames it still holds (one batch
 * per wakeup, so a flood cannot starve the others). Returns 0 or -errno.
 */
int server_conn_watch(struct server_conn *cn)
{
	uint32_t ev = 0;
	int ret;

	if (!cn->paused && !cn->eof)
		ev |= EPOLLIN;
	if (server_conn_pending(cn) || cn->paused)
		ev |= EPOLLOUT;
	if (ev == cn->events)
		return 0;
	ret = evl_mod(cn->srv->evl, cn->fd, ev);
	if (ret)
		return ret;
	cn->events = ev;
	return 0;
}

int server_conn_queue_raw(struct server_conn *cn, const uint8_t *p, size_t len)
{
	size_t need;

	if (cn->wpos && cn->wpos == cn->wlen)
		cn->wpos = cn->wlen = 0;
	need = cn->wlen + len;
	if (need > cn->wcap) {
		size_t cap = cn->wcap ? cn->wcap : 4096;
		uint8_t *nb;

		if (cn->wpos) {
			/* Reclaim what was sent before growing. */
			memmove(cn->wbuf, cn->wbuf + cn->wpos,
				cn->wlen - cn->wpos);
			cn->wlen -= cn->wpos;
			need -= cn->wpos;
			cn->wpos = 0;
		}
		while (cap < need)
			cap *= 2;
		if (cap > cn->wcap) {
			nb = realloc(cn->wbuf, cap);
			if (!nb)
				return -ENOMEM;
			cn->wbuf = nb;
			cn->wcap = cap;
		}
	}
	memcpy(cn->wbuf + cn->wlen, p, len);
	cn->wlen += len;
	return 0;
}

/* Queues @m as one frame, sealed on an authenticated connection. Returns
 * 0 or -errno (encoding, memory, -E2BIG past FRAME_MAX). */
int server_conn_queue(struct server_conn *cn, const struct msg *m)
{
	uint8_t *frame;
	size_t flen;
	int ret;

	ret = actl_encode_frame(cn->sess, m, &frame, &flen);
	if (ret)
		return ret == -EMSGSIZE ? -E2BIG : ret;
	ret = server_conn_queue_raw(cn, frame, flen);
	free(frame);
	return ret;
}

/* Queues @rep, or an ERROR in its place if it cannot be encoded. */
int server_conn_reply(struct server_conn *cn, const struct msg *rep)
{
	struct msg err;
	int ret;

	ret = server_conn_queue(cn, rep);
	if (ret == -ENOMEM || !ret)
		return ret;
	log_warn("peer %s: cannot encode the %s reply: %s", cn->peer,
		 msg_type_name(rep->type), log_strerror(ret));
	msg_error(&err, ret, "the %s reply cannot be sent: %s",
		  msg_type_name(rep->type), log_strerror(ret));
	return server_conn_queue(cn, &err);
}

/* Writes queued output. Returns 0 (all or some sent) or -errno. */
int server_conn_flush(struct server_conn *cn)
{
	while (server_conn_pending(cn)) {
		ssize_t n = send(cn->fd, cn->wbuf + cn->wpos,
				 server_conn_pending(cn), MSG_NOSIGNAL);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				return 0;
			return -errno;
		}
		cn->wpos += (size_t)n;
	}
	cn->wpos = cn->wlen = 0;
	return 0;
}
