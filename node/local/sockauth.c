// SPDX-License-Identifier: MIT
/*
 * Who may use the agent's Unix socket: --allow-uid/--allow-gid resolved
 * at start, and a connected client's credentials checked against them.
 */
#include "sockauth.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util.h"

#ifndef SO_PEERGROUPS
#define SO_PEERGROUPS 59 /* 4.13+; older kernels: ENOPROTOOPT */
#endif

/* getpwnam_r()/getgrnam_r() buffers grow up to this (big groups). */
#define SOCKAUTH_NSS_BUF_MAX (1u << 20)
/* /proc/PID/status read up to this (65536 groups fit). */
#define SOCKAUTH_STATUS_MAX (1u << 20)

/* A decimal id; (uid_t)-1 is "no id" to the kernel, never a user. */
static int sockauth_id_parse(const char *s, uint32_t *out)
{
	uint64_t v;
	int ret;

	ret = util_u64_parse(s, &v);
	if (ret == -ERANGE || (!ret && v >= UINT32_MAX))
		return -ERANGE;
	if (!ret)
		*out = (uint32_t)v;
	return ret;
}

/* User (@group 0) or group @s, a name or a number, to its id. */
static int sockauth_find(const char *s, int group, uint32_t *out)
{
	long hint =
		sysconf(group ? _SC_GETGR_R_SIZE_MAX : _SC_GETPW_R_SIZE_MAX);
	size_t len = hint > 0 && hint < (long)SOCKAUTH_NSS_BUF_MAX
			     ? (size_t)hint
			     : 1024;
	struct passwd pw, *pwp = NULL;
	struct group gr, *grp = NULL;
	char *buf;
	int ret;

	if (!*s)
		return -EINVAL;
	ret = sockauth_id_parse(s, out);
	if (ret != -EINVAL)
		return ret ? -EINVAL : 0;
	for (;;) {
		buf = malloc(len);
		if (!buf)
			return -ENOMEM;
		if (group)
			ret = getgrnam_r(s, &gr, buf, len, &grp);
		else
			ret = getpwnam_r(s, &pw, buf, len, &pwp);
		if (ret != ERANGE || len >= SOCKAUTH_NSS_BUF_MAX)
			break;
		free(buf);
		len *= 2;
	}
	if (grp)
		*out = gr.gr_gid;
	else if (pwp)
		*out = pw.pw_uid;
	free(buf);
	if (grp || pwp)
		return 0;
	/* Not found: 0 with no entry, or (some NSS modules) one of these. */
	if (!ret || ret == ENOENT || ret == ESRCH)
		return -ENOENT;
	return -ret;
}

int sockauth_user_find(const char *s, uid_t *out)
{
	uint32_t id;
	int ret = sockauth_find(s, 0, &id);

	if (!ret)
		*out = id;
	return ret;
}

int sockauth_group_find(const char *s, gid_t *out)
{
	uint32_t id;
	int ret = sockauth_find(s, 1, &id);

	if (!ret)
		*out = id;
	return ret;
}

int sockauth_uid_is_allowed(const struct sockauth *sa, uid_t uid)
{
	for (size_t i = 0; i < sa->n_uids; i++)
		if (sa->uids[i] == uid)
			return 1;
	return 0;
}

int sockauth_gid_is_allowed(const struct sockauth *sa, gid_t gid)
{
	for (size_t i = 0; i < sa->n_gids; i++)
		if (sa->gids[i] == gid)
			return 1;
	return 0;
}

int sockauth_uid_allow(struct sockauth *sa, uid_t uid)
{
	if (sockauth_uid_is_allowed(sa, uid))
		return 0;
	if (sa->n_uids == SOCKAUTH_IDS_MAX)
		return -E2BIG;
	sa->uids[sa->n_uids++] = uid;
	return 0;
}

int sockauth_gid_allow(struct sockauth *sa, gid_t gid)
{
	if (sockauth_gid_is_allowed(sa, gid))
		return 0;
	if (sa->n_gids == SOCKAUTH_IDS_MAX)
		return -E2BIG;
	sa->gids[sa->n_gids++] = gid;
	return 0;
}

/*
 * The text after "@key:" of the line of @s that starts with it, or NULL.
 * A line cut short (no newline) is not taken: its last number may be too.
 */
static const char *sockauth_status_field(const char *s, const char *key)
{
	size_t n = strlen(key);

	while (s && *s) {
		if (!strncmp(s, key, n) && s[n] == ':')
			return strchr(s, '\n') ? s + n + 1 : NULL;
		s = strchr(s, '\n');
		if (s)
			s++;
	}
	return NULL;
}

/* The next number of a status field; -1 at the end of its line. */
static int sockauth_status_num(const char **p, uint32_t *out)
{
	const char *s = *p;
	uint64_t v = 0;

	while (*s == ' ' || *s == '\t')
		s++;
	if (*s < '0' || *s > '9')
		return -1;
	for (; *s >= '0' && *s <= '9'; s++) {
		v = v * 10 + (uint64_t)(*s - '0');
		if (v > UINT32_MAX)
			return -1;
	}
	*p = s;
	*out = (uint32_t)v;
	return 0;
}

int sockauth_status_is_member(const struct sockauth *sa, const char *status,
			      uid_t uid)
{
	const char *p = sockauth_status_field(status, "Uid");
	uint32_t id;

	/* Uid: real, effective, saved, fs. SO_PEERCRED has the effective
	 * one: another uid is another process (the pid reused) or one
	 * that changed since; neither is taken for the client. */
	if (!p || sockauth_status_num(&p, &id) ||
	    sockauth_status_num(&p, &id) || id != uid)
		return 0;
	p = sockauth_status_field(status, "Groups");
	if (!p)
		return 0;
	while (!sockauth_status_num(&p, &id))
		if (sockauth_gid_is_allowed(sa, id))
			return 1;
	return 0;
}

/* Before SO_PEERGROUPS: the groups the client's pid has now. */
static int sockauth_proc_is_member(const struct sockauth *sa,
				   const struct ucred *cr)
{
	char path[32], *buf = NULL, *nb;
	size_t cap = 0, len = 0;
	int fd, hit = 0;
	ssize_t n;

	if (cr->pid <= 0)
		return 0;
	snprintf(path, sizeof(path), "/proc/%d/status", (int)cr->pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	for (;;) {
		if (len + 1 >= cap) {
			if (cap >= SOCKAUTH_STATUS_MAX)
				break;
			cap = cap ? cap * 2 : 4096;
			nb = realloc(buf, cap);
			if (!nb)
				break;
			buf = nb;
		}
		n = read(fd, buf + len, cap - len - 1);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		len += (size_t)n;
	}
	close(fd);
	if (buf) {
		buf[len] = '\0';
		hit = sockauth_status_is_member(sa, buf, cr->uid);
	}
	free(buf);
	return hit;
}

/* One of the client's supplementary groups is listed. */
static int sockauth_peer_groups_match(const struct sockauth *sa, int fd,
				      const struct ucred *cr)
{
	gid_t small[64], *g = small;
	socklen_t len = sizeof(small);
	int hit = 0;

	if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, g, &len) < 0) {
		if (errno == ENOPROTOOPT)
			return sockauth_proc_is_member(sa, cr);
		/* ERANGE: @len says how much they take. */
		if (errno != ERANGE || len <= sizeof(small))
			return 0;
		g = malloc(len);
		if (!g)
			return 0;
		if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, g, &len) < 0)
			len = 0;
	}
	for (size_t i = 0; i < len / sizeof(*g) && !hit; i++)
		hit = sockauth_gid_is_allowed(sa, g[i]);
	if (g != small)
		free(g);
	return hit;
}

int sockauth_peer_check(const struct sockauth *sa, int fd, struct ucred *cr)
{
	socklen_t len = sizeof(*cr);

	cr->pid = 0;
	cr->uid = (uid_t)-1;
	cr->gid = (gid_t)-1;
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, cr, &len) < 0)
		return -errno;
	if (len != sizeof(*cr))
		return -EPROTO;
	if (sockauth_uid_is_allowed(sa, cr->uid) ||
	    sockauth_gid_is_allowed(sa, cr->gid))
		return 1;
	return sa->n_gids ? sockauth_peer_groups_match(sa, fd, cr) : 0;
}
