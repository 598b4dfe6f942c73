/* SPDX-License-Identifier: MIT */
/*
 * Blocking control-message I/O over a stream socket: one frame per message,
 * optional file descriptors as SCM_RIGHTS on the frame's first byte. Used by
 * the CLI, the agent's control thread and libfarpage.
 */
#ifndef COMMON_CTL_H
#define COMMON_CTL_H

#include "msg.h"

#define CTL_FDS_MAX 64 /* MSG_POOL_SEGS_MAX */

/*
 * Encodes and sends @m, with @n_fds descriptors attached (0..CTL_FDS_MAX).
 * Returns 0, -EPIPE/-ECONNRESET if the peer is gone, or -errno.
 */
int ctl_send(int fd, const struct msg *m, const int *fds, int n_fds);

/*
 * ctl_send() that gives up after @timeout_ms (-1 = no limit) on a
 * non-blocking socket whose peer does not take the bytes: -ETIMEDOUT, and
 * the stream may end mid-frame (close it).
 */
int ctl_send_timed(int fd, const struct msg *m, const int *fds, int n_fds,
		   int timeout_ms);

/*
 * Receives one message within @timeout_ms (-1 = no limit). Descriptors that
 * arrive with it are stored in fds[] (up to *n_fds, the rest closed) and
 * *n_fds is set to how many; pass fds = NULL to close any that arrive.
 * Returns 0, -ETIMEDOUT, -ECONNRESET on EOF, -EBADMSG for a bad frame or
 * message, or -errno. On failure @m holds nothing to free.
 */
int ctl_recv(int fd, struct msg *m, int *fds, int *n_fds, int timeout_ms);

/*
 * The same for a payload already encoded (and perhaps sealed): one frame
 * of @len bytes (1..FRAME_MAX, else -EMSGSIZE); and one frame received
 * into a malloc()ed *@buf the caller frees. Same returns otherwise.
 */
int ctl_send_raw(int fd, const uint8_t *buf, size_t len, const int *fds,
		 int n_fds);
int ctl_recv_raw(int fd, uint8_t **buf, size_t *len, int *fds, int *n_fds,
		 int timeout_ms);

/*
 * Sends @req and receives the reply into @rep. If the reply is MSG_T_ERROR
 * returns -rep->err (rep keeps the text for the caller to print). Returns 0
 * or -errno otherwise.
 */
int ctl_call(int fd, const struct msg *req, struct msg *rep, int timeout_ms);

/* Connects to TCP @addr, calls, closes. Same returns as ctl_call(). */
int ctl_call_addr(const char *addr, const struct msg *req, struct msg *rep,
		  int timeout_ms);

#endif
