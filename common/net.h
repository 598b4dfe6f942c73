/* SPDX-License-Identifier: MIT */
/* Socket helpers: "host:port" parsing, listen/connect (TCP and Unix). */
#ifndef COMMON_NET_H
#define COMMON_NET_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

/*
 * Splits "host:port" or "[v6addr]:port" into its parts. Returns 0 or
 * -EINVAL if the form is wrong or a part does not fit.
 */
int net_addr_split(const char *addr, char *host, size_t host_len, char *port,
		   size_t port_len);

/*
 * Listens on TCP "host:port" (port 0 = any free port), SO_REUSEADDR,
 * non-blocking, close-on-exec. Returns 0 and the fd in *out_fd, or -errno
 * (-EINVAL for a malformed address).
 */
int net_listen(const char *addr, int backlog, int *out_fd);

/*
 * Logs that @what cannot listen on @addr (net_listen()'s -errno @err). For
 * -EADDRINUSE it says what may hold the port: another listener, or, for a
 * port in the kernel's ephemeral range (net.ipv4.ip_local_port_range), an
 * outgoing connection that took it as its source port, and what to do.
 */
void net_listen_fail_log(int err, const char *what, const char *addr);

/*
 * Connects to TCP "host:port" within @timeout_ms. The returned fd is
 * blocking, close-on-exec, TCP_NODELAY. Returns 0, -ETIMEDOUT or -errno.
 */
int net_connect(const char *addr, int timeout_ms, int *out_fd);

/*
 * Why "host:port" @addr cannot be resolved, when that is why a connection
 * to it failed: "unknown host 'H'" or "cannot resolve host 'H': <resolver's
 * reason>" into @why. Returns 1 if so, 0 if it resolves (or is not
 * HOST:PORT).
 */
int net_addr_unresolved(const char *addr, char *why, size_t why_len);

/* Writes the bound local address of @fd as "host:port" into buf. */
int net_local_addr(int fd, char *buf, size_t len);

/* Listens on a Unix stream socket at @path (an old socket file is
 * replaced), non-blocking, close-on-exec. Returns 0 or -errno. */
int net_unix_listen(const char *path, int backlog, int *out_fd);

/* Connects to a Unix stream socket; blocking, close-on-exec. */
int net_unix_connect(const char *path, int *out_fd);

/*
 * Resolves TCP "host:port" to its first socket address. A name lookup may
 * block for seconds: never on a thread that must not wait, unless
 * @numeric, which takes only an address (never blocks; a name gives
 * -EADDRNOTAVAIL). Returns 0, or -EINVAL, -EADDRNOTAVAIL (no such name),
 * -EAGAIN (try later) or -errno.
 */
int net_addr_resolve(const char *addr, struct sockaddr_storage *ss,
		     uint32_t *len, int numeric);
/* Sets TCP_NODELAY; returns 0 or -errno. */
int net_set_nodelay(int fd);

/* Sets or clears O_NONBLOCK; returns 0 or -errno. */
int net_set_nonblock(int fd, int on);

#endif
