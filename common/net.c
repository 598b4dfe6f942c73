// SPDX-License-Identifier: MIT
/*
 * Socket helpers: "host:port" parsing, TCP listen/connect over IPv4 and IPv6
 * (connect with a timeout), Unix stream sockets. Every fd is close-on-exec.
 */
#define LOG_PREFIX "net: "
#include "net.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include "log.h"

int net_addr_split(const char *addr, char *host, size_t host_len, char *port,
		   size_t port_len)
{
	const char *h, *p, *colon;
	size_t hn, pn;

	if (addr[0] == '[') {
		const char *end = strchr(addr, ']');

		if (!end || end[1] != ':')
			return -EINVAL;
		h = addr + 1;
		hn = (size_t)(end - h);
		p = end + 2;
		if (!hn)
			return -EINVAL;
	} else {
		colon = strrchr(addr, ':');
		/* An unbracketed IPv6 address is ambiguous. */
		if (!colon || memchr(addr, ':', (size_t)(colon - addr)))
			return -EINVAL;
		h = addr;
		hn = (size_t)(colon - addr);
		p = colon + 1;
	}
	pn = strlen(p);
	if (!pn || pn > 5 || strspn(p, "0123456789") != pn || atoi(p) > 65535)
		return -EINVAL;
	if (hn >= host_len || pn >= port_len)
		return -EINVAL;
	memcpy(host, h, hn);
	host[hn] = '\0';
	memcpy(port, p, pn + 1);
	return 0;
}

static int net_gai_errno(int rc)
{
	switch (rc) {
	case EAI_SYSTEM:
		return errno ? -errno : -EIO;
	case EAI_MEMORY:
		return -ENOMEM;
	case EAI_AGAIN:
		return -EAGAIN;
	case EAI_NONAME:
#ifdef EAI_NODATA
	case EAI_NODATA:
#endif
#ifdef EAI_ADDRFAMILY
	case EAI_ADDRFAMILY:
#endif
		return -EADDRNOTAVAIL;
	default:
		return -EINVAL;
	}
}

static int net_resolve_flags(const char *addr, bool passive, int flags,
			     struct addrinfo **out)
{
	struct addrinfo hints = {
		.ai_family = AF_UNSPEC,
		.ai_socktype = SOCK_STREAM,
		.ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : 0) | flags,
	};
	char host[NI_MAXHOST], port[8];
	const char *node;
	int rc;

	if (net_addr_split(addr, host, sizeof(host), port, sizeof(port)))
		return -EINVAL;
	/* "" and "*" listen on every address. */
	node = (!host[0] || !strcmp(host, "*")) ? NULL : host;
	if (!node && !passive)
		node = "localhost";
	rc = getaddrinfo(node, port, &hints, out);
	if (rc)
		return net_gai_errno(rc);
	return 0;
}

static int net_resolve(const char *addr, bool passive, struct addrinfo **out)
{
	return net_resolve_flags(addr, passive, 0, out);
}

int net_addr_resolve(const char *addr, struct sockaddr_storage *ss,
		     uint32_t *len, int numeric)
{
	struct addrinfo *ai;
	int ret;

	ret = net_resolve_flags(addr, false, numeric ? AI_NUMERICHOST : 0, &ai);
	if (ret)
		return ret;
	if (ai->ai_addrlen > sizeof(*ss)) {
		freeaddrinfo(ai);
		return -EINVAL;
	}
	memcpy(ss, ai->ai_addr, ai->ai_addrlen);
	*len = ai->ai_addrlen;
	freeaddrinfo(ai);
	return 0;
}

int net_addr_unresolved(const char *addr, char *why, size_t why_len)
{
	struct addrinfo hints = {
		.ai_family = AF_UNSPEC,
		.ai_socktype = SOCK_STREAM,
		.ai_flags = AI_NUMERICSERV,
	};
	char host[NI_MAXHOST], port[8];
	struct addrinfo *ai;
	int rc;

	if (net_addr_split(addr, host, sizeof(host), port, sizeof(port)) ||
	    !host[0] || !strcmp(host, "*"))
		return 0;
	rc = getaddrinfo(host, port, &hints, &ai);
	if (!rc) {
		freeaddrinfo(ai);
		return 0;
	}
	if (rc == EAI_NONAME)
		snprintf(why, why_len, "unknown host '%s'", host);
	else
		snprintf(why, why_len, "cannot resolve host '%s': %s", host,
			 gai_strerror(rc));
	return 1;
}

int net_set_nodelay(int fd)
{
	int one = 1;

	if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) < 0)
		return -errno;
	return 0;
}

int net_set_nonblock(int fd, int on)
{
	int fl = fcntl(fd, F_GETFL);

	if (fl < 0)
		return -errno;
	fl = on ? (fl | O_NONBLOCK) : (fl & ~O_NONBLOCK);
	if (fcntl(fd, F_SETFL, fl) < 0)
		return -errno;
	return 0;
}

int net_listen(const char *addr, int backlog, int *out_fd)
{
	struct addrinfo *ai, *a;
	int fd = -1, one = 1;
	int ret;

	ret = net_resolve(addr, true, &ai);
	if (ret)
		return ret;
	ret = -EADDRNOTAVAIL;
	for (a = ai; a; a = a->ai_next) {
		fd = socket(a->ai_family,
			    SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		if (fd < 0) {
			ret = -errno;
			continue;
		}
		if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one,
			       sizeof(one)) < 0 ||
		    bind(fd, a->ai_addr, a->ai_addrlen) < 0 ||
		    listen(fd, backlog) < 0) {
			ret = -errno;
			close(fd);
			fd = -1;
			continue;
		}
		break;
	}
	freeaddrinfo(ai);
	if (fd < 0)
		return ret;
	*out_fd = fd;
	return 0;
}

void net_listen_fail_log(int err, const char *what, const char *addr)
{
	char host[256], port[16];
	unsigned int lo = 0, hi = 0;
	unsigned long p;
	FILE *f;

	log_errno(err, "%s cannot listen on %s", what, addr);
	if (err != -EADDRINUSE ||
	    net_addr_split(addr, host, sizeof(host), port, sizeof(port)))
		return;
	p = strtoul(port, NULL, 10);
	f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "re");
	if (f) {
		if (fscanf(f, "%u %u", &lo, &hi) != 2)
			lo = hi = 0;
		fclose(f);
	}
	if (lo && p >= lo && p <= hi)
		log_err("port %lu is in the kernel's ephemeral range %u-%u "
			"(net.ipv4.ip_local_port_range), where outgoing "
			"connections take their source ports: one may hold it "
			"now. Choose a port below %u, or reserve it "
			"(sysctl net.ipv4.ip_local_reserved_ports=%lu); "
			"'ss -tanp sport = :%lu' shows who has it",
			p, lo, hi, lo, p, p);
	else
		log_err("another socket holds port %lu on %s ('ss -tanp sport "
			"= :%lu' shows which): stop it or choose another port",
			p, host, p);
}

static int64_t net_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Waits for a non-blocking connect on @fd; @deadline < 0 = no limit. */
static int net_connect_wait(int fd, int64_t deadline)
{
	struct pollfd pfd = { .fd = fd, .events = POLLOUT };
	socklen_t sl = sizeof(int);
	int err = 0, rc, wait;

	for (;;) {
		wait = -1;
		if (deadline >= 0) {
			int64_t left = deadline - net_now_ms();

			if (left <= 0)
				return -ETIMEDOUT;
			wait = left > INT_MAX ? INT_MAX : (int)left;
		}
		rc = poll(&pfd, 1, wait);
		if (rc < 0 && errno == EINTR)
			continue;
		if (rc < 0)
			return -errno;
		if (rc > 0)
			break;
	}
	if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &sl) < 0)
		return -errno;
	return err ? -err : 0;
}

int net_connect(const char *addr, int timeout_ms, int *out_fd)
{
	int64_t deadline = timeout_ms < 0 ? -1 : net_now_ms() + timeout_ms;
	struct addrinfo *ai, *a;
	int fd = -1;
	int ret;

	ret = net_resolve(addr, false, &ai);
	if (ret)
		return ret;
	ret = -EADDRNOTAVAIL;
	for (a = ai; a; a = a->ai_next) {
		fd = socket(a->ai_family,
			    SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		if (fd < 0) {
			ret = -errno;
			continue;
		}
		if (connect(fd, a->ai_addr, a->ai_addrlen) == 0)
			ret = 0;
		else if (errno == EINPROGRESS || errno == EINTR)
			ret = net_connect_wait(fd, deadline);
		else
			ret = -errno;
		if (!ret)
			ret = net_set_nonblock(fd, 0);
		if (!ret)
			ret = net_set_nodelay(fd);
		if (!ret)
			break;
		close(fd);
		fd = -1;
		if (ret == -ETIMEDOUT)
			break;
	}
	freeaddrinfo(ai);
	if (fd < 0)
		return ret;
	*out_fd = fd;
	return 0;
}

int net_local_addr(int fd, char *buf, size_t len)
{
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	char host[NI_MAXHOST], port[NI_MAXSERV];
	int rc, n;

	if (getsockname(fd, (struct sockaddr *)&ss, &sl) < 0)
		return -errno;
	if (ss.ss_family != AF_INET && ss.ss_family != AF_INET6)
		return -EAFNOSUPPORT;
	rc = getnameinfo((struct sockaddr *)&ss, sl, host, sizeof(host), port,
			 sizeof(port), NI_NUMERICHOST | NI_NUMERICSERV);
	if (rc)
		return net_gai_errno(rc);
	if (ss.ss_family == AF_INET6)
		n = snprintf(buf, len, "[%s]:%s", host, port);
	else
		n = snprintf(buf, len, "%s:%s", host, port);
	if (n < 0 || (size_t)n >= len)
		return -ENOSPC;
	return 0;
}

static int net_unix_addr(const char *path, struct sockaddr_un *sun)
{
	size_t n = strlen(path);

	memset(sun, 0, sizeof(*sun));
	sun->sun_family = AF_UNIX;
	if (!n)
		return -EINVAL;
	if (n >= sizeof(sun->sun_path))
		return -ENAMETOOLONG;
	memcpy(sun->sun_path, path, n + 1);
	return 0;
}

/* mkdir -p of the directory holding @path. */
static int net_parent_mkdir(const char *path)
{
	char dir[sizeof(((struct sockaddr_un *)0)->sun_path)];
	char *slash;

	if (strlen(path) >= sizeof(dir))
		return -ENAMETOOLONG;
	strcpy(dir, path);
	slash = strrchr(dir, '/');
	if (!slash || slash == dir)
		return 0;
	*slash = '\0';
	for (char *p = dir + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(dir, 0755) < 0 && errno != EEXIST)
			return -errno;
		*p = '/';
	}
	if (mkdir(dir, 0755) < 0 && errno != EEXIST)
		return -errno;
	return 0;
}

/* Removes a socket file nobody listens on; a live one is -EADDRINUSE. */
static int net_unix_stale_remove(const char *path,
				 const struct sockaddr_un *sun)
{
	struct stat st;
	int fd, rc;

	if (lstat(path, &st) < 0)
		return errno == ENOENT ? 0 : -errno;
	if (!S_ISSOCK(st.st_mode))
		return -EEXIST;
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	rc = connect(fd, (const struct sockaddr *)sun, sizeof(*sun));
	close(fd);
	if (rc == 0)
		return -EADDRINUSE;
	if (unlink(path) < 0 && errno != ENOENT)
		return -errno;
	return 0;
}

int net_unix_listen(const char *path, int backlog, int *out_fd)
{
	struct sockaddr_un sun;
	int fd, ret;

	ret = net_unix_addr(path, &sun);
	if (ret)
		return ret;
	ret = net_parent_mkdir(path);
	if (ret)
		return ret;
	ret = net_unix_stale_remove(path, &sun);
	if (ret)
		return ret;
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (bind(fd, (struct sockaddr *)&sun, sizeof(sun)) < 0 ||
	    listen(fd, backlog) < 0) {
		ret = -errno;
		goto out_close;
	}
	*out_fd = fd;
	return 0;
out_close:
	close(fd);
	return ret;
}

int net_unix_connect(const char *path, int *out_fd)
{
	struct sockaddr_un sun;
	int fd, ret;

	ret = net_unix_addr(path, &sun);
	if (ret)
		return ret;
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (connect(fd, (struct sockaddr *)&sun, sizeof(sun)) < 0) {
		ret = -errno;
		/* An interrupted connect goes on in the background. */
		if (ret == -EINTR)
			ret = net_connect_wait(fd, -1);
		if (ret)
			goto out_close;
	}
	*out_fd = fd;
	return 0;
out_close:
	close(fd);
	return ret;
}
