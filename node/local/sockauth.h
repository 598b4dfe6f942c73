/* SPDX-License-Identifier: MIT */
/*
 * Who may use the agent's Unix socket: the users and groups of --allow-uid
 * and --allow-gid, checked against each client's credentials as it connects.
 */
#ifndef NODE_SOCKAUTH_H
#define NODE_SOCKAUTH_H

#include <stddef.h>
#include <sys/socket.h>
#include <sys/types.h>

/* Entries of each list. */
#define SOCKAUTH_IDS_MAX 64
/* The group allowed by default, and given the socket, where it exists. */
#define SOCKAUTH_GROUP "farpage"

struct sockauth {
	uid_t uids[SOCKAUTH_IDS_MAX];
	gid_t gids[SOCKAUTH_IDS_MAX];
	size_t n_uids;
	size_t n_gids;
};

/*
 * Resolves @s, a user name or a decimal uid, to @out (getpwnam_r; a number
 * need not name a user). Returns 0, -ENOENT if there is no such user,
 * -EINVAL if @s is empty or an out-of-range number, or -errno of the
 * lookup.
 */
int sockauth_user_find(const char *s, uid_t *out);
/* The same for a group name or a decimal gid (getgrnam_r). */
int sockauth_group_find(const char *s, gid_t *out);

/* Adds @uid (@gid) to the list; one already there is not added again.
 * Returns 0 or -E2BIG when the list is full. */
int sockauth_uid_allow(struct sockauth *sa, uid_t uid);
int sockauth_gid_allow(struct sockauth *sa, gid_t gid);

/* True if @uid (@gid) is in the list. */
int sockauth_uid_is_allowed(const struct sockauth *sa, uid_t uid);
int sockauth_gid_is_allowed(const struct sockauth *sa, gid_t gid);

/*
 * True if @status, the text of /proc/PID/status, is of a process with
 * effective uid @uid that has one of the listed groups among its
 * supplementary groups ("Groups:" line). A text without those lines is not.
 */
int sockauth_status_is_member(const struct sockauth *sa, const char *status,
			      uid_t uid);

/*
 * Checks the client at the other end of @fd, a connected Unix stream
 * socket: its uid (SO_PEERCRED, as it connected) listed, or its primary
 * group, or one of its supplementary groups (SO_PEERGROUPS; before Linux
 * 4.13 the "Groups:" of /proc/PID/status, where a process gone by then
 * is no member). @cr gets its credentials. Returns 1 if allowed, 0 if
 * not, or -errno if its credentials cannot be read (not allowed either).
 */
int sockauth_peer_check(const struct sockauth *sa, int fd, struct ucred *cr);

#endif
