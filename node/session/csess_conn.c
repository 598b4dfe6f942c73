// SPDX-License-Identifier: MIT
/* The coordinator session's connection: connect, call, reconnect once. */
#define LOG_PREFIX "agent: "
#include "csess_int.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <unistd.h>

#include "actl.h"
#include "log.h"
#include "net.h"
#include "node_env.h"

int csess_is_stopping(struct csess *s)
{
	return atomic_load(&s->stopping);
}

void csess_efd_signal(int efd)
{
	uint64_t one = 1;
	ssize_t r = write(efd, &one, sizeof(one));

	(void)r;
}

void csess_efd_drain(int efd)
{
	uint64_t v;
	ssize_t r = read(efd, &v, sizeof(v));

	(void)r;
}

/* ---- calls ---- */

/* True if @addr's host is a name that does not exist (not "no answer"). */
int csess_name_unknown(const char *addr)
{
	struct sockaddr_storage ss;
	uint32_t len;

	return net_addr_resolve(addr, &ss, &len, 0) == -EADDRNOTAVAIL;
}

/* The coordinator address in use: the one that answered last. */
const char *csess_coord_addr(const struct csess *s)
{
	return s->env->coords->addr[s->coord_cur];
}

/* The address whose failure down_err tells. */
const char *csess_down_addr(const struct csess *s)
{
	return s->env->coords->addr[s->down_addr];
}

/* Says why @addr failed us: @why (a refusal's or the coordinator's
 * text), else what @err (-errno) means. */
static void csess_down_log(const char *addr, int err, const char *why)
{
	if (why[0])
		log_err("coordinator %s: %s", addr, why);
	else if (csess_name_unknown(addr))
		log_err("coordinator %s: no such host name", addr);
	else if (err == -EAGAIN)
		log_err("coordinator %s: the host name cannot be looked up now "
			"(no DNS answer); trying again",
			addr);
	else
		log_errno(err, "coordinator %s unreachable", addr);
}

static int csess_connect(struct csess *s)
{
	const char *addr = csess_coord_addr(s);
	char why[200];
	int ret;

	if (s->coord.fd >= 0)
		return 0;
	ret = actl_connect(addr, s->env->cred, AUTH_ROLE_NODE, s->env->name,
			   CSESS_TIMEOUT_MS, &s->coord, why, sizeof(why));
	if (ret) {
		/* said by csess_call(), once the list is tried */
		s->down_err = ret;
		s->down_addr = s->coord_cur;
		snprintf(s->down_why, sizeof(s->down_why), "%s", why);
		return -EHOSTUNREACH;
	}
	return 0;
}

/* What to tell of a failed call: the connect's reason, not just
 * "unreachable". */
const char *csess_strerror(const struct csess *s, int ret)
{
	/* none is the leader: what the last one said ("not the leader (no
	 * leader yet)"), not strerror(EREMCHG) */
	if (ret == -EHOSTUNREACH && s->down_err == -COORD_ERR_NOT_LEADER &&
	    s->down_why[0])
		return s->down_why;
	return log_strerror(ret == -EHOSTUNREACH && s->down_err ? s->down_err
								: ret);
}

/* A failure of the connection, not an answer of the coordinator. */
int csess_err_is_link(int ret)
{
	return ret == -EHOSTUNREACH || ret == -ECONNRESET || ret == -EPIPE ||
	       ret == -ETIMEDOUT || ret == -EBADMSG || ret == -ECONNREFUSED;
}

int csess_err_is_not_leader(int ret, const struct msg *rep)
{
	return ret == -COORD_ERR_NOT_LEADER && rep->type == MSG_T_ERROR;
}

/* One call to the address in use: today's connection, or a new one;
 * once more on a new one if the old was lost. */
static int csess_call_one(struct csess *s, const struct msg *req,
			  struct msg *rep)
{
	int ret = 0;

	for (int attempt = 0; attempt < 2; attempt++) {
		ret = csess_connect(s);
		if (ret)
			break;
		ret = actl_call(&s->coord, req, rep, CSESS_TIMEOUT_MS);
		if (ret != -ECONNRESET && ret != -EPIPE && ret != -ETIMEDOUT &&
		    ret != -EBADMSG)
			break;
		/* A late answer would be taken for the next call's: this
		 * connection is done. */
		msg_fini(rep);
		actl_close(&s->coord);
		/* Lost (coordinator restarted): once more. Slow: not again,
		 * the session must get on with heartbeats and lookups. */
		if (ret == -ETIMEDOUT)
			break;
	}
	return ret;
}

/* Notes why address @i of the round failed (@ret, @rep), to be said if
 * every one fails. */
static void csess_try_note(struct csess *s, uint32_t i, int ret,
			   const struct msg *rep)
{
	struct csess_try *t = &s->tries[i];

	t->addr = s->coord_cur;
	t->err = ret == -EHOSTUNREACH ? s->down_err : ret;
	snprintf(t->why, sizeof(t->why), "%s",
		 ret == -EHOSTUNREACH		     ? s->down_why
		 : csess_err_is_not_leader(ret, rep) ? rep->text
						     : "");
}

/* The call goes to the next address of the list. */
static void csess_move(struct csess *s, int ret, struct msg *rep)
{
	const struct addrlist *l = s->env->coords;
	uint32_t next = addrlist_next(l, s->coord_cur);

	if (!s->down_logged && csess_err_is_not_leader(ret, rep))
		log_info("coordinator %s: not the leader; trying %s",
			 l->addr[s->coord_cur], l->addr[next]);
	else if (!s->down_logged)
		log_info("coordinator %s unreachable; trying %s",
			 l->addr[s->coord_cur], l->addr[next]);
	msg_fini(rep);
	msg_init(rep, MSG_T_NONE);
	actl_close(&s->coord);
	s->coord_cur = next;
}

/*
 * Every address of the round (@n tried, from @first) failed: each is said
 * once (until one answers again), and the call starts from @first next
 * time. One that is not the leader (no leader yet: an election) counts as
 * unreachable: the caller tries again later, as for one that is down.
 */
static int csess_round_failed(struct csess *s, uint32_t first, uint32_t n,
			      int ret, struct msg *rep)
{
	const struct addrlist *l = s->env->coords;

	/* One address: what was always said, only of a failed connect. */
	if (!s->down_logged && (l->n > 1 || ret == -EHOSTUNREACH ||
				csess_err_is_not_leader(ret, rep))) {
		for (uint32_t i = 0; i < n; i++)
			csess_down_log(l->addr[s->tries[i].addr],
				       s->tries[i].err, s->tries[i].why);
		s->down_logged = 1;
	}
	/* a connection to one that is not the leader is not kept: the next
	 * call connects again and says when one answers */
	actl_close(&s->coord);
	if (csess_err_is_not_leader(ret, rep)) {
		s->down_err = ret;
		s->down_addr = s->coord_cur;
		snprintf(s->down_why, sizeof(s->down_why), "%s", rep->text);
		msg_fini(rep);
		msg_init(rep, MSG_T_NONE);
		ret = -EHOSTUNREACH;
	}
	s->coord_cur = first;
	return ret;
}

/*
 * The call goes to the address that answered last; one that fails on the
 * connection or answers that it is not the leader passes it to the next,
 * round the list once (csess.h).
 */
int csess_call(struct csess *s, const struct msg *req, struct msg *rep)
{
	const struct addrlist *l = s->env->coords;
	uint32_t first = s->coord_cur, i;
	int ret = 0;

	/* Initialised on every path: callers msg_fini() it whatever
	 * happened (an agent once freed a stack address here). */
	msg_init(rep, MSG_T_NONE);
	for (i = 0; i < l->n; i++) {
		ret = csess_call_one(s, req, rep);
		if (!csess_err_is_link(ret) &&
		    !csess_err_is_not_leader(ret, rep)) {
			/* an answer: not when a connection is made, which a
			 * coordinator that is not the leader also takes */
			if (s->down_logged)
				log_info("coordinator %s reachable again",
					 csess_coord_addr(s));
			s->down_logged = 0;
			break;
		}
		csess_try_note(s, i, ret, rep);
		if (i + 1 == l->n) {
			ret = csess_round_failed(s, first, l->n, ret, rep);
			break;
		}
		csess_move(s, ret, rep);
	}
	s->coord_ok = !(ret && rep->type != MSG_T_ERROR);
	if (!s->coord_ok)
		s->last_err = ret;
	return ret;
}

/* As csess_call(), and an answer of another type than @want is -EBADMSG. */
int csess_call_want(struct csess *s, const struct msg *req, struct msg *rep,
		    enum msg_type want)
{
	int ret = csess_call(s, req, rep);

	if (!ret && rep->type != want)
		ret = -EBADMSG;
	return ret;
}
